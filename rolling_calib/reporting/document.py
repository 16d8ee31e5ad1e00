"""The report: ``report.html`` (self-contained, PNGs embedded) and ``report.md`` (PNG files beside it).

It leads with the answer. In order:

1. title, the one line that answers (:meth:`StoreComparison.headline
   <rolling_calib.analysis.comparison.StoreComparison.headline>`: which configuration, by how much, how
   sure) and one line of scope (runs, seeds, periods, label, calibration rule, the question the
   verdicts answer and the bootstrap's settings; the store named only when the report lies outside it);
2. the verdict per pair and metric (:meth:`StoreComparison.verdict_rows
   <rolling_calib.analysis.comparison.StoreComparison.verdict_rows>`, the words ``compare`` prints), the
   other target's verdict beside it;
3. when each pipeline was better: per refit window (Holm), across windows, the fluctuation warning, and
   a figure per pair (:func:`rolling_calib.reporting.figures.plot_when`);
4. the guards' warnings, then "Can calibration help here?" (each pipeline's assessment);
5. IC / Rank IC per pipeline, the backtest's portfolio row per pipeline (annualized excess return,
   information ratio, max drawdown over seeds, with and without cost; with the strategy, benchmark,
   cost model and accumulation), then QL and CQL per pipeline;
6. the pairwise accuracies (only for pairs where they mean something, else the reason);
7. the figures (:func:`rolling_calib.reporting.figures.make_figures`: probability of improvement,
   cumulative excess-return curves of the backtests, paired per-seed differences, per-period loss
   differential, seed offsets, seed spread, bias);
8. schedule and provenance, the CSV tables, and the definitions with the known limitation of
   docs/method.md §4 at the end.

Computing and rendering are separate: :func:`report_context` returns plain values (strings,
lists, dicts); the Jinja2 templates ``templates/report.html.j2`` (autoescaped: no Markdown in the
HTML) and ``templates/report.md.j2`` render them; :func:`write_report` writes everything
atomically. Paths in the report are relative to its directory: the store is named relative to the
report, the CSVs and PNGs are beside it.

Example
-------
>>> import warnings
>>> from rolling_calib.analysis.scoring import score_store
>>> from rolling_calib.analysis.comparison import compare_store
>>> scores = score_store(example_store, progress=False)
>>> with warnings.catch_warnings():
...     warnings.simplefilter("ignore")    # the example store records no library versions
...     paths = write_report(scores, compare_store(scores, resampling=Resampling(n_boot=200)), example_store / "report")
>>> paths["html"].name, paths["html"].read_text().startswith("<!DOCTYPE html>")
('report.html', True)
>>> sorted(k for k in paths if k.endswith("_csv"))
['periods_csv', 'pipelines_csv', 'runs_csv', 'verdicts_csv', 'warnings_csv', 'when_csv']
"""

from __future__ import annotations

import base64
import io
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd
from matplotlib.figure import Figure

from rolling_calib.analysis.comparison import (
    WHEN_COLUMNS,
    WINDOW_COLUMNS,
    StoreComparison,
    beside_note,
    horizon_note,
    verdict_columns,
)
from rolling_calib.core.metric_table import COMPARED_METRICS, METRIC_TABLE, title
from rolling_calib.analysis.scoring import StoreScores
from data_prep.atomic import atomic_write_bytes, atomic_write_text
from rolling_calib.core.tables import format_table, sig
from rolling_calib.reporting.figures import make_figures

__all__ = ["CAVEAT", "CSV_FILES", "render_html", "render_markdown", "report_context", "write_report"]

CAVEAT = (
    "Known limitation (docs/method.md §4): the calibrated loss removes each period's output bias before "
    "scoring, so it cannot see an improvement that is itself a calibration improvement. If one pipeline's "
    "only advantage is a better-calibrated output bias, CQL ranks the two as equal (or reversed): check the "
    "plain QL rows of the verdict table and the bias figure before trusting a CQL ranking in that case."
)
#: The CSV tables written beside the report: file -> what one row is.
CSV_FILES = {
    "verdicts.csv": "one row per pair and metric: verdict, difference, interval, variance parts, drift check, "
                   "Diebold-Mariano (time-series detail), "
                    "seeds to decide",
    "warnings.csv": "one row per guard that fired: kind, pipelines, message",
    "when.csv": "one row per pair, metric and refit window (or month): dates, verdict under Holm, difference, "
                "interval and its level, p-values",
    "pipelines.csv": "one row per pipeline: mean and std over seeds of every metric, std ratio, seed budget",
    "runs.csv": "one row per run (pipeline, seed): QL, QL 2..K, CQL, IC, ICIR, Rank IC, mean daily excess return "
                "without and with cost, rows",
    "periods.csv": "one row per run and calibration period: rows, bias applied, QL, CQL, refit",
}
_FIGURES = {  # name prefix -> (title, caption)
    "when": ("When was each better? QL per window",
             "Top: per refit window (or month), the difference of QL over seeds on that window's days, its box the "
             "interval at the level Holm spent on the window (decided windows tinted in the winner's colour); refits "
             "dashed; the dotted line is the across-windows mean; a dash-dotted line the least-squares break where "
             "the fluctuation test fired. Bottom: the rolling mean of the seed-averaged differential against its "
             "simultaneous band (a warning when it leaves it, never a verdict)."),
    "excess": ("Backtest: cumulative excess return",
               "The workflow's backtest over each seed's joined windows: cumulative excess return over the benchmark "
               "(thin: each seed; thick: the mean over seeds), without and with the trading cost."),
    "improvement": ("Probability of improvement per metric",
                    "Per pair and metric: the share of (seed of A, seed of B) pairs in which A's run scores better, "
                    "with its percentile bootstrap interval over seeds; 0.5 (dashed) is no preference."),
    "paired": ("Paired per-seed differences",
               "Seed i of one pipeline minus seed i of the other, QL over the scored periods and CQL; below 0 "
               "(tinted in the first pipeline's colour) the first pipeline's run scored lower."),
    "differential": ("Loss differential per period, refits marked",
                     "Per calibration period, the mean over seeds of QL and CQL of the first pipeline minus the "
                     "second, with a t-interval over seeds; the dashed line marks a refit (a new training window)."),
    "offsets": ("Seed offsets per period, refits marked",
                "Each seed's mean residual minus the seeds' mean, per period, one panel per pipeline (shades of the "
                "pipeline's colour, one per seed). CQL corrects period k with period k-1's bias, so it narrows the "
                "seeds only while offsets persist; they reset at refits."),
    "spread": ("Seed spread of QL and CQL",
               "One dot per seed, box = quartiles: QL over every period, QL over the periods CQL scores, and CQL."),
    "bias": ("Bias applied each period",
             "The shift c_k CQL applied in each period (mean over seeds, band min..max over seeds), refits marked."),
}


# --------------------------------------------------------------------------- plain values
@dataclass(frozen=True)
class Table:
    """A table as plain strings: ``columns``, ``rows`` (cells), ``align`` (``left``/``right`` per column)."""

    columns: list[str]
    rows: list[list[str]]
    align: list[str]

    def markdown(self) -> str:
        """The table in Markdown (the project's one table formatter)."""
        return format_table(self.rows, self.columns, style="markdown", align=self.align)


def _table(columns: Sequence[str], rows: Sequence[Sequence[Any]], *, left: int = 1) -> Table:
    """Cells as text; the first ``left`` columns aligned left, the others right."""
    return Table(list(columns), [["n/a" if c is None else str(c) for c in r] for r in rows],
                 ["left"] * left + ["right"] * (len(columns) - left))


def _relative(text: str, store: Path, out_dir: Path) -> str:
    """``text`` with the store's absolute path replaced by its path relative to the report."""
    rel = _store_name(store, out_dir)
    for absolute in sorted({str(store.resolve()), str(store.absolute())}, key=len, reverse=True):
        text = text.replace(absolute, rel)
    return text


def _store_name(store: Path, out_dir: Path) -> str:
    """The store relative to the report's directory (``..`` for ``STORE/report``), or its name when it lies
    more than two levels up (a long climb of ``../`` says nothing a reader can use).

    >>> _store_name(Path("/r/demo/store"), Path("/r/demo/report")), _store_name(Path("/a/b/store"), Path("/x/y/z"))
    ('../store', 'store')
    """
    rel = Path(os.path.relpath(store.resolve(), out_dir.resolve()))
    return rel.as_posix() if rel.parts.count("..") <= 2 else store.resolve().name


def _inside(out_dir: Path, store: Path) -> bool:
    """The report's directory is the store or lies inside it."""
    out, root = out_dir.resolve(), store.resolve()
    return out == root or root in out.parents


def _scope(scores: StoreScores, out_dir: Path, comparison: StoreComparison) -> str:
    """Runs, seeds, periods, label, rule, question and bootstrap; the store is named only for a report written
    outside it."""
    seeds = scores.runs.groupby("pipeline")["seed"].nunique()
    periods = sorted(scores.periods["period"].astype(str).unique())
    span = f"{periods[0]}..{periods[-1]}" if periods else "none"
    seed_text = str(int(seeds.iloc[0])) if seeds.nunique() == 1 else f"{int(seeds.min())}-{int(seeds.max())}"
    runs = (f"{len(scores.runs)} runs of {len(scores.pipelines)} pipeline(s) ({', '.join(scores.pipelines)}), "
            f"{seed_text} seeds each, {len(periods)} calibration periods ({span}).")
    where = "" if _inside(out_dir, Path(scores.store)) else f"Store {_store_name(scores.store, out_dir)}: "
    return (f"{where}{runs} Scored against the {scores.label_scope}; calibration: "
            f"{scores.calibration.describe()}. Verdicts answer: {comparison.question.describe()}; bootstrap: "
            f"{comparison.resampling.describe()}.")



def _sequential(store: Path, seeds_in_store: dict[str, int]) -> tuple[Table | None, str]:
    """The sequential path of a run ``--until-decided``, look by look (a row per look at each pair: seeds, the
    difference, its interval at the look's spent level, what the look concluded), and a line on compute."""
    from rolling_calib.analysis.sequential_path import SPENT_LEVEL, read_path

    path = read_path(store)
    if path is None:
        return None, ""
    rows = []
    for nl in path.looks:
        look = nl.look
        a, b = look.pair
        outcome = {"better": f"{a} better", "worse": f"{b} better", "open": "went on"}.get(look.outcome,
                                                                                         look.outcome)
        rows.append([nl.pair, nl.number, look.seeds, sig(look.difference),
                     f"[{sig(look.ci_low)}, {sig(look.ci_high)}]", f"{look.level:.4f}", outcome, look.why])
    units = path.units
    line = (f"Decided by {path.metric.upper()} ({path.question.describe()}; {path.rule.describe()}); difference: "
            f"a minus b ({path.orientation} is better); seeds used: "
            f"{', '.join(f'{n} {k}' for n, k in path.seeds_used.items())} of {path.full_grid} each; units "
            f"{units.used} of the full grid's {units.full_grid} ({units.fraction:.0%}), "
            f"{units.full_grid - units.used} saved")
    if path.cpu_full_grid_estimate:
        line += (f"; {path.cpu_used:.0f} CPU-s of an estimated {path.cpu_full_grid_estimate:.0f} "
                 f"({path.cpu_full_grid_estimate - path.cpu_used:.0f} saved)")
    if path.open:
        line += f"; not stopped yet: {', '.join(path.open)} (the run was interrupted; re-run the command to go on)"
    if note := path.seeds_note(seeds_in_store):
        line += f". {note.rstrip('.')}"
    unit = f" ({path.unit})" if path.unit else ""
    table = _table(["pair (a vs b)", "look", "seeds per pipeline", f"difference{unit}", f"interval at the spent level{unit}",
                    "spent level", "outcome", "why"], rows, left=1)
    table.align[-2:] = ["left", "left"]
    return table, f"{line}. {SPENT_LEVEL[0].upper()}{SPENT_LEVEL[1:]}."


def _verdicts(comparison: StoreComparison) -> Table:
    columns = verdict_columns(comparison.target)
    rows = [[r["pair"] if r["first"] else "", *(r[k] for k in list(columns)[1:])]
            for r in comparison.verdict_rows()]
    return Table(list(columns.values()), rows,
                 ["left", "left", "left", "right", "left", "left", "left", "left", "left"])


def _when(comparison: StoreComparison) -> tuple[Table | None, list[dict[str, Any]]]:
    """The "when" table (one row per pair and metric) and, per pair, its QL window table."""
    if not comparison.when:
        return None, []
    rows = [[r["pair"] if r["first"] else "", *(r[k] for k in list(WHEN_COLUMNS)[1:])]
            for r in comparison.when_rows()]
    table = Table(list(WHEN_COLUMNS.values()), rows, ["left"] * len(WHEN_COLUMNS))
    pairs = []
    for i, pw in enumerate(comparison.when):
        windows = comparison.window_rows(pw)
        if not windows:
            continue
        pairs.append({"title": f"{pw.better} vs {pw.worse}: QL per {'refit window' if pw.blocks == 'windows' else 'month'}",
                      "table": Table(list(WINDOW_COLUMNS.values()), [[r[k] for k in WINDOW_COLUMNS] for r in windows],
                                     ["left", "left", "left", "right", "left", "right"]),
                      "figure": f"when_{i}"})
    return table, pairs


def _summary_table(comparison: StoreComparison, columns: Sequence[tuple[str, str]], digits: int) -> Table:
    rows = [[r["pipeline"], *(sig(r.get(c), digits) if c != "runs" else str(r.get(c)) for c, _ in columns)]
            for r in comparison.summary.to_dict(orient="records")]
    return _table(["pipeline", *(h for _, h in columns)], rows)


def _losses(comparison: StoreComparison) -> Table:
    unit = comparison.label.loss_unit
    cols = [("runs", "runs"), ("ql_mean", f"QL mean ({unit})"), ("ql_std", "QL std"),
            ("ql_scored_mean", "QL 2..K mean"), ("ql_scored_std", "QL 2..K std"), ("cql_mean", "CQL mean"),
            ("cql_std", "CQL std"), ("std_ratio", "std ratio CQL / QL 2..K"), ("seed_budget", "seed budget")]
    return _summary_table(comparison, cols, 4)


def _ic(comparison: StoreComparison) -> Table | None:
    if "ic_mean" not in comparison.summary.columns:
        return None
    cols = [("ic_mean", "IC mean"), ("ic_std", "IC std"), ("icir_mean", "ICIR mean"), ("icir_std", "ICIR std"),
            ("rank_ic_mean", "Rank IC mean"), ("rank_ic_std", "Rank IC std")]
    return _summary_table(comparison, cols, 3)


def _portfolio(comparison: StoreComparison) -> tuple[Table | None, str, list[str]]:
    """The portfolio rows (mean ± std [interval] over seeds), the heading saying what they are, a scope line per
    pipeline when their backtests differ."""
    from rolling_calib.analysis.portfolio import FIGURE_TITLES
    from rolling_calib.core.portfolio import RISK_FIELDS

    p = comparison.portfolio
    if p is None or not p.rows:
        return None, "", []

    def shown(figure: str, x: Any) -> str:
        if x is None or not pd.notna(x):
            return "n/a"
        return f"{x:.3f}" if figure == "information_ratio" else f"{x:.2%}"

    rows = [[r["pipeline"], r["cost"], str(r["n_seeds"]), str(r["days"]),
             *(f"{shown(f, r[f]['mean'])} ± {shown(f, r[f]['std'])} [{shown(f, r[f]['ci_low'])}, "
               f"{shown(f, r[f]['ci_high'])}]" for f in RISK_FIELDS)] for r in p.rows]
    table = _table(["pipeline", "cost", "seeds", "days", *(FIGURE_TITLES[f] for f in RISK_FIELDS)], rows, left=2)
    heading = (f"{p.scope()}. Each figure: mean ± std over seeds [{p.confidence:.0%} Student-t interval over seeds "
               "on these days: another seed, the same market]; the verdicts above on the daily excess return add the "
               "market's future.")
    scopes = [f"{n}: {p.scope(n)}" for n in p.pipelines] if len({p.scope(n) for n in p.pipelines}) > 1 else []
    return table, heading, scopes


def _accuracies(comparison: StoreComparison) -> tuple[Table | None, list[str]]:
    """The pairwise accuracies of the pairs where they mean something, and a reason per other pair."""
    shown_pairs = [p for p in comparison.pairs if comparison.accuracies_shown(p) is None]
    hidden = [f"{p.better} vs {p.worse}: not shown because {comparison.accuracies_shown(p)}."
              for p in comparison.pairs if comparison.accuracies_shown(p) is not None]
    if not shown_pairs:
        return None, hidden
    metrics = [m for m in COMPARED_METRICS if all(m in p.accuracies for p in shown_pairs)]
    rows = [[p.better, p.worse, *(f"{p.accuracies[m].accuracy:.3f} [{p.accuracies[m].ci_low:.3f}, "
                                  f"{p.accuracies[m].ci_high:.3f}]" for m in metrics)] for p in shown_pairs]
    return _table(["better by QL", "other", *(f"Acc {title(m)}" for m in metrics)], rows, left=2), hidden


def _provenance(scores: StoreScores) -> tuple[Table | None, str]:
    """Schedule table (from the first scored pipeline) and a provenance line, read from the manifest."""
    from rolling_calib.execution import store as st

    try:
        manifest = st.Store.open(scores.store).manifest
    except st.NoManifestError as exc:  # a corrupt manifest raises: only an absent one is reported
        warnings.warn(f"report without provenance: {exc}", stacklevel=3)
        return None, "No provenance: the store has no manifest, so schedule, config hashes and versions are unknown."
    entry = manifest.pipelines.get(scores.pipelines[0]) if scores.pipelines else None
    windows = entry.windows if entry is not None else ()
    if not windows or not manifest.versions:
        missing = ", ".join(n for n, ok in (("schedule", windows), ("versions", manifest.versions)) if not ok)
        warnings.warn(f"report: the manifest of {scores.store.name} records no {missing}", stacklevel=3)

    def seg(v: Any) -> str:  # dates only: the bars' times are in the manifest
        return "none" if v is None else f"{v.start:%Y-%m-%d} .. {v.end:%Y-%m-%d}"

    rows = [[str(w.index), seg(w.fit), seg(w.train), seg(w.valid), seg(w.test)] for w in windows]
    hashes = ", ".join(f"{name} {e.config_hash}" for name, e in manifest.pipelines.items() if name in scores.pipelines)
    versions = ", ".join(f"{k} {v}" for k, v in sorted(manifest.versions.items()))
    mode = entry.mode if entry is not None and entry.mode is not None else "?"
    line = f"Mode: {mode}. Config hashes: {hashes}. Versions: {versions or 'not recorded'}."
    table = _table(["window", "fit", "train", "valid", "test"], rows) if rows else None
    return table, line


def _definitions(scores: StoreScores, comparison: StoreComparison) -> list[str]:
    cal = scores.calibration
    scored = ("scores every period (each window's bias comes from its own validation predictions)"
              if cal.source == "validation" else "scores periods 2..K (period 1 only supplies the first bias)")
    return [
        f"QL: the plain quadratic loss of the {scores.label.describe()} ({scores.label.loss_unit}), over every "
        "evaluation period. QL 2..K: the same loss on the rows CQL scores.",
        f"CQL: each period's predictions shifted by a bias fitted elsewhere ({cal.describe()}); it {scored} "
        "(docs/method.md §2.2).",
        f"Verdict: at {comparison.confidence:.0%}, the difference of means (first pipeline minus second) with an "
        + ("interval over seeds and the market's future: the seeds' part from the runs (their day-to-day noise "
           "included), the market-time part from the long-run variance of the pipelines' common daily difference "
           "with the seeds' noise removed (month blocks where it drifts), Student t with Welch-Satterthwaite degrees "
           "of freedom" if comparison.target == "future" else
           "interval over seeds on the evaluated days (paired t on run means): a claim about these days, whose "
           "level holds under drift")
        + "; better or worse when the interval excludes 0, else undetermined (docs/method.md §5; its error rates "
        "on data like these: bench/verdict_calibration.py).",
        "Beside it, the other question: the claim about the market's future holds only if the market's drift is "
        "shorter than the horizon its interval sees (the Horizon line); under regimes of months it decides up to 24% "
        "of identical pairs at 95% (docs/verdict_calibration.md).",
        "When: the verdict over seeds inside each refit window (or month), the windows decided together under "
        "Holm's family-wise control; across windows, Ibragimov-Mueller's t over the windows' differences with the "
        "seeds' offsets that every window shares counted, on the odd- and the even-numbered windows apart at half "
        "the error each (a claim about a new window, assuming every regime of the drift is shorter than one window; "
        "not made with fewer than 4 windows); fluctuation, the rolling mean of the seed-averaged differential against a simultaneous band "
        "(Giacomini and Rossi 2010, the seeds' noise counted): a warning with the date it left the band, never a "
        "verdict.",
        "Uncertainty: the source that dominates the interval's variance (its share). Pairing: how much comparing "
        "seed i with seed i narrowed the interval. Seeds to decide: seeds per pipeline that give an 80% chance to "
        "decide if the true gap is the measured one. The Diebold-Mariano p-value (verdicts.csv) tests the "
        "seed-averaged daily differential only: it ignores persistent seed offsets, so it is not the verdict's.",
        "IC, Rank IC: mean over test dates of the cross-sectional Pearson / Spearman correlation of prediction and "
        "label; ICIR: mean / std of the daily IC. Higher is better.",
        "Excess return (w/ cost): the daily return of the workflow's backtest (its PortAnaRecord config run by Qlib "
        "once per seed over the joined windows) minus the benchmark's (minus the trading cost); higher is better. "
        "Annualized excess return, information ratio and max drawdown: Qlib's risk_analysis of that daily series "
        "per seed, then mean, std and Student-t interval over seeds.",
        "Pairwise accuracy (probability of improvement): the share of (seed of A, seed of B) pairs ranked like the "
        f"ground truth (QL means); {comparison.confidence:.0%} percentile bootstrap over seeds, "
        f"{comparison.resampling.describe()} (docs/method.md §1).",
        "Std ratio: std over seeds of CQL / of QL 2..K (same rows). Seed budget: runs of QL 2..K needed to reach the "
        "standard error CQL has with the runs at hand.",
    ]


def _figure_entries(names: Sequence[str], pairs: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
    out = []
    for name in names:
        prefix, _, index = name.partition("_")
        title, caption = _FIGURES[prefix]
        if index:
            a, b = pairs[int(index)]
            title = f"{title}: {a} vs {b}"
        out.append({"name": name, "file": f"{name}.png", "title": title, "caption": caption})
    return out


def report_title(scores: StoreScores, case: str | None = None) -> str:
    """The report's title: its case (when given) or pipelines, and the label scored against, with its unit.

    >>> from rolling_calib.core.label import Label
    >>> s = StoreScores(store=Path("s"), runs=pd.DataFrame({"pipeline": ["a", "b"]}), periods=pd.DataFrame(),
    ...                 label=Label(kind="learn", processors=("CSRankNorm",), unit="normalised"))
    >>> report_title(s), report_title(s, "Case 2: CSRankNorm labels")
    ('rolling-calib report: a, b (learned label, normalised)', 'Case 2: CSRankNorm labels (learned label, normalised)')
    """
    which = "raw label" if scores.label.kind == "raw" else "learned label"
    unit = {"return": "plain return", "unknown": "unit unknown"}.get(scores.label.unit, scores.label.unit)
    head = case if case else f"rolling-calib report: {', '.join(scores.pipelines)}"
    return f"{head} ({which}, {unit})"


def report_context(scores: StoreScores, comparison: StoreComparison, *, out_dir: str | Path,
                   figures: Sequence[str] = (), diagnosis: Any = None, title: str | None = None) -> dict[str, Any]:
    """Everything the report says, as plain values (strings, lists, :class:`Table`), for the templates.

    Parameters
    ----------
    scores, comparison :
        What ``compare`` computed (the report never recomputes them).
    out_dir : path
        The report's directory: paths in the text are relative to it.
    figures : sequence of str
        Names of the figures written beside the report (``improvement``, ``paired_0``, ...).
    diagnosis : StoreDiagnosis, optional
        Adds each pipeline's "Can calibration help here?" assessment.
    """
    out = Path(out_dir)
    store = Path(scores.store)

    def rel(text: str) -> str:
        return _relative(str(text), store, out)

    accuracy, hidden = _accuracies(comparison)
    portfolio, portfolio_heading, portfolio_scopes = _portfolio(comparison)
    schedule, provenance = _provenance(scores)
    sequential, sequential_line = _sequential(store, scores.seeds_per_pipeline)
    assessments = [] if diagnosis is None else [
        {"pipeline": d.pipeline, "text": rel(d.assessment.text if d.assessment is not None else d.verdict)}
        for d in diagnosis.pipelines]
    when_table, when_pairs = _when(comparison)
    when_names = {f"when_{i}" for i in range(len(comparison.pairs))}
    entries = _figure_entries(figures, [(p.better, p.worse) for p in comparison.pairs])
    return {
        "title": report_title(scores, title),
        "headline": comparison.headline() if comparison.verdicts else "",
        "scope": _scope(scores, out, comparison),
        "verdict_heading": f"Verdicts at {comparison.confidence:.0%}, {comparison.claim()}",
        "interval_over": ("over seeds and the market's future (target future)" if comparison.target == "future"
                          else "over seeds, on the evaluated days (target period)"),
        "verdicts": _verdicts(comparison) if comparison.verdicts else None,
        "beside": beside_note(comparison.target),
        "horizon": horizon_note(comparison.verdicts) + (
            f" Excess return (w/ cost): of the backtest {comparison.portfolio.scope()}."
            if comparison.portfolio is not None and comparison.portfolio.rows else ""),
        "when": when_table,
        "when_pairs": [{**p, "figure": next((e for e in entries if e["name"] == p["figure"]), None)}
                       for p in when_pairs],
        "when_note": comparison.when_note() if comparison.when else "",
        "warnings": [{"kind": w.kind, "message": rel(w.message)} for w in comparison.warnings],
        "sequential": sequential,
        "sequential_line": sequential_line,
        "assessments": assessments,
        "ic": _ic(comparison),
        "portfolio": portfolio,
        "portfolio_heading": portfolio_heading,
        "portfolio_scopes": portfolio_scopes,
        "losses": _losses(comparison),
        "loss_unit": comparison.label.loss_unit,
        "accuracies": accuracy,
        "accuracies_hidden": hidden,
        "accuracy_heading": (f"P(a run of the better-by-QL pipeline scores better than a run of the other), "
                             f"{comparison.confidence:.0%} percentile bootstrap over seeds ({comparison.n_boot} "
                             f"resamples, seed {comparison.seed})"),
        "figures": [e for e in entries if e["name"] not in when_names],
        "schedule": schedule,
        "provenance": rel(provenance),
        "csv": [{"file": name, "what": what} for name, what in CSV_FILES.items()],
        "definitions": _definitions(scores, comparison),
        "caveat": CAVEAT,
        "notes": [rel(n) for n in comparison.notes],
        "incomplete": [rel(s) for s in scores.incomplete],
    }


# --------------------------------------------------------------------------- rendering
def _environment(*, html: bool) -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("rolling_calib.reporting", "templates"),
                              autoescape=html, undefined=jinja2.StrictUndefined, trim_blocks=True,
                              lstrip_blocks=True, keep_trailing_newline=True)


def render_markdown(context: Mapping[str, Any]) -> str:
    """``report.md`` from :func:`report_context` (figures referenced as the PNG files beside it)."""
    return _environment(html=False).get_template("report.md.j2").render(**context)


def render_html(context: Mapping[str, Any], *, pngs: Mapping[str, bytes]) -> str:
    """``report.html`` from :func:`report_context`, self-contained: the figures embedded as base64 PNG."""
    images = {name: base64.b64encode(data).decode("ascii") for name, data in pngs.items()}
    return _environment(html=True).get_template("report.html.j2").render(**context, images=images)


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    return buf.getvalue()


def _tables(scores: StoreScores, comparison: StoreComparison) -> dict[str, pd.DataFrame]:
    """The CSV tables (:data:`CSV_FILES`) as frames, numbers unrounded."""
    rows = []
    for pv in comparison.verdicts:
        for metric, v in pv.verdicts.items():
            d = v.to_dict()
            rows.append({"better_by_ql": pv.better, "worse_by_ql": pv.worse, "metric": metric,
                         "outcome": v.outcome, "winner": v.winner or "", "difference": v.difference,
                         "ci_low": v.ci_low, "ci_high": v.ci_high,
                         "unit": METRIC_TABLE[metric].unit(comparison.label),
                         "confidence": v.confidence, "dominant_uncertainty": v.dominant_uncertainty,
                         "var_seeds": v.var_seeds, "var_time": v.var_time, "paired": v.paired,
                         "pairing_narrowing": d["pairing_narrowing"], "target": v.target,
                         "degrees_of_freedom": v.degrees_of_freedom, "bandwidth": v.variance.bandwidth,
                         "drift": v.drift, "drift_p": v.variance.drift_p,
                         "dm_statistic": v.diebold_mariano.statistic, "dm_p_value": v.diebold_mariano.p_value,
                         "seeds_needed": v.seeds_needed.n, "n_times": v.n_times,
                         "first_day": v.days[0], "last_day": v.days[1],
                         **_beside_columns(pv.beside.get(metric))})
    warn = [{"kind": w.kind, "pipelines": " ".join(w.pipelines), "message": w.message} for w in comparison.warnings]
    windows = [{"better_by_ql": pw.better, "worse_by_ql": pw.worse, "metric": metric, "blocks": w.blocks,
                **{k: v for k, v in win.to_dict().items() if k != "n_seeds"},
                "unit": METRIC_TABLE[metric].unit(comparison.label)}
               for pw in comparison.when for metric, w in pw.whens.items() for win in w.windows]
    return {"verdicts.csv": pd.DataFrame(rows), "warnings.csv": pd.DataFrame(warn, columns=["kind", "pipelines", "message"]),
            "when.csv": pd.DataFrame(windows),
            "pipelines.csv": comparison.summary, "runs.csv": scores.runs, "periods.csv": scores.periods}


def _beside_columns(v: Any) -> dict[str, Any]:
    """The other target's verdict as CSV columns (``beside_target``, ``beside_outcome``, ...)."""
    if v is None:
        return {}
    return {"beside_target": v.target, "beside_outcome": v.outcome, "beside_ci_low": v.ci_low,
            "beside_ci_high": v.ci_high}


def write_report(scores: StoreScores, comparison: StoreComparison, out_dir: str | Path, *,
                 diagnosis: Any = None, title: str | None = None) -> dict[str, Path]:
    """Write ``report.html``, ``report.md``, one PNG per figure and the CSV tables into ``out_dir``.

    ``diagnosis`` (:func:`rolling_calib.analysis.diagnostics.diagnose_store`) adds each pipeline's
    assessment (can calibration help?), the seed offsets and the paired per-seed differences.
    ``title``: what the report is (the demo's case); the label scored against is added (:func:`report_title`).

    Returns
    -------
    dict
        ``{"html", "markdown", "<figure>_png"..., "verdicts_csv", "warnings_csv", "pipelines_csv",
        "runs_csv", "periods_csv"}`` -> path.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pngs = {name: _png(fig) for name, fig in make_figures(scores, comparison, diagnosis=diagnosis).items()}
    paths: dict[str, Path] = {}
    for name, data in pngs.items():
        paths[f"{name}_png"] = atomic_write_bytes(out / f"{name}.png", data)
    for name, frame in _tables(scores, comparison).items():
        paths[f"{name.removesuffix('.csv')}_csv"] = atomic_write_text(out / name, frame.to_csv(index=False))
    context = report_context(scores, comparison, out_dir=out, figures=list(pngs), diagnosis=diagnosis, title=title)
    paths["markdown"] = atomic_write_text(out / "report.md", render_markdown(context))
    paths["html"] = atomic_write_text(out / "report.html", render_html(context, pngs=pngs))
    return paths
