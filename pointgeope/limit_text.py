"""A measure found past a limit, and the limit, written so that the two read apart: the one rule of the
refusals that say "spans X m, more than the Y m" (the area check, prepare's room and outlier refusals)."""
from __future__ import annotations

__all__ = ["past_limit"]

# Significant digits tried: ``:g``'s 6 first; 17 tell any two different doubles apart.
_DIGITS = range(6, 18)


def past_limit(value: float, limit: float) -> tuple[str, str]:
    """``(value, limit)`` as text, with ``:g``'s 6 significant digits where those tell them apart, else the
    fewest that do (up to 17, which tell any two different doubles apart).

    At 6 digits an excess just past the allowance read as no excess at all: a room of extent 10.00001 m
    refused against 10 m said "spans 10 m, more than the 10 m". Rounding to ``p`` significant digits is
    monotonic, so once the two texts differ, ``value > limit`` reads larger too: "spans 10.00001 m, more
    than the 10 m".

    Args:
        value: the measure refused (a float32 is read as its exact double).
        limit: what it was compared with.
    """
    value, limit = float(value), float(limit)
    for digits in _DIGITS:
        shown = f"{value:.{digits}g}", f"{limit:.{digits}g}"
        if shown[0] != shown[1]:
            return shown
    return shown  # the same double: the same text
