"""The loaded target written as a GGUF file for llama.cpp: the same weights, in the target's dtype.

Why: the llama.cpp racer (``dart_core.racers.llamacpp``) must decode the very weights our racers decode, not the
package's quantised file, or its speed and text would compare two models. The tensors come from the loaded model's
``state_dict`` (the stock weights; packed CPU kernels keep them), named by the ``gguf`` package's own tensor map of
the architecture; Llama-family query and key rows are reordered into llama.cpp's rotary layout, as llama.cpp's
converter does. 1-D tensors (norms, biases) stay float32, as llama.cpp wants them.

The vocabulary is the tokenizer's token strings (a GPT-2 style BPE vocabulary with its merges where the tokenizer
has them), padded to the model's vocabulary size. llama.cpp is handed token ids and hands back token ids: our
tokenizer does all text work for every racer, so the file's pre-tokenizer is llama.cpp's ``default``. Files are
kept in ``$DART_ARENA_CACHE/llamacpp/`` under a digest of the model's identity and dtype, written atomically.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dart_core.loading.atomic import atomic_output
from dart_core.loading.errors import UserError
from dart_core.loading.hub import cache_root, writable_dir

FORMAT = 1  # bump when what is written changes, so cached files are written again
# transformers' model_type -> the gguf package's architecture (the families the arena's targets come from)
ARCHITECTURES = {"llama": "LLAMA", "mistral": "LLAMA", "qwen2": "QWEN2", "qwen3": "QWEN3"}
ROTARY_REORDERED = {"LLAMA"}  # llama.cpp's rotary pairs adjacent dims for these; HF's pairs the two halves
DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}


class GGUFExportError(UserError, ValueError):
    """A target that cannot be written as GGUF for llama.cpp (its family, rotary scaling or dtype)."""


def export_problem(config: Any, dtype: torch.dtype) -> str | None:
    """Why a target of ``config`` in ``dtype`` cannot be written (None: it can), checked before anything is written."""
    kind = getattr(config, "model_type", None)
    if kind not in ARCHITECTURES:
        return (f"the llama.cpp racer writes {', '.join(sorted(ARCHITECTURES))} targets as GGUF; this one is "
                f"{kind!r}: race it without the llama.cpp rows")
    scaling = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    rope_type = scaling.get("rope_type", scaling.get("type", "default")) if isinstance(scaling, dict) else "default"
    if rope_type not in ("default", None):
        return (f"the target's rotary embedding is scaled ({rope_type!r}), which the GGUF writer does not carry "
                "over: race it without the llama.cpp rows")
    if dtype not in DTYPES:
        return f"the target's dtype {dtype} has no GGUF counterpart here (float32, bfloat16 or float16)"
    return None


def gguf_file(identity: str, dtype: torch.dtype, root: Path | None = None) -> Path:
    """Where the GGUF of the model ``identity`` in ``dtype`` is kept (``$DART_ARENA_CACHE/llamacpp/``)."""
    key = hashlib.sha256(f"{identity}\n{dtype}\n{FORMAT}".encode()).hexdigest()[:24]
    return (root or cache_root() / "llamacpp") / f"{key}-{DTYPES.get(dtype, 'x')}.gguf"


def cached_gguf(model: Any, tokenizer: Any, identity: str | None, *, root: Path | None = None) -> tuple[Path, bool]:
    """The GGUF of the loaded ``model`` (written now unless the cache holds it) and whether it was written now.
    Without an ``identity`` (a model built in memory) it is written to a fresh temporary folder, for this
    process alone."""
    dtype = next(model.parameters()).dtype
    problem = export_problem(model.config, dtype)
    if problem:
        raise GGUFExportError(problem)
    if identity is None:
        path = Path(tempfile.mkdtemp(prefix="dart-arena-llamacpp-")) / f"model-{DTYPES[dtype]}.gguf"
        return write_gguf(model, path, tokenizer=tokenizer), True
    path = gguf_file(identity, dtype, root)
    if path.is_file():
        return path, False
    writable_dir(path.parent, "the llama.cpp racer's GGUF of the target")
    with atomic_output(path) as tmp:
        write_gguf(model, tmp, tokenizer=tokenizer)
    return path, True


def write_gguf(model: Any, path: str | os.PathLike[str], *, tokenizer: Any = None) -> Path:
    """Write ``model`` (a stock transformers causal LM of :data:`ARCHITECTURES`) to ``path`` as GGUF in its own
    dtype, its vocabulary from ``tokenizer`` (None: placeholder strings ``<id>``, for a model without one)."""
    import gguf

    config = model.config
    dtype = next(model.parameters()).dtype
    problem = export_problem(config, dtype)
    if problem:
        raise GGUFExportError(problem)
    arch = getattr(gguf.MODEL_ARCH, ARCHITECTURES[config.model_type])
    name = gguf.MODEL_ARCH_NAMES[arch]
    layers = config.num_hidden_layers
    heads, kv_heads = config.num_attention_heads, getattr(config, "num_key_value_heads", None) or \
        config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    writer = gguf.GGUFWriter(os.fspath(path), name)
    writer.add_name(str(getattr(config, "_name_or_path", "") or name))
    writer.add_context_length(int(config.max_position_embeddings))
    writer.add_embedding_length(int(config.hidden_size))
    writer.add_block_count(int(layers))
    writer.add_feed_forward_length(int(config.intermediate_size))
    writer.add_head_count(int(heads))
    writer.add_head_count_kv(int(kv_heads))
    writer.add_key_length(int(head_dim))
    writer.add_value_length(int(head_dim))
    writer.add_rope_dimension_count(int(head_dim))
    writer.add_rope_freq_base(float(_rope_theta(config)))
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    writer.add_vocab_size(int(config.vocab_size))
    writer.add_file_type({torch.float32: gguf.LlamaFileType.ALL_F32, torch.bfloat16: gguf.LlamaFileType.MOSTLY_BF16,
                          torch.float16: gguf.LlamaFileType.MOSTLY_F16}[dtype])
    _add_vocab(writer, gguf, tokenizer, int(config.vocab_size))
    names = gguf.get_tensor_name_map(arch, layers)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    for key, tensor in model.state_dict().items():
        if tied and key == "lm_head.weight":
            continue  # llama.cpp reads a missing output matrix as the tied embedding
        out = names.get_name(key, try_suffixes=(".weight", ".bias"))
        if out is None:
            if key.endswith("rotary_emb.inv_freq"):
                continue
            raise GGUFExportError(f"the GGUF writer has no llama.cpp name for the tensor {key!r} of this "
                                  f"{config.model_type} target: race it without the llama.cpp rows")
        t = tensor.detach().to("cpu")
        if arch.name in ROTARY_REORDERED and key.endswith(("q_proj.weight", "k_proj.weight")):
            t = _rotary_rows(t, heads if "q_proj" in key else kv_heads)
        _add_tensor(writer, gguf, out, t)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path)


def _rope_theta(config: Any) -> float:
    theta = getattr(config, "rope_theta", None)
    if theta is None:  # transformers 5 keeps it in rope_parameters
        params = getattr(config, "rope_parameters", None) or {}
        theta = params.get("rope_theta", 10000.0) if isinstance(params, dict) else 10000.0
    return float(theta)


def _rotary_rows(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """HF's rotate-half row order of a query or key projection turned into llama.cpp's interleaved pairs (the
    inverse of what transformers undoes when it reads a llama GGUF)."""
    rows = weight.shape[0]
    return weight.reshape(heads, 2, rows // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def _add_tensor(writer: Any, gguf: Any, name: str, t: torch.Tensor) -> None:
    if t.dim() <= 1 or t.dtype == torch.float32:
        writer.add_tensor(name, t.float().contiguous().numpy())
    elif t.dtype == torch.bfloat16:
        bits = t.contiguous().view(torch.int16).numpy().view(np.uint16)
        writer.add_tensor(name, bits, raw_dtype=gguf.GGMLQuantizationType.BF16)
    else:
        writer.add_tensor(name, t.to(torch.float16).contiguous().numpy())


def _add_vocab(writer: Any, gguf: Any, tokenizer: Any, size: int) -> None:
    """The tokenizer's tokens, their kinds and BPE merges; ids past the tokenizer's padded as llama.cpp's converter
    pads them."""
    tokens = [f"<{i}>" for i in range(size)]
    kinds = [gguf.TokenType.NORMAL] * size
    merges: list[str] = []
    if tokenizer is not None:
        vocab = tokenizer.get_vocab()
        special = {int(i) for i in getattr(tokenizer, "all_special_ids", [])}
        added = {int(i) for i in getattr(tokenizer, "added_tokens_decoder", {})}
        for text, i in vocab.items():
            if 0 <= i < size:
                tokens[i] = text
                kinds[i] = (gguf.TokenType.CONTROL if i in special else
                            gguf.TokenType.USER_DEFINED if i in added else gguf.TokenType.NORMAL)
        for i in set(range(size)) - set(vocab.values()):
            tokens[i], kinds[i] = f"[PAD{i}]", gguf.TokenType.UNUSED
        merges = _merges(tokenizer)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([int(k) for k in kinds])
    # llama.cpp's loader demands merges of a GPT-2 vocabulary, and the writer leaves an empty list out: a vocabulary
    # without any (a word-level tokenizer, placeholders) gets one merge of its first two tokens, which only
    # llama.cpp's text tokenizer would read
    writer.add_token_merges(merges or [f"{tokens[0]} {tokens[1] if size > 1 else tokens[0]}"])
    for role, add in (("bos", writer.add_bos_token_id), ("eos", writer.add_eos_token_id),
                      ("pad", writer.add_pad_token_id)):
        token_id = getattr(tokenizer, f"{role}_token_id", None) if tokenizer is not None else None
        if token_id is not None and 0 <= int(token_id) < size:
            add(int(token_id))
    writer.add_add_bos_token(False)  # the racer hands llama.cpp the prompt's ids as they are


def _merges(tokenizer: Any) -> list[str]:
    """A fast tokenizer's BPE merges as llama.cpp stores them ("a b"); none for other tokenizer models."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return []
    model = json.loads(backend.to_str()).get("model", {})
    if model.get("type") != "BPE":
        return []
    return [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
