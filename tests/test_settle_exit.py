"""pointgeope.errors.settle_exit: how a command's process ends after its line: a second Ctrl-C while exiting is
ignored, a stop that cut code run by ``exec`` still ends with the command's exit code, and a Ctrl-C as the
interpreter exits (atexit, a thread) is one line, said only by the process's own command line."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("code,survives", [(130, True), (143, True), (0, False)])
def test_after_an_interruption_a_second_ctrl_c_is_ignored_while_exiting(code, survives):
    """The trial of a killed ``ablate`` logged its one line, then a second SIGINT during the interpreter's
    shutdown printed a KeyboardInterrupt traceback from one of torch's finalizers after it (CI)."""
    script = ("import os, signal\nfrom pointgeope.errors import settle_exit\n"
              f"settle_exit({code})\nos.kill(os.getpid(), signal.SIGINT)\nprint('alive')")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert (done.returncode == 0 and done.stdout == "alive\n") is survives, done.stderr[-2000:]
    assert ("KeyboardInterrupt" in done.stderr) is not survives


@pytest.mark.parametrize("source, code, word", [("raise KeyboardInterrupt", 130, "interrupted"),
                                                ("raise UserError('bad')", 2, "error: bad")])
def test_a_stop_caught_inside_code_exec_ran_ends_with_the_exit_code(tmp_path, source, code, word):
    """A Ctrl-C that cut code run by ``exec`` of a string (a dataclass's generated methods as torch is
    imported) left CPython's note of an unhandled KeyboardInterrupt, caught or not: ``python -m pointgeope``
    then said its line and ended by SIGINT (a parent saw -2, not 130), 4 of 80 Ctrl-Cs in ``train``'s first
    2 s. Whatever ends the command after it, the exit code is the command's."""
    (tmp_path / "exec_stop.py").write_text(
        "import sys\nfrom pointgeope.errors import UserError, run_command, settle_exit\n\n"
        "def command():\n    try:\n        exec('raise KeyboardInterrupt')\n    except KeyboardInterrupt:\n"
        f"        {source}\n\nsys.exit(settle_exit(run_command('prog', command)))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    done = subprocess.run([sys.executable, "-m", "exec_stop"], capture_output=True, text=True, timeout=120, env=env,
                          check=False)
    assert (done.returncode, done.stderr) == (code, f"prog: {word}\n")


# A command that ends well, then a Ctrl-C as the interpreter exits: in an atexit callback, or while the exit
# waits for a thread not ended yet (which sends it).
CTRL_C_AT_EXIT = """import atexit, os, signal, sys, threading, time
from pointgeope.errors import run_command, settle_exit

def command():
    if sys.argv[1] == "thread":
        threading.Thread(target=lambda: (time.sleep(0.3), os.kill(os.getpid(), signal.SIGINT), time.sleep(1))).start()
    return 0

if sys.argv[1] == "atexit":
    atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), sum(range(10**6))))
sys.exit(settle_exit(run_command("prog", command), "prog"))
"""


@pytest.mark.parametrize("where", ["atexit", "thread"])
def test_a_ctrl_c_as_the_process_exits_is_one_line_and_the_commands_exit_code(tmp_path, where):
    """After the command's last file, Python printed the traceback of the KeyboardInterrupt it could not raise
    ("Exception ignored in: <module 'threading'>", "... in atexit callback"), as if of a bug."""
    (tmp_path / "ctrl_c_at_exit.py").write_text(CTRL_C_AT_EXIT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    done = subprocess.run([sys.executable, "-m", "ctrl_c_at_exit", where], capture_output=True, text=True, timeout=120,
                          env=env, check=False)
    line = "prog: Ctrl-C after the command had ended: nothing is lost (exit code 0)\n"
    assert (done.returncode, done.stderr) == (0, line)


def test_only_the_processs_own_command_line_says_a_ctrl_c_after_its_end(monkeypatch, tmp_path, capsys):
    """``main(argv)`` called with a list (a caller's, in a process that goes on) leaves sys.unraisablehook as
    it is; ``main()`` (the process's command line, ``sys.argv``) is followed by the process's exit."""
    from pointgeope.cli import main

    hook = sys.unraisablehook
    monkeypatch.setattr(sys, "unraisablehook", hook)  # put back after the test
    assert main(["report", str(tmp_path / "no_run")]) == 2 and sys.unraisablehook is hook
    monkeypatch.setattr(sys, "argv", ["pointgeope", "report", str(tmp_path / "no_run")])
    assert main() == 2 and sys.unraisablehook is not hook
    assert capsys.readouterr().err.count("pointgeope report: error: ") == 2
