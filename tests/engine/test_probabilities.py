"""Tests of pointgeope/engine/probabilities.py: a point without a vote has no probabilities."""
from __future__ import annotations

import numpy as np
import pytest

from pointgeope.engine.probabilities import vote_probabilities


@pytest.mark.parametrize("vote", ["softmax", "logits"])
def test_a_point_without_a_vote_is_refused_not_nan_or_uniform(vote):
    """Row 2 got no prediction (scores 0, votes 0). ``softmax`` divided 0 by 0 and wrote a NaN row; ``logits``
    divided by max(votes, 1) and wrote a uniform row, a made-up answer. Both are refused, naming the row."""
    scores = np.array([[0.7, 0.3], [1.2, 0.8], [0.0, 0.0], [0.0, 0.0]], dtype=np.float32)
    votes = np.array([1, 2, 0, 0], dtype=np.int32)
    with pytest.raises(ValueError, match=r"^2 of 4 points have no vote \(first: row 2\), so no class probabilities"):
        vote_probabilities(scores, votes, vote, chunk=2)
    with pytest.raises(ValueError, match=r"expected votes of shape \(4,\)"):
        vote_probabilities(scores, votes[:3], vote)


def test_points_with_votes_get_rows_summing_to_one():
    """The mean probability of two softmax votes (0.6, 0.4) + (0.8, 0.2) is (0.7, 0.3); the mean logit of
    (1, 0) + (3, 0) over 2 votes is (2, 0), softmax (e^2, 1) / (e^2 + 1)."""
    p = vote_probabilities(np.array([[1.4, 0.6]]), np.array([2]), "softmax")
    np.testing.assert_allclose(p, [[0.7, 0.3]], rtol=1e-6)
    q = vote_probabilities(np.array([[4.0, 0.0]]), np.array([2]), "logits")
    np.testing.assert_allclose(q, [[np.e ** 2 / (np.e ** 2 + 1), 1 / (np.e ** 2 + 1)]], rtol=1e-6)
