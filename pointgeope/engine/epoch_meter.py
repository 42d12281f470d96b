"""The running scores of one training epoch: loss, points, time and confusion of its batches, over the ranks.

A fold's ``last.pt`` written inside an epoch (``train.checkpoint_every``) carries the sums so far
(:meth:`EpochMeter.sums`, in :class:`pointgeope.engine.state.LoopState`'s ``epoch_sums``), and the resumed
run's meter starts from them, so that the epoch's logged loss, OA and mIoU (``log.txt``, TensorBoard) are
those of all its batches, as in the uninterrupted run, not of the batches after the resume::

    epoch_sums = {"totals": [loss sum, batches, points],   # float64 sums over every rank
                  "confusion": [[...] * C] * C,            # int64 counts, rows = ground truth
                  "seconds": float}                        # training time of the epoch so far

(plain lists and numbers: the checkpoint loads with ``weights_only=True``; ``{}`` at an epoch's end).
"""
from __future__ import annotations

import time

import numpy as np
import torch

from pointgeope.engine import distributed
from pointgeope.metrics import ConfusionMeter, scores
from pointgeope.number_kind import is_number


class EpochMeter:
    """Loss, points and confusion of one epoch's training batches, summed over the ranks.

    Args:
        num_classes, ignore_index: of the confusion (``ignore_index`` points are not counted).
        device: where the sums live (the rank's device: NCCL reduces CUDA tensors).
        carried: :meth:`sums` of this epoch's batches before a resume (``None`` or ``{}``: none). They are
            already summed over the ranks, so one rank (the main one) must carry them, the others ``None``.
        class_mean: the rule of mAcc and mIoU (``eval.class_mean``: ``"all"`` or ``"present"``,
            :func:`pointgeope.metrics.scores`), the same as the run's evaluation; no default here, where it
            would be a second copy of the config's.
    """

    def __init__(self, num_classes: int, ignore_index: int | None, device: torch.device,
                 carried: dict | None = None, *, class_mean: str):
        self.class_mean = class_mean
        self.confusion = ConfusionMeter(num_classes, ignore_index, device=device)
        self.device = device
        self.totals = np.zeros(3, dtype=np.float64)  # [loss sum, batches, points], on the host: no copy a step
        self.carried = np.zeros((num_classes, num_classes), dtype=np.int64)
        seconds = 0.0
        if carried:
            self.totals += np.asarray(carried["totals"], dtype=np.float64)
            self.carried = np.asarray(carried["confusion"], dtype=np.int64).reshape(num_classes, num_classes)
            seconds = float(carried["seconds"])
        self.t0 = time.perf_counter() - seconds
        self.lr = float("nan")  # the learning rate of the epoch's last step (the first parameter group's)

    def add(self, logits: torch.Tensor, target: torch.Tensor, loss: float, lr: float = float("nan")) -> None:
        """One training batch: logits ``(N, C)``, labels ``(N,)``, its loss and the learning rate it trained at
        (the epoch line's ``lr`` is its last batch's: the schedule's next value may lie past its end). Reads
        nothing on the host and copies nothing to the device (``ConfusionMeter.count``; the sums on the host):
        the meter adds no wait to the step's one read (its loss, with train_epoch's check of the loss and the gradients'
        norm on every rank)."""
        self.confusion.count(logits.detach(), target)
        self.totals += (loss, 1.0, target.shape[0])
        self.lr = lr

    def _reduced(self) -> tuple[torch.Tensor, np.ndarray]:
        """``(totals, confusion)`` of every rank's batches and the carried sums (collective; copies: the
        meter goes on counting)."""
        totals = distributed.all_reduce_sum(torch.from_numpy(self.totals.copy()).to(self.device))
        counts = torch.from_numpy(self.confusion.confusion + self.carried).to(self.device)
        return totals, distributed.all_reduce_sum(counts).cpu().numpy()

    def sums(self) -> dict:
        """The epoch's sums so far over every rank, as plain lists (collective): what ``last.pt`` carries."""
        totals, confusion = self._reduced()
        return {"totals": totals.tolist(), "confusion": confusion.tolist(), "seconds": time.perf_counter() - self.t0}

    def summary(self) -> tuple[dict, float, float, float]:
        """``(scores, mean loss, seconds, points per second)`` of every rank's batches (collective)."""
        seconds = time.perf_counter() - self.t0
        totals, confusion = self._reduced()
        loss, batches, points = totals.tolist()
        return scores(confusion, self.class_mean), loss / max(batches, 1), seconds, points / max(seconds, 1e-9)


def sums_problem(sums: object, num_classes: int | None = None) -> str | None:
    """What is wrong with ``sums`` as a checkpoint's ``epoch_sums`` (the module docstring's layout, ``{}``
    included; ``confusion`` of ``num_classes`` rows where given), ``None`` if nothing: the resumed meter reads
    each of them (a damaged one was a ``KeyError`` or ``ValueError`` traceback at the epoch's first batch)."""
    if not isinstance(sums, dict):
        return "a dict of the epoch's sums"
    if not sums:
        return None
    totals, confusion, seconds = sums.get("totals"), sums.get("confusion"), sums.get("seconds")
    rows = len(confusion) if isinstance(confusion, list) else -1
    square = rows > 0 and all(isinstance(r, list) and len(r) == rows for r in confusion)
    counts = square and all(type(c) is int and c >= 0 for r in confusion for c in r)
    if not (isinstance(totals, list) and len(totals) == 3 and all(is_number(t) for t in totals)
            and counts and rows == (num_classes or rows) and is_number(seconds)):  # any: a NaN loss is the run's own
        return (f"{{'totals': [loss sum, batches, points], 'confusion': {num_classes or 'C'} x "
                f"{num_classes or 'C'} counts, 'seconds': s}} or {{}}")
    return None
