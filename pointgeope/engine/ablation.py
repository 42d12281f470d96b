"""``pointgeope ablate``: one short training per (positional encoding, seed) on one fold, then one report.

Every trial is ``pointgeope train --config CONFIG --test-area K`` with ``model.pe=<preset>``,
``train.seed=<seed>`` and its own run folder, in a child process (``jobs`` at a time), on the same prepared
data; the report (:func:`pointgeope.report.seeds.write_trials`, which the command hands in) gives each preset's mean and
spread over the seeds::

    RUN/<preset>/seed_<s>/area_K/      the trial's fold folder (checkpoints, metrics.json, log.txt)
    RUN/<preset>/seed_<s>/train.log    the trial's output (appended by every attempt)
    RUN/report/fold_K/ablation.md|json|csv    mean ± std (min–max) per preset, differences, every seed

A trial folder may hold other folds (an ablation of another fold into the same RUN, a ``train --cv``): the
report scores ``area_K`` alone, and each fold's report has its own folder, so an ablation of fold 2 leaves
fold 1's report as it was.

Everything is checked before the first trial starts (each trial's config, the fold, the data folder, a saved
trial trained with other settings, on other data or for another fold, which train would refuse:
:mod:`~pointgeope.engine.ablation_reuse`), so a
mistake costs seconds. A rerun of the same command skips complete trials and resumes interrupted ones from
their ``last.pt`` (``pointgeope train`` does both); a failed trial is named with its log and left out of
the report, which says so, and so is a trial whose saved result is stale: complete, but trained or tested
with other settings than this command's (a rerun with other overrides; :func:`stale`, against each trial's
config as resolved before the trials ran), so that the report's header, which states the command's
settings, holds for every number under it; a result that records no settings (an older run's) is scored
with the note that it was not checked. Ctrl-C or SIGTERM stops
the running trials as Ctrl-C stops a training (ablate sends each SIGTERM, which stops it even where SIGINT was
inherited ignored; each keeps its ``last.pt``; the rerun resumes it) and starts no other; so does
``kill -9`` of ablate on Linux (each trial is sent SIGTERM when it dies, ``PR_SET_PDEATHSIG``). One
ablation at a time per RUN (``RUN/.lock``). With ``jobs`` > 1 and no
``train.threads`` given, each trial gets ``cpu_count // jobs`` threads (two OpenMP threads per process on
a machine whose cores are all taken stall badly).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from pointgeope.constants import fold_folder_name
from pointgeope.data.folds import fold_of, load_folds
from pointgeope.engine.ablation_reuse import TRIAL_LOG, check_reuse, check_run_dir, check_trial_folders, other_trials
from pointgeope.engine.config import config_to_dict, load_config, override_key
from pointgeope.engine.retrain import RETRAIN_NOTE, note_path, read_retrain_note
from pointgeope.errors import UserError
from pointgeope.lock import folder_lock
from pointgeope.parent_death import death_signal_request
from pointgeope.paths import inside
from pointgeope.plural import agreeing, counted

__all__ = ["Trial", "plan", "stale", "ablate"]

# What the ablation sets per trial; the user's overrides may not set them too.
OWN_KEYS = ("model.pe", "train.seed", "train.run_dir")


@dataclass(frozen=True)
class Trial:
    """One training of the ablation: ``preset`` with ``seed``, in ``folder`` (``RUN/<preset>/seed_<s>``);
    ``config``: its resolved config (plain dict), read once by :func:`plan` before any trial runs."""
    preset: str
    seed: int
    folder: Path
    config: dict = field(default_factory=dict, compare=False, repr=False)
    threads: int | None = None  # its own train.threads (a resume's, :func:`_resume_threads`), else the common one

    @property
    def name(self) -> str:
        return f"{self.preset} seed {self.seed}"

    def overrides(self, common: list[str]) -> list[str]:
        if self.threads is not None:
            common = [o for o in common if override_key(o) != "train.threads"] + [f"train.threads={self.threads}"]
        return list(common) + [f"model.pe={self.preset}", f"train.seed={self.seed}", f"train.run_dir={self.folder}"]


def plan(config: Path, presets: list[str], seeds: list[int], test_area: int, run_dir: Path,
         overrides: list[str], jobs: int) -> tuple[list[Trial], list[str]]:
    """The trials, in order (presets outer, seeds inner), each with its resolved config, and the overrides
    common to them; raises a :class:`UserError` for anything that would make a trial fail at its start."""
    for what, values in (("--presets", presets), ("--seeds", seeds)):
        if not values or len(set(values)) != len(values):
            raise UserError(f"{what}: expected distinct values, got {' '.join(map(str, values)) or 'none'}")
    if jobs < 1:
        raise UserError(f"--jobs: expected at least 1, got {jobs}")
    for text in overrides:
        key = override_key(text)
        if key in OWN_KEYS:
            raise UserError(f"override {text!r}: the ablation sets {key} for each trial (--presets, --seeds, "
                            "--run-dir); leave it out")
    check_run_dir(run_dir)
    common = list(overrides)
    cfg = load_config(config, common, presets)     # the encodings' own keys against each preset, not model.pe
    if why := _unknown_preset(cfg, presets):
        raise UserError(why)
    threads = cfg.train.threads  # the user's, else (jobs > 1) a share of the cores, else torch's default (None)
    if jobs > 1 and cfg.train.threads is None:
        threads = max(1, (os.cpu_count() or 1) // jobs)
        common.append(f"train.threads={threads}")
        print(f"{counted(jobs, 'trial')} at a time: train.threads={threads} each (give train.threads=N to choose)",
              flush=True)
    fold = fold_of(load_folds(cfg.data.root), test_area, cfg.data.root)
    trials = [Trial(p, s, inside(run_dir, run_dir / p / f"seed_{s}", f"--presets {p}", "--run-dir"))
              for p in presets for s in seeds]
    check_trial_folders(trials)  # where ablate writes a trial's log and note: no file or folder of the user's
    trials = _resume_threads(trials, test_area, threads, cfg.train.threads is not None)
    # each trial's config, checked (e.g. an unknown preset, named) and kept: what its saved result is compared
    # with after the trials ran (stale), whatever happens to the config file meanwhile
    trials = [replace(t, config=config_to_dict(load_config(config, t.overrides(common)))) for t in trials]
    check_reuse(trials, test_area, run_dir, fold)   # a saved trial of other settings or data: train would refuse it
    return trials, common


def _resume_threads(trials: list[Trial], test_area: int, threads: int | None, chosen: bool) -> list[Trial]:
    """The trials, each that will resume from a ``last.pt`` written with another number of torch CPU threads
    than ``threads`` (this command's ``train.threads``; ``None``: torch's default) given that number instead
    (CPU kernels sum in another order with another count, so the resume would not end as an uninterrupted
    run: a rerun with another ``--jobs``), unless the user ``chosen`` ``train.threads``; either way said
    here, in ablate's output, one line a trial (the trial's log says it too)."""
    import torch

    now = threads if threads is not None else torch.get_num_threads()
    out = []
    for trial in trials:
        last = trial.folder / fold_folder_name(test_area) / "last.pt"
        saved = _saved_threads(last)
        if saved is None or saved == now:
            out.append(trial)
        elif chosen:
            print(f"warning: {trial.name} resumes from {last}, written with {counted(saved, 'torch CPU thread')}, with "
                  f"train.threads={now}: its results will differ from an uninterrupted run (train.threads={saved} "
                  "matches)", flush=True)
            out.append(trial)
        else:
            print(f"{trial.name}: resumes with train.threads={saved}, the thread count its {last} was written "
                  f"with (not {now}), so that it ends as an uninterrupted run would", flush=True)
            out.append(replace(trial, threads=saved))
    return out


def _threads_line(trials: list[Trial], test_area: int) -> str:
    """The sentence of the report's header naming the torch CPU threads the reported ``trials`` were trained
    with, from each one's ``last.pt`` (the scores depend on the count; ``train.threads`` need not be among the
    overrides, and a trial complete from an earlier run may have had another)."""
    from pointgeope.engine.trained_threads import saved_threads, threads_text

    counts = [saved_threads(t.folder / fold_folder_name(test_area) / "last.pt") for t in trials]
    return f"Trained with {threads_text(counts, 'trials')}. " if counts else ""


def _saved_threads(last: Path) -> int | None:
    """The torch CPU threads that ``last`` (a trial's ``last.pt``) was written with, where a rerun resumes
    from it (its fold is not complete); ``None`` where it will not, or the file does not say."""
    from pointgeope.engine.fold_result import complete_fold_metrics
    from pointgeope.engine.trained_threads import saved_threads

    if not last.is_file() or complete_fold_metrics(last.parent) is not None:
        return None
    return saved_threads(last)  # an unreadable one: None (the trial names it)


def _unknown_preset(cfg, presets: list[str]) -> str | None:
    """The line for the first of ``presets`` that is not an encoding of the config's backbone (named as
    ``--presets``, which the user typed, not as the ``model.pe`` override each trial gets), ``None`` if none."""
    from pointgeope.engine.config_values import encodings_of

    own, backbone = encodings_of(cfg.model.backbone), cfg.model.backbone
    other = "ptv1" if backbone == "ptv3" else "ptv3"
    for preset in presets:
        if preset not in own:
            what = (f"a {other.replace('pt', 'PT')} encoding, but model.backbone={backbone}"
                    if preset in encodings_of(other) else f"not a positional encoding of model.backbone={backbone}")
            return f"--presets: {preset!r} is {what}; expected one of {', '.join(own)}"
    return None


STOP_TIMEOUT_S = 60  # a trial stopped with SIGTERM that has not ended by then is killed
# How ablate stops a trial, on its stop and at its death: SIGTERM, which every command turns into the clean stop
# of Ctrl-C (errors.run_command) whatever disposition it inherited. Not SIGINT: a process started in the
# background by a non-interactive shell (`cmd &` in a job script) inherits SIGINT ignored, and so would its
# trials, which then went on training, orphaned, holding their fold locks.
STOP_SIGNAL = signal.SIGTERM


class _Running:
    """The trials' processes while they run, each in its own session (so that a Ctrl-C at the terminal
    reaches ablate alone, which stops them once) and bound to ablate's life (sent :data:`STOP_SIGNAL`, a
    training's clean stop: its lock released, its ``last.pt`` kept, when the thread of ablate that started it
    ends, even by ``kill -9``: :func:`~pointgeope.parent_death.death_signal_request`), and their stop."""

    def __init__(self):
        self.lock, self.procs, self.stopped = threading.Lock(), set(), False

    def run(self, argv: list[str], log, env: dict[str, str] | None = None) -> int | None:
        """The exit code of ``argv`` run to its end (in ``env``, default this process's environment), or
        ``None`` when the trials were stopped before."""
        with self.lock:
            if self.stopped:
                return None
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                    start_new_session=True, preexec_fn=death_signal_request(STOP_SIGNAL))  # noqa: PLW1509 - prctl only
            self.procs.add(proc)
        code = proc.wait()
        with self.lock:
            self.procs.discard(proc)
        return code

    def stop(self) -> None:
        """Start no other trial; stop each running one as Ctrl-C stops a training (:data:`STOP_SIGNAL`: its
        lock released, its last.pt kept), killing one that has not ended after :data:`STOP_TIMEOUT_S`."""
        with self.lock:
            self.stopped, procs = True, list(self.procs)
        for proc in procs:
            proc.send_signal(STOP_SIGNAL)
        for proc in procs:
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _run(trial: Trial, argv: list[str], running: _Running, test_area: int) -> int | None:
    """Run one trial's ``pointgeope train`` (``argv``), its output appended to ``folder/train.log``; prints
    how it ended, returns its exit code (``None``: not started, the trials were stopped). A refusal whose way
    out is train's ``--force``, which ablate does not have, is followed by ablate's way to it: the fold folder
    that train names in its note (:mod:`~pointgeope.engine.retrain`, ``folder/.retrain.json`` for the
    attempt), deleted."""
    trial.folder.mkdir(parents=True, exist_ok=True)
    note = note_path(trial.folder)
    note.unlink(missing_ok=True)    # an earlier attempt's
    start = time.perf_counter()
    with open(trial.folder / TRIAL_LOG, "a", encoding="utf-8") as log:
        log.write(f"$ {' '.join(argv)}\n")
        log.flush()
        start_of_attempt = log.tell()
        code = running.run(argv, log, {**os.environ, RETRAIN_NOTE: str(note)})
    if code is None:
        return None
    why = _failure(trial.folder / TRIAL_LOG, start_of_attempt) if code else ""
    if code and (fold := read_retrain_note(note)) is not None:
        why += f" (ablate has no --force: delete {fold} to train the trial again)"
    note.unlink(missing_ok=True)
    state = "done" if code == 0 else f"FAILED (exit code {code}): {why}"
    print(f"{trial.name}: {state} in {time.perf_counter() - start:.0f} s ({trial.folder / TRIAL_LOG})", flush=True)
    return code


def _failure(path: Path, start: int) -> str:
    """Why the attempt whose output begins at byte ``start`` of ``path`` failed: its ``pointgeope train:
    error:`` line (another process still writing to the same log, a trial of an ablation killed before,
    cannot pass its progress off as the failure), else its last line."""
    with open(path, "rb") as f:
        f.seek(start)
        lines = [line.strip() for line in f.read().decode("utf-8", errors="replace").splitlines() if line.strip()]
    said = [line for line in lines if line.startswith("pointgeope train: ")]
    return (said or lines or [""])[-1]


def _run_all(trials: list[Trial], argvs: list[list[str]], jobs: int, test_area: int) -> list[int]:
    """Each trial's exit code, ``jobs`` at a time; Ctrl-C or SIGTERM stops the running ones and starts no
    other (:class:`_Running`), then goes on up (one line, exit code 130 or 143: ``run_command``)."""
    running = _Running()
    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        return list(pool.map(lambda job: _run(*job, running, test_area), zip(trials, argvs, strict=True)))
    except BaseException:
        running.stop()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def stale(trial: Trial, test_area: int) -> str | None:
    """Why the trial's saved result of fold ``test_area`` is not one of this command's, ``""`` when it is,
    ``None`` when that cannot be told. Its settings are those its ``metrics.json`` records, else (written
    before evaluate recorded them) the fold's training's (:func:`~pointgeope.engine.checkpoint.fold_config`:
    its ``config.yaml``, else its checkpoint's; its test's ``eval.*`` are then not known); compared with
    :attr:`Trial.config` (resolved before the trials ran) by the rules a rerun of ``train`` applies
    (:func:`~pointgeope.engine.config_diff.config_differences` for the keys that must match, as a resume checks
    them; :func:`~pointgeope.engine.checkpoint.untested_eval` for the ``eval.*`` keys that ``train`` does not
    apply to a complete fold). ``""`` also where the fold has no readable ``metrics.json`` (the report names
    the trial missing); ``None`` where neither it nor the fold's ``config.yaml`` or checkpoints record a
    config."""
    from pointgeope import json_text
    from pointgeope.engine.checkpoint import fold_config, untested_eval
    from pointgeope.engine.config_diff import config_differences, describe_differences

    folder = trial.folder / fold_folder_name(test_area)
    try:
        tested = json_text.loads((folder / "metrics.json").read_text(encoding="utf-8")).get("config")
    except (OSError, ValueError, AttributeError):
        return ""
    trained = tested
    if not isinstance(tested, dict):
        try:
            trained = config_to_dict(fold_config(folder, log=lambda line: None))
        except UserError:       # neither config.yaml nor a readable checkpoint, or one of an unknown version
            return None
    diff = config_differences(trained, trial.config)
    if diff:
        return f"stale: trained with other settings ({describe_differences(diff, 'it used')})"
    note = untested_eval(folder, tested, trial.config) if isinstance(tested, dict) else ""
    return f"stale: {note}" if note else ""


NOT_CHECKED = ("not checked: its metrics.json, config.yaml and checkpoints record no config (written by an older "
               "pointgeope), so whether it used this command's settings is unknown")


UNFINISHED = ("not finished: stopped before its last epoch (train.epochs_per_run), its last.pt kept; rerun the same "
              "command to continue it")


def _left_out(trials: list[Trial], codes: list[int], test_area: int) -> tuple[dict, dict]:
    """``({(preset, seed): why}, {(preset, seed): note})``: the trials the report must not score (failed
    ones, unfinished ones: a training that ended well before its last epoch, stale ones), and those it scores
    with a note (their settings could not be checked)."""
    from pointgeope.engine.fold_result import complete_fold_metrics

    out, notes = {}, {}
    for trial, code in zip(trials, codes, strict=True):
        fold = trial.folder / fold_folder_name(test_area)
        unfinished = not code and (fold / "last.pt").is_file() and complete_fold_metrics(fold) is None
        why = (f"failed (exit code {code}), see its train.log" if code
               else UNFINISHED if unfinished else stale(trial, test_area))
        if why is None:
            notes[(trial.preset, trial.seed)] = NOT_CHECKED
        elif why:
            out[(trial.preset, trial.seed)] = why
    return out, notes


Report = Callable[[list[tuple[str, int, Path]], str, dict, dict], object]


def ablate(config: Path, presets: list[str], seeds: list[int], test_area: int, run_dir: Path,
           overrides: list[str], report: Report, jobs: int = 1, command: str = "") -> int:
    """``pointgeope ablate``: run the trials (``jobs`` at a time), then, still holding the run's lock,
    ``report([(preset, seed, folder) of every trial], header, left_out, notes)`` (the header names
    ``command``; ``left_out``: ``{(preset, seed): why}`` of the failed, unfinished and stale trials;
    ``notes``: the same of the trials scored whose settings could not be checked; the report layer writes
    ``RUN/report/fold_K``). Returns 0 when every trial completed with this command's settings, 1 when some
    failed, are unfinished (``train.epochs_per_run``) or stale (the report covers the others and names them);
    when every trial is unfinished there is nothing to score: no report, 1 (the rerun continues them)."""
    trials, common = plan(config, presets, seeds, test_area, run_dir, overrides, jobs)
    with folder_lock(run_dir, command or " ".join(sys.argv)):
        print(f"{counted(len(trials), 'trial')} ({counted(len(presets), 'preset')} x {counted(len(seeds), 'seed')}) "
              f"of fold {test_area}, {jobs} at a time, in {run_dir}", flush=True)
        start = time.perf_counter()
        train = [sys.executable, "-m", "pointgeope", "train", "--config", str(config), "--test-area", str(test_area)]
        codes = _run_all(trials, [train + t.overrides(common) for t in trials], jobs, test_area)
        minutes = (time.perf_counter() - start) / 60
        left_out, notes = _left_out(trials, codes, test_area)
        others = other_trials(trials, test_area, run_dir)
        if others:
            print(f"{run_dir} also holds trials of fold {test_area} outside this command's grid, not in its report: "
                  f"{', '.join(others)}", flush=True)
        header = (f"# Ablation: {', '.join(presets)} x seeds {', '.join(map(str, seeds))}, fold {test_area}\n\n"
                  + (f"Command: `{command}`\n\n" if command else "")
                  + f"Config `{config}` with `{' '.join(common) or 'no overrides'}`; this invocation took "
                  f"{minutes:.1f} min (wall, {counted(jobs, 'trial')} at a time; trials already complete are "
                  "skipped). "
                  + "".join(f"{t.name} resumed with train.threads={t.threads}, its last.pt's. " for t in trials
                            if t.threads is not None)
                  + _threads_line([t for t in trials if (t.preset, t.seed) not in left_out], test_area)
                  + (f"Not reported (trials of another grid in this folder): {', '.join(others)}. " if others else "")
                  + "Scores pooled over the fold's test area; mean ± sample std (min–max) over the seeds, %.\n\n")
        unfinished = [t.name for t in trials if left_out.get((t.preset, t.seed)) == UNFINISHED]
        if len(unfinished) < len(trials):     # every trial unfinished (epochs_per_run): nothing to score yet
            report([(t.preset, t.seed, t.folder) for t in trials], header, left_out, notes)
    failed = [t.name for t, code in zip(trials, codes, strict=True) if code != 0]
    if n := len(failed):
        print(f"{counted(n, 'trial')} failed: {', '.join(failed)}; see {agreeing(n, 'its', 'their')} train.log, "
              f"rerun the same command to retry {agreeing(n, 'it', 'them')}", file=sys.stderr)
    if n := len(unfinished):
        print(f"{counted(n, 'trial')} stopped before {agreeing(n, 'its', 'their')} last epoch (train.epochs_per_run): "
              f"{', '.join(unfinished)}; rerun the same command to continue {agreeing(n, 'it', 'them')}"
              + ("; no report until one finishes" if len(unfinished) == len(trials) else ""), file=sys.stderr)
    old = [t.name for t, code in zip(trials, codes, strict=True)
           if code == 0 and (t.preset, t.seed) in left_out and t.name not in unfinished]
    if old:
        said = agreeing(len(old), "its saved result is", "their saved results are")
        print(f"{counted(len(old), 'trial')} not reported, {said} stale: {', '.join(old)}; the report's "
              "notes name the settings and the command that tests them with this command's", file=sys.stderr)
    if notes:
        said = agreeing(len(notes), "its settings, its saved result records",
                        "their settings, their saved results record")
        print(f"{counted(len(notes), 'trial')} reported without a check of {said} none: "
              f"{', '.join(f'{p} seed {s}' for p, s in notes)}", file=sys.stderr)
    return 1 if failed or old or unfinished else 0
