"""Recipes that rebuild the embedded bundle (``assets/tiny``) offline: ``python -m dart_core.train all --out DIR``.

``data`` (stdlib split, byte-level BPE, encoded corpus, held-out prompts) and ``target`` (a small Qwen3 trained by
our own loop) are here; the DART drafter and EAGLE-3 head trainers live in ``dart`` and ``eagle3``.
"""
