"""The Open3D side of the viewer: a window with key-switchable colourings, and headless screenshots.

Open3D is imported inside these functions only (:func:`require_open3d`), so that the rest of
``pointgeope`` works without it. Rendering uses Open3D's window-based ``Visualizer`` with unlit points
(``render_option.light_on = False``): every pixel a point covers has exactly that point's colour.
``rendering.OffscreenRenderer`` (Filament) was tried and not used: on machines without a GPU it needs
EGL/Vulkan drivers and fails to start ("Failed to load vulkan library") where ``Visualizer`` works.

Headless (no ``DISPLAY``): :func:`headless_display` starts one ``Xvfb`` server for the process when it
is installed and points ``DISPLAY`` at it for the duration of the render; without Xvfb, Open3D >= 0.19
tries a headless EGL context (Mesa) by itself, and a clear error says what to install if that fails too.
The window (:func:`show`) is never headless: a display nobody sees is refused first
(:mod:`pointgeope.viz.xdisplay`).
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib.util
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from pointgeope.errors import UserError
from pointgeope.parent_death import death_signal_request
from pointgeope.viz import VizError
from pointgeope.viz.camera import Camera

INSTALL_HINT = ("install it with `pip install open3d` (on Debian/Ubuntu it also needs the system library "
                "libusb: `apt-get install libusb-1.0-0`)")
DISPLAY_HINT = ("install a virtual X server (`apt-get install xvfb`) or run under `xvfb-run -a`, "
                "or on a desktop set DISPLAY")
BACKGROUND = (255, 255, 255)
XVFB_START_TIMEOUT_S = 20
WINDOW_TICK_S = 0.02  # the window loop's pause between event polls, in which signal handlers run
# keys of the viewer: GLFW key codes of '1'..'4' are their ASCII codes
MODE_KEYS = {ord("1"): "rgb", ord("2"): "gt", ord("3"): "pred", ord("4"): "error"}


class Open3DMissing(UserError, ImportError):
    """Open3D, which the viewer's window and screenshots need, is not installed (or cannot load)."""


class DisplayError(UserError, RuntimeError):
    """No display, virtual X server or OpenGL context to draw in: the environment's, said with what to do."""


def require_open3d():
    """``import open3d``, or an ``ImportError`` that says how to install it. Triton's LLVM is loaded
    first (:func:`_triton_llvm_first`), so that torch works in the same process after a render."""
    _triton_llvm_first()
    try:
        import open3d
    except (ImportError, OSError) as err:  # OSError: the wheel is there but libusb-1.0 is missing
        raise Open3DMissing(f"pointgeope viz needs Open3D, which could not be imported ({err}); "
                          f"{INSTALL_HINT}") from err
    return open3d



def _triton_llvm_first() -> None:
    """Load Triton's compiler library (``triton/_C/libtriton.so``, which holds its own LLVM) into the
    process, where Triton is installed and the library not loaded yet. Open3D's OpenGL context on a machine
    without a GPU driver is Mesa's llvmpipe, whose driver Mesa opens with ``RTLD_GLOBAL``: the system's
    ``libLLVM`` (15 on Debian 12) joins the process's global symbols. A ``libtriton`` loaded after it binds
    its static initializers (``llvm::cl`` option registration) to that other LLVM and the process dies with
    SIGSEGV in ``llvm::StringMapImpl::LookupBucketFor``: any torch code that imports Triton after a render
    in one process (``torch._dynamo``, ``torch_geometric``, training; a notebook that renders, then
    trains). Loaded first, each library keeps its own LLVM. ``ctypes`` loads the file without running
    Triton's package (which reads ``TRITON_INTERPRET`` once, as it is imported); a later ``import
    triton`` finds the library loaded (about 0.1 s here, once). Nothing is done where Triton cannot load."""
    if "triton._C.libtriton" in sys.modules:
        return
    try:
        spec = importlib.util.find_spec("triton")
        folders = spec.submodule_search_locations if spec is not None else None
        for lib in sorted(Path(folders[0], "_C").glob("libtriton*.so")) if folders else []:
            ctypes.CDLL(str(lib))
    except (ImportError, OSError, ValueError):  # no Triton, or one that does not load: torch's concern
        return


# --- a display for headless rendering --------------------------------------------------------------------

_XVFB: dict = {}  # the Xvfb server started by this process: {"proc", "display", "size"}
_RUNTIME: dict[str, str] = {}  # {"runtime_dir": path} once made


def _start_xvfb(width: int, height: int) -> str:
    """Start ``Xvfb`` on a free display number (it writes the number to ``-displayfd``); return ``":N"``. The
    server ends with this process (:mod:`pointgeope.parent_death`): one that a killed or crashed viewer left
    ran on for good. Started from a thread other than the main one, it ends at the process's exit only (the
    kernel would end it with that thread). ``-noreset``: by default an X server resets when its last client
    leaves, compiling its keymap again with ``xkbcomp`` (two processes), and a client that comes meanwhile waits
    for it: the next render or display probe (0.1 s on an idle machine, more under load)."""
    old = _XVFB.get("proc")
    if old is not None and old.poll() is None:
        sw, sh = _XVFB["size"]
        if sw >= width and sh >= height:
            return _XVFB["display"]
        _stop_xvfb()
    size = (max(width, 1920), max(height, 1080))
    read_fd, write_fd = os.pipe()
    cmd = [shutil.which("Xvfb") or "Xvfb", "-displayfd", str(write_fd), "-screen", "0",
           f"{size[0]}x{size[1]}x24", "-nolisten", "tcp", "-noreset"]
    # SIGTERM to Xvfb when this process ends, however it ends (killed, crashed: the atexit stop does not run);
    # the request calls only prctl, looked up before the fork (safe in a threaded process). The kernel's
    # "parent" is the thread that forks: from another thread (a render in a thread pool), the server would end
    # with that thread, under the renders of this process's other threads; there it ends at exit only
    main = threading.current_thread() is threading.main_thread()
    proc = subprocess.Popen(cmd, pass_fds=(write_fd,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=death_signal_request(signal.SIGTERM) if main else None)  # noqa: PLW1509
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        ready, _, _ = select.select([pipe], [], [], XVFB_START_TIMEOUT_S)
        number = pipe.readline().strip() if ready else ""  # empty: Xvfb exited or hangs
    if not number.isdigit():
        proc.kill()
        proc.wait()
        raise DisplayError(f"Xvfb did not start within {XVFB_START_TIMEOUT_S} s (exit code {proc.poll()}); "
                           f"{DISPLAY_HINT}")
    _XVFB.update(proc=proc, display=f":{number}", size=size)
    return _XVFB["display"]


def _stop_xvfb() -> None:
    proc = _XVFB.pop("proc", None)
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    _XVFB.clear()


atexit.register(_stop_xvfb)


@contextlib.contextmanager
def _environ(**values: str) -> Iterator[None]:
    """Set environment variables inside the block only (restoring what was there)."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _runtime_dir() -> dict[str, str]:
    """``XDG_RUNTIME_DIR`` for the render when it is unset (a private temporary folder, removed at exit):
    without it GLFW prints "error: XDG_RUNTIME_DIR is invalid" on every window, which is harmless."""
    if os.environ.get("XDG_RUNTIME_DIR") or not sys.platform.startswith("linux"):
        return {}
    if "runtime_dir" not in _RUNTIME:
        import tempfile

        path = tempfile.mkdtemp(prefix="pointgeope-runtime-")  # mode 0700, as XDG requires
        atexit.register(shutil.rmtree, path, True)
        _RUNTIME["runtime_dir"] = path
    return {"XDG_RUNTIME_DIR": _RUNTIME["runtime_dir"]}


@contextlib.contextmanager
def headless_display(width: int, height: int) -> Iterator[str | None]:
    """Make sure OpenGL can render a ``width x height`` window; yields the display used.

    ``DISPLAY`` set (a desktop, ``xvfb-run``), or not Linux: nothing to do. Else, with ``Xvfb`` on the
    PATH: start it once for the process and set ``DISPLAY`` only inside this block. Else yield ``None``
    and let Open3D try a headless EGL context. ``XDG_RUNTIME_DIR`` is set inside the block if missing.
    """
    with _environ(**_runtime_dir()):
        if os.environ.get("DISPLAY") or not sys.platform.startswith("linux"):
            yield os.environ.get("DISPLAY")
        elif shutil.which("Xvfb") is None:
            yield None
        else:
            with _environ(DISPLAY=_start_xvfb(width, height)):
                yield os.environ["DISPLAY"]


# --- drawing ---------------------------------------------------------------------------------------------

def _point_cloud(o3d, coord: np.ndarray, colors: np.ndarray):
    pcd = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(np.asarray(coord, dtype=np.float64)))
    pcd.colors = o3d.utility.Vector3dVector(np.asarray(colors, dtype=np.float64) / 255.0)
    return pcd


def _configure(vis, point_size: float, background=BACKGROUND) -> None:
    opt = vis.get_render_option()
    opt.light_on = False                      # flat colours: no shading of the points
    opt.point_size = float(point_size)
    opt.background_color = np.asarray(background, dtype=np.float64) / 255.0


def apply_camera(o3d, vis, camera: Camera) -> None:
    """Set the view of ``vis`` to ``camera`` (the window must have the camera's size)."""
    params = o3d.camera.PinholeCameraParameters()
    params.intrinsic = o3d.camera.PinholeCameraIntrinsic(camera.width, camera.height, camera.focal,
                                                         camera.focal, camera.cx, camera.cy)
    params.extrinsic = np.asarray(camera.extrinsic, dtype=np.float64)
    if not vis.get_view_control().convert_from_pinhole_camera_parameters(params, allow_arbitrary=True):
        raise RuntimeError(f"Open3D refused the camera {camera!r}")


def render_image(coord: np.ndarray, colors: np.ndarray, camera: Camera, point_size: float = 2.0,
                 background=BACKGROUND) -> np.ndarray:
    """Render points ``coord (N, 3)`` in ``colors uint8 (N, 3)`` seen by ``camera``, without showing a
    window; returns the image ``uint8 (H, W, 3)``, row 0 at the top."""
    o3d = require_open3d()
    with headless_display(camera.width, camera.height):
        vis = o3d.visualization.Visualizer()
        if not vis.create_window(window_name="pointgeope", width=camera.width, height=camera.height,
                                 visible=False):
            raise DisplayError(f"Open3D could not open an OpenGL context (DISPLAY={os.environ.get('DISPLAY')!r}); "
                               f"{DISPLAY_HINT}")
        try:
            vis.add_geometry(_point_cloud(o3d, coord, colors))
            _configure(vis, point_size, background)
            apply_camera(o3d, vis, camera)
            vis.poll_events()
            vis.update_renderer()
            buffer = np.asarray(vis.capture_screen_float_buffer(do_render=True))
        finally:
            vis.destroy_window()
    if buffer.shape != (camera.height, camera.width, 3):
        raise DisplayError(f"Open3D returned an image of shape {buffer.shape}, expected "
                           f"({camera.height}, {camera.width}, 3); is the screen smaller than the window?")
    return np.clip(np.rint(buffer * 255.0), 0, 255).astype(np.uint8)


# The --screenshot formats, by suffix: those PIL writes as one RGB image of any size the renderer makes
# (8 to 16384 pixels a side). PNG, BMP and TIFF keep every pixel's colour; JPEG is lossy (colours of
# the points blend at their edges). Left out: WebP (at most 16383 pixels a side), ICO (at most 256, it
# shrank the image), and formats PIL registers but cannot write as RGB (XBM, MSP, Palm) or not at all
# (HDF5, GRIB, BUFR stubs).
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")


def check_image_path(path) -> None:
    """Refuse, before any rendering, a ``--screenshot`` that is a folder or whose suffix is not one of
    :data:`IMAGE_SUFFIXES` (the format is taken from it): a :class:`VizError` saying what to give."""
    from pathlib import Path

    path = Path(path)
    if path.is_dir() or str(path).endswith(("/", os.sep)):
        raise VizError(f"--screenshot {path}: expected an image file name such as {path / 'view.png'}, "
                         "got a folder")
    if path.suffix.lower() not in IMAGE_SUFFIXES:
        raise VizError(f"--screenshot {path}: expected an image file name ending in .png (or "
                       f"{', '.join(IMAGE_SUFFIXES[1:])}), got {path.suffix or 'no suffix'!r}")


def save_image(image: np.ndarray, path) -> None:
    """Write ``uint8 (H, W, 3)`` to ``path`` (format from the suffix, e.g. PNG), atomically, through a file
    without a name until the rename (:func:`pointgeope.atomic.atomic_unnamed`): viz holds no lock on the
    folder, so no rerun could clear the temporary file a ``kill -9`` left."""

    from PIL import Image

    from pointgeope.atomic import atomic_unnamed

    image_format = Image.registered_extensions().get(Path(path).suffix.lower())  # an IMAGE_SUFFIXES one (checked)
    with atomic_unnamed(path) as f:
        Image.fromarray(np.ascontiguousarray(image)).save(f, format=image_format, optimize=True)


def mode_callbacks(o3d, pcd, colors_by_mode: dict[str, np.ndarray], *, missing: dict[str, str],
                   announce: Callable[[str], None] = print) -> dict[int, Callable]:
    """Key code -> callback ``fn(vis) -> bool`` that recolours ``pcd`` in that key's mode. A mode of
    ``missing`` (:func:`~pointgeope.viz.colors.missing_modes`: ``pred`` without predictions, ``gt`` and
    ``error`` without ground truth; those absent from ``colors_by_mode``) changes nothing and announces why
    in one line, the reason ``missing[mode]``."""
    def make(mode: str):
        def callback(vis) -> bool:
            if mode in missing:
                announce(f"mode {mode}: not available ({missing[mode]})")
                return False
            pcd.colors = o3d.utility.Vector3dVector(colors_by_mode[mode].astype(np.float64) / 255.0)
            vis.update_geometry(pcd)
            announce(f"mode {mode}")
            return True
        return callback
    return {key: make(mode) for key, mode in MODE_KEYS.items()}


def show(coord: np.ndarray, colors_by_mode: dict[str, np.ndarray], mode: str, camera: Camera,
         point_size: float = 2.0, title: str = "pointgeope", *, missing: dict[str, str]) -> None:
    """Open a window on the points, coloured by ``mode``; keys 1..4 switch modes (those of ``missing``, not
    in ``colors_by_mode``, say why in one line instead). Blocks until closed, or until Ctrl-C or SIGTERM,
    whose exception closes the window on its way out (:func:`run_window`). A window nobody could see (no X display that
    opens, xvfb-run's virtual screen: :func:`~pointgeope.viz.xdisplay.window_problem`) is refused first:
    Open3D would open it offscreen and never return."""
    from pointgeope.viz.xdisplay import window_problem

    o3d = require_open3d()
    problem = window_problem()
    if problem:
        raise DisplayError(problem)
    with _environ(**_runtime_dir()):
        vis = o3d.visualization.VisualizerWithKeyCallback()
        if not vis.create_window(window_name=title, width=camera.width, height=camera.height):
            raise DisplayError(f"Open3D could not open a window on DISPLAY={os.environ.get('DISPLAY')!r}")
        try:
            pcd = _point_cloud(o3d, coord, colors_by_mode[mode])
            vis.add_geometry(pcd)
            _configure(vis, point_size)
            apply_camera(o3d, vis, camera)
            for key, callback in mode_callbacks(o3d, pcd, colors_by_mode, missing=missing).items():
                vis.register_key_callback(key, callback)
            run_window(vis)
        finally:
            vis.destroy_window()


def run_window(vis, tick_s: float = WINDOW_TICK_S) -> None:
    """Run the window of ``vis`` until it is closed, or until Ctrl-C or SIGTERM (their exception, which
    ``show`` lets through after closing the window). ``vis.run()`` waits for window events in C++, where
    Python runs no signal handler: Ctrl-C and ``kill`` did nothing until the window was closed. Here the
    loop is Python's: ``vis.poll_events()`` handles the events that came (and redraws only when something
    changed), then a ``tick_s`` sleep, in which a signal's handler runs. (An animation callback in
    ``vis.run()`` would run Python too, but Open3D redraws the whole scene after every call of it.) What
    ``vis.run()`` adds and is left out: the coordinate-frame utility, which this viewer never shows."""
    import time

    while vis.poll_events():
        time.sleep(tick_s)
