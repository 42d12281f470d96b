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
