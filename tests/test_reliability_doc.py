"""docs/reliability.md names, for each promise, the test that keeps it: every test it names exists."""
from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_every_test_the_reliability_page_names_exists():
    text = (REPO / "docs" / "reliability.md").read_text(encoding="utf-8")
    named = re.findall(r"`(tests/[\w/]+\.py)::(test_\w+)`", text)
    assert len(named) >= 40
    missing = []
    for path, name in named:
        tree = ast.parse((REPO / path).read_text(encoding="utf-8"))
        if name not in {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}:
            missing.append(f"{path}::{name}")
    assert missing == []
