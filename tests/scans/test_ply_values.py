"""Tests of pointgeope/scans/ply.py: ascii values checked against their declared types, PCL's packed colour."""
from __future__ import annotations

import numpy as np
import pytest

from pointgeope.scans.ply import read_ply
from pointgeope.scans.scan import ScanError

XYZ_RGB = ["float x", "float y", "float z", "uchar red", "uchar green", "uchar blue"]


def _ascii(path, props, rows, before=()):
    """An ascii PLY: ``before`` elements' header and data lines, then ``len(rows)`` vertices."""
    head = ["ply", "format ascii 1.0", "comment by hand"]
    for name, prop, lines in before:
        head += [f"element {name} {len(lines)}", f"property {prop}"]
    head += [f"element vertex {len(rows)}"] + [f"property {p}" for p in props] + ["end_header"]
    body = [line for _, _, lines in before for line in lines] + rows
    path.write_text("\n".join(head + body) + "\n")
    return path


def _rows(n=20, colour=lambda i: "200 10 10"):
    rng = np.random.default_rng(0)
    return [f"{x:.6f} {y:.6f} {z:.6f} {colour(i)}" for i, (x, y, z) in enumerate(rng.random((n, 3)) * 3)]


@pytest.mark.parametrize("value, shown, count", [
    ("0.5", "0.5", 1),                 # a 0..1 colour under a uchar header: was cast to 0 (black)
    ("300", "300", 1),                 # was 44 (wrapped)
    ("-1", "-1", 1),                   # was 255
    ("nan", "nan", 1),                 # was 0, with numpy's RuntimeWarning
])
def test_an_ascii_value_its_integer_type_cannot_hold_is_refused_naming_line_and_property(tmp_path, value, shown,
                                                                                        count):
    path = _ascii(tmp_path / "a.ply", XYZ_RGB, _rows(colour=lambda i: f"{value} 10 10" if i == 4 else "200 10 10"),
                  before=[("camera", "float f", ["1.5", "2.5"])])
    # header: 3 + camera 2 + vertex 1 + 6 properties + end_header = 13 lines, camera data 2: vertex 4 at line 20
    with pytest.raises(ScanError) as err:
        read_ply(path)
    assert str(err.value) == (
        f"{path}:20: property 'red' is uchar (whole numbers 0..255), got {shown} ({count} such value); write "
        "whole numbers in that range, or declare the property 'float' in the header (0..1 colours: "
        "'property float red')")


def test_fractional_coordinates_under_an_int_header_are_refused(tmp_path):
    """``int x`` truncated every coordinate to whole metres."""
    path = _ascii(tmp_path / "i.ply", ["int x", "int y", "int z", "uchar red", "uchar green", "uchar blue"], _rows())
    with pytest.raises(ScanError, match=r"i.ply:12: property 'x' is int \(whole numbers -2147483648..2147483647\), "
                                        r"got \d\.\d+ \(20 such values\)"):
        read_ply(path)


def test_ascii_values_within_their_types_read_as_written(tmp_path):
    path = _ascii(tmp_path / "ok.ply", ["int x", "int y", "int z", "uchar red", "uchar green", "uchar blue"],
                  ["-3 0 2147483647 0 128 255", "1 2 3 4 5 6"])
    scan = read_ply(path)
    np.testing.assert_array_equal(scan.coord, [[-3, 0, 2147483647], [1, 2, 3]])
    np.testing.assert_array_equal(scan.color, [[0, 128, 255], [4, 5, 6]])


def _pcl_colours(n=50):
    rng = np.random.default_rng(3)
    return rng.random((n, 3)) * 3, rng.integers(0, 256, (n, 3)).astype(np.uint32)


@pytest.mark.parametrize("prop, dtype, alpha", [("rgb", "<u4", 0), ("rgb", "<f4", 0), ("rgba", "<u4", 255),
                                                ("rgb", ">f4", 0), ("rgba", ">f4", 255)])
def test_pcl_packed_colour_reads_as_red_green_blue(tmp_path, prop, dtype, alpha):
    """PCL's savePLYFile writes one 32-bit ``rgb`` (a float's bit pattern) or ``rgba`` property; such a file was
    refused as having no colour."""
    coord, c = _pcl_colours()
    bits = (np.uint32(alpha) << 24) | (c[:, 0] << 16) | (c[:, 1] << 8) | c[:, 2]
    end = dtype[0]
    rec = np.empty(len(coord), dtype=[("x", end + "f4"), ("y", end + "f4"), ("z", end + "f4"), (prop, dtype)])
    for j, k in enumerate("xyz"):
        rec[k] = coord[:, j]
    rec[prop] = bits.view(np.float32) if dtype[1] == "f" else bits
    kind = "float" if dtype[1] == "f" else "uint"
    fmt = "binary_little_endian" if end == "<" else "binary_big_endian"
    header = (f"ply\nformat {fmt} 1.0\nelement vertex {len(coord)}\nproperty float x\nproperty float y\n"
              f"property float z\nproperty {kind} {prop}\nend_header\n")
    path = tmp_path / "pcl.ply"
    path.write_bytes(header.encode() + rec.tobytes())
    scan = read_ply(path)
    np.testing.assert_array_equal(scan.color, c)
    np.testing.assert_array_equal(scan.coord, coord.astype(np.float32))


def test_pcl_packed_colour_in_ascii(tmp_path):
    coord, c = _pcl_colours()
    bits = (c[:, 0] << 16) | (c[:, 1] << 8) | c[:, 2]
    rows = [f"{x:.6f} {y:.6f} {z:.6f} {b}" for (x, y, z), b in zip(coord, bits, strict=True)]
    scan = read_ply(_ascii(tmp_path / "a.ply", ["float x", "float y", "float z", "uint rgb"], rows))
    np.testing.assert_array_equal(scan.color, c)


def test_an_int_colour_ply_of_8_bit_values_with_one_256_is_clipped_not_divided_by_257(tmp_path):
    """A PLY ``int`` colour (4 bytes, what plyfile writes for numpy int32) declares no 16 bit: one stray 256
    among 0..255 values divided the whole scan by 257 (black, no note); a ``ushort`` colour does declare it."""
    rng = np.random.default_rng(5)
    colours = rng.integers(0, 256, (1000, 3))
    colours[5] = [256, 10, 10]
    rows = _rows(1000, colour=lambda i: " ".join(str(v) for v in colours[i]))
    scan = read_ply(_ascii(tmp_path / "int.ply", XYZ_RGB[:3] + ["int red", "int green", "int blue"], rows))
    np.testing.assert_array_equal(scan.color, np.minimum(colours, 255))
    assert scan.meta["notes"] == [(f"{tmp_path / 'int.ply'}: colours outside 0..255 clipped: 1 colour value of 1 "
                                   "of 1,000 points (first at point 5: 256 10 10); too few above 255 for 16-bit "
                                   "colours; if the file's colours have another range, rescale them to 0..255")]
    scan = read_ply(_ascii(tmp_path / "ushort.ply", XYZ_RGB[:3] + ["ushort red", "ushort green", "ushort blue"], rows))
    np.testing.assert_array_equal(scan.color, np.floor(colours / 257 + 0.5))
    assert scan.meta["notes"] == []
