"""pointgeope/data/check.py: every defect of a prepared area file is refused with the file and room named."""
from __future__ import annotations

import json
import re

import h5py
import numpy as np
import pytest

from pointgeope.checksum import file_checksum
from pointgeope.data.check import area_checksums, check_area, check_areas, float32_rounding
from pointgeope.h5 import SchemaError, write_area


def _room(n=5, shift=0.0):
    rng = np.random.default_rng(n)
    return {"coord": rng.random((n, 3)) * 4 + shift, "color": rng.integers(0, 256, (n, 3)),
            "label": np.arange(n) % 13, "instance": np.zeros(n)}


def _area(path, rooms, max_extent=1000.0):
    write_area(path, path.stem,
               [(name, arrays, {"num_points": len(arrays["label"])}) for name, arrays in rooms.items()], max_extent)
    return path


def test_a_good_file_passes_with_its_rooms(tmp_path):
    path = _area(tmp_path / "Area_1.h5", {"office_1": _room(5), "office_2": _room(7)})
    assert check_area(path) == {"office_1": 5, "office_2": 7}
    assert check_area(path, file_checksum(path)) == {"office_1": 5, "office_2": 7}


@pytest.mark.parametrize("edit, message", [
    (lambda r: r["coord"].__setitem__(1, [1.0, 1.0, np.inf]),
     r"room 'bad': 1 point with a non-finite coordinate, the first point 1: \[1\.0, 1\.0, inf\]"),
    (lambda r: r["coord"].__setitem__(slice(2, 4), [np.nan, 2.0, 2.0]),
     r"room 'bad': 2 points with a non-finite coordinate, the first point 2: \[nan, 2\.0, 2\.0\]"),
    (lambda r: r["coord"].__setitem__((0, 0), 5000.0 + r["coord"][:, 0].min()),
     "room 'bad': spans 5000 m, more than the 1000 m it was prepared with"),
    (lambda r: r["label"].__setitem__(0, 13), "room 'bad': label 13 found, expected labels below 13"),
    (lambda r: [r.__setitem__(k, r[k][:0]) for k in list(r)], "room 'bad': holds no point"),
    (lambda r: r.__setitem__("color", r["color"][:3]), "room 'bad': expected one entry per point in each array, got "
                                                       "5 coord, 3 color, 5 label, 5 instance"),
    # the labels short: the shape check took their length for the room's and named coord as wrong
    (lambda r: r.__setitem__("label", r["label"][:3]), "room 'bad': expected one entry per point in each array, got "
                                                       "5 coord, 5 color, 3 label, 5 instance"),
])
def test_a_malformed_room_is_named(tmp_path, edit, message):
    bad = _room(5)
    edit(bad)
    path = _area(tmp_path / "Area_3.h5", {"good": _room(4), "bad": bad})
    with pytest.raises(SchemaError,
                       match=f"^{re.escape(str(tmp_path / 'Area_3.h5'))}: {message}; run `pointgeope prepare` again$"):
        check_area(path)


def test_truncated_damaged_or_missing_files_are_named(tmp_path):
    path = _area(tmp_path / "Area_2.h5", {"office_1": _room(500)})
    good = path.read_bytes()
    path.write_bytes(good[: len(good) // 2])
    with pytest.raises(SchemaError, match=f"^{re.escape(str(path))}: not a readable HDF5 file .*truncated or corrupt"):
        check_area(path)
    path.write_bytes(good)
    checksum = file_checksum(path)
    damaged = bytearray(good)
    damaged[-100] ^= 0xFF
    path.write_bytes(bytes(damaged))
    with pytest.raises(SchemaError, match=f"^{re.escape(str(path))}: does not match its checksum in manifest.json"):
        check_area(path, checksum)
    with pytest.raises(SchemaError, match="expected a prepared area file, found nothing at "
                                          f"{re.escape(str(tmp_path / 'Area_9.h5'))}"):
        check_area(tmp_path / "Area_9.h5")


def test_check_areas_uses_the_manifest_checksums(tmp_path):
    a1 = _area(tmp_path / "Area_1.h5", {"r": _room(5)})
    _area(tmp_path / "Area_2.h5", {"r": _room(6)})
    assert check_areas(tmp_path, ["Area_1", "Area_2"]) == {"Area_1": {"r": 5}, "Area_2": {"r": 6}}  # no manifest
    (tmp_path / "manifest.json").write_text(json.dumps({"checksums": {"Area_1": file_checksum(a1),
                                                                      "Area_2": "sha256:0"}}))
    with pytest.raises(SchemaError, match=re.escape("Area_2.h5: does not match its checksum")):
        check_areas(tmp_path, ["Area_1", "Area_2"])
    with h5py.File(a1, "r") as f:  # the prepared limit is stored with the file
        assert f.attrs["max_extent"] == 1000.0


@pytest.mark.parametrize("text, problem", [
    ('{"checksums": {"Area_1": "sha2', "not valid JSON (Unterminated string starting at: line 1 column 26 "
                                      "(char 25))"),
    ("", "not valid JSON (Expecting value: line 1 column 1 (char 0))"),
    ('{"rooms": {}}', "expected an object 'checksums' (area -> checksum of its file), got none"),
    ('{"checksums": ["sha256:0"]}', "expected an object 'checksums' (area -> checksum of its file), got "
                                    "['sha256:0']"),
    ("[1, 2]", "expected an object 'checksums' (area -> checksum of its file), got none"),
    ('{"checksums": {"Area_1": "sha256:0", "Area_2": 7}}', "expected an object 'checksums' (area -> checksum of "
                                                          "its file), got {'Area_1': 'sha256:0', 'Area_2': 7}"),
    ('{"checksums": ["sha256:' + "0" * 64 + '"]}', "expected an object 'checksums' (area -> checksum of its file), "
                                                  "got ['sha256:" + "0" * 48 + "... (75 characters)"),
])
def test_a_damaged_manifest_is_named_and_not_taken_for_a_missing_one(tmp_path, text, problem):
    """A truncated manifest.json was read as no manifest: no area file was checked against its checksum, so a
    root missing a room trained without a word. Missing, it is still allowed (areas copied in by hand). A long
    value is cut to 60 characters, marked with its length (before: cut there silently, as if whole)."""
    _area(tmp_path / "Area_1.h5", {"r": _room(5)})
    assert check_areas(tmp_path, ["Area_1"]) == {"Area_1": {"r": 5}}
    (tmp_path / "manifest.json").write_text(text)
    message = f"{tmp_path / 'manifest.json'}: {problem}; run `pointgeope prepare` again"
    for check in (check_areas, area_checksums):
        with pytest.raises(SchemaError) as err:
            check(tmp_path, ["Area_1"])
        assert str(err.value) == message



@pytest.mark.parametrize("value, shown", [(np.nan, "nan"), ("x", "'x'"), (-1.0, "-1.0"), (0, "0")])
def test_a_max_extent_that_is_no_positive_number_is_refused(tmp_path, value, shown):
    """NaN turned the extent check of every room off (``extent > nan`` is false); "x" was "truncated or corrupt"."""
    path = _area(tmp_path / "Area_1.h5", {"office_1": _room(5)})
    with h5py.File(path, "r+") as f:
        f.attrs["max_extent"] = value
    with pytest.raises(SchemaError) as err:
        check_area(path)
    assert str(err.value) == (f"{path}: expected a positive max_extent (its attribute: the room size limit of "
                              f"prepare, metres), got {shown}; run `pointgeope prepare` again")


def test_a_defect_of_a_file_that_matches_its_checksum_says_to_delete_it(tmp_path):
    """prepare keeps a file that matches its checksum in manifest.json (its rooms are up to date): "run prepare
    again" alone left the defect in place. Without a checksum to match, prepare rebuilds it: that line stays."""
    bad = _room(5)
    bad["label"][0] = 13
    path = _area(tmp_path / "Area_3.h5", {"bad": bad})
    defect = f"{path}: room 'bad': label 13 found, expected labels below 13"
    with pytest.raises(SchemaError) as err:
        check_area(path, file_checksum(path))
    assert str(err.value) == (f"{defect}; delete {path} and run `pointgeope prepare` again (the file matches its "
                              "checksum in manifest.json, so a rerun alone keeps it)")
    with pytest.raises(SchemaError) as err:
        check_area(path)
    assert str(err.value) == f"{defect}; run `pointgeope prepare` again"


def test_the_extent_allows_the_float32_rounding_of_a_room_measured_within_the_limit_and_no_more():
    """Property of prepare's rule (float64 extent <= limit, then stored as float32): for random rooms measured
    within the limit, the stored float32 extent is within the limit plus :func:`float32_rounding`; the
    allowance is a few float32 steps, not a millimetre at 10 m."""
    rng = np.random.default_rng(0)
    for limit in (3.7, 10.0, 1000.0):
        low = rng.uniform(-5000, 5000, 20000)
        high = low + limit - rng.uniform(0, 1e-5, low.size)
        measured = (high - low) <= limit
        stored = np.stack([low, high], axis=1).astype(np.float32)
        extent = stored.max(axis=1) - stored.min(axis=1)
        over = [float(e) - limit for e, s, m in zip(extent, stored, measured, strict=True)
                if m and e > limit + float32_rounding(s)]
        assert over == []
        assert (extent[measured] > limit).any()  # the case exists: without the allowance these were refused
    assert float32_rounding(np.array([[10.0, 0.0, 0.0]], np.float32)) < 4e-6  # 2 float32 steps at 10 m



def test_an_extent_just_past_the_allowance_reads_larger_than_the_limit(tmp_path):
    """A room of float32 extent 10.00001 m (10.0000095367431640625) in a file prepared with 10 m: past the
    limit and its float32 allowance (2 float32 steps, 1.9e-6 m at 10 m), so refused; the refusal said "spans 10
    m, more than the 10 m" (``:g``'s 6 digits), two numbers that read the same. 7 digits tell them apart."""
    room = _room(5)
    room["coord"][:, 0] = [0.0, 1.0, 2.0, 3.0, 10.00001]
    path = _area(tmp_path / "Area_1.h5", {"r": room}, max_extent=10.0)
    with pytest.raises(SchemaError, match=r"room 'r': spans 10\.00001 m, more than the 10 m it was prepared with"):
        check_area(path)


@pytest.mark.parametrize("member", ["coord", "normal", "extra", None])
def test_a_member_that_is_not_an_array_is_one_line_from_every_reader(tmp_path, member):
    """A group where prepare writes an array (``member``; ``None``: an array where a room should be) gets the
    same line from the area check, the points checksum and a reader of the room. The check said "cannot be
    read (AttributeError: 'Group' object has no attribute 'ndim'); the file is truncated or corrupt" of a
    group for coord, passed a group beside the arrays that the points checksum then refused, and of an array
    for a room said "missing ['coord', 'color', 'label', 'instance']"."""
    from pointgeope.checksum import points_checksum
    from pointgeope.h5 import read_room

    path = _area(tmp_path / "Area_1.h5", {"r": _room(5)})
    with h5py.File(path, "r+") as f:
        if member is None:
            del f["r"]
            f["r"] = np.zeros(3)
        else:
            f["r"].pop(member, None)
            f["r"].create_group(member)
    line = (f"{path}: expected 'r' to be a room (a group), found an array" if member is None else
            f"{path}: room 'r': expected {member!r} to be an array, found a group")
    fields = ("coord", "color", "label", "instance") + (("normal",) if member == "normal" else ())
    readers = {"check": lambda: check_area(path), "read_room": lambda: read_room(path, "r", fields),
               "points_checksum": lambda: points_checksum(path, derived=member == "normal")}
    for name, read in readers.items():
        if name == "read_room" and member == "extra":
            assert set(read()) == set(fields)  # a reader that does not ask for the member reads the room
            continue
        with pytest.raises(SchemaError) as err:
            read()
        assert str(err.value) == f"{line}; run `pointgeope prepare` again", name
    with pytest.raises(SchemaError) as err:
        check_area(path, file_checksum(path))
    assert str(err.value).startswith(f"{line}; delete {path} and run `pointgeope prepare` again")


def test_the_area_check_walks_the_rooms_as_the_points_checksum_does(tmp_path):
    """A file with two defects, room ``a`` without ``instance`` and a group ``extra`` in room ``b``: the area check
    and the points checksum walk the rooms one way (``h5.checked_rooms``: every room's members opened and checked
    first), so they name the same one. The area check walked the rooms itself and named room ``a``'s."""
    from pointgeope.checksum import points_checksum

    path = _area(tmp_path / "Area_1.h5", {"a": _room(5), "b": _room(6)})
    with h5py.File(path, "r+") as f:
        del f["a/instance"]
        f["b"].create_group("extra")
    line = f"{path}: room 'b': expected 'extra' to be an array, found a group; run `pointgeope prepare` again"
    for read in (lambda: check_area(path), lambda: points_checksum(path)):
        with pytest.raises(SchemaError) as err:
            read()
        assert str(err.value) == line


@pytest.mark.parametrize("kind", ["soft", "external"])
@pytest.mark.parametrize("member", ["label", "extra", None])
def test_a_link_that_points_nowhere_is_one_line_from_every_reader(tmp_path, kind, member):
    """A room (``member`` ``None``) or a member of it that is an HDF5 link to nothing: a soft link to a path
    the file lacks, an external link to a missing file. The area check said "cannot be read (KeyError: Unable
    to synchronously open object (component not found)); the file is truncated or corrupt", naming neither
    the room nor the member, and the points checksum, a reader of the room and the list of rooms raised h5py's
    bare KeyError (a traceback)."""
    from pointgeope.checksum import points_checksum
    from pointgeope.h5 import list_rooms, read_room

    path = _area(tmp_path / "Area_1.h5", {"r": _room(5), "s": _room(6)})
    link = h5py.SoftLink("/gone") if kind == "soft" else h5py.ExternalLink("missing.h5", "/gone")
    with h5py.File(path, "r+") as f:
        where = f if member is None else f["r"]
        where.pop(member or "r", None)
        where[member or "r"] = link
    found = "a link to '/gone'" + (", which the file does not hold" if kind == "soft" else
                                   " in file 'missing.h5', which cannot be opened")
    expected = ("expected 'r' to be a room (a group)" if member is None else
                f"room 'r': expected {member!r} to be an array")
    line = f"{path}: {expected}, found {found}; run `pointgeope prepare` again"
    readers = {"check": lambda: check_area(path), "read_room": lambda: read_room(path, "r"),
               "points_checksum": lambda: points_checksum(path), "list_rooms": lambda: list_rooms(path)}
    for name, read in readers.items():
        if name in ("read_room", "list_rooms") and member == "extra":
            assert read() is not None  # a reader that does not ask for the member reads the room
            continue
        with pytest.raises(SchemaError) as err:
            read()
        assert str(err.value) == line, name
    assert read_room(path, "s")["label"].tolist() == (np.arange(6) % 13).tolist()  # the other room reads


_TWICE = "which prepare never writes: its points would be read twice, under two names"


_ROOM_LINKS = {  # kind -> what a reader finds in place of room t
    "hard": f"an object also named '/{{other}}' (an HDF5 hard link), {_TWICE}",
    "soft": f"a link to '/s', {_TWICE}",
    "external": "a link to '/q' in file 'Area_2.h5', which prepare never writes: another file's points would be "
                "read as this one's",
    "loop": "a link to '/t', a loop of links that leads nowhere",
}


@pytest.mark.parametrize("kind", list(_ROOM_LINKS))
def test_a_room_that_is_a_link_is_refused_by_every_reader(tmp_path, kind):
    """A room ``t`` that is another room under a second name (a hard link, ``f["t"] = f["s"]``; a soft link to
    ``/s``), a room of another file (an external link) or a link to itself: the first three passed the area
    check, the points checksum and the list of rooms (``s``'s points read twice, under two names: trained on and
    scored twice), the loop was HDF5's RuntimeError "too many links" (a traceback) from each of them. A hard
    link's two names are one object's: the first one read is refused, naming the other."""
    from pointgeope.checksum import points_checksum
    from pointgeope.h5 import list_rooms, read_room

    _area(tmp_path / "Area_2.h5", {"q": _room(4)})
    path = _area(tmp_path / "Area_1.h5", {"r": _room(5), "s": _room(6)})
    with h5py.File(path, "r+") as f:
        f["t"] = {"hard": f["s"], "soft": h5py.SoftLink("/s"), "loop": h5py.SoftLink("/t"),
                  "external": h5py.ExternalLink("Area_2.h5", "/q")}[kind]
    readers = {"check": lambda: check_area(path), "read_room": lambda: read_room(path, "t"),
               "points_checksum": lambda: points_checksum(path), "list_rooms": lambda: list_rooms(path)}
    for name, read in readers.items():
        room = "s" if kind == "hard" and name != "read_room" else "t"  # in file order, s comes first
        with pytest.raises(SchemaError) as err:
            read()
        found = _ROOM_LINKS[kind].format(other="st".replace(room, ""))
        assert str(err.value) == (f"{path}: expected {room!r} to be a room (a group), found {found}; run "
                                  "`pointgeope prepare` again"), name
    assert read_room(path, "r")["label"].tolist() == (np.arange(5) % 13).tolist()  # the other room reads


@pytest.mark.parametrize("kind", ["hard", "soft", "loop"])
def test_a_member_that_is_a_link_is_refused_naming_the_room(tmp_path, kind):
    """A room's ``label`` that is another room's under a second name (hard or soft link; rooms of one size, so
    that its length is right) or a loop of links: the area check and the points checksum passed the first two
    (the labels of ``r`` read as ``s``'s), the loop was a RuntimeError traceback."""
    from pointgeope.checksum import points_checksum

    path = _area(tmp_path / "Area_1.h5", {"r": _room(5), "s": _room(5)})
    with h5py.File(path, "r+") as f:
        del f["s/label"]
        f["s/label"] = {"hard": f["r/label"], "soft": h5py.SoftLink("/r/label"),
                        "loop": h5py.SoftLink("/s/label")}[kind]
    found = {"hard": f"an object also named '/s/label' (an HDF5 hard link), {_TWICE}",
             "soft": f"a link to '/r/label', {_TWICE}",
             "loop": "a link to '/s/label', a loop of links that leads nowhere"}[kind]
    room = "r" if kind == "hard" else "s"  # r's label, read first, is also named /s/label
    line = f"{path}: room {room!r}: expected 'label' to be an array, found {found}; run `pointgeope prepare` again"
    for name, read in {"check": lambda: check_area(path), "points_checksum": lambda: points_checksum(path)}.items():
        with pytest.raises(SchemaError) as err:
            read()
        assert str(err.value) == line, name
