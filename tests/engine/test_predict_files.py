"""Tests of `pointgeope predict` on what it reads and writes: bad inputs reported while the others are
predicted, dangling links and FIFOs named, area files checked as training checks them, output names and
folders (inside --out, reruns into the input folder), the h5 and LAS outputs."""
from __future__ import annotations

import numpy as np
import pytest

from pointgeope.cli import main as cli
from pointgeope.h5 import list_rooms, read_room
from pointgeope.h5_predictions import read_predictions
from tests.engine.conftest import last_line_only, one_line
from tests.engine.predict_helpers import without_run_cap_warning, write_scan
from tests.test_extras import message


def test_bad_inputs_fail_alone_and_the_exit_code_says_so(tiny_run, two_folds, tmp_path, capsys):
    room = read_room(two_folds / "Area_1.h5", "office_1")
    good = tmp_path / "office_1.npy"
    np.save(good, np.c_[room["coord"], room["color"]])
    nan = room["coord"].astype(np.float64)
    nan[10, 2] = np.nan
    np.save(tmp_path / "nan.npy", np.c_[nan, room["color"]])
    (tmp_path / "empty.txt").write_text("")
    write_scan(tmp_path / "full.ply", room["coord"].astype(np.float64), room["color"])
    (tmp_path / "cut.ply").write_bytes((tmp_path / "full.ply").read_bytes()[:-500])
    (tmp_path / "scan.e57").write_text("?")
    np.save(tmp_path / "grey.npy", room["coord"])   # no colour for a colour model
    inputs = ["nan.npy", "empty.txt", "cut.ply", "scan.e57", "office_1.npy", "grey.npy"]
    code = cli(["predict", str(tiny_run), *(str(tmp_path / i) for i in inputs), "--out", str(tmp_path / "o")])
    err = without_run_cap_warning(capsys.readouterr().err)
    assert code == 2
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["office_1_pred.json", "office_1_pred.npy",
                                                                 "office_1_pred.ply"]
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "office_1_pred.npy"),
                                  read_predictions(tiny_run / "predictions" / "Area_1.h5", "office_1"))
    assert len(err) == 5 and all(line.startswith("pointgeope predict: error: ") for line in err)
    for name, words in (("nan.npy", "NaN or infinite coordinates (the first is point 10"),
                        ("empty.txt", "empty file"), ("cut.ply", "truncated PLY"),
                        ("scan.e57", "unknown extension '.e57'"),
                        ("grey.npy", "has no colour, but")):
        assert any(f"{tmp_path / name}: " in line and words in line for line in err), name
    assert any("data.color=false" in line for line in err)


def test_a_bad_file_in_a_folder_stops_nothing(tiny_run, two_folds, tmp_path, capsys):
    """A 0-byte .npy (np.load raises EOFError) and a truncated one before and after a good scan in one
    folder: one line each, the good scan predicted, exit 2 and the count in the last line."""
    room = read_room(two_folds / "Area_1.h5", "office_1")
    folder = tmp_path / "scans"
    folder.mkdir()
    (folder / "a_empty.npy").write_bytes(b"")
    np.save(folder / "b_good.npy", np.c_[room["coord"], room["color"]])
    (folder / "c_cut.npy").write_bytes((folder / "b_good.npy").read_bytes()[:1000])
    code = cli(["predict", str(tiny_run), str(folder), "--out", str(tmp_path / "o")])
    out, err = capsys.readouterr()
    assert code == 2
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "b_good_pred.npy"),
                                  read_predictions(tiny_run / "predictions" / "Area_1.h5", "office_1"))
    err = without_run_cap_warning(err)
    assert len(err) == 2 and all(line.startswith("pointgeope predict: error: ") for line in err)
    assert f"{folder / 'a_empty.npy'}: not a readable .npy array (empty file)" in err[0]
    assert f"{folder / 'c_cut.npy'}: not a readable .npy array" in err[1]
    assert out.splitlines()[-1] == (f"predicted 1 of 3 inputs into {tmp_path / 'o'}; 2 failed: "
                                    f"{folder / 'a_empty.npy'}, {folder / 'c_cut.npy'} (see the errors above)")


def test_a_dangling_link_or_a_fifo_among_the_inputs_is_named(tiny_run, tmp_path, capsys):
    """A dangling symbolic link or a FIFO in a folder of scans was skipped without a word (and a FIFO given
    as an input was "found nothing"; reading it would wait forever)."""
    import os

    folder = tmp_path / "scans"
    folder.mkdir()
    np.save(folder / "good.npy", np.random.default_rng(0).random((200, 6)) * [3, 3, 2, 255, 255, 255])
    (folder / "gone.ply").symlink_to(tmp_path / "nowhere.ply")
    os.mkfifo(folder / "pipe.txt")
    assert cli(["predict", str(tiny_run), str(folder), str(folder / "pipe.txt"), "--out", str(tmp_path / "o")]) == 2
    assert without_run_cap_warning(capsys.readouterr().err) == [
        f"pointgeope predict: error: {folder / 'gone.ply'}: expected a scan file, found a symbolic link to "
        f"nothing ({tmp_path / 'nowhere.ply'})",
        f"pointgeope predict: error: {folder / 'pipe.txt'}: expected a scan file, found a FIFO (named pipe)",
        f"pointgeope predict: error: {folder / 'pipe.txt'}: expected a scan file, found a FIFO (named pipe)"]
    assert (tmp_path / "o" / "good_pred.npy").is_file()


def test_a_prepared_area_input_is_checked_as_training_checks_it(tiny_run, tiny_root, tmp_path, capsys):
    """A prepared Area_1.h5 whose labels were changed after prepare (its manifest.json says so) was
    predicted as if nothing were wrong; now it is refused in one line, the other input still predicted,
    and the viewer refuses it the same way."""
    import h5py

    root = tmp_path / "root"
    root.mkdir()
    for name in ("Area_1.h5", "manifest.json"):
        (root / name).write_bytes((tiny_root / name).read_bytes())
    with h5py.File(root / "Area_1.h5", "r+") as f:
        f["office_1/label"][0] = (f["office_1/label"][0] + 1) % 13
    room = read_room(tiny_root / "Area_1.h5", "office_1")
    np.save(tmp_path / "office_1.npy", np.c_[room["coord"], room["color"]])
    assert cli(["predict", str(tiny_run), str(root / "Area_1.h5"), str(tmp_path / "office_1.npy"),
                "--out", str(tmp_path / "o"), "--format", "npy"]) == 2
    err = without_run_cap_warning(capsys.readouterr().err)
    message = (f"{root / 'Area_1.h5'}: does not match its checksum in manifest.json (changed or damaged after "
               "prepare); run `pointgeope prepare` again")
    assert err == [f"pointgeope predict: error: {message}"]
    assert sorted(p.name for p in (tmp_path / "o").rglob("*.npy")) == ["office_1_pred.npy"]
    assert cli(["viz", str(root / "Area_1.h5"), "--list"]) == 2
    assert without_run_cap_warning(capsys.readouterr().err) == [f"pointgeope viz: error: {message}"]


def test_a_wrong_model_argument_is_told_before_any_area_file_is_read(tiny_root, tmp_path, monkeypatch, capsys):
    """A model path with a typo was reported only after every prepared area input had been read and hashed
    (minutes for the six areas of S3DIS); the model is loaded first now."""
    import pointgeope.data.check as check

    def must_not_read(path):
        raise AssertionError(f"{path} was read before the model argument was checked")

    monkeypatch.setattr(check, "check_area_file", must_not_read)
    missing = tmp_path / "run" / "last.pt"
    assert cli(["predict", str(missing), str(tiny_root / "Area_1.h5"), "--out", str(tmp_path / "o")]) == 2
    err = without_run_cap_warning(capsys.readouterr().err)
    assert len(err) == 1 and err[0].startswith("pointgeope predict: error: ") and str(missing) in err[0], err


def test_each_progress_line_names_the_folder_its_outputs_went_to(tiny_run, tiny_root, tmp_path, capsys):
    """The rooms of an Area_N.h5 go to DIR/Area_N/, but the progress line named only the files (as if in DIR);
    it names the folder now, and --format lists exactly the formats written."""
    room = read_room(tiny_root / "Area_2.h5", "office_1")
    np.save(tmp_path / "scan.npy", np.c_[room["coord"], room["color"]])
    out = tmp_path / "o"
    assert cli(["predict", str(tiny_run), str(tiny_root / "Area_2.h5"), str(tmp_path / "scan.npy"),
                "--out", str(out), "--format", "npy,h5"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if " -> " in line]
    rooms = list_rooms(tiny_root / "Area_2.h5")
    assert [line.split(" -> ")[1] for line in lines] == (
        [f"{r}_pred.npy, {r}_pred.h5 in {out / 'Area_2'}" for r in rooms] + [f"scan_pred.npy, scan_pred.h5 in {out}"])
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*_pred.*")) == sorted(
        [f"Area_2/{r}_pred.{f}" for r in rooms for f in ("npy", "h5", "json")]
        + ["scan_pred.h5", "scan_pred.json", "scan_pred.npy"])


def test_a_raw_s3dis_root_is_predicted_as_its_prepared_root(tiny_run, tiny_root, tmp_path, capsys):
    """``predict RUN tiny/raw`` said "a folder without scans"; the rooms of its Area_N folders are predicted
    into DIR/Area_N/, with the labels of the same rooms prepared."""
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "Area_1").symlink_to(tiny_root.parent / "raw" / "Area_1")
    assert cli(["predict", str(tiny_run), str(raw), "--out", str(tmp_path / "o"), "--format", "npy"]) == 0
    assert cli(["predict", str(tiny_run), str(tiny_root / "Area_1.h5"), "--out", str(tmp_path / "p"),
                "--format", "npy"]) == 0
    rooms = list_rooms(tiny_root / "Area_1.h5")
    assert sorted(p.name for p in (tmp_path / "o" / "Area_1").iterdir()) == sorted(
        f"{r}_pred.{f}" for r in rooms for f in ("npy", "json"))
    for room in rooms:
        np.testing.assert_array_equal(np.load(tmp_path / "o" / "Area_1" / f"{room}_pred.npy"),
                                      np.load(tmp_path / "p" / "Area_1" / f"{room}_pred.npy"))


def test_a_raw_room_is_predicted_by_a_network_without_normals_without_estimating_them(tiny_run, tiny_root, tmp_path,
                                                                                      monkeypatch):
    """A PTv1 network reads no normals: a raw room folder was parsed with them (prepare's estimate, most of the
    room's time: ~2.6 s a million points) for nothing; its h5 output now holds none, as a scan of any other format
    (the same labels as the prepared room's)."""
    import h5py

    import pointgeope.data.normals

    def refused(*args, **kwargs):
        raise AssertionError("normals estimated for a network that reads none")

    monkeypatch.setattr(pointgeope.data.normals, "estimate_normals", refused)
    raw = tiny_root.parent / "raw" / "Area_1" / "office_1"
    assert cli(["predict", str(tiny_run), str(raw), "--out", str(tmp_path / "o"), "--format", "npy,h5"]) == 0
    with h5py.File(tmp_path / "o" / "office_1_pred.h5") as f:
        names = []
        f.visit(names.append)
    assert names and not any(name.split("/")[-1] == "normal" for name in names), names
    assert cli(["predict", str(tiny_run), str(tiny_root / "Area_1.h5"), "--out", str(tmp_path / "p"),
                "--format", "npy"]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "office_1_pred.npy"),
                                  np.load(tmp_path / "p" / "Area_1" / "office_1_pred.npy"))


def test_a_run_folder_as_the_model_is_told_its_fold_folders(tiny_run, tmp_path, capsys):
    """``predict RUN`` (the run, not ``RUN/area_K``) said "expected a checkpoint at RUN/last.pt, found nothing";
    it is evaluate's message now (one owner: ``evaluate.not_a_fold``), naming the folds the run holds."""
    np.save(tmp_path / "s.npy", np.zeros((5, 6)))
    (tmp_path / "runs" / "area_10").mkdir(parents=True)
    (tmp_path / "runs" / "area_2").mkdir()
    (tmp_path / "runs" / "area_x").mkdir()
    for run, folds in ((tiny_run.parent, "area_1"), (tmp_path / "runs", "area_2, area_10")):
        first = run / folds.split(",")[0]
        expected = (f"expected a fold folder named area_K (RUN/area_K), got {run}; give a fold, e.g. {first} "
                    f"(its folds: {folds})")
        assert one_line(capsys, 2, ["predict", str(run), str(tmp_path / "s.npy"), "--out", str(tmp_path / "o")]) \
            == f"pointgeope predict: error: {expected}"
        assert one_line(capsys, 2, ["evaluate", str(run)]) == f"pointgeope evaluate: error: {expected}"
    line = one_line(capsys, 2, ["predict", str(tmp_path / "runs" / "area_2"), str(tmp_path / "s.npy"),
                                "--out", str(tmp_path / "o")])   # a fold folder without its checkpoint
    assert line == (f"pointgeope predict: error: expected a checkpoint at {tmp_path / 'runs' / 'area_2' / 'last.pt'}, "
                    "found nothing: the fold has not saved a checkpoint yet (its training stopped before the first); "
                    f"train it first (pointgeope train --config CONFIG --test-area 2 --run-dir {tmp_path / 'runs'})")
    assert not (tmp_path / "o").exists()


def test_a_scans_name_comes_from_its_absolute_path(tiny_root, tmp_path, monkeypatch):
    """``.`` named the rooms of the current folder "/office_1" (``Path('.').name == ''``), whose outputs
    went to the file system's root; ``..`` named them "../office_1"."""
    from pointgeope.scans.sources import find_scans

    raw = tiny_root.parent / "raw" / "Area_1"
    monkeypatch.chdir(raw)
    assert [ref.name for ref in find_scans(["."])[0]] == ["Area_1/hallway_1", "Area_1/office_1"]
    monkeypatch.chdir(raw / "office_1" / "Annotations")
    assert [ref.name for ref in find_scans([".."])[0]] == ["office_1"]
    assert [ref.name for ref in find_scans(["../.."])[0]] == ["Area_1/hallway_1", "Area_1/office_1"]


def test_every_output_lies_inside_out(tiny_run, tiny_root, two_folds, tmp_path, monkeypatch, capsys):
    """A folder given as ``..`` holding a raw room and an area file named ``...h5`` (stem ``..``): the room
    went to --out/.., the area's rooms beside --out; now the room goes inside and each room of the oddly
    named file is one line naming it."""
    work = tmp_path / "scans" / "here"
    work.mkdir(parents=True)
    (tmp_path / "scans" / "...h5").symlink_to(two_folds / "Area_1.h5")
    (tmp_path / "scans" / "room").mkdir()
    (tmp_path / "scans" / "room" / "Annotations").symlink_to(tiny_root.parent / "raw/Area_1/office_1/Annotations")
    monkeypatch.chdir(work)
    assert cli(["predict", str(tiny_run), "..", "--out", "out", "--format", "npy"]) == 2
    err = without_run_cap_warning(capsys.readouterr().err)
    assert len(err) == 2 and all("...h5:" in line and "outside --out out" in line for line in err), err
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*_pred.npy")) == [
        "scans/here/out/scans/room_pred.npy"]


def test_a_rerun_into_the_input_folder_does_not_take_its_outputs_as_inputs(tiny_run, tmp_path, capsys):
    """``predict RUN clouds --out clouds`` twice: the second run predicted its own a_pred.h5, failed on
    a_pred.npy and a_probs.npy and refused a_pred.ply as a collision, exit 2, at every rerun."""
    clouds = tmp_path / "clouds"
    clouds.mkdir()
    np.save(clouds / "a.npy", np.random.default_rng(1).random((400, 6)) * [3, 3, 2, 255, 255, 255])
    argv = ["predict", str(tiny_run), str(clouds), "--out", str(clouds), "--format", "npy,ply,h5", "--probabilities"]
    assert cli(argv) == 0
    first = {p.name: p.read_bytes() for p in clouds.iterdir() if p.name != "a_pred.h5"}
    capsys.readouterr()
    assert cli(argv + ["--force"]) == 0   # predicted again (without --force: skipped, complete)
    out, err = capsys.readouterr()
    assert err == "" and {p.name: p.read_bytes() for p in clouds.iterdir() if p.name != "a_pred.h5"} == first
    assert sorted(first) == ["a.npy", "a_pred.json", "a_pred.npy", "a_pred.ply", "a_probs.npy"]
    assert (f"note: {clouds}: 5 files named as this command's outputs (a_pred.h5, a_pred.json, a_pred.npy, "
            "a_pred.ply, a_probs.npy) are not inputs in --out") in out


@pytest.mark.slow
class _NotInstalled:
    """A ``sys.meta_path`` finder before the others: ``import pykdtree`` (or a submodule) raises the
    ``ModuleNotFoundError`` of a package that is not installed (``name == "pykdtree"``)."""

    @staticmethod
    def find_spec(fullname, path=None, target=None):
        if fullname.partition(".")[0] == "pykdtree":
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)


def test_a_missing_toolkit_package_is_the_toolkits_one_line_not_a_traceback_per_scan(tiny_run, tmp_path, monkeypatch,
                                                                                       capsys):
    """pykdtree (the scans' spacing check) not installed: predict caught the ModuleNotFoundError with every
    other bug of a scan, printed a traceback per scan and exited 1. It is the environment's, not a scan's: the
    toolkit's one line, exit code 2, as every other command says it, and no scan written. (In this process,
    pykdtree unimported and hidden: the spacing check imports it at its first call.)"""
    import sys

    rng = np.random.default_rng(0)
    for name in ("a", "b"):
        np.save(tmp_path / f"{name}.npy", np.c_[rng.random((300, 3)) * 3, rng.integers(0, 256, (300, 3))])
    for name in [m for m in sys.modules if m.partition(".")[0] == "pykdtree"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_NotInstalled, *sys.meta_path])
    capsys.readouterr()
    code = cli(["predict", str(tiny_run), str(tmp_path / "a.npy"), str(tmp_path / "b.npy"), "--out",
                str(tmp_path / "o"), "--format", "npy"])
    err = capsys.readouterr().err
    assert code == 2, err[-3000:]
    last_line_only(err, f"pointgeope predict: error: {message('pykdtree')}")
    assert not (tmp_path / "o").exists() or not any(p.suffix == ".npy" for p in (tmp_path / "o").iterdir())


def test_an_output_that_is_another_input_is_refused(tiny_run, two_folds, tmp_path, capsys):
    """`predict RUN a.npy a_pred.npy --out <their folder>`: a's output a_pred.npy replaced the scan a_pred.npy
    (then predicted as if it were the scan), exit 0; now a is refused, a_pred.npy kept and predicted."""
    room = read_room(two_folds / "Area_1.h5", "office_1")
    scan = np.c_[room["coord"], room["color"]]
    for name in ("a", "a_pred"):
        np.save(tmp_path / f"{name}.npy", scan)
    before = (tmp_path / "a_pred.npy").read_bytes()
    code = cli(["predict", str(tiny_run), str(tmp_path / "a.npy"), str(tmp_path / "a_pred.npy"),
                "--out", str(tmp_path), "--format", "npy"])
    err = capsys.readouterr().err
    assert code != 0 and (tmp_path / "a_pred.npy").read_bytes() == before
    assert (f"{tmp_path / 'a.npy'}: its output would replace the input {tmp_path / 'a_pred.npy'}; predict it "
            "into another --out folder") in err
    assert np.load(tmp_path / "a_pred_pred.npy").shape == (len(scan),)


def test_a_scan_given_twice_is_predicted_once_and_two_of_one_name_are_refused(tiny_run, two_folds, tmp_path, capsys):
    """`predict RUN scans scans/a.npy` (a glob that overlaps a folder): a was refused as overwriting the outputs
    of itself, exit 2 and "1 failed: a.npy" though its outputs were written; now it is predicted once, exit 0.
    Another file of the same name still is refused."""
    room = read_room(two_folds / "Area_1.h5", "office_1")
    (tmp_path / "scans").mkdir()
    (tmp_path / "other").mkdir()
    np.save(tmp_path / "scans" / "a.npy", np.c_[room["coord"], room["color"]])
    np.save(tmp_path / "other" / "a.npy", np.c_[room["coord"], room["color"]])
    out = tmp_path / "o"
    code = cli(["predict", str(tiny_run), str(tmp_path / "scans"), str(tmp_path / "scans" / "a.npy"),
                "--out", str(out), "--format", "npy"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert f"note: {tmp_path / 'scans' / 'a.npy'}: given twice, predicted once" in captured.out.splitlines()
    assert captured.out.splitlines()[-1] == f"predicted 1 of 1 input into {out}"
    code = cli(["predict", str(tiny_run), str(tmp_path / "scans" / "a.npy"), str(tmp_path / "other" / "a.npy"),
                "--out", str(out), "--format", "npy", "--force"])
    assert code == 2
    assert (f"{tmp_path / 'other' / 'a.npy'}: its outputs would overwrite those of {tmp_path / 'scans' / 'a.npy'} "
            "(same name 'a'); predict it into another --out folder") in capsys.readouterr().err


def test_an_area_file_listed_in_its_manifest_is_hashed_once_per_command(tiny_run, tiny_root, tmp_path, monkeypatch,
                                                                        capsys):
    """Its check against manifest.json hashed the whole file, then predict's record hashed it again for the
    input's checksum (about 1 s per GB each). Once now, and the record still matches a rerun, which skips."""
    import pointgeope.checksum
    import pointgeope.data.check
    import pointgeope.engine.predict_record

    area = tiny_root / "Area_2.h5"
    hashed = []

    def counted(path):
        hashed.append(str(path))
        return pointgeope.checksum.file_checksum(path)

    for module in (pointgeope.data.check, pointgeope.engine.predict_record):
        monkeypatch.setattr(module, "file_checksum", counted)
    out = tmp_path / "o"
    for run in range(2):
        hashed.clear()
        assert cli(["predict", str(tiny_run), str(area), "--out", str(out), "--format", "npy"]) == 0
        assert hashed.count(str(area)) == 1, (run, hashed)
    rooms = list_rooms(area)
    assert f"; {len(rooms)} skipped, complete from an earlier run" in capsys.readouterr().out.splitlines()[-1]
