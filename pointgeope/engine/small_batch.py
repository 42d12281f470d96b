"""Training batches too small for batch norm: refused at a fold's start when the config makes them certain
(either backbone), and, when a batch of either backbone turns out so (:mod:`pointgeope.model.small_batch`), one line
naming the keys that made it small.

Batch norm in training needs two rows or more. The clouds of a batch never share a voxel (the batch index
leads PTv3's serialization codes), so only a batch of one cloud can pool to one row: one sample per process,
or two merged into one by Mix3D (``data.mix_prob``; its pairs' grids both start at 0, so two one-point
samples share a voxel). A cloud's size comes from ``data.voxel_max`` (at most that many points per sample),
``data.crop_rate`` (that fraction of a sample's voxels, PTv3's sphere crop) and ``data.grid_size`` (the size
of its voxels)::

    data.voxel_max=1 data.batch_size=1      -> refused at the start (batch_norm_problem)

PTv1 keeps ``max(1, n // prod(model.strides))`` points of a cloud of ``n`` at its last stage
(:mod:`pointgeope.model.small_batch`), so a one-cloud batch cut to ``data.voxel_max < 2 * prod(model.strides)``
points fails at every step: refused at the start too (:func:`ptv1_batch_norm_problem`; data that voxelises
smaller anyway is the step's to say)::

    data.voxel_max=500 data.batch_size=1    -> refused at the start (strides 1, 4, 4, 4, 4: 512 points needed)
    data.crop_rate=0.001 data.batch_size=1  -> the step's SmallBatchError, rewritten (small_batch_advice):
        PTv3's pooling (stride 2) merged the 2 voxels of a training batch into one, ...: the batch is one
        cloud of 2 points: data.crop_rate=0.001 keeps that fraction of a sample's voxels of data.grid_size=0.12 m
        (about 2000 before the crop); raise data.crop_rate ...
"""
from __future__ import annotations

import math

from pointgeope.model.small_batch import one_cloud_points

__all__ = ["PTV1_STAGES", "PTV3_STAGES", "batch_norm_problem", "one_cloud_batches", "ptv1_batch_norm_problem",
           "small_batch_advice"]


def one_cloud_batches(data, per_rank: int) -> bool:
    """A training batch of ``per_rank`` samples may be a single cloud (``data`` the ``data`` section)."""
    return per_rank == 1 or (per_rank == 2 and data.mix_prob > 0)


def _one_cloud_how(data, per_rank: int) -> str:
    """How a training batch of ``per_rank`` samples is one cloud (:func:`one_cloud_batches`), for a refusal."""
    return ("1 sample per process" if per_rank == 1 else
            f"2 samples per process, which Mix3D (data.mix_prob={data.mix_prob}) merges into one cloud")


def batch_norm_problem(data, per_rank: int) -> str | None:
    """``data.voxel_max=1`` where a training batch may be one cloud: one point (or two in one voxel), which
    batch norm cannot normalise in any step; ``None`` otherwise (smaller clouds are the step's to say)."""
    if data.voxel_max != 1 or not one_cloud_batches(data, per_rank):
        return None
    how = _one_cloud_how(data, per_rank)
    return (f"data.voxel_max=1 with {how}: a PTv3 training batch of one point (or two in one voxel), and its "
            "batch norm needs two rows or more; raise data.voxel_max (PTv3's recipe: 204800) or data.batch_size")


def ptv1_batch_norm_problem(data, strides, per_rank: int) -> str | None:
    """PTv1: ``data.voxel_max`` below ``2 * prod(strides)`` (``c`` = 2 clouds merged by Mix3D: half that) where a
    training batch may be one cloud of at most ``c * voxel_max`` points, whose last stage then keeps one point in
    every step (``max(1, n // prod(strides))``), which batch norm cannot normalise; ``None`` otherwise."""
    if data.voxel_max is None or not one_cloud_batches(data, per_rank):
        return None
    clouds, need = (1 if per_rank == 1 else 2), one_cloud_points(strides)
    if clouds * data.voxel_max >= need:
        return None
    how = _one_cloud_how(data, per_rank)
    return (f"data.voxel_max={data.voxel_max} with {how}: a PTv1 training batch of one cloud of at most "
            f"{clouds * data.voxel_max} points keeps 1 at its last stage (model.strides {list(strides)}: n // "
            f"{math.prod(strides)}), and its batch norm needs two rows or more; raise data.voxel_max to "
            f"{-(-need // clouds)} or more, or data.batch_size")


PTV3_STAGES = "model.ptv3.enc_depths and the lists with it"   # the keys of fewer stages, per backbone
PTV1_STAGES = "model.planes and the lists with it"


def small_batch_advice(data, points: int, stages: str = PTV3_STAGES) -> str:
    """What made a one-cloud training batch of ``points`` points too small for batch norm, and what to do:
    ``data.voxel_max`` when the cloud is its samples cut to it (``points`` = ``voxel_max`` or twice, a Mix3D
    pair), else ``data.crop_rate`` when set (first when below one half, else after ``data.grid_size``), with
    the estimate of the voxels before the crop (``points / crop_rate``) that tells the two apart, else
    ``data.grid_size``; raising ``data.batch_size`` always helps, fewer stages (the keys ``stages`` of the
    backbone: PTv3's by default) when the cloud has two points or more."""
    grid = f"data.grid_size={data.grid_size} m"
    if data.voxel_max is not None and points in (data.voxel_max, 2 * data.voxel_max):
        cause = f"data.voxel_max={data.voxel_max} cuts each sample to that many points; raise data.voxel_max"
    elif data.crop_rate is not None:
        before = (f"data.crop_rate={data.crop_rate} keeps that fraction of a sample's voxels of {grid} (about "
                  f"{points / data.crop_rate:.0f} before the crop)")
        fixes = ("raise data.crop_rate or lower data.grid_size" if data.crop_rate < 0.5 else
                 "lower data.grid_size or raise data.crop_rate")
        cause = f"{before}; {fixes}"
    else:
        cause = f"{grid} leaves a sample that few voxels; lower data.grid_size"
    fewer = f", or use fewer stages ({stages})" if points > 1 else ""
    return (f"the batch is one cloud of {points} point{'s' * (points != 1)}: {cause}, or raise data.batch_size "
            f"(a batch of several clouds never pools to one row){fewer}")
