"""Tests of pointgeope/engine/retrain.py: a refusal that --force ends carries its fold folder, and train writes it
into the note a caller asked for (POINTGEOPE_RETRAIN_NOTE), nothing otherwise."""
from __future__ import annotations

import json

import pytest

from pointgeope.cli import main as cli
from pointgeope.engine.checkpoint import CheckpointDenied, CheckpointError
from pointgeope.engine.retrain import (
    RETRAIN_NOTE,
    note_retrain,
    read_retrain_note,
    retrain_from_scratch,
)
from pointgeope.errors import UserError
from tests.engine.conftest import ablate_args


def test_a_marked_refusal_is_noted_where_asked_and_nothing_else_is(tmp_path, monkeypatch):
    note = tmp_path / "note.json"
    marked = retrain_from_scratch(FloatingPointError("diverged"), tmp_path / "run" / "area_1")
    note_retrain(marked)                                        # no note asked for: nothing written
    assert not note.exists()
    monkeypatch.setenv(RETRAIN_NOTE, str(note))
    note_retrain(UserError("a bad config key"))                 # not marked: nothing written
    assert not note.exists() and read_retrain_note(note) is None
    note_retrain(marked)
    assert json.loads(note.read_text()) == {"fold_folder": str(tmp_path / "run" / "area_1")}
    assert read_retrain_note(note) == tmp_path / "run" / "area_1"


def test_a_checkpoint_this_user_may_not_read_is_never_marked(tmp_path, monkeypatch):
    """Its fold may be sound: deleting it is no way out (its permissions are)."""
    monkeypatch.setenv(RETRAIN_NOTE, str(tmp_path / "note.json"))
    denied = retrain_from_scratch(CheckpointDenied("Permission denied: x"), tmp_path / "area_1")
    note_retrain(denied)
    assert not hasattr(denied, "retrain_folder") and not (tmp_path / "note.json").exists()
    assert retrain_from_scratch(CheckpointError("damaged"), tmp_path / "area_1").retrain_folder == tmp_path / "area_1"


def test_a_note_that_is_not_one_reads_as_none(tmp_path):
    for text in ("", "[1]", '{"fold_folder": 3}', "{"):
        (tmp_path / "note.json").write_text(text)
        assert read_retrain_note(tmp_path / "note.json") is None


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_folder_where_ablate_puts_a_trials_note_is_one_line_before_any_training(two_folds, tmp_path, capsys, jobs):
    """``RUN/<preset>/seed_<s>/.retrain.json`` a folder: removing an earlier attempt's note there ended ablate
    with a traceback (IsADirectoryError), with --jobs 2 while the other trial trained. Now it is refused
    before any trial starts, naming it; nothing in the run folder is touched."""
    run = tmp_path / "abl"
    (run / "rpe" / "seed_1" / ".retrain.json").mkdir(parents=True)
    (run / "rpe" / "seed_1" / ".retrain.json" / "kept.txt").write_text("mine")
    assert cli(ablate_args(two_folds, run, presets=("rpe",), seeds=("0", "1"), jobs=jobs)) == 2
    captured = capsys.readouterr()
    note = run / "rpe" / "seed_1" / ".retrain.json"
    assert captured.err.strip().splitlines() == [
        f"pointgeope ablate: error: {note}: expected no folder there: ablate writes each trial's retrain note at "
        "that path (a file it makes and removes); move the folder elsewhere"]
    assert (note / "kept.txt").read_text() == "mine"
    assert not (run / "rpe" / "seed_0").exists()            # no trial started


@pytest.mark.parametrize("kind", ["log folder", "trial file", "preset file"])
def test_a_path_ablate_writes_a_trial_in_that_is_taken_is_one_line_before_any_training(two_folds, tmp_path, capsys,
                                                                                        kind):
    """``RUN/<preset>/seed_<s>/train.log`` a folder (each attempt appends the trial's output to that file), or the
    trial's folder, or its preset's, a file: ablate trained the trials before it, then ended in a traceback from
    the trial's thread (IsADirectoryError, FileExistsError). Now it is one line naming the path before any trial
    starts, exit code 2, and the path is left as it was."""
    run = tmp_path / "abl"
    (run / "rpe").mkdir(parents=True)
    taken, line = {
        "log folder": (run / "rpe" / "seed_1" / "train.log", "expected no folder there: ablate appends the output of "
                       "each of the trial's attempts to that file; move the folder elsewhere"),
        "trial file": (run / "rpe" / "seed_1", "expected a folder (ablate writes the trial rpe seed 1 in "
                       f"{run / 'rpe' / 'seed_1'}), found a file; move it elsewhere"),
        "preset file": (run / "rpe", f"expected a folder (ablate writes the trial rpe seed 0 in "
                        f"{run / 'rpe' / 'seed_0'}), found a file; move it elsewhere")}[kind]
    if kind == "log folder":
        taken.mkdir(parents=True)
    else:
        if kind == "preset file":
            (run / "rpe").rmdir()
        taken.write_text("mine")
    assert cli(ablate_args(two_folds, run, presets=("rpe",), seeds=("0", "1"))) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"pointgeope ablate: error: {taken}: {line}"]
    assert taken.is_dir() if kind == "log folder" else taken.read_text() == "mine"
    assert not (run / "rpe" / "seed_0" / "area_1").exists()     # no trial started


@pytest.mark.parametrize("kind", ["to nothing", "to itself"])
def test_a_trial_log_that_is_a_link_to_nothing_is_one_line_before_any_training(two_folds, tmp_path, capsys, kind):
    """``RUN/<preset>/seed_<s>/train.log`` a link to a missing folder's file, or to itself: the append of the trial's
    output could not open it, a ``FileNotFoundError`` (or ``ELOOP``) traceback once the trials before it trained."""
    run = tmp_path / "abl"
    log = run / "rpe" / "seed_1" / "train.log"
    log.parent.mkdir(parents=True)
    log.symlink_to(tmp_path / "gone" / "train.log" if kind == "to nothing" else log)
    assert cli(ablate_args(two_folds, run, presets=("rpe",), seeds=("0", "1"))) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"pointgeope ablate: error: {log}: expected the trial's output file or nothing there, found a link to "
        "nothing: ablate appends the output of each of the trial's attempts to that file; remove the link"]
    assert log.is_symlink() and not (run / "rpe" / "seed_0" / "area_1").exists()     # no trial started


@pytest.mark.parametrize("kind", ["link to nothing", "file above"])
def test_a_report_folder_that_cannot_be_one_is_one_line_before_any_training(two_folds, tmp_path, capsys, kind):
    """``RUN/report/fold_K`` a link to nothing (or ``RUN/report`` a file): the report written after the trials
    trained ended in a ``FileExistsError`` traceback from its ``mkdir``."""
    run = tmp_path / "abl"
    out = run / "report" / "fold_1"
    if kind == "link to nothing":
        out.parent.mkdir(parents=True)
        out.symlink_to(tmp_path / "gone")
        found = f"a symbolic link to nothing ({out} -> {tmp_path / 'gone'})"
    else:
        run.mkdir()
        (run / "report").write_text("mine")
        out, found = run / "report", "a file"
    assert cli(ablate_args(two_folds, run, presets=("rpe",), seeds=("0",))) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"pointgeope ablate: error: the ablation's report folder {out}: expected a folder, found {found}; remove it "
        "or give another folder name"]
    assert not (run / "rpe").exists()     # no trial started
