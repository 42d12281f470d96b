"""The size rule of the code: no function over 80 lines and no file over 400 in ``pointgeope/`` and
``data_prep/``, so that each reads on a screen or two.
"""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("pointgeope", "data_prep")
MAX_FUNCTION_LINES = 80
MAX_FILE_LINES = 400


def offenders(paths: list[Path], root: Path) -> list[str]:
    """``"<file>: N lines"`` and ``"<file>:<line> <function>: N lines"`` for each file and function
    (methods and nested functions included, from ``def`` to its last line) over the limits."""
    found = []
    for path in paths:
        text = path.read_text()
        name = path.relative_to(root).as_posix()
        if len(text.splitlines()) > MAX_FILE_LINES:
            found.append(f"{name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    return found


def test_no_function_over_80_lines_and_no_file_over_400():
    paths = [p for package in PACKAGES for p in sorted((REPO / package).rglob("*.py"))]
    assert len(paths) > 60
    assert offenders(paths, REPO) == []


def test_the_check_finds_a_long_function_and_a_long_file(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES - 1))
    (tmp_path / "ok.py").write_text(f"def fits():\n{body}\n")  # exactly the limit
    (tmp_path / "long.py").write_text(f"class A:\n    def over(self):\n    {body.replace(chr(10), chr(10) + '    ')}\n"
                                      f"        return 1\n")
    (tmp_path / "big.py").write_text("x = 1\n" * (MAX_FILE_LINES + 1))
    found = offenders(sorted(tmp_path.glob("*.py")), tmp_path)
    assert found == [f"big.py: {MAX_FILE_LINES + 1} lines", f"long.py:2 over: {MAX_FUNCTION_LINES + 1} lines"]
