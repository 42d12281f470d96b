"""pointgeope/engine/state.py: what a fold's checkpoint saves comes back on resume, and nothing is left out."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from pointgeope.engine.distributed import DistEnv
from pointgeope.engine.rng_states import rank_rng_state
from pointgeope.engine.state import FoldCheckpoints, Learner, LoopState

ENV = DistEnv(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))


def learner(seed: int) -> Learner:
    torch.manual_seed(seed)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    return Learner(model, opt, sched, torch.amp.GradScaler("cuda", enabled=False))


def draws() -> tuple:
    return random.random(), float(np.random.rand()), float(torch.rand(1))


def test_save_then_resume_restores_the_loop_the_learner_and_the_rng(tmp_path):
    a = learner(0)
    for _ in range(3):  # some optimiser steps, so that Adam's moments and the schedule are not at their start
        a.backward(a.model(torch.ones(4, 3)).square().sum())
        a.update(grad_clip=1.0)
    saved = LoopState(epoch=2, batch=5, step=17, best_miou=0.25)
    ckpts = FoldCheckpoints(tmp_path, a, ENV, {"train": {"seed": 0}}, {"grid_size": 0.04})
    ckpts.save("last.pt", saved)
    expected = draws()  # the random stream right after the save

    b = learner(1)  # other weights, a fresh optimiser and schedule
    lines = []
    state = FoldCheckpoints(tmp_path, b, ENV, {"train": {"seed": 0}}, {}).resume(lines.append)
    assert state == saved and state is not saved
    assert draws() == expected
    # as the epoch lines count (epoch 1/E is the first): it said "epoch 2, batch 5", the 3rd epoch's 5 batches
    assert lines == [f"resumed from {tmp_path / 'last.pt'}: inside epoch 3, after its batch 5 (step 17)"]
    for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True):
        assert torch.equal(p, q)
    assert b.lr() == a.lr() and b.scheduler.last_epoch == a.scheduler.last_epoch == 3
    # the next step from the restored learner is the next step of the saved one
    for each in (a, b):
        each.backward(each.model(torch.ones(4, 3)).square().sum())
        each.update(grad_clip=1.0)
    for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_no_last_checkpoint_is_a_fresh_start(tmp_path):
    assert FoldCheckpoints(tmp_path, learner(0), ENV, {}, {}).resume(print) == LoopState(0, 0, 0, -1.0)


def test_the_checkpoint_holds_the_state_under_its_field_names(tmp_path):
    FoldCheckpoints(tmp_path, learner(0), ENV, {"k": 1}, {"grid_size": 0.04}).save("best.pt", LoopState(1, 0, 9, 0.5))
    ckpt = torch.load(tmp_path / "best.pt", weights_only=True)
    assert {k: ckpt[k] for k in ("epoch", "batch", "step", "best_miou")} == {"epoch": 1, "batch": 0, "step": 9,
                                                                            "best_miou": 0.5}
    assert ckpt["config"] == {"k": 1} and ckpt["predict"] == {"grid_size": 0.04} and ckpt["scaler"] is None
    assert ckpt["threads"] == torch.get_num_threads() and len(ckpt["rng"]) == 1


@pytest.mark.parametrize(("batch", "first", "after"),
                         [(1, "first 1 batch", "after it"), (3, "first 3 batches", "after them")])
def test_the_epoch_sums_come_back_and_an_older_checkpoint_without_them_resumes_with_a_note(tmp_path, batch, first,
                                                                                            after):
    """LoopState carries the sums of an unfinished epoch's batches (a resumed epoch logged the scores of the
    batches after the resume only). A last.pt written before it carried them still resumes, saying so."""
    sums = {"totals": [7.25, 3.0, 120.0], "confusion": [[5, 1], [0, 9]], "seconds": 1.5}
    saved = LoopState(epoch=1, batch=batch, step=7, best_miou=0.5, epoch_sums=sums)
    FoldCheckpoints(tmp_path, learner(0), ENV, {}, {}).save("last.pt", saved)
    assert torch.load(tmp_path / "last.pt", weights_only=True)["epoch_sums"] == sums
    lines = []
    assert FoldCheckpoints(tmp_path, learner(1), ENV, {}, {}).resume(lines.append) == saved
    assert len(lines) == 1

    ckpt = torch.load(tmp_path / "last.pt", weights_only=True)
    del ckpt["epoch_sums"]                        # as an older version wrote it
    torch.save(ckpt, tmp_path / "last.pt")
    lines = []
    state = FoldCheckpoints(tmp_path, learner(1), ENV, {}, {}).resume(lines.append)
    assert state == LoopState(epoch=1, batch=batch, step=7, best_miou=0.5) and state.epoch_sums == {}
    assert lines[1] == (f"note: {tmp_path / 'last.pt'} holds no scores of epoch 2's {first}; its logged "
                        f"train loss, oa and miou will cover the batches {after} only")


def test_a_resume_with_another_number_of_processes_warns_and_gives_each_new_rank_a_stream_of_its_own(tmp_path):
    """1 -> 2 processes: rank 0 resumes the saved stream; rank 1 a stream of its own (not rank 0's), the same
    on every such resume; both warn naming the two counts. 2 -> 1: the rank resumes its own stream, warned."""
    FoldCheckpoints(tmp_path, learner(0), ENV, {}, {}).save("last.pt", LoopState(epoch=1))
    expected = draws()  # the saved stream
    last = tmp_path / "last.pt"

    def resume(rank: int, world: int) -> tuple[tuple, list[str]]:
        lines = []
        env = DistEnv(rank=rank, world_size=world, local_rank=rank, device=torch.device("cpu"))
        FoldCheckpoints(tmp_path, learner(1), env, {}, {}).resume(lines.append)
        return draws(), lines

    warning = (f"warning: {last} was written by 1 DDP process, this run has 2: the results will differ from "
               "an uninterrupted run (BatchNorm statistics are per process; rank 1 draws a random stream of "
               "its own, derived from the saved ones; run 1 process to match: torchrun --nproc_per_node 1)")
    rank0, lines = resume(0, 2)
    assert rank0 == expected and lines[1:] == [warning]
    rank1, lines = resume(1, 2)
    assert rank1 != expected and resume(1, 2)[0] == rank1 and lines[1:] == [warning]
    assert all(a != b for a, b in zip(rank0, rank1, strict=True))  # Python's, NumPy's and torch's streams all differ

    ckpt = torch.load(last, weights_only=True)
    ckpt["rng"] = [ckpt["rng"][0], rank_rng_state(ckpt["rng"], 1)]  # as 2 processes write it
    torch.save(ckpt, last)
    again, lines = resume(0, 1)
    assert again == expected and lines[1:] == [
        f"warning: {last} was written by 2 DDP processes, this run has 1: the results will differ from an "
        "uninterrupted run (BatchNorm statistics are per process; run 2 processes to match: torchrun "
        "--nproc_per_node 2)"]


def test_a_model_state_that_is_not_finite_is_never_saved_and_the_previous_checkpoint_stays(tmp_path):
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    learn = Learner(net, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0),
                    torch.amp.GradScaler("cuda", enabled=False))
    ckpts = FoldCheckpoints(tmp_path, learn, ENV, {}, {})
    ckpts.save("last.pt", LoopState(epoch=1, step=4))
    before = (tmp_path / "last.pt").read_bytes()
    with torch.no_grad():
        net[1].running_var[2] = float("inf")         # the weights finite, a buffer overflowed
    with pytest.raises(FloatingPointError) as err:
        ckpts.save("last.pt", LoopState(epoch=2, step=8))
    assert str(err.value) == (f"{tmp_path / 'last.pt'}: not saved: the model's '1.running_var' holds 1 NaN or "
                              "infinite value of 4 after step 8 (the first such tensor; the run diverged); "
                              "last.pt is left as it was; a lower optim.lr (or optim.grad_clip) trains it again "
                              "(--force, or another --run-dir)")
    assert (tmp_path / "last.pt").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]    # no temporary file left either


@pytest.mark.parametrize("torch_has_get_total_norm", [True, False])
def test_the_gradient_check_runs_on_every_torch_the_project_allows(monkeypatch, torch_has_get_total_norm):
    """pyproject.toml allows torch 2.4 on, and torch.nn.utils.get_total_norm and clip_grads_with_norm_ came in
    2.6: without them the check of every training step raised an AttributeError. With or without them, the
    gradients' norm is the 2-norm of all of them as one vector, a clipped step is torch's own
    ``clip_grad_norm_``'s (bit for bit), and the check finds the same parameter."""
    if not torch_has_get_total_norm:
        monkeypatch.delattr(torch.nn.utils, "get_total_norm", raising=False)
        monkeypatch.delattr(torch.nn.utils, "clip_grads_with_norm_", raising=False)
    a, twin = learner(0), learner(0)
    for each in (a, twin):
        each.backward(each.model(torch.ones(4, 3)).square().sum())
    grads = torch.cat([p.grad.flatten() for p in a.model.parameters()])
    norm = a.gradient_norm(0.5)
    assert float(norm) == pytest.approx(float(grads.double().norm()), rel=1e-6)
    a.update(0.5, norm)
    torch.nn.utils.clip_grad_norm_(twin.model.parameters(), 0.5)
    twin.optimizer.step()
    for p, q in zip(a.model.parameters(), twin.model.parameters(), strict=True):
        assert torch.equal(p, q)
    a.backward(a.model(torch.ones(4, 3)).square().sum())
    assert a.non_finite_gradient() is None
    a.model.bias.grad[1] = float("-inf")
    assert a.non_finite_gradient() == ("bias", 1, 2)
    a.model.weight.grad[0, 2] = float("nan")
    assert a.non_finite_gradient() == ("weight", 1, 6)    # named in the model's order: weight before bias
    assert not bool(torch.isfinite(a.gradient_norm(None)))


@pytest.mark.parametrize("entry, value, expected", [
    ("epoch", ["cpu"], "'epoch' entry to be a whole number >= 0, got ['cpu']"),
    ("epoch", 1.5, "'epoch' entry to be a whole number >= 0, got 1.5"),
    ("batch", -2, "'batch' entry to be a whole number >= 0, got -2"),
    ("step", True, "'step' entry to be a whole number >= 0, got True"),
    ("epoch", 2 ** 70, "'epoch' entry to be a whole number >= 0 below 2^63, got 1180591620717411303424"),
    ("best_miou", "0.5", "'best_miou' entry to be a number in [-1, 1], got '0.5'"),
    ("best_miou", float("nan"), "'best_miou' entry to be a number in [-1, 1], got nan"),
    ("epoch_sums", [1, 2], "'epoch_sums' entry to be a dict of the epoch's sums, got [1, 2]"),
    ("best_miou", "x" * 100, "'best_miou' entry to be a number in [-1, 1], got '" + "x" * 36 + "... (102 characters)"),
    ("step", "y" * 38, "'step' entry to be a whole number >= 0, got '" + "y" * 38 + "'"),   # 40 with its quotes: whole
    ("epoch", torch.ones(2, 2, dtype=torch.long),
     "'epoch' entry to be a whole number >= 0, got tensor([[1, 1], [1, 1]])"),
    ("best_miou", torch.zeros(3, 3), "'best_miou' entry to be a number in [-1, 1], got tensor([[0., 0., 0.], "
                                     "[0., 0., 0.], [... (50 characters)"),   # a tensor's rows: one line
])
def test_a_damaged_loop_entry_is_one_checkpoint_error_on_resume(tmp_path, entry, value, expected):
    """A last.pt whose loop entries were rewritten (its CRCs intact): an epoch of ['cpu'] resumed into
    "TypeError: '<' not supported between instances of 'list' and 'int'" at the loop's first comparison. A long
    value is cut to 40 characters, marked with its length (before: cut there silently, as if whole); a tensor of
    rows is said on one line (before: its rows on lines of their own)."""
    from pointgeope.engine.checkpoint import CheckpointError

    FoldCheckpoints(tmp_path, learner(0), ENV, {}, {}).save("last.pt", LoopState(epoch=1, step=4, best_miou=0.5))
    ckpt = torch.load(tmp_path / "last.pt", weights_only=True)
    ckpt[entry] = value
    torch.save(ckpt, tmp_path / "last.pt")
    with pytest.raises(CheckpointError) as err:
        FoldCheckpoints(tmp_path, learner(1), ENV, {}, {}).resume(lambda line: None)
    assert str(err.value) == (f"{tmp_path / 'last.pt'}: damaged checkpoint: expected its {expected}; use the run's "
                              "own checkpoint")


SUMS = {"totals": [1.5, 2, 100], "confusion": [[3, 1], [0, 2]], "seconds": 4.0}


@pytest.mark.parametrize("sums", [{"totals": [1.5, 2, 100]}, {**SUMS, "totals": [1, 2]}, {**SUMS, "seconds": "4"},
                                  {**SUMS, "confusion": [[3, 1], [0]]}, {**SUMS, "confusion": [[3, -1], [0, 2]]},
                                  {**SUMS, "confusion": [[1, 0, 0], [0, 1, 0], [0, 0, 1]]}])
def test_damaged_epoch_sums_are_one_checkpoint_error_on_resume(tmp_path, sums):
    """A mid-epoch last.pt whose epoch_sums is a dict without the sums' layout: the resume went on and the
    epoch's meter ended in a KeyError ('confusion') or ValueError (a reshape to 2 x 2) traceback. The sums of a
    network of 2 classes (and {}) are taken as they are."""
    from pointgeope.engine.checkpoint import CheckpointError

    config = {"model": {"num_classes": 2}}
    for good in (SUMS, {}):
        FoldCheckpoints(tmp_path, learner(0), ENV, config, {}).save("last.pt", LoopState(1, 3, 9, 0.5, good))
        assert FoldCheckpoints(tmp_path, learner(1), ENV, config, {}).resume(lambda line: None).epoch_sums == good
    ckpt = torch.load(tmp_path / "last.pt", weights_only=True)
    ckpt["epoch_sums"] = sums
    torch.save(ckpt, tmp_path / "last.pt")
    with pytest.raises(CheckpointError) as err:
        FoldCheckpoints(tmp_path, learner(1), ENV, config, {}).resume(lambda line: None)
    assert str(err.value).startswith(f"{tmp_path / 'last.pt'}: damaged checkpoint: expected its 'epoch_sums' entry "
                                     "to be {'totals': [loss sum, batches, points], 'confusion': 2 x 2 counts, "
                                     "'seconds': s} or {}, got ")


@pytest.mark.parametrize("data, shown", [(["cpu"], "['cpu']"), ({"Area_1": 5}, "{'Area_1': 5}"), ([[1]], "[[1]]"),
                                         (7, "7"), ({"Area_1": 5, "s" * 100: "t"},
                                                    "{'Area_1': 5, '" + "s" * 42 + "... (122 characters)")])
def test_a_damaged_data_record_is_one_checkpoint_error_on_resume(tmp_path, data, shown):
    """A last.pt whose "data" (area -> checksum of the file it trained on) is no such mapping: a resume ended in
    "AttributeError: 'list' object has no attribute 'get'" (or a TypeError) while comparing the files."""
    from pointgeope.engine.checkpoint import CheckpointError
    from pointgeope.engine.config import Config, config_to_dict

    now, config = {"Area_1": "sha256:1"}, config_to_dict(Config())
    FoldCheckpoints(tmp_path, learner(0), ENV, config, {}, data=now).save("last.pt", LoopState(1))
    ckpt = torch.load(tmp_path / "last.pt", weights_only=True)
    ckpt["data"] = data
    torch.save(ckpt, tmp_path / "last.pt")
    with pytest.raises(CheckpointError) as err:
        FoldCheckpoints(tmp_path, learner(1), ENV, config, {}, data=now).resume(lambda line: None)
    assert str(err.value) == (f"{tmp_path / 'last.pt'}: damaged checkpoint: expected its 'data' entry to map each "
                              f"area to the checksum of its file, got {shown}; use the run's own checkpoint")
