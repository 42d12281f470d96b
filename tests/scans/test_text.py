"""Tests of pointgeope/scans/text.py: text clouds written with numpy in every accepted layout read back in
line order; ragged files are refused with the line; the writer's files read back with numpy."""
from __future__ import annotations

import re

import numpy as np
import pytest

from pointgeope.scans.scan import ScanError
from pointgeope.scans.text import read_text, write_text


def points(n=200, seed=0):
    rng = np.random.default_rng(seed)
    return np.round(rng.random((n, 3)) * 20 - 5, 4), rng.integers(0, 256, (n, 3))


def test_s3dis_style_whitespace_with_colour(tmp_path):
    coord, color = points()
    np.savetxt(tmp_path / "room.txt", np.c_[coord, color], fmt="%.4f %.4f %.4f %d %d %d")
    scan = read_text(tmp_path / "room.txt")
    np.testing.assert_allclose(scan.coord, coord, atol=1e-9)
    np.testing.assert_array_equal(scan.color, color)


def test_csv_with_header_and_extra_columns(tmp_path):
    coord, color = points(seed=1)
    intensity = np.arange(len(coord))
    np.savetxt(tmp_path / "c.csv", np.c_[coord, color, intensity], fmt="%.4f,%.4f,%.4f,%d,%d,%d,%d",
               header="x,y,z,r,g,b,intensity", comments="")
    scan = read_text(tmp_path / "c.csv")
    np.testing.assert_allclose(scan.coord, coord, atol=1e-9)
    np.testing.assert_array_equal(scan.color, color)


def test_xyz_without_colour_tabs_and_comments(tmp_path):
    coord, _ = points(seed=2)
    np.savetxt(tmp_path / "p.xyz", coord, fmt="%.4f", delimiter="\t", header="scanned 2024", comments="# ")
    scan = read_text(tmp_path / "p.xyz")
    assert scan.color is None and scan.name == "p"
    np.testing.assert_allclose(scan.coord, coord, atol=1e-9)


def test_leica_pts_count_line_and_intensity_column(tmp_path):
    coord, color = points(seed=3)
    body = np.c_[coord, np.full(len(coord), -1200), color]
    np.savetxt(tmp_path / "l.pts", body, fmt="%.4f %.4f %.4f %d %d %d %d", header=str(len(coord)), comments="")
    scan = read_text(tmp_path / "l.pts")
    np.testing.assert_allclose(scan.coord, coord, atol=1e-9)
    np.testing.assert_array_equal(scan.color, color)


def test_unit_float_and_16_bit_colours(tmp_path):
    coord, color = points(seed=4)
    np.savetxt(tmp_path / "f.txt", np.c_[coord, color / 255.0], fmt="%.6f")
    np.testing.assert_array_equal(read_text(tmp_path / "f.txt").color, color)
    np.savetxt(tmp_path / "s.txt", np.c_[coord, color * 257], fmt="%.4f %.4f %.4f %d %d %d")
    np.testing.assert_array_equal(read_text(tmp_path / "s.txt").color, color)


@pytest.mark.parametrize("encoding, header", [("utf-8-sig", ""), ("utf-8-sig", "x y z r g b\n"),
                                              ("utf-16", ""), ("utf-16", "x,y,z,r,g,b\n")])
def test_a_byte_order_mark_keeps_every_point_in_its_line(tmp_path, encoding, header):
    """A UTF-8 byte-order mark (Notepad, Excel's "CSV UTF-8") made the first line '\\ufeff1.2 ...', taken
    for a header and skipped: one point short, every label on the next point. UTF-16 was refused."""
    coord, color = points(seed=4)
    sep = "," if "," in header else " "
    text = header + "".join(sep.join(f"{v:.4f}" for v in c) + sep + sep.join(map(str, k)) + "\n"
                            for c, k in zip(coord, color, strict=True))
    (tmp_path / "bom.txt").write_text(text, encoding=encoding)
    scan = read_text(tmp_path / "bom.txt")
    np.testing.assert_allclose(scan.coord, coord, atol=1e-9)
    np.testing.assert_array_equal(scan.color, color)


def test_a_latin1_header_is_skipped_and_a_latin1_number_refused_with_the_fix(tmp_path):
    coord, color = points(n=5, seed=5)
    rows = "".join(" ".join(f"{v:.4f}" for v in c) + " " + " ".join(map(str, k)) + "\n"
                   for c, k in zip(coord, color, strict=True))
    (tmp_path / "h.txt").write_bytes("x y z r g b (m\u00e8tres)\n".encode("latin-1") + rows.encode())
    np.testing.assert_allclose(read_text(tmp_path / "h.txt").coord, coord, atol=1e-9)
    (tmp_path / "n.txt").write_bytes(rows.encode() + "1\u00b75 2 3 4 5 6\n".encode("latin-1"))
    with pytest.raises(ScanError, match=rf"^{re.escape(str(tmp_path / 'n.txt'))}:6: .*\('1\ufffd5' is not a "
                                        r"number\); save the file as UTF-8 \(or ASCII\) text$"):
        read_text(tmp_path / "n.txt")


def test_bad_text_is_refused_with_the_file(tmp_path):
    (tmp_path / "ragged.txt").write_text("1 2 3 4 5 6\n1 2 3 4 5 6\n1 2 3\n")
    with pytest.raises(ScanError, match=rf"^{re.escape(str(tmp_path / 'ragged.txt'))}:3: expected lines of "
                                        r"numbers .*, got '1 2 3' \(3 values, the lines before have 6\)$"):
        read_text(tmp_path / "ragged.txt")
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(ScanError, match="empty file"):
        read_text(tmp_path / "empty.txt")
    (tmp_path / "two.txt").write_text("1 2\n3 4\n")
    with pytest.raises(ScanError, match="at least 3 columns"):
        read_text(tmp_path / "two.txt")


def test_written_text_reads_back_with_numpy(tmp_path):
    coord, color = points(seed=5)
    coord = coord + [600_000.0, 5_000_000.0, 0.0]
    label = np.arange(len(coord)) % 13
    write_text(tmp_path / "o.txt", coord, color.astype(np.uint8), label.astype(np.uint8))
    back = np.loadtxt(tmp_path / "o.txt")
    assert back.shape == (len(coord), 7)
    np.testing.assert_allclose(back[:, :3], coord, rtol=0, atol=5e-7)
    np.testing.assert_array_equal(back[:, 3:6], color)
    np.testing.assert_array_equal(back[:, 6], label)


@pytest.mark.parametrize("text, line, got, why", [
    ("1 2 3\n# c\n\n4 5 6x\n7 8 9\n", 4, "4 5 6x", "'6x' is not a number"),          # numpy: "row 1"
    ("x y z\n1 2 3\n4 5 6 # ok\n\n7 8 9 1\n", 5, "7 8 9 1", "4 values, the lines before have 3"),   # "row 3"
])
def test_a_bad_number_is_named_by_the_files_line(tmp_path, text, line, got, why):
    """numpy named the row by its index among the data rows (0-based for a bad number, 1-based for a changed
    count), comments, blank lines and the header not counted; prepare names file:line for the same defect."""
    (tmp_path / "s.txt").write_text(text)
    with pytest.raises(ScanError) as err:
        read_text(tmp_path / "s.txt")
    assert str(err.value) == (f"{tmp_path / 's.txt'}:{line}: expected lines of numbers 'x y z [r g b ...]', got "
                              f"{got!r} ({why})")


def test_a_long_bad_line_is_said_whole_or_cut_and_marked(tmp_path):
    """A line of 80 characters is said whole; a longer one is cut, marked with its length (before: cut at 80
    characters silently, as if whole, and here without the 'x' the reason names)."""
    for name, line, said in (("whole.txt", "45 " + "6 " * 38 + "x", "'45 " + "6 " * 38 + "x'"),
                             ("long.txt", "4 5 " + "6 " * 40 + "x", "'4 5 " + "6 " * 37 + "... (87 characters)")):
        (tmp_path / name).write_text(f"1 2 3\n{line}\n")
        with pytest.raises(ScanError) as err:
            read_text(tmp_path / name)
        assert str(err.value) == (f"{tmp_path / name}:2: expected lines of numbers 'x y z [r g b ...]', got {said} "
                                  "('x' is not a number)")


@pytest.mark.parametrize(("codec", "mark"), [("utf-16-le", b""), ("utf-16-be", b""), ("utf-32-le", b""),
                                            ("utf-32-be", b""), ("utf-32-le", b"\xff\xfe\0\0"),
                                            ("utf-32-be", b"\0\0\xfe\xff")])
def test_utf16_without_a_mark_and_utf32_read_as_their_utf8_copy(tmp_path, codec, mark):
    """UTF-16 without a byte-order mark was refused (its NUL bytes named), UTF-32 with its mark read as UTF-16 (a NUL
    character between the others): YAML's rule (pointgeope/text_codec.py) tells both by the NUL bytes around an
    ASCII first character, as every line of numbers starts."""
    text = "4.0 1.0 2.0 10 20 30\n1.5 2.5 3.5 40 50 60\n"
    (tmp_path / "u8.txt").write_text(text)
    (tmp_path / "u.txt").write_bytes(mark + text.replace("\n", "\r\n").encode(codec))
    reference, scan = read_text(tmp_path / "u8.txt"), read_text(tmp_path / "u.txt")
    np.testing.assert_array_equal(reference.coord, [[4.0, 1.0, 2.0], [1.5, 2.5, 3.5]])
    np.testing.assert_array_equal(scan.coord, reference.coord)
    np.testing.assert_array_equal(scan.color, reference.color)


@pytest.mark.parametrize("codec", ["utf-16-le", "utf-16-be"])
def test_utf16_without_a_mark_whose_first_character_is_not_ascii_is_refused_with_the_fix(tmp_path, codec):
    """No rule tells such a file from UTF-8 (YAML's has none): it reads as characters and NUL bytes; the line says
    what to save it as (its U+FFFD first character made it the advice for an 8-bit code page)."""
    (tmp_path / "u.txt").write_bytes("é x y z\n4.0 1.0 2.0 10 20 30\n1.5 2.5 3.5 40 50 60\n".encode(codec))
    with pytest.raises(ScanError, match=rf"^{re.escape(str(tmp_path / 'u.txt'))}:1: expected lines of numbers .*"
                                        r"; NUL bytes between the characters: UTF-16 text without a byte-order mark, "
                                        r"its first character not ASCII\? save the file as UTF-8 \(or ASCII\) text$"):
        read_text(tmp_path / "u.txt")


@pytest.mark.parametrize(("name", "text", "line"), [
    ("excel.csv", "x;y;z;r;g;b\n4,0;1,0;2,0;10;20;30\n", "x;y;z;r;g;b"),   # header not numbers either way
    ("dots.txt", "4.0;1.0;2.0;10;20;30\n1.5;2.5;3.5;40;50;60\n", "4.0;1.0;2.0;10;20;30")])
def test_semicolon_separated_values_are_refused_naming_the_separator(tmp_path, name, text, line):
    (tmp_path / name).write_text(text)
    with pytest.raises(ScanError, match=rf"^{re.escape(str(tmp_path / name))}:1: .*got '{line}' .*; values separated "
                                        r"by ';' \(a CSV of Excel in a locale with ',' decimals\?\): save it with ',' "
                                        r"or space separators and '\.' decimal marks$"):
        read_text(tmp_path / name)


def test_a_bad_line_without_a_semicolon_or_nul_gets_no_hint(tmp_path):
    (tmp_path / "w.txt").write_text("1 2 3 4 5 6\n1 2 x 4 5 6 # a;b\n")
    with pytest.raises(ScanError, match=r":2: .*\('x' is not a number\)$"):
        read_text(tmp_path / "w.txt")


@pytest.mark.parametrize("first, why", [
    ("1.0 2.0 3.x 10 20 30", "'3.x' is not a number"),            # a damaged number
    ("1.0 2.0 3.0 10 20 30 garbage", "'garbage' is not a number"),  # a stray word after the values
])
def test_a_damaged_first_line_is_named_not_skipped_as_a_header(tmp_path, first, why):
    """The first line was taken for a header because it was not all numbers, and skipped: the scan one point
    short, and every row of the outputs one line off the file's (the label of line 2 in row 1), exit code 0."""
    (tmp_path / "d.txt").write_text(f"{first}\n1.5 2.0 3.0 10 20 30\n1.7 2.0 3.0 10 20 30\n")
    with pytest.raises(ScanError) as err:
        read_text(tmp_path / "d.txt")
    assert str(err.value) == (f"{tmp_path / 'd.txt'}:1: expected lines of numbers 'x y z [r g b ...]', got "
                              f"{first!r} ({why})")


def test_headers_of_names_are_skipped_however_many_and_a_comment_after_values_is_data(tmp_path):
    """Three lines of names (a title, units, columns) were read as data: 'Title' is not a number. A first line
    of values with a comment after them was skipped as a header (not all numbers)."""
    (tmp_path / "h.csv").write_text("Room scan\nunits: m\nx,y,z,r,g,b\n1.5,2,3,10,20,30\n2.5,2,3,10,20,30\n")
    np.testing.assert_array_equal(read_text(tmp_path / "h.csv").coord, [[1.5, 2, 3], [2.5, 2, 3]])
    (tmp_path / "c.txt").write_text("1.5 2 3 10 20 30 # first point\n2.5 2 3 10 20 30\n")
    np.testing.assert_array_equal(read_text(tmp_path / "c.txt").coord, [[1.5, 2, 3], [2.5, 2, 3]])


def test_a_pts_file_of_fewer_points_than_its_count_is_refused(tmp_path):
    """A Leica .pts cut at the end of a line (an interrupted copy) was read as the points there were and
    predicted, exit code 0: the count on its first line, which says how many there are, was skipped unread."""
    coord, color = points(n=50, seed=5)
    body = np.c_[coord, np.full(len(coord), -1200), color]
    np.savetxt(tmp_path / "l.pts", body[:40], fmt="%.4f %.4f %.4f %d %d %d %d", header="50", comments="")
    with pytest.raises(ScanError, match=rf"^{re.escape(str(tmp_path / 'l.pts'))}: its first line counts 50 points, "
                                        r"the file holds 40 lines of points: cut short"):
        read_text(tmp_path / "l.pts")


def test_a_pts_file_of_two_scans_names_the_second_count(tmp_path):
    coord, color = points(n=5, seed=6)
    one = "5\n" + "".join(f"{x:.3f} {y:.3f} {z:.3f} -1 {r} {g} {b}\n"
                           for (x, y, z), (r, g, b) in zip(coord, color, strict=True))
    (tmp_path / "two.pts").write_text(one + one)
    with pytest.raises(ScanError, match=r":7: .*\(1 value, the lines before have 7\); a second scan's point count\? "
                                        r"save each scan of the \.pts file as its own file$"):
        read_text(tmp_path / "two.pts")


def test_a_trailing_comma_is_named_as_an_empty_value(tmp_path):
    """Said "'' is not a number", which does not say where the value is missing."""
    (tmp_path / "t.csv").write_text("x,y,z,r,g,b,\n1.5,2,3,10,20,30,\n")
    with pytest.raises(ScanError, match=r"t\.csv:2: .*got '1\.5,2,3,10,20,30,' \(an empty value: a separator at "
                                        r"the end of the line, or two in a row; remove it\)$"):
        read_text(tmp_path / "t.csv")


@pytest.mark.parametrize("title", ["Scan 1", "Points: 3", "Scan 1 of 2", "Station 12 2024-05-01"])
def test_a_title_with_one_or_two_numbers_is_a_header(tmp_path, title):
    """A title line of words and a number or two ('Scan 1') was refused as a damaged first line of data
    ("'Scan' is not a number", exit 2): half of its tokens are numbers, but it has neither three of them nor
    the width of the lines of points after it."""
    (tmp_path / "t.txt").write_text(f"{title}\n1.5 2 3 10 20 30\n2.5 2 3 40 50 60\n3.5 2 3 70 80 90\n")
    scan = read_text(tmp_path / "t.txt")
    np.testing.assert_array_equal(scan.coord, [[1.5, 2, 3], [2.5, 2, 3], [3.5, 2, 3]])
    np.testing.assert_array_equal(scan.color, [[10, 20, 30], [40, 50, 60], [70, 80, 90]])


def test_a_damaged_first_line_of_three_values_is_named(tmp_path):
    """Two numbers of three: as wide as the lines after it, a line of points with a damaged value."""
    (tmp_path / "d.xyz").write_text("1.0 2.0 3.x\n1.5 2 3\n2.5 2 3\n")
    with pytest.raises(ScanError, match=r"d\.xyz:1: expected lines of numbers .*got '1\.0 2\.0 3\.x' \('3\.x' is not "
                                        r"a number\)$"):
        read_text(tmp_path / "d.xyz")


def test_a_pts_file_of_more_points_than_its_count_is_not_called_cut_short(tmp_path):
    (tmp_path / "m.pts").write_text("2\n1 2 3\n4 5 6\n7 8 9\n")
    with pytest.raises(ScanError) as err:
        read_text(tmp_path / "m.pts")
    assert str(err.value) == (f"{tmp_path / 'm.pts'}: its first line counts 2 points, the file holds 3 lines of "
                              "points: a count the writer did not update? export it again, or correct the count")


def test_a_comma_in_a_comment_does_not_make_the_values_comma_separated(tmp_path):
    """The separator was chosen from whole lines: a comment's comma made '1 2 3 10 20 30' one value."""
    (tmp_path / "c.txt").write_text("x y z r g b # units: m, 0..255\n1.5 2 3 10 20 30 # first, of two\n"
                                    "2.5 2 3 40 50 60\n")
    scan = read_text(tmp_path / "c.txt")
    np.testing.assert_array_equal(scan.coord, [[1.5, 2, 3], [2.5, 2, 3]])
    np.testing.assert_array_equal(scan.color, [[10, 20, 30], [40, 50, 60]])


@pytest.mark.parametrize("dtype", ["<i4", ">i4", "<i2", ">u2"])
def test_an_array_whose_first_number_is_an_ascii_code_is_called_binary(tmp_path, dtype):
    """16- and 32-bit numbers ``100 5 7 ...`` fit a row of YAML's table without a mark (``64 00 00 00``): decoded
    as UTF-32 or UTF-16 they are ``'d\\x05\\x07'``, and the line said only that this is not a number."""
    np.array([100, 5, 7, 3, 2, 1] * 4, dtype).tofile(tmp_path / "a.txt")
    with pytest.raises(ScanError, match=r":1: expected lines of numbers .*is not a number\); control characters, "
                                        r"no text: a binary file \(an array of numbers\?\) with a text suffix\? give "
                                        r"the points as text lines, or as a \.npy or \.ply file$"):
        read_text(tmp_path / "a.txt")


def test_a_text_line_with_a_terminals_colour_codes_is_not_called_binary(tmp_path):
    """An ESC in a line of numbers (output of a tool that colours it, saved as it was): the line was called "control
    characters, no text: a binary file (an array of numbers?)", the hint of a binary array read as UTF-16/32."""
    (tmp_path / "c.txt").write_text("1 2 3\n4 5 \x1b[31m6\x1b[0m\n")
    with pytest.raises(ScanError, match=r":2: expected lines of numbers .*is not a number\); control characters in "
                                        r"a line of text \(a terminal's colour codes\?\): remove them$"):
        read_text(tmp_path / "c.txt")


def test_written_coordinates_read_back_as_the_floats_read(tmp_path):
    """Each coordinate is written as the shortest decimal that reads back as the float64 held: a text scan's own
    numbers (8 decimals of a normalised cloud, degrees to 1e-7, UTM millimetres) come back as written; a float32
    file's and a float64 file's values exactly. ``%.6f`` wrote 0.123457, 12.345679 and 4200000.123000."""
    written = ["0.12345678 -0.87654321 0.5", "12.3456789 45.6789012 1e-07", "4200000.123 500000.001 -12.5"]
    (tmp_path / "in.txt").write_text("".join(f"{line} 1 2 3\n" for line in written))
    scan = read_text(tmp_path / "in.txt")
    write_text(tmp_path / "out.txt", scan.coord, scan.color, np.array([0, 1, 2]))
    assert [line.rsplit(" ", 4)[0] for line in (tmp_path / "out.txt").read_text().splitlines()] == written
    assert np.array_equal(read_text(tmp_path / "out.txt").coord, scan.coord)
    rng = np.random.default_rng(0)
    f32 = (rng.random((50, 3)) * 4.2e6).astype(np.float32).astype(np.float64)
    f64 = rng.random((50, 3)) * [1, 4.2e6, 1e-3]
    for i, coord in enumerate((f32, f64)):
        write_text(tmp_path / f"{i}.txt", coord, np.zeros_like(coord, np.uint8), np.zeros(len(coord), np.uint8))
        assert np.array_equal(read_text(tmp_path / f"{i}.txt").coord, coord)
