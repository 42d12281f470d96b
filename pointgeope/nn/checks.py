"""The argument checks of `pointgeope.nn`'s public functions: one line saying what was expected and what came,
naming the argument (`TypeError` for a wrong type, `ValueError` for a wrong value or shape).

Positions are checked where they enter, before any backend sees them: a NaN or an infinity has no nearest
neighbour and no rotation, and would come back as an invalid index or as finite garbage after a softmax.
Under `torch.compile` and TorchScript the data-dependent checks (finiteness) are skipped, so a compiled
graph has no break of ours; run the model once eagerly to have them.
"""
from __future__ import annotations

from torch import Tensor

from pointgeope.geope import check_real, check_scale   # the owners of the rules for features and scales
from pointgeope.model.ops.checks import (check_coordinates, check_count, check_finite,   # the point ops', the owner
                                         check_values)

__all__ = ["check_count", "check_scale", "check_float_tensor", "check_finite", "check_coordinates", "check_values"]


def check_float_tensor(name: str, value, *, dim: int | None = None) -> Tensor:
    """`value` is a floating-point tensor (of `dim` dims, if given): an integer tensor would be rotated and
    truncated, or be neighbours of integer distances."""
    if not isinstance(value, Tensor):
        raise TypeError(f"expected {name} a tensor, got {type(value).__name__}")
    check_real(name, value)
    if dim is not None and value.dim() != dim:
        raise ValueError(f"expected {name} of {dim} dims, got shape {tuple(value.shape)}")
    return value
