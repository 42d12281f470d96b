"""``data.normal``: PTv3's features ``[rgb | normal]`` (Pointcept's S3DIS recipe) through the engine, and the
meaning of a config without the key (every run recorded before it): ``[rgb | xyz]``, never other features than a
checkpoint trained with."""
from __future__ import annotations

import shutil

import h5py
import numpy as np
import pytest
import torch
import yaml

from pointgeope.engine import build, evaluate
from pointgeope.engine.checkpoint import load_checkpoint, save_checkpoint
from pointgeope.engine.config import ConfigError, config_to_dict, load_config, load_record
from pointgeope.engine.config_diff import config_differences
from pointgeope.engine.distributed import DistEnv
from pointgeope.engine.prediction_info import checkpoint_prediction_info, prediction_metadata
from pointgeope.errors import UserError
from tests.engine.conftest import DEMO_CONFIG, REPO, one_line
from tests.engine.test_ptv3_engine import PTV3_DEMO

RECIPE = REPO / "configs" / "s3dis" / "_ptv3_recipe.yaml"


def test_the_ptv3_recipe_feeds_rgb_and_normal_and_ptv1_none():
    for path in (RECIPE, PTV3_DEMO, REPO / "configs" / "s3dis" / "ptv3_geope.yaml"):
        cfg = load_config(path)
        assert cfg.data.normal is True and cfg.model.in_channels == 6
        assert prediction_metadata(config_to_dict(cfg))["features"] == ["rgb", "normal"]
    assert load_config(DEMO_CONFIG).data.normal is False
    plain = config_to_dict(load_config(PTV3_DEMO, ["data.normal=false"]))
    assert prediction_metadata(plain)["features"] == ["rgb", "xyz"]


def test_a_recorded_config_without_the_key_reads_back_as_rgb_xyz(tmp_path):
    """A PTv3 run recorded before the key: its config.yaml and its checkpoint's config lack ``data.normal``; it
    means ``[rgb | xyz]``, and today's recipe (``[rgb | normal]``) is a difference that refuses its resume."""
    old = config_to_dict(load_config(PTV3_DEMO, ["data.normal=false"]))
    del old["data"]["normal"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old))
    assert load_record(tmp_path / "config.yaml").data.normal is False
    assert prediction_metadata(old)["features"] == ["rgb", "xyz"]
    assert checkpoint_prediction_info({"config": old}, "old.pt")["features"] == ["rgb", "xyz"]
    assert config_differences(old, config_to_dict(load_config(PTV3_DEMO))) == [("data.normal", False, True)]
    assert config_differences(old, config_to_dict(load_config(PTV3_DEMO, ["data.normal=false"]))) == []


def test_ptv1_refuses_the_key_in_one_line(capsys):
    with pytest.raises(ConfigError, match=r"data.normal=true: PTv3's \[rgb \| normal\] features, but "
                                          r"data.augment=ptv1 makes PTv1's \[rgb \| xyz\] samples"):
        load_config(DEMO_CONFIG, ["data.normal=true"])
    line = one_line(capsys, 2, ["train", "--config", str(DEMO_CONFIG), "--test-area", "1", "data.normal=true"])
    assert "data.normal=true" in line


def test_in_channels_are_checked_against_the_normal_features():
    with pytest.raises(ConfigError, match=r"model.in_channels=6 but data.color=False, data.normal=True, "
                                          r"data.height=False give 3 feature channels \(\[normal\]\); set "
                                          r"model.in_channels=3"):
        build.model(load_config(PTV3_DEMO, ["data.color=false"]))


def test_a_normal_network_is_voted_with_normals_only():
    cfg = load_config(PTV3_DEMO, ["eval.max_fragments=1"])
    coord = np.random.default_rng(0).random((50, 3)).astype(np.float32)
    with pytest.raises(ValueError, match=r"expected normals of shape \(50, 3\) for a data.normal network, got None"):
        evaluate.vote_room(torch.nn.Identity(), coord, np.zeros((50, 3), np.uint8), cfg, torch.device("cpu"))


def test_a_run_records_its_normal_features(normal_run):
    assert "pe=geope, features [rgb | normal]; " in (normal_run / "log.txt").read_text()
    last = load_checkpoint(normal_run / "last.pt")
    assert last["config"]["data"]["normal"] is True and last["predict"]["features"] == ["rgb", "normal"]
    assert load_record(normal_run / "config.yaml").data.normal is True


def test_evaluation_refuses_rooms_without_normals_before_any_room(normal_run, two_folds, tmp_path):
    root = tmp_path / "old"
    root.mkdir()
    shutil.copyfile(two_folds / "Area_1.h5", root / "Area_1.h5")
    with h5py.File(root / "Area_1.h5", "r+") as f:              # a file of a prepare before normals
        for room in f:
            del f[room]["normal"]
    cfg = load_config(normal_run / "config.yaml", [f"data.root={root}"])
    env = DistEnv(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
    with pytest.raises(UserError, match=r"Area_1.h5: room '\w+' \(and 1 more room\) has no point normals"):
        evaluate.predict_areas(torch.nn.Identity(), cfg, ["Area_1"], env)


def test_every_rank_checks_every_room_of_the_fold(normal_run, two_folds, tmp_path):
    """Distributed evaluate: rank 0 refuses a room without normals that is rank 1's to vote (room i -> rank
    i % 2), so no rank votes while another has refused (it would wait for it at the first all-reduce)."""
    root = tmp_path / "half"
    root.mkdir()
    shutil.copyfile(two_folds / "Area_1.h5", root / "Area_1.h5")
    with h5py.File(root / "Area_1.h5", "r+") as f:
        rooms = list(f)                                          # list_rooms' order
        assert len(rooms) >= 2
        del f[rooms[1]]["normal"]                                # rank 1's room; rank 0's keep theirs
    cfg = load_config(normal_run / "config.yaml", [f"data.root={root}"])
    for rank in (0, 1):
        env = DistEnv(rank=rank, world_size=2, local_rank=rank, device=torch.device("cpu"))
        with pytest.raises(UserError, match=rf"Area_1.h5: room '{rooms[1]}' has no point normals"):
            evaluate.predict_areas(torch.nn.Identity(), cfg, ["Area_1"], env)


def _recording(monkeypatch) -> list:
    """Calls of ``pointgeope.data.normals.estimate_normals``, recorded."""
    import pointgeope.data.normals as module

    calls, estimate = [], module.estimate_normals

    def recorded(coord, *args, **kwargs):
        calls.append(np.array(coord))
        return estimate(coord, *args, **kwargs)

    monkeypatch.setattr(module, "estimate_normals", recorded)
    return calls


def test_predict_estimates_a_scans_normals_and_reads_a_prepared_rooms(normal_run, two_folds, tmp_path, capsys,
                                                                       monkeypatch):
    from pointgeope.cli import main as cli

    calls = _recording(monkeypatch)
    scan = tmp_path / "scan.npy"
    points = np.random.default_rng(1).random((300, 6)) * [3, 2, 2, 255, 255, 255]
    np.save(scan, points)
    assert cli(["predict", str(normal_run), str(scan), "--out", str(tmp_path / "o"), "--format", "npy",
                "--max-fragments", "1"]) == 0
    assert "features [rgb | normal] (a scan's normals estimated from its points)" in capsys.readouterr().out
    assert len(calls) == 1 and calls[0].shape == (300, 3)
    np.testing.assert_allclose(calls[0], points[:, :3] - points[:, :3].min(0), atol=1e-5)     # metres, shifted
    calls.clear()
    assert cli(["predict", str(normal_run), str(two_folds / "Area_2.h5"), "--out", str(tmp_path / "p"),
                "--max-fragments", "1"]) == 0
    assert calls == []                                           # a prepared room's own normals


def test_predict_feeds_a_raw_rooms_normals_as_prepare_estimated_them(normal_run, tiny_root, tmp_path, monkeypatch):
    """A raw room folder is parsed as ``prepare`` parses it, normals included: the network gets those (the
    prepared room's, up to its float16 storage), estimated once, not a second time from the shifted points."""
    import pointgeope.engine.predict as predict_module
    from pointgeope.cli import main as cli
    from pointgeope.h5 import read_room

    calls, fed, vote = _recording(monkeypatch), [], predict_module.vote_room

    def voted(*args, normal=None, **kwargs):
        fed.append(normal)
        return vote(*args, normal=normal, **kwargs)

    monkeypatch.setattr(predict_module, "vote_room", voted)
    assert cli(["predict", str(normal_run), str(tiny_root.parent / "raw" / "Area_1" / "office_1"), "--out",
                str(tmp_path / "o"), "--max-fragments", "1"]) == 0
    assert len(calls) == 1 and len(fed) == 1                     # prepare's estimate of the room, and no other
    stored = read_room(tiny_root / "Area_1.h5", "office_1", fields=("normal",))["normal"].astype(np.float32)
    np.testing.assert_allclose(fed[0], stored, atol=1e-3)


def test_a_checkpoint_recorded_before_the_key_predicts_with_xyz(normal_run, tmp_path, monkeypatch):
    """Its config lacks ``data.normal`` and its ``predict`` entry says ``[rgb | xyz]``: no normals are made."""
    from pointgeope.engine.predict import predict_scan
    from pointgeope.engine.predict_model import load_predictor
    from pointgeope.scans.scan import Scan

    ckpt = load_checkpoint(normal_run / "last.pt")
    del ckpt["config"]["data"]["normal"]
    ckpt["predict"]["features"] = ["rgb", "xyz"]
    save_checkpoint(tmp_path / "old.pt", ckpt)
    predictor = load_predictor(tmp_path / "old.pt", device="cpu", max_fragments=1)
    assert predictor.cfg.data.normal is False and predictor.info["features"] == ["rgb", "xyz"]
    calls = _recording(monkeypatch)
    rng = np.random.default_rng(2)
    scan = Scan("s", "s.npy", rng.random((200, 3)) * 2, (rng.random((200, 3)) * 255).astype(np.uint8))
    pred, _, votes, normal = predict_scan(predictor, scan)
    assert normal is None and calls == [] and pred.shape == (200,) and (votes >= 1).all()


def test_training_refuses_a_fold_whose_test_rooms_lack_normals_before_it_starts(two_folds, tmp_path, capsys):
    import json

    root = tmp_path / "data"
    root.mkdir()
    for area in ("Area_1", "Area_2", "Area_3"):
        shutil.copyfile(two_folds / f"{area}.h5", root / f"{area}.h5")
    shutil.copyfile(two_folds / "folds.json", root / "folds.json")
    with h5py.File(root / "Area_1.h5", "r+") as f:              # the test area of fold 1, prepared before normals
        for room in f:
            del f[room]["normal"]
    line = one_line(capsys, 2, ["train", "--config", str(PTV3_DEMO), "--test-area", "1", "--data-root", str(root),
                                "--run-dir", str(tmp_path / "run"), "train.device=cpu"])
    assert "Area_1.h5" in line and "normal" in line and "pointgeope prepare" in line
    assert not (tmp_path / "run" / "area_1" / "last.pt").exists()
    assert json.loads((root / "folds.json").read_text())["folds"]["1"]["test"] == ["Area_1"]


def test_the_report_tells_a_fold_recorded_before_the_key_from_one_of_the_normal_recipe(tmp_path):
    """A run whose fold 1 trained before the key ([rgb | xyz]) and fold 2 with today's recipe ([rgb | normal]) is
    not one method: the report's comparison of folds names data.normal (a key missing from one fold only would
    not be compared)."""
    from pointgeope.report.settings import fold_settings, mixed_settings

    old = config_to_dict(load_config(PTV3_DEMO, ["data.normal=false"]))
    del old["data"]["normal"]
    folds = {"Area_1": fold_settings({"config": old}, tmp_path),
             "Area_2": fold_settings({"config": config_to_dict(load_config(PTV3_DEMO))}, tmp_path)}
    assert mixed_settings(folds) == {"data.normal": {"Area_1": False, "Area_2": True}}
    same = {"Area_1": folds["Area_1"], "Area_2": fold_settings({"config": config_to_dict(
        load_config(PTV3_DEMO, ["data.normal=false"]))}, tmp_path)}
    assert mixed_settings(same) == {}


def test_resuming_a_run_recorded_before_the_key_with_the_recipe_names_the_override(normal_run, tmp_path):
    """The recipe file now sets ``data.normal: true``; a PTv3 checkpoint written before the key trained on
    ``[rgb | xyz]``: the refusal names the difference and the override that resumes it as it trained."""
    from pointgeope.engine.checkpoint import CheckpointError

    ckpt = load_checkpoint(normal_run / "last.pt")
    del ckpt["config"]["data"]["normal"]
    save_checkpoint(tmp_path / "last.pt", ckpt)
    today = config_to_dict(load_config(normal_run / "config.yaml"))
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(tmp_path / "last.pt", today)
    message = str(err.value)
    assert "\n" not in message and "(data.normal: checkpoint False, now True); it was recorded before data.normal " \
           "existed: the override data.normal=false uses it as it ran; " in message
    ckpt["config"]["data"]["normal"] = False                      # a run that chose false: nothing to add
    save_checkpoint(tmp_path / "last.pt", ckpt)
    with pytest.raises(CheckpointError, match=r"now True\); use the same config"):
        load_checkpoint(tmp_path / "last.pt", today)


def test_a_complete_fold_recorded_before_the_key_names_the_override_too(normal_run, two_folds, tmp_path):
    """``train --cv`` over a run whose complete folds predate the key (the skip check of a complete fold)."""
    from pointgeope.data.folds import load_folds
    from pointgeope.engine.fold_skip import complete_metrics

    run = tmp_path / "area_1"
    shutil.copytree(normal_run, run)
    ckpt = load_checkpoint(run / "last.pt")
    del ckpt["config"]["data"]["normal"]
    save_checkpoint(run / "last.pt", ckpt)
    with pytest.raises(UserError) as err:
        complete_metrics(run, load_config(normal_run / "config.yaml"), load_folds(two_folds)[1])
    assert "(data.normal: run False, now True); it was recorded before data.normal existed: the override " \
           "data.normal=false uses it as it ran; --force retrains it" in str(err.value)


def test_an_ablation_over_trials_recorded_before_the_key_names_the_override(normal_run, tmp_path):
    """``pointgeope ablate`` again into a run folder whose trials predate the key refuses them, saying how to run
    them as they trained."""
    from pointgeope.engine.ablation import Trial
    from pointgeope.engine.ablation_reuse import check_reuse

    trial = Trial("geope", 0, tmp_path / "geope" / "seed_0", config_to_dict(load_config(normal_run / "config.yaml")))
    (trial.folder / "area_1").mkdir(parents=True)
    ckpt = load_checkpoint(normal_run / "last.pt")
    del ckpt["config"]["data"]["normal"]
    save_checkpoint(trial.folder / "area_1" / "last.pt", ckpt)
    with pytest.raises(UserError) as err:
        check_reuse([trial], 1, tmp_path)
    assert "(geope seed 0: data.normal: it used False, now True; it was recorded before data.normal existed: the " \
           "override data.normal=false uses it as it ran), and train neither resumes" in str(err.value)


def test_a_scan_estimated_with_another_k_is_predicted_again(normal_run, tmp_path, capsys, monkeypatch):
    """The resume record names the ``k`` of a scan's normal estimate: a rerun with the same skips the scan, one
    with another ``k`` predicts it again with that ``k`` (its normals, hence its labels, may differ)."""
    import json

    import pointgeope.data.normals as normals
    from pointgeope.cli import main as cli

    scan, out = tmp_path / "scan.npy", tmp_path / "o"
    np.save(scan, np.random.default_rng(2).random((200, 6)) * [3, 2, 2, 255, 255, 255])
    argv = ["predict", str(normal_run), str(scan), "--out", str(out), "--format", "npy", "--max-fragments", "1"]
    assert cli(argv) == 0
    record = json.loads((out / "scan_pred.json").read_text())
    assert record["made_by"]["options"]["normal_k"] == normals.K_NORMAL
    capsys.readouterr()
    assert cli(argv) == 0
    assert "skipped " in capsys.readouterr().out
    seen = []
    estimate = normals.estimate_normals
    monkeypatch.setattr(normals, "estimate_normals", lambda coord, k: seen.append(k) or estimate(coord, k))
    monkeypatch.setattr(normals, "K_NORMAL", 7)
    assert cli(argv) == 0
    assert "skipped " not in capsys.readouterr().out and seen == [7]
    assert json.loads((out / "scan_pred.json").read_text())["made_by"]["options"]["normal_k"] == 7


def test_predict_says_it_estimates_a_scans_normals_first(normal_run, two_folds, tmp_path, capsys, monkeypatch):
    """One line before the estimate (minutes on a large scan), naming the scan and its points; none for a
    prepared room, whose own normals are read."""
    import pointgeope.data.normals as normals
    from pointgeope.cli import main as cli

    estimate, said = normals.estimate_normals, []
    monkeypatch.setattr(normals, "estimate_normals",
                        lambda coord, *k: said.append(capsys.readouterr().out) or estimate(coord, *k))
    scan = tmp_path / "scan.npy"
    np.save(scan, np.random.default_rng(3).random((250, 6)) * [3, 2, 2, 255, 255, 255])
    assert cli(["predict", str(normal_run), str(scan), "--out", str(tmp_path / "o"), "--format", "npy",
                "--max-fragments", "1"]) == 0
    assert len(said) == 1
    assert said[0].splitlines()[-1] == f"{scan}: estimating the normals of 250 points (k=30 neighbours)"
    assert cli(["predict", str(normal_run), str(two_folds / "Area_2.h5"), "--out", str(tmp_path / "p"),
                "--max-fragments", "1"]) == 0
    assert len(said) == 1 and "estimating the normals" not in capsys.readouterr().out


def test_predicts_h5_file_carries_the_normals_the_network_read(normal_run, tmp_path, monkeypatch):
    """A scan's normals, estimated for a ``[rgb | normal]`` network, go into its h5 file as in a prepared room
    (float16, with ``normal_k`` and ``normal_version``); a stray point, left out of the estimate, carries its
    nearest kept point's, as it takes its prediction."""
    import pointgeope.engine.predict as predict_module
    from pointgeope.cli import main as cli
    from pointgeope.data import normals
    from pointgeope.h5 import read_room

    fed, vote = [], predict_module.vote_room
    monkeypatch.setattr(predict_module, "vote_room", lambda *a, normal=None, **kw: fed.append(normal) or vote(
        *a, normal=normal, **kw))
    points = np.random.default_rng(4).random((300, 6)) * [3, 2, 2, 255, 255, 255]
    points[7, :3] = [5000.0, 0.0, 0.0]                            # a stray point: beyond --max-extent
    np.save(tmp_path / "scan.npy", points)
    assert cli(["predict", str(normal_run), str(tmp_path / "scan.npy"), "--out", str(tmp_path / "o"), "--format",
                "h5", "--max-fragments", "1"]) == 0
    path = tmp_path / "o" / "scan_pred.h5"
    got = read_room(path, "scan", fields=("coord", "normal"))["normal"]
    kept = np.flatnonzero(np.arange(300) != 7)
    assert got.dtype == np.float16 and len(fed) == 1
    np.testing.assert_array_equal(got[kept], fed[0].astype(np.float16))
    nearest = kept[np.argmin(np.linalg.norm(points[kept, :3] - points[7, :3], axis=1))]
    np.testing.assert_array_equal(got[7], got[nearest])
    with h5py.File(path, "r") as f:
        assert (f["scan"].attrs["normal_k"], f["scan"].attrs["normal_version"]) == (normals.K_NORMAL,
                                                                                   normals.NORMAL_VERSION)


def test_a_prepared_rooms_h5_prediction_keeps_its_own_normals(normal_run, two_folds, tmp_path):
    """The room's stored normals, byte for byte, and the estimate they are of as ``predict`` read it."""
    from pointgeope.cli import main as cli
    from pointgeope.h5 import list_rooms, read_room
    from pointgeope.scans.sources import ScanRef, read_scan

    room = min(list_rooms(two_folds / "Area_2.h5"))
    assert cli(["predict", str(normal_run), str(two_folds / "Area_2.h5"), "--out", str(tmp_path / "o"), "--format",
                "h5", "--max-fragments", "1"]) == 0
    path = tmp_path / "o" / "Area_2" / f"{room}_pred.h5"
    own = read_room(two_folds / "Area_2.h5", room, fields=("normal",))["normal"]
    assert read_room(path, room, fields=("normal",))["normal"].tobytes() == own.tobytes()
    estimate = read_scan(ScanRef(two_folds / "Area_2.h5", "h5", f"Area_2/{room}", room)).normal_estimate or {}
    with h5py.File(path, "r") as f:
        attrs = f[room].attrs
        assert {key: attrs[key] for key in ("normal_k", "normal_version") if key in attrs} == estimate
