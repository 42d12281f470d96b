"""The lint rule of the code: ``ruff check`` with the rule set of ``pyproject.toml`` (``[tool.ruff]``) finds
nothing in the repository, so that a new finding fails the suite (and CI's ``make lint``) where it is made."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ruff") is None,
                                reason="ruff is not installed (pip install -e '.[test]')")


def ruff(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


def test_the_repository_has_no_lint_finding():
    done = ruff(".")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_the_check_reads_the_projects_rules_and_finds_a_new_finding(tmp_path):
    """A file with an unused import, a loop-variable closure, an unsorted import block and a line of 121
    columns: each is reported under the project's configuration, not ruff's defaults (F401 and B023 are on,
    the line length is 120)."""
    (tmp_path / "new.py").write_text(
        "import sys\nimport os\n\n"
        "calls = []\n"
        "for i in range(3):\n"
        "    calls.append(lambda: i)\n"
        f"x = {'1' * 115}\n")
    assert len(f"x = {'1' * 115}") == 119
    (tmp_path / "long.py").write_text(f"y = {'1' * 117}\n")
    done = ruff("--config", str(REPO / "pyproject.toml"), str(tmp_path))
    found = {line.split(" ")[1] for line in done.stdout.splitlines() if line.startswith(str(tmp_path))}
    assert done.returncode == 1
    assert found == {"I001", "F401", "B023", "E501"}, done.stdout
