"""The checks of GeoPE's numeric arguments, one owner for every caller: the operator
(:mod:`pointgeope.geope`), the networks' layers and encodings, and :mod:`pointgeope.nn`.

- :func:`check_real`: features rotate in floating point; an integer feature would come back truncated, a
  complex one real.
- :func:`check_scale`: a frequency base, a position scale, a grid size must be a finite number ``> 0``; a
  base ``<= 0`` gives NaN frequencies and a NaN or infinite scale NaN phases, without a word.

Each raises ``TypeError`` for a wrong type and ``ValueError`` for a wrong value, in one line that names the
argument and says what was expected and what came.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from pointgeope.number_kind import is_real_scalar

__all__ = ["check_real", "check_scale"]


def check_real(name: str, value: Tensor, integer: bool = False) -> None:
    """``TypeError`` naming ``value`` unless it is a floating-point tensor (with ``integer``, an integer one
    too: grid positions). Bool and complex tensors are refused either way."""
    if not (value.is_floating_point() or (integer and not value.is_complex() and value.dtype != torch.bool)):
        raise TypeError(f"expected {name} a floating-point{' or integer' * integer} tensor, got dtype "
                        f"{value.dtype} (cast it, e.g. {name}.float())")


def check_scale(name: str, value, what: str = "") -> float:
    """``value`` as a finite float ``> 0`` (``base``, ``pos_scale``, ``grid_size``, ``grid_unit``).

    ``TypeError`` for what is not a real number (a bool, a string, a tensor of more than one value);
    ``ValueError`` naming the argument for a number that is not finite or not positive. ``what`` is added
    to the message after "a finite number > 0" (e.g. the unit).
    """
    if not is_real_scalar(value):   # a bool, NumPy's, a bool tensor: no number (float(np.True_) was 1.0)
        raise TypeError(f"expected {name} a finite number > 0{what}, got {value!r} ({type(value).__name__})")
    number = float(value)
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"expected {name} a finite number > 0{what}, got {number}")
    return number
