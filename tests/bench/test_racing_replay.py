"""bench/racing_replay.py runs end to end at a tiny size (its figures are measured in docs/racing.md; here: it works
and passes the rule's seed variance and the unlike seed scales through)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_race_replay_runs_pooled_with_unlike_seed_variances(capsys):
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench.racing_replay import main

    assert main(["--reps", "2", "--sweeps", "tied4", "--methods", "best", "--mcs-reps", "0", "--max-seeds", "7",
                 "--seed-variance", "pooled", "--best-scale", "1.7", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["rule"]["seed_variance"] == "pooled" and out["settings"]["best_scale"] == 1.7
    (row,) = out["races"]["tied4"]["rows"]
    assert row["n"] == 2 and 0 < row["seeds_fraction"] <= 1
    assert set(row["seeds_by_gap"]) == {"0", "1", "2", "2.5", "3", "3.5", "4", "5", "6"}
    assert all(3 <= v <= 7 for v in row["seeds_by_gap"].values())


def test_a_bad_best_scale_is_a_one_line_error(capsys):
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench.racing_replay import main

    assert main(["--best-scale", "-1", "--reps", "1"]) == 2
    assert capsys.readouterr().err.strip() == "racing_replay: --best-scale: expected a finite number > 0, found -1.0"
