"""How coarsely a float type holds coordinates far from 0, measured against the model's voxel: the one rule behind
``predict``'s warning for scans whose file kept float32 (:mod:`pointgeope.scans.precision`) and the networks'
warning for float32 coordinates given to their ``forward`` (:mod:`pointgeope.model.coord_check`).

A float of ``p`` significant bits holds ``x`` in steps of ``spacing(x) = eps 2^floor(log2 |x|)`` (``eps = 2^(1-p)``:
float32 ``2^-23``, bfloat16 ``2^-7``). A step ``s`` puts a voxel's points on at most ``grid / s`` planes per axis,
each coordinate off by up to ``s / 2``; steps within :data:`STEP_SHARE` (an eighth) of the voxel are off by
``grid / 16`` at most (2.5 mm at 0.04 m), near the millimetres the training rooms are written in. float32's steps
being powers of two, the rule fires from ``|x| >= 2^16`` m at a 0.04 m voxel (steps of 7.8 mm) and ``2^15`` m at
0.02 m (3.9 mm): at every UTM easting (166-834 km), and at every northing (0.5 m steps at 4.2e6 m).
"""
from __future__ import annotations

import math

import torch

__all__ = ["STEP_SHARE", "spacing", "too_coarse"]

STEP_SHARE = 1 / 8      # steps past an eighth of a voxel: a voxel's points on at most 8 planes an axis


def spacing(r: float, dtype: torch.dtype) -> float:
    """The step of `dtype`'s numbers at magnitude `r`: `eps 2^floor(log2 r)` (`eps = 2^-nmant`: float32 `2^-23`,
    bfloat16 `2^-7`), between `r eps / 2` and `r eps`; 0 at 0."""
    return torch.finfo(dtype).eps * 2.0 ** (math.frexp(r)[1] - 1) if r > 0 else 0.0


def too_coarse(step: float, grid_size: float) -> bool:
    """Whether coordinates in steps of ``step`` metres lose what voxels of ``grid_size`` metres resolve: the step
    exceeds :data:`STEP_SHARE` of the voxel."""
    return step > STEP_SHARE * grid_size
