"""Tests of pointgeope/decimals.py: the mean of scores in the decimals they print as."""
from __future__ import annotations

import math

from pointgeope.decimals import decimal_mean


def test_decimal_mean_skips_nan_or_not_as_asked():
    assert decimal_mean([0.2324, math.nan, 0.2226]) == 0.2275
    assert math.isnan(decimal_mean([0.2324, math.nan], skip_nan=False))
    assert math.isnan(decimal_mean([math.nan, math.nan])) and math.isnan(decimal_mean([]))
    assert decimal_mean([0.1, 0.2]) == 0.15           # binary: 0.15000000000000002
    assert decimal_mean([math.inf, 1.0]) == math.inf
