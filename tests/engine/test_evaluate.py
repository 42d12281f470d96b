"""Tests of pointgeope/engine/evaluate.py: every point voted on, votes = covering crops, aligned predictions."""
from __future__ import annotations

import math

import h5py
import numpy as np
import pytest
import torch

from pointgeope.data.fragments import split_into_crops, voxel_fragments
from pointgeope.data.h5 import read_predictions
from pointgeope.data.voxelize import column_min
from pointgeope.engine.config import load_config
from pointgeope.engine.evaluate import tta_views, view_coord, vote_room, write_predictions

C = 13


class ColourClassifier(torch.nn.Module):
    """Logits that depend only on each point's own red channel: class = (round(255 * red) // 20) % 13.

    A prediction that landed on another point than the one it was made for would show up as a wrong
    class, so the per-point alignment of the vote is tested exactly. Records every forward's sizes."""

    def __init__(self):
        super().__init__()
        self.calls: list[int] = []

    def forward(self, coord, feat, offset):
        self.calls.append(int(coord.shape[0]))
        cls = (torch.round(feat[:, 0] * 255).long() // 20) % C
        return torch.nn.functional.one_hot(cls, C).float() * 5.0


def room(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    coord = (rng.random((n, 3)) * [4.0, 3.0, 2.5]).astype(np.float32)
    coord[: n // 3] = coord[0]  # a dense clump: many points per voxel -> many fragments
    color = rng.integers(0, 256, (n, 3), dtype=np.uint8)
    return coord, color


def expected_class(color):
    return (color[:, 0].astype(np.int64) // 20) % C


def coverage(coord, cfg, seed):
    """Brute-force count of the crops covering each point (same generator draws as vote_room)."""
    counts = np.zeros(coord.shape[0], dtype=np.int64)
    for v, (scale, flip, angle) in enumerate(tta_views(cfg.eval.tta)):
        rng = np.random.default_rng([seed, v])
        view = view_coord(coord, scale, flip, angle)
        view = view - column_min(view)
        for fragment in voxel_fragments(view, cfg.data.grid_size, rng):
            for crop in split_into_crops(view[fragment], cfg.data.voxel_max, rng):
                for i in fragment[crop]:
                    counts[i] += 1
    return counts


def test_each_point_predicted_exactly_once_without_crops():
    coord, color = room()
    cfg = load_config(None, ["data.grid_size=0.2", "data.voxel_max=100000", "train.amp=none"])
    model = ColourClassifier()
    probs, votes = vote_room(model, coord, color, cfg, torch.device("cpu"), seed=1)
    assert votes.shape == (coord.shape[0],) and (votes == 1).all()
    assert np.allclose(probs.sum(1), 1.0, atol=1e-5)
    assert (probs.argmax(1) == expected_class(color)).all()
    n_fragments = len(voxel_fragments(coord - column_min(coord), 0.2, np.random.default_rng([1, 0])))
    assert n_fragments >= 1000  # the clump of 1000 identical points needs 1000 fragments
    assert sum(model.calls) == coord.shape[0]


def test_votes_equal_the_crops_covering_each_point():
    coord, color = room(n=2500, seed=2)
    cfg = load_config(None, ["data.grid_size=0.1", "data.voxel_max=300", "eval.batch_points=1000"])
    model = ColourClassifier()
    probs, votes = vote_room(model, coord, color, cfg, torch.device("cpu"), seed=5)
    expected = coverage(coord, cfg, seed=5)
    assert (votes >= 1).all() and (votes > 1).any()
    np.testing.assert_array_equal(votes, expected)
    np.testing.assert_allclose(probs.sum(1), votes, rtol=1e-5)
    assert (probs.argmax(1) == expected_class(color)).all()
    assert max(model.calls) <= 1000  # never more than eval.batch_points in one forward


def test_batching_does_not_change_the_vote():
    coord, color = room(n=1500, seed=3)
    base = ["data.grid_size=0.1", "data.voxel_max=200"]
    one = vote_room(ColourClassifier(), coord, color, load_config(None, base + ["eval.batch_points=1"]),
                    torch.device("cpu"), seed=0)
    many = vote_room(ColourClassifier(), coord, color, load_config(None, base + ["eval.batch_points=100000"]),
                     torch.device("cpu"), seed=0)
    np.testing.assert_array_equal(one[1], many[1])
    np.testing.assert_allclose(one[0], many[0], atol=1e-6)


def test_tta_views_multiply_the_votes():
    coord, color = room(n=1200, seed=4)
    cfg = load_config(None, ["data.grid_size=0.2", "data.voxel_max=100000", "eval.tta.rotations=3",
                             "eval.tta.flips=true", "eval.tta.scales=[0.9, 1.0]"])
    assert len(tta_views(cfg.eval.tta)) == 12
    probs, votes = vote_room(ColourClassifier(), coord, color, cfg, torch.device("cpu"), seed=0)
    assert (votes == 12).all()
    assert (probs.argmax(1) == expected_class(color)).all()


def test_view_coord_is_a_similarity_about_the_centre():
    coord, _ = room(n=50)
    assert view_coord(coord, 1.0, False, 0.0) is coord
    v = view_coord(coord, 2.0, True, math.pi / 2)
    centre = (coord.min(0) + coord.max(0)) / 2
    d = coord - centre
    np.testing.assert_allclose(v - centre, np.stack([-2 * d[:, 1], -2 * d[:, 0], 2 * d[:, 2]], 1), atol=1e-5)
    with pytest.raises(ValueError, match="rotations >= 1"):
        tta_views(load_config(None, ["eval.tta.rotations=0"]).eval.tta)


def test_predictions_file_schema(tmp_path):
    path = tmp_path / "predictions" / "Area_5.h5"
    rooms = {"office_1": np.array([0, 12, 3], dtype=np.uint8), "hallway_2": np.zeros(5, dtype=np.uint8)}
    write_predictions(path, "Area_5", rooms, {"checkpoint": "last.pt"})
    with h5py.File(path, "r") as f:
        assert f.attrs["kind"] == "predictions" and f.attrs["area"] == "Area_5"
        assert sorted(f) == ["hallway_2", "office_1"]
        assert f["office_1/pred"].dtype == np.uint8 and f["office_1/pred"].shape == (3,)
    np.testing.assert_array_equal(read_predictions(path, "office_1"), rooms["office_1"])
    assert [p.name for p in path.parent.iterdir()] == ["Area_5.h5"]
