"""Tests of pointgeope/decimals.py: the mean and spread of scores in the decimals they print as."""
from __future__ import annotations

import math
import statistics
from decimal import Decimal

import pytest

from pointgeope.decimals import decimal_mean, decimal_std


def test_decimal_mean_skips_nan_or_not_as_asked():
    assert decimal_mean([0.2324, math.nan, 0.2226]) == 0.2275
    assert math.isnan(decimal_mean([0.2324, math.nan], skip_nan=False))
    assert math.isnan(decimal_mean([math.nan, math.nan])) and math.isnan(decimal_mean([]))
    assert decimal_mean([0.1, 0.2]) == 0.15           # binary: 0.15000000000000002
    assert decimal_mean([math.inf, 1.0]) == math.inf


def test_decimal_std_is_the_sample_std_of_the_printed_decimals():
    """Against ``statistics.stdev`` of the values' decimals (28 significant digits, Python's own decimal
    arithmetic), and exact where the decimals' std is a short decimal: 0.1875, 0.2, 0.2125 spread by 0.0125
    exactly (a tie at one decimal of a percentage), where ``np.std(ddof=1)`` gives 0.012499999999999997."""
    assert decimal_std([0.1875, 0.2, 0.2125]) == 0.0125
    assert decimal_std([0.1, 0.2, 0.3, 0.4]) == float(statistics.stdev([Decimal("0.1"), Decimal("0.2"),
                                                                          Decimal("0.3"), Decimal("0.4")]))
    for values in ([0.2324, 0.2226], [0.7474, 0.4942, 0.8629], [1 / 3, 0.5, 0.61, 0.7]):
        reference = statistics.stdev([Decimal(repr(v)) for v in values])
        assert decimal_std(values) == pytest.approx(float(reference), rel=1e-15)
    assert math.isnan(decimal_std([0.5])) and math.isnan(decimal_std([])) and math.isnan(decimal_std([0.5, math.nan]))
    assert decimal_std([1.0, 1.0, 1.0]) == 0.0
