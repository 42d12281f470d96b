"""One training step: what ``engine.train.train_epoch`` runs for every batch and the ``bench/`` scripts time.

The forward under ``train.amp``'s autocast (:func:`pointgeope.engine.build.autocast`), the loss in float32
(:func:`pointgeope.engine.losses.segmentation_loss`), then :meth:`pointgeope.engine.state.Learner.backward`
(scaled by the grad scaler), the gradients' norm (once, for the check and the clipping), the caller's check of
the loss and the gradients, which reads the loss (one host read a step), and
:meth:`~pointgeope.engine.state.Learner.update` (clipping, optimiser, schedule).
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from pointgeope.engine import build
from pointgeope.engine.config import Config
from pointgeope.engine.losses import segmentation_loss
from pointgeope.engine.small_batch import PTV1_STAGES, PTV3_STAGES, small_batch_advice
from pointgeope.engine.state import Learner
from pointgeope.model.small_batch import SmallBatchError

__all__ = ["checked_update", "train_step"]


def train_step(cfg: Config, learner: Learner, net: torch.nn.Module, batch, device: torch.device,
               before_update: Callable[[torch.Tensor, torch.Tensor | None], float] | None = None
               ) -> tuple[torch.Tensor, float]:
    """One training step on ``batch`` (on ``device``: ``pos (N, 3)``, ``x (N, C)``, ``ptr (B+1,)``, ``y (N,)``,
    optionally ``hierarchy`` or PTv3's ``grid_coord (N, 3)``): the forward of ``net`` under ``train.amp``'s
    autocast (build.autocast), the float32 ``train.loss``, then ``learner.backward`` and ``learner.update``
    (scaler, clip, optimiser, schedule): :func:`checked_update`. Returns the logits ``(N, classes)`` and the
    loss as a float, read once the backward is queued, in the step's one host read: on a GPU the host waits
    once for the forward and the backward together. ``before_update(loss, norm) -> loss value`` runs between
    the backward and the update (train_epoch's check of the loss and the gradients, which makes that read). The one step
    the training loop and the ``bench/`` scripts run. Batch norm on a one-row batch
    (:class:`SmallBatchError`) is said naming the ``data`` keys that made the batch so small
    (:mod:`pointgeope.engine.small_batch`)."""
    with build.autocast(cfg, device):
        # the loader's hierarchy, or None: the model builds it on the device (placement.hierarchy_place);
        # PTv3's samples carry their voxels (grid_coord), PTv1's do not
        grid = {"grid_coord": batch.grid_coord} if getattr(batch, "grid_coord", None) is not None else {}
        try:
            logits = net(batch.pos, batch.x, batch.ptr[1:], hierarchy=getattr(batch, "hierarchy", None), **grid)
        except SmallBatchError as err:      # batch norm on one row: name the keys that made it so
            stages = PTV1_STAGES if cfg.model.backbone == "ptv1" else PTV3_STAGES
            raise type(err)(err.fact, small_batch_advice(cfg.data, len(batch.pos), stages)) from None   # class kept
    loss = segmentation_loss(logits.float(), batch.y, cfg.train.loss, cfg.train.ignore_index,
                             cfg.train.lovasz_weight)
    learner.backward(loss)
    return logits, checked_update(cfg, learner, loss, before_update)


def checked_update(cfg: Config, learner: Learner, loss: torch.Tensor,
                   before_update: Callable[[torch.Tensor, torch.Tensor | None], float] | None = None) -> float:
    """Once the gradients of ``loss`` are in place (the eager step's backward, or a CUDA graph's replay): their
    norm, computed once for the check and ``optim.grad_clip``'s clipping (:meth:`Learner.gradient_norm`), the
    check ``before_update(loss, norm)``, which reads the loss's value (with the ranks' agreement on whether to
    stop, in the same host read) and returns it, then :meth:`Learner.update`. Without a check, the loss is read
    alone. Either way the host waits once a step, for the forward and the backward together. Returns the
    loss's value."""
    norm = learner.gradient_norm(cfg.optim.grad_clip, checked=before_update is not None)
    loss_value = loss.item() if before_update is None else before_update(loss, norm)
    learner.update(cfg.optim.grad_clip, norm)
    return loss_value
