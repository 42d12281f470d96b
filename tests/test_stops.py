"""pointgeope/errors.py's stops: a Ctrl-C or SIGTERM ends a command in one line (exit code 130, 143), wherever
Python runs its handler (a callback, an import, a descriptor, a stops_deferred block); a loader worker ended by the
stop sent to the process group is the command's own stop. The other errors are tests/test_errors.py's."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from pointgeope.errors import Terminated, run_command, stop_on_sigterm, stops_deferred
from tests.dropped_stop import IMPORT_LINE, stop_in_a_callback


def _raise(err):
    def func():
        raise err
    return func


class _StoppedData(torch.utils.data.Dataset):
    """Each item ends the worker process that reads it by ``signum`` under its default action, as a stop sent
    to the whole process group (a job scheduler's SIGTERM, a terminal's Ctrl-C) ends a worker."""

    def __init__(self, signum):
        self.signum = signum

    def __len__(self):
        return 4

    def __getitem__(self, index):
        signal.signal(self.signum, signal.SIG_DFL)
        os.kill(os.getpid(), self.signum)
        time.sleep(10)


@pytest.mark.parametrize(("signum", "code", "said"), [(signal.SIGTERM, 143, "terminated"),
                                                      (signal.SIGINT, 130, "interrupted")])
def test_a_data_loader_worker_stopped_by_a_signal_sent_to_the_group_is_the_commands_stop(capsys, signum, code,
                                                                                        said):
    """A scheduler's SIGTERM (or Ctrl-C) reaches the loader workers as well as the main process; a worker it
    ended first was the dead-worker error (exit code 2), which a scheduler does not read as its stop: it is
    the main process's own stop, its line and exit code 143 (130)."""
    def read_all():
        return sum(1 for _ in torch.utils.data.DataLoader(_StoppedData(signum), num_workers=1))

    assert run_command("pointgeope x", read_all) == code
    assert capsys.readouterr().err == f"pointgeope x: {said}\n"


class _ShutDownAfter:
    """Raises torch's SIGCHLD report of a loader worker ended by ``how`` where Python drops exceptions, as
    ``_MultiProcessingDataLoaderIter.__del__`` does while it joins its workers."""

    def __init__(self, how):
        self.how = how

    def __del__(self):
        raise RuntimeError(f"DataLoader worker (pid 7) is killed by signal: {self.how}. ")


def test_a_loader_worker_the_stop_ended_as_its_iterator_shuts_down_is_no_traceback(monkeypatch):
    """A scheduler's SIGTERM to the process group ends the loader workers too; torch's SIGCHLD handler then
    raised its error in the iterator's ``__del__`` as the stop unwound, and Python printed "Exception ignored
    ... is killed by signal: Terminated" with its traceback before ``terminated`` (3 of 3
    ``kill -TERM -<pgid>`` of a train with data.num_workers=2). A worker a stop ended is said by that stop;
    any other worker's death is still shown."""
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda unraisable: seen.append(str(unraisable.exc_value)))

    def drop(how):
        def command():
            _ShutDownAfter(how)  # dropped at once: its __del__ runs here
            return 0
        return command

    assert run_command("pointgeope x", drop(signal.strsignal(signal.SIGTERM))) == 0
    assert run_command("pointgeope x", drop(signal.strsignal(signal.SIGINT))) == 0
    assert seen == []
    assert run_command("pointgeope x", drop("Killed")) == 0
    assert seen == ["DataLoader worker (pid 7) is killed by signal: Killed. "]


def test_ctrl_c_is_one_line_and_exit_code_130(capsys):
    """A KeyboardInterrupt ended every command in a 16-60-frame traceback; command-line tools print one
    line and exit with 128 + SIGINT."""
    try:
        code = run_command("pointgeope train", _raise(KeyboardInterrupt()))
    except KeyboardInterrupt:
        pytest.fail("the KeyboardInterrupt escaped run_command")
    assert code == 130
    assert capsys.readouterr().err == "pointgeope train: interrupted\n"
    with pytest.raises(KeyboardInterrupt):
        run_command("pointgeope x", _raise(KeyboardInterrupt()), debug=True)


@pytest.mark.parametrize("sig, code, word", [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")])
def test_a_stop_raised_inside_a_callback_is_delivered_again(capsys, sig, code, word):
    """Python runs a signal's handler at the next bytecode, which may be a weakref callback's (or
    ``__del__``'s, or an at-fork callback's): there it prints "Exception ignored" and drops the exception,
    and the command went on to exit 0 (a prepare SIGTERM'd at the wrong moment finished every area)."""
    steps = []

    def work():
        stop_in_a_callback(sig)
        for _ in range(200):  # 10 s at most
            steps.append(time.sleep(0.05))
        return 0

    hook = sys.unraisablehook
    assert run_command("pointgeope x", work) == code
    assert capsys.readouterr().err == f"pointgeope x: {word}\n"  # no "Exception ignored" either
    assert len(steps) < 200
    assert sys.unraisablehook is hook  # put back after the command


STOP_AT_THE_END = IMPORT_LINE + """
import sys, time
from dropped_stop import stop_in_a_callback
from pointgeope.errors import run_command

def work():
    stop_in_a_callback(sys.argv[1])  # dropped in the command's last bytecodes
    return 0

code = run_command("pointgeope x", work)
time.sleep(0.5)  # a stop delivered again after the command would land here
print("returned", code)
"""


@pytest.mark.parametrize("sig, code, word", [("SIGTERM", 143, "terminated"), ("SIGINT", 130, "interrupted")])
def test_a_stop_dropped_as_the_command_ends_is_its_exit_code_not_the_callers(sig, code, word):
    """The stop dropped in a callback was sent again 10 ms later, whatever happened meanwhile: dropped as
    the command returned, it came after run_command had returned 0, as a KeyboardInterrupt in the caller's
    code (SIGINT) or a kill by SIGTERM's default action, with no line. It now ends the command it came in."""
    done = subprocess.run([sys.executable, "-c", STOP_AT_THE_END, sig], capture_output=True, text=True, timeout=60,
                          check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"returned {code}\n", f"pointgeope x: {word}\n")


STOP_SENT_AGAIN_INTO_THE_HOOK = IMPORT_LINE + """
import sys, threading, time
from dropped_stop import stop_in_a_callback
from pointgeope.errors import run_command

start, starts = threading.Thread.start, []

def slow_start(self):  # the first thread started returns 50 ms late, as on a busy machine
    starts.append(self)
    start(self)
    if len(starts) == 1:
        time.sleep(0.05)

threading.Thread.start = slow_start

def work():
    stop_in_a_callback(sys.argv[1])
    for _ in range(100):  # 5 s at most
        time.sleep(0.05)
    return 0

print("returned", run_command("pointgeope x", work))
"""


@pytest.mark.parametrize("sig, code, word", [("SIGTERM", 143, "terminated"), ("SIGINT", 130, "interrupted")])
def test_a_stop_sent_again_while_the_hook_starts_its_thread_is_not_lost(sig, code, word):
    """The hook that sends a dropped stop again waits for its thread to start; when that took over 10 ms
    (a busy machine), the stop came back inside the hook, where Python drops it too ("Exception ignored in
    sys.unraisablehook"), and the command ended with exit code 0. It is sent again once more."""
    done = subprocess.run([sys.executable, "-c", STOP_SENT_AGAIN_INTO_THE_HOOK, sig], capture_output=True,
                          text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"returned {code}\n", f"pointgeope x: {word}\n")


KEYBOARD_INTERRUPT_IN_A_THREAD = """
import threading, time
from pointgeope.errors import run_command

class Doomed:
    def __del__(self):
        raise KeyboardInterrupt  # not a signal: Python runs signal handlers in the main thread only

def work():
    thread = threading.Thread(target=Doomed)  # the object dies in the thread, its exception dropped there
    thread.start()
    thread.join()
    time.sleep(0.5)
    return 0

print("returned", run_command("pointgeope x", work))
"""


def test_a_keyboard_interrupt_dropped_in_another_thread_stops_nothing():
    """A KeyboardInterrupt dropped in any thread was taken for a stop and sent again as SIGINT: the command
    was interrupted (exit 130) by no signal. Off the main thread it goes to Python's hook, and the command
    goes on."""
    done = subprocess.run([sys.executable, "-c", KEYBOARD_INTERRUPT_IN_A_THREAD], capture_output=True, text=True,
                          timeout=60, check=False)
    assert (done.returncode, done.stdout) == (0, "returned 0\n"), done.stderr
    assert "Exception ignored" in done.stderr and "KeyboardInterrupt" in done.stderr


def test_stop_on_sigterm_off_the_main_thread_changes_nothing():
    """`train`, `evaluate` and `predict` stop on SIGTERM (stop_on_sigterm) and may be called from a thread
    (a notebook's worker, a test runner's): signal.signal raised ValueError there, so the command failed
    before it began. Off the main thread the block now runs without touching the handler, which stays the
    main thread's."""
    import signal
    import threading

    from pointgeope.errors import stop_on_sigterm

    before, result = signal.getsignal(signal.SIGTERM), []

    def command():
        try:
            with stop_on_sigterm():
                result.append(signal.getsignal(signal.SIGTERM))
        except ValueError as err:
            result.append(err)

    thread = threading.Thread(target=command)
    thread.start()
    thread.join()
    assert result == [before] and signal.getsignal(signal.SIGTERM) == before


def _signal_self(signum):
    os.kill(os.getpid(), signum)
    time.sleep(0.05)  # the handler runs meanwhile


def test_a_stop_inside_stops_deferred_is_raised_as_the_block_ends():
    """SIGTERM (under stop_on_sigterm) or Ctrl-C inside the block lets it run to its end, then stops."""
    for signum, stop in ((signal.SIGTERM, Terminated), (signal.SIGINT, KeyboardInterrupt)):
        done = []
        with pytest.raises(stop), stop_on_sigterm():
            with stops_deferred():
                _signal_self(signum)
                done.append("the block ran on")
            done.append("after the block")
        assert done == ["the block ran on"]


def test_a_second_stop_inside_stops_deferred_is_raised_at_once():
    done = []
    with pytest.raises(KeyboardInterrupt), stops_deferred():
        _signal_self(signal.SIGINT)
        done.append("noted")
        _signal_self(signal.SIGINT)
        done.append("not reached")
    assert done == ["noted"]


def test_stops_deferred_raises_its_stop_rather_than_the_blocks_error_and_leaves_an_ignored_signal_alone():
    with pytest.raises(Terminated), stop_on_sigterm():
        with stops_deferred():
            _signal_self(signal.SIGTERM)
            raise RuntimeError("Connection closed by peer")
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with stops_deferred():
            _signal_self(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


# A Ctrl-C whose handler runs while numpy's C code imports `datetime` (sys.argv[1]): numpy raises an
# ImportError of its own in place of the KeyboardInterrupt.
STOP_IN_NUMPYS_IMPORT = """
import os, signal, sys

class Stop:
    def find_spec(self, name, path=None, target=None):
        if name == sys.argv[1]:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # the handler runs at one of these bytecodes, inside the import
                pass
        return None

sys.meta_path.insert(0, Stop())
from pointgeope.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_a_ctrl_c_that_an_import_turns_into_an_import_error_is_still_a_stop(tmp_path):
    """Before: ``pointgeope report: ... ImportError: ... PyCapsule_Import could not import module
    "datetime"``, a traceback of numpy's, for a Ctrl-C 0.1 s after the start; it is the stop's one line now.
    An ImportError without a stop before it is still a bug (its traceback)."""
    run = [sys.executable, "-c", STOP_IN_NUMPYS_IMPORT, "datetime", "report", str(tmp_path / "run"),
           "--out", str(tmp_path / "out")]
    done = subprocess.run(run, capture_output=True, text=True, timeout=120, check=False)
    assert (done.returncode, done.stderr) == (130, "pointgeope report: interrupted\n")
    with pytest.raises(ImportError):
        run_command("pointgeope x", _raise(ImportError("a bug")))


class _StoppedHere:
    """A descriptor whose ``__set_name__`` a Ctrl-C reaches: Python 3.11 raises ``RuntimeError: Error calling
    __set_name__`` from the stop (``platform.uname_result`` as torch is imported, 0.07 s into train.py)."""

    def __set_name__(self, owner, name):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # the handler runs at one of these bytecodes
            pass


# A module whose import a Ctrl-C cut, left half made by a library that swallowed the stop: what imports it
# next fails on what is missing (numpy.ctypeslib's "module 'numpy' has no attribute 'dtype'", 0.26 s into train.py).
HALF_MADE = """
import os, signal
try:
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(1000):
        pass
except KeyboardInterrupt:
    pass
raise AttributeError("module 'numpy' has no attribute 'dtype'")
"""


def test_an_error_a_stop_was_turned_into_is_the_stop_and_a_bug_during_a_stop_is_a_bug(capsys, tmp_path,
                                                                                      monkeypatch):
    def class_made():
        class Owner:
            attr = _StoppedHere()

    assert run_command("pointgeope x", class_made) == 130
    assert capsys.readouterr().err == "pointgeope x: interrupted\n"
    (tmp_path / "half_made_by_a_stop.py").write_text(HALF_MADE)
    monkeypatch.syspath_prepend(str(tmp_path))

    def imports():
        import half_made_by_a_stop  # noqa: F401

    assert run_command("pointgeope x", imports) == 130
    assert capsys.readouterr().err == "pointgeope x: interrupted\n"

    def cleanup_bug():  # a stop, then a bug of a finally block: its context is the stop, not its cause
        try:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):
                pass
        finally:
            raise ValueError("a bug while stopping")

    with pytest.raises(ValueError, match="a bug while stopping"):
        run_command("pointgeope x", cleanup_bug)
    with pytest.raises(RuntimeError):  # no stop came: a bug
        run_command("pointgeope x", _raise(RuntimeError("a bug")))
