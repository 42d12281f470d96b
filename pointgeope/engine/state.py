"""What one fold's training saves and restores: the loop's position, the learner, and the checkpoint files.

Exact resume rests on three things, all saved by :meth:`FoldCheckpoints.save` and restored by
:meth:`FoldCheckpoints.resume`, nowhere else:

- the :class:`LoopState` (epoch, batch in the epoch, optimiser step, best validation mIoU, and the sums of
  the epoch's batches so far, so that a resumed epoch's logged scores are those of all its batches);
- the :class:`Learner` (model, optimiser, schedule, loss scaler), as state dicts;
- every rank's RNG states (Python, NumPy, torch CPU and CUDA).

The data order and the augmentations are functions of ``(seed, epoch, index)``, so with these the
resumed run takes the same steps as an uninterrupted one (given the same numbers of torch CPU threads and
of DDP processes: the checkpoint stores both, the latter as its one RNG state per rank, and a resume with
another number warns; :func:`~pointgeope.engine.rng_states.rank_rng_state` says which stream each rank then
resumes). The file format itself (atomic writes, ``weights_only`` loading, the config check) is
:mod:`pointgeope.engine.checkpoint`'s.
"""
from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from pointgeope.data.folds import Fold
from pointgeope.data.normal_record import NormalsRead
from pointgeope.engine import distributed
from pointgeope.engine.checkpoint import (
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
    whole_count,
)
from pointgeope.engine.epoch_meter import sums_problem
from pointgeope.engine.fold_record import check_trained_fold, fold_record
from pointgeope.engine.machine_record import code_note, saved_trained_on, trained_on, training_machine
from pointgeope.engine.retrain import retrain_from_scratch
from pointgeope.engine.rng_states import restore_rank_rng, rng_state
from pointgeope.engine.runio import Log
from pointgeope.engine.trained_data import check_data_of, saved_data
from pointgeope.engine.weights import first_non_finite, load_model_state
from pointgeope.errors import UserError
from pointgeope.lock import LOCK_NAME, still_held
from pointgeope.number_kind import is_number
from pointgeope.plural import agreeing, counted
from pointgeope.recorded_text import repr_bounded


@dataclass
class LoopState:
    """Where the loop stands. Saved in every checkpoint under these names and restored from ``last.pt``;
    with the RNG states and the data order as a function of ``(seed, epoch, index)`` it is all a resumed
    run needs to take the steps the uninterrupted one would have taken."""

    epoch: int = 0            # epochs completed
    batch: int = 0            # batches completed inside epoch `epoch` (0 at an epoch's end)
    step: int = 0             # optimiser steps completed in total: the x axis of the logs
    best_miou: float = -1.0   # the best validation mIoU so far (-1: none yet); decides best.pt
    # the sums of epoch `epoch`'s first `batch` batches (EpochMeter.sums: loss, points, confusion, seconds;
    # {} at an epoch's end), so that a resumed epoch logs the scores of all its batches
    epoch_sums: dict = dataclasses.field(default_factory=dict)


@dataclass
class Learner:
    """What the optimiser changes at each step, saved in a checkpoint beside the :class:`LoopState`."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    scaler: torch.amp.GradScaler  # disabled (a pass-through) but on CUDA with fp16

    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def backward(self, loss: torch.Tensor) -> None:
        """The gradients of ``loss`` (scaled for fp16) in every ``.grad``, the previous step's dropped."""
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()

    def non_finite_gradient(self) -> tuple[str, int, int] | None:
        """``(parameter, non-finite values, values)`` of the first parameter whose gradient holds a NaN or an
        infinity, ``None`` when all are finite. A finite loss can have such gradients (an overflow in the
        backward): the update would turn every weight it reaches into NaN. Under fp16 the grad scaler skips
        such a step itself and lowers its scale, so nothing is reported then. One host read a parameter:
        asked only once the step's one read (:meth:`FoldCheckpoints.before_update`) found the gradients'
        norm not finite (a norm that overflows on finite gradients is no finding)."""
        if self.scaler.is_enabled():
            return None
        return first_non_finite({name: p.grad for name, p in self.model.named_parameters() if p.grad is not None})

    def gradient_norm(self, grad_clip: float | None, checked: bool = True) -> torch.Tensor | None:
        """``||g||_2`` of all gradients as one vector (a 0-dim tensor on their device, not read: no host sync),
        computed once for both of its readers: the check of :meth:`FoldCheckpoints.before_update` (``checked``;
        none under fp16, whose scaler checks) and the clipping of :meth:`update` (``grad_clip``; under fp16 the
        gradients are unscaled first, so that the true ones are clipped). ``None`` when neither needs it, or
        when no parameter has a gradient."""
        if grad_clip is None and not (checked and not self.scaler.is_enabled()):
            return None
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        if not grads:
            return None
        if grad_clip is not None:
            self.scaler.unscale_(self.optimizer)  # clip the true gradients, not the scaled ones
        return _total_norm(grads)

    def update(self, grad_clip: float | None, norm: torch.Tensor | None = None) -> None:
        """The step once the gradients are in place (:meth:`backward`, or a CUDA graph's replay): clip, step,
        schedule. ``norm``: :meth:`gradient_norm`'s, when the caller has it (else computed here); with
        ``grad_clip`` = ``c`` every gradient is multiplied by ``min(1, c / (norm + 1e-6))``, as
        ``torch.nn.utils.clip_grad_norm_`` does."""
        if grad_clip is not None:
            if norm is None:
                norm = self.gradient_norm(grad_clip, checked=False)
            if norm is not None:
                _clip(self.model.parameters(), grad_clip, norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()  # the learning rate is a function of the step (build.scheduler)


class FoldCheckpoints:
    """The checkpoints of one fold folder: the one place that writes and reads them.

    ``last.pt`` (to resume) and ``best.pt`` hold the :class:`Learner`, the :class:`LoopState`, every
    rank's RNG state, the torch thread count, what ``pointgeope predict`` needs, the checksums of the fold's
    area files and the fold it trains (:mod:`~pointgeope.engine.fold_record`); a non-finite loss
    leaves ``nan_step_<step>.pt`` with the batch and the model (:meth:`stop_on_nan`).
    """

    def __init__(self, run: Path, learner: Learner, env: distributed.DistEnv, config: dict, predict: dict,
                 data: dict[str, str] | None = None, fold: Fold | None = None, points: dict[str, str] | None = None,
                 normals: NormalsRead | None = None):
        self.run, self.learner, self.env, self.config, self.predict = run, learner, env, config, predict
        self.data = data  # area -> checksum of the fold's area files (pointgeope.data.check.area_checksums)
        self.points = points  # area -> checksum of their points (pointgeope.data.identity.area_points)
        self.normals = normals  # the normal estimates read (data.normal_record); None: a run of no normals
        self.fold = fold  # the split it trains: recorded in every checkpoint (engine.fold_record)
        self.locked = env.is_main and still_held(run)  # made under the fold's lock (train): check_folder checks it
        self.step_loss = math.nan  # the last checked step's loss, its mean over the ranks (before_update)
        # the machines it trained on (engine.machine_record): this one, after those of the checkpoint resumed
        self.trained_on = trained_on(None, training_machine(env.device, config.get("train", {}).get("amp", "none"),
                                                          env.world_size))

    def resume(self, log: Log) -> LoopState:
        """The state saved in ``last.pt``, with the learner and this rank's RNG restored from it; a fresh
        state when there is none. Raises CheckpointError for a file of another config, or when ``last.pt``
        or ``best.pt`` is there but not a file (a folder): training would end writing it, epochs later. Each
        is a refusal that training the fold from scratch ends
        (:func:`~pointgeope.engine.retrain.retrain_from_scratch`)."""
        try:
            return self._resume(log)
        except CheckpointError as err:  # the fold's saved state: --force, which clears it, trains the fold again
            raise retrain_from_scratch(err, self.run)  # noqa: B904 - err itself, marked for ablate

    def _resume(self, log: Log) -> LoopState:
        for name in ("last.pt", "best.pt"):
            where = self.run / name
            if os.path.lexists(where) and not where.is_file():
                kind = "a folder" if where.is_dir() else "not a file"
                raise CheckpointError(f"{where}: expected the fold's checkpoint file, found {kind}; move it away "
                                      "(or --force, which starts the fold again)")
        path = self.run / "last.pt"
        if not path.is_file():
            if self.env.rank:  # a new DDP fold: every rank drew alike so far (the seed's weights); from here
                restore_rank_rng([rng_state()], self.env.rank)  # each its own stream, rank 0 one process's
            return LoopState()
        ckpt = load_checkpoint(path, self.config)
        if self.fold is not None:   # another fold's last.pt: the same six area files, so only this tells
            check_trained_fold(path, ckpt.get("fold"), self.fold, self.config["data"]["root"], log)
        self._check_data(path, ckpt, log)
        learner = self.learner
        load_model_state(learner.model, ckpt, path)
        learner.optimizer.load_state_dict(ckpt["optimizer"])
        learner.scheduler.load_state_dict(ckpt["scheduler"])
        if ckpt["scaler"] is not None:
            learner.scaler.load_state_dict(ckpt["scaler"])
        restore_rank_rng(ckpt["rng"], self.env.rank)
        state = saved_state(ckpt, path, (self.config.get("model") or {}).get("num_classes"))
        where = (f"inside epoch {state.epoch + 1}, after its batch {state.batch}" if state.batch  # the epoch lines'
                 else f"after epoch {state.epoch}")                                          # count from 1
        log(f"resumed from {path}: {where} (step {state.step})")
        if state.batch and "epoch_sums" not in ckpt:  # written before the checkpoint carried them
            them = agreeing(state.batch, "it", "them")
            log(f"note: {path} holds no scores of epoch {state.epoch + 1}'s first {counted(state.batch, 'batch')}; "
                f"its logged train loss, oa and miou will cover the batches after {them} only")
        self._warn_other_run(path, ckpt, log)
        if note := code_note(path, saved_trained_on(ckpt), self.trained_on[-1]):
            log(note)
        self.trained_on = trained_on(ckpt, self.trained_on[-1])
        return state

    def _warn_other_run(self, path: Path, ckpt: dict, log: Log) -> None:
        """Warn when this run cannot continue bit for bit: another number of torch CPU threads (the CPU
        kernels sum in another order), or of DDP processes (BatchNorm statistics are per process, and the
        random streams are those of :func:`~pointgeope.engine.rng_states.restore_rank_rng`)."""
        threads = ckpt.get("threads", torch.get_num_threads())
        if threads != torch.get_num_threads():
            log(f"warning: {path} was written with {counted(threads, 'torch CPU thread')}, this run has "
                f"{torch.get_num_threads()}: the results will differ from an uninterrupted run (set "
                f"train.threads={threads} to match)")
        saved, world = len(ckpt["rng"]), self.env.world_size
        if saved != world:
            ranks = (f"rank {saved} draws a random stream of its own" if world == saved + 1
                     else f"ranks {saved} to {world - 1} draw random streams of their own")
            more = f"; {ranks}, derived from the saved ones" if world > saved else ""
            log(f"warning: {path} was written by {counted(saved, 'DDP process')}, this run has {world}: the results "
                f"will differ from an uninterrupted run (BatchNorm statistics are per process{more}; run "
                f"{counted(saved, 'process')} to match: torchrun --nproc_per_node {saved})")

    def _check_data(self, path: Path, ckpt: dict, log: Log) -> None:
        """Refuse to resume on other area files than the checkpoint trained on (the fold's areas now, and
        any it trained on that the fold no longer has), naming them; files of the same points pass."""
        if self.data is not None:
            areas = set(self.data) | set(saved_data(ckpt, path) or {})
            now = {a: self.data.get(a) for a in areas}
            check_data_of(path, ckpt, now, self.config["data"]["root"], log, self.normals)

    def save(self, name: str, state: LoopState) -> None:
        """Write ``RUN/area_K/<name>`` on rank 0 with every rank's RNG state (collective: every rank
        calls it, so that each one resumes its own random stream). A model state that is not finite (a
        diverged run: finite losses and gradients can still overflow a batch norm's running variance) is
        never written: a FloatingPointError naming the tensor leaves the previous checkpoint in place, the
        one a resume, ``evaluate`` and ``predict`` can still read (they refuse a non-finite one). Both
        checks are rank 0's and every rank raises their error (:func:`distributed.share_refusal`: one
        broadcast under DDP), so that no rank waits for a peer that has gone."""
        states = [rng_state()]
        if self.env.distributed:
            states = [None] * self.env.world_size
            torch.distributed.all_gather_object(states, rng_state())
        refusal = None
        if self.env.is_main:
            try:
                self.check_folder(state)
                self._check_finite(name, state)
            except (UserError, FloatingPointError) as err:
                refusal = err
        distributed.share_refusal(refusal)
        if self.env.is_main:
            learner = self.learner
            save_checkpoint(self.run / name, {
                "config": self.config, "model": learner.model.state_dict(),
                "optimizer": learner.optimizer.state_dict(), "scheduler": learner.scheduler.state_dict(),
                "scaler": learner.scaler.state_dict() if learner.scaler.is_enabled() else None,
                "rng": states, **dataclasses.asdict(state), "threads": torch.get_num_threads(),
                "trained_on": self.trained_on, "predict": self.predict, "data": self.data,
                "data_points": self.points, **({} if self.normals is None else self.normals.saved()),
                "fold": None if self.fold is None else fold_record(self.fold)})
        distributed.barrier()

    def _check_finite(self, name: str, state: LoopState) -> None:
        """A FloatingPointError naming the first tensor of the model state that is not finite, which
        :meth:`save` would write into ``name``."""
        if (bad := first_non_finite(self.learner.model.state_dict())) is not None:
            raise retrain_from_scratch(FloatingPointError(
                f"{self.run / name}: not saved: the model's '{bad[0]}' holds "
                f"{counted(bad[1], 'NaN or infinite value')} of {bad[2]:,} after step {state.step} (the first such "
                f"tensor; the run diverged); {name} is left as it was; a lower optim.lr (or optim.grad_clip) trains "
                "it again (--force, or another --run-dir)"), self.run)

    def check_folder(self, state: LoopState) -> None:
        """A UserError when the fold folder, or its lock file, is no longer the one this run locked
        (:func:`pointgeope.lock.still_held`; rank 0, which holds it; nothing to check where these checkpoints
        were made without the fold's lock): deleted while training wrote into it.
        Asked before every step's writes, so that no checkpoint or TensorBoard event goes into a folder that
        the writes would make again, without a lock, and no traceback of a missing file ends the run."""
        if self.locked and not still_held(self.run):
            raise UserError(f"{self.run}: the fold folder, or its lock file {LOCK_NAME}, was deleted while this "
                            f"training wrote into it (after step {state.step}); stopped, "
                            "since another process could now take the folder; the same command trains the fold "
                            "again (from its last.pt, if one is left)")

    def before_update(self, state: LoopState, batch, fold: int) -> Callable[[torch.Tensor, torch.Tensor | None], float]:
        """The check ``train_step`` runs before the update of ``batch``, and before the step's writes:
        ``check(loss, norm)`` returns the loss's value. A non-finite loss or gradient norm (``norm``:
        :meth:`Learner.gradient_norm`'s, ``None`` when the gradients are not checked) on any rank, or a fold
        folder deleted (:meth:`check_folder`, rank 0's), stops every rank together: the folder's error on
        every rank, else :meth:`stop_on_nan`. The loss and the ranks' agreement on that flag are read in one
        host read (:func:`distributed.read_agreed`: under DDP the all-reduce of the loss and the flag is queued
        on the device before it; the loss's mean over the ranks, TensorBoard's ``train/loss``, is kept as
        ``step_loss``); only when the flag is up are the gradients looked at one by one
        (:meth:`Learner.non_finite_gradient`: a norm that overflows on finite gradients is no finding) and
        the ranks asked again."""
        def check(loss: torch.Tensor, norm: torch.Tensor | None) -> float:
            gone = None
            try:
                self.check_folder(state)
            except UserError as err:
                gone = err
            flag = ~torch.isfinite(loss.detach())
            if norm is not None and not self.learner.scaler.is_enabled():
                flag = flag | ~torch.isfinite(norm)
            (loss_value,), up, (self.step_loss,) = distributed.read_agreed([loss.detach()], flag | (gone is not None))
            if not up:
                return loss_value
            gradient = self.learner.non_finite_gradient() if math.isfinite(loss_value) else None
            if distributed.any_rank(not math.isfinite(loss_value) or gradient is not None or gone is not None,
                                    self.env.device):
                distributed.share_refusal(gone)
                self.stop_on_nan(state, loss, batch, fold, gradient)
            return loss_value
        return check

    def stop_on_nan(self, state: LoopState, loss: torch.Tensor, batch, fold: int,
                    gradient: tuple[str, int, int] | None = None) -> None:
        """Save the batch and the model whose loss, or whose gradients (``gradient``: the first parameter
        whose gradient holds a NaN or an infinity, :meth:`Learner.non_finite_gradient`), were not finite (each
        rank its own), then stop with a FloatingPointError before the update: training on would only spread
        the NaN into every weight, and into ``last.pt`` and ``best.pt`` at the epoch's end. Under DDP a rank
        whose loss and gradients are finite says that another process's were not (each names its own)."""
        env = self.env
        name = f"nan_step_{state.step}_rank{env.rank}.pt" if env.distributed else f"nan_step_{state.step}.pt"
        save_checkpoint(self.run / name, {
            "config": self.config, "model": self.learner.model.state_dict(), "epoch": state.epoch,
            "step": state.step, "loss": loss.detach().cpu(), "pos": batch.pos.cpu(), "x": batch.x.cpu(),
            "y": batch.y.cpu(), "ptr": batch.ptr.cpu()})
        where = f"at epoch {state.epoch + 1}, step {state.step} (batch {state.batch} of the epoch)"
        value = loss.item()
        if gradient is None and math.isfinite(value):   # DDP: stopped by a peer's (it names its own)
            what = f"another process's loss or gradients were not finite {where}, this one's loss {value:.6g}"
        elif gradient is None:
            what = f"the loss is {value} {where}"
        else:
            param, count, size = gradient
            what = (f"the gradients are not finite {where}, with a loss of {value:.6g}: the gradient of "
                    f"'{param}' holds {counted(count, 'NaN or infinite value')} of {size:,} (the first such parameter)")
        raise retrain_from_scratch(FloatingPointError(
            f"fold {fold}: {what}; the weights were not updated; the batch and model were saved to "
            f"{self.run / name}; a lower optim.lr (or optim.grad_clip) trains it again (--force, or another "
            "--run-dir)"), self.run)


def saved_state(ckpt: dict, path: Path, num_classes: int | None = None) -> LoopState:
    """The :class:`LoopState` that the checkpoint ``ckpt`` (read from ``path``) saved, each entry checked
    (``epoch``, ``batch``, ``step`` whole numbers >= 0, ``best_miou`` a number in [-1, 1], ``epoch_sums`` the
    sums of :mod:`~pointgeope.engine.epoch_meter` for ``num_classes`` classes; absent: the default): a damaged
    one is a CheckpointError naming it (a ``TypeError`` traceback at the loop's first comparison, a ``KeyError``
    at the resumed epoch's first batch, or a step count silently off)."""
    counts = {name: whole_count(ckpt, (name,), path) for name in ("epoch", "batch", "step")}
    best, sums = ckpt.get("best_miou", -1.0), ckpt.get("epoch_sums", {})
    for key, value, fits, expected in (("best_miou", best, is_number(best) and -1 <= best <= 1, "a number in [-1, 1]"),
                                       ("epoch_sums", sums, (why := sums_problem(sums, num_classes)) is None, why)):
        if not fits:
            raise CheckpointError(f"{path}: damaged checkpoint: expected its {key!r} entry to be {expected}, got "
                                  f"{repr_bounded(value, 40)}; use the run's own checkpoint")
    return LoopState(**counts, best_miou=float(best), epoch_sums=sums)


def _total_norm(tensors: list[torch.Tensor]) -> torch.Tensor:
    """``||(||t_1||_2, ..., ||t_k||_2)||_2``, the 2-norm of all ``tensors`` as one vector (a 0-dim tensor on their
    device, read by the caller: no host sync here). ``torch.nn.utils.get_total_norm`` (foreach kernels) where torch has
    it (2.6 on); torch 2.4 and 2.5, which pyproject.toml allows, do not: one norm a tensor there, the same value."""
    fused = getattr(torch.nn.utils, "get_total_norm", None)
    if fused is not None:
        return fused(tensors)
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(t) for t in tensors]))


def _clip(parameters, max_norm: float, norm: torch.Tensor) -> None:
    """Multiply every gradient of ``parameters`` by ``min(1, max_norm / (norm + 1e-6))`` in place, on the device
    (no host sync): ``torch.nn.utils.clip_grads_with_norm_`` where torch has it (2.6 on), the same product
    a gradient on torch 2.4 and 2.5."""
    fused = getattr(torch.nn.utils, "clip_grads_with_norm_", None)
    if fused is not None:
        fused(parameters, max_norm, norm)
        return
    coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for p in parameters:
        if p.grad is not None:
            p.grad.mul_(coef.to(p.grad.device))
