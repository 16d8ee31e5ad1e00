"""Analysis CPU per look of a run ``--until-decided``: the whole store re-scored (before) or the panels grown (after).

A run ``--until-decided`` looks at its pairs after every batch of seeds. Before issue 34 every look
scored the whole store again (``score_store`` of the ready pipelines: every complete run read from
Parquet and scored), so a look cost more the later it came; now
:class:`rolling_calib.analysis.seed_panels.GrowingPanels` reads and scores each run once and builds
the look's panels from the kept rows. This bench measures both on the same store, with no training:

* a synthetic store (``tests/runner_helpers.write_fake_store``: the real store layout, Parquet units
  with checksums, a manifest recording every seed of the plan) of 2 pipelines x ``first + (looks -
  1) * batch`` seeds is written once; a working store starts with the manifest only and receives, before
  look ``k``, the units of the look's new seeds (the batch a live run would have trained; the copy is
  not timed);
* at every look each path builds both pipelines' panels of the first ``n_k`` seeds and takes the
  look's verdict on them (:func:`rolling_calib.core.verdict.decide`, QL, the default question), timed
  in CPU seconds of this process (``time.process_time``): ``before`` = ``score_store`` of the store
  then each pipeline's :func:`~rolling_calib.analysis.verdicts.loss_panel` cut to its first ``n_k``
  seeds (the code of ``until_decided.py`` before the change, kept here as the baseline); ``after`` =
  ``GrowingPanels.panels``;
* the two paths' panels and verdicts must be identical at every look (checked, bit for bit).

The before path tries every seed the manifest records, trained or not (a live run's manifest lists the
whole grid): its first look pays for reading the missing runs' sidecars too, then its cost grows with the
seeds trained; the after path reads the new batch's runs only.

Both paths are run once on the full store before the first look (not timed), so that neither pays for
lazy imports and first-call caches.

Usage::

    .venv/bin/python bench/bench_until_decided_looks.py [--looks 20] [--first 3] [--batch 2] [--instruments 12]

It prints one row per look (seeds per pipeline, runs each path scored, CPU seconds of each, their
ratio), the totals, and whether every look was identical.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from runner_helpers import write_fake_store  # noqa: E402

from rolling_calib.analysis.scoring import score_store  # noqa: E402
from rolling_calib.analysis.seed_panels import GrowingPanels  # noqa: E402
from rolling_calib.analysis.verdicts import loss_panel  # noqa: E402
from rolling_calib.core.jsonable import jsonable  # noqa: E402
from rolling_calib.core.tables import format_table  # noqa: E402
from rolling_calib.core.verdict import LossPanel, decide  # noqa: E402
from rolling_calib.execution import store as st  # noqa: E402

PIPELINES = {"calm": {"bias_sd": 1.0}, "wild": {"bias_sd": 0.7}}
METRIC = "ql"


def _before(store: Path, wanted: dict[str, list[int]]) -> dict[str, LossPanel]:
    """The look's panels as ``until_decided.py`` built them before issue 34: the whole store scored again."""
    days = score_store(store, pipelines=list(wanted)).days
    panels = {}
    for name, seeds in wanted.items():
        panel = loss_panel(days, name, METRIC)
        have = panel.seeds.tolist()
        panels[name] = panel.select(seeds=np.array([have.index(s) for s in seeds]))
    return panels


def _copy_seeds(full: Path, work: Path, seeds: range) -> None:
    for name in PIPELINES:
        for seed in seeds:
            shutil.copytree(full / "units" / name / f"seed{seed}", work / "units" / name / f"seed{seed}")


def _same(a: dict[str, LossPanel], b: dict[str, LossPanel]) -> bool:
    return all(np.array_equal(a[n].seeds, b[n].seeds) and np.array_equal(a[n].times, b[n].times)
               and np.array_equal(a[n].total, b[n].total) and np.array_equal(a[n].weight, b[n].weight) for n in a)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--looks", type=int, default=20, help="looks (default 20)")
    parser.add_argument("--first", type=int, default=3, help="seeds per pipeline at the first look (default 3)")
    parser.add_argument("--batch", type=int, default=2, help="seeds added per look (default 2)")
    parser.add_argument("--instruments", type=int, default=12, help="instruments of the synthetic store (default 12)")
    parser.add_argument("--json", action="store_true", help="also print the measurements as JSON")
    args = parser.parse_args(argv)
    counts = [args.first + k * args.batch for k in range(args.looks)]
    names = list(PIPELINES)
    with tempfile.TemporaryDirectory() as tmp:
        full, work = Path(tmp) / "full", Path(tmp) / "work"
        t0 = time.perf_counter()
        write_fake_store(full, pipelines=PIPELINES, seeds=counts[-1],
                         instruments=tuple(f"I{i:02d}" for i in range(args.instruments)))
        built = time.perf_counter() - t0
        work.mkdir()
        for item in full.iterdir():   # the manifest (every seed of the plan recorded), no unit yet
            if item.name != "units":
                (shutil.copytree if item.is_dir() else shutil.copy2)(item, work / item.name)
        calibration = st.Store.open(work).manifest.calibration
        _before(full, {name: [0, 1] for name in names})   # warm-up, not timed: lazy imports and caches of both paths
        GrowingPanels(full, pipelines=names, metric=METRIC, calibration=calibration).panels({"calm": [0, 1]})
        growing = GrowingPanels(work, pipelines=names, metric=METRIC, calibration=calibration)
        rows, identical, have = [], 0, 0
        for look, n in enumerate(counts, start=1):
            _copy_seeds(full, work, range(have, n))
            have = n
            wanted = {name: list(range(n)) for name in names}
            c0 = time.process_time()
            old = _before(work, wanted)
            v_old = decide(old["calm"], old["wild"], names=("calm", "wild"))
            c1 = time.process_time()
            scored = growing.scored
            new = growing.panels(wanted)
            v_new = decide(new["calm"], new["wild"], names=("calm", "wild"))
            c2 = time.process_time()
            same = _same(old, new) and json.dumps(jsonable(v_old.to_dict())) == json.dumps(jsonable(v_new.to_dict()))
            identical += same
            rows.append({"look": look, "seeds": n, "runs_before": len(names) * n, "runs_after": growing.scored - scored,
                         "cpu_s_before": c1 - c0, "cpu_s_after": c2 - c1, "identical": same})
    table = [[r["look"], r["seeds"], r["runs_before"], r["runs_after"], f"{r['cpu_s_before']:.3f}",
              f"{r['cpu_s_after']:.3f}", f"{r['cpu_s_before'] / max(r['cpu_s_after'], 1e-9):.1f}x",
              "yes" if r["identical"] else "NO"] for r in rows]
    print(f"until-decided looks: {len(names)} pipelines, first {args.first}, batch {args.batch}, {args.looks} looks "
          f"(up to {counts[-1]} seeds per pipeline), {args.instruments} instruments; store written in {built:.1f} s")
    print(format_table(table, ["look", "seeds per pipeline", "runs scored before", "runs scored after",
                               "CPU-s before", "CPU-s after", "before / after", "identical"]))
    before = sum(r["cpu_s_before"] for r in rows)
    after = sum(r["cpu_s_after"] for r in rows)
    print(f"total analysis CPU: before {before:.2f} s, after {after:.2f} s ({before / max(after, 1e-9):.1f}x); "
          f"look 1 -> look {args.looks}: before {rows[0]['cpu_s_before']:.3f} -> {rows[-1]['cpu_s_before']:.3f} s, "
          f"after {rows[0]['cpu_s_after']:.3f} -> {rows[-1]['cpu_s_after']:.3f} s (CPU seconds of this process)")
    print(f"identical panels and verdicts at {identical} of {len(rows)} looks")
    if args.json:
        print(json.dumps({"rows": rows, "before_cpu_s": before, "after_cpu_s": after}, indent=2))
    return 0 if identical == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
