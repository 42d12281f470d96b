"""A few test rooms as point clouds in TensorBoard (mesh plugin), beside the scalars of each validation.

At every validation the first ``num_rooms`` test rooms (area, then room name order) of this process are
logged under ``clouds/<area>/<room>/pred``, coloured by ``constants.class_palette(num_classes)[pred]`` (S3DIS's
``PALETTE`` for its 13 classes; labels outside ``0..num_classes - 1``, the ignored 255, in clutter's colour); the
ground truth under
``clouds/<area>/<room>/gt`` once per process. Each cloud is at most ``max_points`` points, the same
seeded random subset at every step (so successive validations can be compared), shifted to a minimum of 0.
``tensorboard --logdir RUN/area_K/tb`` shows them in the MESHES tab.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from pointgeope.constants import CLUTTER, NUM_CLASSES, PALETTE, class_palette
from pointgeope.h5 import area_path, read_room


def label_colors(num_classes: int) -> np.ndarray:
    """Look-up table ``uint8 (256, 3)``: row ``c`` is ``class_palette(num_classes)[c]`` for ``c < num_classes``,
    clutter's colour for every other label (the ignored 255)."""
    lut = np.tile(np.asarray(PALETTE[CLUTTER], np.uint8), (256, 1))
    lut[:num_classes] = np.asarray(class_palette(num_classes), np.uint8)
    return lut


class RoomClouds:
    """Logs test rooms' predictions to a ``SummaryWriter`` (see the module docstring)."""

    def __init__(self, writer, root: str | Path, num_rooms: int = 2, max_points: int = 10_000, seed: int = 0,
                 num_classes: int = NUM_CLASSES):
        self.writer = writer
        self._colors = label_colors(num_classes)
        self.root = Path(root)
        self.num_rooms = num_rooms
        self.max_points = max_points
        self.seed = seed
        self._rooms: dict[tuple[str, str], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # subset, coord, label

    def _room(self, area: str, room: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        key = (area, room)
        if key not in self._rooms:
            data = read_room(area_path(self.root, area), room, fields=("coord", "label"))
            n = data["label"].shape[0]
            subset = (np.arange(n) if n <= self.max_points else
                      np.sort(np.random.default_rng(self.seed).choice(n, self.max_points, replace=False)))
            coord = data["coord"][subset]
            self._rooms[key] = (subset, coord - coord.min(axis=0), data["label"][subset])
        return self._rooms[key]

    def _add(self, tag: str, coord: np.ndarray, labels: np.ndarray, step: int) -> None:
        colors = self._colors[np.asarray(labels).astype(np.uint8)]  # labels are 0..254 or the ignored 255
        self.writer.add_mesh(tag, vertices=torch.from_numpy(coord[None].astype(np.float32)),
                             colors=torch.from_numpy(colors[None]), global_step=step)

    def log(self, predictions: dict[str, dict[str, np.ndarray]], step: int) -> None:
        """``predictions``: ``{area: {room: pred uint8 (N,)}}`` as :func:`~pointgeope.engine.evaluate.validate`
        returns them."""
        rooms = sorted((area, room) for area, preds in predictions.items() for room in preds)
        for area, room in rooms[:self.num_rooms]:
            first = (area, room) not in self._rooms
            subset, coord, label = self._room(area, room)
            if first:
                self._add(f"clouds/{area}/{room}/gt", coord, label, step)
            self._add(f"clouds/{area}/{room}/pred", coord, predictions[area][room][subset], step)
