"""pointgeope/lock_nesting.py: a command's output folder lies neither inside nor around a folder that another
command holds; real processes hold the other lock."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from pointgeope.lock import LOCK_NAME, LockError, folder_lock

HOLDER = """
import os, sys, time
if os.fork():  # the holder is another command: no child of the test (a child is the same command)
    os._exit(0)
from pointgeope.lock import folder_lock
with folder_lock(sys.argv[1], "pointgeope train --config x.yaml"):
    print("locked", os.getpid(), flush=True)
    time.sleep(120)
"""


def _ended(pid: int) -> bool:
    """Gone, or a zombie (its files closed, its flocks released) that a container's pid 1 may never reap."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _kill(pid: int) -> None:
    """kill -9 a holder (not this process's child: init reaps it) and wait until it has ended."""
    os.kill(pid, signal.SIGKILL)
    while not _ended(pid):
        time.sleep(0.02)


@pytest.fixture
def holder():
    """Start a process (not a child of this one) holding the lock of a folder; its pid. All are killed at the end."""
    pids = []

    def start(folder):
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE, text=True)
        word, pid = proc.stdout.readline().split()
        proc.wait()
        assert word == "locked"
        pids.append(int(pid))
        return int(pid)

    yield start
    for pid in pids:
        if not _ended(pid):
            _kill(pid)


def refusal(folder, other, pid: int, command: str, around: bool = False) -> str:
    """The regex of the whole line refusing ``folder``, which lies inside ``other`` (``around``: holds it), a
    folder that pid ``pid`` running ``command`` (a regex) is writing: where, who, and what to do."""
    here, there = re.escape(str(folder)), re.escape(str(other))
    if around:
        return (rf"^{here} holds {there}, which pid {pid} \(`{command}`\) is writing; give an output folder that does "
                rf"not contain {there}, or wait for that command to end \(its lock: "
                rf"{re.escape(str(other / LOCK_NAME))}\)$")
    return (rf"^{here} lies inside {there}, which pid {pid} on .* is writing \(`{command}`\); give an output folder "
            rf"outside {there}, or wait for that command to end$")


def test_an_output_folder_inside_a_held_folder_is_refused_until_its_holder_is_killed(tmp_path, holder):
    """``predict --out RUN/area_1/predictions`` while ``train`` holds ``RUN/area_1``: both wrote there, each
    under its own lock."""
    fold = tmp_path / "run" / "area_1"
    pid = holder(fold)
    inner = fold / "predictions"
    with pytest.raises(LockError, match=refusal(inner, fold, pid, r"pointgeope train --config x\.yaml")):
        with folder_lock(inner):
            pass
    assert not (inner / LOCK_NAME).exists()  # ours released on the refusal
    with folder_lock(tmp_path / "run" / "area_2"):  # a sibling is no one else's
        pass
    _kill(pid)  # its lock file stays, the flock is gone: not held
    assert (fold / LOCK_NAME).exists()
    with folder_lock(inner):
        pass


def test_a_folder_around_a_held_folder_is_refused(tmp_path, holder):
    """The other order: ``predict`` holds ``RUN/area_1/predictions``, then ``train`` asks for ``RUN/area_1``."""
    fold = tmp_path / "run" / "area_1"
    pid = holder(fold / "predictions")
    for outer in (fold, tmp_path):
        with pytest.raises(LockError, match=refusal(outer, fold / "predictions", pid, ".*-c .*", around=True)):
            with folder_lock(outer):
                pass
        assert not (outer / LOCK_NAME).exists()
    _kill(pid)  # its lock file stays below, its flock is gone
    assert (fold / "predictions" / LOCK_NAME).exists()
    with folder_lock(fold):
        pass


def test_the_same_command_may_nest_its_own_folders(tmp_path):
    """``ablate`` holds ``RUN`` and runs each trial's ``train`` (a child process) on a fold folder below it; so
    too a grandchild (a trial started through a wrapper that runs the interpreter as its child, as a shim may):
    the walk up the parents stopped at the first one, so a grandchild was refused."""
    nest = "import sys\nfrom pointgeope.lock import folder_lock\nwith folder_lock(sys.argv[1]): print('ok')"
    wrapper = "import subprocess, sys\nsys.exit(subprocess.call([sys.executable, *sys.argv[1:]]))"
    with folder_lock(tmp_path / "run"):
        with folder_lock(tmp_path / "run" / "area_1"):  # this process
            pass
        for start in ([sys.executable], [sys.executable, "-c", wrapper]):
            child = subprocess.run([*start, "-c", nest, str(tmp_path / "run" / "t" / "area_1")],
                                   capture_output=True, text=True, check=False)
            assert (child.returncode, child.stdout, child.stderr) == (0, "ok\n", "")


def test_a_lock_of_another_host_above_says_which_file_to_delete(tmp_path):
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": 1, "host": "elsewhere", "since": "yesterday"}))
    with pytest.raises(LockError, match=rf"lies inside {re.escape(str(tmp_path))}, which pid 1 on elsewhere \(since "
                                        rf"yesterday\) is writing; .*: once it has ended, delete "
                                        rf"{re.escape(str(tmp_path / LOCK_NAME))}\)$"):
        with folder_lock(tmp_path / "out"):
            pass


def test_a_command_into_a_held_folder_ends_with_one_line_and_exit_code_2(tmp_path, holder):
    holder(tmp_path / "run")
    out = tmp_path / "run" / "synth"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-m", "pointgeope", "synth", "--size", "tiny", str(out)],
                          capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 2
    assert done.stderr.startswith(f"pointgeope synth: error: {out} lies inside {tmp_path / 'run'}, which pid ")
    assert len(done.stderr.splitlines()) == 1
    assert not list(out.rglob("*.txt"))  # nothing written


MANY_LOCKS = """
import fcntl, os, sys, time
if os.fork():  # not a child of the test: another command
    os._exit(0)
for k in range(int(sys.argv[2])):
    fd = os.open(os.path.join(sys.argv[1], f"f{k}"), os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
print(os.getpid(), flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="the look below reads /proc/locks (Linux)")
def test_a_holder_of_many_locks_has_its_descriptors_read_once(tmp_path, monkeypatch):
    """/proc/locks has a line per lock: read per line, a holder of 500 locks and 5,000 descriptors cost 2.5
    million readlink calls (80 s) at every command's start."""
    (tmp_path / "theirs").mkdir()
    proc = subprocess.Popen([sys.executable, "-c", MANY_LOCKS, str(tmp_path / "theirs"), "40"], stdout=subprocess.PIPE,
                            text=True)
    pid = int(proc.stdout.readline())
    proc.wait()
    try:
        descriptors = len(os.listdir(f"/proc/{pid}/fd"))
        reads, readlink = [], os.readlink
        monkeypatch.setattr(os, "readlink", lambda path, *a, **k: reads.append(str(path)) or readlink(path, *a, **k))
        with folder_lock(tmp_path / "out"):
            pass
        theirs = [path for path in reads if path.startswith(f"/proc/{pid}/fd/")]
        assert 40 < descriptors and 0 < len(theirs) <= descriptors
    finally:
        _kill(pid)


SLEEPER = """
import os, time
if os.fork():  # not a child of the test
    os._exit(0)
print(os.getpid(), flush=True)
time.sleep(120)
"""


def test_where_proc_locks_cannot_be_read_a_reused_pid_above_says_which_file_to_delete(tmp_path, monkeypatch):
    """Without /proc/locks (not Linux, a restricted /proc) a lock above is held where its pid lives: a lock left by
    a kill -9 whose pid another program took refused every folder inside, the message saying to wait for a command
    that would never end."""
    from pointgeope import lock, lock_nesting

    proc = subprocess.Popen([sys.executable, "-c", SLEEPER], stdout=subprocess.PIPE, text=True)
    pid = int(proc.stdout.readline())
    proc.wait()
    try:
        run = tmp_path / "run"
        run.mkdir()
        (run / LOCK_NAME).write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "since": "yesterday"}))
        for module in (lock, lock_nesting):
            monkeypatch.setattr(module, "flocks", lambda kind: None)
        with pytest.raises(LockError, match=rf"which pid {pid} on .*; .*if pid {pid} is no pointgeope command, the "
                                            rf"lock was left by a killed one: delete {re.escape(str(run / LOCK_NAME))}"
                                            r"\)$"):
            with folder_lock(run / "area_1"):
                pass
    finally:
        _kill(pid)


def test_a_refused_command_leaves_no_folder_it_made(tmp_path, holder):
    """``synth RUN/x/data`` refused inside a held ``RUN`` made ``RUN/x/data`` first: bad input leaves nothing.
    A folder that was there before, or that holds anything, stays."""
    run = tmp_path / "run"
    holder(run)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-m", "pointgeope", "synth", "--size", "tiny", str(run / "x" / "data")],
                          capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 2 and "lies inside" in done.stderr
    assert sorted(p.name for p in run.iterdir()) == [LOCK_NAME]  # neither run/x/data nor run/x
    (run / "kept").mkdir()
    with pytest.raises(LockError, match="lies inside"):
        with folder_lock(run / "kept" / "out"):
            pass
    assert sorted(p.name for p in run.iterdir()) == [LOCK_NAME, "kept"] and not any((run / "kept").iterdir())


def test_a_report_into_a_run_that_ablate_holds_says_what_to_do_and_leaves_no_folder(tmp_path, holder):
    """``report RUN`` (default ``RUN/report``) while ``ablate`` holds ``RUN``: refused in one line that says to give
    an output folder outside RUN or wait; the report made ``RUN/report`` before its lock, and left it empty."""
    from tests.test_report import perfect, write_fold

    run = tmp_path / "run"
    for k in range(1, 7):
        write_fold(run, k, perfect())
    holder(run)
    done = subprocess.run([sys.executable, "-m", "pointgeope", "report", str(run)], capture_output=True, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS="1"), check=False)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith(f"pointgeope report: error: {run / 'report'} lies inside {run}, which pid ")
    assert f"; give an output folder outside {run}, or wait for that command to end" in done.stderr
    assert not (run / "report").exists()


def test_a_refusal_removes_no_folder_an_earlier_command_of_the_process_made(tmp_path, holder):
    """A Python session: ``folder_lock(RUN/mid/a)`` granted made ``RUN/mid``; emptied, it is the user's now. A later
    command refused inside a held ``RUN`` removes the folder it made itself (``RUN/mid/b``), never ``RUN/mid``."""
    run = tmp_path / "run"
    with folder_lock(run / "mid" / "a"):
        pass
    (run / "mid" / "a").rmdir()
    holder(run)
    with pytest.raises(LockError, match="lies inside"):
        with folder_lock(run / "mid" / "b"):
            pass
    assert (run / "mid").is_dir() and not any((run / "mid").iterdir())


def test_a_refusal_removes_no_folder_another_process_made_in_the_place_of_its_own(tmp_path, holder):
    """``writable_folder(RUN/x/out)`` made ``RUN/x``; another process moved it aside and made a new ``RUN/x``: the
    refused command removes its ``RUN/x/out``, not the other's ``RUN/x`` (same name, another folder)."""
    from pointgeope.atomic import writable_folder

    run = tmp_path / "run"
    run.mkdir()
    writable_folder(run / "x" / "out")
    (run / "x").rename(tmp_path / "aside")
    (run / "x").mkdir()
    holder(run)
    with pytest.raises(LockError, match="lies inside"):
        with folder_lock(run / "x" / "out"):
            pass
    assert (run / "x").is_dir() and not (run / "x" / "out").exists()



def _remove_first(monkeypatch, module, name, made):
    """Patch ``module.name`` so that just before its first call another command's refusal runs
    (:func:`remove_made_folders` of ``made``, which that command made): the interleaving in which a folder this
    command has just found vanishes under it. The calls' arguments, in a list."""
    from pointgeope.atomic import remove_made_folders

    real, calls = getattr(module, name), []

    def interleaved(*args, **kwargs):
        if not calls:
            remove_made_folders(made)
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, interleaved)
    return calls


def test_a_command_whose_folder_a_refused_one_removes_before_its_lock_file_takes_the_lock(tmp_path, monkeypatch):
    """Another command made ``RUN/x`` and was refused; this one found ``RUN/x`` (nothing of its own in it yet), the
    other removed it, and this one's open of ``RUN/x/.lock`` gave a FileNotFoundError traceback."""
    from pointgeope import lock
    from pointgeope.atomic import writable_folder

    folder = tmp_path / "run" / "x"
    writable_folder(folder)  # the other command's: it made run and run/x
    calls = _remove_first(monkeypatch, lock, "_open_locked", folder)
    with folder_lock(folder):
        assert (folder / LOCK_NAME).is_file()
    assert [args for args, _ in calls] == [(folder / LOCK_NAME,)] * 2  # the first found no folder: made again
    assert folder.is_dir() and not (folder / LOCK_NAME).exists()  # released


def test_a_folder_removed_between_its_mkdir_and_the_test_write_is_made_again(tmp_path, monkeypatch):
    """The same interleaving one step earlier, at ``writable_folder``'s test write: it said the folder "cannot
    be written into (No such file or directory)", a wrong reason."""
    from pointgeope import atomic

    folder = tmp_path / "run" / "x"
    atomic.writable_folder(folder)  # the other command's
    calls = _remove_first(monkeypatch, atomic.tempfile, "TemporaryFile", folder)
    assert atomic.writable_folder(folder) == folder and folder.is_dir()
    assert [kwargs["dir"] for _, kwargs in calls] == [folder, folder]  # the first found no folder: made again


CHILD_HOLDER = """
import sys, time
from pointgeope.lock import folder_lock
with folder_lock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(120)
"""


@pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="the look below reads /proc/locks (Linux)")
def test_a_holder_below_that_is_this_commands_child_has_no_descriptor_read(tmp_path, monkeypatch):
    """``ablate`` holds ``RUN`` while its trial (a child) holds ``RUN/t/area_1``: the same command, never refused,
    so the look below has no reason to read the child's open files (it read them all, then asked)."""
    child = subprocess.Popen([sys.executable, "-c", CHILD_HOLDER, str(tmp_path / "run" / "t" / "area_1")],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "locked\n"
        reads, readlink = [], os.readlink
        monkeypatch.setattr(os, "readlink", lambda path, *a, **k: reads.append(str(path)) or readlink(path, *a, **k))
        with folder_lock(tmp_path / "run"):
            pass
        assert [path for path in reads if path.startswith(f"/proc/{child.pid}/fd/")] == []
    finally:
        child.kill()
        child.wait()
