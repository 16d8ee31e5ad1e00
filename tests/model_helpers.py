"""Shared fixtures of the model/dataset tests: a tiny synthetic Qlib minute store and configs.

The store is written by ``data_prep.build_synthetic_store`` and read through Qlib's real
provider (no mocks). Qlib's configuration is process-global, so :func:`use_store` re-initialises
Qlib only when another test module pointed it elsewhere.
"""

from __future__ import annotations

from pathlib import Path

TINY_START = "2018-01-02"
TINY_END = "2018-02-28"
TINY_SYMBOLS = ("AAPL", "F", "MSFT")

#: Segments used by most tests: train January, valid a few days, test February's end.
SEGMENTS = {
    "train": ("2018-01-03", "2018-01-31"),
    "valid": ("2018-02-01", "2018-02-07"),
    "test": ("2018-02-08", "2018-02-28"),
}


def build_tiny_store(out_dir: Path, *, seed: int = 7) -> Path:
    """3 symbols x 2 months of synthetic minute bars (about 1 s)."""
    from data_prep import build_synthetic_store

    return build_synthetic_store(out_dir, start=TINY_START, end=TINY_END, symbols=list(TINY_SYMBOLS), seed=seed)


def use_store(store: Path) -> None:
    """Point Qlib at ``store`` (re-initialise only if it points elsewhere)."""
    from qlib.config import C

    from data_prep import init_qlib

    uri = C.get("provider_uri")
    current = uri.get("1min") if isinstance(uri, dict) else uri
    if current is None or Path(str(current)).resolve() != Path(store).resolve():
        init_qlib(store)


def qlib_init_for(store: Path) -> dict:
    """The ``qlib_init`` section of a task on ``store`` (what ``train_window`` initialises Qlib with)."""
    return {"provider_uri": {"1min": str(Path(store).resolve())}, "region": "us", "expression_cache": None,
            "dataset_cache": None, "kernels": 1}


def handler_config(**overrides) -> dict:
    kwargs = dict(
        instruments="us25",
        start_time=TINY_START,
        end_time=TINY_END,
        fit_start_time=SEGMENTS["train"][0],
        fit_end_time=SEGMENTS["train"][1],
        window=20,
        norm_samples=5000,
    )
    kwargs.update(overrides)
    return {"class": "MinuteBarHandler", "module_path": "rolling_calib.qlib_adapter.dataset", "kwargs": kwargs}


def dataset_config(*, segments: dict | None = None, handler: dict | None = None, **overrides) -> dict:
    kwargs = dict(
        handler=handler or handler_config(),
        segments=dict(SEGMENTS if segments is None else segments),
        step_len=20,
        sample_stride=15,
        test_stride=5,
    )
    kwargs.update(overrides)
    return {"class": "MinuteTSDataset", "module_path": "rolling_calib.qlib_adapter.dataset", "kwargs": kwargs}


def model_config(**overrides) -> dict:
    kwargs = dict(hidden_size=8, num_layers=1, n_epochs=2, finetune_epochs=1, batch_size=256, lr=3e-3,
                  seed=0, n_threads=1, early_stop=5)
    kwargs.update(overrides)
    return {"class": "RollingLSTM", "module_path": "rolling_calib.qlib_adapter.model", "kwargs": kwargs}
