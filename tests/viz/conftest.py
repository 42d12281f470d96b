"""Fixtures of the viz tests: prepared HDF5 files of a real S3DIS room and of small synthetic rooms."""
from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from pointgeope.constants import CLASS_INDEX, CLASS_NAMES, CLUTTER
from pointgeope.h5 import SCHEMA_VERSION

REPO = Path(__file__).resolve().parents[2]


def write_area(path: Path, area: str, rooms: dict[str, dict[str, np.ndarray]]) -> Path:
    """A prepared area file in the layout of ``pointgeope/h5.py`` (as data_prep writes it)."""
    with h5py.File(path, "w") as f:
        f.attrs["schema_version"] = SCHEMA_VERSION
        f.attrs["area"] = area
        f.attrs["class_names"] = list(CLASS_NAMES)
        for name, room in rooms.items():
            g = f.create_group(name)
            n = room["label"].shape[0]
            g.create_dataset("coord", data=np.asarray(room["coord"], dtype=np.float32))
            g.create_dataset("color", data=np.asarray(room.get("color", np.zeros((n, 3))), dtype=np.uint8))
            g.create_dataset("label", data=np.asarray(room["label"], dtype=np.uint8))
            g.create_dataset("instance", data=np.asarray(room.get("instance", np.zeros(n)), dtype=np.int32))
            g.attrs["num_points"] = n
    return path


def write_predictions(path: Path, preds: dict[str, np.ndarray]) -> Path:
    with h5py.File(path, "w") as f:
        f.attrs["kind"] = "predictions"
        for name, pred in preds.items():
            f.create_group(name).create_dataset("pred", data=np.asarray(pred, dtype=np.uint8))
    return path


def read_raw_room(room_dir: Path) -> dict[str, np.ndarray]:
    """A raw S3DIS room from its ``Annotations/<class>_<k>.txt`` files (``x y z r g b``; unknown class
    names such as ``stairs`` count as clutter, as in the standard preparation)."""
    parts = []
    for k, ann in enumerate(sorted((room_dir / "Annotations").glob("*.txt"))):
        data = np.loadtxt(ann, dtype=np.float64, ndmin=2)
        label = CLASS_INDEX.get(ann.stem.rsplit("_", 1)[0], CLUTTER)
        parts.append((data, label, k))
    coord = np.concatenate([d[:, :3] for d, _, _ in parts])
    color = np.concatenate([d[:, 3:6] for d, _, _ in parts])
    label = np.concatenate([np.full(len(d), c) for d, c, _ in parts])
    instance = np.concatenate([np.full(len(d), k) for d, _, k in parts])
    return {"coord": coord, "color": color, "label": label, "instance": instance}


@pytest.fixture(scope="session")
def real_area(s3dis_real, tmp_path_factory) -> Path:
    """``Area_2.h5`` holding the real room ``office_resampled`` (44,032 points)."""
    out = tmp_path_factory.mktemp("prepared_real")
    if (REPO / "data_prep" / "prepare.py").exists():
        from pointgeope.cli import main

        assert main(["prepare", str(s3dis_real), str(out), "--jobs", "1"]) == 0
        return out / "Area_2.h5"
    room = read_raw_room(s3dis_real / "Area_2" / "office_resampled")
    return write_area(out / "Area_2.h5", "Area_2", {"office_resampled": room})


# --- a synthetic room with a known layout -----------------------------------------------------------------
#
# Seen from the top (x to the right, y up), a 4 m x 2 m floor-level plane at z = 0 sampled on a 1 cm grid,
# with a ceiling plane of the same size at z = 2.5 m above it:
#
#     y=2 +-----------+-----------+
#         |           |   chair   |      ground truth, by area of the plane:
#         |   floor   +-----------+      floor 1/2, table 1/4, chair 1/4
#         |           |   table   |      predictions: all right, except the table quarter -> chair
#     y=0 +-----------+-----------+      (error mode: 1/4 red, 3/4 grey)
#        x=0         x=2         x=4

SYN_STEP = 0.01


def synthetic_room() -> tuple[dict[str, np.ndarray], np.ndarray]:
    xs = np.arange(0.0, 4.0, SYN_STEP) + SYN_STEP / 2
    ys = np.arange(0.0, 2.0, SYN_STEP) + SYN_STEP / 2
    gx, gy = np.meshgrid(xs, ys, indexing="ij")
    plane = np.stack([gx.ravel(), gy.ravel(), np.zeros(gx.size)], axis=1)
    label = np.full(len(plane), CLASS_INDEX["floor"])
    label[(plane[:, 0] > 2) & (plane[:, 1] < 1)] = CLASS_INDEX["table"]
    label[(plane[:, 0] > 2) & (plane[:, 1] > 1)] = CLASS_INDEX["chair"]
    ceiling = plane + np.array([0.0, 0.0, 2.5])
    coord = np.concatenate([plane, ceiling])
    label = np.concatenate([label, np.full(len(ceiling), CLASS_INDEX["ceiling"])])
    pred = label.copy()
    pred[label == CLASS_INDEX["table"]] = CLASS_INDEX["chair"]
    color = np.zeros((len(coord), 3), dtype=np.uint8)
    color[:, 0] = np.clip(coord[:, 0] / 4 * 255, 0, 255)  # a red gradient along x as the "scanned" colour
    return {"coord": coord, "color": color, "label": label}, pred


@pytest.fixture(scope="session")
def synthetic_area(tmp_path_factory) -> tuple[Path, Path]:
    """(``Area_9.h5``, predictions) with the room ``grid_1`` above and a tiny room ``tiny_2``."""
    out = tmp_path_factory.mktemp("prepared_synthetic")
    room, pred = synthetic_room()
    tiny = {"coord": np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 1.0]]), "label": np.array([0, 0, 1, 1])}
    area = write_area(out / "Area_9.h5", "Area_9", {"grid_1": room, "tiny_2": tiny})
    preds = write_predictions(out / "Area_9_pred.h5", {"grid_1": pred, "tiny_2": np.array([0, 1, 1, 1])})
    return area, preds


def unlabelled_scan(path, n=200):
    """A file of ``pointgeope predict --format h5``: an unlabelled scan (every label 255) and its predictions."""
    from pointgeope import h5_predictions

    rng = np.random.default_rng(0)
    arrays = {"coord": rng.random((n, 3)).astype(np.float32) * 4, "color": rng.integers(0, 255, (n, 3), np.uint8),
              "label": np.full(n, 255, np.uint8), "instance": np.zeros(n, np.int32)}
    pred = rng.integers(0, len(CLASS_NAMES), n).astype(np.uint8)
    h5_predictions.write_scan_predictions(path, "scans/scan", "scan", arrays, pred, list(CLASS_NAMES),
                                          "scan.npy", {"num_points": n})
    return pred
