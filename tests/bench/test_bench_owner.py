"""Every bench script that writes a JSON records what produced it through ``bench_io``'s one owner
(``provenance``, or ``gpu_record.run_record`` / ``tree_state``, built on ``bench_io.git_state``; the GPU
check's ``host`` is ``bench_io.host``), never by hand: no dictionary of its own with a ``commit``, ``dirty``,
``cpu_count`` or ``platform`` key, no ``git_commit``/``tree_dirty`` call of its own. A static read of the
scripts' syntax trees, so it covers the scripts too slow to run in the suite (the loader benches)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
OWNERS = {"bench_io.py", "gpu_record.py"}
RECORDERS = {"provenance", "run_record", "tree_state", "host"}
WRITERS = {"save_json", "dump", "write_text_atomic"}
# what a run's identity is made of: the owner writes these keys (a "machine" of extra readings, a dict, may stay)
IDENTITY = {"commit", "dirty", "cpu_count", "cpus", "cpu_model", "processor", "platform", "python", "machine",
            "before_commit"}
BY_HAND = {"git_commit", "tree_dirty", "cpu_model"}


def _called(tree: ast.AST) -> set[str]:
    """The names of the functions ``tree`` calls (``f(...)`` and ``x.f(...)`` both give ``f``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.id if isinstance(func, ast.Name) else getattr(func, "attr", ""))
    return names


def problems(source: str) -> list[str]:
    """What in a bench script's ``source`` writes run identity by hand, or a JSON with no recorder."""
    tree = ast.parse(source)
    called, found = _called(tree), []
    if not called & WRITERS:
        return []
    if not called & RECORDERS:
        found.append("writes a JSON without bench_io.provenance (or gpu_record.run_record)")
    found += [f"calls {name}() itself" for name in sorted(called & BY_HAND)]
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value in IDENTITY and not isinstance(value, ast.Dict):
                    found.append(f"line {key.lineno}: writes {key.value!r} itself")
                elif isinstance(value, ast.Attribute) and value.attr == "__version__":
                    found.append(f"line {value.lineno}: writes a version itself")   # provenance's "versions"
    return found


def test_the_check_finds_each_kind_of_hand_written_record():
    hand = ('from bench_io import git_commit, save_json\n'
            'save_json(p, {"commit": git_commit(), "cpu_count": 2, "torch": torch.__version__})\n')
    assert problems(hand) == ["writes a JSON without bench_io.provenance (or gpu_record.run_record)",
                              "calls git_commit() itself", "line 2: writes 'commit' itself",
                              "line 2: writes 'cpu_count' itself", "line 2: writes a version itself"]
    assert problems('save_json(p, {"provenance": provenance(1), "machine": {"load_end": 1.0}})\n') == []
    assert problems('print({"commit": 1})\n') == []       # writes no JSON: not a result


@pytest.mark.parametrize("script", sorted(p.name for p in BENCH.glob("*.py") if p.name not in OWNERS))
def test_every_bench_script_writing_json_records_its_run_through_bench_io(script):
    assert problems((BENCH / script).read_text()) == []
