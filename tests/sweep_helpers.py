"""A tiny real experiment for the sweep / tracking / Ray end-to-end tests.

Two synthetic symbols, November 2017 to March 2018, written by the data engineer's
``build_synthetic_store`` into a real Qlib 1min store; the schedule trains on
Nov-Dec, validates on January and evaluates February and March with monthly
fine-tuning (2 windows), so CQL scores March with February's bias. The LSTM is
tiny (hidden 4-8, one epoch): a unit takes about a second.
"""

from __future__ import annotations

from pathlib import Path

import yaml

TINY_SYMBOLS = ["AAPL", "F"]


def tiny_experiment(
    root: Path, *, seeds: int = 2, pipelines: dict | None = None, compare: list | None = None, valid_months: int = 1
) -> Path:
    """Write ``root/qlib`` (minute store) and ``root/experiment.yaml``; return the YAML path."""
    from data_prep import build_synthetic_store

    root.mkdir(parents=True, exist_ok=True)
    store = build_synthetic_store(root / "qlib", start="2017-11-01", end="2018-03-31", symbols=TINY_SYMBOLS, seed=3)
    config = {
        "experiment_name": "tiny-sweep",
        "qlib_init": {"provider_uri": str(store)},
        "task": {
            "model": {
                "class": "RollingLSTM",
                "module_path": "rolling_calib.qlib_adapter.model",
                "kwargs": {"hidden_size": 8, "num_layers": 1, "n_epochs": 1, "finetune_epochs": 1,
                           "batch_size": 256, "lr": 0.003, "early_stop": 5, "weight_decay": 0.0},
            },
            "dataset": {
                "class": "MinuteTSDataset",
                "module_path": "rolling_calib.qlib_adapter.dataset",
                "kwargs": {
                    "handler": {
                        "class": "MinuteBarHandler",
                        "module_path": "rolling_calib.qlib_adapter.dataset",
                        "kwargs": {"instruments": "us25", "window": 20, "norm_samples": 5000},
                    },
                    "step_len": 20,
                    "sample_stride": 15,
                    "test_stride": 5,
                },
            },
        },
        "rolling": {"initial_train_start": "2017-11", "start": "2018-02", "end": "2018-03", "step_months": 1,
                    "valid_months": valid_months, "seeds": seeds},
        "pipelines": pipelines or {"base": {}},
    }
    if compare:
        config["compare"] = compare
    path = root / "experiment.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
