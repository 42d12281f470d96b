"""What the benchmarks share to record a run: the commit it measured (and whether the tree differed from it),
the versions and threads it ran with (its ``provenance``), and an atomic write of its JSON.

``dirty`` means one thing for every benchmark, CPU or GPU: a change of the code measured, so the runs' own
outputs under :data:`OUTPUTS` (the committed results a CPU bench rewrites, the GPU check's JSON and logs)
never count."""
from __future__ import annotations

import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from pointgeope.atomic import write_text_atomic
from pointgeope.provenance import PACKAGE_PARENT, checkout_commit

ROOT = Path(__file__).resolve().parents[1]
CHANGED_LISTED = 20     # at most this many changed paths are written into a result
OUTPUTS = "bench/results"            # what the runs themselves write: not a change of the code measured


def _git(tree: Path, *args: str) -> str | None:
    """``git args`` in ``tree``: its stdout, or None where git is missing or ``tree`` is no checkout."""
    try:
        proc = subprocess.run(["git", *args], cwd=tree, capture_output=True, text=True, check=False)
    except OSError:
        return None
    return proc.stdout if proc.returncode == 0 else None


def git_commit(short: bool = False, tree: Path = ROOT) -> str:
    """The commit checked out in ``tree`` (this repository by default), as the package reads its own
    (:func:`pointgeope.provenance.checkout_commit`), "" where that says None (outside a git checkout, or a folder
    inside one that is not its top). Whether the tree differed from it when the run started is
    :func:`git_state`'s ``dirty``."""
    return checkout_commit(tree, short) or ""


def git_state(tree: Path = ROOT, exclude: tuple[str, ...] = (), untracked: bool = False) -> dict:
    """``{"commit", "dirty", "changed"}`` of the checkout ``tree``: HEAD's full hash, whether a tracked file
    differs from HEAD (staged or not; with ``untracked``, a new file not ignored counts too), and the first
    :data:`CHANGED_LISTED` lines of ``git status --porcelain`` for those files (so a reader sees whether only
    result files differed). Paths under ``exclude`` (a run's own outputs) are left out. Where
    :func:`git_commit` is ``""`` (outside a checkout, or a folder inside one that is not its top, as an installed
    package's site-packages in a clone's virtual environment): ``{"commit": "", "dirty": None, "changed": []}``."""
    pathspec = ["--", ".", *(f":(exclude){path}" for path in exclude)] if exclude else []
    commit = git_commit(tree=tree)
    status = _git(tree, "status", "--porcelain", f"--untracked-files={'all' if untracked else 'no'}",
                  *pathspec) if commit else None
    if status is None:
        return {"commit": "", "dirty": None, "changed": []}
    changed = [line for line in status.splitlines() if line.strip()]
    return {"commit": commit, "dirty": bool(changed), "changed": changed[:CHANGED_LISTED]}


def tree_dirty(tree: Path = ROOT) -> bool | None:
    """:func:`git_state`'s ``dirty`` of ``tree`` outside :data:`OUTPUTS`: for a result that records its commit
    beside its own keys rather than a whole :func:`provenance`."""
    return git_state(tree, exclude=(OUTPUTS,))["dirty"]


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The host CPU's model name and how many logical CPUs name it (``"AMD EPYC x 2"``), read from
    ``cpuinfo``; "" where it cannot be read or names no model (not Linux)."""
    try:
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                 if line.startswith("model name")]
    except OSError:
        return ""
    return f"{names[0]} x {len(names)}" if names else ""


def host() -> dict:
    """The machine a run ran on, the one owner of these keys in every result (:func:`provenance`, the GPU
    check's ``host``): Python's version, the platform, the processor, :func:`cpu_model`, the CPU count and the
    1-minute load average now."""
    return {"python": platform.python_version(), "platform": platform.platform(), "processor": platform.processor(),
            "cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "load_average_1min": os.getloadavg()[0]}


def provenance(threads: int | list[int] | None, packages: tuple[str, ...] = ("numpy", "torch"),
               tree: Path = PACKAGE_PARENT) -> dict:
    """What produced a result, for its JSON's ``provenance`` key: :func:`git_state` of ``tree`` outside
    :data:`OUTPUTS`, tracked files only (by default the checkout holding the ``pointgeope`` this process
    imported, ``pointgeope.provenance.PACKAGE_PARENT``: the code timed, which ``PYTHONPATH`` or an editable
    install may take from another checkout than this script's; a script that times :data:`ROOT`'s package in
    child processes passes ``ROOT``), the ``threads`` the run timed (one count, or the counts of a run that
    times several; None for a script that times nothing), the installed version of each of ``packages`` (None
    where absent) and :func:`host` when it was taken (take it at the run's start: the commit is then the code
    that was imported)."""
    return {**git_state(tree, exclude=(OUTPUTS,)), "threads": threads, "versions": {p: _version(p) for p in packages},
            **host()}


def out_path(out: Path | None, committed: Path, smoke: bool) -> Path:
    """Where a run writes: ``out`` when given; else ``committed`` (the file the docs cite), except for a smoke
    run (``--quick``, small sizes), which writes into a fresh temporary folder so it never replaces it."""
    if out is not None:
        return Path(out)
    if smoke:
        return Path(tempfile.mkdtemp(prefix="pointgeope-bench-")) / committed.name
    return committed


def save_json(path: Path, payload: dict, indent: int = 2) -> None:
    """``payload`` as JSON at ``path`` (parents made), written atomically: a run cut short leaves the last file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(payload, indent=indent) + "\n")


def import_file(path: Path, name: str):
    """The Python file ``path`` imported as module ``name`` (registered in ``sys.modules``: PyG's inspector
    looks a layer's globals up there), its imports from this tree: another version of a file, compared with
    today's in one run."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def module_at(rev: str, path: str, name: str):
    """The file ``path`` (relative to the repository) as it was at commit ``rev``, imported as ``name``."""
    source = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True, capture_output=True,
                            text=True).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(source)
    try:
        return import_file(Path(f.name), name)
    finally:
        Path(f.name).unlink()
