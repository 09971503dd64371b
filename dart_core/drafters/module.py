"""What every drafter module shares, whatever its family: its device and dtype are those of its input projection
``fc`` (the target's features enter through it), and it loads from a checkpoint directory or Hub id in its own
format — ``config.json`` parsed by its ``config_type``, its weights file read whole — before the family's
``_from_checkpoint`` checks the tensors and builds it on the target. DART, EAGLE-3 and DFlash load through this one
path (``drafters/checkpoint.py`` does the reading)."""

from __future__ import annotations

import os
from typing import Any, ClassVar

import torch
from torch import nn

from dart_core.drafters.checkpoint import load_config, load_weights_file
from dart_core.drafters.config import DrafterConfig
from dart_core.engine.graphs import GraphedCall, SlotPool, bucket

GRAPH_ROWS = 32  # the most new context rows a captured drafting step takes (the accepted tokens); more run eagerly


class DrafterModule(nn.Module):
    """A drafter as a torch module: placed by its weights, loaded by :meth:`from_pretrained`."""

    config_type: ClassVar[type] = DrafterConfig  # parses its config.json (``from_dict``)
    allow_bin: ClassVar[bool] = False  # whether ``pytorch_model.bin`` may stand in for ``model.safetensors``
    fc: nn.Linear
    static_capacity: int | None = None  # the fast path (use_static_cache): rows of each static drafter cache
    _graphs: GraphedCall | None = None
    _slots: SlotPool[Any] | None = None

    # ---------------------------------------------------------------- fast path
    def use_static_cache(self, capacity: int, *, graphs: bool = True) -> None:
        """The fast path: new states draw a static cache of ``capacity`` committed rows (the target's context) from
        a pool, and every drafting step after the first (whose rows, the prompt, vary in number) runs one forward at
        static shapes, its new rows padded to a power of two, every value it depends on a device tensor: captured
        and replayed as a CUDA graph on a GPU with ``graphs``, run as it is elsewhere (the same drafts as the eager
        path, which the tests check)."""
        if capacity < 1:
            raise ValueError(f"use_static_cache: capacity must be at least 1 row, got {capacity}")
        self.static_capacity = int(capacity)
        self._slots = SlotPool(self._new_slot)
        self._graphs = GraphedCall(self._static_step, self.device, capture=graphs)

    @property
    def graphs_captured(self) -> int:
        """CUDA graphs recorded so far (0 off CUDA and off the fast path)."""
        return self._graphs.captured if self._graphs is not None else 0

    @property
    def capture_seconds(self) -> float:
        return self._graphs.capture_s if self._graphs is not None else 0.0

    @property
    def capture_failures(self) -> list[str]:
        """Why each drafting step that could not be captured runs uncaptured (none, as a rule)."""
        return list(self._graphs.failed.values()) if self._graphs is not None else []

    def _static_rows(self, n: int) -> int | None:
        """The padded row count of a static step feeding ``n`` new rows, or None: run it eagerly."""
        return bucket(n, GRAPH_ROWS) if self._graphs is not None else None

    def _new_slot(self) -> Any:
        """A static cache for the pool (the family's layout)."""
        raise NotImplementedError

    def _static_step(self, key: tuple[Any, ...], **inputs: torch.Tensor) -> Any:
        """The family's static-shape drafting step (``key`` starts with the slot)."""
        raise NotImplementedError

    @property
    def device(self) -> torch.device:
        return self.fc.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.fc.weight.dtype

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike[str], target: Any, *, revision: str | None = None,
                        device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> Any:
        """Load ``config.json`` and the weights (a local dir or Hub id) and build the drafter on ``target`` (a
        target dir / Hub id, an embedding tensor or a loaded model: what it shares of the target comes from
        there). A refusal names the file at fault."""
        cfg = load_config(path, revision=revision, config_type=cls.config_type)
        weights, state = load_weights_file(path, revision=revision, allow_bin=cls.allow_bin)
        return cls._from_checkpoint(cfg, state, os.fspath(weights), target, revision=revision, device=device,
                                    dtype=dtype)

    @classmethod
    def _from_checkpoint(cls, cfg: Any, state: dict[str, torch.Tensor], source: str, target: Any, *,
                         revision: str | None, device: torch.device | str | None,
                         dtype: torch.dtype | None) -> Any:
        """The family's part: check ``state`` (read from ``source``) against ``cfg`` and build on ``target``."""
        raise NotImplementedError
