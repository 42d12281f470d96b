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


def _label_reads(monkeypatch) -> list[str]:
    """The names of the ``label`` datasets read (``h5py.Dataset.__getitem__``) from here on."""
    import h5py

    reads, original = [], h5py.Dataset.__getitem__

    def spy(self, *args, **kwargs):
        if self.name.endswith("/label"):
            reads.append(self.name)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(h5py.Dataset, "__getitem__", spy)
    return reads


def test_checked_areas_take_prepares_counts_without_reading_a_label(tiny_root, tmp_path, monkeypatch):
    """The class warning at training start read every label of every area of the fold a second time (the check
    had just read them). Areas checked against manifest.json's checksums now take the counts prepare recorded
    there (0 label reads); the counts equal the labels' own (read here with read_room). Without a manifest, or
    with a manifest whose counts disagree with the checked points, the labels are read, one read a room."""
    import os

    from pointgeope.data.check import check_areas
    from pointgeope.h5 import area_path, list_rooms, read_room

    areas = ["Area_1", "Area_3", "Area_6"]
    want = np.zeros(256, dtype=np.int64)
    for area in areas:
        for room in list_rooms(area_path(tiny_root, area)):
            want += np.bincount(read_room(area_path(tiny_root, area), room, fields=("label",))["label"], minlength=256)
    rooms = sum(len(list_rooms(area_path(tiny_root, a))) for a in areas)
    checked = check_areas(tiny_root, areas)
    reads = _label_reads(monkeypatch)
    np.testing.assert_array_equal(label_counts(tiny_root, areas, checked), want)
    assert reads == []
    np.testing.assert_array_equal(label_counts(tiny_root, areas), want)       # no check given: read
    assert len(reads) == rooms
    bare = tmp_path / "bare"                                                  # the files, no manifest
    bare.mkdir()
    for area in areas:
        os.symlink(area_path(tiny_root, area), area_path(bare, area))
    checked = check_areas(bare, areas)
    reads.clear()
    np.testing.assert_array_equal(label_counts(bare, areas, checked), want)
    assert len(reads) == rooms
    manifest = json.loads((tiny_root / "manifest.json").read_text())       # one room's counts off by one
    first = next(iter(manifest["areas"]["Area_3"]["rooms"].values()))
    first["class_counts"][0] += 1
    (bare / "manifest.json").write_text(json.dumps(manifest))
    checked = check_areas(bare, areas)
    reads.clear()
    np.testing.assert_array_equal(label_counts(bare, areas, checked), want)
    assert len(reads) == len(list_rooms(area_path(tiny_root, "Area_3")))    # that area read, the others not


def test_a_head_wider_than_the_data_is_named_with_the_value_that_fits():
    line = absent_classes_warning(20, _counts(range(13)), AREAS, "all")
    assert line == ("warning: model.num_classes=20, but the fold's area files (Area_2, Area_1) hold no point of 7 of "
                    "its classes: class_13, class_14, class_15, class_16, class_17, class_18, and 1 more; the network "
                    "cannot learn them, and under eval.class_mean=all each counts an IoU and an accuracy of 0: every "
                    "mIoU and mAcc is at most 13/20 of the mean over the 13 classes it holds; set "
                    "model.num_classes=13 (the data's labels are 0..12)")
    assert absent_classes_warning(15, _counts(range(13)), AREAS, "present") == (
        "warning: model.num_classes=15, but the fold's area files (Area_2, Area_1) hold no point of 2 of its "
        "classes: class_13, class_14; the network cannot learn them; set model.num_classes=13 (the data's labels "
        "are 0..12)")


def test_the_classes_held_are_counted_in_the_right_number():
    for held, text in ((1, "over the 1 class it holds"), (2, "over the 2 classes it holds")):
        assert f"mIoU and mAcc is at most {held}/3 of the mean {text}; set model.num_classes={held} " in (
            absent_classes_warning(3, _counts(range(held)), AREAS, "all"))


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
