"""Tests of pointgeope/scans/scan.py: colour ranges and the checks every reader applies."""
from __future__ import annotations

import numpy as np
import pytest

from pointgeope.scans.scan import (
    Scan,
    ScanError,
    checked_scan,
    color_to_uint8,
    one_colour_note,
)


def test_colour_ranges():
    c8 = np.array([[0, 128, 255]], dtype=np.uint8)
    np.testing.assert_array_equal(color_to_uint8(c8, "a"), c8)
    np.testing.assert_array_equal(color_to_uint8(c8.astype(np.uint16) * 257, "a"), c8)   # 16 bit
    np.testing.assert_array_equal(color_to_uint8(np.array([[0.0, 0.5, 1.0]]), "a"), [[0, 128, 255]])  # 0..1
    np.testing.assert_array_equal(color_to_uint8(np.array([[0.0, 1.0, 1.0]]), "a"), [[0, 1, 1]])  # whole: 0..255
    np.testing.assert_array_equal(color_to_uint8(np.array([[0.0, 1.0, 1.0]]), "a", unit_float=True),
                                  [[0, 255, 255]])
    with pytest.raises(ScanError, match=r"^a: colour values from -1 to 3"):
        color_to_uint8(np.array([[-1.0, 2.0, 3.0]]), "a")
    with pytest.raises(ScanError, match="NaN"):
        color_to_uint8(np.array([[np.nan, 2.0, 3.0]]), "a")


def test_colour_errors_say_what_to_do():
    normals = np.array([[-0.99962, 0.5, 0.999003]])  # columns 4-6 of an `x y z nx ny nz` file
    with pytest.raises(ScanError, match=r"^n.xyz: colour values from -0.99962 to 0.999003; expected 0..255, "
                                        r"0..65535 or 0..1; if these are not colours \(normals, intensity\), keep "
                                        r"only x y z \(and r g b\) in the file, in that order$"):
        color_to_uint8(normals, "n.xyz")
    with pytest.raises(ScanError, match=r"^f.ply: float colour values up to 230; expected 0..1 \(a float colour is "
                                        r"a fraction of full intensity\): divide them by 255, or store them as uchar "
                                        r"0..255$"):
        color_to_uint8(np.array([[10.0, 230.0, 3.0]], dtype=np.float32), "f.ply", unit_float=True)


def test_checked_scan_names_the_file_and_the_first_bad_point():
    coord = np.zeros((5, 3))
    coord[3, 2] = np.inf
    coord[4, 0] = np.nan
    with pytest.raises(ScanError,
                       match=r"^s\.ply: 2 points have NaN or infinite coordinates \(the first is point 3"):
        checked_scan(Scan("s", "s.ply", coord))
    with pytest.raises(ScanError, match=r"^e.txt: expected points, found none"):
        checked_scan(Scan("e", "e.txt", np.zeros((0, 3))))
    with pytest.raises(ScanError, match=r"expected coordinates of shape \(N, 3\), got \(4, 2\)"):
        checked_scan(Scan("w", "w.npy", np.zeros((4, 2))))
    with pytest.raises(ScanError, match=r"expected color uint8 of shape \(2, 3\)"):
        checked_scan(Scan("c", "c.npy", np.zeros((2, 3)), color=np.zeros((2, 3))))
    ok = Scan("o", "o.npy", np.zeros((2, 3)), color=np.zeros((2, 3), np.uint8))
    assert checked_scan(ok) is ok and len(ok) == 2


def test_scans_do_not_import_the_model_or_the_engine():
    """The scan readers and writers sit at the data end: they never import pointgeope.model or .engine."""
    import pointgeope.scans
    from tests.conftest import module_imports

    imports = module_imports(pointgeope.scans)
    assert len(imports) >= 7
    for path, name in ((path, name) for path, names in imports.items() for name in names):
        assert not name.startswith(("pointgeope.model", "pointgeope.engine", "torch")), f"{path}: imports {name}"


def _colours_0_255(n=2000, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, 3)).astype(np.float64)


@pytest.mark.parametrize("stray", [255.4, 256.0, 300.0, 65535.0])
def test_one_stray_value_above_255_does_not_make_a_scan_16_bit(stray):
    """The maximum alone chose 16 bit: one 255.4 (float noise) or 256 divided every colour by 257 (black)."""
    values = _colours_0_255()
    values[7, 0] = stray
    expected = np.rint(np.minimum(values, 255)).astype(np.uint8)
    notes = []
    np.testing.assert_array_equal(color_to_uint8(values, "s.txt", notes=notes), expected)
    if stray < 255.5:  # rounds to 255: nothing to say
        assert notes == []
    else:
        assert notes == [f"s.txt: colours outside 0..255 clipped: 1 colour value of 1 of 2,000 points (first at "
                         f"point 7: {stray:g} {values[7, 1]:g} {values[7, 2]:g}); too few above 255 for 16-bit "
                         "colours; if the file's colours have another range, rescale them to 0..255"]


def test_16_bit_colours_are_divided_by_257_and_said_unless_the_format_declares_them():
    c8 = _colours_0_255(seed=1).astype(np.uint16)
    c8[:300] = 0  # black points (0 in 16 bit too) do not count against 16 bit
    values = c8 * 257
    notes = []
    np.testing.assert_array_equal(color_to_uint8(values, "s.npy", notes=notes), c8)
    above = int(np.count_nonzero(values > 255))
    assert notes == [f"s.npy: colours read as 16 bit (max {values.max()}, {above:,} of 6,000 values above 255): "
                     "divided by 257; if they are 0..255, clip them to 255"]
    notes = []
    np.testing.assert_array_equal(color_to_uint8(values, "s.las", notes=notes, declared_16bit=True), c8)
    assert notes == []


def test_8_bit_colours_shifted_into_the_high_byte_read_back_exactly():
    """``c << 8`` (low byte 0, as many LAS writers store 8-bit colours) was divided by 257: every ``c`` above
    128 read one level low (200 -> 199), declared 16 bit or not. The exact answer is the high byte."""
    c8 = _colours_0_255(seed=3).astype(np.uint16)
    values = c8 << 8
    assert (c8 > 128).any()
    for source, declared in (("s.las", True), ("s.npy", False)):
        notes = []
        np.testing.assert_array_equal(color_to_uint8(values, source, notes=notes, declared_16bit=declared),
                                      values >> 8)
    assert notes == [(f"s.npy: colours read as 16 bit (max {values.max()}, {np.count_nonzero(values > 255):,} of "
                      "6,000 values above 255): divided by 256 (every value's low byte is 0: 8-bit colours stored "
                      "as c << 8); if they are 0..255, clip them to 255")]
    values[0, 0] += 1  # one low byte set: a 16-bit file, divided by 257
    expected = np.floor(values / 257 + 0.5)
    np.testing.assert_array_equal(color_to_uint8(values, "s.las", declared_16bit=True), expected)


def _dim_16_bit(n=2000, seed=2):
    """``(n, 3)`` uint16 colours of a dim 16-bit scan: 70 % of the points at the sensor's floor (20..199, under
    1/255 of full intensity), the others lit (8000..65534)."""
    rng = np.random.default_rng(seed)
    dark = (rng.random(n) < 0.7)[:, None]
    return np.where(dark, rng.integers(20, 200, (n, 3)), rng.integers(8000, 65535, (n, 3))).astype(np.uint16)


def test_a_dim_scan_whose_format_declares_16_bit_is_read_as_16_bit():
    """LAS or a PLY ushort is 16 bit by its format: most values 1..255 (a night scan) were read as 8 bit, the
    dark points grey and every lit value clipped to 255."""
    values = _dim_16_bit()
    notes = []
    color = color_to_uint8(values, "night.las", notes=notes, declared_16bit=True)
    np.testing.assert_array_equal(color, np.floor(values / 257 + 0.5).astype(np.uint8))
    assert notes == [] and color[values.max(axis=1) < 200].max() == 1   # 199 / 257 = 0.77 -> 1
    stored_8bit = np.random.default_rng(3).integers(0, 256, (500, 3)).astype(np.uint16)  # 8-bit values as they are
    np.testing.assert_array_equal(color_to_uint8(stored_8bit, "s.las", declared_16bit=True), stored_8bit)


def test_an_8_bit_file_of_256_overshoots_is_clipped_not_read_as_16_bit():
    """A white object written by a 0..1 -> 8-bit converter that multiplies by 256 (white -> 256) has most of its
    values at 256: read as 16 bit it turned black (256 / 257 -> 1); no 16-bit file stops below 511.5."""
    rng = np.random.default_rng(4)
    values = rng.integers(217, 256, (1000, 3)).astype(np.float64)
    values[:700] = 256
    notes = []
    np.testing.assert_array_equal(color_to_uint8(values, "board.txt", notes=notes), np.minimum(values, 255))
    assert notes == ["board.txt: colours outside 0..255 clipped: 2,100 colour values of 700 of 1,000 points (first "
                     "at point 0: 256 256 256); none reaches 511.5 for 16-bit colours; if the file's colours have "
                     "another range, rescale them to 0..255"]
    values[:700] = 512  # a 16-bit file of near-black points (2/255 of full intensity): 16 bit
    np.testing.assert_array_equal(color_to_uint8(values, "dark16.txt"), np.floor(values / 257 + 0.5))


@pytest.mark.parametrize("noise", [1.0000001, np.float32(1) + np.finfo(np.float32).eps, 1 + 2**-10])
@pytest.mark.parametrize("unit_float", [None, True])
def test_a_0_1_scan_with_rounding_noise_above_1_is_read_as_0_1(noise, unit_float):
    """A normalised export's white written one float32 or float16 step above 1 (``1.0000001``): judged by the
    values, the scan was read as 0..255 (every colour 0 or 1, black) without a word; a PLY float colour was
    refused ("float colour values up to 1; expected 0..1")."""
    rng = np.random.default_rng(0)
    values = rng.uniform(0, 1, (200, 3))
    values[7, 1] = noise
    notes = []
    color = color_to_uint8(values, "s.ply", unit_float=unit_float, notes=notes)
    expected = np.minimum(np.floor(255 * values + 0.5), 255)  # round half up; no value is at .5 exactly here
    np.testing.assert_array_equal(color, expected)
    assert color[7, 1] == 255 and notes == []


def test_a_0_255_scan_just_above_the_0_1_noise_is_read_as_0_255():
    """Past the noise (1.01) a fractional file is 0..255, as before: its colours are dark, not scaled."""
    values = np.array([[0.2, 0.7, 1.01], [0.0, 0.5, 0.9]])
    np.testing.assert_array_equal(color_to_uint8(values, "s.txt"), [[0, 1, 1], [0, 0, 1]])


@pytest.mark.parametrize("value", [0, 255])
def test_a_scan_of_one_colour_gets_a_note(value):
    """A LAS of point format 3 from a scanner without a camera (RGB all 0, or 65535 -> 255) was predicted by
    a colour model as a black (or white) room, without a word (predict prints the note for such a model)."""
    coord = np.random.default_rng(0).random((50, 3))
    note = (f"s.las: every point has the colour ({value}, {value}, {value}): a file with colour fields but no "
            "colours? a model trained with colour predicts it as a room of that colour; predict it with a "
            "geometry-only model (trained with data.color=false model.in_channels=3)")
    assert one_colour_note(Scan("s", "s.las", coord, np.full((50, 3), value, np.uint8))) == note
    varied = np.full((50, 3), value, np.uint8)
    varied[7, 1] = 1
    for color, n in ((varied, 50), (np.zeros((1, 3), np.uint8), 1), (None, 50)):
        assert one_colour_note(Scan("s", "s.las", coord[:n], color)) is None


@pytest.mark.parametrize("suffix", [".npy", ".ply"])
def test_a_signalling_nan_is_one_line_without_numpys_warning(tmp_path, suffix):
    """A float32 signalling NaN (bits 0x7f800001) in a scan's coordinates: numpy's float64 cast warned
    "RuntimeWarning: invalid value encountered in cast" (with the source line) before the ScanError's line."""
    import warnings

    from pointgeope.scans.sources import ScanRef, read_scan

    coord = np.arange(12, dtype="<f4").reshape(4, 3)
    coord.view(np.uint32)[2, 1] = 0x7F800001
    path = tmp_path / f"s{suffix}"
    if suffix == ".npy":
        np.save(path, coord)
    else:
        path.write_bytes(b"ply\nformat binary_little_endian 1.0\nelement vertex 4\nproperty float x\n"
                         b"property float y\nproperty float z\nend_header\n" + coord.tobytes())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ScanError, match=r"1 point has NaN or infinite coordinates \(the first is point 2"):
            read_scan(ScanRef(path, suffix[1:], "s"))
