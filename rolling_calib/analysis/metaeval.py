"""Meta-evaluation of a store: which metric variant ranks its pipelines like the ground truth.

Every complete run is scored with each variant of :data:`VARIANTS` (one read of its Parquet
units; the validation-source variants only when every run of the store kept its validation
predictions), then :func:`rolling_calib.core.metaeval.meta_evaluate` gives per compared pair
(the store's ``compare:`` pairs, else all pairs) the pairwise accuracy of each variant, with the
direction by the mean QL over all seeds, and the split-seed agreement.

Example
-------
>>> result = metaeval_store(example_store, n_boot=100, n_splits=20)
>>> result.summary["metric"].tolist()[:3]
['ql', 'ql_scored', 'cql']
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from rolling_calib.analysis.scoring import (
    MissingValidationError,
    RunData,
    read_run_data,
    selected_pipelines,
)
from rolling_calib.core.metaeval import MetaEvaluation, meta_evaluate
from rolling_calib.core.schedule import CoverageError
from rolling_calib.execution import store as st

__all__ = ["VARIANTS", "StoreMetaEvaluation", "metaeval_store"]

#: Metric variants: name -> (result attribute, rolling_calibrated_quadratic_loss options). ``ql`` is the ground truth.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "ql": ("ql_all", {}),
    "ql_scored": ("ql_scored", {}),
    "cql": ("cql", {}),
    "cql_per_instrument": ("cql", {"bias": "per_instrument"}),
    "cql_week": ("cql", {"period": "week"}),
    "cql_20d": ("cql", {"period": 20}),
    "cql_validation": ("cql", {"source": "validation"}),
    "cql_validation_per_instrument": ("cql", {"source": "validation", "bias": "per_instrument"}),
}
DESCRIPTIONS = {
    "ql": "QL, all periods (ground truth)",
    "ql_scored": "QL, periods 2..K",
    "cql": "CQL month, pooled, previous period",
    "cql_per_instrument": "CQL month, per instrument, previous",
    "cql_week": "CQL week, pooled, previous",
    "cql_20d": "CQL 20 trading days, pooled, previous",
    "cql_validation": "CQL month, pooled, window's validation",
    "cql_validation_per_instrument": "CQL month, per instrument, validation",
}


@dataclass
class StoreMetaEvaluation:
    """:class:`~rolling_calib.core.metaeval.MetaEvaluation` of a store, with what was left out."""

    store: Path
    result: MetaEvaluation
    runs: pd.DataFrame
    incomplete: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def summary(self) -> pd.DataFrame:
        return self.result.summary

    @property
    def pairs(self) -> pd.DataFrame:
        return self.result.pairs

    def to_dict(self) -> dict[str, Any]:
        return {"store": str(self.store), **self.result.to_dict(), "incomplete_runs": list(self.incomplete),
                "notes": list(self.notes)}

    def format(self) -> str:
        r = self.result
        lines = [f"Meta-evaluation of {self.store}: direction by mean {r.ground_truth.upper()} over all seeds; "
                 f"{r.confidence:.0%} bootstrap intervals ({r.n_boot} resamples, seed {r.seed}); split-seed check: "
                 f"{r.n_splits} random half-splits (seed {r.split_seed})"]
        head = f"{'metric':<32}{'variant':<42}{'mean acc':>9}{'pairs':>6}{'split tau':>10}{'split conc':>11}"
        lines += ["", head, "-" * len(head)]
        for row in r.summary.itertuples(index=False):
            lines.append(f"{row.metric:<32}{DESCRIPTIONS.get(row.metric, ''):<42}{_num(row.mean_accuracy, 9, 3)}"
                         f"{row.n_pairs:>6}{_num(row.split_tau, 10, 3)}{_num(row.split_concordance, 11, 3)}")
        lines.append("mean acc: pairwise accuracy averaged over the pairs; split tau / conc: Kendall tau over all "
                     "pipelines / fraction of the pairs ordered alike, ranking by the metric on half of the seeds "
                     "vs by QL on the other half (averaged over the splits).")
        for (better, worse), group in r.pairs.groupby(["better", "worse"], sort=False):
            gap = float(group["gap"].iloc[0])
            lines += ["", f"{better} better than {worse} (QL gap {gap:.4g}{', tie' if group['tie'].iloc[0] else ''})"]
            for row in group.itertuples(index=False):
                lines.append(f"  {row.metric:<32}{row.accuracy:.3f} [{row.ci_low:.3f}, {row.ci_high:.3f}]")
        if self.incomplete:
            lines += ["", f"Left out {len(self.incomplete)} incomplete run(s):"] + [f"  {s}" for s in self.incomplete]
        lines += [""] + [f"Note: {n}" for n in self.notes] if self.notes else []
        return "\n".join(lines)


def _num(value: float, width: int, digits: int) -> str:
    return f"{'n/a':>{width}}" if value is None or not math.isfinite(value) else f"{value:>{width}.{digits}f}"


def metaeval_store(
    store: str | Path,
    *,
    pipelines: Sequence[str] | None = None,
    variants: Sequence[str] | None = None,
    n_boot: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    n_splits: int = 200,
    split_seed: int = 0,
    progress: bool = False,
) -> StoreMetaEvaluation:
    """Score every complete run with each variant and meta-evaluate them (see the module docstring).

    Raises
    ------
    ValueError
        Unknown pipelines or variants, or fewer than 2 pipelines with 2 complete runs.
    """
    store = Path(store)
    manifest = st.read_manifest(store)
    names = selected_pipelines(store, manifest, pipelines)
    chosen = _chosen_variants(variants)
    from tqdm.auto import tqdm

    data, chosen, incomplete, notes = _read_runs(store, manifest, names, chosen)
    rows = [_variant_row(name, seed_, run, chosen) for (name, seed_), run in
            tqdm(data.items(), desc="scoring variants", unit="run", disable=not progress, leave=False)]
    table = pd.DataFrame(rows, columns=["pipeline", "seed", *chosen])
    scores, pairs = _scores_and_pairs(store, manifest, names, table, chosen)
    result = meta_evaluate(scores, pairs, metrics=chosen, ground_truth="ql", n_boot=n_boot, confidence=confidence,
                           seed=seed, n_splits=n_splits, split_seed=split_seed)
    return StoreMetaEvaluation(store=store, result=result, runs=table, incomplete=incomplete, notes=notes)


def _chosen_variants(variants: Sequence[str] | None) -> list[str]:
    """The variants to score (default: all), refusing unknown names; ``ql`` (the ground truth) first if left out."""
    chosen = list(VARIANTS) if variants is None else list(variants)
    bad = [v for v in chosen if v not in VARIANTS]
    if bad:
        raise ValueError(f"variants: unknown {', '.join(bad)} (have: {', '.join(VARIANTS)})")
    if "ql" not in chosen:
        chosen.insert(0, "ql")  # the ground truth
    return chosen


def _uses_validation(variant: str) -> bool:
    return VARIANTS[variant][1].get("source") == "validation"


def _read_runs(store: Path, manifest: dict, names: Sequence[str], chosen: list[str]
               ) -> tuple[dict[tuple[str, int], RunData], list[str], list[str], list[str]]:
    """Read every complete run once: ``(runs, variants, incomplete runs, notes)``.

    The validation predictions are read when a chosen variant needs them; at the first run without
    them (an older store) the validation-source variants are left out, with a note, and no run keeps them.
    """
    wants_valid = any(_uses_validation(v) for v in chosen)
    runs = [(n, int(s)) for n in names for s in manifest["pipelines"][n].get("seeds", [])]
    data: dict[tuple[str, int], RunData] = {}
    incomplete: list[str] = []
    notes: list[str] = []
    for name, seed_ in runs:
        try:
            try:
                data[(name, seed_)] = read_run_data(store, name, seed_, manifest=manifest, validation=wants_valid)
            except MissingValidationError as exc:  # an older store: the other variants only
                notes.append(f"validation-source variants left out: {exc}")
                chosen = [v for v in chosen if not _uses_validation(v)]
                wants_valid = False
                for run in data.values():
                    run.valid = None
                data[(name, seed_)] = read_run_data(store, name, seed_, manifest=manifest)
        except (CoverageError, st.CorruptStoreFileError):
            raise
        except ValueError as exc:
            incomplete.append(f"{name}/seed{seed_}: {exc}")
    return data, chosen, incomplete, notes


def _variant_row(name: str, seed_: int, run: RunData, chosen: Sequence[str]) -> dict[str, Any]:
    """One run's score under each chosen variant (variants with the same options share one computation)."""
    row: dict[str, Any] = {"pipeline": name, "seed": seed_}
    cache: dict[tuple, Any] = {}
    for v in chosen:
        attr, options = VARIANTS[v]
        key = tuple(sorted(options.items(), key=str))
        if key not in cache:
            cache[key] = run.rolling_cql(**options)
        row[v] = float(getattr(cache[key], attr))
    return row


def _scores_and_pairs(store: Path, manifest: dict, names: Sequence[str], table: pd.DataFrame, chosen: Sequence[str]
                      ) -> tuple[dict[str, dict[str, Any]], list[tuple[str, str]]]:
    """Per-seed scores of the pipelines with at least 2 complete runs, and the pairs to compare among them."""
    counts = table.groupby("pipeline", sort=False).size()
    kept = [n for n in names if counts.get(n, 0) >= 2]
    if len(kept) < 2:
        raise ValueError(f"{store}: expected at least 2 pipelines with 2 complete runs to meta-evaluate, found "
                         f"{len(kept)} ({', '.join(f'{n}: {counts.get(n, 0)}' for n in names)})")
    scores = {n: {v: table.loc[table["pipeline"] == n].sort_values("seed")[v].to_numpy() for v in chosen} for n in kept}
    recorded = [tuple(p) for p in manifest.get("compare", []) if p[0] in kept and p[1] in kept]
    return scores, recorded or list(itertools.combinations(kept, 2))
