"""Tests of pointgeope/scans/ply.py: files written by Open3D (ascii, binary, legacy and tensor API) and by
hand (big endian, 16-bit colour) read back exactly, in file order; truncated files are refused; the writer's
files read back with Open3D, custom ``label`` property included."""
from __future__ import annotations

import re
import struct
import warnings

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


@pytest.mark.parametrize("shift", [False, True])  # c * 257, or c << 8 (low byte 0: was one level low above 128)
def test_big_endian_16_bit_colour_with_an_element_before_the_vertices(tmp_path, shift):
    coord, color = points(n=5, seed=2)
    rec = np.empty(5, dtype=[("x", ">f8"), ("y", ">f8"), ("z", ">f8"), ("red", ">u2"), ("green", ">u2"),
                             ("blue", ">u2")])
    for j, k in enumerate("xyz"):
        rec[k] = coord[:, j]
    for j, k in enumerate(("red", "green", "blue")):
        rec[k] = color[:, j].astype(np.uint16) << 8 if shift else color[:, j].astype(np.uint16) * 257
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
                          (True, r"truncated PLY|\d+: expected vertex lines of")):
        path = tmp_path / f"full{ascii_}.ply"
        o3d.io.write_point_cloud(str(path), pcd, write_ascii=ascii_)
        cut = tmp_path / "cut.ply"
        cut.write_bytes(path.read_bytes()[:-1000])
        with pytest.raises(ScanError, match=rf"^{re.escape(str(cut))}:( |)({match})"):
            read_ply(cut)
    (tmp_path / "no.ply").write_text("hello\n")
    with pytest.raises(ScanError, match="not a PLY file"):
        read_ply(tmp_path / "no.ply")
    (tmp_path / "h.ply").write_text("ply\nformat ascii 1.0\nelement vertex 2\nproperty float x\n")
    with pytest.raises(ScanError, match="truncated PLY header"):
        read_ply(tmp_path / "h.ply")


@pytest.mark.parametrize("line, said", [("bogus 1", "b'bogus 1'"),
                                        ("weird " + "w" * 200, "b'weird " + "w" * 69 + "... (209 characters)")])
def test_an_unexpected_header_line_is_said_whole_or_cut_and_marked(tmp_path, line, said):
    """A header line no PLY has is said as repr writes its bytes; a long one cut to 80 characters with its
    length (before: cut there silently, as if whole)."""
    path = tmp_path / "u.ply"
    path.write_text(f"ply\nformat ascii 1.0\n{line}\nelement vertex 1\nproperty float x\nend_header\n1\n")
    with pytest.raises(ScanError) as err:
        read_ply(path)
    assert str(err.value) == f"{path}:3: unexpected PLY header line {said}"


@pytest.mark.parametrize("fmt", ["ascii", "binary_little_endian"])
def test_a_property_declared_twice_is_one_line_naming_its_header_line(tmp_path, fmt):
    """numpy refused the record type ('field x occurs more than once') with a traceback, exit 1."""
    body = b"1 2 3 4\n" if fmt == "ascii" else np.float32([1, 2, 3, 4]).tobytes()
    path = tmp_path / "dup.ply"
    path.write_bytes(f"ply\nformat {fmt} 1.0\nelement vertex 1\nproperty float x\nproperty float y\n"
                     "property float z\nproperty float x\nend_header\n".encode() + body)
    with pytest.raises(ScanError, match=rf"^{re.escape(str(path))}:7: property 'x' declared twice in element "
                                        "'vertex'; a PLY element names each property once: rename or remove one in the "
                                        "header$"):
        read_ply(path)


@pytest.mark.parametrize("fmt", ["ascii", "binary_little_endian"])
@pytest.mark.parametrize("props", ["", "property float x\nproperty float y\n"], ids=["none", "no-z"])
def test_vertices_without_x_y_z_are_refused_naming_the_element_line(tmp_path, fmt, props):
    """A vertex element of no property has records of 0 bytes: binary, the check of the bytes after them
    divided by that size (ZeroDivisionError, a traceback); ascii and binary now name the element's line."""
    path = tmp_path / "bare.ply"
    path.write_bytes(f"ply\nformat {fmt} 1.0\nelement vertex 5\n{props}end_header\n".encode() + b"1 2\n" * 5)
    names = "x, y" if props else "none"
    with pytest.raises(ScanError,
                       match=rf"^{re.escape(str(path))}:3: PLY vertices without x y z \(properties: {names}\)"):
        read_ply(path)


def test_a_short_ascii_row_is_named_without_numpys_advice(tmp_path):
    """The file's line (numpy counts rows from the first vertex), what it holds, what was expected, what to do."""
    path = tmp_path / "short.ply"
    path.write_text("ply\nformat ascii 1.0\nelement vertex 3\nproperty float x\nproperty float y\n"
                    "property float z\nend_header\n1 2 3\n4 5 6\n7\n")
    with pytest.raises(ScanError) as err:
        read_ply(path)
    assert str(err.value) == (f"{path}:10: expected vertex lines of 3 numbers (x y z), got '7' (1 value, the lines "
                              "before have 3); correct that line, or export the file again")


def test_an_ascii_value_that_is_no_number_is_named_by_its_line(tmp_path):
    """After the header and an element before the vertices (one line a record): a decimal comma on line 11."""
    path = tmp_path / "comma.ply"
    path.write_text("ply\nformat ascii 1.0\nelement camera 1\nproperty float f\nelement vertex 3\n"
                    "property float x\nproperty float y\nproperty float z\nend_header\n35\n1 2 3\n4 5,5 6\n7 8 9\n")
    with pytest.raises(ScanError) as err:
        read_ply(path)
    assert str(err.value) == (f"{path}:12: expected vertex lines of 3 numbers (x y z), got '4 5,5 6' ('5,5' is not a "
                              "number); correct that line, or export the file again")


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


XYZ = "property float x\nproperty float y\nproperty float z\n"
FACES = "element face 2\nproperty uchar flag\nproperty list uchar int vertex_indices\n"


def _ply(path, fmt, parts):
    """A PLY of ``parts`` in order: ``(header lines, [records])``; a record is ``(x, y, z)`` of floats, or in a
    FACES element ``(flag, count, indices...)``."""
    header = f"ply\nformat {fmt} 1.0\n" + "".join(h for h, _ in parts) + "end_header\n"
    if fmt == "ascii":
        body = "".join(" ".join(str(v) for v in rec) + "\n" for _, recs in parts for rec in recs).encode()
    else:
        body = b"".join(struct.pack("<BB" + "i" * rec[1] if h == FACES else "<fff", *rec)
                        for h, recs in parts for rec in recs)
    path.write_bytes(header.encode() + body)
    return path


VERTICES = [(1.5, 2.0, -3.25), (4.0, 5.0, 6.0), (7.0, 8.0, 9.0)]
TRIANGLE_QUAD = [(0, 3, 0, 1, 2), (1, 4, 0, 1, 2, 0)]


@pytest.mark.parametrize("fmt", ["ascii", "binary_little_endian"])
@pytest.mark.parametrize("faces_first", [False, True], ids=["faces_after", "faces_before"])
def test_a_mesh_reads_its_vertices_whichever_element_comes_first(tmp_path, fmt, faces_first):
    """Faces (a triangle and a quad: records of two sizes in binary) before the vertices were refused ('list
    properties in or before the PLY vertex element are not supported'); after them they were skipped, as now."""
    parts = [(f"element vertex 3\n{XYZ}", VERTICES), (FACES, TRIANGLE_QUAD)]
    path = _ply(tmp_path / "mesh.ply", fmt, parts[::-1] if faces_first else parts)
    np.testing.assert_array_equal(read_ply(path).coord, np.array(VERTICES))


def test_a_binary_mesh_cut_inside_the_faces_before_its_vertices_is_truncated(tmp_path):
    path = _ply(tmp_path / "cut.ply", "binary_little_endian", [(FACES, TRIANGLE_QUAD), (f"element vertex 3\n{XYZ}",
                                                                                       VERTICES)])
    path.write_bytes(path.read_bytes()[:-3 * 12 - 10])     # half the quad's record
    with pytest.raises(ScanError, match=rf"^{re.escape(str(path))}: truncated PLY: the file ends inside its 'face' "
                                        r"element \(line 3\), before the vertices$"):
        read_ply(path)


@pytest.mark.parametrize("fmt", ["ascii", "binary_little_endian"])
@pytest.mark.parametrize("first, second, line, message", [
    ("vertex 2", "vertex 1", 7, "a second 'element vertex'; expected one vertex element, the points, got two (line "
     "3: 2 records, line 7: 1): combine them into one, or rename the one that does not hold the points"),
    ("point 2", "vertex 1", 3, "element 'point' holds x y z as the 'vertex' element (line 7) does; expected the "
     "points in the vertex element only, got 2 records of x y z in 'point' and 1 in 'vertex': remove the other "
     "element, or rename its x y z properties"),
])
def test_points_in_two_elements_are_refused_naming_the_header_line(tmp_path, fmt, first, second, line, message):
    """Before: the first 'vertex' element was read and the other's points silently left out (two vertex
    elements), or the points of an element before 'vertex' skipped (a 'point' element)."""
    path = _ply(tmp_path / "two.ply", fmt, [(f"element {first}\n{XYZ}", VERTICES[:2]),
                                            (f"element {second}\n{XYZ}", VERTICES[2:])])
    with pytest.raises(ScanError) as err:
        read_ply(path)
    assert str(err.value) == f"{path}:{line}: {message}"


def test_a_list_property_among_the_vertices_names_its_element_line(tmp_path):
    path = tmp_path / "list.ply"
    path.write_text(f"ply\nformat ascii 1.0\ncomment x\nelement vertex 1\n{XYZ}property list uchar int n\n"
                    "end_header\n1 2 3 1 0\n")
    with pytest.raises(ScanError) as err:
        read_ply(path)
    assert str(err.value) == (f"{path}:4: the PLY 'vertex' element has the list property 'n'; expected numbers only "
                              "(x y z, colour, ...): remove it from the vertices")


def test_a_list_count_that_is_no_count_is_refused(tmp_path):
    """A float count type ended in a TypeError traceback; a negative count (a signed 'char' count of byte 0xFF)
    moved where the vertices were read, and a wrong point came back silently."""
    floats = _ply(tmp_path / "f.ply", "ascii", [(FACES.replace("list uchar", "list float"), []),
                                                (f"element vertex 3\n{XYZ}", VERTICES)])
    with pytest.raises(ScanError) as err:
        read_ply(floats)
    assert str(err.value) == (f"{floats}:5: the count of list property 'vertex_indices' is a float; expected an "
                              "integer type (uchar, int, ...): fix the header")
    signed = tmp_path / "s.ply"
    face = FACES.replace("face 2", "face 1").replace("list uchar", "list char")
    header = f"ply\nformat binary_little_endian 1.0\n{face}element vertex 3\n{XYZ}end_header\n"
    points = b"".join(struct.pack("<fff", *v) for v in VERTICES)
    signed.write_bytes(header.encode() + struct.pack("<Bb", 0, -1) + points)
    with pytest.raises(ScanError) as err:
        read_ply(signed)
    assert str(err.value) == (f"{signed}: a list of 'face' (line 3) has the count -1 at byte {len(header) + 1}; "
                              "expected a count >= 0: the file is damaged")


CAMERA = "element camera 1\nproperty float x0\nproperty float y0\nproperty float z0\n"


@pytest.mark.parametrize("fmt", ["ascii", "binary_little_endian", "binary_big_endian"])
@pytest.mark.parametrize("after", [False, True], ids=["vertices-last", "camera-after"])
def test_a_header_that_counts_fewer_vertices_than_the_file_holds_is_refused(tmp_path, fmt, after):
    """A writer that streamed 5 points after a header of 'element vertex 3' (it never updated the count): the
    first 3 were read and the 2 others silently left out of the prediction, exit code 0. MeshLab's empty
    'element face 0' of a point cloud is no element of unknown size."""
    five = VERTICES + [(1.0, 1.0, 1.0), (2.0, 2.0, 2.0)]
    parts = [(f"element vertex 3\n{XYZ}", five), (FACES.replace("face 2", "face 0"), [])]
    parts += [(CAMERA, [(0.0, 0.0, 0.0)])] if after else []
    path = _ply(tmp_path / "more.ply", fmt, parts)
    if fmt == "binary_big_endian":  # _ply packs little endian: repack the floats
        data = path.read_bytes()
        head = data.index(b"end_header\n") + len(b"end_header\n")
        body = np.frombuffer(data[head:], "<f4").astype(">f4").tobytes()
        path.write_bytes(data[:head] + body)
    holds = ("6 lines of records after the header, where its elements (vertex 3, face 0, camera 1) have 4, one a "
             "line" if fmt == "ascii" and after else "5 lines of records after the header, where its elements "
             "(vertex 3, face 0) have 3, one a line" if fmt == "ascii" else
             "24 bytes after its elements, 2 more vertex records of 12 bytes"
             + (" (after 'camera')" if after else ""))
    with pytest.raises(ScanError, match=rf"^{re.escape(str(path))}: the PLY header promises 3 vertices, the file "
                                        rf"holds more: {re.escape(holds)}; the header's count is wrong"):
        read_ply(path)
    path.write_bytes(path.read_bytes().replace(b"element vertex 3", b"element vertex 5"))
    if not after:  # the corrected count reads every point
        np.testing.assert_array_equal(read_ply(path).coord, np.array(five))


def test_ascii_vertex_lines_with_more_values_than_properties_are_refused(tmp_path):
    """'x y z' declared, 'x y z r g b' written: the colours were dropped without a word (a colour model then
    refused the scan as having none, a geometry model predicted it)."""
    path = tmp_path / "wide.ply"
    path.write_text(f"ply\nformat ascii 1.0\nelement vertex 2\n{XYZ}end_header\n0 0 0 10 20 30\n1 1 1 10 20 30\n")
    with pytest.raises(ScanError, match=rf"^{re.escape(str(path))}: the ascii PLY vertex lines hold 6 values, the "
                                        r"header declares 3 properties \(x y z\) \(line 3\)"):
        read_ply(path)


def test_blank_lines_among_ascii_vertices_are_read_without_numpys_warning(tmp_path):
    path = tmp_path / "blank.ply"
    path.write_text(f"ply\nformat ascii 1.0\nelement vertex 2\n{XYZ}end_header\n0 0 0\n\n1 1 1\n\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(read_ply(path).coord, [[0, 0, 0], [1, 1, 1]])


def _mesh(path, declared, fmt="binary_little_endian", corners=(3,), n=50, faces=40, seed=0):
    """A mesh of ``n`` vertices (x y z float, and ints ``i j`` in ascii) and ``faces`` faces of as many corners
    as ``corners`` draws (a flag, then ``list uchar int vertex_indices``), its header saying ``declared``
    vertices; returns the vertices' coordinates."""
    rng = np.random.default_rng(seed)
    coord = rng.random((n, 3)).astype(np.float32)
    corner = rng.choice(corners, faces)
    polygons = [rng.integers(0, n, k).tolist() for k in corner]
    extra = "property int i\nproperty int j\n" if fmt == "ascii" else ""
    head = (f"ply\nformat {fmt} 1.0\nelement vertex {declared}\n{XYZ}{extra}element face {faces}\n"
            "property uchar flag\nproperty list uchar int vertex_indices\nend_header\n").encode()
    if fmt == "ascii":  # a triangle's line "0 3 a b c" has the 5 values of a vertex line "x y z i j"
        body = "".join(f"{x!r} {y!r} {z!r} 7 8\n" for x, y, z in coord.tolist()).encode()
        body += "".join(f"0 {len(p)} {' '.join(map(str, p))}\n" for p in polygons).encode()
    else:
        body = coord.tobytes() + b"".join(struct.pack(f"<BB{len(p)}i", 0, len(p), *p) for p in polygons)
    path.write_bytes(head + body)
    return coord


def _recounted_mesh_refusal(path, declared, **mesh):
    """The message of the refusal of ``_mesh(path, declared, **mesh)``: the same mesh of 50 vertices, read back
    exactly first, its header then counting ``declared`` vertices."""
    coord = _mesh(path, 50, **mesh)
    np.testing.assert_array_equal(read_ply(path).coord, coord)
    _mesh(path, declared, **mesh)
    with pytest.raises(ScanError) as err:
        read_ply(path)
    return str(err.value)


@pytest.mark.parametrize("declared", [40, 49, 51, 52, 60])
def test_a_binary_mesh_whose_faces_follow_another_vertex_count_is_refused_naming_both(tmp_path, declared):
    """Faces after the vertices were not checked: a short count read its vertices and left the others out,
    a long one read face bytes as vertices, both with exit code 0. Triangles: the count that fits is named."""
    assert _recounted_mesh_refusal(tmp_path / "m.ply", declared) == (
        f"{tmp_path / 'm.ply'}: the PLY header promises {declared} vertices, the file holds 50: its elements after "
        "the vertices ('face' (line 7)) end where the file does after 50 vertex records of 12 bytes; the header's "
        "vertex count is wrong (a writer that did not update it?): write the file again, or correct 'element vertex'")


@pytest.mark.parametrize("declared", [40, 49, 51, 52, 60])
def test_a_binary_mesh_of_triangles_and_quads_after_another_vertex_count_is_refused(tmp_path, declared):
    """Faces of varying corners: no one count of items fits, so the message names the header's count only."""
    assert re.match(rf"{re.escape(str(tmp_path / 'm.ply'))}: the PLY header promises {declared} vertices of 12 bytes, "
                    r"and its elements after them \('face' \(line 7\)\), read from there, (go beyond its end|leave "
                    r"[0-9,]+ bytes|end where the file does only with faces of fewer than 3 corners): the header does "
                    r"not describe the file", _recounted_mesh_refusal(tmp_path / "m.ply", declared, corners=(3, 4)))


def test_an_ascii_mesh_whose_vertex_count_reaches_into_its_faces_is_refused(tmp_path):
    """Face lines of as many values as a vertex line were read as the last vertices (exit code 0)."""
    assert _recounted_mesh_refusal(tmp_path / "m.ply", 52, fmt="ascii", corners=(3,)) == (
        f"{tmp_path / 'm.ply'}: the PLY header promises 52 vertices, the file holds 50: 90 lines of records after the "
        "header, where its elements (vertex 52, face 40) have 92, one a line; the header's count is wrong (or the "
        "file cut short): write the file again, or correct 'element vertex'")


def test_a_binary_mesh_with_faces_of_two_corners_is_refused_saying_so(tmp_path):
    """A face of fewer than 3 corners is taken for faces read from the wrong bytes (a wrong vertex count reads
    such faces as often as not): a whole file with some was refused as 'go beyond its end ... (a vertex count that
    is wrong, or a file cut short?)'. The line now says that they end where the file does with such faces."""
    _mesh(tmp_path / "m.ply", 50, corners=(2, 3), faces=40, seed=4)
    with pytest.raises(ScanError) as err:
        read_ply(tmp_path / "m.ply")
    assert str(err.value) == (
        f"{tmp_path / 'm.ply'}: the PLY header promises 50 vertices of 12 bytes, and its elements after them ('face' "
        "(line 7)), read from there, end where the file does only with faces of fewer than 3 corners: the header "
        "does not describe the file (a vertex count that is wrong?), or those faces are meant (remove them, or save "
        "the vertices alone); write the file again")
    _mesh(tmp_path / "m.ply", 52, corners=(2, 3), faces=40, seed=4)   # a wrong count: refused all the same
    with pytest.raises(ScanError, match=r"promises 52 vertices .*: the header does not describe the file \("):
        read_ply(tmp_path / "m.ply")
