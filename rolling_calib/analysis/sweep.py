"""Sweep analysis: rank the configurations of a grid by CQL and QL, pairwise matrices, runs to separate,
and the model confidence set (the configurations not distinguishable from the best).

The grid itself (``--grid KEY=V1,V2,...`` -> pipelines) is configuration:
:mod:`rolling_calib.config.grid`. The sweep runs through the one orchestration path
(:func:`rolling_calib.experiment.flow.run_experiment`); :func:`analyse_sweep` then ranks the
scored runs with :mod:`rolling_calib.core.ranking`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rolling_calib.core.question import DEFAULT_QUESTION, QUESTION, Question
from rolling_calib.core.resampling import DEFAULT, RESAMPLING, Resampling
from rolling_calib.core.validation import validate_params
from rolling_calib.core.jsonable import jsonable

__all__ = ["SweepResult", "analyse_sweep", "format_sweep"]

@dataclass
class SweepResult:
    """Rankings of a sweep: table, pairwise matrices, indistinguishable pairs, runs to separate the top two.

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
    runs_to_separate : list of RunsToSeparate
        Runs (seeds) each metric needs to separate the top two (by ``ground_truth``), by the unpaired normal
        approximation of :func:`rolling_calib.core.ranking.runs_to_separate`; empty with a single configuration
        or a single run of one. Shown only when ``top_two`` is not there (no per-day losses).
    top_two : PairVerdicts or None
        With per-day losses and a label: the verdicts on the same top two, as ``compare`` gives them
        (:func:`rolling_calib.analysis.verdicts.decide_pair`: over seeds on these days, seed ``i`` against seed
        ``i``), whose ``seeds_needed`` is the one count of seeds to decide the pair that ``compare``, the race and
        the report share.
    units : dict
        ``{metric: unit}`` of the top two's verdicts (from the label).
    pairs : list of PairComparison
        The experiment's ``compare`` pairs (direction by the ground truth).
    confidence_sets : dict
        ``{metric: ModelConfidenceSet}``: the seed-aware model confidence set over each
        configuration's seeds x days panel (:func:`rolling_calib.core.racing.model_confidence_set`:
        Hansen, Lunde and Nason's elimination on the verdict's pairwise t, for the question's target);
        empty when no per-day losses were given.
    race : RaceRecord or None
        The live race of ``sweep --until-decided`` (:class:`rolling_calib.analysis.race_record.RaceRecord`),
        shown look by look.
    race_pairs : list of dict
        After a race, the verdicts of the experiment's ``compare`` pairs on the seeds each ran
        (``a, b, metric, outcome, winner, difference, ci_low, ci_high, unit``).
    settings : dict
        ``metrics, ground_truth``, the question's ``target, confidence`` and the bootstrap's ``n_boot, seed,
        block_size`` (everything the numbers depend on), ``configurations, runs``.
    """

    ranking: Any
    matrices: dict[str, Any]
    indistinguishable: dict[str, list[tuple[str, str]]]
    top_groups: dict[str, list[str]]
    runs_to_separate: list[Any]
    pairs: list[Any]
    settings: dict[str, Any]
    confidence_sets: dict[str, Any] = field(default_factory=dict)
    race: Any = None
    race_pairs: list[dict[str, Any]] = field(default_factory=list)
    top_two: Any = None
    units: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return jsonable({
            "settings": self.settings,
            "ranking": self.ranking.to_dict("records"),
            "matrices": {m: mat.to_dict() for m, mat in self.matrices.items()},
            "indistinguishable": {m: [list(p) for p in pairs] for m, pairs in self.indistinguishable.items()},
            "top_groups": self.top_groups,
            "runs_to_separate": [r.to_dict() for r in self.runs_to_separate],
            "pairs": [p.to_dict() for p in self.pairs],
            "confidence_sets": {m: c.to_dict() for m, c in self.confidence_sets.items()},
            **({"top_two": {"a": self.top_two.better, "b": self.top_two.worse, **self.top_two.to_dict()}}
               if self.top_two is not None else {}),
            **({"race": self.race.to_dict(), "race_pairs": self.race_pairs} if self.race is not None else {}),
        })


@validate_params({"question": QUESTION, "resampling": RESAMPLING})
def analyse_sweep(
    runs: Any,
    *,
    metrics: Sequence[str] = ("cql", "ql"),
    ground_truth: str = "ql",
    pairs: Sequence[tuple[str, str]] = (),
    question: Question = DEFAULT_QUESTION,
    resampling: Resampling = DEFAULT,
    days: Any = None,
    label: Any = None,
) -> SweepResult:
    """Rank the configurations of a runs table (pure: numbers in, numbers out).

    Parameters
    ----------
    runs : DataFrame
        One row per (pipeline, seed) with the ``metrics`` columns (``score_store(...).runs``).
    metrics : sequence of str
        Metrics to rank by; the first orders the table and the matrices.
    ground_truth : str
        Metric that picks the top two for the runs to separate and the direction of ``pairs``.
    pairs : sequence of (str, str)
        Pairs to compare explicitly (the experiment's ``compare`` section).
    question : Question
        Its ``confidence`` is the level of every interval and of the model confidence sets, its
        ``target`` the model confidence sets' (recorded in ``settings``).
    resampling : Resampling
        Bootstrap settings of every bootstrap interval (recorded in ``settings``).
    days : DataFrame, optional
        Per-day summaries (``score_store(...).days``): with them, the model confidence set of each
        loss metric (``ql``, ``cql``) over its seeds x days panels.
    label : Label, optional
        What the store's losses are measured against (``score_store(...).label``: the units): with ``days``, the
        verdicts on the top two (``top_two``).
    """
    from rolling_calib.analysis.verdicts import VERDICT_METRICS, decide_pair
    from rolling_calib.core.metric_table import METRIC_TABLE
    from rolling_calib.core.pairwise import compare_pair
    from rolling_calib.core.ranking import (
        indistinguishable,
        pairwise_matrix,
        rank_configurations,
        runs_to_separate_top_two,
        top_group,
    )

    metrics = list(metrics)
    ranking = rank_configurations(runs, metrics=list(dict.fromkeys([*metrics, ground_truth])), question=question)
    order = ranking["pipeline"].tolist()
    matrices = {
        m: pairwise_matrix(runs, metric=m, order=order, question=question, resampling=resampling)
        for m in metrics
    }
    groups = {}
    for m in metrics:
        best = ranking.sort_values([f"{m}_rank", "pipeline"])["pipeline"].iloc[0]
        groups[m] = top_group(matrices[m], best=best)
    enough = len(order) > 1 and int(ranking["n_runs"].min()) >= 2  # a std needs two runs
    needed = runs_to_separate_top_two(runs, metrics=metrics, by=ground_truth, question=question) if enough else []
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
                ground_truth=ground_truth, metrics=metrics, question=question, resampling=resampling,
            )
        )
    sets = _confidence_sets(days, order, metrics, question=question) if days is not None and len(order) > 1 else {}
    top_two = None
    if needed and days is not None and label is not None:
        top_two = decide_pair(days, needed[0].a, needed[0].b, label=label, question=question,
                              metrics=[m for m in metrics if m in VERDICT_METRICS])
    return SweepResult(
        confidence_sets=sets,
        ranking=ranking,
        matrices=matrices,
        indistinguishable={m: indistinguishable(mat) for m, mat in matrices.items()},
        top_groups=groups,
        runs_to_separate=needed,
        top_two=top_two if top_two is not None and top_two.verdicts else None,
        units={m: METRIC_TABLE[m].unit(label) for m in top_two.verdicts} if top_two is not None else {},
        pairs=comparisons,
        settings={"metrics": metrics, "ground_truth": ground_truth, **question.to_dict(), **resampling.to_dict(),
                  "configurations": len(order), "runs": int(len(runs))},
    )


def _confidence_sets(days: Any, order: Sequence[str], metrics: Sequence[str], *,
                     question: Question) -> dict[str, Any]:
    """The seed-aware model confidence set of each loss metric over its seeds x days panels (the seeds and days
    every configuration has; none when fewer than 2 seeds or 3 days are shared)."""
    from rolling_calib.analysis.verdicts import loss_panel
    from rolling_calib.core.racing import model_confidence_set

    out = {}
    for metric in metrics:
        if metric not in ("ql", "cql"):
            continue
        panels = {p: loss_panel(days, p, metric) for p in order}
        if any(panel is None for panel in panels.values()):
            continue
        seeds = set.intersection(*(set(p.seeds.tolist()) for p in panels.values()))
        times = panels[order[0]].times
        for p in panels.values():
            times = np.intersect1d(times, p.times)
        if len(seeds) < 2 or times.size < 3:
            continue
        panels = {n: p.select(seeds=np.isin(p.seeds, sorted(seeds)), times=np.isin(p.times, times))
                  for n, p in panels.items()}
        out[metric] = model_confidence_set(panels, question=question, orientation="lower")
    return out


def format_sweep(result: SweepResult, *, digits: int = 4, style: str = "markdown") -> str:
    """The sweep as text (``style="text"`` for a terminal, ``"markdown"`` for ``sweep.md``): ranking,
    confidence sets, matrices, indistinguishable pairs, the top two's verdicts and seeds to decide (or, without
    per-day losses, the runs to separate them), pairs."""
    from rolling_calib.core.tables import format_table

    def table(frame: Any) -> str:
        return format_table(frame.astype(object).where(frame.notna(), None).values.tolist(),
                            [str(c) for c in frame.columns], style=style)

    head = "## " if style == "markdown" else ""
    s = result.settings
    pct = round(s["confidence"] * 100)
    lines = _race_lines(result, head=head) + [f"{head}Ranking ({s['configurations']} configurations, {s['runs']} runs; {pct}% t-intervals of the mean)", ""]
    cols = ["pipeline", "n_runs"]
    for m in s["metrics"]:
        cols += [f"{m}_rank", f"{m}_mean", f"{m}_ci_low", f"{m}_ci_high", f"{m}_std"]
    lines.append(table(result.ranking[cols].round(digits)))
    fewest = int(result.ranking["n_runs"].min())
    if fewest < 5:
        lines += ["", f"Note: only {fewest} run(s) for some configuration; with fewer than about 5 seeds the "
                      "bootstrap intervals below are too narrow to trust (a resample of 2 runs has few distinct values)."]
    lines += ["", "CQL removes each month's output bias before scoring, so it cannot see an improvement that is "
                  "only a better-calibrated bias (docs/method.md §4); QL is the ground truth that picks the better of a pair."]
    for m, cs in result.confidence_sets.items():
        lines += ["", f"{head}Model confidence set by {m} ({pct}%): {', '.join(cs.included)}", "",
                  f"Configurations not distinguishable from the best (Hansen, Lunde and Nason's elimination on "
                  f"each pair's verdict, {cs.n_seeds} seeds x {cs.n_days} days, target {cs.question.target}: "
                  f"seeds counted with their persistent offsets; Bonferroni over the pairs). MCS p-values:", "",
                  table(__import__("pandas").DataFrame({"pipeline": list(cs.pvalues),
                                                        "p-value": [round(v, 3) for v in cs.pvalues.values()],
                                                        "in the set": ["yes" if n in cs.included else "no"
                                                                       for n in cs.pvalues]}))]
    for m, mat in result.matrices.items():
        lines += ["", f"{head}Pairwise accuracy by {m}: P(row beats column) [{pct}% bootstrap CI, "
                      f"n_boot={mat.n_boot}, seed={mat.seed}]", "", table(mat.to_table().reset_index(names="")),
                  "", f"Indistinguishable by {m} (CI contains 0.5): "
                  + (", ".join(f"{a} ~ {b}" for a, b in result.indistinguishable[m]) or "none"),
                  f"Not separable from the best by {m}: {', '.join(result.top_groups[m])}"]
    if result.top_two is not None:
        lines += _top_two_lines(result, head=head, digits=digits, style=style)
    elif result.runs_to_separate:
        b0 = result.runs_to_separate[0]
        lines += ["", f"{head}Runs to separate the top two by {s['ground_truth']} ({b0.a} vs {b0.b})", "",
                  "runs_needed = ceil(z^2 (std_a^2 + std_b^2) / gap^2): seeds per configuration for the "
                  f"{pct}% interval of the mean difference to exclude 0 (an unpaired normal approximation from the "
                  "runs' spread: without per-day losses the verdict, which compares seed i with seed i, cannot "
                  "be computed).", ""]
        rows = [{"metric": b.metric, "gap": round(b.gap, digits + 2), "std_a": round(b.std_a, digits + 2),
                 "std_b": round(b.std_b, digits + 2), "runs_needed": b.runs_needed, "runs_observed": b.runs_observed}
                for b in result.runs_to_separate]
        lines.append(table(__import__("pandas").DataFrame(rows)))
    if result.pairs:
        lines += ["", f"{head}Listed pairs (better by mean {s['ground_truth']}; accuracy = P(better's run beats worse's))", ""]
        rows = []
        for p in result.pairs:
            row = {"better": p.better, "worse": p.worse, f"{s['ground_truth']}_gap": round(p.ground_truth_gap, digits + 2)}
            for m, acc in p.accuracies.items():
                row[f"acc_{m}"] = f"{acc.accuracy:.2f} [{acc.ci_low:.2f}, {acc.ci_high:.2f}]"
            rows.append(row)
        lines.append(table(__import__("pandas").DataFrame(rows)))
    return "\n".join(lines) + "\n"


def _top_two_lines(result: SweepResult, *, head: str, digits: int, style: str) -> list[str]:
    """The verdicts on the top two by the ground truth, with the seeds each needs to decide (what ``compare`` says)."""
    from rolling_calib.analysis.verdicts import CLAIMS
    from rolling_calib.core.tables import format_table, sig

    pv, s = result.top_two, result.settings
    pct = f"{s['confidence'] * 100:g}"
    power = next(iter(pv.verdicts.values())).seeds_needed.power
    rows = []
    for metric, v in pv.verdicts.items():
        needed = v.seeds_needed
        unit = result.units.get(metric, "")
        rows.append([metric, f"{v.winner} better" if v.winner else "undetermined",
                     f"{sig(v.difference, digits)} {unit}".strip(),
                     f"[{sig(v.ci_low, digits)}, {sig(v.ci_high, digits)}] {unit}".strip(),
                     "paired" if v.paired else "unpaired", min(v.n_seeds), needed.n if needed.n else needed.reason])
    return ["", f"{head}Seeds to decide the top two by {s['ground_truth']} ({pv.better} vs {pv.worse})", "",
            f"The verdict `compare` gives this pair, at {pct}%, {CLAIMS[s['target']]} (difference = "
            f"{pv.better} minus {pv.worse}); seeds to decide: seeds per configuration with which the chance to decide it "
            f"is {power:.0%} if the gap is what was measured (the verdict's own count, seed i compared with seed i when "
            "both ran the same seeds).", "",
            format_table(rows, ["metric", "verdict", "difference", "interval", "pairing", "seeds run",
                                "seeds to decide"], style=style)]


def _race_lines(result: SweepResult, *, head: str) -> list[str]:
    """The live race look by look and the listed pairs' verdicts after it (nothing without a race)."""
    if result.race is None:
        return []
    race = result.race
    body = race.format().splitlines()
    if head:   # Markdown: the looks as a list
        body = [("- " + line[2:]) if line.startswith("  ") else line for line in body]
    lines = [f"{head}Race (sweep --until-decided)", "", *body]
    if result.race_pairs:
        lines += ["", "The experiment's compare pairs, on the seeds each ran (the pairs' fixed verdict at the "
                      "question's confidence, not corrected for the race):"]
        for p in result.race_pairs:
            unit = f" {p['unit']}" if p.get("unit") else ""
            lines.append(f"  {p['a']} vs {p['b']} by {p['metric'].upper()}: {p['outcome']}"
                         f"{' (' + p['winner'] + ' better)' if p.get('winner') else ''}; difference "
                         f"{p['difference']:.4g}{unit} [{p['ci_low']:.4g}, {p['ci_high']:.4g}]")
    return lines + [""]
