"""data_prep/writer.py: folds and manifest as data, rooms readable through pointgeope.data.h5."""
from __future__ import annotations

import numpy as np
import pytest

from data_prep.writer import folds, manifest, write_area
from pointgeope.constants import CLASS_NAMES, SCHEMA_VERSION
from pointgeope.data import h5


def test_folds_one_per_area_present():
    assert folds(["Area_5", "Area_1", "Area_3"]) == {"version": 1, "folds": {
        "1": {"test": ["Area_1"], "train": ["Area_3", "Area_5"]},
        "3": {"test": ["Area_3"], "train": ["Area_1", "Area_5"]},
        "5": {"test": ["Area_5"], "train": ["Area_1", "Area_3"]},
    }}


def test_manifest_totals_are_the_sums():
    a = {"num_points": 5, "class_counts": np.array([1, 4] + [0] * 11)}
    b = {"num_points": 3, "class_counts": [0] * 12 + [3]}
    m = manifest("/raw", {"Area_1": {"r1": a, "r2": b}, "Area_2": {"r3": b}})
    assert m["class_names"] == list(CLASS_NAMES) and m["schema_version"] == SCHEMA_VERSION
    assert m["areas"]["Area_1"]["num_points"] == 8 and m["areas"]["Area_1"]["num_rooms"] == 2
    assert m["areas"]["Area_1"]["rooms"]["r1"] == {"num_points": 5, "class_counts": [1, 4] + [0] * 11}
    assert m["totals"] == {"num_areas": 2, "num_rooms": 3, "num_points": 11,
                           "class_counts": [1, 4] + [0] * 10 + [6]}


def test_area_file_is_the_schema_of_pointgeope_data_h5(tmp_path):
    arrays = {"coord": np.arange(6, dtype=np.float64).reshape(2, 3), "color": np.array([[1, 2, 3], [4, 5, 6]]),
              "label": np.array([0, 12]), "instance": np.array([0, 1])}
    write_area(tmp_path / "Area_4.h5", "Area_4", [("office_1", arrays, {"num_points": 2, "objects": ["a", "b"]})])
    assert h5.list_rooms(tmp_path / "Area_4.h5") == {"office_1": 2}
    room = h5.read_room(tmp_path / "Area_4.h5", "office_1")
    for key, dtype in {"coord": np.float32, "color": np.uint8, "label": np.uint8, "instance": np.int32}.items():
        assert room[key].dtype == dtype
        np.testing.assert_array_equal(room[key], arrays[key])
    with h5.open_area(tmp_path / "Area_4.h5") as f:
        assert f.attrs["area"] == "Area_4" and list(f.attrs["class_names"]) == list(CLASS_NAMES)
        assert list(f["office_1"].attrs["objects"]) == ["a", "b"]
