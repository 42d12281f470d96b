"""prepare's worker processes (``data_prep/pool.py``): a dead worker ends the run with a message, a killed
``prepare --jobs 2`` takes its workers and its lock with it, and the workers run whatever the default start
method."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from data_prep.prepare import PrepareConfig, prepare
from pointgeope.cli import main as cli
from tests.conftest import process_ended
from tests.data_prep.raw_trees import DEFECT_FILES, five_rooms, output_bytes, write_tree
from tests.dropped_stop import IMPORT_LINE

KILL_ONE_WORKER = """
import os, signal, sys
import data_prep.room
from pointgeope.cli import main

load_room = data_prep.room.load_room

def dying_load_room(source, room, limits):
    if room.name == "office_1":  # the worker parsing it dies as if killed by the OOM killer
        os.kill(os.getpid(), signal.SIGKILL)
    return load_room(source, room, limits)

data_prep.room.load_room = dying_load_room  # the workers are forked: they see it
sys.exit(main(["prepare", sys.argv[1], sys.argv[2], "--jobs", "2"]))
"""


def test_a_dead_worker_ends_the_run_with_a_message_not_a_hang(tmp_path):
    """multiprocessing.Pool replaced a killed worker and waited forever for its room; now the run ends."""
    raw = write_tree(tmp_path / "raw", DEFECT_FILES)
    for room in ("office_1", "office_2"):  # two more rooms: --jobs 2 starts a pool of two workers
        (raw / "Area_1" / room).mkdir()
        (raw / "Area_1" / room / "Annotations").symlink_to(raw / "Area_1/room_a/Annotations")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-c", KILL_ONE_WORKER, str(raw), str(out)], capture_output=True,
                          text=True, timeout=60, check=False)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and not any("Traceback" in line for line in lines), lines
    assert lines[-1] == ("pointgeope prepare: error: a prepare worker process died (killed, out of memory, or "
                         "crashed) while parsing rooms; the rooms parsed before it are kept: run the same command "
                         "again, or with --jobs 1 to see which room it was")
    assert not list(out.glob("Area_*.h5"))
    assert not [p for p in out.rglob("*") if ".tmp" in p.name]  # nor a temporary file of a stopped worker


@pytest.fixture(scope="module")
def five(tmp_path_factory) -> tuple[Path, Path]:
    """(raw, clean): :func:`~tests.data_prep.raw_trees.five_rooms` and its run never stopped, which a stopped run
    resumes to; read only by the tests, made once. It is made before any test's process: it leaves numba's compiled
    functions in its cache, so that a stopped process compiles none. A stop delivered again while numba compiled
    could land in llvmlite's finalizers, which it leaves half-closed: they printed their own errors at the exit
    ("Exception ignored ... AttributeError", a fresh clone under load), unrelated to the stop this file tests."""
    root = tmp_path_factory.mktemp("five_rooms")
    raw = five_rooms(root / "raw")
    prepare(PrepareConfig(raw, root / "clean", progress=False))
    return raw, root / "clean"


SLOW_WORKERS = """
import sys, time
import data_prep.room
from pointgeope.cli import main

def slow_load_room(source, room, limits):  # the workers are busy when the main process is killed
    time.sleep(120)

data_prep.room.load_room = slow_load_room  # the workers are forked: they see it
sys.exit(main(["prepare", sys.argv[1], sys.argv[2], "--jobs", "2"]))
"""


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


@pytest.mark.skipif(not Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists(), reason="Linux /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_killed_parallel_prepare_takes_its_workers_and_its_lock_with_it(tmp_path, sig, capsys, five):
    """The workers of a killed `prepare --jobs 2` lived on, holding OUT's lock: the rerun was refused in the
    name of the dead main process. Now they die with it, and the rerun goes on."""
    raw, clean = five
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-c", SLOW_WORKERS, str(raw), str(out)], stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 60
    while len(workers := _children(proc.pid)) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.05)
    time.sleep(0.5)  # the workers are in slow_load_room
    os.kill(proc.pid, sig)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    try:
        while not all(map(process_ended, workers)):
            assert time.monotonic() < deadline, f"workers {workers} outlived the main process"
            time.sleep(0.05)
    finally:  # (none is left unless the test failed)
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    if sig == signal.SIGTERM:  # a clean stop: one line, the lock file gone
        assert proc.returncode == 143
        assert proc.stderr.read().strip().splitlines()[-1] == "pointgeope prepare: terminated"
        assert not (out / ".lock").exists()
    assert cli(["prepare", str(raw), str(out), "--jobs", "2"]) == 0
    assert ("taking over the lock" in capsys.readouterr().err) == (sig == signal.SIGKILL)
    assert output_bytes(out) == output_bytes(clean)


STOP_WHILE_FORKING = """
import os, signal, sys
from pointgeope.cli import main

forks = []

def stop_once():  # the stop lands while the first worker forks: in the parent's at-fork callbacks
    forks.append(os.getpid())
    if len(forks) == 1:
        signal.raise_signal(signal.Signals[sys.argv[3]])

os.register_at_fork(after_in_parent=stop_once)
code = main(["prepare", sys.argv[1], sys.argv[2], "--jobs", "2"])
print("forks", len(forks))
sys.exit(code)
"""


def _stopped_then_resumed(proc, code: int, word: str, five, out, *rerun: str) -> None:
    """``proc`` (prepare of ``five``'s raw tree into ``out``) ended as a stop ends a command: its exit ``code``,
    its one line with ``word`` last, no dropped exception, the lock released and no temporary file; the same
    command (with ``rerun``'s options) then resumes to the bytes of ``five``'s run that was never stopped."""
    raw, clean = five
    assert proc.returncode == code, proc.stderr
    assert "ignored" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == f"pointgeope prepare: {word}"
    assert not (out / ".lock").exists() and not [p for p in out.rglob("*") if ".tmp" in p.name]
    assert cli(["prepare", str(raw), str(out), *rerun]) == 0
    assert output_bytes(out) == output_bytes(clean)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the workers fork on Linux only")
@pytest.mark.parametrize("sig, code, word", [("SIGTERM", 143, "terminated"), ("SIGINT", 130, "interrupted")])
def test_a_stop_while_the_workers_fork_ends_the_run(tmp_path, five, sig, code, word, capsys):
    """A SIGTERM or Ctrl-C that came while the pool forked its workers was raised inside a fork callback,
    where Python prints "Exception ignored" and drops it: prepare went on and exited 0. Now it is delivered
    again and stops the run as any stop does: the workers stopped, nothing half-written, the lock released,
    and the rerun resumes to the same files as a run that was never stopped."""
    raw, out = five[0], tmp_path / "out"
    proc = subprocess.run([sys.executable, "-c", STOP_WHILE_FORKING, str(raw), str(out), sig],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.stdout.split()[-2:] in (["forks", "1"], ["forks", "2"])  # main returned (the stop came in
    # the first fork's callbacks; delivered again 10 ms later, it may come before or after the second fork)
    assert not list(out.glob("Area_*.h5"))  # stopped before any area was written
    _stopped_then_resumed(proc, code, word, five, out, "--jobs", "2")


STOP_IN_A_CALLBACK = IMPORT_LINE + """
import sys
import data_prep.room
from dropped_stop import stop_in_a_callback
from pointgeope.cli import main

load_room = data_prep.room.load_room
rooms = []

def stopped_load_room(source, room, limits):  # the stop lands in a weakref callback, which drops exceptions
    rooms.append(room.name)
    if len(rooms) == 3:
        stop_in_a_callback(sys.argv[3])
    return load_room(source, room, limits)

data_prep.room.load_room = stopped_load_room
sys.exit(main(["prepare", sys.argv[1], sys.argv[2], "--jobs", "1"]))
"""


@pytest.mark.parametrize("sig, code, word", [("SIGTERM", 143, "terminated"), ("SIGINT", 130, "interrupted")])
def test_a_stop_dropped_in_a_callback_still_ends_the_run(tmp_path, five, sig, code, word):
    """A stop whose handler ran inside a weakref callback was dropped ("Exception ignored") and prepare
    finished every area with exit code 0; it is delivered again and ends the run as any stop does."""
    raw, out = five[0], tmp_path / "out"
    proc = subprocess.run([sys.executable, "-c", STOP_IN_A_CALLBACK, str(raw), str(out), sig],
                          capture_output=True, text=True, timeout=60, check=False)
    assert not (out / "Area_2.h5").exists()  # the last area: the run stopped before it
    _stopped_then_resumed(proc, code, word, five, out)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the workers fork on Linux only")
def test_the_workers_run_whatever_the_default_start_method(monkeypatch):
    """Each worker ends itself when its parent is no longer the prepare process. Under forkserver (Python
    3.14's default start method on Linux) a worker's parent is the server, so every worker ended itself at
    once and every parallel prepare failed with "a prepare worker process died"."""
    import multiprocessing

    from data_prep.pool import parallel_map

    monkeypatch.setattr(multiprocessing, "get_context",
                        lambda method=None, real=multiprocessing.get_context: real(method or "forkserver"))
    with parallel_map(abs, [-1, -2, -3], 2) as results:
        assert sorted(results) == [1, 2, 3]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the workers fork on Linux only")
def test_a_stop_while_the_pool_starts_its_manager_thread_stays_a_stop(monkeypatch):
    """A stop delivered again after a fork (test_a_stop_while_the_workers_fork_ends_the_run) lands, on a busy
    machine, in ``Thread.start`` as ``submit`` starts the pool's manager thread: the thread not yet running,
    ``pool.shutdown`` raised ``RuntimeError: cannot join thread before it is started`` over the stop (a
    traceback, exit code 1; seen with both cores busy). The stop now leaves ``parallel_map`` as it came."""
    from concurrent.futures import process

    from data_prep.pool import parallel_map

    def stopped_start(self):  # the stop raised before the thread ran
        raise KeyboardInterrupt

    monkeypatch.setattr(process._ExecutorManagerThread, "start", stopped_start)
    with pytest.raises(KeyboardInterrupt):
        with parallel_map(abs, [-1, -2, -3], 2) as results:
            list(results)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the workers fork on Linux only")
def test_a_stop_just_after_a_worker_forks_stops_that_worker_too(monkeypatch):
    """The workers to stop were those the pool had registered, which ``submit`` does after each fork: a stop
    that landed in between left a worker waiting for a task, and the interpreter waited for it at exit
    (``prepare`` hung after ``terminated``; seen with both cores busy). Every worker forked is stopped."""
    from multiprocessing.process import BaseProcess

    from data_prep.pool import parallel_map

    start, started = BaseProcess.start, []

    def start_then_stop(self):
        start(self)
        started.append(self)
        if len(started) == 2:
            raise KeyboardInterrupt  # after the second fork, before the pool registers that worker

    monkeypatch.setattr(BaseProcess, "start", start_then_stop)
    try:
        with pytest.raises(KeyboardInterrupt):
            with parallel_map(abs, [-1, -2, -3], 2) as results:
                list(results)
        for process in started:
            process.join(timeout=10)
        assert len(started) == 2 and not any(process.is_alive() for process in started)
    finally:  # (none is left unless the test failed)
        for process in started:
            process.kill()


def _omp_threads(_) -> str | None:
    return os.environ.get("OMP_NUM_THREADS")


@pytest.mark.parametrize("given, expected", [(None, "1"), ("3", "3"), ("", "1")])
def test_each_worker_runs_one_openmp_thread_unless_told_otherwise(monkeypatch, given, expected):
    """--jobs N workers each searching the normals' neighbours with a thread per core would fight for the cores."""
    from data_prep.pool import parallel_map

    if given is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", given)
    with parallel_map(_omp_threads, [0, 1], 2) as results:
        assert list(results) == [expected, expected]


STOP_IN_AN_HDF5_CALLBACK = """
import signal, sys
from pointgeope import h5_file
from pointgeope.cli import main

calls = []

class StoppedFile:  # the file under HDF5's file object: the stop lands in the driver's callback
    def __init__(self, f):
        self.f = f

    def __getattr__(self, name):
        real = getattr(self.f, name)
        if name != sys.argv[4]:
            return real

        def call(*args):
            calls.append(name)
            if len(calls) == int(sys.argv[5]):
                signal.raise_signal(signal.Signals[sys.argv[3]])
            return real(*args)

        return call

keep_first = h5_file._KeepFirstError.__init__
h5_file._KeepFirstError.__init__ = lambda self, f: keep_first(self, StoppedFile(f))
sys.exit(main(["prepare", sys.argv[1], sys.argv[2], "--jobs", "1"]))
"""


@pytest.mark.parametrize("name, nth, sig, code, word", [("truncate", 3, "SIGTERM", 143, "terminated"),
                                                       ("flush", 3, "SIGINT", 130, "interrupted"),
                                                       ("write", 40, "SIGTERM", 143, "terminated"),
                                                       ("write", 40, "SIGINT", 130, "interrupted")])
def test_a_stop_inside_an_hdf5_callback_ends_the_run(tmp_path, five, name, nth, sig, code, word):
    """A stop that landed in h5py's file-object callbacks as a work file closed ended prepare with
    "AttributeError: '_io.FileIO' object has no attribute 'flush'" and exit code 1 (once in CI, in the test
    above); one during a write was dropped, the room kept with an array of zeros. Now it ends the run as any stop.
    Each callback once, and the write (the dropped one) with both stops: in a callback both are the same exception
    (``Terminated`` is a ``KeyboardInterrupt``), which ``h5_file._KeepFirstError`` keeps whatever it is; each stop's
    exit code and word are the other tests' too."""
    raw, out = five[0], tmp_path / "out"
    proc = subprocess.run([sys.executable, "-c", STOP_IN_AN_HDF5_CALLBACK, str(raw), str(out), sig, name, str(nth)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert not (out / "Area_2.h5").exists()  # the last area: the run stopped before it
    _stopped_then_resumed(proc, code, word, five, out)
