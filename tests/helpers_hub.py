"""An offline Hugging Face cache that holds the published file layout of the ids a launch script names (target
config + tokenizer + sharded ``model-*.safetensors`` with an index, the DART drafter, the EAGLE-3 head, the DFlash
drafter, the N-gram repo with ``small.trie``) at tiny shapes with self-consistent configs, for the launch-check
tests. The files are written by the shared writers of the published formats (``helpers_ckpt``, ``helpers_trie``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
from helpers_ckpt import (
    drafter_config,
    random_drafter_state,
    tiny_qwen3,
    word_tokenizer,
    write_drafter,
    write_target_weights,
)
from helpers_trie import RefTrie
from safetensors.torch import save_file

REV = "0123456789abcdef0123456789abcdef01234567"
QWEN3_8B = {"target": "Qwen/Qwen3-8B", "dart": "fvliang/qwen8b-dart", "eagle3": "AngelSlim/Qwen3-8B_eagle3",
            "dflash": "z-lab/Qwen3-8B-DFlash-b16", "ngram": "fvliang/dart-qwen3-ngram"}  # launch/qwen3_8b_app.sh
VOCAB, HIDDEN, LAYERS = 97, 32, 8
CHAT_TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }} {{ m['content'] }}<|im_end|> {% endfor %}"


def snapshot(cache: Path, repo: str) -> Path:
    """The snapshot folder of ``repo`` in ``cache`` (``models--org--name/snapshots/<rev>``)."""
    return cache / f"models--{repo.replace('/', '--')}" / "snapshots" / REV


def cache_repo(cache: Path, repo: str, src: Path) -> Path:
    """Move the files of directory ``src`` into ``cache`` as ``repo`` at revision ``main`` (the layout
    huggingface_hub reads offline: ``refs/main`` and ``snapshots/<rev>/<files>``)."""
    base = cache / f"models--{repo.replace('/', '--')}"
    (base / "refs").mkdir(parents=True, exist_ok=True)
    (base / "refs" / "main").write_text(REV)
    snap = snapshot(cache, repo)
    snap.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, snap, dirs_exist_ok=True)
    shutil.rmtree(src)
    return snap


def write_target(path: Path, **kw: Any) -> Path:
    """A Qwen3 target as the Hub has it: config.json, generation_config.json, tokenizer files, two shards and
    model.safetensors.index.json."""
    model = tiny_qwen3(vocab=VOCAB, hidden=HIDDEN, layers=LAYERS, **kw)
    model.config.save_pretrained(path)
    model.generation_config.save_pretrained(path)
    tokenizer = word_tokenizer(VOCAB)
    tokenizer.chat_template = CHAT_TEMPLATE  # Qwen3's tokenizer has one (the launch scripts ask for it)
    tokenizer.save_pretrained(path)
    return write_target_weights(path, model, sharded=True)


def write_dflash(path: Path, **extra: Any) -> Path:
    """A DFlash drafter as z-lab publishes it (config.json with block_size / num_target_layers / dflash_config,
    model.safetensors without embedding or lm_head), for the tiny target; ``extra``: config fields to change."""
    from dart_core.drafters.dflash import DFlashConfig, dflash_shapes

    cfg: dict[str, Any] = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": HIDDEN,
                           "intermediate_size": 2 * HIDDEN, "num_hidden_layers": 1, "num_attention_heads": 4,
                           "num_key_value_heads": 2, "head_dim": 8, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
                           "max_position_embeddings": 512, "num_target_layers": LAYERS, "block_size": 16,
                           "vocab_size": VOCAB, "dflash_config": {"mask_token_id": VOCAB - 1,
                                                                  "target_layer_ids": [1, 3, 5]}}
    cfg.update(extra)
    g = torch.Generator().manual_seed(2)
    shapes = dflash_shapes(DFlashConfig.from_dict(cfg))
    path.mkdir(parents=True, exist_ok=True)
    save_file({k: (torch.randn(shape, generator=g) * 0.1).to(torch.bfloat16) for k, shape in shapes.items()},
              str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def published_cache(cache: Path, *, parts: tuple[str, ...] = ("target", "dart", "eagle3", "dflash", "ngram"),
                    drafter_extra: dict[str, dict[str, Any]] | None = None) -> Path:
    """``cache`` holding ``parts`` of :data:`QWEN3_8B`; ``drafter_extra``: config fields to change per drafter
    (a drafter built for another target)."""
    work = cache.parent / f"{cache.name}-work"
    for part in parts:
        src = work / part
        if part == "target":
            write_target(src)
        elif part == "dflash":
            write_dflash(src, **(drafter_extra or {}).get(part, {}))
        elif part == "ngram":
            src.mkdir(parents=True)
            RefTrie.build([[1, 2, 3, 4, 5], [2, 3, 5, 7], [1, 2, 3, 9]], order=3).write(src / "small.trie")
        else:
            extra = (drafter_extra or {}).get(part, {})
            cfg = drafter_config(part, vocab=VOCAB, hidden=HIDDEN, draft_vocab=VOCAB // 2, **extra)
            write_drafter(src, cfg, random_drafter_state(cfg, kind=part, seed=1))
        cache_repo(cache, QWEN3_8B[part], src)
    return cache
