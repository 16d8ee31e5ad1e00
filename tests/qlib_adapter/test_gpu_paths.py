"""The GPU paths (resident feed, seed-stack kernels) on every device here, on bars held in memory.

The data is a random-walk panel in memory (:mod:`rolling_calib.qlib_adapter.synthetic_panel`)
behind a real ``MinuteTSDataset``: no Qlib store, so these tests also run on a device machine
whose Python has Qlib's code but not the store-building stack (``bench/gpu_check.sh`` runs the
``cuda`` ones there). The same checks on the real store's data, on CPU: ``test_stacked.py``.

Tolerances: on CPU as ``test_stacked.py`` says. On CUDA, where each path's kernels differ from
the CPU's: the resident feed's batches equal the host feed's bit for bit (the same IEEE float32
operations); a fit on either feed, and the streams kernel against one seed at a time, run the
same GPU kernels on the same inputs (deterministic cuDNN and cuBLAS), compared to ``1e-6`` of the
predictions' std; the bmm kernel against one seed at a time, and GPU against CPU, to ``1e-2`` of
the std after 2 epochs (last round measured 0.24% between an H100 and the CPU).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rolling_calib.qlib_adapter.lstm_core import DeviceWindows
from rolling_calib.qlib_adapter.model import RollingLSTM
from rolling_calib.qlib_adapter.stacked import fit_stack
from rolling_calib.qlib_adapter.synthetic_panel import panel_dataset, random_walk_panel

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
DEVICES = ["cpu", pytest.param("cuda", marks=CUDA)]
#: Agreement of two computations that run the same kernels on the same inputs (0 on CPU: the same bits).
SAME = {"cpu": 0.0, "cuda": 1e-6}


@pytest.fixture(scope="module")
def memory_dataset():
    """3 random-walk symbols x 12 sessions in memory: about 3,100 training windows of 20 bars."""
    return panel_dataset(random_walk_panel(instruments=3, days=12, seed=5), step_len=20, sample_stride=3,
                         test_stride=5)


def model(seed, device, **kw):
    settings = dict(hidden_size=8, num_layers=2, n_epochs=2, batch_size=256, lr=3e-3, n_threads=1, early_stop=5)
    settings.update(kw)
    return RollingLSTM(seed=seed, device=device, **settings)


def stack(seeds, device, *, kernel, feed="auto", **kw):
    models = [model(s, device, **kw) for s in seeds]
    models[0].stack_kernel, models[0].feed = kernel, feed
    return models


def close(a, b, tol):
    scale = float(np.std(a))
    np.testing.assert_allclose(b, a, rtol=0, atol=tol * scale)


@pytest.mark.parametrize("device", DEVICES)
def test_resident_batches_are_the_host_batches(memory_dataset, device):
    sampler = memory_dataset.prepare("train")
    resident = DeviceWindows(sampler, torch.device(device), labels=sampler.labels)
    idx = np.random.default_rng(1).permutation(len(sampler))[:1500]
    x, y = sampler.batch(idx)
    ti = torch.as_tensor(idx, device=device)
    np.testing.assert_array_equal(resident.windows(ti).cpu().numpy(), x)
    np.testing.assert_array_equal(resident.labels[ti].cpu().numpy(), y)


@pytest.mark.parametrize("device", DEVICES)
def test_a_fit_on_the_resident_feed_is_the_host_feeds_fit(memory_dataset, device):
    fits = {}
    for feed in ("host", "resident"):
        m = model(3, device)
        m.feed = feed
        fits[feed] = m.fit(memory_dataset)
        assert m.last_fit_info["feed"]["mode"] == feed
    close(fits["host"].predict(memory_dataset).values, fits["resident"].predict(memory_dataset).values, SAME[device])


@pytest.mark.parametrize("kernel", ["bmm", "streams"])
@pytest.mark.parametrize("device", DEVICES)
def test_stack_kernels_match_one_seed_at_a_time(memory_dataset, device, kernel):
    ref = [model(s, device).fit(memory_dataset) for s in (1, 2, 3)]
    got = fit_stack(stack((1, 2, 3), device, kernel=kernel), memory_dataset)
    tol = SAME[device] if kernel == "streams" else {"cpu": 1e-4, "cuda": 1e-2}[device]
    for a, b in zip(ref, got):
        assert b.last_fit_info["stack"]["kernel"] == kernel
        pa, pb = a.predict(memory_dataset).values, b.predict(memory_dataset).values
        close(pa, pb, tol)
        assert np.corrcoef(pa, pb)[0, 1] > 0.9999


@CUDA
def test_auto_on_cuda_chooses_resident_and_times_both_kernels(memory_dataset):  # pragma: no cover - GPU machine
    models = fit_stack(stack((1, 2), "cuda", kernel="auto"), memory_dataset)
    info = models[0].last_fit_info
    assert info["feed"]["mode"] == "resident" and info["feed"]["reason"].startswith("auto")
    assert info["stack"]["reason"] == "auto: the faster in a timing probe"
    assert set(info["stack"]["probe_ms_per_step"]) == {"bmm", "streams"}
    assert info["stack"]["kernel"] == min(info["stack"]["probe_ms_per_step"], key=info["stack"]["probe_ms_per_step"].get)
    one = model(4, "cuda")
    one.fit(memory_dataset)
    assert one.last_fit_info["feed"]["mode"] == "resident"


@CUDA
def test_gpu_fit_predict_matches_cpu_closely(memory_dataset):  # pragma: no cover - GPU machine
    cpu = model(6, "cpu").fit(memory_dataset).predict(memory_dataset)
    gpu = model(6, "cuda").fit(memory_dataset).predict(memory_dataset)
    assert gpu.index.equals(cpu.index) and np.isfinite(gpu.values).all()
    close(cpu.values, gpu.values, 1e-2)


@CUDA
def test_gpu_same_seed_same_predictions(memory_dataset):  # pragma: no cover - GPU machine
    """On one GPU the same seed gives the same numbers (deterministic cuBLAS workspace and cuDNN algorithms)."""
    import os

    first = model(8, "cuda").fit(memory_dataset).predict(memory_dataset)
    again = model(8, "cuda").fit(memory_dataset).predict(memory_dataset)
    assert os.environ.get("CUBLAS_WORKSPACE_CONFIG") in (":4096:8", ":16:8")
    np.testing.assert_array_equal(first.to_numpy(), again.to_numpy())


@CUDA
@pytest.mark.parametrize("kernel", ["bmm", "streams"])
def test_stack_on_cuda_matches_the_cpu_stack(memory_dataset, kernel):  # pragma: no cover - GPU machine
    cpu = fit_stack(stack((1, 2), "cpu", kernel=kernel), memory_dataset)
    gpu = fit_stack(stack((1, 2), "cuda", kernel=kernel), memory_dataset)
    for a, b in zip(cpu, gpu):
        assert b.last_fit_info["device"].startswith("cuda")
        pa, pb = a.predict(memory_dataset).values, b.predict(memory_dataset).values
        # two epochs carry the devices' float rounding forward: last round measured 0.24% of the std on an H100
        close(pa, pb, 1e-2)
        assert np.corrcoef(pa, pb)[0, 1] > 0.9999
