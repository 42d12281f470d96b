"""Point colours for each view mode, from the class palette ``constants.class_palette(C)`` of the ``C`` classes
drawn (S3DIS's 13, ``constants.PALETTE``; a network of more classes: its predictions' class count).

Modes (the keys 1..4 of the viewer)::

    rgb    the scanned colour of each point                color (N, 3) uint8
    gt     the ground-truth class, palette[label]          label (N,)
    pred   the predicted class, palette[pred]              pred  (N,)
    error  CORRECT_COLOR where pred == label, WRONG_COLOR elsewhere

Labels outside ``0..C-1`` (``constants.IGNORE_LABEL``) are drawn in ``IGNORE_COLOR``; in ``error`` mode a
point whose ground truth is ignored (outside ``0..C-1``, or the run's ``train.ignore_index``, which evaluate
skips) is neither right nor wrong and is drawn in ``IGNORE_COLOR`` too.
All functions return new ``uint8 (N, 3)`` arrays.
"""
from __future__ import annotations

import numpy as np

from pointgeope.constants import IGNORE_LABEL, NUM_CLASSES, VIEW_MODES, class_palette

MODES = VIEW_MODES
MODE_HELP = {
    "rgb": "scanned RGB colour",
    "gt": "ground-truth class",
    "pred": "predicted class",
    "error": "errors: grey = correct, red = wrong",
}

NEEDS_PRED = "needs --pred"
NO_GROUND_TRUTH = "this room has no ground truth"


def has_ground_truth(label: np.ndarray, num_classes: int = NUM_CLASSES) -> bool:
    """Whether any point of ``label (N,)`` has a class (``0..num_classes-1``); not so for an unlabelled scan's
    predictions (``pointgeope predict --format h5``: every label ``IGNORE_LABEL``)."""
    return bool((np.asarray(label) < num_classes).any())


def missing_modes(labelled: bool, has_pred: bool) -> dict[str, str]:
    """The modes that cannot be drawn, each with why: ``gt`` and ``error`` without ground truth (every point
    would be black), ``pred`` and ``error`` without predictions. The one owner of that rule (the viewer's
    keys, their help, its colours)."""
    missing = {} if has_pred else {"pred": NEEDS_PRED, "error": NEEDS_PRED}
    if not labelled:
        missing.update(gt=NO_GROUND_TRUTH, error=NO_GROUND_TRUTH)
    return {mode: missing[mode] for mode in MODES if mode in missing}


CORRECT_COLOR = (190, 190, 190)  # light grey: far from every palette colour but clutter's dark grey
WRONG_COLOR = (255, 0, 0)        # pure red: the palette's red (table) is (214, 39, 40)
IGNORE_COLOR = (0, 0, 0)


def palette_lut(num_classes: int = NUM_CLASSES) -> np.ndarray:
    """Look-up table ``uint8 (256, 3)``: row ``c`` is ``class_palette(num_classes)[c]`` for ``c < num_classes``
    (``<= 255``), ``IGNORE_COLOR`` above."""
    lut = np.empty((256, 3), dtype=np.uint8)
    lut[:] = IGNORE_COLOR
    lut[:num_classes] = np.asarray(class_palette(num_classes), dtype=np.uint8)
    return lut


def label_colors(labels: np.ndarray, num_classes: int = NUM_CLASSES) -> np.ndarray:
    """``class_palette(num_classes)[labels]`` as ``uint8 (N, 3)``; labels outside ``0..num_classes-1`` get
    ``IGNORE_COLOR``."""
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"expected labels of shape (N,), got {labels.shape}")
    idx = np.where((labels >= 0) & (labels < num_classes), labels, 255).astype(np.uint8)
    return palette_lut(num_classes)[idx]


def error_colors(label: np.ndarray, pred: np.ndarray, num_classes: int = NUM_CLASSES,
                 ignore_index: int = IGNORE_LABEL) -> np.ndarray:
    """``CORRECT_COLOR`` where ``pred == label``, ``WRONG_COLOR`` elsewhere, ``IGNORE_COLOR`` on unlabelled points
    (a label outside ``0..num_classes-1`` or equal to ``ignore_index``, the run's, which no metric scores)."""
    label = np.asarray(label)
    pred = np.asarray(pred)
    if label.shape != pred.shape or label.ndim != 1:
        raise ValueError(f"expected label and pred of one shape (N,), got {label.shape} and {pred.shape}")
    out = np.empty((label.shape[0], 3), dtype=np.uint8)
    out[:] = WRONG_COLOR
    out[pred == label] = CORRECT_COLOR
    out[(label < 0) | (label >= num_classes) | (label == ignore_index)] = IGNORE_COLOR
    return out


def colorize(mode: str, color: np.ndarray, label: np.ndarray, pred: np.ndarray | None = None,
             num_classes: int = NUM_CLASSES, ignore_index: int = IGNORE_LABEL) -> np.ndarray:
    """Colours ``uint8 (N, 3)`` of the points in one of :data:`MODES`.

    Args:
        mode: ``"rgb"``, ``"gt"``, ``"pred"`` or ``"error"``.
        color: scanned colours ``uint8 (N, 3)``.
        label: ground truth ``(N,)``.
        pred: predictions ``(N,)``; required by ``pred`` and ``error``.
        num_classes: the classes drawn, ``C`` (the palette ``class_palette(C)``; labels ``>= C`` ignored).
        ignore_index: the ground-truth label ``error`` mode leaves unjudged (the run's ``train.ignore_index``).
    """
    if mode not in MODES:
        raise ValueError(f"expected a mode in {MODES}, got {mode!r}")
    if mode in ("pred", "error") and pred is None:
        raise ValueError(f"mode {mode!r} needs predictions (--pred RUN/area_K/predictions/Area_K.h5)")
    if mode == "rgb":
        color = np.asarray(color)
        if color.ndim != 2 or color.shape[1] != 3:
            raise ValueError(f"expected colours of shape (N, 3), got {color.shape}")
        return np.array(color, dtype=np.uint8)
    if mode == "gt":
        return label_colors(label, num_classes)
    if mode == "pred":
        return label_colors(pred, num_classes)
    return error_colors(label, pred, num_classes, ignore_index)
