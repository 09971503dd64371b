"""Model bundles as stub files, in both layouts (no model inside: for tests that only resolve paths)."""

from __future__ import annotations

import json
from pathlib import Path

CHAT_PROMPTS = [
    {"id": "heldout-0", "category": "writing", "prompt": "Write a short story about hydroelectric dams."},
    {"id": "heldout-1", "category": "writing",
     "prompt": "Write a formal letter to a newspaper editor about utilitarianism."},
    {"id": "heldout-2", "category": "stem", "prompt": "Explain ocean currents in simple terms."},
]


def chat_bundle(root: Path, *, meta: object = None, parts: bool = True) -> Path:
    """A bundle.json-style bundle (as ``python -m dart_core.train smollm2`` writes it), stub files for its parts."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "bundle.json").write_text(json.dumps(meta if meta is not None else {"target": "smollm2", "mode": "chat"}))
    if parts:
        for sub in ("dart", "eagle3", "dflash"):  # dflash/ serves the DFlash chain and DFlash-tree racers
            (root / sub).mkdir(exist_ok=True)
            (root / sub / "config.json").write_text("{}")
        (root / "ngram").mkdir(exist_ok=True)
        (root / "ngram" / "small.ngram").write_bytes(b"")
        (root / "prompts.jsonl").write_text("".join(json.dumps(p) + "\n" for p in CHAT_PROMPTS))
    return root


def toy_bundle(root: Path) -> Path:
    """The ``assets/tiny`` layout: the target inside, no bundle.json."""
    (root / "target").mkdir(parents=True)
    (root / "target" / "config.json").write_text("{}")
    (root / "dart").mkdir()
    (root / "prompts.jsonl").write_text(json.dumps({"id": 0, "source": "bz2.py", "prompt": "def f():\n"}) + "\n")
    return root
