"""What the viewer prints to the terminal: the class legend of a room and the table of rooms.

A colour swatch is an ANSI 24-bit ("truecolour") background escape, ``ESC[48;2;R;G;Bm`` + spaces +
``ESC[0m``; without ANSI (output not a terminal, or ``NO_COLOR`` set) it is the hex code ``#rrggbb``.
IoU values come from ``pointgeope.metrics`` and are printed in percent; ``-`` where undefined (a class
neither in the ground truth nor in the predictions of that room).
"""
from __future__ import annotations

import math
import os
import sys

import numpy as np

from pointgeope.constants import CLASS_NAMES, IGNORE_LABEL, class_palette
from pointgeope.plural import counted
from pointgeope.viz.colors import (
    CORRECT_COLOR,
    IGNORE_COLOR,
    MODE_HELP,
    MODES,
    NO_GROUND_TRUTH,
    WRONG_COLOR,
    has_ground_truth,
)


def use_ansi(stream=None) -> bool:
    """True when ``stream`` (default stdout) is a terminal and ``NO_COLOR`` is not set."""
    stream = sys.stdout if stream is None else stream
    return "NO_COLOR" not in os.environ and hasattr(stream, "isatty") and stream.isatty()


def swatch(rgb, ansi: bool, width: int = 4) -> str:
    """A block of ``width`` characters in colour ``rgb``, or ``#rrggbb`` (padded to ``width``) without ANSI."""
    r, g, b = (int(c) for c in rgb)
    if ansi:
        return f"\x1b[48;2;{r};{g};{b}m{' ' * width}\x1b[0m"
    return f"#{r:02x}{g:02x}{b:02x}".ljust(width)


def _percent(value: float) -> str:
    return "-" if value is None or math.isnan(value) else f"{100.0 * value:.1f}"


def room_scores(label: np.ndarray, pred: np.ndarray, num_classes: int = len(CLASS_NAMES),
                ignore_index: int = IGNORE_LABEL) -> dict:
    """``pointgeope.metrics.scores`` of one room's ``(C, C)`` confusion matrix, ``C = num_classes``: the points
    labelled ``ignore_index`` (the run's ``train.ignore_index``, which evaluate skips) or outside ``0..C-1``
    (unlabelled) skipped."""
    from pointgeope.metrics import confusion_matrix, scores

    label, pred = np.asarray(label), np.asarray(pred)
    kept = (label < num_classes) & (label != ignore_index)
    return scores(confusion_matrix(pred[kept], label[kept], num_classes, None))


def legend_lines(label: np.ndarray, pred: np.ndarray | None = None, ansi: bool = False,
                 title: str = "", class_names=CLASS_NAMES, ignore_index: int = IGNORE_LABEL) -> list[str]:
    """The class legend: index, name, swatch, ground-truth point count and, with ``pred``, the room's IoU.

    One line per class of ``class_names`` (S3DIS's 13, or those of the predictions' network: all of them, a
    prediction can be any class), in ``constants.class_palette``'s colours, a header, and with predictions a last
    line with the room's mIoU (over the classes present: in its truth or its predictions, ``scores``'s
    ``"present"`` rule, since a room holds few of the classes) and OA. A room without ground truth
    (:func:`~pointgeope.viz.colors.has_ground_truth` false: an unlabelled scan's predictions) has nothing to score: with
    ``pred`` its legend counts the points per *predicted* class (what the colours show), with no IoU column and no mIoU
    line. The points labelled ``ignore_index`` (the run's ``train.ignore_index``) are counted but not scored, as
    evaluate.
    """
    label, n = np.asarray(label), len(class_names)
    by_pred = pred is not None and not has_ground_truth(label, n)
    tallied = np.asarray(pred) if by_pred else label
    counts = np.bincount(tallied[tallied < n].astype(np.int64), minlength=n)
    sw, palette = 7 if not ansi else 4, class_palette(n)
    digits, wide = max(2, len(str(n - 1))), max(9, *map(len, class_names))  # S3DIS's: 2 and 9
    head = f" {'#':>{digits}}  {'class':<{wide}} {'colour':<{sw}} {'predicted' if by_pred else 'points':>10}"
    result = None
    if pred is not None and not by_pred:
        result = room_scores(label, pred, n, ignore_index)
        head += f" {'IoU %':>6}"
    lines = [title] if title else []
    lines.append(head)
    for c, name in enumerate(class_names):
        line = f" {c:>{digits}}  {name:<{wide}} {swatch(palette[c], ansi, sw)} {counts[c]:>10,}"
        if result is not None:
            line += f" {_percent(result['iou'][c]):>6}"
        lines.append(line)
    if result is not None:
        present = sum(not math.isnan(v) for v in result["iou"])   # classes in the truth or the predictions
        scored = int(((label < n) & (label != ignore_index)).sum())
        skipped = f" ({class_names[ignore_index]} not scored: the run ignores it)" if 0 <= ignore_index < n else ""
        lines.append(f"  room: mIoU {_percent(result['miou'])} % of the {counted(present, 'class')} present, OA "
                     f"{_percent(result['oa'])} % over {counted(scored, 'labelled point')}{skipped}")
    if by_pred:
        lines.append(f"  room: {counted(int(counts.sum()), 'point')} by predicted class; no ground truth, nothing to "
                     "score")
    return lines


def key_help_lines(missing: dict[str, str], ansi: bool = False) -> list[str]:
    """The viewer's keys: 1..4 switch the colouring; ``missing``, the modes that draw nothing and why
    (:func:`~pointgeope.viz.colors.missing_modes`): pred and error marked as needing predictions without
    them; gt and error not offered for a room without ground truth (an unlabelled scan), one line saying so."""
    lines = ["keys:"]
    for key, mode in enumerate(MODES, start=1):
        if missing.get(mode) != NO_GROUND_TRUTH:
            state = f"  ({missing[mode]})" if mode in missing else ""
            lines.append(f"  {key}  {mode:<6} {MODE_HELP[mode]}{state}")
    if missing.get("error") != NO_GROUND_TRUTH:
        lines.append(f"     error colours: {swatch(CORRECT_COLOR, ansi)} correct  {swatch(WRONG_COLOR, ansi)} wrong  "
                     f"{swatch(IGNORE_COLOR, ansi)} unlabelled")
    else:  # e.g. "(2 gt, 4 error: off, this room has no ground truth)"
        off = [f"{key} {mode}" for key, mode in enumerate(MODES, start=1) if missing.get(mode) == NO_GROUND_TRUTH]
        lines.append(f"     ({', '.join(off)}: off, {NO_GROUND_TRUTH})")
    lines.append("  +/-  point size    mouse: rotate (left), pan (ctrl/middle), zoom (wheel)    Q/Esc  close")
    return lines


def room_table(counts: dict[str, int], miou: dict[str, float] | None = None) -> list[str]:
    """The rooms of an area with their point counts; with ``miou`` (room -> mIoU, NaN or missing when the
    room has no predictions) sorted worst first, rooms without predictions last."""
    names = list(counts)
    if miou is not None:
        def order(name):
            value = miou.get(name, float("nan"))
            return (math.isnan(value), value if not math.isnan(value) else 0.0, name)
        names.sort(key=order)
    width = max([len("room")] + [len(n) for n in names])
    head = f"{'room':<{width}} {'points':>11}" + (f" {'mIoU %':>7}" if miou is not None else "")
    lines = [head]
    for name in names:
        line = f"{name:<{width}} {counts[name]:>11,}"
        if miou is not None:
            line += f" {_percent(miou.get(name, float('nan'))):>7}"
        lines.append(line)
    lines.append(f"{counted(len(names), 'room')}, {counted(sum(counts.values()), 'point')}"
                 + ("; each room's mIoU over the classes present in its truth or predictions"
                    if miou is not None else ""))
    return lines
