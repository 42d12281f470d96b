"""The API reference (docs/api/*.md) names only objects that exist: mkdocstrings renders a ``members:`` entry that
names nothing as nothing at all (``mkdocs build --strict`` passes), so a renamed or removed function would leave a
page that silently lacks it, and the module docstring's references to it unlinked."""
from __future__ import annotations

import ast
import importlib
import re
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = sorted((REPO / "docs" / "api").glob("*.md"))
# a ``::: identifier`` block and its indented options
BLOCK = re.compile(r"^::: ([\w.]+)\n((?:    .*\n)*)", re.M)


def blocks(text: str) -> list[tuple[str, list[str]]]:
    """Each ``::: identifier`` of a page with the names of its ``members:`` list (empty: all members)."""
    out = []
    for found in BLOCK.finditer(text):
        listed = re.search(r"^      members:\n((?:        - .*\n)*)", found.group(2), re.M)
        names = re.findall(r"^        - (\S+)$", listed.group(1), re.M) if listed else []
        out.append((found.group(1), names))
    return out


def resolve(identifier: str):
    """The object a dotted identifier names (a module, or an attribute of one), or ``None``."""
    parts = identifier.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name, None)
        return obj
    return None


def test_blocks_are_read_with_their_members():
    text = "# t\n\n::: a.b\n    options:\n      members:\n        - X\n        - y_z\n\ntext\n\n::: a.c\n"
    assert blocks(text) == [("a.b", ["X", "y_z"]), ("a.c", [])]
    assert resolve("pointgeope.metrics.confusion_matrix") is not None and resolve("pointgeope.metrics.nothing") is None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_object_an_api_page_names_exists(page):
    found = blocks(page.read_text())
    assert found, f"{page.name}: no ::: block"
    missing = [f"{ident}.{name}" if name else ident for ident, names in found for name in [None, *names]
               if resolve(f"{ident}.{name}" if name else ident) is None]
    assert missing == [], f"docs/api/{page.name} names objects that do not exist: {missing}"


def test_the_data_page_lists_what_pointgeope_data_exports():
    """docs/api/data.md says which names import from ``pointgeope.data`` itself (it once said all of them, and
    ``from pointgeope.data import RandomRotate`` failed): the list is the package's ``__all__``, each importable,
    and every module that defines one has its block on the page."""
    from pointgeope import data

    text = (REPO / "docs" / "api" / "data.md").read_text()
    listed = re.search(r"<!-- data-exports:start -->\n(.*?)<!-- data-exports:end -->", text, re.S)
    assert listed, "docs/api/data.md: the list of pointgeope.data's names is gone"
    names = re.findall(r"`(\w+)`", listed.group(1))
    assert names == sorted(data.__all__)
    assert all(getattr(data, name) is not None for name in names)
    shown = {ident for ident, _ in blocks(text)}
    assert {getattr(data, name).__module__ for name in names} <= shown


def static_names(module) -> set[str]:
    """The names a module's source binds at its top level (definitions, assignments, imports, those under an
    ``if``/``try`` too, e.g. ``if TYPE_CHECKING:``): what a reader of the source sees without running it."""
    names, todo = set(), list(ast.parse(Path(module.__file__).read_text()).body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If | ast.Try):
            todo += [*node.body, *node.orelse, *getattr(node, "finalbody", []),
                     *(n for h in getattr(node, "handlers", []) for n in h.body)]
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_member_an_api_page_lists_is_in_its_modules_source(page):
    """mkdocstrings reads the source (griffe), not the imported module: a member that a module gives only at run
    time (``pointgeope.model``'s lazy ``__getattr__``) is rendered as nothing, silently, though it imports."""
    missing = []
    for ident, names in blocks(page.read_text()):
        module = resolve(ident)
        if names and isinstance(module, types.ModuleType):
            missing += [f"{ident}.{name}" for name in names if name not in static_names(module)]
    assert missing == [], f"docs/api/{page.name} lists members its module's source does not bind: {missing}"
