"""The batches of a room's test-time pieces and the forward that adds their scores to the room's votes.

:func:`packed` is the one rule that groups pieces into batches (in their order, at most ``limit`` points
each, a larger piece alone, and only pieces of one :func:`piece_key`), for the batches first made and for those
split again. :func:`stack` puts pieces (``(room index (n_i,), Points(pos, x))``) one after another into one forward's
input, :class:`VoteSink` runs it and adds each piece's scores to its points::

    pos = [pos_1; pos_2; ...]   (M, 3)      offset = cumsum(n_i)   (B,)      M = sum n_i <= batch_points
    scores[index_i] += s(model(pos, x, offset))[rows of piece i]      votes[index_i] += 1

(:mod:`pointgeope.engine.evaluate` says what ``s`` is and where the pieces come from.)

A batch gives each piece the scores it gets alone (one piece per forward, ``eval.batch_points: 1``, as
Pointcept's ``SemSegTester`` runs its fragments) when the network keeps the clouds of a batch apart and
nothing it computes depends on the batch as a whole. PTv1 keeps them apart. PTv3 keeps them apart (patches,
sparse convolutions and pooling never cross a cloud's end; batch norm uses its running statistics) except for
one batch-wide value: its serialization depth, the bits of the batch's ``max(grid_coord) + 1``, which changes
the Hilbert orders of every cloud in it. So PTv3's pieces are packed by their own depth (:func:`piece_key`):
a batch holds pieces of one depth only, and its depth is each piece's own, as when it runs alone. The
scores are then those of one piece per forward up to floating-point summation order (the same on the CPU;
``tests/engine/test_vote_depth.py``), whatever ``eval.batch_points`` and the halving of a batch that does not
fit in GPU memory (:class:`VoteSink`, whose parts are parts of a batch of one depth).
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import NamedTuple, TypeVar

import numpy as np
import torch

from pointgeope.data.points import Points
from pointgeope.engine import build
from pointgeope.engine.ahead import copy_and_build, wait_for_side_stream
from pointgeope.engine.config import Config
from pointgeope.model.ops.hierarchy import PointHierarchy
from pointgeope.model.ptv3.serialization import serialization_depth

CPU_BATCH_POINTS = 400_000      # eval.batch_points: null on the CPU
CUDA_BATCH_POINTS = 1_600_000    # eval.batch_points: null on an accelerator (halved while it does not fit)


T = TypeVar("T")


def packed(items: Iterable[T], size: Callable[[T], int], limit: int,
           key: Callable[[T], Hashable] | None = None) -> Iterator[list[T]]:
    """Consecutive groups of ``items``, greedily in their order: an item joins the current group while the
    group's total ``size`` stays within ``limit`` and, with ``key``, the item's key is the group's, else starts
    the next one (an item over ``limit`` is a group alone; no group is empty). Lazy: one group is held at a
    time."""
    group: list[T] = []
    total, group_key = 0, None
    for item in items:
        n = size(item)
        k = key(item) if key is not None else None
        if group and (total + n > limit or k != group_key):
            yield group
            group, total = [], 0
        group.append(item)
        total += n
        group_key = k
    if group:
        yield group


def piece_key(piece: tuple[np.ndarray, Points]) -> int | None:
    """What the pieces of one batch must share (:func:`packed`'s ``key``): a PTv3 piece's (one with
    ``grid_coord``) serialization depth, ``serialization_depth(grid_coord)`` (the bits of its
    ``max(grid_coord) + 1``), which its network takes batch-wide; None for PTv1's pieces, which any batch holds."""
    data = piece[1]
    return serialization_depth(data.grid_coord) if "grid_coord" in data else None


class PieceBatch(NamedTuple):
    """Pieces stacked for one forward: the room ``index`` of each piece, ``pos (M, 3)``, ``x (M, in)``,
    ``offset (B,)`` cumulative sizes (host), and their ``hierarchy`` when it was built beside the forward;
    on CUDA ``pos``, ``x`` and the hierarchy may already be on the device, made on a side stream until
    ``event`` (``engine.ahead.copy_and_build``). Pieces of ``eval.protocol: ptv3`` also carry ``grid_coord (M, 3)``
    int64 (host), which the forward passes on as ``model(pos, x, offset, grid_coord=...)``."""

    index: list[np.ndarray]
    pos: torch.Tensor
    x: torch.Tensor
    offset: torch.Tensor
    hierarchy: PointHierarchy | None
    event: torch.cuda.Event | None = None
    grid_coord: torch.Tensor | None = None


def stack(pieces: list[tuple[np.ndarray, Points]], spec, pin: bool, device: torch.device | None = None) -> PieceBatch:
    """One batch of ``pieces``, pinned for the copy with ``pin``; with ``spec`` its hierarchy: on the host,
    or with a CUDA ``device`` copied there and built on this thread's side stream (``ahead.copy_and_build``)."""
    pos = torch.cat([data.pos for _, data in pieces])
    x = torch.cat([data.x for _, data in pieces])
    offset = torch.from_numpy(np.cumsum([index.shape[0] for index, _ in pieces]))
    index = [index for index, _ in pieces]
    if pin:
        pos, x = pos.pin_memory(), x.pin_memory()
    if "grid_coord" in pieces[0][1]:      # PTv3's pieces (eval.protocol: ptv3): no PTv1 hierarchy
        grid = torch.cat([data.grid_coord for _, data in pieces])
        return PieceBatch(index, pos, x, offset, None, None, grid.pin_memory() if pin else grid)
    if spec is not None and device is not None and device.type == "cuda":
        (pos, x), hierarchy, event = copy_and_build(lambda: (pos.to(device, non_blocking=True),
                                                             x.to(device, non_blocking=True)),
                                                    lambda copied: copied[0], spec, offset.tolist(), device)
        return PieceBatch(index, pos, x, offset, hierarchy, event)
    return PieceBatch(index, pos, x, offset, spec(pos, offset) if spec is not None else None)


def split(batch: PieceBatch, limit: int) -> list[PieceBatch]:
    """``batch`` as consecutive batches of at most ``limit`` points (at least one piece each; a split
    batch drops its hierarchy, which the model then builds)."""
    sizes = [index.shape[0] for index in batch.index]
    if sum(sizes) <= limit:
        return [batch]
    out, rows = [], 0
    for part in packed(range(len(sizes)), sizes.__getitem__, limit):   # piece numbers of each part
        first, end = part[0], part[-1] + 1
        offset = torch.from_numpy(np.cumsum(sizes[first:end]))
        stop = rows + int(offset[-1])
        grid = None if batch.grid_coord is None else batch.grid_coord[rows:stop]
        out.append(PieceBatch(batch.index[first:end], batch.pos[rows:stop], batch.x[rows:stop], offset, None,
                              None, grid))
        rows = stop
    return out


class VoteSink:
    """Runs the forward of each batch and adds its scores to the room's sums.

    On CUDA the scores come back to the host asynchronously and are added once the next batch's forward
    is queued, so the GPU does not wait for the host's additions. A batch that does not fit in GPU memory
    is split in halves, and later batches are cut to the size that fitted (the same predictions: a part of
    a batch holds pieces of one :func:`piece_key`, see the module docstring)."""

    def __init__(self, model, scores: np.ndarray, votes: np.ndarray, cfg: Config, device: torch.device):
        self.model, self.scores, self.votes, self.device, self.cfg = model, scores, votes, device, cfg
        self.softmax, self.limit = cfg.eval.vote == "softmax", None
        self.waiting = None   # (piece indices, host scores, CUDA event) not yet added

    def _forward(self, batch: PieceBatch) -> torch.Tensor:
        copy = self.device.type == "cuda"
        pos, x, offset = (t.to(self.device, non_blocking=copy) for t in (batch.pos, batch.x, batch.offset))
        given = {} if batch.hierarchy is None else {"hierarchy": batch.hierarchy.to(self.device)}
        if batch.grid_coord is not None:
            given["grid_coord"] = batch.grid_coord.to(self.device, non_blocking=copy)
        with build.autocast(self.cfg, self.device, evaluation=True):   # eval.amp: float32 unless set
            logits = self.model(pos, x, offset, **given).float()
        return torch.softmax(logits, dim=1) if self.softmax else logits

    def add(self, batch: PieceBatch) -> None:
        if batch.event is not None:                   # made on a side stream: this stream waits for it
            wait_for_side_stream(batch.event, [batch.pos, batch.x], batch.hierarchy, self.device)
            batch = batch._replace(event=None)
        for part in split(batch, self.limit) if self.limit else [batch]:
            try:
                p = self._forward(part)
            except torch.cuda.OutOfMemoryError:
                if len(part.index) == 1:
                    raise
                torch.cuda.empty_cache()
                self.limit = int(part.offset[-1]) // 2
                self.add(part)
                continue
            host = p.to("cpu", non_blocking=True)
            event = None
            if self.device.type == "cuda":       # on the stream of the copy: this device's, not the current one's
                event = torch.cuda.Event()
                event.record(torch.cuda.current_stream(self.device))
            self.finish()
            self.waiting = (part.index, host, event)

    def finish(self) -> None:
        """Add the scores of the last batch run."""
        if self.waiting is None:
            return
        indices, host, event = self.waiting
        self.waiting = None
        if event is not None:
            event.synchronize()
        p, start = host.numpy(), 0
        for index in indices:
            # A piece holds each index once (one point per voxel), so += is an exact scatter.
            self.scores[index] += p[start:start + index.shape[0]]
            self.votes[index] += 1
            start += index.shape[0]


def batch_points(cfg: Config, device: torch.device) -> int:
    """``eval.batch_points``, or when it is None the device's default: :data:`CPU_BATCH_POINTS` on the
    CPU, :data:`CUDA_BATCH_POINTS` on an accelerator (halved while a batch does not fit, :class:`VoteSink`)."""
    if cfg.eval.batch_points is not None:
        return cfg.eval.batch_points
    return CPU_BATCH_POINTS if device.type == "cpu" else CUDA_BATCH_POINTS
