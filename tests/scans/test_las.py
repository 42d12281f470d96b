"""Tests of pointgeope/scans/las.py against laspy (the independent library): files laspy writes read back
in file order (coordinates, 16-bit colour), and the writer's LAS/class field reads back with laspy."""
from __future__ import annotations

import io
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

from pointgeope.scans.las import read_las, write_las
from pointgeope.scans.scan import Scan, ScanError, checked_scan

laspy = pytest.importorskip("laspy", reason="laspy is not installed (pip install 'pointgeope[las]')")


def las_file(path, n=400, seed=0, point_format=2, offset=(650_000.0, 4_800_000.0, 100.0)):
    rng = np.random.default_rng(seed)
    header = laspy.LasHeader(point_format=point_format, version="1.2")
    header.scales = np.array([0.001, 0.001, 0.001])
    header.offsets = np.array(offset)
    las = laspy.LasData(header)
    coord = np.asarray(offset) + np.round(rng.random((n, 3)) * [30, 20, 5], 3)
    las.x, las.y, las.z = coord[:, 0], coord[:, 1], coord[:, 2]
    color = rng.integers(0, 256, (n, 3)).astype(np.uint8)
    if point_format in (2, 3):
        las.red, las.green, las.blue = (color.astype(np.uint16) * 257).T
    las.write(path)
    return coord, color


def test_a_dim_16_bit_las_is_read_as_16_bit(tmp_path):
    """Most colour values of a night scan are 1..255 (the sensor's floor, under 1/255 of full intensity): read
    as 8 bit, its dark points turned grey and every lit value was clipped to 255 with a note."""
    las_file(tmp_path / "night.las", n=2000)
    las = laspy.read(tmp_path / "night.las")
    rng = np.random.default_rng(1)
    dark = (rng.random(2000) < 0.7)[:, None]
    values = np.where(dark, rng.integers(20, 200, (2000, 3)), rng.integers(8000, 65535, (2000, 3))).astype(np.uint16)
    las.red, las.green, las.blue = values.T
    las.write(tmp_path / "night.las")
    scan = read_las(tmp_path / "night.las")
    np.testing.assert_array_equal(scan.color, np.floor(values / 257 + 0.5))
    assert scan.meta["notes"] == []


def test_8_bit_colours_stored_in_the_high_byte_read_back_exactly(tmp_path):
    """A LAS writer's ``red = c << 8``: read as ``round(256 c / 257)``, every ``c`` above 128 was one level
    low (255 -> 254)."""
    _, color = las_file(tmp_path / "a.las", n=500, seed=5)
    las = laspy.read(tmp_path / "a.las")
    las.red, las.green, las.blue = (color.astype(np.uint16) << 8).T
    las.write(tmp_path / "shifted.las")
    np.testing.assert_array_equal(read_las(tmp_path / "shifted.las").color, color)


@pytest.mark.parametrize("suffix", [".las", ".laz"])
def test_laspy_files_read_back(tmp_path, suffix):
    if suffix == ".laz" and not laspy.LazBackend.detect_available():
        pytest.skip("no LAZ backend (pip install lazrs)")
    coord, color = las_file(tmp_path / f"a{suffix}")
    scan = read_las(tmp_path / f"a{suffix}")
    np.testing.assert_allclose(scan.coord, coord, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(scan.color, color)
    assert scan.meta["las_scales"] == [0.001] * 3 and scan.meta["las_offsets"][0] == 650_000.0


def test_point_format_without_colour(tmp_path):
    coord, _ = las_file(tmp_path / "g.las", point_format=0)
    scan = read_las(tmp_path / "g.las")
    assert scan.color is None
    np.testing.assert_allclose(scan.coord, coord, rtol=0, atol=1e-6)


def test_written_las_reads_back_with_laspy(tmp_path):
    coord, color = las_file(tmp_path / "in.las", seed=1)
    scan = read_las(tmp_path / "in.las")
    label = (np.arange(len(coord)) % 13).astype(np.uint8)
    write_las(tmp_path / "out.las", scan, scan.color, label, [f"c{i}" for i in range(13)])
    las = laspy.read(tmp_path / "out.las")
    np.testing.assert_allclose(np.stack([las.x, las.y, las.z], 1), coord, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(las.classification), label)
    np.testing.assert_array_equal(np.stack([las.red, las.green, las.blue], 1), color.astype(np.uint16) * 257)
    vlr = next(v for v in las.header.vlrs if v.user_id == "pointgeope")
    assert vlr.record_data.decode().split(",")[12] == "c12"
    fresh = Scan("f", "f.npy", coord - 650_000.0)  # no LAS origin: millimetres from the floor of the minimum
    write_las(tmp_path / "f.las", fresh, color, label, ["x"] * 13)
    back = laspy.read(tmp_path / "f.las")
    assert list(back.header.scales) == [0.001] * 3
    np.testing.assert_allclose(np.stack([back.x, back.y, back.z], 1), fresh.coord, rtol=0, atol=5e-4)


def test_not_a_las_file(tmp_path):
    (tmp_path / "bad.las").write_bytes(b"LASF but not really")
    with pytest.raises(ScanError, match=rf"^{re.escape(str(tmp_path / 'bad.las'))}: not a readable LAS/LAZ file"):
        read_las(tmp_path / "bad.las")


@pytest.mark.parametrize("records", [10, 0.5], ids=["between-records", "inside-a-record"])
def test_a_truncated_las_is_refused_naming_the_counts(tmp_path, records):
    """A LAS file cut short (an interrupted copy) between two point records was read as the records there
    were: a scan silently short of its last points, predicted with exit code 0. Cut inside a record it was
    numpy's "buffer size must be a multiple of element size"."""
    las_file(tmp_path / "full.las", n=400)
    data = (tmp_path / "full.las").read_bytes()
    record = laspy.read(tmp_path / "full.las").header.point_format.size
    (tmp_path / "cut.las").write_bytes(data[:len(data) - int(records * record)])
    whole = 400 - int(np.ceil(records))
    with pytest.raises(ScanError, match=rf"^{re.escape(str(tmp_path / 'cut.las'))}: truncated LAS: its header "
                                        rf"promises 400 points, the file holds {whole} whole point record"):
        read_las(tmp_path / "cut.las")


@pytest.mark.parametrize("count", [0, 150])
def test_a_las_header_that_counts_fewer_points_than_its_records_is_refused(tmp_path, count):
    """A writer stopped before it wrote the point count (the legacy count at byte 107 of a LAS 1.2 header):
    0 was read as an empty scan ('expected points, found none'), 150 as 150 points, the other 250 dropped
    with exit code 0."""
    las_file(tmp_path / "a.las", n=400)
    data = bytearray((tmp_path / "a.las").read_bytes())
    data[107:111] = np.array([count], "<u4").tobytes()
    (tmp_path / "a.las").write_bytes(bytes(data))
    with pytest.raises(ScanError, match=rf"^{re.escape(str(tmp_path / 'a.las'))}: its LAS header promises "
                                        rf"{count} points, the file holds 400 point records of 26 bytes"):
        read_las(tmp_path / "a.las")


def test_extended_vlrs_after_the_points_are_no_extra_records(tmp_path):
    header = laspy.LasHeader(point_format=7, version="1.4")
    las = laspy.LasData(header)
    las.x, las.y, las.z = np.arange(5.0), np.zeros(5), np.ones(5)
    las.red, las.green, las.blue = np.full((3, 5), 65535, np.uint16)
    big = laspy.VLR(user_id="me", record_id=7, description="big", record_data=b"a" * 500)
    las.evlrs = laspy.vlrs.vlrlist.VLRList([big])
    las.write(tmp_path / "e.las")
    assert laspy.read(tmp_path / "e.las").header.start_of_first_evlr > 0
    scan = read_las(tmp_path / "e.las")
    np.testing.assert_array_equal(scan.coord[:, 0], np.arange(5.0))
    np.testing.assert_array_equal(scan.color, np.full((5, 3), 255))


def test_a_model_of_more_than_32_classes_writes_its_classes_to_las(tmp_path):
    """LAS 1.2 point format 3 holds a class in 5 bits: a prediction of class 32 or above was laspy's
    OverflowError, a traceback after the scan's other outputs were written. Such a model's LAS is 1.4 point
    format 7 (8-bit class); 32 classes keep format 3."""
    coord, color = las_file(tmp_path / "in.las", n=50, seed=2)
    scan = read_las(tmp_path / "in.las")
    for classes, version, point_format in ((40, "1.4", 7), (32, "1.2", 3)):
        label = (np.arange(50) % classes).astype(np.uint8)
        write_las(tmp_path / "out.las", scan, scan.color, label, [f"c{i}" for i in range(classes)])
        las = laspy.read(tmp_path / "out.las")
        assert (str(las.header.version), las.header.point_format.id) == (version, point_format)
        # the LAS 1.4 specification: the WKT bit of the global encoding is set for point formats 6-10
        assert las.header.global_encoding.wkt == (point_format == 7)
        np.testing.assert_array_equal(np.asarray(las.classification), label)
        np.testing.assert_allclose(np.stack([las.x, las.y, las.z], 1), coord, rtol=0, atol=1e-6)
        np.testing.assert_array_equal(np.stack([las.red, las.green, las.blue], 1) // 257, color)


def test_a_truncated_laz_is_refused_naming_its_chunk_table(tmp_path):
    """lazrs said only "not a readable LAS/LAZ file (LazrsError: IoError: failed to fill whole buffer)"."""
    if not laspy.LazBackend.detect_available():
        pytest.skip("no LAZ backend (pip install lazrs)")
    las_file(tmp_path / "a.laz", n=2000)
    data = (tmp_path / "a.laz").read_bytes()
    (tmp_path / "cut.laz").write_bytes(data[:len(data) // 2])
    with pytest.raises(ScanError, match=rf"^{re.escape(str(tmp_path / 'cut.laz'))}: truncated LAZ: its header promises "
                                        rf"2,000 points, the file holds {len(data) // 2:,} bytes, where its chunk "
                                        r"table starts at byte [0-9,]+ \(cut short"):
        read_las(tmp_path / "cut.laz")
    assert len(read_las(tmp_path / "a.laz")) == 2000


def test_a_laz_with_a_byte_lost_inside_its_points_is_refused(tmp_path):
    """One byte lost inside the compressed points shifts the chunk table: lazrs read chunk sizes of garbage
    and aborted the whole process ("memory allocation of 34628173824 bytes failed"), the other scans lost."""
    if not laspy.LazBackend.detect_available():
        pytest.skip("no LAZ backend (pip install lazrs)")
    las_file(tmp_path / "a.laz", n=2000)
    data = (tmp_path / "a.laz").read_bytes()
    (tmp_path / "lost.laz").write_bytes(data[:len(data) // 2] + data[len(data) // 2 + 1:])
    with pytest.raises(ScanError, match=rf"^{re.escape(str(tmp_path / 'lost.laz'))}: a damaged LAZ file: its chunk "
                                        r"table at byte [0-9,]+ reads version \d+ and [0-9,]+ chunks, expected version "
                                        r"0 and 1 to 2,000 chunks"):
        read_las(tmp_path / "lost.laz")


def test_a_las_header_counting_more_vlrs_than_fit_is_refused(tmp_path):
    """One flipped byte of the VLR count (4,211,081,216 VLRs before the points at byte 227): laspy read VLRs
    for hours, and predict waited on it with every later input."""
    las_file(tmp_path / "a.las", n=100)
    data = bytearray((tmp_path / "a.las").read_bytes())
    data[103] = 0xFB
    (tmp_path / "a.las").write_bytes(bytes(data))
    with pytest.raises(ScanError, match=rf"^{re.escape(str(tmp_path / 'a.las'))}: a damaged LAS header: it counts "
                                        r"4,211,081,216 VLRs of 54 bytes or more, which do not fit in the 0 bytes "
                                        r"between its header \(227 bytes\) and its points \(byte 227\)"):
        read_las(tmp_path / "a.las")


def test_a_las_header_counting_vlrs_beyond_the_end_of_the_file_is_refused(tmp_path):
    """Bytes inserted into a header moved its fields: 16,777,217 VLRs, points at byte 1.3 GB, in a file of a few
    kB. They fit before the points, not in the file: laspy read VLRs from its end for hours. Here 100,000 VLRs
    (5.4 MB) before points said to be at byte 2^30, in a file of 2,827 bytes."""
    las_file(tmp_path / "a.las", n=100)
    data = bytearray((tmp_path / "a.las").read_bytes())
    data[96:100], data[100:104] = (2**30).to_bytes(4, "little"), (100_000).to_bytes(4, "little")
    (tmp_path / "a.las").write_bytes(bytes(data))
    with pytest.raises(ScanError, match=rf"^{re.escape(str(tmp_path / 'a.las'))}: a damaged LAS header: it counts "
                                        r"100,000 VLRs of 54 bytes or more, which do not fit in the 2,600 bytes "
                                        r"between its header \(227 bytes\) and the end of the file \(byte 2,827; its "
                                        r"points are said to start at byte 1,073,741,824\)"):
        read_las(tmp_path / "a.las")


def test_a_laz_of_no_points_reads_as_an_empty_scan(tmp_path):
    """Its chunk table counts 0 chunks: it was named "a damaged LAZ file ... expected version 0 and 1 to 0
    chunks (bytes lost or added inside the points)"; it is an empty scan, which predict names as one."""
    if not laspy.LazBackend.detect_available():
        pytest.skip("no LAZ backend (pip install lazrs)")
    las_file(tmp_path / "empty.laz", n=0)
    assert len(read_las(tmp_path / "empty.laz")) == 0
    with pytest.raises(ScanError, match=r"empty\.laz: expected points, found none \(empty scan\)$"):
        checked_scan(read_las(tmp_path / "empty.laz"))


def test_zeros_after_the_points_are_padding_and_a_record_after_them_is_not(tmp_path):
    """100 bytes of zeros after the points (a writer's padding) were refused as "the header promises 400
    points, the file holds 403 point records: the header's count is wrong"; a record of a point after them
    is still refused."""
    coord, _ = las_file(tmp_path / "a.las", n=400)
    data = (tmp_path / "a.las").read_bytes()
    (tmp_path / "pad.las").write_bytes(data + bytes(100))
    np.testing.assert_allclose(read_las(tmp_path / "pad.las").coord, coord, rtol=0, atol=1e-6)
    (tmp_path / "more.las").write_bytes(data + bytes(100) + data[-26:])
    with pytest.raises(ScanError, match=r"more\.las: its LAS header promises 400 points, the file holds 404 point "
                                        r"records of 26 bytes"):
        read_las(tmp_path / "more.las")


def _laz_of_fixed_chunks(path):
    """A LAZ file of 120,000 points in chunks of 50,000 (the chunk size in its laszip VLR, laspy's default):
    3 chunks, so a count of 100,001 to 150,000 points fits them; returns the colours."""
    if not laspy.LazBackend.detect_available():
        pytest.skip("no LAZ backend (pip install lazrs)")
    las = laspy.LasData(laspy.LasHeader(point_format=2, version="1.2"))
    las.x, las.y, las.z = np.arange(120_000.0), np.zeros(120_000), np.ones(120_000)
    color = np.random.default_rng(2).integers(0, 256, (120_000, 3)).astype(np.uint16)
    las.red, las.green, las.blue = (color * 257).T
    las.write(path, do_compress=True)
    return color


def _laz_of_varying_chunks(path, chunks=(1000, 1200, 800), seed=3):
    """A LAZ file of chunks of varying size (its laszip VLR's chunk size 0xFFFFFFFF, the point count of each
    chunk in the chunk table), compressed by lazrs from the points laspy lays out; returns the colours."""
    lazrs = pytest.importorskip("lazrs", reason="no lazrs (pip install lazrs)")
    n, rng = sum(chunks), np.random.default_rng(seed)
    las = laspy.LasData(laspy.LasHeader(point_format=3, version="1.2"))
    las.x, las.y, las.z = rng.uniform(0, 10, (3, n))
    color = rng.integers(0, 256, (n, 3)).astype(np.uint16)
    las.red, las.green, las.blue = (color * 257).T
    las.write(path, do_compress=True)
    data = bytearray(path.read_bytes())
    header = laspy.open(path).header
    fixed = next(v for v in header.vlrs if v.user_id == "laszip encoded").record_data_bytes()
    vlr = lazrs.LazVlr.new_for_compression(3, 0, True)
    assert vlr.uses_variable_size_chunks() and len(vlr.record_data()) == len(fixed)
    data[data.index(fixed):data.index(fixed) + len(fixed)] = bytes(vlr.record_data())
    out = io.BytesIO()
    out.write(bytes(data[:header.offset_to_point_data]))  # the chunk table's offset is from the file's start
    compressor = lazrs.LasZipCompressor(out, vlr)
    compressor.reserve_offset_to_chunk_table()
    raw, size, start = las.points.array.tobytes(), las.point_format.size, 0
    for i, k in enumerate(chunks):
        compressor.compress_many(raw[start * size:(start + k) * size])
        if i < len(chunks) - 1:  # done() ends the last one
            compressor.finish_current_chunk()
        start += k
    compressor.done()
    path.write_bytes(out.getvalue())
    return color


# Each LAZ layout: the file's maker and how the refusal describes its chunk table.
_LAZ_LAYOUTS = {
    "fixed": (_laz_of_fixed_chunks, r"counts 3 chunks of 50,000 points \(100,001 to 150,000 points\)"),
    "varying": (_laz_of_varying_chunks, r"counts 3,000 points in 3 chunks of varying size"),
}


@pytest.mark.parametrize("layout, count", [("fixed", 0), ("fixed", 50_000), ("fixed", 100_000), ("fixed", 150_001),
                                           ("fixed", 2_000_000_000), ("varying", 2_500), ("varying", 3_500),
                                           ("varying", 2_000_000_000)])
def test_a_laz_header_counting_other_points_than_its_chunks_is_refused(tmp_path, layout, count):
    """The count check of uncompressed files did not cover LAZ. Chunks of 50,000 points (120,000 in 3): a
    header count of 50,000 read 50,000 points, the other 70,000 dropped with exit code 0; more points than
    the chunks hold was lazrs' "failed to fill whole buffer", 2e9 a MemoryError, 0 "a damaged LAZ file ...
    bytes lost inside the points". Chunks of varying size (1,000, 1,200 and 800 points): a count of 2,500
    read 2,500 points with exit code 0 (the other 500 dropped without a word); 3,500 was lazrs' "IoError:
    failed to fill whole buffer". The file as written reads back whole first."""
    make, chunk_table = _LAZ_LAYOUTS[layout]
    color = make(tmp_path / "a.laz")
    np.testing.assert_array_equal(read_las(tmp_path / "a.laz").color, color)
    data = bytearray((tmp_path / "a.laz").read_bytes())
    data[107:111] = np.array([count], "<u4").tobytes()
    (tmp_path / "b.laz").write_bytes(bytes(data))
    with pytest.raises(ScanError, match=rf"^{re.escape(str(tmp_path / 'b.laz'))}: its LAS header promises "
                                        rf"{count:,} points, its LAZ chunk table {chunk_table}: the header's count "
                                        r"is wrong"):
        read_las(tmp_path / "b.laz")


def laszip_data_at(data: bytes) -> int:
    """The byte where the data of a LAZ file's ``laszip encoded`` VLR starts (after its 54-byte VLR header,
    whose user id starts at byte 2); its fields: compressor, coder, version (6 bytes), options (4), chunk size
    (uint32 at 12), special EVLRs (16), item count (uint16 at 32), then 6 bytes per item."""
    return data.index(b"laszip encoded") - 2 + 54


def test_a_laz_whose_laszip_vlr_lists_no_items_is_refused(tmp_path):
    """A VLR of 0 items (its points of 0 bytes, where the header says 26): lazrs panicked, a PanicException
    (not an Exception) that stopped predict with a traceback, its other inputs lost."""
    pytest.importorskip("lazrs", reason="the check reads the VLR with lazrs")
    las_file(tmp_path / "a.laz", n=100)
    data = bytearray((tmp_path / "a.laz").read_bytes())
    at = laszip_data_at(data)
    assert int.from_bytes(data[at + 32:at + 34], "little") == 2  # POINT10, RGB12 (point format 2)
    data[at + 32:at + 34] = b"\0\0"
    (tmp_path / "a.laz").write_bytes(bytes(data))
    with pytest.raises(ScanError, match=rf"^{re.escape(str(tmp_path / 'a.laz'))}: a damaged LAZ file: its laszip VLR "
                                        r"describes point records of 0 bytes, its header 26 \(point format 2\)"):
        read_las(tmp_path / "a.laz")


def test_a_laz_whose_chunk_size_is_far_beyond_its_points_reads_back(tmp_path):
    """A chunk size of 4,278,239,056 points (one damaged byte of 50,000) in a file of 100 points: lazrs's
    parallel decompressor allocated a whole chunk (111 GB) and the process aborted ("memory allocation ...
    failed", exit 134). The points are read whole, exactly; in a child process, which the abort would end."""
    pytest.importorskip("lazrs", reason="lazrs's decompressors")
    coord, color = las_file(tmp_path / "a.laz", n=100)
    data = bytearray((tmp_path / "a.laz").read_bytes())
    at = laszip_data_at(data)
    assert int.from_bytes(data[at + 12:at + 16], "little") == 50_000
    data[at + 15] = 0xFF
    (tmp_path / "a.laz").write_bytes(bytes(data))
    script = ("import sys, numpy as np; from pointgeope.scans.las import read_las; "
              "s = read_las(sys.argv[1]); np.save(sys.argv[2], np.c_[s.coord, s.color])")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "a.laz"), str(tmp_path / "read.npy")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    read = np.load(tmp_path / "read.npy")
    np.testing.assert_allclose(read[:, :3], coord, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(read[:, 3:], color)


def test_a_las_header_whose_scale_makes_coordinates_infinite_names_the_header(tmp_path):
    """A damaged y scale of -1.8e306: X * scale overflowed with numpy's RuntimeWarning, and the scan was
    refused as points of infinite coordinates to "remove from the file", which holds none."""
    las_file(tmp_path / "a.las", n=50)
    data = bytearray((tmp_path / "a.las").read_bytes())
    data[139:147] = np.float64(-1.8e306).tobytes()  # the y scale factor (x, y, z scales at bytes 131, 139, 147)
    (tmp_path / "a.las").write_bytes(bytes(data))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ScanError, match=rf"^{re.escape(str(tmp_path / 'a.las'))}: a damaged LAS header: its scales "
                                            r"\[0\.001, -1\.8e\+306, 0\.001\] and offsets "
                                            r"\[650000\.0, 4800000\.0, 100\.0\] make coordinates infinite"):
            read_las(tmp_path / "a.las")
        data[163:171] = np.float64("nan").tobytes()  # the y offset (x, y, z offsets at bytes 155, 163, 171)
        data[139:147] = np.float64(0.001).tobytes()
        (tmp_path / "a.las").write_bytes(bytes(data))
        with pytest.raises(ScanError, match=r"offsets \[650000\.0, nan, 100\.0\] make coordinates infinite or NaN"):
            read_las(tmp_path / "a.las")
