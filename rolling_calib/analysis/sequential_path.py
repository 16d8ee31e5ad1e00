"""The sequential path of a run ``--until-decided``: recorded in the store, read by compare, the report and MLflow.

``rolling-calib run CONFIG --until-decided`` (:mod:`rolling_calib.experiment.until_decided`)
writes ``STORE/sequential.json`` (one atomic write) after every look: the rule's settings, every
look at every pair, per pair the look it stopped at and why, the seeds each pipeline used, and
the compute against the full grid (units and CPU-seconds). This module reads it back and says it
in the three places that show a store: a short section of ``compare``, a table of the report,
flat tags and metrics for MLflow.

Example
-------
>>> path = {"metric": "ql", "outcomes": {"a vs b": "better"}, "looks_done": 1,
...         "stopped": {"a vs b": {"seeds": 3, "level": 0.99, "why": "interval excludes 0", "look": 1}},
...         "seeds_used": {"a": 3, "b": 3}, "full_grid": 10, "done": True,
...         "units": {"used": 12, "full_grid": 40, "trained_by_this_run": 12},
...         "cpu_seconds": {"used": 120.0, "full_grid_estimate": 400.0}}
>>> print(format_path(path).splitlines()[2])
  a vs b: better at look 1 (3 seeds per pipeline, spent level 0.9900): interval excludes 0
>>> path_metrics(path)["sequential_units_fraction"]
0.3
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from data_prep.atomic import atomic_write_text
from rolling_calib.core import store_layout

__all__ = ["SEQUENTIAL_FILE", "format_path", "path_metrics", "path_rows", "path_tags", "read_path", "write_path"]

#: The path's file in a store.
SEQUENTIAL_FILE = store_layout.SEQUENTIAL


def write_path(store: str | Path, path: dict[str, Any]) -> Path:
    """Write the path into ``STORE/sequential.json`` (atomically: a reader sees the old path or the new one)."""
    return atomic_write_text(Path(store) / SEQUENTIAL_FILE, json.dumps(path, indent=2, sort_keys=True, default=str) + "\n")


def read_path(store: str | Path) -> dict[str, Any] | None:
    """The recorded path of ``store`` (None: the store was not run ``--until-decided``).

    Raises
    ------
    ValueError
        The file is not JSON (named, with the fix).
    """
    file = Path(store) / SEQUENTIAL_FILE
    if not file.is_file():
        return None
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{file}: not a JSON sequential path ({exc}); re-run the same `rolling-calib run "
                         "--until-decided` command to write it again (it reuses every trained unit)") from exc


def path_rows(path: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per pair: outcome, look it stopped at, seeds per pipeline there, spent level, why."""
    rows = []
    for pair, outcome in path["outcomes"].items():
        stop = path["stopped"].get(pair, {})
        rows.append({"pair": pair, "outcome": outcome, "look": stop.get("look"), "seeds": stop.get("seeds"),
                     "level": stop.get("level"), "why": stop.get("why", "")})
    for pair in path.get("open", []):
        rows.append({"pair": pair, "outcome": "open", "look": None, "seeds": None, "level": None,
                     "why": "not stopped yet (the run was interrupted; re-run the command to go on)"})
    return rows


def format_path(path: dict[str, Any]) -> str:
    """The ``compare`` section: per pair where and why it stopped, seeds used against the full grid, compute saved."""
    units, cpu = path["units"], path.get("cpu_seconds", {})
    lines = [f"Sequential path (run --until-decided, decided by {path['metric'].upper()}, "
             f"{path.get('looks_done', '?')} look(s); error rates held over the looks):"]
    lines.append("  per pair, a against b:")
    for r in path_rows(path):
        if r["look"] is None:
            lines.append(f"  {r['pair']}: {r['outcome']}: {r['why']}")
            continue
        lines.append(f"  {r['pair']}: {r['outcome']} at look {r['look']} ({r['seeds']} seeds per pipeline, "
                     f"spent level {r['level']:.4f}): {r['why']}")
    used = ", ".join(f"{n} {k}" for n, k in path["seeds_used"].items())
    fraction = units["used"] / units["full_grid"] if units["full_grid"] else float("nan")
    lines.append(f"  seeds used: {used} of {path['full_grid']} each; units {units['used']} of the full grid's "
                 f"{units['full_grid']} ({fraction:.0%}), {units['full_grid'] - units['used']} saved")
    if cpu.get("full_grid_estimate"):
        lines.append(f"  compute: {cpu['used']:.0f} CPU-s of an estimated {cpu['full_grid_estimate']:.0f} for the "
                     f"full grid ({cpu['full_grid_estimate'] - cpu['used']:.0f} CPU-s saved)")
    return "\n".join(lines)


def path_tags(path: dict[str, Any]) -> dict[str, str]:
    """MLflow tags: per pair its outcome, the look it stopped at and why."""
    tags = {"sequential.metric": str(path["metric"]), "sequential.done": str(bool(path.get("done")))}
    for r in path_rows(path):
        slug = r["pair"].replace(" ", "_")
        tags[f"sequential.{slug}.outcome"] = r["outcome"]
        tags[f"sequential.{slug}.why"] = str(r["why"])[:250]
        if r["look"] is not None:
            tags[f"sequential.{slug}.look"] = str(r["look"])
    return tags


def path_metrics(path: dict[str, Any]) -> dict[str, float]:
    """MLflow metrics: units and CPU-seconds used against the full grid, seeds per pipeline."""
    units, cpu = path["units"], path.get("cpu_seconds", {})
    out = {"sequential_units_used": float(units["used"]), "sequential_units_full_grid": float(units["full_grid"]),
           "sequential_units_fraction": units["used"] / units["full_grid"] if units["full_grid"] else float("nan"),
           "sequential_looks": float(path.get("looks_done", 0))}
    if cpu.get("full_grid_estimate"):
        out["sequential_cpu_s_saved"] = float(cpu["full_grid_estimate"] - cpu["used"])
    for name, k in path["seeds_used"].items():
        out[f"sequential_seeds_used.{name}"] = float(k)
    return out
