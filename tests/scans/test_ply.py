"""Tests of pointgeope/scans/ply.py: files written by Open3D (ascii, binary, legacy and tensor API) and by
hand (big endian, 16-bit colour) read back exactly, in file order; truncated files are refused; the writer's
files read back with Open3D, custom ``label`` property included."""
from __future__ import annotations

import re

import numpy as np
import pytest

from pointgeope.scans.ply import read_ply, write_vertices
from pointgeope.scans.scan import ScanError

o3d = pytest.importorskip("open3d")


def points(n=300, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((n, 3)) * [8.0, 5.0, 3.0] - 2.0, rng.integers(0, 256, (n, 3), dtype=np.uint8)


@pytest.mark.parametrize("ascii_", [True, False], ids=["ascii", "binary"])
def test_open3d_legacy_files(tmp_path, ascii_):
    coord, color = points()
    pcd = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(coord))
    pcd.colors = o3d.utility.Vector3dVector(color / 255.0)
    path = tmp_path / "a.ply"
    o3d.io.write_point_cloud(str(path), pcd, write_ascii=ascii_)
    scan = read_ply(path)
    assert scan.name == "a" and scan.source == str(path)
    np.testing.assert_allclose(scan.coord, coord, rtol=0, atol=1e-5 if ascii_ else 0)
    np.testing.assert_array_equal(scan.color, color)
    o3d.io.write_point_cloud(str(path), o3d.geometry.PointCloud(o3d.utility.Vector3dVector(coord)),
                             write_ascii=ascii_)
    assert read_ply(path).color is None


def test_open3d_tensor_float_colours_and_extra_properties(tmp_path):
    coord, color = points(seed=1)
    pcd = o3d.t.geometry.PointCloud()
    pcd.point.positions = o3d.core.Tensor(coord.astype(np.float32))
    pcd.point.colors = o3d.core.Tensor((color / 255.0).astype(np.float32))
    pcd.point["intensity"] = o3d.core.Tensor(np.arange(len(coord), dtype=np.float32)[:, None])
    for ascii_ in (True, False):
        o3d.t.io.write_point_cloud(str(tmp_path / "t.ply"), pcd, write_ascii=ascii_)
        scan = read_ply(tmp_path / "t.ply")
        np.testing.assert_allclose(scan.coord, coord.astype(np.float32), atol=1e-5)
        np.testing.assert_array_equal(scan.color, color)  # float 0..1 -> round(255 c)


def test_big_endian_16_bit_colour_with_an_element_before_the_vertices(tmp_path):
    coord, color = points(n=5, seed=2)
    rec = np.empty(5, dtype=[("x", ">f8"), ("y", ">f8"), ("z", ">f8"), ("red", ">u2"), ("green", ">u2"),
                             ("blue", ">u2")])
    for j, k in enumerate("xyz"):
        rec[k] = coord[:, j]
    for j, k in enumerate(("red", "green", "blue")):
        rec[k] = color[:, j].astype(np.uint16) * 257
    header = ("ply\nformat binary_big_endian 1.0\ncomment by hand\nelement camera 1\nproperty float f\n"
              "element vertex 5\nproperty double x\nproperty double y\nproperty double z\n"
              "property ushort red\nproperty ushort green\nproperty ushort blue\nend_header\n")
    path = tmp_path / "be.ply"
    path.write_bytes(header.encode() + np.array(1.5, dtype='>f4').tobytes() + rec.tobytes())
    scan = read_ply(path)
    np.testing.assert_array_equal(scan.coord, coord)
    np.testing.assert_array_equal(scan.color, color)


def test_truncated_and_foreign_files_are_refused(tmp_path):
    coord, color = points(n=100)
    pcd = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(coord))
    pcd.colors = o3d.utility.Vector3dVector(color / 255.0)
    for ascii_, match in ((False, r"truncated PLY: the header promises 100 vertices \(2,700 bytes\)"),
                          (True, "truncated PLY|unreadable ascii PLY")):
        path = tmp_path / f"full{ascii_}.ply"
        o3d.io.write_point_cloud(str(path), pcd, write_ascii=ascii_)
        cut = tmp_path / "cut.ply"
        cut.write_bytes(path.read_bytes()[:-1000])
        with pytest.raises(ScanError, match=rf"^{re.escape(str(cut))}: ({match})"):
            read_ply(cut)
    (tmp_path / "no.ply").write_text("hello\n")
    with pytest.raises(ScanError, match="not a PLY file"):
        read_ply(tmp_path / "no.ply")
    (tmp_path / "h.ply").write_text("ply\nformat ascii 1.0\nelement vertex 2\nproperty float x\n")
    with pytest.raises(ScanError, match="truncated PLY header"):
        read_ply(tmp_path / "h.ply")


@pytest.mark.parametrize("fmt", ["ascii", "binary_little_endian"])
def test_a_property_declared_twice_is_one_line_naming_its_header_line(tmp_path, fmt):
    """numpy refused the record type ('field x occurs more than once') with a traceback, exit 1."""
    body = b"1 2 3 4\n" if fmt == "ascii" else np.float32([1, 2, 3, 4]).tobytes()
    path = tmp_path / "dup.ply"
    path.write_bytes(f"ply\nformat {fmt} 1.0\nelement vertex 1\nproperty float x\nproperty float y\n"
                     "property float z\nproperty float x\nend_header\n".encode() + body)
    with pytest.raises(ScanError, match=rf"^{re.escape(str(path))}:7: property 'x' declared twice in element 'vertex'; a PLY "
                                        "element names each property once: rename or remove one in the header$"):
        read_ply(path)


def test_a_short_ascii_row_is_named_without_numpys_advice(tmp_path):
    path = tmp_path / "short.ply"
    path.write_text("ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\n"
                    "property float z\nend_header\n1 2 3\n4 5 6\n7\n")
    with pytest.raises(ScanError, match=rf"^{re.escape(str(path))}: unreadable ascii PLY vertex \(the number of columns changed "
                                        r"from 3 to 1 at row 3\); expected 3 lines of 3 numbers after the header$"):
        read_ply(path)


def test_written_vertices_read_back_with_open3d(tmp_path):
    coord, color = points(seed=3)
    coord = coord + 500_000.0  # float64 needed: doubles are written
    label = np.arange(len(coord), dtype=np.uint8) % 13
    props = [("x", coord[:, 0]), ("y", coord[:, 1]), ("z", coord[:, 2]), ("red", color[:, 0]),
             ("green", color[:, 1]), ("blue", color[:, 2]), ("label", label)]
    path = write_vertices(tmp_path / "w.ply", props)
    pcd = o3d.t.io.read_point_cloud(str(path))
    np.testing.assert_array_equal(pcd.point.positions.numpy(), coord)
    np.testing.assert_array_equal(pcd.point.colors.numpy(), color)  # uchar colours stay uint8
    np.testing.assert_array_equal(pcd.point["label"].numpy()[:, 0], label)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.ply"]
