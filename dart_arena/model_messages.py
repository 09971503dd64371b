"""What the server and the model process say to each other, the one module both sides import (the server's side,
:mod:`dart_arena.model_client`; the model's, :mod:`dart_arena.model_process`), so neither imports the other's
internals and the child process never imports the server's code.

The messages are tuples, the first item their kind:

- server -> model process: ``("race", id, methods, prompts, settings)`` | ``("stop", id)`` | ``("quit",)``
- model process -> server: ``("ready", EngineInfo, tokenizer)`` | ``("error", message, traceback, known)``
  (``message``: one line, see :func:`dart_core.loading.errors.describe`; ``known``: a ``LoadError`` or another of
  the project's errors, whose message suffices) | ``("memory", id, {method: earlier answers held or None})`` (once,
  before the race's first step) | ``("step", id, method, Step, states)`` | ``("end", id, states, limit)``

``states`` is ``{method: (status, error)}`` for every lane of the race. No Gradio here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class EngineInfo:
    """What the server needs to know of the loaded arena (it never holds the model itself)."""

    methods: list[str]  # loaded racers, registry order, the baseline last
    drafters: list[str]  # the drafting ones among them
    device: str
    dtype: str
    max_context: int
    has_store: bool
    threads: int  # PyTorch's CPU threads
    linear_kernels: dict[str, str] = field(default_factory=dict)  # on a CPU: model → its linear kernels, one line
    fast_path: str | None = None  # graphs / compile / eager, or None: the eager dynamic-cache path
    budget: str = "node"  # the tree budget's rule (``dart_core.engine.budget``)
    cost_curves: dict[str, Any] = field(default_factory=dict)  # its verify cost curves at load, by streams


def engine_info(arena: Any) -> EngineInfo:
    """The :class:`EngineInfo` of an arena loaded in this process (the model process's, or a local engine's)."""
    plans = getattr(arena, "cpu_linears", {})
    return EngineInfo(methods=list(arena.methods), drafters=list(arena.drafters), device=str(arena.target.device),
                      dtype=str(arena.target.dtype).removeprefix("torch."),
                      max_context=int(arena.target.max_context), has_store=arena.store is not None,
                      threads=torch.get_num_threads(),
                      linear_kernels={name: plan.describe() for name, plan in plans.items()},
                      fast_path=getattr(arena.target, "fast_path", None), budget=getattr(arena, "budget", "node"),
                      cost_curves=arena.cost_curves.measured() if getattr(arena, "cost_curves", None) else {})
