"""Tests of pointgeope/engine/retrain.py: a refusal that --force ends carries its fold folder, and train writes it
into the note a caller asked for (POINTGEOPE_RETRAIN_NOTE), nothing otherwise."""
from __future__ import annotations

import json

from pointgeope.engine.checkpoint import CheckpointDenied, CheckpointError
from pointgeope.engine.retrain import (
    RETRAIN_NOTE,
    note_retrain,
    read_retrain_note,
    retrain_from_scratch,
)
from pointgeope.errors import UserError


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
