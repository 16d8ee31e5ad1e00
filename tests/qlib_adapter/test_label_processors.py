"""Qlib's learn processors on the minute label: equal to Qlib's own processors, per minute bar, through DK_L."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model_helpers import SEGMENTS, dataset_config, handler_config, model_config, qlib_init_for, use_store

RANK = {"class": "CSRankNorm", "kwargs": {"fields_group": "label"}}
ZSCORE = {"class": "CSZScoreNorm", "kwargs": {"fields_group": "label"}}
ROBUST = {"class": "CSZScoreNorm", "kwargs": {"fields_group": "label", "method": "robust"}}
CHAINS = {
    "rank": [RANK],
    "zscore": [ZSCORE],
    "robust": [ROBUST],
    "dropna+rank": ["DropnaLabel", RANK],  # Qlib's benchmark learn_processors
    "dropna": ["DropnaLabel"],
    "zscore+rank": [ZSCORE, RANK],
    "module_path": [{"class": "CSRankNorm", "module_path": "qlib.data.dataset.processor",
                     "kwargs": {"fields_group": "label"}}],
}


# ------------------------------------------------------------------------------ a realistic label frame
def _market(n_minutes: int = 2 * 390, n_inst: int = 25, seed: int = 5) -> tuple[np.ndarray, pd.DatetimeIndex, list]:
    """25 stocks x two sessions of minute labels (bp, float32) with the cases a minute panel has.

    Session-end minutes without labels, missing bars, ties (zero returns), a minute with a single
    labelled stock, a minute whose labels are all equal, one with two labels.
    """
    rng = np.random.default_rng(seed)
    label = (rng.standard_t(3, size=(n_inst, n_minutes)) * 15).astype(np.float32)
    label[rng.random(label.shape) < 0.05] = np.nan  # missing bars
    label[rng.random(label.shape) < 0.05] = 0.0  # zero returns: ties
    label[:, 380:390] = np.nan  # 15:50 .. 15:59 of session 1
    label[:, -10:] = np.nan
    label[:, 100] = np.nan  # one labelled stock
    label[0, 100] = 12.0
    label[:, 101] = 7.0  # all equal
    label[:, 102] = np.nan  # two labels
    label[:2, 102] = [3.0, -4.0]
    day1 = pd.date_range("2018-03-01 09:30", periods=390, freq="min")
    times = day1.append(day1 + pd.Timedelta(days=1))[:n_minutes]
    return label, times, [f"S{i:02d}" for i in range(n_inst)]


def _qlib_frame(label: np.ndarray, times: pd.DatetimeIndex, instruments: list, dtype=np.float32) -> pd.DataFrame:
    """The handler's frame layout: (datetime, instrument) x [feature..., label], datetime-major rows."""
    index = pd.MultiIndex.from_product([times, pd.Index(instruments)], names=["datetime", "instrument"])
    feat = np.random.default_rng(0).standard_normal((len(index), 2))
    cols = pd.MultiIndex.from_tuples([("feature", "close"), ("feature", "volume"), ("label", "LABEL0")])
    return pd.DataFrame(np.c_[feat, label.T.reshape(-1)].astype(dtype), index=index, columns=cols)


def _by_qlib(configs: list, frame: pd.DataFrame) -> pd.DataFrame:
    """Qlib's own processors, built and chained as DataHandlerLP does, on a copy of ``frame``."""
    from qlib.data.dataset import processor as processor_module
    from qlib.utils import init_instance_by_config

    out = frame.copy()
    for config in configs:
        module = None if isinstance(config, dict) and "module_path" in config else processor_module
        out = init_instance_by_config(config, module, accept_types=processor_module.Processor)(out)
    return out


def _grid(frame: pd.DataFrame, like: pd.DataFrame) -> np.ndarray:
    """The label column of ``frame`` on ``like``'s rows (dropped rows: NaN), as (instruments, minutes)."""
    values = frame[("label", "LABEL0")].reindex(like.index).to_numpy(dtype=np.float64)
    n_t = like.index.get_level_values("datetime").nunique()
    return values.reshape(n_t, -1).T


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_equal_to_qlibs_processors_on_a_25_stock_minute_frame(name):
    """Our learned label is what Qlib's processors give on the same frame (to float32 rounding)."""
    from rolling_calib.qlib_adapter.label_processors import apply_label_processors, build_label_processors

    label, times, instruments = _market()
    ours = apply_label_processors(label, times, instruments, build_label_processors(CHAINS[name]))
    frame = _qlib_frame(label, times, instruments)
    by_qlib = _by_qlib(CHAINS[name], frame)
    pd.testing.assert_frame_equal(by_qlib["feature"], frame["feature"].loc[by_qlib.index])  # features untouched
    expected = _grid(by_qlib, frame)
    assert ours.dtype == np.float32
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(expected))
    if "zscore" in name or "robust" in name:  # Qlib's pandas sums float32 in float32; ours in float64
        np.testing.assert_allclose(ours, expected, rtol=2e-6, atol=2e-6)
    else:  # ranks are exact
        np.testing.assert_array_equal(ours, expected.astype(np.float32))
    exact = _grid(_by_qlib(CHAINS[name], _qlib_frame(label, times, instruments, np.float64)), frame)
    np.testing.assert_allclose(ours, exact, rtol=1e-6, atol=1e-6)  # on a float64 frame: float32 rounding only


def test_edge_minutes_as_qlib_leaves_them():
    """One labelled stock: rank 1.73, z-score undefined; all equal: ranks tie at the middle, z-score undefined."""
    from rolling_calib.qlib_adapter.label_processors import apply_label_processors, build_label_processors

    label, times, instruments = _market()
    rank = apply_label_processors(label, times, instruments, build_label_processors([RANK]))
    z = apply_label_processors(label, times, instruments, build_label_processors([ZSCORE]))
    assert rank[0, 100] == np.float32(1.73) and np.isnan(z[0, 100])
    assert np.allclose(rank[:, 101], 3.46 * (13 / 25 - 0.5)) and np.isnan(z[:, 101]).all()
    np.testing.assert_allclose(z[:2, 102], [1 / np.sqrt(2), -1 / np.sqrt(2)], rtol=1e-6)
    # a processor never adds a label: session ends and missing bars stay NaN
    assert np.isnan(rank[:, 380:390]).all() and np.array_equal(np.isnan(rank), np.isnan(label))


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 6), st.integers(1, 30), st.integers(0, 2**31 - 1), st.floats(0, 0.5))
def test_cs_rank_norm_is_the_rank_formula(n_rows, n_inst, seed, nan_share):
    """``(rank(pct=True) - 0.5) * 3.46`` per row, average ranks of ties, written as counts."""
    from rolling_calib.qlib_adapter.label_processors import cs_rank_norm

    rng = np.random.default_rng(seed)
    grid = rng.integers(-3, 4, size=(n_rows, n_inst)).astype(np.float64)  # many ties
    grid[rng.random(grid.shape) < nan_share] = np.nan
    expected = np.full(grid.shape, np.nan)
    for r, row in enumerate(grid):
        valid = row[~np.isnan(row)]
        for c, x in enumerate(row):
            if not np.isnan(x):
                rank = (valid < x).sum() + ((valid == x).sum() + 1) / 2
                expected[r, c] = (rank / len(valid) - 0.5) * 3.46
    np.testing.assert_allclose(cs_rank_norm(grid), expected, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------------ the handler's data keys
@pytest.fixture(scope="module")
def rank_dataset(store):
    from qlib.utils import init_instance_by_config

    use_store(store)
    return init_instance_by_config(dataset_config(handler=handler_config(learn_processors=["DropnaLabel", RANK])))


def test_prepare_dk_l_is_qlibs_csranknorm_and_dk_r_dk_i_the_raw_label(rank_dataset, dataset):
    from qlib.data.dataset.handler import DataHandlerLP as LP

    h = rank_dataset.handler
    raw = h.fetch(col_set=LP.CS_RAW, data_key=LP.DK_R)  # the whole per-bar frame (Qlib's column groups), raw label
    expected = _by_qlib(["DropnaLabel", RANK], raw)[("label", "LABEL0")]
    for seg in ("train", "valid", "test"):
        learn = rank_dataset.prepare(seg, data_key=LP.DK_L)
        np.testing.assert_array_equal(learn.labels, expected.reindex(learn.get_index()).to_numpy(np.float32))
        frame = rank_dataset.prepare(seg, col_set="label", data_key=LP.DK_L)
        assert frame.index.equals(learn.get_index())
        np.testing.assert_array_equal(frame.iloc[:, 0].to_numpy(), learn.labels)
        for key in (LP.DK_R, LP.DK_I):  # raw bp labels, as the dataset without processors has them
            np.testing.assert_array_equal(rank_dataset.prepare(seg, data_key=key).labels, dataset.labels(seg).to_numpy())
            lab = rank_dataset.prepare(seg, col_set="label", data_key=key)
            assert lab.index.equals(dataset.labels(seg).index)
            np.testing.assert_array_equal(lab.iloc[:, 0].to_numpy(), dataset.labels(seg).to_numpy())
    # 3 stocks: per minute the ranks are 1..n of n, so the mean of a full minute is 1.73 / n
    learn = rank_dataset.prepare("train", col_set="label", data_key=LP.DK_L).iloc[:, 0]
    per_minute = learn.groupby(level="datetime").agg(["mean", "size"])
    np.testing.assert_allclose(per_minute["mean"], 1.73 / per_minute["size"], rtol=1e-6)
    assert learn.abs().max() <= 1.73 + 1e-6


def test_same_windows_under_every_data_key(rank_dataset):
    from qlib.data.dataset.handler import DataHandlerLP as LP

    learn, raw = rank_dataset.prepare("valid", data_key=LP.DK_L), rank_dataset.prepare("valid", data_key=LP.DK_R)
    assert learn.get_index().equals(raw.get_index())  # CSRankNorm defines every labelled bar
    idx = np.arange(0, len(raw), 7)
    np.testing.assert_array_equal(learn.batch(idx)[0], raw.batch(idx)[0])


def test_handler_frames_nan_where_unlabelled_in_both_keys(rank_dataset):
    from qlib.data.dataset.handler import DataHandlerLP as LP

    h = rank_dataset.handler
    raw, learn = h.fetch(col_set=LP.CS_RAW, data_key=LP.DK_R), h.fetch(col_set=LP.CS_RAW, data_key=LP.DK_L)
    assert raw.index.equals(learn.index)  # every bar stays (history of windows)
    pd.testing.assert_frame_equal(raw["feature"], learn["feature"])
    r, lab = raw[("label", "LABEL0")].to_numpy(), learn[("label", "LABEL0")].to_numpy()
    np.testing.assert_array_equal(np.isnan(r), np.isnan(lab))
    minute = raw.index.get_level_values("datetime")
    last10 = (minute.hour == 15) & (minute.minute >= 50)
    assert last10.any() and np.isnan(lab[last10]).all() and np.isnan(r[last10]).all()
    assert 3 < np.nanstd(r) and np.nanmax(np.abs(lab)) <= 1.73 + 1e-6


def test_undefined_learned_labels_are_no_samples(store):
    """CSZScoreNorm of a minute with one labelled stock is NaN (as in Qlib): that bar is left out of DK_L only.

    Two stocks: every minute where one of them has no bar leaves the other alone in its cross-section;
    every other minute has z-scores +-1/sqrt(2) (two values, std with ddof 1).
    """
    from qlib.data.dataset.handler import DataHandlerLP as LP
    from qlib.utils import init_instance_by_config

    use_store(store)
    handler = handler_config(instruments=["AAPL", "F"], learn_processors=[ZSCORE])
    ds = init_instance_by_config(dataset_config(handler=handler, test_stride=1))
    raw, learn = ds.prepare("test", data_key=LP.DK_R), ds.prepare("test", data_key=LP.DK_L)
    minutes = raw.get_index().get_level_values("datetime")
    alone = pd.Series(minutes).map(pd.Series(minutes).value_counts()).to_numpy() == 1
    assert 0 < alone.sum() < 100  # a few minutes with one stock
    assert learn.get_index().equals(raw.get_index()[~alone])
    np.testing.assert_allclose(np.abs(learn.labels), np.sqrt(0.5), rtol=1e-6)
    assert np.isnan(ds.handler.label_array(LP.DK_L)).sum() > np.isnan(ds.handler.label_array(LP.DK_R)).sum()


def test_no_learn_processors_means_dk_l_is_the_raw_label_itself(dataset):
    from qlib.data.dataset.handler import DataHandlerLP as LP

    h = dataset.handler
    assert h.label_array(LP.DK_L) is h.panel.label
    pd.testing.assert_frame_equal(h.fetch(data_key=LP.DK_L), h.fetch(data_key=LP.DK_R))
    assert dataset.prepare("train", data_key=LP.DK_L).label is h.panel.label
    with pytest.raises(ValueError, match=r"data_key: expected one of \['infer', 'learn', 'raw'\], found 'lern'"):
        dataset.prepare("train", data_key="lern")


def test_learned_label_is_computed_once_per_panel(rank_dataset, store):
    from qlib.data.dataset.handler import DataHandlerLP as LP
    from qlib.utils import init_instance_by_config

    again = init_instance_by_config(dataset_config(handler=handler_config(learn_processors=["DropnaLabel", RANK])))
    assert again.handler.label_array(LP.DK_L) is rank_dataset.handler.label_array(LP.DK_L)
    other = init_instance_by_config(dataset_config(handler=handler_config(learn_processors=[ZSCORE])))
    assert not np.array_equal(other.handler.label_array(LP.DK_L), rank_dataset.handler.label_array(LP.DK_L),
                              equal_nan=True)


def test_pickled_handler_keeps_its_processors(rank_dataset):
    from qlib.data.dataset.handler import DataHandlerLP as LP

    back = pickle.loads(pickle.dumps(rank_dataset))
    assert [type(p).__name__ for p in back.handler.learn_processors] == ["DropnaLabel", "CSRankNorm"]
    np.testing.assert_array_equal(back.prepare("test", data_key=LP.DK_L).labels,
                                  rank_dataset.prepare("test", data_key=LP.DK_L).labels)


# ------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize("config, message", [
    ({"class": "RobustZScoreNorm", "kwargs": {"fit_start_time": None, "fit_end_time": None, "fields_group": "feature"}},
     r"found \[0\] RobustZScoreNorm with fields_group 'feature': a feature processor \(MinuteBarHandler normalises "
     r"its features itself, with its window norm fitted on fit_start_time\.\.fit_end_time\)"),
    ({"class": "CSRankNorm"}, r"found \[0\] CSRankNorm with fields_group None acts on every column: features included"),
    ("ProcessInf", r"found \[0\] ProcessInf has no fields_group: it acts on every column"),
    ({"class": "ZScoreNorm", "kwargs": {"fit_start_time": None, "fit_end_time": None, "fields_group": "label"}},
     r"found \[0\] ZScoreNorm fits parameters \(Processor\.fit\): the runner sets each window's fit span"),
    ("CSRnkNorm", r"found \[0\] 'CSRnkNorm', which Qlib cannot build \(AttributeError: .*no attribute 'CSRnkNorm'\)"),
    ({"class": "CSRankNorm", "kwargs": {"field_group": "label"}},
     r"which Qlib cannot build \(TypeError: .*unexpected keyword argument 'field_group'\)"),
    ({"class": "TimeRangeFlt", "module_path": "qlib.data.dataset.processor"}, r"found \[0\] TimeRangeFlt is not a qlib"),
])
def test_processors_other_than_label_ones_are_refused(store, config, message):
    from rolling_calib.qlib_adapter.dataset import MinuteBarHandler

    use_store(store)
    with pytest.raises(ValueError, match=r"^learn_processors: expected Qlib label processors .*" + message):
        MinuteBarHandler(**handler_config(learn_processors=["DropnaLabel", config][1:])["kwargs"])
    with pytest.raises(ValueError, match=message.replace(r"\[0\]", r"\[1\]")):
        MinuteBarHandler(**handler_config(learn_processors=["DropnaLabel", config])["kwargs"])


def test_infer_and_shared_processors_are_refused(store):
    from rolling_calib.qlib_adapter.dataset import MinuteBarHandler

    use_store(store)
    feature_norm = {"class": "RobustZScoreNorm", "kwargs": {"fields_group": "feature", "clip_outlier": True}}
    for name in ("infer_processors", "shared_processors"):
        with pytest.raises(ValueError, match=rf"^{name}: expected no processors \(MinuteBarHandler normalises its "
                                             r"features itself.*learn_processors\), found \[RobustZScoreNorm, Fillna\]"):
            MinuteBarHandler(**handler_config(**{name: [feature_norm, "Fillna"]})["kwargs"])
    assert MinuteBarHandler(**handler_config(infer_processors=[], learn_processors=[])["kwargs"]).learn_processors == []


def test_processor_instances_are_accepted(store):
    from qlib.data.dataset.processor import CSRankNorm

    from rolling_calib.qlib_adapter.dataset import MinuteBarHandler

    use_store(store)
    proc = CSRankNorm(fields_group="label")
    assert MinuteBarHandler(**handler_config(learn_processors=[proc])["kwargs"]).learn_processors == [proc]


# ------------------------------------------------------------------------------ the model trains on DK_L
def _fit(ds, **kw):
    from qlib.utils import init_instance_by_config

    return init_instance_by_config(model_config(**kw)).fit(ds)


def test_model_trained_on_cszscorenorm_predicts_in_its_units(store, dataset):
    from qlib.utils import init_instance_by_config

    use_store(store)
    ds = init_instance_by_config(dataset_config(handler=handler_config(learn_processors=[ZSCORE])))
    m = _fit(ds, seed=2)
    # the label scale the model learnt: per-minute z-scores of 3 stocks (std sqrt(2/3), mean 0), not bp
    assert abs(m.label_mean) < 1e-6 and m.label_std == pytest.approx(np.sqrt(2 / 3), rel=1e-3)
    pred, raw = m.predict(ds), dataset.labels("test")
    assert pred.index.equals(raw.index)  # every raw-labelled test bar is predicted
    assert pred.std() < 1.0 and pred.abs().max() < 3 and raw.std() > 5  # order 1 vs order 10-100 bp
    base = _fit(dataset, seed=2)
    assert base.label_std > 5 and base.last_fit_info["n_train"] == len(dataset.prepare("train"))
    assert m.last_fit_info["n_train"] == len(ds.prepare("train", data_key="learn"))


def test_stacked_fit_trains_on_dk_l_too(store):
    from qlib.utils import init_instance_by_config

    from rolling_calib.qlib_adapter.stacked import fit_stack

    use_store(store)
    ds = init_instance_by_config(dataset_config(handler=handler_config(learn_processors=[ZSCORE])))
    models = [init_instance_by_config(model_config(seed=s, n_epochs=1)) for s in (1, 2)]
    fit_stack(models, ds)
    alone = _fit(ds, seed=1, n_epochs=1)
    for m in models:
        assert m.label_std == alone.label_std and m.last_fit_info["n_train"] == alone.last_fit_info["n_train"]


def test_dropna_label_leaves_training_bit_identical(store, dataset):
    """DropnaLabel changes nothing here: the same predictions, bit for bit, as without learn processors."""
    from qlib.utils import init_instance_by_config

    use_store(store)
    ds = init_instance_by_config(dataset_config(handler=handler_config(learn_processors=["DropnaLabel"])))
    assert ds.handler.label_array("learn") is not ds.handler.panel.label  # the processor did run
    a, b = _fit(ds, seed=9).predict(ds), _fit(dataset, seed=9).predict(dataset)
    assert a.index.equals(b.index)
    np.testing.assert_array_equal(a.to_numpy(), b.to_numpy())


def test_train_window_scores_against_the_label_rolling_label_names(store, tmp_path):
    """rolling.label: learn stores the processed test labels, raw the bp ones; predictions in learned units."""
    from rolling_calib.qlib_adapter.training import train_window

    task = {"model": model_config(n_epochs=1), "dataset": dataset_config(handler=handler_config(learn_processors=[RANK]))}
    learn = train_window(qlib_init_for(store), task, warm_start=None, checkpoint=tmp_path / "a.pt", label="learn")
    raw = train_window(qlib_init_for(store), task, warm_start=None, checkpoint=tmp_path / "b.pt", label="raw")
    assert learn.labels.index.equals(raw.labels.index) and learn.labels.index.equals(learn.predictions.index)
    assert learn.labels.abs().max().item() <= 1.73 + 1e-6 and raw.labels.std().item() > 5
    assert learn.predictions.abs().max() < 1.73
    assert learn.valid_labels.abs().max().item() <= 1.73 + 1e-6
    np.testing.assert_array_equal(learn.predictions.to_numpy(), raw.predictions.to_numpy())  # same training
    assert SEGMENTS["test"][0] <= str(learn.labels.index.get_level_values("datetime").min())
