"""MinuteBarHandler / MinuteTSDataset on tiny stores read through Qlib's real provider."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model_helpers import SEGMENTS, TINY_END, TINY_START, dataset_config, handler_config, use_store


@pytest.fixture(scope="module")
def raw(store):
    """Raw bars read independently through D.features, (instrument, datetime) sorted."""
    from qlib.data import D

    use_store(store)
    df = D.features(D.instruments("us25"), ["$open", "$high", "$low", "$close", "$vwap", "$volume"],
                    TINY_START, f"{TINY_END} 23:59", freq="1min")
    df.columns = ["open", "high", "low", "close", "vwap", "volume"]
    return df.sort_index()


# ------------------------------------------------------------------------------ labels
def _labels_loop(close: np.ndarray, session: np.ndarray, h: int) -> np.ndarray:
    """Reference: plain loops, one instrument row at a time."""
    out = np.full(close.shape, np.nan)
    for i in range(close.shape[0]):
        for t in range(close.shape[1]):
            if t + h >= close.shape[1] or session[t + h] != session[t] or np.isnan(close[i, t]):
                continue
            j = t + h
            while np.isnan(close[i, j]):
                j -= 1
            out[i, t] = 1e4 * (close[i, j] / close[i, t] - 1)
    return out


def test_compute_labels_hand_values():
    from rolling_calib.qlib_adapter.dataset import compute_labels

    close = np.array([[100.0, 101.0, np.nan, 104.0, 50.0, 55.0]])
    session = np.array([0, 0, 0, 0, 1, 1])
    got = compute_labels(close, session, horizon=2)
    # t=0: close[2] missing -> last close at or before t+2 within the session = 101 -> +100 bp
    # t=1: close[3]=104 -> 1e4*(104/101-1); t=2: no bar; t=3,4,5: t+2 crosses the close / data end
    expected = [100.0, 1e4 * (104 / 101 - 1), np.nan, np.nan, np.nan, np.nan]
    np.testing.assert_allclose(got[0], expected, rtol=1e-6)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 4),
    st.lists(st.integers(1, 6), min_size=1, max_size=4),
    st.integers(0, 2**31 - 1),
)
def test_compute_labels_matches_loop(h, session_lengths, seed):
    from rolling_calib.qlib_adapter.dataset import compute_labels

    rng = np.random.default_rng(seed)
    session = np.repeat(np.arange(len(session_lengths)), session_lengths)
    close = rng.uniform(1, 2, size=(2, len(session)))
    close[rng.random(close.shape) < 0.25] = np.nan
    np.testing.assert_allclose(compute_labels(close, session, horizon=h), _labels_loop(close, session, h),
                               rtol=1e-5, equal_nan=True)


def test_labels_match_independent_pandas_computation(dataset, raw):
    """label = 1e4 (close[t+10] / close[t] - 1), same session only, for every test row."""
    lab = dataset.labels("test")
    close = raw["close"].astype("float64")
    ref = []
    for inst, s in close.groupby(level="instrument"):
        s = s.droplevel("instrument")
        fwd = s.ffill().groupby(s.index.normalize()).shift(-10)
        ref.append(pd.DataFrame({"instrument": inst, "datetime": s.index, "ref": 1e4 * (fwd / s - 1).values}))
    ref = pd.concat(ref).set_index(["datetime", "instrument"])["ref"]
    np.testing.assert_allclose(lab.values, ref.reindex(lab.index).values, rtol=2e-5)
    assert lab.notna().all()


def test_last_bars_of_each_session_have_no_label(dataset):
    for seg in ("train", "test"):
        idx = dataset.labels(seg).index.get_level_values("datetime")
        minute = idx.hour * 60 + idx.minute
        assert minute.max() <= 15 * 60 + 49  # 15:50 .. 15:59 never labelled (full sessions)
    full = dataset.labels("test", stride=1)
    assert (full.index.get_level_values("datetime").time == pd.Timestamp("15:49").time()).any()


def test_labels_are_raw_basis_points_not_normalised(dataset, raw):
    lab = dataset.labels("train")
    assert 3 < lab.std() < 500  # bp scale of a 10-minute return
    assert abs(lab.mean()) < lab.std()


# ------------------------------------------------------------------------------ features
def _documented_fill(bars: pd.DataFrame) -> pd.DataFrame:
    """The module doc's missing-data policy, written independently: a missing bar is a flat bar at the
    last close with volume 0; a real bar's missing open/high/low/vwap is its close."""
    out = bars.copy()
    missing = out["close"].isna()
    last_close = out["close"].ffill()
    for f in ("open", "high", "low", "vwap"):
        out[f] = out[f].where(out[f] > 0, out["close"])
    for f in ("open", "high", "low", "close", "vwap"):
        out.loc[missing, f] = last_close[missing]
    out.loc[missing, "volume"] = 0.0
    return out


def test_window_values_are_alpha360_log_ratios(dataset, raw):
    """Raw windows: log(P[t-k] / close[t]) for prices, log1p(v[t-k]) - log1p(v[t]) for volume."""
    sampler = dataset.prepare("test")
    i = len(sampler) // 2
    pos = sampler.positions[i : i + 1]
    w = sampler.panel.windows(pos, 20)[0]
    t, inst = sampler.get_index()[i]
    bars = _documented_fill(raw.xs(inst, level="instrument"))
    loc = bars.index.get_loc(t)
    win = bars.iloc[loc - 19 : loc + 1]
    for k, f in enumerate(["open", "high", "low", "close", "vwap"]):
        np.testing.assert_allclose(w[:, k], np.log(win[f] / bars["close"].iloc[loc]), atol=2e-5)
    np.testing.assert_allclose(w[:, 5], np.log1p(win["volume"]) - np.log1p(bars["volume"].iloc[loc]), atol=2e-4)


def test_normalised_windows_are_clipped_robust_z_scores(dataset):
    from rolling_calib.qlib_adapter.dataset import fit_window_norm

    sampler = dataset.prepare("train")
    x, y = sampler.batch(np.arange(min(500, len(sampler))))
    assert x.shape == (min(500, len(sampler)), 20, 6) and x.dtype == np.float32
    assert np.isfinite(x).all() and np.abs(x).max() <= 3.0
    # norm refitted on the fit range only: a different fit range gives different stats
    h = dataset.handler
    other = fit_window_norm(h.panel, pd.Timestamp("2018-02-10"), pd.Timestamp("2018-02-28 23:59"),
                            window=20, max_samples=5000, clip=3.0)
    assert not np.allclose(other.scale, h.norm.scale)
    # median of the normalised training windows is ~0 per cell (robust z-score), lag-0 close is 0
    xs, _ = sampler.batch(np.arange(len(sampler)))
    assert np.abs(np.median(xs, axis=0)).max() < 0.25
    assert (xs[:, -1, 3] == 0).all()


def test_norm_matches_independent_median_mad(store):
    """WindowNorm.fit = per-cell median and 1.4826 * MAD (checked against scipy)."""
    from scipy import stats

    from rolling_calib.qlib_adapter.dataset import WindowNorm

    rng = np.random.default_rng(0)
    w = rng.standard_t(3, size=(400, 4, 6)).astype(np.float32)
    w[:, -1, 3] = 0.0
    n = WindowNorm.fit(w, clip=3.0)
    np.testing.assert_allclose(n.center, np.median(w, axis=0), rtol=1e-6)
    mad = stats.median_abs_deviation(w, axis=0, scale="normal")
    expected = np.where(mad > 1e-12, mad, 1.0)
    np.testing.assert_allclose(n.scale, expected, rtol=1e-3)
    z = n.apply(w.copy())
    np.testing.assert_allclose(z, np.clip((w - n.center) / n.scale, -3, 3), rtol=1e-5, atol=1e-6)


def test_window_before_start_of_data_repeats_first_bar(dataset):
    panel = dataset.handler.panel
    first = np.array([0, 5], dtype=np.int64)  # minutes 0 and 5 of the first instrument
    w = panel.windows(first, 20)
    raw0 = panel.values[0]
    for row, p in zip(w, first):
        np.testing.assert_allclose(row[: 20 - p - 1, 3], raw0[3] - panel.values[p, 3], atol=1e-6)


# ------------------------------------------------------------------------------ sampling
def test_stride_and_order(dataset):
    def minute_of_session(idx):
        t = idx.get_level_values("datetime")
        return t.hour * 60 + t.minute - (9 * 60 + 30)

    train = dataset.prepare("train")
    assert (minute_of_session(train.get_index()) % 15 == 0).all()
    assert set(minute_of_session(train.get_index())) == set(range(0, 380, 15))
    test = dataset.prepare("test")
    assert (minute_of_session(test.get_index()) % 5 == 0).all()
    idx = test.get_index()
    assert idx.is_monotonic_increasing  # sorted (datetime, instrument)
    lab = dataset.prepare("test", col_set="label")
    assert lab.index.equals(idx) and list(lab.columns) == ["LABEL0"]


def test_segment_bounds_inclusive_and_disjoint(dataset):
    tr = dataset.labels("train").index.get_level_values("datetime")
    va = dataset.labels("valid").index.get_level_values("datetime")
    assert tr.min() >= pd.Timestamp("2018-01-03") and tr.max().date() == pd.Timestamp("2018-01-31").date()
    assert va.min() > tr.max()


def test_empty_and_missing_segments(store):
    from qlib.utils import init_instance_by_config

    use_store(store)
    ds = init_instance_by_config(dataset_config(segments={"train": SEGMENTS["train"], "valid": None}))
    assert ds.prepare("valid").empty
    assert ds.prepare("test").empty and len(ds.labels("test")) == 0
    assert len(ds.prepare(("2018-02-01", "2018-02-01"))) > 0


def test_sampler_never_materialises_a_full_window_frame(dataset):
    s = dataset.prepare("train")
    owned = [v for v in vars(s).values() if isinstance(v, np.ndarray)]
    # only the positions, and the handler's label array it reads (shared, not copied); windows are cut per batch
    assert all(a.ndim == 1 or a is s.panel.label for a in owned)
    assert s.panel.values.shape[1] == 6  # per-bar array (bars x 6)


def test_handler_fetch_is_qlib_frame(dataset):
    h = dataset.handler
    df = h.fetch(slice("2018-01-02 09:30", "2018-01-02 09:31"), col_set="feature")
    assert list(df.columns) == ["open", "high", "low", "close", "vwap", "volume"]
    assert len(df) == 2 * 3
    lab = h.fetch(col_set="label")
    assert lab.shape[1] == 1


# ------------------------------------------------------------------------------ bad input
def test_unknown_and_bad_kwargs_rejected(store):
    from rolling_calib.qlib_adapter.dataset import MinuteBarHandler, MinuteTSDataset

    use_store(store)
    with pytest.raises(TypeError, match="label_horizn"):
        MinuteBarHandler(label_horizn=5)
    with pytest.raises(ValueError, match="label_horizon"):
        MinuteBarHandler(label_horizon=0)
    with pytest.raises(ValueError, match="step_len"):
        MinuteTSDataset(**dataset_config(step_len=40)["kwargs"])
    with pytest.raises(ValueError, match="sample_stride"):
        MinuteTSDataset(**dataset_config(sample_stride=0)["kwargs"])
    with pytest.raises(TypeError, match="stepLen"):
        MinuteTSDataset(**dataset_config(stepLen=4)["kwargs"])
    with pytest.raises(ValueError, match="fit_start_time"):
        MinuteBarHandler(**handler_config(fit_start_time="2019-01-01", fit_end_time="2019-02-01")["kwargs"])
    with pytest.raises(ValueError, match="segments\\['test'\\]"):
        MinuteTSDataset(**dataset_config(segments={"train": SEGMENTS["train"], "test": "2018-02"})["kwargs"])


def test_missing_bars_are_filled_and_counted(tmp_path):
    """A hand-made store with gaps and bad values: repairs are counted, labels stay honest."""
    from data_prep import qlib_store, session_minutes
    from rolling_calib.qlib_adapter.dataset import MinuteBarHandler, clear_cache

    minutes = session_minutes("2018-01-02", "2018-01-03")
    n = len(minutes)
    close = (100 * np.exp(np.cumsum(np.full(n, 1e-4)))).astype(np.float32).astype(np.float64)
    cols = {"open": close.copy(), "high": close * 1.001, "low": close * 0.999, "close": close.copy(),
            "vwap": close.copy(), "volume": np.full(n, 1000.0), "factor": np.ones(n)}
    for f in ("open", "high", "low", "close", "vwap", "volume"):
        cols[f][[20, 21]] = np.nan  # two missing bars
    cols["vwap"][10] = -1.0  # bad vwap on a real bar
    cols["volume"][11] = np.nan  # missing volume on a real bar
    qlib_store.write_calendar(tmp_path, minutes)
    qlib_store.write_symbol(tmp_path, "AAPL", 0, cols)
    qlib_store.write_instruments(tmp_path, "all", {"AAPL": (minutes[0], minutes[-1])})
    use_store(tmp_path)
    clear_cache()
    h = MinuteBarHandler(instruments="all", start_time="2018-01-02", end_time="2018-01-03", window=5,
                         fit_start_time="2018-01-02", fit_end_time="2018-01-03")
    rep = h.data_report
    assert rep["missing_bars_filled"] == 2
    assert rep["vwap_filled_from_close"] == 1
    assert rep["volume_set_to_zero"] == 1
    lab = h.panel.label[0]
    assert np.isnan(lab[[20, 21]]).all()  # no prediction at a missing bar
    np.testing.assert_allclose(lab[0], 1e4 * (close[10] / close[0] - 1), rtol=1e-4)
    # t + 10 = 21 is missing: the last close at or before it (bar 19) is used
    np.testing.assert_allclose(lab[11], 1e4 * (close[19] / close[11] - 1), rtol=1e-4)
    # the last 10 bars of each 390-bar session have no label
    assert np.isnan(lab[380:390]).all() and np.isfinite(lab[390]) and np.isnan(lab[-10:]).all()
    # a missing bar inside a window is a flat bar at the last close, with zero volume
    v = h.panel.values
    np.testing.assert_allclose(v[20, :5], np.log(close[19]), rtol=1e-6)
    assert v[20, 5] == 0.0


def test_pickled_dataset_reloads_its_data(store, dataset):
    """Qlib's Serializable drops '_' attributes when pickling; the handler reloads on demand."""
    import pickle

    from rolling_calib.qlib_adapter.dataset import clear_cache

    use_store(store)
    clear_cache()  # force a real reload from the store
    clone = pickle.loads(pickle.dumps(dataset))
    a, b = dataset.prepare("test"), clone.prepare("test")
    np.testing.assert_array_equal(a.positions, b.positions)
    np.testing.assert_array_equal(a.batch(np.arange(10))[0], b.batch(np.arange(10))[0])


def test_instrument_list_and_universe_name_agree(store):
    from rolling_calib.qlib_adapter.dataset import MinuteBarHandler

    use_store(store)
    by_name = MinuteBarHandler(**handler_config()["kwargs"])
    by_list = MinuteBarHandler(**handler_config(instruments=["MSFT", "AAPL"])["kwargs"])
    assert by_list.panel.instruments == ["AAPL", "MSFT"]
    rows = by_name.panel.values.reshape(3, -1, 6)
    np.testing.assert_array_equal(by_list.panel.values.reshape(2, -1, 6), rows[[0, 2]])


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(2, 30), st.integers(1, 12), st.integers(0, 2**31 - 1))
def test_windows_match_per_sample_loop_and_never_cross_instruments(n_inst, n_min, step_len, seed):
    """Vectorised window cutting == a per-sample loop that pads with the instrument's first bar."""
    from rolling_calib.qlib_adapter.dataset import BarPanel

    rng = np.random.default_rng(seed)
    values = rng.normal(size=(n_inst * n_min, 6)).astype(np.float32)
    panel = BarPanel(instruments=[f"S{i}" for i in range(n_inst)],
                     times=pd.date_range("2018-01-02 09:30", periods=n_min, freq="min"),
                     session_id=np.zeros(n_min, np.int32), values=values,
                     label=np.zeros((n_inst, n_min), np.float32))
    pos = rng.integers(0, n_inst * n_min, size=7)
    got = panel.windows(pos, step_len)
    for w, p in zip(got, pos):
        inst, t = divmod(int(p), n_min)
        rows = [values[inst * n_min + max(t - k, 0)] for k in range(step_len - 1, -1, -1)]
        ref = np.array(rows, dtype=np.float32)
        ref[:, :5] -= values[p, 3]
        ref[:, 5] -= values[p, 5]
        np.testing.assert_allclose(w, ref, rtol=1e-6, atol=1e-6)
