"""What an ablation's run folder holds that ablate cannot use or does not report: another command's outputs
(:func:`check_run_dir`), paths where it cannot write a trial's own files (:func:`check_trial_folders`), saved
trials that ``train`` would refuse (:func:`check_reuse`), trials outside this command's grid (:func:`other_trials`).

A trial's fold folder ``RUN/<preset>/seed_<s>/area_K`` with a ``last.pt`` is resumed (unfinished) or
skipped (complete) by ``pointgeope train`` only when the config ``last.pt`` was written with has no
difference from the trial's (:func:`~pointgeope.engine.config_diff.config_differences`, the keys a resume must
match; free keys such as ``train.threads`` and the ``eval.*`` keys aside). Otherwise train refuses it with
the advice of its own ``--force``, which ``ablate`` does not have: a rerun of an ablation with another
``train.epochs`` started every trial only to see each refused. So does train refuse a fold trained on other
area files than the data folder holds now (prepared again) or for another fold. :func:`check_reuse` says it
once, before any trial starts, with what to do.

An ablation's ``RUN`` holds ``<preset>/seed_<s>/area_K`` and ``report/fold_K``; a ``RUN`` that holds
``area_K/`` itself is a training's run folder (or a trial's), one with ``folds.json``, ``manifest.json`` or an
``Area_N.h5`` a prepared data folder: trials written there mix with that command's outputs, so
:func:`check_run_dir` refuses it.
"""
from __future__ import annotations

import os
from pathlib import Path

from pointgeope.constants import FOLD_NAME, fold_folder_name
from pointgeope.data.folds import Fold
from pointgeope.engine.config_diff import config_differences, describe_differences
from pointgeope.engine.record_keys import predating_note
from pointgeope.engine.retrain import note_path
from pointgeope.errors import UserError
from pointgeope.h5 import prepared_folder_mark
from pointgeope.plural import agreeing, counted, first_of

__all__ = ["TRIAL_LOG", "check_reuse", "check_run_dir", "check_trial_folders", "other_trials"]

TRIAL_LOG = "train.log"  # RUN/<preset>/seed_<s>/train.log: a trial's output, appended to by each attempt


def _saved(last: Path) -> tuple[dict, dict] | None:
    """``(checkpoint, config)`` of ``last`` (a trial's ``last.pt``); ``None`` where there is none or it cannot
    be read (train names that itself). Its tensors are mapped from the file, not read."""
    if not last.is_file():
        return None
    from pointgeope.engine.checkpoint import CheckpointError, checkpoint_config, load_checkpoint  # torch: not
    #                                                               imported by an ablation that has no trial to reuse
    try:
        ckpt = load_checkpoint(last, mmap=True)
        return ckpt, checkpoint_config(ckpt, last)
    except CheckpointError:
        return None


def check_reuse(trials: list, test_area: int, run_dir: Path, fold: Fold | None = None) -> None:
    """Raise a :class:`UserError` naming the ``trials`` (each with ``folder`` and its resolved ``config``)
    whose ``area_<test_area>/last.pt`` was written with settings that differ from the trial's, or (``fold``:
    the test's fold of the data folder) on other area files than the data folder holds now, or for another
    fold, and what to do (another ``--run-dir``, or their fold folders deleted to train them again)."""
    other, saved = [], {}
    for trial in trials:
        folder = trial.folder / fold_folder_name(test_area)
        saved[trial] = _saved(folder / "last.pt")
        diff = config_differences(saved[trial][1], trial.config) if saved[trial] is not None else []
        if diff:
            other.append((trial, folder, diff))
    if not other:
        if fold is not None:
            _check_data(trials, {t: s[0] for t, s in saved.items() if s is not None}, test_area, run_dir, fold)
        return
    trial, _, diff = other[0]
    folds = _listed([fold for _, fold, _ in other])
    raise UserError(f"--run-dir {run_dir}: {len(other)} of the {counted(len(trials), 'trial')} "
                    f"{agreeing(len(other), 'was', 'were')} trained with other settings than this command's "
                    f"({trial.name}: {describe_differences(diff, 'it used')}"
                    f"{predating_note(saved[trial][1], diff)}), and "
                    f"train neither resumes nor reuses such a fold: give another --run-dir, or delete {folds} "
                    f"to train {agreeing(len(other), 'it', 'them')} again with these settings")


def _listed(folders: list[Path]) -> str:
    """The first three ``folders``, then how many more."""
    return first_of(folders, 3, " ")


def _check_data(trials: list, saved: dict, test_area: int, run_dir: Path, fold: Fold) -> None:
    """Refuse the ``trials`` whose ``saved`` checkpoint (``{trial: last.pt's content}``) trained on other area
    files than the trials' ``data.root`` holds now (a data folder prepared again), or for another fold than
    ``fold``, as their ``pointgeope train`` would (:func:`~pointgeope.engine.trained_data.check_data_of`,
    :func:`~pointgeope.engine.fold_record.check_trained_fold`, its notes and warnings unsaid here: the trial
    says them), but before any starts; the area files are hashed once for all of them."""
    if not saved:
        return
    from pointgeope.data.check import area_checksums
    from pointgeope.engine.checkpoint import CheckpointError
    from pointgeope.engine.fold_record import check_trained_fold
    from pointgeope.engine.trained_data import check_data_of, saved_data
    from pointgeope.h5 import area_path

    root = next(iter(saved)).config["data"]["root"]
    areas = list(fold.train + fold.test)
    here = area_checksums(root, [area for area in areas if area_path(root, area).is_file()])
    refused = []
    for trial, ckpt in saved.items():
        last = trial.folder / fold_folder_name(test_area) / "last.pt"
        try:
            now = {area: here.get(area) for area in set(saved_data(ckpt, last) or {}) | set(areas)}
            check_trained_fold(last, ckpt.get("fold"), fold, root, lambda line: None)
            check_data_of(last, ckpt, now, root, lambda line: None)
        except CheckpointError as err:
            refused.append((trial, last.parent, err.problem))   # train's advice (err.advice) is not ablate's
    if refused:
        trial, _, why = refused[0]
        folders = _listed([folder for _, folder, _ in refused])
        one = len(refused) == 1
        raise UserError(f"--run-dir {run_dir}: {len(refused)} of the {counted(len(trials), 'trial')} cannot be "
                        f"resumed or reused on the data folder {root} as it is now ({trial.name}: {why}), and train "
                        f"would refuse {'it' if one else 'each one'}: restore the data {'it' if one else 'they'} "
                        f"trained on, give another --run-dir, or delete {folders} to train {'it' if one else 'them'} "
                        "again on this data")


def check_run_dir(run_dir: Path) -> None:
    """Raise a :class:`UserError` when ``run_dir`` is the output of another command: a training's run folder
    or a trial's (it holds ``area_K/``), or a prepared data folder (:func:`~pointgeope.h5.prepared_folder_mark`)."""
    if not run_dir.is_dir():
        return
    folds = sorted(p.name for p in run_dir.iterdir() if FOLD_NAME.fullmatch(p.name) and p.is_dir())
    if folds:
        what = f"{folds[0]}/, the fold folder of a training (pointgeope train writes RUN/area_K)"
    elif held := prepared_folder_mark(run_dir):
        what = f"{held}, a prepared data folder"
    else:
        return
    raise UserError(f"--run-dir {run_dir}: it holds {what}; an ablation writes RUN/<preset>/seed_<s>/area_K and "
                    "RUN/report/fold_K, which would mix with that: give it a folder of its own, e.g. "
                    f"--run-dir {run_dir.parent / (run_dir.name + '_ablation')}")


def check_trial_folders(trials: list) -> None:
    """Raise a :class:`UserError` naming the first path where ablate cannot write the own files of one of
    ``trials`` (each ``name`` and ``folder``, ``RUN/<preset>/seed_<s>``), before any trial starts (from a trial's
    thread, once the trials before it trained, it was a traceback): its folder, or one above it, a file (ablate
    makes them); :data:`TRIAL_LOG` a folder or a link to nothing (each attempt appends its output to that file:
    a dangling link's append was a ``FileNotFoundError`` traceback); ``.retrain.json`` a
    folder (:func:`~pointgeope.engine.retrain.note_path`)."""
    for trial in trials:
        folder = Path(trial.folder)
        first = next((p for p in (folder, *folder.parents) if os.path.lexists(p)), None)  # the first that exists
        if first is not None and not first.is_dir():
            kind = "a file" if first.is_file() else "a link to nothing" if first.is_symlink() else "no folder"
            raise UserError(f"{first}: expected a folder (ablate writes the trial {trial.name} in {folder}), found "
                            f"{kind}; move it elsewhere")
        if (log := folder / TRIAL_LOG).is_dir():
            raise UserError(f"{log}: expected no folder there: ablate appends the output of each of the trial's "
                            "attempts to that file; move the folder elsewhere")
        if log.is_symlink() and not log.exists():   # to nothing, or to itself: the append could not open it
            raise UserError(f"{log}: expected the trial's output file or nothing there, found a link to nothing: "
                            "ablate appends the output of each of the trial's attempts to that file; remove the link")
        note_path(folder)


def other_trials(trials: list, test_area: int, run_dir: Path) -> list[str]:
    """The names (``<preset> seed <s>``) of the trials in ``run_dir`` with a ``metrics.json`` of fold
    ``test_area`` that are not among ``trials`` (an earlier run of another grid), sorted."""
    mine = {(t.preset, t.seed) for t in trials}
    found = []
    for metrics in run_dir.glob(f"*/seed_*/{fold_folder_name(test_area)}/metrics.json"):
        preset, seed = metrics.parents[2].name, metrics.parents[1].name.removeprefix("seed_")
        if seed.isdigit() and (preset, int(seed)) not in mine:
            found.append((preset, int(seed)))
    return [f"{preset} seed {seed}" for preset, seed in sorted(found)]
