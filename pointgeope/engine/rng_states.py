"""The random number generators' states that an exact resume restores: Python's, NumPy's and torch's (CPU and
CUDA) global generators, as plain containers a ``weights_only`` checkpoint holds, one per DDP rank::

    {"python": [version, [internal...], gauss], "numpy": {"name", "keys" (int64 tensor), "pos", "has_gauss",
     "cached_gaussian"}, "torch": uint8 tensor, "cuda": [uint8 tensor per visible device]}

A checkpoint's ``"rng"`` entry is the list of every rank's (:class:`pointgeope.engine.state.FoldCheckpoints`
writes and restores it). A resume with more ranks gives each new rank a stream of its own (:func:`rank_rng_state`).
A resume with another number of visible GPUs (:func:`set_rng_state`) restores device ``i`` from saved state ``i``
for the devices both have: the saved states of devices no longer visible are dropped, and a device the checkpoint
had no state for keeps the state it has (not restored: on it, a resumed run does not draw what the uninterrupted
run drew).
"""
from __future__ import annotations

import random

import numpy as np
import torch

__all__ = ["rng_state", "pack_rng", "set_rng_state", "rank_rng_state", "restore_rank_rng"]


def rng_state() -> dict:
    """The states of Python's, NumPy's and torch's (CPU and CUDA) global generators."""
    return pack_rng(random.getstate(), np.random.get_state(), torch.get_rng_state(),
                    torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [])


def pack_rng(python: tuple, numpy: tuple, cpu: torch.Tensor, cuda: list) -> dict:
    """Generator states (``random.getstate()``, ``np.random.get_state()``, torch's) as a checkpoint holds them."""
    (version, internal, gauss), (name, keys, pos, has_gauss, cached) = python, numpy
    return {"python": [version, list(internal), gauss],
            "numpy": {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                      "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}, "torch": cpu, "cuda": cuda}


def set_rng_state(state: dict) -> None:
    """Set Python's, NumPy's and torch's CPU generators to ``state`` (:func:`rng_state`'s form), and, where CUDA is
    available, visible device ``i`` to ``state["cuda"][i]`` for ``i < min(len(state["cuda"]), visible devices)``:
    saved states beyond the visible devices are dropped, and devices beyond the saved states (or every device, for
    a state saved without CUDA: ``"cuda"`` empty) keep the state they have."""
    (version, internal, gauss), n = state["python"], state["numpy"]
    random.setstate((version, tuple(internal), gauss))
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        # device i takes saved state i (get_rng_state_all: one per device visible when saved). A checkpoint
        # written where more GPUs were visible (torchrun on 2, a shared node) resumed where fewer are
        # (CUDA_VISIBLE_DEVICES=0): set_rng_state_all would index a device that is not there (IndexError)
        torch.cuda.set_rng_state_all(state["cuda"][:torch.cuda.device_count()])


def rank_rng_state(saved: list[dict], rank: int) -> dict:
    """The RNG states (:func:`rng_state`'s form) that rank ``rank`` resumes
    with, from the ``len(saved)`` ranks' states of a checkpoint. A rank the checkpoint had takes its own
    (fewer ranks now: the others' streams are dropped). A rank beyond them (more processes now) takes a
    stream of its own, never another rank's: with ``s = saved[rank % len(saved)]``, the first 4 draws
    ``w`` of ``torch.randint(2**62)`` from ``s["torch"]`` and ``q = SeedSequence([*w, rank])``'s first four 63-bit
    words ``q0..q3``, its Python generator is seeded with ``q0``, NumPy's with ``q1 mod 2**32`` (its legacy
    generator takes 32 bits), torch's with ``q2`` and CUDA's with ``q3``
    (``"cuda_seed"``, which :func:`restore_rank_rng` gives every visible device): a function of the saved state and
    the rank, the same on every such resume."""
    if rank < len(saved):
        return saved[rank]
    source = torch.Generator().set_state(saved[rank % len(saved)]["torch"])
    words = torch.randint(2**62, (4,), generator=source).tolist()
    seeds = [int(x) >> 1 for x in np.random.SeedSequence([*words, rank]).generate_state(4, np.uint64)]
    return {**pack_rng(random.Random(seeds[0]).getstate(), np.random.RandomState(seeds[1] % 2**32).get_state(),
                       torch.Generator().manual_seed(seeds[2]).get_state(), []), "cuda_seed": seeds[3]}


def restore_rank_rng(saved: list[dict], rank: int) -> None:
    """Set this process's generators to :func:`rank_rng_state` ``(saved, rank)``: a rank beyond the saved ones
    seeds every visible CUDA device with its ``"cuda_seed"`` (the same seed on each of its devices)."""
    state = rank_rng_state(saved, rank)
    set_rng_state(state)
    if "cuda_seed" in state and torch.cuda.is_available():
        torch.cuda.manual_seed_all(state["cuda_seed"])
