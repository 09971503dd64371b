"""EAGLE-3 head: one layer drafting autoregressively — a context pass, then one forward per tree level to expand
the top-k frontier (``docs/drafters.md``). Its drafting time grows with the depth; that is what DART removes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
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
from dart_core.engine.tree import DraftTree
from dart_core.loading.errors import LoadError

STATIC_TREE_ROWS = 512  # the tree levels a static cache holds: depth x top-k (the reference's 7 x 10, on a CPU 6 x 4)


@dataclass(frozen=True)
class Eagle3Settings:
    """EAGLE-3's tree: nodes including the root, expansion depth, top-k per node (the reference's defaults; on a
    CPU the other tree racers' node count plus the root, measured in the model card)."""

    total_tokens: int = knob(60, 2, 512, "tree nodes, root included", label="total", flag="total", cpu=13, ui=True,
                             size=True)
    depth: int = knob(7, 1, 32, "expansion depth (one drafter forward per level)", cpu=6, ui=True, size=True,
                      cut=False)
    top_k: int = knob(10, 1, 64, "candidates per node", label="top-k", flag="top-k", cpu=4, ui=True)


class Eagle3Drafter(DrafterLayer):
    """The published EAGLE-3 head (AngelSlim / SpecForge format)."""

    key = "eagle3"
    label = "EAGLE-3"
    settings_type = Eagle3Settings

    def __init__(self, cfg: DrafterConfig, embed_weight: torch.Tensor) -> None:
        super().__init__(cfg, embed_weight, with_mask_rep=False)

    # ----------------------------------------------------------------- loading
    allow_bin = True  # published heads may ship pytorch_model.bin (read with weights_only=True)

    @classmethod
    def _from_checkpoint(cls, cfg: DrafterConfig, state: dict[str, torch.Tensor], source: str, target: Any, *,
                         revision: str | None, device: torch.device | str | None,
                         dtype: torch.dtype | None) -> Eagle3Drafter:
        """``config.json`` + ``model.safetensors`` or ``pytorch_model.bin``. The embedding is the checkpoint's own
        ``embed_tokens.weight`` if it has one, else the target's."""
        expected = layer_shapes(cfg) | {"embed_tokens.weight": (cfg.vocab_size, cfg.hidden_size)}
        optional = {"embed_tokens.weight"}
        if cfg.draft_vocab_size == cfg.vocab_size:
            optional |= {"d2t", "t2d"}  # identity map
        check_state(state, expected, optional=frozenset(optional | {"t2d"}), source=source)
        if "d2t" not in state:
            if cfg.draft_vocab_size != cfg.vocab_size:
                raise LoadError(source, f"checkpoint needs d2t (draft vocab {cfg.draft_vocab_size} != "
                                        f"vocab {cfg.vocab_size})")
            state["d2t"] = torch.zeros(cfg.draft_vocab_size, dtype=torch.long)
        own = state.pop("embed_tokens.weight", None)
        embed = own if own is not None else resolve_embedding(target)
        return cls._build(cfg, state, embed, source, device, dtype, target)

    # ----------------------------------------------------------------- forward
    def layer(self, ids: torch.Tensor, h_in: torch.Tensor, positions: torch.Tensor,
              past: tuple[torch.Tensor, torch.Tensor] | CacheRows | StaticRows | None,
              mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One application of the layer, batched so training (B windows, TTT steps) and drafting (B = 1: the
        context pass, each tree level) run the same code: ids [B, T], ``h_in`` [B, T, H] (fc(features) or an
        earlier output), positions [T], ``past`` and ``mask`` as in ``Attention.forward``. Returns (h [B, T, H],
        k, v of the new rows)."""
        mid = self.midlayer
        a = torch.cat([mid.input_layernorm(self.embed_weight[ids]), mid.hidden_norm(h_in)], dim=-1)
        cos, sin = self.rotary.cos_sin(positions, self.dtype)
        out, k, v = mid.self_attn(a, cos, sin, past, mask)
        h = h_in + out
        return h + mid.mlp(mid.post_attention_layernorm(h)), k, v

    def _logp(self, h: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.lm_head(self.norm(h)).float(), dim=-1)

    @torch.no_grad()
    def context_pass(self, features: torch.Tensor, shifted_ids: torch.Tensor,
                     state: DrafterState | None = None) -> torch.Tensor:
        """Feed n new context rows (features [n, 3·H_t], following ids [n]); returns the outputs [n, H]."""
        state = self.default_state if state is None else state
        feats, ids = self._check_inputs(features, shifted_ids)
        n, past = ids.shape[0], state.length
        positions = torch.arange(past, past + n, device=self.device)
        mask = within_window(causal_mask(past, n, self.device), positions, past + n, self.config.context_window)
        h, _, _ = self.layer(ids[None], self.fc(feats)[None], positions, state.cache.at(past), mask)
        state.cache.commit(n)
        return h[0]

    @torch.no_grad()
    def draft_tree(self, features: torch.Tensor, shifted_ids: torch.Tensor, total_tokens: int = 60, depth: int = 7,
                   top_k: int = 10, state: DrafterState | None = None) -> DraftTree:
        """Context pass over the new rows, then ``depth`` sequential forwards expanding the top-k frontier; the
        best ``total_tokens - 1`` of the pool below the root ``shifted_ids[-1]`` form the tree."""
        state = self.default_state if state is None else state
        if total_tokens < 1 or depth < 1 or top_k < 1:
            raise ValueError(f"need total_tokens >= 1, depth >= 1, top_k >= 1; got {total_tokens}, {depth}, {top_k}")
        h_ctx = self.context_pass(features, shifted_ids, state)
        ids = shifted_ids.reshape(-1)
        root = int(ids[-1])
        k = min(top_k, self.config.draft_vocab_size)
        n = state.length
        d2t = self.d2t

        # pool: token (target id), parent pool index (-1 = root), score, depth
        logp0 = self._logp(h_ctx[-1])
        vals, draft_ids = torch.topk(logp0, k)
        pool_score = [vals]
        frontier = list(range(k))  # pool indices
        frontier_scores = vals
        frontier_hidden = h_ctx[-1].expand(k, -1)
        run_rows: dict[int, int] = {}  # pool index -> tree row (the cache's scratch row n + tree row)
        parents_flat = [-1] * k
        tokens_flat = (draft_ids + d2t[draft_ids]).tolist()
        # every tree row sees the same context: the last context_window real rows (all of them without one)
        context = within_window(torch.ones(k, n, dtype=torch.bool, device=self.device), torch.full((k,), n - 1), n,
                                self.config.context_window)
        for i in range(depth):
            # Each frontier node sees the context, its already-run ancestors and itself.
            rows_before = i * k  # every level runs k rows
            mask = torch.zeros(k, n + rows_before + k, dtype=torch.bool, device=self.device)
            mask[:, :n] = context
            for r, node in enumerate(frontier):
                p = parents_flat[node]
                while p >= 0:
                    mask[r, n + run_rows[p]] = True
                    p = parents_flat[p]
                mask[r, n + rows_before + r] = True
            fids = torch.tensor([tokens_flat[j] for j in frontier], device=self.device)
            positions = torch.full((k,), n + i, device=self.device)
            # the level's K/V go to scratch rows after the earlier levels', never committed
            h, _, _ = self.layer(fids[None], frontier_hidden[None], positions, state.cache.at(n + rows_before), mask)
            h = h[0]
            for r, node in enumerate(frontier):
                run_rows[node] = rows_before + r
            # children: top-k per frontier node, cumulative scores; all k*k join the pool
            cvals, cids = torch.topk(self._logp(h), k, dim=-1)
            cum = (frontier_scores[:, None] + cvals).reshape(-1)
            ctoks = (cids + d2t[cids]).reshape(-1).tolist()
            base = len(tokens_flat)
            tokens_flat.extend(ctoks)
            parents_flat.extend(frontier[j // k] for j in range(k * k))
            pool_score.append(cum)
            best = torch.topk(cum, k).indices
            frontier = [base + int(j) for j in best]
            frontier_scores = cum[best]
            frontier_hidden = h[best // k]
        scores = torch.cat(pool_score).float().cpu().numpy()
        return _assemble(root, np.asarray(tokens_flat), np.asarray(parents_flat), scores, total_tokens - 1)

    # ---------------------------------------------------------------- fast path
    def _scratch_rows(self, settings: Eagle3Settings | None) -> int:
        """A tree's levels: ``depth`` x ``top_k`` rows (at most :data:`STATIC_TREE_ROWS` on a static cache)."""
        if settings is None:
            return STATIC_TREE_ROWS
        return settings.depth * min(settings.top_k, self.config.draft_vocab_size)

    def _static_step(self, key: tuple[int, int, int, int], feats: torch.Tensor, ids: torch.Tensor,
                     counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The static form of :meth:`draft_tree` on slot ``key[0]``: the context pass over ``rows`` slots
        (``counts`` = [committed rows, real rows n]), then ``depth`` levels of ``k`` rows each at the cache's fixed
        scratch rows, each row seeing the context, its ancestors' rows and itself (a device-side ancestor matrix
        in place of the eager path's Python walk up the tree), the frontier chosen on the device. Returns the pool
        (target ids, parent pool index or -1, cumulative log-prob) in the eager path's order."""
        slot, rows, depth, k = key
        cache = self._slots.slots[slot]
        dev, window, capacity = self.device, self.config.context_window, cache.static_capacity
        past, n = counts[0], counts[1]
        d2t = self.d2t
        first = cache.scratch_start
        t = torch.arange(rows, device=dev)
        h, _, _ = self.layer(ids[None], self.fc(feats)[None], past + t, cache.rows(past + t),
                             context_visible(past + t, capacity, window))
        last = h[0].index_select(0, (n - 1).reshape(1))[0]
        length = past + n  # the committed context after this pass
        vals, draft_ids = torch.topk(self._logp(last), k)
        tokens, parents, scores = [draft_ids + d2t[draft_ids]], [torch.full((k,), -1, device=dev)], [vals]
        frontier, frontier_tokens, frontier_scores = torch.arange(k, device=dev), tokens[0], vals
        frontier_hidden = last.expand(k, -1)
        r = torch.arange(k, device=dev)
        context = context_visible((length - 1).expand(k), capacity, window)[:, :first]
        tail = torch.zeros(k, capacity - first - depth * k, dtype=torch.bool, device=dev)
        ancestors = torch.zeros(k, depth * k, dtype=torch.bool, device=dev)  # scratch rows each frontier row sees
        levels = torch.arange(depth * k, device=dev)[None]
        for i in range(depth):
            seen = ancestors | (levels == (i * k + r)[:, None])  # and itself
            mask = torch.cat([context, seen, tail], dim=1)
            h, _, _ = self.layer(frontier_tokens[None], frontier_hidden[None], (length + i).expand(k),
                                 cache.rows(first + i * k + r), mask)
            h = h[0]
            cvals, cids = torch.topk(self._logp(h), k, dim=-1)
            cum = (frontier_scores[:, None] + cvals).reshape(-1)
            ctoks = (cids + d2t[cids]).reshape(-1)
            tokens.append(ctoks)
            parents.append(frontier[:, None].expand(k, k).reshape(-1))
            scores.append(cum)
            best = torch.topk(cum, k).indices
            parent_row = best // k
            ancestors = seen[parent_row]
            frontier = k + i * k * k + best
            frontier_tokens, frontier_scores, frontier_hidden = ctoks[best], cum[best], h[parent_row]
        return torch.cat(tokens), torch.cat(parents), torch.cat(scores)

    @torch.no_grad()
    def propose(self, state: DrafterState, step: DraftInput) -> Proposal:
        """The decoding loop's entry: a timed ``draft_tree`` (its cost is all drafting; no separate search). Its
        levels stop at the budget's ``depth_limit`` (a tree of L levels takes L - 1 forwards after the context pass),
        saving the forwards of levels the budget's cuts would drop; on the fast path's captured graphs the depth stays
        the settings' (another depth would be another graph, captured mid-race)."""
        s: Eagle3Settings = state.settings
        k = min(s.top_k, self.config.draft_vocab_size)
        rows = self._static_rows(len(step.token_ids)) if state.slot is not None and state.length else None
        with Stopwatch(self.device) as draft:
            if rows is None:
                depth = s.depth if step.depth_limit is None else max(1, min(s.depth, step.depth_limit - 1))
                tree = self.draft_tree(step.features, step.token_ids, s.total_tokens, depth, s.top_k, state)
            else:
                tokens, parents, scores = (x.cpu().numpy() for x in self._static_call(state, step, rows, s.depth, k))
                tree = _assemble(int(step.token_ids[-1]), tokens, parents, scores.astype(np.float32),
                                 s.total_tokens - 1)
        return Proposal(tree=tree, draft_ms=draft.ms, search_ms=0.0)


def _assemble(root: int, tokens: np.ndarray, parents: np.ndarray, scores: np.ndarray, keep: int) -> DraftTree:
    """Keep the ``keep`` best pool nodes (score desc, then shallower, then older — closed under parents since
    scores never increase along a path) and lay them out parents-first as a DraftTree."""
    depth = np.zeros(len(tokens), dtype=np.int64)
    for i, p in enumerate(parents):
        depth[i] = 0 if p < 0 else depth[p] + 1
    order = np.lexsort((np.arange(len(tokens)), depth, -scores))[: max(keep, 0)]
    kept = order[np.lexsort((order, depth[order]))]  # parents first: by depth, then pool order
    index = {int(j): i + 1 for i, j in enumerate(kept)}
    out_parents = [-1] + [0 if parents[j] < 0 else index[int(parents[j])] for j in kept]
    out_tokens = [root] + [int(tokens[j]) for j in kept]
    out_scores = [0.0] + [float(scores[j]) for j in kept]
    return DraftTree(np.asarray(out_tokens), np.asarray(out_parents), np.asarray(out_scores, dtype=np.float32))


def eagle3_shapes(cfg: DrafterConfig) -> tuple[dict[str, tuple[int, ...]], set[str]]:
    """The tensors of an EAGLE-3 head: the shared one-layer head, its own embedding optional (else the target's),
    and ``d2t`` optional when the draft vocabulary is the full one."""
    optional = {"t2d", "embed_tokens.weight"} | ({"d2t"} if cfg.draft_vocab_size == cfg.vocab_size else set())
    return layer_shapes(cfg) | {"embed_tokens.weight": (cfg.vocab_size, cfg.hidden_size)}, optional


CHECKPOINT = CheckpointFormat(DrafterConfig, shapes=eagle3_shapes,
                              published=lambda size: f"AngelSlim/Qwen3-{size}_eagle3")
