"""Benchmarks: ``python -m dart_core.bench native`` (N-gram store + tree search)."""
