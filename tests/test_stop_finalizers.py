"""pointgeope/stop_finalizers.py: a stop (Ctrl-C, SIGTERM) whose handler runs inside a finalizer or inside
llvmlite's making or closing of an LLVM object (numba compiling) waits for the end of that code, then ends the
command as any stop does (one line, exit code 130 or 143).

A stop is simulated where Python would run its handler: the handler is called with the frame of that bytecode,
as CPython calls it."""
from __future__ import annotations

import inspect
import signal
import subprocess
import sys
import threading
import time

import pytest

from pointgeope.errors import run_command
from pointgeope.stop_finalizers import PATIENCE_S
from tests.dropped_stop import IMPORT_LINE


def _handler_runs_here(signum: int, frame) -> None:
    """What Python does when the signal ``signum`` arrives as ``frame`` runs: its handler, called with that frame."""
    signal.getsignal(signum)(signum, frame)


def _runs_on() -> None:
    """Bytecodes for 2 s at most, where a stop sent again lands."""
    for _ in range(2000):
        time.sleep(0.001)


@pytest.mark.parametrize(("sig", "code", "word"), [(signal.SIGINT, 130, "interrupted"),
                                                   (signal.SIGTERM, 143, "terminated")])
def test_a_stop_inside_a_finalizer_lets_it_end_then_stops_the_command(sig, code, word, capsys):
    """Before: the stop was raised inside ``__del__``, which Python drops: the finalizer was cut after its first
    step (its object left half closed), and the stop, delivered again, ended the command."""
    steps = []

    class Closing:
        def __del__(self):
            steps.append("begun")
            _handler_runs_here(sig, sys._getframe())
            steps.append("ended")

    def command() -> int:
        Closing()  # freed at once: its __del__ runs here
        steps.append("freed")
        _runs_on()
        return 0

    assert run_command("prog", command) == code
    assert steps == ["begun", "ended", "freed"]
    assert capsys.readouterr().err == f"prog: {word}\n"


@pytest.mark.parametrize(("sig", "code", "word"), [(signal.SIGINT, 130, "interrupted"),
                                                   (signal.SIGTERM, 143, "terminated")])
def test_a_finalizer_that_waits_holds_a_stop_for_patience_s_at_most(sig, code, word, capsys):
    """A real signal, handled inside a finalizer that then waits 8 s (a thread's join; one that never ends would wait
    for ever). Before: the stop waited for the finalizer's end (8 s; for ever, a second Ctrl-C and SIGTERM too). It is
    now raised there after PATIENCE_S, as before the wait existed: the finalizer cut, the stop delivered again."""
    steps = []

    class Waiting:
        def __del__(self):
            steps.append("begun")
            signal.pthread_kill(threading.main_thread().ident, sig)  # its handler runs at the next bytecode: here
            threading.Event().wait(8)
            steps.append("ended")

    def command() -> int:
        Waiting()
        steps.append("freed")
        _runs_on()
        return 0

    start = time.monotonic()
    assert run_command("prog", command) == code
    assert time.monotonic() - start < PATIENCE_S + 3  # (a loaded machine)
    assert steps == ["begun", "freed"]
    assert capsys.readouterr().err == f"prog: {word}\n"


def test_a_stop_elsewhere_is_raised_at_once(capsys):
    steps = []

    def command() -> int:
        steps.append("begun")
        _handler_runs_here(signal.SIGINT, sys._getframe())
        steps.append("ended")
        return 0

    assert run_command("prog", command) == 130
    assert steps == ["begun"]
    assert capsys.readouterr().err == "prog: interrupted\n"


# A stop whose handler runs in llvmlite's ObjectRef.__init__, after self._ptr = ptr and before self._as_parameter_
# = ptr (where a Ctrl-C landed as numba compiled: its first compile makes the global context this way), then the
# command runs on for up to 2 s.
LLVMLITE_CUT = IMPORT_LINE + """
import signal, sys, time
from llvmlite import binding
from llvmlite.binding import ffi
from pointgeope.errors import run_command, settle_exit

init, line = ffi.ObjectRef.__init__.__code__, int(sys.argv[1])

def at_line(frame, event, arg):
    if event == "line" and frame.f_lineno == line:
        sys.settrace(None)
        signal.getsignal(signal.SIGINT)(signal.SIGINT, frame)
    return at_line

def command():
    sys.settrace(lambda frame, event, arg: at_line if frame.f_code is init else None)
    try:
        binding.parse_assembly("define i32 @f() {\\n  ret i32 1\\n}")
    finally:
        sys.settrace(None)
    for _ in range(2000):
        time.sleep(0.001)
    return 0

sys.exit(settle_exit(run_command("prog", command)))
"""


def test_a_stop_while_llvmlite_makes_an_object_leaves_no_error_at_exit():
    """Before: "prog: interrupted", then, as the half-made object was freed, "Exception ignored in: <function
    ObjectRef.__del__ ...> ... AttributeError: 'GlobalContextRef' object has no attribute '_as_parameter_'"."""
    ffi = pytest.importorskip("llvmlite.binding.ffi")
    source, first = inspect.getsourcelines(ffi.ObjectRef.__init__)
    lines = [first + i for i, text in enumerate(source) if text.strip() == "self._as_parameter_ = ptr"]
    if not lines:
        pytest.skip("llvmlite's ObjectRef.__init__ no longer sets _as_parameter_ as this test expects")
    done = subprocess.run([sys.executable, "-c", LLVMLITE_CUT, str(lines[0])], capture_output=True, text=True,
                          timeout=120, check=False)
    assert (done.returncode, done.stderr) == (130, "prog: interrupted\n")
