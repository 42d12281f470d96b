"""Transformations of a valid scan under which `predict`'s output is known: a move by whole metres changes no
score, and a scan whose voxels hold one point each, given in another order, gets its scores in that order.

The trained network of ``tiny_run`` (a real PTv1 with its kNN, FPS and crops), not a per-point classifier: these
relations hold only because the pipeline shifts every scan to a minimum of 0 in float64 before it rounds to
float32, and lists every test piece in voxel-key order (docs/recipe.md, "test point order"), never in the
order the points came in.
"""
from __future__ import annotations

import numpy as np

from pointgeope.data.voxelize import voxel_groups
from pointgeope.engine.predict import predict_scan
from pointgeope.engine.predict_model import load_predictor
from pointgeope.h5 import read_room
from pointgeope.scans.scan import Scan


def _scores(predictor, coord: np.ndarray, color: np.ndarray) -> np.ndarray:
    scan = Scan(name="scan", source="scan", coord=coord, color=color)   # one name: one vote seed
    return predict_scan(predictor, scan, warn=lambda line: None)[1]


def _one_point_per_voxel(coord: np.ndarray, grid: float) -> np.ndarray:
    """Rows of ``coord`` keeping one point of each voxel of the grid the kept points define themselves (their
    own minimum is the grid's origin, so a subset is thinned again until no voxel holds two)."""
    rows = np.arange(len(coord))
    while True:
        kept = (coord[rows] - coord[rows].min(axis=0)).astype(np.float32)
        groups = voxel_groups(kept, grid, rank=np.arange(len(rows)))
        if groups.counts.max() == 1:
            return rows
        rows = np.sort(rows[groups.order[groups.starts]])


def test_a_scan_moved_by_whole_metres_gets_the_same_scores_bit_for_bit(tiny_run, two_folds):
    """float32 room coordinates plus whole metres are exact in float64, and so is the shift back to a minimum
    of 0: the network sees the same input. Up to 4,000 km (a UTM northing), both signs."""
    predictor = load_predictor(tiny_run, device="cpu")
    room = read_room(two_folds / "Area_1.h5", "office_1")
    coord, color = room["coord"].astype(np.float64), room["color"]
    scores = _scores(predictor, coord, color)
    for shift in ([3.0, -7.0, 1.0], [500_000.0, 4_000_000.0, -120.0]):
        np.testing.assert_array_equal(_scores(predictor, coord + np.array(shift), color), scores)


def test_a_scan_of_one_point_per_voxel_in_another_order_gets_its_scores_in_that_order(tiny_run, two_folds):
    """Every fragment is then the whole scan, and the network reads its points in voxel-key order whatever the
    file's order: the scores follow the points exactly (the kNN and FPS ties, broken by row, included). With
    several points in a voxel the seeded within-voxel shuffle is drawn per input row, so another order picks
    other fragments (the published protocol's randomness, not checked here)."""
    predictor = load_predictor(tiny_run, device="cpu")
    room = read_room(two_folds / "Area_1.h5", "office_1")
    rows = _one_point_per_voxel(room["coord"].astype(np.float64), predictor.cfg.data.grid_size)
    coord, color = room["coord"][rows].astype(np.float64), room["color"][rows]
    assert len(rows) > predictor.cfg.data.voxel_max   # several crops: their seeds are drawn per piece row
    scores = _scores(predictor, coord, color)
    order = np.random.default_rng(0).permutation(len(rows))
    np.testing.assert_array_equal(_scores(predictor, coord[order], color[order]), scores[order])
