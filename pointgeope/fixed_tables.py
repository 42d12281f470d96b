"""Constant tables made once and kept: the fixed frequency tables of the positional encodings.

A table of fixed frequencies (GeoPE's block scales ``k_b``, PointROPE's frequencies) is a function of a few
settings, a device and a dtype. Made on the host and copied at every call, it would make the GPU's queue
drain before each copy; made once per key and kept, it costs nothing after the first call. The tables live
outside any ``state_dict`` (they are not parameters) and are shared process-wide by the modules of equal
settings, so that the layers of a stage share their rotation tables.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = ["FixedTables"]


class FixedTables:
    """A cache of constant tables, one per key, kept outside any ``state_dict``.

    The key holds the device, the dtype and every setting the table depends on. The one cache of fixed
    frequency tables: ``BlockScale``'s ``k_b`` (:mod:`pointgeope.geope`) and PointROPE's frequencies
    (:func:`pointgeope.model.rope.pointrope_table`), for PTv1, the PyG layer and PTv3's rotary encodings.

    Tables are made outside inference mode, so that one first made under ``torch.inference_mode`` (an
    evaluation) can still be saved for a later training step's backward.
    """

    def __init__(self):
        self._made: dict[tuple, Tensor] = {}

    def get(self, key: tuple, make: Callable[[], Tensor]) -> Tensor:
        """The table of ``key``, made by ``make()`` the first time."""
        if key not in self._made:
            with torch.inference_mode(False):
                self._made[key] = make()
        return self._made[key]
