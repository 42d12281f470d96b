"""The test suite's time as ``make test`` runs it: ``python -m pytest -n 2`` (the Makefile's ``PYTEST_ARGS``) under
``xvfb-run`` where it exists, from the repository's root. Recorded: the wall seconds, the CPU seconds of the run
(pytest and every process it started and waited for: ``getrusage(RUSAGE_CHILDREN)``), the passed, skipped,
failed and errored counts of pytest's summary line, its slowest tests (``--durations``), the worker count, the
load average before and after, and :func:`bench_io.provenance` (the commit, the versions, the host).

CI's budget for the suite is 10 minutes on 2 cores; a loaded machine stretches the wall time, not the CPU time
(compare those between runs). ``--select`` runs part of the suite (pytest's arguments: paths, ``-k``, ``-m``)
and writes into a temporary file unless ``--out`` says where: only a whole-suite run replaces the committed file.

Usage: python bench/suite_time.py [--workers 2] [--select "tests/test_h5.py -k atomic"] [--out PATH]
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench_io import ROOT, out_path, provenance, save_json

RESULTS = Path(__file__).resolve().parent / "results" / "suite_time.json"
OUTCOMES = ("passed", "skipped", "failed", "errors", "xfailed", "xpassed", "deselected", "warnings")
SLOWEST = 30        # the slowest tests (setup, call or teardown phases) kept from pytest's --durations table
XVFB = ["xvfb-run", "-a", "-s", "-screen 0 1280x1024x24 -noreset"]      # the Makefile's test target


def summary_counts(output: str) -> dict[str, int]:
    """The counts of pytest's last summary line (``== 4667 passed, 52 skipped, 3 warnings in 532.10s ==``):
    ``{"passed": 4667, "skipped": 52, ...}`` for each outcome in :data:`OUTCOMES` (``error`` counted as
    ``errors``), 0 for an outcome the line does not name. No summary line: ValueError."""
    summary = re.compile(r"^(=+ )?\d+ \w+.* in [\d.]+s( \([\d:]+\))?( =+)?$")
    lines = [line for line in output.splitlines() if summary.match(line)]
    if not lines:
        raise ValueError("pytest printed no summary line (`== N passed ... in S s ==`): see its output")
    found = {("errors" if word in ("error", "errors") else "warnings" if word == "warning" else word): int(n)
             for n, word in re.findall(r"(\d+) (\w+)", lines[-1])}
    return {outcome: found.get(outcome, 0) for outcome in OUTCOMES}


def slowest(output: str, keep: int = SLOWEST) -> list[dict]:
    """The first ``keep`` rows of pytest's ``--durations`` table (``12.34s call     tests/x.py::test_y``), slowest
    first: ``[{"seconds", "phase", "test"}]``."""
    rows = re.findall(r"^([\d.]+)s (setup|call|teardown) +(\S.*)$", output, flags=re.MULTILINE)
    return [{"seconds": float(s), "phase": phase, "test": test} for s, phase, test in rows[:keep]]


def command(workers: int, select: list[str]) -> list[str]:
    """The pytest command ``make test`` runs (``-n workers``; 0: one process), with ``--durations`` and
    ``select`` appended, under ``xvfb-run`` where it is installed (else the display tests skip, as there)."""
    pytest = [sys.executable, "-m", "pytest", "-n", str(workers), "-p", "no:cacheprovider",
              f"--durations={SLOWEST}", *select]
    return (XVFB if shutil.which("xvfb-run") else []) + pytest


def run(workers: int, select: list[str]) -> dict:
    """One run of :func:`command` from the repository's root: its counts, slowest tests, wall and CPU seconds,
    the load average around it and its exit code."""
    cmd = command(workers, select)
    load_before, cpu_before, start = os.getloadavg(), resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    wall, cpu_after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    try:
        counts = summary_counts(proc.stdout)
    except ValueError:          # a usage error or a crash before the summary: its last line, not a traceback
        lines = (proc.stderr.strip() or proc.stdout.strip() or "nothing").splitlines()
        said = [line for line in lines if "error" in line.lower()][-1:] or lines[-1:]
        print(f"suite_time.py: `{shlex.join(cmd)}` exited {proc.returncode} without pytest's summary line "
              f"(check --select); it said: {said[0].strip()}", file=sys.stderr)
        raise SystemExit(2) from None
    return {"command": shlex.join(cmd), "exit_code": proc.returncode, "workers": workers, "counts": counts,
            "wall_seconds": round(wall, 1), "cpu_seconds": round(cpu, 1),
            "load_average_1min_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
            "slowest": slowest(proc.stdout)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers (default 2, as make test)")
    parser.add_argument("--select", default="", help="pytest arguments choosing part of the suite (paths, -k, -m); "
                                                     "the result then goes to a temporary file unless --out")
    parser.add_argument("--out", type=Path, help=f"results JSON (default bench/results/{RESULTS.name})")
    args = parser.parse_args()
    select = shlex.split(args.select)
    out = out_path(args.out, RESULTS, smoke=bool(select))
    result = {"provenance": provenance(1, ("numpy", "torch", "pytest", "pytest-xdist")),
              "threads_note": "one torch thread per xdist worker (tests/conftest.py); OMP_NUM_THREADS as inherited: "
                              f"{os.environ.get('OMP_NUM_THREADS')}",
              "selection": select or "the whole suite (pyproject.toml's testpaths)", **run(args.workers, select)}
    save_json(out, result)
    print(f"suite: {result['counts']['passed']} passed, {result['counts']['skipped']} skipped, "
          f"{result['counts']['failed']} failed in {result['wall_seconds']} s wall, {result['cpu_seconds']} s CPU "
          f"(exit {result['exit_code']}) -> {out}")
    return result["exit_code"]


if __name__ == "__main__":
    raise SystemExit(main())
