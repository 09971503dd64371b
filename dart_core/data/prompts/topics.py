"""Helpers of the prompt sets (``dart_core.data.prompts.chat_set``): the stable topic split that keeps held-out topics
out of training on every machine and run, and the JSONL writer the prompt and distillation files use."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any


def topic_key(topic: str) -> int:
    """A topic's stable 32-bit hash: the split (and the held-out roles) are the same everywhere."""
    return int.from_bytes(hashlib.sha256(topic.encode()).digest()[:4], "big")


def is_heldout_topic(topic: str, heldout_percent: int = 10) -> bool:
    """Stable topic split: the same topics are held out on every machine and every run."""
    return topic_key(topic) % 100 < heldout_percent


def write_jsonl(path: str | os.PathLike[str], records: list[dict[str, Any]]) -> Path:
    """One JSON object per line (UTF-8), parent directories created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return path
