"""Tests of pointgeope/engine/vote_batches.py: the one rule that packs a room's pieces into batches."""
from __future__ import annotations

from pointgeope.engine.vote_batches import packed


def test_pieces_are_packed_in_order_up_to_the_limit_and_a_larger_one_alone():
    sizes = [3, 4, 2, 9, 1, 1, 5, 6]
    groups = list(packed(sizes, lambda n: n, limit=7))
    assert groups == [[3, 4], [2], [9], [1, 1, 5], [6]]
    assert list(packed([], len, limit=7)) == []
    assert list(packed(iter(["ab", "c"]), len, limit=1)) == [["ab"], ["c"]]  # each alone: over the limit
