"""The folds of one ``pointgeope train``: :func:`train` (the command) runs :func:`run_folds`, which takes each
fold's folder, skips it when it is complete with this config (:func:`~pointgeope.engine.fold_skip.complete_metrics`)
and trains it otherwise (:func:`pointgeope.engine.train.train_fold`), within the invocation's epoch budget
(``train.epochs_per_run``, :class:`EpochBudget`).

This module imports what a fold's skip or refusal needs (torch, to read a ``last.pt``), not the training stack:
:mod:`pointgeope.engine.train` (the model, the data loaders) is imported when a
fold is to be trained, so that a rerun whose folds are complete (each trial of an ablation's rerun is one such
process) or refused says so in about 2.8 CPU s instead of 7 (measured with ``/usr/bin/time`` on the 2-core test
machine).
"""
from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from pointgeope.atomic import writable_folder
from pointgeope.constants import FOLD_NAME, fold_folder_name
from pointgeope.data.folds import fold_of, load_folds
from pointgeope.engine import distributed
from pointgeope.engine.checkpoint import untested_eval
from pointgeope.engine.config import Config, config_to_dict
from pointgeope.engine.fold_lock import fold_folder
from pointgeope.engine.fold_skip import clear_fold, complete_metrics
from pointgeope.engine.retrain import note_retrain
from pointgeope.engine.runio import record_stop
from pointgeope.errors import UserError
from pointgeope.h5 import prepared_folder_mark
from pointgeope.lock import reader_lock
from pointgeope.plural import counted

__all__ = ["EpochBudget", "StopRun", "run_folds", "train"]


class StopRun(Exception):
    """This invocation stops early on purpose (``train.epochs_per_run``); the same command continues it."""


class EpochBudget:
    """The epochs this invocation may still train: ``train.epochs_per_run`` over all its folds (``None``:
    no limit), so that a job sized for N epochs trains N whatever the folds. A fold whose last epoch is
    trained is evaluated in the same invocation (an evaluation is not an epoch).

    ``force``: the invocation has ``--force``, which clears its folds at every start; its stop line says that
    the command *without* ``--force`` continues, since the same command would start the fold again (a
    resubmission loop with ``--force`` in it would never get past its first ``epochs_per_run`` epochs).
    ``--force`` itself keeps its one meaning, "from scratch", whatever stopped the fold before."""

    def __init__(self, epochs: int | None, force: bool = False):
        self.epochs, self.used, self.force = epochs, 0, force

    @property
    def spent(self) -> bool:
        return self.epochs is not None and self.used >= self.epochs

    def spend(self) -> None:
        """One epoch trained."""
        self.used += 1

    def stop(self, log, where: tuple[str, str]) -> None:
        """Say that this invocation stops (``where``: what the same command continues), then stop it."""
        same = ("the same command without --force (with it, the fold starts again) continues" if self.force
                else "the same command continues")
        log(f"stopping {where[0]}: {counted(self.used, 'epoch')} trained in this run "
            f"(train.epochs_per_run={self.epochs}); {same} {where[1]}")
        raise StopRun(where)


def run_folds(cfg: Config, test_area: int | None, env: distributed.DistEnv, force: bool = False) -> list[dict]:
    """One fold, or every fold of ``folds.json`` in order (skipping those complete with this config)."""
    folds = load_folds(cfg.data.root)
    if test_area is not None:
        wanted = [fold_of(folds, test_area, cfg.data.root).index]
    else:
        wanted = list(folds)
    with distributed.refusal_shared():  # before any work: a file, or a folder that cannot be written, is one line
        if env.is_main and (held := prepared_folder_mark(cfg.train.run_dir)):
            raise _data_folder_refusal(Path(cfg.train.run_dir), held)
        if env.is_main:
            writable_folder(cfg.train.run_dir, "run folder (--run-dir, train.run_dir)")
    results, budget, said = [], EpochBudget(cfg.train.epochs_per_run, force), set()
    for fold in wanted:
        run = Path(cfg.train.run_dir) / fold_folder_name(fold)
        with fold_folder(run, env):
            metrics = None if force else complete_metrics(run, cfg, folds[fold], _main_print(env))
            if metrics is not None:
                if env.is_main:
                    note = untested_eval(run, metrics.get("config"), config_to_dict(cfg))
                    print(f"fold {fold}: {run / 'metrics.json'} is complete, skipped" + (f"; {note}" if note else ""),
                          flush=True)
                results.append(metrics)
                continue
            if budget.spent:  # before the fold's set-up: nothing of it is done
                budget.stop(_main_print(env), (f"before fold {fold}", "with it"))
            if force and env.is_main:
                clear_fold(run)
            distributed.barrier()
            from pointgeope.engine.train import train_fold  # the training stack: only where a fold trains

            try:
                with distributed.peer_end_said(env):   # a peer's end (DDP) named in the log too, as PeerEnded
                    results.append(train_fold(cfg, fold, folds, env, budget, said))
            except (FloatingPointError, KeyboardInterrupt, UserError) as err:  # the command says it; the log too
                record_stop(run / "log.txt" if env.is_main and run.is_dir() else None, err)
                raise
    return results


def _data_folder_refusal(run_dir: Path, held: str) -> UserError:
    """The refusal of ``run_dir``, a prepared data folder (it holds ``held``), as a run folder; fold folders
    ``area_K/`` already there (trained into it before it was refused) are named with the command that moves
    them to the folder proposed, where the same command resumes or skips them (a fold's records name no
    run folder)."""
    other = run_dir.parent / (run_dir.name + "_runs")
    line = (f"run folder (--run-dir, train.run_dir) {run_dir}: it holds {held}, a prepared data folder (pointgeope "
            "prepare's output), where the run's area_K/ folders would mix with the data: give the run a folder of "
            f"its own, e.g. --run-dir {other}")
    folds = sorted((p for p in run_dir.iterdir() if FOLD_NAME.fullmatch(p.name) and p.is_dir()),
                   key=lambda p: int(p.name[len("area_"):]))
    if folds:
        names = ", ".join(f"{p.name}/" for p in folds)
        line += (f"; the fold folders trained in it ({names}) are resumed or skipped there once moved: "
                 f"mkdir -p {shlex.quote(str(other))} "
                 f"&& mv {' '.join(shlex.quote(str(p)) for p in folds)} {shlex.quote(str(other))}/")
    return UserError(line)


def _main_print(env: distributed.DistEnv):
    """``print`` on the main process, nothing elsewhere."""
    def say(line: str) -> None:
        if env.is_main:
            print(line, flush=True)
    return say


def train(cfg: Config, test_area: int | None, force: bool = False) -> int:
    """``pointgeope train``: fold ``test_area`` (every fold when ``None``) of ``cfg``; the exit code.
    Under the command line (:func:`pointgeope.errors.run_command`), SIGTERM (a job scheduler's time limit,
    preemption, ``scancel``) stops it as Ctrl-C does: the fold's lock is released and its temporary files
    deleted, so that the requeued job, on whichever node, resumes from ``last.pt``. Under DDP a rank
    stopped inside a training step first ends the step (:func:`distributed.whole_step`), and a rank whose
    peer has ended says so in one line (:class:`distributed.PeerEnded`)."""
    distributed.apply_threads(cfg)
    if os.environ.get("WORLD_SIZE", "1") != "1":
        # under torchrun the training stack is imported before the process group, as it was before skips moved
        # ahead of it, so that exit handlers run in the order tested with distributed's freeing of the gloo
        # groups (with the stack imported later, one rank of 14 test_ddp_stops runs aborted at exit; none in 13
        # with this order): a skip under DDP pays the stack's imports
        import pointgeope.engine.train  # noqa: F401
    env = distributed.setup(cfg.train.device)
    try:
        # under DDP, another rank's end is one line; a prepare into the data root is refused until the end
        with distributed.peer_end_said(env), reader_lock(cfg.data.root):
            results = run_folds(cfg, test_area, env, force=force)
    except StopRun:
        return 0
    except FloatingPointError as err:  # the training diverged: not the input's fault, not a bug either
        if env.is_main:
            note_retrain(err)
        print(f"error: {err}", file=sys.stderr)
        return 1
    except UserError as err:           # a refusal that --force ends is noted for a caller that asked (ablate)
        if env.is_main:
            note_retrain(err)
        raise
    finally:
        distributed.cleanup()
    if env.is_main and len(results) > 1:
        print(f"{len(results)} folds: " + "  ".join(f"{r['area']} miou {r['miou']:.4f}" for r in results))
    return 0
