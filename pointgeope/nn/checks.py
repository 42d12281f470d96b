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

PHASE_STEP = 1 / 8  # rad: a phase rounded by this much or more is said (float32: phases from 2^20 rad on)
_phase_warned = False   # the warning of check_positions: once per process


def check_positions(name: str, value: Tensor, phase_scale: float | Tensor) -> None:
    """`check_coordinates` of positions `value (N, A)` that standard GeoPE turns by their own phases
    `t = k_b p` (`phase_scale`: the `block_scale` tensor `k_b`, or a number, its largest), and, in the same
    host read, a warning once per process where the largest phase `max |p| k_b` is rounded by
    :data:`PHASE_STEP` or more in the positions' dtype (its step at `t` is `2^(floor(log2 t) - nmant)`:
    float32 from `t = 2^20` rad on, 0.5 rad at UTM metres times `k_b` 8.3, float64 from `2^49`): the
    rotations are then rounding noise. Uncentred positions do that; pointgeope's data pipeline and `predict`
    shift every room and scan to a minimum of 0, a user's own positions may not be."""
    if torch.jit.is_scripting() or torch.compiler.is_compiling() or value.is_meta or not value.numel():
        return
    v = value.detach()
    bad = coordinates_outside(v)                    # the point ops' rule, read below with the phase
    scale = phase_scale.detach().abs().amax().to(v.device, torch.float32) if isinstance(phase_scale, Tensor) \
        else torch.tensor(abs(float(phase_scale)), dtype=torch.float32, device=v.device)
    top = torch.where(bad, torch.zeros_like(v), v.abs()).amax().to(torch.float32)
    any_bad, top, phase = torch.stack([bad.any().to(torch.float32), top, top * scale]).tolist()   # one host read
    if any_bad:
        _refuse(name, value, bad)
    global _phase_warned  # noqa: PLW0603 - the warning is given once per process
    step = torch.finfo(v.dtype).eps * 2.0 ** (int(phase).bit_length() - 1) if phase >= 1 else 0.0   # eps: 2^-nmant
    if step >= PHASE_STEP and not _phase_warned:
        _phase_warned = True
        warnings.warn(f"GeoPE: {name} up to {top:.3g} turn by phases up to {phase:.3g} rad, which {v.dtype} "
                      f"rounds in steps of {step:g} rad: the rotations are rounding noise; centre the positions "
                      "first (subtract their minimum or mean, as pointgeope's data pipeline does)", RuntimeWarning,
                      stacklevel=3)


def check_float_tensor(name: str, value, *, dim: int | None = None) -> Tensor:
    """`value` is a floating-point tensor (of `dim` dims, if given): an integer tensor would be rotated and
    truncated, or be neighbours of integer distances."""
    if not isinstance(value, Tensor):
        raise TypeError(f"expected {name} a tensor, got {type(value).__name__}")
    check_real(name, value)
    if dim is not None and value.dim() != dim:
        raise ValueError(f"expected {name} of {dim} dims, got shape {tuple(value.shape)}")
    return value
