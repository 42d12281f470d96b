"""Tests of pointgeope/checksum.py: the points checksum of an area file whose members are not what prepare writes."""
from __future__ import annotations

import re

import h5py
import pytest

from data_prep.prepare import PrepareConfig, prepare
from pointgeope.checksum import points_checksum
from pointgeope.data.check import check_area_file
from pointgeope.h5 import SchemaError
from tests.data_prep.raw_trees import five_rooms


@pytest.mark.parametrize("member, derived", [("coord", False), ("extra", False), ("normal", True)])
def test_a_group_in_a_room_is_a_schema_error_and_prepare_replaces_its_file(tmp_path, member, derived):
    """A room holding a group where prepare writes an array (or beside them): the points checksum raised
    h5py's "TypeError: Accessing a group is done with bytes or str", and so did a prepare into the folder,
    which takes the old file's points checksum before replacing it (a damaged file has none). The derived
    ``normal`` is hashed only by the rule of the versions before (``derived=True``)."""
    raw = five_rooms(tmp_path / "raw")
    out = tmp_path / "out"
    prepare(PrepareConfig(raw, out, progress=False))
    path = out / "Area_2.h5"
    with h5py.File(path, "a") as f:
        if member in f["room_b"]:
            del f[f"room_b/{member}"]
        f["room_b"].create_group(member)
    with pytest.raises(SchemaError, match=rf"Area_2.h5: room 'room_b': expected '{member}' to be an array, found "
                                          r"a group; run `pointgeope prepare` again$"):
        points_checksum(path, derived=derived)
    prepare(PrepareConfig(raw, out, progress=False))
    assert set(check_area_file(path)) == {"room_b"}
    with h5py.File(path) as f:
        assert isinstance(f["room_b/normal"], h5py.Dataset) and "extra" not in f["room_b"]


def test_an_array_in_place_of_a_room_is_a_schema_error(tmp_path):
    with h5py.File(tmp_path / "Area_1.h5", "w") as f:
        f.attrs["area"], f.attrs["schema_version"] = "Area_1", 1
        f.create_dataset("room_a", data=[[1.0, 2.0, 3.0]])
    with pytest.raises(SchemaError, match=r"expected 'room_a' to be a room \(a group\), found an array"):
        points_checksum(tmp_path / "Area_1.h5")


def test_a_group_for_the_normal_of_a_room_of_another_estimate_is_estimated_again(tmp_path):
    """A room whose ``normal`` is a group and whose estimate attributes are not this prepare's: the prepare
    that estimates its normals again from its stored coord read the old normal first and ended in h5py's
    "TypeError: Accessing a group is done with bytes or str"; it now leaves the old one unread and writes the
    room whole. A reader that asks for such a member gets one line naming it."""
    from pointgeope.h5 import read_room_record

    raw = five_rooms(tmp_path / "raw")
    out = tmp_path / "out"
    prepare(PrepareConfig(raw, out, progress=False))
    path = out / "Area_2.h5"
    with h5py.File(path, "a") as f:
        del f["room_b/normal"]
        f["room_b"].create_group("normal")
        f["room_b"].attrs["normal_version"] = -1          # another estimate's: prepare estimates it again
    with pytest.raises(SchemaError, match=r"room 'room_b': expected 'normal' to be an array, found a group; run "
                                          r"`pointgeope prepare` again$"):
        read_room_record(path, "room_b")
    prepare(PrepareConfig(raw, out, progress=False))
    assert set(check_area_file(path)) == {"room_b"}
    with h5py.File(path) as f:
        assert isinstance(f["room_b/normal"], h5py.Dataset)


@pytest.mark.parametrize("place", ["room", "member", "second name"])
def test_a_link_in_the_output_is_refused_and_replaced_by_prepare(tmp_path, place):
    """An existing ``Area_N.h5`` of the output folder whose room (or a room's ``label``) is a soft link to a path
    the file lacks: the prepare that replaces it takes its points checksum first and ended in h5py's bare
    "KeyError: Unable to synchronously open object (component not found)", a traceback; the checksum now
    refuses it by name, and prepare writes the file whole, as for any damaged file. A room that is a link to
    another (``second name``) was hashed as a room of its own: the points of ``room_b`` twice."""
    raw = five_rooms(tmp_path / "raw")
    out = tmp_path / "out"
    prepare(PrepareConfig(raw, out, progress=False))
    path = out / "Area_2.h5"
    with h5py.File(path, "a") as f:
        if place == "second name":
            f["room_c"] = h5py.SoftLink("/room_b")
        else:
            del f["room_b" if place == "room" else "room_b/label"]
            f["room_b" if place == "room" else "room_b/label"] = h5py.SoftLink("/gone")
    expected, found = {
        "room": ("expected 'room_b' to be a room (a group)", "a link to '/gone', which the file does not hold"),
        "member": ("room 'room_b': expected 'label' to be an array", "a link to '/gone', which the file does not hold"),
        "second name": ("expected 'room_c' to be a room (a group)", "a link to '/room_b', which prepare never writes: "
                                                                    "its points would be read twice, under two names"),
    }[place]
    with pytest.raises(SchemaError, match=rf"Area_2.h5: {re.escape(expected)}, found {re.escape(found)}; run "
                                          r"`pointgeope prepare` again$"):
        points_checksum(path)
    prepare(PrepareConfig(raw, out, progress=False))
    assert check_area_file(path) == {"room_b": 3}
