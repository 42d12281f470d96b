"""The zip source of ``prepare``: member names (encodings, separators, dot components, links) read as the
extracted folder would be, or refused in one line naming the member."""
from __future__ import annotations

import re
import zipfile
from pathlib import Path
from shlex import split

import pytest

from data_prep.source import SourceError, open_source
from pointgeope.cli import main as cli
from tests.data_prep.raw_trees import DEFECT_FILES, DEFECT_ROOMS, room_summary, write_tree, zip_tree


@pytest.mark.parametrize("member", ["../evil/Area_1/r/Annotations/wall_1.txt", "/etc/Area_1/r/Annotations/a_1.txt",
                                    "Area_1/../../x.txt", "C:/Area_1/r/Annotations/wall_1.txt"])
def test_zip_refuses_members_outside_the_tree(tmp_path, member):
    path = zip_tree(tmp_path / "bad.zip", {"Area_1/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n", member: b"x"})
    with pytest.raises(SourceError, match="refusing zip member") as err:
        open_source(path).rooms()
    assert repr(member) in str(err.value)


def test_a_truncated_zip_says_it_was_cut_short(tmp_path):
    """Every cut of a zip (an interrupted download) was 'a file that is not a zip', with no fix."""
    whole = zip_tree(tmp_path / "raw.zip", DEFECT_FILES).read_bytes()
    for keep in (len(whole) - 10, len(whole) // 2, 100):
        cut = tmp_path / "cut.zip"
        cut.write_bytes(whole[:keep])
        with pytest.raises(SourceError, match=rf"^{re.escape(str(cut))}: a zip cut short \({keep:,} bytes, no end "
                                              r"record\): an incomplete download or copy; compare its size with the "
                                              "original's and download or copy it again$"):
            open_source(cut)
    (tmp_path / "page.zip").write_bytes(b"<html>404</html>")
    with pytest.raises(SourceError, match=r"page.zip: named .zip but not a zip \(it starts with b'<htm', a zip with "
                                          r"b'PK\\x03\\x04'\): an error page or a failed download"):
        open_source(tmp_path / "page.zip")
    (tmp_path / "pk.zip").write_bytes(b"PK")  # said "it starts with b'PK', a zip with b'PK'": no reason given
    with pytest.raises(SourceError, match=r"pk.zip: named .zip but not a zip \(it starts with b'PK', a zip with "
                                          r"b'PK\\x03\\x04'\)"):
        open_source(tmp_path / "pk.zip")
    (tmp_path / "empty.zip").write_bytes(b"")
    with pytest.raises(SourceError, match=r"empty.zip: named .zip but not a zip \(it is empty\)"):
        open_source(tmp_path / "empty.zip")


def _zip_with_raw_name(path: Path, placeholder: str, raw: bytes) -> Path:
    """A zip whose member name holds the bytes ``raw`` (in place of the ASCII ``placeholder``) without the
    UTF-8 flag, as zip tools writing latin-1 or unflagged UTF-8 names do."""
    zip_tree(path, {f"Area_1/{placeholder}/Annotations/wall_1.txt": b"1 2 3 4 5 6\n",
                "Area_1/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n"})
    data = path.read_bytes()
    assert data.count(placeholder.encode()) == 2  # the local header and the central directory
    path.write_bytes(data.replace(placeholder.encode(), raw))
    return path


def test_zip_members_whose_names_decode_alike_are_refused(tmp_path):
    """A UTF-8-flagged 'officeé' and an unflagged member with the same UTF-8 bytes are one name once
    decoded: refused as a member twice (the index by decoded name kept only one of them, silently)."""
    path = tmp_path / "twice.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("Area_1/office\u00e9/Annotations/wall_1.txt", b"1 2 3 4 5 6\n")  # flagged UTF-8
        z.writestr("Area_1/officeXX/Annotations/wall_1.txt", b"7 8 9 1 2 3\n")
    path.write_bytes(path.read_bytes().replace(b"officeXX", "office\u00e9".encode()))
    with zipfile.ZipFile(path) as z:
        assert [i.flag_bits & 0x800 for i in z.infolist()] == [0x800, 0]  # two raw names, one flagged
    with pytest.raises(SourceError) as err:
        open_source(path).rooms()
    assert str(err.value) == (f"{path}: member 'Area_1/office\u00e9/Annotations/wall_1.txt' is in the archive "
                              "twice; expected each file once (re-create the zip)")


def test_zip_member_names_that_are_not_utf8_are_refused(tmp_path):
    """A latin-1 name (office\\xe91) was read as cp437 and stored as 'officeΘ1'; the README says refused."""
    path = _zip_with_raw_name(tmp_path / "latin1.zip", "officeX1", b"office\xe91")
    with pytest.raises(SourceError) as err:
        open_source(path).rooms()
    assert str(err.value) == (f"{path}: the member name 'Area_1/office\\\\xe91/Annotations/wall_1.txt' is not "
                              "valid UTF-8 (a zip without the UTF-8 flag: cp437, cp850 or latin-1?); rename it, "
                              "or unpack the zip and give the folder")
    # UTF-8 bytes without the flag are UTF-8: read as such, and the member is found by that name
    path = _zip_with_raw_name(tmp_path / "utf8.zip", "officeXX", "officeé".encode())
    source = open_source(path)
    assert [r.name for r in source.rooms()] == ["office\u00e9", "r"]
    assert source.read("Area_1/office\u00e9/Annotations/wall_1.txt") == b"1 2 3 4 5 6\n"


def test_zip_with_backslash_separators_reads_as_the_folder(tmp_path):
    """A zip made by Windows tools names 'Area_1\\room_a\\Annotations\\wall_1.txt': it was refused with
    "expected Area_N folders, found none"."""
    path = tmp_path / "win.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in DEFECT_FILES.items():
            info = zipfile.ZipInfo(name.replace("/", "\\"))
            info.create_system = 0  # made on Windows
            zf.writestr(info, data)
        zf.writestr(zipfile.ZipInfo("Area_2\\room_b\\Annotations\\"), b"")  # a folder entry
    source = open_source(path)
    assert room_summary(source) == DEFECT_ROOMS
    assert source.read("Area_2/room_b/Annotations/table_1.txt") == b"0.5 0.5 0.75 3 3 3\n"


def test_zip_member_with_backslash_dotdot_is_still_refused(tmp_path):
    path = zip_tree(tmp_path / "bad.zip", {"Area_1/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n",
                                       "Area_1\\..\\..\\x.txt": b"x"})
    with pytest.raises(SourceError, match="refusing zip member"):
        open_source(path).rooms()


@pytest.mark.parametrize("prefix", ["./", "top/./", ".//"])
def test_zip_members_with_dot_components_read_as_the_folder(tmp_path, prefix):
    """Some archivers write './Area_1/office_2/...': the '.' component was taken for a hidden folder, every
    member skipped, and the zip refused with "expected Area_N folders, found none"."""
    path = tmp_path / "dot.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(zipfile.ZipInfo(prefix), b"")  # the top folder's own entry, as `zip -r x.zip .` writes it
        for name, data in DEFECT_FILES.items():
            zf.writestr(prefix + name.replace("/Annotations/", "/./Annotations/"), data)
        zf.writestr(zipfile.ZipInfo(prefix + "Area_2/./room_b/Annotations/"), b"")  # a folder entry
    source = open_source(path)
    top = "top/" if prefix.startswith("top") else ""
    assert room_summary(source) == [(area, name, top + path_, files) for area, name, path_, files in DEFECT_ROOMS]
    assert source.read(top + "Area_2/room_b/Annotations/table_1.txt") == b"0.5 0.5 0.75 3 3 3\n"


@pytest.mark.parametrize("member", ["./../x.txt", "./Area_1/./../../x.txt", ".\\..\\x.txt"])
def test_zip_member_with_dot_then_dotdot_is_still_refused(tmp_path, member):
    path = zip_tree(tmp_path / "bad.zip", {"Area_1/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n", member: b"x"})
    with pytest.raises(SourceError, match="refusing zip member"):
        open_source(path).rooms()


def test_zip_member_given_with_and_without_dot_prefix_is_a_duplicate(tmp_path):
    path = zip_tree(tmp_path / "dup.zip", {"Area_1/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n",
                                       "./Area_1/r/Annotations/wall_1.txt": b"7 8 9 1 2 3\n"})
    with pytest.raises(SourceError, match=r"member 'Area_1/r/Annotations/wall_1.txt' is in the archive twice"):
        open_source(path).rooms()


def _zip_with_link(path: Path, link: str, target: str, top: str = "") -> Path:
    """A zip as ``zip -y`` writes it: the link a member of Unix mode ``S_IFLNK`` whose data is the target's path."""
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(top + "Area_1/r/Annotations/wall_1.txt", b"1 2 3 4 5 6\n")
        info = zipfile.ZipInfo(top + link)
        info.external_attr = (0o120777 << 16)
        info.create_system = 3  # Unix
        zf.writestr(info, target.encode())
    return path


def test_a_long_target_of_a_symbolic_link_in_a_zip_is_cut_and_marked(tmp_path):
    """A link's target of 300 characters is said in 200, marked with its length (before: cut at 200 bytes
    silently, as if whole)."""
    target = "a/" * 150
    path = _zip_with_link(tmp_path / "l.zip", "Area_1/office_3", target)
    with pytest.raises(SourceError) as err:
        open_source(path).rooms()
    assert str(err.value) == (f"{path}: member 'Area_1/office_3' is a symbolic link to '{'a/' * 98}... (302 "
                              "characters), which prepare does not follow inside a zip; zip the tree without -y (zip "
                              "-r follows links) or prepare the extracted folder")


@pytest.mark.parametrize("link", ["Area_1/r/Annotations/wall_9.txt", "Area_1/office_3"])
def test_a_symbolic_link_in_a_zip_is_refused_naming_it_and_its_target(tmp_path, link):
    """A linked annotation file was parsed as its target's path (one line: the object lost, exit 0), a linked room
    vanished; the extracted folder follows both."""
    target = "../../../Area_2/r/Annotations/wall_1.txt"
    path = _zip_with_link(tmp_path / "l.zip", link, target, top="./")
    with pytest.raises(SourceError) as err:
        open_source(path).rooms()
    assert str(err.value) == (f"{path}: member {link!r} is a symbolic link to {target!r}, which prepare does not "
                              "follow inside a zip; zip the tree without -y (zip -r follows links) or prepare the "
                              "extracted folder")


def test_a_symbolic_link_outside_the_areas_is_not_read(tmp_path):
    (room,) = open_source(_zip_with_link(tmp_path / "l.zip", "README", "docs/README.md")).rooms()
    assert [e.path for e in room.files] == ["Area_1/r/Annotations/wall_1.txt"]


@pytest.mark.parametrize("name", ["area_2.zip", "AREA_2.ZIP", "Area 2.zip", "Area_2 (1).zip", "Area_2(1).zip",
                                  "Area_2 - Copy.zip", "Area_2 - Copy (2).zip", "Area_2 copy.zip", "Area_2 2.zip",
                                  "Area_2_Aligned.zip", "area_2_aligned.zip", "Area_2.zip.zip", "Area_2.zip (1).zip",
                                  "Area_2_Aligned (1).zip"])
def test_an_areas_zip_of_another_spelling_or_a_second_download_is_refused_naming_it(tmp_path, capsys, name):
    """``area_2.zip``, ``Area_2_Aligned.zip``, a zip zipped again ``Area_2.zip.zip`` or a browser's second
    download ``Area_2 (1).zip`` beside ``Area_1/`` was passed over without a word (``Area_2.zip`` alone was
    refused), so Area_2 vanished from the folds; the unzip command of the line is quoted for a shell."""
    inner = zip_tree(tmp_path / "inner.zip", {"Area_2/t/Annotations/wall_1.txt": b"1 2 3 4 5 6\n"}).read_bytes()
    raw = write_tree(tmp_path / "raw", {"Area_1/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n", name: inner})
    assert cli(["prepare", str(raw), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"pointgeope prepare: error: {raw}: {name} is the zip of an area "
                                               "without a folder here, and prepare opens no zip inside RAW")
    command = re.search(r"\(unzip (.*)\), or remove it to prepare the other areas$", err[0]).group(1)
    assert split(command) == [str(raw / name), "-d", str(raw)]
    assert not (tmp_path / "out" / "folds.json").exists()


@pytest.mark.parametrize("name", ["area_2.zip", "Area_2 (1).zip", "Area_2_Aligned.zip", "Area_2.zip.zip"])
def test_an_areas_zip_of_another_spelling_beside_its_unpacked_folder_is_left_alone(tmp_path, name):
    write_tree(tmp_path / "raw", {"Area_1/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n", name: b"PK",
                                  "Area_2/t/Annotations/wall_1.txt": b"1 2 3 4 5 6\n"})
    assert [(r.area, r.name) for r in open_source(tmp_path / "raw").rooms()] == [("Area_1", "r"), ("Area_2", "t")]


@pytest.mark.parametrize("name", ["Area_2_notes.zip", "area_2.txt", "Areas_2.zip",
                                  "Area_2_Aligned_notes.zip"])
def test_a_name_that_is_no_areas_zip_is_not_taken_for_one(tmp_path, name):
    write_tree(tmp_path / "raw", {"Area_1/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n", name: b"x"})
    assert [(r.area, r.name) for r in open_source(tmp_path / "raw").rooms()] == [("Area_1", "r")]


def test_an_aligned_areas_zip_unpacked_into_its_own_name_says_to_rename_the_folder(tmp_path, capsys):
    """``Area_2_Aligned.zip`` unpacked beside itself into ``Area_2_Aligned/``: the line names the folder to rename
    (the zip then lies beside its area's folder, left alone), not the zip to unpack again."""
    write_tree(tmp_path / "raw", {"Area_1/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n", "Area_2_Aligned.zip": b"PK",
                                  "Area_2_Aligned/t/Annotations/wall_1.txt": b"1 2 3 4 5 6\n"})
    with pytest.raises(SourceError, match=r"found rooms with Annotations in Area_2_Aligned, which would be left out "
                                          r"of the folds: rename it Area_2 \(or remove it"):
        open_source(tmp_path / "raw").rooms()
    (tmp_path / "raw/Area_2_Aligned").rename(tmp_path / "raw/Area_2")
    assert [(r.area, r.name) for r in open_source(tmp_path / "raw").rooms()] == [("Area_1", "r"), ("Area_2", "t")]

def test_the_zip_to_give_as_raw_is_named_as_a_shell_reads_it(tmp_path, capsys):
    """RAW holding nothing but ``Area_2 (1).zip``: the line says to give that zip itself as RAW, a path with a space
    and parentheses that a shell splits unless quoted, as the unzip command of the same line is."""
    inner = zip_tree(tmp_path / "inner.zip", {"Area_2/t/Annotations/wall_1.txt": b"1 2 3 4 5 6\n"}).read_bytes()
    raw = write_tree(tmp_path / "raw", {"Area_2 (1).zip": inner})
    assert cli(["prepare", str(raw), str(tmp_path / "out")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    given = re.search(r", or give (.*) itself as RAW$", line).group(1)
    assert split(given) == [str(raw / "Area_2 (1).zip")]
