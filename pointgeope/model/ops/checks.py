"""The argument checks shared by the point ops (``knn``, ``fps``, ``interpolate``, ``HierarchySpec``) and by
:mod:`pointgeope.nn`: one line saying what was expected and what came, naming the argument (``TypeError``
for a wrong type, ``ValueError`` for a wrong value). The one owner of these checks: ``pointgeope.nn`` sits
above the model and uses them from here; the model never imports ``pointgeope.nn``.

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

from pointgeope.geope_checks import check_real

__all__ = ["check_count", "check_finite", "check_coordinates", "check_model_dtype", "check_values", "COORD_LIMIT"]

# The largest |coordinate| the point ops take: 2^60 (about 1.15e18); check_coordinates says why.
COORD_LIMIT = 2 ** 60


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


def check_finite(name: str, value: Tensor) -> None:
    """Every entry of ``value`` finite (skipped while compiling or scripting: it reads the data). The message
    counts the bad entries and shows the first bad row."""
    if torch.jit.is_scripting() or torch.compiler.is_compiling() or value.is_meta:   # meta: no data to read
        return
    bad = ~torch.isfinite(value)
    if bool(bad.any()):
        _refuse(name, value, bad)


def check_coordinates(name: str, value: Tensor) -> None:
    """Coordinates every point op can take: finite and ``|x| <= COORD_LIMIT = 2^60`` (about 1.15e18), in one
    flag read on the host (skipped while compiling or scripting, as :func:`check_finite`).

    Why ``2^60``: every backend rounds the coordinates to float32 (or keeps float64) and sums squared
    differences, and float32's largest value is ``FLT_MAX = (2 - 2^-23) 2^127``. Within the limit a
    difference is at most ``2^61`` (rounding is monotone and ``2^61`` is a float32), so the direct distance
    ``(dx^2 + dy^2) + dz^2 <= 3 * 2^122`` of FPS and of the kNN kernels, and the Morton cube's side
    ``hi - lo <= 2^61``, stay finite. The torch kNN sets the bound: its candidates come from
    ``|q|^2 + |s|^2 - 2 q.s`` over coordinates centred on the support's mean (each at most ``2^61``), so
    ``|q|^2, |s|^2 <= 3 * 2^122`` and ``|2 q.s| <= 6 * 2^122``, and no partial sum exceeds
    ``12 * 2^122 = 1.5 * 2^125``, a factor 8 below ``FLT_MAX`` (at ``2^62`` it would reach ``1.5 * 2^129``
    and overflow). Beyond the limit a backend answers with an index past the end, a point that is not its
    own neighbour, or a crash. No real cloud comes near it (1e18 m is about 100 light years). Complex and bool
    coordinates are a ``TypeError`` (``geope_checks.check_real``: complex ones failed in ``torch.iinfo``).
    """
    check_real(name, value, integer=True)           # a dtype, no value read: checked when compiling too
    if torch.jit.is_scripting() or torch.compiler.is_compiling() or value.is_meta:
        return
    if _dtype_max(value.dtype) <= COORD_LIMIT:      # float16, int32, ...: only NaN and inf can be wrong
        if value.is_floating_point():
            check_finite(name, value)
        return
    bad = ~((value >= -COORD_LIMIT) & (value <= COORD_LIMIT))          # NaN and +-inf compare False
    if bool(bad.any()):
        _refuse(name, value, bad)


def _dtype_max(dtype: torch.dtype) -> float:
    """The largest value of ``dtype`` (1 for bool)."""
    if dtype.is_floating_point:
        return torch.finfo(dtype).max
    return 1 if dtype == torch.bool else torch.iinfo(dtype).max


def _refuse(name: str, value: Tensor, bad: Tensor) -> None:
    """The one-line ``ValueError`` for the entries ``bad`` (a mask like ``value``): its NaN and infinite
    entries if it has any, else those beyond ``COORD_LIMIT``; counted, with the first bad row shown."""
    if value.is_floating_point() and not bool(torch.isfinite(value).all()):
        bad = ~torch.isfinite(value)
        want, what, todo = f"finite {name}", "NaN or infinite entries", ""
    else:
        want = f"{name} within +-2^60 (about 1.15e18: float32 squared distances overflow beyond)"
        what, todo = "entries outside", "; recentre or rescale the coordinates"
    row = int(bad.reshape(value.shape[0], -1).any(1).nonzero()[0]) if value.dim() else 0
    shown = value[row].tolist() if value.dim() else value.item()
    raise ValueError(f"expected {want}, got {int(bad.sum())} {what} (the first in row {row}: {shown}){todo}")
