#!/usr/bin/env bash
# The GPU check of issue 40 in one run: CUDA tests, bench_stacked, bench_gpu_feed; logs and JSON into $OUT.
#
#   bash bench/gpu_check.sh fetch     here (with internet): download bench/gpu_wheels.txt into .whl/ (cp312 wheels)
#   bash bench/gpu_check.sh           on the device machine (the device tool sets $OUT; carry .whl)
#
# Settings (environment): DEVICE (cuda), SIZES (demo,paper), SEEDS (1,4,10,20), SAMPLES (24000 windows per
# seed for bench_stacked; bench_gpu_feed takes 2/3 of it), INSTRUMENTS (5), DAYS (40), PYTHON (python3),
# INSTALL (1: pip-install .whl into /tmp/site; 0: use the Python as it is). Every step has its own time
# limit, so a hang costs that step only; the whole run is about 5 minutes on an H100 (budget: 8).
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
PLATFORMS="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64"
if [ "${1:-}" = fetch ]; then
    want() { sed -n "$1" bench/gpu_wheels.txt | grep -v '^#' | grep -v '^$'; }
    mkdir -p .whl/pin
    $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLATFORMS \
        -d .whl $(want '1,/^# \[pin\]/p') || exit 1
    $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLATFORMS \
        -d .whl/pin $(want '/^# \[pin\]/,$p') || exit 1
    du -sh .whl; exit 0
fi

OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_check.log") 2>&1
export PYTHONUNBUFFERED=1
DEVICE=${DEVICE:-cuda} SIZES=${SIZES:-demo,paper} SEEDS=${SEEDS:-1,4,10,20} SAMPLES=${SAMPLES:-24000}
DATA="--instruments ${INSTRUMENTS:-5} --days ${DAYS:-40}"
T0=$SECONDS
step() { echo; echo "== [$((SECONDS - T0)) s] $*"; }

step "machine"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
. bench/gpu_install.sh
$PY - > "$OUT/env.json" <<'PYEOF' || exit 4
import json, numpy, pandas, qlib, torch
import rolling_calib.qlib_adapter.stacked as s
print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                  "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None, "numpy": numpy.__version__,
                  "pandas": pandas.__version__, "qlib": qlib.__version__, "stacked": s.__file__}))
PYEOF
cat "$OUT/env.json"

step "CUDA tests (tests/qlib_adapter/test_gpu_paths.py: the cpu cases too)"
timeout 200 $PY -m pytest -q -p no:cacheprovider tests/qlib_adapter/test_gpu_paths.py --junitxml="$OUT/tests.xml"
echo "pytest exit: $?"

step "bench_stacked: one at a time, bmm, streams; $SIZES; K = $SEEDS"
timeout 220 $PY bench/bench_stacked.py --device "$DEVICE" --sizes "$SIZES" --seeds "$SEEDS" --samples "$SAMPLES" $DATA \
    --out "$OUT/bench_stacked.json"
echo "bench_stacked exit: $?"

step "bench_gpu_feed: compute only, resident, background, inline; $SIZES; K = $SEEDS"
timeout 150 $PY bench/bench_gpu_feed.py --device "$DEVICE" --sizes "$SIZES" --seeds "$SEEDS" \
    --samples $((SAMPLES * 2 / 3)) $DATA --out "$OUT/bench_gpu_feed.json"
echo "bench_gpu_feed exit: $?"

step "the paper grid's GPU-hours: run this here (the device lacks the NYSE calendar package)"
$PY - "$OUT/bench_stacked.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
paper = {row["seeds"]: row for row in r["rows"] if row["size"] == "paper"}
pred = r["predict_samples_per_s"].get("paper")
for k, row in sorted(paper.items()):
    best = max((p for p in ("one_at_a_time", "bmm", "streams") if p in row), key=lambda p: row[p]["samples_per_s"])
    print(f"K={k:2d}: best {best} {row[best]['samples_per_s']:,.0f} samples/s -> python bench/estimate_paper_compute.py "
          f"--gpu-only --gpu-train-sps {row[best]['samples_per_s']:.0f} --gpu-eval-sps {pred:.0f}")
PYEOF
step "done"
ls -la "$OUT"
