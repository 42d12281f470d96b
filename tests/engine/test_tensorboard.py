"""Tests of pointgeope/engine/tensorboard.py: the validation point clouds of a trained fold, read back from
its TensorBoard events, are room points coloured by the predictions evaluate wrote."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

from pointgeope.constants import PALETTE
from pointgeope.engine.tensorboard import RoomClouds
from pointgeope.h5 import list_rooms, read_room
from pointgeope.h5_predictions import read_predictions


def test_validation_clouds_show_the_predictions(tiny_run, two_folds):
    events = EventAccumulator(str(tiny_run / "tb"), size_guidance={"tensors": 0})
    events.Reload()
    rooms = sorted(list_rooms(two_folds / "Area_1.h5"))[:2]
    tags = [t for t in events.Tags()["tensors"] if t.startswith("clouds/")]
    assert sorted(tags) == sorted(f"clouds/Area_1/{r}/{k}_{p}" for r in rooms for k in ("gt", "pred")
                                  for p in ("VERTEX", "COLOR"))
    for room in rooms:
        data = read_room(two_folds / "Area_1.h5", room, fields=("coord", "label"))
        # one epoch: the validation ran with last.pt's weights and evaluate's seed, so its predictions are
        # the ones in predictions/Area_1.h5
        pred = read_predictions(tiny_run / "predictions" / "Area_1.h5", room)
        for kind, labels in (("gt", data["label"]), ("pred", pred)):
            (vertex,) = events.Tensors(f"clouds/Area_1/{room}/{kind}_VERTEX")
            (color,) = events.Tensors(f"clouds/Area_1/{room}/{kind}_COLOR")
            v = tensor_util.make_ndarray(vertex.tensor_proto)[0]
            c = tensor_util.make_ndarray(color.tensor_proto)[0]
            assert v.shape == c.shape == (len(labels), 3)  # rooms under max_points: every point
            # each vertex is a room point (shifted to minimum 0) and has the colour of that point's class
            shifted = data["coord"] - data["coord"].min(0)
            np.testing.assert_allclose(v, shifted, atol=1e-6)
            np.testing.assert_array_equal(c, np.asarray(PALETTE, np.uint8)[labels])


class FakeWriter:
    def __init__(self):
        self.meshes = []

    def add_mesh(self, tag, vertices, colors, global_step):
        self.meshes.append((tag, vertices.shape, colors.shape, global_step))


def test_clouds_are_capped_and_the_ground_truth_logged_once(two_folds):
    writer = FakeWriter()
    clouds = RoomClouds(writer, two_folds, num_rooms=1, max_points=1000)
    rooms = list_rooms(two_folds / "Area_2.h5")
    preds = {"Area_2": {r: np.zeros(n, np.uint8) for r, n in rooms.items()}}
    clouds.log(preds, step=3)
    clouds.log(preds, step=6)
    first = sorted(rooms)[0]
    assert writer.meshes == [(f"clouds/Area_2/{first}/gt", (1, 1000, 3), (1, 1000, 3), 3),
                             (f"clouds/Area_2/{first}/pred", (1, 1000, 3), (1, 1000, 3), 3),
                             (f"clouds/Area_2/{first}/pred", (1, 1000, 3), (1, 1000, 3), 6)]


def test_a_resume_keeps_the_events_of_the_step_it_resumes_from(two_folds, validated_run, tmp_path):
    """Each resume purged the TensorBoard events of its checkpoint's step, written before the checkpoint:
    the loss of that step and the whole epoch's summary (train/oa, train/miou, val/*). Two runs of one
    epoch each now log the steps of one run of two epochs (``validated_run``: the same settings in one run)."""
    from tests.engine.test_train import train

    def steps(run) -> dict[str, list[int]]:
        events = EventAccumulator(str(run / "area_1" / "tb"))
        events.Reload()
        return {tag: [e.step for e in events.Scalars(tag)]
                for tag in ("train/loss", "train/miou", "train/epoch_loss", "val/miou")}

    for _ in range(2):
        assert train(two_folds, tmp_path / "resumed", "train.epochs=2", "train.val_every=1",
                     "train.epochs_per_run=1") == 0
    assert steps(tmp_path / "resumed") == steps(validated_run) == {
        "train/loss": [1, 2, 3, 4], "train/miou": [2, 4], "train/epoch_loss": [2, 4], "val/miou": [2, 4]}


class ColourWriter:
    def __init__(self):
        self.colors = {}

    def add_mesh(self, tag, vertices, colors, global_step):
        self.colors[tag] = colors[0].numpy()


def test_a_network_of_more_classes_colours_its_own_classes(two_folds):
    """Labels 13 and 14 of a 15-class network were clamped to clutter's colour; they take class_palette(15)'s
    colours, ignored labels (255) stay clutter's, S3DIS's classes keep PALETTE's."""
    from pointgeope.constants import CLUTTER, class_palette

    writer = ColourWriter()
    clouds = RoomClouds(writer, two_folds, num_rooms=1, max_points=1000, num_classes=15)
    room, n = sorted(list_rooms(two_folds / "Area_2.h5").items())[0]
    full = np.arange(n) % 16
    full[full == 15] = 255
    clouds.log({"Area_2": {room: full.astype(np.uint8)}}, step=1)
    colors = writer.colors[f"clouds/Area_2/{room}/pred"]
    pred = full[clouds._room("Area_2", room)[0]]  # the logged subset
    expected = {**{c: class_palette(15)[c] for c in range(15)}, 255: list(PALETTE[CLUTTER])}
    for c, rgb in expected.items():
        assert (colors[pred == c] == rgb).all(), c
    assert class_palette(15)[13] == [217, 76, 76] and (pred == 13).any() and (pred == 255).any()


def test_the_logged_learning_rate_is_the_one_each_step_trained_at(tiny_run):
    """``train/lr`` at step k and the epoch line's ``lr`` were read after the schedule had stepped: the rate of
    step k + 1 (0 at a cosine's last step, which trained at half the peak). Each is now the rate of the step
    it is logged with: cosine's ``lr (1 + cos(pi s / (E S))) / 2`` at ``s = k - 1`` (lr 0.01, E = 1, S = 2)."""
    events = EventAccumulator(str(tiny_run / "tb"))
    events.Reload()
    logged = [(e.step, e.value) for e in events.Scalars("train/lr")]
    expected = [(k, 0.01 * (1 + math.cos(math.pi * (k - 1) / 2)) / 2) for k in (1, 2)]   # 0.01, 0.005
    assert [step for step, _ in logged] == [1, 2]
    assert [value for _, value in logged] == pytest.approx([value for _, value in expected], rel=1e-6)
    line = re.search(r"epoch 1/1 .* lr (\S+) ", (tiny_run / "log.txt").read_text())
    assert float(line.group(1)) == pytest.approx(0.005, rel=1e-3)   # the epoch's last step's rate


def test_the_epoch_loss_is_logged_as_the_mean_of_the_steps(tiny_run):
    """The docs said TensorBoard holds the epoch's train loss beside its OA and mIoU; only the steps' losses
    were there. ``train/epoch_loss`` at the epoch's last step is the mean of its steps' ``train/loss`` (one
    process), the epoch line's ``loss``."""
    events = EventAccumulator(str(tiny_run / "tb"))
    events.Reload()
    steps = [e.value for e in events.Scalars("train/loss")]
    epoch = [(e.step, e.value) for e in events.Scalars("train/epoch_loss")]
    assert len(steps) == 2 and [step for step, _ in epoch] == [2]
    assert epoch[0][1] == pytest.approx(sum(steps) / 2, rel=1e-6)
    line = re.search(r"epoch 1/1  loss (\S+) ", (tiny_run / "log.txt").read_text())
    assert float(line.group(1)) == pytest.approx(epoch[0][1], abs=5e-5)
