"""The bench/ scripts import each other by name (``from bench_io import ...``): bench/ goes on sys.path.

``git`` runs git in a folder (tests that need it skip where git is missing); ``checkout`` is a fresh
one-commit checkout (``code.py``) in a temporary folder."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))


def _run_git(tree: Path, *args: str) -> str:
    """``git args`` in ``tree`` (a throwaway identity for commits): its stdout, stripped; raises on failure."""
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tree, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture
def git():
    """``git(tree, *args) -> stdout``; the test is skipped where git is not installed."""
    if shutil.which("git") is None:
        pytest.skip("needs git")
    return _run_git


@pytest.fixture
def checkout(tmp_path, git):
    """A git checkout in ``tmp_path/tree`` with one commit of ``code.py`` (``x = 1``)."""
    tree = tmp_path / "tree"
    tree.mkdir()
    git(tree, "init", "-q")
    (tree / "code.py").write_text("x = 1\n")
    git(tree, "add", "code.py")
    git(tree, "commit", "-q", "-m", "one")
    return tree
