"""Rendering tests of pointgeope/viz/render.py through ``pointgeope viz --screenshot`` (need a display:
a DISPLAY, Xvfb on the PATH, or Open3D's headless EGL; skipped with the reason when none works).

Images are checked pixel by pixel. Points are drawn unlit (``light_on = False``), so every pixel is either
the background or exactly the colour of a point: no shading, no blending, which makes exact colour
counting possible. Proportions: (1) a synthetic room seen straight from above, where a plane parallel
to the image keeps its area ratios under perspective, against the known layout; (2) a real room at 45
degrees, against a brute-force numpy z-buffer rendering of the same camera (``camera.project``).
"""
from __future__ import annotations

import os
import shutil
import signal
import sys

import numpy as np
import pytest
from PIL import Image

from pointgeope.cli import main
from pointgeope.constants import CLASS_INDEX, NUM_CLASSES, PALETTE
from pointgeope.viz.camera import fit_camera, project
from pointgeope.viz.colors import CORRECT_COLOR, WRONG_COLOR, error_colors, label_colors
from pointgeope.viz.scene import load_room, prepare_view

pytestmark = pytest.mark.display

BACKGROUND = (255, 255, 255)
FLOOR, TABLE, CHAIR, CEILING = (PALETTE[CLASS_INDEX[c]] for c in ("floor", "table", "chair", "ceiling"))


@pytest.fixture(scope="module")
def display():
    """Skip (with the reason) unless Open3D imports and can render a tiny image here."""
    from pointgeope.viz.render import render_image

    try:
        image = render_image(np.zeros((1, 3)), np.zeros((1, 3), np.uint8), fit_camera(np.zeros((1, 3)), 16, 16))
    except (ImportError, RuntimeError) as err:
        pytest.skip(f"no rendering here: {err}")
    assert image.shape == (16, 16, 3)


def _shot(tmp_path, area, room, *args, width=240, height=160, name="shot.png"):
    out = tmp_path / name
    assert main(["viz", str(area), "--room", room, "--screenshot", str(out), "--width", str(width),
                 "--height", str(height), *args]) == 0
    image = np.asarray(Image.open(out).convert("RGB"))
    assert image.shape == (height, width, 3)
    return image


def _fractions(image, colors):
    """Fraction of the non-background pixels in each colour; also checks no other colour appears."""
    flat = image.reshape(-1, 3)
    found, counts = np.unique(flat, axis=0, return_counts=True)
    table = {tuple(int(v) for v in c): int(n) for c, n in zip(found, counts, strict=True)}
    assert set(table) <= {BACKGROUND, *colors}, f"unexpected colours: {set(table) - {BACKGROUND, *colors}}"
    drawn = len(flat) - table.get(BACKGROUND, 0)
    assert drawn > 0.25 * len(flat), f"image nearly blank: {drawn} of {len(flat)} pixels drawn"
    return {c: table.get(c, 0) / drawn for c in colors}


def _mask(image, color):
    return (image == np.array(color, np.uint8)).all(axis=2)


# Tolerance of an area fraction from above: the three regions share borders of about 1.5 image widths;
# each border pixel can go to either side (rasterisation rounding, 2-pixel points reaching over the border),
# i.e. up to about 2 x 330 of the ~26,700 drawn pixels at 240x160 (2.5 %). Measured: 0.65 % at 240x160,
# 0.0 % at 480x320. A wrong class colour or a lost region moves a fraction by 25 %.
TOP_TOL = 0.02


def test_synthetic_room_from_above_by_class_and_error(display, synthetic_area, tmp_path):
    area, preds = synthetic_area
    top = ["--elevation", "90", "--azimuth", "-90", "--hide", "ceiling", "--pred", str(preds)]
    # azimuth -90 from the top: +x to the right, +y up in the image (floor left, chair top right, table bottom right)
    gt = _shot(tmp_path, area, "grid_1", *top, "--mode", "gt")
    frac = _fractions(gt, (FLOOR, TABLE, CHAIR))
    assert frac == pytest.approx({FLOOR: 0.5, TABLE: 0.25, CHAIR: 0.25}, abs=TOP_TOL)
    rows, cols = np.indices(gt.shape[:2])
    centre = {c: (rows[_mask(gt, c)].mean(), cols[_mask(gt, c)].mean()) for c in (FLOOR, TABLE, CHAIR)}
    assert centre[FLOOR][1] < centre[TABLE][1] and centre[FLOOR][1] < centre[CHAIR][1]
    assert centre[CHAIR][0] < centre[TABLE][0]
    # predictions: the table quarter is predicted as chair
    pred = _shot(tmp_path, area, "grid_1", *top, "--mode", "pred")
    assert _fractions(pred, (FLOOR, CHAIR)) == pytest.approx({FLOOR: 0.5, CHAIR: 0.5}, abs=TOP_TOL)
    # errors: red exactly where the table is, grey elsewhere
    err = _shot(tmp_path, area, "grid_1", *top, "--mode", "error")
    assert _fractions(err, (CORRECT_COLOR, WRONG_COLOR)) == \
        pytest.approx({CORRECT_COLOR: 0.75, WRONG_COLOR: 0.25}, abs=TOP_TOL)
    red, table = _mask(err, WRONG_COLOR), _mask(gt, TABLE)
    assert (red & table).sum() / red.sum() > 0.97 and (red & table).sum() / table.sum() > 0.97


def test_synthetic_room_at_45_degrees_is_whole_and_rgb(display, synthetic_area, tmp_path):
    area, _ = synthetic_area
    gt = _shot(tmp_path, area, "grid_1", "--mode", "gt")
    frac = _fractions(gt, (FLOOR, TABLE, CHAIR, CEILING))
    assert frac[CEILING] > 0.3 and frac[FLOOR] > 0.01  # the ceiling in front, the floor seen past it
    drawn = ~_mask(gt, BACKGROUND)
    # the whole room in view: nothing drawn in the outer 5 % (the margin of fit_camera) less a pixel
    assert not drawn[:3].any() and not drawn[-3:].any() and not drawn[:, :5].any() and not drawn[:, -5:].any()
    # rgb: the scanned colour is a red gradient along +x; from above, x runs left to right in the image
    rgb = _shot(tmp_path, area, "grid_1", "--mode", "rgb", "--elevation", "90", "--azimuth", "-90",
                "--hide", "ceiling")
    drawn = ~_mask(rgb, BACKGROUND)
    used = drawn.any(axis=0)                                  # columns with drawn pixels
    cols = (rgb[..., 0] * drawn).sum(axis=0)[used] / drawn.sum(axis=0)[used]  # mean red per column
    assert len(cols) > 0.8 * rgb.shape[1] and (np.diff(cols) >= -2).all() and cols[-1] - cols[0] > 200


def test_every_screenshot_suffix_offered_writes_the_whole_image(display, synthetic_area, tmp_path):
    """Each suffix of IMAGE_SUFFIXES holds the image at its size; the lossless ones hold its exact pixels
    (the .ico accepted before shrank 320x240 to 128x96). ``viz --screenshot`` renders one image whatever the
    suffix, checks the suffix (``check_image_path``) and writes it (``save_image``): the PNG is rendered by the
    command, the other suffixes are its image through those two."""
    from pointgeope.viz.render import IMAGE_SUFFIXES, check_image_path, save_image

    area, _ = synthetic_area
    png = _shot(tmp_path, area, "grid_1", width=320, height=240)
    for suffix in IMAGE_SUFFIXES[1:]:
        path = tmp_path / f"shot{suffix}"
        check_image_path(path)
        save_image(png, path)
        image = np.asarray(Image.open(path).convert("RGB"))
        assert image.shape == png.shape, suffix
        if suffix in (".bmp", ".tif", ".tiff"):
            assert (image == png).all(), suffix
        else:  # JPEG: lossy, close on average
            assert np.abs(image.astype(int) - png).mean() < 8, suffix


def _zbuffer(coord, colors, camera):
    """Brute-force reference: each pixel takes the colour of the nearest point projecting into it."""
    uv, depth = project(camera, coord)
    px = np.floor(uv + 0.5).astype(np.int64)
    inside = (depth > 0) & (px[:, 0] >= 0) & (px[:, 0] < camera.width) & (px[:, 1] >= 0) & (px[:, 1] < camera.height)
    flat = px[inside, 1] * camera.width + px[inside, 0]
    order = np.lexsort((depth[inside], flat))  # by pixel, then nearest first
    first = np.ones(len(order), bool)
    first[1:] = flat[order[1:]] != flat[order[:-1]]
    image = np.full((camera.height * camera.width, 3), BACKGROUND, np.uint8)
    image[flat[order[first]]] = colors[inside][order[first]]
    return image.reshape(camera.height, camera.width, 3)


# Open3D's rasteriser and the reference differ only at ties: points projecting within float32 rounding of
# a pixel border, and near-equal depths of different classes (objects resting on each other). Measured with
# 1-pixel points at 320x240 on the full 352k-point room: 99.97 % of the pixels identical, class fractions
# within 0.03 %; on the 44k-point fixture at 240x180 (so that a quarter of the image is drawn): 99.88 %
# identical. Tolerance:
# 0.5 % per class and 99 % identical pixels; the reference itself, with its camera shifted sideways by one
# pixel, has only 94 % identical pixels (measured), and a swapped class colour moves whole classes.
REAL_TOL = 0.005


def test_real_room_by_ground_truth_matches_a_zbuffer_reference(display, real_area, tmp_path):
    image = _shot(tmp_path, real_area, "office_resampled", "--mode", "gt", "--hide", "ceiling",
                  "--point-size", "1", width=240, height=180)
    view = prepare_view(load_room(real_area, "office_resampled"), hidden=(CLASS_INDEX["ceiling"],))
    camera = fit_camera(view.coord, 240, 180)
    reference = _zbuffer(view.coord, label_colors(view.label), camera)
    present = [PALETTE[c] for c in range(NUM_CLASSES) if (view.label == c).any()]
    assert PALETTE[CLASS_INDEX["ceiling"]] not in present and len(present) == 10
    got, want = _fractions(image, present), _fractions(reference, present)
    assert got == pytest.approx(want, abs=REAL_TOL)
    assert all(got[c] > 0 for c in present if want[c] > 0.005)
    agree = (image == reference).all(axis=2).mean()
    assert agree > 0.99, f"only {agree:.4f} of the pixels agree with the reference rendering"


def test_mode_keys_recolour_the_window(display):
    from pointgeope.viz import render
    from pointgeope.viz.colors import NEEDS_PRED

    o3d = render.require_open3d()
    label = np.array([1, 7], np.uint8)
    pred = np.array([1, 8], np.uint8)
    coord = np.array([[0, 0, 0], [1, 0, 0]], float)
    colors = {"gt": label_colors(label), "error": error_colors(label, pred)}
    assert np.array_equal(colors["error"], np.array([CORRECT_COLOR, WRONG_COLOR], np.uint8))
    said = []
    camera = fit_camera(coord, 64, 48, elevation=90, azimuth=-90)
    with render.headless_display(64, 48):
        vis = o3d.visualization.Visualizer()
        assert vis.create_window(width=64, height=48, visible=False)
        try:
            pcd = render._point_cloud(o3d, coord, colors["gt"])
            vis.add_geometry(pcd)
            render._configure(vis, point_size=6)
            render.apply_camera(o3d, vis, camera)
            keys = render.mode_callbacks(o3d, pcd, colors, announce=said.append, missing={"pred": NEEDS_PRED})
            assert sorted(keys) == [ord("1"), ord("2"), ord("3"), ord("4")]
            assert keys[ord("3")](vis) is False and said[-1] == "mode pred: not available (needs --pred)"
            assert keys[ord("4")](vis) is True and said[-1] == "mode error"
            np.testing.assert_array_equal(np.rint(np.asarray(pcd.colors) * 255), colors["error"])
            shot = np.rint(np.asarray(vis.capture_screen_float_buffer(do_render=True)) * 255).astype(np.uint8)
        finally:
            vis.destroy_window()
    assert _mask(shot, WRONG_COLOR).sum() >= 16 and _mask(shot, CORRECT_COLOR).sum() >= 16


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Xvfb is for X11 (Linux)")
def test_headless_display_starts_xvfb_only_inside_the_block(monkeypatch):
    from pointgeope.viz import render

    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb is not installed (apt-get install xvfb)")
    monkeypatch.delenv("DISPLAY", raising=False)
    with render.headless_display(64, 48) as display:
        assert display.startswith(":") and os.environ["DISPLAY"] == display
        assert os.environ.get("XDG_RUNTIME_DIR")
    assert "DISPLAY" not in os.environ
    assert render._XVFB["proc"].poll() is None  # kept for the next render of this process


# A viewer that starts its Xvfb, says the server's pid, and is killed (-9: its atexit stop does not run).
XVFB_THEN_KILLED = """import os, signal
from pointgeope.viz import render
os.environ.pop("DISPLAY", None)
render._start_xvfb(64, 48)
print(render._XVFB["proc"].pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Xvfb is for X11 (Linux)")
def test_the_xvfb_of_a_killed_viewer_ends_with_it():
    """Before: a viewer killed or crashed (a segmentation fault) left its Xvfb running for good."""
    import subprocess
    import time

    from tests.conftest import process_ended

    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb is not installed (apt-get install xvfb)")
    done = subprocess.run([sys.executable, "-c", XVFB_THEN_KILLED], capture_output=True, text=True, timeout=120,
                          check=False, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == -signal.SIGKILL and done.stdout.strip().isdigit(), done.stderr[-2000:]
    xvfb, deadline = int(done.stdout), time.monotonic() + 20
    try:
        while not process_ended(xvfb) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process_ended(xvfb)
    finally:
        if not process_ended(xvfb):
            os.kill(xvfb, signal.SIGTERM)


def test_the_xvfb_that_a_thread_starts_outlives_the_thread(monkeypatch):
    """The server is the process's (later renders use it, from any thread): the death signal, which the
    kernel ties to the thread that started the server, ended it as that thread ended."""
    import threading
    import time

    from pointgeope.viz import render

    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb is not installed (apt-get install xvfb)")
    monkeypatch.setattr(render, "_XVFB", {})
    thread = threading.Thread(target=render._start_xvfb, args=(64, 48))
    thread.start()
    thread.join()
    try:
        time.sleep(1.0)  # the signal to a server that ends with the thread comes within ms
        assert render._XVFB["proc"].poll() is None
    finally:
        render._stop_xvfb()


def test_xvfb_that_does_not_start_is_a_clear_error(monkeypatch):
    from pointgeope.viz import render

    monkeypatch.setattr(render, "_XVFB", {})
    monkeypatch.setattr(render.shutil, "which", lambda name: "/bin/false" if name == "Xvfb" else None)
    with pytest.raises(RuntimeError, match=r"Xvfb did not start .*apt-get install xvfb"):
        render._start_xvfb(64, 48)


# A render, then what torch imports as it trains (Triton), in one process (a notebook's order).
RENDER_THEN_TRITON = """
import numpy as np
from pointgeope.viz.camera import fit_camera
from pointgeope.viz.render import render_image
render_image(np.zeros((1, 3)), np.zeros((1, 3), np.uint8), fit_camera(np.zeros((1, 3)), 16, 16))
maps = open("/proc/self/maps").read()
print("gl llvm:", any("libLLVM" in line and "triton" not in line for line in maps.splitlines()), flush=True)
import triton._C.libtriton
print("triton loaded", flush=True)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the clash is of Linux shared libraries")
def test_triton_loads_after_a_render_in_the_same_process(display):
    """Before: on a machine drawing with Mesa's llvmpipe (no GPU driver), the render brought the system's
    libLLVM into the process's global symbols, and Triton's library loaded after it (torch._dynamo,
    torch_geometric: any training) died with SIGSEGV in LLVM's option registry; the suite passed only
    because its engine tests run before its viz tests. In a child process: a crash must not end pytest."""
    import importlib.util
    import subprocess

    if importlib.util.find_spec("triton") is None:  # not imported here: this process has rendered
        pytest.skip("Triton is not installed")

    done = subprocess.run([sys.executable, "-c", RENDER_THEN_TRITON], capture_output=True, text=True, timeout=300,
                          check=False, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0 and done.stdout.endswith("triton loaded\n"), (done.returncode, done.stderr[-2000:])
    if "gl llvm: True" not in done.stdout:
        pytest.skip("this OpenGL driver loads no LLVM of its own: nothing to clash with here")


def test_make_test_starts_its_x_server_without_resets_as_the_viewer_starts_its_own(monkeypatch):
    """``make test`` runs the suite under ``xvfb-run -s ARGS``, and ``viz --screenshot`` starts its own ``Xvfb``
    with ``-noreset`` (no keymap compiled again each time its last client leaves, which the next client waits
    for): the Makefile's server was started without it, so the display tests ran on another kind of server
    than the one the viewer starts."""
    import re
    import types
    from pathlib import Path

    from pointgeope.viz import render

    started = []

    def popen(cmd, pass_fds=(), **kwargs):
        started.append(cmd)
        os.write(pass_fds[0], b"7\n")  # the display number, as Xvfb writes it to -displayfd
        return types.SimpleNamespace(poll=lambda: None)

    monkeypatch.setattr(render, "_XVFB", {})
    monkeypatch.setattr(render.subprocess, "Popen", popen)
    assert render._start_xvfb(64, 48) == ":7"
    makefile = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    (server_args,) = re.findall(r'xvfb-run -a -s "([^"]*)"', makefile)
    assert "-noreset" in started[0] and "-noreset" in server_args.split()
