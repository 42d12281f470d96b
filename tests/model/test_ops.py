"""Tests of pointgeope/model/ops: every backend against brute force, FPS's selection property."""
from __future__ import annotations

import sys
import types

import pytest
import torch

from pointgeope.model import kernels
from pointgeope.model.ops import backends, fps, gather, interpolate, knn
from pointgeope.model.ops.interpolate import EPS
from tests.conftest import cuda_devices
from tests.model.fps_reference import reference_fps

KNN = [b for b in ("numba", "pykdtree", "scipy", "torch") if backends.available(b)]
FPS = [b for b in ("numba", "torch") if backends.available(b)]


def _clouds(sizes, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    pts = (torch.rand(sum(sizes), 3, generator=g, dtype=torch.float64)
           * torch.tensor([4.0, 3.0, 2.5], dtype=torch.float64))
    return pts.to(dtype), torch.tensor(sizes).cumsum(0)


def _brute_knn(query, support, k, q_off, s_off):
    """float64 distances to every support point of the same cloud, sorted (n < k: cyclic repeat)."""
    dist_rows, q0, s0 = [], 0, 0
    for q1, s1 in zip(q_off.tolist(), s_off.tolist(), strict=True):
        d = ((query[q0:q1, None].double() - support[None, s0:s1].double()) ** 2).sum(-1)
        d = d.sort(dim=1).values
        dist_rows.append(d[:, torch.arange(k) % d.shape[1]])
        q0, s0 = q1, s1
    return torch.cat(dist_rows)


def _small_cloud_cluster(monkeypatch):
    """torch-cluster as ``knn`` finds it, a stand-in that refuses to search where the package is not installed:
    a batch with a cloud smaller than ``k`` takes the torch path cloud by cloud and never calls it."""
    if not backends.available("cluster"):
        monkeypatch.setitem(backends._FOUND, "cluster", True)
        monkeypatch.setitem(sys.modules, "torch_cluster", types.SimpleNamespace(knn=lambda *a: pytest.fail("called")))


@pytest.mark.parametrize("backend", [*KNN, "cluster"])
def test_knn_matches_brute_force_with_ragged_batches(backend, monkeypatch):
    """``cluster``: the small-cloud path (torch-cluster's kNN is never called for this batch)."""
    if backend == "cluster":
        _small_cloud_cluster(monkeypatch)
    support, s_off = _clouds([300, 5, 180], seed=1)          # the middle cloud is smaller than k
    query, q_off = _clouds([40, 7, 60], seed=2)
    k = 16
    idx, dist2 = knn(query, support, k, q_off, s_off, backend=backend)
    assert idx.shape == (107, k) and idx.dtype == torch.long and dist2.shape == (107, k)
    expected = _brute_knn(query, support, k, q_off, s_off)
    torch.testing.assert_close(dist2.double(), expected, atol=1e-5, rtol=1e-5)
    # the returned indices have the returned distances and belong to the query's cloud
    recomputed = ((query[:, None].double() - support[idx].double()) ** 2).sum(-1)
    torch.testing.assert_close(recomputed, expected, atol=1e-5, rtol=1e-5)
    cloud_of_query = torch.repeat_interleave(torch.arange(3), torch.tensor([40, 7, 60]))
    cloud_of_support = torch.repeat_interleave(torch.arange(3), torch.tensor([300, 5, 180]))
    assert torch.equal(cloud_of_support[idx], cloud_of_query[:, None].expand(-1, k))
    # small cloud: its 5 neighbours sorted, then repeated cyclically
    small = idx[40:47]
    assert torch.equal(small[:, 5:10], small[:, :5]) and len(set(small[0, :5].tolist())) == 5


def test_knn_backends_agree_on_indices_without_ties():
    pts, off = _clouds([500, 200], seed=3, dtype=torch.float64)
    results = [knn(pts, pts, 8, off, off, backend=b)[0] for b in KNN]
    for other in results[1:]:
        assert torch.equal(results[0], other)
    assert torch.equal(results[0][:, 0], torch.arange(700))  # every point is its own nearest neighbour


TREES = [b for b in ("pykdtree", "scipy") if backends.available(b)]


def _library_knn(backend, query, support, k):
    """The tree library's own answer for every query of one cloud, in the caller's order: rows and float32 squared
    distances (scipy's float64 distances replaced by the definition's float32 ``((dx^2 + dy^2) + dz^2)`` of its
    rows, as the backend returns them)."""
    q, s = query.numpy(), support.numpy()
    if backend == "pykdtree":
        from pykdtree.kdtree import KDTree
        dist2, idx = KDTree(s).query(q, k=k, sqr_dists=True)
        return torch.from_numpy(idx.astype("int64")), torch.from_numpy(dist2)
    from scipy.spatial import cKDTree
    _, idx = cKDTree(s).query(q, k=k)
    sq = (q[:, None] - s[idx]) ** 2
    return torch.from_numpy(idx.astype("int64")), torch.from_numpy((sq[..., 0] + sq[..., 1]) + sq[..., 2])


@pytest.mark.parametrize("backend", TREES)
def test_tree_backends_search_many_queries_in_morton_order_and_answer_each_as_the_library_does(backend, monkeypatch):
    """From ``_ORDERED_QUERIES`` queries of a cloud the tree is searched in the queries' Morton order (a speed
    choice only): every row is still the library's own answer for that query, bit for bit, in the caller's
    order, in both clouds (one above the threshold, one below)."""
    import sys

    from pointgeope import morton_order as morton
    knn_module = sys.modules["pointgeope.model.ops.knn"]
    ordered = []
    monkeypatch.setattr(morton, "cloud_order", lambda q: ordered.append(len(q)) or morton_order(q))
    morton_order = morton.morton_order
    big = knn_module._ORDERED_QUERIES + 700
    support, s_off = _clouds([6000, 900], seed=4)
    query, q_off = _clouds([big, 300], seed=5)
    query = query[torch.randperm(len(query), generator=torch.Generator().manual_seed(6))]  # shuffled, as crops are
    idx, dist2 = knn(query, support, 8, q_off, s_off, backend=backend)
    assert ordered == [big]
    first = _library_knn(backend, query[:big], support[:6000], 8)
    second = _library_knn(backend, query[big:], support[6000:], 8)
    assert torch.equal(idx, torch.cat([first[0], second[0] + 6000]))
    assert torch.equal(dist2, torch.cat([first[1], second[1]]))


def test_knn_ties_give_equal_distances():
    grid = torch.stack(torch.meshgrid(*[torch.arange(5.0)] * 3, indexing="ij"), -1).reshape(-1, 3)
    off = torch.tensor([grid.shape[0]])
    expected = _brute_knn(grid, grid, 7, off, off)
    for b in KNN:
        _, dist2 = knn(grid, grid, 7, off, off, backend=b)
        torch.testing.assert_close(dist2.double(), expected)


def test_knn_rejects_bad_input():
    pts, off = _clouds([10])
    with pytest.raises(ValueError, match="offset\\[-1\\]"):
        knn(pts, pts, 3, torch.tensor([9]), off)
    with pytest.raises(ValueError, match="query \\(M, 3\\)"):
        knn(pts[:, :2], pts, 3, off, off)
    with pytest.raises(ValueError, match="knn backend"):
        knn(pts, pts, 3, off, off, backend="faiss")
    with pytest.raises(ValueError, match="strictly increasing"):
        knn(pts, pts, 3, torch.tensor([6, 6, 10]), torch.tensor([6, 6, 10]))


def test_fps_torch_is_exact_fps_from_the_first_point():
    pts, off = _clouds([2000, 37, 900], seed=4)
    idx, new_off = fps(pts, off, 4, backend="torch")
    assert new_off.tolist() == [500, 509, 734]
    starts = [0, 2000, 2037]
    for b, (start, n, m) in enumerate(zip(starts, [2000, 37, 900], [500, 9, 225], strict=True)):
        lo = new_off[b - 1].item() if b else 0
        expected = reference_fps(pts[start:start + n].numpy(), m)
        assert (idx[lo:lo + m] - start).tolist() == expected


@pytest.mark.parametrize("backend", FPS)
def test_fps_is_deterministic_and_keeps_tiny_clouds(backend):
    pts, off = _clouds([1500, 3, 1], seed=6)
    a, off_a = fps(pts, off, 4, backend=backend)
    b, off_b = fps(pts, off, 4, backend=backend)
    assert torch.equal(a, b) and off_a.tolist() == [375, 376, 377]
    assert len(set(a.tolist())) == 377


def test_interpolation_equals_brute_force():
    src, s_off = _clouds([50, 2], seed=7, dtype=torch.float64)
    dst, d_off = _clouds([80, 6], seed=8, dtype=torch.float64)
    feat = torch.randn(52, 5, dtype=torch.float64)
    out = interpolate(src, dst, feat, s_off, d_off)
    expected = torch.empty(86, 5, dtype=torch.float64)
    for i in range(86):
        lo, hi = (0, 50) if i < 80 else (50, 52)
        d = (dst[i] - src[lo:hi]).norm(dim=1)
        order = d.argsort()[torch.arange(3) % (hi - lo)]          # 3 nearest, repeated in a 2-point cloud
        w = 1 / (d[order] + EPS)
        expected[i] = (w[:, None] * feat[lo:hi][order]).sum(0) / w.sum()
    torch.testing.assert_close(out, expected)
    # a point that coincides with a source point takes its feature (up to weights ~1e-8 / distance)
    torch.testing.assert_close(interpolate(src, src, feat, s_off, s_off), feat, atol=1e-6, rtol=0)


@pytest.mark.parametrize("device", cuda_devices())
def test_results_stay_on_the_input_device(device):
    pts, off = _clouds([300, 100], seed=9)
    pts, off = pts.to(device), off.to(device)
    idx, dist2 = knn(pts, pts, 4, off, off)
    sel, new_off = fps(pts, off, 4)
    assert idx.device == dist2.device == sel.device == new_off.device == pts.device


def test_gather_matches_indexing_in_value_and_gradient():
    g = torch.Generator().manual_seed(10)
    x = torch.randn(30, 5, generator=g, dtype=torch.float64, requires_grad=True)
    idx = torch.randint(0, 30, (40, 7), generator=g)            # many repeated rows
    weight = torch.randn(40, 7, 5, generator=g, dtype=torch.float64)
    out = gather(x, idx)
    assert torch.equal(out, x[idx])
    (grad,) = torch.autograd.grad((out * weight).sum(), x)
    (expected,) = torch.autograd.grad((x[idx] * weight).sum(), x)
    torch.testing.assert_close(grad, expected)
    assert torch.autograd.gradcheck(lambda a: gather(a, idx[:5, :3]), (x,))


@pytest.mark.skipif(backends.available("cluster"), reason="torch-cluster installed: it is the CUDA kNN default")
def test_cuda_without_torch_cluster_or_triton_samples_on_the_host_and_searches_on_the_device(capsys, monkeypatch):
    """No Python loop of FPS steps on a GPU: without Triton (the default where it imports, see
    test_triton_ops.py) the numba FPS on the host; kNN stays on the device (pure torch)."""
    from pointgeope.info import print_info

    monkeypatch.setattr(kernels, "triton_imports", lambda: False)
    cuda = torch.device("cuda")               # a device name only: nothing runs on it
    assert backends.knn_backend(cuda) == "torch"
    assert backends.fps_backend(cuda) == ("numba" if backends.available("numba") else "torch")
    if backends.available("numba"):
        assert "fps=numba (on the host)" in backends.summary(cuda)
    print_info()
    out = capsys.readouterr().out
    assert f"ops backends: {backends.summary('cpu')}" in out
    assert "training on cpu: point hierarchy: built on the host" in out
