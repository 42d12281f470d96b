"""The tie rule on every kNN backend (pointgeope/model/ops/knn.py, knn_ties.py): the tree backends (pykdtree, scipy)
give the definition's neighbours bit for bit -- float32 ``((dx^2 + dy^2) + dz^2)``, ties to the smaller row, at
the k-th boundary too -- checked against the numpy brute force written from the definition, and whole hierarchies
built with them equal the torch backend's (the Triton kernels': test_triton_ops.py)."""
from __future__ import annotations

import dataclasses
import importlib

import numpy as np
import pytest
import torch

from pointgeope.model.ops import HierarchySpec, OpsBackends, backends
from tests.model.knn_reference import assert_exact_knn, reference_knn

TREES = [b for b in ("pykdtree", "scipy") if backends.available(b)]
pytestmark = pytest.mark.skipif(not TREES, reason="neither pykdtree nor scipy is installed")


def _lattice(n: int, rng: np.random.Generator, side: int = 7, dtype=torch.float32) -> torch.Tensor:
    """``n`` points of a 4 cm lattice, drawn with repeats: exact ties and duplicates, at the k-th distance too."""
    return torch.from_numpy(rng.integers(0, side, size=(n, 3)) * 0.04).to(dtype)


def _cm_room(n: int, rng: np.random.Generator) -> torch.Tensor:
    """A random room rounded to the centimetre (as scans are stored): float32 distances tie where float64's
    differ, and near ties a float64 tree ranks otherwise."""
    return torch.from_numpy(np.round(rng.random((n, 3)) * np.array([2.0, 1.5, 1.0]), 2)).float()


def _packed(*clouds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.cat(clouds), torch.tensor([len(c) for c in clouds]).cumsum(0)


@pytest.mark.parametrize("backend", TREES)
@pytest.mark.parametrize("k", [1, 3, 8, 16])
def test_tree_backends_give_the_definitions_neighbours_on_ties_and_at_the_kth(backend, k):
    """Self-neighbourhoods and a query set != the support (every other row), clouds of 1, 2 and 5 points among
    them (``n < k``). Before, pykdtree kept tied rows in its visit order and at a k-th tie any of them, and
    scipy's distances were float64's squared (up to 2 ulp off float32's)."""
    rng = np.random.default_rng(k)
    points, off = _packed(_lattice(700, rng), _cm_room(600, rng), _lattice(5, rng), _lattice(1, rng),
                          _cm_room(2, rng))
    assert_exact_knn(backend, points, points, k, off, off)
    starts = [0, *off[:-1].tolist()]
    queries, q_off = _packed(*(points[a:b][::2] for a, b in zip(starts, off.tolist(), strict=True)))
    assert_exact_knn(backend, queries, points, k, q_off, off)


@pytest.mark.parametrize("backend", TREES)
def test_float64_coordinates_keep_the_rule_in_float64(backend):
    rng = np.random.default_rng(3)
    points, off = _packed(_lattice(800, rng, dtype=torch.float64))
    assert_exact_knn(backend, points, points, 8, off, off)


@pytest.mark.parametrize("backend", TREES)
def test_a_point_repeated_hundreds_of_times_gets_its_smallest_rows(backend):
    """400 copies of one point among 300 others: the copies' neighbours are the 16 smallest of their rows, past
    every round of the tree's doubled candidates (``knn_ties._ROUNDS``): the tree over the distinct points."""
    rng = np.random.default_rng(5)
    copies = torch.full((400, 3), 0.13)              # off the lattice
    points, off = _packed(torch.cat([_lattice(150, rng), copies, _lattice(150, rng)]))
    idx, dist2 = assert_exact_knn(backend, points, points, 16, off, off)
    assert torch.equal(idx[200], torch.arange(150, 166)) and not dist2[200].any()


def test_the_numpy_pass_without_numba_gives_the_same(monkeypatch):
    """Without numba: the numpy pass, and the brute force for the 300 copies of one point."""
    knn_ties = importlib.import_module("pointgeope.model.ops.knn_ties")
    monkeypatch.setattr(knn_ties, "numba", None)
    rng = np.random.default_rng(6)
    points, off = _packed(_lattice(900, rng), torch.full((300, 3), 0.05), _cm_room(500, rng))
    assert_exact_knn(TREES[0], points, points, 16, off, off)


def _tied_clouds() -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(7)
    return _packed(_lattice(1500, rng, side=10), _cm_room(900, rng), _lattice(40, rng, side=3), _lattice(3, rng))


def _assert_same_hierarchy(got, want):
    for f in dataclasses.fields(want):
        for g, w in zip(getattr(got, f.name), getattr(want, f.name), strict=True):
            assert (g is None and w is None) or torch.equal(g.cpu(), w.cpu()), f.name


@pytest.mark.parametrize("backend", [*(["numba"] if backends.available("numba") else []), *TREES])
def test_a_cpu_hierarchy_equals_the_torch_one_bit_for_bit(backend):
    """The loader's hierarchy (numba FPS, a tree backend, shared trees) and the torch kNN's: every sample,
    neighbourhood and 3-NN row and distance equal, on clouds full of ties; the torch one is the definition."""
    coord, offset = _tied_clouds()
    spec = HierarchySpec((1, 4, 4, 2), (8, 16, 16, 16), OpsBackends(knn=backend))
    got = spec(coord, offset)
    want = dataclasses.replace(spec, backends=OpsBackends(knn="torch"))(coord, offset)
    _assert_same_hierarchy(got, want)
    coords = want.coords(coord)
    idx, d2 = reference_knn(coords[1], coords[0], 16, want.offsets[1], want.offsets[0])
    assert torch.equal(want.down[1], torch.from_numpy(idx))
    assert (d2[:, 1:] == d2[:, :-1]).sum() > 1000              # the clouds do tie


def test_a_tree_whose_distances_are_off_by_hundreds_of_roundoffs_still_gives_the_definition():
    """``knn_ties.exact_knn`` with a tree that prunes by box distances up to 600 units of float32 roundoff above the
    points' (what pykdtree's incremental box distances may reach after ~100 far steps: the module docstring's
    bound) and returns its candidates' own distances, so a point of a near tie may be left out. Points on
    shells around each query whose squared distances differ by ~30 roundoffs: before, a 64-roundoff margin
    settled rows that such a tree had left a nearer point out of; now they are asked again (the brute force is
    the numpy reference here)."""
    from pointgeope.model.ops import knn_ties

    rng = np.random.default_rng(9)
    u = 2.0 ** -24
    direction = rng.normal(size=(3000, 3))
    radius = 1.0 + rng.integers(0, 40, 3000) * 16 * u         # |s|^2 steps of ~32u, 40 of them
    support = (direction / np.linalg.norm(direction, axis=1, keepdims=True) * radius[:, None]).astype(np.float32)
    query = np.zeros((40, 3), np.float32) + rng.integers(-2, 3, (40, 3)).astype(np.float32) * np.float32(1e-7)
    inflation = 1.0 + rng.uniform(0, 600, (len(query), len(support))) * u

    def candidates(q_rows: np.ndarray, m: int):
        """The ``m`` first by a box distance up to 600u above ``D`` (what prunes), with their own ``D``."""
        rows = np.array([np.flatnonzero((query == r).all(1))[0] for r in q_rows])
        exact = ((q_rows[:, None, :].astype(np.float64) - support[None].astype(np.float64)) ** 2).sum(-1)
        idx = np.argsort(exact * inflation[rows], axis=1, kind="stable")[:, :m]
        t = np.take_along_axis(exact, idx, 1).astype(np.float32)
        by_t = np.argsort(t, axis=1, kind="stable")
        return np.take_along_axis(idx, by_t, 1), np.take_along_axis(t, by_t, 1)

    def reference(q_rows: np.ndarray, k: int):
        return reference_knn(torch.from_numpy(q_rows), torch.from_numpy(support), k, torch.tensor([len(q_rows)]),
                             torch.tensor([len(support)]))

    for k in (1, 3, 8):
        idx, d2 = knn_ties.exact_knn(candidates, lambda q_rows, k=k: reference(q_rows, k), query, support, k)
        want_idx, want_d = reference(query, k)
        np.testing.assert_array_equal(idx, want_idx)
        np.testing.assert_array_equal(d2.astype(np.float64), want_d)
