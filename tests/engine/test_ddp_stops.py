"""A DDP run (2 train.py processes, gloo, CPU) where one rank is stopped: the stopped rank first ends the
training step it is in, then stops (one line, 143); its peer says in one line that a process of the run
ended and that the same command resumes it (exit 2), instead of gloo's traceback. Nothing is lost.

Each rank is its own process running train.py: forked from one fresh interpreter that imported what train.py
imports and ran nothing else (no torch op, no thread started; conftest's ``ForkedTrainPy``), so the two ranks pay
the ~7 CPU s of imports once; each then exits as a process exits, with its own code."""
from __future__ import annotations

import pytest
import torch

from pointgeope.engine.checkpoint import load_checkpoint
from pointgeope.engine.distributed import DistEnv, PeerEnded, peer_end_said
from tests.engine.conftest import DEMO_CONFIG, TINY, ForkedTrainPy, ddp_ranks, last_line_only

# Rank 1 sends itself SIGTERM from inside the backward of a step (the 1st of epoch 2: 2 a rank per epoch),
# from a hook on a gradient, where Python runs the handler; the step, once done, writes the marker.
RANK = """
import os, runpy, signal, sys
from pathlib import Path
from pointgeope.engine import state

marker, stop_at = Path(sys.argv.pop()), int(sys.argv.pop())
backward, update, steps = state.Learner.backward, state.Learner.update, []

def step_backward(self, loss):
    steps.append(len(steps) + 1)
    if steps[-1] == stop_at:
        first = next(p for p in self.model.parameters() if p.requires_grad)
        first.register_hook(lambda grad: os.kill(os.getpid(), signal.SIGTERM))  # inside the backward
    backward(self, loss)

def step_update(self, grad_clip, norm=None):
    update(self, grad_clip, norm)
    if steps[-1] == stop_at:
        marker.write_text("the step ended")

state.Learner.backward, state.Learner.update = step_backward, step_update
runpy.run_path("train.py", run_name="__main__")
"""


def _ranks(code: str, argvs: list[list[str]], folder, seconds: float) -> tuple[list[int], list[str], list[bool]]:
    """Two DDP ranks of train.py (gloo, one thread each) forked from one interpreter (``ForkedTrainPy``), rank r
    running ``code`` with ``argvs[r]``: their exit codes, stderr and whether each still ran after ``seconds``."""
    return ForkedTrainPy(argvs, folder, code=code, envs=ddp_ranks(), seconds=seconds).ended()


@pytest.mark.slow
def test_a_stopped_rank_ends_its_step_and_its_peer_says_it_in_one_line(two_folds, tmp_path):
    run = tmp_path / "run"
    argv = ["--config", str(DEMO_CONFIG), "--test-area", "1", "--data-root", str(two_folds), "--run-dir", str(run),
            *TINY, "data.loop=1", "train.epochs=2", "train.threads=1"]
    codes, errs, hung = _ranks(RANK, [[*argv, "0", str(tmp_path / "never")], [*argv, "3", str(tmp_path / "stopped")]],
                               tmp_path, 120)
    assert not any(hung), f"a rank still runs: hung {hung}; {[err[-3000:] for err in errs]}"
    assert codes[1] == 143, errs[1][-2000:]
    last_line_only(errs[1], "train.py: terminated")
    assert (tmp_path / "stopped").read_text() == "the step ended"  # the stop waited for the step's end
    assert codes[0] == 2, errs[0][-3000:]
    line = errs[0].splitlines()[-1]
    assert line.startswith("train.py: error: rank 0 of 2: another process of this run ended (")
    assert line.endswith("), so this one stops too; the same command resumes the run from the last checkpoint")
    last_line_only(errs[0], line)
    fold = run / "area_1"
    # rank 0's log.txt says why the fold stopped (it ended with the last epoch line: the backend's error was
    # turned into PeerEnded only outside the fold, past its stop line)
    assert (fold / "log.txt").read_text().splitlines()[-1].endswith(" stopped: " + line.split(": error: ", 1)[1])
    assert sorted(p.name for p in fold.iterdir() if p.name.startswith(".")) == []  # no lock, no temporary file
    assert load_checkpoint(fold / "last.pt")["epoch"] == 1  # epoch 1's checkpoint, intact: the run resumes there


@pytest.mark.parametrize("said, named", [
    ("Connection closed by peer", "Connection closed by peer"),
    ("Connection reset by peer", "Connection reset by peer"),
    ("write: Broken pipe", "Broken pipe"),
    ("NCCL error: remote process exited or there was a network error", "remote process exited")])
def test_a_peers_end_is_named_under_ddp_and_other_errors_go_through(said, named):
    """gloo's (and NCCL's) words for a collective whose other end has gone become PeerEnded's line under DDP;
    in a single process, or for any other error, the error goes through as it is."""
    ddp, alone = (DistEnv(rank=r, world_size=w, local_rank=r, device=torch.device("cpu")) for r, w in ((1, 4), (0, 1)))
    with pytest.raises(PeerEnded) as ended, peer_end_said(ddp):
        raise RuntimeError(f"[pair.cc:553] {said} [127.0.0.1]:11989. This is typically caused by ...")
    assert str(ended.value) == (f"rank 1 of 4: another process of this run ended ({named}), so this one stops too; "
                                "the same command resumes the run from the last checkpoint")
    for env, err in ((alone, RuntimeError(said)), (ddp, RuntimeError("mat1 and mat2 shapes cannot be multiplied"))):
        with pytest.raises(RuntimeError) as through, peer_end_said(env):
            raise err
        assert through.value is err


# Rank 0 alone meets a stop that only it can see: the fold folder deleted (rm -rf) in the backward of the
# 2nd step, or the model state it would save not finite at the epoch's end (a running variance overflowed).
REFUSED = """
import os, runpy, shutil, sys
import torch
from pointgeope.engine import state

what, fold = sys.argv.pop(), sys.argv.pop()
rank0, backward, save, steps = os.environ["RANK"] == "0", state.Learner.backward, state.FoldCheckpoints.save, []

def step_backward(self, loss):
    steps.append(1)
    if rank0 and what == "deleted" and len(steps) == 2:
        shutil.rmtree(fold)
    backward(self, loss)

def save_diverged(self, name, loop):
    if rank0 and what == "diverged":
        with torch.no_grad():
            next(b for n, b in self.learner.model.named_buffers() if n.endswith("running_var"))[0] = float("inf")
    save(self, name, loop)

state.Learner.backward, state.FoldCheckpoints.save = step_backward, save_diverged
runpy.run_path("train.py", run_name="__main__")
"""


@pytest.fixture(scope="module")
def refused_runs(two_folds, tmp_path_factory) -> dict:
    """The two runs of ``REFUSED`` ("deleted", "diverged"; a DDP pair each, on its own port), their four ranks
    forked from one interpreter at once: ``{what: (exit codes, stderr, fold folder, hung)}``."""
    base, argvs, envs, folds = tmp_path_factory.mktemp("refused_runs"), [], [], {}
    for what in ("deleted", "diverged"):
        folds[what] = fold = base / what / "area_1"
        argv = ["--config", str(DEMO_CONFIG), "--test-area", "1", "--data-root", str(two_folds), "--run-dir",
                str(fold.parent), *TINY, "data.loop=1", "train.epochs=1", "train.val_every=0", "train.threads=1",
                str(fold), what]
        argvs += [argv, argv]
        envs += ddp_ranks()
    codes, errs, hung = ForkedTrainPy(argvs, base, code=REFUSED, envs=envs, seconds=180).ended()
    return {what: (codes[2 * i:2 * i + 2], errs[2 * i:2 * i + 2], folds[what], hung[2 * i:2 * i + 2])
            for i, what in enumerate(folds)}


@pytest.mark.slow
@pytest.mark.parametrize("what, code, said", [
    ("deleted", 2, "{fold}: the fold folder, or its lock file .lock, was deleted while this training wrote into it "
                   "(after step 1); stopped, since another process could now take the folder; the same command "
                   "trains the fold again (from its last.pt, if one is left)"),
    ("diverged", 1, "{fold}/best.pt: not saved: the model's '{buffer}' holds 1 NaN or infinite value of {size} "
                    "after step 2 (the first such tensor; the run diverged); best.pt is left as it was; a lower "
                    "optim.lr (or optim.grad_clip) trains it again (--force, or another --run-dir)")])
def test_a_stop_only_rank_0_sees_ends_every_rank_with_its_line(refused_runs, what, code, said):
    """Rank 0 alone checks the fold folder and the model state it saves; its peer ended on the peer's line
    ("another process of this run ended ... the same command resumes the run"), not the reason, or waited in
    the next collective. Now every rank ends with rank 0's line and exit code, and none hangs."""
    codes, errs, fold, hung = refused_runs[what]
    assert not any(hung), f"a rank still runs: hung {hung}; {[err[-3000:] for err in errs]}"
    lines = [err.splitlines()[-1] if err.strip() else "" for err in errs]
    assert codes == [code, code], errs
    assert lines[0] == lines[1], lines
    if what == "deleted":
        assert lines[0].endswith(said.format(fold=fold)), lines[0]
        assert not fold.exists()
    else:
        assert " not saved: the model's '" in lines[0] and lines[0].endswith(
            "after step 2 (the first such tensor; the run diverged); best.pt is left as it was; a lower optim.lr "
            "(or optim.grad_clip) trains it again (--force, or another --run-dir)"), lines[0]
        assert not (fold / "best.pt").exists() and not (fold / "last.pt").exists()
