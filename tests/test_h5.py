"""pointgeope/h5.py, h5_predictions.py and h5_file.py: the HDF5 layout of prepared areas, work files, fold and
scan predictions, and its checks."""
from __future__ import annotations

import subprocess
import sys

import h5py
import numpy as np
import pytest

from pointgeope import h5, h5_file, h5_predictions
from pointgeope.constants import CLASS_NAMES
from pointgeope.data.rooms import RoomRef, RoomStore


def _arrays(n=2):
    return {"coord": np.arange(3 * n, dtype=np.float64).reshape(n, 3), "color": np.arange(3 * n).reshape(n, 3) % 256,
            "label": np.arange(n) % 13, "instance": np.arange(n)}


def test_area_file_round_trips_in_the_schema_dtypes(tmp_path):
    arrays = {"coord": np.arange(6, dtype=np.float64).reshape(2, 3), "color": np.array([[1, 2, 3], [4, 5, 6]]),
              "label": np.array([0, 12]), "instance": np.array([0, 1])}
    h5.write_area(tmp_path / "Area_4.h5", "Area_4", [("office_1", arrays, {"num_points": 2, "objects": ["a", "b"]})])
    assert h5.list_rooms(tmp_path / "Area_4.h5") == {"office_1": 2}
    room = h5.read_room(tmp_path / "Area_4.h5", "office_1")
    for key, dtype in {"coord": np.float32, "color": np.uint8, "label": np.uint8, "instance": np.int32}.items():
        assert room[key].dtype == dtype
        np.testing.assert_array_equal(room[key], arrays[key])
    with h5.open_area(tmp_path / "Area_4.h5") as f:
        assert f.attrs["area"] == "Area_4" and list(f.attrs["class_names"]) == list(CLASS_NAMES)
        assert list(f["office_1"].attrs["objects"]) == ["a", "b"]
    arrays_back, attrs = h5.read_room_record(tmp_path / "Area_4.h5", "office_1")
    assert attrs == {"num_points": 2, "objects": ["a", "b"]} and list(arrays_back) == list(h5.ROOM_FIELDS)


def test_same_rooms_give_the_same_bytes(tmp_path):
    for name in ("a.h5", "b.h5"):
        h5.write_area(tmp_path / name, "Area_1", [("r1", _arrays(3), {"num_points": 3}), ("r2", _arrays(4), {})])
    assert (tmp_path / "a.h5").read_bytes() == (tmp_path / "b.h5").read_bytes()


def test_work_file_attrs_and_other_versions(tmp_path):
    h5.write_room_file(tmp_path / "r.h5", "office_1", _arrays(), {"signature": "abc", "class_counts": [1, 1]})
    assert h5.read_rooms_attrs(tmp_path / "r.h5") == {"office_1": {"signature": "abc", "class_counts": [1, 1]}}
    with h5py.File(tmp_path / "r.h5", "r+") as f:
        f.attrs["schema_version"] = h5.SCHEMA_VERSION + 1
    assert h5.read_rooms_attrs(tmp_path / "r.h5") is None  # rebuilt by prepare
    assert h5.read_rooms_attrs(tmp_path / "missing.h5") is None
    expected = f"expected schema_version {h5.SCHEMA_VERSION}, got {h5.SCHEMA_VERSION + 1}"
    with pytest.raises(h5.SchemaError, match=expected):
        h5.read_room(tmp_path / "r.h5", "office_1")


def test_check_members_gives_the_arrays_it_opened_and_checked_rooms_every_room(tmp_path):
    """check_members returns the members it opened and checked (those the room holds, in the order asked), for
    its reader to read without opening them again; checked_rooms walks every room so, a member in ``skip`` left
    out and unchecked. Before: check_members returned nothing and each reader opened every member again."""
    path = tmp_path / "Area_1.h5"
    h5.write_area(path, "Area_1", [("r1", _arrays(3), {"num_points": 3}), ("r2", _arrays(5), {})])
    with h5py.File(path, "r+") as f:
        f["r2"].create_group("normal")                     # a member that is no array: refused unless skipped
    with h5.open_area(path) as f:
        members = h5.check_members(f["r1"], ["label", "missing", "coord"])
        assert list(members) == ["label", "coord"] and all(isinstance(m, h5py.Dataset) for m in members.values())
        np.testing.assert_array_equal(members["coord"][()], _arrays(3)["coord"])
        rooms = h5.checked_rooms(f, ["label"])
        assert list(rooms) == ["r1", "r2"] and [m["label"].shape for _, m in rooms.values()] == [(3,), (5,)]
        assert rooms["r1"][0].attrs["num_points"] == 3
        assert {room: sorted(m) for room, (_, m) in h5.checked_rooms(f, skip=["normal"]).items()} == {
            "r1": sorted(h5.ROOM_FIELDS), "r2": sorted(h5.ROOM_FIELDS)}
        with pytest.raises(h5.SchemaError, match="room 'r2': expected 'normal' to be an array, found a group"):
            h5.checked_rooms(f)
    assert h5.list_rooms(path) == {"r1": 3, "r2": 5} and h5.read_rooms_attrs(path) is None


def test_a_long_area_attribute_of_another_area_is_cut_and_marked(tmp_path):
    """An area file whose 'area' attribute was edited into a long string or rows is said in one line of 80
    characters, marked (before: whole, a line of kilobytes, or numpy's repr of rows)."""
    path = tmp_path / "Area_1.h5"
    h5.write_area(path, "Area_3" + "x" * 1000, [("r1", _arrays(3), {})])
    with pytest.raises(h5.SchemaError) as err:
        h5.open_area(path)
    assert str(err.value) == (f"{path}: holds 'Area_3" + "x" * 70 + "... (1,008 characters) (its 'area' attribute), "
                              "expected 'Area_1' by its name: a copied or renamed area file; put Area_1's own file "
                              "back or run `pointgeope prepare` again")


def test_a_missing_room_is_the_same_error_for_every_reader(tmp_path):
    path = tmp_path / "Area_2.h5"
    h5.write_area(path, "Area_2", [("office_1", _arrays(), {})])
    message = f"{path}: no room 'office_9'; rooms are ['office_1']"
    with pytest.raises(KeyError) as one:
        h5.read_room(path, "office_9")
    with pytest.raises(KeyError) as other:
        RoomStore().read(RoomRef(path, "Area_2", "office_9", 2))
    assert one.value.args[0] == other.value.args[0] == message


def test_fold_predictions_file(tmp_path):
    path = h5_predictions.predictions_path(tmp_path / "area_5", "Area_5")
    assert path == tmp_path / "area_5" / "predictions" / "Area_5.h5"
    rooms = {"office_1": np.array([0, 12, 3], dtype=np.uint8), "hallway_2": np.zeros(5, dtype=np.uint8)}
    h5_predictions.write_predictions(path, "Area_5", rooms, {"checkpoint": "last.pt"})
    with h5py.File(path, "r") as f:
        assert f.attrs["kind"] == "predictions" and f.attrs["area"] == "Area_5"
        assert sorted(f) == ["hallway_2", "office_1"]
        assert f["office_1/pred"].dtype == np.uint8 and f["office_1/pred"].shape == (3,)
    np.testing.assert_array_equal(h5_predictions.read_predictions(path, "office_1"), rooms["office_1"])
    assert h5_predictions.predicted_rooms(path) == {"hallway_2", "office_1"}
    assert not h5_predictions.has_predictions(path, "garage")
    assert [p.name for p in path.parent.iterdir()] == ["Area_5.h5"]


def test_scan_predictions_read_as_an_area_file(tmp_path):
    arrays = {"coord": np.zeros((3, 3), np.float32), "color": np.zeros((3, 3), np.uint8),
              "label": np.full(3, 255, np.uint8), "instance": np.zeros(3, np.int32)}
    path = tmp_path / "scan_pred.h5"
    h5_predictions.write_scan_predictions(path, "dir/scan", "scan", arrays, np.array([1, 2, 3]), list(CLASS_NAMES),
                                          "scan.ply", {"num_points": 3})
    assert h5.list_rooms(path) == {"scan": 3} and h5_predictions.has_predictions(path, "scan")
    np.testing.assert_array_equal(h5_predictions.read_predictions(path, "scan"), [1, 2, 3])
    with h5.open_area(path) as f:
        assert f.attrs["kind"] == "scan-predictions" and f.attrs["area"] == "dir/scan"


def test_reading_hdf5_does_not_pull_in_torch():
    code = "import sys, pointgeope.h5; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


class _DiskFullAfter:
    """A file whose disk is full once ``room`` bytes are written: then every write fails with ENOSPC, as a
    real full disk's does (a partial write first, then the error)."""

    def __init__(self, f, room: int):
        self.f, self.room = f, room

    def write(self, data) -> int:
        import errno

        n = min(memoryview(data).nbytes, self.room - self.f.tell())
        if n <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.f.write(memoryview(data).cast("B")[:n])

    def __getattr__(self, name):
        return getattr(self.f, name)


@pytest.mark.parametrize("room", [0, 100, 5000, 30000])
def test_a_full_disk_is_one_error_naming_the_file_and_keeps_the_old_one(tmp_path, monkeypatch, room):
    """HDF5 itself never sees the failure (it crashed the process at exit after one): the first refused
    write is kept, HDF5 closes cleanly, the error names the target and the previous file is intact."""
    from pointgeope.atomic import DiskFullError

    path = tmp_path / "Area_1.h5"
    rng = np.random.default_rng(0)
    preds = {f"room_{k}": rng.integers(0, 13, 20000).astype(np.uint8) for k in range(3)}
    h5_predictions.write_predictions(path, "Area_1", preds, {"epoch": 1})
    before = path.read_bytes()
    keep_first = h5_file._KeepFirstError.__init__
    monkeypatch.setattr(h5_file._KeepFirstError, "__init__", lambda self, f: keep_first(self, _DiskFullAfter(f, room)))
    with pytest.raises(DiskFullError) as err:
        h5_predictions.write_predictions(path, "Area_1", preds, {"epoch": 2})
    assert str(err.value) == (f"{path}: cannot write it: no space left on the device; nothing of it was kept; "
                              "free space (or raise the limit) and run the same command again")
    assert path.read_bytes() == before and sorted(tmp_path.iterdir()) == [path]
    monkeypatch.undo()
    h5_predictions.write_predictions(path, "Area_1", preds, {"epoch": 2})  # once there is room again
    assert h5_predictions.read_predictions(path, "room_1").tolist() == preds["room_1"].tolist()


@pytest.mark.parametrize("version, shown", [("2.1", "'2.1'"), (np.array([1, 1]), "[1, 1]"), (1.0, "1.0"),
                                            (np.bool_(True), "True")])
def test_a_schema_version_that_is_no_integer_is_another_tools_file(tmp_path, version, shown):
    """Other tools' HDF5 files often carry a text version: int("2.1") was a traceback (an array: TypeError)."""
    path = tmp_path / "Area_1.h5"
    h5.write_area(path, "Area_1", [("office_1", _arrays(), {})])
    with h5py.File(path, "r+") as f:
        f.attrs["schema_version"] = version
    with pytest.raises(h5.SchemaError) as err:
        h5.open_area(path)
    assert str(err.value) == (f"{path}: expected schema_version 1 (an integer), got {shown}: not a file of "
                              "`pointgeope prepare`; give a prepared area file (data.root/Area_N.h5)")


def test_viz_of_a_foreign_hdf5_is_one_line(tmp_path):
    """The reproduction: an HDF5 file of another tool, `viz --list`: one line naming it, exit 2."""
    path = tmp_path / "foreign.h5"
    with h5py.File(path, "w") as f:
        f.attrs["schema_version"] = "2.1"
        f["points"] = np.zeros((10, 3))
    done = subprocess.run([sys.executable, "-m", "pointgeope", "viz", str(path), "--list"], capture_output=True,
                          text=True, check=False, timeout=120)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"pointgeope viz: error: {path}: expected schema_version 1 (an integer), got '2.1': not a file of "
        "`pointgeope prepare`; give a prepared area file (data.root/Area_N.h5)"], done.stderr


def test_an_area_file_is_named_by_the_one_area_name_rule(tmp_path):
    """``constants.AREA_NAME`` is the one rule of an area's name (prepare's raw tree, the prepared files, the
    viewer): a file is a prepared area's (its folder a data root) exactly where it is such a name and ``.h5``."""
    from pointgeope.constants import AREA_NAME

    for name, area in (("Area_1.h5", True), ("Area_12.h5", True), ("Area_01.h5", True), ("area_1.h5", False),
                       ("Area_1.h5.bak", False), ("Area_1_aligned.h5", False), ("Area_.h5", False),
                       ("Area_1.H5", False), ("Area_1.hdf5", False)):
        assert (h5.prepared_root(tmp_path / name) == tmp_path) is area, name
    assert [AREA_NAME.fullmatch(s) is not None for s in ("Area_3", "Area_03", "area_3", "Area_3_Aligned", "Area")] == [
        True, True, False, False, False]
