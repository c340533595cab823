#!/usr/bin/env bash
# One GPU session in one call, within 9 minutes: kernel tests on the GPU (when pytest is there),
# the eight training runs of `python -m protot.train.gpu train`, then a short gpu_bench.py.
#
#   OUT=/path/to/results bash benchmarks/gpu_session.sh        (from the repository root)
#
# Needs: one CUDA GPU; python with torch, triton, transformers, numpy, safetensors (the checks
# below print the versions); the token pack build/gpu_pack (written beforehand on a machine with
# data/ by `python -m protot.train.gpu pack`). Nothing is installed and nothing is downloaded.
# Writes to $OUT at most 7 files, none above 16 MiB: session.log, gpu_train.json,
# <arch>-small-gpu.tar (4), gpu_bench.json. Each stage has its own time limit, so one that hangs
# or runs long cannot take the others' time; a stage that fails is logged and the next one runs.
#
# DRY_RUN=1 checks the script itself on the CPU (tests/train/test_gpu_train.py does): no kernel
# tests, one tiny training run (--dry-run), the benchmark's decode section (--dry-run).
set -u
OUT="${OUT:?set OUT to the folder for the results}"
DRY_RUN="${DRY_RUN:-0}"
if [ "$DRY_RUN" = 1 ]; then
    TRAIN_EXTRA=(--dry-run --archs protot --sizes small)
    BENCH_ARGS=(--dry-run --sections decode)
else
    TRAIN_EXTRA=()
    BENCH_ARGS=(--lengths 1024 8192 32768 --contexts 256 2048 8192 --archs protot llama
                --decode-contexts 1024 8192 --rep 5 --rep-model 2 --step-budget-s 5)
fi
PY="${PYTHON:-python}"
PACK="${PACK:-build/gpu_pack}"
TEST_S="${TEST_S:-40}"      # each of the two kernel-test runs
TRAIN_S="${TRAIN_S:-375}"   # training: 290 s of caps + compilation, evaluation and export
BENCH_S="${BENCH_S:-70}"    # benchmark
mkdir -p "$OUT"
LOG="$OUT/session.log"
export PYTHONPATH="$PWD/lib:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
unset TRITON_INTERPRET
start=$(date +%s)
stage() { echo "== $(date -u +%H:%M:%S) [+$(( $(date +%s) - start ))s] $*" | tee -a "$LOG"; }

stage "versions"
"$PY" - <<'EOF' 2>&1 | tee -a "$LOG"
import importlib.metadata as md, platform, torch
print("python", platform.python_version(), "| torch", torch.__version__, "| cuda", torch.version.cuda,
      "| gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
for p in ("triton", "transformers", "numpy", "safetensors", "pytest"):
    try:
        print(p, md.version(p))
    except md.PackageNotFoundError:
        print(p, "not installed")
EOF

stage "kernel tests (compiled kernels, bfloat16 included; limit ${TEST_S}s)"
if [ "$DRY_RUN" = 1 ]; then
    echo "dry run: kernel tests skipped" | tee -a "$LOG"
elif "$PY" -c "import pytest" 2>/dev/null; then
    # first the tests only a GPU can run (bfloat16, > 65535 heads, offsets beyond 2^31), then the rest
    GPU_K="bfloat16 or 65535 or beyond_int32"
    timeout "$TEST_S" "$PY" -m pytest -q -p no:cacheprovider tests/kernels/test_proto_mixer_kernels.py \
        -k "$GPU_K" 2>&1 | tail -n 15 | tee -a "$LOG"
    echo "GPU-only kernel tests exit: ${PIPESTATUS[0]}" | tee -a "$LOG"
    timeout "$TEST_S" "$PY" -m pytest -q -p no:cacheprovider tests/kernels/test_proto_mixer_forms.py \
        tests/kernels/test_proto_mixer_kernels.py -m "not slow" \
        -k "not ($GPU_K) and not compile_for_sm90 and not gpu_bench_dry_run" 2>&1 | tail -n 15 | tee -a "$LOG"
    echo "other kernel tests exit: ${PIPESTATUS[0]}" | tee -a "$LOG"
else
    echo "pytest is not installed: kernel tests skipped" | tee -a "$LOG"
fi

stage "training: python -m protot.train.gpu train (limit ${TRAIN_S}s)"
timeout "$TRAIN_S" "$PY" -m protot.train.gpu train --pack "$PACK" --out "$OUT" --total-cap-s 290 ${TRAIN_EXTRA[@]+"${TRAIN_EXTRA[@]}"} 2>&1 | tee -a "$LOG" | grep -v "^  step"
echo "training exit: ${PIPESTATUS[0]}" | tee -a "$LOG"

stage "gpu_bench.py (limit ${BENCH_S}s)"
timeout "$BENCH_S" "$PY" benchmarks/gpu_bench.py --out "$OUT/gpu_bench.json" "${BENCH_ARGS[@]}" 2>&1 | tail -n 60 | tee -a "$LOG"
echo "gpu_bench exit: ${PIPESTATUS[0]}" | tee -a "$LOG"

stage "done"
ls -la "$OUT" | tee -a "$LOG"
