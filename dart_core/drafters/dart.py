"""DART drafter: one layer that predicts d+1 future positions in ONE forward (shifted logits + d mask rows),
turned into a draft tree by the native N-gram-guided search (``docs/drafters.md``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch

from dart_core.drafters.base import DrafterLayer, DrafterState
from dart_core.drafters.checkpoint import (
    CheckpointFormat,
    check_state,
    layer_shapes,
    resolve_embedding,
)
from dart_core.drafters.config import DrafterConfig
from dart_core.drafters.layers import CacheRows, StaticRows, causal_mask, context_visible, within_window
from dart_core.drafters.settings import knob
from dart_core.engine.drafter import DraftInput, Proposal
from dart_core.engine.timing import Stopwatch
from dart_core.loading.layouts import SAFE_SINGLE
from dart_core.ngram.memory import RemembersNgrams
from dart_core.ngram.search import searched_proposal

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DartSettings:
    """DART's tree: top-k per level, beam width, nodes below the root, N-gram weight (the reference's defaults; on a
    CPU, where a verify costs time with its nodes, a smaller tree: the sizes measured are in the model card)."""

    top_k: int = knob(25, 1, 1000, "candidates per tree level", flag="top-k")
    beam_width: int = knob(20, 1, 1000, "beam width of the tree search", flag="beam")
    max_nodes: int = knob(60, 1, 512, "nodes below the root", label="tree size", flag="nodes", cpu=12, ui=True,
                          size=True)
    ngram_weight: float = knob(0.5, 0.0, 100.0, "weight of the N-gram term (0 = off)", flag="ngram-weight")


class DartDrafter(DrafterLayer, RemembersNgrams):
    """The published DART layer. ``draft_logits`` is the exact forward of the spec; ``propose`` adds top-k,
    the draft→target vocabulary map and the tree search (with the session's N-gram memory when it is on,
    ``dart_core/ngram/memory.py``)."""

    key = "dart"
    label = "DART"
    settings_type = DartSettings

    def __init__(self, cfg: DrafterConfig, embed_weight: torch.Tensor) -> None:
        if cfg.draft_length is None:
            raise ValueError("DART config needs draft_length")
        super().__init__(cfg, embed_weight, with_mask_rep=True)
        self.draft_length = cfg.draft_length
        self._warned_no_store = False
        self.store: Any = None  # the N-gram store of the tree search (an ``NgramStore``), shared by generations

    # ----------------------------------------------------------------- loading
    @classmethod
    def _from_checkpoint(cls, cfg: DrafterConfig, state: dict[str, torch.Tensor], source: str, target: Any, *,
                         revision: str | None, device: torch.device | str | None,
                         dtype: torch.dtype | None) -> DartDrafter:
        """``config.json`` + ``model.safetensors``; ``target`` provides the shared embedding."""
        expected = layer_shapes(cfg) | {"midlayer.mask_rep": (2 * cfg.hidden_size,)}
        check_state(state, expected, optional=frozenset({"t2d"}), source=source)
        return cls._build(cfg, state, resolve_embedding(target), source, device, dtype, target)

    # ----------------------------------------------------------------- forward
    @torch.no_grad()
    def draft_logits(self, features: torch.Tensor, shifted_ids: torch.Tensor,
                     state: DrafterState | None = None) -> torch.Tensor:
        """One drafting call: feed n real rows (target features [n, 3·H_t] and the ids that FOLLOW each row's
        token [n]; batch dim 1 optional), append d mask rows, return logits [1, d+1, draft_vocab] (row 0 ranks
        the root's children). The real rows' K/V join the state's cache; the first call on a fresh state is the
        prefill."""
        state = self.default_state if state is None else state
        feats, ids = self._check_inputs(features, shifted_ids)
        d, n, past = self.draft_length, ids.shape[0], state.length
        positions = torch.arange(past, past + n + d, device=self.device)
        # each real row's context ends at itself, the mask rows' at the last real row (as in training)
        anchors = past + torch.arange(n + d, device=self.device).clamp(max=n - 1)
        mask = within_window(causal_mask(past, n + d, self.device), anchors, past + n, self.config.context_window)
        # the mask rows are scratch rows of the cache: attended, then not committed
        logits = self.layer_logits(feats[None], ids[None], d, positions, mask, state.cache.at(past), last=d + 1)
        state.cache.commit(n)
        return logits

    def layer_logits(self, features: torch.Tensor, ids: torch.Tensor, n_masks: int, positions: torch.Tensor,
                     mask: torch.Tensor,
                     past: tuple[torch.Tensor, torch.Tensor] | CacheRows | StaticRows | None = None,
                     last: int | None = None, rows: torch.Tensor | None = None) -> torch.Tensor:
        """The DART layer, batched so training (B windows, one block of d mask rows per anchor) and drafting
        (B = 1, one block) run the same code: features [B, R, 3·H_t] and following ids [B, R] of R real rows,
        then ``n_masks`` mask rows, at ``positions`` [R + n_masks] under ``mask`` / after ``past`` (see
        ``Attention.forward``). Returns logits [B, rows, draft_vocab] of every row, of the ``last`` rows, or of the
        rows at the indices ``rows`` (a device tensor: the fast path)."""
        mid, hidden = self.midlayer, self.config.hidden_size
        b = features.shape[0]
        x = self.fc(features.to(self.dtype))
        real_in = torch.cat([mid.input_layernorm(self.embed_weight[ids]), mid.hidden_norm(x)], dim=-1)
        attn_in = torch.cat([real_in, mid.mask_rep.expand(b, n_masks, 2 * hidden)], dim=1)
        residual = torch.cat([x, mid.mask_rep[:hidden].expand(b, n_masks, hidden)], dim=1)
        cos, sin = self.rotary.cos_sin(positions, self.dtype)
        out, _, _ = mid.self_attn(attn_in, cos, sin, past, mask)
        h = residual + out
        h = h if last is None else h[:, -last:]
        h = h if rows is None else h.index_select(1, rows)
        h = h + mid.mlp(mid.post_attention_layernorm(h))
        return self.lm_head(self.norm(self.norm(h)))  # the published weights were trained with the norm twice

    def _top_k(self, logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's ``k`` best target ids (int32, via d2t) and their softmax over the k."""
        values, ids = torch.topk(logits.float(), k, dim=-1)
        return (ids + self.d2t[ids]).to(torch.int32), torch.softmax(values, dim=-1)

    # ---------------------------------------------------------------- fast path
    def _scratch_rows(self, settings: object) -> int:
        return self.draft_length

    def _static_step(self, key: tuple[int, int, int], feats: torch.Tensor, ids: torch.Tensor,
                     counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The static form of one drafting step on slot ``key[0]``: ``rows`` real slots (``counts`` = [committed
        rows, real rows n]; slots past n are padding) written at the committed rows onwards, the d mask rows at the
        cache's fixed scratch rows; each row sees what it sees in :meth:`draft_logits`, through a mask as wide as the
        cache. Returns the top-k ids and probabilities of row n-1 and the d mask rows."""
        slot, rows, k = key
        cache = self._slots.slots[slot]
        d, dev, window = self.draft_length, self.device, self.config.context_window
        past, n = counts[0], counts[1]
        t, j = torch.arange(rows, device=dev), torch.arange(d, device=dev)
        scratch = cache.scratch_start
        capacity = cache.static_capacity
        cols = torch.arange(capacity, device=dev)
        real = context_visible(past + t, capacity, window)
        # mask rows: the real rows up to the last one (its window), then the mask rows up to themselves
        masks = context_visible((past + n - 1).expand(d), capacity, window)
        masks |= (cols[None] >= scratch) & (cols[None] <= scratch + j[:, None])
        positions = torch.cat([past + t, past + n + j])
        index = torch.cat([past + t, scratch + j])
        out_rows = torch.cat([(n - 1).reshape(1), rows + j])
        logits = self.layer_logits(feats[None], ids[None], d, positions, torch.cat([real, masks]),
                                   cache.rows(index), rows=out_rows)[0]
        return self._top_k(logits, k)

    # ---------------------------------------------------------------- proposal
    @torch.no_grad()
    def propose(self, state: DrafterState, step: DraftInput) -> Proposal:
        """Draft a tree rooted at ``step.context[-1]`` (the token the target just produced, which must be
        ``step.token_ids[-1]``): top-k per level over the draft vocabulary, mapped to target ids, softmax over
        the k, then the N-gram-guided search (N-gram term off, with a one-time notice, without a store), where
        beams ending in any of the generation's stop ids rank after the others."""
        s: DartSettings = state.settings
        k = min(s.top_k, self.config.draft_vocab_size)
        rows = self._static_rows(len(step.token_ids)) if state.slot is not None and state.length else None
        with Stopwatch(self.device) as draft:
            if rows is None:
                logits = self.draft_logits(step.features, step.token_ids, state)[0]
                tokens, probs = self._top_k(logits, k)
            else:
                tokens, probs = self._static_call(state, step, rows, k)
            tokens_np, probs_np = tokens.cpu().numpy(), probs.cpu().numpy()
        store = self.store
        if store is None and not self._warned_no_store:
            log.warning("DART is drafting without an N-gram store: the tree search runs with the N-gram term off")
            self._warned_no_store = True
        return searched_proposal(tokens_np, probs_np, step, store, s, draft_ms=draft.ms, memory=self.active_memory())


def dart_shapes(cfg: DrafterConfig) -> tuple[dict[str, tuple[int, ...]], set[str]]:
    """The tensors of a DART checkpoint: the shared one-layer head plus its mask embedding (``t2d`` optional)."""
    return layer_shapes(cfg) | {"midlayer.mask_rep": (2 * cfg.hidden_size,)}, {"t2d"}


CHECKPOINT = CheckpointFormat(DrafterConfig, weights=(SAFE_SINGLE,), required=("draft_length",), shapes=dart_shapes,
                              published=lambda size: f"fvliang/qwen{size.lower()}-dart")
