"""Segment users' scans with a trained model: a label for every input point, in input order.

For each scan (``pointgeope.scans``): its coordinates are multiplied by ``scale`` (``--scale``, e.g. 0.001 for
millimetres), shifted in float64 so that their minimum is 0 (georeferenced coordinates keep their precision in
float32), and voted on by :func:`pointgeope.engine.evaluate.vote_room` as ``evaluate`` predicts a test room (but
with one view unless ``--tta``, and a fragment cap where the run has none), with the same seed for a room of the
same name (:func:`~pointgeope.engine.evaluate.room_seed`): memory is bounded by the fragment size plus the
``N x C`` vote buffer, whatever the size of the scan. The label of point ``i`` is ``argmax_c scores[i, c]`` and its
probabilities are :func:`~pointgeope.engine.probabilities.vote_probabilities`. A PTv3 network of ``data.normal``
(features ``[rgb | normal]``) gets a prepared room's own normals (a raw room's: prepare's estimate, made as it
parses the room, for such a network only), and a scan's estimated from its kept points as prepare estimates a room's
(:func:`scan_normals`; stray points are left out of their neighbourhoods).

Before predicting, a scan is checked against what the checkpoint says the model expects
(:func:`~pointgeope.engine.prediction_info.prediction_metadata`): a colour model refuses a scan without colour
(never zeros in its place), and a warning says when the scan's point spacing
(:func:`~pointgeope.data.spacing.median_spacing`) is more than :data:`SPACING_FACTOR` times off the
training rooms' (a unit mistake: millimetres or feet read as metres).
"""
from __future__ import annotations

import contextlib
import dataclasses
import sys
from pathlib import Path

import numpy as np

from pointgeope.constants import PREDICT_EXTENT_LIMIT, PREDICT_MAX_EXTENT
from pointgeope.data.spacing import median_spacing
from pointgeope.engine import build, eval_weights
from pointgeope.engine.config_ranges import range_problem
from pointgeope.engine.distributed import apply_threads
from pointgeope.engine.evaluate import room_seed, vote_room
from pointgeope.engine.placement import hierarchy_place
from pointgeope.engine.predict_model import Predictor, load_predictor
from pointgeope.engine.predict_record import print_notes
from pointgeope.engine.probabilities import vote_probabilities
from pointgeope.errors import UserError, one_line
from pointgeope.plural import counted, first_of
from pointgeope.scans.precision import float32_note
from pointgeope.scans.scan import Scan, ScanError, one_colour_note
from pointgeope.scans.stray import describe_stray, nearest_kept, refusal, stray_points

SPACING_FACTOR = 10.0


def check_scan(predictor: Predictor, scan: Scan, coord: np.ndarray, scale: float = 1.0, warn=print) -> None:
    """Refuse a scan without colour for a colour model, note one of one colour to it; warn when its file kept
    float32 coordinates too coarse for the model's voxels (``scans.precision``) and when its spacing is far from
    training's (a scan of fewer than 2 distinct points has none to compare)."""
    if predictor.uses_color and scan.color is None:
        raise ScanError(f"{scan.source}: has no colour, but {predictor.path} was trained with colour features "
                        f"([{' | '.join(predictor.info['features'])}]); train a geometry-only model "
                        "(data.color=false model.in_channels=3, features [xyz]) and predict with that")
    if predictor.uses_color and (note := one_colour_note(scan)) is not None:  # a geometry-only model: no matter
        warn(f"note: {note}")
    if (coarse := float32_note(scan.source, scan.coord, scale, predictor.cfg.data.grid_size)) is not None:
        warn(coarse)
    reference = predictor.info.get("spacing")
    spacing = median_spacing(coord) if reference else float("nan")  # nan: fewer than 2 distinct points
    if np.isfinite(spacing):
        ratio = spacing / reference
        if not (1 / SPACING_FACTOR <= ratio <= SPACING_FACTOR):
            warn(f"warning: {scan.source}: median point spacing {spacing:.3g} (after --scale {scale:g}) is "
                 f"{ratio:.3g} times the training rooms' {reference:.3g} m; if its unit is not metres, pass --scale "
                 "(0.001 for millimetres, 0.3048 for feet)")


def predict_scan(predictor: Predictor, scan: Scan, scale: float = 1.0, progress: bool = False,
                 warn=print, max_extent: float = PREDICT_MAX_EXTENT) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                              np.ndarray | None]:
    """``(pred uint8 (N,), scores (N, C), votes (N,), normal float32 (N, 3) or None)`` of one scan (see the module
    docstring; ``normal``: the normals the network read, for a network of ``data.normal``, a stray point's its
    nearest kept point's, as its prediction); with
    ``progress`` a bar with ETA over each view's fragments (on a terminal). Stray points (beyond
    ``max_extent`` of the median, :mod:`pointgeope.scans.stray`) are left out of the network's input and
    take the prediction of their nearest kept point, with one warning; a scan with no valid point or more
    than :data:`~pointgeope.scans.stray.STRAY_SHARE` of them stray is refused (ScanError)."""
    stray = stray_points(scan.coord, scale, max_extent)
    refused = refusal(scan.source, scan.coord, stray, scale, max_extent)
    if refused:
        raise ScanError(refused)
    any_stray = bool(stray.any())
    points = scan.coord[~stray] if any_stray else scan.coord
    lo = points.min(axis=0)
    coord = ((points - lo) * scale).astype(np.float32)
    kept = scan if not any_stray else dataclasses.replace(
        scan, coord=points, color=None if scan.color is None else scan.color[~stray],
        normal=None if scan.normal is None else scan.normal[~stray])
    check_scan(predictor, kept, coord, scale, warn)
    color = kept.color if kept.color is not None else np.zeros((len(kept), 3), np.uint8)  # unused by [xyz] models
    room = scan.name.rsplit("/", 1)[-1]
    say = (lambda line: print(one_line(line), flush=True)) if progress else None   # the CLI's, before ~90 s / 10M
    normal = scan_normals(kept, coord, say) if predictor.cfg.data.normal else None   # [rgb | normal] networks only
    if normal is not None:
        _other_estimate(predictor, kept, warn)
    result = vote_room(predictor.model, coord, color, predictor.cfg, predictor.device,
                       seed=room_seed(predictor.cfg.train.seed, room), show_progress=progress, normal=normal)
    if (result.votes < 1).any():
        raise RuntimeError(f"{scan.source}: {(result.votes < 1).sum()} points got no prediction")
    cap, fragments = predictor.cfg.eval.max_fragments, max(result.fragments)
    if predictor.cap_origin is not None and fragments > cap:
        warn(f"warning: {scan.source}: its densest {predictor.cfg.data.grid_size:g} m voxel holds {fragments:,} "
             f"points: predicted the first {cap} of its {fragments:,} fragments ({predictor.cap_origin}; a point "
             "they miss takes its voxel's votes); --max-fragments N or all to choose")
    scores, votes = result.scores, result.votes
    if any_stray:
        warn(describe_stray(scan.source, scan.coord, stray, scale, max_extent))
        source = np.cumsum(~stray) - 1  # point i -> its row among the kept points
        source[stray] = nearest_kept(scan.coord, stray)
        scores, votes = scores[source], votes[source]
        normal = None if normal is None else normal[source]
    return scores.argmax(1).astype(np.uint8), scores, votes, normal


def with_estimate(scan: Scan, normal: np.ndarray | None) -> Scan:
    """``scan`` with the normals :func:`predict_scan` estimated for it (``normal``, ``None`` for a network
    without normals) and the estimate they are of (``normal_estimate``: ``normal_k``, ``normal_version``), for its
    h5 file; ``scan`` itself where it carried normals (a prepared or raw room's
    own, its strays' included) or none were made."""
    if normal is None or scan.normal is not None:
        return scan
    from pointgeope.data.normal_record import current

    return dataclasses.replace(scan, normal=normal, normal_estimate=current())


def scan_normals(scan: Scan, coord: np.ndarray, say=None) -> np.ndarray:
    """The unit normals ``(N, 3)`` float32 of a scan's points ``coord`` (metres, strays left out): a prepared
    room's own (``scan.normal``, prepare's: the network sees what ``evaluate`` gives it), else estimated from the
    points as prepare estimates a room's (:func:`pointgeope.data.normals.estimate_normals`, ``k =``
    :data:`~pointgeope.data.normals.K_NORMAL`, which the resume record names), said first in one line to ``say``
    (its cost grows with the points: a large scan waits visibly)."""
    if scan.normal is not None:
        return np.asarray(scan.normal, dtype=np.float32)
    from pointgeope.data import normals

    if say is not None:
        say(f"{scan.source}: estimating the normals of {len(coord):,} points (k={normals.K_NORMAL} neighbours)")
    return normals.estimate_normals(coord, normals.K_NORMAL)


def _other_estimate(predictor: Predictor, scan: Scan, warn) -> None:
    """One warning line through ``warn`` where the normals of ``scan`` (its own, else estimated now) are of another
    estimate than any the network's run read in training (:mod:`pointgeope.data.normal_record`: every estimate of an
    area of several, and those read before a resume on files of another): said once per estimate."""
    from pointgeope.data.normal_record import current, describe

    estimate = scan.normal_estimate if scan.normal is not None else current()
    read = sorted({describe(e) for e in predictor.normals_read or []})
    if estimate is None or not read or describe(estimate) in read or describe(estimate) in predictor.warned:
        return
    predictor.warned.add(describe(estimate))
    warn(f"warning: {scan.source}: its normals are of another estimate ({describe(estimate)}) than {predictor.path}'s "
         f"run read in training ({'; '.join(read)}): the same points, other normals, so its labels may differ from "
         "those of the estimate it was measured with (said once for every scan of this estimate)")


# --- `pointgeope predict MODEL INPUT [INPUT ...] --out DIR` ------------------------------------------------

def _fail(message: str) -> None:
    print(f"pointgeope predict: error: {one_line(message)}", file=sys.stderr, flush=True)


def _checked_names(refs: list, args, errors: list[str]) -> list:
    """The scans whose outputs lie inside ``args.out`` (:func:`~pointgeope.scans.outputs.output_path`), are
    none of the inputs (``a.ply`` and ``a_pred.ply`` given together into their folder: ``a``'s output
    replaced the scan ``a_pred.ply``), and that no earlier scan writes; the others become errors. A scan
    given twice (``scans/`` and ``scans/a.ply``) is predicted once, with a note."""
    from pointgeope.paths import OutsideError, file_key
    from pointgeope.scans.outputs import output_path
    from pointgeope.scans.sources import Failure

    first: dict[str, str] = {}
    same = {}   # name -> (file, room) of the scan that writes it
    inputs = {file_key(ref.path): ref.path for ref in refs}
    inputs.pop(None, None)
    keep = []
    for ref in refs:
        try:
            paths = [output_path(args.out, ref.name, fmt, ref.source)
                     for fmt in args.format + ("probs",) * args.probabilities]
        except OutsideError as err:
            errors.append(Failure(ref.source, str(err)))
            continue
        taken = next((inputs[key] for p in paths if (key := file_key(p)) in inputs), None)
        if taken is not None:
            errors.append(Failure(ref.source, f"{ref.source}: its output would replace the input {taken}; "
                                  "predict it into another --out folder"))
        elif ref.name in first and same[ref.name] == (file_key(ref.path) or str(ref.path), ref.room):
            print(f"note: {ref.source}: given twice, predicted once", flush=True)
        elif ref.name in first:
            errors.append(Failure(ref.source, f"{ref.source}: its outputs would overwrite those of "
                                  f"{first[ref.name]} (same name {ref.name!r}); predict it into another --out folder"))
        else:
            first[ref.name], same[ref.name] = ref.source, (file_key(ref.path) or str(ref.path), ref.room)
            keep.append(ref)
    return keep


def _predict_all(predictor: Predictor, refs: list, args, errors: list[str], bugs: list[str], records) -> int:
    """Read, predict and write each scan of ``refs`` in turn (one in memory at a time) but those ``records``
    (:class:`~pointgeope.engine.predict_record.ScanRecords`) skip; a scan that fails adds its message to
    ``errors`` (and to ``bugs`` with its traceback printed, when the error is not the input's) and the next
    one goes on; a missing package of the toolkit stops them all (raised, for ``run_command``'s one line).
    Returns how many were written."""
    import time
    import traceback

    from pointgeope.extras import toolkit_message
    from pointgeope.scans.outputs import check_formats
    from pointgeope.scans.sources import Failure, read_scan

    names = list(predictor.info["class_names"])
    done = 0

    def warn(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    for ref in refs:
        t0 = time.perf_counter()
        if records.skips(ref):
            continue
        try:
            scan = read_scan(ref, normals=predictor.cfg.data.normal)  # a raw room's: for a network that reads them
            print_notes(scan.meta.get("notes", []))
            check_formats(scan, args.format, warn)
            pred, scores, votes, normal = predict_scan(predictor, scan, args.scale, progress=True, warn=warn,
                                                       max_extent=args.max_extent)
            scan = with_estimate(scan, normal)  # the h5 file carries what the network read
            probs = vote_probabilities(scores, votes, predictor.cfg.eval.vote) if args.probabilities else None
            del scores
            paths = records.write(ref, scan, pred, probs)  # the outputs, then the record that a rerun skips by
        except UserError as err:  # this scan only (ScanError, or a prepared file's SchemaError): go on
            errors.append(Failure(ref.source, str(err)))
            _fail(str(err))
            continue
        except Exception as err:  # a bug: its traceback, and the other inputs are still predicted
            if toolkit_message(err) is not None:  # the environment's, not this scan's: one line, exit 2
                raise
            traceback.print_exc()
            errors.append(Failure(ref.source, f"{ref.source}: failed on a bug (traceback above)"))
            bugs.append(ref.source)
            continue
        done += 1
        counts = np.bincount(pred, minlength=len(names))
        top = ", ".join(f"{names[c]} {counts[c] / len(pred):.1%}" for c in np.argsort(-counts)[:3] if counts[c])
        print(one_line(f"{ref.source}: {len(scan):,} points in {time.perf_counter() - t0:.1f}s ({top}) -> "
                       f"{', '.join(p.name for p in paths)} in {paths[0].parent}"), flush=True)
    return done


def predict_scans(args) -> int:
    """``pointgeope predict``: every scan of ``args.inputs`` into ``args.out``, locked (one writer per
    folder); ``args`` holds the options of ``pointgeope/commands/predict.py``. 0 when all were written,
    2 when any input failed (1 when one failed on a bug, whose traceback is printed); the last line names
    the inputs that failed. An error of the model argument or of ``--out`` is a UserError
    (one line, exit 2, by ``pointgeope.errors.run_command``). SIGTERM while it predicts stops it as Ctrl-C
    does (the lock of ``--out`` released, the file being written deleted). The data roots of prepared
    area files among the inputs are read under :func:`~pointgeope.lock.reader_lock`, as ``evaluate`` reads
    its own."""
    from pointgeope.lock import reader_lock
    from pointgeope.scans.sources import prepared_roots

    if not 0 < args.scale < float("inf"):
        raise UserError(f"expected a finite --scale > 0, got {args.scale}")
    problem = None if args.batch_points is None else range_problem(args.batch_points, "eval.batch_points")
    if problem:  # the key's range, the same as a config's
        raise UserError(f"--batch-points: {problem}")
    if not 0 < args.max_extent <= PREDICT_EXTENT_LIMIT:
        raise UserError(f"expected --max-extent in (0, {PREDICT_EXTENT_LIMIT:g}] metres, got {args.max_extent:.15g}")
    # the model first: a wrong model argument is told before any input file is read (and hashed)
    predictor = load_predictor(args.model, args.device, args.checkpoint, args.tta, args.batch_points,
                               args.max_fragments, args.overrides)
    apply_threads(predictor.cfg)
    with contextlib.ExitStack() as readers:  # no prepare into a data root read from meanwhile, nor the reverse
        for root in prepared_roots(args.inputs):
            readers.enter_context(reader_lock(root))
        return _predict_inputs(predictor, args)


def _predict_inputs(predictor: Predictor, args) -> int:
    """The scans of ``args.inputs`` found, checked, predicted and written (:func:`predict_scans`)."""
    from pointgeope.atomic import remove_leftovers, writable_folder
    from pointgeope.engine.predict_record import ScanRecords
    from pointgeope.lock import folder_lock
    from pointgeope.scans.sources import find_scans

    skipped: list[Path] = []
    refs, errors = find_scans(args.inputs, args.out, skipped)
    if skipped:
        print(one_line(f"note: {args.out}: {counted(len(skipped), 'file')} named as this command's outputs "
                       f"({first_of((p.name for p in skipped), 5)}) are not "
                       "inputs in --out"), flush=True)
    refs = _checked_names(refs, args, errors)
    for message in errors:
        _fail(message)
    if not refs:
        return 2
    writable_folder(args.out, "--out folder")
    estimated = " (a scan's normals estimated from its points)" if predictor.cfg.data.normal else ""
    print(f"model {predictor.path} on {predictor.device}: features [{' | '.join(predictor.info['features'])}]"
          f"{estimated}, grid {predictor.info['grid_size']} m, {counted(len(refs), 'scan')}", flush=True)
    print(hierarchy_place(predictor.cfg, predictor.device, evaluation=True).line(), flush=True)
    if note := build.precision_note(predictor.cfg, predictor.device, evaluation=True):
        print(note, flush=True)
    bugs: list[str] = []
    with folder_lock(args.out):  # SIGTERM (run_command): as Ctrl-C, the lock released
        for folder in {(Path(args.out) / ref.name).parent for ref in refs}:  # the folders it writes, no other's:
            # the temporary files of a run killed there (kill -9); not another predict's --out made there
            remove_leftovers(folder, recursive=False, locked=folder == Path(args.out))
        records = ScanRecords(args.out, predictor, args, force=args.force)
        with eval_weights.copies(predictor.model, predictor.cfg, predictor.device):   # eval.amp's: once for all
            done = _predict_all(predictor, refs, args, errors, bugs, records)
    failed, skip = ", ".join(getattr(e, "source", e) for e in errors), records.skipped
    print(one_line(f"predicted {done} of {counted(done + skip + len(errors), 'input')} into {args.out}"
                   + (f"; {skip} skipped, complete from an earlier run" if skip else "")
                   + (f"; {len(errors)} failed: {failed} (see the errors above)" if errors else "")))
    return 1 if bugs else 2 if errors else 0
