"""Test-wide setup: make the shared helper modules in tests/ importable (pytest runs with importlib mode)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
