"""Tests of pointgeope/limit_text.py: a measure past a limit and the limit read apart, and in order."""
from __future__ import annotations

import numpy as np
import pytest

from pointgeope.limit_text import past_limit


@pytest.mark.parametrize("value, limit, expected", [
    (1500.0, 1000.0, ("1500", "1000")),               # apart at :g's 6 digits: as :g writes them
    (5000.123456789, 1000.0, ("5000.12", "1000")),
    (10.00001, 10.0, ("10.00001", "10")),             # "10" and "10" at 6 digits
    (1000.0001, 1000.0, ("1000.0001", "1000")),
    (float(np.nextafter(10.0, 11.0)), 10.0, ("10.000000000000002", "10")),  # the next double: 17 digits
    (1234567.5, 1234567.0, ("1234568", "1234567")),    # 6 digits: 1.23457e+06 twice
])
def test_the_fewest_digits_from_six_that_tell_them_apart(value, limit, expected):
    assert past_limit(value, limit) == expected


def test_every_value_past_its_limit_reads_larger_than_it():
    """Values a few doubles to a few millionths past limits of many sizes: the two texts read back as two
    numbers, the value's the larger, each within :g's rounding at 6 digits (or finer) of what it writes."""
    rng = np.random.default_rng(0)
    limits = 10.0 ** rng.uniform(-3, 6, 2000)
    steps = np.spacing(limits) * rng.integers(1, 1 << 40, limits.size) ** rng.uniform(0, 1, limits.size)
    for limit, value in zip(limits.tolist(), (limits + steps).tolist(), strict=True):
        if value <= limit:
            continue
        shown = past_limit(value, limit)
        assert float(shown[0]) > float(shown[1]), (value, limit, shown)
        for text, number in zip(shown, (value, limit), strict=True):
            assert abs(float(text) - number) <= 5e-6 * number


def test_a_float32_is_read_as_its_double():
    assert past_limit(np.float32(10.00001), 10.0) == ("10.00001", "10")
    assert past_limit(np.float32(1000.0001), np.float32(1000.0)) == ("1000.0001", "1000")
