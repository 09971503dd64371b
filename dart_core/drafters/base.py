"""What DART and EAGLE-3 share: the one-layer module skeleton of their published checkpoints (fc, midlayer, norm,
lm_head, d2t, the target's embedding), the tail of their loaders, input checks, and the per-generation state
(:class:`DrafterState`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from dart_core.drafters.checkpoint import check_d2t, check_embedding
from dart_core.drafters.config import DrafterConfig
from dart_core.drafters.layers import KVCache, MidLayer, RMSNorm, Rotary, StaticKV
from dart_core.drafters.module import GRAPH_ROWS, DrafterModule
from dart_core.drafters.settings import check_settings
from dart_core.engine.drafter import DraftInput, NoSettings
from dart_core.engine.hf_config import feature_layer_ids


@dataclass
class DrafterState:
    """Per-generation drafter state: K/V of the real context rows fed so far (DART's mask rows and EAGLE-3's
    tree rows are never kept), so one loaded drafter serves generations that alternate."""

    cache: KVCache = field(default_factory=KVCache)
    settings: Any = None  # this generation's settings (the drafter's settings dataclass)
    slot: int | None = None  # on the fast path: the pool's static cache it holds (``cache`` is that one)

    @property
    def length(self) -> int:
        return self.cache.length


class DrafterLayer(DrafterModule):
    """fc(3·H_t → H) + one ``midlayer`` + ``norm`` + ``lm_head`` over the draft vocabulary, with ``d2t`` (draft id
    i is target id i + d2t[i]) and the target's token embedding, shared (same storage) and frozen."""

    key = "drafter"  # the racer key (``dart_core.racers.registry``)
    label = "drafter"  # how messages name it
    settings_type: type = NoSettings

    def __init__(self, cfg: DrafterConfig, embed_weight: torch.Tensor, *, with_mask_rep: bool) -> None:
        super().__init__()
        self.config = cfg
        self.fc = nn.Linear(3 * cfg.target_hidden_size, cfg.hidden_size, bias=False)
        self.midlayer = MidLayer(cfg, with_mask_rep=with_mask_rep)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))
        self.embed_weight = embed_weight.detach()  # not a parameter of ours
        self.rotary = Rotary(cfg)
        self.default_state = DrafterState(settings=self.settings_type())
        # the target hidden_states it reads (indices, concatenated in this order), set by ``bind``; None until
        # then: the target's default layers
        self.feature_layers: tuple[int, ...] | None = None

    def bind(self, target_config: Any) -> DrafterLayer:
        """Resolve the target layers this drafter reads (its config's auxiliary layer ids, else the default rule)
        against the target's config; a drafter for a shallower target is refused here."""
        self.feature_layers = tuple(feature_layer_ids(target_config, self.config.aux_layer_ids))
        return self

    def new_state(self, settings: Any = None) -> DrafterState:
        """A fresh per-generation state with ``settings`` (default: the settings dataclass's defaults), checked
        against their bounds (ValueError naming the field)."""
        settings = self.settings_type() if settings is None else settings
        if not isinstance(settings, self.settings_type):
            raise TypeError(f"{self.label} takes {self.settings_type.__name__}, got {type(settings).__name__}")
        state = DrafterState(settings=check_settings(settings, self.label))
        if self._slots is not None and self._scratch_rows(state.settings) <= self._scratch_rows(None):
            state.slot = self._slots.lend(state)
            state.cache = self._slots.slots[state.slot]
            state.cache.length = 0
        return state

    def _scratch_rows(self, settings: Any) -> int:
        """Scratch rows a drafting step writes after the committed ones under ``settings`` (None: the most a
        static cache holds; a generation that needs more drafts eagerly)."""
        return 0

    def _static_call(self, state: DrafterState, step: DraftInput, rows: int, *knobs: int) -> Any:
        """One static-shape drafting step (a CUDA graph on a GPU, keyed by slot, ``rows`` and ``knobs``): the new
        rows padded to ``rows``, the committed length and the real row count as a device tensor; their K/V
        committed after."""
        n = len(step.token_ids)
        feats = step.features.to(device=self.device, dtype=self.dtype).reshape(n, -1)
        ids = step.token_ids.to(self.device).reshape(n)
        if rows > n:
            feats = nn.functional.pad(feats, (0, 0, 0, rows - n))
            ids = nn.functional.pad(ids, (0, rows - n))
        counts = torch.tensor([state.length, n], device=self.device)
        out = self._graphs((state.slot, rows, *knobs), feats=feats, ids=ids, counts=counts)
        state.cache.commit(n)
        return out

    def _new_slot(self) -> StaticKV:
        scratch = self._scratch_rows(None)
        assert self.static_capacity is not None
        # committed rows, a step's padded new rows, and the eager first step's scratch rows, before the scratch
        return StaticKV(self.static_capacity + GRAPH_ROWS + scratch + scratch, scratch)

    def reset(self) -> None:
        """Start the default state (used by calls without ``state``) afresh."""
        self.default_state = DrafterState()

    @classmethod
    def _build(cls, cfg: DrafterConfig, state: dict[str, torch.Tensor], embed: torch.Tensor, source: str,
               device: torch.device | str | None, dtype: torch.dtype | None, target: Any = None) -> Any:
        """Shared loader tail: check d2t and the embedding, build, load strictly, place on the embedding's device
        and dtype unless told otherwise; a loaded ``target`` model (one with a config) binds the feature layers."""
        check_d2t(state["d2t"], cfg, source)
        check_embedding(embed, cfg, source)
        device = torch.device(device) if device is not None else embed.device
        dtype = dtype or (embed.dtype if embed.is_floating_point() else torch.float32)
        model = cls(cfg, embed.to(device=device, dtype=dtype))
        weights = {k: v for k, v in state.items() if k != "t2d"}  # t2d is not needed at inference
        weights["d2t"] = weights["d2t"].long()
        model.load_state_dict(weights, strict=True)
        if getattr(target, "config", None) is not None:
            model.bind(target.config)
        return model.to(device=device, dtype=dtype).eval().requires_grad_(False)

    def _apply(self, fn: Any, recurse: bool = True) -> DrafterLayer:
        super()._apply(fn, recurse)
        if self.embed_weight.is_floating_point():
            self.embed_weight = fn(self.embed_weight)
        self.d2t = self.d2t.long()
        return self

    def _check_inputs(self, features: torch.Tensor, shifted_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """features [n, 3·H_t] and the ids following each row [n] (batch dim 1 optional), on our device/dtype."""
        feats = features[0] if features.dim() == 3 and features.shape[0] == 1 else features
        ids = shifted_ids[0] if shifted_ids.dim() == 2 and shifted_ids.shape[0] == 1 else shifted_ids
        width = 3 * self.config.target_hidden_size
        if feats.dim() != 2 or feats.shape[1] != width:
            raise ValueError(f"{self.label} features must be [n, {width}] (three target layers), "
                             f"got {tuple(features.shape)}")
        if ids.dim() != 1 or ids.shape[0] != feats.shape[0] or ids.shape[0] == 0:
            raise ValueError(
                f"shifted_ids must be [n] with n = {feats.shape[0]} > 0 rows, got {tuple(shifted_ids.shape)}"
            )
        if int(ids.min()) < 0 or int(ids.max()) >= self.config.vocab_size:
            raise ValueError(f"shifted_ids hold token ids outside [0, {self.config.vocab_size})")
        return feats.to(device=self.device, dtype=self.dtype), ids.to(self.device)

