"""The viewer's window (pointgeope/viz/xdisplay.py, ``render.show``/``run_window``): refused in one line where
nobody could see it (Open3D opened it offscreen and never returned), and ended by Ctrl-C or SIGTERM."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pointgeope.viz.xdisplay import LIBX11, window_problem

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the window's display is X11's (Linux)")


def _free_display() -> str:
    """An X display number that no local server holds (no socket in /tmp/.X11-unix, no lock file)."""
    n = next(n for n in range(171, 999) if not Path(f"/tmp/.X11-unix/X{n}").exists()
             and not Path(f"/tmp/.X{n}-lock").exists())
    return f":{n}"


def _libx11() -> None:
    import ctypes

    try:
        ctypes.CDLL(LIBX11)
    except OSError:
        pytest.skip(f"{LIBX11} is not installed: the display is not probed")


def _env(**values) -> dict[str, str]:
    """This process's environment without its display, plus ``values``; the child imports this tree."""
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY")}
    env.update(PYTHONPATH=str(Path(__file__).resolve().parents[2]), PYTHONUNBUFFERED="1", **values)
    return env


@linux
def test_window_problem_names_each_display_nobody_sees():
    _libx11()
    free = _free_display()
    assert window_problem({"WAYLAND_DISPLAY": "wayland-0"}) == (
        "the viewer window needs a display (DISPLAY is not set) (WAYLAND_DISPLAY alone is not enough: Open3D's "
        "window needs X11, e.g. XWayland); use --screenshot PNG to render without a window, or run on a desktop "
        "/ over `ssh -X`")
    assert window_problem({"DISPLAY": ":99", "XAUTHORITY": "/tmp/xvfb-run.Ab12Cd/Xauthority"}) == (
        "the viewer window would open on DISPLAY=':99', the virtual screen of xvfb-run, which nobody sees, and "
        "never end; use --screenshot PNG to render without a window (xvfb-run -a pointgeope viz ... "
        "--screenshot view.png)")
    assert window_problem({"DISPLAY": free}) == (
        f"the viewer window cannot open DISPLAY={free!r} (no X server answers there, or it refuses this user: a "
        "stale DISPLAY after ssh without -X?); use --screenshot PNG to render without a window, or set DISPLAY "
        "to a display you see")


@linux
def test_a_display_that_opens_is_taken():
    _libx11()
    from pointgeope.viz import render

    if not render.shutil.which("Xvfb"):
        pytest.skip("Xvfb is not installed (apt-get install xvfb)")
    display = render._start_xvfb(64, 48)
    assert window_problem({"DISPLAY": display}) is None
    assert window_problem({"DISPLAY": display, "XAUTHORITY": "/home/me/.Xauthority"}) is None


@linux
def test_the_xvfb_started_here_does_not_reset_when_its_last_client_leaves(monkeypatch):
    """An X server resets when its last client leaves (xkbcomp compiles its keymap again) and the next client
    waits for it: the second probe of the test above, alone on its server, waited over 10 s once on a loaded
    machine and was told no server answers. A reset forgets the atoms the clients made: the second client here
    finds the first one's."""
    import ctypes

    _libx11()
    from pointgeope.viz import render

    if not render.shutil.which("Xvfb"):
        pytest.skip("Xvfb is not installed (apt-get install xvfb)")
    xlib = ctypes.CDLL(LIBX11)
    xlib.XOpenDisplay.restype, xlib.XOpenDisplay.argtypes = ctypes.c_void_p, [ctypes.c_char_p]
    xlib.XCloseDisplay.argtypes = [ctypes.c_void_p]
    xlib.XInternAtom.restype, xlib.XInternAtom.argtypes = ctypes.c_ulong, [ctypes.c_void_p, ctypes.c_char_p,
                                                                          ctypes.c_int]
    monkeypatch.setattr(render, "_XVFB", {})  # a server of its own: no client of another test holds it
    display = render._start_xvfb(64, 48).encode()
    try:
        atoms = []
        for only_if_exists in (0, 1):                                # make it, then look it up
            handle = xlib.XOpenDisplay(display)
            assert handle, display
            atoms.append(xlib.XInternAtom(handle, b"POINTGEOPE_MADE_BY_A_CLIENT", only_if_exists))
            xlib.XCloseDisplay(handle)
        assert atoms[0] != 0 and atoms[1] == atoms[0]                # 0: gone, the server had reset
    finally:
        render._stop_xvfb()


@linux
def test_a_display_that_does_not_answer_is_said_to_be_silent_not_absent():
    """A display that accepts the connection and says nothing (a server too busy, or a remote one out of reach)
    was refused as one where "no X server answers there, or it refuses this user"."""
    import socket

    _libx11()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:  # X11 over TCP: port 6000 + display
        number = next(n for n in range(171, 999) if _bound(server, 6000 + n))
        server.listen(1)                                               # the kernel accepts; nobody answers
        display = f"127.0.0.1:{number}"
        assert window_problem({"DISPLAY": display}, timeout=0.5) == (
            f"the viewer window's display DISPLAY={display!r} did not answer within 0.5 s (a remote display out "
            "of reach, or a server too busy to answer); use --screenshot PNG to render without a window, or try "
            "again once it answers")


@linux
def test_a_display_whose_bytes_are_not_utf8_is_refused_at_once_without_a_traceback(monkeypatch):
    """``DISPLAY=$'\\xff:0'`` reads back in Python with a surrogate; the probe's ``encode()`` raised in its thread
    (a traceback on stderr) and the display was said not to answer within the limit, 0.01 s after the start."""
    import threading

    _libx11()
    failures = []
    monkeypatch.setattr(threading, "excepthook", failures.append)
    display = os.fsdecode(b"\xff" + _free_display().encode())
    assert window_problem({"DISPLAY": display}, timeout=5) == (
        f"the viewer window cannot open DISPLAY={display!r} (no X server answers there, or it refuses this user: a "
        "stale DISPLAY after ssh without -X?); use --screenshot PNG to render without a window, or set DISPLAY "
        "to a display you see")
    assert failures == []


def _bound(sock, port: int) -> bool:
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        return False
    return True


@linux
def test_window_mode_without_a_visible_display_is_refused_not_hung(synthetic_area):
    """Before: Open3D fell back to an offscreen EGL window, and `viz` blocked forever, deaf to Ctrl-C. The window
    asks ``window_problem`` first whatever the display; its line for each display nobody sees (xvfb-run's, a
    Wayland one alone, one that does not open) is test_window_problem_names_each_display_nobody_sees's. Here a
    real `viz` of a display that does not open: the X probe of its own process, exit code 2 and that one line."""
    pytest.importorskip("open3d", reason="Open3D is not installed")
    _libx11()
    area, free = synthetic_area[0], _free_display()
    try:
        done = subprocess.run([sys.executable, "-m", "pointgeope", "viz", str(area), "--room", "tiny_2"],
                              env=_env(DISPLAY=free), capture_output=True, text=True, timeout=90, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("viz did not return: it waits on a window nobody sees")
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert line.startswith(f"pointgeope viz: error: the viewer window cannot open DISPLAY={free!r} ")
    assert "use --screenshot PNG" in line and "\n" not in line


# Runs `pointgeope viz` with Open3D's window class wrapped so that it says when its loop starts (vis.run()
# or the first vis.poll_events()).
WINDOW = """
import open3d, sys
Real = open3d.visualization.VisualizerWithKeyCallback
class Window:  # Open3D's class, saying when its window loop starts (pybind11 classes take no subclass)
    def __init__(self):
        self.real, self.started = Real(), False
    def __getattr__(self, name):
        return getattr(self.real, name)
    def started_loop(self):
        if not self.started:
            self.started = True
            print("window loop", flush=True)
    def run(self):  # Open3D's own loop
        self.started_loop()
        return self.real.run()
    def poll_events(self):  # a loop of Python's
        self.started_loop()
        return self.real.poll_events()
open3d.visualization.VisualizerWithKeyCallback = Window
sys.argv = ["pointgeope", "viz", *sys.argv[1:]]
from pointgeope.cli import main
sys.exit(main())
"""


@linux
@pytest.mark.parametrize("signum, code, said", [(signal.SIGTERM, 143, "terminated"),
                                                (signal.SIGINT, 130, "interrupted")])
def test_ctrl_c_and_sigterm_close_an_open_window(synthetic_area, signum, code, said):
    """Before: Open3D's loop held the main thread in C++, where Python's handlers never ran: Ctrl-C and
    SIGTERM left the window open (only closing it or SIGKILL ended viz)."""
    pytest.importorskip("open3d", reason="Open3D is not installed")
    _libx11()
    from pointgeope.viz import render

    if not render.shutil.which("Xvfb"):
        pytest.skip("Xvfb is not installed (apt-get install xvfb)")
    area, _ = synthetic_area
    env = _env(DISPLAY=render._start_xvfb(64, 48))  # an X server of its own, not xvfb-run's
    proc = subprocess.Popen([sys.executable, "-c", WINDOW, str(area), "--room", "tiny_2", "--width", "64",
                             "--height", "48"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # noqa: PLW1509
    try:
        for line in proc.stdout:
            if line.strip() == "window loop":
                break
        else:
            pytest.fail(f"no window loop: {proc.wait()} {proc.stderr.read()}")
        time.sleep(1.0)  # inside Open3D's loop
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail(f"viz went on after signal {signum.name}: the window loop ran no signal handler")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code and err.strip().splitlines()[-1] == f"pointgeope viz: {said}", err
