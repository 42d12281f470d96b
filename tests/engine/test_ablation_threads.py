"""Tests of pointgeope/engine/ablation.py (``pointgeope ablate``) on a resumed trial's threads: the count its
checkpoint recorded is kept and said, and read without loading the checkpoint's tensors."""
from __future__ import annotations

import os
import sys

import pytest

from pointgeope.engine.ablation import plan
from tests.engine.conftest import trial_config


@pytest.mark.parametrize("jobs, extra", [("1", ()), ("2", ()), ("1", ("train.threads=1",))])
def test_a_resumed_trial_keeps_its_checkpoints_threads_and_ablate_says_so(two_folds, tiny_run, unpinned_config,
                                                                          tmp_path, capsys, jobs, extra):
    """A rerun with another --jobs (another train.threads share, or torch's default) resumed an interrupted
    trial with another thread count: its results differ from an uninterrupted run, and only the trial's
    log.txt said so. Now the trial keeps its last.pt's count, unless train.threads is given (then a warning),
    and ablate's own output says which."""
    import torch

    fold = tmp_path / "rpe" / "seed_0" / "area_1"
    fold.mkdir(parents=True)
    ckpt = torch.load(tiny_run / "last.pt", weights_only=True)
    ckpt["threads"] = 3                                    # a count no setting here gives
    ckpt["config"] = trial_config(unpinned_config, two_folds)   # the trial's settings: train resumes it
    torch.save(ckpt, fold / "last.pt")
    trials, common = plan(unpinned_config, ["rpe", "none"], [0], 1, tmp_path, [f"data.root={two_folds}", *extra],
                          int(jobs))
    out = capsys.readouterr().out
    rpe, none = trials
    threads = [o for o in rpe.overrides(common) if o.startswith("train.threads=")]
    if extra:                                                # the user's choice stands, with a warning
        assert rpe.threads is None and threads == ["train.threads=1"]
        assert (f"warning: rpe seed 0 resumes from {fold / 'last.pt'}, written with 3 torch CPU threads, with "
                "train.threads=1: its results will differ from an uninterrupted run (train.threads=3 matches)") in out
    else:
        assert rpe.threads == 3 and threads == ["train.threads=3"] and rpe.config["train"]["threads"] == 3
        assert (f"rpe seed 0: resumes with train.threads=3, the thread count its {fold / 'last.pt'} was written "
                "with") in out
    assert none.threads is None and none.overrides(common)[:len(common)] == common   # (nothing to resume)


PEAK_AFTER_PLAN = """
import sys
from pathlib import Path
from pointgeope.engine.ablation import plan

def kib(key):           # /proc/self/status: VmHWM, the peak resident memory, or VmRSS, the resident memory now
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(key + ":"))

config, run, root = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
plan(config, ["rpe"], [0], 1, run.with_name("warm"), [f"data.root={root}"], 1)   # every import, no last.pt read
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")        # the peak starts again from the resident memory now
start = kib("VmRSS")
trials, _ = plan(config, ["rpe"], [0], 1, run, [f"data.root={root}"], 1)
print(trials[0].threads, (kib("VmHWM") - start) / 1024)
"""


@pytest.mark.skipif(not os.access("/proc/self/clear_refs", os.W_OK), reason="needs Linux's resettable peak memory")
def test_a_resumed_trials_thread_count_is_read_without_its_tensors(two_folds, tiny_run, unpinned_config, tmp_path):
    """ablate loaded each unfinished trial's whole last.pt (the model's and optimizer's tensors: about 90 MiB at
    the published size) to read one int; it maps the tensors from the file instead: the count of a last.pt with
    64 MiB more tensors is read with the process's peak memory grown by far less than 64 MiB."""
    import subprocess

    import torch

    fold = tmp_path / "abl" / "rpe" / "seed_0" / "area_1"
    fold.mkdir(parents=True)
    ckpt = torch.load(tiny_run / "last.pt", weights_only=True)
    ckpt["threads"], ckpt["model"]["big"] = 3, torch.ones(16 * 2**20)             # 64 MiB of float32
    ckpt["config"] = trial_config(unpinned_config, two_folds)
    torch.save(ckpt, fold / "last.pt")
    out = subprocess.run([sys.executable, "-c", PEAK_AFTER_PLAN, str(unpinned_config), str(tmp_path / "abl"),
                          str(two_folds)], capture_output=True, text=True, check=True).stdout
    threads, grown_mib = out.splitlines()[-1].split()
    assert int(threads) == 3 and float(grown_mib) < 16, out
