"""Look at a room and its predicted segmentation in Open3D, or render it without a display.

Examples::

    pointgeope viz OUT/Area_5.h5 --list [--pred RUN/area_5/predictions/Area_5.h5]
    pointgeope viz OUT/Area_5.h5 --room office_1 --pred RUN/area_5/predictions/Area_5.h5
    pointgeope viz OUT/Area_5.h5 --room office_1 --mode gt --hide ceiling --screenshot office_1.png
    pointgeope viz OUT/Area_5.h5 --room office_1 --voxel 0.02 --ply office_1.ply
    pointgeope viz DIR/scan_pred.h5 --mode pred          # a scan predicted by pointgeope predict --format h5

The window colours the room by RGB, ground truth, prediction or error (keys 1/2/3/4); the class legend,
with each class's IoU in this room when predictions are given, is printed to the terminal. The window needs
an X display you see (not xvfb-run's); Ctrl-C closes it. Elsewhere --screenshot renders without one.
"""
from __future__ import annotations

import argparse

from pointgeope.commands import given
from pointgeope.constants import DEFAULT_MAX_POINTS, VIEW_MODES

HELP = "look at a room and its predicted segmentation (Open3D window, screenshot, PLY)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("area", type=given, help="a prepared area file, OUT/Area_N.h5")
    parser.add_argument("--room", help="the room to show (see --list; not needed in a file of one room)")
    parser.add_argument("--pred", type=given, help="predictions of that area, RUN/area_N/predictions/Area_N.h5")
    parser.add_argument("--list", action="store_true",
                        help="list the rooms with their point counts (and mIoU with --pred, worst first); "
                             "draws nothing, so it takes no --room, --screenshot, --ply, --mode, --hide, --voxel")
    parser.add_argument("--mode", choices=VIEW_MODES, default=None,
                        help="colouring: rgb, gt (ground truth), pred, error (default: gt; for a room without "
                             "ground truth, such as an unlabelled scan's, pred, or rgb without predictions)")
    parser.add_argument("--hide", default="", metavar="CLASSES",
                        help="comma-separated classes to leave out, by ground truth (e.g. ceiling,beam); by "
                             "prediction in a room without ground truth, such as an unlabelled scan's")
    parser.add_argument("--voxel", type=float, default=None, metavar="METRES",
                        help="draw one point per voxel of this size (e.g. 0.02)")
    parser.add_argument("--max-points", type=int, default=DEFAULT_MAX_POINTS, metavar="N",
                        help=f"draw at most N points, a random sample (default {DEFAULT_MAX_POINTS:,}; 0: no cap)")
    parser.add_argument("--screenshot", metavar="PNG", type=given,
                        help="render to this image without a window and exit (.png; or .bmp, .tif, .tiff; .jpg, .jpeg "
                             "lossy)")
    parser.add_argument("--ply", metavar="PLY", type=given,
                        help="write the drawn points, coloured by --mode, as binary PLY (a new name ending in .ply)")
    parser.add_argument("--width", type=int, default=1280,
                        help="image / window width in pixels, 8 to 16384 (default 1280)")
    parser.add_argument("--height", type=int, default=960,
                        help="image / window height in pixels, 8 to 16384 (default 960)")
    parser.add_argument("--point-size", type=float, default=2.0, help="point size in pixels, at least 1 (default 2)")
    parser.add_argument("--elevation", type=float, default=45.0,
                        help="camera angle above the floor in degrees (default 45; 90 = from the top)")
    parser.add_argument("--azimuth", type=float, default=-60.0,
                        help="camera position around the room in degrees from +X (default -60)")


def main(args: argparse.Namespace) -> int:
    from pointgeope.viz.show import check_inputs, check_options, list_rooms, show_room

    check_options(args)  # mistakes of the input are UserErrors: one line, exit code 2 (pointgeope.errors)
    check_inputs(args)
    return list_rooms(args.area, args.pred) if args.list else show_room(args)
