"""Tests of the hierarchy's shared searches (pointgeope/model/ops/hierarchy.py, knn.shared_trees): one tree per
point set and cloud, the transition down gathered from the stage before, every kNN still the one its definition
asks for, bit for bit, ties included; torch's brute force checked against the numpy definition."""
from __future__ import annotations

import sys

import pytest
import torch

from pointgeope.model.ops import HierarchySpec, OpsBackends, backends, knn
from pointgeope.model.ops.knn import shared_trees
from tests.model.knn_reference import reference_knn
from tests.model.test_ops import _clouds

TREES = [b for b in ("numba", "pykdtree", "scipy") if backends.available(b)]
KNN_MODULE = sys.modules["pointgeope.model.ops.knn"]


def _tied_clouds(sizes, seed=0):
    """Clouds of points on a 5 cm lattice (float32): many equal distances, at the k-th neighbour too."""
    g = torch.Generator().manual_seed(seed)
    cells = torch.randint(0, 40, (sum(sizes), 3), generator=g)
    unique = []
    start = 0
    for n in sizes:           # distinct points within each cloud (a kNN of duplicates ties at 0)
        part = torch.unique(cells[start:start + n], dim=0)
        unique.append(part[torch.randperm(len(part), generator=g)])
        start += n
    pts = torch.cat(unique).float() * 0.05
    return pts, torch.tensor([len(u) for u in unique]).cumsum(0)


def _spy_builds(monkeypatch, backend):
    """Record the size of every tree ``backend`` builds."""
    if backend == "numba":
        from pointgeope.model.ops import kd_knn as module
        name = "build_tree"
    elif backend == "pykdtree":
        import pykdtree.kdtree as module
        name = "KDTree"
    else:
        import scipy.spatial as module
        name = "cKDTree"
    built, real = [], getattr(module, name)

    def counting(data, *args, **kwargs):
        built.append(len(data))
        return real(data, *args, **kwargs)
    monkeypatch.setattr(module, name, counting)
    return built


@pytest.mark.parametrize("backend", TREES)
def test_a_hierarchy_builds_one_tree_per_stage_and_cloud(backend, monkeypatch):
    """Each stage's tree serves its own kNN, the 3-NN up of the stage before and the transition down of the next:
    one build per (stage, cloud), 4 stages x 2 clouds; each kNN building its own would be 20."""
    coord, offset = _clouds([1200, 700], seed=21)
    built = _spy_builds(monkeypatch, backend)
    h = HierarchySpec((1, 4, 4, 4), (8, 16, 16, 8), OpsBackends(knn=backend))(coord, offset)
    sizes = [n for off in h.offsets for n in torch.diff(off, prepend=torch.zeros(1, dtype=torch.long)).tolist()]
    assert sorted(built) == sorted(sizes)          # each stage's clouds once


def test_shared_trees_build_once_per_tensor_in_the_block_and_forget_them_after(monkeypatch):
    if "pykdtree" not in TREES:
        pytest.skip("pykdtree is not installed")
    from pointgeope import morton_order

    support, s_off = _clouds([900], seed=22)
    query, q_off = _clouds([KNN_MODULE._ORDERED_QUERIES + 10], seed=23)
    built = _spy_builds(monkeypatch, "pykdtree")
    ordered, real_order = [], morton_order.cloud_order
    monkeypatch.setattr(morton_order, "cloud_order", lambda q: ordered.append(len(q)) or real_order(q))
    alone = knn(query, support, 5, q_off, s_off, backend="pykdtree")
    with shared_trees():
        first = knn(query, support, 5, q_off, s_off, backend="pykdtree")
        second = knn(query, support, 7, q_off, s_off, backend="pykdtree")
        knn(query, support.clone(), 5, q_off, s_off, backend="pykdtree")    # equal values, another tensor
    after = knn(query, support, 7, q_off, s_off, backend="pykdtree")
    assert built == [900, 900, 900, 900]          # alone; the block's two searches; its clone; after
    assert ordered == [len(query)] * 3            # alone; once in the block; after
    assert all(torch.equal(a, b) for a, b in zip(alone, first, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(after, second, strict=True))


@pytest.mark.parametrize("backend", TREES)
def test_every_kNN_of_a_hierarchy_is_the_one_its_definition_asks_for_bit_for_bit_ties_included(backend):
    """The hierarchy (shared trees, the transition down gathered when ``k`` repeats) against one ``knn`` call
    per op of the module docstring, each with its own tree, on lattice clouds whose distances tie: the same rows
    in the same order and the same distances (ties to the smaller row: test_hierarchy_ties.py), so the lattice
    checks that sharing keeps them."""
    coord, offset = _tied_clouds([3000, 1500], seed=24)
    spec = HierarchySpec((1, 4, 4, 2), (8, 16, 16, 16), OpsBackends(knn=backend))
    h = spec(coord, offset)
    coords = h.coords(coord)

    def own(s_query, s_support, k):
        return knn(coords[s_query], coords[s_support], k, h.offsets[s_query], h.offsets[s_support], backend=backend)

    tied = 0
    for s, k in enumerate(spec.neighbours):
        assert torch.equal(h.neighbours[s], own(s, s, k)[0])
        if s:
            assert torch.equal(h.down[s], own(s, s - 1, k)[0])
            dist2 = own(s, s - 1, k)[1]
            tied += int((dist2[:, 1:] == dist2[:, :-1]).sum())
        if s < 3:
            idx, dist2 = own(s, s + 1, 3)
            assert torch.equal(h.up[s], idx) and torch.equal(h.up_dist2[s], dist2)
    assert tied > 1000                             # the lattice ties


def test_the_torch_hierarchy_is_the_definition_of_every_kNN_with_the_smaller_row_first_in_ties():
    """The independent reference: torch's hierarchy (the transition down gathered from the stage before at
    ``k = 16``, searched at ``k = 8 -> 16``) equals the numpy brute force of ``knn``'s definition, rows and
    distances, on tied lattice clouds; pykdtree's distances equal it too (and its rows: test_hierarchy_ties.py)."""
    coord, offset = _tied_clouds([1600, 900], seed=25)
    spec = HierarchySpec((1, 4, 4), (8, 16, 16), OpsBackends(knn="torch", fps="torch"))
    h = spec(coord, offset)
    coords = h.coords(coord)
    for s in (1, 2):
        idx, d2 = reference_knn(coords[s], coords[s - 1], 16, h.offsets[s], h.offsets[s - 1])
        assert torch.equal(h.down[s], torch.from_numpy(idx))
        if "pykdtree" in TREES:
            tree = HierarchySpec(spec.strides, spec.neighbours, OpsBackends("pykdtree", "torch"))(coord, offset)
            assert torch.equal(tree.samples[s], h.samples[s])
            diff = coords[s][:, None] - coords[s - 1][tree.down[s]]          # float32, as the definition
            got = (diff[..., 0] * diff[..., 0] + diff[..., 1] * diff[..., 1]) + diff[..., 2] * diff[..., 2]
            assert torch.equal(got.double().sort(1).values, torch.from_numpy(d2).sort(1).values)
    for s in range(3):
        idx, _ = reference_knn(coords[s], coords[s], spec.neighbours[s], h.offsets[s], h.offsets[s])
        assert torch.equal(h.neighbours[s], torch.from_numpy(idx))


def _repeating_clouds(sizes, seed):
    """Integer points of a 6^3 grid per cloud (float32): duplicates and ties everywhere; clouds of 1 to 9 points
    are smaller than ``k``, so their rows are filled cyclically at every stage."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 6, (sum(sizes), 3), generator=g).float(), torch.tensor(sizes).cumsum(0)


@pytest.mark.parametrize("backend", ["torch", "triton", *TREES])
def test_the_gathered_transition_down_is_the_search_its_definition_asks_for_small_clouds_and_duplicates(backend):
    """``down_s = neighbours_{s-1}[sample_s]`` when ``k`` repeats, on every backend, for clouds of several sizes
    in one batch (1, 3 and 9 points: fewer than ``k``, the cyclic fill) and duplicate points: the same rows in the
    same order as ``knn(coord_s -> coord_{s-1}, k)`` searched on its own; for the exact backends (torch, Triton)
    also the numpy brute force of the definition, ``(d2, row)`` order, ties and fill included."""
    if backend == "triton":
        pytest.importorskip("triton")
        from pointgeope.model import kernel_choice
        if not kernel_choice.current().interpret:
            pytest.skip("the Triton kernels need CUDA or TRITON_INTERPRET=1")
    coord, offset = _repeating_clouds([68, 37, 9, 3, 1], seed=26)
    spec = HierarchySpec((1, 4, 4), (16, 16, 16), OpsBackends(knn=backend, fps="torch"))
    h = spec(coord, offset)
    coords = h.coords(coord)
    assert min(torch.diff(h.offsets[1], prepend=torch.zeros(1, dtype=torch.long)).tolist()) < 16
    for s in (1, 2):
        searched = knn(coords[s], coords[s - 1], 16, h.offsets[s], h.offsets[s - 1], backend=backend)[0]
        assert torch.equal(h.down[s], searched)
        if backend in ("torch", "triton"):
            want, _ = reference_knn(coords[s], coords[s - 1], 16, h.offsets[s], h.offsets[s - 1])
            assert torch.equal(h.down[s], torch.from_numpy(want))
