"""data_prep/zip_areas.py: a zip inside RAW holding an area's rooms is refused whatever its name, unless the area is
unpacked beside it; prepare opens no zip inside RAW, so such an area vanished from the folds without a word
where its name was not one ZIPPED_AREA knows (S3DIS_Area_3.zip, Area_3_1.zip, the whole dataset's zip)."""
from __future__ import annotations

import re
import subprocess
from shlex import split

import pytest

from data_prep.source import open_source
from data_prep.zip_areas import zipped_areas
from pointgeope.cli import main as cli
from tests.data_prep.raw_trees import write_tree, zip_tree

ROOM = b"1 2 3 4 5 6\n"
DATASET = "Stanford3dDataset_v1.2_Aligned_Version"


def _inner(tmp_path, *members: str) -> bytes:
    return zip_tree(tmp_path / "inner.zip", dict.fromkeys(members, ROOM)).read_bytes()


def test_the_areas_of_a_zip_are_those_of_its_rooms(tmp_path):
    path = tmp_path / "x.zip"
    path.write_bytes(_inner(tmp_path, f"{DATASET}/Area_3/office_1/Annotations/wall_1.txt", "area_5/hall_2/a.txt",
                            "Area_6/readme.txt", "__MACOSX/Area_4/office_1/._a.txt", "Area_2\\r\\Annotations\\a.txt"))
    assert zipped_areas(path) == {2, 3, 5}
    (tmp_path / "page.zip").write_bytes(b"<html>404</html>")
    assert zipped_areas(tmp_path / "page.zip") == set() and zipped_areas(tmp_path / "none.zip") == set()


@pytest.mark.parametrize("name, member", [
    ("S3DIS_Area_3.zip", "Area_3/t/Annotations/wall_1.txt"), ("Area_3_1.zip", "Area_3/t/Annotations/wall_1.txt"),
    ("Area_3 (copy).ZIP", "Area_3/t/Annotations/wall_1.txt"), ("Area_3~.zip", "Area_3/t/Annotations/wall_1.txt"),
    (f"{DATASET}.zip", f"{DATASET}/Area_3/t/Annotations/wall_1.txt")])
def test_a_zip_of_an_area_without_its_folder_is_refused_whatever_its_name(tmp_path, capsys, name, member):
    raw = write_tree(tmp_path / "raw", {"Area_1/r/Annotations/wall_1.txt": ROOM, name: _inner(tmp_path, member)})
    assert cli(["prepare", str(raw), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"pointgeope prepare: error: {raw}: {name} is the zip of an area "
                                               "without a folder here, and prepare opens no zip inside RAW")
    assert not (tmp_path / "out" / "folds.json").exists()


def test_a_zip_beside_its_unpacked_area_or_of_no_area_is_left_alone(tmp_path):
    raw = write_tree(tmp_path / "raw", {"Area_1/r/Annotations/wall_1.txt": ROOM,
                                        "Area_3/t/Annotations/wall_1.txt": ROOM,
                                        "S3DIS_Area_3.zip": _inner(tmp_path, "Area_3/t/Annotations/wall_1.txt"),
                                        "code.zip": _inner(tmp_path, "src/area_5.py", "Area_6/notes.txt")})
    assert [(r.area, r.name) for r in open_source(raw).rooms()] == [("Area_1", "r"), ("Area_3", "t")]


def test_a_zip_named_for_an_area_that_cannot_be_read_is_named_in_a_warning(tmp_path, capsys):
    """``S3DIS_Area_2.zip`` cut short (a download stopped halfway: no end record, so no member list to read) was
    passed over without a word, its area left out of the folds, where a tar of that name is named in a warning.
    It is named too, with the unzip command that unpacks the whole zip once downloaded again; a readable zip of
    that name holding no area (its members say so) is left alone."""
    whole = _inner(tmp_path, "Area_2/t/Annotations/wall_1.txt")
    raw = write_tree(tmp_path / "raw", {"Area_1/r/Annotations/wall_1.txt": ROOM, "S3DIS_Area_2.zip": whole[:40],
                                        "area_3_notes.zip": _inner(tmp_path, "notes.txt")})
    assert cli(["prepare", str(raw), str(tmp_path / "out")]) == 0
    zipped = raw / "S3DIS_Area_2.zip"
    warning = (f"warning: {raw}: S3DIS_Area_2.zip may be an archive of Area_2, which has no folder here (by its name; "
               "prepare opens no archive inside RAW, so the area would be left out of the folds): if it holds the "
               "area, download it again (it is no readable zip: cut short?), unpack it beside the other areas "
               f"(unzip {zipped} -d {raw}) and prepare again")
    err = capsys.readouterr().err.splitlines()
    assert warning in err and not any("area_3_notes" in line for line in err)
    zipped.write_bytes(whole)  # downloaded again: the command of the warning unpacks the area
    subprocess.run(split(re.search(r"\((unzip .*)\) and prepare again$", warning).group(1)), check=True)
    zipped.unlink()
    assert [(r.area, r.name) for r in open_source(raw).rooms()] == [("Area_1", "r"), ("Area_2", "t")]


def test_an_areas_zip_cut_short_says_to_download_it_again(tmp_path, capsys):
    """``Area_2.zip`` cut short (wget or curl stopped: the file keeps its name) whose area has no folder: the line
    said only to unzip it, which fails on a zip without its end record; it now says to download it again first,
    naming the one cut short among several."""
    whole = _inner(tmp_path, "Area_2/t/Annotations/wall_1.txt")
    raw = write_tree(tmp_path / "raw", {"Area_1/r/Annotations/wall_1.txt": ROOM, "Area_2.zip": whole[:40],
                                        "Area_3.zip": _inner(tmp_path, "Area_3/t/Annotations/wall_1.txt")})
    assert cli(["prepare", str(raw), str(tmp_path / "out")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (f"pointgeope prepare: error: {raw}: Area_2.zip, Area_3.zip are the zips of areas without a folder "
                    "here, and prepare opens no zip inside RAW: their areas would be left out of the folds; download "
                    "Area_2.zip again (no readable zip: cut short?) and unpack them there "
                    f"(unzip {raw}/Area_2.zip -d {raw}), or remove them to prepare the other areas")
    (raw / "Area_3.zip").unlink()
    assert cli(["prepare", str(raw), str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().endswith(f"its area would be left out of the folds; download it again (no "
                                                    f"readable zip: cut short?) and unpack it there (unzip "
                                                    f"{raw}/Area_2.zip -d {raw}), or remove it to prepare the other "
                                                    "areas")
