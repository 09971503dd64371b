#!/usr/bin/env bash
# The offline demo: the embedded bundle (assets/tiny, a small code model with its DART drafter, EAGLE-3 head and
# N-gram store) at http://127.0.0.1:7860, on the GPU if there is one, else the CPU. DART_SHARE=1 for a public
# link; extra arguments go to python -m app (e.g. --listen, --server-port 8000, --device cpu).
set -euo pipefail
source "$(dirname "$0")/common.sh"
run_app "$@"
