"""pointgeope/provenance.py: the version and commit that a run records (metrics.json)."""
from __future__ import annotations

import subprocess
import tomllib

import pytest

import pointgeope
from pointgeope.provenance import checkout_commit, checkout_modified, code_record
from tests.conftest import REPO

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "PATH": "/usr/bin:/bin"}


def head_from_files(repo) -> str:
    """HEAD's commit read from .git's files (a reference independent of git rev-parse)."""
    head = (repo / ".git" / "HEAD").read_text().strip()
    return (repo / ".git" / head.removeprefix("ref: ")).read_text().strip()


def test_the_version_is_pyprojects():
    """pyproject.toml reads the version from the package, the one place it is written (test_packaging: the wheel's)."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and pyproject["project"]["dynamic"] == ["version"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "pointgeope.__version__"}
    assert code_record()["pointgeope"] == pointgeope.__version__


def test_the_commit_is_the_checkouts_own_and_none_elsewhere(tmp_path, monkeypatch):
    if subprocess.run(["git", "--version"], capture_output=True, check=False).returncode != 0:
        pytest.skip("no git here")
    repo = tmp_path / "clone"
    (repo / "pointgeope").mkdir(parents=True)
    (repo / "pointgeope" / "__init__.py").write_text("")
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "one"]):
        subprocess.run(["git", *args], cwd=repo, env=GIT_ENV, check=True)
    find = checkout_commit                   # not cached: each case asks git
    assert find(repo) == head_from_files(repo) and len(find(repo)) == 40
    short = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, env=GIT_ENV, capture_output=True,
                           text=True, check=True).stdout.strip()
    assert find(repo, short=True) == short and head_from_files(repo).startswith(short) and len(short) < 40
    first = find(repo)
    (repo / "two.txt").write_text("2\n")
    for args in (["add", "."], ["commit", "-q", "-m", "two"]):
        subprocess.run(["git", *args], cwd=repo, env=GIT_ENV, check=True)
    assert find(repo) == head_from_files(repo) != first     # asked again: a new commit is seen (the benches')
    # a folder inside a repository is not its checkout (site-packages of a venv inside a clone)
    assert find(repo / "pointgeope") is None
    assert find(tmp_path) is None            # no repository at all
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert find(repo) is None                # no git: None, not an error


def test_this_checkout_records_its_head():
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    assert code_record()["pointgeope_commit"] == done.stdout.strip()


def test_a_clone_whose_code_differs_from_its_commit_says_so(tmp_path, monkeypatch):
    """A researcher who edited the package and trained recorded the commit alone, as if the results were that
    commit's code. The record now says whether the code (the package, data_prep, train.py) differs from the
    commit: an edited, staged, removed or new (not ignored) file under them does; outputs elsewhere in the
    clone, and files git ignores, do not."""
    if subprocess.run(["git", "--version"], capture_output=True, check=False).returncode != 0:
        pytest.skip("no git here")
    repo = tmp_path / "clone"
    (repo / "pointgeope").mkdir(parents=True)
    (repo / "pointgeope" / "geope.py").write_text("A = 1\n")
    (repo / "train.py").write_text("")
    (repo / ".gitignore").write_text("__pycache__/\n")
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "one"]):
        subprocess.run(["git", *args], cwd=repo, env=GIT_ENV, check=True)

    def git(*args):
        subprocess.run(["git", *args], cwd=repo, env=GIT_ENV, check=True, capture_output=True)

    assert checkout_modified(repo) is False
    (repo / "runs" / "geope").mkdir(parents=True)                    # a run's outputs, a scan, prepared data
    (repo / "my_scan.ply").write_text("ply\n")
    (repo / "pointgeope" / "__pycache__").mkdir()
    (repo / "pointgeope" / "__pycache__" / "geope.cpython-311.pyc").write_bytes(b"\0")
    assert checkout_modified(repo) is False
    (repo / "pointgeope" / "geope.py").write_text("A = 2\n")         # an edit
    assert checkout_modified(repo) is True
    git("add", "pointgeope/geope.py")                                 # staged, not committed
    assert checkout_modified(repo) is True
    git("commit", "-q", "-m", "two")
    assert checkout_modified(repo) is False
    (repo / "pointgeope" / "mine.py").write_text("")                  # a new module
    assert checkout_modified(repo) is True
    (repo / "pointgeope" / "mine.py").unlink()
    (repo / "train.py").unlink()                                      # a removed file
    assert checkout_modified(repo) is True
    assert checkout_modified(repo / "pointgeope") is None             # not a checkout's top folder
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert checkout_modified(repo) is None                            # no git: not known


def test_the_record_says_whether_this_checkouts_code_is_modified():
    """This checkout's record against the definition asked of git another way: a tracked file of the code that
    differs from HEAD (``git diff HEAD``: staged or not, removed) or a new file that git does not ignore."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    code = ["--", "pointgeope", "data_prep", "train.py"]
    changed = subprocess.run(["git", "-C", str(REPO), "diff", "HEAD", "--name-only", *code], capture_output=True,
                             text=True, check=True).stdout
    new = subprocess.run(["git", "-C", str(REPO), "ls-files", "--others", "--exclude-standard", *code],
                         capture_output=True, text=True, check=True).stdout
    assert code_record()["pointgeope_modified"] is bool(changed.strip() or new.strip())
