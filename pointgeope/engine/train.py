"""Train Point Transformer on one fold of ``folds.json`` (or every fold), then evaluate it at full resolution.

    python train.py --config configs/s3dis/pt_geope.yaml --test-area 5 [section.key=value ...]
    python train.py --config configs/s3dis/pt_geope.yaml --cv            # every fold, complete ones skipped
    torchrun --nproc_per_node 4 train.py --config ... --test-area 5      # DDP

One fold writes ``RUN/area_K/``: ``config.yaml``, ``log.txt``, TensorBoard events, ``last.pt`` (every
epoch, and every ``train.checkpoint_every`` steps), ``best.pt`` (with ``train.val_every``),
``predictions/Area_K.h5`` and finally ``metrics.json`` with ``"complete": true``. Before the first epoch
every area file of the fold is opened and checked (``pointgeope/data/check.py``). One process writes a
fold folder at a time (``RUN/area_K/.lock``, :mod:`pointgeope.lock`); temporary files left by a killed
run are removed when the next one takes the lock. A complete fold is skipped when its ``config.yaml``
matches the config (free keys aside), refused when it does not; ``--force`` trains it again from scratch.

Restarting the same command resumes from ``last.pt`` exactly: model, optimiser, scheduler, scaler, the RNG
states and the position in the epoch are restored, and the data order and augmentations are functions of
``(seed, epoch, index)``, so the resumed run takes the same steps as an uninterrupted one (given the same
number of torch CPU threads: ``last.pt`` stores it, and a resume with another number warns).
"""
from __future__ import annotations

import contextlib
import json
import math
import shutil
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from pointgeope.atomic import remove_leftovers
from pointgeope.constants import AREAS, CLASS_NAMES
from pointgeope.data.check import check_areas
from pointgeope.data.folds import Fold, load_folds
from pointgeope.engine import build, distributed
from pointgeope.engine.runio import Log, progress
from pointgeope.data.spacing import rooms_spacing
from pointgeope.engine.checkpoint import (config_differences, load_checkpoint, load_model_state,
                                          prediction_metadata, rng_state, save_checkpoint, set_rng_state)
from pointgeope.engine.config import Config, ConfigError, config_to_dict, load_config, save_config
from pointgeope.engine.evaluate import evaluate_fold, fold_is_complete, validate
from pointgeope.engine.tensorboard import RoomClouds
from pointgeope.errors import UserError
from pointgeope.lock import folder_lock
from pointgeope.metrics import ConfusionMeter


class StopRun(Exception):
    """This invocation stops early on purpose (``train.epochs_per_run``); the same command continues it."""


def log_scores(writer, tag: str, s: dict, step: int) -> None:
    """OA, mAcc, mIoU under ``tag/`` and the per-class IoU under ``tag_iou/<class>`` (NaN/None skipped)."""
    for key in ("oa", "macc", "miou"):
        if s[key] is not None and not math.isnan(s[key]):
            writer.add_scalar(f"{tag}/{key}", s[key], step)
    for name, iou in zip(CLASS_NAMES, s["iou"]):
        if iou is not None and not math.isnan(iou):
            writer.add_scalar(f"{tag}_iou/{name}", iou, step)


def train_fold(cfg: Config, fold: int, folds: dict[int, Fold], env: distributed.DistEnv) -> dict:
    """Train (or resume) fold ``fold`` and evaluate it; returns the fold's metrics (every rank)."""
    run = Path(cfg.train.run_dir) / f"area_{fold}"
    root = Path(cfg.data.root)
    test_areas, train_areas = list(folds[fold].test), list(folds[fold].train)
    device = env.device
    log = Log(run / "log.txt" if env.is_main else None)
    if env.is_main:
        run.mkdir(parents=True, exist_ok=True)
    distributed.barrier()
    if not train_areas:
        raise UserError(f"fold {fold}: {root / 'folds.json'} lists no training area (it tests on "
                        f"{', '.join(test_areas)}); prepare more than one area, or edit folds.json")
    log(f"fold {fold}: train on {', '.join(train_areas)}, test on {', '.join(test_areas)}; "
        f"device {device}, {env.world_size} process(es)")
    if env.is_main:  # every area file opened and read before the first epoch
        checked = check_areas(root, train_areas + test_areas, cfg.model.num_classes)
        log(f"checked {', '.join(f'{a} ({len(r)} rooms)' for a, r in checked.items())}")
    distributed.barrier()

    # --- model, data, optimiser (the weights are drawn from the seed, then maybe replaced by last.pt) ---
    torch.manual_seed(cfg.train.seed)
    model = build.model(cfg).to(device)
    dataset = build.train_dataset(cfg, train_areas)
    sampler = build.ResumableSampler(dataset, env, seed=cfg.train.seed)
    loader = build.train_loader(cfg, dataset, sampler, env)
    steps_per_epoch = len(loader)
    if steps_per_epoch == 0:
        raise UserError(f"fold {fold}: {len(dataset)} training samples give no batch of "
                         f"{build.per_rank_batch(cfg, env)} per rank; lower data.batch_size or raise data.loop")
    optimizer = build.optimizer(cfg, model)
    scheduler = build.scheduler(cfg, optimizer, steps_per_epoch)
    use_amp = device.type == "cuda" and cfg.train.amp != "none"
    amp_dtype = torch.float16 if cfg.train.amp == "fp16" else torch.bfloat16
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp and cfg.train.amp == "fp16")
    log(f"model: {sum(p.numel() for p in model.parameters()):,} parameters, pe={cfg.model.pe}; "
        f"{len(dataset)} samples per epoch, {steps_per_epoch} steps per epoch")

    # --- resume ---
    epoch, batch_in_epoch, step, best_miou = 0, 0, 0, -1.0
    resolved = config_to_dict(cfg)
    if (run / "last.pt").is_file():
        ckpt = load_checkpoint(run / "last.pt", resolved)
        load_model_state(model, ckpt["model"], run / "last.pt")
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        if ckpt["scaler"] is not None:
            scaler.load_state_dict(ckpt["scaler"])
        set_rng_state(ckpt["rng"][env.rank] if env.rank < len(ckpt["rng"]) else ckpt["rng"][0])
        epoch, batch_in_epoch, step, best_miou = ckpt["epoch"], ckpt["batch"], ckpt["step"], ckpt["best_miou"]
        log(f"resumed from {run / 'last.pt'}: epoch {epoch}, batch {batch_in_epoch}, step {step}")
        if ckpt.get("threads", torch.get_num_threads()) != torch.get_num_threads():
            log(f"warning: {run / 'last.pt'} was written with {ckpt['threads']} torch CPU thread(s), this run "
                f"has {torch.get_num_threads()}: the results will differ from an uninterrupted run (set "
                f"train.threads={ckpt['threads']} to match)")
    if env.is_main:  # after the checkpoint check: a refused resume leaves the folder's config as it was
        save_config(cfg, run / "config.yaml")
    net = model
    if env.distributed:
        net = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)

    writer = clouds = None
    if env.is_main:
        from torch.utils.tensorboard import SummaryWriter
        writer = SummaryWriter(str(run / "tb"), purge_step=step)
        clouds = RoomClouds(writer, root, seed=cfg.train.seed)
    # What `pointgeope predict` needs, saved in every checkpoint (the spacing checks a scan's units).
    predict_info = prediction_metadata(resolved, rooms_spacing(root, train_areas))

    def checkpoint(path: Path) -> None:
        """Save ``path`` on rank 0 with every rank's RNG state (collective: all ranks call it)."""
        states = [rng_state()]
        if env.distributed:
            gathered = [None] * env.world_size
            torch.distributed.all_gather_object(gathered, states[0])
            states = gathered
        if env.is_main:
            save_checkpoint(path, {
                "config": resolved, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict() if scaler.is_enabled() else None,
                "rng": states, "epoch": epoch, "batch": batch_in_epoch, "step": step, "best_miou": best_miou,
                "threads": torch.get_num_threads(), "predict": predict_info})
        distributed.barrier()

    # --- epochs ---
    epochs_this_run = 0
    while epoch < cfg.train.epochs:
        if cfg.train.epochs_per_run is not None and epochs_this_run >= cfg.train.epochs_per_run:
            log(f"stopping after {epochs_this_run} epoch(s) in this run (train.epochs_per_run); "
                "the same command continues from last.pt")
            raise StopRun(fold)
        model.train()
        dataset.set_epoch(epoch)
        sampler.set_epoch(epoch, skip_batches=batch_in_epoch, batch_size=build.per_rank_batch(cfg, env))
        meter = ConfusionMeter(cfg.model.num_classes, cfg.train.ignore_index, device=device)
        totals = torch.zeros(3, dtype=torch.float64, device=device)  # [loss sum, batches, points]
        t0 = time.perf_counter()
        bar = progress(loader, env.is_main and cfg.train.progress, initial=batch_in_epoch,
                       total=steps_per_epoch, desc=f"fold {fold} epoch {epoch + 1}/{cfg.train.epochs}")
        for batch in bar:
            batch = batch.to(device)
            offset = batch.ptr[1:]
            with torch.autocast(device.type, dtype=amp_dtype, enabled=use_amp):
                logits = net(batch.pos, batch.x, offset)
            loss = F.cross_entropy(logits.float(), batch.y, ignore_index=cfg.train.ignore_index)
            loss_value = loss.item()  # the step's one host sync
            if distributed.any_rank(not math.isfinite(loss_value), device):
                dump = run / (f"nan_step_{step}_rank{env.rank}.pt" if env.distributed else f"nan_step_{step}.pt")
                save_checkpoint(dump, {"config": resolved, "model": model.state_dict(), "epoch": epoch,
                                       "step": step, "loss": loss.detach().cpu(), "pos": batch.pos.cpu(),
                                       "x": batch.x.cpu(), "y": batch.y.cpu(), "ptr": batch.ptr.cpu()})
                raise FloatingPointError(
                    f"fold {fold}: the loss is {loss_value} at epoch {epoch + 1}, step {step} "
                    f"(batch {batch_in_epoch} of the epoch); the batch and model were saved to {dump}")
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            if cfg.optim.grad_clip is not None:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            step += 1
            batch_in_epoch += 1

            meter.update(logits.detach(), batch.y)
            totals += torch.tensor([loss_value, 1.0, batch.pos.shape[0]], dtype=torch.float64, device=device)
            if writer is not None:
                writer.add_scalar("train/loss", loss_value, step)
                writer.add_scalar("train/lr", optimizer.param_groups[0]["lr"], step)
            if hasattr(bar, "set_postfix"):
                bar.set_postfix(loss=f"{loss_value:.3f}", lr=f"{optimizer.param_groups[0]['lr']:.2e}")
            if cfg.train.checkpoint_every and step % cfg.train.checkpoint_every == 0 \
                    and batch_in_epoch < steps_per_epoch:
                checkpoint(run / "last.pt")

        # --- end of epoch: metrics of all ranks, maybe validation, last.pt (and best.pt) ---
        seconds = time.perf_counter() - t0
        distributed.all_reduce_sum(totals)
        meter.all_reduce()
        train_scores = meter.scores()
        epoch += 1
        batch_in_epoch = 0
        epochs_this_run += 1
        points_per_s = totals[2].item() / max(seconds, 1e-9)
        line = (f"epoch {epoch}/{cfg.train.epochs}  loss {totals[0].item() / max(totals[1].item(), 1):.4f}  "
                f"train oa {train_scores['oa']:.4f} miou {train_scores['miou']:.4f}  "
                f"lr {optimizer.param_groups[0]['lr']:.3e}  {seconds:.1f}s  {points_per_s:,.0f} pts/s")
        if writer is not None:
            log_scores(writer, "train", train_scores, step)
            writer.add_scalar("train/points_per_s", points_per_s, step)
        is_best = False
        if cfg.train.val_every and (epoch % cfg.train.val_every == 0 or epoch == cfg.train.epochs):
            val, val_preds = validate(cfg, model, root, test_areas, env)
            line += f"  val oa {val['oa']:.4f} macc {val['macc']:.4f} miou {val['miou']:.4f}"
            if writer is not None:
                log_scores(writer, "val", val, step)
                clouds.log(val_preds, step)
            is_best = val["miou"] > best_miou
            best_miou = max(best_miou, val["miou"])
        log(line)
        if is_best or not cfg.train.val_every:  # before last.pt: a kill in between repeats this epoch
            checkpoint(run / "best.pt")
        checkpoint(run / "last.pt")

    # --- full-resolution evaluation of the test area(s) ---
    metrics = evaluate_fold(run, cfg, env, log=log)
    if writer is not None:
        log_scores(writer, "test", metrics, step)
        writer.close()
    log(f"fold {fold} done: oa {metrics['oa']:.4f}  macc {metrics['macc']:.4f}  miou {metrics['miou']:.4f}")
    return metrics


@contextlib.contextmanager
def fold_folder(run: Path, env: distributed.DistEnv):
    """Hold the lock of the fold folder ``run`` (rank 0; the other ranks write nothing there) and remove
    the temporary files a killed run left in it."""
    if not env.is_main:
        yield
        return
    with folder_lock(run, " ".join(sys.argv)):
        for path in remove_leftovers(run):
            print(f"removed {path}, left by an interrupted run", flush=True)
        yield


def complete_metrics(run: Path, cfg: Config) -> dict | None:
    """The metrics of a complete fold trained with ``cfg`` (free keys aside), ``None`` if the fold is not
    complete; a :class:`UserError` naming the differing keys if it was trained with another config."""
    if not fold_is_complete(run):
        return None
    try:
        saved = config_to_dict(load_config(run / "config.yaml"))
    except ConfigError as err:
        raise UserError(f"{run} is complete but its config cannot be read ({err}); --force retrains it") from None
    diff = config_differences(saved, config_to_dict(cfg))
    if diff:
        shown = "; ".join(f"{k}: run {a!r}, now {b!r}" for k, a, b in diff[:8])
        raise UserError(f"{run} is complete with another config ({shown}); --force retrains it, or use "
                        "another --run-dir")
    return json.loads((run / "metrics.json").read_text())


def clear_fold(run: Path) -> None:
    """``--force``: delete what a previous training of the fold wrote (its log.txt is kept)."""
    for name in ("last.pt", "best.pt", "metrics.json", "config.yaml", "predictions", "tb"):
        path = run / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    for dump in run.glob("nan_step_*.pt"):
        dump.unlink()


def run_folds(cfg: Config, test_area: int | None, env: distributed.DistEnv, force: bool = False) -> list[dict]:
    """One fold, or every fold of ``folds.json`` in order (skipping those complete with this config)."""
    folds = load_folds(cfg.data.root)
    if test_area is not None:
        if test_area not in folds:
            raise UserError(f"--test-area {test_area}: {Path(cfg.data.root) / 'folds.json'} has folds "
                            f"{sorted(folds)} (areas {', '.join(AREAS)})")
        wanted = [test_area]
    else:
        wanted = list(folds)
    results = []
    for fold in wanted:
        run = Path(cfg.train.run_dir) / f"area_{fold}"
        with fold_folder(run, env):
            metrics = None if force else complete_metrics(run, cfg)
            if metrics is not None:
                if env.is_main:
                    print(f"fold {fold}: {run / 'metrics.json'} is complete, skipped", flush=True)
                results.append(metrics)
                continue
            if force and env.is_main:
                clear_fold(run)
            distributed.barrier()
            results.append(train_fold(cfg, fold, folds, env))
    return results


def train(cfg: Config, test_area: int | None, force: bool = False) -> int:
    """``pointgeope train``: fold ``test_area`` (every fold when ``None``) of ``cfg``; the exit code."""
    if cfg.train.threads is not None:
        torch.set_num_threads(cfg.train.threads)
    env = distributed.setup(cfg.train.device)
    try:
        results = run_folds(cfg, test_area, env, force=force)
    except StopRun:
        return 0
    except FloatingPointError as err:  # the training diverged: not the input's fault, not a bug either
        print(f"error: {err}", file=sys.stderr)
        return 1
    finally:
        distributed.cleanup()
    if env.is_main and len(results) > 1:
        print(f"{len(results)} folds: " + "  ".join(f"{r['area']} miou {r['miou']:.4f}" for r in results))
    return 0
