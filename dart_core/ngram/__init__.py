"""The N-gram core's Python face: ``store`` (the native, memory-mapped N-gram counts), ``search`` (the
N-gram-guided tree search that turns per-position top-k candidates into a draft tree) and the CLI
(``python -m dart_core.ngram``, ``__main__``). Above ``engine`` (it returns the engine's DraftTree), below the
drafters that search with it."""
