"""Where a target step's time goes, by the kind of module that spends it: the linear layers, the attention (the
kernel and what the attention module does around it: rotary application, reshapes, the cache update), the norms,
the rotary tables, the MLP's activation, the residual adds of the decoder layers, the model's own work (embedding,
masks, position bookkeeping) and the engine's work outside the model's forward (its inputs, the tree mask, the
logits copy, the commit).

Measured with forward hooks on every module of the stock model, each module's time counted **exclusive** of the
modules it calls, so the families add up to the forward; the step's wall clock around the engine call gives the
share outside the model. A hook costs a few microseconds, so the clocked step is slower than a bare one: both are
reported, and the split is of the clocked one. On a CPU every kernel runs synchronously, so a module's time is
spent inside it; on a GPU this would measure launches, not kernels (use ``torch.profiler`` there).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from torch import nn

from dart_core.engine.tree import DraftTree

__all__ = ["FAMILIES", "ModuleClock", "family_of", "format_split", "measure_split"]

# the families, in the order they are printed; "outside the model" is the step's wall clock minus the forward
FAMILIES = ("linear", "lm head", "attention", "norm", "rotary", "mlp activation", "residual", "model", "outside")


def family_of(name: str, module: nn.Module) -> str:
    """The family a module's exclusive time counts in, from its type (and the output head's name)."""
    kind = type(module).__name__
    if isinstance(module, nn.Linear):
        return "lm head" if name.split(".")[-1] == "lm_head" else "linear"
    if "Norm" in kind:
        return "norm"
    if "Rotary" in kind:
        return "rotary"
    if kind.endswith("Attention"):
        return "attention"
    if kind.endswith("MLP") or "Activation" in kind or isinstance(module, nn.SiLU | nn.GELU):
        return "mlp activation"
    if kind.endswith("DecoderLayer"):
        return "residual"
    return "model"  # the model and its wrappers: embedding, masks, position ids, the cache's bookkeeping


class ModuleClock:
    """Exclusive milliseconds per family, summed over every forward while :meth:`installed` is active.

    ``clock`` returns seconds (``time.perf_counter``; a test passes its own). A module's exclusive time is its
    elapsed time minus its children's, so the families of one forward add up to its outermost module's time."""

    def __init__(self, model: nn.Module, clock: Callable[[], float] = time.perf_counter) -> None:
        self.model, self.clock = model, clock
        self.ms: dict[str, float] = dict.fromkeys(FAMILIES, 0.0)
        self.forward_ms = 0.0  # the outermost modules' elapsed time: every forward's whole
        self._stack: list[list[float]] = []  # per open module: [start, children's elapsed]

    @contextmanager
    def installed(self) -> Iterator[ModuleClock]:
        handles = []
        for name, module in self.model.named_modules():
            family = family_of(name, module)
            handles.append(module.register_forward_pre_hook(self._enter))
            handles.append(module.register_forward_hook(self._exit(family), always_call=True))
        try:
            yield self
        finally:
            for h in handles:
                h.remove()
            self._stack.clear()

    def _enter(self, module: nn.Module, args: Any) -> None:
        self._stack.append([self.clock(), 0.0])

    def _exit(self, family: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            start, children = self._stack.pop()
            elapsed = (self.clock() - start) * 1e3
            self.ms[family] += elapsed - children
            if self._stack:
                self._stack[-1][1] += elapsed
            else:
                self.forward_ms += elapsed

        return hook

    def reset(self) -> None:
        self.ms = dict.fromkeys(FAMILIES, 0.0)
        self.forward_ms = 0.0


def _tree(n: int, vocab: int, seed: int) -> DraftTree:
    """A bushy tree of ``n`` nodes (each node's parent drawn among the earlier ones), as a drafter's would be."""
    rng = np.random.default_rng(seed)
    parents = [-1] + [int(rng.integers(0, i)) for i in range(1, n)]
    return DraftTree(tokens=rng.integers(0, vocab, size=n), parents=parents)


def measure_split(target: Any, prefix: list[int], nodes: int, repeats: int) -> dict[str, Any]:
    """The plain step (one node, no hidden states, as the loop runs it) and a verify of ``nodes`` nodes with the
    drafter's features, each committing its root, after ``prefix``: per kind, the median bare step ms, the median
    clocked step ms and its split by family (ms per step, "outside" = the clocked step minus its forward)."""
    from dart_core.engine.timing import Stopwatch

    out: dict[str, Any] = {}
    for kind, size, layers in (("plain step", 1, ()), (f"verify of {nodes}", nodes, None)):
        state = target.new_state()
        target.prefill(state, [prefix], layers=())
        clock = ModuleClock(target.model)

        def step(i: int, size: int = size, layers: Any = layers, state: Any = state) -> float:
            tree = _tree(size, target.vocab_size, seed=i)
            with Stopwatch(target.device) as sw:
                target.verify_rows(state, [tree], layers)
                target.commit_rows(state, [[0]])
            return sw.ms

        bare = [step(i) for i in range(repeats + 2)][2:]
        walls, splits = [], []
        with clock.installed():
            for i in range(repeats + 2):
                clock.reset()
                wall = step(i)
                if i >= 2:
                    walls.append(wall)
                    splits.append({**clock.ms, "outside": wall - clock.forward_ms})
        out[kind] = {"nodes": size, "bare_ms": float(np.median(bare)), "clocked_ms": float(np.median(walls)),
                     "split_ms": {f: float(np.median([s[f] for s in splits])) for f in FAMILIES}}
    return out


def format_split(fig: dict[str, Any]) -> str:
    """The split as a markdown table: a row per family, a column per step kind (ms and share of the step)."""
    kinds = list(fig)
    head = "| family | " + " | ".join(f"{k}: ms (share)" for k in kinds) + " |"
    lines = [head, "|---|" + "---|" * len(kinds)]
    for f in FAMILIES:
        cells = []
        for k in kinds:
            ms, total = fig[k]["split_ms"][f], sum(fig[k]["split_ms"].values())
            cells.append(f"{ms:.2f} ({ms / total:.0%})" if total > 0 else "-")
        lines.append(f"| {f} | " + " | ".join(cells) + " |")
    lines.append("| step, clocked (bare) | " + " | ".join(
        f"{fig[k]['clocked_ms']:.2f} ({fig[k]['bare_ms']:.2f})" for k in kinds) + " |")
    return "\n".join(lines)

