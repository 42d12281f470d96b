"""data_prep/writer.py: folds and manifest as data."""
from __future__ import annotations

import numpy as np

from data_prep.writer import folds, manifest
from pointgeope.constants import CLASS_NAMES
from pointgeope.h5 import SCHEMA_VERSION


def test_folds_one_per_area_present():
    assert folds(["Area_5", "Area_1", "Area_3"]) == {"version": 1, "folds": {
        "1": {"test": ["Area_1"], "train": ["Area_3", "Area_5"]},
        "3": {"test": ["Area_3"], "train": ["Area_1", "Area_5"]},
        "5": {"test": ["Area_5"], "train": ["Area_1", "Area_3"]},
    }}


def test_folds_key_is_the_area_number():
    """Fold k tests on area number k: a lone ``Area_01`` (its zero kept in the name) is fold "1", the key
    ``--test-area 1`` names, and ``Area_10`` sorts after ``Area_9`` (by number, not text)."""
    doc = folds(["Area_10", "Area_01", "Area_9"])
    assert list(doc["folds"]) == ["1", "9", "10"]
    assert doc["folds"]["1"] == {"test": ["Area_01"], "train": ["Area_9", "Area_10"]}


def test_manifest_totals_are_the_sums():
    a = {"num_points": 5, "class_counts": np.array([1, 4] + [0] * 11)}
    b = {"num_points": 3, "class_counts": [0] * 12 + [3]}
    m = manifest("/raw", {"Area_1": {"r1": a, "r2": b}, "Area_2": {"r3": b}})
    assert m["class_names"] == list(CLASS_NAMES) and m["schema_version"] == SCHEMA_VERSION
    assert m["areas"]["Area_1"]["num_points"] == 8 and m["areas"]["Area_1"]["num_rooms"] == 2
    assert m["areas"]["Area_1"]["rooms"]["r1"] == {"num_points": 5, "class_counts": [1, 4] + [0] * 11}
    assert m["totals"] == {"num_areas": 2, "num_rooms": 3, "num_points": 11,
                           "class_counts": [1, 4] + [0] * 10 + [6]}
