"""Shared set-up of the drafter trainers: target loading, draft vocabulary, windows, target features and teacher
distributions, the KL loss, the warm start and saving in the published checkpoint format (the layer forwards are
the drafter modules' own batched methods; the loop, its schedule, early stopping and checkpoints are ``loop.py``).
Every trainer takes the same :class:`TrainConfig`, so a comparison between them is fair."""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn

from dart_core.drafters.base import DrafterLayer
from dart_core.drafters.checkpoint import load_weights_file, non_finite, read_json_object
from dart_core.engine.target import TargetModel
from dart_core.loading.errors import LoadError
from dart_core.train.training_loop import train_and_save


@dataclass(frozen=True)
class TrainConfig:
    """The budget and plumbing every drafter's training shares (the same data and budget for every method: the
    fair-recipe rule), apart from each method's own knobs (DART's draft length, EAGLE-3's unrolled steps, DFlash's
    block), which stay keyword arguments of its trainer. A trainer takes one of these and/or the fields by name
    (``train_dart(..., steps=800, lr=3e-4)``): :meth:`with_` applies the names to it."""

    steps: int = 2000
    batch_windows: int = 8
    window: int = 256  # tokens per training window
    lr: float = 1e-3
    warmup: int | None = None  # None: the loop's default share of the steps
    weight_decay: float = 0.0
    clip: float = 1.0
    seed: int = 0
    threads: int | None = 2  # PyTorch CPU threads (None: PyTorch's default)
    device: str = "cpu"
    log_every: int = 10
    progress: bool = True
    eval_windows: int = 0  # of stored features: the last ones held out
    resume: bool = False
    checkpoint_every: int = 0
    # the fair budget: the same wall clock for every method (None: ``steps`` alone bounds it; with a budget the
    # schedule's cosine runs to whichever of the two ends first), and early stopping on the held-out loss, measured
    # every ``eval_every`` steps (0: before and after only); ``patience`` evaluations without a new best stop it
    # (0: never), and the best evaluated weights are the ones saved
    time_budget_s: float | None = None
    eval_every: int = 0
    patience: int = 0
    # at most this many training windows, a seeded random choice of them (None: all): the data's size as a lever on
    # one feature store, for training against data size without building a store per size
    train_windows: int | None = None

    def with_(self, **changes: Any) -> TrainConfig:
        """This config with ``changes`` (field names; an unknown one is a TypeError naming it)."""
        unknown = sorted(set(changes) - {f.name for f in fields(self)})
        if unknown:
            raise TypeError(f"unknown training option(s) {', '.join(unknown)}")
        return replace(self, **changes)

    def loop(self) -> dict[str, Any]:
        """The training loop's keyword arguments (``train_loop`` via ``train_and_save``)."""
        return {"steps": self.steps, "lr": self.lr, "warmup": self.warmup, "weight_decay": self.weight_decay,
                "clip": self.clip, "seed": self.seed, "log_every": self.log_every, "progress": self.progress,
                "batch_windows": self.batch_windows, "resume": self.resume,
                "checkpoint_every": self.checkpoint_every, "time_budget_s": self.time_budget_s,
                "eval_every": self.eval_every, "patience": self.patience}


def seed_everything(seed: int) -> None:
    """Fixed seeds: runs with the same inputs give the same checkpoint."""
    random.seed(seed)
    torch.manual_seed(seed)


def load_frozen_target(target: str | os.PathLike[str], *, device: str | None = "cpu",
                       dtype: str | torch.dtype | None = "float32") -> TargetModel:
    """The target frozen (only its features and logits are used; no tokenizer needed): a local dir, a Hub id or a
    packaged model, in float32 on CPU by default (bfloat16 is the usual choice on a GPU)."""
    from transformers import AutoModelForCausalLM

    from dart_core.arena import resolve_dtype, resolve_model_ref

    device = device or "cpu"
    model = AutoModelForCausalLM.from_pretrained(resolve_model_ref(target), dtype=resolve_dtype(dtype, device))
    return TargetModel(model.to(device).eval().requires_grad_(False))


def rope_theta_of(cfg: Any) -> float:
    """The RoPE base of a text config: ``rope_theta``, else ``rope_parameters["rope_theta"]``, else 10000."""
    theta = getattr(cfg, "rope_theta", None)
    if theta is None:
        theta = (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta", 10000.0)
    return float(theta)


def drafter_config_dict(target: TargetModel, kind: str, draft_vocab_size: int, draft_length: int | None = None,
                        overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Llama-style drafter config shaped like the target's layers (hidden = the target's, since the embedding
    is shared), in the published format of ``kind`` ("dart" or "eagle3")."""
    t = target.text_config
    heads = int(t.num_attention_heads)
    cfg: dict[str, Any] = {
        "architectures": ["LlamaForCausalLMDart" if kind == "dart" else "LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": int(t.hidden_size),
        "intermediate_size": int(t.intermediate_size),
        "num_attention_heads": heads,
        "num_key_value_heads": int(getattr(t, "num_key_value_heads", None) or heads),
        "head_dim": int(getattr(t, "head_dim", None) or t.hidden_size // heads),
        "rms_norm_eps": float(getattr(t, "rms_norm_eps", 1e-6)),
        "rope_theta": rope_theta_of(t),
        "rope_scaling": None,
        "max_position_embeddings": int(t.max_position_embeddings),
        "hidden_act": "silu",
        "vocab_size": int(target.vocab_size),
        "draft_vocab_size": int(draft_vocab_size),
        "target_hidden_size": int(t.hidden_size),
        "num_hidden_layers": 1,
        "torch_dtype": "float16",
    }
    if kind == "dart":
        cfg["draft_length"] = int(draft_length or 8)
    cfg.update(overrides or {})
    return cfg


def build_draft_vocab(sequences: Sequence[Sequence[int]], vocab_size: int, draft_vocab_size: int,
                      eos_token_id: int | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The ``draft_vocab_size`` most frequent target tokens of the training data (EOS always in; ties and any
    shortfall filled by lowest id), sorted by target id. Returns (draft→target ids, d2t = target − draft index,
    t2d bool mask)."""
    if not 0 < draft_vocab_size <= vocab_size:
        raise ValueError(f"draft_vocab_size must be in [1, {vocab_size}], got {draft_vocab_size}")
    counts = Counter(int(t) for seq in sequences for t in seq)
    ranked = sorted(counts, key=lambda t: (-counts[t], t))
    chosen: list[int] = [] if eos_token_id is None else [int(eos_token_id)]
    for t in ranked:
        if len(chosen) >= draft_vocab_size:
            break
        if t not in chosen:
            chosen.append(t)
    fill = 0
    while len(chosen) < draft_vocab_size:
        if fill not in chosen:
            chosen.append(fill)
        fill += 1
    ids = torch.tensor(sorted(chosen), dtype=torch.long)
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[ids] = True
    return ids, ids - torch.arange(draft_vocab_size), t2d


def make_windows(sequences: Sequence[Sequence[int]], window: int, min_len: int) -> torch.Tensor:
    """Non-overlapping windows of exactly ``window`` tokens (a sequence shorter than that but at least
    ``min_len`` long is skipped too: batches need equal lengths). Returns [N, window]."""
    out = [list(seq[i : i + window]) for seq in sequences for i in range(0, len(seq) - window + 1, window)]
    if not out:
        raise ValueError(f"no training window of {window} tokens: sequences are too short (need >= {min_len})")
    return torch.tensor(out, dtype=torch.long)


@torch.no_grad()
def target_batch(target: TargetModel, windows: torch.Tensor, draft_ids: torch.Tensor,
                 chunk: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """Frozen-target features [B, n, 3H] (rows of the tokens) and teacher log-probs [B, n, Vd] (position p =
    the target's distribution of token p+1, restricted to the draft vocab and renormalised), in chunks."""
    feats, teach = [], []
    for i in range(0, windows.shape[0], chunk):
        ids = windows[i : i + chunk].to(target.device)
        out = target.model(input_ids=ids, output_hidden_states=True, use_cache=False, return_dict=True)
        hs = out.hidden_states
        feats.append(torch.cat([hs[j] for j in target.feature_layers], dim=-1).float())
        teach.append(torch.log_softmax(out.logits[..., draft_ids.to(out.logits.device)].float(), dim=-1))
    return torch.cat(feats), torch.cat(teach)


class WindowSubset:
    """``count`` of a window source's windows, chosen at random with ``seed`` (sorted, so a store's reads stay in
    its order): what a trainer sees when the data's size is the lever."""

    def __init__(self, source: Any, count: int, seed: int) -> None:
        if count < 1:
            raise ValueError(f"train_windows must be positive, got {count}")
        if count > len(source):
            raise ValueError(f"train_windows={count} is more than the {len(source)} training windows the data holds")
        self.source = source
        self.ids = torch.randperm(len(source), generator=torch.Generator().manual_seed(seed))[:count].sort().values

    def __len__(self) -> int:
        return int(self.ids.numel())

    def get(self, idx: torch.Tensor) -> Any:
        return self.source.get(self.ids[idx.cpu()])


def pick_windows(source: Any, cfg: TrainConfig) -> Any:
    """The training windows ``cfg`` asks for: all of ``source``, or a :class:`WindowSubset` of ``train_windows``."""
    return source if cfg.train_windows is None else WindowSubset(source, cfg.train_windows, cfg.seed)


class OnlineWindows:
    """Training windows whose target features and teacher are computed by the target at each use (cheap only for
    a target as small as the stdlib bundle's; a real target uses ``features.StoredWindows``)."""

    def __init__(self, target: TargetModel, windows: torch.Tensor, draft_ids: torch.Tensor) -> None:
        self.target, self.windows, self.draft_ids = target, windows, draft_ids

    def __len__(self) -> int:
        return int(self.windows.shape[0])

    def get(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(ids [B, n], features [B, n, 3H], teacher log-probs [B, n, Vd]) of windows ``idx``."""
        batch = self.windows[idx]
        feats, teach = target_batch(self.target, batch, self.draft_ids)
        return batch, feats, teach


def kl_and_top1(teacher_logp: torch.Tensor, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """KL(teacher ‖ drafter) and top-1 agreement (drafter argmax == teacher argmax), both per row [...]."""
    logq = torch.log_softmax(logits.float(), dim=-1)
    kl = (teacher_logp.exp() * (teacher_logp - logq)).sum(-1)
    return kl, (logq.argmax(-1) == teacher_logp.argmax(-1)).float()


def init_from_target(model: DrafterLayer, target: TargetModel, draft_ids: torch.Tensor, *, mask_std: float = 0.5,
                     seed: int = 0) -> None:
    """Warm start: lm_head = the target's output rows of the draft vocab and ``norm`` ≈ the target's final norm
    (both live in the same hidden space as the drafter output); ``mask_rep`` (DART) random, seeded."""
    with torch.no_grad():
        head = target.model.get_output_embeddings()
        if head is not None and tuple(head.weight.shape[1:]) == tuple(model.lm_head.weight.shape[1:]):
            model.lm_head.weight.copy_(head.weight[draft_ids.to(head.weight.device)].float())
        final_norm = getattr(getattr(target.model, "model", None), "norm", None)
        weight = getattr(final_norm, "weight", None)
        if weight is not None and weight.shape == model.norm.weight.shape:
            w = weight.float()
            if getattr(model, "key", None) == "dart":
                # DART applies ``norm`` twice (published weights): norm(norm(h)) with weight v gives
                # v²·ĥ / rms(v·ĥ); v = sqrt(|w|)·sqrt(mean|w|) makes that ≈ w·ĥ, the target's own final norm
                w = w.abs().sqrt() * w.abs().mean().sqrt()
            model.norm.weight.copy_(w)
        if hasattr(model.midlayer, "mask_rep"):
            g = torch.Generator().manual_seed(seed + 1)
            model.midlayer.mask_rep.copy_(torch.randn(model.midlayer.mask_rep.shape, generator=g) * mask_std)


def save_checkpoint(model: DrafterLayer, cfg: dict[str, Any], t2d: torch.Tensor, out_dir: str | os.PathLike[str],
                    *, dtype: torch.dtype = torch.float16) -> Path:
    """``config.json`` + ``model.safetensors`` with exactly the published keys (float weights in ``dtype``,
    ``d2t`` int64, ``t2d`` bool); the shared embedding is not saved."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: (v.detach().to(dtype) if v.is_floating_point() else v.detach().long()).contiguous().cpu()
             for k, v in model.state_dict().items()}
    state["t2d"] = t2d.to(torch.bool).contiguous()
    save_file(state, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    return out


def eos_id(target: TargetModel) -> int | None:
    eos = getattr(target.config, "eos_token_id", None)
    if isinstance(eos, (list, tuple)):
        eos = eos[0] if eos else None
    return None if eos is None else int(eos)


# the config fields a drafter continued from (``init_from``) must share with the one being trained: its layer's
# shapes, the vocabularies and what it predicts (DART's draft length, DFlash's block and target layers)
LAYER_FIELDS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "vocab_size")
START_FIELDS = {"dart": (*LAYER_FIELDS, "architectures", "draft_vocab_size", "target_hidden_size", "draft_length"),
                "eagle3": (*LAYER_FIELDS, "architectures", "draft_vocab_size", "target_hidden_size"),
                "dflash": (*LAYER_FIELDS, "architectures", "block_size", "num_target_layers",
                           "dflash_config.target_layer_ids", "dflash_config.mask_token_id")}


def config_field(cfg: dict[str, Any], name: str) -> Any:
    """A config's field by dotted name (``dflash_config.mask_token_id``), None where it is absent."""
    value: Any = cfg
    for part in name.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def start_config(init_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The ``config.json`` of a trained drafter to continue from (a ValueError when the directory has none)."""
    path = Path(init_dir) / "config.json"
    if not path.is_file():
        raise ValueError(f"--init-from {init_dir}: no config.json there (a drafter's directory holds config.json "
                         "and model.safetensors)")
    return read_json_object(path)


def start_weights(init_dir: str | os.PathLike[str], kind: str, cfg_dict: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The weights of a trained drafter to continue training from (more data, the same layer), in float32: its
    ``config.json`` must agree with ``cfg_dict`` on :data:`START_FIELDS` (a ValueError names every field that
    differs and both values), its ``model.safetensors`` is read as the inference loader reads it (a damaged file
    is a LoadError naming it); the trainer loads them strictly, so a missing or extra tensor is refused too."""
    start = start_config(init_dir)
    differ = [f"{f} {config_field(start, f)!r} there, {config_field(cfg_dict, f)!r} here" for f in START_FIELDS[kind]
              if config_field(start, f) != config_field(cfg_dict, f)]
    if differ:
        raise ValueError(f"--init-from {init_dir}: that {kind} drafter is not the one being trained: "
                         + "; ".join(differ))
    weights, state = load_weights_file(init_dir)
    bad = non_finite(state)
    if bad:
        raise LoadError(weights, f"non-finite values (NaN or inf) in {bad}: nothing to continue from")
    return {k: (v.float() if v.is_floating_point() else v) for k, v in state.items()}


def load_start(model: nn.Module, state: dict[str, torch.Tensor], init_dir: str | os.PathLike[str]) -> None:
    """``state`` into ``model``, every tensor named and shaped as the model's own (else a ValueError naming them)."""
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise ValueError(f"--init-from {init_dir}: its tensors do not fit the drafter being trained ({e})") from None


def prepare_drafter(cls: type, kind: str, target: str | os.PathLike[str] | TargetModel,
                    sequences: Sequence[Sequence[int]], *, draft_vocab_size: int, draft_length: int | None,
                    config_overrides: dict[str, Any] | None, eos_token_id: int | None, seed: int,
                    threads: int | None, device: str = "cpu",
                    init_from: str | os.PathLike[str] | None = None) -> tuple[Any, ...]:
    """The set-up both trainers share: threads and seeds, the frozen target (a loaded one is reused), the
    frequency-ranked draft vocab, the inference module itself (embedding shared and frozen) warm-started from the
    target, in float32 on ``device``. ``init_from``: a trained drafter of the same shape to continue from instead
    (its weights, and its draft vocab, which the weights' lm_head rows belong to). Returns (target, model, config
    dict, draft ids, t2d)."""
    if threads:
        torch.set_num_threads(threads)
    seed_everything(seed)
    if not isinstance(target, TargetModel):
        target = load_frozen_target(target, device=device)
    from dart_core.drafters.config import DrafterConfig

    cfg_dict = drafter_config_dict(target, kind, draft_vocab_size, draft_length, config_overrides)
    model = cls(DrafterConfig.from_dict(cfg_dict), target.embed_tokens.weight.detach().float().cpu())
    if init_from is not None:
        state = start_weights(init_from, kind, cfg_dict)
        t2d = state.pop("t2d", None)
        if t2d is None or tuple(t2d.shape) != (target.vocab_size,) or int(t2d.bool().sum()) != draft_vocab_size:
            raise ValueError(f"--init-from {init_from}: its t2d does not mark {draft_vocab_size} of the target's "
                             f"{target.vocab_size} tokens")
        t2d = t2d.bool()
        draft_ids = t2d.nonzero().squeeze(1)
        if not torch.equal(state.get("d2t", torch.empty(0)).long(), draft_ids - torch.arange(draft_vocab_size)):
            raise ValueError(f"--init-from {init_from}: its d2t and t2d name different draft vocabularies")
        load_start(model, state, init_from)
        return target, model.to(device), cfg_dict, draft_ids, t2d
    eos = eos_token_id if eos_token_id is not None else eos_id(target)
    draft_ids, d2t, t2d = build_draft_vocab(sequences, target.vocab_size, draft_vocab_size, eos)
    model.d2t.copy_(d2t)
    init_from_target(model, target, draft_ids, seed=seed)
    return target, model.to(device), cfg_dict, draft_ids, t2d


def fit_drafter(kind: str, prepared: tuple[Any, ...], loss_fn: Any, sequences: Sequence[Sequence[int]] | None,
                eval_sequences: Sequence[Sequence[int]] | None, cfg: TrainConfig, *, min_len: int,
                out_dir: str | os.PathLike[str], features: Any = None, eval_features: Any = None) -> dict[str, Any]:
    """The rest both trainers share: the window source (stored ``features`` of a real target — the last
    ``cfg.eval_windows`` windows held out —, or windows of ``sequences`` run through the target online), the
    training loop with held-out eval and checkpoints, the published-format save. ``eval_features``: a store of
    held-out answers evaluated in place of the last windows."""
    target, model, cfg_dict, draft_ids, t2d = prepared
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    window = cfg.window
    if window < min_len:
        raise ValueError(f"training window of {window} tokens is too short (need >= {min_len})")
    # the most real rows a trained row attends to (DART's mask rows: an anchor at most window - 1 - draft_length):
    # drafting keeps to it, since the deeper predictions of a row given more context than training showed collapse
    cfg_dict["context_window"] = window - 1 - int(cfg_dict.get("draft_length") or 0)
    if features is not None:
        head = target.model.get_output_embeddings()
        softcap = getattr(target.text_config, "final_logit_softcapping", None)
        source, eval_source = stored_sources(features, window, cfg.eval_windows, eval_features,
                                             head_weight=head.weight,
                                             draft_ids=draft_ids, head_bias=head.bias, softcap=softcap,
                                             device=next(model.parameters()).device)
    else:
        if not sequences:
            raise ValueError("no training sequences")
        source = OnlineWindows(target, make_windows(sequences, window, min_len), draft_ids)
        eval_source = (OnlineWindows(target, make_windows(eval_sequences, window, min_len), draft_ids)
                       if eval_sequences else None)
    stats = train_and_save(kind, model, pick_windows(source, cfg), eval_source, loss_fn, out,
                           lambda: save_checkpoint(model, cfg_dict, t2d, out), **cfg.loop())
    stats["draft_vocab_size"] = int(cfg_dict["draft_vocab_size"])
    return stats


def stored_sources(features: Any, window: int, eval_windows: int, eval_features: Any = None,
                   **kw: Any) -> tuple[Any, Any]:
    """The training windows of a feature store and the held-out ones, as ``features.StoredWindows`` with ``kw``:
    the windows of ``eval_features`` (a store of held-out prompts' answers: topics never trained on; at most
    ``eval_windows`` of them when that is set), or else the store's own last ``eval_windows`` windows (None
    without)."""
    from dart_core.train.features import StoredWindows

    if eval_features is not None:
        held = StoredWindows(eval_features, window, count=eval_windows or None, **kw)
        return StoredWindows(features, window, **kw), held
    total = features.n_tokens // window
    if eval_windows >= total:
        raise ValueError(f"eval_windows={eval_windows} leaves no training window (the store holds {total})")
    source = StoredWindows(features, window, count=total - eval_windows, **kw)
    return source, (StoredWindows(features, window, first=total - eval_windows, **kw) if eval_windows else None)
