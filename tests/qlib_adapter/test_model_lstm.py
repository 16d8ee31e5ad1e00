"""RollingLSTM end to end on a tiny synthetic store through Qlib's real provider and config machinery."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from model_helpers import SEGMENTS, dataset_config, handler_config, model_config, qlib_init_for, use_store


def make_model(**kw):
    from qlib.utils import init_instance_by_config

    return init_instance_by_config(model_config(**kw))


# ------------------------------------------------------------------------------ contract
def test_workflow_yaml_builds_and_runs(store, tmp_path):
    """A workflow YAML names both classes by module_path/class; Qlib builds them; fit/predict work."""
    import yaml
    from qlib.utils import init_instance_by_config

    use_store(store)
    text = yaml.safe_dump({"task": {"model": model_config(n_epochs=1), "dataset": dataset_config()}})
    task = yaml.safe_load(text)["task"]
    model = init_instance_by_config(task["model"])
    ds = init_instance_by_config(task["dataset"])
    evals: dict = {}
    model.fit(ds, evals_result=evals)
    pred = model.predict(ds)
    label = ds.labels("test")
    assert pred.index.equals(label.index)
    assert np.isfinite(pred.values).all()
    assert len(evals["train"]) == len(evals["valid"]) == 1
    # predictions on the label's scale (bp): the training label mean is restored
    assert abs(pred.mean() - model.label_mean) < 3 * model.label_std


def test_same_seed_same_predictions_different_seed_differs(dataset):
    a = make_model(seed=11).fit(dataset).predict(dataset)
    b = make_model(seed=11).fit(dataset).predict(dataset)
    c = make_model(seed=12).fit(dataset).predict(dataset)
    np.testing.assert_array_equal(a.values, b.values)
    assert not np.allclose(a.values, c.values)


def test_seed_recorded_in_checkpoint(dataset, tmp_path):
    m = make_model(seed=5).fit(dataset)
    m.save_state(tmp_path / "w.pt")
    state = torch.load(tmp_path / "w.pt", weights_only=True)
    assert state["meta"]["seed"] == 5 and state["meta"]["kwargs"]["seed"] == 5
    assert state["meta"]["epochs_trained"] == m.last_fit_info["epochs_run"]
    assert np.asarray(state["norm"]["center"]).shape == (20, 6)


# ------------------------------------------------------------------------------ warm start
def test_finetune_starts_from_checkpoint_and_runs_finetune_epochs(dataset, tmp_path):
    base = make_model(seed=3, n_epochs=2).fit(dataset)
    ckpt = tmp_path / "w0.pt"
    base.save_state(ckpt)
    p_base = base.predict(dataset)

    # 0 fine-tune epochs: the loaded weights are kept exactly (proves the start point)
    frozen = make_model(seed=99, finetune_epochs=0)
    frozen.load_state(ckpt)
    assert frozen.warm_started
    frozen.fit(dataset)
    np.testing.assert_allclose(frozen.predict(dataset).values, p_base.values, rtol=1e-6)
    # ... also on the next window's data: an untouched network keeps the statistics it was trained with
    from qlib.utils import init_instance_by_config

    later = {"train": ("2018-01-10", "2018-02-07"), "valid": None, "test": ("2018-02-08", "2018-02-28")}
    ds1 = init_instance_by_config(dataset_config(segments=later, handler=handler_config(
        fit_start_time="2018-01-10", fit_end_time="2018-02-07")))
    frozen1 = make_model(seed=99, finetune_epochs=0)
    frozen1.load_state(ckpt)
    frozen1.fit(ds1)
    np.testing.assert_array_equal(frozen1.predict(ds1).values, base.predict(ds1).values)

    ft = make_model(seed=3, finetune_epochs=1, n_epochs=7, early_stop=0)
    ft.load_state(ckpt)
    ft.fit(dataset)
    assert ft.last_fit_info["warm_start"] and ft.last_fit_info["epochs_run"] == 1
    assert ft.epochs_trained == base.epochs_trained + 1
    assert not ft.warm_started  # a further fit without load_state would train from scratch

    scratch = make_model(seed=3, n_epochs=1, early_stop=0).fit(dataset)
    assert not scratch.last_fit_info["warm_start"] and scratch.last_fit_info["epochs_run"] == 1
    # fine-tuned and scratch differ although both did one epoch with the same seed
    assert not np.allclose(ft.predict(dataset).values, scratch.predict(dataset).values)


def test_finetune_is_deterministic(dataset, tmp_path):
    make_model(seed=4).fit(dataset).save_state(tmp_path / "w0.pt")
    preds = []
    for _ in range(2):
        m = make_model(seed=4)
        m.load_state(tmp_path / "w0.pt")
        preds.append(m.fit(dataset).predict(dataset).values)
    np.testing.assert_array_equal(preds[0], preds[1])


def test_load_state_errors_name_the_file(dataset, tmp_path):
    make_model(hidden_size=8).fit(dataset).save_state(tmp_path / "h8.pt")
    with pytest.raises(ValueError, match="hidden_size"):
        make_model(hidden_size=16).load_state(tmp_path / "h8.pt")
    bad = tmp_path / "junk.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="junk.pt"):
        make_model().load_state(bad)
    with pytest.raises(ValueError, match="missing.pt"):
        make_model().load_state(tmp_path / "missing.pt")


def test_save_state_is_atomic_and_leaves_no_temp(dataset, tmp_path):
    m = make_model().fit(dataset)
    m.save_state(tmp_path / "sub" / "w.pt")
    m.save_state(tmp_path / "sub" / "w.pt")  # overwrite
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["w.pt"]


# ------------------------------------------------------------------------------ weight decay
def test_unknown_kwargs_rejected():
    from rolling_calib.qlib_adapter.model import RollingLSTM

    with pytest.raises(TypeError, match="weight_decy"):
        RollingLSTM(weight_decy=1e-4)
    with pytest.raises(ValueError, match="weight_decay"):
        RollingLSTM(weight_decay=-1.0)
    with pytest.raises(ValueError, match="optimizer"):
        RollingLSTM(optimizer="lbfgs")
    with pytest.raises(ValueError, match="device"):
        RollingLSTM(device="tpu")


def test_weight_decay_reaches_the_optimiser(dataset):
    m = make_model(weight_decay=3e-6)
    assert all(g["weight_decay"] == 3e-6 for g in m.train_optimizer.param_groups)
    m.fit(dataset)
    assert all(g["weight_decay"] == 3e-6 for g in m.train_optimizer.param_groups)


def test_weight_decay_changes_the_trained_weights(dataset):
    """Same seed and data: a strong L2 term shrinks the weights; a tiny one still changes them."""

    def weight_norm(m):
        return float(sum((p.detach() ** 2).sum() for p in m.lstm_model.parameters()))

    base = make_model(seed=2, weight_decay=0.0, n_epochs=2, early_stop=0).fit(dataset)
    strong = make_model(seed=2, weight_decay=1.0, n_epochs=2, early_stop=0).fit(dataset)
    tiny = make_model(seed=2, weight_decay=1e-6, n_epochs=2, early_stop=0).fit(dataset)
    assert weight_norm(strong) < 0.9 * weight_norm(base)
    assert not np.array_equal(base.predict(dataset).values, tiny.predict(dataset).values)


def test_sgd_weight_decay_is_l2_gradient():
    """With SGD, one step equals w - lr * (grad + wd * w): the L2 term really is applied."""
    from rolling_calib.qlib_adapter.model import RollingLSTM

    m = RollingLSTM(hidden_size=4, num_layers=1, optimizer="sgd", lr=0.1, weight_decay=0.5, grad_clip=0.0)
    x = np.random.default_rng(0).normal(size=(8, 5, 6)).astype(np.float32)
    before = [p.detach().clone() for p in m.lstm_model.parameters()]
    loss = (m._forward(x) ** 2).mean()
    m.train_optimizer.zero_grad()
    loss.backward()
    grads = [p.grad.detach().clone() for p in m.lstm_model.parameters()]
    m.train_optimizer.step()
    for b, g, p in zip(before, grads, m.lstm_model.parameters()):
        torch.testing.assert_close(p.detach(), b - 0.1 * (g + 0.5 * b))


# ------------------------------------------------------------------------------ early stopping
def test_early_stopping_with_valid_smaller_than_a_batch(store):
    from qlib.utils import init_instance_by_config

    use_store(store)
    seg = dict(SEGMENTS, valid=("2018-02-01 10:00", "2018-02-01 10:30"))
    ds = init_instance_by_config(dataset_config(segments=seg))
    n_valid = len(ds.prepare("valid"))
    assert 0 < n_valid < 256
    m = make_model(n_epochs=3).fit(ds)
    assert m.last_fit_info["n_valid"] == n_valid
    assert all(np.isfinite(m.last_fit_info["valid_loss"]))
    assert m.last_fit_info["early_stopping"] == "on"


def test_empty_valid_disables_early_stopping(store):
    from qlib.utils import init_instance_by_config

    use_store(store)
    ds = init_instance_by_config(dataset_config(segments={"train": SEGMENTS["train"], "valid": None,
                                                          "test": SEGMENTS["test"]}))
    m = make_model(n_epochs=2).fit(ds)
    assert m.last_fit_info["early_stopping"].startswith("off")
    assert m.last_fit_info["epochs_run"] == 2 and m.last_fit_info["best_epoch"] == 1
    assert np.isfinite(m.predict(ds).values).all()


def test_early_stop_stops_and_restores_best(dataset):
    # lr so high that validation loss gets worse after the first epoch
    m = make_model(n_epochs=6, early_stop=1, lr=0.5, seed=1).fit(dataset)
    info = m.last_fit_info
    losses = info["valid_loss"]
    # with early_stop=1 training stops at the first epoch that does not improve on the best so far
    first_stale = next((e for e in range(1, len(losses)) if losses[e] >= min(losses[:e])), None)
    assert info["epochs_run"] == (6 if first_stale is None else first_stale + 1)
    assert info["best_valid_loss"] == pytest.approx(min(info["valid_loss"]))
    assert m._eval_loss(dataset.prepare("valid")) == pytest.approx(info["best_valid_loss"], rel=1e-5)


def test_progress_bar_over_epochs_leaves_the_fit_unchanged(dataset, monkeypatch):
    import io
    import sys

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    tty = Terminal()
    monkeypatch.setattr(sys, "stderr", tty)
    shown = make_model(seed=8, n_epochs=2).fit(dataset, progress=True).predict(dataset)
    monkeypatch.undo()
    assert "fit:" in tty.getvalue() and "/2" in tty.getvalue()
    quiet = make_model(seed=8, n_epochs=2).fit(dataset).predict(dataset)
    np.testing.assert_array_equal(shown.values, quiet.values)


def test_fit_reports_epochs_and_batches_without_changing_the_fit(dataset):
    """``fit(report=)``: each epoch (batch 0) and, in epochs over BATCH_REPORT_MIN batches, every batch; same numbers."""
    from qlib.data.dataset.handler import DataHandlerLP

    from rolling_calib.qlib_adapter.lstm_core import BATCH_REPORT_MIN

    n_train = len(dataset.prepare("train", data_key=DataHandlerLP.DK_L))
    batch_size = max(1, n_train // (BATCH_REPORT_MIN + 10))
    batches = -(-n_train // batch_size)
    assert batches > BATCH_REPORT_MIN
    calls: list[dict] = []
    reported = make_model(seed=8, n_epochs=2, batch_size=batch_size, early_stop=0).fit(
        dataset, report=lambda **kw: calls.append(kw)).predict(dataset)
    want = [dict(epoch=e, epochs=2, batch=b, batches=batches) for e in (1, 2) for b in range(batches + 1)]
    assert calls == want
    quiet = make_model(seed=8, n_epochs=2, batch_size=batch_size, early_stop=0).fit(dataset).predict(dataset)
    np.testing.assert_array_equal(reported.values, quiet.values)
    short: list[dict] = []   # 256 samples a batch: a few batches an epoch, only the epochs are told
    make_model(seed=8, n_epochs=2).fit(dataset, report=lambda **kw: short.append(kw))
    assert [(c["epoch"], c["batch"]) for c in short] == [(1, 0), (2, 0)]


def test_predict_before_fit_raises(dataset):
    with pytest.raises(ValueError, match="not fitted"):
        make_model().predict(dataset)


def test_train_window_chains_windows(store, tmp_path):
    """The runner's one training path: fit, predict and checkpoint one window, then warm-start the next."""
    from rolling_calib.qlib_adapter.training import train_window

    def last_fit(path):
        return torch.load(path, weights_only=True)["meta"]["last_fit"]

    task0 = {"model": model_config(), "dataset": dataset_config()}
    w0 = train_window(qlib_init_for(store), task0, warm_start=None, checkpoint=tmp_path / "w0.pt")
    p0, y0 = w0.predictions, w0.labels
    assert p0.index.equals(y0.index) and not last_fit(tmp_path / "w0.pt")["warm_start"] and len(y0) == len(p0)
    seg = {"train": ("2018-01-03", "2018-02-07"), "valid": ("2018-02-08", "2018-02-12"),
           "test": ("2018-02-13", "2018-02-28")}
    task1 = {"model": model_config(), "dataset": dataset_config(segments=seg)}
    train_window(qlib_init_for(store), task1, warm_start=tmp_path / "w0.pt", checkpoint=tmp_path / "w1.pt")
    i1 = last_fit(tmp_path / "w1.pt")
    assert i1["warm_start"] and i1["epochs_run"] == 1 and (tmp_path / "w1.pt").is_file()


def test_same_seed_same_predictions_in_a_fresh_process(store, dataset, tmp_path):
    """Resume semantics: a unit recomputed in another process gives bit-identical predictions."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    here = make_model(seed=21).fit(dataset).predict(dataset)
    out = tmp_path / "pred.npy"
    script = (
        "import json, sys, numpy as np\n"
        f"sys.path.insert(0, {str(Path(__file__).parents[1])!r})\n"
        "from model_helpers import dataset_config, model_config, qlib_init_for\n"
        "from rolling_calib.qlib_adapter.training import train_window\n"
        "task = {'model': model_config(seed=21), 'dataset': dataset_config()}\n"
        f"w = train_window(qlib_init_for({str(store)!r}), task, warm_start=None, checkpoint={str(tmp_path / 'w.pt')!r})\n"
        f"np.save({str(out)!r}, w.predictions.to_numpy())\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    np.testing.assert_array_equal(np.load(out), here.to_numpy())
    json.dumps(make_model(seed=21).hyperparameters())  # the recorded config is JSON-serialisable


def test_label_scaling_none_learns_the_label_as_it_is(dataset):
    """``label_scaling: none`` trains on the label itself (mean 0, scale 1); the default standardises it."""
    plain = make_model(seed=4, label_scaling="none", n_epochs=1)
    plain.fit(dataset)
    assert (plain.label_mean, plain.label_std) == (0.0, 1.0)
    assert plain.last_fit_info["label_mean"] == 0.0
    scaled = make_model(seed=4, n_epochs=1)
    scaled.fit(dataset)
    labels = dataset.prepare("train").labels
    assert scaled.label_mean == pytest.approx(float(np.mean(labels))) and scaled.label_std > 1.0
    assert not np.allclose(plain.predict(dataset).to_numpy(), scaled.predict(dataset).to_numpy())
    assert plain.hyperparameters()["label_scaling"] == "none"
    with pytest.raises(ValueError, match="label_scaling"):
        make_model(label_scaling="minmax")
