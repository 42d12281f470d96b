"""Tests of pointgeope/nn/target_frame.py and its CPU kernel pointgeope/nn/frame_numba.py: per-target
coefficients give R(t_i)^T k of every edge (quaternion sandwiches of tests/nn/reference.py) on both backends,
across the torch path's chunk boundaries and the numba path's thread split, with their gradients."""
from __future__ import annotations

import re

import pytest
import torch

from pointgeope.geope import BlockScale
from pointgeope.model.ops.backends import available
from pointgeope.nn import target_frame
from tests.nn import reference as ref

BACKENDS = ["torch", pytest.param("numba", marks=pytest.mark.skipif(not available("numba"),
                                                                   reason="numba is not installed"))]


def edges_of(gen: torch.Generator, sources: int, targets: int, edges: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randint(0, sources, (edges,), generator=gen), torch.randint(0, targets, (edges,), generator=gen)


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_edge_is_turned_by_the_inverse_rotation_of_its_target(monkeypatch, backend):
    monkeypatch.setattr(target_frame, "_chunk", lambda edges: 4)            # 11 edges: 3 chunks, the last short
    gen = torch.Generator().manual_seed(0)
    nodes, edges, channels = 5, 11, 8                                       # 2 blocks + 2 pass-through
    pos = torch.rand(nodes, 3, generator=gen, dtype=torch.float64) * 2
    pos[3] = 0.0                                                            # the origin: R = I
    keys = torch.randn(7, channels, generator=gen, dtype=torch.float64)    # 7 sources
    src, dst = edges_of(gen, 7, nodes, edges)
    scale = BlockScale(channels, base=10.0, pos_scale=3.0)(torch.float64, pos.device)
    coef = target_frame.target_coefficients(pos, scale)
    got = target_frame.turn_into_targets(keys, coef, src, dst, backend)
    for e in range(edges):                                                  # R(t_i)^T R(0) k = R(t_i)^T k
        want = ref.geope_turn(keys[src[e]], pos[dst[e]], torch.zeros(3, dtype=torch.float64), 10.0, 3.0,
                              linear=False)
        torch.testing.assert_close(got[e], want, atol=1e-12, rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradient_of_the_keys(monkeypatch, backend):
    monkeypatch.setattr(target_frame, "_chunk", lambda edges: 3)
    gen = torch.Generator().manual_seed(1)
    pos = torch.rand(4, 3, generator=gen, dtype=torch.float64)
    coef = target_frame.target_coefficients(pos, torch.tensor([2.0, 0.7], dtype=torch.float64))
    src, dst = torch.tensor([0, 4, 1, 1, 2, 0, 4]), torch.tensor([0, 1, 1, 3, 2, 0, 3])  # sources 0 and 4 twice
    keys = torch.randn(6, 7, generator=gen, dtype=torch.float64, requires_grad=True)   # source 3, 5: no edge
    assert torch.autograd.gradcheck(lambda k: target_frame.turn_into_targets(k, coef, src, dst, backend), (keys,))


def test_one_chunk_on_more_threads_gives_the_chunked_values(monkeypatch):
    gen = torch.Generator().manual_seed(2)
    pos, keys = torch.rand(6, 3, generator=gen), torch.randn(6, 7, generator=gen)
    src, dst = edges_of(gen, 6, 6, 20)
    coef = target_frame.target_coefficients(pos, torch.tensor([3.0, 1.0]))

    def turned() -> torch.Tensor:
        return target_frame.turn_into_targets(keys, coef, src, dst, "torch")
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    monkeypatch.setattr(target_frame, "_CHUNK", 3)
    chunked = turned()
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    assert target_frame._chunk(20) == 20
    torch.testing.assert_close(turned(), chunked, atol=0, rtol=0)


@pytest.mark.skipif(not available("numba"), reason="numba is not installed")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_numba_on_several_threads_is_bitwise_its_one_thread_result(monkeypatch, dtype):
    """Every source row sums its edges in edge order on any thread count: 1, 2 and 3 threads agree bit for bit,
    values and gradients, with the edges and rows split unevenly (41 rows, 3 threads); both backends agree."""
    from pointgeope.nn import frame_numba
    monkeypatch.setattr(frame_numba, "_SERIAL_EDGES", 0)                    # split even this small graph
    gen = torch.Generator().manual_seed(3)
    pos, keys = torch.rand(30, 3, generator=gen, dtype=dtype), torch.randn(41, 64, generator=gen, dtype=dtype)
    src, dst = edges_of(gen, 41, 30, 500)
    coef = target_frame.target_coefficients(pos, BlockScale(64, base=100.0, pos_scale=25.0)(dtype, pos.device))
    grad = torch.randn(500, 64, generator=gen, dtype=dtype)
    results = []
    for threads in (1, 2, 3, "torch"):
        monkeypatch.setattr(torch, "get_num_threads", lambda: 1 if threads == "torch" else threads)  # noqa: B023 - read in this iteration
        leaf = keys.clone().requires_grad_()
        out = target_frame.turn_into_targets(leaf, coef, src, dst, "torch" if threads == "torch" else "numba")
        out.backward(grad)
        results.append((out.detach(), leaf.grad))
    for out, gkey in results[1:3]:
        assert torch.equal(out, results[0][0]) and torch.equal(gkey, results[0][1])
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(results[0][0], results[3][0], **tol)
    torch.testing.assert_close(results[0][1], results[3][1], **tol)


@pytest.mark.skipif(not available("numba"), reason="numba is not installed")
@pytest.mark.parametrize("src_index,dst_index,bad",
                         [(9, 0, "3 (9 -> 0)"), (0, 4, "3 (0 -> 4)"), (-1, 1, "3 (-1 -> 1)")])
def test_numba_refuses_an_edge_out_of_range(src_index, dst_index, bad):
    coef = target_frame.target_coefficients(torch.rand(4, 3), torch.tensor([3.0]))
    src, dst = torch.tensor([0, 1, 2, src_index]), torch.tensor([0, 1, 2, dst_index])
    want = f"edge {bad} is out of range: expected sources in [0, 5) and targets in [0, 4)"
    with pytest.raises(IndexError, match=re.escape(want)):
        target_frame.turn_into_targets(torch.randn(5, 3), coef, src, dst, "numba")


def test_default_backend_and_a_wrong_name():
    keys = torch.randn(3, 6)
    assert target_frame.frame_backend(keys) == ("numba" if available("numba") else "torch")
    assert target_frame.frame_backend(keys.to(torch.bfloat16)) == "torch"
    with pytest.raises(ValueError, match="expected backend 'numba', 'torch' or None, got 'cuda'"):
        target_frame.turn_into_targets(keys, torch.zeros(3, 9), torch.zeros(1, dtype=torch.long),
                                       torch.zeros(1, dtype=torch.long), "cuda")


@pytest.mark.skipif(not available("numba"), reason="numba is not installed")
def test_numba_per_edge_rotations_and_their_gradients():
    """Linear GeoPE's per-edge coefficients (`crow = arange(E)`, `R`) and RoPE's pair angles: each edge equals
    its definition (the quaternion sandwich of tests/nn/reference.py; a 2D rotation per channel pair) and the
    gradients pass gradcheck (sources without edges, sources on several edges)."""
    from pointgeope.nn.frame_numba import turn_edges
    gen = torch.Generator().manual_seed(4)
    disp = torch.randn(7, 3, generator=gen, dtype=torch.float64)
    coef = target_frame.target_coefficients(disp, BlockScale(8, base=10.0, pos_scale=3.0)(torch.float64, disp.device))
    src = torch.tensor([0, 4, 1, 1, 2, 0, 4])
    keys = torch.randn(6, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    got = turn_edges(keys, coef, src, torch.arange(7), 1.0, False)
    for e in range(7):                                                      # R(d_e) k = R(0)^T R(d_e) k
        want = ref.geope_turn(keys[src[e]].detach(), torch.zeros(3, dtype=torch.float64), disp[e], 10.0, 3.0,
                              linear=False)
        torch.testing.assert_close(got[e].detach(), want, atol=1e-12, rtol=0)
    theta = torch.rand(7, 3, generator=gen, dtype=torch.float64) * 6
    got = turn_edges(keys, torch.cat([theta.cos(), theta.sin()], -1), src, torch.arange(7), 1.0, True)
    for e in range(7):
        k = keys[src[e]].detach()
        a, b = k[0:6:2], k[1:6:2]
        want = torch.stack([a * theta[e].cos() - b * theta[e].sin(), a * theta[e].sin() + b * theta[e].cos()], -1)
        torch.testing.assert_close(got[e].detach(), torch.cat([want.flatten(), k[6:]]), atol=1e-12, rtol=0)
    cos_sin = torch.cat([theta.cos(), theta.sin()], -1)
    assert torch.autograd.gradcheck(lambda k: turn_edges(k, coef, src, torch.arange(7), 1.0, False), (keys,))
    assert torch.autograd.gradcheck(lambda k: turn_edges(k, cos_sin, src, torch.arange(7), 1.0, True), (keys,))
    for table, pairs in ((coef, False), (cos_sin, True)):                  # the custom op's registrations
        torch.library.opcheck(turn_edges, (keys, table, src, torch.arange(7), 1.0, pairs))
