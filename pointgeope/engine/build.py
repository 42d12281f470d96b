"""Plain constructor calls from a :class:`~pointgeope.engine.config.Config`: model, data, optimiser, schedule.

The learning rate is a function of the optimiser step ``s`` (``LambdaLR``, stepped once per batch), with
``E`` = ``train.epochs``, ``S`` = steps per epoch and ``e = s // S`` the current epoch::

    multistep:  lr(s) = lr * gamma ** #{m in milestones : e >= floor(m * E)}   (PTv1: x0.1 at 60 %, 80 %)
    cosine:     lr(s) = lr * (1 + cos(pi * s / (E * S))) / 2

so the schedule's state is just the step count, which a checkpoint restores. ``onecycle`` (PTv3) is
torch's ``OneCycleLR`` over ``E * S`` steps, with ``optim.block_lr`` for the parameters named ``block``
(:mod:`pointgeope.engine.schedule`); its state dict is the checkpoint's.
"""
from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from torch.utils.data import DistributedSampler

from pointgeope.data.dataset import S3DISTrain
from pointgeope.data.features import feature_channels, feature_names
from pointgeope.data.loader import make_loader
from pointgeope.data.mix3d import Mix3D
from pointgeope.data.ptv3_dataset import S3DISTrainPTv3
from pointgeope.data.transforms import s3dis_train_transform
from pointgeope.engine import schedule
from pointgeope.engine.config import Config, ConfigError
from pointgeope.engine.config_values import pipeline_problem
from pointgeope.engine.distributed import DistEnv
from pointgeope.engine.numba_warm import warm_data_transforms, warm_host_hierarchy
from pointgeope.engine.placement import HierarchyPlace


def model(cfg: Config) -> torch.nn.Module:
    """``PointTransformerSeg(cfg.model)`` (``model.backbone: ptv1``) or ``PTv3Seg(cfg.model)`` (``ptv3``) at the
    data's voxel size, once ``model.in_channels`` is checked against the features that ``data.color``,
    ``data.normal`` and ``data.height`` give (:mod:`pointgeope.data.features`)."""
    from pointgeope.model import PointTransformerSeg
    from pointgeope.model.ptv3.seg import PTv3Seg

    in_channels, d = cfg.model.in_channels, cfg.data
    names = feature_names(d.color, d.normal, d.height)
    if feature_channels(names) != in_channels:
        normal = ", data.normal=True" if d.normal else ""
        raise ConfigError(f"model.in_channels={in_channels} but data.color={d.color}{normal}, "
                          f"data.height={d.height} give {feature_channels(names)} feature channels "
                          f"([{' | '.join(names)}]); set model.in_channels={feature_channels(names)}")
    problem = pipeline_problem(cfg)       # checked at load; again for a config made in code
    if problem:
        raise ConfigError(problem)
    if cfg.model.backbone == "ptv3":
        return PTv3Seg(cfg.model, grid_size=cfg.data.grid_size)
    return PointTransformerSeg(cfg.model, grid_size=cfg.data.grid_size)


# --- data --------------------------------------------------------------------------------------------------

def train_dataset(cfg: Config, areas: list[str]) -> S3DISTrain:
    """The training samples: PTv1's blocks, or with ``data.augment: pointcept_ptv3`` PTv3's
    (``S3DISTrainPTv3``: ``data.grid_size``, ``data.crop_rate``, at most ``data.voxel_max`` points)."""
    d = cfg.data
    if d.augment == "pointcept_ptv3":
        if d.height:
            raise ConfigError("data.augment=pointcept_ptv3 has no height feature; set data.height=false")
        return S3DISTrainPTv3(d.root, areas, grid_size=d.grid_size, crop_rate=d.crop_rate, point_max=d.voxel_max,
                              loop=d.loop, seed=cfg.train.seed, color=d.color, normal=d.normal, cache=d.cache)
    problem = pipeline_problem(cfg)       # mix_prob, crop_rate: checked at load; again for a config made in code
    if problem:
        raise ConfigError(problem)
    return S3DISTrain(d.root, areas, grid_size=d.grid_size, voxel_max=d.voxel_max or 2**62, loop=d.loop,
                      transform=s3dis_train_transform(d.augment), seed=cfg.train.seed, height=d.height,
                      color=d.color, cache=d.cache)


def batch_mixing(cfg: Config) -> Mix3D | None:
    """The training loader's batch-level Mix3D (``data.mix_prob``; None when 0), to pass as its batch
    transform (``make_loader(..., batch_transform=...)``) after any other."""
    return Mix3D(cfg.data.mix_prob) if cfg.data.mix_prob > 0 else None


def per_rank_batch(cfg: Config, env: DistEnv) -> int:
    if cfg.data.batch_size % env.world_size:
        raise ConfigError(f"data.batch_size={cfg.data.batch_size} is not a multiple of the "
                          f"{env.world_size} DDP processes")
    return cfg.data.batch_size // env.world_size


class ResumableSampler(DistributedSampler):
    """``DistributedSampler`` (this rank's shard of a permutation drawn from ``seed + epoch``) that can
    skip the first batches of an epoch, to resume in the middle of one::

        epoch order (this rank):  [ b0 | b1 | b2 | b3 | ... ]     set_epoch(e, skip_batches=2)
        yielded:                            [ b2 | b3 | ... ]
    """

    def __init__(self, dataset, env: DistEnv, seed: int):
        super().__init__(dataset, num_replicas=env.world_size, rank=env.rank, shuffle=True, seed=seed,
                         drop_last=False)
        self.skip = 0

    def set_epoch(self, epoch: int, skip_batches: int = 0, batch_size: int = 1) -> None:
        super().set_epoch(epoch)
        self.skip = skip_batches * batch_size

    def __iter__(self) -> Iterator[int]:
        return iter(list(super().__iter__())[self.skip:])

    def __len__(self) -> int:
        return super().__len__() - self.skip


class AttachHierarchy:
    """Batch transform of the training loader: ``batch.hierarchy = spec(batch.pos, batch.ptr[1:])``, after
    ``mix`` (Mix3D, ``data.mix_prob``) when given.

    Runs where the batch is collated (a CPU worker, or the main process with ``data.num_workers: 0``), so
    the point ops (FPS, kNN, 3-NN) use the CPU libraries and never wait on, or for, the accelerator; the
    model then takes the hierarchy instead of computing it (``PointTransformerSeg.forward``)."""

    def __init__(self, spec, mix: Mix3D | None = None):
        self.spec, self.mix = spec, mix

    def __call__(self, batch):
        if self.mix is not None:          # Mix3D first: the hierarchy is the mixed clouds'
            batch = self.mix(batch)
        batch.hierarchy = self.spec(batch.pos, batch.ptr[1:])
        return batch


def train_loader(cfg: Config, dataset: S3DISTrain, sampler: ResumableSampler, env: DistEnv, net: torch.nn.Module,
                 place: HierarchyPlace):
    """Batches for ``net`` (a ``PointTransformerSeg``), each carrying its point hierarchy where ``place``
    (:func:`~pointgeope.engine.placement.hierarchy_place`) says: built in the loader's workers
    (``AttachHierarchy``), beside the step on CUDA (``HierarchyAhead``: device batches, one ahead), else none (the
    model builds it, or PTv3 needs none); Mix3D (``data.mix_prob``) mixes the batches first. With workers the numba
    functions they call (the transforms', and the hierarchy's when they build it) are compiled here first
    (``numba_warm``)."""
    in_loader = place.where == "loader"
    if cfg.data.num_workers > 0:                 # numba compiled once here, not once a worker (numba_warm)
        warm_data_transforms(getattr(dataset, "transform", None))
        if in_loader:
            warm_host_hierarchy(net.hierarchy_spec)
    transform = AttachHierarchy(net.hierarchy_spec, batch_mixing(cfg)) if in_loader else batch_mixing(cfg)
    loader = make_loader(dataset, per_rank_batch(cfg, env), sampler=sampler, num_workers=cfg.data.num_workers,
                         seed=cfg.train.seed, drop_last=True, pin_memory=env.device.type == "cuda",
                         batch_transform=transform)
    if place.where == "beside":
        from pointgeope.engine.ahead import HierarchyAhead

        return HierarchyAhead(loader, net.hierarchy_spec, env.device)
    return loader


# --- optimisation ------------------------------------------------------------------------------------------

def parameter_groups(cfg: Config, net: torch.nn.Module) -> list[dict]:
    """The optimiser's parameter groups: every parameter with ``optim.weight_decay``, except those that
    ``optim.no_weight_decay`` names (``pe_frequencies``: ``net.frequency_parameters()``), in a second group with
    weight decay 0. No empty group, so a network without learnt frequencies has the one group it always had
    (and its checkpoints resume)."""
    exempt = net.frequency_parameters() if "pe_frequencies" in cfg.optim.no_weight_decay else []
    ids = {id(p) for p in exempt}
    groups = [{"params": [p for p in net.parameters() if id(p) not in ids], "weight_decay": cfg.optim.weight_decay}]
    if exempt:
        groups.append({"params": exempt, "weight_decay": 0.0})
    return groups


def optimizer(cfg: Config, net: torch.nn.Module) -> torch.optim.Optimizer:
    """SGD or AdamW over :func:`parameter_groups`, those named ``block`` at ``optim.block_lr`` when it is set,
    but the learnt positional frequencies, at ``optim.lr`` whatever their name (``engine/schedule.py``)."""
    o, groups = cfg.optim, parameter_groups(cfg, net)
    if o.block_lr is not None:
        groups = schedule.keyword_groups(groups, net, schedule.BLOCK_KEYWORD, o.block_lr,
                                         keep=net.frequency_parameters())
    if o.name == "sgd":
        return torch.optim.SGD(groups, lr=o.lr, momentum=o.momentum, weight_decay=o.weight_decay)
    return torch.optim.AdamW(groups, lr=o.lr, weight_decay=o.weight_decay)


def lr_factor(cfg: Config, steps_per_epoch: int, step: int) -> float:
    """The factor of ``optim.lr`` at optimiser step ``step`` (see the module docstring)."""
    epochs = cfg.train.epochs
    if cfg.optim.scheduler == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * min(step / (epochs * steps_per_epoch), 1.0)))
    epoch = step // steps_per_epoch
    passed = sum(epoch >= int(m * epochs) for m in cfg.optim.milestones)
    return cfg.optim.gamma ** passed


def scheduler(cfg: Config, opt: torch.optim.Optimizer, steps_per_epoch: int) -> torch.optim.lr_scheduler.LRScheduler:
    o = cfg.optim
    if o.scheduler == "onecycle":
        return schedule.one_cycle(opt, cfg.train.epochs * steps_per_epoch, o.pct_start, o.anneal_strategy,
                                  o.div_factor, o.final_div_factor)
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda step: lr_factor(cfg, steps_per_epoch, step))


def autocast_dtype(amp: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of an ``amp`` setting (``train.amp`` or ``eval.amp``: ``bf16``, ``fp16``, ``none``) on
    ``device``, or None for float32: mixed precision is CUDA's only (with ``none`` and on the CPU, float32).
    The one owner of that rule (:func:`mixed_precision`, :func:`eval_precision`)."""
    if device.type != "cuda" or amp == "none":
        return None
    return torch.float16 if amp == "fp16" else torch.bfloat16


def mixed_precision(cfg: Config, device: torch.device) -> torch.dtype | None:
    """The training forward's autocast dtype, ``train.amp``'s (:func:`autocast_dtype`): of :func:`autocast`,
    :func:`grad_scaler` and training's precision line."""
    return autocast_dtype(cfg.train.amp, device)


def eval_precision(cfg: Config, device: torch.device) -> torch.dtype | None:
    """The test forward's autocast dtype, ``eval.amp``'s (:func:`autocast_dtype`), for both backbones' test
    (evaluate, validation, predict), whatever ``train.amp``: float32 by default, as both authors' tests run
    (PTv1's ``tool/test.py``, Pointcept's ``SemSegTester``: no autocast; only flash-attn's kernel attends in
    bfloat16 there, which pointgeope does not call)."""
    return autocast_dtype(cfg.eval.amp, device)


def precision_note(cfg: Config, device: torch.device, evaluation: bool = False) -> str | None:
    """The log line of a mixed precision asked for on a device that runs float32 (the CPU): ``train.amp``'s,
    with ``evaluation`` ``eval.amp``'s; None where the precision asked for is the one that runs."""
    key, amp = ("eval.amp", cfg.eval.amp) if evaluation else ("train.amp", cfg.train.amp)
    if amp == "none" or autocast_dtype(amp, device) is not None:
        return None
    what = "test" if evaluation else "run"
    return f"precision: float32 ({key}={amp} is for CUDA, and this {what} is on {device.type})"


def autocast(cfg: Config, device: torch.device, cache: bool = True, evaluation: bool = False) -> torch.autocast:
    """The mixed precision of a forward pass: ``train.amp``'s (:func:`mixed_precision`), with ``evaluation``
    ``eval.amp``'s (:func:`eval_precision`): bf16 or fp16 autocast on CUDA, off (float32) with ``none`` and on
    the CPU. ``cache=False`` for a CUDA graph's capture, which must not keep casts made outside it
    (``engine/graphs.py``)."""
    dtype = eval_precision(cfg, device) if evaluation else mixed_precision(cfg, device)
    return torch.autocast(device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None, cache_enabled=cache)


def grad_scaler(cfg: Config, device: torch.device) -> torch.amp.GradScaler:
    """Loss scaling, needed by fp16 on CUDA only (bf16 and float32 keep the gradients' range): disabled
    otherwise, when its ``scale``, ``unscale_``, ``step`` and ``update`` are plain pass-throughs."""
    return torch.amp.GradScaler("cuda", enabled=mixed_precision(cfg, device) == torch.float16)
