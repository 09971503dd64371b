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


class DrafterModule(nn.Module):
    """A drafter as a torch module: placed by its weights, loaded by :meth:`from_pretrained`."""

    config_type: ClassVar[type] = DrafterConfig  # parses its config.json (``from_dict``)
    allow_bin: ClassVar[bool] = False  # whether ``pytorch_model.bin`` may stand in for ``model.safetensors``
    fc: nn.Linear

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
