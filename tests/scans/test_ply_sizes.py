"""Tests of pointgeope/scans/ply_sizes.py: the bytes of PLY elements of lists, counted record by record in
Python, by numpy for lists of one length, and from the definition (a count's bytes plus its items')."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from pointgeope.scans.ply import Element
from pointgeope.scans.ply_sizes import (
    NegativeCount,
    elements_end,
    uniform_size,
    vertices_that_fit,
    walk,
)

FACE = Element("face", 0, [("flag", "u1"), ("vertex_indices", ("list", "u1", "i4"))], 5)


def _faces(corners, seed=0):
    rng = np.random.default_rng(seed)
    data = b"".join(struct.pack(f"<BB{k}i", 1, k, *rng.integers(0, 9, k)) for k in corners)
    return FACE._replace(count=len(corners)), data


@pytest.mark.parametrize("corners", [[3] * 30, [4] * 7, [3, 4, 3, 5, 3]])
def test_both_ways_count_the_bytes_of_the_definition(corners):
    element, data = _faces(corners)
    expected = sum(2 + 4 * k for k in corners)
    assert len(data) == expected
    assert walk(data, 0, element, "<") == expected
    assert uniform_size(data, 0, element, "<") == (expected if len(set(corners)) == 1 else None)
    assert elements_end(b"xx" + data, 2, [element], "<") == 2 + expected
    assert walk(data[:-1], 0, element, "<") == len(data)  # beyond the end: len + 1


def test_a_face_of_fewer_than_3_corners_is_no_face_after_the_vertices_only():
    element, data = _faces([3, 2, 3])
    assert walk(data, 0, element, "<") == len(data)                     # before the vertices: any list
    assert walk(data, 0, element, "<", faces=True) == len(data) + 1     # a face of 2 corners: no fit
    with pytest.raises(NegativeCount):
        walk(b"\x00\xff", 0, element._replace(props=[("flag", "u1"), ("vertex_indices", ("list", "i1", "i4"))],
                                              count=1), "<")


def test_the_vertex_count_that_fits_is_found_from_the_end():
    element, data = _faces([3] * 20)
    vertices = np.zeros((17, 3), "<f4").tobytes()
    assert vertices_that_fit(b"head" + vertices + data, 4, 12, [element], "<") == 17
    element, data = _faces([3, 4] * 10)  # no one length: not found
    assert vertices_that_fit(b"head" + vertices + data, 4, 12, [element], "<") is None
