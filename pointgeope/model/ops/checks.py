"""The argument checks shared by the point ops (``knn``, ``fps``, ``interpolate``, ``HierarchySpec``) and by
:mod:`pointgeope.nn`: one line saying what was expected and what came, naming the argument (``TypeError``
for a wrong type, ``ValueError`` for a wrong value). The one owner of these checks: ``pointgeope.nn`` sits
above the model and uses them from here; the model never imports ``pointgeope.nn``. The coordinates' checks
(``check_coordinates``, ``check_finite``, ``COORD_LIMIT``) are :mod:`pointgeope.geope_checks`'s, re-exported here:
the ``GeoPE`` module below the model checks its positions with them.

Coordinates are checked where they enter, before any backend sees them: a NaN or an infinity has no
nearest neighbour and no farthest point, and each backend would fail its own way (an out-of-range index,
a sample of the NaN point, an int64 crash in the Morton code). So is a finite coordinate too large for
float32 squared distances (:func:`check_coordinates`: ``|x| <= COORD_LIMIT``, one bound for every backend and
dtype). The check reads one flag on the host (on a GPU, one synchronisation), which the ops already do for
their offsets. Under ``torch.compile`` and TorchScript the data-dependent check is skipped, so a compiled
graph has no break of ours.
"""
from __future__ import annotations

import operator

import torch
from torch import Tensor

from pointgeope.geope_checks import COORD_LIMIT, check_coordinates, check_finite  # their owner; in __all__

__all__ = ["check_count", "check_flag", "check_finite", "check_coordinates", "check_model_dtype", "check_values",
           "COORD_LIMIT"]


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


def check_flag(name: str, value) -> bool:
    """``value``, a switch such as ``check_finite``, if it is ``True`` or ``False``: anything else is refused, as
    ``"no"``, ``"false"`` or ``[False]`` are truthy and would turn on what they ask off (and ``0``, ``None`` read as
    off only by accident)."""
    if not isinstance(value, bool):
        raise TypeError(f"expected {name} True or False, got {value!r} ({type(value).__name__})")
    return value


def check_model_dtype(name: str, value: Tensor, dtype: torch.dtype, narrower: bool = False) -> None:
    """A network's input ``value`` in its parameters' ``dtype``, as ``nn.Linear`` wants it, with a message that
    names the input and says what to cast (a float64 cloud from NumPy into a float32 network failed deep inside
    a layer, "mat1 and mat2 must have the same dtype"). ``narrower``: coordinates, promoted to the features' dtype
    where they meet, may be a float that promotes to ``dtype``. Under autocast, what it casts: features in a half
    dtype or float32 (not into a float64 model), coordinates in float32 or the autocast dtype (``torch.cat``
    refuses another half dtype there). Dtypes only: no value is read, nothing waits for a GPU."""
    if value.dtype == dtype:
        return
    device = value.device.type
    if torch.is_autocast_enabled(device):
        cast = ((torch.float32, torch.get_autocast_dtype(device)) if narrower
                else (torch.float16, torch.bfloat16, torch.float32) if dtype != torch.float64 else ())
        if value.dtype in cast:
            return
    elif narrower and torch.promote_types(value.dtype, dtype) == dtype:
        return
    raise TypeError(f"expected {name} in the model's dtype {dtype}{' or narrower' * narrower}, got {value.dtype}: "
                    f"cast it ({name}.to({dtype})) or the model (model.to({value.dtype}))")


def check_values(op: str, **tensors: Tensor) -> None:
    """Refuse ``meta`` tensors (a shape without values) where ``op``'s output depends on the values (``knn``,
    ``fps``: which points are near or far), naming them; torch said "Tensor.item() cannot be called on meta
    tensors". An attribute read: nothing waits for a GPU. The checks of the values skip meta tensors, so an op
    whose output has a shape the values do not change (``geope_qk``) runs on them."""
    if torch.compiler.is_compiling():
        return
    meta = [name for name, value in tensors.items() if isinstance(value, Tensor) and value.is_meta]
    if meta:
        got = "a meta tensor" if len(meta) == 1 else "meta tensors"
        raise ValueError(f"expected {', '.join(meta)} with values, got {got} (a shape without data): {op} picks "
                         "points by their coordinates; give tensors on a real device (cpu, cuda)")
