"""Hyperparameter sweeps: a grid over YAML kwarg paths, run through the rolling runner, ranked.

A sweep takes an experiment YAML (see ``rolling_calib.config.experiment.load_experiment``)
and a grid such as ``hidden_size=32,64,128`` and ``weight_decay=0,5e-6``. Every
point of the grid's Cartesian product becomes one *pipeline* (a name plus the
dotted-path overrides it applies to the YAML); all of them run with the same
seeds through the same runner and executors as ``rolling-calib run``, into one
store; then :mod:`rolling_calib.core.ranking` ranks them by CQL and QL, builds the
pairwise-accuracy matrix, finds the indistinguishable pairs and the seed budget.

Grid syntax (``--grid KEY=V1,V2,...``)
    ``KEY`` is either a full dotted path that exists in the YAML
    (``task.model.kwargs.hidden_size``) or a short name resolved, in this
    order, against ``task.model.kwargs``, ``task.dataset.kwargs``,
    and ``task.dataset.kwargs.handler.kwargs`` (first that has the key wins).
    Only paths under ``task`` can be swept: a pipeline is a set of overrides
    of the Qlib task (the schedule and seeds are shared by all of them). Values are split on commas and read with YAML scalar rules,
    plus scientific notation without a dot: ``32`` -> int, ``5e-6`` and
    ``0.5`` -> float, ``true`` -> bool, ``null`` -> None, anything else a str.

Example
-------
>>> cfg = {"task": {"model": {"kwargs": {"hidden_size": 64, "weight_decay": 0.0}}}}
>>> grid = parse_grid(["hidden_size=32,64", "weight_decay=0,5e-6"], config=cfg)
>>> grid
{'task.model.kwargs.hidden_size': [32, 64], 'task.model.kwargs.weight_decay': [0, 5e-06]}
>>> [p.name for p in expand_grid(grid)]
['hidden_size=32,weight_decay=0', 'hidden_size=32,weight_decay=5e-06', 'hidden_size=64,weight_decay=0', 'hidden_size=64,weight_decay=5e-06']
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rolling_calib.config.overrides import parse_value

__all__ = [
    "SHORT_NAME_PREFIXES",
    "Pipeline",
    "parse_value",
    "resolve_key",
    "parse_grid",
    "expand_grid",
]

#: Where a short grid key (no dot) is looked up, in order.
SHORT_NAME_PREFIXES: tuple[str, ...] = (
    "task.model.kwargs",
    "task.dataset.kwargs",
    "task.dataset.kwargs.handler.kwargs",
)

_MISSING = object()


@dataclass(frozen=True)
class Pipeline:
    """One grid point: a readable ``name`` and the dotted-path ``overrides`` it applies."""

    name: str
    overrides: dict[str, Any] = field(default_factory=dict)


def _lookup(config: Mapping[str, Any], path: str) -> Any:
    node: Any = config
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def resolve_key(key: str, *, config: Mapping[str, Any]) -> str:
    """Full dotted path for a grid key; ``ValueError`` when the YAML has no such key.

    Examples
    --------
    >>> resolve_key("hidden_size", config={"task": {"model": {"kwargs": {"hidden_size": 64}}}})
    'task.model.kwargs.hidden_size'
    """
    if "." in key:
        if key.split(".", 1)[0] != "task":
            raise ValueError(
                f"--grid {key}: only paths under 'task' can be swept (a pipeline overrides the Qlib task); "
                "the schedule and seeds are shared by all grid points"
            )
        if _lookup(config, key) is _MISSING:
            raise ValueError(f"--grid {key}: no such path in the experiment YAML (a dotted path must exist there)")
        return key
    for prefix in SHORT_NAME_PREFIXES:
        if _lookup(config, f"{prefix}.{key}") is not _MISSING:
            return f"{prefix}.{key}"
    raise ValueError(
        f"--grid {key}: unknown key; a short name must exist under one of "
        f"{', '.join(SHORT_NAME_PREFIXES)} in the experiment YAML, or give the full dotted path"
    )


def parse_grid(specs: Sequence[str], *, config: Mapping[str, Any]) -> dict[str, list[Any]]:
    """Parse ``KEY=V1,V2,...`` strings into ``{dotted_path: [values]}`` (insertion ordered).

    Parameters
    ----------
    specs : sequence of str
        One string per swept key, as given to ``--grid``.
    config : mapping
        The experiment YAML as a dict (to resolve and check the keys).

    Raises
    ------
    ValueError
        Naming the offending ``--grid`` argument: no ``=``, an empty key, an
        empty value or value list, a value repeated within a key, a key (or two
        keys resolving to the same path) given twice, or a key the YAML lacks.
    """
    grid: dict[str, list[Any]] = {}
    given: dict[str, str] = {}
    for spec in specs:
        if "=" not in spec:
            raise ValueError(f"--grid {spec!r}: expected KEY=V1,V2,... (no '=' found)")
        key, _, values_text = spec.partition("=")
        key = key.strip()
        if not key:
            raise ValueError(f"--grid {spec!r}: expected KEY=V1,V2,..., found an empty KEY")
        if not values_text.strip():
            raise ValueError(f"--grid {spec!r}: expected at least one value after '=', found none")
        path = resolve_key(key, config=config)
        if path in grid:
            raise ValueError(f"--grid {spec!r}: {path} is already swept by --grid {given[path]!r}")
        values = []
        for position, item in enumerate(values_text.split(","), start=1):
            if not item.strip():
                raise ValueError(f"--grid {spec!r}: value {position} is empty (check for a stray comma)")
            try:
                value = parse_value(item)
            except ValueError as exc:
                raise ValueError(f"--grid {spec!r}: value {position} {item.strip()!r}: {exc}") from exc
            if any(_same(value, seen) for seen in values):
                raise ValueError(f"--grid {spec!r}: value {item.strip()!r} appears twice")
            values.append(value)
        grid[path] = values
        given[path] = spec
    return grid


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b or (
        isinstance(a, (int, float)) and isinstance(b, (int, float))
        and not isinstance(a, bool) and not isinstance(b, bool) and a == b
    )


def format_value(value: Any) -> str:
    """Short, file-system-safe text for a value in a pipeline name.

    Examples
    --------
    >>> [format_value(v) for v in [64, 5e-06, 0.0, True, None, "a/b"]]
    ['64', '5e-06', '0.0', 'true', 'null', 'a_b']
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    return re.sub(r"[^A-Za-z0-9._+-]", "_", str(value))


def expand_grid(grid: Mapping[str, Sequence[Any]]) -> list[Pipeline]:
    """The grid's Cartesian product as pipelines named ``short=value,short=value``.

    ``short`` is the last part of the dotted path, or the whole path when two
    swept paths end the same way. The first key varies slowest.
    """
    if not grid:
        raise ValueError("grid: expected at least one swept key, found none")
    lasts = [path.rsplit(".", 1)[-1] for path in grid]
    labels = {path: (last if lasts.count(last) == 1 else path) for path, last in zip(grid, lasts)}
    pipelines = []
    for combo in itertools.product(*grid.values()):
        overrides = dict(zip(grid, combo))
        name = ",".join(f"{labels[path]}={format_value(value)}" for path, value in overrides.items())
        pipelines.append(Pipeline(name=name, overrides=overrides))
    names = [p.name for p in pipelines]
    if len(set(names)) != len(names):
        raise ValueError(f"grid: two grid points format to the same pipeline name; names: {names}")
    return pipelines


# =========================================================================== running and ranking
# (the runner is imported inside the functions that need it: parsing and ranking stay light)


def sweep_experiment(config: Any, pipelines: Sequence[Pipeline] | None) -> Any:
    """The experiment whose pipelines are the grid points (or the config's own, if no grid).

    Each grid point's overrides are checked like a YAML pipeline's (the Qlib
    classes must accept the values); the config's ``compare`` pairs are kept
    only when the pipelines are the config's own.

    Parameters
    ----------
    config : rolling_calib.config.experiment.ExperimentConfig
    pipelines : sequence of Pipeline or None

    Returns
    -------
    rolling_calib.config.experiment.ExperimentConfig
    """
    import dataclasses

    from rolling_calib.config.experiment import validate_task

    if pipelines is None:
        return config
    swept = dataclasses.replace(config, pipelines={p.name: dict(p.overrides) for p in pipelines}, compare=[])
    for p in pipelines:
        validate_task(swept.pipeline_task(p.name), str(config.path), prefix=f"--grid point {p.name} -> task")
    return swept


@dataclass
class SweepResult:
    """Rankings of a sweep: table, pairwise matrices, indistinguishable pairs, seed budgets.

    Attributes
    ----------
    ranking : DataFrame
        :func:`rolling_calib.core.ranking.rank_configurations` of all configurations.
    matrices : dict
        ``{metric: PairwiseMatrix}`` (rows/columns in ranking order of the first metric).
    indistinguishable : dict
        ``{metric: [(a, b), ...]}``; see :func:`rolling_calib.core.ranking.indistinguishable`.
    top_groups : dict
        ``{metric: [best, ...configs indistinguishable from it]}``.
    seed_budgets : list of SeedBudget
        Seeds each metric needs to separate the top two (by ``ground_truth``);
        empty with a single configuration or a single run of one.
    pairs : list of PairComparison
        The experiment's ``compare`` pairs (direction by the ground truth).
    settings : dict
        ``metrics, ground_truth, n_boot, confidence, seed`` (everything the numbers depend on).
    """

    ranking: Any
    matrices: dict[str, Any]
    indistinguishable: dict[str, list[tuple[str, str]]]
    top_groups: dict[str, list[str]]
    seed_budgets: list[Any]
    pairs: list[Any]
    settings: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        ranking = self.ranking.astype(object).where(self.ranking.notna(), None)
        return {
            "settings": self.settings,
            "ranking": ranking.to_dict("records"),
            "matrices": {m: mat.to_dict() for m, mat in self.matrices.items()},
            "indistinguishable": {m: [list(p) for p in pairs] for m, pairs in self.indistinguishable.items()},
            "top_groups": self.top_groups,
            "seed_budgets": [b.to_dict() for b in self.seed_budgets],
            "pairs": [p.to_dict() for p in self.pairs],
        }


def analyse_sweep(
    runs: Any,
    *,
    metrics: Sequence[str] = ("cql", "ql"),
    ground_truth: str = "ql",
    pairs: Sequence[tuple[str, str]] = (),
    n_boot: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> SweepResult:
    """Rank the configurations of a runs table (pure: numbers in, numbers out).

    Parameters
    ----------
    runs : DataFrame
        One row per (pipeline, seed) with the ``metrics`` columns (``score_store(...).runs``).
    metrics : sequence of str
        Metrics to rank by; the first orders the table and the matrices.
    ground_truth : str
        Metric that picks the top two for the seed budget and the direction of ``pairs``.
    pairs : sequence of (str, str)
        Pairs to compare explicitly (the experiment's ``compare`` section).
    n_boot, confidence, seed
        Bootstrap settings of every interval (recorded in ``settings``).
    """
    from rolling_calib.core.pairwise import compare_pair
    from rolling_calib.core.ranking import (
        indistinguishable,
        pairwise_matrix,
        rank_configurations,
        seed_budget_to_separate,
        top_group,
    )

    metrics = list(metrics)
    ranking = rank_configurations(runs, metrics=list(dict.fromkeys([*metrics, ground_truth])), confidence=confidence)
    order = ranking["pipeline"].tolist()
    matrices = {
        m: pairwise_matrix(runs, metric=m, order=order, n_boot=n_boot, confidence=confidence, seed=seed)
        for m in metrics
    }
    groups = {}
    for m in metrics:
        best = ranking.sort_values([f"{m}_rank", "pipeline"])["pipeline"].iloc[0]
        groups[m] = top_group(matrices[m], best=best)
    enough = len(order) > 1 and int(ranking["n_runs"].min()) >= 2  # a std needs two runs
    budgets = seed_budget_to_separate(runs, metrics=metrics, by=ground_truth, confidence=confidence) if enough else []
    comparisons = []
    by_name = {name: g for name, g in runs.groupby("pipeline")}
    for a, b in pairs:
        for name in (a, b):
            if name not in by_name:
                raise ValueError(f"pairs: pipeline {name!r} has no runs; found {sorted(by_name)}")
        comparisons.append(
            compare_pair(
                a, {m: by_name[a][m].to_numpy(float) for m in dict.fromkeys([ground_truth, *metrics])},
                b, {m: by_name[b][m].to_numpy(float) for m in dict.fromkeys([ground_truth, *metrics])},
                ground_truth=ground_truth, metrics=metrics, n_boot=n_boot, confidence=confidence, seed=seed,
            )
        )
    return SweepResult(
        ranking=ranking,
        matrices=matrices,
        indistinguishable={m: indistinguishable(mat) for m, mat in matrices.items()},
        top_groups=groups,
        seed_budgets=budgets,
        pairs=comparisons,
        settings={"metrics": metrics, "ground_truth": ground_truth, "n_boot": n_boot,
                  "confidence": confidence, "seed": seed, "configurations": len(order),
                  "runs": int(len(runs))},
    )


def format_sweep(result: SweepResult, *, digits: int = 4) -> str:
    """Markdown text of a sweep: ranking, matrices, indistinguishable pairs, seed budgets, pairs."""
    s = result.settings
    pct = round(s["confidence"] * 100)
    lines = [f"## Ranking ({s['configurations']} configurations, {s['runs']} runs; {pct}% t-intervals of the mean)", ""]
    cols = ["pipeline", "n_runs"]
    for m in s["metrics"]:
        cols += [f"{m}_rank", f"{m}_mean", f"{m}_ci_low", f"{m}_ci_high", f"{m}_std"]
    lines.append(_markdown(result.ranking[cols].round(digits)))
    fewest = int(result.ranking["n_runs"].min())
    if fewest < 5:
        lines += ["", f"Note: only {fewest} run(s) for some configuration; with fewer than about 5 seeds the "
                      "bootstrap intervals below are too narrow to trust (a resample of 2 runs has few distinct values)."]
    lines += ["", "CQL removes each month's output bias before scoring, so it cannot see an improvement that is "
                  "only a better-calibrated bias (METHOD 4); QL is the ground truth that picks the better of a pair."]
    for m, mat in result.matrices.items():
        lines += ["", f"## Pairwise accuracy by {m}: P(row beats column) [{pct}% bootstrap CI, "
                      f"n_boot={mat.n_boot}, seed={mat.seed}]", "", _markdown(mat.to_table().reset_index(names="")),
                  "", f"Indistinguishable by {m} (CI contains 0.5): "
                  + (", ".join(f"{a} ~ {b}" for a, b in result.indistinguishable[m]) or "none"),
                  f"Not separable from the best by {m}: {', '.join(result.top_groups[m])}"]
    if result.seed_budgets:
        b0 = result.seed_budgets[0]
        lines += ["", f"## Seed budget to separate the top two by {s['ground_truth']} ({b0.a} vs {b0.b})", "",
                  "runs_needed = ceil(z^2 (std_a^2 + std_b^2) / gap^2): seeds per configuration for the "
                  f"{pct}% interval of the mean difference to exclude 0.", ""]
        rows = [{"metric": b.metric, "gap": round(b.gap, digits + 2), "std_a": round(b.std_a, digits + 2),
                 "std_b": round(b.std_b, digits + 2), "runs_needed": b.runs_needed, "runs_observed": b.runs_observed}
                for b in result.seed_budgets]
        lines.append(_markdown(__import__("pandas").DataFrame(rows)))
    if result.pairs:
        lines += ["", f"## Listed pairs (better by mean {s['ground_truth']}; accuracy = P(better's run beats worse's))", ""]
        rows = []
        for p in result.pairs:
            row = {"better": p.better, "worse": p.worse, f"{s['ground_truth']}_gap": round(p.ground_truth_gap, digits + 2)}
            for m, acc in p.accuracies.items():
                row[f"acc_{m}"] = f"{acc.accuracy:.2f} [{acc.ci_low:.2f}, {acc.ci_high:.2f}]"
            rows.append(row)
        lines.append(_markdown(__import__("pandas").DataFrame(rows)))
    return "\n".join(lines) + "\n"


def _markdown(frame: Any) -> str:
    header = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join("" if v is None else str(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def write_sweep_report(result: SweepResult, out_dir: str | Any) -> dict[str, Any]:
    """Write ``sweep.json``, ``sweep.md`` and one ``pairwise_<metric>.png`` per metric (atomically).

    Returns ``{"json": path, "markdown": path, "heatmaps": {metric: path}}``.
    """
    import json
    from pathlib import Path

    import matplotlib.pyplot as plt

    from rolling_calib.core.ranking import plot_pairwise_heatmap
    from rolling_calib.core.atomic import atomic_write, atomic_write_text

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Any] = {"json": out / "sweep.json", "markdown": out / "sweep.md", "heatmaps": {}}
    atomic_write_text(paths["json"], json.dumps(result.to_dict(), indent=2, default=_json_default) + "\n")
    atomic_write_text(paths["markdown"], "# Sweep\n\n" + format_sweep(result))
    for metric, matrix in result.matrices.items():
        fig = plot_pairwise_heatmap(matrix)
        target = out / f"pairwise_{metric}.png"
        try:
            atomic_write(target, lambda tmp, fig=fig: fig.savefig(tmp, dpi=120, format="png"))
        finally:
            plt.close(fig)
        paths["heatmaps"][metric] = target
    return paths


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):
        return value.item()
    return str(value)
