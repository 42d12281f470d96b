"""Every bench script that writes a JSON records what produced it through ``bench_io``'s one owner
(``provenance``, or ``gpu_record.run_record`` / ``tree_state``, built on ``bench_io.git_state``; the GPU
check's ``host`` is ``bench_io.host``), never by hand: no dictionary of its own with a ``commit``, ``dirty``,
``cpu_count`` or ``platform`` key, no ``git_commit``/``tree_dirty`` call of its own, and none in a helper of
another bench module whose dict it unpacks into its own (``{**helper(), ...}``: that module writes no JSON, so
its own check passes). A static read of the scripts' syntax trees, so it covers the scripts too slow to run in
the suite (the loader benches)."""
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


def _name(call: ast.Call) -> str:
    """The name a call calls (``f(...)`` and ``x.f(...)`` both give ``f``)."""
    return call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")


def _called(tree: ast.AST) -> set[str]:
    """The names of the functions ``tree`` calls, and ``save_json`` for a ``path.write_text(json.dumps(...))``
    (a JSON written without a writer of its own)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            names.add(_name(node))
            if _name(node) == "write_text" and any(isinstance(n, ast.Call) and _name(n) == "dumps"
                                                   for arg in node.args for n in ast.walk(arg)):
                names.add("save_json")
    return names


def _identity_keys(tree: ast.AST):
    """``(key, line, value node)`` of every identity key ``tree`` writes: in a dict display (``{"commit": c}``), a
    ``dict(commit=c)`` call or an item assignment (``out["commit"] = c``; not ``machine``, whose rule is the shape
    of its value: the GPU check's ``result["machine"]`` is its probe of the device, parsed from a child's line)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            yield from ((k.value, k.lineno, v) for k, v in zip(node.keys, node.values, strict=True)
                        if isinstance(k, ast.Constant) and k.value in IDENTITY)
        elif isinstance(node, ast.Call) and _name(node) == "dict":
            yield from ((kw.arg, kw.lineno, kw.value) for kw in node.keywords if kw.arg in IDENTITY)
        elif isinstance(node, ast.Assign):
            yield from ((t.slice.value, t.lineno, node.value) for t in node.targets if isinstance(t, ast.Subscript)
                        and isinstance(t.slice, ast.Constant) and t.slice.value in IDENTITY - {"machine"})


def _by_hand(tree: ast.AST) -> list[str]:
    """The hand-written identity in ``tree``: a call of :data:`BY_HAND`, an identity key, a version read."""
    found = [f"calls {name}() itself" for name in sorted(_called(tree) & BY_HAND)]
    found += [f"line {line}: writes {key!r} itself" for key, line, value in _identity_keys(tree)
              if not isinstance(value, ast.Dict)]
    found += [f"line {value.lineno}: writes a version itself" for node in ast.walk(tree) if isinstance(node, ast.Dict)
              for value in node.values if isinstance(value, ast.Attribute) and value.attr == "__version__"]
    return found


def _unpacked_calls(tree: ast.AST):
    """The calls whose dict ``tree`` unpacks into another: ``{**f(), ...}`` and ``dict(**f())``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            yield from (v for k, v in zip(node.keys, node.values, strict=True) if k is None and isinstance(v, ast.Call))
        elif isinstance(node, ast.Call) and _name(node) == "dict":
            yield from (kw.value for kw in node.keywords if kw.arg is None and isinstance(kw.value, ast.Call))


def _bench_module(module: str) -> str | None:
    """The source of bench module ``module`` (``None`` for an owner or a module outside bench/)."""
    path = BENCH / f"{module}.py"
    return None if path.name in OWNERS or not path.exists() else path.read_text()


def _imported_helpers(tree: ast.AST, read) -> list[str]:
    """The hand-written identity in the functions of other bench modules whose dicts ``tree`` unpacks: ``read``
    gives a module's source, or ``None`` for an owner or a module outside bench/."""
    imported = {alias.asname or alias.name: (node.module, alias.name) for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module for alias in node.names}
    found = []
    for call in _unpacked_calls(tree):
        module, name = imported.get(_name(call), (None, None))
        source = read(module) if module else None
        if source is None:
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef) and node.name == name:
                found += [f"line {call.lineno}: **{name}() from {module}.py {what}" for what in _by_hand(node)]
    return found


def problems(source: str, read=_bench_module) -> list[str]:
    """What in a bench script's ``source`` writes run identity by hand (itself, or in another bench module's
    helper whose dict it unpacks; ``read``: a module's source, :func:`_bench_module`), or a JSON with no
    recorder."""
    tree = ast.parse(source)
    called, found = _called(tree), []
    if not called & WRITERS:
        return []
    if not called & RECORDERS:
        found.append("writes a JSON without bench_io.provenance (or gpu_record.run_record)")
    return found + _by_hand(tree) + _imported_helpers(tree, read)


def test_the_check_finds_each_kind_of_hand_written_record():
    hand = ('from bench_io import git_commit, save_json\n'
            'save_json(p, {"commit": git_commit(), "cpu_count": 2, "torch": torch.__version__})\n')
    assert problems(hand) == ["writes a JSON without bench_io.provenance (or gpu_record.run_record)",
                              "calls git_commit() itself", "line 2: writes 'commit' itself",
                              "line 2: writes 'cpu_count' itself", "line 2: writes a version itself"]
    assert problems('save_json(p, {"provenance": provenance(1), "machine": {"load_end": 1.0}})\n') == []
    assert problems('print({"commit": 1})\n') == []       # writes no JSON: not a result


@pytest.mark.parametrize("written", ['out["commit"] = sha\nsave_json(p, out)\n',
                                     'save_json(p, dict(provenance=provenance(1), commit=sha))\n',
                                     'Path(p).write_text(json.dumps({"commit": sha}))\n'])
def test_the_check_finds_a_commit_written_by_item_by_keyword_or_through_write_text(written):
    """The check read dict displays alone, and ``save_json``, ``json.dump`` or ``write_text_atomic`` as the writes:
    a script's own commit assigned as an item, given as ``dict``'s keyword, or a JSON written with
    ``Path.write_text`` went through."""
    found = problems("out = {'provenance': provenance(1)}\n" + written)
    assert [line for line in found if "writes 'commit' itself" in line] == ["line 2: writes 'commit' itself"]
    assert problems('out["machine"] = json.loads(line)\nsave_json(p, {"provenance": provenance(1)})\n') == []
    assert problems('Path(p).write_text(str({"commit": sha}))\n') == []      # no JSON: not a result


def test_the_check_finds_a_record_built_by_another_bench_modules_helper_and_unpacked():
    """A script writing ``{**helper(), ...}`` with ``helper`` of another bench module that builds its own commit
    passed: that module writes no JSON (so its own check returned nothing) and the script's dict shows no key."""
    helper = ('import platform\nfrom bench_io import git_commit\n'
              'def machine():\n    return {"commit": git_commit(), "platform": platform.platform()}\n'
              'def sizes():\n    return {"points": 10}\n')
    modules = {"bench_helper": helper}
    script = ('from bench_helper import machine, sizes as size_of\n'
              'save_json(p, {"provenance": provenance(1), **machine(), **size_of()})\n')
    assert problems(helper, modules.get) == []                    # no JSON written there
    brought = "line 2: **machine() from bench_helper.py"
    assert problems(script, modules.get) == [f"{brought} calls git_commit() itself",
                                             f"{brought} line 4: writes 'commit' itself",
                                             f"{brought} line 4: writes 'platform' itself"]
    assert problems(script.replace("**machine()", "**dict(**machine())"), modules.get)[0].startswith(brought)
    assert problems(script.replace("machine, ", "").replace("**machine(), ", ""), modules.get) == []


@pytest.mark.parametrize("script", sorted(p.name for p in BENCH.glob("*.py") if p.name not in OWNERS))
def test_every_bench_script_writing_json_records_its_run_through_bench_io(script):
    assert problems((BENCH / script).read_text()) == []
