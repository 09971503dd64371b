# Sourced by launch/*_app.sh: set up .venv when needed (scripts/dev.sh setup, idempotent), then run the app.
# DART_SHARE=1 adds --share (a public *.gradio.live link; off by default). Extra arguments of the launch script
# come last, so they override its defaults (e.g. --server-port 8000, --device auto, --no-compare-eagle3).
run_app() {
  cd "$(dirname "${BASH_SOURCE[0]}")/.."
  bash scripts/dev.sh setup
  local share=()
  if [ "${DART_SHARE:-0}" = 1 ]; then share=(--share); fi
  exec "${VENV:-.venv}/bin/python" -m app "$@" "${share[@]}"
}

# One published Qwen3 size: its target, DART drafter and EAGLE-3 head (docs/formats.md), the small
# N-gram trie, chat template with thinking off, bfloat16 on the GPU, served on all interfaces at port 30000, with a
# public host's limits (at most 2048 new tokens and 180 s per race, 32 visitors waiting).
run_qwen3_app() {
  local target=$1 dart=$2 eagle3=$3
  shift 3
  run_app \
    --base-model-name-or-path "$target" \
    --dart-model-name-or-path "$dart" \
    --ngram-model-name-or-path fvliang/dart-qwen3-ngram --use-small-ngram \
    --compare-eagle3 --eagle3-model-name-or-path "$eagle3" \
    --template-name qwen --device cuda --dtype bfloat16 \
    --max-new-tokens 2048 --max-length 4096 \
    --max-new-tokens-limit 2048 --race-time-limit 180 --max-queue 32 \
    --listen --server-port 30000 \
    "$@"
}
