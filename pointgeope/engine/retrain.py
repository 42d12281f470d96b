"""A refusal of ``train`` whose way out is to train the fold again from scratch (its ``--force``), with the fold
folder that ``--force`` clears carried as data, so that a caller in another process acts on it without reading
the message: ``ablate``, which has no ``--force``, names the folder to delete.

The errors of that kind (a fold complete with another config or without its ``last.pt``, a checkpoint trained
on other data or for another fold, a folder in the place of a checkpoint, a run that diverged) are marked where
they are raised (:func:`retrain_from_scratch`: ``err.retrain_folder``, the fold folder). ``train`` run with
the environment variable :data:`RETRAIN_NOTE` naming a file (ablate sets it for each trial) writes there,
when such an error ends it (:func:`note_retrain`)::

    {"fold_folder": "RUN/rpe/seed_0/area_1"}

and the caller reads it after the process ended (:func:`read_retrain_note`). Without the variable nothing is
written: a user's ``train`` says ``--force`` in its line, as ever.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from pointgeope import json_text
from pointgeope.atomic import write_text_atomic
from pointgeope.errors import UserError

__all__ = ["RETRAIN_NOTE", "note_path", "note_retrain", "read_retrain_note", "retrain_from_scratch"]

RETRAIN_NOTE = "POINTGEOPE_RETRAIN_NOTE"  # the file that train writes the fold folder of such a refusal into
NOTE_NAME = ".retrain.json"  # where ablate asks for it: in each trial's folder


def note_path(trial_folder: str | Path) -> Path:
    """The note ablate asks a trial's ``train`` for, ``trial_folder/.retrain.json`` (absolute: train runs
    elsewhere), which ablate removes before each attempt and after reading it.

    Raises:
        UserError: a folder there (not a link to one: removing a link is harmless), which the removal could not
            take: one line naming it, before any trial starts (:func:`pointgeope.engine.ablation.plan`).
    """
    note = Path(trial_folder).absolute() / NOTE_NAME
    if note.is_dir() and not note.is_symlink():
        raise UserError(f"{note}: expected no folder there: ablate writes each trial's retrain note at that path (a "
                        "file it makes and removes); move the folder elsewhere")
    return note


def retrain_from_scratch(err: BaseException, fold_folder: str | Path) -> BaseException:
    """``err``, marked as a refusal that training ``fold_folder`` again from scratch ends (train's ``--force``
    clears that folder's outputs), for ``raise retrain_from_scratch(UserError(...), run)``; a checkpoint this
    user may not read (:class:`~pointgeope.engine.checkpoint.CheckpointDenied`) is left unmarked: its fold may
    be sound, and its permissions are the way out."""
    from pointgeope.engine.checkpoint import CheckpointDenied  # here: checkpoint imports torch, ablate's parent not

    if not isinstance(err, CheckpointDenied):
        err.retrain_folder = Path(fold_folder)
    return err


def note_retrain(err: BaseException) -> None:
    """Where ``err`` is marked (:func:`retrain_from_scratch`) and :data:`RETRAIN_NOTE` names a file, write the
    fold folder there (atomic); else nothing. A note that cannot be written is passed over: the command's own
    line about ``err`` must not be replaced by one about the note."""
    folder, note = getattr(err, "retrain_folder", None), os.environ.get(RETRAIN_NOTE)
    if folder is None or not note:
        return
    try:
        write_text_atomic(Path(note), json.dumps({"fold_folder": str(folder)}) + "\n")
    except OSError:
        pass


def read_retrain_note(note: Path) -> Path | None:
    """The fold folder that a ``train`` ended by such a refusal wrote into ``note``; ``None`` where there is no
    note (another failure) or it cannot be read."""
    try:
        folder = json_text.loads(note.read_text(encoding="utf-8")).get("fold_folder")
    except (OSError, ValueError, AttributeError):
        return None
    return Path(folder) if isinstance(folder, str) else None
