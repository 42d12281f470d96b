"""Whether the viewer's window can be seen: the X display it would open on, checked before Open3D.

Open3D's window is an X11 (GLFW) window. Where GLFW cannot open the display (``DISPLAY`` names no reachable
server: a stale ``DISPLAY`` after ``ssh`` without X forwarding, a container that inherits one; or only
``WAYLAND_DISPLAY`` is set), Open3D >= 0.19 falls back to an EGL offscreen context without telling the
caller: ``create_window`` succeeds and the window loop runs forever on a window nobody can see or close.
So the display is opened here first, with libX11's ``XOpenDisplay`` (what GLFW does), in a thread with a
time limit (a remote display that does not answer blocks in ``connect``). A display that refuses at once (no
server there, or not this user) and one still silent at the limit (out of reach, or too busy) get lines of
their own: the second is not told that no server is there. A display that refuses the
connection for want of authorisation makes libxcb itself print ``Authorization required, but no
authorization protocol specified`` on stderr, beside the command's one line: it comes from C inside the probe
and is left there (redirecting file descriptor 2 would race with the other threads). libX11 reads
``XAUTHORITY`` from the process's environment, not from ``environ``, which only gives ``DISPLAY`` and the
xvfb-run pattern below.

A virtual X server is a real one, and a window opens there; but one started by ``xvfb-run`` (which points
``XAUTHORITY`` at ``<tmp>/xvfb-run.XXXXXX/Xauthority``) is seen by nobody, so the window would never be
closed: refused too, with ``--screenshot`` as the way to render there. A virtual server started otherwise
(``Xvfb :N &``, a VNC desktop) is taken: its window may be looked at, and Ctrl-C ends it.
"""
from __future__ import annotations

import ctypes
import os
import re
import sys
import threading

PROBE_TIMEOUT_S = 10.0
LIBX11 = "libX11.so.6"
_XVFB_RUN_AUTH = re.compile(r".*/xvfb-run\.[^/]+/Xauthority")
USE_SCREENSHOT = "use --screenshot PNG to render without a window"


OPENED, REFUSED, SILENT = "opened", "refused", "silent"  # what the probe of a display found


def _opens(display: str, timeout: float) -> str | None:
    """What libX11's ``XOpenDisplay(display)`` did within ``timeout`` seconds: :data:`OPENED`, :data:`REFUSED`
    (it returned NULL: no server there, or one that refuses this user) or :data:`SILENT` (no answer yet);
    ``None`` where libX11 cannot be loaded (no probe: Open3D says what it finds)."""
    try:
        xlib = ctypes.CDLL(LIBX11)
    except OSError:
        return None
    xlib.XOpenDisplay.restype, xlib.XOpenDisplay.argtypes = ctypes.c_void_p, [ctypes.c_char_p]
    xlib.XCloseDisplay.argtypes = [ctypes.c_void_p]
    found: list[str] = []

    def probe() -> None:   # the environment's bytes (fsencode: a DISPLAY not UTF-8 reads back with surrogates)
        handle = xlib.XOpenDisplay(os.fsencode(display))
        if handle:
            xlib.XCloseDisplay(handle)
        found.append(OPENED if handle else REFUSED)

    thread = threading.Thread(target=probe, name="x-display-probe", daemon=True)
    thread.start()
    thread.join(timeout)  # ctypes lets go of the GIL: Ctrl-C still ends the wait
    waiting = thread.is_alive()   # (asked before found is read: a probe that ends meanwhile has filled it)
    return found[0] if found else SILENT if waiting else REFUSED   # ended without a word: it failed at once


def window_problem(environ=None, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why the viewer's window could not be seen here (one line, saying what to do), or ``None``. Only
    Linux is checked (elsewhere the window is the system's own)."""
    env = os.environ if environ is None else environ
    if not sys.platform.startswith("linux"):
        return None
    display = env.get("DISPLAY")
    if not display:
        wayland = " (WAYLAND_DISPLAY alone is not enough: Open3D's window needs X11, e.g. XWayland)" \
            if env.get("WAYLAND_DISPLAY") else ""
        return (f"the viewer window needs a display (DISPLAY is not set){wayland}; {USE_SCREENSHOT}, "
                "or run on a desktop / over `ssh -X`")
    if _XVFB_RUN_AUTH.fullmatch(env.get("XAUTHORITY", "")):
        return (f"the viewer window would open on DISPLAY={display!r}, the virtual screen of xvfb-run, which "
                f"nobody sees, and never end; {USE_SCREENSHOT} (xvfb-run -a pointgeope viz ... --screenshot "
                "view.png)")
    found = _opens(display, timeout)
    if found == REFUSED:
        return (f"the viewer window cannot open DISPLAY={display!r} (no X server answers there, or it refuses "
                f"this user: a stale DISPLAY after ssh without -X?); {USE_SCREENSHOT}, or set DISPLAY to a "
                "display you see")
    if found == SILENT:
        return (f"the viewer window's display DISPLAY={display!r} did not answer within {timeout:g} s (a remote "
                f"display out of reach, or a server too busy to answer); {USE_SCREENSHOT}, or try again once it "
                "answers")
    return None
