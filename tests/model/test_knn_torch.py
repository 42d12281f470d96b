"""Tests of the torch backend of pointgeope/model/ops/knn.py: exact, with the result the ``triton`` backend
defines (float32 ``((dx^2 + dy^2) + dz^2)``, ties to the smaller row), against a float64 brute force of explicit
differences, and against pykdtree (indices and order) where it is installed and no distances tie."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

from pointgeope.model.ops import backends, interpolate, knn
from tests.conftest import cuda_devices
from tests.model.knn_reference import assert_exact_knn

knn_module = importlib.import_module("pointgeope.model.ops.knn")


def _assert_exact(query, support, k, q_off, s_off):
    return assert_exact_knn("torch", query, support, k, q_off, s_off)


def _far_object(seed: int = 0) -> torch.Tensor:
    """A 1 m x 1 m x 5 cm object of 2000 points at (100, 100, 0) and 200 points spread over 200 m: the object
    is far from the cloud's mean, its neighbours' squared distances ~1e-4 against squared coordinates ~1e4."""
    g = torch.Generator().manual_seed(seed)
    obj = torch.rand(2000, 3, generator=g) * torch.tensor([1.0, 1.0, 0.05]) + torch.tensor([100.0, 100.0, 0.0])
    return torch.cat([obj, torch.rand(200, 3, generator=g) * 200 - 100])


def _grid(n: int, rng: np.random.Generator, dtype=torch.float32) -> torch.Tensor:
    """Integer points of a 5^3 grid drawn with repeats: exact ties and duplicates everywhere."""
    return torch.from_numpy(rng.integers(0, 5, size=(n, 3)).astype(np.float64)).to(dtype)


@pytest.mark.parametrize("device", cuda_devices())
def test_a_dense_object_far_from_the_mean_gets_its_exact_neighbours(device):
    points = _far_object().to(device)
    off = torch.tensor([len(points)], device=device)
    idx, _ = _assert_exact(points, points, 8, off, off)
    # the float64 truth: no neighbour farther than the true 8th nearest (beyond float32 rounding)
    p = points.cpu().double()
    got = ((p[:, None] - p[idx.cpu()]) ** 2).sum(-1).max(1).values
    true_kth = torch.stack([((p[i] - p) ** 2).sum(-1).sort().values[7] for i in range(len(p))])
    assert torch.all(got <= true_kth * (1 + 1e-6))


@pytest.mark.parametrize("device", cuda_devices())
def test_exact_ties_and_duplicates_go_to_the_smaller_row(device):
    rng = np.random.default_rng(1)
    same = torch.full((40, 3), 1.25)                   # one point 40 times: every distance ties
    clouds = [_grid(300, rng), same, _grid(60, rng), _grid(3, rng)]
    points = torch.cat(clouds).to(device)
    off = torch.tensor([len(c) for c in clouds], device=device).cumsum(0)
    for k in (1, 6, 16):                               # 16 > 3: the small cloud's rows repeat cyclically
        idx, dist2 = _assert_exact(points, points, k, off, off)
        assert torch.equal(idx[300:340].cpu(), torch.arange(300, 300 + k).expand(40, k))   # the k smallest rows
        assert torch.all(dist2[:, 0] == 0)
    queries = _grid(50, rng).to(device)                # queries that are not support points, both ways
    q_off = torch.tensor([20, 35, 45, 50], device=device)
    _assert_exact(queries, points, 16, q_off, off)
    _assert_exact(points, queries, 4, off, q_off)


def test_float64_coordinates_are_searched_in_float64():
    """Offsets of 1e-9 at 1000: float32 would make every point the same and answer with the smallest rows."""
    g = torch.Generator().manual_seed(3)
    points = 1000.0 + torch.rand(200, 3, generator=g, dtype=torch.float64) * 1e-6
    off = torch.tensor([200])
    idx, _ = _assert_exact(points, points, 8, off, off)
    assert torch.equal(idx[:, 0], torch.arange(200))


@pytest.mark.parametrize("pairs", [1, 7 * 300, 1 << 30])
def test_the_chunk_size_does_not_change_the_result(monkeypatch, pairs):
    """One query row a chunk, 7 rows (33 in the second cloud; the last chunks shorter), everything in one chunk."""
    rng = np.random.default_rng(4)
    points = torch.cat([_grid(300, rng), _far_object()[:63] - 100.0])
    off = torch.tensor([300, 363])
    monkeypatch.setattr(knn_module, "_PAIRS_PER_CHUNK_CPU", pairs)       # one thread
    monkeypatch.setattr(knn_module, "_PAIRS_PER_CHUNK", pairs)           # more threads, or CUDA
    _assert_exact(points, points, 7, off, off)


@pytest.mark.skipif(not backends.available("pykdtree"), reason="pykdtree is not installed")
def test_agrees_with_pykdtree_in_indices_and_order_without_ties():
    """pykdtree's float32 distances are the same expression; without exact ties in distance its neighbours
    and their order are the same. (Where distances tie, too: test_hierarchy_ties.py.)"""
    g = torch.Generator().manual_seed(5)
    random = torch.rand(700, 3, generator=g) * torch.tensor([4.0, 3.0, 2.5])
    points = torch.cat([_far_object(), random])
    off = torch.tensor([2200, 2900])
    for k in (1, 8, 16):
        torch_idx, torch_d = knn(points, points, k, off, off, backend="torch")
        kd_idx, kd_d = knn(points, points, k, off, off, backend="pykdtree")
        assert torch.equal(torch_d, kd_d)
        assert not torch.any(torch_d[:, 1:] == torch_d[:, :-1])       # no ties within a row: order is defined
        assert torch.equal(torch_idx, kd_idx)
    rng = np.random.default_rng(6)
    grid = _grid(200, rng)
    off = torch.tensor([200])
    assert torch.equal(knn(grid, grid, 8, off, off, backend="torch")[1],
                       knn(grid, grid, 8, off, off, backend="pykdtree")[1])


@pytest.mark.parametrize("backend", ["torch", *[b for b in ("pykdtree", "scipy") if backends.available(b)]])
def test_coordinates_that_need_a_gradient_get_the_same_neighbours_and_no_gradient(backend):
    """Positions a network predicts (offset heads) need a gradient; kNN reads them detached on every backend
    (the torch backend's ``out=`` buffers refused them), and ``interpolate``'s gradient flows to the features
    alone, as its docstring says."""
    g = torch.Generator().manual_seed(3)
    points, coarse = torch.rand(30, 3, generator=g), torch.rand(9, 3, generator=g)
    off, c_off = torch.tensor([20, 30]), torch.tensor([5, 9])
    want = knn(points, points, 4, off, off, backend=backend)
    moving = points.clone().requires_grad_()
    got = knn(moving, moving, 4, off, off, backend=backend)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
        assert not a.requires_grad
    feat = torch.randn(9, 2, generator=g)
    weights = torch.randn(30, 2, generator=g)
    f = feat.clone().requires_grad_()
    (want,) = torch.autograd.grad((interpolate(coarse, points, f, c_off, off, backend=backend) * weights).sum(), f)
    moving_coarse = coarse.clone().requires_grad_()
    out = interpolate(moving_coarse, moving, f, c_off, off, backend=backend)
    got = torch.autograd.grad((out * weights).sum(), [f, moving, moving_coarse], allow_unused=True)
    torch.testing.assert_close(got[0], want, atol=0, rtol=0)
    assert got[1] is None and got[2] is None        # nothing flows to the coordinates
