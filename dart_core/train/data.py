"""Data for the embedded bundle: the stdlib split, a byte-level BPE tokenizer, encoded sequences, held-out prompts.

Everything is a pure function of the interpreter's standard library and a seed, so the recipe rebuilds the same
bundle offline anywhere (up to the Python version, which ``recipe.json`` records).
"""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path
from typing import Any

import numpy as np

from dart_core.data.corpus import module_key, read_texts, split_stdlib, stdlib_root

EOS = "<|endoftext|>"


def split_texts(root: Path | None = None) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(train, held-out) as ``(relative path, text)`` pairs, using the project's one split (``split_stdlib``)."""
    root = root or stdlib_root()
    train, heldout = split_stdlib(root)

    def pairs(files: list[Path]) -> list[tuple[str, str]]:
        return list(zip([p.relative_to(root).as_posix() for p in files], read_texts(files), strict=True))

    return pairs(train), pairs(heldout)


def split_summary(root: Path | None = None) -> dict[str, Any]:
    """What the split was, for ``recipe.json``: file counts and the held-out modules."""
    root = root or stdlib_root()
    train, heldout = split_stdlib(root)
    return {
        "method": "dart_core.data.corpus.split_stdlib (sha256 of the top-level module name)",
        "train_files": len(train),
        "heldout_files": len(heldout),
        "train_bytes": sum(p.stat().st_size for p in train),
        "heldout_modules": sorted({module_key(p, root) for p in heldout}),
    }


def train_tokenizer(texts: list[str], vocab_size: int = 5120, seed: int = 0) -> Any:
    """A byte-level BPE (``<|endoftext|>`` = EOS) trained on ``texts``: any byte string round-trips, so every stdlib
    file (and any user prompt) encodes without unknown tokens. The BPE trainer has no randomness (ties break by
    pair), so equal input gives an equal vocabulary; ``seed`` is kept for the recipe's record."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    del seed
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS, pad_token=EOS,
                                   unk_token=None, clean_up_tokenization_spaces=False)
    fast.model_max_length = 1024
    return fast


def encode_corpus(tokenizer: Any, texts: list[str]) -> list[np.ndarray]:
    """One int32 array per file with EOS appended (the batch encoder runs in Rust, in parallel)."""
    eos = tokenizer.eos_token_id
    encs = tokenizer.backend_tokenizer.encode_batch(texts, add_special_tokens=False)
    return [np.asarray([*e.ids, eos], dtype=np.int32) for e in encs]


_DEF = re.compile(r"^(\s*)(def |class |async def )")


def heldout_prompts(
    tokenizer: Any,
    heldout: list[tuple[str, str]] | None = None,
    *,
    n: int = 64,
    prompt_tokens: int = 128,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Benchmark prompts cut from held-out modules only: a ``def``/``class`` header plus the lines before it, cut
    at a line boundary after the header so the model continues a real body. Deterministic in ``seed``.

    Returns dicts ``{id, source, prompt, ids}`` (``ids`` = token ids of ``prompt``, at most ``prompt_tokens``)."""
    if heldout is None:
        heldout = split_texts()[1]
    candidates: list[tuple[str, list[str], int]] = []
    for rel, text in heldout:
        lines = text.splitlines(keepends=True)
        for i, line in enumerate(lines):
            if _DEF.match(line) and i + 2 < len(lines):
                candidates.append((rel, lines, i))
    rng = random.Random(seed)
    rng.shuffle(candidates)
    out: list[dict[str, Any]] = []
    for rel, lines, i in candidates:
        # End 1-3 lines into the body (after the header's own line); grow backwards while the budget allows.
        end = min(len(lines), i + 1 + rng.randint(1, 3))
        start = end
        while start > 0 and len(tokenizer.encode("".join(lines[start - 1:end]))) <= prompt_tokens:
            start -= 1
        if start > i:  # the header alone does not fit
            continue
        text = "".join(lines[start:end])
        if not text.strip():
            continue
        out.append({"id": len(out), "source": rel, "prompt": text, "ids": tokenizer.encode(text)})
        if len(out) == n:
            break
    return out


def write_prompts(path: str | os.PathLike[str], prompts: list[dict[str, Any]]) -> Path:
    """JSONL, one prompt per line: ``id``, ``source`` (module path), ``prompt`` (text)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for p in prompts:
            f.write(json.dumps({"id": p["id"], "source": p["source"], "prompt": p["prompt"]}, ensure_ascii=False))
            f.write("\n")
    return path
