"""pointgeope/errors.py: a user error is one line and exit code 2, as is the environment's (a full disk, a
loader worker killed or crashed); a bug keeps its traceback; a reader of the output that has gone ends the command
quietly. The stops (Ctrl-C, SIGTERM, a loader worker ended by the stop) are tests/test_stops.py's."""
from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from pointgeope.errors import UserError, run_command
from pointgeope.h5 import SchemaError


def _raise(err):
    def func():
        raise err
    return func


def test_user_error_is_one_line_and_exit_code_2(capsys):
    assert run_command("pointgeope x", _raise(UserError("a.yaml: unknown key 'k'\nsecond line"))) == 2
    assert capsys.readouterr().err == "pointgeope x: error: a.yaml: unknown key 'k' second line\n"


class _DamagedData(torch.utils.data.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, index):
        raise SchemaError(f"data/Area_{index + 1}.h5: not a readable HDF5 file; it is truncated or corrupt")


def test_a_user_error_of_a_data_loader_worker_is_its_own_one_line(capsys):
    def read_all():
        return sum(1 for _ in torch.utils.data.DataLoader(_DamagedData(), num_workers=1))

    assert run_command("pointgeope x", read_all) == 2
    assert capsys.readouterr().err == ("pointgeope x: error: data/Area_1.h5: not a readable HDF5 file; it is "
                                       "truncated or corrupt\n")
    wrapped = SchemaError("Caught SchemaError in a place.\nOriginal Traceback (most recent call last):\nno name")
    assert run_command("pointgeope x", _raise(wrapped)) == 2          # not torch's form: the message as it came
    assert capsys.readouterr().err.startswith("pointgeope x: error: Caught SchemaError in a place. Original ")


class _DyingData(torch.utils.data.Dataset):
    """Each item ends the worker process that reads it: by ``signal`` (the out-of-memory killer's SIGKILL),
    or else by ``os._exit(3)``."""

    def __init__(self, signum=None):
        self.signum = signum

    def __len__(self):
        return 4

    def __getitem__(self, index):
        if self.signum is None:
            os._exit(3)
        os.kill(os.getpid(), self.signum)
        time.sleep(10)


@pytest.mark.parametrize(("signum", "how"), [(signal.SIGKILL, "was killed by signal: Killed"),
                                             (None, "exited unexpectedly with exit code 3")])
def test_a_data_loader_worker_that_died_is_one_line_saying_to_run_again(capsys, signum, how):
    """A loader worker killed while training (SIGKILL of the worker alone, found by a kill/resume fuzz)
    ended the command with torch's traceback from the main process; it is the environment's, as a dead
    prepare worker is: one line, exit code 2, and --debug keeps the traceback."""
    def read_all():
        return sum(1 for _ in torch.utils.data.DataLoader(_DyingData(signum), num_workers=1))

    assert run_command("pointgeope x", read_all) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("pointgeope x: error: a data loader worker process (pid "), err
    assert err.endswith(f") {how} (out of memory, killed, or crashed); what was written before it is kept: run the "
                        "same command again (a training resumes from its last checkpoint), or with "
                        "data.num_workers=0 to load in the main process\n"), err
    with pytest.raises(RuntimeError, match="DataLoader worker"):
        run_command("pointgeope x", read_all, debug=True)
    with pytest.raises(RuntimeError, match="DataLoader worker is a bug"):  # another RuntimeError: a bug
        run_command("pointgeope x", _raise(RuntimeError("DataLoader worker is a bug")))


def test_a_bug_while_a_dead_loader_worker_is_handled_keeps_its_traceback():
    """The dead-worker line is for torch's error and the errors raised from it (``raise ... from``, as torch's
    iterator raises its own); a bug raised while it is handled (an ``except`` or ``finally`` block's) has it
    as context only and is a bug, as a stop's context is (stop_behind)."""
    def bug_while_handling():
        try:
            sum(1 for _ in torch.utils.data.DataLoader(_DyingData(signal.SIGKILL), num_workers=1))
        except RuntimeError:
            raise KeyError("a bug of the handler")  # noqa: B904  (its context is the dead worker)

    with pytest.raises(KeyError, match="a bug of the handler"):
        run_command("pointgeope x", bug_while_handling)




def test_environment_errors_are_the_users_and_bugs_are_not(capsys):
    full = OSError(errno.ENOSPC, "No space left on device", "/data/out/Area_1.h5")
    assert run_command("pointgeope prepare", _raise(full)) == 2
    assert capsys.readouterr().err == ("pointgeope prepare: error: No space left on device: /data/out/Area_1.h5; "
                                       "check the folder's permissions and free space\n")
    with pytest.raises(FileNotFoundError):  # not an environment errno: a bug, traceback kept
        run_command("pointgeope x", _raise(FileNotFoundError(errno.ENOENT, "gone", "f")))
    with pytest.raises(KeyError):
        run_command("pointgeope x", _raise(KeyError("bug")))


def test_debug_keeps_the_traceback():
    with pytest.raises(UserError, match="bad"):
        run_command("pointgeope x", _raise(UserError("bad")), debug=True)
    assert run_command("pointgeope x", lambda: None) == 0


def test_a_closed_stdout_ends_quietly_and_another_broken_pipe_is_a_bug():
    """`pointgeope report RUN | head` ended in a BrokenPipeError traceback once head had its lines. A closed
    standard output now ends the command quietly with 141 (128 + SIGPIPE), as shell tools end; a broken
    pipe of anything else (a worker's) keeps its traceback."""
    script = ("import sys\nfrom pointgeope.errors import run_command\n"
              "def report():\n    for i in range(200000):\n        print('row', i)\n"
              "sys.exit(run_command('pointgeope report', report))\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline() == b"row 0\n"
    proc.stdout.close()                           # what head does once it has its lines
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == "", err[-2000:]
    with pytest.raises(BrokenPipeError):          # stdout is fine (captured): not the reader's going
        run_command("pointgeope x", _raise(BrokenPipeError(errno.EPIPE, "Broken pipe")))


def test_a_short_output_left_in_the_buffer_for_a_closed_stdout_ends_quietly_too():
    """The common `| head`: a command whose last lines are still in stdout's buffer when it returns. They were
    flushed at the interpreter's exit, after run_command: exit code 120 and 'Exception ignored ...
    BrokenPipeError'. run_command now flushes while it can still catch that (buffered stdout: the
    environment's PYTHONUNBUFFERED is left out)."""
    import os

    script = ("import sys\nfrom pointgeope.errors import run_command\n"
              "def report():\n    print('row 0', flush=True)\n    sys.stdin.readline()\n"
              "    for i in range(1, 100):\n        print('row', i)\n"
              "sys.exit(run_command('pointgeope report', report))\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    assert proc.stdout.readline() == b"row 0\n"
    proc.stdout.close()                           # head has its line and has gone
    proc.stdin.write(b"go\n")                     # only then the command prints the rest, into its buffer
    proc.stdin.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == "", err[-2000:]
