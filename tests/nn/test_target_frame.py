"""Tests of pointgeope/nn/target_frame.py: per-target coefficients and plane-major keys give R(t_i)^T k of
every edge (quaternion sandwiches of tests/nn/reference.py), across chunk boundaries, with its gradient."""
from __future__ import annotations

import torch

from pointgeope.geope import BlockScale
from pointgeope.nn import target_frame
from tests.nn import reference as ref


def test_each_edge_is_turned_by_the_inverse_rotation_of_its_target(monkeypatch):
    monkeypatch.setattr(target_frame, "_chunk", lambda edges: 4)            # 11 edges: 3 chunks, the last short
    gen = torch.Generator().manual_seed(0)
    nodes, edges, channels = 5, 11, 8                                       # 2 blocks + 2 pass-through
    pos = torch.rand(nodes, 3, generator=gen, dtype=torch.float64) * 2
    pos[3] = 0.0                                                            # the origin: R = I
    keys = torch.randn(7, channels, generator=gen, dtype=torch.float64)    # 7 sources
    src, dst = torch.randint(0, 7, (edges,), generator=gen), torch.randint(0, nodes, (edges,), generator=gen)
    scale = BlockScale(channels, base=10.0, pos_scale=3.0)(torch.float64, pos.device)
    coef = target_frame.target_coefficients(pos, scale)
    got = target_frame.turn_into_targets(target_frame.to_planes(keys, 2), keys[:, 6:], coef, src, dst)
    for e in range(edges):                                                  # R(t_i)^T R(0) k = R(t_i)^T k
        want = ref.geope_turn(keys[src[e]], pos[dst[e]], torch.zeros(3, dtype=torch.float64), 10.0, 3.0,
                              linear=False)
        torch.testing.assert_close(got[e], want, atol=1e-12, rtol=0)


def test_gradient_of_the_keys(monkeypatch):
    monkeypatch.setattr(target_frame, "_chunk", lambda edges: 3)
    gen = torch.Generator().manual_seed(1)
    pos = torch.rand(4, 3, generator=gen, dtype=torch.float64)
    coef = target_frame.target_coefficients(pos, torch.tensor([2.0, 0.7], dtype=torch.float64))
    src, dst = torch.tensor([0, 4, 1, 1, 2, 0, 4]), torch.tensor([0, 1, 1, 3, 2, 0, 3])  # sources 0 and 4 twice
    planes = torch.randn(3, 5, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    rest = torch.randn(5, 1, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda p, r: target_frame.turn_into_targets(p, r, coef, src, dst), (planes, rest))


def test_one_chunk_on_more_threads_gives_the_chunked_values(monkeypatch):
    gen = torch.Generator().manual_seed(2)
    pos, keys = torch.rand(6, 3, generator=gen), torch.randn(6, 7, generator=gen)
    src, dst = torch.randint(0, 6, (20,), generator=gen), torch.randint(0, 6, (20,), generator=gen)
    coef = target_frame.target_coefficients(pos, torch.tensor([3.0, 1.0]))

    def turned() -> torch.Tensor:
        return target_frame.turn_into_targets(target_frame.to_planes(keys, 2), keys[:, 6:], coef, src, dst)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    monkeypatch.setattr(target_frame, "_CHUNK", 3)
    chunked = turned()
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    assert target_frame._chunk(20) == 20
    torch.testing.assert_close(turned(), chunked, atol=0, rtol=0)
