"""Batches of point clouds packed along the first dimension, described by cumulative counts.

Point Transformer's convention: ``B`` clouds of ``n_0, ..., n_{B-1}`` points are concatenated into one
``(N, 3)`` tensor and described by ``offset = (n_0, n_0 + n_1, ..., N)`` of shape ``(B,)``::

    # rows:    [ cloud 0: 0 .. o0-1 | cloud 1: o0 .. o1-1 | ... | cloud B-1: o(B-2) .. N-1 ]
    # offset:  (o0, o1, ..., N)
"""
from __future__ import annotations

import torch
from torch import Tensor

from pointgeope.number_kind import is_integer_tensor

__all__ = ["check_offset", "offset_tensor", "counts", "offset_from_counts", "cloud_of_rows"]


def offset_tensor(offset, device: torch.device | None = None, name: str = "offset") -> Tensor:
    """``offset`` given on the host (a list, tuple or NumPy array) as a tensor of its own dtype on ``device``; a
    tensor as it is. Its own dtype, so that :func:`check_offset` refuses floats by name (a ``dtype=long`` copy
    would truncate 2.5 to 2)."""
    if isinstance(offset, Tensor):
        return offset
    try:
        return torch.as_tensor(offset, device=device)
    except (TypeError, ValueError, RuntimeError):
        raise ValueError(f"expected {name} a (B,) integer tensor or list of ints, got {offset!r}") from None


def check_offset(offset: Tensor | list[int], num_points: int, name: str = "offset") -> list[int]:
    """Validate ``offset`` (B,) against ``num_points`` rows and return it as a Python list (a list, tuple or
    NumPy array is checked as it is: offsets kept on the host spare a device-to-host copy, which waits for the
    device).

    Raises ``ValueError`` unless the offsets are integers (not bools), strictly increasing, positive and end at
    ``num_points`` (every cloud must hold at least one point).
    """
    offset = offset_tensor(offset, name=name)                 # a host list, tuple or array: its own dtype
    if offset.dim() != 1 or offset.numel() == 0:
        raise ValueError(f"expected {name} of shape (B,) with B >= 1, got {tuple(offset.shape)}")
    if not is_integer_tensor(offset):                       # a bool: True read as a count of 1
        raise ValueError(f"expected integer {name} (cumulative point counts), got dtype {offset.dtype}")
    values = [int(v) for v in offset.tolist()]
    if values[-1] != num_points:
        raise ValueError(f"expected {name}[-1] == number of points {num_points}, got {values[-1]}")
    previous = 0
    for b, v in enumerate(values):
        if v <= previous:
            raise ValueError(f"expected strictly increasing positive {name} (no empty cloud), "
                             f"got {name}[{b}] = {v} after {previous}")
        previous = v
    return values


def counts(offset: list[int]) -> list[int]:
    """Points per cloud ``n_b = o_b - o_{b-1}`` from the offsets as a list."""
    return [end - start for start, end in zip([0] + offset[:-1], offset, strict=False)]


def offset_from_counts(sizes: list[int], device: torch.device | str) -> Tensor:
    """Cumulative counts as an int64 tensor on ``device``."""
    return torch.tensor(sizes, dtype=torch.long, device=device).cumsum(0)


def cloud_of_rows(offset: Tensor, rows: int) -> Tensor:
    """The cloud ``b`` of every row ``(rows,)`` int64, on ``offset``'s device: ``b`` repeated ``n_b`` times. The
    row count given (``offset[-1]``) keeps the device's work from being read back to size the output."""
    sizes = torch.diff(offset, prepend=offset.new_zeros(1))
    return torch.repeat_interleave(torch.arange(offset.shape[0], device=offset.device), sizes, output_size=rows)
