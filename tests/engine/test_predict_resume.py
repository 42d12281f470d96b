"""Tests of `pointgeope predict` resuming: a rerun of the same command skips the scans whose outputs an
earlier run completed with the same model, input and options, and predicts the others again."""
from __future__ import annotations

import contextlib
import json
import shutil

import numpy as np
import pytest

import pointgeope.engine.predict as predict_module
import pointgeope.engine.predict_model as model_module
import pointgeope.engine.predict_record as record_module
from pointgeope.checksum import file_checksum, folder_checksum
from pointgeope.cli import main as cli


@pytest.fixture()
def scans(tmp_path):
    """Three small coloured scans in a folder, of different point counts (a.npy, b.npy, c.npy)."""
    folder = tmp_path / "scans"
    folder.mkdir()
    for i, name in enumerate("abc"):
        rng = np.random.default_rng(i)
        np.save(folder / f"{name}.npy", rng.random((300 + 50 * i, 6)) * [3, 3, 2, 255, 255, 255])
    return folder


@pytest.fixture()
def predicted(monkeypatch):
    """The sources predict_scan is called with, in order (the scans actually predicted)."""
    calls: list[str] = []
    original = predict_module.predict_scan

    def counting(predictor, scan, *args, **kwargs):
        calls.append(scan.source.rsplit("/", 1)[-1])
        return original(predictor, scan, *args, **kwargs)

    monkeypatch.setattr(predict_module, "predict_scan", counting)
    return calls


def files(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def argv(run, scans, out, *extra):
    return ["predict", str(run), str(scans), "--out", str(out), *extra]


@contextlib.contextmanager
def older_version(monkeypatch, record, option, module, name, older):
    """Within the block, ``module.name`` writes as an older version did (``older(today's function)``); as the
    block ends, the predict record ``record`` becomes as that version wrote it (``made_by.options`` without
    ``option``) and today's function is back."""
    original = getattr(module, name)
    monkeypatch.setattr(module, name, older(original))
    yield
    made = json.loads(record.read_text())
    made["made_by"]["options"].pop(option, None)
    record.write_text(json.dumps(made))
    monkeypatch.setattr(module, name, original)


def test_a_rerun_after_a_kill_predicts_only_the_rest_and_matches_an_uninterrupted_run(
        tiny_run, scans, tmp_path, capsys, monkeypatch, predicted, code_at):
    """Killed (KeyboardInterrupt) after the first scan's outputs and record: the same command predicts b and
    c only, says so for a, and the folder equals that of one uninterrupted run, byte for byte."""
    code_at()   # committed code: the skip line the same in a clone with edits
    assert cli(argv(tiny_run, scans, tmp_path / "whole", "--probabilities")) == 0
    original = record_module.write_outputs
    written = []

    def killed_after_first(out, scan, *args, **kwargs):
        if written:
            raise KeyboardInterrupt
        written.append(scan.source)
        return original(out, scan, *args, **kwargs)

    monkeypatch.setattr(record_module, "write_outputs", killed_after_first)
    assert cli(argv(tiny_run, scans, tmp_path / "o", "--probabilities")) != 0
    assert sorted(files(tmp_path / "o")) == ["a_pred.json", "a_pred.npy", "a_pred.ply", "a_probs.npy"]
    monkeypatch.setattr(record_module, "write_outputs", original)
    predicted.clear()
    capsys.readouterr()
    assert cli(argv(tiny_run, scans, tmp_path / "o", "--probabilities")) == 0
    out = capsys.readouterr().out.splitlines()
    assert predicted == ["b.npy", "c.npy"]
    assert (f"skipped {scans / 'a.npy'}: its outputs in {tmp_path / 'o'} are complete, from the same model, input, "
            "options and code (--force predicts it again)") in out
    assert out[-1] == f"predicted 2 of 3 inputs into {tmp_path / 'o'}; 1 skipped, complete from an earlier run"
    assert files(tmp_path / "o") == files(tmp_path / "whole")
    record = json.loads((tmp_path / "o" / "b_pred.json").read_text())
    assert record["made_by"]["input"] == file_checksum(scans / "b.npy")
    assert record["outputs"]["b_pred.ply"]["sha256"] == file_checksum(tmp_path / "o" / "b_pred.ply")
    predicted.clear()
    assert cli(argv(tiny_run, scans, tmp_path / "o", "--probabilities")) == 0 and predicted == []
    assert capsys.readouterr().out.splitlines()[-1] == (f"predicted 0 of 3 inputs into {tmp_path / 'o'}; "
                                                        "3 skipped, complete from an earlier run")
    assert cli(argv(tiny_run, scans, tmp_path / "o", "--probabilities", "--force")) == 0
    assert predicted == ["a.npy", "b.npy", "c.npy"] and files(tmp_path / "o") == files(tmp_path / "whole")


def test_a_kill_between_two_files_of_a_scan_predicts_it_again(tiny_run, scans, tmp_path, monkeypatch, predicted):
    """--force over complete outputs, killed after a's new .npy and before its .ply: no record is left that
    would vouch for the mixed files, so the next run predicts a again."""
    from pointgeope.scans import ply

    out = tmp_path / "o"
    assert cli(argv(tiny_run, scans / "a.npy", out)) == 0
    whole = files(out)

    original = ply.write_vertices

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ply, "write_vertices", killed)
    assert cli(argv(tiny_run, scans / "a.npy", out, "--force")) != 0
    assert not (out / "a_pred.json").exists() and (out / "a_pred.ply").read_bytes() == whole["a_pred.ply"]
    monkeypatch.setattr(ply, "write_vertices", original)
    assert cli(argv(tiny_run, scans / "a.npy", out)) == 0
    assert predicted == ["a.npy"] * 3 and files(out) == whole


@pytest.mark.parametrize("extra", [["--format", "npy"], ["--probabilities"], ["--tta"], ["--scale", "0.5"],
                                   ["--max-fragments", "1"], ["eval.vote=softmax"]])
def test_a_changed_option_predicts_again(tiny_run, scans, tmp_path, predicted, extra):
    assert cli(argv(tiny_run, scans / "b.npy", tmp_path / "o")) == 0
    assert cli(argv(tiny_run, scans / "b.npy", tmp_path / "o", *extra)) == 0
    assert predicted == ["b.npy", "b.npy"]


def test_options_that_only_choose_how_it_runs_still_skip(tiny_run, scans, tmp_path, predicted):
    assert cli(argv(tiny_run, scans / "b.npy", tmp_path / "o")) == 0
    assert cli(argv(tiny_run, scans / "b.npy", tmp_path / "o", "--device", "cpu", "--batch-points", "5000",
                    "train.threads=1", "--format", "ply,npy")) == 0
    assert predicted == ["b.npy"]


def test_another_checkpoint_predicts_again_and_the_same_one_elsewhere_skips(tiny_run, scans, tmp_path, predicted):
    """A checkpoint with one weight changed (as further training changes last.pt) predicts again; the same
    bytes copied under another name skip."""
    from pointgeope.engine.checkpoint import load_checkpoint, save_checkpoint

    ckpt = load_checkpoint(tiny_run / "last.pt")
    name = next(k for k, v in ckpt["model"].items() if v.is_floating_point())
    ckpt["model"][name] = ckpt["model"][name] + 1e-3
    save_checkpoint(tmp_path / "other.pt", ckpt)
    assert cli(argv(tiny_run, scans / "b.npy", tmp_path / "o")) == 0
    assert cli(argv(tmp_path / "other.pt", scans / "b.npy", tmp_path / "o")) == 0
    assert predicted == ["b.npy", "b.npy"]
    shutil.copy(tmp_path / "other.pt", tmp_path / "copy.pt")
    assert cli(argv(tmp_path / "copy.pt", scans / "b.npy", tmp_path / "o")) == 0
    assert predicted == ["b.npy", "b.npy"]


def test_a_changed_input_predicts_again(tiny_run, scans, tmp_path, predicted):
    assert cli(argv(tiny_run, scans, tmp_path / "o")) == 0
    data = np.load(scans / "c.npy")
    data[0, 0] += 0.01
    np.save(scans / "c.npy", data)  # same size, other content
    predicted.clear()
    assert cli(argv(tiny_run, scans, tmp_path / "o")) == 0
    assert predicted == ["c.npy"]


@pytest.mark.parametrize("damage", ["cut", "byte", "gone", "record"])
def test_a_damaged_or_missing_output_predicts_again(tiny_run, scans, tmp_path, predicted, damage):
    out = tmp_path / "o"
    assert cli(argv(tiny_run, scans / "a.npy", out)) == 0
    whole = files(out)
    ply = out / "a_pred.ply"
    if damage == "cut":
        ply.write_bytes(whole["a_pred.ply"][:-7])
    elif damage == "byte":
        ply.write_bytes(whole["a_pred.ply"][:-1] + bytes([whole["a_pred.ply"][-1] ^ 1]))
    elif damage == "gone":
        ply.unlink()
    else:
        (out / "a_pred.json").write_text('{"kind": "pointgeope-predict-record", "made_by"')
    assert cli(argv(tiny_run, scans / "a.npy", out)) == 0
    assert predicted == ["a.npy", "a.npy"] and files(out) == whole


def test_rooms_of_a_raw_folder_are_recorded_by_their_files(tmp_path):
    """folder_checksum: a file's content, name, or a new file change it; the folder's place and times not."""
    room = tmp_path / "r" / "Annotations"
    room.mkdir(parents=True)
    (room / "chair_1.txt").write_text("1 2 3 4 5 6\n")
    first = folder_checksum(tmp_path / "r")
    shutil.copytree(tmp_path / "r", tmp_path / "moved")
    assert folder_checksum(tmp_path / "moved") == first
    (room / "chair_1.txt").write_text("1 2 3 4 5 7\n")
    assert folder_checksum(tmp_path / "r") != first
    (room / "chair_1.txt").write_text("1 2 3 4 5 6\n")
    assert folder_checksum(tmp_path / "r") == first
    (room / "chair_1.txt").rename(room / "table_1.txt")
    assert folder_checksum(tmp_path / "r") != first


def test_the_rooms_of_an_area_file_are_skipped_each_by_its_room(tiny_run, tiny_root, tmp_path, capsys, predicted,
                                                                code_at):
    """Each room of a prepared Area_N.h5 has its own record: the area file's checksum and the room's name."""
    code_at()   # committed code: the skip line the same in a clone with edits
    from pointgeope.h5 import list_rooms

    area, out = tiny_root / "Area_2.h5", tmp_path / "o"
    rooms = sorted(list_rooms(area))
    assert cli(argv(tiny_run, area, out, "--format", "npy")) == 0
    records = [json.loads((out / "Area_2" / f"{r}_pred.json").read_text())["made_by"]["input"] for r in rooms]
    assert records == [f"{file_checksum(area)}:{r}" for r in rooms]
    (out / "Area_2" / f"{rooms[-1]}_pred.npy").unlink()
    predicted.clear()
    capsys.readouterr()
    assert cli(argv(tiny_run, area, out, "--format", "npy")) == 0
    assert predicted == [f"Area_2.h5:{rooms[-1]}"]
    assert [line for line in capsys.readouterr().out.splitlines() if line.startswith("skipped ")] == [
        f"skipped {area}:{r}: its outputs in {out / 'Area_2'} are complete, from the same model, input, options "
        "and code (--force predicts it again)" for r in rooms[:-1]]


def test_a_checkpoint_replaced_while_it_is_loaded_is_not_recorded_as_the_new_one(
        tiny_run, scans, tmp_path, monkeypatch, predicted, capsys):
    """Training writes last.pt again (an atomic replace) just after predict loaded it: the outputs are the old
    model's, so a rerun with the new last.pt must predict the scan again, not skip it as the new model's."""
    from pointgeope.engine.checkpoint import load_checkpoint, save_checkpoint

    model = tmp_path / "model.pt"
    shutil.copy(tiny_run / "last.pt", model)
    ckpt = load_checkpoint(model)
    name = next(k for k, v in ckpt["model"].items() if v.is_floating_point())
    ckpt["model"][name] = ckpt["model"][name] + 1e-3
    save_checkpoint(tmp_path / "newer.pt", ckpt)
    original = model_module.load_checkpoint

    def replaced_after_loading(path, *args, **kwargs):
        loaded = original(path, *args, **kwargs)
        shutil.copy(tmp_path / "newer.pt", tmp_path / "tmp.pt")
        (tmp_path / "tmp.pt").replace(model)        # as training saves: a new file moved over the old
        return loaded

    monkeypatch.setattr(model_module, "load_checkpoint", replaced_after_loading)
    assert cli(argv(model, scans / "b.npy", tmp_path / "o")) == 2   # refused in one line: run it again
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [(f"pointgeope predict: error: {model}: replaced while predict read it (a run still training "
                    "saves it); run the same command again")]
    monkeypatch.setattr(model_module, "load_checkpoint", original)
    predicted.clear()
    assert cli(argv(model, scans / "b.npy", tmp_path / "o")) == 0
    assert predicted == ["b.npy"]


def test_an_input_changed_while_it_is_predicted_under_force_is_predicted_again(
        tiny_run, scans, tmp_path, monkeypatch, predicted):
    """Under --force the scan is read, then its file is written again (an export still running) before its
    outputs are: they are the old bytes' outputs, so a rerun without --force predicts the scan again."""
    from pointgeope.scans import sources

    original = sources.read_scan

    def changed_after_reading(ref, **kwargs):
        scan = original(ref, **kwargs)
        data = np.load(ref.path)
        data[0, 0] += 0.01
        np.save(ref.path, data)
        return scan

    monkeypatch.setattr(sources, "read_scan", changed_after_reading)
    assert cli(argv(tiny_run, scans / "b.npy", tmp_path / "o", "--force")) == 0
    monkeypatch.setattr(sources, "read_scan", original)
    predicted.clear()
    assert cli(argv(tiny_run, scans / "b.npy", tmp_path / "o")) == 0
    assert predicted == ["b.npy"]


def test_every_eval_key_but_those_that_choose_how_it_runs_is_in_the_record(tmp_path):
    """An eval.* key the record does not know (one added to the config later: a new vote, a new view) counts
    as a change by default; only the checkpoint's choice, the points per pass and the metrics' mean do not.
    (``m.pt`` exists, so that a version which hashed the file rather than take the loaded bytes' checksum
    fails on the keys, not on a missing file.)"""
    import dataclasses
    from types import SimpleNamespace

    from pointgeope.engine.config import EvalConfig

    later = dataclasses.make_dataclass("LaterEval", [("new_key", int, 0)], bases=(EvalConfig,))
    args = SimpleNamespace(format=("npy",), probabilities=False, scale=1.0, max_extent=50.0)

    def made(**values):
        cfg = SimpleNamespace(eval=later(**values), data=SimpleNamespace(normal=False))
        return record_module.made_by(SimpleNamespace(cfg=cfg, checksum="sha256:0", path=tmp_path / "m.pt"), args)

    (tmp_path / "m.pt").write_bytes(b"weights")

    assert made(new_key=1) != made(new_key=0)
    assert made(batch_points=5000, checkpoint="best", class_mean="present") == made()


def test_an_h5_output_of_a_version_before_the_runs_ignore_index_is_predicted_again(
        tiny_run, scans, tmp_path, monkeypatch, predicted):
    """The h5 file names the run's ``train.ignore_index`` (viz scores its room without that ground truth); one
    written before it did, with that version's record (whose options named no ``ignore_index``), is predicted
    again by a rerun: skipped, it stayed without the attribute and viz counted the ignored class."""
    import pointgeope.scans.outputs as outputs_module
    from pointgeope.h5_predictions import predictions_attrs

    command, h5 = argv(tiny_run, scans / "b.npy", tmp_path / "o", "--format", "h5,ply"), tmp_path / "o" / "b_pred.h5"
    with older_version(monkeypatch, tmp_path / "o" / "b_pred.json", "ignore_index", outputs_module,
                       "write_scan_predictions", lambda original: lambda *args, **kwargs: original(*args[:8])):
        assert cli(command) == 0   # the older file: no `more` attributes
        assert predictions_attrs(h5, "ignore_index") == [None]
    assert cli(command) == 0
    assert predicted == ["b.npy", "b.npy"]
    assert predictions_attrs(h5, "ignore_index") == [255]


def test_a_ply_output_of_a_version_that_named_the_prediction_label_is_predicted_again(
        tiny_run, scans, tmp_path, monkeypatch, predicted):
    """predict's PLY names its prediction ``pred`` (``label`` is the ground truth in every PLY pointgeope
    writes); one written when it was ``label``, with that version's record, was skipped by a rerun of the
    same command as complete, so one folder held both names and a reader of ``pred`` failed on the old files."""
    import pointgeope.scans.ply as ply_module

    def labelled(original):   # the older file: the prediction named `label`
        return lambda path, props, **kwargs: original(
            path, [("label" if name == "pred" else name, values) for name, values in props], **kwargs)

    command, ply = argv(tiny_run, scans / "b.npy", tmp_path / "o", "--format", "ply"), tmp_path / "o" / "b_pred.ply"
    with older_version(monkeypatch, tmp_path / "o" / "b_pred.json", "ply_prediction", ply_module, "write_vertices",
                       labelled):
        assert cli(command) == 0
        assert b"property uchar label\n" in ply.read_bytes()[:1000]
    assert cli(command) == 0
    assert predicted == ["b.npy", "b.npy"]
    header = ply.read_bytes()[:1000]
    assert b"property uchar pred\n" in header and b"property uchar label\n" not in header
    assert cli(command) == 0   # now complete: skipped
    assert predicted == ["b.npy", "b.npy"]


def test_a_rerun_removes_the_temporary_files_of_a_killed_run(tiny_run, scans, tmp_path, capsys):
    """`kill -9` while a scan's output was written left `.a_pred.npy.<8 characters>.tmp.npy` beside it; the
    rerun predicted every scan but kept that file for good. The folders predict writes are cleared of them
    under its lock; a sub-folder it does not write (another command's) is left alone."""
    assert cli(argv(tiny_run, scans, tmp_path / "whole")) == 0
    out = tmp_path / "out"
    (out / "other").mkdir(parents=True)
    killed = [out / ".a_pred.npy.70089a4a.tmp.npy", out / ".b_pred.json.0a1b2c3d.tmp.json"]
    for path in killed:
        path.write_bytes(b"half")
    (out / "other" / ".x.0a1b2c3d.tmp.npy").write_bytes(b"not predict's")
    assert cli(argv(tiny_run, scans, out)) == 0
    printed = capsys.readouterr().out
    assert {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()} == files(tmp_path / "whole")
    assert all(printed.count(f"removed {path}, left by an interrupted run\n") == 1 for path in killed)
    assert "removed" not in printed.replace(f"removed {killed[0]}", "").replace(f"removed {killed[1]}", "")
    assert not any(path.exists() for path in killed)
    assert (out / "other" / ".x.0a1b2c3d.tmp.npy").read_bytes() == b"not predict's"


def test_a_sub_folder_with_a_lock_of_its_own_is_another_predicts_and_left_alone(tiny_run, two_folds, scans,
                                                                                tmp_path, capsys):
    """`predict ... Area_2.h5 --out OUT` writes `OUT/Area_2/`; a second predict given `--out OUT/Area_2` holds that
    folder's own lock and may be writing its temporary files there now. The first one's clearing of its folders
    deleted them (its lock is `OUT/.lock`, not theirs); a sub-folder with a lock file of its own is left alone."""
    out = tmp_path / "out"
    (out / "Area_2").mkdir(parents=True)
    (out / "Area_2" / ".lock").write_text("{}")  # the other predict's, alive or not: its own rerun clears there
    theirs = out / "Area_2" / ".scan_pred.npy.0a1b2c3d.tmp.npy"
    theirs.write_bytes(b"being written")
    ours = out / ".a_pred.npy.70089a4a.tmp.npy"
    ours.write_bytes(b"half")
    assert cli(["predict", str(tiny_run), str(two_folds / "Area_2.h5"), str(scans), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert theirs.read_bytes() == b"being written" and not ours.exists()
    assert f"removed {ours}, left by an interrupted run" in printed and str(theirs) not in printed
    assert any(p.name.endswith("_pred.npy") for p in (out / "Area_2").iterdir())
