#!/usr/bin/env bash
# DART vs EAGLE-3 vs AR on Qwen3-1.7B (one CUDA GPU): http://<this host>:30000. DART_SHARE=1 for a public link;
# extra arguments go to python -m dart_arena (e.g. --server-port 8000, --device auto to spread over several GPUs).
set -euo pipefail
source "$(dirname "$0")/common.sh"
run_qwen3_app Qwen/Qwen3-1.7B fvliang/qwen1.7b-dart AngelSlim/Qwen3-1.7B_eagle3 "$@"
