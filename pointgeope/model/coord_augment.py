"""Training-time augmentation of the positions a rotary encoding reads (Utonia's "RoPE aug").

Utonia (Pointcept 1.7, ``point_transformer_v3m3_utonia.py``, ``SerializedAttention.forward``) changes the
coordinates given to its Point3DRoPE at every attention call in training, with one draw for the whole call
(all points of the batch), in this order, from the global generator on the coordinates' device and dtype:

    shift    p <- p + s,          s_a ~ U(-shift, shift)                 per axis   (if shift > 0)
    jitter   p <- p * j,          j_a = exp(U(-ln jitter, ln jitter))     per axis   (if jitter > 1)
    rescale  p <- p * r,          r = exp(U(-ln rescale, ln rescale))     one value  (if rescale > 1)

Its configs use ``shift_coords=None, jitter_coords=1.1, rescale_coords=1.2`` (``UTONIA_AUGMENT``). Drawing
in the same order from the same generator keeps a seeded run's random stream as Utonia's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["CoordAugment", "UTONIA_AUGMENT"]


@dataclass(frozen=True)
class CoordAugment:
    """Shift, per-axis jitter and global rescale of positions ``(..., 3)``; a field set to ``None`` (or
    ``shift <= 0``, ``jitter <= 1``, ``rescale <= 1``) is off and draws nothing."""

    shift: float | None = None
    jitter: float | None = None
    rescale: float | None = None

    def __post_init__(self):
        for name in ("shift", "jitter", "rescale"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise ValueError(f"expected a finite {name} or None, got {value}")

    def __call__(self, pos: Tensor) -> Tensor:
        """A new tensor: ``pos`` shifted, jittered and rescaled by fresh draws (``pos`` is not changed)."""
        like = {"device": pos.device, "dtype": pos.dtype}
        if self.shift is not None and self.shift > 0:
            pos = pos + torch.empty(3, **like).uniform_(-self.shift, self.shift)
        if self.jitter is not None and self.jitter > 1.0:
            bound = math.log(self.jitter)
            pos = pos * torch.empty(3, **like).uniform_(-bound, bound).exp()
        if self.rescale is not None and self.rescale > 1.0:
            bound = math.log(self.rescale)
            pos = pos * torch.empty(1, **like).uniform_(-bound, bound).exp()
        return pos


UTONIA_AUGMENT = CoordAugment(shift=None, jitter=1.1, rescale=1.2)
