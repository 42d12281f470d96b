"""The argument checks of `pointgeope.nn`'s public functions: one line saying what was expected and what came,
naming the argument (`TypeError` for a wrong type, `ValueError` for a wrong value or shape).

Positions are checked where they enter, before any backend sees them: a NaN or an infinity has no nearest
neighbour and no rotation, and would come back as an invalid index or as finite garbage after a softmax.
Under `torch.compile` and TorchScript the data-dependent checks (finiteness) are skipped, so a compiled
graph has no break of ours; run the model once eagerly to have them.
"""
from __future__ import annotations

import warnings

import torch
from torch import Tensor

from pointgeope.coord_steps import spacing  # its owner (the step of a dtype at a magnitude)
from pointgeope.geope import geometry_dtype  # its owner (model.rotation re-exports it)
from pointgeope.geope_checks import (  # the owner of the rules for features, scales and coordinates
    _refuse,
    check_coordinates,
    check_finite,
    check_real,
    check_scale,
    coordinates_outside,
)
from pointgeope.model.ops.checks import check_count, check_values  # the point ops'

__all__ = ["check_count", "check_scale", "check_float_tensor", "check_finite", "check_coordinates", "check_values",
           "check_positions"]

PHASE_STEP = 1 / 8  # rad: a phase known to this step or coarser is said (float32 positions: phases from 2^20 rad on)
_phase_warned = False   # the warning of check_positions: once per process


def check_positions(name: str, value: Tensor, phase_scale: float | Tensor) -> None:
    """`check_coordinates` of positions `value (N, A)` that standard GeoPE turns by their own phases
    `t = k_b p` (`phase_scale`: the `block_scale` tensor `k_b`, or a number, its largest), and, in the same
    host read, a warning once per process where the largest phase is rounded by :data:`PHASE_STEP` or more
    (:func:`phase_step`). The advice follows the magnitudes read with it (:func:`phase_advice`): uncentred
    positions are to be centred (pointgeope's data pipeline and `predict` shift every room and scan to a minimum
    of 0, a user's own positions may not be), centred ones in a half-precision dtype to be given in float32."""
    if torch.jit.is_scripting() or torch.compiler.is_compiling() or value.is_meta or not value.numel():
        return
    v = value.detach()
    bad = coordinates_outside(v)                    # the point ops' rule, read below with the magnitudes
    scale = phase_scale.detach().abs().amax().to(v.device, torch.float32) if isinstance(phase_scale, Tensor) \
        else torch.tensor(abs(float(phase_scale)), dtype=torch.float32, device=v.device)
    good = v.to(torch.float32).masked_fill(bad, 0.0)
    top = good.abs().amax()
    rows = good.reshape(-1, v.shape[-1]) if v.dim() else good.reshape(1, 1)
    extent = (rows.amax(0) - rows.amin(0)).amax()   # the largest magnitude once centred (minus the minimum)
    any_bad, top, k, extent = torch.stack([bad.any().to(torch.float32), top, scale, extent]).tolist()   # one read
    if any_bad:
        _refuse(name, value, bad)
    global _phase_warned  # noqa: PLW0603 - the warning is given once per process
    step = phase_step(k, top, v.dtype)
    if step >= PHASE_STEP and not _phase_warned:
        _phase_warned = True
        warnings.warn(f"GeoPE: {name} up to {top:.3g} in {_short(v.dtype)} turn by phases up to {k * top:.3g} rad, "
                      f"rounded in steps of {step:.3g} rad; {phase_advice(k, top, extent, v.dtype)}", RuntimeWarning,
                      stacklevel=3)


def phase_step(k: float, r: float, dtype: torch.dtype) -> float:
    """How coarsely the phase `k r` of a position of magnitude `r` given in `dtype` is known: the position's own
    step times `k`, or the step of the phase in the dtype the rotation computes it in (float32 at least,
    `geometry_dtype`), whichever is larger. bfloat16 at `r = 8` m, `k = 25/3`: `8.3 * 2^-4 = 0.52` rad, though
    float32 would hold that phase to `2^-17` rad; near the origin the step shrinks with `r`."""
    return max(k * spacing(r, dtype), spacing(k * r, geometry_dtype(dtype)))


def phase_advice(k: float, top: float, extent: float, dtype: torch.dtype) -> str:
    """What brings the step of the phases below :data:`PHASE_STEP`, from positions of magnitude up to `top` and
    of per-axis extent up to `extent` (their magnitude once centred) in `dtype`: centring them, giving them in
    float32 (bfloat16 and float16 keep 8 and 11 significant bits), both, or else float64 or a smaller scale. The
    extent read in `dtype` may be short by its step at `top` (bfloat16 holds `2^20 + 16` as `2^20`), which is
    added."""
    extent += spacing(top, dtype)       # as measured in dtype: far from the origin, its step there (lost bits)
    wider = [d for d in (torch.float32, torch.float64) if torch.finfo(d).bits > torch.finfo(dtype).bits]
    centre = "centre them (subtract their minimum or mean, as pointgeope's data pipeline does)"
    tries = [(dtype, extent, centre)] + [try_ for d in wider for try_ in ((d, top, f"give them in {_short(d)}"), (
        d, extent, f"give them in {_short(d)} and {centre}"))]
    for kind, r, advice in tries:
        if phase_step(k, r, kind) < PHASE_STEP:
            return f"{advice}: the step is then {phase_step(k, r, kind):.3g} rad"
    return f"even centred in float64 the phases exceed what it resolves: lower the phase scale ({k:.3g} rad per unit)"


def _short(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def check_float_tensor(name: str, value, *, dim: int | None = None) -> Tensor:
    """`value` is a floating-point tensor (of `dim` dims, if given): an integer tensor would be rotated and
    truncated, or be neighbours of integer distances."""
    if not isinstance(value, Tensor):
        raise TypeError(f"expected {name} a tensor, got {type(value).__name__}")
    check_real(name, value)
    if dim is not None and value.dim() != dim:
        raise ValueError(f"expected {name} of {dim} dims, got shape {tuple(value.shape)}")
    return value
