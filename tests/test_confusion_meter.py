"""Tests of pointgeope.metrics.ConfusionMeter (the streaming confusion matrix of training and the test): its
counts against numpy's, its refusals, and its all-reduce over ranks; the hand example is test_metrics.py's."""
from __future__ import annotations

import os
import re

import numpy as np
import pytest
import torch

from pointgeope.metrics import ConfusionMeter, confusion_matrix, scores
from tests.conftest import cuda_devices
from tests.test_metrics import HAND, _hand_labels


@pytest.mark.parametrize("device", cuda_devices())
def test_meter_equals_numpy_function(device):
    gen = torch.Generator().manual_seed(0)
    meter = ConfusionMeter(num_classes=13)
    all_pred, all_target = [], []
    for n in (50, 0, 333, 7):
        logits = torch.randn(n, 13, generator=gen)
        target = torch.randint(0, 13, (n,), generator=gen)
        target[torch.rand(n, generator=gen) < 0.1] = 255
        meter.update(logits.to(device), target.to(device))
        all_pred.append(logits.argmax(1).numpy())
        all_target.append(target.numpy())
    expected = confusion_matrix(np.concatenate(all_pred), np.concatenate(all_target))
    np.testing.assert_array_equal(meter.confusion, expected)
    assert meter._counts.device.type == torch.device(device).type
    got, want = meter.scores(), scores(expected)
    for key in ("oa", "macc", "miou", "iou", "acc"):
        np.testing.assert_allclose(got[key], want[key], rtol=0, atol=1e-12)


def test_meter_with_labels_and_errors():
    meter = ConfusionMeter(num_classes=3)
    pred, target = _hand_labels()
    meter.update(torch.from_numpy(pred), torch.from_numpy(target).to(torch.uint8))
    np.testing.assert_array_equal(meter.confusion, HAND)
    assert "points=10" in repr(meter)
    with pytest.raises(ValueError, match=r"out of range: target \[\], pred \[4\]"):
        meter.update(torch.tensor([4]), torch.tensor([0]))
    with pytest.raises(ValueError, match=r"logits of shape \(N, 3\)"):
        meter.update(torch.zeros(2, 5), torch.zeros(2, dtype=torch.long))
    meter.reset()
    np.testing.assert_array_equal(meter.confusion, np.zeros((3, 3)))


@pytest.mark.parametrize("ignore_index", [255, -100, 0, None])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_count_equals_the_checked_update_on_what_a_training_loop_gives(ignore_index, dtype):
    """``count`` (no host read) and ``update`` (checked) give the same matrix on labels in range and
    ``ignore_index`` ones, low-precision logits with ties, label dtypes and an empty batch."""
    gen = torch.Generator().manual_seed(3)
    counted, updated = ConfusionMeter(5, ignore_index), ConfusionMeter(5, ignore_index)
    for n, label_dtype in ((40, torch.long), (0, torch.long), (33, torch.int32), (64, torch.uint8)):
        logits = torch.randn(n, 5, generator=gen).to(dtype)
        logits[::4] = 0                                           # ties: the first class, in both
        target = torch.randint(0, 5, (n,), generator=gen)
        if ignore_index is not None and (label_dtype != torch.uint8 or 0 <= ignore_index < 256):
            target[torch.rand(n, generator=gen) < 0.3] = ignore_index
        counted.count(logits, target.to(label_dtype))
        updated.update(logits, target.to(label_dtype))
    np.testing.assert_array_equal(counted.confusion, updated.confusion)
    assert counted.confusion.sum() > 0


def test_update_refuses_what_a_range_test_of_the_cells_alone_would_miss():
    """update tests the ranges of pred, target and cell = target * C + pred over the whole batch, and only
    where they fail the exact test of the kept points: a label C (cell C*C), a label -1 with pred C-1 (cell
    -1) and a label whose int64 product wraps into 0..C*C-1 are each refused; an ignored point's prediction
    is not checked (as before) and the point is not counted."""
    c = 13
    wraps = (5 * pow(c, -1, 2**64)) % 2**64                       # wraps * 13 = 5 (mod 2^64)
    wraps -= 2**64 * (wraps >= 2**63)                             # as an int64
    assert (torch.tensor([wraps]) * c).item() == 5
    for target, pred in (([c], [0]), ([-1], [c - 1]), ([wraps], [0]), ([2, c], [1, 0])):
        meter = ConfusionMeter(c, 255)
        with pytest.raises(ValueError, match=rf"out of range: target \[{target[-1]}\], pred \[\]"):
            meter.update(torch.tensor(pred), torch.tensor(target))
    meter = ConfusionMeter(3, 255)
    meter.update(torch.tensor([0, 7, -2, 2]), torch.tensor([0, 255, 255, 1]))
    want = np.zeros((3, 3), dtype=np.int64)
    want[0, 0] = want[1, 2] = 1
    np.testing.assert_array_equal(meter.confusion, want)
    meter.update(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long))   # empty: nothing
    np.testing.assert_array_equal(meter.confusion, want)


def test_update_of_a_cpu_batch_makes_one_label_sized_int64_tensor():
    """On the CPU, each (N,) tensor an op makes costs more than its arithmetic (a fresh allocation's pages), and
    update made four int64 ones a batch (masks aside), twice bincount's time: now one, the cells, the rest done
    in place, the counts by a C*C bincount. Counted with a TorchFunctionMode over the ops update calls."""
    from torch.overrides import TorchFunctionMode

    n = 1000

    class Made(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.made = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            given = [a for a in args if isinstance(a, torch.Tensor)]
            if (isinstance(out, torch.Tensor) and out.dtype == torch.int64 and out.numel() == n
                    and not any(out is a for a in given)):
                self.made.append(getattr(func, "__name__", repr(func)))
            return out

    pred, target = torch.randint(0, 13, (n,)), torch.randint(0, 13, (n,))
    target[::7] = 255
    meter = ConfusionMeter(13, 255)
    with Made() as made:
        meter.update(pred, target)
    assert len(made.made) == 1, made.made
    keep = (target != 255).numpy()
    want = np.zeros((13, 13), dtype=np.int64)
    np.add.at(want, (target.numpy()[keep], pred.numpy()[keep]), 1)
    np.testing.assert_array_equal(meter.confusion, want)


def test_count_leaves_out_labels_out_of_range_and_refuses_other_shapes():
    meter = ConfusionMeter(num_classes=3, ignore_index=255)
    logits = torch.eye(3)[[0, 1, 2, 2, 1]]
    meter.count(logits, torch.tensor([0, 3, -1, 255, 1]))
    want = np.zeros((3, 3), dtype=np.int64)
    want[0, 0] = want[1, 1] = 1
    np.testing.assert_array_equal(meter.confusion, want)
    # logits of 5 classes in a 3-class meter: the arg-max 4 of label 0 landed in cell (1, 1)
    with pytest.raises(ValueError, match=r"logits of shape \(N, 3\) and target \(N,\), got \(1, 5\)"):
        meter.count(torch.eye(5)[[4]], torch.tensor([0]))
    with pytest.raises(ValueError, match=r"got \(2, 3\) and \(3,\)"):
        meter.count(torch.zeros(2, 3), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match=re.escape("integer labels, got target torch.float32")):
        meter.count(torch.zeros(2, 3), torch.tensor([1.7, 0.0]))
    np.testing.assert_array_equal(meter.confusion, want)


@pytest.mark.parametrize("pred, target, said", [
    (torch.tensor([0, 1, 2]), torch.tensor([0, 1, 2]) + 0j, "expected integer labels, got target torch.complex64"),
    (torch.eye(3) + 0j, torch.tensor([0, 1, 2]), "expected real logits, got torch.complex64"),
    (torch.tensor([0, 1, 2]) + 0j, torch.tensor([0, 1, 2]), "expected integer labels, got pred torch.complex64"),
    (torch.eye(3)[:2], torch.tensor([[0, 1]]), r"and target \(N,\), got \(2, 3\) and \(1, 2\)"),
    (torch.eye(5)[:2], torch.tensor([0, 1]), r"expected logits of shape \(N, 3\) and target \(N,\), got \(2, 5\)")])
def test_update_and_count_refuse_alike_what_is_not_a_batch_of_labels(pred, target, said):
    """One owner of the checks: ``update`` counted complex labels (their real part, with torch's warning only)
    where ``count`` refused them, and each said its own words of a shape. Both refuse now, in the same words
    for logits, and count nothing."""
    for method in ("update", "count") if pred.dim() == 2 else ("update",):
        meter = ConfusionMeter(num_classes=3)
        with pytest.raises(ValueError, match=said):
            getattr(meter, method)(pred, target)
        np.testing.assert_array_equal(meter.confusion, np.zeros((3, 3)))


def test_update_checks_the_points_it_counts_only():
    """A prediction out of range at an ignored point is not counted, so not refused; a kept one is."""
    meter = ConfusionMeter(num_classes=3, ignore_index=255)
    meter.update(torch.tensor([0, 7, 2]), torch.tensor([0, 255, 2]))
    np.testing.assert_array_equal(meter.confusion, np.diag([1, 0, 1]))
    with pytest.raises(ValueError, match=r"out of range: target \[\], pred \[7\]"):
        meter.update(torch.tensor([7]), torch.tensor([1]))


def test_meter_all_reduce_without_distributed_is_a_no_op():
    meter = ConfusionMeter(num_classes=3)
    pred, target = _hand_labels()
    meter.update(torch.from_numpy(pred), torch.from_numpy(target))
    meter.all_reduce()
    np.testing.assert_array_equal(meter.confusion, HAND)


def _ddp_worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        meter = ConfusionMeter(num_classes=3)
        if rank == 0:  # rank 0 sees the hand example, rank 1 sees nothing (zeros path)
            pred, target = _hand_labels()
            meter.update(torch.from_numpy(pred), torch.from_numpy(target))
        meter.all_reduce()
        np.save(f"{out_dir}/rank{rank}.npy", meter.confusion)
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork (POSIX)")
def test_meter_all_reduce_sums_over_ranks(tmp_path):
    import torch.multiprocessing as mp

    # fork: the children inherit the imported torch instead of importing it again (seconds per child)
    mp.start_processes(_ddp_worker, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True,
                       start_method="fork")
    for rank in range(2):
        np.testing.assert_array_equal(np.load(tmp_path / f"rank{rank}.npy"), HAND)


@pytest.mark.parametrize(("num_classes", "error"), [(2.7, TypeError), ("3", TypeError), (True, ValueError),
                                                    (0, ValueError)])
def test_confusion_meter_refuses_a_num_classes_that_is_not_a_count(num_classes, error):
    with pytest.raises(error, match=rf"expected num_classes an int >= 1, got {re.escape(repr(num_classes))}"):
        ConfusionMeter(num_classes=num_classes)
    assert ConfusionMeter(num_classes=np.int64(3)).confusion.shape == (3, 3)


@pytest.mark.parametrize("num_classes", [13.0, np.float64(13), np.float32(13)])
def test_confusion_meter_takes_a_whole_float_count(num_classes):
    """A whole float is a valid count (``int(13.0)`` took it before 2.7 was refused)."""
    meter = ConfusionMeter(num_classes=num_classes)
    assert type(meter.num_classes) is int and meter.num_classes == 13
    meter.update(torch.tensor([0, 12, 12]), torch.tensor([0, 12, 3]))
    assert meter.confusion.shape == (13, 13) and meter.confusion.sum() == 3 and meter.confusion[3, 12] == 1


def test_a_prediction_equal_to_the_ignore_label_is_refused_not_dropped():
    """Only the ground truth's ignore label skips a point: a prediction of 255 (a bad prediction file, a
    network of more classes) is out of 0..C-1 and refused, never silently left out of the matrix."""
    with pytest.raises(ValueError, match=r"pred labels in 0\.\.2, got 1 values out of range: 255"):
        confusion_matrix([0, 255, 1], [0, 1, 1], 3)


def test_more_than_ten_labels_out_of_range_end_in_a_mark():
    """The meter names the first ten distinct labels out of range and counts the rest, as ``confusion_matrix``
    does (before: the first ten alone, as if they were all)."""
    meter = ConfusionMeter(num_classes=3)
    with pytest.raises(ValueError) as err:
        meter.update(torch.arange(3, 15), torch.tensor([0] * 11 + [20]))
    assert str(err.value) == ("expected labels in 0..2; out of range: target [20], pred [3, 4, 5, 6, 7, 8, 9, 10, 11, "
                              "12, and 2 more]")
