#!/usr/bin/env bash
# The prepared GPU check: builds the project as docs/developers.md says for a GPU box (torch, transformers,
# safetensors, pybind11 and scikit-build-core present; no gradio, no plotly, no internet), then runs
# `python -m dart_core.bench gpu-check` in one process: bench gpu eager and on the fast path at Qwen3-1.7B and 8B
# shapes, a profile of one fast-path DART step, the concurrency sweep on the fast path (B = 1, 2, 4, 8, 16 streams
# at Qwen3-8B shapes), the default bundle raced on the GPU in bf16 and float32, the
# CUDA-relevant tests. It writes gpu_check.json and a markdown report beside it into $OUT (else ./gpu-check), with
# progress on the way.
#   bash scripts/gpu_check.sh                    the whole check (within 6 minutes on one H100 or H200)
#   bash scripts/gpu_check.sh --quick            the rerun after a fix (within 2 minutes)
#   bash scripts/gpu_check.sh --device cpu --smoke   the same code paths at tiny shapes on a CPU (CI)
# Other arguments go to the check (--budget SECONDS, --bundle DIR, --skip STEP,...). Without CUDA and without
# --device cpu it says so in one line and exits 2.
set -uo pipefail
cd "$(dirname "$0")/.."
device=""
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  if [ "${args[$i]}" = --device ] && [ $((i + 1)) -lt ${#args[@]} ]; then device=${args[$((i + 1))]}; fi
done
PY=${PYTHON:-python3}
if [ "$device" = cpu ] && [ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ]; then PY=.venv/bin/python; fi
if [ "$device" != cpu ] && ! "$PY" -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
  echo "gpu_check: no CUDA device here (torch.cuda.is_available() is false); --device cpu --smoke runs the CPU check"
  exit 2
fi
build_s=""
if ! "$PY" -c "import dart_core._native" 2>/dev/null; then
  # the native core without the CPU-only decode-attention kernel (minutes of compiling that a GPU box never uses)
  echo "==> building dart_core (pip install --no-build-isolation --no-deps -e ., DART_CPU_ATTENTION=OFF)"
  t0=$(date +%s.%N)
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$PY" -m pip install -q --no-build-isolation --no-deps -e . \
    -C cmake.define.DART_CPU_ATTENTION=OFF || { echo "gpu_check: the build failed"; exit 1; }
  build_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  echo "==> built in ${build_s} s"
fi
out=${OUT:-gpu-check}
exec "$PY" -m dart_core.bench gpu-check --out "$out" ${build_s:+--build-seconds "$build_s"} "$@"
