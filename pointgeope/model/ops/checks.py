"""The argument checks shared by the point ops (``knn``, ``fps``, ``interpolate``, ``HierarchySpec``) and by
:mod:`pointgeope.nn`: one line saying what was expected and what came, naming the argument (``TypeError``
for a wrong type, ``ValueError`` for a wrong value). The one owner of these checks: ``pointgeope.nn`` sits
above the model and uses them from here; the model never imports ``pointgeope.nn``.

Coordinates are checked where they enter, before any backend sees them: a NaN or an infinity has no
nearest neighbour and no farthest point, and each backend would fail its own way (an out-of-range index,
a sample of the NaN point, an int64 crash in the Morton code). The check reads one flag on the host (on a
GPU, one synchronisation), which the ops already do for their offsets. Under ``torch.compile`` and
TorchScript the data-dependent check is skipped, so a compiled graph has no break of ours.
"""
from __future__ import annotations

import operator

import torch
from torch import Tensor

__all__ = ["check_count", "check_finite"]


def check_count(name: str, value, minimum: int = 1) -> int:
    """``value`` as a Python int ``>= minimum`` (ints, NumPy ints and integer 0-dim tensors; not bools or
    floats, not even ``2.0``: a float count is a mistake upstream, not a count)."""
    if isinstance(value, bool) or (isinstance(value, Tensor) and (value.dim() or value.is_floating_point())):
        raise TypeError(f"expected {name} an int >= {minimum}, got {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"expected {name} an int >= {minimum}, got {value!r} ({type(value).__name__})") from None
    if number < minimum:
        raise ValueError(f"expected {name} >= {minimum}, got {number}")
    return number


def check_finite(name: str, value: Tensor) -> None:
    """Every entry of ``value`` finite (skipped while compiling or scripting: it reads the data). The message
    counts the bad entries and shows the first bad row."""
    if torch.jit.is_scripting() or torch.compiler.is_compiling():
        return
    bad = ~torch.isfinite(value)
    if bool(bad.any()):
        row = int(bad.reshape(value.shape[0], -1).any(1).nonzero()[0]) if value.dim() else 0
        raise ValueError(f"expected finite {name}, got {int(bad.sum())} NaN or infinite entries "
                         f"(the first in row {row}: {value[row].tolist() if value.dim() else value.item()})")
