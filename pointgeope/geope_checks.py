"""The checks of GeoPE's numeric arguments, one owner for every caller: the operator
(:mod:`pointgeope.geope`), the networks' layers and encodings, and :mod:`pointgeope.nn`.

- :func:`check_real`: features rotate in floating point; an integer feature would come back truncated, a
  complex one real.
- :func:`check_scale`: a frequency base, a position scale, a grid size must be a finite number ``> 0``; a
  base ``<= 0`` gives NaN frequencies and a NaN or infinite scale NaN phases, without a word.
- :func:`check_phase_scales`: the phases per unit of position that a ``base`` and a ``pos_scale`` make, within
  :data:`PHASE_SCALE_MIN` and :data:`PHASE_SCALE_MAX`: beyond, the phases of accepted coordinates overflow
  float32 (NaN features), below, a frequency rounds to 0 (a block that never turns).
- :func:`check_coordinates` (and :func:`check_finite`): positions and the point ops' coordinates finite and
  within ``+-COORD_LIMIT``; :func:`coordinates_outside` is that rule as a mask (no value read), for callers that
  fold it into a read of their own (``pointgeope.nn``'s phase warning); :func:`check_counted` the same rule with
  the refused entries counted in a tensor's shape (the PTv3 inputs and encodings, whose rows are not points). Here,
  below the model, so that the operator's ``GeoPE`` module checks its positions by the point ops' rule;
  :mod:`pointgeope.model.ops.checks` re-exports the public names, where they were first defined.

Each raises ``TypeError`` for a wrong type and ``ValueError`` for a wrong value, in one line that names the
argument and says what was expected and what came.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

from pointgeope.number_kind import is_real_scalar

__all__ = ["check_real", "check_scale", "check_phase_scales", "check_finite", "check_coordinates", "check_counted",
           "coordinates_outside", "COORD_LIMIT", "PHASE_SCALE_MAX", "PHASE_SCALE_MIN"]

# The largest |coordinate| the point ops take: 2^60 (about 1.15e18); check_coordinates says why.
COORD_LIMIT = 2 ** 60
# The phases per unit of position (and the frequencies) the encodings take: check_phase_scales says why.
PHASE_SCALE_MAX = 2.0 ** 66
PHASE_SCALE_MIN = 2.0 ** -126     # float32's smallest normal number
_FLOAT32_MAX = torch.finfo(torch.float32).max


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
    try:
        number = float(value)
    except OverflowError:       # an int past float's range (10**400): as the config's keys say it
        raise ValueError(f"expected {name} a finite number > 0{what}, got {value!r}, beyond float's range "
                         f"(+-1.8e308)") from None
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"expected {name} a finite number > 0{what}, got {number}")
    return number


def check_phase_scales(base: float, pos_scale: float | None, lowest: float, axes: int = 1) -> None:
    """``ValueError`` unless every phase per unit of position ``k(e) = pos_scale * base^e / axes`` (``pos_scale``
    ``None`` for an encoding without one, PointROPE's: ``k = w``, and the message names ``base`` alone) and every
    frequency ``w(e) = base^e``, for the exponents ``e`` in ``[lowest, 0]`` of the encoding (GeoPE's
    ``-2 b / (3 n)``: ``lowest = -2 (n - 1) / (3 n)``; RoPE's ``-q / Q``: ``-(Q - 1) / Q``), lie within
    ``[PHASE_SCALE_MIN, PHASE_SCALE_MAX] = [2^-126, 2^66]`` (``w`` within float32's ``[2^-126, FLT_MAX]``).
    ``base`` and ``pos_scale`` are finite and ``> 0`` (:func:`check_scale`); ``log k`` is linear in ``e``, so the
    extremes are at ``e = lowest`` and ``e = 0``.

    Why ``2^66``: the encodings turn by ``k`` times a position in float32 (at least), positions within
    ``+-2^60`` (:func:`check_coordinates`), so displacements within ``2^61`` per axis and ``|p_j - p_i| <=
    sqrt(3) 2^61``: the phase ``k |p_j - p_i| <= sqrt(3) 2^127`` stays below float32's ``2^128`` (at ``k = 2^67``
    linear GeoPE's phase of two opposite corners is ``inf`` and its features NaN). Why ``2^-126``: the tables are
    made in float32, where a frequency below the smallest normal number loses its bits and, below ``2^-150``,
    rounds to 0: that block never turns, without a word. The bound cannot say whether the phases of the caller's
    positions are still resolved (float32 keeps 24 bits: at ``|k p| >= 2^24`` rad its step exceeds 1 rad); that is
    the positions', said where they are read (``pointgeope.nn``'s phase warning).

    The message names the quantity out of range (the frequency ``base^e``, or the phase per unit ``k``), its bound
    and value, and the range of the argument that mends it at the other's value (:func:`_fitting`): ``pos_scale``
    where ``k(0) = pos_scale / axes`` is out, else ``base``."""
    per = f" / {axes}" if axes != 1 else ""
    if pos_scale is None:                                       # PointROPE: radians per grid cell, base^e
        scale, given = 1.0, f"base={base!r}"
    else:
        scale, given = pos_scale, f"base={base!r}, pos_scale={pos_scale!r}"
    phase = f"phase per unit {'pos_scale * ' * (pos_scale is not None)}base^e{per}"
    for e in (0.0, lowest):                                     # at e = 0 the phase is pos_scale's alone
        try:
            w = base ** e
        except OverflowError:                                   # e.g. (1e-320) ** -1
            w = math.inf
        for value, what, top, shown in ((w, "frequency base^e", _FLOAT32_MAX, "FLT_MAX"),
                                        (scale * w / axes, phase, PHASE_SCALE_MAX, "2^66")):
            if not PHASE_SCALE_MIN <= value <= top:
                names = "base" if what.startswith("frequency") or pos_scale is None else "base and pos_scale"
                why, mend = _out_of_range(what, value > top), _fitting(scale, lowest, axes, e, pos_scale, base)
                raise ValueError(f"expected {names} whose {what} lies in [2^-126, {shown}] for e in [{lowest:.4g}, 0], "
                                 f"got {value:.4g} at e = {e:.4g} ({given}): {why}; {mend}")


def _out_of_range(what: str, over: bool) -> str:
    """What a frequency or phase scale out of :func:`check_phase_scales`'s range does (``over``: above it)."""
    if what.startswith("frequency"):
        return ("that frequency overflows float32 (an infinite entry of the float32 table: NaN features)" if over else
                "that frequency is below float32's normal range (its block turns by rounded angles or, below "
                "2^-150, not at all)")
    return ("positions up to 2^61 apart per axis (the point ops' limit) would turn by phases that overflow float32 "
            "(NaN features)" if over else "that phase per unit is below float32's normal range (its block turns by "
            "rounded angles or, below 2^-150, not at all)")


def _fitting(scale: float, lowest: float, axes: int, e: float, pos_scale: float | None, base: float) -> str:
    """The values that :func:`check_phase_scales` takes, for its message: ``pos_scale`` at this ``base`` where the
    phase at ``e = 0`` is out (``pos_scale / axes``: ``pos_scale base^e / axes`` within the bounds at both ends of
    ``e``), else ``base`` at this ``pos_scale`` (``base^lowest`` within ``[max(2^-126, axes 2^-126 / scale),
    min(FLT_MAX, axes 2^66 / scale)]``); each end moved inwards by 0.1 %, so that the four significant digits shown
    are taken too. Where this ``base`` spans more than any ``pos_scale`` fits (``base^lowest`` beyond ``2^192``
    either way), that is said, and the range of ``base`` at ``pos_scale = 1``."""
    if e == 0.0:                                                # pos_scale / axes is out: no base mends that
        try:
            w = base ** lowest
        except OverflowError:
            w = math.inf
        lo, hi = axes * PHASE_SCALE_MIN / min(1.0, w) * 1.001, axes * PHASE_SCALE_MAX / max(1.0, w) * 0.999
        if lo <= hi:
            return f"pos_scale within [{lo:.4g}, {hi:.4g}] fits at base={base!r}"
        return (f"no pos_scale fits at base={base!r} (its frequencies span more than float32's range of phases); "
                + _fitting(1.0, lowest, axes, lowest, 1.0, base))    # pos_scale 1: k(0) = 1 / axes fits
    low = max(PHASE_SCALE_MIN, axes * PHASE_SCALE_MIN / scale)
    high = min(_FLOAT32_MAX, axes * PHASE_SCALE_MAX / scale)

    def base_at(x: float) -> float:                             # base^lowest = x (lowest < 0: decreasing)
        try:
            return math.exp(math.log(x) / lowest)
        except OverflowError:
            return math.inf

    lo, hi = base_at(high) * 1.001, base_at(low) * 0.999
    at = f" at pos_scale={pos_scale!r}" if pos_scale is not None else ""
    return f"base >= {lo:.4g} fits{at}" if math.isinf(hi) else f"base within [{lo:.4g}, {hi:.4g}] fits{at}"


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
    coordinates are a ``TypeError`` (:func:`check_real`: complex ones failed in ``torch.iinfo``).
    """
    check_real(name, value, integer=True)           # a dtype, no value read: checked when compiling too
    if torch.jit.is_scripting() or torch.compiler.is_compiling() or value.is_meta:
        return
    if not value.is_floating_point() and _dtype_max(value.dtype) <= COORD_LIMIT:   # int32, uint8: every value
        return
    bad = coordinates_outside(value)
    if bool(bad.any()):
        _refuse(name, value, bad)


def check_counted(name: str, value: Tensor) -> None:
    """Floating-point positions by :func:`check_coordinates`' rule in one read (a count), the message counting the
    entries refused in ``value``'s shape rather than showing a row: for ``(B, L, 3)`` positions a row is a whole
    cloud. NaN and infinite entries are named first (a second count, read only then)."""
    outside = int(coordinates_outside(value).sum())
    bad = int((~torch.isfinite(value)).sum()) if outside else 0
    if bad:
        raise ValueError(f"expected finite {name}, got {bad} non-finite values (NaN or inf) in {tuple(value.shape)}")
    if outside:
        raise ValueError(f"expected {name} within +-2^60 (as the point ops take them), got {outside} values outside "
                         f"in {tuple(value.shape)}: recentre or rescale the coordinates")


def coordinates_outside(value: Tensor) -> Tensor:
    """The bool mask of the entries of ``value`` that :func:`check_coordinates` refuses: NaN, ``+-inf``, or
    ``|x| > COORD_LIMIT``; a tensor op, nothing is read. The rule per dtype: a float is compared in its own
    dtype, where ``2^60`` is exact (float32, bfloat16, float64) or rounds to ``inf`` (float16, whose largest
    finite value is 65504): there every finite value is inside and ``isfinite`` alone decides. Integers are
    compared without ``abs`` (``-2^63`` has none in int64); those of a narrower range than ``2^60`` (int32,
    uint8) are all inside, and are not compared at all (the limit would wrap in their dtype)."""
    if value.is_floating_point():
        return ~(torch.isfinite(value) & (value.abs() <= COORD_LIMIT))
    if _dtype_max(value.dtype) <= COORD_LIMIT:
        return torch.zeros_like(value, dtype=torch.bool)
    return (value < -COORD_LIMIT) | (value > COORD_LIMIT)


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
