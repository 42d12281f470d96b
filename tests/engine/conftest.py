"""Fixtures of the engine tests: tiny synthetic S3DIS (synth --size tiny + prepare), once per session."""
from __future__ import annotations

import argparse
import contextlib
import json
import os
from pathlib import Path

import pytest

from tests.engine.trial_server import PRELOAD

REPO = Path(__file__).resolve().parents[2]
DEMO_CONFIG = REPO / "configs" / "demo.yaml"

# A tiny network and 1-2 short epochs: every run of the suite stays within seconds on one core.
TINY = ["model.planes=[8, 16]", "model.blocks=[1, 1]", "model.strides=[1, 4]", "model.neighbours=[8, 8]",
        "model.decoder_blocks=[1, 1]",
        "data.grid_size=0.1", "data.voxel_max=1500", "data.loop=1", "data.batch_size=2",
        "data.num_workers=0", "data.cache=true", "optim.name=adamw", "optim.lr=0.01",
        "optim.scheduler=cosine", "train.epochs=2", "train.amp=none", "train.device=cpu",
        "train.progress=false", "eval.batch_points=20000"]


@pytest.fixture(scope="session")
def tiny_root(tmp_path_factory) -> Path:
    """``pointgeope synth --size tiny`` then ``pointgeope prepare``: 6 areas x 2 rooms of ~4k points."""
    from pointgeope.cli import main as cli
    from pointgeope.commands import synth

    base = tmp_path_factory.mktemp("tiny_s3dis")
    parser = argparse.ArgumentParser()
    synth.add_arguments(parser)
    assert synth.main(parser.parse_args([str(base / "raw"), "--size", "tiny"])) == 0
    assert cli(["prepare", str(base / "raw"), str(base / "s3dis")]) == 0
    return base / "s3dis"


@pytest.fixture(scope="session")
def unpinned_config(tmp_path_factory) -> Path:
    """The demo config with ``train.threads`` unset (torch's default, or ablate's share of the cores): the
    demo pins one thread, the tests of what happens without a count use this."""
    path = tmp_path_factory.mktemp("unpinned") / "demo_unpinned.yaml"
    path.write_text(f"base: {DEMO_CONFIG}\ntrain:\n  threads: null\n")
    return path


@pytest.fixture(scope="session")
def two_folds(tiny_root, tmp_path_factory) -> Path:
    """The tiny data with a folds.json of two folds over Area_1..Area_3 (folds are data)."""
    root = tmp_path_factory.mktemp("two_folds")
    for area in ("Area_1", "Area_2", "Area_3"):
        os.symlink(tiny_root / f"{area}.h5", root / f"{area}.h5")
    folds = {"1": {"test": ["Area_1"], "train": ["Area_2", "Area_3"]},
             "2": {"test": ["Area_2"], "train": ["Area_1", "Area_3"]}}
    (root / "folds.json").write_text(json.dumps({"version": 1, "folds": folds}))
    return root


def train_fold(root: Path, run: Path, *extra: str, fold: str = "1") -> int:
    """``pointgeope train`` of one fold of ``root`` with the TINY settings (and ``extra`` overrides)."""
    from pointgeope.commands import train as train_command

    parser = argparse.ArgumentParser()
    train_command.add_arguments(parser)
    args = parser.parse_args(["--config", str(DEMO_CONFIG), "--test-area", fold, "--data-root", str(root),
                              "--run-dir", str(run), *TINY, *extra])
    return train_command.main(args)


@pytest.fixture(scope="session")
def tiny_run(two_folds, tmp_path_factory) -> Path:
    """Fold 1 of ``two_folds`` trained for one epoch with validation: ``RUN/area_1`` with ``last.pt``,
    ``best.pt``, TensorBoard events and ``predictions/Area_1.h5``."""
    run = tmp_path_factory.mktemp("tiny_run")
    assert train_fold(two_folds, run, "train.epochs=1", "train.val_every=1") == 0
    return run / "area_1"


@pytest.fixture(scope="session")
def validated_run(two_folds, tmp_path_factory) -> Path:
    """Fold 1 of ``two_folds`` trained for TINY's two epochs, validated after each, its run folder (read only):
    test_train's run-folder test reads it, test_tensorboard's resume test compares a resumed run's events with
    its own (both trained this same run before)."""
    run = tmp_path_factory.mktemp("validated_run")
    assert train_fold(two_folds, run, "train.val_every=1") == 0
    return run


@pytest.fixture(scope="session")
def normal_run(two_folds, tmp_path_factory) -> Path:
    """A PTv3 fold of the demo's recipe (``[rgb | normal]``), one epoch of the tiny settings (read only):
    test_ptv3_normals and test_normal_estimate_runs read it (each module trained its own before)."""
    from tests.engine.test_ptv3_engine import train3

    run = tmp_path_factory.mktemp("normal_run")
    assert train3(two_folds, run) == 0
    return run / "area_1"


@pytest.fixture(scope="session")
def unvalidated_run(two_folds, tmp_path_factory) -> Path:
    """Fold 1 of ``two_folds`` trained for one epoch without validation (``train.val_every=0``: best.pt is its
    last epoch, no validation picked it), its run folder: the tests of what ``evaluate`` and ``predict`` say of
    such a best.pt read it, or a copy where they write into the fold."""
    run = tmp_path_factory.mktemp("unvalidated_run")
    assert train_fold(two_folds, run, "train.epochs=1", "train.val_every=0") == 0
    return run


def one_line(capsys, code: int, argv: list[str]) -> str:
    """Run ``pointgeope argv``; check the exit code and that stderr is one line without a traceback."""
    from pointgeope.cli import main as cli

    assert cli(argv) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def last_line_only(err: str, line: str) -> None:
    """A command's stderr that ends with ``line``, its one message, and holds no traceback: lines before it
    are tolerated (a warning a busy runner's libraries print, e.g. of a fork in a threaded process), a
    traceback or a second message is not."""
    lines = err.splitlines()
    assert lines and lines[-1] == line, err[-2000:]
    assert "Traceback" not in err and sum(line in other for other in lines) == 1, err[-2000:]


def ignore_sigint() -> None:
    """A ``preexec_fn``: SIGINT ignored, as a non-interactive shell starts a command in the background
    (``cmd &`` in a job script), and as the command's children then inherit it."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


# --- DDP (gloo) in forked children: tests/engine/test_distributed.py, test_ptv3_engine.py ----------------

def join_rank(rank: int, world: int, port: int) -> None:
    """Make this forked child rank ``rank`` of ``world`` (torchrun's variables), on one torch thread."""
    import torch

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)


def train_fold_1(cfg):
    """Fold 1 of ``cfg`` in this rank's process group, which is set up before and torn down after."""
    import torch

    from pointgeope.engine import distributed, fold_runs

    env = distributed.setup(cfg.train.device)
    try:
        assert env.world_size == 2 and torch.distributed.get_backend() == "gloo"
        fold_runs.run_folds(cfg, 1, env)
    finally:
        distributed.cleanup()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ablate_args(root, run, *overrides, presets=("rpe", "none"), seeds=("0", "1"), jobs="1", area="1"):
    return ["ablate", "--config", str(DEMO_CONFIG), "--test-area", area, "--data-root", str(root), "--run-dir",
            str(run), "--presets", ",".join(presets), "--seeds", ",".join(seeds), "--jobs", jobs, *TINY, *overrides]


@pytest.fixture(scope="module")
def forked_trials(tmp_path_factory):
    """A :class:`~tests.engine.trial_server.TrialServer` for this module's in-process ``ablate`` runs: the path
    that ``sys.executable`` is set to (:func:`trials_forked`) for their trials to be forked from it."""
    from tests.engine.trial_server import TrialServer

    server = TrialServer(tmp_path_factory.mktemp("trials"))
    yield str(server.client)
    server.close()


@pytest.fixture()
def trials_forked(forked_trials, monkeypatch):
    """This test's in-process ``ablate`` runs its trials as forks of the module's :func:`forked_trials`."""
    import sys

    monkeypatch.setattr(sys, "executable", forked_trials)


def trial_config(config, root, preset="rpe", seed=0) -> dict:
    """The config (plain dict) of the trial ``preset`` seed ``seed`` of an ablation of ``config`` over
    ``root`` without other overrides: what a last.pt planted for it must record, else ablate refuses it."""
    from pointgeope.engine.config import config_to_dict, load_config

    return config_to_dict(load_config(config, [f"data.root={root}", f"model.pe={preset}", f"train.seed={seed}"]))


@pytest.fixture()
def code_at(monkeypatch):
    """``code_at(commit, modified)``: the code this process records from then on (:mod:`pointgeope.provenance`'s
    ``package_commit`` and ``package_modified``, asked once per process), so that a test of what a run or a
    prediction records does not depend on the state of the checkout it runs in (a clone with uncommitted edits).
    Used once at the start of a test, it pins the code to one commit, unedited."""
    import pointgeope.provenance as provenance

    def pin(commit: str | None = "5e1c1896a8d84bf745915e7b9d75fd5f38530a6f", modified: bool | None = False):
        monkeypatch.setattr(provenance, "package_commit", lambda: commit)
        monkeypatch.setattr(provenance, "package_modified", lambda: modified)

    return pin



# --- train.py processes forked from one fresh interpreter: test_ddp_stops.py, test_run_folder.py -----------
# It imports what train.py imports (and what a training imports at first use), loads numba's registries (a trivial
# jitted call, as a training's first numba call does), runs nothing else (no torch op, no thread), prints its
# children's pids, then
# forks one child a spec["argv"] entry: its stdout and stderr into its own files, spec["env"]'s entry added to its
# environment (a DDP rank's RANK, LOCAL_RANK, MASTER_PORT); each runs spec["code"] (train.py's own run unless a
# test's code patches it first) and exits as a process exits, with its own code. Past spec["seconds"] a child
# still running is sent SIGABRT (with PYTHONFAULTHANDLER it prints its threads' stacks). Last line: each child's
# exit code, and whether it hung.
FORK_TRAIN_PY = PRELOAD + """
import json, os, signal, sys, time
spec = json.loads(sys.argv[1])
pids = []
for argv, out, env in zip(spec["argv"], spec["out"], spec["env"]):
    pid = os.fork()
    if pid == 0:
        os.environ.update(env)
        for fd, name in ((1, out + ".out"), (2, out + ".err")):
            file = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(file, fd)
            os.close(file)
        sys.argv = ["train.py", *argv]
        exec(compile(spec["code"], "<child>", "exec"), {"__name__": "__child__"})
        raise SystemExit("the child's code returned without train.py's exit")
    pids.append(pid)
print(json.dumps(pids), flush=True)
status, deadline = {}, time.monotonic() + spec["seconds"]
while len(status) < len(pids) and time.monotonic() < deadline:
    for pid in pids:
        got, code = os.waitpid(pid, os.WNOHANG) if pid not in status else (0, 0)
        if got:
            status[pid] = code
    time.sleep(0.1)
hung = [pid not in status for pid in pids]
for pid in pids:
    if pid not in status:
        os.kill(pid, signal.SIGABRT)
        status[pid] = os.waitpid(pid, 0)[1]
print(json.dumps({"codes": [os.waitstatus_to_exitcode(status[pid]) for pid in pids], "hung": hung}))
"""
TRAIN_PY = 'import runpy\nrunpy.run_path("train.py", run_name="__main__")\n'


class ForkedTrainPy:
    """``FORK_TRAIN_PY`` started: ``pids`` of its children (train.py, each ``argvs[i]`` and ``envs[i]`` added to
    the environment); :meth:`ended` waits for them. The children pay the ~7 CPU s of imports once, not once each."""

    def __init__(self, argvs: list[list[str]], folder: Path, *, code: str = TRAIN_PY,
                 envs: list[dict[str, str]] | None = None, seconds: float = 120, **env: str):
        import subprocess
        import sys

        self.outs, self.seconds = [folder / f"child{i}" for i in range(len(argvs))], seconds
        spec = {"code": code, "argv": argvs, "out": [str(o) for o in self.outs], "seconds": seconds,
                "env": envs or [{} for _ in argvs]}
        self.proc = subprocess.Popen([sys.executable, "-c", FORK_TRAIN_PY, json.dumps(spec)], cwd=REPO, text=True,
                                     env=dict(os.environ, OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="1", **env),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.pids = json.loads(self.proc.stdout.readline() or "null")
        assert self.pids, self.proc.communicate(timeout=60)[1][-3000:]

    def ended(self) -> tuple[list[int], list[str], list[bool]]:
        """Each child's exit code, its stderr, and whether it still ran after ``seconds`` (then SIGABRT)."""
        out, err = self.proc.communicate(timeout=self.seconds + 120)
        assert self.proc.returncode == 0, err[-3000:]
        said = json.loads(out.strip().splitlines()[-1])
        return said["codes"], [Path(f"{o}.err").read_text() for o in self.outs], said["hung"]

    def kill(self) -> None:
        """Ends the children and the launcher at once (a test that failed before :meth:`ended`)."""
        import signal

        for pid in (*self.pids, self.proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.communicate()


def ddp_ranks(world: int = 2) -> list[dict[str, str]]:
    """The environment of each rank of one DDP run on this host (``ForkedTrainPy``'s ``envs``): a free port."""
    port = str(free_port())
    return [{"RANK": str(r), "LOCAL_RANK": str(r), "MASTER_PORT": port, "WORLD_SIZE": str(world),
             "MASTER_ADDR": "127.0.0.1"} for r in range(world)]
