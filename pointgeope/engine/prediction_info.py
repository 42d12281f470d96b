"""What ``pointgeope predict`` needs from a checkpoint: its ``"predict"`` entry, written with every fold
checkpoint (:func:`prediction_metadata`) and read back, checked, by :func:`checkpoint_prediction_info`."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from pointgeope.constants import NUM_CLASSES, class_names, class_palette, written_names
from pointgeope.data.features import FEATURE_WIDTHS, feature_names
from pointgeope.engine.checkpoint import CheckpointError, checkpoint_config
from pointgeope.number_kind import is_number
from pointgeope.plural import counted
from pointgeope.recorded_text import repr_bounded


def prediction_metadata(config: dict, spacing: float | None = None) -> dict:
    """The ``"predict"`` entry of a checkpoint, from its resolved config (plain dict), with one name and one
    colour per class of ``model.num_classes`` (``constants.class_names`` and ``class_palette``: S3DIS's 13,
    then ``class_13``, ... in colours of their own)::

        {"class_names": [C str], "palette": [[r, g, b] x C], "grid_size": float,
         "features": ["rgb", "xyz"] | ["rgb", "normal"] | ["xyz"] | ["normal"] (+ "height"), "in_channels": int,
         "spacing": float | None}     # training rooms' median nearest-neighbour distance (m)

    ``features`` is the layout of the network's input ``x`` (:func:`pointgeope.data.features.feature_names`;
    ``data.normal`` absent, as in every config recorded before it: ``xyz``), so a scan without colour can be
    refused for a colour model before any work is done.
    """
    data, model = config["data"], config["model"]
    num_classes = int(model["num_classes"])
    features = feature_names(bool(data.get("color", True)), bool(data.get("normal", False)), bool(data["height"]))
    return {"class_names": class_names(num_classes), "palette": class_palette(num_classes),
            "grid_size": float(data["grid_size"]), "features": features,
            "in_channels": int(model["in_channels"]),
            "spacing": None if spacing is None or not np.isfinite(spacing) else float(spacing)}


def checkpoint_prediction_info(ckpt: dict, path: str | Path) -> dict:
    """The checkpoint's ``"predict"`` entry, or (checkpoints written before it) the same derived from its
    config without ``spacing``. An entry written before the classes beyond S3DIS's 13 were named (13 names
    and colours for a network of more classes) gets the others as :func:`prediction_metadata` names them now.
    Raises CheckpointError without a config (prediction needs it) or with an incomplete entry."""
    config = checkpoint_config(ckpt, path, ("data", "model"))  # the prediction rebuilds the network from it
    info = ckpt.get("predict")
    if info is None:
        info = prediction_metadata(config)
    if not isinstance(info, dict):  # set(info) below: a TypeError traceback
        raise CheckpointError(f"{path}: damaged checkpoint: expected its 'predict' entry to be a mapping, got "
                              f"{repr_bounded(info, 40)}; use the run's own checkpoint")
    missing = {"class_names", "palette", "grid_size", "features", "in_channels"} - set(info)
    if missing:
        raise CheckpointError(f"{path}: its 'predict' entry lacks {sorted(missing)}")
    classes = config["model"].get("num_classes")
    if (isinstance(classes, int) and isinstance(info["class_names"], list)
            and written_names(info["class_names"], classes) != info["class_names"]
            and info["palette"] == class_palette(NUM_CLASSES)):
        info = {**info, "class_names": class_names(classes), "palette": class_palette(classes)}
    problem = _entry_problem(info["class_names"], info["palette"], classes)
    if problem:
        raise CheckpointError(f"{path}: damaged checkpoint: expected its 'predict' entry to hold {classes} class "
                              f"names and {classes} [r, g, b] colours of 0..255 (model.num_classes), got {problem}; "
                              "use the run's own checkpoint")
    problem = _values_problem(info)
    if problem:
        raise CheckpointError(f"{path}: damaged checkpoint: expected its 'predict' entry's {problem}; use the run's "
                              "own checkpoint")
    return info


def _number(value: object, low: float) -> bool:
    """Whether ``value`` is a finite number (not a bool) >= ``low``."""
    return is_number(value) and low <= value < math.inf


def _values_problem(info: dict) -> str | None:
    """What is wrong with a ``"predict"`` entry's ``features``, ``in_channels``, ``grid_size`` and ``spacing``
    (:func:`prediction_metadata`'s layout; predict reads them for its checks and lines: a damaged ``features``
    was a ``TypeError`` traceback, or let a colour network take a scan without colour), ``None`` if nothing."""
    features, channels = info["features"], info["in_channels"]
    names = isinstance(features, list) and all(isinstance(f, str) and f in FEATURE_WIDTHS for f in features)
    if not (names and features):
        return f"features to be a list of {', '.join(FEATURE_WIDTHS)}, got {repr_bounded(features, 60)}"
    if type(channels) is not int or channels != sum(FEATURE_WIDTHS[f] for f in features):
        return f"in_channels to be the width of its features [{' | '.join(features)}], got {repr_bounded(channels, 40)}"
    if not (_number(info["grid_size"], 0) and info["grid_size"] > 0):
        return f"grid_size to be a number of metres > 0, got {repr_bounded(info['grid_size'], 40)}"
    spacing = info.get("spacing")
    if spacing is not None and not _number(spacing, 0):
        return f"spacing to be a number of metres >= 0 or null, got {repr_bounded(spacing, 40)}"
    return None


def _entry_problem(names: object, palette: object, classes: object) -> str | None:
    """What is wrong with a ``"predict"`` entry's ``class_names`` and ``palette`` for a network of ``classes``
    classes (one name and one ``[r, g, b]`` of 0..255 each: predict indexes both by label), ``None`` if nothing."""
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return f"class_names {repr_bounded(names, 60)}"
    if len(names) != classes:
        return counted(len(names), "class name")
    if not isinstance(palette, list):
        return f"palette {repr_bounded(palette, 60)}"
    if len(palette) != classes:
        return counted(len(palette), "colour")
    bad = [c for c in palette if not (isinstance(c, list) and len(c) == 3
                                      and all(type(v) is int and 0 <= v <= 255 for v in c))]
    return f"the colour {repr_bounded(bad[0], 60)}" if bad else None
