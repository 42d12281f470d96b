"""Which code made a result: the package's version and, where the package is a git checkout, its commit and
whether its code differs from that commit.

``metrics.json`` records them (:func:`code_record`), so that a run folder says which code produced it: between
releases (a ``.devN`` version) only the commit tells two states of the code apart, and a clone whose code was
edited after its last commit (a researcher's change, not committed yet) is not that commit's code: the record
says so (``"pointgeope_modified": true``) rather than cite the commit as if it were. Nothing here is compared
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
# the code a run executes, as paths of a clone (configs are recorded whole, data by its checksums)
CODE_PATHS = ("pointgeope", "data_prep", "train.py")


def checkout_commit(root: Path = PACKAGE_PARENT, short: bool = False) -> str | None:
    """The commit (40 hex digits; ``short``: git's abbreviation, ``rev-parse --short``) that ``root`` is checked
    out at, when ``root`` is the top folder of a git work tree (a clone or a worktree); ``None`` otherwise: no git,
    not a checkout, git slower than :data:`GIT_TIMEOUT_S`, or a repository that only contains ``root``
    (site-packages of a virtual environment inside a clone is not that clone's code). Uncommitted changes:
    :func:`checkout_modified`. Asks git at each call (the benchmarks' ``bench_io.git_commit`` too)."""
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


def checkout_modified(root: Path = PACKAGE_PARENT) -> bool | None:
    """Whether the code of the checkout at ``root`` (:data:`CODE_PATHS`) differs from its commit: a tracked file
    changed (staged or not) or removed, or a file that git does not ignore added under them (a new module);
    outputs written into the clone (``runs/``, ``data/``, a scan) do not count. ``None`` where
    :func:`checkout_commit` is ``None`` or git does not answer in time. Takes no lock (``--no-optional-locks``):
    a ``git`` command of the user's at the same moment is not refused."""
    if checkout_commit(root) is None:
        return None
    try:
        done = subprocess.run(["git", "--no-optional-locks", "-C", str(root), "status", "--porcelain",
                               "--untracked-files=all", "--", *CODE_PATHS], text=True, capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return bool(done.stdout.strip()) if done.returncode == 0 else None


@functools.lru_cache(maxsize=1)
def package_modified() -> bool | None:
    """:func:`checkout_modified` of the package's own folder, asked once per process (as :func:`package_commit`)."""
    return checkout_modified()


@functools.lru_cache(maxsize=1)
def package_commit() -> str | None:
    """:func:`checkout_commit` of the package's own folder, asked once per process: the code this process
    imported, whatever is committed while it runs."""
    return checkout_commit()


def code_record() -> dict[str, str | bool | None]:
    """``{"pointgeope": "0.2.0.dev0", "pointgeope_commit": "<40 hex digits>" or None, "pointgeope_modified": false,
    true or None}``: the code of this run (``pointgeope_modified``: :func:`package_modified`)."""
    return {"pointgeope": __version__, "pointgeope_commit": package_commit(),
            "pointgeope_modified": package_modified()}
