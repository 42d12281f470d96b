"""The report's figures (matplotlib, Agg backend): per-class IoU bars and a row-normalised confusion heatmap.

Class names come from the runs (``RunSummary.class_names``: S3DIS's 13, or a network's own), their colours
from :func:`pointgeope.constants.class_palette` (S3DIS's ``PALETTE`` for the 13). Each figure is made as
PNG bytes, which the report writes with its other files (:func:`pointgeope.report.write_report`).
"""
from __future__ import annotations

import io

import numpy as np

from pointgeope.constants import class_palette
from pointgeope.report.runs import RunSummary
from pointgeope.report.tables import pct

HATCHES = ("", "//", "..", "xx", "\\\\", "++")
DPI = 120


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _class_colours(num_classes: int) -> np.ndarray:
    return np.asarray(class_palette(num_classes), dtype=np.float64) / 255.0  # (C, 3) in [0, 1]


def _png(fig) -> bytes:
    """The figure as PNG bytes (closed): the report writes every file once all are made."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    _pyplot().close(fig)
    return buffer.getvalue()


def iou_bar_chart(runs: list[RunSummary]) -> bytes:
    """Grouped bars of the pooled per-class IoU (%), as PNG: one group per class in the class colour, one hatch
    per run."""
    plt = _pyplot()
    from matplotlib.patches import Patch

    names = runs[0].class_names
    n_cls, n_runs = len(names), len(runs)
    colours = _class_colours(n_cls)
    width = 0.8 / n_runs
    x = np.arange(n_cls)
    fig, ax = plt.subplots(figsize=(max(10.0, 0.5 * n_cls * (n_runs + 1)), 4.5))
    for i, run in enumerate(runs):
        iou = 100 * np.asarray(run.pooled["iou"], dtype=np.float64)
        pos = x - 0.4 + width * (i + 0.5)
        bars = ax.bar(pos, np.nan_to_num(iou), width, color=colours, edgecolor="black", linewidth=0.6,
                      hatch=HATCHES[i % len(HATCHES)])
        if n_runs <= 2:
            for bar, v in zip(bars, run.pooled["iou"], strict=True):
                ax.annotate(pct(v, 1), (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                            ha="center", va="bottom", fontsize=7, xytext=(0, 1), textcoords="offset points")
    ax.set_xticks(x)
    ax.set_xticklabels(names, rotation=35, ha="right")
    ax.set_ylabel("IoU (%)")
    ax.set_ylim(0, 105)
    ax.set_title(iou_title(runs), fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    if n_runs > 1:
        handles = [Patch(facecolor="white", edgecolor="black", hatch=HATCHES[i % len(HATCHES)], label=r.name)
                   for i, r in enumerate(runs)]
        ax.legend(handles=handles, loc="upper right", fontsize=8)
    return _png(fig)


def pooled_label(run: RunSummary) -> str:
    """``"pooled over 4 of 6 folds: Area_1, ..."``: what a figure of ``run`` pooled, the one text both figures'
    titles say it with (``RunSummary.pooled_over_text``)."""
    return f"pooled over {run.pooled_over_text()}"


def iou_title(runs: list[RunSummary]) -> str:
    """``"Per-class IoU: geope mIoU 50.1 (pooled over all 6 folds)"``, each run with the folds it pooled."""
    return "Per-class IoU: " + "; ".join(f"{r.name} mIoU {pct(r.pooled['miou'], 1)} ({pooled_label(r)})"
                                         for r in runs)


def row_normalised(confusion: np.ndarray) -> np.ndarray:
    """``confusion[g, p] / sum_p confusion[g, p]`` (float64); rows without ground truth are NaN."""
    m = np.asarray(confusion, dtype=np.float64)
    totals = m.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(totals > 0, m / totals, np.nan)


def confusion_heatmap(run: RunSummary) -> bytes:
    """Heatmap of the run's pooled confusion, each row divided by its ground-truth count (%), as PNG."""
    plt = _pyplot()
    shares = row_normalised(run.confusion)
    norm = 100 * shares
    names = run.class_names
    n = len(names)
    grow = min(16.0, max(0.0, 0.5 * (n - 13)))  # inches: 13 classes (S3DIS) fit the base size, more widen it
    fig, ax = plt.subplots(figsize=(8.5 + grow, 7.5 + grow))
    image = ax.imshow(np.ma.masked_invalid(norm), cmap="Blues", vmin=0, vmax=100)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="% of the ground-truth class")
    for g in range(n):
        for p in range(n):
            text = pct(shares[g, p], 1)   # rounded as the tables round; an empty cell (0.0, —) left blank
            if text not in ("0.0", "—"):
                ax.text(p, g, "100" if text == "100.0" else text, ha="center", va="center", fontsize=6,
                        color="white" if norm[g, p] > 60 else "black")
    ax.set_xticks(range(n))
    ax.set_yticks(range(n))
    ax.set_xticklabels(names, rotation=45, ha="right", fontsize=8)
    ax.set_yticklabels(names, fontsize=8)
    for labels in (ax.get_xticklabels(), ax.get_yticklabels()):  # a palette swatch behind each class name
        for label, colour in zip(labels, _class_colours(n), strict=True):
            label.set_bbox({"facecolor": tuple(colour), "edgecolor": "none", "pad": 1.5, "alpha": 0.8})
    ax.set_xlabel("prediction")
    ax.set_ylabel("ground truth")
    ax.set_title(f"{run.name}: confusion, row-normalised, {pooled_label(run)}", fontsize=9)
    return _png(fig)
