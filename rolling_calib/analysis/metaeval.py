"""Meta-evaluation of a store: which metric variant ranks its pipelines like the ground truth.

Every complete run is scored with each variant of :data:`VARIANTS` (one read of its Parquet
units; the validation-source variants only when every run of the store kept its validation
predictions), then :func:`rolling_calib.core.metaeval.meta_evaluate` gives per compared pair
(the store's ``compare:`` pairs, else all pairs) the pairwise accuracy of each variant against a
held-out truth (the direction of QL on the other half of the seeds: the primary figure), the
in-sample accuracy (direction by the mean QL over all seeds) and the split-seed agreement. Each CQL variant is a
base :class:`~rolling_calib.core.calibration.Calibration` (the paper's rule unless another is
given) with the one change its name says; every run is scored against one label kind (default
the store's ``rolling.label``).

Example
-------
>>> result = metaeval_store(example_store, resampling=Resampling(n_boot=100), n_splits=20)
>>> result.summary["metric"].tolist()[:3]
['ql', 'ql_scored', 'cql']
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from rolling_calib.analysis.integrity import store_notes
from rolling_calib.analysis.scoring import rolling_cql
from rolling_calib.core.calibration import Calibration
from rolling_calib.core.tables import format_table
from rolling_calib.core.question import DEFAULT_QUESTION, QUESTION, Question
from rolling_calib.core.resampling import DEFAULT, RESAMPLING, Resampling
from rolling_calib.core.validation import validate_params
from rolling_calib.core.metaeval import MetaEvaluation, meta_evaluate
from rolling_calib.core.schedule import CoverageError
from rolling_calib.execution import store as st
from rolling_calib.execution.reader import MissingLabelError, MissingValidationError, RunData, read_run

__all__ = ["VARIANTS", "StoreMetaEvaluation", "metaeval_store", "variant_calibration"]

#: Metric variants: name -> (result attribute, change to the base Calibration). ``ql`` is the ground truth.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "ql": ("ql_all", {}),
    "ql_scored": ("ql_scored", {}),
    "cql": ("cql", {}),
    "cql_per_instrument": ("cql", {"bias": "per_instrument"}),
    "cql_week": ("cql", {"period": "week"}),
    "cql_20d": ("cql", {"period": 20}),
    "cql_validation": ("cql", {"source": "validation", "bias_window": None}),
    "cql_validation_per_instrument": ("cql", {"source": "validation", "bias_window": None, "bias": "per_instrument"}),
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
    calibration: Calibration = field(default_factory=Calibration)   # the base rule of the CQL variants
    label: str = "raw"   # the label kind every run was scored against

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
                 f"{r.n_splits} random half-splits (seed {r.split_seed}); {self.label} label"]
        if self.calibration != Calibration():
            lines.append(f"CQL variants change the base rule: {self.calibration.describe()}")
        rows = [[row.metric, DESCRIPTIONS.get(row.metric, ""), row.mean_split_accuracy, row.mean_accuracy,
                 row.n_pairs, row.split_tau, row.split_concordance] for row in r.summary.itertuples(index=False)]
        three = lambda x: f"{x:.3f}"  # noqa: E731
        lines += ["", format_table(rows, ["metric", "variant", "held-out acc", "in-sample acc", "pairs", "split tau",
                                          "split conc"], formats=[str, str, three, three, str, three, three])]
        lines.append("held-out acc (primary): pairwise accuracy of the metric on half of the seeds against the "
                     "direction of QL on the other half, averaged over the splits and the pairs; in-sample acc: against "
                     "the direction of QL over all seeds (the same seeds the metric is scored on, which flatters it); "
                     "split tau / conc: Kendall tau over all pipelines / fraction of the pairs ordered alike.")
        for (better, worse), group in r.pairs.groupby(["better", "worse"], sort=False):
            gap = float(group["gap"].iloc[0])
            lines += ["", f"{better} better than {worse} by QL over all seeds (gap {gap:.4g}"
                          f"{', tie' if group['tie'].iloc[0] else ''})"]
            rows = [[row.metric, f"{row.split_accuracy:.3f} [{row.split_low:.3f}, {row.split_high:.3f}]",
                     f"{row.accuracy:.3f} [{row.ci_low:.3f}, {row.ci_high:.3f}]"] for row in group.itertuples(index=False)]
            lines.append(format_table(rows, ["metric", "held-out acc [2.5%, 97.5% over splits]",
                                             "in-sample acc [bootstrap CI]"]))
        if self.incomplete:
            lines += ["", f"Left out {len(self.incomplete)} incomplete run(s):"] + [f"  {s}" for s in self.incomplete]
        lines += [""] + [f"Note: {n}" for n in self.notes] if self.notes else []
        return "\n".join(lines)


def variant_calibration(variant: str, base: Calibration) -> Calibration:
    """The rule of CQL variant ``variant``: ``base`` with the variant's change.

    >>> variant_calibration("cql_week", Calibration()).describe()
    'weekly periods, one pooled bias from the previous week'
    """
    return base.replace(**VARIANTS[variant][1])


@validate_params({"question": QUESTION, "resampling": RESAMPLING})
def metaeval_store(
    store: st.Store | str | Path,
    *,
    calibration: Calibration | None = None,
    label: str | None = None,
    pipelines: Sequence[str] | None = None,
    variants: Sequence[str] | None = None,
    question: Question = DEFAULT_QUESTION,
    resampling: Resampling = DEFAULT,
    n_splits: int = 200,
    split_seed: int = 0,
    progress: bool = False,
) -> StoreMetaEvaluation:
    """Score every complete run with each variant and meta-evaluate them (see the module docstring).

    ``calibration`` is the base rule the CQL variants change (default: the paper's, whatever the
    store recorded, so that the variants mean what their names say); ``label`` the label kind
    (default: the store's ``rolling.label``); ``question``: its ``confidence`` is the level of the
    pairwise accuracies' intervals (no verdict is given here, so its target is not used);
    ``resampling``: their bootstrap over seeds.

    Raises
    ------
    ValueError
        Unknown pipelines or variants, a label kind the units do not hold, or fewer than 2
        pipelines with 2 complete runs.
    """
    store = st.Store.of(store)
    base = Calibration() if calibration is None else calibration
    names = store.select(pipelines)
    kind = store.label_kind(names, label)
    chosen = _chosen_variants(variants)
    from tqdm.auto import tqdm

    data, chosen, incomplete, notes = _read_runs(store, names, chosen, kind=kind, base=base)
    notes[:0] = store_notes(store, names)   # data changed after training, unchecked units
    rows = [_variant_row(name, seed_, run, chosen, base) for (name, seed_), run in
            tqdm(data.items(), desc="scoring variants", unit="run", disable=not progress, leave=False)]
    table = pd.DataFrame(rows, columns=["pipeline", "seed", *chosen])
    scores, pairs = _scores_and_pairs(store, names, table, chosen)
    result = meta_evaluate(scores, pairs, metrics=chosen, ground_truth="ql", question=question, resampling=resampling,
                           n_splits=n_splits,
                           split_seed=split_seed)
    return StoreMetaEvaluation(store=store.root, result=result, runs=table, incomplete=incomplete, notes=notes,
                               calibration=base, label=kind)


def _chosen_variants(variants: Sequence[str] | None) -> list[str]:
    """The variants to score (default: all), refusing unknown names; ``ql`` (the ground truth) first if left out."""
    chosen = list(VARIANTS) if variants is None else list(variants)
    bad = [v for v in chosen if v not in VARIANTS]
    if bad:
        raise ValueError(f"variants: unknown {', '.join(bad)} (have: {', '.join(VARIANTS)})")
    if "ql" not in chosen:
        chosen.insert(0, "ql")  # the ground truth
    return chosen


def _uses_validation(variant: str, base: Calibration) -> bool:
    return VARIANTS[variant][0] == "cql" and variant_calibration(variant, base).source == "validation"


def _read_runs(store: st.Store, names: Sequence[str], chosen: list[str], *, kind: str,
               base: Calibration) -> tuple[dict[tuple[str, int], RunData], list[str], list[str], list[str]]:
    """Read every complete run once: ``(runs, variants, incomplete runs, notes)``.

    The validation predictions are read when a chosen variant needs them; at the first run without
    them (an older store) the validation-source variants are left out, with a note, and no run keeps them.
    """
    wants_valid = any(_uses_validation(v, base) for v in chosen)
    runs = [(n, s) for n in names for s in store.pipeline(n).seeds]
    data: dict[tuple[str, int], RunData] = {}
    incomplete: list[str] = []
    notes: list[str] = []
    for name, seed_ in runs:
        try:
            try:
                data[(name, seed_)] = read_run(store, name, seed_, label=kind, validation=wants_valid)
            except MissingValidationError as exc:  # an older store: the other variants only
                notes.append(f"validation-source variants left out: {exc}")
                chosen = [v for v in chosen if not _uses_validation(v, base)]
                wants_valid = False
                for run in data.values():
                    run.valid = None
                data[(name, seed_)] = read_run(store, name, seed_, label=kind)
        except (CoverageError, st.CorruptStoreFileError, MissingLabelError):
            raise
        except ValueError as exc:
            incomplete.append(f"{name}/seed{seed_}: {exc}")
    return data, chosen, incomplete, notes


def _variant_row(name: str, seed_: int, run: RunData, chosen: Sequence[str], base: Calibration) -> dict[str, Any]:
    """One run's score under each chosen variant (variants with the same rule share one computation)."""
    row: dict[str, Any] = {"pipeline": name, "seed": seed_}
    cache: dict[Calibration, Any] = {}
    for v in chosen:
        rule = variant_calibration(v, base)
        if rule not in cache:
            cache[rule] = rolling_cql(run, rule)
        row[v] = float(getattr(cache[rule], VARIANTS[v][0]))
    return row


def _scores_and_pairs(store: st.Store, names: Sequence[str], table: pd.DataFrame, chosen: Sequence[str]
                      ) -> tuple[dict[str, dict[str, Any]], list[tuple[str, str]]]:
    """Per-seed scores of the pipelines with at least 2 complete runs, and the pairs to compare among them."""
    counts = table.groupby("pipeline", sort=False).size()
    kept = [n for n in names if counts.get(n, 0) >= 2]
    if len(kept) < 2:
        raise ValueError(f"{store.root}: expected at least 2 pipelines with 2 complete runs to meta-evaluate, found "
                         f"{len(kept)} ({', '.join(f'{n}: {counts.get(n, 0)}' for n in names)})")
    scores = {n: {v: table.loc[table["pipeline"] == n].sort_values("seed")[v].to_numpy() for v in chosen} for n in kept}
    recorded = store.pairs(kept)
    return scores, recorded or list(itertools.combinations(kept, 2))
