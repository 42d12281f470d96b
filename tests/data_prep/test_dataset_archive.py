"""The whole dataset's archive left in RAW under a name that holds no area's
(``Stanford3dDataset_v1.2_Aligned_Version.tar``, ``s3dis.tar.gz``, ``dataset.tar``) was passed over without a word
beside unpacked areas: the areas it holds vanished from the folds (``S3DIS_Area_3.tar.gz`` had a warning). With no
area folder at all, the line only said what RAW held. It is now named in a warning with the command that unpacks it
(or, for a zip cut short, to download it again and give it as RAW: prepare reads a zip in place), while one of
S3DIS's six areas has no folder."""
from __future__ import annotations

import io
import subprocess
import tarfile
from shlex import split

import pytest

from data_prep.source import SourceError, open_source
from pointgeope.cli import main as cli
from tests.data_prep.raw_trees import write_tree, zip_tree

WALL = b"1 2 3 4 5 6\n"
AREA_1 = {"Area_1/r/Annotations/wall_1.txt": WALL}
MISSING = "Area_2, Area_3, Area_4, Area_5, Area_6 have no folder here"


def _tar(top: str, areas: range) -> bytes:
    """A gzipped tar of ``top/Area_k/t/Annotations/wall_1.txt`` for each k of ``areas`` (the release's layout)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for k in areas:
            info = tarfile.TarInfo(f"{top}/Area_{k}/t/Annotations/wall_1.txt")
            info.size = len(WALL)
            archive.addfile(info, io.BytesIO(WALL))
    return buffer.getvalue()


@pytest.mark.parametrize(("name", "command"), [
    ("Stanford3dDataset_v1.2_Aligned_Version.tar", "tar -xf {raw}/Stanford3dDataset_v1.2_Aligned_Version.tar -C {raw}"),
    ("s3dis.tar.gz", "tar -xzf {raw}/s3dis.tar.gz -C {raw}"),
    ("dataset.tar", "tar -xf {raw}/dataset.tar -C {raw}"),
    ("S3DIS.7z", "7z x {raw}/S3DIS.7z -o{raw}"),
    ("Stanford3dDataset_v1.2.rar", "unrar x {raw}/Stanford3dDataset_v1.2.rar {raw}/"),
])
def test_the_datasets_archive_beside_some_areas_is_named_with_its_command(tmp_path, capsys, name, command):
    raw = write_tree(tmp_path / "raw", {**AREA_1, name: b"x"})
    assert cli(["prepare", str(raw), str(tmp_path / "out")]) == 0
    assert capsys.readouterr().err.splitlines()[0] == (
        f"warning: {raw}: {name} may be an archive of the whole dataset (by its name), and {MISSING} (prepare opens no "
        "archive inside RAW, so they would be left out of the folds): if it holds them, unpack it "
        f"({command.format(raw=raw)}) and prepare again")


def test_one_area_missing_is_named_in_the_singular(tmp_path, capsys):
    raw = write_tree(tmp_path / "raw", {**{f"Area_{k}/r/Annotations/wall_1.txt": WALL for k in range(1, 6)},
                                        "s3dis.tar.gz": b"x"})
    assert [r.area for r in open_source(raw).rooms()] == [f"Area_{k}" for k in range(1, 6)]
    assert "and Area_6 has no folder here (prepare opens no archive inside RAW, so it would be left out of the " \
           "folds): if it holds it, unpack it" in capsys.readouterr().err


def test_beside_all_six_areas_it_is_a_leftover_of_the_unpacking(tmp_path, capsys):
    """RAW holding the release's tar and the folder it was unpacked into: nothing to say."""
    areas = {f"Stanford3dDataset_v1.2_Aligned_Version/Area_{k}/r/Annotations/wall_1.txt": WALL for k in range(1, 7)}
    raw = write_tree(tmp_path / "raw", {**areas, "Stanford3dDataset_v1.2_Aligned_Version.tar": b"x"})
    assert len(open_source(raw).rooms()) == 6
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("name", ["notes.tar.gz", "backup.7z", "Area_1/r/s3dis.tar.gz"])
def test_another_archive_beside_the_areas_is_not_named(tmp_path, capsys, name):
    """A name that holds neither an area's nor the dataset's, or an archive inside an area's folder: no warning."""
    raw = write_tree(tmp_path / "raw", {**AREA_1, name: b"x"})
    assert [r.area for r in open_source(raw).rooms()] == ["Area_1"]
    assert capsys.readouterr().err == ""


def test_raw_holding_only_the_datasets_tar_gives_the_command_that_unpacks_it(tmp_path, capsys):
    """The line said "it holds s3dis.tar.gz: point RAW at the folder (or .zip) that holds Area_1 ... Area_6"; it
    now gives the tar command, and preparing RAW again after running it reads every area of the tar."""
    raw = write_tree(tmp_path / "raw", {"s3dis.tar.gz": _tar("Stanford3dDataset_v1.2_Aligned_Version", range(1, 7))})
    with pytest.raises(SourceError) as err:
        open_source(raw).rooms()
    command = f"tar -xzf {raw}/s3dis.tar.gz -C {raw}"
    assert str(err.value) == (f"{raw}: expected Area_N folders (raw S3DIS v1.2 layout), found none; s3dis.tar.gz is "
                              "an archive, and prepare opens no archive inside RAW: if it holds the dataset, unpack it "
                              f"({command}) and prepare again")
    subprocess.run(split(command), check=True)
    assert [r.area for r in open_source(raw).rooms()] == [f"Area_{k}" for k in range(1, 7)]
    assert capsys.readouterr().err == ""  # the tar, beside all six areas, is a leftover


def test_raw_holding_only_an_archive_of_any_name_says_to_unpack_it(tmp_path):
    """With no area folder, the refusal names any archive (it is all RAW holds that may hold the dataset)."""
    raw = write_tree(tmp_path / "raw", {"download.tar": b"x", "readme.md": b"x"})
    with pytest.raises(SourceError, match=r"found none; download\.tar is an archive, and prepare opens no archive "
                                          r"inside RAW: if it holds the dataset, unpack it \(tar -xf "):
        open_source(raw).rooms()


def test_with_several_archives_the_refusal_names_the_datasets(tmp_path):
    """It named the first in name order, ``notes.tar.gz`` (``if it holds the dataset, unpack it``), not s3dis.tar.gz."""
    raw = write_tree(tmp_path / "raw", {"notes.tar.gz": b"x", "s3dis.tar.gz": b"x", "backup.7z": b"x"})
    with pytest.raises(SourceError, match=r"found none; s3dis\.tar\.gz is an archive, and prepare opens no archive "):
        open_source(raw).rooms()


def test_the_datasets_zip_cut_short_says_to_download_it_again_and_give_it_as_raw(tmp_path):
    """A readable zip's members are read (one holding areas is refused); one cut short has none to read, and was
    passed over: RAW without an area said only what it held."""
    raw = write_tree(tmp_path / "raw", {"Stanford3dDataset_v1.2_Aligned_Version.zip": b"PK\x03\x04 cut short"})
    with pytest.raises(SourceError) as err:
        open_source(raw).rooms()
    assert str(err.value).endswith("found none; Stanford3dDataset_v1.2_Aligned_Version.zip is an archive, and prepare "
                                   "opens no archive inside RAW: if it holds the dataset, download it again (it is no "
                                   "readable zip: cut short?) and give it itself as RAW")


def test_a_partial_download_of_the_dataset_says_to_finish_it(tmp_path, capsys):
    raw = write_tree(tmp_path / "raw", {**AREA_1, "Stanford3dDataset_v1.2_Aligned_Version.zip.crdownload": b"PK"})
    open_source(raw).rooms()
    assert capsys.readouterr().err.endswith("if it holds them, finish the download, unpack it and prepare again\n")


def test_inside_raws_zip_it_says_to_unpack_raw_first(tmp_path, capsys):
    raw = zip_tree(tmp_path / "raw.zip", {**AREA_1, "s3dis.tar.gz": b"x"})
    open_source(raw).rooms()
    assert capsys.readouterr().err.endswith(f"if it holds them, unpack {raw} into a folder and it beside the areas "
                                            "there, then prepare that folder\n")


@pytest.mark.parametrize(("name", "flag"), [("Stanford3dDataset_v1.2_Aligned_Version.tar", "-xf"),
                                            ("s3dis.tar.gz", "-xzf"), ("S3DIS.TGZ", "-xzf")])
def test_raw_given_as_a_tar_says_to_unpack_it_with_the_command(tmp_path, capsys, name, flag):
    """The line said "expected RAW to be an S3DIS folder or .zip, found a file that is not a zip": neither what the
    file is nor what to do. Running the command it gives, then preparing the folder the tar makes, reads it."""
    top = "Stanford3dDataset_v1.2_Aligned_Version"
    raw = tmp_path / name
    raw.write_bytes(_tar(top, range(1, 3)) if flag == "-xzf" else _plain_tar(top))
    assert cli(["prepare", str(raw), str(tmp_path / "out")]) == 2
    line = capsys.readouterr().err.strip()
    assert line == (f"pointgeope prepare: error: {raw}: an archive that prepare does not read (prepare reads a "
                    f"folder, or a .zip in place): unpack it (tar {flag} {raw} -C {tmp_path}) and give the folder it "
                    "makes")
    subprocess.run(["tar", flag, str(raw), "-C", str(tmp_path)], check=True)
    assert [r.area for r in open_source(tmp_path / top).rooms()] == ["Area_1", "Area_2"]


@pytest.mark.parametrize("name", ["s3dis.7z", "Stanford3dDataset_v1.2.rar", "s3dis.zip.part", "s3dis.tar.crdownload"])
def test_raw_given_as_another_archive_or_a_partial_download_says_what_to_do(tmp_path, name):
    raw = tmp_path / name
    raw.write_bytes(b"x")
    with pytest.raises(SourceError) as err:
        open_source(raw)
    if "." + name.rsplit(".", 1)[-1] in (".part", ".crdownload"):
        assert str(err.value) == (f"{raw}: a partial download (prepare reads a folder, or a .zip in place): finish the "
                                  "download, then give what it becomes")
    else:
        command = f"7z x {raw} -o{tmp_path}" if name.endswith(".7z") else f"unrar x {raw} {tmp_path}/"
        assert str(err.value) == (f"{raw}: an archive that prepare does not read (prepare reads a folder, or a .zip in "
                                  f"place): unpack it ({command}) and give the folder it makes")


def test_raw_given_as_another_file_is_still_a_file_that_is_not_a_zip(tmp_path):
    (tmp_path / "notes.txt.gz").write_bytes(b"x")
    with pytest.raises(SourceError, match="found a file that is not a zip"):
        open_source(tmp_path / "notes.txt.gz")


def _plain_tar(top: str) -> bytes:
    """An uncompressed tar of ``top/Area_k/t/Annotations/wall_1.txt`` for k = 1, 2."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for k in (1, 2):
            info = tarfile.TarInfo(f"{top}/Area_{k}/t/Annotations/wall_1.txt")
            info.size = len(WALL)
            archive.addfile(info, io.BytesIO(WALL))
    return buffer.getvalue()
