"""Which code made a result: the package's version and, where the package is a git checkout, its commit.

``metrics.json`` records both (:func:`code_record`), so that a run folder says which code produced it: between
releases (a ``.devN`` version) only the commit tells two states of the code apart. Nothing here is compared
between folds (``report`` compares their settings: :mod:`pointgeope.report.settings`); the report says each
run's code, per fold where it differs (:mod:`pointgeope.report.citation`). The benchmarks'
results (``bench/bench_io.py``) read their commit by :func:`checkout_commit` too.
"""
from __future__ import annotations

import functools
import subprocess
from pathlib import Path

from pointgeope import __version__

# the folder that holds the package: a clone's root in a checkout, site-packages in an installed wheel
PACKAGE_PARENT = Path(__file__).resolve().parent.parent
GIT_TIMEOUT_S = 2.0


def checkout_commit(root: Path = PACKAGE_PARENT, short: bool = False) -> str | None:
    """The commit (40 hex digits; ``short``: git's abbreviation, ``rev-parse --short``) that ``root`` is checked
    out at, when ``root`` is the top folder of a git work tree (a clone or a worktree); ``None`` otherwise: no git,
    not a checkout, git slower than :data:`GIT_TIMEOUT_S`, or a repository that only contains ``root``
    (site-packages of a virtual environment inside a clone is not that clone's code). Uncommitted changes are
    not told. Asks git at each call (the benchmarks' ``bench_io.git_commit`` too)."""
    try:
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "--show-toplevel",
                               *(["--short"] if short else []), "HEAD"], text=True,
                              capture_output=True, stdin=subprocess.DEVNULL, timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.splitlines()
    if done.returncode != 0 or len(lines) != 2 or Path(lines[0]).resolve() != Path(root).resolve():
        return None
    return lines[1]


@functools.lru_cache(maxsize=1)
def package_commit() -> str | None:
    """:func:`checkout_commit` of the package's own folder, asked once per process: the code this process
    imported, whatever is committed while it runs."""
    return checkout_commit()


def code_record() -> dict[str, str | None]:
    """``{"pointgeope": "0.2.0.dev0", "pointgeope_commit": "<40 hex digits>" or None}``: the code of this run."""
    return {"pointgeope": __version__, "pointgeope_commit": package_commit()}
