"""Checkpoints that resume a run exactly and load with ``torch.load(weights_only=True)``.

A checkpoint is a plain dict of tensors, numbers, strings, lists and dicts (nothing that needs pickle's
arbitrary classes), written to a temporary file beside the target and renamed over it, so a run killed
while saving leaves the previous checkpoint intact::

    {"format": "pointgeope-checkpoint", "version": 1,
     "config": {...},                 # the resolved Config as a plain dict
     "model": state_dict, "optimizer": state_dict, "scheduler": state_dict, "scaler": state_dict | None,
     "rng": [one per rank: {"python": [...], "numpy": {...}, "torch": uint8 tensor, "cuda": [...]}],  # rng_states
     "epoch": int, "batch": int, "step": int, "best_miou": float,   # engine.state.LoopState
     "epoch_sums": {...},             # the epoch's running sums (engine.epoch_meter; older files: absent)
     "threads": int,                  # torch CPU threads of the run (a resume with another number warns)
     "trained_on": [{...}],           # the machines it trained on: engine.machine_record (older: absent)
     "predict": {...},                # what `pointgeope predict` needs: engine.prediction_info
     "data": {area: checksum},        # the area files it trained on (older files: absent)
     "data_points": {area: checksum}, # their points alone: pointgeope.checksum.points_checksum (older: absent)
     "data_normals": {area: {...}},   # data.normal runs: the normal estimate read, data.normal_record (else absent)
     "data_normals_earlier": [{...}], # those read before, where a resume found another estimate (else absent)
     "fold": {...}}                   # the fold it trained for: engine.fold_record (older files: absent)

A fold's checkpoints are written and read by :class:`pointgeope.engine.state.FoldCheckpoints` only.

:func:`load_checkpoint` turns every failure (missing, truncated, not a checkpoint, written for another
config) into a :class:`CheckpointError` that names the file; :mod:`pointgeope.engine.weights` checks and loads
its ``"model"`` weights.
"""
from __future__ import annotations

import shlex
from pathlib import Path

import torch

from pointgeope.atomic import atomic_open
from pointgeope.constants import FOLD_NAME
from pointgeope.denied import denied_line
from pointgeope.engine.config_diff import config_differences, describe_differences
from pointgeope.engine.config_yaml import flatten, value_text
from pointgeope.engine.fold_result import train_fold_command
from pointgeope.engine.foreign_checkpoint import POINTCEPT_ADVICE, is_pointcept_checkpoint, pickled_pointcept_checkpoint
from pointgeope.engine.record_keys import as_recorded, predating_note
from pointgeope.errors import UserError
from pointgeope.number_kind import is_whole
from pointgeope.recorded_text import repr_bounded, setting_text
from pointgeope.zip_crc import changed_part

FORMAT = "pointgeope-checkpoint"
VERSION = 1


class CheckpointError(UserError, RuntimeError):
    """A checkpoint file that cannot be used to resume or evaluate this run: ``problem`` (what is wrong), and
    apart from it ``advice`` (what ``train`` or ``evaluate`` would have the user do; ``""``: none), said as
    ``"<problem>; <advice>"``. A caller with other ways to the fix (``ablate``) says ``problem`` with its own."""

    def __init__(self, problem: str, advice: str = ""):
        super().__init__(f"{problem}; {advice}" if advice else problem)
        self.problem, self.advice = problem, advice

    def __reduce__(self):
        return type(self), (self.problem, self.advice)


class CheckpointDenied(CheckpointError):
    """A checkpoint this user may not read (EACCES, EPERM), said as what refused it
    (:func:`~pointgeope.denied.denied_line`): the file may be sound, so it is never called damaged, nor its
    fold one to train again."""


# --- saving and loading ------------------------------------------------------------------------------------

def save_checkpoint(path: str | Path, payload: dict) -> None:
    """``torch.save`` to a temporary file beside ``path``, flushed to disk, then renamed over ``path``."""
    with atomic_open(path, "wb") as f:
        torch.save({"format": FORMAT, "version": VERSION, **payload}, f)


RESUME_ADVICE = "use the same config and overrides to resume, or another --run-dir"
# the error of a file torch cannot load, {path} and {kind} (:func:`unreadable_kind`) filled in: training's
UNREADABLE = "{path}: not a readable checkpoint ({kind}); if it is a fold's last.pt, delete it to start the fold again"
FILE_KINDS = ((b"\x89HDF\r\n\x1a\n", "an HDF5 file"), (b"\x93NUMPY", "a NumPy .npy file"), (b"ply", "a PLY file"),
              (b"LASF", "a LAS/LAZ file"))


def unreadable_kind(path: Path, err: Exception) -> str:
    """What ``path``, which ``torch.load`` refused with ``err``, is: a kind of file known by its first bytes,
    a text file, else torch's reason (its first line; a pickle that safe loading refuses is said so, without
    torch's advice to load it with ``weights_only=False``, which would run the file's code). A file that cannot
    be read again (no permission, an I/O error, removed meanwhile) gets its ``OSError`` whole, file name and all."""
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError:
        head = None
    if head is not None:
        kind = next((text for magic, text in FILE_KINDS if head.startswith(magic)), None)
        if kind or not head:
            return kind or "an empty file"
        if all(b >= 0x20 or b in b"\t\n\r" for b in head):  # no control byte: text (a multi-byte UTF-8 char too)
            return "a text file"
    if "weights_only" in str(err):
        return f"a pickle that safe loading refuses ({type(err).__name__})"
    return f"{type(err).__name__}: {err if isinstance(err, OSError) else first_sentence(str(err))}"


def first_sentence(text: str, limit: int = 200) -> str:
    """The first sentence of ``text``'s first line (torch's run over many), cut at a word past ``limit``."""
    sentence = (text.strip().splitlines() or [""])[0].split(". ", 1)[0].rstrip(".")
    return sentence if len(sentence) <= limit else sentence[:limit].rsplit(" ", 1)[0] + "..."


ZIP_MAGIC = b"PK\x03\x04"  # torch.save writes a zip archive


def damaged(path: Path, err: Exception) -> bool:
    """Whether ``path``, which ``torch.load`` refused with ``err``, is a checkpoint cut short or corrupted: a
    zip archive, as ``torch.save`` writes, that torch cannot read (not one it read and refused to unpickle)."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(ZIP_MAGIC))
    except OSError:
        return False
    return head == ZIP_MAGIC and "weights_only" not in str(err)


def load_checkpoint(path: str | Path, config: dict | None = None, advice: str = RESUME_ADVICE,
                    unreadable: str = UNREADABLE, damaged_file: str | None = None, mmap: bool = False) -> dict:
    """Load a checkpoint on the CPU with ``weights_only=True``.

    Args:
        path: the ``.pt`` file.
        config: the resolved config (plain dict) of the run that will use it; when given, every key
            outside :data:`~pointgeope.engine.config_diff.FREE_KEYS` must match the checkpoint's config.
        advice: what the error of a config that differs says to do (training's, by default).
        unreadable: the error of a file torch cannot load, with ``{path}`` and ``{kind}`` (training's, by
            default: delete a damaged last.pt; predict's names its model argument).
        damaged_file: the error, with ``{path}`` and ``{kind}``, of a checkpoint cut short or corrupted
            (:func:`damaged`); ``None``: ``unreadable``'s.
        mmap: map the tensors from the file instead of reading them (a look at its small keys only).

    Raises:
        CheckpointError: the file is missing, unreadable (:class:`CheckpointDenied`: one that this user may
            not read), changed after it was written (a part whose bytes
            do not match their CRC-32, :func:`changed_part`; not checked with ``mmap``), not a pointgeope
            checkpoint, or was written with another config (the differing keys are listed).
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"expected a checkpoint at {path}, found nothing")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except PermissionError as err:  # the file is sound: deleting it (unreadable's advice) would lose it
        raise CheckpointDenied(denied_line(err)) from None
    except Exception as err:  # noqa: BLE001 - truncated zip, foreign pickle, another kind of file, ...
        if pickled_pointcept_checkpoint(path):          # Pointcept's numpy best_metric_value
            raise CheckpointError(POINTCEPT_ADVICE.format(path=path)) from None
        template = damaged_file if damaged_file and damaged(path, err) else unreadable
        raise CheckpointError(template.format(path=path, kind=unreadable_kind(path, err))) from None
    if not mmap and (part := changed_part(path)) is not None:
        raise CheckpointError((damaged_file or unreadable).format(
            path=path, kind=f"its part {part} does not match the CRC-32 saved with it: its bytes changed after "
                            "it was written"))
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        if is_pointcept_checkpoint(ckpt):
            raise CheckpointError(POINTCEPT_ADVICE.format(path=path))
        raise CheckpointError(f"{path}: expected a {FORMAT} file, got {type(ckpt).__name__} without that format tag")
    if ckpt.get("version") != VERSION:
        raise CheckpointError(f"{path}: expected checkpoint version {VERSION}, got {ckpt.get('version')}")
    if config is not None:
        saved = checkpoint_config(ckpt, path)
        was, now = backbone_of(saved), backbone_of(config)
        if was != now:
            raise CheckpointError(f"{path}: a {was.upper()} checkpoint (model.backbone={was}), but the config asks "
                                  f"for model.backbone={now}; use a {now.upper()} run's checkpoint, or that "
                                  "run's own config")
        diff = config_differences(saved, config)
        if diff:
            raise CheckpointError(f"{path}: written with another config ({describe_differences(diff, 'checkpoint')})"
                                  f"{predating_note(saved, diff)}; {advice}")
    return ckpt


def checkpoint_config(ckpt: dict, path: str | Path, sections: tuple[str, ...] = ()) -> dict:
    """The config (plain dict) a checkpoint was written with; a CheckpointError if it lacks it or ``sections``."""
    config = ckpt.get("config")
    if not isinstance(config, dict) or any(section not in config for section in sections):
        raise CheckpointError(f"{path}: expected a model checkpoint with a config (last.pt or best.pt of a run), "
                              "got one without")
    return config


def fold_config(run: str | Path, overrides: list[str] = (), log=print):
    """The ``Config`` of the fold folder ``run`` with ``overrides``: its ``config.yaml``, else (the file
    deleted) the config its ``last.pt`` (else, or if unreadable, ``best.pt``) was written with, which is what
    trained it, said through ``log``; a :class:`UserError` saying what to do when it has neither."""
    from pointgeope.engine.config import ConfigError, config_from_dict, load_record

    run = Path(run)
    if (run / "config.yaml").exists():
        return load_record(run / "config.yaml", overrides)
    found = [run / f"{which}.pt" for which in ("last", "best") if (run / f"{which}.pt").is_file()]
    if not found:
        fold = FOLD_NAME.fullmatch(run.name)
        train = train_fold_command(run, int(fold[1])) if fold else "pointgeope train --config CONFIG --test-area K " \
            "--run-dir RUN"
        raise UserError(f"{run}: expected config.yaml and last.pt, the fold's config and weights, found neither; "
                        f"train the fold first ({train}), or give the fold folder that holds them")
    for path in found:              # a last.pt cut short does not hide an intact best.pt
        try:
            saved = checkpoint_config(load_checkpoint(path), path)
            break
        except CheckpointError:
            if path == found[-1]:
                raise
    try:
        config_from_dict(saved, where="its config")
    except ConfigError as err:
        raise CheckpointError(f"{path}: written by another version of pointgeope ({err})") from None
    log(f"{run / 'config.yaml'}: not there; using the config that {path.name} carries (it trained the fold)")
    return config_from_dict(saved, where=f"{path}'s config", overrides=overrides)


def fold_progress(path: str | Path, ckpt: dict, log=None) -> tuple[int, int]:
    """``(epochs trained, train.epochs)`` of the fold that wrote the checkpoint ``ckpt`` read from ``path``:
    the epochs of the ``last.pt`` beside it (a ``best.pt`` is from an earlier epoch), else its own. The
    fold is finished when the first reaches the second. A ``last.pt`` beside it that cannot be read (cut
    short) does not stop the use of an intact ``best.pt``: its own epochs then, a warning through ``log``."""
    path = Path(path)
    last, unread = path.parent / "last.pt", None
    progress = _progress(ckpt, path)  # its own, which evaluate records
    if path.name != "last.pt" and last.is_file():
        try:  # a damaged epoch entry of last.pt is as unreadable as a cut one: best.pt's own epochs, a warning
            progress = _progress(load_checkpoint(last), last)
        except CheckpointError as err:
            unread = err
    trained, epochs = progress
    if unread is not None and log is not None:
        after = "the fold finished" if trained >= epochs else "how far the fold trained after it is unknown"
        log(f"warning: {unread}; {path.name} is used (saved at epoch {trained} of {epochs}: {after})")
    return trained, epochs


def _progress(ckpt: dict, path: Path) -> tuple[int, int]:
    """``(epochs trained, train.epochs)`` of one checkpoint (its own ``epoch`` when the config has no
    ``train.epochs``); a CheckpointError naming a damaged entry."""
    trained = whole_count(ckpt, ("epoch",), path)
    train = checkpoint_config(ckpt, path).get("train")
    if not isinstance(train, dict):
        return trained, trained
    return trained, whole_count(train, ("config", "train", "epochs"), path, trained)


def whole_count(entries: dict, keys: tuple[str, ...], path: Path, default: int = 0) -> int:
    """``entries[keys[-1]]`` (``default`` when absent), a whole number >= 0 and below 2^63 (an int64: what the
    files it is written into hold; ``keys``: its place in the checkpoint, for the message); else a
    CheckpointError: a damaged entry was a ``TypeError`` traceback."""
    value = entries.get(keys[-1], default)
    if not is_whole(value) or not 0 <= value < 2 ** 63:
        bound = " below 2^63" if type(value) is int and value > 0 else ""
        raise CheckpointError(f"{path}: damaged checkpoint: expected its {'.'.join(keys)!r} entry to be a whole "
                              f"number >= 0{bound}, got {repr_bounded(value, 40)}; use the run's own checkpoint")
    return value


def unfinished_warning(path: str | Path, ckpt: dict) -> str | None:
    """A warning line when the checkpoint's fold has not trained all its epochs (interrupted, or being
    trained now: its folder is locked), or when that is unknown (its ``last.pt`` unreadable), else ``None``."""
    from pointgeope.lock import LOCK_NAME

    unknown: list[str] = []
    trained, epochs = fold_progress(path, ckpt, log=unknown.append)
    if unknown:
        return unknown[0]
    if trained >= epochs:
        return None
    now = " (its folder is locked: it may be training now)" if (Path(path).parent / LOCK_NAME).is_file() else ""
    return (f"warning: {path}: its fold has trained {trained} of {epochs} epochs{now}; these are the "
            "predictions of an unfinished model")


def eval_values(config: dict) -> dict[str, object]:
    """The ``eval`` section of a plain config as dotted keys (``{"eval.tta.rotations": 1, ...}``); a key it
    lacks (a record older than the key) as it was then (``record_keys.as_recorded``), else at its default."""
    from pointgeope.engine.config import Config, config_to_dict

    return {**flatten(config_to_dict(Config())["eval"], "eval."),
            **flatten(as_recorded(config).get("eval") or {}, "eval.")}


def untested_eval(run: str | Path, tested: dict | None, current: dict) -> str:
    """What a complete fold that ``train`` skips lacks: ``""`` when its ``metrics.json`` was tested with the
    ``eval.*`` values of ``current`` (``tested``: the config it records; ``None``: none recorded), else a
    note naming the values not applied and the ``pointgeope evaluate`` command that tests it with them.

    ``eval.*`` are free keys, so the fold is complete with ``current``, but ``train`` does not test it
    again: its ``metrics.json`` may hold a test made on purpose with other values (``pointgeope evaluate
    RUN/area_K eval.tta.rotations=4``), which a rerun of the training command must not replace. The
    command sets every value that differs from the test's or from the fold's config (where ``evaluate``
    starts)."""
    from pointgeope.engine.config import config_to_dict

    if not isinstance(tested, dict):
        return ""
    was, now = eval_values(tested), eval_values(current)
    differ = [key for key in now if was.get(key) != now[key]]
    if not differ:
        return ""
    try:
        start = eval_values(config_to_dict(fold_config(run, log=lambda line: None)))
    except UserError:
        start = {}
    shown = ", ".join(f"{key}={value_text(now[key])} (it used {setting_text(was.get(key))})" for key in differ)
    command = shlex.join(["pointgeope", "evaluate", str(run),
                          *(f"{key}={value_text(now[key])}" for key in now
                            if key in differ or start.get(key) != now[key])])
    return (f"its test did not use this command's {shown}, which train does not apply to a complete fold: "
            f"{command} tests it with them")


def backbone_of(config: dict) -> str:
    """The ``model.backbone`` of a config (plain dict); ``ptv1`` for checkpoints written before the key."""
    return (config.get("model") or {}).get("backbone", "ptv1")
