"""Segment users' scans with a trained model: a label for every input point, in input order.

For each scan (``pointgeope.scans``): its coordinates are multiplied by ``scale`` (``--scale``, e.g. 0.001 for
millimetres), shifted in float64 so that their minimum is 0 (georeferenced coordinates keep their precision in
float32), and voted on by :func:`pointgeope.engine.evaluate.vote_room` as ``evaluate`` predicts a test room (but
with one view unless ``--tta``, and a fragment cap where the run has none), with the same seed for a room of the
same name (:func:`~pointgeope.engine.evaluate.room_seed`): memory is bounded by the fragment size plus the
``N x C`` vote buffer, whatever the size of the scan. The label of point ``i`` is ``argmax_c scores[i, c]`` and its
probabilities are :func:`~pointgeope.engine.probabilities.vote_probabilities`.

Before predicting, a scan is checked against what the checkpoint says the model expects
(:func:`~pointgeope.engine.prediction_info.prediction_metadata`): a colour model refuses a scan without colour
(never zeros in its place), and a warning says when the scan's point spacing
(:func:`~pointgeope.data.spacing.median_spacing`) is more than :data:`SPACING_FACTOR` times off the
training rooms' (a unit mistake: millimetres or feet read as metres).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from pathlib import Path

import numpy as np
import torch

from pointgeope.constants import FOLD_NAME, PREDICT_EXTENT_LIMIT, PREDICT_MAX_EXTENT, PREDICT_MAX_FRAGMENTS
from pointgeope.data.spacing import median_spacing
from pointgeope.engine import build
from pointgeope.engine.checkpoint import CheckpointError, load_checkpoint, unfinished_warning
from pointgeope.engine.config import Config, ConfigError, TTAConfig, config_from_dict, override_key
from pointgeope.engine.config_values import range_problem
from pointgeope.engine.distributed import apply_threads, choose_device
from pointgeope.engine.evaluate import not_a_fold, room_seed, vote_room
from pointgeope.engine.fold_result import missing_checkpoint, predict_last, unvalidated_best
from pointgeope.engine.placement import hierarchy_place
from pointgeope.engine.prediction_info import checkpoint_prediction_info
from pointgeope.engine.probabilities import vote_probabilities
from pointgeope.engine.weights import load_model_state
from pointgeope.errors import UserError, one_line
from pointgeope.scans.scan import Scan, ScanError, one_colour_note
from pointgeope.scans.stray import describe_stray, nearest_kept, refusal, stray_points

SPACING_FACTOR = 10.0
# load_checkpoint's error of a MODEL file torch cannot load (MODEL and INPUT swapped); a fold folder's: UNREADABLE
UNREADABLE_MODEL = "MODEL {path}: expected a checkpoint (.pt) or a fold folder RUN/area_K, got {kind}"
# ... and of a MODEL file that is a checkpoint torch cannot read (cut short, corrupted: checkpoint.damaged)
DAMAGED_MODEL = ("MODEL {path}: a damaged checkpoint, torch cannot read it ({kind}; cut short or corrupted, e.g. by an "
                 "interrupted copy); copy it again, or give another checkpoint of its fold (RUN/area_K/best.pt or last.pt)")
DEFAULT_TTA = TTAConfig(rotations=4, flips=True)  # --tta when the run's config has no test-time views
# Besides eval.*: the overrides that change how predict runs, free keys of the checkpoint (checkpoint.FREE_KEYS)
# that predict reads (where the point hierarchy is built, torch's CPU threads; --device chooses the device).
PREDICT_KEYS = frozenset({"data.hierarchy", "train.threads"})


class PredictError(UserError, ValueError):
    """A model argument that cannot be used (missing checkpoint, an override predict does not take)."""


@dataclasses.dataclass
class Predictor:
    """A trained model ready to predict: network (eval mode), its config and ``"predict"`` metadata;
    ``cap_origin``: where the fragment cap comes from when the user did not choose it (predict's default
    :data:`PREDICT_MAX_FRAGMENTS`, or the run's ``eval.max_fragments``): a scan it cuts is warned about;
    ``None`` for ``--max-fragments`` or an ``eval.max_fragments`` override; ``checksum``: the sha256 of the
    checkpoint's bytes the network was loaded from (what predict's records name)."""

    model: torch.nn.Module
    cfg: Config
    info: dict
    device: torch.device
    path: Path
    cap_origin: str | None = None
    checksum: str | None = None

    @property
    def palette(self) -> np.ndarray:
        return np.asarray(self.info["palette"], dtype=np.uint8)

    @property
    def uses_color(self) -> bool:
        return "rgb" in self.info["features"]


def checkpoint_path(model: str | Path, which: str | None = None) -> Path:
    """``CHECKPOINT.pt`` as given, or ``RUN/area_K/<which>.pt`` (``which``: ``--checkpoint``, else the
    run's ``eval.checkpoint`` as ``evaluate`` uses it, else ``last``); a folder without that file and not
    named ``area_K`` (a run folder ``RUN``) is refused with the folds it holds, a fold folder not there or
    without it in ``evaluate``'s words (train it first: :mod:`pointgeope.engine.fold_result`)."""
    model = Path(model)
    fold = FOLD_NAME.fullmatch(model.name)
    if fold and not os.path.lexists(model):   # a fold not trained yet (or a typo)
        raise PredictError(not_a_fold(model))
    if not model.is_dir():
        if which is not None:
            raise PredictError(f"--checkpoint {which} needs a run folder RUN/area_K, got the file {model}")
        return model
    if which is None:
        which = "last"
        if (model / "config.yaml").is_file():
            from pointgeope.engine.config import load_record

            try:
                which = load_record(model / "config.yaml").eval.checkpoint
            except ConfigError:
                pass  # the checkpoint carries its own config; last.pt it is
    path = model / f"{which}.pt"
    if not path.exists():  # a fold stopped before this checkpoint; RUN given for RUN/area_K: its folds named
        raise (CheckpointError(missing_checkpoint(path, int(fold[1]), predict_last(path, folder=True)))
               if fold else PredictError(not_a_fold(model)))
    return path


def _prediction_config(ckpt: dict, path: Path, tta: bool, batch_points: int | None,
                       max_fragments: int | None | bool, overrides: list[str]) -> tuple[Config, str | None]:
    """The checkpoint's config with ``overrides`` (of eval.* and the free keys only: not of what the
    network was trained with), adjusted for prediction (see :func:`load_predictor`); and where the fragment
    cap comes from when the user did not choose it (:attr:`Predictor.cap_origin`)."""
    keys = [override_key(text) for text in overrides]     # ' eval.tta.rotations=4' -> 'eval.tta.rotations'
    for text, key in zip(overrides, keys):
        if key == "eval.checkpoint":   # the file is chosen before its config is read (checkpoint_path)
            raise PredictError(f"override {text!r}: not read (the checkpoint is chosen before its config); leave it "
                               "out, and choose a run folder's with --checkpoint last|best, or give the file "
                               "RUN/area_K/best.pt")
        if not key.startswith("eval.") and key not in PREDICT_KEYS:
            raise PredictError(f"override {text!r}: predict takes overrides of eval.* and of "
                               f"{', '.join(sorted(PREDICT_KEYS))}, not of what the network was trained with "
                               "(nor of the keys that set where and how training runs: --device chooses the device)")
    try:
        config_from_dict(ckpt["config"], where="its config")
    except ConfigError as err:
        raise CheckpointError(f"{path}: written by another version of pointgeope ({err})") from None
    cfg = config_from_dict(ckpt["config"], where=f"{path}'s config", overrides=overrides)
    views, sets_views = cfg.eval.tta, any(key == "eval.tta" or key.startswith("eval.tta.") for key in keys)
    if cfg.eval.protocol == "ptv3":      # its own 10 views are the test (with or without --tta): no eval.tta
        if sets_views:
            raise PredictError(f"{path}: a run of eval.protocol=ptv3, whose test has its own 10 views; leave out "
                               "the eval.tta overrides")
        tta = False
    if not tta and not sets_views:
        views = TTAConfig()
    elif tta and views == TTAConfig():
        views = DEFAULT_TTA
    cap, origin = cfg.eval.max_fragments if max_fragments is False else max_fragments, None
    if max_fragments is False and cap is None:
        cap, origin = PREDICT_MAX_FRAGMENTS, "predict's default cap"
    elif max_fragments is False and "eval.max_fragments" not in keys:
        origin = "the run's eval.max_fragments"
    ev = dataclasses.replace(cfg.eval, tta=views, batch_points=batch_points or cfg.eval.batch_points,
                             max_fragments=cap)
    return dataclasses.replace(cfg, eval=ev), origin


def load_predictor(model: str | Path, device: str = "auto", checkpoint: str | None = None,
                   tta: bool = False, batch_points: int | None = None, max_fragments: int | None | bool = False,
                   overrides: list[str] = ()) -> Predictor:
    """The network of ``model`` (a run folder or a ``.pt``) on ``device``, its config adjusted for
    prediction: without ``tta`` one view (unless ``overrides`` set ``eval.tta``); with it the run's
    ``eval.tta``, or :data:`DEFAULT_TTA` if that is a single view; at most ``max_fragments`` fragments
    (``None``: all; ``False``, not given: the run's ``eval.max_fragments``, or
    :data:`~pointgeope.constants.PREDICT_MAX_FRAGMENTS` where that is null). Raises PredictError or
    CheckpointError, also when the file is replaced while it is read (hashed before and after: a run that
    trains on saves its last.pt; the checksum must name the bytes loaded)."""
    from pointgeope.engine.predict_record import checksum_or_none as _checksum

    path = checkpoint_path(model, checkpoint)   # a fold's damaged checkpoint gets training's words; MODEL's a file
    checksum = _checksum(path)    # None, unreadable: load_checkpoint says why
    ckpt = (load_checkpoint(path) if Path(model).is_dir()
            else load_checkpoint(path, unreadable=UNREADABLE_MODEL, damaged_file=DAMAGED_MODEL))
    if _checksum(path) != checksum:
        raise CheckpointError(f"{path}: replaced while predict read it (a run still training saves it); run the "
                              "same command again")
    if line := unvalidated_best(path, ckpt, predict_last(path, Path(model).is_dir())):
        raise CheckpointError(line)     # best.pt of a fold that no validation picked an epoch of
    info = checkpoint_prediction_info(ckpt, path)
    warning = unfinished_warning(path, ckpt)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    cfg, cap_origin = _prediction_config(ckpt, path, tta, batch_points, max_fragments, list(overrides))
    dev = choose_device(device, option="--device")
    net = build.model(cfg).to(dev)
    load_model_state(net, ckpt, path)
    net.eval()
    return Predictor(net, cfg, info, dev, path, cap_origin, checksum)


def check_scan(predictor: Predictor, scan: Scan, coord: np.ndarray, scale: float = 1.0, warn=print) -> None:
    """Refuse a scan without colour for a colour model, note one of one colour to it; warn when its spacing
    is far from training's (a scan of fewer than 2 distinct points has none to compare)."""
    if predictor.uses_color and scan.color is None:
        raise ScanError(f"{scan.source}: has no colour, but {predictor.path} was trained with colour features "
                        f"([{' | '.join(predictor.info['features'])}]); train a geometry-only model "
                        "(data.color=false model.in_channels=3, features [xyz]) and predict with that")
    if predictor.uses_color and (note := one_colour_note(scan)) is not None:  # a geometry-only model: no matter
        warn(f"note: {note}")
    reference = predictor.info.get("spacing")
    spacing = median_spacing(coord) if reference else float("nan")  # nan: fewer than 2 distinct points
    if np.isfinite(spacing):
        ratio = spacing / reference
        if not (1 / SPACING_FACTOR <= ratio <= SPACING_FACTOR):
            warn(f"warning: {scan.source}: median point spacing {spacing:.3g} (after --scale {scale:g}) is "
                 f"{ratio:.3g} times the training rooms' {reference:.3g} m; if its unit is not metres, pass --scale "
                 "(0.001 for millimetres, 0.3048 for feet)")


def predict_scan(predictor: Predictor, scan: Scan, scale: float = 1.0, progress: bool = False,
                 warn=print, max_extent: float = PREDICT_MAX_EXTENT) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(pred uint8 (N,), scores (N, C), votes (N,))`` of one scan (see the module docstring); with
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
        scan, coord=points, color=None if scan.color is None else scan.color[~stray])
    check_scan(predictor, kept, coord, scale, warn)
    color = kept.color if kept.color is not None else np.zeros((len(kept), 3), np.uint8)  # unused by [xyz] models
    room = scan.name.rsplit("/", 1)[-1]
    result = vote_room(predictor.model, coord, color, predictor.cfg, predictor.device,
                       seed=room_seed(predictor.cfg.train.seed, room), show_progress=progress)
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
    return scores.argmax(1).astype(np.uint8), scores, votes


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
            scan = read_scan(ref)
            for note in scan.meta.get("notes", [])[:20]:
                print(f"note: {note}")
            check_formats(scan, args.format, warn)
            pred, scores, votes = predict_scan(predictor, scan, args.scale, progress=True, warn=warn,
                                               max_extent=args.max_extent)
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
    from pointgeope.atomic import writable_folder
    from pointgeope.engine.predict_record import ScanRecords
    from pointgeope.lock import folder_lock
    from pointgeope.scans.sources import find_scans

    skipped: list[Path] = []
    refs, errors = find_scans(args.inputs, args.out, skipped)
    if skipped:
        print(one_line(f"note: {args.out}: {len(skipped)} file(s) named as this command's outputs "
                       f"({', '.join(p.name for p in skipped[:5])}{', ...' if len(skipped) > 5 else ''}) are not "
                       "inputs in --out"), flush=True)
    refs = _checked_names(refs, args, errors)
    for message in errors:
        _fail(message)
    if not refs:
        return 2
    writable_folder(args.out, "--out folder")
    print(f"model {predictor.path} on {predictor.device}: features [{' | '.join(predictor.info['features'])}], "
          f"grid {predictor.info['grid_size']} m, {len(refs)} scan(s)", flush=True)
    print(hierarchy_place(predictor.cfg, predictor.device, evaluation=True).line(), flush=True)
    if note := build.precision_note(predictor.cfg, predictor.device, evaluation=True):
        print(note, flush=True)
    bugs: list[str] = []
    with folder_lock(args.out):  # SIGTERM (run_command): as Ctrl-C, the lock released
        records = ScanRecords(args.out, predictor, args, force=args.force)
        done = _predict_all(predictor, refs, args, errors, bugs, records)
    failed, skip = ", ".join(getattr(e, "source", e) for e in errors), records.skipped
    print(one_line(f"predicted {done} of {done + skip + len(errors)} input(s) into {args.out}"
                   + (f"; {skip} skipped, complete from an earlier run" if skip else "")
                   + (f"; {len(errors)} failed: {failed} (see the errors above)" if errors else "")))
    return 1 if bugs else 2 if errors else 0
