"""Tests of bench/fold_estimate.py: every fold's steps follow the recipe's config and that fold's training rooms,
the estimate is the longest fold, and it says when it is not one fold's time (no test time, another batch)."""
from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
import torch

import fold_estimate
from pointgeope.constants import AREA_ROOMS, AREAS

REPO = Path(__file__).resolve().parents[2]

RUN7 = REPO / "bench" / "results" / "gpu" / "h100_run7_gpu.json"


def _training_loader(rooms: int, loop: int, batch: int, config=fold_estimate.RECIPE):
    """The loader training builds (``engine/build.train_loader``, its own ``drop_last`` and sampler) over a
    dataset of ``rooms`` rooms whose length is ``S3DISTrain``'s (``rooms x loop``), ``data.batch_size = batch``."""
    from pointgeope.data.dataset import S3DISTrain
    from pointgeope.engine import build
    from pointgeope.engine.config import load_config
    from pointgeope.engine.distributed import DistEnv
    from pointgeope.engine.placement import HierarchyPlace

    class Rooms:                 # S3DISTrain's length without its HDF5 files; the loader only asks len()
        __len__ = S3DISTrain.__len__

        def __init__(self):
            self.rooms, self.loop = [f"room_{i}" for i in range(rooms)], loop

    cfg = load_config(config, [f"data.loop={loop}", f"data.batch_size={batch}", "data.num_workers=0"])
    env = DistEnv(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
    dataset = Rooms()
    return build.train_loader(cfg, dataset, build.ResumableSampler(dataset, env, seed=0), env, None,
                              HierarchyPlace("none", "not needed to count batches", env.device))


def _steps(rooms: int, loop: int, batch: int, epochs: int) -> int:
    """Optimiser steps of ``epochs`` epochs: one per batch of the training loader."""
    return len(_training_loader(rooms, loop, batch)) * epochs


def test_the_recipe_and_the_rooms_are_the_published_ones():
    spec = fold_estimate.recipe()
    assert (spec["loop"], spec["batch_size"], spec["epochs"], spec["voxel_max"]) == (30, 16, 100, 80_000)
    loader = _training_loader(7, spec["loop"], spec["batch_size"])
    assert spec["drop_last"] is loader.drop_last is True        # what the recipe records is the loader's
    assert len(loader) == fold_estimate.fold_steps(7, spec["loop"], spec["batch_size"], 1) == 13   # 210 // 16
    assert tuple(AREA_ROOMS) == AREAS and sum(AREA_ROOMS.values()) == 272


@pytest.mark.parametrize("loop, batch, epochs", [(30, 16, 100), (7, 5, 3), (1, 3, 2)])
def test_each_fold_trains_the_steps_of_its_own_training_rooms(loop, batch, epochs):
    spec = {"loop": loop, "batch_size": batch, "epochs": epochs}
    rows = fold_estimate.folds(0.5, 2.0, spec)
    for area, row in rows.items():
        train = [r for a, r in AREA_ROOMS.items() if a != area]
        assert row["train_rooms"] == sum(train) and row["test_rooms"] == AREA_ROOMS[area]
        assert row["steps"] == _steps(sum(train), loop, batch, epochs)
        assert row["hours"] == pytest.approx((row["steps"] * 0.5 + AREA_ROOMS[area] * 2.0) / 3600)
    if (loop, batch, epochs) == (30, 16, 100):           # the figures docs/gpu.md quotes
        assert rows["Area_5"]["steps"] == 38_200 and rows["Area_3"]["steps"] == 46_600


def test_a_config_sets_the_steps(tmp_path):
    """loop, batch and epochs come from the config given, not from constants."""
    config = tmp_path / "short.yaml"
    config.write_text(f"base: {REPO / 'configs/s3dis/_base.yaml'}\nmodel:\n  pe: rpe\n"
                      "data:\n  loop: 2\n  batch_size: 4\ntrain:\n  epochs: 3\n")
    spec = fold_estimate.recipe(config)
    assert (spec["loop"], spec["batch_size"], spec["epochs"]) == (2, 4, 3)
    assert fold_estimate.folds(1.0, 1.0, spec)["Area_1"]["steps"] == _steps(228, 2, 4, 3) == 342


def test_run7_takes_its_longest_fold_the_auditor_computed():
    """H100 run 7: every fold's hours as the audit computed them by hand from the same step and room times
    (rpe 4.14 / 4.20 / 4.47 / 4.06 / 3.75 / 4.08 h), the longest Area 3's: the 4 h target is not met."""
    est = fold_estimate.estimate(json.loads(RUN7.read_text())["steps"], fold_estimate.recipe())
    audit = {"rpe": [4.14, 4.20, 4.47, 4.06, 3.75, 4.08], "geope": [4.28, 4.35, 4.63, 4.20, 3.88, 4.22]}
    for pe, hours in audit.items():
        assert [round(r["hours"], 2) for r in est[pe]["folds"].values()] == hours
        assert est[pe]["longest"] == "Area_3" and round(est[pe]["fold_h"], 2) == max(hours) and est[pe]["why"] is None
        assert est[pe]["step_mode"] == "beside" and est[pe]["reps"] == 1 and est[pe]["seconds_per_test_room"] == 6.104


def _bench16(points: int = 80_000, beside: bool = True) -> dict:
    row = {"given_s": 0.3, "reps": 2, **({"beside_s": 0.34} if beside else {})}
    return {"ok": True, "result": {"points_per_cloud": points, "clouds": 16, "presets": {"rpe": row}}}


@pytest.mark.parametrize("published, why", [
    (None, "the published step was not run"),
    ({"ok": False, "rc": None, "error": "skipped: out of --budget"}, "skipped: out of --budget"),
    ({"ok": False, "rc": "timeout", "seconds": 45.0}, "rc timeout"),
])
def test_no_test_time_gives_no_fold_time_and_says_why(published, why):
    steps = {"bench16": _bench16(), **({"published": published} if published else {})}
    est = fold_estimate.estimate(steps, fold_estimate.recipe())["rpe"]
    assert est["fold_h"] is None and why in est["why"] and est["seconds_per_test_room"] is None
    assert all(r["hours"] is None and r["test_h"] is None and r["train_h"] > 0 for r in est["folds"].values())


def test_fewer_points_than_the_recipe_gives_no_fold_time_and_says_so():
    steps = {"bench16": _bench16(points=40_000), "published": {"ok": True, "result": {"seconds_per_room": 2.0}}}
    est = fold_estimate.estimate(steps, fold_estimate.recipe())["rpe"]
    assert est["fold_h"] is None and "16 x 40000 points, not the recipe's 16 x 80000" in est["why"]
    assert all(r["hours"] is None for r in est["folds"].values())
    assert est["folds"]["Area_3"]["test_h"] == 23 * 2.0 / 3600            # the test time measured stays
    assert "1: -  2: -  3: -  4: -  5: -  6: -" in fold_estimate.table("run.json", {"rpe": est})   # none printed


def test_the_given_step_stands_in_for_beside_and_the_row_says_so():
    steps = {"bench16": _bench16(beside=False), "published": {"ok": True, "result": {"seconds_per_room": 2.0}}}
    est = fold_estimate.estimate(steps, fold_estimate.recipe())["rpe"]
    assert est["step_mode"] == "given" and est["step_s"] == 0.3
    assert est["fold_h"] == pytest.approx((46_600 * 0.3 + 23 * 2.0) / 3600)


def test_the_gpu_check_without_the_published_step_records_no_fold_time(monkeypatch, tmp_path):
    """The audit's repro (F3): ``--no-published`` still plans the estimate, which now has no ``fold_h``."""
    import gpu_check

    monkeypatch.setattr(sys, "argv", ["gpu_check.py", "--no-published", "--out", str(tmp_path / "gpu.json")])
    args = gpu_check.parse_args()
    assert "fold_estimate" in [name for name, _ in gpu_check.plan(args)]
    check = types.SimpleNamespace(args=args, result={"steps": {"bench16": _bench16()}}, write=lambda: None)
    gpu_check.fold_estimate(check)
    est = check.result["fold_estimate"]["rpe"]
    assert est["fold_h"] is None and "--no-published" in est["why"] and est["recipe"]["loop"] == 30


def test_the_committed_recomputation_is_the_scripts(tmp_path):
    """bench/results/gpu/fold_estimates.json (the figures of README and docs/gpu.md) is what the script gives
    from the committed runs' JSON today."""
    committed = json.loads((REPO / "bench/results/gpu/fold_estimates.json").read_text())
    for name, est in committed["runs"].items():
        steps = json.loads((REPO / "bench/results/gpu" / name).read_text())["steps"]
        assert fold_estimate.estimate(steps, fold_estimate.recipe()) == est, name
