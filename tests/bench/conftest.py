"""The bench/ scripts import each other by name (``from bench_io import ...``): bench/ goes on sys.path."""
from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
