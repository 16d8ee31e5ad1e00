"""The IC metrics of ``score_store`` from arrays (labels prepared once per distinct label column)
and the duplicate check of the array reader, against straightforward implementations."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
from runner_helpers import sparse_calendar
from scipy import stats

from rolling_calib.analysis import scoring
from rolling_calib.analysis.scoring import daily_ic, score_store
from rolling_calib.core.schedule import rolling_windows
from rolling_calib.execution import reader
from rolling_calib.execution import store as st
from rolling_calib.execution.executors import UnitKey

INSTRUMENTS = ("AAA", "BBB", "CCC", "DDD")


def _scipy_ic(frame: pd.DataFrame) -> dict[str, float]:
    ics, ranks = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _, day in frame.groupby("datetime"):
            p, y = day["prediction"].to_numpy(), day["label"].to_numpy()
            if len(day) < 2 or np.ptp(p) == 0 or np.ptp(y) == 0:
                continue
            ics.append(stats.pearsonr(p, y)[0])
            ranks.append(stats.spearmanr(p, y)[0])
    ics = np.array(ics)
    return {"ic": ics.mean(), "icir": ics.mean() / ics.std(ddof=1), "rank_ic": float(np.mean(ranks))}


def _store_with_shared_labels(store) -> dict:
    """Pipeline ``a``: every seed predicts the same labels; pipeline ``b``: labels of its own per seed.

    Some dates lack an instrument (dates of different sizes) and labels have ties.
    """
    cal = sparse_calendar("2017-10-01", "2018-04-30")
    windows = rolling_windows(cal, initial_train_start="2017-10", start="2018-01", end="2018-03", step_months=1)
    rng = np.random.default_rng(4)
    shared = {}
    for w in windows:
        times = cal[(cal >= w.test.start) & (cal <= w.test.end)]
        idx = pd.MultiIndex.from_product([times, list(INSTRUMENTS)], names=["datetime", "instrument"])
        frame = pd.DataFrame({"label": np.round(rng.normal(0.0, 2.0, len(idx)), 0)}, index=idx).reset_index()
        shared[w.index] = frame[rng.random(len(frame)) > 0.1].reset_index(drop=True)
    frames, entries = {}, {}
    for name in ("a", "b"):
        entries[name] = {"config_hash": f"h-{name}", "task": {}, "windows": [w.to_dict() for w in windows],
                         "mode": "finetune", "seeds": [0, 1, 2]}
        for seed in range(3):
            parts = []
            for w in windows:
                frame = shared[w.index].copy()
                if name == "b":
                    frame["label"] = rng.normal(0.0, 2.0, len(frame))
                frame["prediction"] = 0.5 * frame["label"] + rng.normal(0.0, 1.0 + seed, len(frame))
                key = UnitKey(name, seed, w.index)
                sums = st.write_unit_parquet(st.unit_paths(store, key).parquet, frame[list(st.UNIT_COLUMNS)])
                st.atomic_write_json(st.unit_paths(store, key).sidecar,
                                     {"config_hash": f"h-{name}", "rows": len(frame), **sums.fields()})
                parts.append(frame)
            frames[(name, seed)] = pd.concat(parts, ignore_index=True)
    st.write_manifest(store, pipelines=entries, extra={"compare": [["a", "b"]]})
    return frames


def test_store_ic_columns_match_scipy_per_run(tmp_path, monkeypatch):
    frames = _store_with_shared_labels(tmp_path / "store")
    prepared = []
    original = scoring.prepare_labels
    monkeypatch.setattr(scoring, "prepare_labels", lambda *a, **k: prepared.append(1) or original(*a, **k))
    runs = score_store(tmp_path / "store").runs.set_index(["pipeline", "seed"])
    # labels prepared once for pipeline a's three seeds, once per seed of pipeline b
    assert len(prepared) == 4
    for (name, seed), frame in frames.items():
        want = _scipy_ic(frame)
        for column, value in want.items():
            assert runs.loc[(name, seed), column] == pytest.approx(value, rel=1e-11, abs=1e-12)


def test_daily_ic_cache_gives_the_uncached_values():
    rng = np.random.default_rng(2)
    dates = np.repeat(pd.date_range("2020-01-02", periods=30, freq="D").values, 6)
    label = np.round(rng.normal(size=len(dates)), 1)
    cache: dict = {}
    for k in range(3):
        prediction = label * k + rng.normal(size=len(dates))
        cached = daily_ic(prediction, label.copy(), dates.copy(), cache=cache)
        plain = daily_ic(prediction, label, dates)
        assert cached.summary() == plain.summary()
        np.testing.assert_array_equal(cached.ic, plain.ic)
    first = cache["labels"]
    other = label + 1.0
    daily_ic(label, other, dates, cache=cache)
    assert cache["labels"] is not first and cache["labels"].matches(other, dates)


def _pandas_duplicates(times: np.ndarray, codes: np.ndarray) -> int:
    return int(pd.DataFrame({"t": times, "c": codes}).duplicated().sum())


@pytest.mark.parametrize("order", ["written", "shuffled"])
def test_duplicate_rows_counts_as_pandas(order):
    rng = np.random.default_rng(6)
    for trial in range(40):
        n_times, n_codes = int(rng.integers(1, 30)), int(rng.integers(1, 6))
        times = np.repeat(pd.date_range("2020-01-02 09:30", periods=n_times, freq="min").values, n_codes)
        codes = np.tile(np.arange(n_codes, dtype=np.int32), n_times)
        keep = rng.random(len(times)) > 0.2
        times, codes = times[keep], codes[keep]
        if trial % 3 == 0 and len(times):   # repeat some rows next to themselves
            again = rng.integers(0, len(times), 3)
            at = np.sort(np.r_[np.arange(len(times)), again])
            times, codes = times[at], codes[at]
        if trial % 5 == 1 and len(codes):   # a missing id (-1)
            codes[rng.integers(0, len(codes))] = -1
        if order == "shuffled":
            perm = rng.permutation(len(times))
            times, codes = times[perm], codes[perm]
        assert reader._duplicate_rows(times, codes) == _pandas_duplicates(times, codes), trial
        ordered = reader._in_written_order(times, codes)
        assert reader._duplicate_rows(times, codes, ordered=ordered) == _pandas_duplicates(times, codes), trial
        assert not ordered or _pandas_duplicates(times, codes) == 0, trial


@pytest.mark.parametrize("order", ["written", "shuffled"])
def test_rows_outside_counts_the_rows_outside_the_test_segment(order):
    """The bounds from the first and last row when the rows are in written order, from min and max otherwise: the
    same count as testing every row against the segment."""
    from rolling_calib.core.schedule import Segment, Window

    rng = np.random.default_rng(7)
    test = Segment(pd.Timestamp("2020-01-02 09:40"), pd.Timestamp("2020-01-02 10:10"))
    window = Window(index=0, fit=test, train=test, valid=None, test=test)
    for trial in range(60):
        start = pd.Timestamp("2020-01-02 09:30") + pd.Timedelta(minutes=int(rng.integers(0, 40)))
        n_times, n_codes = int(rng.integers(1, 40)), int(rng.integers(1, 4))
        times = np.repeat(pd.date_range(start, periods=n_times, freq="min").values, n_codes)
        codes = np.tile(np.arange(n_codes, dtype=np.int32), n_times)
        if order == "shuffled":
            perm = rng.permutation(len(times))
            times, codes = times[perm], codes[perm]
        expected = int((~test.contains(times)).sum())
        ordered = reader._in_written_order(times, codes)
        assert reader._rows_outside(times, window, ordered=ordered) == expected, trial
        assert reader._rows_outside(times, window) == expected, trial
