"""Drafters: one file per drafter (``dart.py``, ``eagle3.py``) over shared layers and checkpoint loading."""
