"""Verdicts per pair and the guards that say when the numbers are about the wrong thing.

:func:`decide_pair` turns a store's per-day summaries (:attr:`StoreScores.days
<rolling_calib.analysis.scoring.StoreScores>`) into a :class:`~rolling_calib.core.verdict.LossPanel`
per pipeline and metric and asks :func:`rolling_calib.core.verdict.decide` for the verdict:

* ``ql``: every evaluated day, ``sse_ql / rows`` (the ground truth);
* ``cql``: the days CQL scores, ``sse_cql / rows``;
* ``ic``, ``rank_ic``: the days with a defined cross-sectional correlation, ``ic_sum / ic_n``
  (higher is better);
* ``excess_return``, ``excess_return_cost``: the days of the runs' backtests (the workflow's
  strategy over the joined windows), the daily excess return over the benchmark without and with
  the trading cost (higher is better).

The pair's ground truth is *determined* when QL's verdict is (its interval excludes 0); when
it is not, the direction a pairwise accuracy is measured against is unknown.

:func:`guard_warnings` measures, from the same summaries, what would make a table misleading
(docs/method.md §4, §5), each as a :class:`GuardWarning` whose message comes from the
measurement and says what to do:

``scale_mismatch``
    predictions and labels on different scales (:func:`rolling_calib.core.guards.scale_check`
    on the pipeline's pooled moments), or a model that learned a processed label scored against
    the raw one (from the label descriptions);
``constant_predictions``
    a pipeline whose model predicts one value for all rows of each timestamp: it learned nothing
    (:func:`~rolling_calib.core.guards.constant_check`; its seeds agree for that reason, so it replaces
    ``degenerate_seeds``), with where its training stopped when the units record it;
``identical_pipelines``
    two pipelines whose runs predict the same values (:func:`~rolling_calib.core.guards.same_predictions`),
    or rank every timestamp's rows the same way (:func:`~rolling_calib.core.guards.same_rankings`: their
    rank IC and a ranking backtest cannot differ), whatever the float noise;
``degenerate_seeds``
    a pipeline whose seeds predict the same values (:func:`~rolling_calib.core.guards.seed_spread`);
``no_skill``
    a pipeline with mean IC at or below 0, or a QL no lower than predicting the label's mean;
``undetermined_ground_truth``
    a pair whose QL gap is inside its own interval.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from rolling_calib.core.guards import (
    MOMENT_FIELDS,
    ConstantCheck,
    Moments,
    ScaleCheck,
    SeedSpread,
    scale_check,
    skill_check,
)
from rolling_calib.core.label import Label
from rolling_calib.core.metric_table import METRIC_TABLE
from rolling_calib.core.question import DEFAULT_QUESTION, QUESTION, Question
from rolling_calib.core.validation import validate_params
from rolling_calib.core.tables import sig
from rolling_calib.core.verdict import LossPanel, Verdict, decide
from rolling_calib.core.jsonable import jsonable

__all__ = ["CLAIMS", "VERDICT_METRICS", "GuardWarning", "PairVerdicts", "decide_pair", "guard_warnings",
           "horizon_days", "loss_panel", "pooled_moments", "scale_findings", "stopping_points"]

#: Metric -> its day columns (total, weight); only days where ``weight > 0`` / ``sse_cql`` is defined. Direction,
#: title and unit: :data:`~rolling_calib.core.metric_table.METRIC_TABLE`.
VERDICT_METRICS: dict[str, tuple[str, str]] = {
    "ql": ("sse_ql", "rows"),
    "cql": ("sse_cql", "rows"),
    "ic": ("ic_sum", "ic_n"),
    "rank_ic": ("rank_ic_sum", "rank_ic_n"),
    "excess_return": ("excess_return", "bt_days"),             # the backtest's daily excess return, higher is better
    "excess_return_cost": ("excess_return_cost", "bt_days"),   # ... net of the trading cost
}
#: Advice for model classes known to ignore seeds in common settings (shown with the degenerate-seeds warning).
SEED_HINTS = {
    "LGBModel": "LightGBM draws random numbers only for bagging (subsample < 1 with subsample_freq > 0) or feature "
                "sampling (colsample_bytree < 1), from the seed it is given",
    "XGBModel": "XGBoost draws random numbers only for subsample < 1 or colsample_* < 1, from the seed it is given",
    "CatBoostModel": "CatBoost draws random numbers from random_seed, for bagging and random strengths",
    "LinearModel": "ordinary least squares has no randomness: every seed gives the same fit",
}


def loss_panel(days: pd.DataFrame, pipeline: str, metric: str) -> LossPanel | None:
    """The :class:`LossPanel` of one pipeline and metric from per-day summaries (None: no usable days)."""
    total_col, weight_col = VERDICT_METRICS[metric]
    totals, weights = days[total_col].to_numpy(dtype=float), days[weight_col].to_numpy(dtype=float)
    # the pipeline's usable rows, in the frame's order (a mask on the columns used: no copy of the frame)
    keep = np.flatnonzero((days["pipeline"].to_numpy() == pipeline) & np.isfinite(totals) & (weights > 0))
    if not keep.size:
        return None
    seeds, seed_idx = np.unique(days["seed"].to_numpy()[keep], return_inverse=True)   # a seed x date table of sums
    dates, date_idx = np.unique(days["date"].to_numpy()[keep], return_inverse=True)
    cell, shape = seed_idx * len(dates) + date_idx, (len(seeds), len(dates))
    total = np.bincount(cell, weights=totals[keep], minlength=shape[0] * shape[1])
    weight = np.bincount(cell, weights=weights[keep], minlength=shape[0] * shape[1])
    if (weight.reshape(shape).sum(axis=1) <= 0).any():
        return None
    return LossPanel.from_arrays(seeds=seeds, total=total.reshape(shape), weight=weight.reshape(shape), times=dates)


#: The claim each target makes, in words (the headline's and the one shown beside it).
CLAIMS = {"period": "over seeds, on these days",
          "future": "over seeds and the market's future, if the market's drift is shorter than the horizon"}


@dataclass(frozen=True)
class PairVerdicts:
    """The verdicts of one pair, ``better`` and ``worse`` named as the pair is (by mean QL).

    ``verdicts[m].difference`` is ``mean(better) - mean(worse)`` of metric ``m`` in its unit;
    ``verdicts`` answer the question asked (the headline), ``beside`` the other target (shown beside it:
    for the period headline, the claim about the market's future as the assumption it rests on).
    """

    better: str
    worse: str
    verdicts: dict[str, Verdict]
    ground_truth_determined: bool
    beside: dict[str, Verdict] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """``{"ground_truth_determined", "verdicts": {metric: {winner, difference, ci_low, ci_high,
        dominant_uncertainty, ...}}}`` (what ``compare --json`` adds to each pair)."""
        out = {}
        for metric, v in self.verdicts.items():
            full = v.to_dict()
            out[metric] = {"winner": v.winner, "outcome": v.outcome, "difference": full["difference"],
                           "ci_low": full["ci_low"], "ci_high": full["ci_high"],
                           "dominant_uncertainty": v.dominant_uncertainty,
                           **{k: full[k] for k in ("var_seeds", "var_time", "degrees_of_freedom", "paired",
                                                   "unpaired_ci", "paired_ci", "pairing_narrowing", "question", "variance",
                                                   "n_times", "n_seeds", "times_dropped", "diebold_mariano",
                                                   "seeds_needed", "means", "higher_is_better", "days")}}
            other = self.beside.get(metric)
            if other is not None:
                out[metric]["beside"] = {"target": other.target, "claim": CLAIMS[other.target],
                                         "outcome": other.outcome, "winner": other.winner,
                                         **{k: other.to_dict()[k] for k in ("difference", "ci_low", "ci_high")},
                                         "horizon_days": horizon_days(other)}
        return {"ground_truth_determined": self.ground_truth_determined, "verdicts": out}


def horizon_days(v: Verdict) -> int | None:
    """The longest persistence (trading days) a future-target verdict's market-time part sees: the Bartlett
    bandwidth + 1, or the month block where the drift check fired (None for a period verdict)."""
    cv = v.variance
    if cv.target != "future" or not cv.var_time > 0:
        return None
    return int(cv.block_days if cv.drift else cv.bandwidth + 1)


@validate_params({"question": QUESTION})
def decide_pair(days: pd.DataFrame, better: str, worse: str, *, label: Label, question: Question = DEFAULT_QUESTION,
                metrics: Sequence[str] = tuple(VERDICT_METRICS)) -> PairVerdicts:
    """Verdicts of ``better`` against ``worse`` for every metric both have days of.

    Parameters
    ----------
    days : DataFrame
        :attr:`StoreScores.days <rolling_calib.analysis.scoring.StoreScores>`.
    better, worse : str
        The pair, named as the comparison names it (by mean QL).
    label : Label
        What QL and CQL are measured against: their unit (``label.loss_unit``) goes into reason texts.
    question : Question
        See :func:`rolling_calib.core.verdict.decide`: its ``confidence`` is the verdicts' level and its
        ``target`` their population (over seeds on these days, or over seeds and the market's future); the
        other target's verdicts go in ``beside``. The verdicts are analytic: no
        :class:`~rolling_calib.core.resampling.Resampling` is taken.
    """
    verdicts: dict[str, Verdict] = {}
    beside: dict[str, Verdict] = {}
    other = question.replace(target="future" if question.target == "period" else "period")
    for metric in metrics:
        pa, pb = loss_panel(days, better, metric), loss_panel(days, worse, metric)
        if pa is None or pb is None:
            continue
        spec = METRIC_TABLE[metric]
        try:
            verdicts[metric] = decide(pa, pb, names=(better, worse), metric=metric, orientation=spec.orientation,
                                      question=question, unit=spec.unit(label))
            beside[metric] = decide(pa, pb, names=(better, worse), metric=metric, orientation=spec.orientation,
                                    question=other, unit=spec.unit(label))
        except ValueError:   # fewer than 2 common days: no verdict for this metric
            continue
    ql = verdicts.get("ql")
    return PairVerdicts(better, worse, verdicts, ground_truth_determined=bool(ql is not None and ql.determined),
                        beside=beside)


# --------------------------------------------------------------------------- guards
@dataclass(frozen=True)
class GuardWarning:
    """One guard that fired: its ``kind``, the pipelines concerned, the message, what was measured."""

    kind: str
    pipelines: list[str]
    message: str
    measured: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "pipelines": list(self.pipelines), "message": self.message,
                "measured": jsonable(self.measured)}


def pooled_moments(days: pd.DataFrame, pipeline: str) -> Moments:
    """The pipeline's (prediction, label) moments summed over all its runs and days."""
    rows = days[days["pipeline"] == pipeline]
    return Moments(*(float(rows[c].sum()) for c in MOMENT_FIELDS))


def guard_warnings(*, days: pd.DataFrame, runs: pd.DataFrame, pipelines: Sequence[str], label: Label,
                   learned: Mapping[str, Label], seed_spread: Mapping[str, SeedSpread | None],
                   models: Mapping[str, str], pairs: Sequence[PairVerdicts] = (),
                   constant: Mapping[str, ConstantCheck | None] | None = None,
                   identical: Sequence[tuple[str, str]] = (),
                   stopped: Mapping[str, str] | None = None,
                   identical_values: Sequence[tuple[str, str]] | None = None) -> list[GuardWarning]:
    """Every guard that fires on these pipelines (module docstring), scale first.

    Parameters
    ----------
    days, runs : DataFrame
        Per-day summaries and per-run scores of :class:`~rolling_calib.analysis.scoring.StoreScores`.
    pipelines : sequence of str
    label : Label
        The label the runs were scored against.
    learned : mapping
        Per pipeline, the label its model learned (``learn`` description).
    seed_spread : mapping
        Per pipeline, :class:`~rolling_calib.core.guards.SeedSpread` (None: unknown).
    models : mapping
        Per pipeline, the model class name (for the degenerate-seeds message).
    pairs : sequence of PairVerdicts
        For the undetermined-ground-truth warnings.
    constant : mapping, optional
        Per pipeline, a :class:`~rolling_calib.core.guards.ConstantCheck` when its model predicts a
        constant (its ``degenerate_seeds`` warning is then replaced by ``constant_predictions``).
    identical : sequence of (str, str)
        Pairs of pipelines that rank every timestamp's rows the same way (``identical_pipelines``).
    identical_values : sequence of (str, str), optional
        Of those, the pairs that predict the same values too (None: all of them).
    stopped : mapping, optional
        Per pipeline, where its training stopped, in words ("boosting round 1 of 1000"), when known.
    """
    out: list[GuardWarning] = []
    scale = {name: scale_check(pooled=pooled_moments(days, name)) for name in pipelines}
    out += _scale_warnings(scale_findings(days, pipelines, label, learned))
    flat = {n: c for n, c in (constant or {}).items() if c is not None and n in pipelines}
    out += _constant_warnings(flat, models, stopped or {})
    same_values = set(map(tuple, identical if identical_values is None else identical_values))
    out += _identical_warnings([p for p in identical if p[0] in pipelines and p[1] in pipelines], same_values)
    out += _degenerate_warnings({n: s for n, s in seed_spread.items() if n not in flat}, models, pipelines)
    out += _skill_warnings(runs, scale, label, pipelines)
    out += [_undetermined(p, label) for p in pairs if not p.ground_truth_determined and "ql" in p.verdicts]
    return out


def _processed_scored_raw(label: Label, learned: Label | None) -> bool:
    """The model learned a label a processor changed, and is scored against the raw one."""
    return label.kind == "raw" and learned is not None and learned.unit == "normalised"


def _scale_what(check: ScaleCheck) -> str:
    shares = {"the level of the predictions": check.level_share, "the spread of the predictions": check.spread_share,
              "the label's own variance (the predictions barely move it)": check.label_share}
    return max(shares, key=lambda k: shares[k] if math.isfinite(shares[k]) else -1.0)


def scale_findings(days: pd.DataFrame, pipelines: Sequence[str], label: Label,
                   learned: Mapping[str, Label]) -> dict[str, tuple[ScaleCheck, str]]:
    """Per pipeline with a scale mismatch: its :class:`ScaleCheck` and the finding in words.

    A mismatch is measured (``ScaleCheck.mismatch``) or known from the labels: the model learned
    a processed label and is scored against the raw one.
    """
    out = {}
    for name in pipelines:
        check = scale_check(pooled=pooled_moments(days, name))
        lab = learned.get(name)
        if not (check.mismatch or _processed_scored_raw(label, lab)):
            continue
        text = f"QL here measures {_scale_what(check)}, not the model's skill: {check.finding(unit=label.unit)}"
        if _processed_scored_raw(label, lab):
            text += (f"; the model learned the {', '.join(lab.processors) or 'processed'} label "  # type: ignore[union-attr]
                     f"({lab.unit}) and is scored against the raw one ({label.unit})")  # type: ignore[union-attr]
        out[name] = (check, text)
    return out


def _scale_warnings(findings: Mapping[str, tuple[ScaleCheck, str]]) -> list[GuardWarning]:
    if not findings:
        return []
    message = ("; ".join(f"{name}: {text}" for name, (_, text) in findings.items()) +
               ". Score against the learned label (--label learn) or read IC and Rank IC, which do not depend on the "
               "scale.")
    return [GuardWarning("scale_mismatch", list(findings), message, {n: c.to_dict() for n, (c, _) in findings.items()})]


def stopping_points(store: Any, pipelines: Sequence[str]) -> dict[str, str]:
    """Per pipeline, where its units' training stopped (the sidecars' ``stopped_at``), when they record it.

    One value when every unit stopped at the same place, else the distinct values (the first three).
    """
    import json
    from pathlib import Path

    from rolling_calib.core.store_layout import StoreLayout
    from rolling_calib.execution.manifest import Sidecar

    out = {}
    for name in pipelines:
        seen: list[str] = []
        for path in sorted((StoreLayout(Path(store)).units / name).glob("seed*/w*.json")):
            try:
                value = Sidecar.from_dict(json.loads(path.read_text(encoding="utf-8")), source=str(path)).stopped_at
            except (OSError, ValueError, AttributeError):   # unreadable, or not a JSON object
                continue
            if value and value not in seen:
                seen.append(value)
        if seen:
            out[name] = seen[0] if len(seen) == 1 else "; ".join(seen[:3]) + (" ..." if len(seen) > 3 else "")
    return out


def _constant_warnings(constant: Mapping[str, ConstantCheck], models: Mapping[str, str],
                       stopped: Mapping[str, str]) -> list[GuardWarning]:
    out = []
    for name, check in constant.items():  # where it stopped: "boosting round 1 of 51 trained (early stopping)"
        model = models.get(name, "the model")
        where = f"; its training stopped at {stopped[name]}" if stopped.get(name) else ""
        message = (f"{name}: {model} predicts a constant: every one of its runs gives all rows of each of its "
                   f"{check.n_times} timestamps the same value (mean {sig(check.mean_prediction, 3)}, widest "
                   f"cross-section {sig(check.max_range, 3)}){where}. The model learned nothing from its features, so "
                   f"its seeds agree and its losses measure a level, not a forecast. Give it more data or rounds "
                   f"(e.g. a longer training window, a smaller min_data_in_leaf, a later early stop) before comparing it.")
        out.append(GuardWarning("constant_predictions", [name], message, check.to_dict()))
    return out


def _identical_warnings(identical: Sequence[tuple[str, str]], same_values: set) -> list[GuardWarning]:
    out = []
    for a, b in identical:
        values = (a, b) in same_values or (b, a) in same_values
        what = ("predict the same values on the same rows (to float rounding): they are one model under two names, "
                "so their verdict is 'no difference' by construction" if values else
                "rank the same rows in the same order at every timestamp (to float rounding), though their values "
                "differ: their rank IC and any backtest that trades on the ranking (TopkDropoutStrategy) cannot "
                "differ, and an IC or loss difference between them is float noise or the monotone map between their "
                "predictions, not a better model")
        out.append(GuardWarning("identical_pipelines", [a, b],
                                f"{a} and {b} {what}. Check that what differs between them reaches the model (a "
                                f"misspelt or ignored keyword is trained as the default; a booster stopped at its first "
                                f"round ranks by one split whatever its learning rate).",
                                {"pipelines": [a, b], "same_values": values, "same_rankings": True}))
    return out


def _degenerate_warnings(seed_spread: Mapping[str, SeedSpread | None], models: Mapping[str, str],
                         pipelines: Sequence[str]) -> list[GuardWarning]:
    out = []
    for name in pipelines:
        spread = seed_spread.get(name)
        if spread is None or not spread.degenerate:
            continue
        how = ("identical predictions" if spread.identical else
               f"nearly identical predictions (between-seed spread {spread.relative_spread:.2g} of the predictions' std)")
        model = models.get(name, "the model")
        hint = SEED_HINTS.get(model.rsplit(".", 1)[-1])
        message = (f"{name}: its {spread.n_seeds} seeds give {how} on {spread.n_rows} rows, so its runs have no seed "
                   f"variance and pairwise accuracies over seed pairs are 0 or 1 by construction (not shown). "
                   f"{model} ignores the seed here" + (f": {hint}." if hint else ".") +
                   " Compare it by its time uncertainty only (the verdict), or give the model randomness and a seed.")
        out.append(GuardWarning("degenerate_seeds", [name], message, spread.to_dict()))
    return out


def _skill_warnings(runs: pd.DataFrame, scale: Mapping[str, ScaleCheck], label: Label,
                    pipelines: Sequence[str]) -> list[GuardWarning]:
    checks = {}
    for name in pipelines:
        rows = runs[runs["pipeline"] == name]
        ic = rows["ic"].to_numpy(dtype=float) if "ic" in rows else np.array([])
        ic = ic[np.isfinite(ic)]
        checks[name] = skill_check(ql=rows["ql"].to_numpy(dtype=float), baseline_ql=scale[name].std_label ** 2,
                                   ic=ic if ic.size else None)
    lacking = [n for n, c in checks.items() if not c.skill]
    if not lacking:
        return []
    unit = label.loss_unit
    parts = []
    for name in lacking:
        c = checks[name]
        why = []
        if c.positive_ic is False:
            why.append(f"mean IC {sig(c.ic_mean, 3)} <= 0")
        if not c.beats_mean:
            why.append(f"QL {sig(c.ql_mean)} {unit} is no lower than the {sig(c.baseline_ql)} {unit} of predicting the "
                       f"label's mean")
        parts.append(f"{name} ({'; '.join(why)})")
    head = ("Neither model predicts" if len(lacking) == len(pipelines) and len(pipelines) > 1 else
            "No predictive skill" if len(pipelines) == 1 else "Some models do not predict")
    message = (f"{head}: {', '.join(parts)}. The comparison is still honest, but it ranks models that do not "
               f"forecast the label; a better loss here is not a better forecast.")
    return [GuardWarning("no_skill", lacking, message, {n: checks[n].to_dict() for n in lacking})]


def _undetermined(pair: PairVerdicts, label: Label) -> GuardWarning:
    v = pair.verdicts["ql"]
    unit = label.loss_unit
    message = (f"{pair.better} vs {pair.worse}: the QL gap {sig(v.difference, 3)} {unit} has a {v.confidence:.0%} "
               f"interval [{sig(v.ci_low, 3)}, {sig(v.ci_high, 3)}] {unit} that contains 0, so which pipeline is "
               f"better is not known and pairwise accuracies against it are not shown ({v.dominant_uncertainty} "
               f"dominate the uncertainty; {v.seeds_needed.reason}).")
    return GuardWarning("undetermined_ground_truth", [pair.better, pair.worse], message,
                        {"difference": v.difference, "ci_low": v.ci_low, "ci_high": v.ci_high,
                         "seeds_needed": v.seeds_needed.n})


