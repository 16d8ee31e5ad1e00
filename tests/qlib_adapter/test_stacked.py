"""Seed-stacked training against the unstacked reference path, and the batch feed.

The unstacked ``RollingLSTM.fit`` is the reference: a seed stack must give each seed the
predictions, losses, epochs and early stopping of its own fit, to float rounding.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from model_helpers import model_config
from rolling_calib.qlib_adapter.lstm_core import BatchFeed, LSTMModel
from rolling_calib.qlib_adapter.model import RollingLSTM
from rolling_calib.qlib_adapter.stacked import StackedLSTM, check_stackable, fit_stack


def make_model(**kw):
    from qlib.utils import init_instance_by_config

    return init_instance_by_config(model_config(**kw))


def _members(seeds, *, hidden=6, layers=2, dropout=0.0):
    out = []
    for seed in seeds:
        torch.manual_seed(seed)
        out.append(LSTMModel(d_feat=6, hidden_size=hidden, num_layers=layers, dropout=dropout))
    return out


# ------------------------------------------------------------------------------ the network
@pytest.mark.parametrize("layers", [1, 3])
def test_stacked_forward_equals_each_member(layers):
    members = _members([0, 1, 2, 3], layers=layers)
    stack = StackedLSTM(members)
    x = torch.randn(4, 9, 12, 6, generator=torch.Generator().manual_seed(5))
    own = torch.stack([m(x[k]).reshape(-1) for k, m in enumerate(members)])
    torch.testing.assert_close(stack(x), own, rtol=1e-5, atol=1e-6)
    shared = torch.stack([m(x[0]).reshape(-1) for m in members])  # one batch for every member
    torch.testing.assert_close(stack(x[0]), shared, rtol=1e-5, atol=1e-6)


def test_each_member_gets_exactly_its_own_gradient():
    members = _members([4, 5, 6])
    stack = StackedLSTM(members)
    x, y = torch.randn(3, 7, 8, 6), torch.randn(3, 7)
    ((stack(x) - y) ** 2).mean(dim=1).sum().backward()
    for k, member in enumerate(members):
        ((member(x[k]).reshape(-1) - y[k]) ** 2).mean().backward()
        for name, param in member.named_parameters():
            torch.testing.assert_close(stack.weight(name).grad[k], param.grad, rtol=1e-4, atol=1e-6)


def test_keep_drops_members_and_their_optimiser_rows():
    members = _members([0, 1, 2])
    stack = StackedLSTM(members)
    opt = torch.optim.Adam(stack.parameters(), lr=1e-2)
    ((stack(torch.randn(3, 5, 4, 6)) ** 2).sum()).backward()
    opt.step()
    moment = opt.state[stack.weight("rnn.weight_hh_l0")]["exp_avg"].clone()
    weight = stack.weight("rnn.weight_hh_l0").detach().clone()
    stack.keep([2, 0], opt)
    assert stack.n_members == 2
    torch.testing.assert_close(stack.weight("rnn.weight_hh_l0").detach(), weight[[2, 0]])
    torch.testing.assert_close(opt.state[stack.weight("rnn.weight_hh_l0")]["exp_avg"], moment[[2, 0]])
    ((stack(torch.randn(2, 5, 4, 6)) ** 2).sum()).backward()
    opt.step()  # the optimiser keeps working on the smaller stack


def test_members_of_another_shape_are_refused():
    with pytest.raises(ValueError, match=r"members\[1\]: expected the shapes of members\[0\]"):
        StackedLSTM(_members([0], hidden=4) + _members([1], hidden=5))


def test_models_with_other_settings_cannot_share_a_stack():
    with pytest.raises(ValueError, match="every member must share lr"):
        check_stackable([RollingLSTM(hidden_size=4, lr=1e-3, seed=0), RollingLSTM(hidden_size=4, lr=1e-2, seed=1)])
    with pytest.raises(ValueError, match="distinct seeds"):
        check_stackable([RollingLSTM(hidden_size=4, seed=1), RollingLSTM(hidden_size=4, seed=1)])


# ------------------------------------------------------------------------------ the fit
SEEDS = (1, 2, 3)
FIT = dict(n_epochs=3, early_stop=1)  # with patience 1, seed 2 stops at epoch 2 while 1 and 3 run on


@pytest.fixture(scope="module")
def reference(dataset):
    """Each seed fitted on its own (the reference path)."""
    return [make_model(seed=s, **FIT).fit(dataset) for s in SEEDS]


@pytest.fixture(scope="module")
def stacked(dataset):
    return fit_stack([make_model(seed=s, **FIT) for s in SEEDS], dataset)


def test_stack_matches_each_seeds_own_fit(reference, stacked, dataset):
    runs = [m.last_fit_info["epochs_run"] for m in reference]
    assert min(runs) < FIT["n_epochs"] == max(runs), "the case must have a member stopping early"
    for ref, got in zip(reference, stacked):
        a, b = ref.last_fit_info, got.last_fit_info
        assert (b["epochs_run"], b["best_epoch"]) == (a["epochs_run"], a["best_epoch"])
        np.testing.assert_allclose(b["train_loss"], a["train_loss"], rtol=1e-5)
        np.testing.assert_allclose(b["valid_loss"], a["valid_loss"], rtol=1e-5)
        assert (got.label_mean, got.label_std) == (ref.label_mean, ref.label_std)
        p_ref, p_got = ref.predict(dataset), got.predict(dataset)
        assert p_got.index.equals(p_ref.index)
        scale = float(np.std(p_ref.values))
        np.testing.assert_allclose(p_got.values, p_ref.values, rtol=0, atol=1e-4 * scale)
        assert b["seed_stack"] == list(SEEDS) and "seed_stack" not in a


def test_stack_is_deterministic_and_seeds_differ(stacked, dataset):
    told = []   # and reporting its epochs (fit_stack(report=)) changes no bit
    again = fit_stack([make_model(seed=s, **FIT) for s in SEEDS], dataset,
                      report=lambda **kw: told.append((kw["epoch"], kw["epochs"], kw["batch"])))
    assert told == [(1, 3, 0), (2, 3, 0), (3, 3, 0)]
    for a, b in zip(stacked, again):
        np.testing.assert_array_equal(a.predict(dataset).values, b.predict(dataset).values)
    assert not np.allclose(stacked[0].predict(dataset).values, stacked[1].predict(dataset).values)


def test_warm_started_stack_matches_each_seeds_finetune(reference, dataset, tmp_path):
    tuned_ref, starts = [], []
    for model in reference:
        path = tmp_path / f"seed{model.seed}.pt"
        model.save_state(path)
        one = make_model(seed=model.seed, **FIT)
        one.load_state(path)
        tuned_ref.append(one.fit(dataset))
        two = make_model(seed=model.seed, **FIT)
        two.load_state(path)
        starts.append(two)
    tuned = fit_stack(starts, dataset)
    for ref, got in zip(tuned_ref, tuned):
        assert got.last_fit_info["warm_start"] and got.last_fit_info["epochs_run"] == ref.last_fit_info["epochs_run"]
        assert got.fit_count == ref.fit_count == 2
        scale = float(np.std(ref.predict(dataset).values))
        np.testing.assert_allclose(got.predict(dataset).values, ref.predict(dataset).values, atol=1e-4 * scale)


def test_stack_with_dropout_is_reproducible(dataset):
    kw = dict(num_layers=2, dropout=0.3, n_epochs=1)
    a = fit_stack([make_model(seed=s, **kw) for s in (5, 6)], dataset)
    b = fit_stack([make_model(seed=s, **kw) for s in (5, 6)], dataset)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.predict(dataset).values, y.predict(dataset).values)


# ------------------------------------------------------------------------------ the feed
def _cut(lo):
    return np.full((3, 4), lo, np.float32), np.arange(3, dtype=np.float32) + lo


def test_background_feed_gives_the_batches_of_the_plain_feed():
    starts = range(0, 50, 5)
    plain = [(x.clone(), y.clone()) for x, y in BatchFeed(_cut, starts, device=torch.device("cpu"), background=False)]
    threaded = [(x.clone(), y.clone()) for x, y in BatchFeed(_cut, starts, device=torch.device("cpu"), background=True)]
    assert len(plain) == len(threaded) == 10
    for (a, b), (c, d) in zip(plain, threaded):
        assert torch.equal(a, c) and torch.equal(b, d)


def test_background_feed_raises_the_producers_error_and_stops_cleanly():
    def failing(lo):
        if lo == 15:
            raise ValueError("bad batch 15")
        return _cut(lo)

    with pytest.raises(ValueError, match="bad batch 15"):
        for _ in BatchFeed(failing, range(0, 50, 5), device=torch.device("cpu"), background=True):
            pass
    feed = BatchFeed(_cut, range(0, 5000, 5), device=torch.device("cpu"), background=True, depth=1)
    for i, _ in enumerate(feed):  # the consumer leaves early: the producer thread must end
        if i == 2:
            break
    import threading

    assert not any(t.name == "BatchFeed" and t.is_alive() for t in threading.enumerate())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_stack_on_cuda_matches_the_cpu_stack(dataset):  # pragma: no cover - runs on a GPU machine
    cpu = fit_stack([make_model(seed=s, n_epochs=2) for s in (1, 2)], dataset)
    gpu = fit_stack([make_model(seed=s, n_epochs=2, device="cuda") for s in (1, 2)], dataset)
    for a, b in zip(cpu, gpu):
        assert b.last_fit_info["device"].startswith("cuda")
        pa, pb = a.predict(dataset).values, b.predict(dataset).values
        scale = float(np.std(pa))
        # two epochs of SGD carry the devices' float rounding forward: measured on an H100 (torch 2.11, cu130)
        # the largest difference was 0.24% of the predictions' std; a wrong seed or member order is O(1)
        np.testing.assert_allclose(pb, pa, atol=1e-2 * scale)
        assert np.corrcoef(pa, pb)[0, 1] > 0.9999
