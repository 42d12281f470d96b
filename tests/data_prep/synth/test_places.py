"""`pointgeope synth` rerun over an OUT where a file or a link to nothing holds the place of an area or room
folder: one line naming it, before anything is written (it was a FileExistsError or NotADirectoryError
traceback, after the rooms before it were drawn again)."""
from __future__ import annotations

import shutil

import pytest

from pointgeope.cli import main as cli

ARGS = ["--size", "tiny", "--areas", "2", "--rooms-per-area", "1", "--density", "10"]


@pytest.mark.parametrize(("place", "kind", "what"), [
    ("Area_2", "area", "file"), ("Area_2", "area", "link to nothing"), ("Area_2", "area", "link to itself"),
    ("Area_2/office_1", "room", "file"), ("Area_2/office_1", "room", "link to nothing"),
])
def test_a_file_or_a_dead_link_in_place_of_a_folder_is_one_line(tmp_path, capsys, place, kind, what):
    out = tmp_path / "raw"
    assert cli(["synth", str(out), *ARGS]) == 0
    (out / "synth_manifest.json").unlink()      # an interrupted run: it resumes
    target = out / place
    shutil.rmtree(target)
    if what == "file":
        target.write_text("mine")
    else:
        target.symlink_to(target if what == "link to itself" else tmp_path / "nowhere")
    capsys.readouterr()
    assert cli(["synth", str(out), *ARGS]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    named = "a file" if what == "file" else "a link that leads to no folder"
    assert err == [f"pointgeope synth: error: {target}: {named} where synth writes the {kind}'s folder; remove it, "
                   "or choose another OUT"], err
    assert captured.out == ""                        # refused before any room is drawn
    assert target.is_symlink() or target.read_text() == "mine"


@pytest.mark.parametrize("left", [[], ["Annotations"], ["office_1.txt"]])
def test_a_room_folder_synth_did_not_write_whole_is_one_line_not_kept(tmp_path, capsys, left):
    """Before: an empty Area_2/office_1 (or one holding a part of a room) was "kept" as a written room and
    synth said it had made 2 rooms, exit 0: the room was missing from the raw data it had just reported."""
    out = tmp_path / "raw"
    assert cli(["synth", str(out), *ARGS]) == 0
    (out / "synth_manifest.json").unlink()
    room = out / "Area_2" / "office_1"
    for child in room.iterdir():
        if child.name not in left:
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    capsys.readouterr()
    assert cli(["synth", str(out), *ARGS]) == 2
    missing = " or ".join(name for name in ("office_1.txt", "Annotations") if name not in left)
    assert capsys.readouterr().err.strip().splitlines() == [
        f"pointgeope synth: error: {room}: a room folder without {missing}, not one synth wrote whole; remove it "
        "(synth writes it again), or choose another OUT"]
    shutil.rmtree(room)
    assert cli(["synth", str(out), *ARGS]) == 0
    assert "wrote Area_2/office_1" in capsys.readouterr().out
