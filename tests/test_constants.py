"""The S3DIS class-to-label order of pointgeope/constants.py, pinned against the published sources.

``S3DIS_LABEL_IDS`` is written out here, not taken from ``CLASS_INDEX``, so that the tests that build
expected labels from it (here, ``tests/data_prep/raw_trees.reference_room``, ``test_prepare``) can catch a
change of the order. Its sources:

- PointNet's ``sem_seg/meta/class_names.txt`` (charlesq34/pointnet, commit 2618f72): ceiling, floor, wall,
  beam, column, window, door, table, chair, sofa, bookcase, board, clutter. Its ``collect_indoor3d_data.py``
  labels each annotation file by its line number there and writes ``Area_N_room.npy`` (x y z r g b label),
  the room files that Point Transformer's ``util/s3dis.py`` reads (label = column 6).
- Pointcept's ``configs/s3dis/semseg-pt-v3m1-0-base.py``: ``data.names`` lists the same 13 in the same order.

Point Transformer's repository also has ``data/s3dis/s3dis_names.txt`` (POSTECH-CVLab/point-transformer,
commit 7009caf), which lists 7..10 as chair, table, bookcase, sofa. ``tool/test.py`` reads it only to name
the per-class lines of its log; it labels no data.
"""
from __future__ import annotations

import shutil

import numpy as np

from pointgeope import h5
from pointgeope.cli import main as cli
from pointgeope.constants import CLASS_INDEX, CLASS_NAMES, CLUTTER, NUM_CLASSES

S3DIS_LABEL_IDS = {"ceiling": 0, "floor": 1, "wall": 2, "beam": 3, "column": 4, "window": 5, "door": 6,
                   "table": 7, "chair": 8, "sofa": 9, "bookcase": 10, "board": 11, "clutter": 12}


def test_class_order_is_the_published_s3dis_order():
    assert CLASS_NAMES == ("ceiling", "floor", "wall", "beam", "column", "window", "door",
                           "table", "chair", "sofa", "bookcase", "board", "clutter")
    assert CLASS_INDEX == S3DIS_LABEL_IDS
    assert NUM_CLASSES == 13 and CLUTTER == 12


def test_prepared_labels_are_the_literal_ids_of_the_annotation_files(s3dis_real, tmp_path):
    """Prepare the real ``Area_1/office_2`` (12 classes, 100 points): each point's label is the literal id
    of the class named by its annotation file (``chair_1.txt`` -> 8), found by its coordinates and colour."""
    shutil.copytree(s3dis_real / "Area_1" / "office_2", tmp_path / "raw" / "Area_1" / "office_2")
    assert cli(["prepare", str(tmp_path / "raw"), str(tmp_path / "out"), "--jobs", "1"]) == 0
    room = h5.read_room(tmp_path / "out" / "Area_1.h5", "office_2")
    labels_at: dict[tuple, set[int]] = {}
    for p, c, label in zip(room["coord"].tolist(), room["color"].tolist(), room["label"].tolist(), strict=True):
        labels_at.setdefault((*p, *c), set()).add(label)
    expected = []
    for path in sorted((s3dis_real / "Area_1" / "office_2" / "Annotations").glob("*.txt")):
        ident = S3DIS_LABEL_IDS[path.stem.rsplit("_", 1)[0]]
        rows = np.loadtxt(path, ndmin=2)
        for p, c in zip(rows[:, :3].astype(np.float32).tolist(), rows[:, 3:].astype(np.uint8).tolist(), strict=True):
            assert ident in labels_at[(*p, *c)], path.name
        expected += [ident] * len(rows)
    assert len(expected) == len(room["label"]) == 100
    np.testing.assert_array_equal(np.bincount(room["label"], minlength=13), np.bincount(expected, minlength=13))
    assert len(set(expected)) == 12


def test_a_fold_folder_is_named_area_k_and_recognised_by_its_pattern():
    """``train`` writes ``RUN/area_K``; ``evaluate``, ``predict``, the report and the viewer find folds by
    ``FOLD_NAME``: the name one writes is the name the others read, for folds past the six as well."""
    from pointgeope.constants import FOLD_NAME, fold_folder_name

    assert fold_folder_name(5) == "area_5"
    for k in (1, 6, 7, 12):
        assert FOLD_NAME.fullmatch(fold_folder_name(k)).group(1) == str(k)
