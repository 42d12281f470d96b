"""Training batches too small for batch norm, one error for both backbones: :class:`SmallBatchError`.

Batch norm in training normalises every channel over the rows of the batch, and needs two rows or more (torch's
``BatchNorm1d`` raises "Expected more than 1 value per channel when training" from deep inside the forward). Where
a batch has one row is a property of its sizes, known on the host without reading a value:

- PTv3 (:mod:`pointgeope.model.ptv3.pooling`): a batch that pools to one voxel, or of one point at the stem.
- PTv1 (:func:`check_stage_rows`): a cloud of ``n`` points keeps ``max(1, n // S_s)`` at stage ``s``, with
  ``S_s = strides[0] * ... * strides[s]`` (FPS keeps ``max(1, n // stride)`` of each cloud; integer division
  composes, ``(n // a) // b = n // (a b)``). Every cloud keeps one point or more, so a batch of two clouds always
  has two rows; a batch of one cloud needs ``n >= 2 S`` for the last stage's ``S = prod(strides)`` (512 for the
  published network's ``(1, 4, 4, 4, 4)``).

The engine rewrites the advice naming the config keys that made the batch so small
(:mod:`pointgeope.engine.small_batch`).
"""
from __future__ import annotations

import math

from pointgeope.errors import UserError

__all__ = ["SmallBatchError", "check_stage_rows", "one_cloud_points"]


class SmallBatchError(UserError, ValueError):
    """A training batch of one row where batch norm needs two or more: ``fact`` says where and how many rows; the
    message adds what to do (the engine rewrites it naming the config keys that made the batch so small,
    :mod:`pointgeope.engine.small_batch`)."""

    def __init__(self, fact: str, advice: str) -> None:
        super().__init__(f"{fact}; {advice}")
        self.fact = fact


def one_cloud_points(strides) -> int:
    """The fewest points of a cloud that, alone in a training batch, keeps two rows at every stage of ``strides``:
    ``2 * prod(strides)`` (its last stage keeps ``max(1, n // prod(strides))``)."""
    return 2 * math.prod(strides)


def check_stage_rows(rows: list[int], strides: tuple[int, ...], clouds: int) -> None:
    """:class:`SmallBatchError` unless every stage of a PTv1 training batch has two rows or more: ``rows`` the
    points of each stage (the hierarchy's shapes, no value read), ``clouds`` the batch's clouds."""
    for s, count in enumerate(rows):
        if count < 2:
            points = rows[0]
            need = one_cloud_points(strides)
            fact = (f"a training batch of {clouds} cloud{'s' * (clouds != 1)} of {points} "
                    f"point{'s' * (points != 1)} keeps {count} at stage {s + 1} (strides {tuple(strides)}: a cloud of "
                    f"n points keeps max(1, n // {math.prod(strides[:s + 1])}) there), and its batch norm needs two "
                    f"rows or more")
            raise SmallBatchError(fact, f"give one cloud of {need} points or more, or two clouds or more, or call "
                                        f"model.eval() to predict")
