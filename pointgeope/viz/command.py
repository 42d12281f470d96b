"""Look at a room and its predicted segmentation in Open3D, or render it without a display.

Examples::

    pointgeope viz OUT/Area_5.h5 --list [--pred RUN/area_5/predictions/Area_5.h5]
    pointgeope viz OUT/Area_5.h5 --room office_1 --pred RUN/area_5/predictions/Area_5.h5
    pointgeope viz OUT/Area_5.h5 --room office_1 --mode gt --hide ceiling --screenshot office_1.png
    pointgeope viz OUT/Area_5.h5 --room office_1 --voxel 0.02 --ply office_1.ply
    pointgeope viz DIR/scan_pred.h5 --mode pred          # a scan predicted by pointgeope predict --format h5

The window colours the room by RGB, ground truth, prediction or error (keys 1/2/3/4); the class legend,
with each class's IoU in this room when predictions are given, is printed to the terminal.
"""
from __future__ import annotations

import argparse
import sys

from pointgeope.viz.colors import MODES
from pointgeope.viz.scene import DEFAULT_MAX_POINTS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("area", help="a prepared area file, OUT/Area_N.h5")
    parser.add_argument("--room", help="the room to show (see --list; not needed in a file of one room)")
    parser.add_argument("--pred", help="predictions of that area, RUN/area_N/predictions/Area_N.h5")
    parser.add_argument("--list", action="store_true",
                        help="list the rooms with their point counts (and mIoU with --pred, worst first)")
    parser.add_argument("--mode", choices=MODES, default=None,
                        help="colouring: rgb, gt (ground truth), pred, error (default: gt)")
    parser.add_argument("--hide", default="", metavar="CLASSES",
                        help="comma-separated classes to leave out, by ground truth (e.g. ceiling,beam)")
    parser.add_argument("--voxel", type=float, default=None, metavar="METRES",
                        help="draw one point per voxel of this size (e.g. 0.02)")
    parser.add_argument("--max-points", type=int, default=DEFAULT_MAX_POINTS, metavar="N",
                        help=f"draw at most N points, a random sample (default {DEFAULT_MAX_POINTS:,}; 0: no cap)")
    parser.add_argument("--screenshot", metavar="PNG", help="render to this image without a window and exit")
    parser.add_argument("--ply", metavar="PLY", help="write the drawn points, coloured by --mode, as binary PLY")
    parser.add_argument("--width", type=int, default=1280, help="image / window width in pixels (default 1280)")
    parser.add_argument("--height", type=int, default=960, help="image / window height in pixels (default 960)")
    parser.add_argument("--point-size", type=float, default=2.0, help="point size in pixels (default 2)")
    parser.add_argument("--elevation", type=float, default=45.0,
                        help="camera angle above the floor in degrees (default 45; 90 = from the top)")
    parser.add_argument("--azimuth", type=float, default=-60.0,
                        help="camera position around the room in degrees from +X (default -60)")


def _list_rooms(args) -> int:
    import numpy as np

    from pointgeope.h5 import list_rooms, predicted_rooms, read_predictions, read_room
    from pointgeope.viz.legend import room_scores, room_table

    counts = list_rooms(args.area)
    miou = None
    if args.pred:
        predicted = predicted_rooms(args.pred)
        miou = {}
        for room in counts:
            if room not in predicted:
                continue
            label = read_room(args.area, room, fields=("label",))["label"]
            pred = np.asarray(read_predictions(args.pred, room))
            if pred.shape != label.shape:
                raise ValueError(f"{args.pred}: predictions of room {room!r} have shape {pred.shape}, "
                                 f"expected {label.shape} to match {args.area}")
            miou[room] = room_scores(label, pred)["miou"]
        missing = len(counts) - len(miou)
        if missing:
            print(f"note: {missing} room(s) have no predictions in {args.pred}")
    print("\n".join(room_table(counts, miou)))
    return 0


def _show_room(args) -> int:
    from pointgeope.h5 import list_rooms
    from pointgeope.viz.camera import fit_camera
    from pointgeope.viz.colors import colorize
    from pointgeope.viz.legend import key_help_lines, legend_lines, use_ansi
    from pointgeope.viz.scene import load_room, prepare_view
    from pointgeope.viz.select import parse_class_names

    rooms = list(list_rooms(args.area))
    if args.room is None and len(rooms) != 1:
        raise ValueError(f"expected --room ROOM or --list; rooms in {args.area}: {', '.join(rooms)}")
    mode = args.mode or "gt"
    if args.voxel is not None and not args.voxel > 0:
        raise ValueError(f"expected --voxel > 0 metres, got {args.voxel}")
    hidden = parse_class_names(args.hide)
    room = load_room(args.area, args.room or rooms[0], args.pred)
    if mode in ("pred", "error") and room.pred is None:
        raise ValueError(f"--mode {mode} needs --pred RUN/area_N/predictions/Area_N.h5 (or a file of "
                         "pointgeope predict --format h5)")
    ansi = use_ansi()
    print("\n".join(legend_lines(room.label, room.pred, ansi=ansi,
                                 title=f"{args.area} / {room.name}: {len(room):,} points")))
    view = prepare_view(room, hidden, args.voxel, args.max_points)
    for note in view.notes:
        print(f"note: {note}")
    if len(view) == 0:
        raise ValueError("no point left to draw (all hidden?)")
    if not view.color.any():
        print("note: this room has no colour (every point is 0 0 0): rgb mode draws it black")
    camera = fit_camera(view.coord, args.width, args.height, args.elevation, args.azimuth)
    if args.ply:
        from pointgeope.viz.ply import write_ply

        write_ply(args.ply, view.coord, colorize(mode, view.color, view.label, view.pred), view.label, view.pred)
        print(f"wrote {args.ply}: {len(view):,} points coloured by {mode}")
    if args.screenshot:
        from pointgeope.viz.render import render_image, save_image

        image = render_image(view.coord, colorize(mode, view.color, view.label, view.pred), camera,
                             args.point_size)
        save_image(image, args.screenshot)
        print(f"wrote {args.screenshot}: {args.width}x{args.height}, coloured by {mode}")
    if args.ply or args.screenshot:
        return 0
    from pointgeope.viz.render import show

    modes = [m for m in MODES if view.pred is not None or m in ("rgb", "gt")]
    colors = {m: colorize(m, view.color, view.label, view.pred) for m in modes}
    print("\n".join(key_help_lines(view.pred is not None, ansi)))
    show(view.coord, colors, mode, camera, args.point_size, title=f"pointgeope: {room.name}")
    return 0


def main(args: argparse.Namespace) -> int:
    from pointgeope.h5 import SchemaError

    if args.width < 8 or args.height < 8:
        print(f"pointgeope viz: error: expected --width and --height >= 8, got {args.width}x{args.height}",
              file=sys.stderr)
        return 2
    try:
        return _list_rooms(args) if args.list else _show_room(args)
    except (ValueError, KeyError, FileNotFoundError, ImportError, RuntimeError, SchemaError, OSError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        print(f"pointgeope viz: error: {message}", file=sys.stderr)
        return 2
