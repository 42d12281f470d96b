"""PTv3's optimisation recipe: the block parameters' group, the one-cycle schedule against its formula written
out here, and the recipe config with Pointcept's numbers; PTv1's optimiser and schedule as they were."""
from __future__ import annotations

import io
import math
from pathlib import Path

import pytest
import torch

from pointgeope.engine import build
from pointgeope.engine.config import ConfigError, load_config
from pointgeope.engine.schedule import keyword_groups, one_cycle
from tests.engine.test_ptv3_engine import train3

RECIPE = Path(__file__).resolve().parents[2] / "configs" / "s3dis" / "_ptv3_recipe.yaml"


class Net(torch.nn.Module):
    """Names like PTv3's: ``embedding``, ``enc.enc0.block0...``, ``seg_head``."""

    def __init__(self):
        super().__init__()
        self.embedding = torch.nn.Linear(6, 4)
        self.enc = torch.nn.ModuleDict({"enc0": torch.nn.ModuleDict({"block0": torch.nn.Linear(4, 4),
                                                                    "down": torch.nn.Linear(4, 4)})})
        self.seg_head = torch.nn.Linear(4, 13)

    def frequency_parameters(self):
        return []


def _names(net, group):
    ids = {id(p): n for n, p in net.named_parameters()}
    return sorted(ids[id(p)] for p in group["params"])


def test_keyword_groups_put_block_parameters_in_their_own_group_at_their_lr():
    net = Net()
    groups = keyword_groups([{"params": list(net.parameters()), "weight_decay": 0.05}], net, "block", 6e-4)
    assert len(groups) == 2 and "lr" not in groups[0] and groups[1]["lr"] == 6e-4
    assert _names(net, groups[1]) == ["enc.enc0.block0.bias", "enc.enc0.block0.weight"]
    assert len(groups[0]["params"]) == 6 and all(g["weight_decay"] == 0.05 for g in groups)
    none = keyword_groups([{"params": [net.seg_head.weight]}], net, "block", 6e-4)
    assert len(none) == 1                                              # no empty group
    with pytest.raises(ValueError, match="net's"):
        keyword_groups([{"params": [torch.nn.Parameter(torch.zeros(1))]}], net, "block", 6e-4)
    kept = keyword_groups([{"params": list(net.parameters())}], net, "block", 6e-4, keep=[net.enc.enc0.block0.bias])
    assert _names(net, kept[1]) == ["enc.enc0.block0.weight"] and len(kept[0]["params"]) == 7


def test_recipe_optimizer_is_adamw_with_pointcepts_two_rates():
    cfg = load_config(RECIPE)
    net = Net()
    opt = build.optimizer(cfg, net)
    assert isinstance(opt, torch.optim.AdamW)
    assert [g["lr"] for g in opt.param_groups] == [0.006, 0.0006]
    assert [g["weight_decay"] for g in opt.param_groups] == [0.05, 0.05]
    ptv1 = build.optimizer(load_config(None), net)                     # PTv1: one SGD group, as before
    assert isinstance(ptv1, torch.optim.SGD) and len(ptv1.param_groups) == 1 and ptv1.param_groups[0]["lr"] == 0.5


def cycle(step: int, total: int, peak: float, pct: float = 0.05, div: float = 10.0, final: float = 1000.0) -> float:
    """The one cycle, written from its definition: cosine from peak/div up to peak over the first
    pct * total - 1 steps, then cosine down to peak/div/final at step total - 1."""
    start, end, top = peak / div, peak / div / final, pct * total - 1

    def cos_ramp(a, b, t):
        return a + (b - a) * (1 - math.cos(math.pi * t)) / 2

    if step <= top and top > 0:         # the peak is at step top: a warm-up ending at step 0 is none
        return cos_ramp(start, peak, step / top)
    return cos_ramp(peak, end, (step - top) / (total - 1 - top))


def test_one_cycle_follows_its_formula_in_each_group_and_cycles_beta1():
    net = Net()
    cfg = load_config(RECIPE)
    opt = build.optimizer(cfg, net)
    total = 400
    sched = one_cycle(opt, total)
    lrs, betas = [], []
    for _ in range(total):
        lrs.append([g["lr"] for g in opt.param_groups])
        betas.append(opt.param_groups[0]["betas"][0])
        opt.step()
        sched.step()
    for s in (0, 1, 10, 19, 20, 100, 250, 399):
        assert lrs[s] == pytest.approx([cycle(s, total, 0.006), cycle(s, total, 0.0006)], rel=1e-9)
    assert lrs[0] == pytest.approx([6e-4, 6e-5]) and lrs[19] == pytest.approx([0.006, 0.0006])
    assert lrs[-1] == pytest.approx([6e-7, 6e-8])
    assert betas[0] == pytest.approx(0.95) and betas[19] == pytest.approx(0.85) and betas[-1] == pytest.approx(0.95)


@pytest.mark.parametrize("total", [19, 20, 21])
def test_one_cycle_around_a_warm_up_of_one_step_follows_its_formula(total):
    # 0.05 x 20 = 1: the warm-up would end at step 0, where torch's OneCycleLR divides by zero
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([p], lr=0.006)
    sched = one_cycle(opt, total)
    lrs = []
    for _ in range(total):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step(), sched.step()
    assert lrs == pytest.approx([cycle(s, total, 0.006) for s in range(total)], rel=1e-12, abs=1e-15)
    assert lrs[-1] == pytest.approx(6e-7)
    assert lrs[0] == pytest.approx({19: 0.006, 20: 0.006, 21: 6e-4}[total], rel=1e-4)


def test_a_ptv3_demo_of_one_epoch_whose_warm_up_is_one_step_trains(two_folds, tmp_path):
    # the demo's train.epochs=1 (20 steps at pct_start 0.05), at the tiny data's size: 2 steps at 0.5
    assert train3(two_folds, tmp_path, "optim.pct_start=0.5", "model.pe=none") == 0
    assert (tmp_path / "area_1" / "metrics.json").is_file()


def test_build_scheduler_spans_epochs_times_steps_and_resumes_from_its_state(tmp_path):
    cfg = load_config(RECIPE, ["train.epochs=5"])
    net = Net()
    opt = build.optimizer(cfg, net)
    sched = build.scheduler(cfg, opt, steps_per_epoch=8)
    assert isinstance(sched, torch.optim.lr_scheduler.OneCycleLR) and sched.total_steps == 40
    for _ in range(13):
        opt.step(), sched.step()
    buffer = io.BytesIO()
    torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)                      # as the checkpoints are read
    opt2 = build.optimizer(cfg, Net())
    sched2 = build.scheduler(cfg, opt2, steps_per_epoch=8)
    opt2.load_state_dict(saved["optimizer"]), sched2.load_state_dict(saved["scheduler"])
    for _ in range(26):                                                # to the last step, 39
        opt.step(), sched.step(), opt2.step(), sched2.step()
        assert [g["lr"] for g in opt2.param_groups] == [g["lr"] for g in opt.param_groups]
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([6e-7, 6e-8])
    opt.step(), sched.step()      # the step after the last optimiser step of the run: still allowed


def test_the_recipe_config_has_pointcepts_numbers():
    cfg = load_config(RECIPE)
    d, o, t, e = cfg.data, cfg.optim, cfg.train, cfg.eval
    assert (d.grid_size, d.voxel_max, d.crop_rate, d.loop, d.batch_size, d.augment, d.mix_prob) == \
        (0.02, 204800, 0.6, 30, 12, "pointcept_ptv3", 0.8)
    assert (o.name, o.lr, o.block_lr, o.weight_decay, o.scheduler) == ("adamw", 0.006, 0.0006, 0.05, "onecycle")
    assert (o.pct_start, o.anneal_strategy, o.div_factor, o.final_div_factor) == (0.05, "cos", 10.0, 1000.0)
    assert t.epochs * d.loop == 3000 and (t.loss, t.lovasz_weight, t.amp) == ("ce_lovasz", 1.0, "fp16")  # 100 x 30
    assert (e.protocol, e.vote) == ("ptv3", "softmax")


def test_new_keys_are_checked():
    for bad, words in (("data.mix_prob=1.5", "data.mix_prob"), ("data.crop_rate=0", "data.crop_rate"),
                       ("optim.block_lr=-1", "optim.block_lr"), ("optim.scheduler=one_cycle", "onecycle"),
                       ("train.loss=lovasz", "ce_lovasz"), ("eval.protocol=ptv4", "ptv3")):
        with pytest.raises(ConfigError, match=words):
            load_config(None, [bad])


def test_mix3d_and_ptv3_samples_only_together(tmp_path):
    assert build.batch_mixing(load_config(None)) is None
    assert repr(build.batch_mixing(load_config(RECIPE))) == "Mix3D(mix_prob=0.8)"
    with pytest.raises(ConfigError, match="pointcept_ptv3"):
        build.train_dataset(load_config(None, ["data.mix_prob=0.5"]), ["Area_1"])
    with pytest.raises(ConfigError, match="height"):
        build.train_dataset(load_config(RECIPE, ["data.height=true"]), ["Area_1"])


def test_the_recipe_doc_counts_the_steps_of_area_5s_fold():
    """docs/ptv3-recipe.md and the schedule's docstring give Pointcept's step count for the Area 5 fold:
    100 epochs x floor(loop x R / batch) with R the rooms of the other five areas (the loader drops its last
    batch). They said 51,200 for R = 205; S3DIS's Areas 1-4 and 6 hold 44 + 40 + 23 + 49 + 48 = 204 rooms."""
    import re

    from pointgeope import engine
    from pointgeope.engine import schedule

    rooms = 44 + 40 + 23 + 49 + 48          # S3DIS v1.2: Areas 1, 2, 3, 4, 6 (Area 5 has 68, 272 in all)
    cfg = load_config(RECIPE)
    steps = cfg.train.epochs * (cfg.data.loop * rooms // cfg.data.batch_size)
    doc = (Path(engine.__file__).resolve().parents[2] / "docs" / "ptv3-recipe.md").read_text()
    said = re.search(r"e\.g\. ([\d,]+) for\s+`R = (\d+)`", doc)
    assert said and (said[1], int(said[2])) == (f"{steps:,}", rooms)
    counts = {n for pair in re.findall(r"over ([\d,]+) at most|Pointcept's ([\d,]+) steps", doc) for n in pair if n}
    assert counts == {f"{steps:,}"}
    assert re.search(r"Pointcept's S3DIS run \(([\d,]+) steps", schedule.__doc__)[1] == f"{steps:,}"
