"""Batches of blocks: a ``DataLoader`` with seeded workers and a shardable sampler.

A batch of ``Points`` samples is a ``Points`` (:func:`pointgeope.data.points.collate`); the model's ``offset`` is
``batch.ptr[1:]`` (cumulative point counts). A dataset whose samples are torch_geometric ``Data`` gets PyG's
``Batch`` from PyG's own collation, as before pointgeope had ``Points``. The order of samples comes from a
``DistributedSampler``: the one a DDP run passes (each rank gets its shard), or by default one with a single
replica, which shuffles with ``seed + epoch`` exactly as the DDP one does. ``set_epoch(loader, epoch)`` advances
both the sampler and the dataset, so epoch ``e`` is reproducible on its own (resume) whatever the number of workers.

Workers are not persistent: each epoch's iterator forks workers from the main process, which carry the
dataset's current epoch (a persistent worker would keep a stale copy).

``batch_transform`` runs on every collated batch inside the worker that built it (in the main process when
``num_workers = 0``): the engine passes one that computes the model's point hierarchy there, on the CPU,
while the accelerator trains on the previous batch. The loader knows nothing of what it computes.

Every batch's features ``x`` are checked finite where they are collated (``geope_checks.check_finite``, a
``ValueError`` naming the sample of the batch and its first bad row): on the CPU, in the worker, so no step waits
for a read from the accelerator; a NaN or an infinity in ``x`` would otherwise turn every logit of its cloud into
NaN without a word. pointgeope's own datasets check each sample as they make it, naming the room and its point
(:mod:`pointgeope.data.sample_check`); this check is for any other dataset, whose samples the loader cannot name,
and is skipped for those (``sample_check.checks_its_samples``, decided once when the loader is made).
"""
from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler

from pointgeope.data.points import Points, collate
from pointgeope.data.sample_check import checks_its_samples
from pointgeope.geope_checks import check_finite


def seed_worker(worker_id: int) -> None:
    """``worker_init_fn``: seed Python's and numpy's global generators from the worker's torch seed
    (which the loader derives from its seeded generator), and use one thread per worker. The datasets
    here draw from their own per-sample generators; this only protects code that uses global state."""
    seed = torch.initial_seed() % 2**32
    random.seed(seed)
    np.random.seed(seed)
    torch.set_num_threads(1)


class _CollateThen:
    """The collation of ``Points`` samples into a ``Points`` batch (or of PyG ``Data`` into PyG's ``Batch``),
    its features ``x`` checked finite, then ``transform(batch)`` (picklable for workers)."""

    def __init__(self, dataset: Dataset, transform: Callable | None):
        self.dataset, self.transform, self.pyg = dataset, transform, None
        self.check = not checks_its_samples(dataset)       # pointgeope's datasets checked each sample already

    def collate(self, items: list):
        if all(isinstance(item, Points) for item in items):
            return collate(items)
        if self.pyg is None:                  # torch_geometric imported only for a dataset of its samples
            from torch_geometric.loader.dataloader import Collater

            self.pyg = Collater(self.dataset)
        return self.pyg(items)

    def __call__(self, items: list):
        for i, item in enumerate(items if self.check else ()):
            if isinstance(x := getattr(item, "x", None), torch.Tensor):
                check_finite(f"x (the input features of the batch's sample {i + 1} of {len(items)}, in its own rows)",
                             x)
        batch = self.collate(items)
        return batch if self.transform is None else self.transform(batch)


def make_loader(dataset: Dataset, batch_size: int, *, shuffle: bool = True, num_workers: int = 0,
                seed: int = 0, sampler: Sampler | None = None, drop_last: bool = False,
                pin_memory: bool = False, batch_transform: Callable | None = None) -> DataLoader:
    """A ``DataLoader`` over ``dataset`` (items ``Points``, or PyG ``Data``) that yields batches (``Points``, or
    PyG ``Batch``).

    Args:
        dataset: e.g. ``S3DISTrain``.
        batch_size: blocks per batch (per rank under DDP).
        shuffle: shuffle each epoch (ignored when ``sampler`` is given).
        num_workers: worker processes (0 loads in the main process).
        seed: seeds the default sampler's shuffle and the workers' base seed.
        sampler: e.g. ``DistributedSampler(dataset, shuffle=True, seed=seed)`` in a DDP run.
        drop_last: drop the last incomplete batch.
        pin_memory: pin batches (for CUDA).
        batch_transform: ``f(batch) -> batch`` applied to every batch in the worker that collates it.
    """
    if batch_size < 1:
        raise ValueError(f"expected batch_size >= 1, got {batch_size}")
    if sampler is None:
        sampler = DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=shuffle, seed=seed)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=num_workers,
                      collate_fn=_CollateThen(dataset, batch_transform),
                      worker_init_fn=seed_worker if num_workers > 0 else None,
                      generator=torch.Generator().manual_seed(seed), drop_last=drop_last,
                      pin_memory=pin_memory, persistent_workers=False)


def set_epoch(loader: DataLoader, epoch: int) -> None:
    """Select epoch ``epoch`` for the loader's sampler (shuffle order) and dataset (augmentation)."""
    if hasattr(loader.sampler, "set_epoch"):
        loader.sampler.set_epoch(epoch)
    if hasattr(loader.dataset, "set_epoch"):
        loader.dataset.set_epoch(epoch)
