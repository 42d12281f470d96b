"""A small prepared dataset written with h5py directly (the layout of ``pointgeope/h5.py``).

Three areas with two rooms each. Each room is a box of points on its walls, floor and ceiling plus a
few "objects"; the colour of point ``i`` encodes ``i`` (``r + 256 g + 65536 b``) so a test can tell
which original point a sample's row came from; the label of point ``i`` is ``(i * 7) % 13``.
"""
from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from pointgeope.constants import CLASS_NAMES
from pointgeope.h5 import SCHEMA_VERSION

AREAS = ("Area_1", "Area_2", "Area_3")
ROOM_POINTS = {"Area_1": (3000, 2500), "Area_2": (4000, 1800), "Area_3": (2200, 2600)}


def make_room(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``n`` points in a 3 x 2.5 x 2 m room, offset from the origin."""
    size = np.array([3.0, 2.5, 2.0])
    coord = rng.random((n, 3)) * size
    # Two thirds of the points on the six faces of the box (dense surfaces, several points per voxel).
    on_face = rng.random(n) < 2 / 3
    axis = rng.integers(0, 3, n)
    side = rng.integers(0, 2, n)
    rows = np.flatnonzero(on_face)
    coord[rows, axis[rows]] = side[rows] * size[axis[rows]]
    coord += np.array([10.0, -4.0, 0.5])
    index = np.arange(n)
    color = np.stack([index % 256, (index // 256) % 256, index // 65536], axis=1).astype(np.uint8)
    return {
        "coord": coord.astype(np.float32),
        "color": color,
        "label": ((index * 7) % 13).astype(np.uint8),
        "instance": (index // 100).astype(np.int32),
    }


def decode_index(x_rgb: np.ndarray) -> np.ndarray:
    """Room point index from the feature colours (``x[:, :3]`` = rgb / 255)."""
    rgb = np.rint(np.asarray(x_rgb, dtype=np.float64) * 255).astype(np.int64)
    return rgb[:, 0] + 256 * rgb[:, 1] + 65536 * rgb[:, 2]


def write_prepared(root: Path, seed: int = 0) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    rng = np.random.default_rng(seed)
    rooms: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    for area in AREAS:
        rooms[area] = {}
        with h5py.File(root / f"{area}.h5", "w") as f:
            f.attrs["schema_version"] = SCHEMA_VERSION
            f.attrs["area"] = area
            f.attrs["class_names"] = list(CLASS_NAMES)
            for k, n in enumerate(ROOM_POINTS[area]):
                name = f"room_{k + 1}"
                room = make_room(n, rng)
                group = f.create_group(name)
                for key, value in room.items():
                    group.create_dataset(key, data=value)
                group.attrs["num_points"] = n
                rooms[area][name] = room
    folds = {str(k + 1): {"test": [a], "train": [b for b in AREAS if b != a]} for k, a in enumerate(AREAS)}
    (root / "folds.json").write_text(json.dumps({"version": 1, "folds": folds}))
    return rooms


@pytest.fixture(scope="session")
def prepared(tmp_path_factory) -> tuple[Path, dict]:
    """(root folder, {area: {room: arrays}}) of the small prepared dataset."""
    root = tmp_path_factory.mktemp("prepared")
    return root, write_prepared(root)
