"""The options every front end shares, declared once: where the models run (:mod:`.runtime`), which models load
(:mod:`.models`), each racer's settings (:mod:`.racer_flags`), and the check of their values before any model loads
(:mod:`.limits`). The names load on first use, so a command line that
needs only the runtime flags (training, which sets OpenMP's environment before torch loads) imports no torch."""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    **dict.fromkeys(("Models", "ModelsError", "add_mode_arguments", "add_model_arguments", "add_ngram_memory_argument",
                     "check_ngram_memory", "resolve_models"),
                    "dart_core.options.models"),
    **dict.fromkeys(("DEVICE_HELP", "THREADS_HELP", "add_budget_argument", "add_cpu_linear_argument",
                     "add_device_argument", "add_dtype_argument", "add_fast_path_arguments", "add_runtime_arguments",
                     "add_threads_argument", "app_threads", "check_threads", "runtime_options"),
                    "dart_core.options.runtime"),
    **dict.fromkeys(("add_racer_settings_arguments", "given_settings", "knob_argv", "racer_settings"),
                    "dart_core.options.racer_flags"),
    **dict.fromkeys(("MAX_NEW_TOKENS_CAP", "TargetLimits", "check_flags", "flag_problem", "loaded_problem",
                     "prompts_problem", "refuse", "target_limits", "thread_count", "usable_cores"),
                    "dart_core.options.limits"),
}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
