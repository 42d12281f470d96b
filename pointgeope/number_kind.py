"""Whether a value read back (a checkpoint's entry, a ``metrics.json`` field, a config setting, a room's
attribute) is a number, or a whole number: a bool is neither.

JSON's ``true`` and YAML's ``true`` read back as Python's ``True``, and ``bool`` is a subclass of ``int``
(``isinstance(True, int)``, ``True + 1 == 2``): a check of ``isinstance(value, int)`` alone takes a damaged
``"epoch": true`` for epoch 1. Every such check asks here. No imports: every layer uses it.
"""
from __future__ import annotations


def is_number(value: object) -> bool:
    """Whether ``value`` is an ``int`` or a ``float`` (any: NaN and the infinities too, the caller bounds it),
    not a bool. ``is_number(0.5) and is_number(3) and not is_number(True) and not is_number("1")``."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_whole(value: object) -> bool:
    """Whether ``value`` is an ``int``, not a bool. ``is_whole(3) and not is_whole(True) and not is_whole(3.0)``."""
    return isinstance(value, int) and not isinstance(value, bool)
