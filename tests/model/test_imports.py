"""The direction of the data (docs/layout.md): the model code never imports the data code or the engine."""
from __future__ import annotations

import ast
from pathlib import Path

MODEL = Path(__file__).resolve().parents[2] / "pointgeope" / "model"


def test_the_model_never_imports_the_data_code_or_the_engine():
    found = []
    for path in MODEL.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.name}: {n}" for n in names if n.startswith(("pointgeope.data", "pointgeope.engine"))]
    assert found == []
