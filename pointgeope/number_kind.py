"""Whether a value read back (a checkpoint's entry, a ``metrics.json`` field, a config setting, a room's
attribute) is a number, or a whole number: a bool is neither.

JSON's ``true`` and YAML's ``true`` read back as Python's ``True``, and ``bool`` is a subclass of ``int``
(``isinstance(True, int)``, ``True + 1 == 2``): a check of ``isinstance(value, int)`` alone takes a damaged
``"epoch": true`` for epoch 1. Every such check asks here. An HDF5 attribute reads back as a NumPy integer
(:func:`is_integer`), and an argument of the layers may be a NumPy or a 0-dim torch number
(:func:`is_real_scalar`): NumPy's and torch's bools are no numbers either; a tensor of indices, counts or cells
(offsets, a batch vector, grid coordinates) is integer by its dtype (:func:`is_integer_tensor`), where
``torch.tensor([True]).long()`` is ``tensor([1])``. No torch imported: every layer uses it.
"""
from __future__ import annotations

import numbers
import sys


def is_number(value: object) -> bool:
    """Whether ``value`` is an ``int`` or a ``float`` (any: NaN and the infinities too, the caller bounds it),
    not a bool. ``is_number(0.5) and is_number(3) and not is_number(True) and not is_number("1")``."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_whole(value: object) -> bool:
    """Whether ``value`` is an ``int``, not a bool. ``is_whole(3) and not is_whole(True) and not is_whole(3.0)``."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_integer(value: object) -> bool:
    """Whether ``value`` is an ``int`` or a NumPy integer (an HDF5 attribute reads back as one), not a bool
    (``np.bool_`` is no ``numbers.Integral``). ``is_integer(np.int64(3)) and not is_integer(True)``."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real_scalar(value: object) -> bool:
    """Whether ``value`` is one real number: a Python or NumPy ``int`` or ``float`` (any ``numbers.Real``), or a
    0-dim torch tensor that is neither complex nor bool; not a bool of any of the three.
    ``is_real_scalar(np.float32(2)) and is_real_scalar(torch.tensor(2.)) and not is_real_scalar(np.True_)``."""
    torch = sys.modules.get("torch")   # not imported: ``value`` is no tensor
    if torch is not None and isinstance(value, torch.Tensor):
        return value.dim() == 0 and not value.is_complex() and value.dtype != torch.bool
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_integer_tensor(value: object) -> bool:
    """Whether ``value`` is a torch tensor of an integer dtype: neither floating, complex nor bool (a bool tensor
    read as integers is 0s and 1s). ``is_integer_tensor(torch.tensor([3])) and not
    is_integer_tensor(torch.tensor([True]))``; a dtype read, no value (no device synchronisation)."""
    torch = sys.modules.get("torch")   # not imported: ``value`` is no tensor
    return (torch is not None and isinstance(value, torch.Tensor) and not value.is_floating_point()
            and not value.is_complex() and value.dtype != torch.bool)
