"""Tests of pointgeope/engine/vote_batches.py: the one rule that packs a room's pieces into batches."""
from __future__ import annotations

import numpy as np
import torch

from pointgeope.engine.config import Config
from pointgeope.engine.vote_batches import PieceBatch, VoteSink, packed


def test_pieces_are_packed_in_order_up_to_the_limit_and_a_larger_one_alone():
    sizes = [3, 4, 2, 9, 1, 1, 5, 6]
    groups = list(packed(sizes, lambda n: n, limit=7))
    assert groups == [[3, 4], [2], [9], [1, 1, 5], [6]]
    assert list(packed([], len, limit=7)) == []
    assert list(packed(iter(["ab", "c"]), len, limit=1)) == [["ab"], ["c"]]  # each alone: over the limit


def test_the_scores_are_read_once_their_copy_on_the_sinks_own_gpu_is_done(monkeypatch):
    """On ``cuda:1`` while the current device is ``cuda:0`` (``train.device=cuda:1``, ``predict --device
    cuda:1``), the scores' copy to the host is queued on ``cuda:1``'s stream, so the event the host waits on
    before it reads them is recorded there. ``Event.record()`` without a stream records on the current
    device's stream, which was idle: the host read the pinned scores before the copy had landed. Fakes of
    ``torch.cuda``'s streams and events, which behave as documented (``record(None)``: the current stream)."""
    waited = []

    class Stream:
        def __init__(self, index: int):
            self.index = index

    def current_stream(device=None):
        return Stream(0 if device is None else torch.device(device).index)   # the current device: cuda:0

    class Event:
        def record(self, stream=None):
            self.stream = current_stream() if stream is None else stream

        def synchronize(self):
            waited.append(self.stream.index)

    monkeypatch.setattr(torch.cuda, "current_stream", current_stream)
    monkeypatch.setattr(torch.cuda, "Event", Event)
    n, classes = 5, 3
    scores, votes = np.zeros((n, classes), np.float32), np.zeros(n, np.int32)
    sink = VoteSink(None, scores, votes, Config(), torch.device("cuda", 1))
    logits = torch.arange(n * classes, dtype=torch.float32).view(n, classes)
    monkeypatch.setattr(sink, "_forward", lambda batch: logits)
    index = np.array([4, 0, 2, 1, 3])
    sink.add(PieceBatch([index], torch.zeros(n, 3), torch.zeros(n, 3), torch.tensor([n]), None))
    sink.finish()
    assert waited == [1]
    np.testing.assert_array_equal(scores[index], logits.numpy())
    assert votes.tolist() == [1] * n
