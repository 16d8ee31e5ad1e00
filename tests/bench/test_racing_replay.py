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


def test_the_known_seed_variance_oracle_is_the_models_and_is_undone_after(capsys):
    """The oracle (``--seed-variance known``): inside, a pooled race's seed part is the model's true per-seed variance
    (hand-computed: 2 (0.3^2 + 0.1^2 + 2.45^2 / 125) = 0.29604 for seed_dominated at 125 days, one window); after,
    the data's own again; the replay runs with it and says so; and the module's docstring examples hold."""
    import doctest

    import numpy as np

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import bench.racing_replay as rr
    from bench.verdict_calibration import PRESETS
    from rolling_calib.core import racing

    M = np.arange(12.0).reshape(3, 4) ** 1.5
    own = racing._pooled_seed_variance(M)
    with rr.known_seed_variance(PRESETS["seed_dominated"], n_days=125) as S:
        assert abs(S - 2 * (0.3 ** 2 + 0.1 ** 2 + 2.45 ** 2 / 125)) < 1e-12
        assert racing._pooled_seed_variance(M) == (S, rr.KNOWN_DF)
    assert racing._pooled_seed_variance(M) == own and own[1] == 6.0
    assert doctest.testmod(rr, verbose=False).failed == 0

    assert rr.main(["--reps", "2", "--sweeps", "one_best", "--methods", "best", "--mcs-reps", "0", "--max-seeds", "7",
                    "--seed-variance", "known"]) == 0
    out = capsys.readouterr().out
    assert f"seed variance {rr.ORACLE_LABEL}" in out and "one_best: 12 configurations" in out
    assert racing._pooled_seed_variance(M) == own


def test_the_oracle_refuses_unlike_seed_variances(capsys):
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench.racing_replay import main

    assert main(["--seed-variance", "known", "--best-scale", "1.7", "--reps", "1"]) == 2
    assert capsys.readouterr().err.strip() == ("racing_replay: --seed-variance known: the oracle knows one seed "
                                               "variance for every configuration; expected --best-scale 1, found 1.7")
