"""Tests of pointgeope/viz/scene.py: reading a room with its predictions, choosing the points to draw."""
from __future__ import annotations

import re

import numpy as np
import pytest

from pointgeope.constants import CLASS_INDEX
from pointgeope.viz.scene import RoomView, load_room, prepare_view
from tests.viz.conftest import synthetic_room, write_area, write_predictions


def test_load_room_with_predictions(synthetic_area):
    area, preds = synthetic_area
    room, pred = synthetic_room()
    view = load_room(area, "grid_1", preds)
    assert len(view) == len(pred) and view.coord.dtype == np.float32 and view.label.dtype == np.uint8
    np.testing.assert_array_equal(view.label, room["label"])
    np.testing.assert_array_equal(view.pred, pred)
    assert load_room(area, "grid_1").pred is None
    with pytest.raises(KeyError, match="grid_1"):
        load_room(area, "office_7")


def test_load_room_rejects_misaligned_predictions(synthetic_area, tmp_path):
    area, _ = synthetic_area
    short = write_predictions(tmp_path / "short.h5", {"tiny_2": np.array([0, 1, 1])})
    with pytest.raises(ValueError, match=r"shape \(3,\), expected \(4,\)"):
        load_room(area, "tiny_2", short)
    bad = write_predictions(tmp_path / "bad.h5", {"tiny_2": np.array([0, 1, 13, 1])})
    with pytest.raises(ValueError, match=re.escape("outside 0..12")):
        load_room(area, "tiny_2", bad)


def test_prepare_view_hides_downsamples_and_caps():
    rng = np.random.default_rng(0)
    n = 4000
    coord = (rng.random((n, 3)) * 2).astype(np.float32)
    label = rng.integers(0, 13, n).astype(np.uint8)
    view = RoomView("r", coord, np.zeros((n, 3), np.uint8), label, pred=(12 - label).astype(np.uint8))
    hidden = prepare_view(view, hidden=(CLASS_INDEX["ceiling"], CLASS_INDEX["wall"]), max_points=0)
    assert len(hidden) == int(((label != 0) & (label != 2)).sum())
    assert not np.isin(hidden.label, [0, 2]).any()
    np.testing.assert_array_equal(hidden.pred, 12 - hidden.label)  # labels and predictions stay aligned
    assert len(view) == n, "prepare_view must not change its input"
    thinned = prepare_view(view, voxel=0.5, max_points=0)
    assert len(thinned) == 4 ** 3 and "voxel 0.5 m: 4,000 -> 64 points" in thinned.notes[0]
    np.testing.assert_array_equal(thinned.pred, 12 - thinned.label)
    capped = prepare_view(view, max_points=1000)
    assert len(capped) == 1000 and "capped at 1,000 of 4,000 points" in capped.notes[0]
    np.testing.assert_array_equal(capped.pred, 12 - capped.label)
    assert prepare_view(view).notes == ()


def test_repr(tmp_path):
    area = write_area(tmp_path / "Area_1.h5", "Area_1",
                      {"r": {"coord": np.zeros((2, 3)), "label": np.zeros(2)}})
    assert repr(load_room(area, "r")) == "RoomView('r', points=2, without predictions)"
