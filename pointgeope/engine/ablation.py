"""``pointgeope ablate``: one short training per (positional encoding, seed) on one fold, then one report.

Every trial is ``pointgeope train --config CONFIG --test-area K`` with ``model.pe=<preset>``,
``train.seed=<seed>`` and its own run folder, in a child process (``jobs`` at a time), on the same prepared
data; the report (:func:`pointgeope.report.seeds.write_trials`, which the command hands in) gives each preset's mean and spread over the seeds::

    RUN/<preset>/seed_<s>/area_K/      the trial's fold folder (checkpoints, metrics.json, log.txt)
    RUN/<preset>/seed_<s>/train.log    the trial's output (appended by every attempt)
    RUN/report/ablation.md|json|csv    mean ± std (min–max) per preset, differences, every seed

Everything is checked before the first trial starts (each trial's config, the fold, the data folder), so a
mistake costs seconds. A rerun of the same command skips complete trials and resumes interrupted ones from
their ``last.pt`` (``pointgeope train`` does both); a failed trial is named with its log and left out of
the report, which says so. One ablation at a time per RUN (``RUN/.lock``). With ``jobs`` > 1 and no
``train.threads`` given, each trial gets ``cpu_count // jobs`` threads (two OpenMP threads per process on
a machine whose cores are all taken stall badly).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pointgeope.data.folds import load_folds
from pointgeope.engine.config import load_config
from pointgeope.errors import UserError
from pointgeope.lock import folder_lock
from pointgeope.paths import inside

__all__ = ["Trial", "plan", "ablate"]

# What the ablation sets per trial; the user's overrides may not set them too.
OWN_KEYS = ("model.pe", "train.seed", "train.run_dir")


@dataclass(frozen=True)
class Trial:
    """One training of the ablation: ``preset`` with ``seed``, in ``folder`` (``RUN/<preset>/seed_<s>``)."""
    preset: str
    seed: int
    folder: Path

    @property
    def name(self) -> str:
        return f"{self.preset} seed {self.seed}"

    def overrides(self, common: list[str]) -> list[str]:
        return list(common) + [f"model.pe={self.preset}", f"train.seed={self.seed}", f"train.run_dir={self.folder}"]


def plan(config: Path, presets: list[str], seeds: list[int], test_area: int, run_dir: Path,
         overrides: list[str], jobs: int) -> tuple[list[Trial], list[str]]:
    """The trials, in order (presets outer, seeds inner), and the overrides common to them; raises a
    :class:`UserError` for anything that would make a trial fail at its start."""
    for what, values in (("--presets", presets), ("--seeds", seeds)):
        if not values or len(set(values)) != len(values):
            raise UserError(f"{what}: expected distinct values, got {' '.join(map(str, values)) or 'none'}")
    if jobs < 1:
        raise UserError(f"--jobs: expected at least 1, got {jobs}")
    for text in overrides:
        key = text.partition("=")[0].strip()
        if key in OWN_KEYS:
            raise UserError(f"override {text!r}: the ablation sets {key} for each trial (--presets, --seeds, "
                            "--run-dir); leave it out")
    common = list(overrides)
    cfg = load_config(config, common)
    if jobs > 1 and cfg.train.threads is None:
        threads = max(1, (os.cpu_count() or 1) // jobs)
        common.append(f"train.threads={threads}")
        print(f"{jobs} trials at a time: train.threads={threads} each (give train.threads=N to choose)", flush=True)
    folds = load_folds(cfg.data.root)
    if test_area not in folds:
        raise UserError(f"--test-area {test_area}: {Path(cfg.data.root) / 'folds.json'} has folds {sorted(folds)}")
    trials = [Trial(p, s, inside(run_dir, run_dir / p / f"seed_{s}", f"--presets {p}", "--run-dir"))
              for p in presets for s in seeds]
    for trial in trials:
        load_config(config, trial.overrides(common))                    # e.g. an unknown preset, named
    return trials, common


def _run(trial: Trial, argv: list[str]) -> int:
    """Run one trial's ``pointgeope train`` (``argv``), its output appended to ``folder/train.log``; prints
    how it ended, returns its exit code."""
    trial.folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with open(trial.folder / "train.log", "a", encoding="utf-8") as log:
        log.write(f"$ {' '.join(argv)}\n")
        log.flush()
        code = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
    state = "done" if code == 0 else f"FAILED (exit code {code}): {_last_line(trial.folder / 'train.log')}"
    print(f"{trial.name}: {state} in {time.perf_counter() - start:.0f} s ({trial.folder / 'train.log'})", flush=True)
    return code


def _last_line(path: Path) -> str:
    lines = [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


Report = Callable[[list[tuple[str, int, Path]], str], object]


def ablate(config: Path, presets: list[str], seeds: list[int], test_area: int, run_dir: Path,
           overrides: list[str], report: Report, jobs: int = 1, command: str = "") -> int:
    """``pointgeope ablate``: run the trials (``jobs`` at a time), then, still holding the run's lock,
    ``report([(preset, seed, folder) of every trial], header)`` (the header names ``command``; the report
    layer writes ``RUN/report``); 0 when every trial completed, 1 when some failed (the report covers the
    others and names them)."""
    trials, common = plan(config, presets, seeds, test_area, run_dir, overrides, jobs)
    run_dir.mkdir(parents=True, exist_ok=True)
    with folder_lock(run_dir, command or " ".join(sys.argv)):
        print(f"{len(trials)} trials ({len(presets)} presets x {len(seeds)} seeds) of fold {test_area}, "
              f"{jobs} at a time, in {run_dir}", flush=True)
        start = time.perf_counter()
        train = [sys.executable, "-m", "pointgeope", "train", "--config", str(config), "--test-area", str(test_area)]
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            codes = list(pool.map(lambda t: _run(t, train + t.overrides(common)), trials))
        minutes = (time.perf_counter() - start) / 60
        header = (f"# Ablation: {', '.join(presets)} x seeds {', '.join(map(str, seeds))}, fold {test_area}\n\n"
                  + (f"Command: `{command}`\n\n" if command else "")
                  + f"Config `{config}` with `{' '.join(common) or 'no overrides'}`; this invocation took "
                  f"{minutes:.1f} min (wall, {jobs} trial(s) at a time; trials already complete are skipped). "
                  "Scores pooled over the fold's test area; mean ± sample std (min–max) over the seeds, %.\n\n")
        report([(t.preset, t.seed, t.folder) for t in trials], header)
    failed = [t.name for t, code in zip(trials, codes) if code != 0]
    if failed:
        print(f"{len(failed)} trial(s) failed: {', '.join(failed)}; see their train.log, rerun the same "
              "command to retry them", file=sys.stderr)
        return 1
    return 0
