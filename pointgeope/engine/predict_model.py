"""The model ``pointgeope predict`` segments with: the checkpoint chosen, loaded and checked, and its config
adjusted for prediction.

The checkpoint comes from ``MODEL`` as given (``CHECKPOINT.pt``), or from a fold folder ``RUN/area_K``: its
``<which>.pt``, where ``which`` is ``--checkpoint``, else the run's ``eval.checkpoint`` as ``evaluate`` reads
it, else ``last`` (:func:`checkpoint_path`). Its config is the one the network was trained with; predict
takes overrides of ``eval.*`` and of :data:`PREDICT_KEYS` only, never of what the network was trained with
(:func:`prediction_config`). :func:`load_predictor` joins the two and returns a :class:`Predictor`, the
network in eval mode on its device, which :mod:`pointgeope.engine.predict` runs on users' scans.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import numpy as np
import torch

from pointgeope.constants import FOLD_NAME, PREDICT_MAX_FRAGMENTS
from pointgeope.engine import build
from pointgeope.engine.checkpoint import CheckpointError, load_checkpoint, unfinished_warning
from pointgeope.engine.config import Config, ConfigError, TTAConfig, config_from_dict, override_key
from pointgeope.engine.distributed import choose_device
from pointgeope.engine.evaluate import not_a_fold
from pointgeope.engine.fold_result import missing_checkpoint, predict_last, unvalidated_best
from pointgeope.engine.prediction_info import checkpoint_prediction_info
from pointgeope.engine.weights import load_model_state
from pointgeope.errors import UserError

# load_checkpoint's error for a MODEL file that torch cannot load at all (MODEL and INPUT swapped, say).
# A fold folder's checkpoint gets load_checkpoint's own UNREADABLE line instead.
UNREADABLE_MODEL = "MODEL {path}: expected a checkpoint (.pt) or a fold folder RUN/area_K, got {kind}"
# ... and for a MODEL file that is a checkpoint torch cannot read (cut short or corrupted: checkpoint.damaged).
DAMAGED_MODEL = ("MODEL {path}: a damaged checkpoint, torch cannot read it ({kind}; cut short or corrupted, e.g. by an "
                 "interrupted copy); copy it again, or give another checkpoint of its fold (RUN/area_K/best.pt or "
                 "last.pt)")
# The test-time views of --tta when the run's config has none of its own (eval.tta is a single view).
DEFAULT_TTA = TTAConfig(rotations=4, flips=True)
# Besides eval.*, the overrides that change how predict runs: free keys of the checkpoint
# (config_diff.FREE_KEYS) that predict reads, namely where the point hierarchy is built and torch's CPU
# threads. --device chooses the device.
PREDICT_KEYS = frozenset({"data.hierarchy", "train.threads"})


class PredictError(UserError, ValueError):
    """A model argument that cannot be used (missing checkpoint, an override predict does not take)."""


@dataclasses.dataclass
class Predictor:
    """A trained model ready to predict.

    Fields:
        model: the network, in eval mode, on ``device``.
        cfg: its config, adjusted for prediction (:func:`prediction_config`).
        info: the checkpoint's ``"predict"`` metadata (features, classes, palette, grid, spacing:
            :mod:`pointgeope.engine.prediction_info`).
        device: where the network runs.
        path: the checkpoint file it was loaded from.
        cap_origin: where the fragment cap comes from when the user did not choose it (predict's default
            :data:`~pointgeope.constants.PREDICT_MAX_FRAGMENTS`, or the run's ``eval.max_fragments``): a scan
            the cap cuts is warned about. ``None`` for ``--max-fragments`` or an ``eval.max_fragments``
            override.
        checksum: the sha256 of the checkpoint's bytes the network was loaded from (what predict's records
            name).
        normals_read: every normal estimate its run read in training, earlier ones of a resume included
            (:func:`pointgeope.data.normal_record.read_in_training`); ``None`` for a network that reads no normals.
        warned: the estimates of scans already warned about (one line per estimate, not per scan).
    """

    model: torch.nn.Module
    cfg: Config
    info: dict
    device: torch.device
    path: Path
    cap_origin: str | None = None
    checksum: str | None = None
    normals_read: list | None = None
    warned: set = dataclasses.field(default_factory=set)

    @property
    def palette(self) -> np.ndarray:
        return np.asarray(self.info["palette"], dtype=np.uint8)

    @property
    def uses_color(self) -> bool:
        return "rgb" in self.info["features"]


def config_yaml_of(model: Path) -> Config | ConfigError | None:
    """The config of the fold folder ``model``'s ``config.yaml``, read once for predict (:func:`checkpoint_path`
    takes its ``eval.checkpoint``, :func:`config_yaml_note` its other ``eval.*``), or the ConfigError that
    refuses it (each of the two says what that means for it); ``None`` where ``model`` is a file, or a folder
    without ``config.yaml``."""
    path = model / "config.yaml"
    if not (model.is_dir() and path.is_file()):
        return None
    from pointgeope.engine.config import load_record

    try:
        return load_record(path)
    except ConfigError as err:
        return err


def checkpoint_path(model: str | Path, which: str | None, record: Config | ConfigError | None) -> Path:
    """The checkpoint file that ``MODEL`` names.

    ``CHECKPOINT.pt`` is taken as given (``which`` is refused with it). A fold folder gives
    ``RUN/area_K/<which>.pt``, where ``which`` is ``--checkpoint``, else the run's ``eval.checkpoint`` as
    ``evaluate`` uses it (``record``, :func:`config_yaml_of`'s), else ``last``.

    Refused: a folder without that file and not named ``area_K`` (a run folder ``RUN``), with the folds it
    holds; a ``config.yaml`` that ``evaluate`` would refuse, when ``which`` is not given (its ``eval.checkpoint``
    is unknown); a fold folder that is not there, or lacks the file, in ``evaluate``'s words (train it first:
    :mod:`pointgeope.engine.fold_result`).
    """
    model = Path(model)
    fold = FOLD_NAME.fullmatch(model.name)
    if fold and not os.path.lexists(model):   # a fold not trained yet (or a typo)
        raise PredictError(not_a_fold(model))
    if not model.is_dir():
        if which is not None:
            raise PredictError(f"--checkpoint {which} needs a run folder RUN/area_K, got the file {model}")
        return model
    if which is None:
        if isinstance(record, ConfigError):  # taking last.pt then predicted with another file than its eval.checkpoint
            raise PredictError(f"{record}; predict reads the fold's eval.checkpoint from it: correct it, or choose "
                               "the file with --checkpoint last|best")
        which = "last" if record is None else record.eval.checkpoint
    path = model / f"{which}.pt"
    if not path.exists():  # a fold stopped before this checkpoint; RUN given for RUN/area_K: its folds named
        raise (CheckpointError(missing_checkpoint(path, int(fold[1]), predict_last(path, folder=True)))
               if fold else PredictError(not_a_fold(model)))
    return path


def prediction_config(ckpt: dict, path: Path, tta: bool, batch_points: int | None,
                      max_fragments: int | None | bool, overrides: list[str]) -> tuple[Config, str | None]:
    """The checkpoint's config with ``overrides``, adjusted for prediction (the arguments as in
    :func:`load_predictor`), and where the fragment cap comes from when the user did not choose it
    (:attr:`Predictor.cap_origin`).

    ``overrides`` may set ``eval.*`` and :data:`PREDICT_KEYS` only, never what the network was trained
    with; ``eval.checkpoint`` is refused too, since the file is chosen before its config is read. A run of
    ``eval.protocol=ptv3`` has its own 10 test views: ``--tta`` is ignored there, ``eval.tta`` overrides
    refused.
    """
    keys = [override_key(text) for text in overrides]     # ' eval.tta.rotations=4' -> 'eval.tta.rotations'
    for text, key in zip(overrides, keys, strict=True):
        if key == "eval.checkpoint":   # the file is chosen before its config is read (checkpoint_path)
            raise PredictError(f"override {text!r}: not read (the checkpoint is chosen before its config); leave it "
                               "out, and choose a run folder's with --checkpoint last|best, or give the file "
                               "RUN/area_K/best.pt")
        if not key.startswith("eval.") and key not in PREDICT_KEYS:
            raise PredictError(f"override {text!r}: predict takes overrides of eval.* and of "
                               f"{', '.join(sorted(PREDICT_KEYS))}, not of what the network was trained with "
                               "(nor of the keys that set where and how training runs: --device chooses the device)")
    try:
        config_from_dict(ckpt["config"], where="its config")
    except ConfigError as err:
        raise CheckpointError(f"{path}: written by another version of pointgeope ({err})") from None
    cfg = config_from_dict(ckpt["config"], where=f"{path}'s config", overrides=overrides)
    views, sets_views = cfg.eval.tta, any(key == "eval.tta" or key.startswith("eval.tta.") for key in keys)
    if cfg.eval.protocol == "ptv3":      # its own 10 views are the test (with or without --tta): no eval.tta
        if sets_views:
            raise PredictError(f"{path}: a run of eval.protocol=ptv3, whose test has its own 10 views; leave out "
                               "the eval.tta overrides")
        tta = False
    if not tta and not sets_views:
        views = TTAConfig()
    elif tta and views == TTAConfig():
        views = DEFAULT_TTA
    cap, origin = cfg.eval.max_fragments if max_fragments is False else max_fragments, None
    if max_fragments is False and cap is None:
        cap, origin = PREDICT_MAX_FRAGMENTS, "predict's default cap"
    elif max_fragments is False and "eval.max_fragments" not in keys:
        origin = "the run's eval.max_fragments"
    ev = dataclasses.replace(cfg.eval, tta=views, batch_points=batch_points or cfg.eval.batch_points,
                             max_fragments=cap)
    return dataclasses.replace(cfg, eval=ev), origin


def config_yaml_note(model: Path, record: Config | ConfigError | None, trained: Config, keys: list[str]) -> str | None:
    """One note line when a fold folder's ``config.yaml`` (``record``, :func:`config_yaml_of`'s) sets ``eval.*``
    values other than its checkpoint's (the file edited for ``evaluate``, which reads them there), with the
    overrides that apply them; ``None`` when none differ, or the command line chooses them (``keys``), or
    ``MODEL`` is a file, or ``config.yaml`` cannot be read (:func:`checkpoint_path` refuses that without
    ``--checkpoint``; with it, the file's problem is not predict's).

    predict takes ``eval.*`` from the checkpoint, ``trained`` (its own config): a fold folder predicts as its
    chosen ``.pt`` file does, wherever the file is copied; ``eval.checkpoint`` alone comes from ``config.yaml``,
    since it chooses that file."""
    import json

    from pointgeope.engine.config import config_to_dict
    from pointgeope.engine.config_yaml import flatten

    if not isinstance(record, Config):  # a ConfigError: checkpoint_path refused it already where it needs it
        return None
    path = model / "config.yaml"
    ours, theirs = (flatten(config_to_dict(cfg)["eval"], "eval.") for cfg in (trained, record))
    differ = [key for key, value in theirs.items() if key != "eval.checkpoint" and ours.get(key, value) != value
              and not any(key == k or key.startswith(f"{k}.") for k in keys)]
    if not differ:
        return None
    sets = ", ".join(f"{key} {json.dumps(theirs[key])} (the checkpoint: {json.dumps(ours[key])})" for key in differ)
    return (f"note: {path} sets {sets}; predict takes eval.* from the checkpoint, evaluate from config.yaml: add "
            f"{' '.join(f'{key}={json.dumps(theirs[key])}' for key in differ)} to predict with config.yaml's")


def load_predictor(model: str | Path, device: str = "auto", checkpoint: str | None = None,
                   tta: bool = False, batch_points: int | None = None, max_fragments: int | None | bool = False,
                   overrides: list[str] = ()) -> Predictor:
    """The network of ``model`` on ``device``, its config adjusted for prediction.

    Args:
        model: a fold folder ``RUN/area_K`` or a checkpoint ``.pt`` (:func:`checkpoint_path`).
        device: ``--device`` (:func:`~pointgeope.engine.distributed.choose_device`).
        checkpoint: ``last`` or ``best`` of a fold folder (``--checkpoint``).
        tta: without it one view (unless ``overrides`` set ``eval.tta``); with it the run's ``eval.tta``,
            or :data:`DEFAULT_TTA` where that is a single view.
        batch_points: the points of one forward pass; ``None``: the run's ``eval.batch_points``.
        max_fragments: at most this many fragments of a scan; ``None``: all; ``False`` (not given): the
            run's ``eval.max_fragments``, or :data:`~pointgeope.constants.PREDICT_MAX_FRAGMENTS` where that
            is null.
        overrides: ``key=value`` of ``eval.*`` and :data:`PREDICT_KEYS` (:func:`prediction_config`).

    Raises PredictError or CheckpointError, also when the file is replaced while it is read: it is hashed
    before and after loading, since a run that trains on saves its ``last.pt`` and the checksum must name
    the bytes loaded.
    """
    from pointgeope.engine.predict_record import checksum_or_none as _checksum

    record = config_yaml_of(Path(model))
    path = checkpoint_path(model, checkpoint, record)   # a fold's damaged checkpoint gets training's words
    checksum = _checksum(path)    # None, unreadable: load_checkpoint says why
    ckpt = (load_checkpoint(path) if Path(model).is_dir()
            else load_checkpoint(path, unreadable=UNREADABLE_MODEL, damaged_file=DAMAGED_MODEL))
    if _checksum(path) != checksum:
        raise CheckpointError(f"{path}: replaced while predict read it (a run still training saves it); run the "
                              "same command again")
    if line := unvalidated_best(path, ckpt, predict_last(path, Path(model).is_dir())):
        raise CheckpointError(line)     # best.pt of a fold that no validation picked an epoch of
    info = checkpoint_prediction_info(ckpt, path)
    warning = unfinished_warning(path, ckpt)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    cfg, cap_origin = prediction_config(ckpt, path, tta, batch_points, max_fragments, list(overrides))
    chosen = [override_key(text) for text in overrides] + ["eval.max_fragments"] * (max_fragments is not False) \
        + ["eval.batch_points"] * bool(batch_points)     # the options of those keys
    if note := config_yaml_note(Path(model), record, config_from_dict(ckpt["config"]), chosen):
        print(note, file=sys.stderr, flush=True)
    dev = choose_device(device, option="--device")
    net = build.model(cfg).to(dev)
    load_model_state(net, ckpt, path)
    net.eval()
    from pointgeope.data.normal_record import read_in_training

    return Predictor(net, cfg, info, dev, path, cap_origin, checksum, read_in_training(ckpt))
