"""Benchmarks: ``python -m dart_core.bench <benchmark>``, one module each (``e2e``, ``native``, ``gpu``, …; the list and
each one's first docstring line: ``python -m dart_core.bench --help``)."""
