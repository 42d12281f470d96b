"""`pointgeope synth` rerun over an OUT where a file or a link to nothing holds the place of an area or room
folder: one line naming it, before anything is written (it was a FileExistsError or NotADirectoryError
traceback, after the rooms before it were drawn again)."""
from __future__ import annotations

import re
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


@pytest.mark.parametrize("finished", [False, True])
@pytest.mark.parametrize("damage", ["Annotations a file", "Annotations emptied", "room file a folder",
                                    "one annotation removed"])
def test_a_room_folder_that_lacks_one_of_its_files_is_one_line_not_kept(tmp_path, capsys, damage, finished):
    """Before: a room folder holding its room file and an `Annotations` that was a file, empty or short of one
    annotation was kept as a written room (`kept Area_2/office_1`, exit 0), or, the manifest there, the dataset
    was "already complete; nothing to do": the raw data synth had reported lacked the room's files."""
    out = tmp_path / "raw"
    assert cli(["synth", str(out), *ARGS]) == 0
    if not finished:
        (out / "synth_manifest.json").unlink()     # an interrupted run: it resumes
    room = out / "Area_2" / "office_1"
    annotations = sorted(p.name for p in (room / "Annotations").iterdir())
    if damage == "Annotations a file":
        shutil.rmtree(room / "Annotations")
        (room / "Annotations").write_text("mine")
        lacks = "Annotations"
    elif damage == "Annotations emptied":
        for name in annotations:
            (room / "Annotations" / name).unlink()
        lacks = f"Annotations/.* and {len(annotations) - 1} more annotation files"
    elif damage == "room file a folder":
        (room / "office_1.txt").unlink()
        (room / "office_1.txt").mkdir()
        lacks = "office_1.txt"
    else:
        (room / "Annotations" / annotations[1]).unlink()
        lacks = f"Annotations/{annotations[1]}"
    capsys.readouterr()
    assert cli(["synth", str(out), *ARGS]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.fullmatch(
        f"pointgeope synth: error: {re.escape(str(room))}: a room folder without {lacks}, not one synth wrote "
        r"whole; remove it \(synth writes it again\), or choose another OUT", err[0]), err
    if damage == "Annotations emptied":
        assert err[0].split("without Annotations/")[1].split(" ")[0] in annotations, err
    shutil.rmtree(room)
    assert cli(["synth", str(out), *ARGS]) == 0
    assert "wrote Area_2/office_1" in capsys.readouterr().out
    assert sorted(p.name for p in (room / "Annotations").iterdir()) == annotations
