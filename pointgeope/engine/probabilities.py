"""A point's class probabilities from the test's summed votes (``predict --probabilities``)."""
from __future__ import annotations

import numpy as np

__all__ = ["vote_probabilities"]


def vote_probabilities(scores: np.ndarray, votes: np.ndarray, vote: str, chunk: int = 1 << 20) -> np.ndarray:
    """``float32 (N, C)`` per-point class probabilities, rows summing to 1, from ``vote_room``'s ``scores (N, C)``,
    sums over the ``votes (N,)`` predictions of each point (``eval.vote``): ``"logits"``: ``softmax(scores /
    votes)``, of the mean logit; ``"softmax"``: ``scores / sum_c scores``, the mean probability. Both maps are
    monotone, so ``argmax`` is the label (of ``scores``) but where the top two scores lie within float32
    rounding (their probabilities may round to one value: the smaller class wins; float16 so tied 0.6 % of
    the rows of random logits of scale 0.05). Computed in chunks of rows (bounded extra memory).

    Every point must have a vote (``votes >= 1``, as ``vote_room`` guarantees: fragment 0 holds a point of
    every voxel, and a point no fragment holds takes its voxel's votes): a point without one has no
    probabilities (``"softmax"``: 0 / 0; ``"logits"``: the uniform row of a zero mean, a made-up answer), so
    its rows are refused with a ``ValueError`` naming how many and the first, never written as NaN."""
    if vote not in ("logits", "softmax"):
        raise ValueError(f"expected eval.vote 'logits' or 'softmax', got {vote!r}")
    votes = np.asarray(votes)
    if votes.shape != scores.shape[:1]:
        raise ValueError(f"expected votes of shape ({scores.shape[0]},), one per row of scores, got {votes.shape}")
    if (unvoted := np.flatnonzero(votes < 1)).size:
        raise ValueError(f"{unvoted.size} of {votes.size} points have no vote (first: row {unvoted[0]}), so no "
                         "class probabilities: every point must be predicted at least once")
    out = np.empty(scores.shape, dtype=np.float32)
    for start in range(0, scores.shape[0], chunk):
        s = scores[start:start + chunk].astype(np.float64)
        if vote == "logits":
            s = s / votes[start:start + chunk, None]
            s = np.exp(s - s.max(axis=1, keepdims=True))
        out[start:start + chunk] = s / s.sum(axis=1, keepdims=True)
    return out
