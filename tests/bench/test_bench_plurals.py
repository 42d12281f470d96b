"""The benchmarks' lines count in the right number (pointgeope.plural.counted), never with a hedged plural."""
from __future__ import annotations

import ast
import re
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
HEDGED = re.compile(r"[A-Za-z]\((?:s|es)\)")  # thread(s), match(es)


def test_no_bench_script_writes_a_hedged_plural():
    """Every string of every bench script, the pieces of its f-strings included: "1 thread(s)" read as the
    machine being unsure how many threads it ran."""
    found = []
    for path in sorted(BENCH.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and HEDGED.search(node.value):
                found.append(f"{path.name}:{node.lineno}: {HEDGED.search(node.value).group()}")
    assert found == []
    assert HEDGED.search("1 thread(s)") and not HEDGED.search("process CPU time (s)")
