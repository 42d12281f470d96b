"""pointgeope/engine/epoch_meter.py: an epoch's sums carried over a resume give the uninterrupted epoch's scores."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from pointgeope.engine.epoch_meter import EpochMeter
from pointgeope.metrics import scores

C = 4


def batches(n: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor, float]]:
    """``n`` batches of ``(logits (N, C), labels (N,), loss)``, labels -1 (ignored) included."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        points = 20 + 7 * i
        out.append((torch.randn(points, C, generator=g), torch.randint(-1, C, (points,), generator=g),
                    float(torch.rand(1, generator=g)) * 3))
    return out


def test_carried_sums_continue_the_epoch_exactly():
    """An epoch resumed after batch 3 of 7 logged the scores of batches 4-7 only; with the sums of the
    first three carried (as last.pt carries them) its summary is the uninterrupted one's, value for value."""
    data = batches(7)
    straight = EpochMeter(C, -1, torch.device("cpu"), class_mean="all")
    for b in data:
        straight.add(*b)
    first = EpochMeter(C, -1, torch.device("cpu"), class_mean="all")
    for b in data[:3]:
        first.add(*b)
    carried = first.sums()
    resumed = EpochMeter(C, -1, torch.device("cpu"), carried=carried, class_mean="all")
    for b in data[3:]:
        resumed.add(*b)
    a, b = straight.summary(), resumed.summary()
    assert a[0] == b[0] and a[1] == b[1]       # scores and mean loss: equal, not close
    assert b[2] >= carried["seconds"]           # the time before the stop counts

    # the same scores from the definition: the counts of every non-ignored point, the mean of the losses
    assert a[0] == scores(confusion_of(data), "all")   # the meter's default rule: eval.class_mean's
    assert a[1] == pytest.approx(np.mean([loss for _, _, loss in data]), rel=1e-12)
    assert carried["confusion"] == confusion_of(data[:3]).tolist()
    assert carried["totals"] == [sum(x[2] for x in data[:3]), 3.0, float(sum(len(x[1]) for x in data[:3]))]


def confusion_of(data) -> np.ndarray:
    confusion = np.zeros((C, C), dtype=np.int64)
    for logits, labels, _ in data:
        keep = labels >= 0
        np.add.at(confusion, (labels[keep].numpy(), logits.argmax(1)[keep].numpy()), 1)
    return confusion


def test_sums_leave_the_meter_counting_and_an_empty_carry_is_a_fresh_start():
    data = batches(4, seed=1)
    meter = EpochMeter(C, -1, torch.device("cpu"), carried={}, class_mean="all")
    fresh = EpochMeter(C, -1, torch.device("cpu"), class_mean="all")
    for b in data[:2]:
        meter.add(*b)
        fresh.add(*b)
    meter.sums()                                # a mid-epoch checkpoint: the meter goes on as it was
    for b in data[2:]:
        meter.add(*b)
        fresh.add(*b)
    assert meter.summary()[:2] == fresh.summary()[:2]
    assert meter.sums()["confusion"] == confusion_of(data).tolist()


def _ranks_worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    """Rank r trains batches r, r + 2, ... of 8; a stop after each rank's first 2 batches: the sums then
    (collective), a fresh meter per rank carrying them on rank 0 only, the remaining batches, the summary."""
    import pickle

    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        mine = batches(8, seed=3)[rank::world]
        first = EpochMeter(C, -1, torch.device("cpu"), class_mean="all")
        for b in mine[:2]:
            first.add(*b)
        carried = first.sums()
        resumed = EpochMeter(C, -1, torch.device("cpu"), carried=carried if rank == 0 else None,
                                 class_mean="all")
        for b in mine[2:]:
            resumed.add(*b)
        with open(f"{out_dir}/rank{rank}.pkl", "wb") as f:
            pickle.dump((carried["confusion"], resumed.summary()[:2]), f)
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork (POSIX)")
def test_ranks_carry_the_sums_of_all_ranks_once(tmp_path):
    """Under DDP each rank counts its own batches: the carried sums are those of every rank (summed when
    saved), carried by rank 0 alone, so the resumed epoch's summary is the one-process summary of all 8."""
    import pickle

    import torch.multiprocessing as mp

    mp.start_processes(_ranks_worker, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True,
                       start_method="fork")
    data = batches(8, seed=3)
    single = EpochMeter(C, -1, torch.device("cpu"), class_mean="all")
    for b in data:
        single.add(*b)
    expected = single.summary()[:2]
    for rank in range(2):
        with open(tmp_path / f"rank{rank}.pkl", "rb") as f:
            carried, summary = pickle.load(f)
        assert carried == confusion_of(data[:4]).tolist()    # batches 0-3: each rank's first two
        assert summary[0] == expected[0] and summary[1] == pytest.approx(expected[1], rel=1e-12)


def test_the_epoch_scores_follow_the_runs_class_mean_rule(two_folds, tmp_path, monkeypatch):
    """The training log's mIoU / mAcc used ``metrics.scores``' own default rule (``present``) whatever
    ``eval.class_mean`` said (default ``all``, the authors'); they follow the config now, as evaluation does.
    Batches where class 3 is never labelled nor predicted: ``all`` counts it 0, ``present`` leaves it out."""
    g = torch.Generator().manual_seed(2)
    data = []
    for points in (30, 41):
        logits = torch.randn(points, C, generator=g)
        logits[:, 3] = -1e9                                    # never predicted
        data.append((logits, torch.randint(-1, 3, (points,), generator=g), 1.0))
    confusion = confusion_of(data)
    for rule in ("all", "present"):
        meter = EpochMeter(C, -1, torch.device("cpu"), class_mean=rule)
        for b in data:
            meter.add(*b)
        got, expected = meter.summary()[0], scores(confusion, rule)
        assert [got[k] for k in ("oa", "macc", "miou")] == [expected[k] for k in ("oa", "macc", "miou")]
        np.testing.assert_array_equal(got["iou"], expected["iou"])            # class 3: NaN in both
    assert scores(confusion, "all")["miou"] == pytest.approx(scores(confusion, "present")["miou"] * 3 / 4, rel=1e-12)

    from pointgeope.engine import train as train_module
    from tests.engine.conftest import train_fold

    rules = []

    class Recording(EpochMeter):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            rules.append(self.class_mean)

    monkeypatch.setattr(train_module, "EpochMeter", Recording)
    assert train_fold(two_folds, tmp_path / "run", "train.epochs=1", "eval.class_mean=present") == 0
    assert rules == ["present"]


def test_a_training_step_and_its_meter_read_the_loss_only():
    """A step with its hierarchy given (beside the step on CUDA, or from the loader) and the epoch meter read
    one value on the host, the loss, and as train_epoch runs the step, whose check before the update reads
    whether the loss and the gradients' norm are finite, that flag in the same read: every other read of a tensor's
    values (``tolist``, ``bool``, a boolean mask, ``bincount``) waits on a GPU for the queued backward and optimiser
    step before the next forward can be queued. The network read the device offsets, and the meter's
    ``ConfusionMeter.update`` checked, masked and bincounted on the host: 6 reads a step. The counts stay the
    definition's (ignored labels 255 left out)."""
    from torch.overrides import TorchFunctionMode

    from pointgeope.engine.step import train_step
    from tests.engine.test_graphs import _batch, _pair

    t = torch.Tensor
    host_reads = {t.item, t.tolist, t.__bool__, t.__int__, t.__float__, t.__index__, t.numpy, t.nonzero,
                  torch.nonzero, torch.bincount, t.bincount, torch.unique, t.unique, torch.masked_select}

    class Reads(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            index = args[1] if func is t.__getitem__ else None
            masks = index if isinstance(index, tuple) else (index,)
            if func in host_reads or any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in masks):
                self.seen.append(getattr(func, "__name__", repr(func)))
            return func(*args, **(kwargs or {}))

    cfg, model, learner, _, _ = _pair("geope")
    batch = _batch(model, [300, 200], 0)
    meter = EpochMeter(13, 255, torch.device("cpu"), class_mean="all")
    with Reads() as reads:
        logits, loss = train_step(cfg, learner, model, batch, torch.device("cpu"))
        meter.add(logits, batch.y, loss)
    assert reads.seen == ["item"]
    keep = batch.y != 255
    want = np.zeros((13, 13), dtype=np.int64)
    np.add.at(want, (batch.y[keep].numpy(), logits.argmax(1)[keep].numpy()), 1)
    np.testing.assert_array_equal(meter.confusion.confusion, want)
    from types import SimpleNamespace

    from pointgeope.engine.state import FoldCheckpoints
    fold = SimpleNamespace(learner=learner, check_folder=lambda state: None,   # the folder's check: a stat
                           env=SimpleNamespace(device=torch.device("cpu")))
    check = FoldCheckpoints.before_update(fold, None, batch, 0)   # the loop's check, as train_epoch passes it
    with Reads() as reads:
        logits, loss = train_step(cfg, learner, model, batch, torch.device("cpu"), check)
        meter.add(logits, batch.y, loss)
    assert reads.seen == ["tolist"]       # the loss and the check's flag (a finite gradient norm), together
