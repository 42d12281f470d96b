"""Tests of pointgeope/engine/record_keys.py: a saved config written before a key existed reads as its run did,
wherever a saved config is read (resume, evaluate, predict, a skipped fold's note, the report)."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from pointgeope.engine.checkpoint import (
    CheckpointError,
    eval_values,
    fold_config,
    load_checkpoint,
    save_checkpoint,
)
from pointgeope.engine.config import config_to_dict, load_config
from pointgeope.engine.config_diff import config_differences
from pointgeope.engine.record_keys import as_recorded
from pointgeope.report.settings import fold_settings, mixed_settings

REPO = Path(__file__).resolve().parents[2]


def old_record(path: str, *overrides: str, lacks: str = "model.point3drope_scale") -> dict:
    """The resolved config of ``path`` as a version before ``lacks`` existed saved it (without that key)."""
    record = config_to_dict(load_config(REPO / path, overrides))
    section, name = lacks.split(".")
    del record[section][name]
    return record


def test_an_old_point3drope_record_turns_at_scale_one_wherever_it_is_read(tmp_path):
    """Before model.point3drope_scale, point3drope turned at 1 per metre: a config.yaml or checkpoint
    without the key is read at 1.0 (evaluate, predict), not at today's default 0.5."""
    old = old_record("configs/s3dis/ptv3_point3drope.yaml")
    assert load_config(REPO / "configs/s3dis/ptv3_point3drope.yaml").model.point3drope_scale == 0.5
    fold = tmp_path / "area_1"
    fold.mkdir()
    (fold / "config.yaml").write_text(yaml.safe_dump(old))
    assert fold_config(fold).model.point3drope_scale == 1.0                       # evaluate, config.yaml
    (fold / "config.yaml").unlink()
    save_checkpoint(fold / "last.pt", {"config": old})
    assert fold_config(fold, log=lambda line: None).model.point3drope_scale == 1.0  # evaluate, last.pt only

    from pointgeope.engine.predict_model import prediction_config
    cfg, _ = prediction_config({"config": old}, fold / "last.pt", False, None, False, [])
    assert cfg.model.point3drope_scale == 1.0                                     # predict


def test_a_resume_of_an_old_point3drope_run_names_the_scale(tmp_path):
    """A resume with today's config (0.5) of a checkpoint that turned at 1.0 is refused with the key."""
    old = old_record("configs/s3dis/ptv3_point3drope.yaml")
    now = config_to_dict(load_config(REPO / "configs/s3dis/ptv3_point3drope.yaml"))
    assert config_differences(old, now) == [("model.point3drope_scale", 1.0, 0.5)]
    save_checkpoint(tmp_path / "last.pt", {"config": old})
    with pytest.raises(CheckpointError, match=r"model\.point3drope_scale: checkpoint 1\.0, now 0\.5"):
        load_checkpoint(tmp_path / "last.pt", now)
    now["model"]["point3drope_scale"] = 1.0
    assert load_checkpoint(tmp_path / "last.pt", now)["config"] == old


def test_an_old_record_of_another_encoding_takes_the_default_scale(tmp_path):
    """With any other model.pe the scale meant nothing: no false difference, and the record is accepted
    (the config refuses a scale away from its default with them)."""
    old = old_record("configs/s3dis/ptv3_geope.yaml")
    now = config_to_dict(load_config(REPO / "configs/s3dis/ptv3_geope.yaml"))
    assert config_differences(old, now) == []
    assert "point3drope_scale" not in as_recorded(old)["model"]
    save_checkpoint(tmp_path / "last.pt", {"config": old})
    assert fold_config(tmp_path, log=lambda line: None).model.point3drope_scale == 0.5


@pytest.mark.parametrize("path, amp, tested", [("configs/s3dis/pt_geope.yaml", "bf16", "bf16"),
                                               ("configs/s3dis/pt_geope.yaml", "none", "none"),
                                               ("configs/s3dis/ptv3_geope.yaml", "bf16", "none")])
def test_an_old_record_without_eval_amp_was_tested_as_its_backbone_tested(tmp_path, path, amp, tested):
    """Before eval.amp, PTv1's test ran at the run's train.amp and PTv3's in float32: a record without the
    key reads so in evaluate (fold_config) and in a skipped fold's note (eval_values)."""
    old = old_record(path, f"train.amp={amp}", lacks="eval.amp")
    assert eval_values(old)["eval.amp"] == tested
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old))
    assert fold_config(tmp_path).eval.amp == tested
    new = copy.deepcopy(old)
    new["eval"]["amp"] = "none"                       # a record that has the key keeps its value
    assert eval_values(new)["eval.amp"] == "none"


def test_the_report_compares_an_old_point3drope_fold_at_its_scale(tmp_path):
    """A fold saved before the key (1.0) and one trained since (0.5) did not turn alike: the report says so."""
    new = config_to_dict(load_config(REPO / "configs/s3dis/ptv3_point3drope.yaml"))
    folds = {"Area_1": fold_settings({"config": old_record("configs/s3dis/ptv3_point3drope.yaml")}, tmp_path),
             "Area_2": fold_settings({"config": new}, tmp_path)}
    assert mixed_settings(folds) == {"model.point3drope_scale": {"Area_1": 1.0, "Area_2": 0.5}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old_record("configs/s3dis/ptv3_point3drope.yaml")))
    assert fold_settings({}, tmp_path)["model.point3drope_scale"] == 1.0


def test_an_old_record_without_eval_class_mean_is_scored_by_the_rule_of_its_time(tmp_path):
    """Before eval.class_mean every test averaged the classes present (metrics.py's NaN rule): a run recorded
    without the key is evaluated again by that rule, not by today's default 'all', and the report reads its
    metrics.json by the same rule; a record that has the key keeps its own."""
    old = old_record("configs/demo.yaml", lacks="eval.class_mean")
    assert load_config(REPO / "configs/demo.yaml").eval.class_mean == "all"
    fold = tmp_path / "area_1"
    fold.mkdir()
    (fold / "config.yaml").write_text(yaml.safe_dump(old))
    assert fold_config(fold).eval.class_mean == "present"
    (fold / "config.yaml").write_text(yaml.safe_dump(old_record("configs/demo.yaml", "eval.class_mean=all",
                                                                lacks="data.normal")))
    assert fold_config(fold).eval.class_mean == "all"


def test_an_old_record_without_eval_vote_is_evaluated_by_summing_softmax(tmp_path):
    """Before eval.vote every test summed each point's softmax over its predictions: a run recorded without the
    key (nor eval.max_fragments, of the same version) is evaluated again so, not by today's default 'logits'; a
    record that has the key keeps its own."""
    fold = tmp_path / "area_1"
    fold.mkdir()
    old = old_record("configs/demo.yaml", lacks="eval.vote")
    del old["eval"]["max_fragments"]
    (fold / "config.yaml").write_text(yaml.safe_dump(old))
    assert load_config(REPO / "configs/demo.yaml").eval.vote == "logits"
    assert fold_config(fold).eval.vote == "softmax"
    (fold / "config.yaml").write_text(yaml.safe_dump(old_record("configs/demo.yaml", lacks="eval.class_mean")))
    assert fold_config(fold).eval.vote == "logits"


SMALL = ["model.planes=[16,32]", "model.blocks=[1,1]", "model.strides=[1,4]", "model.neighbours=[8,8]",
         "model.decoder_blocks=[1,1]"]


@pytest.mark.parametrize("pe,learnt", [("rope-mixed", "false"), ("geope", "true")])
def test_an_old_run_with_learnt_frequencies_resumes_with_the_one_parameter_group_it_saved(tmp_path, pe, learnt):
    """Before optim.no_weight_decay (and model.rope_mixed_init) the optimiser held every parameter in one group,
    learnt frequencies decayed, and RoPE-Mixed started from rope3d's axial frequencies. Such a record resumed
    with today's config is refused in one line naming the overrides that run it as it ran (it was a traceback:
    torch's 'loaded state dict has a different number of parameter groups'), and its own config builds the
    optimiser that loads the saved one-group state."""
    import torch

    from pointgeope.engine import build
    from pointgeope.engine.config import config_from_dict

    overrides = [*SMALL, f"model.pe={pe}", f"model.geope_learnable={learnt}"]
    record = config_to_dict(load_config(REPO / "configs/demo.yaml", overrides))
    del record["optim"]["no_weight_decay"], record["model"]["rope_mixed_init"]
    cfg = config_from_dict(record, "last.pt")
    net = build.model(cfg)
    then = torch.optim.AdamW(net.parameters(), lr=0.02, weight_decay=1e-4)   # every parameter, one group
    for p in net.parameters():
        p.grad = torch.ones_like(p)
    then.step()
    build.optimizer(cfg, net).load_state_dict(then.state_dict())
    assert cfg.optim.no_weight_decay == [] and net.frequency_parameters()
    assert cfg.model.rope_mixed_init == ("axial" if pe == "rope-mixed" else "random")
    save_checkpoint(tmp_path / "last.pt", {"config": record})
    with pytest.raises(CheckpointError, match=r"the override .*optim\.no_weight_decay=\[\] uses it as it ran"):
        load_checkpoint(tmp_path / "last.pt", config_to_dict(load_config(REPO / "configs/demo.yaml", overrides)))


def test_an_old_run_without_learnt_frequencies_resumes_with_todays_no_weight_decay():
    """A network without learnt frequencies has one parameter group under either value: a record of it without
    optim.no_weight_decay is no other config than today's."""
    for pe in ("geope", "rpe", "rope3d"):
        record = config_to_dict(load_config(REPO / "configs/demo.yaml", [f"model.pe={pe}"]))
        del record["optim"]["no_weight_decay"], record["model"]["rope_mixed_init"]
        assert config_differences(record, config_to_dict(load_config(REPO / "configs/demo.yaml",
                                                                     [f"model.pe={pe}"]))) == []
