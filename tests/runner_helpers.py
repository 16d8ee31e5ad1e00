"""Shared helpers for the schedule/config/store/runner/report/demo tests.

``write_fake_store`` writes a result store of synthetic prediction frames through the
real store API (no Qlib, no training) so evaluation and report tests stay fast; the
end-to-end tests in ``test_runner_e2e.py`` build a tiny real Qlib store and train.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from rolling_calib.core.label import Label
from shared_data import MINUTE_2018
from rolling_calib.execution import store as st
from rolling_calib.execution.executors import UnitKey
from rolling_calib.core.schedule import rolling_windows

REPO = Path(__file__).resolve().parents[1]
REAL_2018 = MINUTE_2018   # tests/shared_data.py finds it
#: What the synthetic labels of a fake store stand for (the minute label, in bp).
FAKE_LABEL = Label(kind="raw", expression="1e4 * (close[t+10]/close[t] - 1)", unit="bp")


def sparse_calendar(start: str, end: str, *, every: int = 30) -> pd.DatetimeIndex:
    """NYSE session minutes in ``[start, end]``, every ``every``-th bar (a light stand-in calendar)."""
    from data_prep import session_minutes

    return session_minutes(start, end)[::every]


def write_fake_store(
    store: Path,
    *,
    pipelines: dict[str, dict[str, float]],
    seeds: int = 4,
    instruments: tuple[str, ...] = ("AAA", "BBB"),
    start: str = "2018-01",
    end: str = "2018-04",
    step_months: int = 2,
    rng_seed: int = 0,
    valid: bool = False,
) -> tuple[list, dict]:
    """A store with synthetic units: ``prediction = signal + bias_seed + noise``.

    ``pipelines`` maps name -> ``{"bias_sd": ..., "noise": ...}``: the per-seed output bias
    spread and the prediction noise. Returns ``(windows, frames)`` where ``frames`` maps
    ``(pipeline, seed)`` to the merged run frame that was written. With ``valid`` every unit
    also gets its window's validation-segment predictions (``wNN.valid.parquet``, same model
    bias) and the sidecar records ``valid_rows``.
    """
    cal = sparse_calendar("2017-10-01", "2018-06-30")
    windows = rolling_windows(cal, initial_train_start="2017-10", start=start, end=end, step_months=step_months)
    rng = np.random.default_rng(rng_seed)
    frames: dict = {}
    entries = {}
    for name, spec in pipelines.items():
        chash = f"hash-{name}"
        entries[name] = {
            "config_hash": chash,
            "task": {},
            "windows": [w.to_dict() for w in windows],
            "mode": "finetune",
            "seeds": list(range(seeds)),
            "labels": {"raw": FAKE_LABEL.to_dict()},
        }
        for seed in range(seeds):
            bias = rng.normal(0.0, spec.get("bias_sd", 1.0))
            parts = []
            for w in windows:
                times = cal[(cal >= w.test.start) & (cal <= w.test.end)]
                idx = pd.MultiIndex.from_product([times, list(instruments)], names=["datetime", "instrument"])
                label = rng.normal(0.0, 3.0, len(idx))
                pred = 0.5 * label + bias + rng.normal(0.0, spec.get("noise", 1.0), len(idx))
                frame = pd.DataFrame({"prediction": pred, "label": label}, index=idx).reset_index()
                key = UnitKey(name, seed, w.index)
                paths = st.unit_paths(store, key)
                side = {"config_hash": chash, "rows": len(frame),
                        **st.write_unit_parquet(paths.parquet, frame[list(st.UNIT_COLUMNS)]).fields()}
                if valid and w.valid is not None:
                    vt = cal[(cal >= w.valid.start) & (cal <= w.valid.end)]
                    vidx = pd.MultiIndex.from_product([vt, list(instruments)], names=["datetime", "instrument"])
                    vlabel = rng.normal(0.0, 3.0, len(vidx))
                    vpred = 0.5 * vlabel + bias + rng.normal(0.0, spec.get("noise", 1.0), len(vidx))
                    vframe = pd.DataFrame({"prediction": vpred, "label": vlabel}, index=vidx).reset_index()
                    side.update(st.write_unit_parquet(paths.valid_parquet, vframe[list(st.UNIT_COLUMNS)])
                                .fields(prefix="valid_"))
                    side["valid_rows"] = len(vframe)
                st.atomic_write_json(paths.sidecar, side)
                parts.append(frame)
            frames[(name, seed)] = pd.concat(parts, ignore_index=True)
    st.write_manifest(store, pipelines=entries, extra={"compare": [list(p) for p in _pairs(pipelines)]})
    return windows, frames


def rewrite_unit(store: Path, key: UnitKey, frame: pd.DataFrame) -> None:
    """Replace a unit's predictions as a run writes them: the Parquet file, then its checksums in the sidecar."""
    paths = st.unit_paths(store, key)
    side = st.read_sidecar(store, key)
    side.update(st.write_unit_parquet(paths.parquet, frame).fields())
    st.atomic_write_json(paths.sidecar, side)


def _pairs(pipelines: dict) -> list[tuple[str, str]]:
    names = list(pipelines)
    return [(names[0], names[1])] if len(names) >= 2 else []
