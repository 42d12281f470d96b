"""An area left in RAW packed in a format prepare does not open (``Area_2.tar.gz``, ``Area_2.7z``, ``Area_2.rar``) or
half downloaded (``Area_2.zip.part``) was passed over without a word when Area_2 had no folder: the area vanished
from the folds. Such a file is refused in one line naming it, as an area's zip is, and left alone beside its folder."""
from __future__ import annotations

import io
import json
import re
import subprocess
import tarfile
from shlex import split

import pytest

from data_prep.source import SourceError, open_source
from pointgeope.cli import main as cli
from tests.data_prep.raw_trees import write_tree, zip_tree

WALL = b"1 2 3 4 5 6\n"
AREA_1 = {"Area_1/r/Annotations/wall_1.txt": WALL}


def _tar(mode: str) -> bytes:
    """A tar (compressed by ``mode``: ``""``, ``"gz"``, ``"bz2"``, ``"xz"``) of ``Area_2/t/Annotations/wall_1.txt``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=f"w:{mode}") as archive:
        info = tarfile.TarInfo("Area_2/t/Annotations/wall_1.txt")
        info.size = len(WALL)
        archive.addfile(info, io.BytesIO(WALL))
    return buffer.getvalue()


def _refused(capsys, raw, out) -> str:
    assert cli(["prepare", str(raw), str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and not (out / "folds.json").exists()
    return err[0]


@pytest.mark.parametrize(("name", "mode", "flag"), [
    ("Area_2.tar.gz", "gz", "-xzf"), ("Area_2.tgz", "gz", "-xzf"), ("Area_2.tar", "", "-xf"),
    ("area_2.TAR.BZ2", "bz2", "-xjf"), ("Area_2.tar.xz", "xz", "-xJf"), ("Area_2 (1).tar.gz", "gz", "-xzf"),
    ("Area_2 - Copy.tgz", "gz", "-xzf"), ("Area_2_Aligned.tar", "", "-xf")])
def test_an_area_left_in_a_tar_is_refused_with_the_command_that_unpacks_it(tmp_path, capsys, name, mode, flag):
    """The line names the tar and gives the tar command for its compression; running that command and preparing
    again reads the area's room."""
    raw = write_tree(tmp_path / "raw", {**AREA_1, name: _tar(mode)})
    line = _refused(capsys, raw, tmp_path / "out")
    assert line.startswith(f"pointgeope prepare: error: {raw}: {name} is an area packed in a format prepare does "
                           "not open, without a folder here: its area would be left out of the folds")
    assert line.endswith("or remove it to prepare the other areas")
    command = split(re.search(r"with the tool for its format \((.*)\), or remove", line).group(1))
    assert command == ["tar", flag, str(raw / name), "-C", str(raw)]
    subprocess.run(command, check=True)
    (raw / name).unlink()
    assert [(r.area, r.name) for r in open_source(raw).rooms()] == [("Area_1", "r"), ("Area_2", "t")]


@pytest.mark.parametrize(("name", "command"), [
    ("Area_2.7z", ["7z", "x", "{raw}/Area_2.7z", "-o{raw}"]),
    ("Area_2 (1).7z", ["7z", "x", "{raw}/Area_2 (1).7z", "-o{raw}"]),
    ("AREA 2.RAR", ["unrar", "x", "{raw}/AREA 2.RAR", "{raw}/"])])
def test_an_area_left_in_a_7z_or_rar_is_refused_with_its_tool(tmp_path, capsys, name, command):
    raw = write_tree(tmp_path / "raw", {**AREA_1, name: b"x"})
    line = _refused(capsys, raw, tmp_path / "out")
    assert f"{raw}: {name} is an area packed in a format prepare does not open" in line
    given = split(re.search(r"with the tool for its format \((.*)\), or remove", line).group(1))
    assert given == [part.format(raw=raw) for part in command]


@pytest.mark.parametrize("name", ["Area_2.zip.part", "Area_2.zip.crdownload", "Area_2.zip.download",
                                  "Area_2 (1).zip.crdownload", "area_2.tar.gz.part", "Area_2.7z.part",
                                  "Area_2.zip.zip.part"])
def test_a_partial_download_of_an_area_is_refused_saying_to_finish_it(tmp_path, capsys, name):
    raw = write_tree(tmp_path / "raw", {**AREA_1, name: b"PK"})
    line = _refused(capsys, raw, tmp_path / "out")
    assert line == (f"pointgeope prepare: error: {raw}: {name} is a partial download of an area's archive without a "
                    "folder here: its area would be left out of the folds; finish or redo the download and unpack "
                    "it beside the other areas, or remove it to prepare the other areas")


def test_several_partial_downloads_are_named_in_the_plural(tmp_path):
    """The line said of two "are partial downloads of an area's archive ...: the area would be left out ...;
    finish or redo the download and unpack it"."""
    raw = write_tree(tmp_path / "raw", {**AREA_1, "Area_3.7z.part": b"x", "Area_2.zip.part": b"x"})
    with pytest.raises(SourceError) as err:
        open_source(raw).rooms()
    assert str(err.value) == (f"{raw}: Area_2.zip.part, Area_3.7z.part are partial downloads of areas' archives "
                              "without a folder here: their areas would be left out of the folds; finish or redo the "
                              "downloads and unpack them beside the other areas, or remove them to prepare the other "
                              "areas")


def test_many_packed_areas_are_named_five_then_counted(tmp_path):
    """Six areas packed: the line named every one (the zips' line shows five, then how many more)."""
    raw = write_tree(tmp_path / "raw", {**AREA_1, **{f"Area_{k}.7z": b"x" for k in range(2, 8)}})
    with pytest.raises(SourceError, match=rf"^{re.escape(str(raw))}: Area_2\.7z, Area_3\.7z, Area_4\.7z, Area_5\.7z, "
                                          r"Area_6\.7z, and 1 more are areas packed in a format prepare does not open"):
        open_source(raw).rooms()


def test_several_are_named_together(tmp_path):
    write_tree(tmp_path / "raw", {**AREA_1, "Area_3.7z": b"x", "Area_2.tar.gz": b"x"})
    with pytest.raises(SourceError, match=r": Area_2\.tar\.gz, Area_3\.7z are areas packed in a format prepare does "
                                          r"not open, without a folder here: their areas would be left out"):
        open_source(tmp_path / "raw").rooms()


@pytest.mark.parametrize("name", ["Area_2.tar.gz", "Area_2 (1).7z", "Area_2.rar", "Area_2.zip.part",
                                  "Area_2.tgz.crdownload"])
def test_one_beside_its_unpacked_area_is_left_alone(tmp_path, name):
    write_tree(tmp_path / "raw", {**AREA_1, name: b"x", "Area_2/t/Annotations/wall_1.txt": WALL})
    assert [(r.area, r.name) for r in open_source(tmp_path / "raw").rooms()] == [("Area_1", "r"), ("Area_2", "t")]


@pytest.mark.parametrize("name", ["Areas_2.7z", "Area_2.part", "Area_2.txt.part", "notes.tar.gz", "Area_2_a.txt.gz",
                                  "warea_2.tar", "Area_21.7z.x"])
def test_a_name_that_is_no_areas_archive_is_not_taken_for_one(tmp_path, capsys, name):
    write_tree(tmp_path / "raw", {**AREA_1, name: b"x"})
    assert [(r.area, r.name) for r in open_source(tmp_path / "raw").rooms()] == [("Area_1", "r")]
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("bundle", "files"), [
    ("Area_2.zip.download", {"Area_2.zip.download/Area_2.zip": b"PK\x03\x04 cut short",
                             "Area_2.zip.download/Info.plist": b"<plist/>"}),
    ("Area_2.zip.download", {}),  # just started: nothing in it yet
    ("x/Area_2.7z.download", {"x/Area_2.7z.download/Area_2.7z": b"7z"}),
])
def test_a_safari_download_folder_is_a_partial_download(tmp_path, capsys, bundle, files):
    """Safari downloads into a folder (a bundle holding the partial file and an Info.plist) named as the file plus
    ``.download``: the partial ``Area_2.zip`` in it was taken for a whole zip, the line saying to unzip it inside
    the bundle (which fails: the zip is cut short); a bundle just started (empty) was passed over without a word."""
    raw = write_tree(tmp_path / "raw", {**AREA_1, **files})
    (raw / bundle).mkdir(parents=True, exist_ok=True)
    line = _refused(capsys, raw, tmp_path / "out")
    assert line == (f"pointgeope prepare: error: {raw}: {bundle} is a partial download of an area's archive without "
                    "a folder here: its area would be left out of the folds; finish or redo the download and unpack "
                    "it beside the other areas, or remove it to prepare the other areas")


@pytest.mark.parametrize(("name", "action"), [
    ("S3DIS_Area_2.tar.gz", "unpack it beside the other areas (tar -xzf {raw}/S3DIS_Area_2.tar.gz -C {raw})"),
    ("Area_2.gz", "unpack it beside the other areas (tar -xzf {raw}/Area_2.gz -C {raw})"),
    ("area_2_notes.7z", "unpack it beside the other areas (7z x {raw}/area_2_notes.7z -o{raw})"),
    ("s3dis-area-2.rar.part", "finish the download, unpack it beside the other areas"),
    ("S3DIS_Area_2.zip.download/S3DIS_Area_2.zip", "finish the download, unpack it beside the other areas"),
    ("Stanford3dDataset_v1.2_Area_2.gz", "unpack it beside the other areas (tar -xzf "
                                         "{raw}/Stanford3dDataset_v1.2_Area_2.gz -C {raw})"),
])
def test_a_name_that_holds_an_areas_name_is_named_in_a_warning(tmp_path, capsys, name, action):
    """An archive whose name holds an area's as a word, but is none the refusals know (another name, a tar.gz
    that lost its .tar): passed over without a word, its area left out of the folds. Its name alone does not say
    what it holds (and a multi-GB archive is not opened to see): prepare names it and goes on."""
    raw = write_tree(tmp_path / "raw", {**AREA_1, name: b"x"})
    assert cli(["prepare", str(raw), str(tmp_path / "out")]) == 0
    shown = name.split("/")[0]
    warning = (f"warning: {raw}: {shown} may be an archive of Area_2, which has no folder here (by its name; prepare "
               "opens no archive inside RAW, so the area would be left out of the folds): if it holds the area, "
               f"{action.format(raw=raw)} and prepare again")
    assert warning in capsys.readouterr().err.splitlines()
    assert json.loads((tmp_path / "out/folds.json").read_text())  # Area_1 prepared
    write_tree(raw, {"Area_2/t/Annotations/wall_1.txt": WALL})  # beside its folder: a leftover, not named
    assert cli(["prepare", str(raw), str(tmp_path / "out")]) == 0
    assert name.split("/")[0] not in capsys.readouterr().err


def test_a_zip_named_for_an_area_inside_raws_zip_is_named_in_a_warning(tmp_path, capsys):
    """In RAW's zip a zip is not opened (its members not read): one named otherwise than the refusals know was
    passed over without a word."""
    raw = zip_tree(tmp_path / "raw.zip", {**AREA_1, "S3DIS_Area_2.zip": b"x"})
    assert [(r.area, r.name) for r in open_source(raw).rooms()] == [("Area_1", "r")]
    assert capsys.readouterr().err == (f"warning: {raw}: S3DIS_Area_2.zip may be an archive of Area_2, which has no "
                                       "folder here (by its name; prepare opens no archive inside RAW, so the area "
                                       f"would be left out of the folds): if it holds the area, unpack {raw} into a "
                                       "folder and it beside the areas there, then prepare that folder\n")


def test_raw_holding_only_an_archive_named_for_an_area_says_to_unpack_it(tmp_path, capsys):
    """No area folder, and a tar named otherwise: the line said what RAW holds and to point RAW elsewhere; it now
    gives the command, which unpacks the area prepare then reads."""
    raw = write_tree(tmp_path / "raw", {"S3DIS_Area_2.tar.gz": _tar("gz")})
    line = _refused(capsys, raw, tmp_path / "out")
    assert line.startswith(f"pointgeope prepare: error: {raw}: expected Area_N folders (raw S3DIS v1.2 layout), found "
                           "none; S3DIS_Area_2.tar.gz may be an archive of Area_2")
    subprocess.run(split(re.search(r"\((tar .*)\) and prepare again$", line).group(1)), check=True)
    assert [(r.area, r.name) for r in open_source(raw).rooms()] == [("Area_2", "t")]


def test_an_area_packed_inside_raws_zip_is_refused(tmp_path):
    raw = zip_tree(tmp_path / "raw.zip", {**AREA_1, "Area_2.tar.gz": _tar("gz")})
    with pytest.raises(SourceError, match=rf"{re.escape(str(raw))}: Area_2\.tar\.gz is an area packed .* unpack "
                                          rf"{re.escape(str(raw))} into a folder and it beside the areas there"):
        open_source(raw).rooms()


def test_raw_holding_only_an_areas_tar_says_to_unpack_it(tmp_path, capsys):
    raw = write_tree(tmp_path / "raw", {"Area_2.tar.gz": _tar("gz")})
    line = _refused(capsys, raw, tmp_path / "out")
    assert line.endswith(f"(tar -xzf {raw}/Area_2.tar.gz -C {raw})")


@pytest.mark.parametrize(("name", "action"), [
    ("Area_3.tar.gz", "unpack it with the tool for its format (tar -xzf {raw}/Area_3.tar.gz -C {raw})"),
    ("Area_3.zip.part", "finish or redo the download and unpack it"),
    ("S3DIS_Area_3.tar.gz", "unpack it (tar -xzf {raw}/S3DIS_Area_3.tar.gz -C {raw}) and prepare again")])
def test_an_area_archive_in_a_raw_without_areas_is_not_unpacked_beside_others(tmp_path, capsys, name, action):
    """RAW holding one area's archive and no area folder: the line said to unpack it "beside the other areas",
    of which there are none; it says to unpack it (where: the command's folder, RAW)."""
    raw = write_tree(tmp_path / "raw", {name: b"x"})
    line = _refused(capsys, raw, tmp_path / "out")
    assert "beside" not in line and "other areas" not in line
    assert line.endswith(action.format(raw=raw))


def test_an_area_archive_in_a_zip_without_areas_is_unpacked_in_the_folder_of_the_zip(tmp_path, capsys):
    raw = zip_tree(tmp_path / "raw.zip", {"Area_3.tar.gz": b"x"})
    line = _refused(capsys, raw, tmp_path / "out")
    assert line.endswith(f"unpack {raw} into a folder and it in that folder")


@pytest.mark.parametrize(("tree", "place"), [({}, "in that folder"), (AREA_1, "beside the areas there")])
def test_a_partial_download_in_a_zip_says_the_folder_it_is_unpacked_in(tmp_path, capsys, tree, place):
    """A zip RAW holding a partial download of an area: the line said to unpack it "in that folder" (no area
    beside it) or "beside the areas there", naming no folder; it says to unpack the zip into one first."""
    raw = zip_tree(tmp_path / "raw.zip", {**tree, "Area_3.zip.part": b"x"})
    line = _refused(capsys, raw, tmp_path / "out")
    assert f"; unpack {raw} into a folder, finish or redo the download and unpack it {place}" in line
