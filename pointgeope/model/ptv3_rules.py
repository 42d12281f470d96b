"""PTv3's settings rules that hold without torch: a pooling stride is a power of two, and a head is wide enough
for its q/k encoding. Their one owner: the layers (``ptv3.pooling.SerializedPooling``,
``qk_encodings.QKEncoding``) and the config's check (``engine.config_values.ptv3_problem``, which runs before
torch is imported: a mistake in a PTv3 config is told without torch's start, as ``bench/bench_command_start.py``
times for other config mistakes) ask them.

Minimum head widths ``D`` (:data:`MIN_HEAD_DIM`): GeoPE and LinGeoPE turn 3-vector blocks (``D >= 3``; channels past
the last whole block stay unturned), the rotary encodings turn pairs on each of the three axes (``D >= 6``);
``none`` reads no position.
"""
from __future__ import annotations

import math
import numbers

__all__ = ["MIN_HEAD_DIM", "head_width_problem", "stride_problem"]

MIN_HEAD_DIM: dict[str, int] = {"none": 1, "geope": 3, "lingeope": 3, "rope3d": 6, "point3drope": 6, "pointrope": 6}


def _whole(value: object) -> int | None:
    """``value`` as an ``int`` when it is a whole number (an ``int``, a numpy integer, a finite real of integer
    value such as ``2.0``: what Pointcept's assertion ``stride == 2 ** (ceil(stride) - 1).bit_length()``
    accepts), else None (a bool, a string, ``2.5``, ``inf``, ``nan``)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real) and math.isfinite(value) and float(value).is_integer():
        return int(value)
    return None


def stride_problem(stride: object) -> str | None:
    """What is wrong with a pooling ``stride``, or None: it must be ``2^d``, ``d >= 0`` (a voxel of the
    coarser grid ``grid >> d`` is the points whose codes agree but for their last ``3 d`` bits; ``d = 0``, stride
    1, keeps the grid and merges only the points that share a voxel, as Pointcept's assertion allows), given as
    any whole number (``4``, ``numpy.int64(4)``, ``4.0``; not a bool)."""
    n = _whole(stride)
    if n is None or n < 1 or n & (n - 1):
        return f"expected a power of two (1, 2, 4, 8, ...), got {stride!r}"
    return None


def head_width_problem(encoding: str, head_dim: int) -> str | None:
    """What is wrong with heads of width ``head_dim`` (an int) for the q/k ``encoding`` (a key of
    :data:`MIN_HEAD_DIM`; another name is the problem), or None."""
    if encoding not in MIN_HEAD_DIM:
        return f"expected a positional encoding in {tuple(MIN_HEAD_DIM)}, got {encoding!r}"
    if head_dim < MIN_HEAD_DIM[encoding]:
        return f"expected head_dim >= {MIN_HEAD_DIM[encoding]} for {encoding}, got {head_dim}"
    return None
