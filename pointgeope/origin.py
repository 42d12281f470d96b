"""A room's ``origin``: the float64 offset that a georeferenced room's coordinates are stored minus
(``prepare`` writes it where a room lies 16,384 m or more from 0: ``coord`` is float32, and float32 loses
millimetres out there), added back wherever a room's coordinates leave for the user (``predict``'s outputs,
``viz --ply``). The one reading of that attribute."""
from __future__ import annotations

import numpy as np

__all__ = ["checked_origin"]


def checked_origin(origin) -> np.ndarray | None:
    """``origin`` (a room's attribute as h5py reads it) as ``float64 (3,)``, or ``None`` when it is not three
    finite numbers (the caller names the file and says to prepare it again)."""
    try:
        shift = np.asarray(origin, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    return shift if shift.shape == (3,) and np.isfinite(shift).all() else None
