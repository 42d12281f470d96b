"""The radix sort against numpy's sort."""
from __future__ import annotations

import numpy as np
import pytest

from pointgeope.radix import sort_nonnegative


@pytest.mark.parametrize("n, top", [(0, 1), (1, 5), (2, 1), (1000, 2), (5000, 2 ** 11), (5000, 2 ** 22),
                                    (20000, 2 ** 44), (3000, 2 ** 62)])
def test_sorts_as_numpy_does(n, top):
    """Odd and even numbers of passes, one digit and many, repeated keys, keys up to 62 bits."""
    a = np.random.default_rng(n + top % 97).integers(0, top, n, dtype=np.int64)
    expected = np.sort(a)
    out = sort_nonnegative(a)
    assert out is a
    np.testing.assert_array_equal(a, expected)


def test_sorted_and_reversed_inputs():
    a = np.arange(10000, dtype=np.int64) * 977
    np.testing.assert_array_equal(sort_nonnegative(a[::-1].copy()), a)
    np.testing.assert_array_equal(sort_nonnegative(a.copy()), a)


@pytest.mark.parametrize("bad, message", [(np.array([3, -1], np.int64), "negative"),
                                          (np.array([1.0, 2.0]), "1-D int64 array, got 1-D float64"),
                                          (np.zeros((2, 2), np.int64), "got 2-D int64")])
def test_refuses_what_it_cannot_sort(bad, message):
    with pytest.raises(ValueError, match=message):
        sort_nonnegative(bad)
