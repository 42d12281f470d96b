"""The demos' scores do not depend on the process's torch thread count (``make demo``, PTv1 or PTv3, reproduces
its published table)."""
from __future__ import annotations

import torch

from tests.engine.conftest import train_fold
from tests.engine.test_ptv3_engine import train3

# The PTv1 demo's own network and sample size (only the data, epochs and loop shortened), so that the kernels
# are large enough to split
PTV1 = ["train.epochs=1", "data.grid_size=0.04", "data.voxel_max=6000", "model.planes=[16, 32, 64, 128]",
        "model.blocks=[1, 1, 1, 1]", "model.strides=[1, 4, 4, 4]", "model.neighbours=[8, 12, 12, 12]",
        "model.decoder_blocks=[1, 1, 1, 1]", "optim.lr=0.02"]


def weights_under_two_and_one_thread(train, tmp_path) -> list[dict]:
    """``train(run)`` (a fold of a demo config) with the process at 2, then at 1 torch thread (as
    ``OMP_NUM_THREADS``, or the machine's core count, sets it); each fold's last weights. Each fold's log names
    the count the config chose, whatever the process had."""
    before = torch.get_num_threads()
    weights = []
    try:
        for threads in (2, 1):
            torch.set_num_threads(threads)
            run = tmp_path / f"threads_{threads}"
            assert train(run) == 0
            weights.append(torch.load(run / "area_1" / "last.pt", map_location="cpu", weights_only=True)["model"])
            log = (run / "area_1" / "log.txt").read_text()    # the count the scores depend on is in the fold's log
            assert "device cpu, 1 process of 1 torch CPU thread" in log.splitlines()[0], log[:300]
    finally:
        torch.set_num_threads(before)
    return weights


def test_the_demo_config_trains_the_same_weights_whatever_the_torch_thread_count(two_folds, tmp_path):
    """configs/demo.yaml fixes torch's CPU threads (``train.threads``): torch's CPU kernels split their sums
    by thread, so a fold trained with 2 threads (a 2-core machine's default) and one trained with 1
    (``OMP_NUM_THREADS=1`` in the environment) took other weights from the first step on, and the README's
    demo table moved by a few tenths with the machine or the shell it ran in."""
    a, b = weights_under_two_and_one_thread(lambda run: train_fold(two_folds, run, *PTV1), tmp_path)
    differing = [k for k in a if not torch.equal(a[k], b[k])]
    assert not differing, f"{len(differing)} of {len(a)} tensors differ, e.g. {differing[:3]}"


def test_the_ptv3_demo_config_trains_the_same_weights_whatever_the_torch_thread_count(two_folds, tmp_path):
    """configs/demo_ptv3.yaml fixes torch's CPU threads as configs/demo.yaml does: without it a tiny PTv3 fold
    of two steps trained with 2 threads and one with 1 differed in 63 of 83 tensors, so ``make demo
    BACKBONE=ptv3`` gave the scores docs/ptv3.md states (trained at one thread) only where torch chose one."""
    a, b = weights_under_two_and_one_thread(lambda run: train3(two_folds, run), tmp_path)
    differing = [k for k in a if not torch.equal(a[k], b[k])]
    assert not differing, f"{len(differing)} of {len(a)} tensors differ, e.g. {differing[:3]}"
