"""What ``pointgeope viz`` does (its options: ``pointgeope/commands/viz.py``): list the rooms of an area
file with their scores, or show one room coloured by RGB, ground truth, prediction or error, in a window,
a screenshot or a PLY file.
"""
from __future__ import annotations

import math

from pointgeope.constants import NUM_CLASSES
from pointgeope.paths import same_file
from pointgeope.plural import agreeing, counted, first_of
from pointgeope.viz import VizError
from pointgeope.viz.colors import MODES, NEEDS_PRED, has_ground_truth, missing_modes


def check_options(args) -> None:
    """Refuse, before any file is read, a value of ``pointgeope viz``'s options out of its range
    (:class:`VizError`, one line): image size within what the renderer makes, a point size >= 1 pixel (Open3D
    draws no point smaller), a voxel from a micrometre to a kilometre (:data:`~pointgeope.viz.select.MIN_VOXEL`), a
    point cap >= 0, a camera angle of finite degrees; no drawing option (``--room``, ``--screenshot``, ``--ply``,
    ``--mode``, ``--hide``, ``--voxel``) with ``--list``, which draws nothing; then the outputs
    (:func:`check_outputs`)."""
    from pointgeope.viz.camera import MAX_IMAGE_SIDE, MIN_IMAGE_SIDE
    from pointgeope.viz.select import MAX_VOXEL, MIN_VOXEL

    problems = [
        (not (MIN_IMAGE_SIDE <= args.width <= MAX_IMAGE_SIDE and MIN_IMAGE_SIDE <= args.height <= MAX_IMAGE_SIDE),
         f"expected --width and --height in [{MIN_IMAGE_SIDE}, {MAX_IMAGE_SIDE}] pixels (the largest image the "
         f"renderer makes), got {args.width}x{args.height}"),
        (not 1 <= args.point_size < math.inf,
         f"expected --point-size >= 1 pixel (Open3D draws no point smaller), got {args.point_size:g}"),
        (args.max_points < 0, f"expected --max-points >= 0 (0: no cap), got {args.max_points}"),
        (args.voxel is not None and not MIN_VOXEL <= args.voxel <= MAX_VOXEL,
         f"expected --voxel from {MIN_VOXEL:g} to {MAX_VOXEL:g} metres (a micrometre: finer than an area file's "
         f"coordinates resolve; a kilometre: a whole building), got {args.voxel}"),
        (not -90 <= args.elevation <= 90, f"expected --elevation in [-90, 90] degrees, got {args.elevation:g}"),
        (not math.isfinite(args.azimuth), f"expected a finite --azimuth in degrees, got {args.azimuth:g}"),
    ]
    for bad, message in problems:
        if bad:
            raise VizError(message)
    if args.list:
        drawing = [option for option, value in (("--room", args.room), ("--screenshot", args.screenshot),
                                                ("--ply", args.ply), ("--mode", args.mode), ("--hide", args.hide),
                                                ("--voxel", args.voxel)) if value not in (None, "")]
        if drawing:  # they were dropped without a word: a script asking for an image got none
            raise VizError(f"--list only lists the rooms; leave out {', '.join(drawing)}, or drop --list to draw "
                           + (f"room {args.room}" if args.room is not None else "a room (--room ROOM)"))
    check_outputs(args)


def check_outputs(args) -> None:
    """Refuse, before any file is read, an output that would replace an input or is of the wrong kind
    (:class:`VizError`, one line): ``--screenshot`` and ``--ply`` that are (resolve to) the area file or the
    ``--pred`` file, a ``--ply`` not named ``*.ply``, a ``--screenshot`` not named as an image
    (:func:`~pointgeope.viz.render.check_image_path`), and an existing target that is not a regular file
    (:func:`pointgeope.atomic.check_replaceable`: a FIFO, a device)."""
    from pathlib import Path

    from pointgeope.atomic import check_replaceable

    outputs = [(option, out) for option, out in (("--ply", args.ply), ("--screenshot", args.screenshot)) if out]
    for option, out in outputs:
        for what, read in (("the area file", args.area), ("the --pred file", args.pred)):
            if read and same_file(out, read):
                raise VizError(f"{option} {out}: that is {what} being read ({read}); give a new file name, "
                               f"such as {Path(out).with_name(Path(read).stem + '_view')}"
                               f"{'.ply' if option == '--ply' else '.png'}")
    if args.ply and Path(args.ply).suffix.lower() != ".ply":
        raise VizError(f"--ply {args.ply}: expected a file name ending in .ply (a binary PLY is written), got "
                       f"{Path(args.ply).suffix or 'no suffix'!r}")
    if args.screenshot:
        from pointgeope.viz.render import check_image_path

        check_image_path(args.screenshot)  # before the work, not at the end of it
    for _, out in outputs:
        check_replaceable(out)


def check_inputs(args) -> None:
    """Refuse (:class:`VizError`, one line) an area or ``--pred`` that is a folder, or a scan or one of
    predict's other outputs (``*_pred.ply``, ``.npy``, ...: a suffix of the scans predict reads but ``.h5``,
    ``scans.sources.KINDS``, in a file that is not HDF5), saying what to give: the files of the folder that fit
    (its ``*.h5``, a fold's ``predictions/*.h5``, a run's ``*/predictions/*.h5``), or to predict the scan
    again with ``--format h5``. Before, they read "found nothing at OUT" (a folder is something) and
    "not a readable HDF5 file; it is truncated or corrupt: run `pointgeope prepare` again" (a PLY of predict
    is neither)."""
    from pathlib import Path

    import h5py

    from pointgeope.scans.sources import KINDS

    for what, path in (("the area", args.area), ("--pred", args.pred)):
        if path is None:
            continue
        p = Path(path)
        if p.is_dir():
            inside = sorted(str(f) for pattern in ("*.h5", "predictions/*.h5", "*/predictions/*.h5")
                            for f in p.glob(pattern))
            fits = f"such as {', '.join(inside[:3])}" if inside else "(none is in that folder)"
            raise VizError(f"{what} {path}: a folder; expected an HDF5 file, a prepared OUT/Area_N.h5, evaluate's "
                           f"RUN/area_N/predictions/Area_N.h5 or a scan of predict --format h5, {fits}")
        if KINDS.get(p.suffix.lower(), "h5") != "h5" and p.is_file() and not h5py.is_hdf5(p):
            raise VizError(f"{what} {path}: a {p.suffix} file, not HDF5; to view a scan's predictions, write them "
                           "as HDF5: pointgeope predict MODEL SCAN --out DIR --format h5, then pointgeope viz "
                           "DIR/<name>_pred.h5")


def reading(area: str):
    """A context that holds :func:`pointgeope.lock.reader_lock` on the data root of ``area`` while viz reads
    it, where ``area`` is a prepared area file (:func:`pointgeope.h5.prepared_root`): a ``prepare`` into
    that folder is refused meanwhile, and viz while one writes there (one line each). Nothing for another
    file (a scan's predictions), which no prepare replaces."""
    import contextlib

    from pointgeope.h5 import prepared_root
    from pointgeope.lock import reader_lock

    root = prepared_root(area)
    return contextlib.nullcontext() if root is None else reader_lock(root)


def list_rooms(area: str, pred_path: str | None = None) -> int:
    """``pointgeope viz AREA --list``: the rooms of ``area`` (checked as training checks it) with their point
    counts, and with ``pred_path`` their mIoU (worst first); the files read under :func:`reading`."""
    import numpy as np

    from pointgeope.data.check import check_area_file
    from pointgeope.h5 import read_labels
    from pointgeope.h5_predictions import predicted_rooms, read_predictions
    from pointgeope.viz.legend import room_scores, room_table
    from pointgeope.viz.scene import check_same_area, file_classes, file_ignore_index, prediction_classes

    with reading(area):
        counts = check_area_file(area, len(file_classes(pred_path)) if pred_path else NUM_CLASSES)
        miou = None
        if pred_path:
            check_same_area(area, pred_path)
            predicted = predicted_rooms(pred_path)
            miou = {}
            for room in counts:
                if room not in predicted:
                    continue
                label = read_labels(area, room)
                pred = np.asarray(read_predictions(pred_path, room))
                if pred.shape != label.shape:
                    raise VizError(f"{pred_path}: predictions of room {room!r} have shape {pred.shape}, "
                                     f"expected {label.shape} to match {area}")
                classes = prediction_classes(pred_path, pred, room)
                miou[room] = room_scores(label, pred, len(classes), file_ignore_index(pred_path))["miou"]
            if not miou:  # a table of '-' with exit 0 said nothing was wrong
                raise VizError(f"{pred_path}: predictions of none of the rooms of {area} (it holds "
                               f"{first_of(sorted(predicted), 5) or 'none'}); "
                               f"give the predictions of {area}")
            missing = len(counts) - len(miou)
            if missing:
                have = agreeing(missing, "has", "have")
                print(f"note: {counted(missing, 'room')} {have} no predictions in {pred_path}")
    print("\n".join(room_table(counts, miou)))
    return 0


def check_extent(coord) -> None:
    """Refuse to draw points that all lie at one place: Open3D clips a scene without extent to nothing (its
    near and far planes come from the bounding box), and the image would be blank."""
    if len(coord) and not (coord.max(axis=0) - coord.min(axis=0)).any():
        at = " ".join(f"{v:g}" for v in coord[0])
        raise VizError(f"the {counted(len(coord), 'point')} to draw all lie at one place ({at}): a view of a scene "
                       "without extent is blank, nothing to frame; --ply PLY writes them")


def choose_mode(requested: str | None, room, area, labelled: bool) -> str:
    """The colouring: ``requested`` (``--mode``), else the first of ``gt``, ``pred``, ``rgb`` that the room
    can draw (a room without ground truth, ``labelled`` false, ``colors.has_ground_truth``: every label
    ``IGNORE_LABEL``, the predictions of an unlabelled scan, ``pointgeope predict --format h5``, shows its
    predictions, or ``rgb`` without them). A mode that :func:`~pointgeope.viz.colors.missing_modes` (the rule's
    one owner) says the room cannot draw is refused, with what to give for it (they drew every point black)."""
    missing = missing_modes(labelled, room.pred is not None)
    mode = requested or next(m for m in ("gt", "pred", "rgb") if m not in missing)
    if missing.get(mode) == NEEDS_PRED:
        raise VizError(f"--mode {mode} needs --pred RUN/area_N/predictions/Area_N.h5 (or a file of "
                       "pointgeope predict --format h5)")
    if mode in missing:
        raise VizError(f"--mode {mode}: room {room.name!r} of {area} has no ground truth (every label is "
                       f"unlabelled, as in the predictions of a scan); use --mode pred or rgb")
    return mode


def show_room(args) -> int:
    """``pointgeope viz AREA --room ROOM``: one room in a window, or its screenshot or PLY; ``args`` holds
    the options of ``pointgeope/commands/viz.py``; the area file is checked as training checks it."""
    from pointgeope.data.check import check_area_file
    from pointgeope.viz.camera import drawing_frame, fit_camera
    from pointgeope.viz.colors import colorize
    from pointgeope.viz.legend import key_help_lines, legend_lines, use_ansi
    from pointgeope.viz.scene import file_classes, load_room, prepare_view
    from pointgeope.viz.select import parse_class_names

    with reading(args.area):  # the files read; the window that follows holds no lock
        classes = len(file_classes(args.pred)) if args.pred else NUM_CLASSES  # a network's own labels: its classes
        rooms = list(check_area_file(args.area, classes))
        if args.room is None and len(rooms) != 1:
            raise VizError(f"expected --room ROOM or --list; rooms in {args.area}: {', '.join(rooms)}")
        if args.room is not None and args.room not in rooms:
            raise VizError(f"--room {args.room!r}: no such room in {args.area}; its rooms: {', '.join(rooms)}")
        room = load_room(args.area, args.room if args.room is not None else rooms[0], args.pred)
    hidden = parse_class_names(args.hide, room.class_names)  # the view's classes: class_13, ... too
    n = len(room.class_names)  # S3DIS's 13, or the predictions' network's classes: colours and legend
    labelled = has_ground_truth(room.label, n)
    mode = choose_mode(args.mode, room, args.area, labelled)
    ansi = use_ansi()
    print("\n".join(legend_lines(room.label, room.pred, ansi=ansi, class_names=room.class_names,
                                 ignore_index=room.ignore_index,
                                 title=f"{args.area} / {room.name}: {counted(len(room), 'point')}")))
    view = prepare_view(room, hidden, args.voxel, args.max_points)
    for note in view.notes:
        print(f"note: {note}")
    if len(view) == 0:
        raise VizError("no point left to draw (all hidden?)")
    if not view.color.any():
        print("note: this room has no colour (every point is 0 0 0): rgb mode draws it black")
    drawn = camera = None
    if not args.ply or args.screenshot:  # a window or an image; a PLY needs no camera
        check_extent(view.coord)  # before the renderer gives a blank one
        drawn = drawing_frame(view.coord)
        camera = fit_camera(drawn, args.width, args.height, args.elevation, args.azimuth)
    if args.ply:
        from pointgeope.viz.ply import write_ply

        write_ply(args.ply, view.coord, colorize(mode, view.color, view.label, view.pred, n, view.ignore_index),
                  view.label, view.pred, view.origin)
        shifted = ("" if view.origin is None
                   else f", in place (origin {', '.join(f'{v:.15g}' for v in view.origin)} added)")
        print(f"wrote {args.ply}: {counted(len(view), 'point')} coloured by {mode}{shifted}")
    if args.screenshot:
        from pointgeope.viz.render import render_image, save_image

        image = render_image(drawn, colorize(mode, view.color, view.label, view.pred, n, view.ignore_index),
                             camera, args.point_size)
        save_image(image, args.screenshot)
        print(f"wrote {args.screenshot}: {args.width}x{args.height}, coloured by {mode}")
    if args.ply or args.screenshot:
        return 0
    from pointgeope.viz.render import show

    missing = missing_modes(labelled, view.pred is not None)  # keys that draw nothing, and why
    colors = {m: colorize(m, view.color, view.label, view.pred, n, view.ignore_index)
              for m in MODES if m not in missing}
    print("\n".join(key_help_lines(missing, ansi)))
    show(drawn, colors, mode, camera, args.point_size, title=f"pointgeope: {room.name}", missing=missing)
    return 0
