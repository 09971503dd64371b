"""The options every front end shares, declared once: where the models run (:mod:`.runtime`), which models load
(:mod:`.models`), and each racer's settings (:mod:`.trees`)."""

from dart_core.options.models import Models, ModelsError, add_mode_arguments, add_model_arguments, resolve_models
from dart_core.options.runtime import (
    DEVICE_HELP,
    THREADS_HELP,
    add_cpu_linear_argument,
    add_device_argument,
    add_dtype_argument,
    add_fast_path_arguments,
    add_runtime_arguments,
    add_threads_argument,
    app_threads,
    check_threads,
    runtime_options,
)
from dart_core.options.trees import add_tree_arguments, given_settings, knob_argv, tree_settings

__all__ = ["DEVICE_HELP", "THREADS_HELP", "Models", "ModelsError", "add_cpu_linear_argument", "add_device_argument",
           "add_dtype_argument", "add_fast_path_arguments", "add_mode_arguments", "add_model_arguments",
           "add_runtime_arguments", "add_threads_argument", "add_tree_arguments", "app_threads", "check_threads",
           "given_settings", "knob_argv", "resolve_models", "runtime_options", "tree_settings"]
