"""Means and differences of scores read as the decimals they print as: a score is recorded (JSON) as its shortest ``repr``,
and the report rounds that decimal half up (:func:`pointgeope.report.tables.pct`), so a mean or a difference of
scores is taken exactly in those decimals, then rounded once to the nearest float."""
from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import numpy as np

__all__ = ["decimal_mean", "decimal_difference"]


def decimal_mean(values, skip_nan: bool = True) -> float:
    """The mean of ``values`` read as the decimals they print as, exact, then the float nearest to it.

    Each value counts as its shortest ``repr`` (0.2324, the decimal a score of 581/2500 is), the mean
    ``(1/n) sum_i x_i`` is taken in fractions and rounded once, so an exact tie stays a tie for the report's
    half-up rounding (:func:`pointgeope.report.tables.pct`): the mean of 0.2324 and 0.2226 is 0.2275
    (22.8 %), where the binary mean gives 0.22749999999999998 (22.7 %). The decimals are those the JSON files
    show and :func:`~pointgeope.report.tables.pct` rounds, so the mean is the one worked by hand from them
    (a score of 1/3 counts as 0.3333333333333333). ``skip_nan``: NaN values are left out (NaN when none is
    left); else one NaN makes the mean NaN. An infinite value gives the binary mean.
    """
    values = [float(v) for v in np.asarray(values, dtype=np.float64).ravel()]
    finite = [v for v in values if not math.isnan(v)] if skip_nan else values
    if not finite or any(math.isnan(v) for v in finite):
        return float("nan")
    if any(math.isinf(v) for v in finite):
        return float(np.mean(finite))
    return float(sum(Fraction(repr(v)) for v in finite) / len(finite))


def decimal_difference(a: float, b: float) -> float:
    """``a - b`` of two scores from their decimal values (as :func:`~pointgeope.report.tables.pct` reads a score), the float nearest to it:
    23/80 - 1/4 = 0.2875 - 0.25 = 0.0375, a tie that :func:`~pointgeope.report.tables.pct` rounds up to 3.8, where the binary subtraction
    gives 0.03749999999999998 (3.7). NaN where either is NaN."""
    return float(Decimal(repr(float(a))) - Decimal(repr(float(b))))
