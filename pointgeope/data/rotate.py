"""Rotations of point clouds about a coordinate axis, shared by the augmentations of both recipes
(``transforms.RandomRotate`` and its z case ``RandomRotateZ``).

A right-handed rotation by ``theta`` about axis ``a`` turns the plane ``(u, v)`` of the other two axes, taking
``u`` towards ``v``: ``(u, v)`` = (y, z) about x, (z, x) about y, (x, y) about z::

    u' = cos(theta) u - sin(theta) v,   v' = sin(theta) u + cos(theta) v,   a' = a
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["check_axis", "rotate_about"]

_PLANES = {"x": (1, 2), "y": (2, 0), "z": (0, 1)}   # the plane (u, v) a turn about the axis takes u towards v


def check_axis(axis: str) -> tuple[int, int]:
    """The plane ``(u, v)`` of ``axis``, or a ``ValueError`` for an axis other than x, y, z."""
    if axis not in _PLANES:
        raise ValueError(f"expected a rotation axis 'x', 'y' or 'z', got {axis!r}")
    return _PLANES[axis]


def rotate_about(coord: np.ndarray, axis: str, theta: float, centre: Sequence[float]) -> np.ndarray:
    """``R_axis(theta) (p - c) + c`` of ``coord (N, 3)`` (module docstring), a new array of its dtype: in the
    plane ``(u, v)``, ``u' = cos u - sin v``, ``v' = sin u + cos v`` of ``p - c`` (taken in coord's dtype, the
    turn in float64, cast explicitly: NumPy 1's value-based promotion would keep a float32 array float32 against
    the float64 scalars) and the axis coordinate kept exactly."""
    u, v = check_axis(axis)
    c, s = np.float64(np.cos(theta)), np.float64(np.sin(theta))
    centre = np.asarray(centre).astype(coord.dtype)
    a = (coord[:, u] - centre[u]).astype(np.float64)
    b = (coord[:, v] - centre[v]).astype(np.float64)
    out = coord.copy()
    out[:, u] = c * a - s * b + centre[u]
    out[:, v] = s * a + c * b + centre[v]
    return out
