#!/usr/bin/env bash
# The seed stack at the paper's size on a GPU, in under 3 minutes: the stack's CUDA tests, then one bench row at a
# time, most informative first, each under its own time limit; logs and JSON into $OUT (rewritten after every row).
#
#   bash bench/gpu_check_stack.sh                on the device machine (the device tool sets $OUT; carry .whl)
#   DEVICE=cpu INSTALL=0 SAMPLES=300 INSTRUMENTS=2 DAYS=10 bash bench/gpu_check_stack.sh    dry run here
#
# Rows (bench_stacked.py --rows; PATH:SIZE:K[:PRECISION]): bmm K=10, one seed at a time (the baseline: per sample
# the same for any K), bmm K=20, streams K=10, then the same comparison with TF32 off everywhere (ieee), the bmm
# kernel without its CUDA graph, and bmm K=1. Settings (environment): DEVICE (cuda), ROWS (those), SAMPLES (24000
# windows per seed), INSTRUMENTS (5), DAYS (40), ROW_LIMIT (25 s a row), BENCH_LIMIT (105 s for all rows),
# TEST_LIMIT (45 s), PYTHON (python3), INSTALL (1: pip-install .whl into /tmp/site, as bench/gpu_check.sh).
# Wall time on an H100: about 20 s install + <= 45 s tests + <= 105 s rows.
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_check_stack.log") 2>&1
export PYTHONUNBUFFERED=1
DEVICE=${DEVICE:-cuda} SAMPLES=${SAMPLES:-24000}
ROWS=${ROWS:-bmm:paper:10,one_at_a_time:paper:1,bmm:paper:20,streams:paper:10,one_at_a_time:paper:1:ieee,bmm:paper:10:ieee,bmm_eager:paper:10,bmm:paper:1}
DATA="--instruments ${INSTRUMENTS:-5} --days ${DAYS:-40}"
T0=$SECONDS
step() { echo; echo "== [$((SECONDS - T0)) s] $*"; }

step "machine"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
. bench/gpu_install.sh
$PY - > "$OUT/env.json" <<'PYEOF' || exit 4
import json, numpy, pandas, qlib, torch
import rolling_calib.qlib_adapter.stacked as s
gpu = torch.cuda.is_available()
print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                  "gpu": torch.cuda.get_device_name() if gpu else None, "numpy": numpy.__version__,
                  "pandas": pandas.__version__, "qlib": qlib.__version__, "stacked": s.__file__,
                  "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
                  "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                  "fused_cell": s.fused_cell_ready(torch.device("cuda")) if gpu else None}))
PYEOF
cat "$OUT/env.json"

step "the stack's CUDA tests (test_gpu_stack_graphs.py; from test_gpu_paths.py: bmm vs one seed at a time, auto)"
timeout "${TEST_LIMIT:-45}" $PY -m pytest -q -p no:cacheprovider --junitxml="$OUT/tests.xml" \
    tests/qlib_adapter/test_gpu_stack_graphs.py \
    "tests/qlib_adapter/test_gpu_paths.py::test_stack_kernels_match_one_seed_at_a_time[cuda-bmm]" \
    tests/qlib_adapter/test_gpu_paths.py::test_auto_on_cuda_chooses_resident_and_times_both_kernels
echo "pytest exit: $?"

step "bench_stacked rows: $ROWS (each <= ${ROW_LIMIT:-25} s; all <= ${BENCH_LIMIT:-105} s)"
timeout "${BENCH_LIMIT:-105}" $PY bench/bench_stacked.py --device "$DEVICE" --rows "$ROWS" --row-limit "${ROW_LIMIT:-25}" \
    --samples "$SAMPLES" $DATA --out "$OUT/bench_stack.json"
echo "bench_stacked exit: $?"

step "summary (and the paper grid's GPU-hours: run the printed command where the NYSE calendar package is)"
$PY - "$OUT/bench_stack.json" <<'PYEOF'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except (OSError, ValueError) as exc:
    sys.exit(f"no bench JSON: {exc}")
for row in r["rows"]:
    timing = (f"{row['samples_per_s']:,.0f} samples/s, busy {row.get('gpu_busy')}, run {row.get('kernel_run')}"
              if "samples_per_s" in row else "")
    print(row["row"], "->", timing, row.get("error", ""))
for q in r.get("ratios", []):
    print(f"{q['row']}: {q['vs_one_at_a_time']:.2f}x {q['baseline']}  (issue 40's target at paper K=10: >= 3x)")
ok = [x for x in r["rows"] if x["size"] == "paper" and "samples_per_s" in x and x["precision_setting"] == "default"]
pred = r.get("predict_samples_per_s", {}).get("paper")
if ok and pred:
    best = max(ok, key=lambda x: x["samples_per_s"])
    print(f"best {best['row']}: python bench/estimate_paper_compute.py --gpu-only --gpu-train-sps "
          f"{best['samples_per_s']:.0f} --gpu-eval-sps {pred:.0f}")
PYEOF
step "done"
ls -la "$OUT"
