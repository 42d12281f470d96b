"""A checkpoint's weights are checked before a network takes them (pointgeope/engine/weights.py)."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from pointgeope.engine.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from pointgeope.engine.weights import first_non_finite, load_model_state
from tests.engine.conftest import one_line


def test_model_shape_mismatch_names_the_file(tmp_path):
    save_checkpoint(tmp_path / "best.pt", {"model": torch.nn.Linear(3, 4).state_dict()})
    ckpt = load_checkpoint(tmp_path / "best.pt")
    with pytest.raises(CheckpointError, match=r"best\.pt: the weights do not fit this model .*size mismatch"):
        load_model_state(torch.nn.Linear(3, 5), ckpt, tmp_path / "best.pt")


def test_a_long_mismatch_is_cut_and_marked_with_its_length():
    """torch's list of missing keys of a deep network is thousands of characters: the refusal says its first 600,
    marked as cut with the length of what it cut (before: cut there silently)."""
    model = torch.nn.Sequential(*(torch.nn.Linear(2, 2) for _ in range(200)))
    with pytest.raises(CheckpointError) as err:
        load_model_state(model, {"model": {"0.weight": torch.ones(2, 2)}}, "m.pt")
    text = str(err.value)
    head, tail = "m.pt: the weights do not fit this model (", "); was it written with other model.* settings?"
    assert text.startswith(head + "Error(s) in loading state_dict for Sequential:") and text.endswith(tail)
    cut = re.fullmatch(r".{597}\.\.\. \(([0-9,]+) characters\)", text[len(head):-len(tail)], re.S)
    assert cut and int(cut.group(1).replace(",", "")) > 600



def test_every_mismatch_counts_toward_the_cut():
    """Ten layers of another width: torch says a line per layer. The refusal says the lines on one line, without
    their tabs, up to 600 characters and marked where cut (it said the first three, unmarked: 559 characters, as
    if three layers differed, and a tab before each)."""
    model = torch.nn.Sequential(*(torch.nn.Linear(2, 2) for _ in range(10)))
    saved = torch.nn.Sequential(*(torch.nn.Linear(3, 2) for _ in range(10))).state_dict()
    with pytest.raises(CheckpointError) as err:
        load_model_state(model, {"model": saved}, "m.pt")
    head, tail = "m.pt: the weights do not fit this model (", "); was it written with other model.* settings?"
    text = str(err.value)
    said = text[len(head):-len(tail)]
    assert text.startswith(head + "Error(s) in loading state_dict for Sequential: size mismatch for 0.weight: ")
    assert "\t" not in text and "size mismatch for 3.weight" in said
    cut = re.fullmatch(r".{597}\.\.\. \(([0-9,]+) characters\)", said, re.S)
    assert cut and int(cut.group(1).replace(",", "")) > 10 * len("size mismatch for 0.weight: copying a param")

@pytest.mark.parametrize("ckpt, got", [
    ({}, "no 'model' entry"),                                                        # was KeyError: 'model'
    ({"model": None}, "a NoneType that is not names -> tensors"),                     # was a TypeError
    ({"model": [1, 2]}, "a list that is not names -> tensors"),
    ({"model": {"weight": [1.0]}}, "a dict that is not names -> tensors"),
])
def test_a_damaged_model_entry_is_a_checkpoint_error_naming_the_file(ckpt, got):
    with pytest.raises(CheckpointError) as err:
        load_model_state(torch.nn.Linear(3, 4), ckpt, "m.pt")
    assert str(err.value) == (f"m.pt: damaged checkpoint: expected its 'model' weights (a state dict), got {got}; "
                              "use the fold's own last.pt or best.pt again, or train the fold")


def test_non_finite_weights_are_refused_naming_the_first_such_tensor():
    """Two NaN and one infinity in the second layer's weight, an infinity in the third's bias: the second's
    named (the first in the state dict's order), with its count; the network is left as it was."""
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 5), torch.nn.Linear(5, 2))
    state = {k: v.clone() for k, v in net.state_dict().items()}
    state["1.weight"][0, :3] = torch.tensor([np.nan, np.inf, np.nan])
    state["2.bias"][1] = -np.inf
    assert first_non_finite(state) == ("1.weight", 3, 20)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    with pytest.raises(CheckpointError) as err:
        load_model_state(net, {"model": state}, "diverged.pt")
    assert str(err.value) == ("diverged.pt: the weights are not finite: '1.weight' holds 3 NaN or infinite values "
                              "of 20 (the first such tensor; a run that diverged?); use a checkpoint saved before "
                              "that, or train again")
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())
    assert first_non_finite(before) is None


@pytest.mark.parametrize("backbone", [[], ["model.backbone=ptv3", "model.pe=none", "data.augment=pointcept_ptv3",
                                      "eval.protocol=ptv3"]],
                         ids=["ptv1", "ptv3"])
def test_a_fresh_network_of_each_backbone_is_finite(backbone):
    """No buffer of the networks holds an infinity on purpose (a mask, a bound): the check refuses no real one."""
    from pointgeope.engine import build
    from pointgeope.engine.config import load_config

    torch.manual_seed(0)
    state = build.model(load_config(None, backbone)).state_dict()
    assert first_non_finite(state) is None and any(t.is_floating_point() for t in state.values())


def _nan_copy(tiny_run, tmp_path):
    """``tiny_run`` copied as ``tmp_path/area_1`` with the weights of its checkpoints filled with NaN, as a run
    that diverged leaves them."""
    import shutil

    fold = tmp_path / "area_1"
    shutil.copytree(tiny_run, fold)
    for name in ("last.pt", "best.pt"):
        ckpt = torch.load(fold / name, weights_only=True)
        ckpt["model"] = {k: v.fill_(np.nan) if v.is_floating_point() else v for k, v in ckpt["model"].items()}
        save_checkpoint(fold / name, {k: v for k, v in ckpt.items() if k not in ("format", "version")})
    return fold


def test_predict_and_evaluate_refuse_nan_weights_in_one_line(tiny_run, tmp_path, capsys):
    """predict with NaN weights said "2,000 points (ceiling 100.0%)", exit 0: every logit NaN, argmax 0."""
    fold = _nan_copy(tiny_run, tmp_path)
    scan = tmp_path / "scan.npy"
    rng = np.random.default_rng(0)
    np.save(scan, np.c_[rng.uniform(0, 3, (500, 3)), rng.integers(0, 255, (500, 3))].astype(np.float32))
    line = one_line(capsys, 2, ["predict", str(fold), str(scan), "--out", str(tmp_path / "out")])
    assert line.startswith(f"pointgeope predict: error: {fold / 'last.pt'}: the weights are not finite: '"), line
    assert not (tmp_path / "out" / "scan_pred.ply").exists()
    line = one_line(capsys, 2, ["evaluate", str(fold), "eval.max_fragments=1"])
    assert line.startswith(f"pointgeope evaluate: error: {fold / 'last.pt'}: the weights are not finite: '"), line
