"""The source's two synthetic experiments (docs/method.md §3.1, §3.2): the calibrated metric's accuracy gain, paired.

Runs ``rolling-calib synthetic linear`` and ``synthetic logistic`` (the full protocol: 100 rounds x 100 runs per
pipeline, seed 0 unless ``--seed``) and prints per experiment the pairwise accuracies (mean and standard error
over the rounds) and the calibrated metric's gain over the vanilla one, paired by round: against the vanilla
metric on the whole evaluation set (as the source compares) and on the remaining rows only (the rows the
calibrated metric scores). The per-round tables go to ``--out``.

    python bench/synthetic_gain.py                   # about 2 CPU-minutes
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]


def gains(rounds: pd.DataFrame) -> dict[str, tuple[float, float]]:
    """Mean and standard error over rounds (points) of calibrated minus vanilla accuracy, and of both accuracies."""
    out = {}
    for name, column in (("vanilla (whole set)", "acc_vanilla"), ("vanilla (remaining rows)", "acc_vanilla_remaining"),
                         ("calibrated", "acc_calibrated")):
        x = 100 * rounds[column]
        out[name] = (float(x.mean()), float(x.std(ddof=1) / math.sqrt(len(x))))
    for name, column in (("gain over the whole set", "acc_vanilla"), ("gain on the same rows", "acc_vanilla_remaining")):
        d = 100 * (rounds["acc_calibrated"] - rounds[column])
        out[name] = (float(d.mean()), float(d.std(ddof=1) / math.sqrt(len(d))))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="master seed of both experiments (default 0)")
    parser.add_argument("--out", type=Path, default=REPO / "bench_out" / "synthetic_gain",
                        help="directory of the per-round CSV files (default bench_out/synthetic_gain)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    print("points of pairwise accuracy, mean +- standard error over 100 rounds")
    for experiment in ("linear", "logistic"):
        csv = args.out / f"{experiment}_rounds.csv"
        cmd = [sys.executable, "-m", "rolling_calib.cli", "synthetic", experiment, "--seed", str(args.seed), "--json",
               "--rounds-csv", str(csv)]
        summary = json.loads(subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, text=True).stdout)
        metric = f"{summary['vanilla_metric']} -> {summary['calibrated_metric']}"
        print(f"{experiment} ({metric}):")
        for name, (mean, se) in gains(pd.read_csv(csv)).items():
            print(f"  {name:<26} {mean:+.2f} +- {se:.2f}" if name.startswith("gain") else
                  f"  {name:<26} {mean:.2f} +- {se:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
