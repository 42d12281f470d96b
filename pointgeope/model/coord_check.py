"""The networks' warning for coordinates given in a float type too coarse, where they are, for the model's voxels.

``predict`` and ``prepare`` shift every scan and room to a minimum of 0 (float64 kept aside as an ``origin``), so the
network sees coordinates of a few metres; a user who calls a network's ``forward`` with float32 coordinates in UTM
metres (500,000 / 4,200,000 m) gives it points in steps of 0.03-0.5 m: neighbours' differences and GeoPE's phases are
then noise at a 0.04 m voxel, and the logits come back finite, without a word. The rule is
:mod:`pointgeope.coord_steps`' (the step of the coordinates' dtype at their largest ``|x|`` past an eighth of the
voxel, the one ``predict`` warns float32 scan files by); here it is read once a forward, where the coordinates enter,
and said once per network (a ``RuntimeWarning``): ``PointTransformerSeg`` and ``PTv3Seg`` call :func:`warn_coarse`.

Cost: one reduction of ``coord`` (``|x|``'s maximum) and its host read; float64 coordinates (steps of 1e-9 m at 4.2e6 m)
are not read at all, nor any on the meta device or while compiling or scripting.
"""
from __future__ import annotations

import warnings

import torch
from torch import Tensor, nn

from pointgeope.coord_steps import spacing, too_coarse

__all__ = ["coarse_note", "warn_coarse"]


def coarse_note(coord: Tensor, grid_size: float) -> str | None:
    """The warning for coordinates ``coord (N, 3)`` whose dtype's step at their largest ``|x|`` is too coarse for
    voxels of ``grid_size`` metres (:func:`pointgeope.coord_steps.too_coarse`), else ``None``; float64 ones are
    not read, nor those of another kind than float (the networks' input checks name them)."""
    if not coord.is_floating_point() or coord.dtype == torch.float64 or coord.is_meta or not coord.numel():
        return None                 # integers, bools: the network's input checks refuse them in their own words
    reach = float(coord.detach().abs().amax())            # one host read (a NaN: the finiteness checks' to refuse)
    step = spacing(reach, coord.dtype)
    if not too_coarse(step, grid_size):
        return None
    name = str(coord.dtype).removeprefix("torch.")
    fix = ("give them in float32" if not too_coarse(spacing(reach, torch.float32), grid_size) else
           "subtract an offset near the points (e.g. each cloud's minimum, as pointgeope's data pipeline and predict "
           "do, keeping it in float64) before casting them to float32")
    return (f"coord in {name} reaches {reach:.3g} m from 0, where {name} comes in steps of {step:.3g} m (the model's "
            f"voxels: {grid_size:g} m): neighbours' offsets and the positional encodings are then noise; {fix}")


def warn_coarse(network: nn.Module, coord: Tensor, grid_size: float) -> None:
    """Warn once per ``network`` (a ``RuntimeWarning``) when :func:`coarse_note` has a note for ``coord``; nothing
    read once it has warned, nor while compiling or scripting."""
    if getattr(network, "_coarse_warned", False) or torch.jit.is_scripting() or torch.compiler.is_compiling():
        return
    if (note := coarse_note(coord, grid_size)) is not None:
        network._coarse_warned = True
        warnings.warn(note, RuntimeWarning, stacklevel=3)
