"""Compare the pipelines of a scored store: verdicts first, then the numbers behind them.

:func:`compare_store` turns :class:`~rolling_calib.analysis.scoring.StoreScores` into the
``compare`` command's result:

* a **headline** (:meth:`StoreComparison.headline`): one line that answers which configuration is
  better by QL, by how much and how sure;
* per pair, the **verdict** of every metric (QL, CQL, IC, Rank IC): better, worse or
  undetermined at the question's confidence, with the difference of means, its interval over
  seeds on the evaluated days (the default :class:`~rolling_calib.core.question.Question`'s ``target``,
  named with its days; or over seeds *and* the market's future), the dominant source of uncertainty,
  how much pairing the seeds narrowed the interval and the seeds needed to decide; beside it the other
  target's verdict (for the period headline: the claim about the market's future, as the assumption
  it rests on: that the market's drift is shorter than the horizon its interval sees) (the
  Diebold-Mariano test is kept as a time-series detail) (:mod:`rolling_calib.analysis.verdicts`,
  :mod:`rolling_calib.core.verdict`);
* per pair and metric, **when**: the period verdict inside each refit window (or month), Holm
  across them, the Ibragimov-Mueller test across windows (odd- and even-numbered windows apart) and the
  fluctuation warning
  (:mod:`rolling_calib.analysis.when`, :mod:`rolling_calib.core.when`);
* the **warnings** of the guards (scale mismatch, degenerate seeds, no skill, an undetermined
  ground truth), each measured and each with what to do;
* per pipeline the mean and standard deviation over seeds of QL, QL over CQL's periods, CQL and
  the IC metrics, the std ratio CQL / QL and the seed budget;
* per pair the pairwise accuracy of every metric with bootstrap intervals over seeds (direction
  by mean QL; the :class:`~rolling_calib.core.resampling.Resampling`'s replicates and seed) -- numbers that mean
  something only when the ground truth is determined and the seeds differ: :meth:`StoreComparison.format` shows
  them only then;
* where the workflow has a backtest, per pipeline its portfolio row: annualized excess return,
  information ratio and max drawdown, without and with cost, as mean and std over seeds with a
  Student-t interval (:mod:`rolling_calib.analysis.portfolio`), with the strategy, benchmark, cost
  model and accumulation ``mode`` beside them; the daily excess returns also have verdicts.

Example
-------
>>> from rolling_calib.analysis.scoring import score_store
>>> comparison = compare_store(score_store(example_store), resampling=Resampling(n_boot=200))
>>> sorted(comparison.summary["pipeline"])
['wd0', 'wd1e-3']
>>> sorted(comparison.verdicts[0].verdicts)
['cql', 'ic', 'ql', 'rank_ic']
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from rolling_calib.analysis.portfolio import FIGURE_TITLES, PortfolioSummary, portfolio_summary, summary_columns
from rolling_calib.analysis.scoring import IC_METRICS, METRICS, StoreScores
from rolling_calib.analysis.verdicts import (
    CLAIMS,
    GuardWarning,
    PairVerdicts,
    decide_pair,
    guard_warnings,
    horizon_days,
    stopping_points,
)
from rolling_calib.analysis.when import PairWhen, fluctuation_warnings, month_starts, refit_starts, when_pair
from rolling_calib.core import pairwise as cmp
from rolling_calib.core.calibration import Calibration
from rolling_calib.core.label import Label, describe_choice
from rolling_calib.core.metric_table import BACKTEST_METRICS, COMPARED_METRICS, METRIC_TABLE, title
from rolling_calib.core.portfolio import RISK_FIELDS
from rolling_calib.core.validation import ACCUMULATION as ACCUMULATION_MODE
from rolling_calib.core.tables import format_table, sig
from rolling_calib.core.question import DEFAULT_QUESTION, QUESTION, Question
from rolling_calib.core.resampling import DEFAULT, RESAMPLING, Resampling
from rolling_calib.core.validation import WHEN, validate_params
from rolling_calib.core.when import BLOCK_WORDS
from rolling_calib.core.verdict import Verdict
from rolling_calib.core.jsonable import jsonable

__all__ = ["VERDICT_COLUMNS", "StoreComparison", "compare_store", "horizon_note", "verdict_columns"]

#: The verdict table's columns (period headline): key of :meth:`StoreComparison.verdict_rows` -> heading.
VERDICT_COLUMNS = {"pair": "pair", "metric": "metric", "verdict": "verdict", "difference": "difference",
                   "interval": "interval", "beside": "future, if drift < horizon", "uncertainty": "uncertainty",
                   "pairing": "pairing", "seeds": "seeds to decide"}
#: Heading of the column beside the headline verdict, by the headline's target.
BESIDE_HEADINGS = {"period": "future, if drift < horizon", "future": "on these days"}
#: The "when" table's columns: key of :meth:`StoreComparison.when_rows` -> heading.
WHEN_COLUMNS = {"pair": "pair", "metric": "metric", "windows": "per window (Holm)", "across": "across windows",
                "fluctuation": "fluctuation"}
#: A window table's columns: key of :meth:`StoreComparison.window_rows` -> heading.
WINDOW_COLUMNS = {"window": "window", "days": "days", "verdict": "verdict", "difference": "difference",
                  "interval": "interval (Holm level)", "p": "p (Holm)"}


def verdict_columns(target: str) -> dict[str, str]:
    """:data:`VERDICT_COLUMNS` with the heading of the column beside the headline for ``target``.

    >>> verdict_columns("future")["beside"]
    'on these days'
    """
    return {**VERDICT_COLUMNS, "beside": BESIDE_HEADINGS[target]}


@dataclass
class StoreComparison:
    """The ``compare`` command's result.

    Attributes
    ----------
    summary : DataFrame
        Per pipeline: ``runs``, ``<metric>_mean`` and ``<metric>_std`` for ql, ql_scored
        and cql (and the IC metrics), ``std_ratio`` (std CQL / std QL over the same rows, months
        2..K) and ``seed_budget`` (runs of that QL needed to match the standard error CQL reaches
        with ``runs`` runs: ``runs * (std_QL / std_CQL)^2``).
    pairs : list of PairComparison
        Direction by ``ql``; accuracy of ql, ql_scored, cql and the IC metrics with bootstrap intervals.
    verdicts : list of PairVerdicts
        One per pair, in the same order (None when verdicts were not computed).
    warnings : list of GuardWarning
        The guards that fired (with ``performance_changed``: a fluctuation test that fired).
    when : list of PairWhen
        One per pair, in the same order: when each was better (per window, across windows, fluctuation).
    calibration : Calibration
        The calibration rule of the scores; ``label`` : Label, the label they were scored against.
    question : Question
        What every verdict and interval answers: the target and the confidence (recorded once).
    resampling : Resampling
        The bootstrap settings of the pairwise accuracies' intervals (recorded once).
    portfolio : PortfolioSummary or None
        Per pipeline with a backtest, annualized excess return, information ratio and max drawdown
        over seeds, without and with cost (None: no pipeline has one).
    """

    summary: pd.DataFrame
    pairs: list[cmp.PairComparison]
    resampling: Resampling = DEFAULT
    question: Question = DEFAULT_QUESTION
    calibration: Calibration = field(default_factory=Calibration)
    label: Label = field(default_factory=lambda: Label(kind="raw"))
    incomplete: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    verdicts: list[PairVerdicts] = field(default_factory=list)
    label_choice: str = ""  # the label asked for (auto, raw, learn): the headline says why auto chose ``label``
    warnings: list[GuardWarning] = field(default_factory=list)
    when: list[PairWhen] = field(default_factory=list)
    portfolio: PortfolioSummary | None = None

    @property
    def confidence(self) -> float:
        """The question's confidence: the level of every interval."""
        return self.question.confidence

    @property
    def n_boot(self) -> int:
        return self.resampling.n_boot

    @property
    def seed(self) -> int:
        return self.resampling.seed

    @property
    def target(self) -> str:
        """The question's target: ``"future"`` or ``"period"``."""
        return self.question.target

    def verdicts_of(self, pair: cmp.PairComparison) -> PairVerdicts | None:
        """The verdicts of ``pair`` (None when not computed)."""
        for v in self.verdicts:
            if {v.better, v.worse} == {pair.better, pair.worse}:
                return v
        return None

    def accuracies_shown(self, pair: cmp.PairComparison) -> str | None:
        """None when the pair's pairwise accuracies mean something; else why they are not shown."""
        why = []
        verdict = self.verdicts_of(pair)
        if verdict is not None and not verdict.ground_truth_determined:
            why.append("the ground truth (QL) is undetermined")
        degenerate = [w.pipelines[0] for w in self.warnings if w.kind == "degenerate_seeds"
                      and w.pipelines[0] in (pair.better, pair.worse)]
        if degenerate:
            have = "has" if len(degenerate) == 1 else "have"
            why.append(f"{' and '.join(degenerate)} {have} no seed variance (degenerate seeds)")
        constant = [w.pipelines[0] for w in self.warnings if w.kind == "constant_predictions"
                    and w.pipelines[0] in (pair.better, pair.worse)]
        if constant:
            why.append(f"{' and '.join(constant)} {'predicts' if len(constant) == 1 else 'predict'} a constant "
                       f"(constant predictions)")
        if any(w.kind == "identical_pipelines" and set(w.pipelines) == {pair.better, pair.worse} for w in self.warnings):
            why.append("the two pipelines rank the same rows the same way (identical pipelines)")
        return " and ".join(why) or None

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (for ``--json``): the rule's ``period``, ``bias``, ``source`` and the ``label`` kind first.

        Each pair gains ``ground_truth_determined`` and ``verdicts``; ``warnings`` lists the guards that fired.
        """
        pairs = []
        for p in self.pairs:
            entry = jsonable(p.to_dict())
            verdict = self.verdicts_of(p)
            if verdict is not None:
                entry.update(jsonable(verdict.to_dict()))
                for metric in BACKTEST_METRICS:   # what the excess return is measured against, beside its verdict
                    if metric in entry["verdicts"] and self.portfolio is not None:
                        entry["verdicts"][metric]["backtest"] = self.portfolio.scope()
            pairs.append(entry)
        return {
            "headline": self.headline(),
            "question": {**self.question.to_dict(), "claim": CLAIMS[self.target]},
            "period": self.calibration.period,
            "bias": self.calibration.bias,
            "source": self.calibration.source,
            "label": self.label.kind,
            "bootstrap": self.resampling.to_dict(),
            "pipelines": [jsonable(rec) for rec in self.summary.to_dict(orient="records")],
            "pairs": pairs,
            "when": [jsonable(w.to_dict()) for w in self.when],
            "incomplete_runs": list(self.incomplete),
            "notes": list(self.notes),
            "warnings": [w.to_dict() for w in self.warnings],
            "label_description": self.label.to_dict(),
            "loss_unit": self.label.loss_unit,
            "portfolio": self.portfolio.to_dict() if self.portfolio is not None else {},
        }

    # ----------------------------------------------------------------------- text
    def format_headline(self) -> str:
        """The answer alone, for the terminal: the top line, what was scored, the verdict table, when, the warnings."""
        lines = []
        if self.verdicts:
            lines += [self.headline(), ""]
        lines.append(f"Scored against the {describe_choice(self.label, self.label_choice)}; calibration: "
                     f"{self.calibration.describe()}.")
        if self.verdicts:
            lines += ["", self._verdict_table()]
        if self.when:
            lines += ["", self._when_text()]
        if self.warnings:
            lines += ["", "Warnings:"] + [f"- [{w.kind}] {w.message}" for w in self.warnings]
        return "\n".join(lines)

    def format(self) -> str:
        """Plain-text report for the terminal: verdicts, warnings, then the tables behind them."""
        unit = self.label.loss_unit
        lines = [self.format_headline()]
        lines += ["", f"Per pipeline (losses in {unit}; mean and std over seeds, ddof=1)", self._summary_table()]
        if "ic_mean" in self.summary.columns:
            lines += ["", "Ranking skill (mean over test dates of the cross-sectional correlation; higher is better)",
                      self._ic_table()]
        if self.portfolio is not None and self.portfolio.rows:
            lines += ["", self.format_portfolio()]
        lines.append("QL: all evaluation periods; QL 2..K: the periods CQL scores (same rows); std ratio = CQL std / "
                     "QL 2..K std; seed budget = runs of QL 2..K needed to reach the standard error CQL has.")
        if self.pairs:
            lines += ["", self._accuracy_table()]
        if self.incomplete:
            lines += ["", f"Left out {len(self.incomplete)} incomplete run(s):"] + [f"  {s}" for s in self.incomplete]
        if self.notes:
            lines += [""] + [f"Note: {note}" for note in self.notes]
        return "\n".join(lines)

    # ----------------------------------------------------------------------- the answer
    def days_text(self) -> str:
        """The days the verdicts are about: ``"these 82 days (2018-01-02..2018-04-30)"`` (QL's, else any metric's)."""
        found = [v for pv in self.verdicts for m, v in pv.verdicts.items() if m == "ql"] or \
            [v for pv in self.verdicts for v in pv.verdicts.values()]
        if not found:
            return "the evaluated days"
        n = max(v.n_times for v in found)
        first = min(str(v.days[0]) for v in found)
        last = max(str(v.days[1]) for v in found)
        return f"these {n} days ({first}..{last})" if first != "None" else f"these {n} days"

    def claim(self) -> str:
        """What the headline verdicts claim, with their days: ``"over seeds, on these 82 days (...)"``."""
        if self.target == "period":
            return f"over seeds, on {self.days_text()}"
        return f"{CLAIMS['future']} (the evaluated days: {self.days_text()})"

    def headline(self) -> str:
        """One line that answers: which configuration is better by QL (the ground truth), by how much, how sure.

        One pair: the winner, the gap (and its share of the other's QL), the interval, the claim and its
        days, and in how many refit windows it was better. Several: the pipeline better than every other
        it was compared with, else how many pairs are decided. Undetermined: the gap, its interval and
        the seeds that would decide it.
        """
        ql = [(pv, pv.verdicts["ql"]) for pv in self.verdicts if "ql" in pv.verdicts]
        how_sure = f"at {self.confidence:.0%} {self.claim()}"
        if not ql:
            return f"No pair has QL verdicts ({how_sure})."
        unit = self._unit("ql")
        if len(ql) == 1:
            pv, v = ql[0]
            if v.winner is None:
                return (f"Neither {pv.better} nor {pv.worse} is shown better by QL: {pv.better} - {pv.worse} = "
                        f"{_with_unit(v.difference, unit)}, interval "
                        f"{_with_unit(f'[{sig(v.ci_low)}, {sig(v.ci_high)}]', unit)} {how_sure}; {_seeds_phrase(v)}.")
            return (f"{v.winner} is better than {_loser(v)} by QL: lower by {_gap(v, unit)}, {self.confidence:.0%} "
                    f"interval {_abs_interval(v)} {unit}, {self.claim()}{self._window_phrase(pv, v.winner)}.")
        names = list(dict.fromkeys(n for pv, _ in ql for n in (pv.better, pv.worse)))
        wins = {n: [v for pv, v in ql if v.winner == n] for n in names}
        compared = {n: [v for pv, v in ql if n in (pv.better, pv.worse)] for n in names}
        best = [n for n in names if wins[n] and len(wins[n]) == len(compared[n])]
        if len(best) == 1 and len(compared[best[0]]) == len(names) - 1:
            n = best[0]
            parts = "; ".join(f"than {_loser(v)} by {_gap(v, unit)} {_abs_interval(v)}" for v in wins[n][:4])
            return f"{n} is the best of the {len(names)} by QL: lower {parts}; {how_sure}."
        decided = [v for _, v in ql if v.winner is not None]
        shown = "; ".join(f"{v.winner} better than {_loser(v)} by {_gap(v, unit)}" for v in decided[:3])
        return (f"No pipeline is better than every other by QL {how_sure}: {len(decided)} of {len(ql)} pairs "
                f"decided" + (f" ({shown}{'; ...' if len(decided) > 3 else ''})" if decided else "") + ".")

    def _window_phrase(self, pv: PairVerdicts, winner: str) -> str:
        w = self.when_of(pv)
        if w is None or "ql" not in w.whens or not w.whens["ql"].windows:
            return ""
        q = w.whens["ql"]
        better, worse, _ = q.counts()
        wins = better if winner == pv.better else worse
        return f"; better in {wins} of {len(q.windows)} {BLOCK_WORDS[q.blocks][1]}"

    def when_of(self, pv: PairVerdicts | cmp.PairComparison) -> PairWhen | None:
        """The "when" of a pair (None when not computed)."""
        for w in self.when:
            if {w.better, w.worse} == {pv.better, pv.worse}:
                return w
        return None

    def _verdict_table(self) -> str:
        over = ("over seeds and the market's future (seed noise counted once, market time by a long-run variance)"
                if self.target == "future" else "over seeds, on the evaluated days (the runs' t interval)")
        head = (f"Verdicts at {self.confidence:.0%}, {self.claim()} (difference = mean of the first minus the "
                f"second pipeline; interval {over})")
        columns = verdict_columns(self.target)
        rows = [[row["pair"] if row["first"] else "", *(row[k] for k in list(columns)[1:])]
                for row in self.verdict_rows()]
        table = format_table(rows, list(columns.values()),
                             align=["left", "left", "left", "right", "left", "left", "left", "left", "left"])
        foot = beside_note(self.target) + "\n" + (
            "uncertainty: the source that dominates the interval's variance (its share); pairing: how much "
            "comparing seed i with seed i narrowed the interval; seeds to decide: seeds per pipeline that give an 80% "
            "chance to decide if the true gap is the measured one (none suffices: the market-time part alone "
            "exceeds the gap).")
        drifts = sorted({f"{r['pair']} {r['metric']}" for r in self.verdict_rows() if r.get("drift")})
        if drifts:
            foot += ("\nDrift: the loss differential varies more at the scale of months than day to day for "
                     f"{', '.join(drifts)}; their market-time part comes from month blocks (wider).")
        horizon = horizon_note(self.verdicts)
        if horizon:
            foot += "\n" + horizon
        if self.portfolio is not None and any(m in pv.verdicts for pv in self.verdicts for m in BACKTEST_METRICS):
            foot += f"\nExcess return (w/ cost): the daily return minus the benchmark's (and the cost) of the backtest: " \
                    f"{self.portfolio.scope()}."
        return f"{head}\n{table}\n{foot}"

    def verdict_rows(self) -> list[dict[str, Any]]:
        """The cells of the verdict table, one dict per (pair, metric): the words ``compare`` prints.

        Keys: :data:`VERDICT_COLUMNS` (``pair``, ``metric``, ``verdict``, ``difference`` with the
        label's loss unit for QL and CQL, ``interval``, ``beside`` (the other target's verdict:
        for the period headline, the future claim if the drift is shorter than the horizon),
        ``uncertainty``, ``pairing``, ``seeds``), ``first`` (the pair's first metric) and ``drift``
        (the drift check fired).
        """
        rows = []
        for pv in self.verdicts:
            for k, (metric, v) in enumerate(pv.verdicts.items()):
                unit = self._unit(metric)
                rows.append({"pair": f"{pv.better} vs {pv.worse}", "first": k == 0,
                             "metric": title(metric), "verdict": _verdict_word(v),
                             "difference": _with_unit(v.difference, unit),
                             "interval": _with_unit(f"[{sig(v.ci_low)}, {sig(v.ci_high)}]", unit),
                             "beside": _beside(pv.beside.get(metric)),
                             "uncertainty": _uncertainty(v), "pairing": _pairing(v),
                             "seeds": _seeds(v), "drift": v.drift or bool(getattr(pv.beside.get(metric), "drift",
                                                                                  False))})
        return rows

    # ----------------------------------------------------------------------- when
    def when_rows(self) -> list[dict[str, Any]]:
        """One dict per (pair, metric) of :data:`WHEN_COLUMNS`: the consistency line, across windows, fluctuation."""
        rows = []
        for pw in self.when:
            for k, (metric, w) in enumerate(pw.whens.items()):
                f = w.fluctuation
                flux = ("n/a" if f is None else
                        f"changed: left the band at {f.left_at}" if f.fired else f"stable ({_p_text(f)})")
                a = w.across
                across = ("not enough windows" if a.outcome == "not enough windows" else
                          f"{a.winner} better" if a.winner else "undetermined")
                if a.outcome != "not enough windows":   # halves whose intervals do not overlap have none together
                    across += (f", {sig(a.mean)} [{sig(a.ci_low)}, {sig(a.ci_high)}]" if math.isfinite(a.ci_low) else
                               f", {sig(a.mean)} (the odd and even windows' intervals do not overlap)")
                rows.append({"pair": f"{pw.better} vs {pw.worse}", "first": k == 0, "metric": title(metric),
                             "windows": w.consistency(), "across": across, "fluctuation": flux})
        return rows

    def window_rows(self, pw: PairWhen, metric: str = "ql") -> list[dict[str, Any]]:
        """One dict per window of :data:`WINDOW_COLUMNS` for one pair and metric (QL by default)."""
        w = pw.whens.get(metric)
        if w is None:
            return []
        unit = self._unit(metric)
        return [{"window": v.label, "days": f"{v.start}..{v.end} ({v.n_times})",
                 "verdict": f"{v.winner} better" if v.winner else "undetermined",
                 "difference": _with_unit(v.difference, unit),
                 "interval": _with_unit(f"[{sig(v.ci_low)}, {sig(v.ci_high)}]", unit) + f" at {v.level:.1%}",
                 "p": f"{v.p_value:.3g} ({v.p_holm:.3g})"} for v in w.windows]

    def when_note(self) -> str:
        """What the "when" table means, in words."""
        blocks = {w.blocks for w in self.when}
        kind = BLOCK_WORDS[blocks.pop()][1] if len(blocks) == 1 else "blocks"
        return (f"When: per window, the verdict over seeds on that window's days, the family of {kind} decided at "
                f"{self.confidence:.0%} together (Holm: the chance of any false decision across them is at most "
                f"{1 - self.confidence:.0%}). Across windows: Ibragimov-Mueller's t test with each window's "
                "difference one observation and the seeds' offsets that every window shares counted, run on the "
                "odd- and on the even-numbered windows apart at half the error each (Bonferroni; at least 4 "
                "windows); it claims what to expect of a new window and assumes that every regime of the drift is "
                "shorter than one window (so windows two apart share none). Fluctuation: "
                "the rolling mean of the seed-averaged differential against a simultaneous band (Giacomini and "
                "Rossi 2010, seed noise counted): a warning when the relative performance changed, never a verdict.")

    def _when_text(self) -> str:
        rows = [[r["pair"] if r["first"] else "", *(r[k] for k in list(WHEN_COLUMNS)[1:])] for r in self.when_rows()]
        parts = ["When was each better?", format_table(rows, list(WHEN_COLUMNS.values()),
                                                      align=["left"] * len(WHEN_COLUMNS))]
        for pw in self.when:
            windows = self.window_rows(pw)
            if windows:
                parts += [f"{pw.better} vs {pw.worse}, QL per window:",
                          format_table([[r[k] for k in WINDOW_COLUMNS] for r in windows],
                                       list(WINDOW_COLUMNS.values()),
                                       align=["left", "left", "left", "right", "left", "right"])]
        parts.append(self.when_note())
        return "\n".join(parts)

    def _unit(self, metric: str) -> str:
        return METRIC_TABLE[metric].unit(self.label) if metric in METRIC_TABLE else ""

    def _summary_table(self) -> str:
        cols = [("runs", str), ("ql_mean", sig), ("ql_std", sig), ("ql_scored_mean", sig), ("ql_scored_std", sig),
                ("cql_mean", sig), ("cql_std", sig), ("std_ratio", lambda x: sig(x, 3)), ("seed_budget", lambda x: sig(x, 3))]
        heads = ["runs", "QL mean", "QL std", "QL 2..K mean", "QL 2..K std", "CQL mean", "CQL std", "std ratio",
                 "seed budget"]
        rows = [[r["pipeline"], *(r.get(c) for c, _ in cols)] for r in self.summary.to_dict(orient="records")]
        return format_table(rows, ["pipeline", *heads], formats=[str, *(f for _, f in cols)])

    def _ic_table(self) -> str:
        cols = ["ic_mean", "ic_std", "icir_mean", "icir_std", "rank_ic_mean", "rank_ic_std"]
        rows = [[r["pipeline"], *(r.get(c) for c in cols)] for r in self.summary.to_dict(orient="records")]
        return format_table(rows, ["pipeline", "IC mean", "IC std", "ICIR mean", "ICIR std", "Rank IC mean",
                                   "Rank IC std"], formats=[str, *([lambda x: sig(x, 3)] * 6)])

    def format_portfolio(self) -> str:
        """The portfolio rows as text: each figure's mean and std over seeds and its interval, with what it is about."""
        p = self.portfolio
        if p is None or not p.rows:
            return ""
        head = (f"Backtest over the joined windows ({p.scope()}); mean and std over seeds, {p.confidence:.0%} "
                f"Student-t interval over seeds on these days (another seed, the same market; the verdicts on the "
                f"daily excess return add the market's future)")
        rows = []
        for r in p.rows:
            cells = [r["pipeline"], r["cost"], str(r["n_seeds"]), str(r["days"])]
            for figure in RISK_FIELDS:
                f = r[figure]
                fmt = (lambda x: f"{x:.2%}") if figure != "information_ratio" else (lambda x: f"{x:.3f}")
                shown = lambda x: fmt(x) if x is not None and math.isfinite(x) else "n/a"  # noqa: E731
                cells.append(f"{shown(f['mean'])} ± {shown(f['std'])} [{shown(f['ci_low'])}, {shown(f['ci_high'])}]")
            rows.append(cells)
        table = format_table(rows, ["pipeline", "cost", "seeds", "days", *(FIGURE_TITLES[f] for f in RISK_FIELDS)])
        lines = [head, table]
        if len({p.scope(n) for n in p.pipelines}) > 1:
            lines += [f"  {n}: {p.scope(n)}" for n in p.pipelines]
        return "\n".join(lines)

    def _accuracy_table(self) -> str:
        shown = [m for m in COMPARED_METRICS if all(m in p.accuracies for p in self.pairs)]
        rows = []
        for p in self.pairs:
            why = self.accuracies_shown(p)
            if why is not None:
                rows.append([p.better, p.worse, *(["not shown"] * len(shown))])
                continue
            rows.append([p.better, p.worse, *(f"{p.accuracies[m].accuracy:.3f} [{p.accuracies[m].ci_low:.3f}, "
                                              f"{p.accuracies[m].ci_high:.3f}]" for m in shown)])
        head = (f"Pairwise accuracy: P(a run of the better-by-QL pipeline scores better than a run of the other), "
                f"{self.confidence:.0%} percentile bootstrap over seeds ({self.n_boot} resamples, seed {self.seed})")
        table = format_table(rows, ["better by QL", "other", *(f"Acc {title(m)}" for m in shown)])
        hidden = [f"{p.better} vs {p.worse}: not shown because {self.accuracies_shown(p)}." for p in self.pairs
                  if self.accuracies_shown(p) is not None]
        return "\n".join([head, table, *hidden])


def _with_unit(value: float | str, unit: str) -> str:
    return f"{value if isinstance(value, str) else sig(value)} {unit}".rstrip()


def horizon_note(verdicts: Any) -> str:
    """What a future-target verdict cannot see, from the verdicts' own figures: the longest persistence its
    market-time part measured (the Bartlett bandwidth, or the month blocks where the drift check fired) against
    the days it had. Regimes longer than that shift the pair's advantage without widening the interval; the
    calibration harness measured up to 24% false decisions at 95% on such drift, and no estimator from the
    evaluated days alone did better (``bench/drift_identifiability.py``). The future verdicts are the headline
    ones (``--target future``) or those beside a period headline (``PairVerdicts.beside``).

    >>> horizon_note([])
    ''
    """
    seen = []
    for pv in verdicts:
        for v in [*pv.verdicts.values(), *getattr(pv, "beside", {}).values()]:
            horizon = horizon_days(v)
            if horizon is not None:
                seen.append((horizon, v.n_times))
    if not seen:
        return ""
    horizon = max(h for h, _ in seen)
    days = min(t for _, t in seen)
    return (f"Horizon: the market-time part sees persistence up to {horizon} trading day(s) of the {days} evaluated; "
            "an advantage that drifts between regimes longer than that is not in the future interval (no estimator "
            "from these days alone can see it: bench/drift_identifiability.py). The period verdict (over seeds on "
            "these days) does not depend on it.")


def beside_note(target: str) -> str:
    """What the column beside the headline verdict says.

    >>> beside_note("period").startswith("future, if drift < horizon:")
    True
    """
    if target == "period":
        return ("future, if drift < horizon: the same difference over seeds and the market's future (what to expect "
                "on new periods); it holds only if the market's drift is shorter than the horizon below (regimes of "
                "months make it decide up to 24% of identical pairs at 95%: docs/verdict_calibration.md).")
    return ("on these days: the same difference over seeds on the evaluated days (the period verdict, whose level "
            "holds under drift).")


def _beside(v: Verdict | None) -> str:
    if v is None:
        return "n/a"
    return f"{v.winner} better" if v.winner is not None else "undetermined"


def _loser(v: Verdict) -> str:
    return v.b if v.winner == v.a else v.a


def _gap(v: Verdict, unit: str) -> str:
    """``0.012 mse (3.1%)``: the winner's advantage and its share of the loser's mean."""
    loser_mean = v.means[1] if v.winner == v.a else v.means[0]
    share = abs(v.difference) / abs(loser_mean) if loser_mean and math.isfinite(loser_mean) else math.nan
    return _with_unit(abs(v.difference), unit) + (f" ({share:.1%})" if math.isfinite(share) and share < 10 else "")


def _abs_interval(v: Verdict) -> str:
    """The interval of the winner's advantage, as positive numbers: ``[0.004, 0.02]``."""
    lo, hi = sorted((abs(v.ci_low), abs(v.ci_high)))
    return f"[{sig(lo)}, {sig(hi)}]"


def _seeds_phrase(v: Verdict) -> str:
    n = v.seeds_needed.n
    return (f"{n} seeds per pipeline give an 80% chance to decide it if the gap is what was measured" if n
            else v.seeds_needed.reason)


def _p_text(f: Any) -> str:
    return f"p < {1 / f.n_sim:.2g}" if f.p_value == 0 and f.n_sim else f"p = {f.p_value:.2g}"


def _verdict_word(v: Verdict) -> str:
    return f"{v.winner} better" if v.winner is not None else "undetermined"


def _uncertainty(v: Verdict) -> str:
    total = v.var_seeds + v.var_time
    if not total > 0:
        return "none"
    share = (v.var_seeds if v.dominant_uncertainty == "seeds" else v.var_time) / total
    return f"{v.dominant_uncertainty} ({share:.0%})"


def _pairing(v: Verdict) -> str:
    if not v.paired:
        return "unpaired"
    if v.pairing_narrowing is None or not math.isfinite(v.pairing_narrowing):
        return "paired"
    return f"paired, {v.pairing_narrowing:.0%} narrower" if v.pairing_narrowing >= 0 else \
        f"paired, {-v.pairing_narrowing:.0%} wider"


def _seeds(v: Verdict) -> str:
    n = v.seeds_needed.n
    if n is None:
        reason = v.seeds_needed.reason
        return ("none suffices" if "market-time part alone" in reason else
                "gap is 0" if "gap is 0" in reason else "> 1000")
    return str(n)


def _summary_row(name: str, values: dict[str, np.ndarray]) -> dict[str, Any]:
    row: dict[str, Any] = {"pipeline": name, "runs": int(values["ql"].size)}
    for m in (*METRICS, *IC_METRICS):
        if m not in values:
            continue
        row[f"{m}_mean"] = float(values[m].mean())
        row[f"{m}_std"] = float(values[m].std(ddof=1)) if values[m].size > 1 else math.nan
    if values["ql"].size > 1 and (row["ql_scored_std"] > 0 or row["cql_std"] > 0):
        # same rows on both sides (months 2..K): the variance reduction calibration buys
        vr = cmp.variance_reduction(values, vanilla="ql_scored", calibrated="cql")
        row["std_ratio"], row["seed_budget"] = vr.std_ratio, vr.seed_budget
    else:
        row["std_ratio"], row["seed_budget"] = math.nan, math.nan
    return row


@validate_params({"question": QUESTION, "resampling": RESAMPLING, "accumulation": ACCUMULATION_MODE, "when": WHEN})
def compare_store(
    scores: StoreScores,
    *,
    pipelines: Sequence[str] | None = None,
    pairs: Sequence[tuple[str, str]] | None = None,
    question: Question = DEFAULT_QUESTION,
    resampling: Resampling = DEFAULT,
    accumulation: str = "sum",
    when: str = "windows",
) -> StoreComparison:
    """Verdicts, warnings, summaries per pipeline and pairwise accuracies per pair.

    Parameters
    ----------
    scores : StoreScores
    pipelines : sequence of str, optional
        Pipelines to include (default: all scored).
    pairs : sequence of (str, str), optional
        Pairs to compare. Default: the experiment's ``compare:`` pairs among the
        included pipelines, else every pair.
    question : Question
        What every verdict answers (recorded): the target and the confidence of every interval (the
        verdicts' and the pairwise accuracies').
    resampling : Resampling
        The bootstrap of the pairwise accuracies over seeds (recorded): replicates and seed; ``n_boot``
        and ``seed`` also make the fluctuation test's simulated paths. The verdicts are analytic and
        draw nothing; ``block_size`` is not used here (only the sweep's model confidence set draws
        blocks of market time).
    accumulation : {"sum", "product"}
        How the backtests' daily returns accumulate in the portfolio figures (Qlib's
        ``risk_analysis(mode=...)``; ``sum`` is Qlib's default).
    when : {"windows", "months"}
        The blocks of the per-window verdicts: the schedule's refit windows, or calendar months.

    Returns
    -------
    StoreComparison
    """
    names = scores.pipelines if pipelines is None else list(pipelines)
    for name in names:
        if name not in scores.pipelines:
            raise ValueError(f"--pipelines: {name!r} has no complete run (scored: {', '.join(scores.pipelines)})")
    shown = scores.backtests[scores.backtests["pipeline"].isin(names)] if len(scores.backtests) else scores.backtests
    portfolio = (portfolio_summary(shown, {n: s for n, s in scores.backtest_specs.items() if n in names},
                                   mode=accumulation, confidence=question.confidence) if len(shown) else None)
    rows = [{**_summary_row(name, scores.scores_of(name)),
             **(summary_columns(portfolio, name) if portfolio is not None else {})} for name in names]
    if pairs is None:
        recorded = [p for p in scores.compare if p[0] in names and p[1] in names]
        pairs = recorded or list(itertools.combinations(names, 2))
    comparisons, verdicts, whens = [], [], []
    for a, b in pairs:
        for name in (a, b):
            if name not in names:
                raise ValueError(f"pair ({a}, {b}): pipeline {name!r} is not included (included: {', '.join(names)})")
        pair = _compare_runs(a, scores.scores_of(a), b, scores.scores_of(b), question=question, resampling=resampling)
        comparisons.append(pair)
        verdicts.append(decide_pair(scores.days, pair.better, pair.worse, label=scores.label, question=question))
        starts = (refit_starts(scores, pair.better) if when == "windows" else
                  month_starts(scores.days.loc[scores.days["pipeline"].isin([a, b]), "date"].unique()))
        whens.append(when_pair(scores.days, pair.better, pair.worse, starts=starts, label=scores.label, blocks=when,
                               question=question, resampling=resampling))
    warnings = guard_warnings(days=scores.days, runs=scores.runs, pipelines=names, label=scores.label,
                              learned=scores.learned_labels, seed_spread=scores.seed_spread, models=scores.models,
                              pairs=verdicts, constant=scores.constant, identical=scores.identical,
                              identical_values=scores.identical_values,
                              stopped=stopping_points(scores.store, names))
    warnings += fluctuation_warnings(whens, scores.label)
    return StoreComparison(
        summary=pd.DataFrame(rows), pairs=comparisons, calibration=scores.calibration, resampling=resampling,
        question=question,
        incomplete=list(scores.incomplete), notes=list(scores.notes),
        label=scores.label, verdicts=verdicts, warnings=warnings, label_choice=scores.label_choice,
        portfolio=portfolio, when=whens,
    )


def _compare_runs(a: str, values_a: dict, b: str, values_b: dict, *, question: Question,
                  resampling: Resampling) -> cmp.PairComparison:
    """:func:`~rolling_calib.core.pairwise.compare_pair` of QL, CQL and the IC metrics (direction by QL).

    Each metric is compared in its own direction (:data:`~rolling_calib.core.metric_table.METRIC_TABLE`:
    the accuracy of an IC metric is P(IC_better > IC_worse)). IC metrics that are not finite for
    every run of both pipelines are left out.
    """
    ics = [m for m in IC_METRICS if m in values_a and m in values_b
           and np.isfinite(values_a[m]).all() and np.isfinite(values_b[m]).all()]
    metrics = [*METRICS, *ics]
    return cmp.compare_pair(a, {m: values_a[m] for m in metrics}, b, {m: values_b[m] for m in metrics},
                            ground_truth="ql", metrics=metrics, question=question, resampling=resampling,
                            higher_is_better=[m for m in metrics if METRIC_TABLE[m].higher_is_better])
