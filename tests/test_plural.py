"""Tests of pointgeope/plural.py, the one plural rule, and of the output lines that count with it: each at 1
and at 2, where ``1 threads`` / ``1 rooms`` was printed before."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from data_prep.summary import ignored_text
from pointgeope.constants import NUM_CLASSES
from pointgeope.info import device_summary
from pointgeope.plural import counted, first_of, plural
from pointgeope.report.fold_file import FoldResult
from pointgeope.report.runs import RunSummary
from pointgeope.report.tables import per_fold_markdown
from pointgeope.scans.scan import ScanError
from pointgeope.viz.legend import legend_lines, room_table


def test_counted_is_singular_at_one_only():
    assert counted(1, "room") == "1 room"
    assert counted(2, "room") == "2 rooms"
    assert counted(0, "room") == "0 rooms"
    assert counted(1200, "point") == "1,200 points"
    assert counted(1, "class") == "1 class" and counted(3, "class") == "3 classes"
    assert counted(2, "process") == "2 processes" and counted(2, "batch") == "2 batches"
    assert counted(2, "index", "indices") == "2 indices" and counted(1, "index", "indices") == "1 index"
    assert [plural(w) for w in ("thread", "box", "mesh", "fold")] == ["threads", "boxes", "meshes", "folds"]


def test_info_device_line_counts_threads(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for n, text in ((1, "cpu (1 thread; no CUDA device)"), (2, "cpu (2 threads; no CUDA device)")):
        monkeypatch.setattr(torch, "get_num_threads", lambda n=n: n)
        assert device_summary() == text


def test_viewer_room_table_and_legend_count_in_the_right_number():
    assert room_table({"office_1": 5})[-1] == "1 room, 5 points"
    assert room_table({"office_1": 1, "hallway_2": 1})[-1] == "2 rooms, 2 points"
    one = np.zeros(4, dtype=np.int64)                      # truth and prediction: one class present
    assert "% of the 1 class present, OA " in legend_lines(one, one)[-1]
    two = np.array([0, 0, 1, 1])
    assert "% of the 2 classes present, OA " in legend_lines(two, two)[-1]


def _run(folds: int) -> RunSummary:
    confusion = 10 * np.eye(NUM_CLASSES, dtype=np.int64)
    return RunSummary("r", Path("r"), [FoldResult(f"Area_{k}", 1, confusion, Path("r") / f"area_{k}")
                                       for k in range(1, folds + 1)],
                      [(f"Area_{k}", "no metrics.json") for k in range(folds + 1, 7)])


def test_report_pooled_row_counts_folds():
    assert "| pooled (1 fold) |" in per_fold_markdown(_run(1))
    assert "| pooled (2 folds) |" in per_fold_markdown(_run(2))


def test_prepare_ignored_folders_count_files():
    one = (("Area_1/office_1/Annotations/old", 1),)
    assert ignored_text(one, "Area_1") == "ignored folders in Annotations 1 (1 file)"
    two = (("Area_1/office_1/Annotations/old", 1), ("Area_1/office_2/Annotations/old", 1))
    assert ignored_text(two, "Area_1") == "ignored folders in Annotations 2 (2 files)"


def test_scan_refusal_says_has_or_have():
    from pointgeope.scans.scan import Scan, checked_scan

    for bad, text in ((1, "s.ply: 1 point has NaN or infinite coordinates"),
                      (2, "s.ply: 2 points have NaN or infinite coordinates")):
        coord = np.zeros((5, 3))
        coord[5 - bad:, 0] = np.inf
        with pytest.raises(ScanError) as caught:
            checked_scan(Scan("s", "s.ply", coord))
        assert str(caught.value).startswith(text)


def test_stray_warning_counts_the_scans_points():
    from pointgeope.scans.stray import describe_stray

    # (a scan of 1 point, stray, is refused before: no point left to predict from)
    two = np.array([[1e9, 0.0, 0.0], [0.0, 0.0, 0.0]])
    assert " 1 of 2 points left out " in describe_stray("s", two, np.array([True, False]), 1.0, 100.0)


def test_memory_refusal_counts_the_samples(monkeypatch):
    import pointgeope.memory
    from pointgeope.model.config import ModelConfig

    monkeypatch.setattr(pointgeope.memory, "available_memory", lambda device=None: 0)
    for samples, text in ((1, "a training step of 1 sample of up to"), (2, "a training step of 2 samples of up to")):
        assert text in pointgeope.memory.neighbour_problem(ModelConfig(), 1000, samples)


def test_area_check_counts_the_non_finite_points():
    import h5py

    from pointgeope.data.check import check_room
    from pointgeope.errors import UserError
    from pointgeope.h5 import check_members, write_room

    for bad, text in ((1, "r: 1 point with a non-finite coordinate"), (2, "r: 2 points with a non-finite coordinate")):
        coord = np.zeros((4, 3), np.float32)
        coord[:bad, 1] = np.nan
        arrays = {"coord": coord, "color": np.zeros((4, 3), np.uint8), "label": np.zeros(4, np.uint8),
                  "instance": np.zeros(4, np.int32)}
        with h5py.File(f"mem{bad}.h5", "w", driver="core", backing_store=False) as f:
            write_room(f, "r", arrays, {"num_points": 4})
            with pytest.raises(UserError) as caught:
                check_room("r", check_members(f["r"], list(f["r"])), 1000.0, NUM_CLASSES)
        assert str(caught.value).startswith(text)


def test_report_names_refusal_counts_the_names(tmp_path):
    from pointgeope.report.fold_file import ReportError
    from pointgeope.report.runs import load_runs

    for names, text in ((["a"], "got 1 name: ['a']"), (["a", "b"], "got 2 names: ['a', 'b']")):
        with pytest.raises(ReportError) as caught:
            load_runs([tmp_path / "r1", tmp_path / "r2", tmp_path / "r3"], names)
        assert str(caught.value) == f"expected one name per run (3), {text}"


def test_agreeing_takes_the_word_of_the_count():
    from pointgeope.plural import agreeing

    assert [agreeing(n, "its", "their") for n in (0, 1, 2)] == ["their", "its", "their"]


def test_a_gpu_number_beyond_the_machine_counts_its_devices(monkeypatch):
    from pointgeope.engine.distributed import DeviceError, _device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for count, text in ((1, "1 CUDA device, cuda:0"), (2, "2 CUDA devices, cuda:0 to cuda:1")):
        monkeypatch.setattr(torch.cuda, "device_count", lambda count=count: count)
        with pytest.raises(DeviceError) as caught:
            _device("cuda:3", 0, "train.device")
        assert str(caught.value) == f"train.device='cuda:3': this machine has {text}"


def test_a_predict_entry_of_another_size_counts_its_names_and_colours():
    from pointgeope.engine.prediction_info import _entry_problem

    assert _entry_problem(["a"], [[0, 0, 0]], 13) == "1 class name"
    assert _entry_problem(["a", "b"], [[0, 0, 0]], 2) == "1 colour"
    assert _entry_problem(["a", "b"], [[0, 0, 0]] * 3, 2) == "3 colours"


def test_the_viewer_says_name_or_names_of_the_unknown_classes():
    from pointgeope.viz import VizError
    from pointgeope.viz.select import parse_class_names

    for text, said in (("roof", "unknown class name 'roof';"), ("roof,sky", "unknown class names 'roof', 'sky';")):
        with pytest.raises(VizError) as caught:
            parse_class_names(text)
        assert str(caught.value).startswith(said)


def test_the_report_counts_the_keys_it_leaves_out():
    from pointgeope.report.settings import mixed_text

    mixed = {f"k{i}": {"Area_1": 1, "Area_2": 2} for i in range(3)}
    assert mixed_text(mixed, limit=2).endswith(" and 1 more key")
    assert mixed_text(mixed, limit=1).endswith(" and 2 more keys")


def test_first_of_says_the_head_of_a_list_and_how_many_more():
    """The one wording of a list said in part: the head joined as the line joins it, then ``and N more`` as one
    entry more (of its noun, in the right number), nothing where the list is said whole."""
    letters = [chr(ord("a") + i) for i in range(12)]
    assert first_of(letters, 5) == "a, b, c, d, e, and 7 more"
    assert first_of(letters[:6], 5) == "a, b, c, d, e, and 1 more"
    assert first_of(letters[:5], 5) == first_of(letters[:5], 9) == "a, b, c, d, e"
    assert first_of([], 5) == ""
    assert first_of((n for n in range(4)), 2, "; ") == "0; 1; and 2 more"
    assert first_of(["x", "y", "z"], 2, " ") == "x y and 1 more"
    assert first_of(["x", "y", "z"], 2, noun="key") == "x, y, and 1 more key"
    assert first_of(["x", "y", "z"], 1, noun="class") == "x, and 2 more classes"
    assert first_of(range(2002), 1) == "0, and 2,001 more"


def test_first_of_makes_text_of_the_shown_items_only():
    """A list of 100,000 rooms on an error path: ``str`` of the three shown, not of every item."""
    made = []

    class Room:
        def __init__(self, k: int):
            self.k = k

        def __str__(self) -> str:
            made.append(self.k)
            return f"room_{self.k}"

    rooms = [Room(k) for k in range(100_000)]
    assert first_of(rooms, 3) == "room_0, room_1, room_2, and 99,997 more"
    assert made == [0, 1, 2]
    made.clear()
    assert first_of((Room(k) for k in range(4)), 2, noun="room") == "room_0, room_1, and 2 more rooms"
    assert made == [0, 1]


def test_the_lines_that_say_a_list_in_part_say_how_many_more(monkeypatch):
    """The labels out of range of a confusion matrix (10 shown) and the colourless rooms of a training run (5
    shown) ended with ``...``, the count of the rest left out; each says it."""
    from pointgeope import metrics
    from pointgeope.data import color_record

    with pytest.raises(ValueError) as caught:
        metrics.confusion_matrix(np.arange(20, 33), np.zeros(13, np.int64), 13)
    assert "20, 21, 22, 23, 24, 25, 26, 27, 28, 29, and 3 more" in str(caught.value)
    rooms = [f"room_{i}" for i in range(7)]
    monkeypatch.setattr(color_record, "colorless_rooms", lambda root, areas: rooms)
    assert "none (every point 0 0 0, as prepare recorded): room_0, room_1, room_2, room_3, room_4, and 2 more; " in (
        color_record.colorless_warning("root", ["Area_1"]))
