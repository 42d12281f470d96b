"""pointgeope/program.py: a stop that comes after the command, while its process exits, is said as a stop
during the command is (one line, exit code 130 or 143), the exit runs to its end, and nothing holds it."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO

# A process whose command (`work`) returns at once, leaving what the test names behind it; run_program ends it.
PROGRAM = """
import os, signal, sys, threading, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from pointgeope.program import run_program

marker = Path(sys.argv[1])

def in_exit():
    # the main thread waits in Python's exit for the threads that are not daemons
    main = threading.main_thread().ident
    while sys._current_frames()[main].f_code.co_name != "_shutdown":
        time.sleep(0.01)

{body}

sys.exit(run_program("prog", work))
"""


def _run(body: str, tmp_path, timeout: float = 60) -> tuple[subprocess.CompletedProcess, str]:
    marker = tmp_path / "marker"
    done = subprocess.run([sys.executable, "-c", PROGRAM.format(body=textwrap.dedent(body)), str(marker)],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout)
    return done, marker.read_text() if marker.exists() else ""


def _one_line(err: str, line: str) -> None:
    assert err.splitlines() == [line], err[-2000:]


def test_an_idle_thread_pool_worker_does_not_hold_the_exit(tmp_path):
    """An executor left open (torch.compile's, with a cold cache) keeps an idle worker thread that is not a
    daemon; Python's exit tells it to end before joining it. The exit of run_program, which joins the
    threads itself, must too, or the process waits forever (the timeout fails the test)."""
    done, _ = _run("""
        def work():
            pool = ThreadPoolExecutor(2)
            assert pool.submit(lambda: 6 * 7).result() == 42
            return 0
        """, tmp_path, timeout=30)
    assert (done.returncode, done.stderr) == (0, "")


@pytest.mark.parametrize("sig, code, word", [("SIGTERM", 143, "terminated"), ("SIGINT", 130, "interrupted")])
def test_a_stop_while_the_exit_waits_for_a_thread_is_said_and_the_thread_finishes(tmp_path, sig, code, word):
    """A stop after the command, while the exit joins a thread still writing, lets the thread finish and
    ends the process with the stop's line and code. Before, SIGTERM killed it there (status -15, no line),
    and Ctrl-C printed a traceback from the threading module."""
    done, marker = _run(f"""
        def finish_writing():
            in_exit()
            os.kill(os.getpid(), signal.{sig})
            time.sleep(0.3)
            marker.write_text("written")

        def work():
            threading.Thread(target=finish_writing).start()
            return 0
        """, tmp_path)
    assert done.returncode == code, done.stderr[-2000:]
    _one_line(done.stderr, f"prog: {word}")
    assert marker == "written"


@pytest.mark.parametrize("sig, code, word", [("SIGTERM", 143, "terminated"), ("SIGINT", 130, "interrupted")])
def test_a_stop_in_an_atexit_callback_is_said_once_the_callback_ends(tmp_path, sig, code, word):
    """A stop while the atexit callbacks run: the callback runs to its end, then the stop's line and code.
    Before, SIGTERM killed the process (-15) and Ctrl-C printed a traceback and ended it with code 0."""
    done, marker = _run(f"""
        import atexit

        def callback():
            os.kill(os.getpid(), signal.{sig})
            time.sleep(0.3)
            marker.write_text("the callback ran on")

        def work():
            atexit.register(callback)
            return 0
        """, tmp_path)
    assert done.returncode == code, done.stderr[-2000:]
    _one_line(done.stderr, f"prog: {word}")
    assert marker == "the callback ran on"


def test_a_second_stop_ends_an_exit_that_waits_on_a_thread_that_never_ends(tmp_path):
    """The first stop is only noted, so that what the exit still runs is not cut short; a second one is the
    way out of a thread that never ends: the process ends, with one line (no traceback) and 143."""
    done, marker = _run("""
        def forever():
            in_exit()
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.5)
            marker.write_text("stopped twice")
            os.kill(os.getpid(), signal.SIGTERM)
            while True:
                time.sleep(0.05)

        def work():
            threading.Thread(target=forever).start()
            return 0
        """, tmp_path, timeout=30)
    assert done.returncode == 143, done.stderr[-2000:]
    _one_line(done.stderr, "prog: terminated")
    assert marker == "stopped twice"


def test_a_command_stopped_before_its_end_says_it_once(tmp_path):
    """A stop during the command: its line and code as before; the exit adds no second line."""
    done, _ = _run("""
        def work():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
            return 0
        """, tmp_path)
    assert done.returncode == 143, done.stderr[-2000:]
    _one_line(done.stderr, "prog: terminated")
