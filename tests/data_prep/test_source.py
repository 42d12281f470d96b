"""data_prep/source.py: finding Area_N/<room>/Annotations in folders and zips, junk, refusals, order."""
from __future__ import annotations

import json

import pytest

from data_prep.source import FolderSource, SourceError, ZipSource, object_key, open_source
from pointgeope.cli import main as cli
from tests.data_prep.raw_trees import DEFECT_FILES, DEFECT_ROOMS, room_summary, write_tree, zip_tree


def test_folder_rooms_skip_junk_room_files_and_loose_files(tmp_path):
    source = open_source(write_tree(tmp_path, DEFECT_FILES))
    assert isinstance(source, FolderSource)
    assert room_summary(source) == DEFECT_ROOMS
    assert source.ignored == ()


def test_folder_with_a_top_level_folder(tmp_path):
    write_tree(tmp_path / "Stanford3dDataset_v1.2_Aligned_Version", DEFECT_FILES)
    top = "Stanford3dDataset_v1.2_Aligned_Version/"
    assert room_summary(open_source(tmp_path)) == [(a, r, top + p, f) for a, r, p, f in DEFECT_ROOMS]


@pytest.mark.parametrize("top", ["", "Stanford3dDataset_v1.2/"])
def test_zip_rooms_match_the_folder(tmp_path, top):
    source = open_source(zip_tree(tmp_path / "s3dis.zip", {top + k: v for k, v in DEFECT_FILES.items()}))
    assert isinstance(source, ZipSource)
    assert room_summary(source) == [(a, r, top + p, f) for a, r, p, f in DEFECT_ROOMS]
    assert source.read(top + "Area_2/room_b/Annotations/table_1.txt") == b"0.5 0.5 0.75 3 3 3\n"


def test_room_without_annotations_is_an_error_naming_it(tmp_path):
    write_tree(tmp_path, {"Area_1/good/Annotations/wall_1.txt": b"1 2 3 4 5 6\n",
                          "Area_1/hallway_9/hallway_9.txt": b"1 2 3 4 5 6\n"})
    (tmp_path / "Area_2/lobby_1").mkdir(parents=True)
    with pytest.raises(SourceError, match=r"2 rooms without: Area_1/hallway_9 \(no Annotations folder: extract "
                                          r"the room again, or remove Area_1/hallway_9\), Area_2/lobby_1 \(no "
                                          r"Annotations folder: extract the room again, or remove Area_2/lobby_1\)"):
        open_source(tmp_path).rooms()


def test_empty_annotations_folder_is_an_error(tmp_path):
    write_tree(tmp_path, {"Area_1/good/Annotations/wall_1.txt": b"1 2 3 4 5 6\n"})
    (tmp_path / "Area_1/bare/Annotations").mkdir(parents=True)
    with pytest.raises(SourceError, match=r"Area_1/bare \(no <class>_<k>.txt in Annotations: "):
        open_source(tmp_path).rooms()


def test_output_and_hidden_folders_inside_raw_are_not_rooms(tmp_path):
    write_tree(tmp_path, {"Area_1/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n",
                          "prepared/.work/Area_1/r.h5": b"...", ".git/Area_1/x/y": b"..."})
    assert [(r.area, r.path) for r in open_source(tmp_path).rooms()] == [("Area_1", "Area_1/r")]


def test_the_same_area_twice_is_an_error(tmp_path):
    write_tree(tmp_path, {"aligned/Area_1/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n",
                          "other/Area_1/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n"})
    with pytest.raises(SourceError, match="Area_1 found twice"):
        open_source(tmp_path).rooms()


def test_no_areas_and_not_a_zip(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(SourceError, match="expected Area_N folders"):
        open_source(tmp_path).rooms()
    with pytest.raises(SourceError, match="found a file that is not a zip"):
        open_source(tmp_path / "notes.txt")
    with pytest.raises(SourceError, match="found nothing"):
        open_source(tmp_path / "missing")


def test_non_txt_files_in_annotations_are_listed_as_ignored(tmp_path):
    write_tree(tmp_path, {"Area_3/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n",
                          "Area_3/r/Annotations/wall_1.txt.bak": b"old"})
    source = open_source(tmp_path)
    assert [r.name for r in source.rooms()] == ["r"]
    assert source.ignored == ("Area_3/r/Annotations/wall_1.txt.bak",)


def test_folders_inside_annotations_are_named_as_ignored(tmp_path, capsys):
    """Files in a folder inside Annotations (or in a folder named like a file) were neither read nor named:
    their objects vanished without a word and the summary said "lost objects 0"."""
    files = {"Area_3/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n",
             "Area_3/r/Annotations/extra/chair_1.txt": b"1 2 3 4 5 6\n",
             "Area_3/r/Annotations/extra/deeper/chair_2.txt": b"1 2 3 4 5 6\n",
             "Area_3/r/Annotations/table_1.txt/part": b"1 2 3 4 5 6\n"}
    expected = (("Area_3/r/Annotations/extra", 2), ("Area_3/r/Annotations/table_1.txt", 1))
    for source in (open_source(write_tree(tmp_path / "raw", files)),
                   open_source(zip_tree(tmp_path / "raw.zip", files))):
        assert room_summary(source) == [("Area_3", "r", "Area_3/r", ["wall_1.txt"])]
        assert source.ignored == () and source.ignored_folders == expected
    assert cli(["prepare", str(tmp_path / "raw"), str(tmp_path / "out")]) == 0
    printed = capsys.readouterr()
    warnings = [line for line in printed.err.splitlines() if line.startswith("warning")]
    assert warnings == [f"warning: Area_3/r/Annotations/{name}: ignored (a folder inside Annotations, {n} not "
                        "read); only the <class>_<k>.txt files directly in Annotations are prepared: move them up "
                        "to keep them" for name, n in (("extra", "2 files"), ("table_1.txt", "1 file"))]
    # the area's summary line and manifest.json count them too (they said "lost objects 0" and nothing else)
    assert "lost objects 0, ignored folders in Annotations 2 (3 files), " in printed.out
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["ignored_folders"] == {"Area_3/r/Annotations/extra": 2, "Area_3/r/Annotations/table_1.txt": 1}


def test_object_order_is_class_then_number():
    names = ["wall_1.txt", "chair_10.txt", "chair_2.txt", "board_1.txt", "chair_1.txt", "odd.txt"]
    assert sorted(names, key=object_key) == ["board_1.txt", "chair_1.txt", "chair_2.txt", "chair_10.txt",
                                             "odd.txt", "wall_1.txt"]


def test_signature_follows_size_and_stamp(tmp_path):
    write_tree(tmp_path, {"Area_1/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n"})
    before = open_source(tmp_path).rooms()[0].signature()
    assert open_source(tmp_path).rooms()[0].signature() == before
    (tmp_path / "Area_1/r/Annotations/wall_1.txt").write_bytes(b"1 2 3 4 5 7\n1 1 1 1 1 1\n")
    assert open_source(tmp_path).rooms()[0].signature() != before


def test_a_raw_folder_whose_only_room_is_hidden_says_so(tmp_path):
    """It said "no room holds a valid point ... (see the warnings above)" with no warning printed."""
    write_tree(tmp_path, {"Area_1/.office_1/Annotations/wall_1.txt": b"1 2 3 4 5 6\n"})
    with pytest.raises(SourceError) as err:
        open_source(tmp_path).rooms()
    assert str(err.value) == (f"{tmp_path}: expected room folders in Area_1, found none; hidden folders are "
                              "skipped: Area_1/.office_1 (rename them)")


def test_raw_given_as_one_area_folder_says_to_give_its_parent(tmp_path):
    write_tree(tmp_path, {"Area_1/office_2/Annotations/wall_1.txt": b"1 2 3 4 5 6\n"})
    with pytest.raises(SourceError) as err:
        open_source(tmp_path / "Area_1").rooms()
    assert str(err.value) == (f"{tmp_path / 'Area_1'}: expected Area_N folders (raw S3DIS v1.2 layout), found "
                              f"none: RAW is itself one; give its parent folder, {tmp_path}")


def test_no_area_names_what_raw_holds(tmp_path):
    write_tree(tmp_path, {"notes.txt": b"x", "data/a.txt": b"y", ".hidden/Area_1/r/Annotations/w_1.txt": b"z"})
    with pytest.raises(SourceError) as err:
        open_source(tmp_path).rooms()
    assert str(err.value) == (f"{tmp_path}: expected Area_N folders (raw S3DIS v1.2 layout), found none; it holds "
                              "data, notes.txt: point RAW at the folder (or .zip) that holds Area_1 ... Area_6")


def test_folder_whose_names_hold_backslashes_says_what_to_do(tmp_path):
    """A Windows zip unpacked by a tool that keeps '\\' in names: one file per member, no folders."""
    write_tree(tmp_path, {"Area_1\\r\\Annotations\\wall_1.txt": b"1 2 3 4 5 6\n"})
    with pytest.raises(SourceError, match=r"its names hold '\\' separators .*give the \.zip itself, or unpack "
                                          r"it with `unzip`"):
        open_source(tmp_path).rooms()


@pytest.mark.parametrize("link, target", [("Area_1/office_2/up", ".."),
                                          ("Area_1/office_2/Annotations/top", "../../..")])
def test_symlink_loop_is_named_once(tmp_path, link, target):
    """`ln -s .. Area_1/office_2/up` was followed ~40 levels deep into a 2 kB path error."""
    write_tree(tmp_path, {"Area_1/office_2/Annotations/wall_1.txt": b"1 2 3 4 5 6\n"})
    (tmp_path / link).symlink_to(target)
    with pytest.raises(SourceError) as err:
        open_source(tmp_path).rooms()
    assert str(err.value) == (f"{tmp_path / link} (a symbolic link to {target}): leads back to "
                              f"{(tmp_path / link).parent.joinpath(target).resolve()}, which holds it: a loop; "
                              "remove the link")


def test_links_that_are_not_loops_are_followed(tmp_path):
    """A linked area, and rooms whose Annotations link to one folder (test_prepare builds big rooms so)."""
    write_tree(tmp_path / "raw", {"Area_1/office_2/Annotations/wall_1.txt": b"1 2 3 4 5 6\n"})
    write_tree(tmp_path / "elsewhere", {"Area_2/hall_1/Annotations/floor_1.txt": b"1 2 3 4 5 6\n"})
    (tmp_path / "raw/Area_2").symlink_to(tmp_path / "elsewhere/Area_2")
    (tmp_path / "raw/Area_1/office_3").mkdir()
    (tmp_path / "raw/Area_1/office_3/Annotations").symlink_to("../office_2/Annotations")
    assert room_summary(open_source(tmp_path / "raw")) == [
        ("Area_1", "office_2", "Area_1/office_2", ["wall_1.txt"]),
        ("Area_1", "office_3", "Area_1/office_3", ["wall_1.txt"]),
        ("Area_2", "hall_1", "Area_2/hall_1", ["floor_1.txt"])]


def _unlistable(monkeypatch, *names: str) -> None:
    """Make listing the folders named ``names`` fail as another user's mode-700 folder does (root, which
    runs the tests here, ignores permissions)."""
    import os

    real = os.scandir

    def scandir(path="."):
        if str(path).endswith(names):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)


def test_unreadable_folder_is_an_error_naming_it(tmp_path, monkeypatch):
    """os.walk without onerror skipped a folder it could not list: the area vanished, rc 0."""
    write_tree(tmp_path, {"Area_1/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n",
                          "Area_2/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n"})
    _unlistable(monkeypatch, "Area_2", "lost+found")
    with pytest.raises(SourceError) as err:
        open_source(tmp_path).rooms()
    assert str(err.value) == (f"{tmp_path / 'Area_2'}: cannot be read (Permission denied); check its "
                              "permissions (ls -ld), or ask its owner")
    monkeypatch.undo()
    _unlistable(monkeypatch, "Area_2/r/Annotations")  # a room's folder: it said "no Annotations folder"
    with pytest.raises(SourceError, match=r"Area_2/r/Annotations: cannot be read \(Permission denied\)"):
        open_source(tmp_path).rooms()


def test_unreadable_folder_outside_the_areas_is_skipped_or_named_if_no_area_is_found(tmp_path, monkeypatch):
    """``lost+found`` at the root of a data disk is unreadable to users: not a reason to refuse RAW."""
    write_tree(tmp_path / "disk", {"Area_1/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n"})
    (tmp_path / "disk/lost+found").mkdir()
    write_tree(tmp_path / "other", {"Stanford3dDataset_v1.2/Area_1/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n"})
    _unlistable(monkeypatch, "lost+found", "Stanford3dDataset_v1.2")
    assert [r.path for r in open_source(tmp_path / "disk").rooms()] == ["Area_1/r"]
    with pytest.raises(SourceError) as err:
        open_source(tmp_path / "other").rooms()
    assert str(err.value) == (f"{tmp_path / 'other'}: expected Area_N folders (raw S3DIS v1.2 layout), found none; "
                              f"cannot read {tmp_path / 'other/Stanford3dDataset_v1.2'} (Permission denied): check "
                              "its permissions (ls -ld)")


def test_area_folder_without_rooms_is_an_error_naming_it(tmp_path):
    """An Area_N folder left empty (an extraction that stopped early) vanished from folds.json, rc 0."""
    write_tree(tmp_path, {"Area_1/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n",
                          "Area_3/Area_3_alignmentAngle.txt": b"## Global alignment angle per room\n"})
    (tmp_path / "Area_2").mkdir()
    with pytest.raises(SourceError) as err:
        open_source(tmp_path).rooms()
    assert str(err.value) == (f"{tmp_path}: expected room folders in Area_2, Area_3, found none (an unpacking or "
                              "copy that stopped early?); unpack or copy them again, or remove them to prepare the "
                              "other areas")


def test_ignored_folders_are_counted_in_their_areas_line_below_a_top_folder(tmp_path, capsys):
    """The official zip's layout (a top folder above the areas): the summary counted the ignored folders by
    the path's first folder, so it said 0 while the warning above it named the folder."""
    top = "Stanford3dDataset_v1.2_Aligned_Version"
    files = {f"{top}/Area_3/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n",
             f"{top}/Area_3/r/Annotations/extra/chair_1.txt": b"1 2 3 4 5 6\n"}
    assert cli(["prepare", str(write_tree(tmp_path / "raw", files)), str(tmp_path / "out")]) == 0
    assert "lost objects 0, ignored folders in Annotations 1 (1 file), " in capsys.readouterr().out


@pytest.mark.parametrize("twin", ["wall_1.TXT", "Wall_1.txt", "wall_01.txt", "WALL_001.Txt"])
def test_two_files_of_one_object_are_refused_naming_both(tmp_path, capsys, twin):
    """``wall_1.txt`` and ``wall_1.TXT`` (or ``Wall_1.txt``, or ``wall_01.txt``: the class is read in any case,
    the number as a number) in one Annotations folder are one object: reading both would store its points
    twice and list it twice in ``objects``."""
    write_tree(tmp_path / "raw", {"Area_1/office_2/Annotations/wall_1.txt": b"1 2 3 4 5 6\n",
                                  f"Area_1/office_2/Annotations/{twin}": b"1 2 3 4 5 6\n",
                                  "Area_1/office_2/Annotations/chair_1.txt": b"1 2 3 4 5 6\n"})
    one, two = sorted([f"Area_1/office_2/Annotations/{name}" for name in ("wall_1.txt", twin)])
    with pytest.raises(SourceError, match=f"{one} and {two} name one object"):
        open_source(tmp_path / "raw").rooms()
    assert cli(["prepare", str(tmp_path / "raw"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(f"{one} and {two} name one object (wall 1: the class is read in any "
                                             "case, the number as a number); expected each object once: remove one")
    assert not list((tmp_path / "out").glob("*.h5"))


@pytest.mark.parametrize("copy, of", [("wall_2 - Copy.txt", "wall_2.txt"), ("wall_3 copy.txt", "wall_3.txt"),
                                      ("door_1(1).txt", "door_1.txt"), ("ceiling_1_backup.txt", "ceiling_1.txt"),
                                      ("wall_1.orig.txt", "wall_1.txt"), ("Copy of Wall_2.txt", "wall_2.txt")])
def test_a_copy_of_an_object_file_is_refused_naming_both(tmp_path, capsys, copy, of):
    """A file manager's or a backup's copy of ``wall_2.txt`` (not ``<class>_<k>.txt``, but holding
    ``wall_2``) would be read a second time, as clutter: refused in one line naming both files."""
    files = {f"Area_1/office_2/Annotations/{name}": b"1 2 3 4 5 6\n"
             for name in ("wall_1.txt", "wall_2.txt", "wall_3.txt", "wall_10.txt", "door_1.txt", "ceiling_1.txt")}
    write_tree(tmp_path / "raw", {**files, f"Area_1/office_2/Annotations/{copy}": b"1 2 3 4 5 6\n"})
    assert cli(["prepare", str(tmp_path / "raw"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert f"Area_1/office_2/Annotations/{copy} looks like a copy of Area_1/office_2/Annotations/{of} " in err[0]
    assert err[0].endswith("remove the copy (or rename it <class>_<k>.txt if it is another object)")
    assert not list((tmp_path / "out").glob("*.h5"))


@pytest.mark.parametrize("name", ["wall_10.txt", "stairs_1.txt", "clutter_12.txt", "wallpaper.txt"])
def test_names_that_are_no_copy_are_read(tmp_path, name):
    """``wall_10`` beside ``wall_1`` (a digit follows), S3DIS's ``stairs_1`` and ``clutter_12``, and a name that
    holds no other object's name, are objects of their own."""
    write_tree(tmp_path, {"Area_1/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n",
                          f"Area_1/r/Annotations/{name}": b"1 2 3 4 5 6\n"})
    assert len(open_source(tmp_path).rooms()[0].files) == 2


@pytest.mark.parametrize("name", ["side_table_1.txt", "desk_lamp_1.txt", "curtain_wall_2.txt"])
def test_ones_own_classes_of_several_words_are_no_copy(tmp_path, name):
    """``side_table_1`` holds ``table_1`` as a word, yet it is an object of one's own class ``side_table``
    (labelled clutter, as before): the copy check refused the room."""
    write_tree(tmp_path, {"Area_1/r/Annotations/table_1.txt": b"1 2 3 4 5 6\n",
                          "Area_1/r/Annotations/wall_2.txt": b"1 2 3 4 5 6\n",
                          f"Area_1/r/Annotations/{name}": b"1 2 3 4 5 6\n"})
    assert len(open_source(tmp_path).rooms()[0].files) == 3


@pytest.mark.parametrize("folder", ["area_1", "AREA_1", "Area 1", "area_01", "Area_1_Aligned", "area_1_aligned"])
def test_an_area_folder_not_spelt_area_n_is_refused_naming_it(tmp_path, capsys, folder):
    """``area_1/`` (or ``Area_1_Aligned/``) holding rooms was skipped without a word: its area vanished from the
    folds."""
    write_tree(tmp_path / "raw", {f"{folder}/office_2/Annotations/wall_1.txt": b"1 2 3 4 5 6\n",
                                  "Area_2/office_1/Annotations/wall_1.txt": b"1 2 3 4 5 6\n"})
    assert cli(["prepare", str(tmp_path / "raw"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith(f"expected area folders named exactly Area_N (Area_1 ... Area_6), found "
                                             f"rooms with Annotations in {folder}, which would be left out of the "
                                             "folds: rename it Area_1 (or remove it to prepare the other areas)"), err
    assert not list((tmp_path / "out").glob("*.h5"))


def test_a_folder_like_an_area_without_rooms_is_not_refused(tmp_path):
    """``area_1/notes.txt`` (no room with Annotations in it) is not an area: left alone, as before."""
    write_tree(tmp_path, {"area_1/notes.txt": b"x\n", "Area_2/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n"})
    assert [r.area for r in open_source(tmp_path).rooms()] == ["Area_2"]


@pytest.mark.parametrize("zipped", [False, True])
def test_a_room_without_its_annotations_says_what_to_do(tmp_path, capsys, zipped):
    """An ``annotations`` folder (another case) is named with the rename; an empty ``Annotations`` (an
    unpacking that stopped early) says to extract the room again or remove it."""
    files = {"Area_1/office_2/annotations/wall_1.txt": b"1 2 3 4 5 6\n",
             "Area_1/office_1/Annotations/wall_1.txt": b"1 2 3 4 5 6\n"}
    raw = write_tree(tmp_path / "raw", files) if not zipped else zip_tree(tmp_path / "raw.zip", files)
    if not zipped:
        (tmp_path / "raw/Area_1/office_3/Annotations").mkdir(parents=True)
    assert cli(["prepare", str(raw), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "Area_1/office_2 (its folder is spelt annotations: rename it Area_1/office_2/Annotations)" in err[0]
    if not zipped:
        assert err[0].endswith("Area_1/office_3 (no <class>_<k>.txt in Annotations: an unpacking that stopped "
                               "early? extract the room again, or remove Area_1/office_3)")


def test_area_folders_of_one_number_are_refused_naming_both(tmp_path, capsys):
    """``Area_1`` and ``Area_01`` would write fold keys "1" and "01" for one test area."""
    write_tree(tmp_path / "raw", {"Area_1/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n",
                                  "Area_01/s/Annotations/wall_1.txt": b"1 2 3 4 5 6\n",
                                  "Area_2/t/Annotations/wall_1.txt": b"1 2 3 4 5 6\n"})
    with pytest.raises(SourceError, match="Area_01 and Area_1 are both area 1; expected one folder per area number"):
        open_source(tmp_path / "raw").rooms()
    assert cli(["prepare", str(tmp_path / "raw"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Area_01 and Area_1 are both area 1" in err[0]
    assert not (tmp_path / "out" / "folds.json").exists()
    zipped = zip_tree(tmp_path / "raw.zip", {"top/Area_1/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n",
                                         "top/Area_01/s/Annotations/wall_1.txt": b"1 2 3 4 5 6\n"})
    with pytest.raises(SourceError, match="top/Area_01 and top/Area_1 are both area 1"):
        open_source(zipped).rooms()


@pytest.mark.parametrize("zipped", [False, True])
def test_an_areas_zip_inside_raw_without_its_folder_is_refused_naming_it(tmp_path, capsys, zipped):
    """``RAW/Area_2.zip`` beside ``RAW/Area_1/`` (an area left zipped): prepare opens no zip inside RAW, and
    prepared Area_1 alone without a word: Area_2 vanished from the folds. The same inside a RAW zip."""
    inner = zip_tree(tmp_path / "inner.zip", {"Area_2/t/Annotations/wall_1.txt": b"1 2 3 4 5 6\n"}).read_bytes()
    files = {"Area_1/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n", "Area_2.zip": inner}
    raw = zip_tree(tmp_path / "raw.zip", files) if zipped else write_tree(tmp_path / "raw", files)
    assert cli(["prepare", str(raw), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    unpack = (f"unpack {raw} and it into one folder and give that" if zipped else
              f"unpack it there (unzip {raw}/Area_2.zip -d {raw})")
    assert err == [f"pointgeope prepare: error: {raw}: Area_2.zip is the zip of an area without a folder here, and "
                   "prepare opens no zip inside RAW: its area would be left out of the folds; "
                   f"{unpack}, or remove it to prepare the other areas"]
    assert not (tmp_path / "out" / "folds.json").exists()


def test_an_areas_zip_in_the_top_folder_says_to_unpack_it_beside_the_other_areas(tmp_path, capsys):
    """RAW/top/Area_2.zip beside RAW/top/Area_1/ (S3DIS's top folder): the command named unpacks it into the
    folder that holds it, where the other areas are (``-d RAW`` put Area_2 one level above them)."""
    inner = zip_tree(tmp_path / "inner.zip", {"Area_2/t/Annotations/wall_1.txt": b"1 2 3 4 5 6\n"}).read_bytes()
    raw = write_tree(tmp_path / "raw", {"top/Area_1/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n",
                                        "top/Area_2.zip": inner})
    assert cli(["prepare", str(raw), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"(unzip {raw}/top/Area_2.zip -d {raw}/top)" in err[0]


def test_an_areas_zip_beside_its_unpacked_folder_is_left_alone(tmp_path):
    """``Area_2.zip`` kept beside the ``Area_2/`` it was unpacked into: read as before (the folder)."""
    inner = zip_tree(tmp_path / "inner.zip", {"Area_2/t/Annotations/wall_1.txt": b"1 2 3 4 5 6\n"}).read_bytes()
    write_tree(tmp_path / "raw", {"Area_1/r/Annotations/wall_1.txt": b"1 2 3 4 5 6\n", "Area_2.zip": inner,
                                  "Area_2/t/Annotations/wall_1.txt": b"1 2 3 4 5 6\n", "Area_1/Area_1.zip": inner})
    assert [(r.area, r.name) for r in open_source(tmp_path / "raw").rooms()] == [("Area_1", "r"), ("Area_2", "t")]
