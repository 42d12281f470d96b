"""data_prep/synth/write.py: the vectorised formatter against "%"-formatting, defects, atomic room folders."""
from __future__ import annotations

import re

import numpy as np
import pytest

from data_prep.synth.write import Defect, format_lines, plant, remove_stale, room_files, write_room

FMT = "%.3f %.3f %.3f %d %d %d\n"


def _reference(xyz_mm: np.ndarray, rgb: np.ndarray) -> bytes:
    """The brute-force text: Python's "%" on every line."""
    return "".join(FMT % (*(v / 1000 for v in c), *k)
                   for c, k in zip(xyz_mm.tolist(), rgb.tolist(), strict=True)).encode()


@pytest.mark.parametrize("bound", [1, 999, 1001, 250_000, 99_999_999, 10**12])
def test_format_lines_equals_percent_formatting(bound):
    # bounds cover: only decimals, the 0/1 boundary, negative numbers, the lookup-table path (< 10^5 m)
    # and the per-digit path for wider numbers
    rng = np.random.default_rng(bound)
    xyz = rng.integers(-bound, bound + 1, size=(3000, 3))
    xyz[:6] = [[0, -1, 1], [-999, 999, -1000], [1000, -1001, 0], [bound, -bound, 5], [-5, 0, 0], [10, -10, 100]]
    rgb = rng.integers(0, 256, size=(3000, 3))
    rgb[:2] = [[0, 255, 9], [10, 99, 100]]
    text, lengths = format_lines(xyz, rgb.astype(np.uint8))
    assert text == _reference(xyz, rgb)
    assert lengths.tolist() == [len(line) + 1 for line in text.split(b"\n")[:-1]]


def test_format_lines_chunks_join_exactly(monkeypatch):
    import data_prep.synth.write as sw

    monkeypatch.setattr(sw, "_CHUNK", 7)  # chunks of different digit widths
    xyz = np.array([[5, 6, 7]] * 10 + [[123_456, -7, 8]] * 10)
    rgb = np.full((20, 3), 17)
    text, lengths = format_lines(xyz, rgb)
    assert text == _reference(xyz, rgb)
    assert lengths.sum() == len(text) and len(lengths) == 20


def test_format_lines_empty_and_bad_input():
    assert format_lines(np.zeros((0, 3), np.int64), np.zeros((0, 3), np.uint8))[0] == b""
    with pytest.raises(ValueError, match=r"integer millimetres of shape \(N, 3\), got float64"):
        format_lines(np.zeros((2, 3)), np.zeros((2, 3), np.uint8))
    with pytest.raises(ValueError, match=re.escape("in 0..255")):
        format_lines(np.zeros((2, 3), np.int64), np.full((2, 3), 256))


def test_plant_control_byte_inside_the_second_number():
    text = b"1.000 2.345 3.000 1 2 3\n4.000 -15.678 6.000 4 5 6\n7.000 8.000 9.000 7 8 9\n"
    planted, record = plant("control_byte", text, fraction=0.5)
    assert record == {"line": 2, "original": "4.000 -15.678 6.000 4 5 6", "written": "4.000 -15.6\x1078 6.000 4 5 6"}
    assert planted.split(b"\n")[1] == b"4.000 -15.6\x1078 6.000 4 5 6"
    assert planted.replace(b"\x10", b"") == text
    assert plant("control_byte", text, fraction=0.999)[1]["line"] == 3


def test_plant_line_endings_and_bad_kind():
    text = b"1.000 2.000 3.000 1 2 3\n4.000 5.000 6.000 4 5 6\n"
    assert plant("crlf", text, 0.0)[0] == text.replace(b"\n", b"\r\n")
    assert plant("trailing_spaces", text, 0.0)[0] == text.replace(b"\n", b"  \n")
    with pytest.raises(ValueError, match=r"expected a text defect .* got 'tabs'"):
        plant("tabs", text, 0.0)


def _room():
    xyz = np.arange(15).reshape(5, 3) * 1001
    rgb = np.arange(15).reshape(5, 3)
    text, lengths = format_lines(xyz, rgb)
    return text, lengths, [("wall_1.txt", 2), ("stairs_1.txt", 3)]


def test_room_files_split_the_room_text_and_plant_defects():
    text, lengths, files = _room()
    contents, records = room_files("Area_2", "office_1", files, text, lengths,
                                   [Defect("crlf", "Area_2", "office_1", "stairs_1.txt")])
    lines = text.split(b"\n")
    assert contents["office_1.txt"] == text
    assert contents["Annotations/wall_1.txt"] == b"\n".join(lines[:2]) + b"\n"
    assert contents["Annotations/stairs_1.txt"] == (b"\n".join(lines[2:5]) + b"\n").replace(b"\n", b"\r\n")
    assert records == [{"kind": "crlf", "file": "Area_2/office_1/Annotations/stairs_1.txt", "line": None,
                        "lines": "all"}]
    with pytest.raises(ValueError, match=r"defects planned in \['door_1.txt'\]"):
        room_files("Area_2", "office_1", files, text, lengths, [Defect("crlf", "Area_2", "office_1", "door_1.txt")])
    with pytest.raises(ValueError, match="expected 5 lines for Area_2/office_1, got 4"):
        room_files("Area_2", "office_1", files, text, lengths[:4], [])


def test_write_room_is_all_or_nothing(tmp_path, monkeypatch):
    text, lengths, files = _room()
    contents, _ = room_files("Area_1", "office_1", files, text, lengths, [])
    area = tmp_path / "Area_1"
    area.mkdir()
    real_write = type(tmp_path).write_bytes
    calls = []

    def failing_write(path, data):  # die on the second file, as an interrupted run would
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_write(path, data)

    monkeypatch.setattr(type(tmp_path), "write_bytes", failing_write)
    with pytest.raises(KeyboardInterrupt):
        write_room(area / "office_1", contents)
    monkeypatch.undo()
    assert not (area / "office_1").exists()
    assert [p.name for p in remove_stale(area)] == [calls[0].parent.name]
    assert list(area.iterdir()) == []
    write_room(area / "office_1", contents)
    assert sorted(str(p.relative_to(area / "office_1")) for p in (area / "office_1").rglob("*.txt")) == \
        ["Annotations/stairs_1.txt", "Annotations/wall_1.txt", "office_1.txt"]
    assert (area / "office_1" / "office_1.txt").read_bytes() == text
