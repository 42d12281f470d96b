"""The transition up's 3-NN read from the neighbourhoods (pointgeope/model/ops/up_known.py): on the host's exact
backends every row of ``up_s`` and ``up_dist2_s`` is the definition's (the numpy brute force of
tests/model/knn_reference.py), ties, duplicates, clouds smaller than ``k`` and samples repeated by FPS included,
and most rows are not searched."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from pointgeope.model.ops import HierarchySpec, OpsBackends, backends
from tests.model.knn_reference import reference_knn

HOST = [b for b in ("numba", "pykdtree", "scipy") if backends.available(b)] + ["torch"]
HIERARCHY = sys.modules["pointgeope.model.ops.hierarchy"]
UP_KNOWN = sys.modules["pointgeope.model.ops.up_known"]
needs_numba = pytest.mark.skipif(UP_KNOWN.numba is None, reason="numba is not installed")


def _assert_up_is_the_definition(h, coord):
    coords = h.coords(coord)
    for s in range(h.stages - 1):
        idx, d2 = reference_knn(coords[s], coords[s + 1], 3, h.offsets[s], h.offsets[s + 1])
        np.testing.assert_array_equal(h.up[s].numpy(), idx)
        np.testing.assert_array_equal(h.up_dist2[s].double().numpy(), d2)


def _searched_rows(monkeypatch):
    """Record the rows each search of the 3-NN up is asked for (``None``: every row)."""
    asked, real = [], HIERARCHY.known_up

    def spy(sample, offsets, fine, coarse, up, search):
        def counting(rows, rows_off):
            asked.append(rows_off[-1])
            return search(rows, rows_off)
        return real(sample, offsets, fine, coarse, up, counting)
    monkeypatch.setattr(HIERARCHY, "known_up", spy)
    return asked


def _lattice_clouds(sizes, side, seed):
    """Integer points of a ``side^3`` grid a cloud, scaled to 5 cm (float32): equal distances everywhere (so the
    fine rows' order and the coarse rows' order, FPS's, break them differently), duplicates when ``side^3`` is
    small against the cloud."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, side, (sum(sizes), 3), generator=g).float() * 0.05, torch.tensor(sizes).cumsum(0)


@pytest.mark.parametrize("backend", HOST)
def test_every_up_row_is_the_definitions_3nn_on_tied_lattices_while_most_rows_are_not_searched(backend, monkeypatch):
    """Ties at every distance (a 5 cm lattice), clouds of 2000 and 600 points, at k = 8 and 16; and the rows read
    from the neighbourhoods are most of them (the shortcut runs: a quarter sampled, most others settled)."""
    asked = _searched_rows(monkeypatch)
    coord, offset = _lattice_clouds([2000, 600], side=16, seed=31)
    h = HierarchySpec((1, 4, 4, 4), (8, 16, 16, 16), OpsBackends(knn=backend))(coord, offset)
    _assert_up_is_the_definition(h, coord)
    rows = [int(o[-1]) for o in h.offsets[:-1]]
    assert len(asked) == 3 and all(a < n for a, n in zip(asked, rows, strict=True))
    if UP_KNOWN.numba is not None:
        assert asked[1] < rows[1] * 0.5 and asked[2] < rows[2] * 0.5       # k = 16: most rows settled


@pytest.mark.parametrize("backend", HOST)
@pytest.mark.parametrize("seed", range(6))
def test_duplicates_small_clouds_and_repeated_samples_keep_the_definition(backend, seed):
    """Clouds of 1, 2, 3 and 9 points (fewer than ``k``: the cyclic fill, fewer coarse points than 3), and clouds
    of 2-6 distinct places repeated (FPS samples row 0 again once every place is sampled: two coarse points
    at one fine row, the case the settle rule must not take)."""
    g = torch.Generator().manual_seed(seed)
    sizes = [1, 2, 3, 9, 40, 23, 64, 300]
    places = [torch.randint(0, 4, (int(torch.randint(2, 7, (1,), generator=g)), 3), generator=g).float()
              for _ in sizes]
    coord = torch.cat([p[torch.randint(0, len(p), (n,), generator=g)] for p, n in zip(places, sizes, strict=True)])
    offset = torch.tensor(sizes).cumsum(0)
    for strides, ks in (((1, 2, 2), (8, 8, 4)), ((1, 4, 2), (16, 3, 3)), ((2, 2), (4, 16))):
        h = HierarchySpec(strides, ks, OpsBackends(knn=backend))(coord, offset)
        _assert_up_is_the_definition(h, coord)


@needs_numba
def test_a_sample_repeated_by_fps_keeps_its_first_coarse_row():
    """Four places on a line, row 0 at the second: FPS samples the four, then row 0 again, so row 0 is coarse
    points 0 and 4. A fine row whose list holds row 0 must rank coarse point 0 (the smaller row) before the
    others at its distance; a rule that named each sampled fine row by one coarse point would miss it."""
    line = torch.tensor([[1.0, 0, 0], [0.0, 0, 0], [1.5, 0, 0], [9.0, 0, 0]])
    coord = line[torch.tensor([0, 1, 1, 2, 2, 3, 3, 0, 1, 2])]
    offset = torch.tensor([len(coord)])
    h = HierarchySpec((1, 2), (8, 8), OpsBackends(knn="torch"))(coord, offset)
    assert h.samples[1].tolist().count(0) == 2
    _assert_up_is_the_definition(h, coord)


@needs_numba
def test_the_settle_rule_ranks_by_the_coarse_row_and_stops_strictly_below_the_last_listed_distance():
    """The kernel alone, on one hand-made row: listed fine rows 0..5 at distances 0, 1, 1, 1, 2, 2 (the last
    listed distance ``T = 2``), fine rows 1, 2, 3 and 4 sampled as coarse rows 7, 5, 6 and 0. ``S`` is the rows
    below ``T``, ranked by the coarse row: (1, 5), (1, 6), (1, 7); coarse row 0 at ``d2 = T`` is not in it (a
    point outside the list may tie it with a smaller coarse row)."""
    nb = np.array([[0, 1, 2, 3, 4, 5]])
    nd = np.array([[0.0, 1.0, 1.0, 1.0, 2.0, 2.0]], np.float32)
    coarse_row = np.array([-1, 7, 5, 6, 0, -1])
    idx, d2, done = np.zeros((1, 3), np.int64), np.zeros((1, 3), np.float32), np.zeros(1, bool)
    UP_KNOWN._kernel(nb, nd, coarse_row, np.ones(6, bool), idx, d2, done)
    assert done[0] and idx.tolist() == [[5, 6, 7]] and d2.tolist() == [[1.0, 1.0, 1.0]]
    coarse_row[1] = -1                                  # two samples below T: the row stays open
    done[0] = False
    UP_KNOWN._kernel(nb, nd, coarse_row, np.ones(6, bool), idx, d2, done)
    assert not done[0]


@needs_numba
def test_without_numba_every_non_sampled_row_is_searched_with_the_same_result(monkeypatch):
    coord, offset = _lattice_clouds([900, 300], side=12, seed=32)
    spec = HierarchySpec((1, 4, 4), (8, 16, 16), OpsBackends(knn="torch"))
    with_kernel = spec(coord, offset)
    monkeypatch.setattr(UP_KNOWN, "numba", None)
    asked = _searched_rows(monkeypatch)
    without = spec(coord, offset)
    assert asked == [900 + 300 - 225 - 75, 225 + 75 - 56 - 18]        # the sampled rows read, the rest searched
    for a, b in zip(with_kernel.up + with_kernel.up_dist2, without.up + without.up_dist2, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("backend", HOST)
def test_float64_coordinates_keep_float64_distances_in_the_rows_read(backend):
    """The rows read carry the neighbourhoods' distances: float64 for float64 coordinates, as the search's."""
    coord, offset = _lattice_clouds([1500], side=14, seed=33)
    h = HierarchySpec((1, 4, 4), (8, 16, 16), OpsBackends(knn=backend))(coord.double(), offset)
    assert all(d.dtype == torch.float64 for d in h.up_dist2)
    _assert_up_is_the_definition(h, coord.double())
