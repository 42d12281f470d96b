"""Semantic-segmentation metrics from a confusion matrix: OA, mAcc, mIoU and per-class IoU / accuracy.

Everything is computed from one integer confusion matrix ``M`` of shape ``(C, C)``, rows = ground truth,
columns = prediction (``M[g, p]`` = number of points of class ``g`` predicted as ``p``)::

    TP_c   = M[c, c]
    GT_c   = sum_p M[c, p]          (row sum: points whose label is c)
    PRED_c = sum_g M[g, c]          (column sum: points predicted as c)
    union_c = GT_c + PRED_c - TP_c  (= TP + FP + FN)

    oa    = sum_c TP_c / sum_c GT_c        overall accuracy
    acc_c = TP_c / GT_c                    per-class accuracy (recall);   NaN where GT_c == 0
    iou_c = TP_c / union_c                 per-class IoU;                 NaN where union_c == 0

and the class means, two rules (``class_mean``, a run's ``eval.class_mean``)::

    present:  macc = mean of acc_c over the classes with GT_c > 0
              miou = mean of iou_c over the classes with union_c > 0
    all:      macc = (1/C) sum_c TP_c / (GT_c + 1e-10)          (the PTv1 authors' rule: an absent
              miou = (1/C) sum_c TP_c / (union_c + 1e-10)         class counts 0 in both means)

The ``present`` means are taken exactly in the decimals the per-class values print as
(:func:`~pointgeope.decimals.decimal_mean`), so that a mean on a tie rounds half up as every printed score
does (IoUs 0.2, 0.0625, 0.24: mIoU 0.1675, 16.8 %, where the binary mean 0.16749999999999998 printed 16.7);
``all``'s ``+1e-10`` is part of the authors' rule and its mean stays theirs.

Per class, either way:

* a class with no ground truth and no prediction has IoU and accuracy NaN (``present`` leaves it out of
  both means, ``all`` counts it 0);
* a class with no ground truth but false positives has IoU 0 (it counts in mIoU: the predictions were
  wrong) and accuracy NaN (recall is undefined; ``present`` leaves it out of mAcc, ``all`` counts 0).

``all`` is Point Transformer v1's (``tool/test.py`` with ``util/common_util.py``'s
``intersectionAndUnion``) and the final area result of Pointcept's ``SemSegTester``; Pointcept masks
classes with ``union == 0`` only in its per-scene log lines. On a full S3DIS area that holds every class
and on the pooled 6-fold matrix the rules agree (to the ``1e-10``); they differ where a class is absent
(a room, a smoke test, an area without one of the classes), where ``all`` lowers the mean by the absent
classes' share and ``present`` scores the classes that are there.

6-fold cross-validation: the standard number pools the six test areas' confusion matrices and scores the
sum (Pointcept ``tools/test_s3dis_6fold.py``); the mean of the per-fold scores is a different number, also
in use, so both are available here (:func:`pooled_scores`, :func:`mean_of_fold_scores`).
"""
from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np

from pointgeope.constants import IGNORE_LABEL, NUM_CLASSES
from pointgeope.decimals import decimal_mean
from pointgeope.plural import first_of

SCORE_KEYS = ("oa", "macc", "miou")
CLASS_MEAN_TEXT = {  # the rules of mAcc / mIoU (``class_mean``), each with the line reports print
    "present": "mAcc and mIoU average the classes present (ground truth, or for IoU a prediction)",
    "all": "mAcc and mIoU average all classes with +1e-10, an absent class counting 0 (the PTv1 authors' rule)",
}
CLASS_MEANS = tuple(CLASS_MEAN_TEXT)


def _listed(labels: list) -> str:
    """The first ten of ``labels`` (the distinct ones out of range, sorted), then how many more."""
    return first_of(labels, 10)


def _check_labels(values: np.ndarray, num_classes: int, what: str) -> None:
    bad = (values < 0) | (values >= num_classes)
    if bad.any():
        shown = _listed(np.unique(values[bad]).tolist())
        raise ValueError(f"expected {what} labels in 0..{num_classes - 1}, got {int(bad.sum())} values "
                         f"out of range: {shown}")


def confusion_matrix(pred, target, num_classes: int = NUM_CLASSES,
                     ignore_index: int | None = IGNORE_LABEL) -> np.ndarray:
    """Confusion matrix of integer labels, rows = ground truth, columns = prediction.

    Args:
        pred: predicted labels, any integer array-like of shape ``(N,)`` (or any shape equal to ``target``'s).
        target: ground-truth labels, same shape; points with ``target == ignore_index`` are skipped.
        num_classes: ``C``.
        ignore_index: the label of unlabelled points (``None``: no label is ignored).

    Returns:
        ``np.ndarray`` int64 of shape ``(C, C)``: ``M[g, p]`` = number of points with label ``g`` and
        prediction ``p``. Computed as ``bincount(target * C + pred, minlength=C*C).reshape(C, C)``.

    Raises:
        ValueError: shapes differ, or a kept target or a prediction lies outside ``0..C-1``.
    """
    pred = np.asarray(pred)
    target = np.asarray(target)
    if pred.shape != target.shape:
        raise ValueError(f"expected pred and target of the same shape, got {pred.shape} and {target.shape}")
    for name, arr in (("pred", pred), ("target", target)):
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"expected integer {name} labels, got dtype {arr.dtype}")
    pred = pred.reshape(-1).astype(np.int64, copy=False)
    target = target.reshape(-1).astype(np.int64, copy=False)
    if ignore_index is not None:
        keep = target != ignore_index
        pred, target = pred[keep], target[keep]
    _check_labels(target, num_classes, "target")
    _check_labels(pred, num_classes, "pred")
    counts = np.bincount(target * num_classes + pred, minlength=num_classes * num_classes)
    return counts.reshape(num_classes, num_classes).astype(np.int64, copy=False)


def _as_confusion(confusion, what: str = "confusion") -> np.ndarray:
    """``confusion`` as float64 ``(C, C)``, refused (``ValueError`` naming ``what``) unless a square matrix of
    finite non-negative numbers: a NaN count made every score NaN without a word."""
    m = np.asarray(confusion)
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ValueError(f"expected {what} a square confusion matrix (C, C), got shape {m.shape}")
    if m.size and (not np.issubdtype(m.dtype, np.number) or np.iscomplexobj(m)):
        raise ValueError(f"expected {what} a confusion matrix of non-negative counts, got dtype {m.dtype}")
    m = m.astype(np.float64)
    if not np.isfinite(m).all():
        raise ValueError(f"expected {what} a confusion matrix of finite counts, got "
                         f"{int((~np.isfinite(m)).sum())} NaN or infinite entries")
    if (m < 0).any():
        raise ValueError(f"expected {what} a confusion matrix of non-negative counts, got {m[m < 0][0]:g}")
    return m


def scores(confusion, class_mean: str = "present") -> dict:
    """OA, mAcc, mIoU and per-class IoU / accuracy of a confusion matrix (see the module docstring);
    ``class_mean``: ``"present"`` or ``"all"``, the rule of mAcc and mIoU.

    Returns:
        ``{"oa": float, "macc": float, "miou": float, "iou": list[float] (C), "acc": list[float] (C)}``;
        values are fractions in [0, 1]; NaN where undefined (``oa`` is NaN for an empty matrix, a mean is
        NaN when no class qualifies).
    """
    if class_mean not in CLASS_MEANS:
        raise ValueError(f"expected class_mean in {CLASS_MEANS}, got {class_mean!r}")
    m = _as_confusion(confusion)
    tp = np.diag(m)
    gt = m.sum(axis=1)
    pred = m.sum(axis=0)
    union = gt + pred - tp
    with np.errstate(invalid="ignore", divide="ignore"):
        iou = np.where(union > 0, tp / union, np.nan)
        acc = np.where(gt > 0, tp / gt, np.nan)
    total = gt.sum()
    every = class_mean == "all" and m.shape[0] > 0
    return {
        "oa": float(tp.sum() / total) if total > 0 else float("nan"),
        "macc": float(np.mean(tp / (gt + 1e-10))) if every else decimal_mean(acc),
        "miou": float(np.mean(tp / (union + 1e-10))) if every else decimal_mean(iou),
        "iou": [float(v) for v in iou],
        "acc": [float(v) for v in acc],
    }


# --- several folds --------------------------------------------------------------------------------------

def _same_shape(confusions: Sequence) -> list[np.ndarray]:
    """The matrices of ``confusions`` (float64, each checked by :func:`_as_confusion` as ``confusions[i]``),
    refused (``ValueError``) when there is none or their shapes differ (numpy said "inhomogeneous shape")."""
    mats = [_as_confusion(c, f"confusions[{i}]") for i, c in enumerate(confusions)]
    if not mats:
        raise ValueError("expected at least one confusion matrix, got none")
    for i, m in enumerate(mats):
        if m.shape != mats[0].shape:
            raise ValueError(f"expected confusion matrices of one shape {mats[0].shape}, matrix {i} has shape "
                             f"{m.shape} (confusions[{i}])")
    return mats


def pool(confusions: Sequence) -> np.ndarray:
    """Sum of confusion matrices of the same shape (e.g. the six test areas of 6-fold cross-validation),
    int64 ``(C, C)``; each matrix of whole, finite, non-negative counts (a fractional count is refused,
    not truncated)."""
    confusions = list(confusions)
    mats = _same_shape(confusions)
    for i, m in enumerate(mats):
        if (m != np.floor(m)).any():
            raise ValueError(f"expected whole counts in confusions[{i}] (matrix {i}), got "
                             f"{m[m != np.floor(m)][0]:g}")
    return np.sum(np.stack([np.asarray(c) for c in confusions]).astype(np.int64), axis=0)   # exact past 2^53


def pooled_scores(confusions: Sequence, class_mean: str = "present") -> dict:
    """Scores of the pooled (summed) confusion matrix: the standard 6-fold S3DIS number."""
    return scores(pool(confusions), class_mean)


def mean_of_fold_scores(confusions: Sequence, class_mean: str = "present") -> dict:
    """Mean over folds of each fold's scores (``oa``, ``macc``, ``miou``, and per class ``iou`` / ``acc``).

    Each fold is scored on its own (:func:`scores`) and the folds' values are averaged exactly in the decimals
    they print as (:func:`decimal_mean`: a tie rounds half up), skipping NaN (a class absent from a fold does
    not count for that fold). Unlike :func:`pooled_scores`, every fold
    weighs the same whatever its number of points. ``class_mean``: the rule of each fold's mAcc and mIoU.
    """
    per_fold = [scores(c, class_mean) for c in _same_shape(confusions)]
    out = {key: decimal_mean([s[key] for s in per_fold]) for key in SCORE_KEYS}
    for key in ("iou", "acc"):
        table = np.array([s[key] for s in per_fold], dtype=np.float64)  # (folds, C)
        out[key] = [decimal_mean(table[:, c]) for c in range(table.shape[1])]
    return out


# --- torch accumulator ------------------------------------------------------------------------------------

class ConfusionMeter:
    """Accumulates a ``(C, C)`` confusion matrix of torch tensors on their own device.

    The counts live in an int64 tensor on the device of the first batch (or on ``device``), allocated once,
    and each batch adds to them there (:meth:`count`: ``index_put_`` with ``accumulate``; :meth:`update`: the
    batch's ``C*C`` histogram); nothing moves to the CPU until :attr:`confusion` is read. :meth:`update` checks
    the labels (one host read a batch), :meth:`count` does not (a training loop's); both check shapes and
    dtypes by one rule and count alike.
    In DDP, call :meth:`all_reduce` once at the end of evaluation to sum the counts of all ranks.

    Example::

        meter = ConfusionMeter(num_classes=13)
        for batch in loader:
            meter.update(model(batch), batch.y)   # logits (N, C) or predicted labels (N,)
        meter.all_reduce()
        print(meter.scores()["miou"])
    """

    def __init__(self, num_classes: int = NUM_CLASSES, ignore_index: int | None = IGNORE_LABEL,
                 device=None):
        try:  # 2.7 was silently 2; a whole float (13.0, np.float64(13)) is a count
            whole = isinstance(num_classes, (float, np.floating)) and float(num_classes).is_integer()
            self.num_classes = int(num_classes) if whole else operator.index(num_classes)
        except TypeError:
            raise TypeError(f"expected num_classes an int >= 1, got {num_classes!r}") from None
        if isinstance(num_classes, bool) or self.num_classes < 1:
            raise ValueError(f"expected num_classes an int >= 1, got {num_classes!r}")
        self.ignore_index = ignore_index
        self.device = device
        self._counts = None  # torch.int64 (C*C,) once something was counted

    def __repr__(self) -> str:
        n = 0 if self._counts is None else int(self._counts.sum())
        return f"{type(self).__name__}(num_classes={self.num_classes}, ignore_index={self.ignore_index}, points={n})"

    def reset(self) -> None:
        self._counts = None

    def update(self, logits_or_pred, target) -> None:
        """Count one batch, its labels checked.

        Args:
            logits_or_pred: logits ``(N, C)`` (the arg-max is taken) or predicted labels ``(N,)``.
            target: labels ``(N,)``; ``ignore_index`` points are skipped.

        Raises:
            ValueError: shapes or dtypes other than these, or a prediction or a kept label outside ``0..C-1``
                (one host read a batch, to decide).
        """
        import torch

        pred, target = self._batch(logits_or_pred, target)
        c, ignore = self.num_classes, self.ignore_index
        ignored = None if ignore is None else target == ignore
        # cell = target * C + pred, an ignored point's set to 0 (taken back out of cell 0 below): one (N,) int64
        # buffer made, the rest in place (each (N,) tensor made costs more than the arithmetic on it)
        cell = target * c
        cell += pred
        if ignored is not None:
            cell.masked_fill_(ignored, 0)
        if cell.numel():
            # pred in 0..C-1 and target within [min(0, ignore), max(C - 1, ignore)] (no int64 overflow of
            # target * C) make cell in 0..C*C-1 exactly when every kept target is in 0..C-1: the one host read
            p_lo, p_hi, t_lo, t_hi, lo, hi = torch.stack([*torch.aminmax(pred), *torch.aminmax(target),
                                                          *torch.aminmax(cell)]).tolist()
            t_range = (0, c - 1) if ignore is None else (min(0, ignore), max(c - 1, ignore))
            if not (0 <= p_lo and p_hi < c and t_range[0] <= t_lo and t_hi <= t_range[1] and 0 <= lo and hi < c * c):
                self._check(pred, target, ignored)   # exact: raises unless only ignored points' pred is off
        self._add_cells(cell, None if ignored is None else ignored.sum())

    def _check(self, pred, target, ignored) -> None:
        """Raise the ``ValueError`` of :meth:`update` when a kept point's prediction or label is outside
        ``0..C-1`` (``ignored``: bool ``(N,)`` of the points not counted, or ``None``); the exact test, made
        where :meth:`update`'s range test of the whole batch did not pass."""
        import torch

        c = self.num_classes
        keep = torch.ones_like(target, dtype=torch.bool) if ignored is None else ~ignored
        bad_target, bad_pred = keep & ((target < 0) | (target >= c)), keep & ((pred < 0) | (pred >= c))
        if bool((bad_target | bad_pred).any()):
            raise ValueError(f"expected labels in 0..{c - 1}; out of range: target "
                             f"[{_listed(torch.unique(target[bad_target]).tolist())}], "
                             f"pred [{_listed(torch.unique(pred[bad_pred]).tolist())}]")

    def _add_cells(self, cell, ignored) -> None:
        """Add the histogram of ``cell`` (int64 ``(N,)`` in ``0..C*C-1``) less ``ignored`` (a count tensor of
        the points in cell 0 that are not counted, or ``None``): ``bincount`` on the CPU, where it is one pass
        with a ``C*C`` output; elsewhere ``index_put_``, which reads nothing on the host (a CUDA ``bincount``
        reads its input's maximum)."""
        import torch

        c = self.num_classes
        if self._counts is None:
            self._counts = torch.zeros(c * c, dtype=torch.long, device=self._device(cell.device))
        if cell.device.type == "cpu":
            counts = torch.bincount(cell, minlength=c * c)
        else:
            counts = torch.zeros(c * c, dtype=torch.long, device=cell.device)
            counts.index_put_((cell,), torch.ones_like(cell), accumulate=True)
        if ignored is not None:
            counts[0] -= ignored
        self._counts += counts.to(self._counts.device)

    def count(self, logits, target) -> None:
        """Count one batch of logits ``(N, C)`` and labels ``(N,)`` on their device without reading anything on
        the host (on a GPU :meth:`update`'s check waits for the queue to drain): the labels are not checked,
        and a point whose label is ``ignore_index`` or outside ``0..C-1`` is not counted. For a training loop,
        whose loss has refused such labels already. The shapes and dtypes are checked (metadata, no read):
        logits of another class count would put points in other classes' cells."""
        pred, target = self._batch(logits, target, logits_only=True)
        keep = (target >= 0) & (target < self.num_classes)
        if self.ignore_index is not None:
            keep &= target != self.ignore_index
        self._add(pred, target, keep)

    def _batch(self, logits_or_pred, target, logits_only: bool = False):
        """The checks of :meth:`update` and :meth:`count`, their one owner (shapes and dtypes: metadata, no host
        read): ``(pred (N,), target (N,))`` as int64 on the predictions' device, the arg-max of logits
        ``(N, C)``, or predicted labels ``(N,)`` as given unless ``logits_only``."""
        import torch

        c, shape = self.num_classes, tuple(logits_or_pred.shape)
        logits = logits_or_pred.dim() == 2
        if (logits_only or logits) and (not logits or shape[1] != c or tuple(target.shape) != shape[:1]):
            raise ValueError(f"expected logits of shape (N, {c}) and target (N,), got {shape} and "
                             f"{tuple(target.shape)}")
        if logits_or_pred.dim() != 1 and not logits or target.dim() != 1 or target.shape[0] != shape[0]:
            raise ValueError(f"expected pred (N,) or logits (N, {c}) and target (N,), got {shape} and "
                             f"{tuple(target.shape)}")
        if logits and logits_or_pred.is_complex():
            raise ValueError(f"expected real logits, got {logits_or_pred.dtype}")
        pred = logits_or_pred.argmax(dim=1) if logits else logits_or_pred
        for name, labels in (("pred", pred), ("target", target)):
            if labels.is_floating_point() or labels.is_complex():
                raise ValueError(f"expected integer labels, got {name} {labels.dtype}")
        return pred.long(), target.to(device=pred.device, dtype=torch.long)

    def _add(self, pred, target, keep) -> None:
        """Add the points of ``keep`` (bool ``(N,)``) to their cells ``target * C + pred``, on the device (no host
        read; the counts allocated once, on ``device`` or the first batch's)."""
        import torch

        c = self.num_classes
        if self._counts is None:
            self._counts = torch.zeros(c * c, dtype=torch.long, device=self._device(pred.device))
        cell = torch.where(keep, target * c + pred, 0).to(self._counts.device)   # a point not kept adds 0
        self._counts.index_put_((cell,), keep.long().to(self._counts.device), accumulate=True)

    def _device(self, default):
        import torch

        return default if self.device is None else torch.device(self.device)

    def all_reduce(self) -> None:
        """Sum the counts over all DDP ranks (a no-op unless ``torch.distributed`` is initialised).

        Every rank must call it. A rank that counted nothing contributes zeros on the device its backend
        needs (CUDA for NCCL, else CPU).
        """
        import torch
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return
        if self._counts is None:
            if self.device is not None:
                device = torch.device(self.device)
            elif dist.get_backend() == "nccl":
                device = torch.device("cuda", torch.cuda.current_device())
            else:
                device = torch.device("cpu")
            self._counts = torch.zeros(self.num_classes ** 2, dtype=torch.long, device=device)
        dist.all_reduce(self._counts, op=dist.ReduceOp.SUM)

    @property
    def confusion(self) -> np.ndarray:
        """The counts as ``np.ndarray`` int64 ``(C, C)``, rows = ground truth, columns = prediction."""
        c = self.num_classes
        if self._counts is None:
            return np.zeros((c, c), dtype=np.int64)
        return self._counts.detach().cpu().numpy().astype(np.int64).reshape(c, c)

    def scores(self, class_mean: str = "present") -> dict:
        """:func:`scores` of the accumulated matrix (``class_mean``: the rule of the class means)."""
        return scores(self.confusion, class_mean)
