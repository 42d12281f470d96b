"""pointgeope/engine/data_classes.py: the network's classes that no point of a fold's area files holds are
named in one warning line at training start (a wider head trained silently, and under ``eval.class_mean:
all`` every mIoU was scaled by the classes present over ``model.num_classes``)."""
from __future__ import annotations

import json

import numpy as np

from pointgeope.constants import CLASS_NAMES
from pointgeope.engine.data_classes import absent_classes_warning, label_counts
from pointgeope.metrics import scores
from tests.engine.conftest import train_fold

AREAS = ["Area_2", "Area_1"]


def _counts(present) -> np.ndarray:
    counts = np.zeros(256, dtype=np.int64)
    counts[list(present)] = 7
    return counts


def test_label_counts_are_the_manifests_class_counts(tiny_root):
    """Every room's labels of the area files, summed: prepare's own record of them (manifest.json) agrees."""
    manifest = json.loads((tiny_root / "manifest.json").read_text())
    areas = ["Area_1", "Area_3", "Area_6"]
    want = np.sum([manifest["areas"][a]["class_counts"] for a in areas], axis=0)
    got = label_counts(tiny_root, areas)
    np.testing.assert_array_equal(got[:13], want)
    assert got[13:].sum() == 0


def test_a_head_wider_than_the_data_is_named_with_the_value_that_fits():
    line = absent_classes_warning(20, _counts(range(13)), AREAS, "all")
    assert line == ("warning: model.num_classes=20, but the fold's area files (Area_2, Area_1) hold no point of 7 of "
                    "its classes: class_13, class_14, class_15, class_16, class_17, class_18 and 1 more; the network "
                    "cannot learn them, and under eval.class_mean=all each counts an IoU and an accuracy of 0: every "
                    "mIoU and mAcc is at most 13/20 of the mean over the 13 classes it holds; set "
                    "model.num_classes=13 (the data's labels are 0..12)")
    assert absent_classes_warning(15, _counts(range(13)), AREAS, "present") == (
        "warning: model.num_classes=15, but the fold's area files (Area_2, Area_1) hold no point of 2 of its "
        "classes: class_13, class_14; the network cannot learn them; set model.num_classes=13 (the data's labels "
        "are 0..12)")


def test_the_share_the_warning_states_is_the_all_rule_of_the_metrics():
    """A perfect prediction of the 13 classes, scored as a 20-class matrix under ``all``: 13/20 of its
    13-class mIoU (1.0), as the line says."""
    m = np.zeros((20, 20), dtype=np.int64)
    m[np.arange(13), np.arange(13)] = 100
    assert abs(scores(m, "all")["miou"] - 13 / 20) < 1e-9 and scores(m[:13, :13], "all")["miou"] > 1 - 1e-9


def test_the_present_rule_the_warning_states_counts_an_absent_class_once_predicted():
    """Under ``present`` a class without ground truth is out of mAcc, and out of mIoU only while nothing is
    predicted as it: one point of class 0 predicted as the absent class 3 counts its IoU 0 among 13."""
    m = np.zeros((13, 13), dtype=np.int64)
    m[np.arange(13), np.arange(13)] = 100
    m[3, 3] = 0
    assert abs(scores(m, "present")["miou"] - 1.0) < 1e-12 and abs(scores(m, "present")["macc"] - 1.0) < 1e-12
    m[0, 0], m[0, 3] = 99, 1
    assert abs(scores(m, "present")["miou"] - (11 + 99 / 100) / 13) < 1e-12
    assert abs(scores(m, "present")["macc"] - (11 + 99 / 100) / 12) < 1e-12


def test_a_class_absent_inside_the_range_is_named_and_every_class_present_is_quiet():
    present = [c for c in range(13) if c != 3]
    line = absent_classes_warning(13, _counts(present), AREAS, "all")
    assert line.endswith(f"hold no point of 1 of its classes: {CLASS_NAMES[3]} (3); the network cannot learn them, "
                         "and under eval.class_mean=all each counts an IoU and an accuracy of 0: every mIoU and mAcc "
                         "is at most 12/13 of the mean over the 12 classes it holds; eval.class_mean=present leaves "
                         "them out of mAcc, and out of mIoU while no point is predicted as one of them")
    assert absent_classes_warning(13, _counts(range(13)), AREAS, "all") is None
    assert absent_classes_warning(13, _counts(present), AREAS, "all", ignore_index=3) is None   # never learnt


def test_training_a_wider_head_says_it_in_its_log_and_a_fitting_one_does_not(two_folds, tiny_run, tmp_path):
    assert train_fold(two_folds, tmp_path / "run", "model.num_classes=15", "eval.class_mean=all",
                      "train.epochs=1") == 0
    log = (tmp_path / "run" / "area_1" / "log.txt").read_text()
    said = [line for line in log.splitlines() if "warning: model.num_classes" in line]
    assert len(said) == 1 and said[0].endswith(
        "warning: model.num_classes=15, but the fold's area files (Area_2, Area_3, Area_1) hold no point of 2 of "
        "its classes: class_13, class_14; the network cannot learn them, and under eval.class_mean=all each counts "
        "an IoU and an accuracy of 0: every mIoU and mAcc is at most 13/15 of the mean over the 13 classes it "
        "holds; set model.num_classes=13 (the data's labels are 0..12)")
    assert "hold no point" not in (tiny_run / "log.txt").read_text()
