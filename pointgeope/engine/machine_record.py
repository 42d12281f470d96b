"""Where a fold was trained and tested: the device, DDP processes, torch CPU threads, precision and torch version.

torch's kernels give other floats on another device (the CPU, another GPU model), in another precision
(``train.amp`` / ``eval.amp`` as they ran: float32 on the CPU whatever the key says), with another number of
CPU threads (the CPU's sums are split by thread) or DDP processes (BatchNorm's statistics are per process),
and under another torch version: a fold's scores are those of the machine it ran on. None of this is a
setting of the method (the keys are free: a fold resumes on another machine), so the records keep what ran::

    {"device": "cuda", "device_name": "NVIDIA H200", "processes": 1, "threads": 16,
     "precision": "bf16", "torch": "2.13.0+cu126"}

A fold's checkpoints hold ``"trained_on"``, the machines of its training in order, each with the code that ran
there (:func:`training_machine`: ``"pointgeope"``, ``"pointgeope_commit"``, :mod:`pointgeope.provenance`; one
entry per change: a fold resumed elsewhere, or under another commit, lists both; a checkpoint written before the
key, which held the thread count alone, starts the list with ``{"threads": n}``); ``metrics.json`` copies it and
adds ``"tested_on"``, its test's machine (its code is the file's own ``"pointgeope"``).
``pointgeope report`` compares them between the folds it pools (:mod:`pointgeope.report.machine`, which reads
the JSON without torch).
"""
from __future__ import annotations

import torch

from pointgeope.number_kind import is_whole

__all__ = ["code_note", "fold_machines", "machine", "saved_trained_on", "trained_on", "training_machine"]

PRECISION_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", None: "float32"}


def machine(device: torch.device, amp: str, processes: int = 1) -> dict:
    """The record of this process's machine (module docstring): ``device``'s type (and, on CUDA, its
    model), ``processes`` (the DDP world size), torch's CPU threads, the precision that ``amp`` (``train.amp``
    or ``eval.amp``) runs at on ``device`` (:func:`pointgeope.engine.build.autocast_dtype`) and torch's
    version."""
    from pointgeope.engine.build import autocast_dtype

    device = torch.device(device)
    record = {"device": device.type}
    if device.type == "cuda":
        record["device_name"] = torch.cuda.get_device_name(device)
    return {**record, "processes": int(processes), "threads": torch.get_num_threads(),
            "precision": PRECISION_NAMES[autocast_dtype(amp, device)], "torch": str(torch.__version__)}


def training_machine(device: torch.device, amp: str, processes: int = 1) -> dict:
    """A ``"trained_on"`` entry: :func:`machine` with ``train.amp``'s ``amp``, and the code of this process
    (:func:`pointgeope.provenance.code_record`)."""
    from pointgeope.provenance import code_record

    return {**machine(device, amp, processes), **code_record()}


def saved_trained_on(ckpt: dict) -> list[dict]:
    """The ``"trained_on"`` of the checkpoint ``ckpt``; one of an older version, without the key, gives
    ``[{"threads": n}]`` of its ``"threads"`` (the one part of its machine it recorded), or ``[]``."""
    saved = ckpt.get("trained_on")
    if isinstance(saved, list) and all(isinstance(entry, dict) for entry in saved):
        return list(saved)
    threads = ckpt.get("threads")
    return [{"threads": threads}] if is_whole(threads) else []


def trained_on(ckpt: dict | None, now: dict) -> list[dict]:
    """The ``"trained_on"`` of a fold's next checkpoints: that of the checkpoint ``ckpt`` resumed from
    (:func:`saved_trained_on`; ``None``: a fresh fold), with ``now`` (:func:`machine`) appended unless it is
    its last entry."""
    saved = [] if ckpt is None else saved_trained_on(ckpt)
    return saved if saved and saved[-1] == now else [*saved, now]


def fold_machines(ckpt: dict, env, amp: str) -> dict:
    """``metrics.json``'s ``{"trained_on": [...] or None, "tested_on": {...}}``: the machines of the checkpoint
    ``ckpt`` (``None`` where it records none) and of its test by ``env`` (a ``DistEnv``: its device and DDP
    processes) at ``eval.amp`` ``amp``."""
    return {"trained_on": saved_trained_on(ckpt) or None, "tested_on": machine(env.device, amp, env.world_size)}


def _code_text(entry: dict) -> str:
    """``pointgeope 0.2.0.dev0 (commit 3efc716, modified)`` of a ``"trained_on"`` entry's code."""
    commit = entry.get("pointgeope_commit")
    modified = ", modified" if entry.get("pointgeope_modified") else ""
    return f"pointgeope {entry.get('pointgeope')}" + (f" (commit {str(commit)[:7]}{modified})" if commit else "")


def code_note(path, saved: list[dict], now: dict) -> str | None:
    """The note of a resume from the checkpoint ``path`` (its ``saved`` ``"trained_on"``,
    :func:`saved_trained_on`) under other code than its last span's (``now``: :func:`training_machine`); ``None``
    where the version and commit are the same. Code that computes a kernel, a sampling or an augmentation
    otherwise gives other floats from the resume on, which training carries into every later epoch: the fold
    is then no uninterrupted run of either version. The records keep both, but without this line nothing says
    so where it happens. A checkpoint written before the record held the code (its one entry ``{"threads": n}``)
    is of an older version than any that writes the record."""
    last = saved[-1] if saved else {}
    if "pointgeope" in last:
        if (last.get("pointgeope"), last.get("pointgeope_commit")) == (now.get("pointgeope"),
                                                                      now.get("pointgeope_commit")):
            return None
        then = _code_text(last)
    else:
        then = "an older pointgeope, which recorded no code"
    return (f"note: {path} was trained by {then}, this run is {_code_text(now)}: where their computations differ "
            "(a kernel's rounding, a sampling), the fold goes on as another run than an uninterrupted one of "
            "either (metrics.json's trained_on lists the code of each part it records)")
