"""DART drafter: one layer that predicts d+1 future positions in ONE forward (shifted logits + d mask rows),
turned into a draft tree by the native N-gram-guided search (``specs/dart-drafter.md``)."""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np
import torch

from dart_core.drafters.base import DrafterLayer, DrafterState, Proposal
from dart_core.drafters.checkpoint import check_state, layer_shapes, load_config, load_weights, resolve_embedding
from dart_core.drafters.config import DrafterConfig
from dart_core.timing import Stopwatch
from dart_core.tree_search import search_tree

log = logging.getLogger(__name__)


class DartDrafter(DrafterLayer):
    """The published DART layer. ``draft_logits`` is the exact forward of the spec; ``propose`` adds top-k,
    the draft→target vocabulary map and the tree search."""

    kind = "dart"
    name = "DART"

    def __init__(self, cfg: DrafterConfig, embed_weight: torch.Tensor) -> None:
        if cfg.draft_length is None:
            raise ValueError("DART config needs draft_length")
        super().__init__(cfg, embed_weight, with_mask_rep=True)
        self.draft_length = cfg.draft_length
        self._warned_no_store = False

    # ----------------------------------------------------------------- loading
    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike[str],
        target: Any,
        *,
        revision: str | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> DartDrafter:
        """Load ``config.json`` + ``model.safetensors`` (local dir or Hub id); ``target`` provides the shared
        embedding: a target dir / Hub id, an embedding tensor, or a loaded model."""
        cfg = load_config(path, revision=revision)
        source = os.fspath(path)
        state = load_weights(path, revision=revision)
        expected = layer_shapes(cfg) | {"midlayer.mask_rep": (2 * cfg.hidden_size,)}
        check_state(state, expected, optional=frozenset({"t2d"}), source=source)
        return cls._build(cfg, state, resolve_embedding(target), source, device, dtype)

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
        cfg, d, attn = self.config, self.draft_length, self.midlayer.self_attn
        n, past = ids.shape[0], state.length
        x = self.fc(feats)
        e = self.embed_weight[ids]
        real_in = torch.cat([self.midlayer.input_layernorm(e), self.midlayer.hidden_norm(x)], dim=-1)
        mask_rep = self.midlayer.mask_rep
        attn_in = torch.cat([real_in, mask_rep.expand(d, 2 * cfg.hidden_size)], dim=0)
        residual = torch.cat([x, mask_rep[: cfg.hidden_size].expand(d, cfg.hidden_size)], dim=0)
        rows = n + d
        positions = torch.arange(past, past + rows, device=self.device)
        cos, sin = self.rotary.cos_sin(positions, self.dtype)
        mask = torch.ones(rows, past + rows, dtype=torch.bool, device=self.device)
        mask[:, past:] = torch.tril(mask[:, past:])
        out, k, v = attn(attn_in, cos, sin, state.cache.keys, state.cache.values, mask)
        state.cache.append(k[:, :n], v[:, :n])
        h = (residual + out)[-(d + 1) :]
        h = h + self.midlayer.mlp(self.midlayer.post_attention_layernorm(h))
        logits = self.lm_head(self.norm(self.norm(h)))  # the published weights were trained with the norm twice
        return logits[None]

    # ---------------------------------------------------------------- proposal
    @torch.no_grad()
    def propose(
        self,
        state: DrafterState,
        features: torch.Tensor,
        shifted_ids: torch.Tensor,
        context_tokens: np.ndarray,
        store: Any = None,
        *,
        top_k: int = 25,
        beam_width: int = 20,
        max_nodes: int = 60,
        ngram_weight: float = 0.5,
        eos_token_id: int | None = None,
    ) -> Proposal:
        """Draft a tree rooted at ``context_tokens[-1]`` (the token the target just produced, which must be
        ``shifted_ids[-1]``): top-k per level over the draft vocabulary, mapped to target ids, softmax over the
        k, then the N-gram-guided search (off, with a one-time notice, when there is no store)."""
        with Stopwatch(self.device) as draft:
            logits = self.draft_logits(features, shifted_ids, state)[0]
            k = min(top_k, self.config.draft_vocab_size)
            values, ids = torch.topk(logits.float(), k, dim=-1)
            tokens = ids + self.d2t[ids]
            probs = torch.softmax(values, dim=-1)
            tokens_np, probs_np = tokens.to(torch.int32).cpu().numpy(), probs.cpu().numpy()
        if store is None and not self._warned_no_store:
            log.warning("DART is drafting without an N-gram store: the tree search runs with the N-gram term off")
            self._warned_no_store = True
        with Stopwatch() as search:
            tree = search_tree(tokens_np, probs_np, context_tokens, store, beam_width=beam_width,
                               max_nodes=max_nodes, ngram_weight=ngram_weight if store is not None else 0.0,
                               eos_token_id=eos_token_id)
        return Proposal(tree=tree, draft_ms=draft.ms, search_ms=search.ms)
