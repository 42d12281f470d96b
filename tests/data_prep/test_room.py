"""data_prep/room.py: labels, instance ids, colour rounding and the defect counts of one room."""
from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from data_prep.room import load_room
from data_prep.source import open_source
from tests.data_prep.raw_trees import write_tree


def test_one_room(tmp_path):
    write_tree(tmp_path, {
        "Area_1/r/Annotations/wall_1.txt": b"0 0 0 0.4 0.5 255.5\n1 1 1 1.5 2.5 -0.6\n",  # rint: half to even
        "Area_1/r/Annotations/Stairs_2.txt": b"2 2 2 9 9 9\n",
        "Area_1/r/Annotations/beam_1.txt": b"   \n\n",  # blank: empty
        "Area_1/r/Annotations/board_1.txt": b"3 3 3 1 1 1\n4 4 4 1 1\n",
    })
    source = open_source(tmp_path)
    (room,) = source.rooms()
    data = load_room(source, room)
    np.testing.assert_array_equal(data.arrays["color"], [[1, 1, 1], [9, 9, 9], [0, 0, 255], [2, 2, 0]])
    np.testing.assert_array_equal(data.arrays["coord"], [[3, 3, 3], [2, 2, 2], [0, 0, 0], [1, 1, 1]])
    np.testing.assert_array_equal(data.arrays["label"], [11, 12, 2, 2])   # board, clutter, wall (test_constants)
    np.testing.assert_array_equal(data.arrays["instance"], [1, 2, 3, 3])  # beam_1 (empty) keeps id 0
    assert data.attrs["objects"] == ["beam_1", "board_1", "Stairs_2", "wall_1"]
    assert data.attrs["empty_files"] == ["Area_1/r/Annotations/beam_1.txt"]
    assert json.loads(data.attrs["remapped_to_clutter"]) == {"stairs": 1}
    assert (data.attrs["dropped_lines"], data.attrs["repaired_lines"], data.attrs["clipped_colors"]) == (1, 0, 2)
    assert data.attrs["class_counts"].tolist() == np.bincount(data.arrays["label"], minlength=13).tolist()
    assert data.messages == ["Area_1/r/Annotations/beam_1.txt: skipped: empty file",
                             "Area_1/r/Annotations/board_1.txt:2: dropped: expected 6 values, got 5: '4 4 4 1 1'",
                             # clipped colours were only counted, with no file or line
                             "Area_1/r: colours outside 0..255 clipped: 2 colour values of 2 of 4 points (first "
                             "Area_1/r/Annotations/wall_1.txt:1: 0.4 0.5 255.5); too few above 255 for 16-bit colours; "
                             "if the file's colours "
                             "have another range, rescale them to 0..255"]
    assert data.num_bytes == sum(len(source.read(f.path)) for f in room.files)


def _load(tmp_path, files: dict[str, bytes]):
    source = open_source(write_tree(tmp_path, files))
    (room,) = source.rooms()
    return load_room(source, room)


def test_lone_cr_file_keeps_every_point(tmp_path):
    """An old-Mac file (lone \\r line ends) lost every point, counted as "1 dropped line"."""
    data = _load(tmp_path, {
        "Area_1/r/Annotations/wall_1.txt": b"1.0 2.0 3.0 10 20 30\r1.1 2.1 3.1 10 20 30\r1.2 2.2 3.2 10 20 30\r",
        "Area_1/r/Annotations/floor_1.txt": b"1.0 2.0 3.0 10 20 30\n1.5 2.5 3.5 10 20 30\n"})
    np.testing.assert_array_equal(data.arrays["coord"], np.float32([[1, 2, 3], [1.5, 2.5, 3.5],
                                                                    [1, 2, 3], [1.1, 2.1, 3.1], [1.2, 2.2, 3.2]]))
    assert (data.attrs["dropped_lines"], data.attrs["lost_objects"], data.messages) == (0, [], [])


def test_one_nul_byte_repairs_its_line_and_keeps_the_file(s3dis_real, tmp_path):
    """One NUL in a real annotation file made the whole file 'binary' (every point of the wall lost):
    inside a number it is now repaired like any control byte, and the room equals the clean one."""
    wall = "Area_2/office_resampled/Annotations/wall_1.txt"
    clean = (s3dis_real / wall).read_bytes()
    lines = clean.split(b"\n")
    number = lines[500].split()[0]
    lines[500] = lines[500][:3] + b"\x00" + lines[500][3:]  # inside the first number
    room_dir = Path(s3dis_real / "Area_2/office_resampled/Annotations")
    files = {f"Area_2/office_resampled/Annotations/{p.name}": p.read_bytes() for p in room_dir.glob("*.txt")}
    expected = _load(tmp_path / "clean", files)
    data = _load(tmp_path / "nul", {**files, wall: b"\n".join(lines)})
    for key in ("coord", "color", "label", "instance"):
        np.testing.assert_array_equal(data.arrays[key], expected.arrays[key])
    assert data.attrs["binary_files"] == [] and data.attrs["repaired_lines"] == 1
    shown = number[:3].decode() + "\\x00" + number[3:].decode()
    assert data.messages == [f"{wall}:501: repaired: dropped 1 stray byte: '{shown}' -> {number.decode()}"]


def test_binary_file_is_still_skipped_and_named_as_a_lost_object(tmp_path):
    data = _load(tmp_path, {"Area_1/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n",
                            "Area_1/r/Annotations/chair_1.txt": bytes(range(256)) * 40,  # 61 % non-text
                            "Area_1/r/Annotations/door_1.txt": b"1 2 3\n4 5 6\n"})  # every line dropped
    assert data.attrs["binary_files"] == ["Area_1/r/Annotations/chair_1.txt"]
    assert data.attrs["lost_objects"] == ["Area_1/r/Annotations/chair_1.txt", "Area_1/r/Annotations/door_1.txt"]
    assert data.messages[0] == "Area_1/r/Annotations/chair_1.txt: skipped: not a text file (binary)"
    assert data.messages[-1] == "Area_1/r/Annotations/door_1.txt: no point kept: the object door_1 is lost"
    assert data.attrs["num_points"] == 1


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-le", "utf-16-be"])
def test_utf16_text_is_decoded_and_parsed(tmp_path, codec):
    """A Windows "Unicode" export (with or without a byte-order mark) was skipped as binary."""
    text = "1.5 2 3 10 20 30\r\n4 5 6.25 40 50 60\r\n"
    data = _load(tmp_path, {"Area_1/r/Annotations/wall_1.txt": text.encode(codec)})
    np.testing.assert_array_equal(data.arrays["coord"], np.float32([[1.5, 2, 3], [4, 5, 6.25]]))
    np.testing.assert_array_equal(data.arrays["color"], [[10, 20, 30], [40, 50, 60]])
    assert data.messages == ["Area_1/r/Annotations/wall_1.txt: repaired: UTF-16 text (a Windows 'Unicode' "
                             "export), decoded"]
    assert data.attrs["binary_files"] == [] and data.attrs["lost_objects"] == []


@pytest.mark.parametrize(("codec", "mark"), [("utf-32-le", b"\xff\xfe\0\0"), ("utf-32-be", b"\0\0\xfe\xff"),
                                           ("utf-32-le", b""), ("utf-32-be", b"")])
def test_utf32_text_is_decoded_and_parsed(tmp_path, codec, mark):
    """Configs and predict's scans read UTF-32 (YAML's rule); prepare skipped such a file as "not a text file
    (binary)" (its mark read as UTF-16's), and the object was lost."""
    text = "1.5 2 3 10 20 30\r\n4 5 6.25 40 50 60\r\n"
    data = _load(tmp_path, {"Area_1/r/Annotations/wall_1.txt": mark + text.encode(codec)})
    np.testing.assert_array_equal(data.arrays["coord"], np.float32([[1.5, 2, 3], [4, 5, 6.25]]))
    np.testing.assert_array_equal(data.arrays["color"], [[10, 20, 30], [40, 50, 60]])
    assert data.messages == ["Area_1/r/Annotations/wall_1.txt: repaired: UTF-32 text, decoded"]
    assert data.attrs["binary_files"] == [] and data.attrs["lost_objects"] == []


def test_utf16le_without_a_mark_cut_short_says_its_byte_order(tmp_path):
    """``iconv -f UTF-16`` reads a file without a mark as big-endian: the advice for a little-endian one named it."""
    data = _load(tmp_path, {"Area_1/r/Annotations/wall_1.txt": "1 2 3 4 5 6\n".encode("utf-16-le") + b"7"})
    assert data.messages == ["Area_1/r/Annotations/wall_1.txt: skipped: UTF-16 text that does not decode "
                             "(truncated data at byte 24); convert it to ASCII or UTF-8 "
                             "(iconv -f UTF-16LE -t UTF-8 FILE > NEW)"]


def test_a_utf8_byte_order_mark_keeps_the_first_point(tmp_path):
    """Notepad's UTF-8 mark made the first line's first number non-ASCII: that point was dropped with a
    warning about "a Unicode minus, decimal mark or space"."""
    data = _load(tmp_path, {"Area_1/r/Annotations/wall_1.txt": b"\xef\xbb\xbf1.5 2 3 10 20 30\n4 5 6.25 40 50 60\n"})
    np.testing.assert_array_equal(data.arrays["coord"], np.float32([[1.5, 2, 3], [4, 5, 6.25]]))
    np.testing.assert_array_equal(data.arrays["color"], [[10, 20, 30], [40, 50, 60]])
    assert (data.attrs["dropped_lines"], data.attrs["lost_objects"], data.messages) == (0, [], [])


def test_utf16_text_that_does_not_decode_says_how_to_convert_it(tmp_path):
    broken = "1 2 3 4 5 6\n".encode("utf-16") + b"\x00\xd8" + "7 8 9 1 2 3\n".encode("utf-16-le")  # lone surrogate
    data = _load(tmp_path, {"Area_1/r/Annotations/wall_1.txt": broken,
                            "Area_1/r/Annotations/floor_1.txt": b"1 2 3 4 5 6\n"})
    assert data.attrs["binary_files"] == data.attrs["lost_objects"] == ["Area_1/r/Annotations/wall_1.txt"]
    assert data.messages == ["Area_1/r/Annotations/wall_1.txt: skipped: UTF-16 text that does not decode "
                             "(illegal UTF-16 surrogate at byte 26); convert it to ASCII or UTF-8 "
                             "(iconv -f UTF-16 -t UTF-8 FILE > NEW)"]


def _office_2(s3dis_real, rgb_format=None) -> dict[str, bytes]:
    """The annotation files of the real room Area_1/office_2, its colours rewritten by ``rgb_format``
    (a function of the (n, 3) 0..255 colours) when given."""
    files = {}
    for path in sorted((s3dis_real / "Area_1/office_2/Annotations").glob("*.txt")):
        text = path.read_bytes()
        if rgb_format is not None:
            rows = np.loadtxt(path, ndmin=2)
            text = "".join(f"{x:.3f} {y:.3f} {z:.3f} {rgb}\n"
                           for (x, y, z), rgb in zip(rows[:, :3], rgb_format(rows[:, 3:]), strict=True)).encode()
        files[f"Area_1/office_2/Annotations/{path.name}"] = text
    return files


def test_colours_within_0_1_are_scaled_by_255_with_one_line(s3dis_real, tmp_path):
    """A normalised export (colours 0..1, as Open3D writes them) was rounded to 0 or 1 without a word: it is
    scaled by 255, the room named, and gives the colours of the 0..255 room."""
    expected = _load(tmp_path / "255", _office_2(s3dis_real))
    unit = _load(tmp_path / "unit", _office_2(s3dis_real, lambda c: [" ".join(f"{v:.6f}" for v in row)
                                                                    for row in c / 255]))
    np.testing.assert_array_equal(unit.arrays["color"], expected.arrays["color"])
    np.testing.assert_array_equal(unit.arrays["coord"], expected.arrays["coord"])
    assert (unit.attrs["color_scale"], expected.attrs["color_scale"], unit.attrs["clipped_colors"]) == (255, 1, 0)
    first = " ".join(f"{float(f'{v / 255:.6f}'):g}" for v in expected.arrays["color"][0])
    fractional = np.count_nonzero(((expected.arrays["color"] % 255) != 0).any(axis=1))  # not only 0 or 255
    assert fractional == 98  # the room has 2 points of colours 0 and 255 only: scaled with the others
    files = len(list((s3dis_real / "Area_1/office_2/Annotations").glob("*.txt")))
    assert unit.messages == [(
        f"Area_1/office_2: {files} of {files} files with colours within 0..1 (a normalised export), expected "
        f"0..255 (S3DIS) (first Area_1/office_2/Annotations/beam_1.txt:1: {first}): "
        "scaled by 255 (rounded as they are, every colour would be 0 or 1); if they really are 0..255, write "
        "them as integers")]
    assert expected.messages == []


@pytest.mark.parametrize("colours", [
    lambda c: [f"{int(v > 127)} 0 1" for v in c[:, 0]],                # 0 and 1 only: nothing says 0..1
    lambda c: [" ".join(f"{v / 255:.6f}" for v in row) for row in c[:-1]] + ["1.5 0 0"],  # one beyond 1
])
def test_colours_are_not_scaled_unless_every_one_is_within_0_1_and_some_fractional(s3dis_real, tmp_path, colours):
    files = _office_2(s3dis_real, colours)
    data = _load(tmp_path, files)
    rows = np.concatenate([np.loadtxt(io.BytesIO(t), ndmin=2) for _, t in sorted(files.items())])
    np.testing.assert_array_equal(data.arrays["color"], np.rint(rows[:, 3:]))
    assert (data.attrs["color_scale"], data.messages) == (1, [])


@pytest.mark.parametrize("scale, found", [
    (1 / 255, "colours within 0..1 (a normalised export), expected 0..255 (S3DIS) (first {}): scaled by 255 "
              "(rounded as they are, every colour would be 0 or 1); if they really are 0..255, write them as integers"),
    (257, "colours above 255 (16 bit, 0..65535) (first {}): divided by 257; if they are 0..255, clip them to 255"),
    (256, ("colours above 255 (16 bit, 0..65535) (first {}): divided by 256 (every value's low byte is 0: 8-bit "
           "colours stored as c << 8); if they are 0..255, clip them to 255")),  # c / 257: one level low above 128
])  # one object re-exported normalised, or in 16 bit
def test_each_files_colour_range_is_judged_on_its_own(s3dis_real, tmp_path, scale, found):
    """The 0..1 test was made over the whole room: one normalised file among 0..255 ones was rounded to 0 and 1
    (black) without a word; a 16-bit file was clipped to 255 (white)."""
    files = _office_2(s3dis_real)
    expected = _load(tmp_path / "255", files)
    name = "Area_1/office_2/Annotations/wall_1.txt"
    rows = np.loadtxt(io.BytesIO(files[name]), ndmin=2)
    files[name] = "".join(f"{x:.3f} {y:.3f} {z:.3f} {' '.join(f'{v * scale:.6f}' for v in rgb)}\n"
                          for (x, y, z), rgb in zip(rows[:, :3], rows[:, 3:], strict=True)).encode()
    mixed = _load(tmp_path / "mixed", files)
    np.testing.assert_array_equal(mixed.arrays["color"], expected.arrays["color"])
    shown = " ".join(f"{float(f'{v * scale:.6f}'):g}" for v in rows[0, 3:])
    assert mixed.messages == [f"Area_1/office_2: 1 of {len(files)} files with {found.format(f'{name}:1: {shown}')}"]
    assert (mixed.attrs["color_scale"], mixed.attrs["clipped_colors"]) == (255 if scale < 1 else 1, 0)


def _object_files(parts: dict[str, tuple[int, float, float, int]], seed=6) -> tuple[dict[str, bytes], dict]:
    """``(files, colours)``: the annotation files of a room of objects ``{stem: (n, low, high, decimals)}``,
    colours drawn within ``[low, high]`` and written with ``decimals``, and each object's colours as written."""
    rng = np.random.default_rng(seed)
    files, colours = {}, {}
    for stem, (n, low, high, decimals) in parts.items():
        colours[stem] = np.round(rng.uniform(low, high, (n, 3)), decimals)
        xyz = rng.random((n, 3)) * 5
        files[f"Area_1/r/Annotations/{stem}.txt"] = "".join(
            f"{x:.3f} {y:.3f} {z:.3f} {' '.join(f'{v:.{decimals}f}' for v in rgb)}\n"
            for (x, y, z), rgb in zip(xyz, colours[stem], strict=True)).encode()
    return files, colours


def test_a_dark_object_among_fractional_0_255_files_stays_dark(tmp_path):
    """Judged per file, a near-black object (every value below 1) in a room of float 0..255 colours (12.37) was
    read as 0..1 and scaled by 255 (black -> grey), and the room's color_scale said 255 for every file."""
    files, colours = _object_files({"wall_1": (50, 60, 220, 2), "floor_1": (40, 30, 120, 2),
                                    "chair_1": (30, 0, 0.9, 2)})
    data = _load(tmp_path, files)
    expected = np.concatenate([colours[name] for name in data.attrs["objects"]])
    np.testing.assert_array_equal(data.arrays["color"], np.rint(expected))
    assert data.attrs["color_scale"] == 1
    shown = {name: " ".join(f"{v:g}" for v in colours[name][0]) for name in ("floor_1", "chair_1")}
    assert data.messages == [(
        "Area_1/r: 1 of 3 files with colours within 0..1 read as 0..255, not scaled by 255, since another file "
        f"holds fractions beyond 0..1 (Area_1/r/Annotations/floor_1.txt:1: {shown['floor_1']}), a 0..255 writer of "
        f"fractional colours (first Area_1/r/Annotations/chair_1.txt:1: {shown['chair_1']}); if they are a "
        "normalised export, write the room's colours in one range")]


def test_float_noise_just_above_1_does_not_cancel_the_0_1_files_of_a_room(tmp_path):
    """One value of 1.0000001 (a 0..1 exporter's float32 noise) in one file counted as "fractions beyond 0..1",
    so every 0..1 file of the room was rounded to 0 and 1 (black) without a word; then that file alone was."""
    files, colours = _object_files({"wall_1": (50, 0, 1, 4), "floor_1": (50, 0, 1, 4)})
    colours["floor_1"][0, 0] = 1.0000001
    files["Area_1/r/Annotations/floor_1.txt"] = "".join(
        f"{i} 0 0 {' '.join(f'{v:.7f}' for v in rgb)}\n" for i, rgb in enumerate(colours["floor_1"])).encode()
    data = _load(tmp_path, files)
    # both files are 0..1: the floor's 1.0000001 is 255, as its 1 would be (before: the floor, max > 1, was
    # rounded as 0..255, every colour 0 or 1, black, without a word)
    expected = np.concatenate([colours[name] for name in data.attrs["objects"]])
    np.testing.assert_array_equal(data.arrays["color"], np.minimum(np.rint(expected * 255), 255))
    assert data.attrs["color_scale"] == 255 and data.attrs["clipped_colors"] == 0 and len(data.messages) == 1
    assert data.messages[0].startswith("Area_1/r: 2 of 2 files with colours within 0..1 (a normalised export)")


def test_a_white_object_of_256_overshoots_is_clipped_not_read_as_16_bit(tmp_path):
    """A whiteboard written by a converter that multiplies 0..1 by 256 (white -> 256), mostly 256: judged per
    file it was read as 16 bit (divided by 257: black); no 16-bit file stops below 511.5."""
    files, colours = _object_files({"wall_1": (50, 0, 255, 0), "board_1": (40, 217, 255, 0)})
    colours["board_1"][:28] = 256
    files["Area_1/r/Annotations/board_1.txt"] = "".join(
        f"{i} 0 0 {' '.join(f'{v:.0f}' for v in rgb)}\n" for i, rgb in enumerate(colours["board_1"])).encode()
    data = _load(tmp_path, files)
    expected = np.concatenate([colours[name] for name in data.attrs["objects"]])
    np.testing.assert_array_equal(data.arrays["color"], np.minimum(expected, 255))
    assert (data.attrs["clipped_colors"], len(data.messages)) == (84, 1)
    assert data.messages == [(
        "Area_1/r: colours outside 0..255 clipped: 84 colour values of 28 of 90 points (first "
        "Area_1/r/Annotations/board_1.txt:1: 256 256 256); none reaches 511.5 for 16-bit colours; if the file's "
        "colours have another range, rescale them to 0..255")]


def _georeferenced(n=400, seed=5):
    """``(n, 6)`` points of a 6 x 5 x 3 m room at UTM-sized coordinates (mm decimals), colours 0..255."""
    rng = np.random.default_rng(seed)
    xyz = np.round(rng.random((n, 3)) * [6, 5, 3] + [500123.456, 4000321.987, 0.25], 3)
    return np.c_[xyz, rng.integers(0, 256, (n, 3))]


def test_a_georeferenced_room_keeps_its_millimetres(tmp_path):
    """Stored as float32 as they came, coordinates at y = 4e6 m were rounded to 25 cm steps (points a grid cell
    apart merged) without a word; the room is stored minus its origin (float64 attribute) now."""
    values = _georeferenced()
    text = io.BytesIO()
    np.savetxt(text, values, fmt="%.3f %.3f %.3f %d %d %d")
    data = _load(tmp_path, {"Area_1/r/Annotations/wall_1.txt": text.getvalue()})
    origin = data.attrs["origin"]
    np.testing.assert_array_equal(origin, [500123, 4000321, 0])   # floor of the minimum
    assert data.arrays["coord"].dtype == np.float32
    np.testing.assert_allclose(data.arrays["coord"] + origin, values[:, :3], rtol=0, atol=1e-5)
    assert len(np.unique(data.arrays["coord"], axis=0)) == len(np.unique(values[:, :3], axis=0))


def test_a_room_near_zero_is_stored_as_it_came(tmp_path):
    values = _georeferenced()
    values[:, :2] -= [500000, 4000000]   # 123..129 m, 321..326 m: float32 within 0.01 mm
    text = "".join(f"{x:.3f} {y:.3f} {z:.3f} 1 2 3\n" for x, y, z in values[:, :3]).encode()
    data = _load(tmp_path, {"Area_1/r/Annotations/wall_1.txt": text})
    assert "origin" not in data.attrs
    np.testing.assert_array_equal(data.arrays["coord"], values[:, :3].astype(np.float32))


def test_a_room_far_from_0_on_its_upper_side_gets_an_origin():
    """float32 rounds 16,500 m to 2 mm: a room spanning x 16,000..16,500 m (its minimum below 16,384 m, its
    maximum above) is stored minus an origin, like one whose minimum is far from 0."""
    from data_prep.room import float32_origin

    values = np.array([[16000.25, -3.5, 2.0, 0, 0, 0], [16500.75, 1.0, 3.0, 0, 0, 0]])
    np.testing.assert_array_equal(float32_origin(values), [16000.0, -4.0, 2.0])
    assert float32_origin(values[:, :] - [15000, 0, 0, 0, 0, 0]) is None     # 1,000..1,500 m: kept as it is


def test_the_clip_warning_judges_the_file_of_the_first_clipped_value():
    """The first clipped value is the first row of the second file: the reason given is that file's (its values
    are all above 255 but none reaches 511.5), not the first file's ("too few above 255")."""
    from data_prep.colors import room_colours

    rgb = np.array([[10.0, 20, 30], [40, 50, 60], [300, 300, 300], [300, 290, 280]])
    messages = []
    color, clipped, scale = room_colours(rgb, [2, 2], "Area_1/r", lambda row: f"row {row}", messages)
    assert clipped == 6 and scale == 1 and color[2:].tolist() == [[255] * 3] * 2
    assert len(messages) == 1 and "(first row 2: 300 300 300); none reaches 511.5 for 16-bit colours;" in messages[0]
