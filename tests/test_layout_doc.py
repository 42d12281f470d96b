"""docs/layout.md lists every module of the package and of data_prep, and no module that is gone."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_layout_page_lists_every_module():
    page = (REPO / "docs" / "layout.md").read_text()
    listed = set(re.findall(r"^((?:pointgeope|data_prep)/[\w/]+\.py)\s", page, flags=re.M))
    modules = {p.relative_to(REPO).as_posix() for top in ("pointgeope", "data_prep")
               for p in (REPO / top).rglob("*.py")}
    assert sorted(modules - listed) == [], "modules missing from docs/layout.md"
    assert sorted(listed - modules) == [], "docs/layout.md lists modules that do not exist"
