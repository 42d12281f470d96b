"""Tests of pointgeope/nn/knn.py against a brute-force neighbour list and PyG's batching."""
from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader

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


def test_bad_inputs_are_refused():
    pos = torch.rand(4, 3)
    with pytest.raises(ValueError, match="sorted by example"):
        knn_graph(pos, 2, torch.tensor([0, 1, 0, 1]))
    with pytest.raises(ValueError, match=r"expected pos of shape \(N, 3\)"):
        knn_graph(pos[:, :2], 2)
