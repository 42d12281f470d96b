"""Folds are read from folds.json, with clear errors for malformed files."""
from __future__ import annotations

import json
import re

import pytest

from pointgeope.data.folds import Fold, FoldsError, fold_of, load_folds


def test_folds_of_the_prepared_fixture(prepared):
    root, _ = prepared
    folds = load_folds(root)
    assert list(folds) == [1, 2, 3]
    assert folds[2] == Fold(2, train=("Area_1", "Area_3"), test=("Area_2",))


@pytest.mark.parametrize("doc, message", [
    # and what to do: prepare again with this version (the area files' schema_version check says the same)
    ({"version": 2, "folds": {}}, r"expected version 1, got 2: written by another version of pointgeope; re-run "
                                  r"`pointgeope prepare RAW OUT` with this version, into a new folder OUT"),
    ({"version": 1, "folds": {}}, "non-empty object 'folds'"),
    ({"version": 1, "folds": {"a": {"train": [], "test": []}}}, "fold 'a': expected a fold number"),
    ({"version": 1, "folds": {"1": {"train": ["Area_2"]}}}, r"expected keys \['test', 'train'\], got \['train'\]"),
    ({"version": 1, "folds": {"1": {"train": "Area_2", "test": ["Area_1"]}}}, "'train': expected a list"),
    ({"version": 1, "folds": {"1": {"train": ["Area_1"], "test": ["Area_1"]}}}, "in both train and test"),
    # read as ROOT/../Area_1.h5, and evaluate wrote its predictions to RUN/area_1/Area_1.h5 (outside predictions/)
    ({"version": 1, "folds": {"1": {"train": ["Area_2"], "test": ["../Area_1"]}}},
     r"'test': expected area names of files in the data folder \(Area_N\), got '../Area_1'"),
    ({"version": 1, "folds": {"1": {"train": ["/data/Area_2"], "test": ["Area_1"]}}}, "got '/data/Area_2'"),
    ({"version": 1, "folds": {"1": {"train": [".."], "test": ["Area_1"]}}}, "got '..'"),
    ({"version": 1, "folds": {"1": {"train": ["..\\Area_2"], "test": ["Area_1"]}}}, r"got '\.\.\\\\Area_2'"),  # Windows
    # a fold testing nothing trained a whole fold, then crashed and left an all-zero metrics.json marked complete
    ({"version": 1, "folds": {"1": {"train": ["Area_2"], "test": []}}},
     r"fold '1' 'test': expected at least one area, got \[\]; name the areas the fold tests on \(one or more\), "
     "or remove"),
    # "1" and "01" were both fold 1, the later replacing the earlier: --cv never tested one area
    ({"version": 1, "folds": {"1": {"train": ["Area_2"], "test": ["Area_1"]},
                              "01": {"train": ["Area_1"], "test": ["Area_01"]}}},
     "fold '01': the keys '1' and '01' are both fold 1; give each fold its own number"),
    ({"version": 1, "folds": {"\u00b2": {"train": ["Area_2"], "test": ["Area_1"]}}},
     r"fold '\u00b2': expected a fold number \(digits 0-9\) as key"),
    ({"version": 1, "folds": {"1": {"train": ["Area_2", "Area_3", "Area_2"], "test": ["Area_1"]}}},
     "fold '1' 'train': expected each area once, got 'Area_2' more than once"),
])
def test_malformed_folds_name_the_file_and_the_problem(tmp_path, doc, message):
    (tmp_path / "folds.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=message) as err:
        load_folds(tmp_path)
    assert str(tmp_path / "folds.json") in str(err.value)


@pytest.mark.parametrize("doc, got", [
    ({"version": 1, "folds": list(range(1000))}, "expected a non-empty object 'folds', got [0, 1, 2, 3, 4, 5, 6, 7, "
                                                 "8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21... (4,890 "
                                                 "characters)"),
    ({"version": "2." + "0" * 1000}, "expected version 1, got '2." + "0" * 74 + "... (1,004 characters): written by"),
    ({"version": 1, "folds": {"1": {"train": ["Area_2"] * 500, "test": ["Area_1"]}}},
     "fold '1' 'train': expected each area once, got 'Area_2' more than once"),
    ({"version": 1, "folds": {"1": {"train": [1] * 500, "test": ["Area_1"]}}},
     "fold '1' 'train': expected a list of area names, got [" + "1, " * 25 + "1... (1,500 characters)"),
    ({"version": 1, "folds": {"1": {"train": ["../" * 100], "test": ["Area_1"]}}},
     "fold '1' 'train': expected area names of files in the data folder (Area_N), got '" + "../" * 25 + ".... (302 "
     "characters)"),
])
def test_a_long_value_of_a_damaged_folds_file_is_cut_and_marked(tmp_path, doc, got):
    """A folds.json edited into a long list or string was said whole in the refusal (a line of kilobytes): it is
    cut to 80 characters, marked with its length."""
    (tmp_path / "folds.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError) as err:
        load_folds(tmp_path)
    assert got in str(err.value) and len(str(err.value).replace(str(tmp_path), "")) < 400


def test_missing_folds_file(tmp_path):
    with pytest.raises(FoldsError, match=re.escape("folds.json")):
        load_folds(tmp_path)


def test_a_fold_that_is_not_there_names_the_test_areas_of_the_file(prepared):
    """A root prepared from 3 areas: --test-area 5 named "areas Area_1, ..., Area_6", three that are not there."""
    root, _ = prepared
    folds = load_folds(root)
    assert fold_of(folds, 2, root) is folds[2]
    with pytest.raises(FoldsError) as err:
        fold_of(folds, 5, root)
    assert str(err.value) == (f"--test-area 5: {root / 'folds.json'} has folds [1, 2, 3] (test areas Area_1, "
                              "Area_2, Area_3); pick one of them, or run `pointgeope prepare` on raw data that "
                              "holds Area_5")
    with pytest.raises(FoldsError) as err:      # it said: on raw data that holds Area_-1
        fold_of(folds, -1, root)
    assert str(err.value) == (f"--test-area -1: {root / 'folds.json'} has folds [1, 2, 3] (test areas Area_1, "
                              "Area_2, Area_3); pick one of them")



def test_train_refuses_a_fold_testing_nothing_before_any_training(prepared, tmp_path, capsys):
    """One line naming the file and the key, exit 2, and no fold folder made (nothing trained)."""
    from pointgeope.cli import main as cli
    from tests.engine.conftest import DEMO_CONFIG

    root, _ = prepared
    data = tmp_path / "data"
    data.mkdir()
    for area in ("Area_1", "Area_2"):
        (data / f"{area}.h5").symlink_to(root / f"{area}.h5")
    doc = {"version": 1,
           "folds": {"1": {"test": [], "train": ["Area_2"]}, "2": {"test": ["Area_2"], "train": ["Area_1"]}}}
    (data / "folds.json").write_text(json.dumps(doc))
    assert cli(["train", "--config", str(DEMO_CONFIG), "--cv", "--data-root", str(data), "--run-dir",
                str(tmp_path / "run"), "train.device=cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"pointgeope train: error: {data / 'folds.json'}: fold '1' 'test': expected at least one area, "
                   "got []; name the areas the fold tests on (one or more), or remove the fold"], err
    assert not (tmp_path / "run" / "area_1").exists()


def test_folds_come_in_increasing_fold_number_whatever_the_file_order(tmp_path):
    doc = {"version": 1, "folds": {str(k): {"train": [f"Area_{j}" for j in (1, 2, 3) if j != k], "test": [f"Area_{k}"]}
                                   for k in (3, 1, 2)}}
    (tmp_path / "folds.json").write_text(json.dumps(doc))
    folds = load_folds(tmp_path)
    assert list(folds) == [1, 2, 3] and [f.test for f in folds.values()] == [("Area_1",), ("Area_2",), ("Area_3",)]
