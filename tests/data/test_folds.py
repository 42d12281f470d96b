"""Folds are read from folds.json, with clear errors for malformed files."""
from __future__ import annotations

import json

import pytest

from pointgeope.data.folds import Fold, FoldsError, fold_of, load_folds


def test_folds_of_the_prepared_fixture(prepared):
    root, _ = prepared
    folds = load_folds(root)
    assert list(folds) == [1, 2, 3]
    assert folds[2] == Fold(2, train=("Area_1", "Area_3"), test=("Area_2",))


@pytest.mark.parametrize("doc, message", [
    ({"version": 2, "folds": {}}, "expected version 1, got 2"),
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
])
def test_malformed_folds_name_the_file_and_the_problem(tmp_path, doc, message):
    (tmp_path / "folds.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=message) as err:
        load_folds(tmp_path)
    assert str(tmp_path / "folds.json") in str(err.value)


def test_missing_folds_file(tmp_path):
    with pytest.raises(FoldsError, match="folds.json"):
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

