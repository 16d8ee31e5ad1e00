"""The sweep's report files: ``sweep.json``, ``sweep.md`` and one pairwise heatmap per metric.

The numbers come from :func:`rolling_calib.analysis.sweep.analyse_sweep` (computed first);
this module only writes them out, atomically.

Example
-------
>>> from rolling_calib.analysis.scoring import score_store
>>> from rolling_calib.analysis.sweep import analyse_sweep
>>> runs = score_store(example_store, progress=False).runs
>>> paths = write_sweep_report(analyse_sweep(runs, resampling=Resampling(n_boot=200)), example_store / "sweep_report")
>>> sorted(paths), paths["json"].name
(['heatmaps', 'json', 'markdown'], 'sweep.json')
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rolling_calib.analysis.sweep import SweepResult, format_sweep
from data_prep.atomic import atomic_write_text
from rolling_calib.reporting.figures import plot_pairwise_heatmap, save_figure

__all__ = ["write_sweep_report"]


def write_sweep_report(result: SweepResult, out_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Write ``sweep.json``, ``sweep.md`` and one ``pairwise_<metric>.png`` per metric (atomically).

    Returns ``{"json": path, "markdown": path, "heatmaps": {metric: path}}``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Any] = {"json": out / "sweep.json", "markdown": out / "sweep.md", "heatmaps": {}}
    atomic_write_text(paths["json"], json.dumps(result.to_dict(), indent=2) + "\n")
    atomic_write_text(paths["markdown"], "# Sweep\n\n" + format_sweep(result))
    for metric, matrix in result.matrices.items():
        paths["heatmaps"][metric] = save_figure(plot_pairwise_heatmap(matrix), out / f"pairwise_{metric}.png",
                                                dpi=120, format="png")
    return paths


