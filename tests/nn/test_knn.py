"""Tests of pointgeope/nn/knn.py against a brute-force neighbour list and PyG's batching."""
from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader

from pointgeope.model.ops import backends
from pointgeope.nn import knn_graph


def brute_force(pos: torch.Tensor, sizes: list[int], k: int, loop: bool) -> torch.Tensor:
    """Edges ``(j, i)``: for each point ``i`` the ``k`` closest points of its cloud (itself only if ``loop``),
    nearest first, from the full distance matrix of each cloud."""
    edges, start = [], 0
    for size in sizes:
        cloud = pos[start:start + size]
        for i in range(size):
            order = torch.argsort(((cloud - cloud[i]) ** 2).sum(1)).tolist()
            others = [j for j in order if loop or j != i][:k]
            edges += [(start + j, start + i) for j in others]
        start += size
    return torch.tensor(edges).T


@pytest.mark.parametrize("loop", [False, True])
def test_equals_brute_force_within_each_cloud(loop):
    gen = torch.Generator().manual_seed(0)
    sizes = [6, 3, 8]                                      # the 3-point cloud has fewer than k others
    pos = torch.rand(sum(sizes), 3, generator=gen, dtype=torch.float64)
    batch = torch.repeat_interleave(torch.arange(3), torch.tensor(sizes))
    got = knn_graph(pos, 4, batch, loop=loop)
    assert torch.equal(got, brute_force(pos, sizes, 4, loop))
    assert len(set(map(tuple, got.T.tolist()))) == got.shape[1]          # no edge twice


def test_a_dataloader_batch_gets_the_graphs_of_its_examples():
    gen = torch.Generator().manual_seed(1)
    clouds = [torch.rand(n, 3, generator=gen) for n in (7, 5, 9)]
    graphs = [Data(pos=pos, edge_index=knn_graph(pos, 3)) for pos in clouds]
    batch = next(iter(DataLoader(graphs, batch_size=3)))
    assert torch.equal(knn_graph(batch.pos, 3, batch.batch), batch.edge_index)


CPU_BACKENDS = [None, "pykdtree", "scipy", "torch"]


@pytest.mark.parametrize("backend", ["torch", *[b for b in ("pykdtree", "scipy") if backends.available(b)]])
def test_positions_that_need_a_gradient_get_the_brute_force_graph(backend):
    """Positions a network predicts need a gradient (PyG's ``knn_graph`` takes them): every backend reads them
    detached, the torch one included (the CPU default without pykdtree and scipy)."""
    pos = torch.rand(20, 3, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    assert torch.equal(knn_graph(pos.clone().requires_grad_(), 4, backend=backend), brute_force(pos, [20], 4, False))


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_positions_are_refused_on_every_backend(backend, bad):
    """A NaN has no nearest neighbour: the default backend answered index 2**32 - 1, torch anything."""
    pos = torch.rand(6, 3, generator=torch.Generator().manual_seed(0))
    pos[4, 1] = bad
    with pytest.raises(ValueError, match=r"expected finite x \(positions\), got 1 NaN or infinite entries \(the "
                                         r"first in row 4"):
        knn_graph(pos, 2, backend=backend)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_far_but_finite_points_get_valid_indices(backend):
    """Up to the point ops' limit (2^60, about 1.15e18) every backend answers; beyond it (float32 squared
    distances overflow) the positions are refused in one line, float64 ones too."""
    if backend and not backends.available(backend):      # pip install "pointgeope[nn]" has neither KD-tree
        pytest.skip(f"{backend} is not installed")
    pos = torch.rand(6, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    pos[2] = 1e30
    with pytest.raises(ValueError, match=r"expected x \(positions\) within \+-2\^60 .* got 3 entries outside \(the "
                                         r"first in row 2: \[1e\+30, 1e\+30, 1e\+30\]\); recentre or rescale"):
        knn_graph(pos, 3, backend=backend)
    pos[2] = 1e18
    got = knn_graph(pos, 3, backend=backend)
    assert got.min() >= 0 and got.max() < 6
    for i in range(6):                                   # 3 distinct others each
        assert len(set(got[0, got[1] == i].tolist()) - {i}) == 3
    if (backend or backends.knn_backend(pos.device)) != "torch":   # torch's: exact up to ~1e-6 of the extent
        near = got[1] != 2                               # the far point's neighbours tie at 1e18: any 3 others
        assert torch.equal(got[:, near], brute_force(pos, [6], 3, loop=False)[:, near])


def test_k_is_an_int_of_at_least_one():
    pos = torch.rand(5, 3)
    for k in (1.5, "2", True, torch.tensor(2.0)):
        with pytest.raises(TypeError, match=r"expected k an int >= 1, got"):
            knn_graph(pos, k)
    for k in (0, -1):
        with pytest.raises(ValueError, match=rf"expected k >= 1, got {k}$"):
            knn_graph(pos, k)
    assert torch.equal(knn_graph(pos, torch.tensor(2)), knn_graph(pos, 2))


def test_a_huge_k_is_clamped_to_the_cloud_before_allocating():
    """k = 10**12 asked the backend for 10**12 columns (8 TB) before; now every point gets all its others."""
    pos = torch.rand(7, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    batch = torch.tensor([0, 0, 0, 1, 1, 1, 1])
    for loop in (False, True):
        assert torch.equal(knn_graph(pos, 10**12, batch, loop=loop), brute_force(pos, [3, 4], 6, loop))


def test_empty_positions_give_an_empty_graph():
    got = knn_graph(torch.zeros(0, 3), 4, torch.zeros(0, dtype=torch.long))
    assert got.shape == (2, 0) and got.dtype == torch.long


def test_wrong_types_and_shapes_name_the_argument():
    pos = torch.rand(4, 3)
    with pytest.raises(TypeError, match=r"expected x a floating-point tensor, got dtype torch.int64"):
        knn_graph(torch.ones(4, 3, dtype=torch.long), 2)
    with pytest.raises(ValueError, match=r"expected x \(positions\) of shape \(N, 3\), got \(4, 2\)"):
        knn_graph(pos[:, :2], 2)
    with pytest.raises(TypeError, match=r"expected batch an integer tensor, got torch.float32"):
        knn_graph(pos, 2, torch.zeros(4))
    with pytest.raises(ValueError, match=r"expected batch of shape \(4,\) \(one example index a point\), got \(3,\)"):
        knn_graph(pos, 2, torch.zeros(3, dtype=torch.long))


def test_an_unsorted_batch_is_said_to_be_unsorted():
    with pytest.raises(ValueError, match=r"expected batch sorted by example \(non-decreasing.*got batch\[2\] = 0 "
                                         r"after 1: sort the points by example first"):
        knn_graph(torch.rand(4, 3), 2, torch.tensor([0, 1, 0, 1]))


def test_pygs_signature_flow_cosine_workers_batch_size():
    """PyG's positional order ``(x, k, batch, loop, flow, cosine, num_workers, batch_size)``; ``backend`` only by
    keyword (a fifth positional argument is ``flow``, named in the error)."""
    pos = torch.rand(8, 3, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    batch = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    plain = knn_graph(pos, 2, batch)
    assert torch.equal(knn_graph(pos, 2, batch, False, "target_to_source"), plain.flip(0))
    assert torch.equal(knn_graph(pos, 2, batch, False, "source_to_target", False, 4, 2, backend="torch"), plain)
    with pytest.raises(ValueError, match=r"expected flow in \('source_to_target', 'target_to_source'\), got 'torch'"):
        knn_graph(pos, 2, batch, False, "torch")
    with pytest.raises(ValueError, match=r"cosine=True is not supported"):
        knn_graph(pos, 2, batch, cosine=True)
    with pytest.raises(ValueError, match=r"expected num_workers >= 1, got 0"):
        knn_graph(pos, 2, num_workers=0)
    with pytest.raises(ValueError, match=r"expected batch < batch_size = 1, got 1"):
        knn_graph(pos, 2, batch, batch_size=1)
    with pytest.raises(TypeError, match="positional"):
        knn_graph(pos, 2, batch, False, "source_to_target", False, 1, None, "torch")


def test_a_k_beyond_the_triton_knn_names_knn_graphs_own_k():
    """knn_graph(k=64) searches 65 neighbours (itself, then dropped): the triton backend's refusal said "got
    k=65" for a call that said 64. Its largest is 64 neighbours a point: k <= 63 without the loop, 64 with."""
    pos = torch.rand(100, 3, generator=torch.Generator().manual_seed(9))
    top = backends.TRITON_KNN_MAX_K
    with pytest.raises(ValueError, match=rf"^knn_graph\(k={top}, loop=False\) searches {top + 1} neighbours a point "
                                         rf"\(k \+ 1: .*takes up to {top}: k <= {top - 1}, or backend=None$"):
        knn_graph(pos, top, backend="triton")
    with pytest.raises(ValueError, match=rf"^knn_graph\(k={top + 1}, loop=True\) searches {top + 1} neighbours a "
                                         rf"point, and .*k <= {top}, or backend=None$"):
        knn_graph(pos, top + 1, loop=True, backend="triton")
