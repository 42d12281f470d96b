"""The argument checks of `pointgeope.nn`'s public functions: one line saying what was expected and what came,
naming the argument (`TypeError` for a wrong type, `ValueError` for a wrong value or shape).

Positions are checked where they enter, before any backend sees them: a NaN or an infinity has no nearest
neighbour and no rotation, and would come back as an invalid index or as finite garbage after a softmax.
Under `torch.compile` and TorchScript the data-dependent checks (finiteness) are skipped, so a compiled
graph has no break of ours; run the model once eagerly to have them.
"""
from __future__ import annotations

import operator

import torch
from torch import Tensor

from pointgeope.geope import check_scale          # the one owner of the rule for base and scales

__all__ = ["check_count", "check_scale", "check_float_tensor", "check_finite"]


def check_count(name: str, value, minimum: int = 1) -> int:
    """`value` as a Python int `>= minimum` (ints, NumPy ints and integer 0-dim tensors; not bools or floats)."""
    if isinstance(value, bool) or (isinstance(value, Tensor) and (value.dim() or value.is_floating_point())):
        raise TypeError(f"expected {name} an int >= {minimum}, got {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"expected {name} an int >= {minimum}, got {value!r} ({type(value).__name__})") from None
    if number < minimum:
        raise ValueError(f"expected {name} >= {minimum}, got {number}")
    return number


def check_float_tensor(name: str, value, *, dim: int | None = None) -> Tensor:
    """`value` is a floating-point tensor (of `dim` dims, if given): an integer tensor would be rotated and
    truncated, or be neighbours of integer distances."""
    if not isinstance(value, Tensor):
        raise TypeError(f"expected {name} a tensor, got {type(value).__name__}")
    if not value.is_floating_point():
        raise TypeError(f"expected {name} a floating-point tensor, got dtype {value.dtype} (cast it, e.g. "
                        f"{name}.float())")
    if dim is not None and value.dim() != dim:
        raise ValueError(f"expected {name} of {dim} dims, got shape {tuple(value.shape)}")
    return value


def check_finite(name: str, value: Tensor) -> None:
    """Every entry of `value` finite (skipped while compiling or scripting: it reads the data)."""
    if torch.jit.is_scripting() or torch.compiler.is_compiling():
        return
    bad = ~torch.isfinite(value)
    if bool(bad.any()):
        row = int(bad.reshape(value.shape[0], -1).any(1).nonzero()[0]) if value.dim() else 0
        raise ValueError(f"expected finite {name}, got {int(bad.sum())} NaN or infinite entries "
                         f"(the first in row {row}: {value[row].tolist() if value.dim() else value.item()})")
