"""Full-resolution evaluation: a prediction for every point of every test room, by voting over fragments.

For each test-time view of a room (the identity, or the augmentations of ``eval.tta``) the room's
sample (:func:`pointgeope.data.dataset.room_sample`) is cut into test-time pieces, the published voxel
fragments and their crops (:mod:`pointgeope.data.fragments` explains both). Each piece is a sample
exactly like a training block (``pos`` shifted to a minimum of 0, ``x = [rgb/255 | pos]``), pieces are
stacked into batches of at most ``eval.batch_points`` points (PTv3's: of one serialization depth, so that a
piece's scores do not depend on the batch, :mod:`pointgeope.engine.vote_batches`), and each point sums the scores of
every prediction made for it::

    scores[i] = sum over views v, pieces c containing i of s(model(c))[i]      (N, C) float32
    votes[i]  = number of those predictions                                     (N,)   >= 1
    pred[i]   = argmax_c scores[i, c]

with ``s`` the raw logits (``eval.vote: logits``, as the authors' ``tool/test.py`` sums them) or their
softmax (``eval.vote: softmax``, each prediction weighs the same whatever its confidence). With
``eval.max_fragments`` only the first fragments are predicted and a point none of them holds takes the
summed scores of its voxel (:func:`pointgeope.data.fragments.fill_from_voxels`).

The network never sees more than ``max(voxel_max, batch_points)`` points at once and fragments are made
one at a time, so peak memory is set by the fragment size plus the ``N x C`` score buffer, not by the
room (``bench/bench_evaluate.py``). The pieces of the next batch are cut and stacked by a background
thread while a batch runs (:func:`~pointgeope.engine.placement.pipelined`), their point hierarchy built where
:func:`~pointgeope.engine.placement.hierarchy_place` says (``data.hierarchy``; by default beside the forward on
CUDA, by that thread on the CPU); :mod:`pointgeope.engine.vote_batches` runs the batches.

Output of :func:`evaluate_fold`: ``RUN/area_K/predictions/Area_K.h5`` (layout in :mod:`pointgeope.h5_predictions`),
then ``RUN/area_K/metrics.json`` (both carry the test's token, so that a stop between the writes leaves a
pair that every reader tells apart: :mod:`~pointgeope.engine.fold_result`), with ``"complete": true`` once
the fold has trained all its ``train.epochs`` (``"trained_epochs"`` of ``"epochs"``: an interrupted fold can be
evaluated, it stays unfinished).
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from pointgeope.atomic import writable_folder
from pointgeope.constants import FOLD_NAME, class_names
from pointgeope.data import normal_record
from pointgeope.data.check import area_checksums, check_areas
from pointgeope.data.dataset import room_sample
from pointgeope.data.folds import load_folds
from pointgeope.data.fragments import fill_from_voxels, room_pieces, voxel_fragments
from pointgeope.data.points import Points
from pointgeope.data.ptv3_dataset import check_normals
from pointgeope.data.ptv3_test import feature_normals, ptv3_room_pieces
from pointgeope.data.rooms import RoomRef
from pointgeope.data.transforms import ToData
from pointgeope.engine import build, distributed, eval_weights, placement
from pointgeope.engine.ahead import with_index
from pointgeope.engine.config import Config, TTAConfig
from pointgeope.engine.fold_lock import fold_folder
from pointgeope.engine.fold_record import fold_checkpoint
from pointgeope.engine.fold_result import TEST_KEY, new_test, nothing_scored, unfinished_metrics_warning, untrained_fold
from pointgeope.engine.machine_record import fold_machines
from pointgeope.engine.prefetch import Prefetch
from pointgeope.engine.runio import progress, write_json_atomic
from pointgeope.engine.vote_batches import PieceBatch, VoteSink, batch_points, packed, piece_key, stack
from pointgeope.engine.weights import load_model_state
from pointgeope.errors import UserError
from pointgeope.h5 import NORMAL, area_path, list_rooms, read_labels, read_room
from pointgeope.h5_predictions import predictions_path, write_predictions
from pointgeope.lock import reader_lock
from pointgeope.metrics import ConfusionMeter, confusion_matrix, scores
from pointgeope.model.ops.fps import FPS_RULE
from pointgeope.provenance import code_record

# --- test-time views -----------------------------------------------------------------------------------

def tta_views(tta: TTAConfig) -> list[tuple[float, bool, float]]:
    """``(scale, flip_x, angle)`` of every view: ``scales x {no flip, flip} x rotations``."""
    if tta.rotations < 1 or not tta.scales or any(s <= 0 for s in tta.scales):
        raise ValueError(f"expected eval.tta with rotations >= 1 and positive scales, got {tta}")
    flips = (False, True) if tta.flips else (False,)
    return [(float(s), f, 2 * math.pi * k / tta.rotations)
            for s in tta.scales for f in flips for k in range(tta.rotations)]


def view_coord(coord: np.ndarray, scale: float, flip: bool, angle: float) -> np.ndarray:
    """``R_z(angle) @ diag(-1 if flip, 1, 1) @ (scale * (p - c)) + c`` about the room centre ``c``."""
    if scale == 1.0 and not flip and angle == 0.0:
        return coord
    centre = (coord.min(0) + coord.max(0)) / 2
    p = (coord - centre) * np.float32(scale)
    if flip:
        p[:, 0] = -p[:, 0]
    cos, sin = math.cos(angle), math.sin(angle)
    rot = np.array([[cos, -sin, 0], [sin, cos, 0], [0, 0, 1]], dtype=np.float32)
    return (p @ rot.T + centre).astype(np.float32)


# --- one room --------------------------------------------------------------------------------------------

class RoomVotes(NamedTuple):
    """The votes of one room: ``scores (N, C)`` float32 summed over predictions, ``votes (N,)`` int32
    predictions per point, ``fragments`` per view, ``filled`` points that took their voxel's scores."""

    scores: np.ndarray
    votes: np.ndarray
    fragments: list[int]
    filled: int


class _Layout:
    """What the producer of a room's batches tells the caller: fragments per view, the first view's voxels."""

    def __init__(self):
        self.counts: list[int] = []
        self.first = None   # VoxelGroups of the first view


def _room_pieces(coord: np.ndarray, color: np.ndarray, cfg: Config, seed: int, layout: _Layout,
                 show_progress: bool, normal: np.ndarray | None = None) -> Iterator[tuple[np.ndarray, Points]]:
    """``(room index, Points)`` of every piece of every view of the room, in order (module docstring); fills
    ``layout``."""
    if cfg.eval.protocol == "ptv3":
        yield from _ptv3_pieces(coord, color, cfg, seed, layout, show_progress, normal)
        return
    to_data = ToData(height=cfg.data.height, color=cfg.data.color)
    for v, (scale, flip, angle) in enumerate(tta_views(cfg.eval.tta)):
        rng = np.random.default_rng([seed, v])
        room = room_sample(view_coord(np.asarray(coord, dtype=np.float32), scale, flip, angle), color,
                           height=cfg.data.height)
        fragments = voxel_fragments(room["coord"], cfg.data.grid_size, rng)
        if layout.first is None:
            layout.first = fragments.groups
        layout.counts.append(len(fragments))
        used = len(fragments) if cfg.eval.max_fragments is None else min(len(fragments), cfg.eval.max_fragments)
        pieces = room_pieces(room, fragments, cfg.data.voxel_max, rng, max_fragments=used)
        for index, piece in progress(pieces, show_progress, desc=f"view {v + 1} fragments"):
            yield index, to_data(piece)


def _ptv3_pieces(coord: np.ndarray, color: np.ndarray, cfg: Config, seed: int, layout: _Layout,
                 show_progress: bool, normal: np.ndarray | None) -> Iterator[tuple[np.ndarray, Points]]:
    """``eval.protocol: ptv3``: Pointcept's 10 views and grid-sample fragments (:mod:`pointgeope.data.ptv3_test`),
    each piece a ``Points`` with ``grid_coord``; no crop, no ``eval.tta`` (its views are the protocol's); with
    ``data.normal`` the room's ``normal`` (N, 3) goes along, ``x = [rgb | normal]``."""
    if cfg.eval.tta != TTAConfig():
        raise UserError(f"eval.protocol=ptv3 has its own 10 test views; expected the default eval.tta, "
                        f"got {cfg.eval.tta}")

    def on_view(frags) -> None:
        layout.counts.append(len(frags))
        layout.first = frags.fragments.groups if layout.first is None else layout.first

    pieces = ptv3_room_pieces(room_sample(np.asarray(coord, dtype=np.float32), color), cfg.data.grid_size, seed,
                              cfg.data.color, max_fragments=cfg.eval.max_fragments, on_view=on_view,
                              normal=feature_normals(cfg.data.normal, normal, coord.shape[0]))
    yield from progress(pieces, show_progress, desc="ptv3 views fragments")


def _room_batches(coord: np.ndarray, color: np.ndarray, cfg: Config, seed: int, limit: int, spec, device: torch.device,
                  beside: bool, layout: _Layout, show_progress: bool,
                  normal: np.ndarray | None = None) -> Iterator[PieceBatch]:
    """The room's pieces (:func:`_room_pieces`) packed in their order into batches of at most ``limit``
    points, PTv3's of one serialization depth each (:func:`~pointgeope.engine.vote_batches.packed` with
    :func:`~pointgeope.engine.vote_batches.piece_key`), with their hierarchy by ``spec`` unless None:
    on the host, or with ``beside`` on the CUDA device beside the forward of the batch before
    (``vote_batches.stack``)."""
    pin = device.type == "cuda"
    if pin:     # vote_room's producer thread starts on cuda:0 (CUDA's device is per thread): pinning there
        torch.cuda.set_device(device)     # would open a context on cuda:0 in a cuda:1 run
    pieces = _room_pieces(coord, color, cfg, seed, layout, show_progress, normal)
    for group in packed(pieces, lambda piece: piece[0].shape[0], limit, key=piece_key):
        yield stack(group, spec, pin, device if beside else None)


@torch.inference_mode()
def vote_room(model: torch.nn.Module, coord: np.ndarray, color: np.ndarray, cfg: Config, device: torch.device,
              seed: int = 0, show_progress: bool = False, normal: np.ndarray | None = None) -> RoomVotes:
    """Summed scores and prediction counts of one room (see the module docstring).

    A background thread (:class:`~pointgeope.engine.prefetch.Prefetch`) cuts the room into pieces and
    stacks them into batches while the previous batch runs, so the device never waits for them
    (on the CPU when a core is free, :func:`~pointgeope.engine.placement.pipelined`); their hierarchy is
    built where :func:`~pointgeope.engine.placement.hierarchy_place` says.

    Args:
        model: the segmentation network (in eval mode), ``model(coord, feat, offset) -> (M, C)`` logits.
        coord: ``(N, 3)`` float32 room coordinates (metres); color: ``(N, 3)`` uint8.
        cfg: ``data.grid_size``, ``data.voxel_max``, ``data.height`` and ``eval.*`` are used (the precision:
            ``eval.amp``, float32 by default, ``build.eval_precision``; never ``train.amp``).
        seed: seeds the within-voxel shuffles and the crop seeds (the result is a function of it).
        show_progress: a bar over the fragments (on a terminal).
        normal: ``(N, 3)`` unit normals, the features of a ``data.normal`` network (needed by it only).
    """
    device = with_index(device)    # the producer thread runs on this device, not on its own current one
    n = coord.shape[0]
    scores = np.zeros((n, cfg.model.num_classes), dtype=np.float32)
    votes = np.zeros(n, dtype=np.int32)
    sink, layout = VoteSink(model, scores, votes, cfg, device), _Layout()
    place = placement.hierarchy_place(cfg, device, evaluation=True)
    spec = None if place.where == "model" else getattr(model, "hierarchy_spec", None)
    batches = _room_batches(coord, color, cfg, seed, batch_points(cfg, device), spec, device, place.where == "beside",
                            layout, show_progress, normal)
    thread = placement.pipelined(device)
    ahead = Prefetch(batches, depth=2, name="vote_room batches") if thread else contextlib.nullcontext(batches)
    with ahead as ready, eval_weights.copies(model, cfg, device):  # eval.amp: the run's copies, else the room's
        for batch in ready:
            sink.add(batch)
    sink.finish()
    filled = fill_from_voxels(layout.first, scores, votes)
    return RoomVotes(scores, votes, layout.counts, filled)


def room_seed(seed: int, room: str) -> int:
    """The vote seed of a room: ``(seed * 1000003 + crc32(utf-8 name)) mod 2^32``; a name from a file name's
    undecodable bytes (surrogates) counts those bytes."""
    return (seed * 1_000_003 + zlib.crc32(room.encode("utf-8", "surrogateescape"))) % 2**32


# --- one fold --------------------------------------------------------------------------------------------

def not_a_fold(run: Path) -> str:
    """The message of a model argument that is no fold folder ``RUN/area_K`` (evaluate's and predict's): a
    run folder's is told the fold folders it holds; a fold folder that is not there yet is told to train it
    (:func:`~pointgeope.engine.fold_result.untrained_fold`)."""
    run = Path(run)
    if (match := FOLD_NAME.fullmatch(run.name)) and not os.path.lexists(run):
        return untrained_fold(run, int(match[1]))
    try:
        folds = sorted((p.name for p in run.iterdir() if p.is_dir() and FOLD_NAME.fullmatch(p.name)),
                       key=lambda name: int(FOLD_NAME.fullmatch(name)[1]))
    except OSError:  # not a folder, or one that cannot be listed: no folds to name
        folds = []
    return (f"expected a fold folder named area_K (RUN/area_K), got {run}" + ("" if run.is_dir() else " (not a folder)")
            + (f"; give a fold, e.g. {run / folds[0]} (its folds: {', '.join(folds)})" if folds else ""))


def fold_of_run(run: Path) -> int:
    match = FOLD_NAME.fullmatch(Path(run).name)
    if not match or not Path(run).is_dir():
        raise UserError(not_a_fold(run))
    return int(match.group(1))


def predict_areas(model: torch.nn.Module, cfg: Config, areas: list[str], env: distributed.DistEnv,
                  progress_desc: str | None = None) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, dict]]:
    """This rank's share of the rooms (room i -> rank i % world): ``{area: {room: pred uint8 (N,)}}`` and
    ``{"area/room": {"fragments": per view, "filled": points}}``."""
    root = Path(cfg.data.root)
    jobs = [(area, room) for area in areas for room in list_rooms(area_path(root, area))]
    mine = jobs[env.rank::env.world_size]
    model.eval()
    out: dict[str, dict[str, np.ndarray]] = {area: {} for area in areas}
    stats: dict[str, dict] = {}
    bars = env.is_main and cfg.train.progress
    if cfg.data.normal:   # every rank checks every room (not its share): all refuse together, none waits
        check_normals([RoomRef(area_path(root, area), area, room, 0) for area, room in jobs])
    with eval_weights.copies(model, cfg, env.device):   # eval.amp's copies of the weights: once for all the rooms
        for area, room in progress(mine, bars, desc=progress_desc or "evaluate", total=len(mine)):
            data = read_room(area_path(root, area), room, fields=("coord", "color") + (NORMAL,) * cfg.data.normal)
            result = vote_room(model, data["coord"], data["color"], cfg, env.device,
                               seed=room_seed(cfg.train.seed, room), show_progress=bars, normal=data.get(NORMAL))
            if (result.votes < 1).any():
                raise RuntimeError(f"{area}/{room}: {(result.votes < 1).sum()} points got no prediction")
            out[area][room] = result.scores.argmax(1).astype(np.uint8)
            stats[f"{area}/{room}"] = {"fragments": result.fragments, "filled": result.filled}
    return out, stats


def validate(cfg: Config, model: torch.nn.Module, root: Path, areas: list[str],
             env: distributed.DistEnv) -> tuple[dict, dict[str, dict[str, np.ndarray]]]:
    """Scores of the test area(s) at full resolution without TTA (for ``best.pt``), all ranks summed, and
    this rank's predictions ``{area: {room: pred uint8 (N,)}}``."""
    no_tta = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, tta=TTAConfig()))
    preds, _ = predict_areas(model, no_tta, areas, env, progress_desc="validate")
    meter = ConfusionMeter(cfg.model.num_classes, cfg.train.ignore_index, device=env.device)
    for area, rooms in preds.items():
        for room, pred in rooms.items():
            label = read_labels(area_path(root, area), room)
            meter.update(torch.from_numpy(pred.astype(np.int64)), torch.from_numpy(label.astype(np.int64)))
    meter.all_reduce()
    model.train()
    return meter.scores(cfg.eval.class_mean), preds


def _json_number(x: float):
    return None if math.isnan(x) else x


def evaluate_fold(run: Path, cfg: Config, env: distributed.DistEnv, log=print, checked: bool = False) -> dict:
    """Predict every point of the fold's test area(s), write predictions and ``metrics.json``. The test
    area files are checked first, as training checks its areas (:func:`pointgeope.data.check.check_areas`;
    not when ``checked``: the training run that calls it checked them at its start), and refused when they
    differ from those the checkpoint trained on (its recorded checksums), as is a checkpoint of another fold."""
    from pointgeope.engine import checkpoint, trained_data

    run, root = Path(run), Path(cfg.data.root)
    fold = fold_of_run(run)
    folds = load_folds(root)
    if fold not in folds:
        raise UserError(f"{run}: fold {fold} is not in {root / 'folds.json'} (folds {sorted(folds)})")
    areas = list(folds[fold].test)
    ckpt_path, ckpt = fold_checkpoint(run, cfg, folds[fold], log if env.is_main else lambda line: None)
    if env.is_main:  # the test areas as training checks its areas, and against what the checkpoint saw
        if not checked:
            check_areas(root, areas, cfg.model.num_classes)
        trained_data.check_data_of(ckpt_path, ckpt, area_checksums(root, areas), root, log)
        writable_folder(run / "predictions", "predictions folder")  # before the long part
    distributed.barrier()
    model = build.model(cfg).to(env.device)
    load_model_state(model, ckpt, ckpt_path)
    trained = checkpoint.fold_progress(ckpt_path, ckpt, log=log if env.is_main else None)[0]
    if env.is_main:
        log(placement.hierarchy_place(cfg, env.device, evaluation=True).line())
        if note := build.precision_note(cfg, env.device, evaluation=True):
            log(note)
    t0 = time.perf_counter()
    mine = predict_areas(model, cfg, areas, env, progress_desc=f"evaluate {', '.join(areas)}")
    if env.distributed:
        gathered = [None] * env.world_size
        torch.distributed.all_gather_object(gathered, mine)
    else:
        gathered = [mine]
    fragments = {room: info for _, part in gathered for room, info in part.items()}
    gathered = [preds for preds, _ in gathered]
    seconds = time.perf_counter() - t0
    metrics: dict = {}
    if env.is_main:
        confusion = np.zeros((cfg.model.num_classes,) * 2, dtype=np.int64)
        num_points = 0
        test = new_test()  # in each predictions file and, last, metrics.json: one pair (fold_result)
        for area in areas:
            rooms = {room: pred for part in gathered for room, pred in part[area].items()}
            for room, pred in rooms.items():
                label = read_labels(area_path(root, area), room)
                if label.shape != pred.shape:
                    raise RuntimeError(f"{area}/{room}: {pred.shape[0]} predictions for {label.shape[0]} points")
                confusion += confusion_matrix(pred, label, cfg.model.num_classes, cfg.train.ignore_index)
                num_points += int(pred.shape[0])
            write_predictions(predictions_path(run, area), area, rooms, {"checkpoint": ckpt_path.name, "test": test,
                              "epoch": int(ckpt["epoch"]), "class_names": class_names(cfg.model.num_classes),
                              "ignore_index": int(cfg.train.ignore_index)})  # viz scores as evaluate does
        if not confusion.any():  # no score: never an all-zero metrics.json marked complete
            raise UserError(nothing_scored(run, areas, cfg.train.ignore_index))
        s = scores(confusion, cfg.eval.class_mean)
        metrics = {
            "area": areas[0] if len(areas) == 1 else areas, "fold": fold, "test_areas": areas,
            "class_names": class_names(cfg.model.num_classes), "confusion": confusion.tolist(),
            "oa": _json_number(s["oa"]), "macc": _json_number(s["macc"]), "miou": _json_number(s["miou"]),
            "iou": [_json_number(v) for v in s["iou"]], "acc": [_json_number(v) for v in s["acc"]],
            "class_mean": cfg.eval.class_mean,
            "num_points": num_points, "checkpoint": ckpt_path.name, "epoch": int(ckpt["epoch"]),
            "tta_views": len(tta_views(cfg.eval.tta)), "vote": cfg.eval.vote, "eval_seconds": round(seconds, 2),
            "max_fragments": cfg.eval.max_fragments, "fragments": dict(sorted(fragments.items())),
            "pe": cfg.model.pe, "fps_rule": FPS_RULE, "trained_epochs": trained, "epochs": cfg.train.epochs,
            "complete": trained >= cfg.train.epochs,  # an unfinished fold is never marked complete
            "config": dataclasses.asdict(cfg),  # what was evaluated: report compares its folds' (report/settings.py)
            "data": ckpt.get("data"), "data_points": ckpt.get("data_points"), **normal_record.tested(ckpt, root, areas),
            TEST_KEY: test, **code_record(), **fold_machines(ckpt, env, cfg.eval.amp),  # its code, its machines
        }
        write_json_atomic(run / "metrics.json", metrics)
        log(f"evaluated {', '.join(areas)}: {num_points:,} points in {seconds:.1f}s -> "
            f"{run / 'predictions'}, {run / 'metrics.json'}")
    if env.distributed:
        box = [metrics]
        torch.distributed.broadcast_object_list(box, src=0)
        metrics = box[0]
    return metrics


# --- `pointgeope evaluate RUN/area_K` -------------------------------------------------------------------

def evaluate_run(run: Path, overrides: list[str]) -> int:
    """``pointgeope evaluate``: evaluate the fold folder ``run`` with its ``config.yaml`` (or, deleted, its
    checkpoint's config) and ``overrides`` (one writer per fold folder, as train); prints the scores, returns
    the exit code. SIGTERM stops it as Ctrl-C does (its lock released, its temporary files deleted)."""
    from pointgeope.engine.checkpoint import fold_config

    fold_of_run(run)
    cfg = fold_config(run, overrides)
    distributed.apply_threads(cfg)
    env = distributed.setup(cfg.train.device)
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(fold_folder(run, env))  # one writer per fold folder, as train; leftovers removed
            stack.enter_context(reader_lock(cfg.data.root))  # and no prepare into the data root meanwhile
            m = evaluate_fold(run, cfg, env)
    finally:
        distributed.cleanup()
    if env.is_main:
        unfinished = "" if m["complete"] else f"  (unfinished: trained {m['trained_epochs']} of {m['epochs']} epochs)"
        if unfinished:  # (a training evaluates its fold once finished only)
            print(unfinished_metrics_warning(run, m["trained_epochs"], m["epochs"]))
        print(f"{m['area']}: oa {m['oa']:.4f}  macc {m['macc']:.4f}  miou {m['miou']:.4f}{unfinished}")
    return 0
