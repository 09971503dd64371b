"""Drafters: one file per drafter family (``dart.py``, ``eagle3.py``, ``dflash.py`` with its chain and tree racers,
the model-free ``prompt_lookup.py`` and ``ngram_only.py``) over shared layers and checkpoint loading; which racer
uses which is the registry's (``dart_core.racers.registry``)."""
