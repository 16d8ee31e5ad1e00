"""Evidence on the real minute bars (issue 38; docs/evidence.md): where models have skill, does calibration help?

Three stores, trained by ``run`` (resumable) and analysed by ``analyse``:

* ``lstm``: our RollingLSTM on the real 2018 minute bars (``workflows/evidence/real_minute_lstm.yaml``);
* ``lgb``: Qlib's LightGBM on 27 Alpha158 features of the same bars (``workflows/evidence/real_minute_lgb.yaml``);
* ``control``: the positive control, our LSTM on a synthetic market where seeds differ by persistent output
  offsets, scored against the generator's true risk (``workflows/evidence/synthetic_control_lstm.yaml``).

Each has a base pipeline and the source's families at small differences, 20 seeds per pipeline; the base of
``lstm`` and ``lgb`` has 40 and its seeds 20..39 form the A/A control (``base'``: the base against itself,
seeds renumbered 0..19). Per pipeline: IC with its interval over seeds and market time (the skill gate: a row
counts only when both pipelines' intervals lie above 0). Per pair:

* the QL and CQL verdicts over every evaluated week at 95%, under both questions (``Question``): over seeds on
  these weeks (``target="period"``, the default) and over seeds and the market's future (``target="future"``),
  with the seeds each needs;
* CQL's seed std against QL's (per pipeline, bootstrap interval over seeds);
* held-out accuracy of QL and CQL: their runs on half of the seeds against the ground truth's direction on the
  other half, (a) on the same weeks (held out in seeds), (b) with the metrics on March's weeks and the truth on
  April's (held out in seeds *and* time; ``time_split_scores``), each with a cluster-bootstrap interval over
  seeds, and for CQL - QL (``rolling_calib.core.heldout``). The truth is QL, or for the control the true excess
  risk ``mean (oracle - prediction)^2`` from the store's ``$oracle`` field.

``spike`` is the spike-in control, a control of the analysis: the ``lstm`` store's predictions with one output offset
per (pipeline, seed, refit window) added (:func:`spike`; sized against QL's seed variance, :func:`offset_scale`),
with and without a known true difference between each pair's pipelines (:func:`with_analyte`), scored against the
runs without offsets, held out in seeds and in time; and how the seeds' offsets persist in the ``lstm`` and
``control`` stores (:func:`offset_persistence_table`). It shows whether the analysis sees a gain where the mechanism
is present by construction, not that the mechanism occurs in real training.

Usage (from the repository root; ``run`` trains what is missing, at nice 19 from the caller)::

    rolling-calib data ingest ../shared/data/us-equities-1min-2018 --out qlib_data/real1min --repair
    rolling-calib data synth --signal persistent --oracle-field --start 2018-02-16 --end 2018-04-20 \\
        --symbols AAPL,BAC,C,CMCSA,CSCO,CVX,DIS,F,GE,GILD,GM,INTC,JNJ,JPM,KO,MSFT,PFE,QCOM,SBUX,T,VZ,WFC,WMT,XOM \\
        --out qlib_data/synth_control
    python bench/real_minute_evidence.py run --workers 2              # every store, staged (hours on 2 cores)
    python bench/real_minute_evidence.py analyse --doc docs/evidence.md
    python bench/real_minute_evidence.py spike --doc docs/evidence.md   # the spike-in control (minutes)

``analyse`` writes ``bench_out/real_minute/evidence.json`` and ``tables.md``, ``spike`` writes ``spike.json`` and
``spike_tables.md`` there; with ``--doc`` the tables between the ``<!-- real-minute-...:begin/end -->`` markers of
that file.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rolling_calib.core.question import Question  # noqa: E402

PERIOD = Question(target="period")   # verdicts over seeds on the evaluated weeks (the default question)
FUTURE = Question(target="future")   # over seeds and the market's future

OUT = REPO / "bench_out" / "real_minute"
AA = "base'"          # the A/A control: seeds 20..39 of the base, renumbered 0..19
AA_SEEDS = 20
BAND = (0.6, 0.9)     # QL held-out accuracies where a gain can show (the source's pairs: 0.58-0.92)


@dataclass(frozen=True)
class Cell:
    """One store: its workflow, the stages that train it, and what it stands for."""

    name: str
    config: str
    store: str
    model: str
    data: str
    stages: tuple[tuple[tuple[str, ...], int], ...]   # (pipelines, seeds) run in this order
    oracle: bool = False                               # truth = true excess risk from the store's $oracle


CELLS = [
    Cell("lstm", "workflows/evidence/real_minute_lstm.yaml", "runs/real_minute_lstm", "our LSTM", "real",
         ((("base", "wd1e-3", "h48", "e4", "b1024"), 20), (("base",), 40), (("wd1e-2", "h64", "e5", "b2048"), 20))),
    Cell("lgb", "workflows/evidence/real_minute_lgb.yaml", "runs/real_minute_lgb", "LightGBM (27 Alpha158 features)",
         "real", ((("base", "l2_300", "leaves12", "rounds250", "bag0.6"), 20), (("base",), 40),
                  (("l2_1000", "leaves16", "rounds300", "bag0.4"), 20))),
    Cell("control", "workflows/evidence/synthetic_control_lstm.yaml", "runs/synthetic_control_lstm",
         "our LSTM (one epoch, lr 1e-2, weight decay 1e-2, label not standardised)", "synthetic",
         ((("base", "h16", "win10"), 20),),
         oracle=True),
]


# --------------------------------------------------------------------------- training
def run(cells: list[Cell], *, workers: int) -> dict[str, float]:
    """Train what is missing of every stage (``rolling-calib run``); the wall seconds per cell."""
    seconds = {}
    for cell in cells:
        t0 = time.perf_counter()
        for pipelines, seeds in cell.stages:
            cmd = [sys.executable, "-m", "rolling_calib.cli", "run", cell.config, "--store", cell.store,
                   "--pipelines", *pipelines, "--seeds", str(seeds), "--workers", str(workers), "--no-tracking",
                   "--no-progress"]
            print(f"[{time.strftime('%H:%M:%S')}] {' '.join(cmd[2:])}", flush=True)
            subprocess.run(cmd, cwd=REPO, check=True)
        seconds[cell.name] = time.perf_counter() - t0
    return seconds


# --------------------------------------------------------------------------- the A/A control
def with_aa(scores, *, base: str = "base", split: int = AA_SEEDS):
    """``scores`` with the base's seeds ``split..`` as the pipeline :data:`AA` (seeds renumbered from 0), the base
    kept to its seeds ``0..split-1``; the pair ``(base, AA)`` added. None when the base has no seed ``split``."""
    runs = scores.runs
    if not (runs["pipeline"].eq(base) & runs["seed"].ge(split)).any():
        return None

    def relabel(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame.copy()
        second = frame["pipeline"].eq(base) & frame["seed"].ge(split)
        frame.loc[second, "pipeline"] = AA
        frame.loc[second, "seed"] = frame.loc[second, "seed"] - split
        return frame.reset_index(drop=True)

    extra = {AA: scores.learned_labels.get(base)} if base in scores.learned_labels else {}
    return replace(scores, runs=relabel(runs), periods=relabel(scores.periods), days=relabel(scores.days),
                   compare=[*scores.compare, (base, AA)], learned_labels={**scores.learned_labels, **extra},
                   models={**scores.models, AA: scores.models.get(base)},
                   seed_spread={**scores.seed_spread, AA: scores.seed_spread.get(base)},
                   constant={**scores.constant, AA: scores.constant.get(base)})


# --------------------------------------------------------------------------- the true risk of the control
def true_risk_days(store: Path, scores, qlib_dir: Path) -> pd.DataFrame:
    """Per pipeline, seed and period: ``rows`` and ``sse_true = sum (oracle - prediction)^2`` over the scored rows.

    ``oracle`` is the store's ``$oracle`` field (``data synth --oracle-field``): the generator's expectation of the
    label given its full state, so ``sse_true / rows`` is a run's true excess risk on those rows (bp^2).
    """
    from data_prep import qlib_store
    from data_prep.synthetic import ORACLE_FIELD
    from rolling_calib.execution import store as st
    from rolling_calib.execution.reader import read_run

    calendar = qlib_store.read_calendar(qlib_dir)
    manifest = st.read_manifest(store)
    oracle = {}
    period_of = scores.days.drop_duplicates("date").set_index("date")["period"]
    out = []
    for (pipeline, seed), _ in scores.runs.groupby(["pipeline", "seed"]):
        frame = read_run(store, pipeline, int(seed), manifest=manifest, label=scores.label.kind).test.frame()
        values = np.empty(len(frame))
        for sym, rows in frame.groupby("instrument", observed=True).indices.items():
            if sym not in oracle:
                start, data = qlib_store.read_feature(qlib_dir, sym, ORACLE_FIELD)
                oracle[sym] = pd.Series(data.astype(float), index=calendar[start:start + len(data)])
            values[rows] = oracle[sym].reindex(pd.DatetimeIndex(frame["datetime"].to_numpy()[rows])).to_numpy()
        if not np.isfinite(values).all():
            raise ValueError(f"{qlib_dir}: ${ORACLE_FIELD} is missing for {int((~np.isfinite(values)).sum())} scored "
                             f"rows of {pipeline}/seed{seed}; expected a store written with --oracle-field")
        day = pd.DatetimeIndex(frame["datetime"]).normalize().tz_localize(None)
        err = (values - frame["prediction"].to_numpy()) ** 2
        g = pd.DataFrame({"period": period_of.reindex(day).to_numpy(), "err": err}).groupby("period")["err"]
        out.append(pd.DataFrame({"pipeline": pipeline, "seed": int(seed), "period": g.sum().index,
                                 "rows": g.size().to_numpy(), "sse_true": g.sum().to_numpy()}))
    return pd.concat(out, ignore_index=True)


def _truth_from(true_days: pd.DataFrame, pipeline: str, seeds: np.ndarray, periods) -> np.ndarray:
    t = true_days[(true_days["pipeline"] == pipeline) & true_days["period"].isin(list(periods))]
    g = t.groupby("seed")[["sse_true", "rows"]].sum().reindex(seeds)
    return (g["sse_true"] / g["rows"]).to_numpy(dtype=float)


# --------------------------------------------------------------------------- analysis
def skill(scores, name: str) -> dict:
    """IC over seeds with its 95% interval over seeds and market time, and QL against predicting the label's mean."""
    from rolling_calib.analysis.verdicts import loss_panel, pooled_moments
    from rolling_calib.core.guards import skill_check
    from rolling_calib.core.variance import crossed_variance

    panel = loss_panel(scores.days, name, "ic")
    x = panel.total / panel.weight
    cv = crossed_variance(x, target=FUTURE.target)   # the skill gate: over seeds and the market's future
    mean, half = float(np.nanmean(x.mean(axis=1))), float(cv.half_width(FUTURE.confidence))
    runs = scores.runs[scores.runs["pipeline"] == name]
    m = pooled_moments(scores.days, name)
    check = skill_check(ql=runs["ql"].to_numpy(), baseline_ql=m.var_y, ic=runs["ic"].to_numpy())
    return {"seeds": int(len(runs)), "ic": mean, "ic_low": mean - half, "ic_high": mean + half,
            "ql": check.ql_mean, "baseline_ql": check.baseline_ql, "beats_mean": check.beats_mean,
            "skill": bool(mean - half > 0)}


def _periods(scores) -> tuple[list[str], list[str]]:
    """March's and April's calibration periods (the refit between them: window 0 predicts March, 1 April)."""
    starts = scores.periods.groupby("period")["start"].min().sort_values()
    march = [p for p, s in starts.items() if s < pd.Timestamp("2018-04-01")]
    april = [p for p, s in starts.items() if s >= pd.Timestamp("2018-04-01")]
    return march, april


def _held(values: dict, pairs: list[tuple[str, str]], *, n_boot: int, seed: int) -> pd.DataFrame:
    from rolling_calib.core.heldout import held_out_accuracy

    return held_out_accuracy(values, pairs, metrics=["ql", "cql"], ground_truth="truth", baseline="ql",
                             n_boot=n_boot, seed=seed)


def _std_ratio(scores, diagnosis, name: str, resampling) -> dict:
    """CQL's seed std over QL 2..K's with its interval, the offset's share of QL's seed variance and diagnose's
    answer (for the A/A pipeline, the ratio alone: it has no units of its own)."""
    from rolling_calib.core.diagnostics import std_ratio_interval

    if name == AA:
        v = scores.scores_of(name)
        r = std_ratio_interval(v["ql_scored"], v["cql"], resampling=resampling)
        return {"ratio": r.ratio, "low": r.ci_low, "high": r.ci_high, "offset_share": math.nan, "helps": None}
    d = diagnosis.of(name)
    return {"ratio": d.std_ratio.ratio, "low": d.std_ratio.ci_low, "high": d.std_ratio.ci_high,
            "offset_share": d.components.offset if d.components is not None else math.nan,
            "helps": d.assessment.helps, "persistence_within": d.persistence.corr_within,
            "persistence_across": d.persistence.corr_across}


def _ci(row) -> dict:
    return {"accuracy": float(row["accuracy"]), "low": float(row["ci_low"]), "high": float(row["ci_high"])}


def analyse_cell(cell: Cell, *, n_boot: int) -> dict:
    """Everything the tables need for one store (see the module docstring)."""
    from rolling_calib.analysis.comparison import compare_store
    from rolling_calib.analysis.diagnostics import diagnose_store, time_split_scores
    from rolling_calib.analysis.scoring import score_store
    from rolling_calib.analysis.verdicts import decide_pair
    from rolling_calib.core.resampling import Resampling

    t0 = time.process_time()
    store = REPO / cell.store
    raw = score_store(store)
    aa = with_aa(raw)
    scores = aa if aa is not None else raw
    pairs = [tuple(p) for p in scores.compare]
    resampling = Resampling(n_boot=n_boot)
    # the verdicts under both targets: the evaluated weeks (the default) and the market's future as well
    comparison = compare_store(scores, pairs=pairs, question=PERIOD, resampling=resampling)
    future = compare_store(scores, pairs=pairs, question=FUTURE, resampling=resampling)
    # the A/A pipeline has no units of its own to read: diagnose the store's pipelines, and give base' its std ratio
    diagnosis = diagnose_store(store, scores=scores, pipelines=[n for n in scores.pipelines if n != AA],
                               resampling=resampling)
    march, april = _periods(scores)
    whole = {n: {"ql": scores.scores_of(n)["ql_scored"], "cql": scores.scores_of(n)["cql"],
                 "truth": scores.scores_of(n)["ql"]} for n in scores.pipelines}
    forward = time_split_scores(scores, metric_periods=march, truth_periods=april)
    backward = time_split_scores(scores, metric_periods=april, truth_periods=march)
    truths = {"ql": (whole, forward, backward)}
    if cell.oracle:
        qlib_dir = REPO / "qlib_data" / "synth_control"
        true_days = true_risk_days(store, scores, qlib_dir)
        every = sorted(scores.periods["period"].unique())
        truths["true risk"] = tuple(
            {n: {**v[n], "truth": _truth_from(true_days, n, np.asarray(
                sorted(scores.runs.loc[scores.runs["pipeline"] == n, "seed"]), dtype=np.int64), periods)}
             for n in v} for v, periods in ((whole, every), (forward, april), (backward, march)))
    skills = {n: skill(scores, n) for n in scores.pipelines}
    counted = [p for p in pairs if AA not in p and all(skills[n]["skill"] for n in p)]   # the mean's pairs
    others = [p for p in pairs if p not in counted]
    kinds = ("seeds", "seeds and time", "seeds and time (April -> March)")
    held = {truth: {kind: pd.concat([_held(v, group, n_boot=n_boot, seed=i).assign(counted=group is counted)
                                     for group in (counted, others) if group], ignore_index=True)
                    for i, (kind, v) in enumerate(zip(kinds, values))}
            for truth, values in truths.items()}
    april_days = scores.days[scores.days["period"].isin(april)]
    rows = []
    def verdicts(pv) -> dict:
        return {m: {"winner": v.winner, "outcome": v.outcome, "difference": v.difference, "ci_low": v.ci_low,
                    "ci_high": v.ci_high, "seeds_needed": v.seeds_needed.n, "seeds_reason": v.seeds_needed.reason}
                for m, v in pv.verdicts.items() if m in ("ql", "cql", "ic")}

    assert [{p.better, p.worse} for p in comparison.pairs] == [{p.better, p.worse} for p in future.pairs]
    for pair, pv, pf in zip(comparison.pairs, comparison.verdicts, future.verdicts):
        a, b = next(p for p in pairs if set(p) == {pair.better, pair.worse})
        truth_april = decide_pair(april_days, a, b, label=scores.label, question=PERIOD, metrics=("ql",))
        row = {"pair": [a, b], "better_by_ql": pair.better,
               "verdicts": verdicts(pv), "verdicts_future": verdicts(pf),
               "april_truth_determined": truth_april.ground_truth_determined,
               "std_ratio": {n: _std_ratio(scores, diagnosis, n, resampling) for n in (a, b)},
               "held_out": {}}
        label = f"{a} vs {b}"
        for truth, by_kind in held.items():
            for kind, table in by_kind.items():
                t = table[table["pair"] == label].set_index("metric")
                row["held_out"][f"{truth} | {kind}"] = {m: _ci(t.loc[m]) for m in ("ql", "cql", "cql - ql")}
        rows.append(row)
    summaries = {}
    for truth, by_kind in held.items():
        for kind, table in by_kind.items():
            mean = table[(table["pair"] == "mean over pairs") & table["counted"]].set_index("metric")
            if len(mean):
                summaries[f"{truth} | {kind}"] = {m: _ci(mean.loc[m]) for m in ("ql", "cql", "cql - ql")}
    return {
        "cell": cell.name, "model": cell.model, "data": cell.data, "store": cell.store, "config": cell.config,
        "label": scores.label.describe(), "periods": {"march": march, "april": april},
        "skill": skills, "counted_pairs": [list(p) for p in counted],
        "pairs": rows, "summaries": summaries,
        "warnings": sorted({w.kind for w in comparison.warnings}),
        "analysis_cpu_seconds": round(time.process_time() - t0, 1),
        "train_core_seconds": _train_seconds(store),
        "units": len(list((store / "units").rglob("w*.json"))),
    }


def _train_seconds(store: Path) -> float:
    """The units' summed wall seconds (``timings.total_s``: one core each, a loaded machine counts its waits)."""
    return round(sum(float(json.loads(p.read_text()).get("timings", {}).get("total_s", 0.0))
                     for p in (store / "units").rglob("w*.json")), 1)


# --------------------------------------------------------------------------- the spike-in control
# A control of the analysis, in the sense of a lab assay's spike-in: the real store's predictions with a known
# amount of the mechanism CQL relies on added (the interferent: one output offset per pipeline, seed and refit
# window, which a refit resets and which persists inside a window), optionally with a known true difference between
# the pipelines of each pair (the analyte: a loss added to every row of the pair's second pipeline, the same for
# every seed and week). It asks whether the analysis can see a gain where the mechanism is present by construction;
# it is not evidence that the mechanism occurs in real training.
SPIKE_SEED = 38                  # the seed of every offset drawn (recorded with the results)
SPIKES = (0.0, 1.0, 3.0)         # offsets' size: Var(offset^2) over seeds, in multiples of QL's seed variance
ANALYTES = (0.0, 1.0, 2.0)       # the true loss difference added to each pair, in multiples of QL's seed std
KEY = ["pipeline", "seed", "window"]


def offset_scale(ql_seed_variance: float, multiple: float) -> float:
    """The std ``s`` of offsets ``N(0, s^2)`` whose square, the part of QL an offset adds (``QL + d^2 - 2 d m``, ``m``
    the run's mean residual), varies over seeds ``multiple`` times as much as QL does: ``2 s^4 = multiple * V``.

    >>> offset_scale(8.0, 1.0), offset_scale(8.0, 0.0)
    (1.4142135623730951, 0.0)
    """
    if not (ql_seed_variance >= 0 and multiple >= 0):
        raise ValueError(f"ql_seed_variance, multiple: expected >= 0, found {ql_seed_variance}, {multiple}")
    return float((multiple * ql_seed_variance / 2.0) ** 0.25)


def spike_offsets(keys: pd.DataFrame, *, scale: float, seed: int) -> pd.DataFrame:
    """One offset per distinct ``(pipeline, seed, window)`` of ``keys``: ``scale * z``, ``z ~ N(0, 1)`` drawn from its
    own stream ``numpy.random.default_rng([seed, crc32(pipeline), run seed, window])``, so a key's offset does not
    depend on which other keys are present or in what order.

    >>> k = pd.DataFrame({"pipeline": ["a", "a", "b"], "seed": [0, 0, 0], "window": [0, 1, 0]})
    >>> o = spike_offsets(k, scale=2.0, seed=38)
    >>> o.columns.tolist(), len(o), bool(o["offset"].ne(0).all())
    (['pipeline', 'seed', 'window', 'offset'], 3, True)
    >>> spike_offsets(k, scale=0.0, seed=38)["offset"].tolist()
    [0.0, 0.0, 0.0]
    """
    import zlib

    if not scale >= 0:
        raise ValueError(f"scale: expected >= 0, found {scale}")
    out = keys[KEY].drop_duplicates().reset_index(drop=True)
    z = [np.random.default_rng([int(seed), zlib.crc32(str(p).encode()), int(s), int(w)]).standard_normal()
         for p, s, w in out[KEY].itertuples(index=False)]
    return out.assign(offset=float(scale) * np.asarray(z, dtype=float) + 0.0)   # + 0.0: no -0.0 at scale 0


def spike(predictions: pd.DataFrame, *, scale: float, seed: int) -> pd.DataFrame:
    """``predictions`` (columns ``pipeline, seed, window, prediction``, any others kept) with the offset of each row's
    ``(pipeline, seed, window)`` from :func:`spike_offsets` added to its prediction; rows in the same order.

    ``prediction' = prediction + o[pipeline, seed, window]``: constant inside a window of a run, a new draw after a
    refit (the next window) and for every seed and pipeline. ``scale=0`` leaves the predictions unchanged.

    >>> f = pd.DataFrame({"pipeline": ["a"] * 4, "seed": [0] * 4, "window": [0, 0, 1, 1],
    ...                   "prediction": [0.0] * 4})
    >>> p = spike(f, scale=1.0, seed=38)["prediction"]      # the offsets themselves: one per window
    >>> bool(p[0] == p[1] and p[2] == p[3] and p[0] != p[2])
    True
    >>> spike(f.assign(prediction=[0.1, 0.2, 0.3, 0.4]), scale=0.0, seed=38)["prediction"].tolist()
    [0.1, 0.2, 0.3, 0.4]
    """
    offsets = spike_offsets(predictions, scale=scale, seed=seed)
    joined = predictions[KEY].merge(offsets, on=KEY, how="left", validate="many_to_one")
    return predictions.assign(prediction=predictions["prediction"].to_numpy(dtype=float)
                              + joined["offset"].to_numpy(dtype=float))


def with_analyte(runs: pd.DataFrame, days: pd.DataFrame, pipelines, size: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Runs and per-day sums with a true loss difference ``size`` added to every row of ``pipelines``.

    ``ql, ql_scored, cql += size`` per run and ``sse_ql, sse_cql += size * rows`` per day (a missing CQL stays
    missing): the losses of a pipeline whose error is larger by ``size`` on every row, the same for every seed and
    week, independent of its residual (the limit of independent row noise of variance ``size``). It is not an
    offset, so CQL keeps it.

    >>> r = pd.DataFrame({"pipeline": ["a", "b"], "ql": [1.0, 1.0], "ql_scored": [1.0, 1.0], "cql": [0.9, 0.9]})
    >>> d = pd.DataFrame({"pipeline": ["a", "b"], "rows": [10, 10], "sse_ql": [10.0, 10.0], "sse_cql": [9.0, np.nan]})
    >>> r2, d2 = with_analyte(r, d, ["b"], 0.5)
    >>> r2["cql"].tolist(), d2["sse_ql"].tolist(), d2["sse_cql"].tolist()
    ([0.9, 1.4], [10.0, 15.0], [9.0, nan])
    """
    hit_r, hit_d = runs["pipeline"].isin(list(pipelines)), days["pipeline"].isin(list(pipelines))
    runs = runs.copy()
    for c in ("ql", "ql_scored", "cql"):
        runs.loc[hit_r, c] = runs.loc[hit_r, c] + size
    days = days.copy()
    for c in ("sse_ql", "sse_cql"):
        days.loc[hit_d, c] = days.loc[hit_d, c] + size * days.loc[hit_d, "rows"]
    return runs, days


def spiked_scores(store: Path, pipelines: dict[str, list[int]], scales: dict[float, float], *, seed: int,
                  progress: bool = True) -> dict[float, dict[str, pd.DataFrame]]:
    """Per spike multiple: ``runs`` (``pipeline, seed, ql, ql_scored, cql``), ``periods`` and ``days`` of every run of
    ``pipelines`` (``{name: seeds}``) re-scored with :func:`spike` at ``scales[multiple]`` (each run read once; the
    store's calibration and label; the library's own metric: ``rolling_cql``, ``run_days``)."""
    from tqdm.auto import tqdm

    from rolling_calib.analysis.panels import run_days
    from rolling_calib.analysis.scoring import daily_ic, rolling_cql
    from rolling_calib.execution import store as st
    from rolling_calib.execution.reader import RunData, read_run

    handle = st.Store.of(store)
    calibration, kind = handle.manifest.calibration, handle.label_kind(list(pipelines), None)
    parts: dict[float, dict[str, list]] = {m: {"runs": [], "periods": [], "days": []} for m in scales}
    todo = [(n, s) for n, seeds in pipelines.items() for s in seeds]
    for name, s in tqdm(todo, desc="spiking runs", unit="run", disable=not progress, leave=False):
        data = read_run(handle, name, s, label=kind)
        t = data.test
        daily = daily_ic(t.prediction, t.label, t.datetime)   # unchanged by an offset constant over each day
        frame = pd.DataFrame({"pipeline": name, "seed": s, "window": t.window, "prediction": t.prediction})
        for multiple, scale in scales.items():
            arrays = replace(t, prediction=spike(frame, scale=scale, seed=seed)["prediction"].to_numpy())
            result = rolling_cql(RunData(test=arrays, label=data.label), calibration)
            parts[multiple]["runs"].append({"pipeline": name, "seed": s, "ql": result.ql_all,
                                            "ql_scored": result.ql_scored, "cql": result.cql})
            parts[multiple]["periods"].append(result.table.assign(pipeline=name, seed=s))
            parts[multiple]["days"].append(run_days(name, s, result, arrays, daily))
    return {m: {"runs": pd.DataFrame(p["runs"]), "periods": pd.concat(p["periods"], ignore_index=True),
                "days": pd.concat(p["days"], ignore_index=True)} for m, p in parts.items()}


def offset_persistence_table(periods: pd.DataFrame, march, april) -> pd.DataFrame:
    """Per pipeline, how its seeds' offsets (mean residual minus the mean over seeds) persist: week to week inside a
    training window and across the refit (``core.diagnostics.offset_persistence``), and month to month (the
    correlation over seeds of each seed's March and April offset, rows-weighted over the month's weeks).

    >>> p = pd.DataFrame({"pipeline": "a", "seed": np.repeat([0, 1], 4), "period": ["w1", "w2", "w3", "w4"] * 2,
    ...                   "start": pd.to_datetime(["2018-03-05", "2018-03-12", "2018-04-02", "2018-04-09"] * 2),
    ...                   "rows": 10, "mean_residual": [1.0, 1.0, -1.0, -1.0, -1.0, -1.0, 1.0, 1.0],
    ...                   "refit_first": [True, False, True, False] * 2})
    >>> offset_persistence_table(p, ["w1", "w2"], ["w3", "w4"])[["within", "across", "month"]].values.tolist()
    [[1.0, -1.0, -1.0]]
    """
    from rolling_calib.core import diagnostics as dg

    out = []
    for name, t in periods.groupby("pipeline", sort=False):
        b = t.pivot(index="seed", columns="period", values="mean_residual")
        order = t.groupby("period")["start"].min().sort_values().index
        b = b[order].dropna()
        refit = t.groupby("period")["refit_first"].any().reindex(order).to_numpy()
        refit[0] = False
        p = dg.offset_persistence(dg.seed_offsets(b.to_numpy(dtype=float)), refit)
        rows = t.pivot(index="seed", columns="period", values="rows").loc[b.index]

        def month(periods_):
            cols = [c for c in order if c in set(periods_)]
            m = (b[cols] * rows[cols]).sum(axis=1) / rows[cols].sum(axis=1)
            return (m - m.mean()).to_numpy()

        mar, apr = month(march), month(april)
        out.append({"pipeline": name, "seeds": len(b), "within": p.corr_within, "across": p.corr_across,
                    "month": float(np.sum(mar * apr) / np.sqrt(np.sum(mar ** 2) * np.sum(apr ** 2)))})
    return pd.DataFrame(out)


def spike_cell(cell: Cell, *, n_boot: int, spikes=SPIKES, analytes=ANALYTES, seed: int = SPIKE_SEED,
               progress: bool = True) -> dict:
    """The spike-in control on one store's runs (the pairs of its ``compare:``, the base's seeds 0..19).

    For every analyte ``a`` and spike multiple ``k``: the predictions with :func:`spike` offsets of std
    ``offset_scale(V, k)`` (``V``: QL's seed variance, the mean over the pipelines of the clean store) and the true
    difference ``a * sqrt(V)`` added by :func:`with_analyte` to each pair's second pipeline. The metrics (QL, CQL)
    are scored on the spiked runs; the truth is QL of the runs without offsets (analyte included), held out in seeds
    (the same weeks, other seeds) and in seeds and time (metrics on March's weeks, truth on April's). Per cell: the
    held-out accuracies QL -> CQL with their cluster-bootstrap intervals (the same draws in every cell), the QL and
    CQL verdicts over these weeks with the seeds each needs, CQL's seed std over QL's, and how much the offsets
    inflate QL's seed variance (measured).
    """
    from rolling_calib.analysis.diagnostics import time_split_scores
    from rolling_calib.analysis.scoring import StoreScores
    from rolling_calib.analysis.verdicts import decide_pair
    from rolling_calib.core.diagnostics import std_ratio_interval
    from rolling_calib.core.label import Label
    from rolling_calib.core.resampling import Resampling
    from rolling_calib.execution import store as st

    t0, w0 = time.process_time(), time.perf_counter()
    store = REPO / cell.store
    handle = st.Store.of(store)
    pairs = [tuple(p) for p in handle.pairs(handle.select(None))]
    names = list(dict.fromkeys(n for p in pairs for n in p))
    seeds = {n: sorted(s for s in handle.pipeline(n).seeds if s < AA_SEEDS) for n in names}
    kind = handle.label_kind(names, None)
    label = handle.labels(names[0])[0].get(kind, Label(kind=kind))
    clean = spiked_scores(store, seeds, {0.0: 0.0}, seed=seed, progress=progress)[0.0]
    variance = float(clean["runs"].groupby("pipeline")["ql"].var(ddof=1).mean())
    scales = {float(k): offset_scale(variance, float(k)) for k in spikes}
    frames = {0.0: clean, **spiked_scores(store, seeds, {k: s for k, s in scales.items() if k}, seed=seed,
                                          progress=progress)}

    def scores(frame, runs, days):
        return StoreScores(store=store, runs=runs, periods=frame["periods"], days=days,
                           calibration=handle.manifest.calibration, label=label)

    march, april = _periods(scores(clean, clean["runs"], clean["days"]))
    second = sorted({b for _, b in pairs})
    resampling = Resampling(n_boot=n_boot)

    def of(runs, name, column):
        return runs[runs["pipeline"] == name].sort_values("seed")[column].to_numpy(dtype=float)

    base_march = time_split_scores(scores(clean, clean["runs"], clean["days"]), metric_periods=march,
                                   truth_periods=april)
    cells = []
    for k in map(float, spikes):
        f = frames[k]
        ratios = {n: std_ratio_interval(of(f["runs"], n, "ql_scored"), of(f["runs"], n, "cql"),
                                        resampling=resampling).ratio for n in names}
        split = time_split_scores(scores(f, f["runs"], f["days"]), metric_periods=march, truth_periods=april)
        inflation = {"seeds": float(np.mean([np.var(of(f["runs"], n, "ql_scored"), ddof=1)
                                             / np.var(of(clean["runs"], n, "ql_scored"), ddof=1) for n in names])),
                     "march": float(np.mean([np.var(split[n]["ql"], ddof=1) / np.var(base_march[n]["ql"], ddof=1)
                                             for n in names]))}
        cql_change = float(max(np.max(np.abs(split[n]["cql"] - base_march[n]["cql"])) for n in names))
        for a in map(float, analytes):
            size = a * math.sqrt(variance)
            truth_runs, truth_days = with_analyte(clean["runs"], clean["days"], second, size)
            truth = time_split_scores(scores(clean, truth_runs, truth_days), metric_periods=march,
                                      truth_periods=april)
            runs, days = with_analyte(f["runs"], f["days"], second, size)
            metric = time_split_scores(scores(f, runs, days), metric_periods=march, truth_periods=april)
            values = {
                "seeds": {n: {"ql": of(runs, n, "ql_scored"), "cql": of(runs, n, "cql"), "truth": of(truth_runs, n, "ql")}
                          for n in names},
                "seeds and time": {n: {"ql": metric[n]["ql"], "cql": metric[n]["cql"], "truth": truth[n]["truth"]}
                                   for n in names},
            }
            held = {}
            for i, (kind_, v) in enumerate(values.items()):   # the draws of analyse_cell's: seed 0, then 1
                t = _held(v, pairs, n_boot=n_boot, seed=i)
                held[kind_] = {row_pair: {m: _ci(r) for m, r in t[t["pair"] == row_pair].set_index("metric").iterrows()}
                               for row_pair in t["pair"].unique()}
            verdicts = {}
            for x, y in pairs:
                pv = decide_pair(days, x, y, label=label, question=PERIOD, metrics=("ql", "cql"))
                verdicts[f"{x} vs {y}"] = {m: {"winner": v.winner, "seeds_needed": v.seeds_needed.n,
                                               "seeds_reason": v.seeds_needed.reason} for m, v in pv.verdicts.items()}
            cells.append({"analyte": a, "spike": k, "offset_std": scales[k], "analyte_loss": size,
                          "ql_variance_inflation": inflation, "cql_march_change": cql_change,
                          "std_ratio": ratios, "held_out": held, "verdicts": verdicts})
    return {"cell": cell.name, "store": cell.store, "seed": seed, "ql_seed_variance": variance,
            "pairs": [list(p) for p in pairs], "periods": {"march": march, "april": april},
            "cells": cells, "persistence": offset_persistence_table(clean["periods"], march, april).to_dict("records"),
            "analysis_cpu_seconds": round(time.process_time() - t0, 1),
            "wall_seconds": round(time.perf_counter() - w0, 1)}


def control_persistence(cell: Cell) -> dict:
    """:func:`offset_persistence_table` of a store's clean runs (the synthetic control: why it is not positive)."""
    from rolling_calib.analysis.scoring import score_store

    scores = score_store(REPO / cell.store)
    march, april = _periods(scores)
    return {"cell": cell.name, "persistence": offset_persistence_table(scores.periods, march, april).to_dict("records")}


def _needed(v: dict) -> float:
    """Seeds to decide as a number (none suffices / over 1000: infinite)."""
    return math.inf if v.get("seeds_needed") is None else float(v["seeds_needed"])


def spike_table(result: dict) -> str:
    """One row per (analyte, spike): sizes, measured inflation, CQL/QL seed std, held-out accuracies over the pairs
    (mean over the pairs with its interval) and the verdicts."""
    from rolling_calib.core.tables import format_table

    body = []
    mean = "mean over pairs"
    for c in result["cells"]:
        hs, ht = c["held_out"]["seeds"][mean], c["held_out"]["seeds and time"][mean]
        ratios = list(c["std_ratio"].values())
        v = list(c["verdicts"].values())
        need = {m: [_needed(x[m]) for x in v] for m in ("ql", "cql")}
        med = {m: float(np.median(need[m])) for m in need}
        body.append([
            f"{c['analyte']:g} ({c['analyte_loss']:.2g})", f"{c['spike']:g} ({c['offset_std']:.2g})",
            f"{c['ql_variance_inflation']['seeds']:.2f}; {c['ql_variance_inflation']['march']:.2f}",
            f"{min(ratios):.2f}-{max(ratios):.2f}",
            f"{_acc(ht['ql'])} -> {_acc(ht['cql'])}", _diff(ht["cql - ql"]),
            f"{_acc(hs['ql'])} -> {_acc(hs['cql'])}", _diff(hs["cql - ql"]),
            f"{sum(x['ql']['winner'] is not None for x in v)} / {sum(x['cql']['winner'] is not None for x in v)}",
            " / ".join("> 1000" if not math.isfinite(med[m]) else f"{med[m]:.0f}" for m in ("ql", "cql"))
            + f"; CQL fewer in {sum(c_ < q for q, c_ in zip(need['ql'], need['cql']))} of {len(v)}"])
    return format_table(body, ["true difference (x QL seed std; loss)", "offset spike (x QL seed variance; offset std)",
                               "QL seed variance, spiked / clean (weeks; March)", "CQL/QL seed std (pipelines)",
                               "held out in seeds and time (Mar -> Apr): Acc QL -> CQL", "CQL - QL",
                               "held out in seeds: Acc QL -> CQL", "CQL - QL",
                               "pairs decided, these weeks (QL / CQL)",
                               "seeds to decide, median over pairs (QL / CQL)"], style="markdown")


def persistence_table(results: list[dict]) -> str:
    """Per store: the range over pipelines of the offsets' persistence (week to week inside a window, across the
    refit, March to April)."""
    from rolling_calib.core.tables import format_table

    body = []
    for r in results:
        p = pd.DataFrame(r["persistence"])
        body.append([r["cell"], len(p), int(p["seeds"].min())]
                    + [f"{p[c].min():+.2f} to {p[c].max():+.2f}" for c in ("within", "across", "month")])
    return format_table(body, ["store", "pipelines", "seeds", "week to week, inside a window",
                               "week to week, across the refit", "March to April (each seed's monthly offset)"],
                        style="markdown")


# --------------------------------------------------------------------------- tables
def _f(x, d: int = 2) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.{d}f}"


def _acc(h: dict) -> str:
    return f"{_f(h['accuracy'])} [{_f(h['low'])}, {_f(h['high'])}]"


def _diff(h: dict) -> str:
    return f"{h['accuracy']:+.2f} [{h['low']:+.2f}, {h['high']:+.2f}]"


def _verdict(v: dict) -> str:
    n = v.get("seeds_needed")
    seeds = f"{n} seeds" if n is not None else ("none suffices" if "market-time" in (v.get("seeds_reason") or "")
                                                 else "> 1000 seeds")
    return f"{v.get('winner') or 'undetermined'} ({seeds})"


def skill_table(results: list[dict]) -> str:
    from rolling_calib.core.tables import format_table

    body = [[r["cell"], r["model"], name, s["seeds"], f"{s['ic']:.4f} [{s['ic_low']:.4f}, {s['ic_high']:.4f}]",
             f"{s['ql']:.5g} vs {s['baseline_ql']:.5g}", "yes" if s["skill"] else "no"]
            for r in results for name, s in r["skill"].items()]
    return format_table(body, ["store", "model", "pipeline", "seeds", "IC [95% CI, seeds and market time]",
                               "QL vs predicting the mean", "skill (IC interval above 0)"], style="markdown")


def pair_table(results: list[dict], truth: str = "ql") -> str:
    from rolling_calib.core.tables import format_table

    body = []
    for r in results:
        skilled = {n for n, s in r["skill"].items() if s["skill"]}
        for p in r["pairs"]:
            a, b = p["pair"]
            seeds_key, time_key = f"{truth} | seeds", f"{truth} | seeds and time"
            if seeds_key not in p["held_out"]:
                continue
            hs, ht = p["held_out"][seeds_key], p["held_out"][time_key]
            ratio = "; ".join(f"{n} {_f(s['ratio'])} [{_f(s['low'])}, {_f(s['high'])}]"
                              for n, s in p["std_ratio"].items())
            body.append([r["cell"], f"{a} vs {b}", "yes" if {a, b} <= skilled else "no",
                         _verdict(p["verdicts"]["ql"]), _verdict(p["verdicts"]["cql"]),
                         f'{_verdict(p["verdicts_future"]["ql"])}; {_verdict(p["verdicts_future"]["cql"])}', ratio,
                         f"{_acc(hs['ql'])} -> {_acc(hs['cql'])}", _diff(hs["cql - ql"]),
                         f"{_acc(ht['ql'])} -> {_acc(ht['cql'])}", _diff(ht["cql - ql"]),
                         "yes" if p["april_truth_determined"] else "no"])
    return format_table(body, ["store", "pair", "both skilled", "QL verdict, these weeks (seeds to decide)",
                               "CQL verdict, these weeks (seeds to decide)",
                               "QL; CQL verdicts, the market's future (seeds to decide)", "CQL/QL seed std [95% CI]",
                               "held-out in seeds: Acc QL -> CQL", "CQL - QL",
                               "held out in seeds and time (Mar -> Apr): Acc QL -> CQL", "CQL - QL",
                               "April's QL separates the pair"], style="markdown")


def summary_table(results: list[dict]) -> str:
    """Per store and truth: pairs decided by QL and CQL, and the mean held-out accuracy gain over the pairs."""
    from rolling_calib.core.tables import format_table

    body = []
    for r in results:
        skilled = {n for n, s in r["skill"].items() if s["skill"]}
        real = [p for p in r["pairs"] if AA not in p["pair"]]
        aa = [p for p in r["pairs"] if AA in p["pair"]]
        for truth in sorted({k.split(" | ")[0] for p in r["pairs"] for k in p["held_out"]}):
            for kind in ("seeds", "seeds and time", "seeds and time (April -> March)"):
                key = f"{truth} | {kind}"
                band = [p for p in real if set(p["pair"]) <= skilled
                        and BAND[0] <= p["held_out"][key]["ql"]["accuracy"] <= BAND[1]]
                gains = [p["held_out"][key]["cql - ql"]["accuracy"] for p in band]
                body.append([
                    r["cell"], truth, kind, f"{sum(set(p['pair']) <= skilled for p in real)} of {len(real)}",
                    "; ".join(f"{target}: "
                              f"{sum(p[k]['ql']['winner'] is not None for p in real if set(p['pair']) <= skilled)} / "
                              f"{sum(p[k]['cql']['winner'] is not None for p in real if set(p['pair']) <= skilled)}"
                              for target, k in (("weeks", "verdicts"), ("future", "verdicts_future"))),
                    (_diff(r["summaries"][key]["cql - ql"]) + f" (mean over {len(r['counted_pairs'])} pairs)")
                    if key in r["summaries"] else "no pair with skill",
                    f"{len(band)}: " + (", ".join(f"{g:+.2f}" for g in gains) if gains else "-"),
                    "; ".join(f"{_diff(p['held_out'][key]['cql - ql'])}, QL {p['verdicts']['ql']['outcome']}, "
                              f"CQL {p['verdicts']['cql']['outcome']} (weeks), QL "
                              f"{p['verdicts_future']['ql']['outcome']}, CQL {p['verdicts_future']['cql']['outcome']}"
                              f" (future)" for p in aa) or "-"])
    return format_table(body, ["store", "truth", "held out in", "pairs with skill", "pairs decided at 95% (QL / CQL)",
                               "held-out CQL - QL [95% CI]", f"pairs with QL's held-out Acc in {BAND}: CQL - QL",
                               "A/A: CQL - QL, verdicts"], style="markdown")


def compute_table(results: list[dict]) -> str:
    from rolling_calib.core.tables import format_table

    body = [[r["cell"], r["config"], r["units"], f"{r['train_core_seconds'] / 3600:.2f}",
             f"{r['analysis_cpu_seconds']:.0f}"] for r in results]
    return format_table(body, ["store", "workflow", "units", "training (core-hours)", "analysis (CPU-s)"],
                        style="markdown")


def _write_doc(doc: Path, name: str, table: str) -> None:
    begin, end = f"<!-- real-minute-{name}:begin -->", f"<!-- real-minute-{name}:end -->"
    text = doc.read_text(encoding="utf-8")
    if begin not in text or end not in text:
        raise SystemExit(f"{doc}: expected the markers {begin} and {end}")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    doc.write_text(f"{head}{begin}\n{table}\n{end}{tail}", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="train what is missing of every store (resumable)")
    p_run.add_argument("--workers", type=int, default=1, help="worker processes per run (default 1)")
    p_an = sub.add_parser("analyse", help="score, decide and write the tables")
    p_an.add_argument("--n-boot", type=int, default=500, help="bootstrap replicates (default 500)")
    p_an.add_argument("--doc", type=Path, default=None, help="write the tables into this Markdown file's markers")
    for p in (p_run, p_an):
        p.add_argument("--only", nargs="+", choices=[c.name for c in CELLS], help="only these stores")
    p_sp = sub.add_parser("spike", help="the spike-in control on the lstm store's runs, and the offsets' persistence "
                                        "in the lstm and control stores")
    p_sp.add_argument("--n-boot", type=int, default=500, help="bootstrap replicates (default 500)")
    p_sp.add_argument("--seed", type=int, default=SPIKE_SEED, help=f"seed of the offsets (default {SPIKE_SEED})")
    p_sp.add_argument("--doc", type=Path, default=None, help="write the tables into this Markdown file's markers")
    p_sp.add_argument("--saved", action="store_true", help="write the tables from the saved spike.json (no scoring)")
    args = parser.parse_args(argv)
    if args.command == "spike":
        return spike_main(n_boot=args.n_boot, seed=args.seed, doc=args.doc, saved=args.saved)
    cells = [c for c in CELLS if not args.only or c.name in args.only]
    if args.command == "run":
        for name, s in run(cells, workers=args.workers).items():
            print(f"{name}: {s / 60:.1f} min of wall time")
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "evidence.json"
    saved = json.loads(path.read_text()) if path.is_file() else {}
    for name in [n for n, r in saved.items() if not all("verdicts_future" in p for p in r["pairs"])]:
        print(f"{name}: the saved analysis predates the verdicts under both questions; dropped", flush=True)
        del saved[name]
    for cell in cells:
        if not (REPO / cell.store / "manifest.json").is_file():
            print(f"{cell.name}: no store at {cell.store}; skipped", flush=True)
            continue
        print(f"[{time.strftime('%H:%M:%S')}] analysing {cell.name}", flush=True)
        saved[cell.name] = analyse_cell(cell, n_boot=args.n_boot)
        path.write_text(json.dumps(saved, indent=2, default=str) + "\n")
    results = [saved[c.name] for c in CELLS if c.name in saved]
    tables = {"skill": skill_table(results), "pairs": pair_table(results),
              "control": pair_table([r for r in results if r["cell"] == "control"], truth="true risk"),
              "summary": summary_table(results), "compute": compute_table(results)}
    (OUT / "tables.md").write_text("\n\n".join(f"## {k}\n\n{v}" for k, v in tables.items()) + "\n")
    if args.doc is not None:
        for name, table in tables.items():
            _write_doc(args.doc, name, table)
    print("\n\n".join(tables.values()))
    return 0


def spike_main(*, n_boot: int, seed: int, doc: Path | None, saved: bool = False) -> int:
    """``spike``: the control on the lstm store, the persistence of both stores; ``spike.json``, the tables
    (``saved``: the tables from the last ``spike.json``, nothing scored)."""
    cells = {c.name: c for c in CELLS}
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "spike.json"
    if saved:
        if not path.is_file():
            raise SystemExit(f"{path}: no saved spike-in control; run 'spike' without --saved first")
        kept = json.loads(path.read_text())
        result, control = kept["spike"], kept["control_persistence"]
    else:
        print(f"[{time.strftime('%H:%M:%S')}] spiking lstm", flush=True)
        result = spike_cell(cells["lstm"], n_boot=n_boot, seed=seed)
        control = (control_persistence(cells["control"]) if (REPO / cells["control"].store / "manifest.json").is_file()
                   else None)
        path.write_text(json.dumps({"spike": result, "control_persistence": control}, indent=2, default=str) + "\n")
    tables = {"spike": spike_table(result),
              "persistence": persistence_table([result] + ([control] if control else []))}
    (OUT / "spike_tables.md").write_text("\n\n".join(f"## {k}\n\n{v}" for k, v in tables.items()) + "\n")
    if doc is not None:
        for name, table in tables.items():
            _write_doc(doc, name, table)
    print("\n\n".join(tables.values()))
    print(f"cpu {result['analysis_cpu_seconds']} s, wall {result['wall_seconds']} s; "
          f"CQL on March changed by at most {max(c['cql_march_change'] for c in result['cells']):.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
