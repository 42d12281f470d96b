"""Tests of pointgeope/model/stage_memo.py: what a stage's layers derive from the hierarchy alone is built once
inside ``shared()`` and is the very value each layer built before; the network shares it per stage and its
logits and gradients stay bit for bit those of a layer building its own."""
from __future__ import annotations

import pytest
import torch

from pointgeope.model import PointTransformerSeg, stage_memo
from pointgeope.model.stage_memo import displacements, memoized, shared
from tests.model.shared_stage import layers_of, shared_and_alone

TINY = dict(blocks=(1, 2, 1), planes=(16, 24, 32), strides=(1, 4, 4), neighbours=(8, 8, 8),
            decoder_blocks=(1, 1, 1), share_planes=8)
FLOAT32 = ("displacements", torch.float32)      # the memo's tag of float32 displacements


def _neighbours(n=40, k=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 3, generator=g, dtype=torch.float64), torch.randint(0, n, (n, k), generator=g)


def test_displacements_are_neighbour_minus_query():
    coord, idx = _neighbours()
    got = displacements(coord, idx)
    for i in range(coord.shape[0]):
        for j in range(idx.shape[1]):
            assert torch.equal(got[i, j], coord[idx[i, j]] - coord[i])


def _bf16_nearest_even(x: torch.Tensor) -> torch.Tensor:
    """float32 ``x`` rounded to bfloat16 by the definition (round to nearest, ties to even, on the bits; finite
    values), written without torch's cast."""
    bits = x.view(torch.int32).to(torch.int64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return (rounded << 16).to(torch.int32).view(torch.float32)


def test_bf16_displacements_are_the_float32_ones_rounded_to_nearest_even():
    """``displacements(coord, idx, bfloat16)`` of float32 points (autocast's position encoding) is each float32
    difference rounded to nearest even, ties included (differences whose low 16 bits are exactly 0x8000, rounded
    up and down), as the cast of the float32 displacements rounds them; shared in a stage as the float32 ones."""
    coord, idx = _neighbours(n=300, k=8)
    coord = (coord * 7 - 3).float()
    ties = torch.stack([torch.zeros(3), torch.tensor([0x3F808000, 0x3F818000, -0x3FBF8000],
                                                     dtype=torch.int32).view(torch.float32)])   # row 1 - row 0: ties
    coord = torch.cat([coord, ties])
    idx = torch.cat([idx, torch.tensor([[301] * 8, [300] * 8])])
    want = _bf16_nearest_even(coord[idx] - coord.unsqueeze(1)).to(torch.bfloat16)
    got = displacements(coord, idx, torch.bfloat16)
    assert got.dtype == torch.bfloat16 and torch.equal(got.view(torch.int16), want.view(torch.int16))
    assert got[300, 0].float().tolist() != (coord[301] - coord[300]).tolist()        # the ties did round
    with shared():
        assert displacements(coord, idx, torch.bfloat16) is displacements(coord, idx, torch.bfloat16)
        assert displacements(coord, idx) is displacements(coord, idx, torch.float32)


def test_memoized_builds_once_per_inputs_and_again_after_a_write():
    coord, idx = _neighbours()
    builds = []

    def build():
        builds.append(1)
        return coord.sum(0)

    memoized("t", (coord, idx), build)
    memoized("t", (coord, idx), build)
    assert len(builds) == 2                                    # outside the block: built at every call
    with shared():
        first = memoized("t", (coord, idx), build)
        assert memoized("t", (coord, idx), build) is first and len(builds) == 3
        memoized("u", (coord, idx), build)                     # another tag
        memoized("t", (coord.clone(), idx), build)             # another tensor, equal values
        assert len(builds) == 5
        coord[0, 0] += 1.0                                     # written: its version moves on
        assert memoized("t", (coord, idx), build) is not first and len(builds) == 6
    memoized("t", (coord, idx), build)
    assert len(builds) == 7                                    # the memo ends with the block


def test_displacements_shared_only_without_gradient():
    coord, idx = _neighbours()
    with shared():
        assert displacements(coord, idx) is displacements(coord, idx)
        moving = coord.clone().requires_grad_()
        a, b = displacements(moving, idx), displacements(moving, idx)
        assert a is not b                                      # each carries its own share of the gradient
        (a.square().sum() + 2 * b.sum()).backward()
    want = torch.zeros_like(coord)
    d = (coord[idx] - coord.unsqueeze(1))
    per_pair = 2 * d + 2                                       # d/dd of d^2 + 2 d
    want.index_add_(0, idx.reshape(-1), per_pair.reshape(-1, 3))
    want -= per_pair.sum(1)
    torch.testing.assert_close(moving.grad, want, rtol=1e-12, atol=1e-12)


def _counted_builds(monkeypatch) -> list[str]:
    """The tags of the memo's builds (``stage_memo.memoized`` spied), in the order they ran."""
    built = []
    own = stage_memo.memoized

    def counted(tag, inputs, build):
        return own(tag, inputs, lambda: built.append(tag) or build())

    monkeypatch.setattr(stage_memo, "memoized", counted)
    return built


def _batch(sizes=(130, 70), seed=0):
    g = torch.Generator().manual_seed(seed)
    coord = torch.rand(sum(sizes), 3, generator=g) * torch.tensor([3.0, 3.0, 2.0])
    feat = torch.cat([torch.rand(sum(sizes), 3, generator=g), coord], dim=1)
    return coord, feat, torch.tensor(sizes).cumsum(0)


@pytest.mark.parametrize("pe", ["rpe", "geope"])
def test_the_layers_of_a_stage_share_displacements_and_nothing_changes(pe, monkeypatch):
    """One displacement tensor built per stage in the forward (encoder and decoder layers share it), and the
    logits and every gradient bit for bit those of the network whose layers build their own."""
    built = _counted_builds(monkeypatch)
    coord, feat, offset = _batch()
    runs = shared_and_alone(monkeypatch, built, pe, TINY, coord, feat, offset)
    (shared_logits, shared_grads, shared_list), (alone, alone_grads, alone_list) = runs
    shared_built, alone_built = shared_list.count(FLOAT32), alone_list.count(FLOAT32)
    assert torch.equal(shared_logits, alone)
    assert all(torch.equal(a, b) for a, b in zip(shared_grads, alone_grads, strict=True))
    assert (shared_built, alone_built) == (3, layers_of(TINY))          # one per stage (3 stages) against one per layer


def test_an_int32_hierarchy_shares_as_an_int64_one(monkeypatch):
    """Neighbour lists of one's own in int32 (the layers take int64): one int64 copy and one displacement tensor a
    stage, as with the kNN's int64 lists, and the same logits; each layer's own copy was a new memo key, so every
    layer built (and the memo kept until the forward's end) its own."""
    import dataclasses

    built = _counted_builds(monkeypatch)
    coord, feat, offset = _batch()
    torch.manual_seed(0)
    model = PointTransformerSeg(pe="rpe", **TINY).eval()
    wide = model.hierarchy_spec(coord, offset.tolist())
    narrow = dataclasses.replace(wide, neighbours=tuple(n.int() for n in wide.neighbours))
    with torch.no_grad():
        want = model(coord, feat, offset, hierarchy=wide)
        built.clear()
        got = model(coord, feat, offset, hierarchy=narrow)
    assert torch.equal(got, want)
    assert built.count(FLOAT32) == 3                           # one per stage (3 stages), not one per layer (7)
