"""PTv3 (``model.backbone: ptv3``) through the engine as PTv1 goes: train.py on the tiny data with PTv3's recipe
(Mix3D included) and its test protocol, checkpoints that record the backbone, predict, ablate over PTv3's
encodings, and the config keys that belong to one backbone only."""
from __future__ import annotations

import argparse
import json
import math
import re
import shutil

import numpy as np
import pytest
import torch

from pointgeope.cli import main as cli
from pointgeope.commands import train as train_command
from pointgeope.engine import build
from pointgeope.engine.checkpoint import CheckpointError, load_checkpoint
from pointgeope.engine.config import ConfigError, config_to_dict, load_config
from pointgeope.h5 import list_rooms
from pointgeope.h5_predictions import read_predictions
from pointgeope.model.ptv3.seg import PTv3Seg
from tests.engine.conftest import DEMO_CONFIG, REPO, one_line

PTV3_DEMO = REPO / "configs" / "demo_ptv3.yaml"
# Two stages at head width 18, patches of 64, one epoch of two steps (two training areas of two rooms, batch 2).
TINY3 = ["model.ptv3.stride=[2]", "model.ptv3.enc_depths=[1, 1]", "model.ptv3.enc_channels=[18, 36]",
         "model.ptv3.enc_num_head=[1, 2]", "model.ptv3.enc_patch_size=[64, 64]", "model.ptv3.dec_depths=[1]",
         "model.ptv3.dec_channels=[18]", "model.ptv3.dec_num_head=[1]", "model.ptv3.dec_patch_size=[64]",
         "data.grid_size=0.1", "data.voxel_max=1500", "data.loop=1", "data.batch_size=2", "data.num_workers=0",
         "data.cache=true", "data.mix_prob=1.0", "train.epochs=1", "train.device=cpu", "train.progress=false",
         "eval.batch_points=20000", "eval.max_fragments=1"]


PIPELINE = ["data.augment=pointcept_ptv3", "eval.protocol=ptv3"]      # PTv3's samples and test
ONE_STAGE = [*(f"model.ptv3.{k}=[{v}]" for k, v in (("enc_depths", 2), ("enc_channels", 36), ("enc_num_head", 2),
                                                      ("enc_patch_size", 64))),
             *(f"model.ptv3.{k}=[]" for k in ("stride", "dec_depths", "dec_channels", "dec_num_head",
                                               "dec_patch_size"))]     # one stage: no pooling, no decoder


def train3(root, run, *extra, fold="1"):
    parser = argparse.ArgumentParser()
    train_command.add_arguments(parser)
    args = parser.parse_args(["--config", str(PTV3_DEMO), "--test-area", fold, "--data-root", str(root),
                              "--run-dir", str(run), *TINY3, *extra])
    return train_command.main(args)


@pytest.fixture(scope="module")
def ptv3_run(two_folds, tmp_path_factory):
    run = tmp_path_factory.mktemp("ptv3_run")
    assert train3(two_folds, run) == 0
    return run / "area_1"


def test_a_ptv3_fold_trains_with_mix3d_and_is_tested_with_its_protocol(ptv3_run, two_folds):
    log = (ptv3_run / "log.txt").read_text()
    assert "model: ptv3, " in log and "pe=geope" in log and "2 steps per epoch" in log
    assert "point hierarchy: none (model.backbone=ptv3" in log and "farthest point sampling" not in log
    last = load_checkpoint(ptv3_run / "last.pt")
    assert (last["epoch"], last["batch"], last["step"]) == (1, 0, 2)
    assert last["config"]["model"]["backbone"] == "ptv3" and last["config"]["eval"]["protocol"] == "ptv3"
    assert all(k.startswith(("backbone.", "seg_head.")) for k in last["model"])       # Pointcept's names
    # the weights moved from the seed's draw: two AdamW steps were taken
    cfg = load_config(ptv3_run / "config.yaml")
    torch.manual_seed(cfg.train.seed)
    fresh = build.model(cfg).state_dict()
    assert not torch.equal(fresh["seg_head.weight"], last["model"]["seg_head.weight"])
    metrics = json.loads((ptv3_run / "metrics.json").read_text())
    assert metrics["complete"] and 0.0 <= metrics["miou"] <= 1.0
    rooms = list_rooms(two_folds / "Area_1.h5")
    for room, n in rooms.items():
        pred = read_predictions(ptv3_run / "predictions" / "Area_1.h5", room)
        assert pred.shape == (n,) and int(pred.max()) < 13


def test_a_one_stage_ptv3_trains_and_is_tested(two_folds, tmp_path):
    """One stage (no pooling, no decoder), which Pointcept's PT-v3m1 builds and the network now builds too: the
    config was refused at load ("expected at least 2 stages"); it trains a fold and tests it, the head on the
    stage's own 36 channels, every room predicted."""
    assert train3(two_folds, tmp_path, *ONE_STAGE) == 0
    run = tmp_path / "area_1"
    last = load_checkpoint(run / "last.pt")
    assert last["model"]["seg_head.weight"].shape == (13, 36)
    assert not any(k.startswith(("backbone.dec.", "backbone.enc.enc1")) for k in last["model"])
    assert json.loads((run / "metrics.json").read_text())["complete"]
    for room, n in list_rooms(two_folds / "Area_1.h5").items():
        assert read_predictions(run / "predictions" / "Area_1.h5", room).shape == (n,)


def test_a_checkpoint_of_one_backbone_refuses_the_other_in_one_line(ptv3_run, capsys):
    with pytest.raises(CheckpointError, match=r"a PTV3 checkpoint \(model.backbone=ptv3\), but the config asks "
                                              r"for model.backbone=ptv1"):
        load_checkpoint(ptv3_run / "last.pt", config_to_dict(load_config(DEMO_CONFIG)))
    assert "model.backbone" in one_line(capsys, 2, ["evaluate", str(ptv3_run), "model.backbone=ptv1"])


def test_evaluate_of_a_ptv3_run_repeats_its_test(ptv3_run):
    """``pointgeope evaluate`` rebuilds PTv3 from the checkpoint and, with no shuffled orders in eval, gives
    the confusion matrix the fold's own test gave."""
    before = json.loads((ptv3_run / "metrics.json").read_text())
    assert cli(["evaluate", str(ptv3_run)]) == 0
    after = json.loads((ptv3_run / "metrics.json").read_text())
    assert after["confusion"] == before["confusion"] and after["miou"] == before["miou"]


def test_predict_of_a_ptv3_run_equals_its_evaluation(ptv3_run, two_folds, tmp_path, capsys):
    """predict runs the run's own protocol (its 10 views; --tta changes nothing), so its labels are the
    evaluation's; an eval.tta override is one line."""
    assert cli(["predict", str(ptv3_run), str(two_folds / "Area_1.h5"), "--out", str(tmp_path), "--tta",
                "--max-fragments", "1"]) == 0
    for room in list_rooms(two_folds / "Area_1.h5"):
        np.testing.assert_array_equal(np.load(tmp_path / "Area_1" / f"{room}_pred.npy"),
                                      read_predictions(ptv3_run / "predictions" / "Area_1.h5", room))
    capsys.readouterr()
    assert "its own 10 views" in one_line(capsys, 2, ["predict", str(ptv3_run), str(two_folds / "Area_1.h5"),
                                                      "--out", str(tmp_path / "x"), "eval.tta.rotations=4"])


@pytest.mark.slow
def test_ablate_over_two_ptv3_encodings(ptv3_run, two_folds, tmp_path):
    """Each trial of a PTv3 config trains with model.backbone=ptv3 and its own model.pe, and is reported. geope
    seed 0 is a copy of ptv3_run (train's fold of the same config: the demo's pe, seed 0), which its trial finds
    complete and skips; point3drope's trial trains."""
    run = tmp_path / "abl"
    shutil.copytree(ptv3_run, run / "geope" / "seed_0" / "area_1")
    assert cli(["ablate", "--config", str(PTV3_DEMO), "--test-area", "1", "--data-root", str(two_folds),
                "--run-dir", str(run), "--presets", "geope,point3drope", "--seeds", "0", *TINY3]) == 0
    report = json.loads((run / "report" / "fold_1" / "ablation.json").read_text())
    assert [v["name"] for v in report["variants"]] == ["geope", "point3drope"]
    for name in ("geope", "point3drope"):
        saved = load_checkpoint(run / name / "seed_0" / "area_1" / "last.pt")["config"]["model"]
        assert (saved["backbone"], saved["pe"]) == ("ptv3", name)
    logs = [(run / name / "seed_0" / "train.log").read_text() for name in ("geope", "point3drope")]
    assert "is complete, skipped" in logs[0] and "model: ptv3, " in logs[1] and "pe=point3drope" in logs[1]


@pytest.mark.parametrize("overrides, message", [
    (["model.backbone=ptv3"], "model.pe: 'rpe' is a PTv1 preset, but model.backbone=ptv3"),
    (["model.backbone=ptv3", "model.pe=none", "model.planes=[16, 32, 64, 128, 256]"],
     "model.planes: PTv1 keys, but model.backbone=ptv3"),
    (["model.pe=point3drope"], "model.pe: 'point3drope' is a PTv3 encoding"),
    (["model.ptv3.enable_rpe=true"], "model.ptv3.enable_rpe: PTv3 keys, but model.backbone=ptv1"),
    # GeoPE's frequencies with an encoding at its authors' fixed ones: refused (rope3d learnt nothing, silently)
    ([*PIPELINE, "model.backbone=ptv3", "model.pe=point3drope", "model.geope_learnable=true"],
     "model.geope_learnable=true: GeoPE's frequencies, but model.pe=point3drope turns at Utonia's fixed "
     "frequencies (base 10; its scale: model.point3drope_scale), so it would change nothing; remove it, or set "
     "model.pe to one of geope, lingeope, rope3d"),
    ([*PIPELINE, "model.backbone=ptv3", "model.pe=pointrope", "model.geope_learnable=true", "model.geope_base=50"],
     "model.geope_base=50.0, model.geope_learnable=true: GeoPE's frequencies, but model.pe=pointrope turns at "
     "LitePT's fixed frequencies (base 100 per grid cell), so they would change nothing; remove them"),
    ([*PIPELINE, "model.backbone=ptv3", "model.pe=none", "model.geope_learnable=true"], None),   # no positions
    ([*PIPELINE, "model.backbone=ptv3", "model.pe=rope3d", "model.geope_learnable=true"], None),
    ([*PIPELINE, "model.backbone=ptv3", "model.pe=point3drope", "model.point3drope_scale=1"], None),
    ([*PIPELINE, "model.backbone=ptv3", "model.pe=geope", "model.point3drope_scale=1"],
     "model.point3drope_scale=1.0: only model.pe=point3drope reads it, but model.pe=geope; remove it"),
    (["model.point3drope_scale=1"], "model.point3drope_scale=1.0: only model.pe=point3drope reads it, but "
     "model.pe=rpe"),
    ([*PIPELINE, "model.backbone=ptv3", "model.pe=point3drope", "model.point3drope_scale=0"],
     "model.point3drope_scale: expected a finite number >= 1e-36, got 0"),
    (["model.backbone=ptv3", "model.pe=none", "model.ptv3.dec_depths=[1]"],
     "model.ptv3.dec_depths: expected 4 entries for the 5 stages"),
    (["model.backbone=ptv3", "model.pe=none", "model.ptv3.enc_channels=[32, 64, 128, 256, 500]"],
     "model.ptv3.enc_channels[4]: expected a multiple of model.ptv3.enc_num_head[4] (32), got 500"),
    ([*PIPELINE, "model.backbone=ptv3", "model.pe=pointrope"], None),  # Pointcept's widths: head width 16 >= 6
    (["model.backbone=ptv3", "model.pe=pointrope", "model.ptv3.enc_channels=[8, 64, 128, 256, 512]"],
     "enc_channels[0] / enc_num_head[0] with model.pe=pointrope: expected head_dim >= 6"),
    (["model.backbone=ptv3", "model.pe=none", "model.ptv3.enc_patch_size=[1024, 1024, 1024, 1024, 10000000]"],
     "model.ptv3.enc_patch_size[4]: expected an integer <= 65536"),
    ([*PIPELINE, "model.backbone=ptv3", "model.pe=none", "model.ptv3.stride=[2, 3, 2, 2]"],
     "model.ptv3.stride[1]: expected a power of two (1, 2, 4, 8, ...), got 3"),
    ([*PIPELINE, "model.backbone=ptv3", "model.pe=none", "model.ptv3.stride=[1, 2, 2, 2]"], None),  # 2^0 as Pointcept
    (["model.backbone=ptv3", "model.pe=none"], "model.backbone=ptv3 takes samples with grid coordinates: expected "
     "data.augment=pointcept_ptv3 and eval.protocol=ptv3, got ptv1 and ptv1"),
    (["eval.protocol=ptv3"], "eval.protocol=ptv3: PTv3's samples and test, but model.backbone=ptv1"),
    (["data.augment=pointcept_ptv3"], "data.augment=pointcept_ptv3: PTv3's samples and test, but model.backbone=ptv1"),
    (["data.crop_rate=0.5"], "data.crop_rate=0.5 needs data.augment=pointcept_ptv3"),
    (["data.mix_prob=0.5"], "data.mix_prob=0.5 needs data.augment=pointcept_ptv3"),
    ([*PIPELINE, "model.backbone=ptv3", "model.pe=none", "model.ptv3.order=[]"],
     "model.ptv3.order: expected at least one of z, z-trans, hilbert, hilbert-trans, got []"),
    ([*PIPELINE, "model.backbone=ptv3", "model.pe=none", *(f"model.ptv3.{k}=[]" for k in (
        "stride", "enc_depths", "enc_channels", "enc_num_head", "enc_patch_size", "dec_depths", "dec_channels",
        "dec_num_head", "dec_patch_size"))], "model.ptv3.enc_depths: expected at least 1 stage"),
    ([*PIPELINE, "model.backbone=ptv3", "model.pe=none", *ONE_STAGE], None),  # no decoder: the head reads the stage
    ([*PIPELINE, "model.backbone=ptv3", "model.pe=none", *ONE_STAGE, "model.ptv3.dec_depths=[1]"],
     "model.ptv3.dec_depths: expected 0 entries for the 1 stage of model.ptv3.enc_depths [2], got 1: [1]"),
])
def test_each_backbone_takes_its_own_keys(overrides, message):
    if message is None:
        assert load_config(None, overrides).model.backbone == "ptv3"
        return
    with pytest.raises(ConfigError, match=None) as err:
        load_config(None, overrides)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("config, extra, message", [
    (DEMO_CONFIG, ["eval.protocol=ptv3"], "eval.protocol=ptv3: PTv3's samples and test, but model.backbone=ptv1"),
    (DEMO_CONFIG, ["data.augment=pointcept_ptv3"], "data.augment=pointcept_ptv3: PTv3's samples and test"),
    (PTV3_DEMO, ["model.ptv3.stride=[3, 2]"], "model.ptv3.stride[0]: expected a power of two (1, 2, 4, 8, ...), got 3"),
    (PTV3_DEMO, ["model.ptv3.order=[]"], "model.ptv3.order: expected at least one of z, z-trans"),
    (PTV3_DEMO, ["model.pe=pointrope", "model.geope_learnable=true"], "model.geope_learnable=true: GeoPE's "
     "frequencies, but model.pe=pointrope turns at LitePT's fixed frequencies"),
])
def test_a_config_that_pairs_the_backbones_wrongly_is_refused_before_training(config, extra, message, two_folds,
                                                                              tmp_path, capsys):
    # before: a PTv1 fold trained, then its test died with a TypeError (grid_coord); a stride of 3 or no order a
    # traceback (after the run folder was made)
    line = one_line(capsys, 2, ["train", "--config", str(config), "--test-area", "1", "--data-root", str(two_folds),
                                "--run-dir", str(tmp_path / "run"), *extra])
    assert message in line and not (tmp_path / "run").exists()


@pytest.mark.parametrize("grid_size", ["10", "100"])
def test_voxels_too_coarse_for_the_stages_are_one_line(two_folds, tmp_path, capsys, grid_size):
    """data.grid_size=10 on the tiny rooms (2 with the demo's 5 stages): a training batch pools to one voxel,
    which batch norm cannot normalise; it was torch's ValueError traceback ("Expected more than 1 value per
    channel")."""
    line = one_line(capsys, 2, ["train", "--config", str(PTV3_DEMO), "--test-area", "1", "--data-root",
                                str(two_folds), "--run-dir", str(tmp_path / "run"), *TINY3,
                                f"data.grid_size={grid_size}"])
    assert line.startswith("pointgeope train: error: PTv3's pooling (stride 2) merged the ")
    assert re.search(r"voxels of a training batch into one, and its batch norm needs two or more; the batch is one "
                     r"cloud of \d+ points: data.crop_rate=0.6 keeps that fraction of a sample's voxels of "
                     rf"data.grid_size={grid_size}.0 m \(about \d+ before the crop\); lower data.grid_size or raise "
                     r"data.crop_rate, or raise data.batch_size \(a batch of several clouds never pools to one "
                     r"row\), or use fewer stages \(model.ptv3.enc_depths and the lists with it\)$", line), line


def test_evaluate_refuses_ptv3_test_of_a_ptv1_run(tiny_run, capsys):
    line = one_line(capsys, 2, ["evaluate", str(tiny_run), "eval.protocol=ptv3"])
    assert "eval.protocol=ptv3: PTv3's samples and test, but model.backbone=ptv1" in line


def test_ptv3_needs_its_recipe_samples_and_builds_from_the_config():
    cfg = load_config(None)
    cfg.model.backbone, cfg.model.pe = "ptv3", "none"       # made in code, not loaded: build refuses it too
    with pytest.raises(ConfigError, match=re.escape("expected data.augment=pointcept_ptv3 and eval.protocol=ptv3")):
        build.model(cfg)
    cfg = load_config(PTV3_DEMO, ["model.geope_learnable=true"])
    net = build.model(cfg)
    assert isinstance(net, PTv3Seg) and net.hierarchy_spec is None
    assert [p.shape for p in net.frequency_parameters()] == [torch.Size([6])]      # head width 18: 6 blocks
    groups = build.optimizer(cfg, net).param_groups
    # block_lr on Pointcept's "block" parameters; the learnt frequencies at optim.lr without weight decay (as
    # PTv1's), although the shared encoding is registered under the first block's name
    named = {id(p): n for n, p in net.named_parameters()}
    freq = net.frequency_parameters()
    assert all("block" in named[id(p)] for p in freq)
    assert [(g["lr"], g["weight_decay"]) for g in groups if g["params"] == freq] == [(cfg.optim.lr, 0.0)]
    others = [g for g in groups if g["params"] != freq]
    assert [(g["lr"], g["weight_decay"]) for g in others] == [(cfg.optim.lr, 0.01), (cfg.optim.block_lr, 0.01)]
    assert all("block" in named[id(p)] for p in others[1]["params"])
    assert not any("block" in named[id(p)] for p in others[0]["params"])
    assert sum(len(g["params"]) for g in groups) == len(list(net.parameters()))


def test_config_of_an_older_checkpoint_without_backbone_is_ptv1():
    """Checkpoints written before model.backbone and model.ptv3 existed compare as PTv1 with the defaults."""
    from pointgeope.engine.config_diff import config_differences

    now = config_to_dict(load_config(DEMO_CONFIG))
    old = json.loads(json.dumps(now))
    del old["model"]["backbone"], old["model"]["ptv3"]
    assert config_differences(old, now) == []
    old["model"]["planes"] = [8, 16, 32, 64]
    assert [d[0] for d in config_differences(old, now)] == ["model.planes"]


def _ddp_rank(rank: int, world: int, port: int, root: str, run: str) -> None:
    from tests.engine.conftest import join_rank, train_fold_1

    join_rank(rank, world, port)
    train_fold_1(load_config(PTV3_DEMO, TINY3 + [f"data.root={root}", f"train.run_dir={run}", "data.loop=2"]))


@pytest.mark.slow
def test_a_two_process_ddp_run_of_ptv3(two_folds, tmp_path):
    """DDP (gloo) has nothing PTv1-specific on its path: two ranks train PTv3 with Mix3D and test it."""
    import torch.multiprocessing as mp

    from tests.engine.conftest import free_port

    mp.start_processes(_ddp_rank, args=(2, free_port(), str(two_folds), str(tmp_path)), nprocs=2, join=True,
                       start_method="fork")
    log = (tmp_path / "area_1" / "log.txt").read_text()
    assert "2 processes of " in log and "model: ptv3" in log and log.count("fold 1 done") == 1
    last = load_checkpoint(tmp_path / "area_1" / "last.pt")
    assert last["step"] == 4 and len(last["rng"]) == 2          # 8 samples, 2 per step over both ranks


def test_the_logged_learning_rate_of_the_one_cycle_is_each_steps(ptv3_run):
    """Two steps of one cycle (T = 2, pct_start 0.05): the anneal runs from the peak optim.lr = 0.01 at step
    pct_start T - 1 = -0.9 to 0.01 / div_factor / final_div_factor = 1e-6 at step T - 1 = 1, a cosine
    (schedule.py's definition); step s (0-based) trains at its value at s. ``train/lr`` logged the rate after
    the schedule's step, at the last step a value torch extrapolates past the cycle's end (4.2e-4)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    peak, low, start, end = 0.01, 0.01 / 10 / 1000, 0.05 * 2 - 1, 2 - 1

    def anneal(s: int) -> float:
        return low + (peak - low) * (1 + math.cos(math.pi * (s - start) / (end - start))) / 2

    events = EventAccumulator(str(ptv3_run / "tb"))
    events.Reload()
    logged = [(e.step, e.value) for e in events.Scalars("train/lr")]
    assert [step for step, _ in logged] == [1, 2]
    assert [value for _, value in logged] == pytest.approx([anneal(0), anneal(1)], rel=1e-6)   # 5.4e-3, 1e-6
    assert re.search(r"epoch 1/1 .* lr 1\.000e-06 ", (ptv3_run / "log.txt").read_text())
