"""Train Point Transformer on one fold of ``folds.json`` (or every fold), then evaluate it at full resolution.

    python train.py --config configs/s3dis/pt_geope.yaml --test-area 5 [section.key=value ...]
    python train.py --config configs/s3dis/pt_geope.yaml --cv            # every fold, complete ones skipped
    torchrun --nproc_per_node 4 train.py --config ... --test-area 5      # DDP

One fold writes ``RUN/area_K/``: ``config.yaml``, ``log.txt``, TensorBoard events, ``last.pt`` (every
epoch, and every ``train.checkpoint_every`` steps), ``best.pt`` (with ``train.val_every``),
``predictions/Area_K.h5`` and finally ``metrics.json`` with ``"complete": true``. Before the first epoch
every area file of the fold is opened and checked (``pointgeope/data/check.py``). One process writes a
fold folder at a time (``RUN/area_K/.lock``, :mod:`pointgeope.lock`); temporary files left by a killed
run are removed when the next one takes the lock. A complete fold is skipped when its ``last.pt`` was
trained with the config (free keys aside) on the same area files, refused when not; ``--force`` trains it
again from scratch.
A skipped fold is not tested again: the skip line names the ``eval.*`` values of the command that its
``metrics.json`` was not tested with and the ``pointgeope evaluate`` command that tests it with them.

Restarting the same command resumes from ``last.pt`` exactly: the loop's position (:class:`LoopState`),
the model, optimiser, schedule and scaler, and every rank's RNG states are restored, the data order and the
augmentations are functions of ``(seed, epoch, index)``, so the resumed run takes the steps the
uninterrupted one would have and logs the same epoch scores (:mod:`pointgeope.engine.state` saves and
restores all of it, the sums of an unfinished epoch's batches included). Every checkpoint records the
checksums of the fold's area files (``manifest.json``'s, else computed from the files); a resume on other
data is refused with the differing files named, and ``--force`` retrains.

Reading order: :func:`train_fold` is the loop, top to bottom (set-up and the fold's checks,
:func:`~pointgeope.engine.fold_check.check_fold`; resume, epochs, evaluation); each
epoch is :func:`train_epoch` (the optimiser steps) then :func:`end_epoch` (scores, validation,
checkpoints). :func:`~pointgeope.engine.fold_runs.run_folds` runs one fold or all of them, skipping the complete
ones before this module is imported; :func:`~pointgeope.engine.fold_runs.train` is ``pointgeope train``.
"""
from __future__ import annotations

import math
from pathlib import Path

import torch

from pointgeope.constants import class_names, fold_folder_name
from pointgeope.data.check import area_checksums
from pointgeope.data.features import feature_names
from pointgeope.data.folds import Fold
from pointgeope.data.identity import area_points
from pointgeope.data.normal_record import NormalsRead, area_estimates
from pointgeope.data.spacing import rooms_spacing
from pointgeope.engine import build, distributed, graphs
from pointgeope.engine.config import Config, config_to_dict, save_config
from pointgeope.engine.epoch_meter import EpochMeter
from pointgeope.engine.evaluate import evaluate_fold, validate
from pointgeope.engine.fold_check import check_fold
from pointgeope.engine.fold_runs import EpochBudget
from pointgeope.engine.placement import hierarchy_place
from pointgeope.engine.prediction_info import prediction_metadata
from pointgeope.engine.runio import Log, progress
from pointgeope.engine.small_batch import batch_norm_problem, ptv1_batch_norm_problem
from pointgeope.engine.state import FoldCheckpoints, Learner, LoopState
from pointgeope.engine.tensorboard import RoomClouds
from pointgeope.errors import UserError
from pointgeope.memory import neighbour_problem
from pointgeope.model.ops.fps import FPS_RULE
from pointgeope.plural import counted


def train_fold(cfg: Config, fold: int, folds: dict[int, Fold], env: distributed.DistEnv,
               budget: EpochBudget, said: set[str]) -> dict:
    """Train (or resume) fold ``fold`` and evaluate it; returns the fold's metrics (every rank). Stops the
    invocation (:class:`~pointgeope.engine.fold_runs.StopRun`) once ``budget`` is spent; ``said``: the warnings the
    command has printed."""
    run, device = Path(cfg.train.run_dir) / fold_folder_name(fold), env.device
    test_areas, train_areas = list(folds[fold].test), list(folds[fold].train)
    log = Log(run / "log.txt" if env.is_main else None)
    if env.is_main:
        run.mkdir(parents=True, exist_ok=True)
    distributed.barrier()
    check_fold(cfg, fold, folds, env, log, said)
    per_rank = build.per_rank_batch(cfg, env)
    problem = ((ptv1_batch_norm_problem(cfg.data, cfg.model.strides, per_rank)  # PTv1's batch norm, kNN memory
                or neighbour_problem(cfg.model, cfg.data.voxel_max, per_rank, device))
               if cfg.model.backbone == "ptv1" else batch_norm_problem(cfg.data, per_rank))   # PTv3's batch norm
    if problem:  # before any weight or batch is made: a step that could never fit
        raise UserError(problem)

    # The weights are drawn from the seed first (then maybe replaced by last.pt's), so that a fold
    # starts from the same weights whatever else consumes random numbers.
    torch.manual_seed(cfg.train.seed)
    model = build.model(cfg).to(device)
    dataset = build.train_dataset(cfg, train_areas)
    sampler = build.ResumableSampler(dataset, env, seed=cfg.train.seed)
    place = hierarchy_place(cfg, device, model.hierarchy_spec)
    loader = build.train_loader(cfg, dataset, sampler, env, model, place)
    steps_per_epoch = len(loader)
    if steps_per_epoch == 0:
        raise UserError(f"fold {fold}: {len(dataset)} training samples give no batch of "
                        f"{build.per_rank_batch(cfg, env)} per rank; lower data.batch_size or raise data.loop")
    optimizer = build.optimizer(cfg, model)
    scheduler = build.scheduler(cfg, optimizer, steps_per_epoch)
    learner = Learner(model, optimizer, scheduler, build.grad_scaler(cfg, device))
    features = " | ".join(feature_names(cfg.data.color, cfg.data.normal, cfg.data.height))
    log(f"model: {cfg.model.backbone}, {sum(p.numel() for p in model.parameters()):,} parameters, "
        f"pe={cfg.model.pe}, features [{features}]; {counted(len(dataset), 'sample')} per epoch, "
        f"{counted(steps_per_epoch, 'step')} per epoch")
    log(place.line())
    if place.where != "none":   # PTv3 samples no points
        log(f"farthest point sampling: {FPS_RULE} (the same samples on every backend and place)")
    if note := build.precision_note(cfg, device):
        log(note)

    # Every checkpoint carries what `pointgeope predict` needs (the spacing checks a scan's units).
    resolved = config_to_dict(cfg)
    predict = prediction_metadata(resolved, rooms_spacing(cfg.data.root, train_areas))
    fold_areas = train_areas + test_areas
    checkpoints = FoldCheckpoints(run, learner, env, resolved, predict, area_checksums(cfg.data.root, fold_areas),
                                  folds[fold], area_points(cfg.data.root, fold_areas) if env.is_main else None,
                                  NormalsRead(area_estimates(cfg.data.root, fold_areas))
                                  if cfg.data.normal and env.is_main else None)  # the normals read (data.normal)
    state = checkpoints.resume(log)
    if env.is_main:  # after the resume: a refused checkpoint leaves the folder's config as it was
        save_config(cfg, run / "config.yaml")
    net = model if not env.distributed else torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None)
    writer, clouds = tensorboard(run, cfg, state.step) if env.is_main else (None, None)
    step = graphs.training_step(cfg, learner, net, device, log, place.where)

    while state.epoch < cfg.train.epochs:
        if budget.spent:
            budget.stop(log, (f"in fold {fold} after epoch {state.epoch}", f"from {run / 'last.pt'}"))
        dataset.set_epoch(state.epoch)  # the augmentations of sample i are a function of (seed, epoch, i)
        sampler.set_epoch(state.epoch, skip_batches=state.batch, batch_size=build.per_rank_batch(cfg, env))
        meter = train_epoch(cfg, fold, state, learner, step, loader, steps_per_epoch, env, checkpoints, writer)
        end_epoch(cfg, state, learner, meter, test_areas, env, checkpoints, log, writer, clouds)
        budget.spend()

    # The test area(s) at full resolution: every point predicted by voting over its fragments.
    metrics = evaluate_fold(run, cfg, env, log=log, checked=True)    # check_fold checked the areas
    if writer is not None:
        log_scores(writer, "test", metrics, state.step)
        writer.close()
    log(f"fold {fold} done: oa {metrics['oa']:.4f}  macc {metrics['macc']:.4f}  miou {metrics['miou']:.4f}")
    return metrics


def tensorboard(run: Path, cfg: Config, step: int):
    """The fold's TensorBoard writer and its validation clouds. ``step``: the step of the checkpoint resumed
    from, whose events (the step's loss, the epoch's scores) were written before it and are kept; what a
    killed run logged after it is dropped (``purge_step = step + 1``: events at steps >= it)."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(run / "tb"), purge_step=step + 1)
    return writer, RoomClouds(writer, cfg.data.root, seed=cfg.train.seed, num_classes=cfg.model.num_classes)


def train_epoch(cfg: Config, fold: int, state: LoopState, learner: Learner, step, loader,
                steps_per_epoch: int, env: distributed.DistEnv, checkpoints: FoldCheckpoints,
                writer) -> EpochMeter:
    """The optimiser steps of epoch ``state.epoch`` from batch ``state.batch`` on (the sampler skips the
    batches done before a resume, whose sums ``state.epoch_sums`` the meter starts from); ``last.pt``, with
    the sums so far, every ``train.checkpoint_every`` steps inside it. ``step(batch,
    before_update)``: ``graphs.training_step``'s (the eager ``train_step`` or the CUDA-graph step)."""
    device = env.device
    learner.model.train()
    meter = EpochMeter(cfg.model.num_classes, cfg.train.ignore_index, device,  # a resume: the sums so far
                       carried=state.epoch_sums if env.is_main else None, class_mean=cfg.eval.class_mean)
    bar = progress(loader, env.is_main and cfg.train.progress, initial=state.batch,
                   total=steps_per_epoch, desc=f"fold {fold} epoch {state.epoch + 1}/{cfg.train.epochs}")
    for batch in bar:
        batch = batch.to(device)
        lr = learner.lr()  # the rate this step trains at (the schedule steps after its update)
        with distributed.whole_step(env):  # under DDP a stop waits for the step's all-reduces
            logits, loss_value = step(batch, checkpoints.before_update(state, batch, fold))
        state.step, state.batch = state.step + 1, state.batch + 1
        meter.add(logits, batch.y, loss_value, lr)
        if writer is not None:
            writer.add_scalar("train/loss", checkpoints.step_loss, state.step)   # the mean over the ranks
            writer.add_scalar("train/lr", lr, state.step)
        if hasattr(bar, "set_postfix"):
            bar.set_postfix(loss=f"{loss_value:.3f}", lr=f"{lr:.2e}")
        if cfg.train.checkpoint_every and state.step % cfg.train.checkpoint_every == 0 \
                and state.batch < steps_per_epoch:  # at the epoch's end, end_epoch saves it
            state.epoch_sums = meter.sums()
            checkpoints.save("last.pt", state)
    return meter


def end_epoch(cfg: Config, state: LoopState, learner: Learner, meter: EpochMeter, test_areas: list[str],
              env: distributed.DistEnv, checkpoints: FoldCheckpoints, log: Log, writer, clouds) -> None:
    """Close epoch ``state.epoch``: the scores of every rank's batches, the validation when due, then
    ``best.pt`` (a better validation mIoU, or every epoch without validation) and ``last.pt``."""
    train_scores, loss, seconds, points_per_s = meter.summary()
    state.epoch += 1
    state.batch, state.epoch_sums = 0, {}
    line = (f"epoch {state.epoch}/{cfg.train.epochs}  loss {loss:.4f}  "
            f"train oa {train_scores['oa']:.4f} miou {train_scores['miou']:.4f}  "
            f"lr {meter.lr:.3e}  {seconds:.1f}s  {points_per_s:,.0f} pts/s")
    if writer is not None:
        log_scores(writer, "train", train_scores, state.step)
        writer.add_scalar("train/epoch_loss", loss, state.step)   # every rank's batches: the epoch line's loss
        writer.add_scalar("train/points_per_s", points_per_s, state.step)
    is_best = False
    if cfg.train.val_every and (state.epoch % cfg.train.val_every == 0 or state.epoch == cfg.train.epochs):
        distributed.broadcast_buffers(learner.model)  # score the weights that are saved: rank 0's
        val, val_preds = validate(cfg, learner.model, Path(cfg.data.root), test_areas, env)
        line += f"  val oa {val['oa']:.4f} macc {val['macc']:.4f} miou {val['miou']:.4f}"
        if writer is not None:
            log_scores(writer, "val", val, state.step)
            clouds.log(val_preds, state.step)
        is_best = val["miou"] > state.best_miou
        state.best_miou = max(state.best_miou, val["miou"])
    log(line)
    if is_best or not cfg.train.val_every:  # before last.pt: a kill in between repeats this epoch
        checkpoints.save("best.pt", state)
    checkpoints.save("last.pt", state)


def log_scores(writer, tag: str, s: dict, step: int) -> None:
    """OA, mAcc, mIoU under ``tag/`` and the per-class IoU under ``tag_iou/<class>`` (NaN/None skipped)."""
    for key in ("oa", "macc", "miou"):
        if s[key] is not None and not math.isnan(s[key]):
            writer.add_scalar(f"{tag}/{key}", s[key], step)
    for name, iou in zip(class_names(len(s["iou"])), s["iou"], strict=True):
        if iou is not None and not math.isnan(iou):
            writer.add_scalar(f"{tag}_iou/{name}", iou, step)
