"""Tests of the notes `pointgeope predict` prints of a scan (pointgeope/engine/predict_record.py: print_notes)."""
from __future__ import annotations

import numpy as np

from pointgeope.cli import main as cli


def _raw_room(folder, files: int, bad: int):
    """A raw S3DIS room of ``files`` annotation files, each of 60 good lines then ``bad`` lines of 2 values (each
    dropped with a message; prepare's parse says the first 10 of a file and counts the rest in one line)."""
    (folder / "Annotations").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in ("chair_1", "floor_1", "wall_1")[:files]:
        good = np.c_[rng.random((60, 3)) * 3, rng.integers(0, 256, (60, 3))]
        (folder / "Annotations" / f"{name}.txt").write_text(
            "".join(f"{x:.3f} {y:.3f} {z:.3f} {r:.0f} {g:.0f} {b:.0f}\n" for x, y, z, r, g, b in good)
            + "1.0 2.0\n" * bad)
    return folder


def test_a_scans_notes_past_the_twentieth_are_counted(tiny_run, tmp_path, capsys):
    """A raw room whose parse says 33 notes (11 a file: 10 dropped lines, then the rest counted): predict prints
    the first 20 and how many more; it printed 20 and nothing of the other 13 (wall_1.txt's were never named)."""
    room = _raw_room(tmp_path / "room", files=3, bad=12)
    assert cli(["predict", str(tiny_run), str(room), "--out", str(tmp_path / "pred")]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: ")]
    said = [line for line in notes if "dropped: expected 6 values, got 2" in line or "more (all counted)" in line]
    assert len(said) == 20 and said == notes[:20]
    assert said[0] == f"note: {room}/Annotations/chair_1.txt:61: dropped: expected 6 values, got 2: '1.0 2.0'"
    assert notes[20] == "note: and 13 more notes"


def test_a_scans_notes_are_all_printed_up_to_twenty(capsys):
    from pointgeope.engine.predict_record import print_notes

    for count in (0, 1, 20):
        print_notes([f"n{i}" for i in range(count)])
        assert capsys.readouterr().out.splitlines() == [f"note: n{i}" for i in range(count)]
    print_notes([f"n{i}" for i in range(22)])
    assert capsys.readouterr().out.splitlines() == [f"note: n{i}" for i in range(20)] + ["note: and 2 more notes"]
