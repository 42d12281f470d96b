"""A room as the viewer draws it: points, colours, labels and predictions read from the prepared files.

``load_room`` reads one room of ``OUT/Area_N.h5`` (``pointgeope.h5.read_room``) and, when given,
its predictions (``read_predictions``), checking that they are aligned with the room, and the classes they
are of (:func:`prediction_classes`: S3DIS's 13, or those of a network of more classes). ``prepare_view``
then chooses the points to draw: hidden classes out, optional voxel downsampling, then the point cap.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pointgeope.constants import AREA_NAME, CLASS_NAMES, DEFAULT_MAX_POINTS, IGNORE_LABEL, NUM_CLASSES, class_names
from pointgeope.number_kind import is_integer
from pointgeope.plural import counted
from pointgeope.recorded_text import repr_bounded
from pointgeope.viz import VizError
from pointgeope.viz.colors import has_ground_truth
from pointgeope.viz.select import cap_indices, keep_mask, voxel_representatives


@dataclass(frozen=True)
class RoomView:
    """The points of a room to draw (aligned arrays of length ``M``).

    Attributes:
        name: the room's name.
        coord: ``float32 (M, 3)`` metres.
        color: ``uint8 (M, 3)`` scanned colour.
        label: ``uint8 (M,)`` ground truth.
        pred: ``uint8 (M,)`` predictions, or ``None``.
        notes: what was done to the points (hidden classes, downsampling, cap), to print.
        class_names: the ``C`` classes drawn, in label order (the palette ``constants.class_palette(C)``).
        origin: ``float64 (3,)`` of a georeferenced room (its attribute ``origin``: the scan's coordinates
            are ``coord + origin``), else ``None``; drawn locally, added back in a PLY export.
        ignore_index: the ground-truth label that scores skip and the error colours leave unjudged: the run's
            ``train.ignore_index`` (:func:`file_ignore_index`), ``IGNORE_LABEL`` (255) by default.
    """

    name: str
    coord: np.ndarray
    color: np.ndarray
    label: np.ndarray
    pred: np.ndarray | None = None
    notes: tuple[str, ...] = field(default=())
    class_names: tuple[str, ...] = CLASS_NAMES
    origin: np.ndarray | None = None
    ignore_index: int = IGNORE_LABEL

    def __len__(self) -> int:
        return int(self.label.shape[0])

    def __repr__(self) -> str:
        pred = "with" if self.pred is not None else "without"
        return f"RoomView({self.name!r}, points={len(self)}, {pred} predictions)"

    def take(self, index: np.ndarray, note: str | None = None) -> RoomView:
        """A new view of the points ``index`` (indices or a boolean mask); this one is unchanged."""
        return RoomView(self.name, self.coord[index], self.color[index], self.label[index],
                        None if self.pred is None else self.pred[index],
                        self.notes + ((note,) if note else ()), self.class_names, self.origin, self.ignore_index)


def check_same_area(area_path: str | Path, pred_path: str | Path) -> None:
    """Refuse (:class:`VizError`, one line) predictions of another area or scan than ``area_path``: both files
    carry their area (root attribute ``area``: evaluate's ``Area_1``, predict's scan name, prepare's area).
    Before, only room names and point counts were compared: a shape mismatch with no fix, or, where two
    areas share a room name and size, the wrong predictions drawn and scored. Files without the attribute
    (written by hand) pass."""
    from pointgeope.h5 import SCAN_PREDICTIONS
    from pointgeope.h5_predictions import predictions_area

    have, kind = predictions_area(pred_path)
    want, _ = predictions_area(area_path)
    if have is None or want is None or have == want:
        return
    fix = (f"view the scan alone: pointgeope viz {pred_path}" if kind == SCAN_PREDICTIONS else
           f"give RUN/{want.lower()}/predictions/{want}.h5" if AREA_NAME.fullmatch(want) else
           f"give the predictions of {want}")
    raise VizError(f"{pred_path} holds the predictions of {have}, not of {area_path} ({want}): {fix}")


def file_classes(path: str | Path) -> tuple[str, ...]:
    """The classes a predictions file names (root attr ``class_names``: evaluate and predict write the
    network's), padded to S3DIS's 13 (the ground truth's); S3DIS's 13 where it names none (a file of an older
    version or written by hand)."""
    from pointgeope.h5_predictions import predictions_attrs

    (names,) = predictions_attrs(path, "class_names")
    names = list(names) if isinstance(names, list) else []
    return tuple(names + class_names(NUM_CLASSES)[len(names):])


def file_ignore_index(path: str | Path | None) -> int:
    """The ground-truth label that the run which wrote predictions file ``path`` skipped in every metric (root
    attr ``ignore_index``: evaluate and predict write the run's ``train.ignore_index``), so that a room's
    scores here are evaluate's; ``IGNORE_LABEL`` where it names none (no file, an older version)."""
    from pointgeope.h5_predictions import predictions_attrs

    if path is None:
        return IGNORE_LABEL
    (value,) = predictions_attrs(path, "ignore_index")
    if value is None:
        return IGNORE_LABEL
    if not is_integer(value):  # int('x'): a traceback
        raise VizError(f"{path}: expected its 'ignore_index' attribute to be an integer label, got "
                       f"{repr_bounded(value, 40)}; evaluate or predict again to write the file anew")
    return int(value)


def prediction_classes(pred_path: str | Path, pred: np.ndarray, room: str) -> tuple[str, ...]:
    """The classes that predictions ``pred`` of ``room`` in ``pred_path`` are of (:func:`file_classes`); a
    predicted label beyond them: VizError."""
    names = file_classes(pred_path)
    if pred.size and (pred.min() < 0 or pred.max() >= len(names)):
        fix = "" if len(names) > NUM_CLASSES else ("; a network of more classes: evaluate the fold again (its "
                                                   "predictions then name their classes)")
        raise VizError(f"{pred_path}: room {room!r} has predicted labels outside 0..{len(names) - 1} "
                       f"(min {pred.min()}, max {pred.max()}){fix}")
    return names


def load_room(area_path: str | Path, room: str, pred_path: str | Path | None = None) -> RoomView:
    """Read a room and its predictions (checked: of the same area, :func:`check_same_area`; same length,
    labels of the file's classes, :func:`prediction_classes`): from ``pred_path`` when given, else the room's own
    ``pred`` array if it has one (files of ``pointgeope predict --format h5``)."""
    from pointgeope.h5 import read_room
    from pointgeope.h5_predictions import has_predictions, read_predictions

    data = read_room(area_path, room, fields=("coord", "color", "label"))
    origin = room_origin(area_path, room)
    pred, names, ignore = None, CLASS_NAMES, IGNORE_LABEL
    if pred_path is None and has_predictions(area_path, room):
        pred_path = area_path
    elif pred_path is not None:
        check_same_area(area_path, pred_path)
    if pred_path is not None:
        pred = np.asarray(read_predictions(pred_path, room))
        n = data["label"].shape[0]
        if pred.shape != (n,):
            raise VizError(f"{pred_path}: predictions of room {room!r} have shape {pred.shape}, expected "
                             f"({n},) to match {area_path}; are they from the same prepared data?")
        names, ignore = prediction_classes(pred_path, pred, room), file_ignore_index(pred_path)
        pred = pred.astype(np.uint8, copy=False)
    return RoomView(room, np.asarray(data["coord"], dtype=np.float32), np.asarray(data["color"], dtype=np.uint8),
                    np.asarray(data["label"], dtype=np.uint8), pred, class_names=names, origin=origin,
                    ignore_index=ignore)


def room_origin(area_path: str | Path, room: str) -> np.ndarray | None:
    """The ``origin`` attribute of a georeferenced room (``data_prep.room.float32_origin``: prepare stores
    ``coord - origin``) as ``float64 (3,)``, ``None`` where the room has none; other than 3 finite numbers:
    VizError."""
    from pointgeope.h5 import open_area, room_group
    from pointgeope.origin import checked_origin

    with open_area(area_path) as f:
        origin = room_group(f, room).attrs.get("origin")
    if origin is None:
        return None
    if (shift := checked_origin(origin)) is None:
        raise VizError(f"{area_path}: room {room!r}: expected its 'origin' attribute to be 3 finite numbers, got "
                       f"{repr_bounded(origin, 80)}; prepare it again")
    return shift


def prepare_view(view: RoomView, hidden: tuple[int, ...] = (), voxel: float | None = None,
                 max_points: int = DEFAULT_MAX_POINTS, seed: int = 0) -> RoomView:
    """The points to draw: classes ``hidden`` out (by ground truth; by prediction in a room without ground
    truth, such as a scan's predictions, as ``choose_mode`` colours it), then one point per ``voxel``
    (metres; the point nearest each voxel's centre keeps its label and prediction), then at most
    ``max_points`` (a seeded uniform sample; ``0`` = no cap). Returns a new view whose ``notes`` say what
    was done. A room with neither ground truth nor predictions has nothing to hide by: VizError."""
    out = view
    if hidden:
        names = ",".join(out.class_names[c] for c in hidden)
        by_pred = not has_ground_truth(out.label, len(out.class_names))
        if by_pred and out.pred is None:
            raise VizError(f"--hide {names}: room {out.name!r} has neither ground truth nor predictions to hide "
                           "by; give --pred, or leave out --hide")
        keep = keep_mask(out.pred if by_pred else out.label, hidden)
        out = out.take(keep, f"hidden {names}{' by prediction (no ground truth)' if by_pred else ''}: "
                             f"{counted(int((~keep).sum()), 'point')}")
    if voxel:
        idx = voxel_representatives(out.coord, voxel)
        out = out.take(idx, f"voxel {voxel:g} m: {len(out):,} -> {counted(idx.shape[0], 'point')}")
    idx = cap_indices(len(out), max_points, seed)
    if idx is not None:
        out = out.take(idx, f"capped at {max_points:,} of {len(out):,} points (random sample; "
                            f"use --voxel to thin evenly or --max-points 0 to draw all)")
    return out
