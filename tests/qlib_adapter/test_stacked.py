"""Seed-stacked training against the unstacked reference path, and the batch feeds.

The unstacked ``RollingLSTM.fit`` is the reference: a seed stack must give each seed the
predictions, losses, epochs and early stopping of its own fit. Tolerances, on CPU (float32):

* ``bmm`` (the batched kernel): losses ``rtol 1e-5``, predictions ``1e-4`` of their std after a
  3-epoch fit (last round's stack tolerance); the layer's gradients equal autograd's through
  ``nn.LSTM`` to ``rtol 1e-4, atol 1e-6`` in float32 and pass ``gradcheck`` in float64; parameters
  after 5 Adam steps ``rtol 1e-4, atol 1e-6``.
* ``streams`` (each member its own ``nn.LSTM``): on CPU the same operations as the unstacked fit,
  so the same bits (``assert_array_equal``), dropout included.
* the resident feed (:class:`DeviceWindows`): the host feed's batches and fits, bit for bit.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

from model_helpers import model_config
from rolling_calib.qlib_adapter.lstm_core import BatchFeed, DeviceWindows, LSTMModel, plan_feed
from rolling_calib.qlib_adapter.model import RollingLSTM
from rolling_calib.qlib_adapter.stacked import (StackedLSTM, _BmmKernel, _FusedStack, _GraphedStep, _StackedLayer,
                                                _streams_refused, check_stackable, choose_kernel, fit_stack,
                                                fused_cell_ready)


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


@pytest.mark.parametrize("last_only", [True, False])
def test_the_layers_hand_written_backward_passes_gradcheck(last_only):
    """Float64 finite differences against the hand-written BPTT: inputs, both weights, both biases."""
    gen = torch.Generator().manual_seed(3)
    k, steps, batch, feat, hidden = 2, 4, 3, 5, 3
    shapes = [(k, steps, batch, feat), (k, 4 * hidden, feat), (k, 4 * hidden, hidden), (k, 4 * hidden), (k, 4 * hidden)]
    args = [torch.randn(*shape, generator=gen, dtype=torch.float64, requires_grad=True) for shape in shapes]
    assert torch.autograd.gradcheck(lambda *a: _StackedLayer.apply(*a, last_only), args)


def test_parameters_after_optimiser_steps_equal_each_members_own(layers=2):
    """Five Adam steps of the stack (clipping on) against each member stepped by its own optimiser."""
    members = _members([7, 8, 9], layers=layers)
    stack = StackedLSTM(members)
    opt = torch.optim.Adam(stack.parameters(), lr=1e-2)
    own = [torch.optim.Adam(m.parameters(), lr=1e-2) for m in members]
    gen = torch.Generator().manual_seed(11)
    for _ in range(5):
        x, y = torch.randn(3, 16, 10, 6, generator=gen), torch.randn(3, 16, generator=gen)
        opt.zero_grad()
        ((stack(x) - y) ** 2).mean(dim=1).sum().backward()
        torch.nn.utils.clip_grad_value_(stack.parameters(), 3.0)
        opt.step()
        for k, (member, o) in enumerate(zip(members, own)):
            o.zero_grad()
            ((member(x[k]).reshape(-1) - y[k]) ** 2).mean().backward()
            torch.nn.utils.clip_grad_value_(member.parameters(), 3.0)
            o.step()
    for k, member in enumerate(members):
        for name, param in member.named_parameters():
            torch.testing.assert_close(stack.weight(name)[k].detach(), param.detach(), rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------------------ the fused-cell stack (CUDA's layers)
@pytest.mark.parametrize("layers", [1, 3])
def test_the_fused_stack_computes_what_the_step_layers_compute(layers):
    """:class:`_FusedStack` (here with its reference cell; on CUDA the fused kernel) against :class:`_StackedLayer`:
    outputs ``rtol 1e-5``, gradients ``rtol 1e-4, atol 1e-6`` (float32; sums in another order)."""
    members = _members([0, 1, 2], hidden=5, layers=layers)
    steps, fused = StackedLSTM(members), StackedLSTM(members)
    fused.fused = True
    gen = torch.Generator().manual_seed(2)
    x, y = torch.randn(3, 7, 9, 6, generator=gen), torch.randn(3, 7, generator=gen)
    for net in (steps, fused):
        ((net(x) - y) ** 2).mean(dim=1).sum().backward()
    torch.testing.assert_close(fused(x), steps(x), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fused(x[0]), steps(x[0]), rtol=1e-5, atol=1e-6)  # one batch for every member
    for name in steps.names:
        torch.testing.assert_close(fused.weight(name).grad, steps.weight(name).grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("layers", [1, 2])
def test_the_fused_stacks_hand_written_backward_passes_gradcheck(layers):
    """Float64 finite differences against its BPTT: inputs, every layer's weights and biases."""
    gen = torch.Generator().manual_seed(4)
    k, batch, steps, feat, hidden = 2, 3, 4, 5, 3

    def arg(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64, requires_grad=True)

    args = [arg(k, batch, steps, feat)]
    for layer in range(layers):
        args += [arg(k, 4 * hidden, feat if layer == 0 else hidden), arg(k, 4 * hidden, hidden), arg(k, 4 * hidden),
                 arg(k, 4 * hidden)]
    assert torch.autograd.gradcheck(lambda *a: _FusedStack.apply(*a), args)


class _CpuGraphedStep(_GraphedStep):
    """:class:`_GraphedStep`'s bookkeeping with the CUDA calls replaced: "capture" keeps the static buffers,
    "replay" runs the step on them (as a replayed graph does). ``refuse``: every capture fails."""

    def __init__(self, step, optimizer, *, refuse=False):
        self.refuse = refuse
        super().__init__(step, optimizer, torch.device("cpu"))

    def _side_stream(self):
        return None

    def _side_stream_step(self, x, y):
        return self.step(x, y)

    def _capture(self, x, y):
        if self.refuse:
            raise RuntimeError("operation not permitted when stream is capturing")
        self.graph, self.static = "graph", (x.clone(), y.clone(), torch.zeros(y.shape[0]))
        self.captures += 1

    def _replay(self):
        self.static[2].copy_(self.step(self.static[0], self.static[1]))


@pytest.mark.parametrize("refuse", [False, True])
def test_graphed_steps_train_every_batch_once_in_order(refuse):
    """Warm-up, capture, replays, the partial batch, a member leaving (reset) and a refused capture: every
    batch trains exactly once, in order -- the weights equal plain eager steps' bit for bit (CPU)."""
    lead = RollingLSTM(hidden_size=5, num_layers=2, lr=1e-2)
    nets = _members([0, 1, 2], hidden=5)
    plain = _BmmKernel(nets, lead=lead, generators=None)
    graphed = _BmmKernel(nets, lead=lead, generators=None)
    graphed.graph = _CpuGraphedStep(graphed._step, graphed.optimizer, refuse=refuse)
    gen = torch.Generator().manual_seed(6)
    batches = [(torch.randn(3, n, 4, 6, generator=gen), torch.randn(3, n, generator=gen)) for n in (8,) * 5 + (3,)]
    seen = []
    said = pytest.warns(UserWarning, match="CUDA graph capture failed, training with eager steps") if refuse else \
        contextlib.nullcontext()
    with said:
        for epoch in range(2):
            if epoch == 1:  # a member leaves the stack between epochs
                for kernel in (plain, graphed):
                    kernel.keep([2, 0])
                batches = [(x[[2, 0]], y[[2, 0]]) for x, y in batches]
            for x, y in batches:
                seen.append((plain.train_step(x, y), graphed.train_step(x, y)))
    for a, b in seen:
        torch.testing.assert_close(b, a, rtol=0, atol=0)
    for name in plain.stack.names:
        torch.testing.assert_close(graphed.stack.weight(name), plain.stack.weight(name), rtol=0, atol=0)
    info = graphed.graph.describe()
    if refuse:
        assert info == {"captures": 0, "replayed_steps": 0, "eager_steps": 12,
                        "failure": "RuntimeError: operation not permitted when stream is capturing"}
    else:   # per epoch: 2 warm-up steps, 1 capture replayed + 2 replays, the partial batch eager
        assert info == {"captures": 2, "replayed_steps": 6, "eager_steps": 6, "failure": None}


def test_the_bmm_kernel_on_a_cpu_keeps_its_step_layers_eager_steps_and_ieee_matmuls():
    lead = RollingLSTM(hidden_size=4, num_layers=2)
    kernel = _BmmKernel(_members([0, 1], hidden=4), lead=lead, generators=None)
    assert not kernel.stack.fused and kernel.graph is None and kernel.warmup_steps == 1
    assert kernel.describe() == {"cell": "steps: not a GPU", "graph": "off: not a GPU", "matmul": "ieee"}
    assert not kernel.optimizer.param_groups[0]["capturable"]
    assert fused_cell_ready(torch.device("cpu")) == (True, "the reference cell (not a GPU)")


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


def stack_of(seeds, *, kernel, feed="auto", **kw):
    """Models of ``seeds`` whose stack uses ``kernel`` and ``feed`` (the lead model's settings)."""
    models = [make_model(seed=s, **kw) for s in seeds]
    models[0].stack_kernel, models[0].feed = kernel, feed
    return models


@pytest.fixture(scope="module", params=["bmm", "streams"])
def kernel(request):
    return request.param


@pytest.fixture(scope="module")
def stacked(dataset, kernel):
    return fit_stack(stack_of(SEEDS, kernel=kernel, **FIT), dataset)


def test_stack_matches_each_seeds_own_fit(reference, stacked, dataset, kernel):
    runs = [m.last_fit_info["epochs_run"] for m in reference]
    assert min(runs) < FIT["n_epochs"] == max(runs), "the case must have a member stopping early"
    for ref, got in zip(reference, stacked):
        a, b = ref.last_fit_info, got.last_fit_info
        assert (b["epochs_run"], b["best_epoch"]) == (a["epochs_run"], a["best_epoch"])
        assert b["stack"]["kernel"] == kernel and b["feed"]["mode"] == "host"
        p_ref, p_got = ref.predict(dataset), got.predict(dataset)
        assert p_got.index.equals(p_ref.index)
        assert (got.label_mean, got.label_std) == (ref.label_mean, ref.label_std)
        if kernel == "streams":  # on CPU the unstacked fit's own operations: the same bits
            assert (b["train_loss"], b["valid_loss"]) == (a["train_loss"], a["valid_loss"])
            np.testing.assert_array_equal(p_got.values, p_ref.values)
        else:
            np.testing.assert_allclose(b["train_loss"], a["train_loss"], rtol=1e-5)
            np.testing.assert_allclose(b["valid_loss"], a["valid_loss"], rtol=1e-5)
            scale = float(np.std(p_ref.values))
            np.testing.assert_allclose(p_got.values, p_ref.values, rtol=0, atol=1e-4 * scale)
        assert b["seed_stack"] == list(SEEDS) and "seed_stack" not in a


def test_multi_layer_stack_matches_each_seeds_own_fit(dataset, kernel):
    kw = dict(num_layers=3, hidden_size=6, n_epochs=2)
    ref = [make_model(seed=s, **kw).fit(dataset) for s in (4, 5)]
    got = fit_stack(stack_of((4, 5), kernel=kernel, **kw), dataset)
    for a, b in zip(ref, got):
        pa, pb = a.predict(dataset).values, b.predict(dataset).values
        np.testing.assert_allclose(pb, pa, rtol=0, atol=(0 if kernel == "streams" else 1e-4) * float(np.std(pa)))


def test_stack_is_deterministic_and_seeds_differ(stacked, dataset, kernel):
    told = []   # and reporting its epochs (fit_stack(report=)) changes no bit
    again = fit_stack(stack_of(SEEDS, kernel=kernel, **FIT), dataset,
                      report=lambda **kw: told.append((kw["epoch"], kw["epochs"], kw["batch"])))
    assert told == [(1, 3, 0), (2, 3, 0), (3, 3, 0)]
    for a, b in zip(stacked, again):
        np.testing.assert_array_equal(a.predict(dataset).values, b.predict(dataset).values)
    assert not np.allclose(stacked[0].predict(dataset).values, stacked[1].predict(dataset).values)


def test_warm_started_stack_matches_each_seeds_finetune(reference, dataset, tmp_path, kernel):
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
    starts[0].stack_kernel = kernel
    tuned = fit_stack(starts, dataset)
    for ref, got in zip(tuned_ref, tuned):
        assert got.last_fit_info["warm_start"] and got.last_fit_info["epochs_run"] == ref.last_fit_info["epochs_run"]
        assert got.fit_count == ref.fit_count == 2
        scale = float(np.std(ref.predict(dataset).values))
        np.testing.assert_allclose(got.predict(dataset).values, ref.predict(dataset).values, atol=1e-4 * scale)


def test_stack_with_dropout_is_reproducible(dataset, kernel):
    kw = dict(num_layers=2, dropout=0.3, n_epochs=1)
    a = fit_stack(stack_of((5, 6), kernel=kernel, **kw), dataset)
    b = fit_stack(stack_of((5, 6), kernel=kernel, **kw), dataset)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.predict(dataset).values, y.predict(dataset).values)


def test_streams_stack_with_dropout_is_each_seeds_own_fit_on_cpu(dataset):
    """Each member's dropout stream is its own unstacked fit's (the CPU generator swapped in around its step)."""
    kw = dict(num_layers=2, dropout=0.3, n_epochs=2)
    ref = [make_model(seed=s, **kw).fit(dataset) for s in (5, 6)]
    got = fit_stack(stack_of((5, 6), kernel="streams", **kw), dataset)
    for a, b in zip(ref, got):
        np.testing.assert_array_equal(b.predict(dataset).values, a.predict(dataset).values)


# ------------------------------------------------------------------------------ the kernel's choice
def test_kernel_choice_auto_on_cpu_is_fixed_and_settings_are_checked():
    lead = RollingLSTM(hidden_size=4, num_layers=2, dropout=0.2)
    assert choose_kernel("auto", lead, members=3, batch=8, steps=5) == {
        "kernel": "streams", "setting": "auto", "reason": "auto: the CPU's fixed kernel"}
    assert choose_kernel("bmm", lead, members=3, batch=8, steps=5)["kernel"] == "bmm"
    with pytest.raises(ValueError, match=r"stack_kernel: expected one of \('auto', 'bmm', 'streams'\), found 'fast'"):
        choose_kernel("fast", lead, members=3, batch=8, steps=5)


def test_streams_are_refused_where_cudnn_would_share_one_dropout_stream():
    from types import SimpleNamespace

    gpu = SimpleNamespace(device=torch.device("cuda"), dropout=0.2, num_layers=2)
    assert "cuDNN" in _streams_refused(gpu)
    assert _streams_refused(SimpleNamespace(device=torch.device("cuda"), dropout=0.2, num_layers=1)) is None
    assert _streams_refused(SimpleNamespace(device=torch.device("cpu"), dropout=0.2, num_layers=2)) is None


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


def test_resident_windows_are_the_host_feeds_bit_for_bit(dataset):
    """Every train and test sample (windows clamped at an instrument's first bar included), in a shuffled order."""
    for segment in ("train", "test"):
        sampler = dataset.prepare(segment)
        resident = DeviceWindows(sampler, torch.device("cpu"), labels=sampler.labels)
        idx = np.random.default_rng(0).permutation(len(sampler))
        for lo in range(0, len(idx), 700):
            x, y = sampler.batch(idx[lo : lo + 700])
            ti = torch.as_tensor(idx[lo : lo + 700])
            np.testing.assert_array_equal(resident.windows(ti).numpy(), x)
            np.testing.assert_array_equal(resident.labels[ti].numpy(), y)
    first = dataset.prepare(slice("2018-01-02", "2018-01-02 10:30"), stride=1)  # windows reach before the loaded data
    resident = DeviceWindows(first, torch.device("cpu"))
    np.testing.assert_array_equal(resident.windows(torch.arange(30)).numpy(), first.batch(np.arange(30))[0])


def test_resident_keeps_only_the_bars_the_segment_reaches(dataset):
    valid = dataset.prepare("valid")
    panel_bytes = valid.panel.values.nbytes
    assert DeviceWindows.nbytes(valid) < panel_bytes / 3
    assert plan_feed("resident", torch.device("cpu"), [valid])["mode"] == "resident"
    assert plan_feed("auto", torch.device("cpu"), [valid])["reason"] == "auto: not a GPU"


@pytest.mark.parametrize("stack", [None, "bmm", "streams"])
def test_a_fit_on_the_resident_feed_is_the_host_feeds_fit(dataset, stack):
    """Same seed, same batches in the same order: the same bits, one seed or a stack."""
    def fit(feed):
        if stack is None:
            model = make_model(seed=2, n_epochs=2)
            model.feed = feed
            return [model.fit(dataset)]
        return fit_stack(stack_of((2, 3), kernel=stack, feed=feed, n_epochs=2), dataset)

    host, resident = fit("host"), fit("resident")
    for a, b in zip(host, resident):
        assert b.last_fit_info["feed"]["mode"] == "resident" and a.last_fit_info["feed"]["mode"] == "host"
        assert a.last_fit_info["train_loss"] == b.last_fit_info["train_loss"]
        assert a.last_fit_info["valid_loss"] == b.last_fit_info["valid_loss"]
        np.testing.assert_array_equal(a.predict(dataset).values, b.predict(dataset).values)
    resident[0].feed = "resident"   # prediction cut on the device too
    np.testing.assert_array_equal(resident[0].predict(dataset).values, host[0].predict(dataset).values)
