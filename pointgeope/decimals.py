"""Means, differences and spreads of scores read as the decimals they print as: a score is recorded (JSON) as its
shortest ``repr``, and the report rounds that decimal half up (:func:`pointgeope.report.tables.pct`), so a mean, a
difference or a sample standard deviation of scores is taken exactly in those decimals, then rounded once to the
nearest float."""
from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np

__all__ = ["decimal_difference", "decimal_mean", "decimal_std"]

# Significant digits of the square root in decimal_std before its rounding to a float (53 bits: 16 digits)
SQRT_DIGITS = 100


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


def decimal_std(values) -> float:
    """The sample standard deviation of ``values (S,)`` read as the decimals they print as, the float nearest to it.

    ``std = sqrt( sum_s (x_s - mean)^2 / (S - 1) )``, each ``x_s`` its shortest ``repr`` and ``mean`` the exact
    mean of those decimals (:func:`decimal_mean`'s, before its rounding): the variance is an exact fraction,
    its square root is taken to :data:`SQRT_DIGITS` significant digits, then rounded once to a float. So a
    spread that is exactly a tie stays one for the report's half-up rounding: 18.75, 20 and 21.25 % spread by
    exactly 1.25 % (1.3), where the binary ``np.std(ddof=1)`` gives 0.012499999999999997 (1.2). NaN for fewer
    than two values or any NaN; an infinite value gives the binary result."""
    values = [float(v) for v in np.asarray(values, dtype=np.float64).ravel()]
    if len(values) < 2 or any(math.isnan(v) for v in values):
        return float("nan")
    if any(math.isinf(v) for v in values):
        return float(np.std(values, ddof=1))
    exact = [Fraction(repr(v)) for v in values]
    mean = sum(exact) / len(exact)
    variance = sum((x - mean) ** 2 for x in exact) / (len(exact) - 1)
    with localcontext() as ctx:
        ctx.prec = SQRT_DIGITS
        return float((Decimal(variance.numerator) / Decimal(variance.denominator)).sqrt())
