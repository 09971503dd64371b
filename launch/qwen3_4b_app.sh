#!/usr/bin/env bash
# DART vs EAGLE-3 vs DFlash (chain and tree) vs AR on Qwen3-4B (one CUDA GPU): http://<this host>:30000. DART_SHARE=1 for a public link;
# extra arguments go to python -m dart_arena (e.g. --server-port 8000, --device auto to spread over several GPUs).
set -euo pipefail
source "$(dirname "$0")/common.sh"
run_qwen3_app Qwen/Qwen3-4B fvliang/qwen4b-dart AngelSlim/Qwen3-4B_eagle3 z-lab/Qwen3-4B-DFlash-b16 "$@"
