# Sourced by launch/*_app.sh: set up .venv when needed (scripts/dev.sh setup, idempotent), then run the app.
# DART_SHARE=1 adds --share (a public *.gradio.live link; off by default); DART_SKIP_SETUP=1 skips the set-up step
# (a venv you keep yourself). A script's defaults (LAUNCH_DEFAULTS) come first and its extra arguments last, so an
# explicit flag always wins (e.g. --server-port 8000, --device auto, --no-compare-eagle3, --no-listen, --no-share).
# --help prints the defaults the script passes, then python -m dart_arena's help; --check prints the launch plan and
# exits without loading (dart_core/preflight/); --download fetches exactly what the plan needs, then serves.
LAUNCH_DEFAULTS=()

run_app() {
  local script
  script="launch/$(basename "$0")"
  cd "$(dirname "${BASH_SOURCE[0]}")/.."
  if [ "${DART_SKIP_SETUP:-0}" != 1 ]; then bash scripts/dev.sh setup; fi
  local share=()
  if [ "${DART_SHARE:-0}" = 1 ]; then share=(--share); fi
  local arg
  for arg in "$@"; do
    if [ "$arg" = -h ] || [ "$arg" = --help ]; then
      print_defaults "$script" "${LAUNCH_DEFAULTS[@]}" "${share[@]}"
      exec "${VENV:-.venv}/bin/python" -m dart_arena --help
    fi
  done
  exec "${VENV:-.venv}/bin/python" -m dart_arena "${LAUNCH_DEFAULTS[@]}" "${share[@]}" "$@"
}

# The command a launch script runs, one flag per line (what --help shows before python -m dart_arena's own help).
print_defaults() {
  local script=$1
  shift
  echo "$script runs python -m dart_arena with these defaults; arguments you add come after them, so they win:"
  echo
  if [ $# -eq 0 ]; then
    echo "  python -m dart_arena               (no defaults: the app's own)"
  else
    local line="  python -m dart_arena"
    local arg
    for arg in "$@"; do
      if [[ $arg == --* ]]; then
        echo "$line \\"
        line="      $arg"
      else
        line="$line $arg"
      fi
    done
    echo "$line"
  fi
  echo
  echo "Before loading anything it checks every piece (found, fitting each other, device, memory, port);"
  echo "--check prints that plan and exits, --download fetches exactly what it needs first. DART_SHARE=1 adds"
  echo "--share; DART_SKIP_SETUP=1 skips 'bash scripts/dev.sh setup'."
  echo
  echo "python -m dart_arena --help:"
  echo
}

# One published Qwen3 size: its target, DART drafter and EAGLE-3 head (docs/formats.md), the small
# N-gram trie, chat template with thinking off, bfloat16 on the GPU, served on all interfaces at port 30000, with a
# public host's limits (at most 2048 new tokens and 180 s per race, 32 visitors waiting). A fourth argument names
# the published DFlash drafter of that size (Qwen3-4B and 8B have one): the DFlash chain and DFlash-tree columns
# join the race (--no-compare-dflash / --no-compare-dflash-tree leave them out).
run_qwen3_app() {
  local target=$1 dart=$2 eagle3=$3 dflash=""
  shift 3
  if [ $# -gt 0 ] && [[ $1 != -* ]]; then
    dflash=$1
    shift
  fi
  LAUNCH_DEFAULTS=(
    --base-model-name-or-path "$target"
    --dart-model-name-or-path "$dart"
    --ngram-model-name-or-path fvliang/dart-qwen3-ngram --use-small-ngram
    --compare-eagle3 --eagle3-model-name-or-path "$eagle3"
    --template-name qwen --device cuda --dtype bfloat16
    --max-new-tokens 2048 --max-length 4096
    --max-new-tokens-limit 2048 --race-time-limit 180 --max-queue 32
    --listen --server-port 30000
  )
  if [ -n "$dflash" ]; then
    LAUNCH_DEFAULTS+=(
      --compare-dflash --dflash-model-name-or-path "$dflash"
      --compare-dflash-tree --dflash-tree-model-name-or-path "$dflash"
    )
  fi
  run_app "$@"
}
