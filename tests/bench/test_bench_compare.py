"""bench/bench_compare.py's synthetic store: which runs share their labels (``--labels``), and the worst case kept as
it was (its figures are measured in docs/benchmarks.md; here: the store is what the option says)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _labels(store: Path) -> dict[tuple[str, str, str], np.ndarray]:
    """``(pipeline, seed, window) -> label column`` of every unit file."""
    return {(p.parent.parent.name, p.parent.name, p.stem): pq.read_table(p, columns=["label"]).column(0).to_numpy()
            for p in sorted((store / "units").rglob("*.parquet"))}


@pytest.fixture(scope="module")
def bench_compare():
    added = str(ROOT) not in sys.path
    if added:
        sys.path.insert(0, str(ROOT))
    try:
        from bench import bench_compare
        yield bench_compare
    finally:
        if added:
            sys.path.remove(str(ROOT))


@pytest.mark.parametrize("sharing", ["per-pipeline", "shared", "per-run"])
def test_the_store_shares_labels_as_the_option_says(tmp_path, bench_compare, sharing):
    store = tmp_path / "s"
    bench_compare.build_store(store, pipelines=2, seeds=2, months=1, labels=sharing)
    labels = _labels(store)
    assert len(labels) == 4   # 2 pipelines x 2 seeds x 1 window
    same = {(a[:1], b[:1]) for a in labels for b in labels if a < b and np.array_equal(labels[a], labels[b])}
    expected = {"shared": {(("p0",), ("p0",)), (("p0",), ("p1",)), (("p1",), ("p1",))},
                "per-pipeline": {(("p0",), ("p0",)), (("p1",), ("p1",))},
                "per-run": set()}[sharing]
    assert same == expected
    (scores,) = {len(v) for v in labels.values()}
    assert scores > 0


def test_per_run_labels_draw_what_the_store_drew_before_the_option(tmp_path, bench_compare):
    """The worst case keeps its numbers: the first unit's labels are the generator's second draw (after the seed's
    bias), as in the store before ``--labels``."""
    store = tmp_path / "s"
    bench_compare.build_store(store, pipelines=1, seeds=1, months=1, labels="per-run")
    (label,) = _labels(store).values()
    rng = np.random.default_rng(0)
    rng.normal(0.0, 0.5)   # the seed's bias
    np.testing.assert_array_equal(label, rng.normal(0.0, 3.0, len(label)))


def test_per_pipeline_labels_are_the_default_and_others_are_refused(bench_compare):
    assert bench_compare.parse_args([]).labels == "per-pipeline"
    with pytest.raises(SystemExit):
        bench_compare.parse_args(["--labels", "some"])


def test_a_store_built_before_xxh3_is_refused_not_measured(tmp_path, bench_compare, capsys):
    """Its units would be read against their SHA-256 (the path of units written before XXH3): not what compare does
    on a store written now."""
    import json

    store = tmp_path / "s_1x1x1m"
    bench_compare.build_store(store, pipelines=1, seeds=1, months=1, labels="per-run")
    (side,) = (store / "units").rglob("w*.json")
    data = json.loads(side.read_text())
    data.pop("xxh3")
    side.write_text(json.dumps(data))
    args = ["--store", str(tmp_path / "s"), "--pipelines", "1", "--seeds", "1", "--months", "1", "--labels", "per-run",
            *[x for impl in bench_compare.IMPLS for x in ("--skip", impl)]]
    assert bench_compare.main(args) == 2
    assert f"bench_compare: {store} was built before units recorded their XXH3-128" in capsys.readouterr().err
