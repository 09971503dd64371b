"""The frozen target's features, computed once and kept on disk, so drafter training never runs the target again.

A training step of a one-layer drafter costs a small fraction of a target forward over the same tokens; running
the target inside every step (as the stdlib recipe does on its 7 M model) would dominate training on a real model.
So every distillation sequence goes through the target once: per token, the three feature hidden states
(``[3·H]``) and the input of the output head (``[H]``, from which the teacher distribution over any draft vocab is
one small matmul), both float16, in flat memory-mapped files. The sequences are packed end to end; training windows
are cut from that stream. Each sequence's features come from its own forward (exact), only the drafter's window
may span the end of one conversation and the start of the next, as a multi-turn context would. On a GPU with room
the files are copied once into its memory and every step gathers its windows there (a step that stacked host slices
and copied them over spent most of its time doing so, measured: docs/benchmarks.md#measurements-behind-design-choices).

Building is resumable: the files are preallocated, ``meta.json`` records how many sequences are done and is
rewritten atomically after each chunk, and a digest of the sequences guards against resuming on other data."""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dart_core.engine.target import TargetModel
from dart_core.loading.atomic import atomic_output

FORMAT = 1
FP16_MAX = 65504.0


def sequences_digest(sequences: Sequence[Sequence[int]]) -> str:
    h = hashlib.sha256()
    for s in sequences:
        h.update(np.asarray(s, dtype=np.int64).tobytes())
        h.update(b"|")
    return h.hexdigest()


@dataclass
class FeatureStore:
    """Memory-mapped feature files: ``tokens`` [N] int32, ``features`` [N, 3H] and ``head_input`` [N, H]
    float16, of N tokens (the packed sequences)."""

    root: Path
    meta: dict[str, Any]
    tokens: np.ndarray
    features: np.ndarray
    head_input: np.ndarray
    copies: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = field(default_factory=dict, repr=False)

    @property
    def n_tokens(self) -> int:
        return int(self.meta["n_tokens"])

    @classmethod
    def open(cls, root: str | os.PathLike[str], mode: str = "r") -> FeatureStore:
        root = Path(root)
        meta_path = root / "meta.json"
        if not meta_path.is_file():
            raise FileNotFoundError(f"no feature store in {root} (meta.json missing)")
        meta = json.loads(meta_path.read_text())
        if meta.get("format") != FORMAT:
            raise ValueError(f"{meta_path}: feature-store format {meta.get('format')!r}, expected {FORMAT}")
        n, h = int(meta["n_tokens"]), int(meta["hidden_size"])
        files = {"tokens": (np.int32, (n,)), "features": (np.float16, (n, 3 * h)),
                 "head_input": (np.float16, (n, h))}
        arrays = {}
        for name, (dtype, shape) in files.items():
            path = root / f"{name}.bin"
            want = int(np.prod(shape)) * np.dtype(dtype).itemsize
            if not path.is_file() or path.stat().st_size != want:
                have = path.stat().st_size if path.is_file() else "missing"
                raise ValueError(f"{path}: expected {want} bytes for {shape} {np.dtype(dtype).name}, found {have}")
            arrays[name] = np.memmap(path, dtype=dtype, mode=mode, shape=shape)
        return cls(root, meta, arrays["tokens"], arrays["features"], arrays["head_input"])

    def nbytes(self) -> int:
        return int(self.tokens.nbytes + self.features.nbytes + self.head_input.nbytes)

    def on_device(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``tokens``, ``features`` and ``head_input`` copied once into ``device``'s memory (same dtypes), in
        64 MB chunks, and kept for every later caller: the three drafters trained on one store share one copy."""
        key = str(device)
        if key not in self.copies:
            out = []
            with warnings.catch_warnings():  # the read-only maps are only read: copied to the device
                warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
                for arr in (self.tokens, self.features, self.head_input):
                    t = torch.empty(arr.shape, dtype=torch.from_numpy(arr[:0]).dtype, device=device)
                    rows = max(1, (64 << 20) // max(1, arr[:1].nbytes))
                    for i in range(0, len(arr), rows):
                        t[i : i + rows].copy_(torch.from_numpy(np.asarray(arr[i : i + rows])))
                    out.append(t)
            self.copies[key] = (out[0], out[1], out[2])
        return self.copies[key]

    def complete(self) -> bool:
        return int(self.meta["done_sequences"]) == int(self.meta["n_sequences"])

    def save_meta(self) -> None:
        with atomic_output(self.root / "meta.json") as tmp:  # unique per writer, renamed atomically
            tmp.write_text(json.dumps(self.meta, indent=1))


def _create(root: Path, sequences: Sequence[Sequence[int]], target: TargetModel, digest: str) -> FeatureStore:
    root.mkdir(parents=True, exist_ok=True)
    n = int(sum(len(s) for s in sequences))
    h = target.hidden_size
    for name, dtype, width in (("tokens", np.int32, 1), ("features", np.float16, 3 * h),
                               ("head_input", np.float16, h)):
        with (root / f"{name}.bin").open("wb") as f:
            f.truncate(n * width * np.dtype(dtype).itemsize)
    meta = {"format": FORMAT, "n_tokens": n, "n_sequences": len(sequences), "done_sequences": 0,
            "hidden_size": h, "feature_layers": list(target.feature_layers), "sequences_sha256": digest,
            "target": str(getattr(target.config, "_name_or_path", "")), "offsets": []}
    store = FeatureStore(root, meta, *(np.empty(0) for _ in range(3)))
    store.save_meta()
    return FeatureStore.open(root, "r+")


class HeadInput:
    """Captures the input of the output head during a forward (exactly what the logits are computed from)."""

    def __init__(self, head: torch.nn.Module) -> None:
        self.value: torch.Tensor | None = None
        self.handle = head.register_forward_pre_hook(self._hook)

    def _hook(self, _module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        self.value = args[0]

    def close(self) -> None:
        self.handle.remove()


FeatureForward = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def _feature_forward(target: TargetModel, hook: HeadInput, probe: Sequence[int]) -> FeatureForward:
    """(ids, mask) -> (feature hidden states [B, T, 3H], head inputs [B, T, H]). The stored head inputs are all
    that training needs of the head, so its [T, V] logits (a fifth of a small model's compute, and the largest
    tensor of the forward) are skipped: the backbone alone runs, where its last hidden state is exactly what the
    head reads (checked on ``probe`` against the hooked head input; a model that transforms it between the two
    keeps the full forward)."""

    def full(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = target.model(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False,
                           return_dict=True)
        assert hook.value is not None
        return torch.cat([out.hidden_states[k] for k in target.feature_layers], dim=-1), hook.value

    backbone = target.model.base_model
    if backbone is target.model:
        return full

    def backbone_only(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = backbone(input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False,
                       return_dict=True)
        return torch.cat([out.hidden_states[k] for k in target.feature_layers], dim=-1), out.last_hidden_state

    ids = torch.as_tensor(list(probe[:16]), device=target.device)[None]
    mask = torch.ones_like(ids)
    want_feats, want_last = full(ids, mask)
    got_feats, got_last = backbone_only(ids, mask)
    same = (got_last.shape == want_last.shape and torch.allclose(got_last, want_last, rtol=1e-4, atol=1e-4)
            and torch.allclose(got_feats, want_feats, rtol=1e-4, atol=1e-4))
    return backbone_only if same else full


def _fp16(x: torch.Tensor, what: str) -> np.ndarray:
    x = x.float()
    peak = float(x.abs().max()) if x.numel() else 0.0
    if not np.isfinite(peak) or peak > FP16_MAX:
        raise ValueError(f"target {what} reach {peak:.3g}, beyond float16: cannot store them")
    return x.cpu().numpy().astype(np.float16)


@torch.no_grad()
def build_features(target: TargetModel, sequences: Sequence[Sequence[int]], root: str | os.PathLike[str], *,
                   batch_tokens: int = 4096, chunk: int = 512, progress: bool = True) -> FeatureStore:
    """Run the target once over every sequence (right-padded batches of similar lengths, sorted within chunks of
    ``chunk`` sequences) and store its features; resume a partial store of the same sequences (a chunk at a time),
    or refuse one of other data."""
    from tqdm.auto import tqdm

    root = Path(root)
    if not sequences or any(len(s) == 0 for s in sequences):
        raise ValueError("feature extraction needs non-empty sequences")
    longest = max(len(s) for s in sequences)
    if longest > target.max_context:
        raise ValueError(f"a training sequence has {longest} tokens, beyond the target's context "
                         f"{target.max_context}")
    digest = sequences_digest(sequences)
    if (root / "meta.json").is_file():
        store = FeatureStore.open(root, "r+")
        if store.meta["sequences_sha256"] != digest or store.meta["feature_layers"] != list(target.feature_layers):
            raise ValueError(f"{root} holds features of other sequences or feature layers: remove it, or pass "
                             "another directory")
    else:
        store = _create(root, sequences, target, digest)
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in sequences])]).tolist()
    store.meta["offsets"] = offsets
    head = target.model.get_output_embeddings()
    if head is None:
        raise ValueError("the target has no output head (get_output_embeddings() is None)")
    hook = HeadInput(head)
    forward = _feature_forward(target, hook, sequences[0])
    start = int(store.meta["done_sequences"])
    bar = tqdm(total=len(sequences), initial=start, desc="target features", unit="seq", disable=not progress)
    try:
        for i in range(start, len(sequences), chunk):
            # A chunk of sequences in file order (resume is by count, a chunk at a time), batched by length inside
            # it so little padding is computed; one batch fills ``batch_tokens`` of padded width.
            end = min(i + chunk, len(sequences))
            order = sorted(range(i, end), key=lambda k: len(sequences[k]))
            while order:
                n, width = 0, 0
                while n < len(order) and (n == 0 or max(width, len(sequences[order[n]])) * (n + 1) <= batch_tokens):
                    width = max(width, len(sequences[order[n]]))
                    n += 1
                rows, order = order[:n], order[n:]
                ids = torch.zeros((n, width), dtype=torch.long)
                mask = torch.zeros((n, width), dtype=torch.long)
                for r, k in enumerate(rows):
                    ids[r, : len(sequences[k])] = torch.as_tensor(list(sequences[k]))
                    mask[r, : len(sequences[k])] = 1
                feats, last = forward(ids.to(target.device), mask.to(target.device))
                for r, k in enumerate(rows):
                    a, b = offsets[k], offsets[k + 1]
                    store.tokens[a:b] = np.asarray(sequences[k], dtype=np.int32)
                    store.features[a:b] = _fp16(feats[r, : b - a], "hidden states")
                    store.head_input[a:b] = _fp16(last[r, : b - a], "output-head inputs")
                bar.update(n)
            for arr in (store.tokens, store.features, store.head_input):
                arr.flush()
            store.meta["done_sequences"] = end
            store.save_meta()
    finally:
        hook.close()
        bar.close()
    return FeatureStore.open(root)


class StoredWindows:
    """Training windows cut from a complete :class:`FeatureStore`: non-overlapping runs of ``window`` tokens of
    the packed stream, with the teacher (the target's log-probs over the draft vocab) computed on demand from the
    stored head inputs; without ``head_weight``, the head inputs themselves (a trainer scoring the full vocabulary
    computes its teacher at the rows it needs only)."""

    def __init__(self, store: FeatureStore, window: int, head_weight: torch.Tensor | None = None,
                 draft_ids: torch.Tensor | None = None, *, head_bias: torch.Tensor | None = None,
                 softcap: float | None = None,
                 device: torch.device | str = "cpu", first: int = 0, count: int | None = None,
                 resident: bool | None = None) -> None:
        if not store.complete():
            raise ValueError(f"feature store {store.root} is incomplete ({store.meta['done_sequences']} of "
                             f"{store.meta['n_sequences']} sequences): run the features stage again to finish it")
        total = store.n_tokens // window
        if total < 1:
            raise ValueError(f"{store.n_tokens} tokens make no training window of {window}")
        self.store, self.window, self.device = store, window, torch.device(device)
        self.first = first
        self.n = (total - first) if count is None else min(count, total - first)
        if self.n < 1:
            raise ValueError(f"no training window left after the first {first} (of {total})")
        self.head: torch.Tensor | None = None
        self.bias: torch.Tensor | None = None
        if head_weight is not None:
            if draft_ids is None:
                raise ValueError("StoredWindows: head_weight needs the draft_ids it is restricted to")
            ids = draft_ids.to(self.device)
            self.head = head_weight.detach().float().to(self.device)[ids]
            self.bias = None if head_bias is None else head_bias.detach().float().to(self.device)[ids]
        self.softcap = softcap
        if resident is None:  # a copy made already, or a GPU with room (there host slices took most of a step)
            resident = str(self.device) in store.copies or (
                self.device.type == "cuda" and store.nbytes() <= torch.cuda.mem_get_info(self.device)[0] // 2)
        self.arrays = store.on_device(self.device) if resident else None

    def __len__(self) -> int:
        return self.n

    def get(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(ids [B, n], features [B, n, 3H] float32, teacher log-probs [B, n, Vd] — or the head inputs [B, n, H]
        without ``head_weight``) of windows ``idx``."""
        w = self.window
        if self.arrays is not None:  # gathered where the copy lives
            rows = ((idx.to(self.device).long()[:, None] + self.first) * w
                    + torch.arange(w, device=self.device)).reshape(-1)
            tokens, features, head_input = (a.index_select(0, rows).view(len(idx), w, *a.shape[1:])
                                            for a in self.arrays)
        else:  # contiguous slices of the memory maps, kept float16 until on ``device``
            starts = [(self.first + int(i)) * w for i in idx]
            tokens, features, head_input = (torch.from_numpy(np.asarray(np.stack([a[s : s + w] for s in starts])))
                                            for a in (self.store.tokens, self.store.features, self.store.head_input))
        last = head_input.to(self.device).float()  # [B, n, H], like ``features`` [B, n, 3H]
        if self.head is None:
            teach = last
        else:
            logits = torch.nn.functional.linear(last, self.head, self.bias)
            if self.softcap:
                logits = torch.tanh(logits / self.softcap) * self.softcap
            teach = torch.log_softmax(logits, dim=-1)
        return tokens.long().to(self.device), features.to(self.device).float(), teach
