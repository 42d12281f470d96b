"""Distributed data parallel set-up from the ``torchrun`` environment, and the device of this process.

``torchrun --nproc_per_node N train.py ...`` sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` (and
``MASTER_ADDR`` / ``MASTER_PORT``); without them the run is a single process. The backend is NCCL when
the processes use CUDA and Gloo on the CPU. Only rank 0 writes files and draws progress bars.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist

from pointgeope.engine.config_values import device_problem
from pointgeope.errors import UserError, stops_deferred
from pointgeope.model import kernels
from pointgeope.plural import agreeing, counted


class DeviceError(UserError, RuntimeError):
    """A device name the engine does not know, or one this machine does not have."""


class PeerEnded(UserError):
    """Under DDP, another process of the run ended (stopped, killed, crashed) while this one waited on it in a
    collective: one line, exit code 2, instead of the backend's traceback."""


# What a collective raises when the process at its other end has gone: gloo ("Connection closed by peer",
# "Connection reset by peer", "Broken pipe" as it writes), NCCL ("remote process exited or there was a
# network error").
_PEER_GONE = re.compile(r"Connection (?:closed|reset) by peer|Broken pipe|remote process exited")


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def choose_device(preference: str, local_rank: int = 0, option: str = "train.device") -> torch.device:
    """The device of ``preference`` (``train.device``, or the command-line ``option`` that names one):
    ``auto`` is ``cuda:<local_rank>`` when CUDA is available, else the CPU; ``cuda`` is
    ``cuda:<local_rank>``. A :class:`DeviceError` for a name outside
    :data:`~pointgeope.engine.config_values.DEVICES` or a GPU this machine does not have; a
    ``KernelChoiceError`` for a kernel switch with a value it does not take (``kernel_choice``), or Triton
    where it cannot run. A CUDA device becomes this thread's current device: what torch places on the current
    one by default (an event's stream, a CUDA graph's capture stream, the loader's pinning) is then on the
    run's GPU, also for ``cuda:1`` in a single process."""
    device = _device(preference, local_rank, option)
    kernels.check_runnable(device)            # the kernel switches: valid, and a path that runs here
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return device


def _device(preference: str, local_rank: int, option: str) -> torch.device:
    problem = device_problem(preference, option)
    if problem:
        raise DeviceError(problem)
    if preference == "auto":
        return torch.device("cuda", local_rank) if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(preference)
    if device.type != "cuda":
        return device
    named, other = ((f"{option} {preference}", f"{option} cpu (or auto)") if option.startswith("--")
                    else (f"{option}={preference!r}", "auto or cpu"))
    if not torch.cuda.is_available():
        raise DeviceError(f"{named} but CUDA is not available here; use {other}")
    device = device if device.index is not None else torch.device("cuda", local_rank)
    count = torch.cuda.device_count()
    if device.index >= count:
        raise DeviceError(f"{named}: this machine has {counted(count, 'CUDA device')}, "
                          + agreeing(count, "cuda:0", f"cuda:0 to cuda:{count - 1}"))
    return device


def apply_threads(cfg) -> None:
    """``torch.set_num_threads(train.threads)`` where the config sets it (every command that runs the model)."""
    if cfg.train.threads is not None:
        torch.set_num_threads(cfg.train.threads)


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise RuntimeError(f"expected an integer in the environment variable {name}, got {value!r}") from None


def setup(device_preference: str = "auto") -> DistEnv:
    """Initialise the process group when started by torchrun (``WORLD_SIZE`` > 1); pick the device."""
    world_size = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local_rank = _env_int("LOCAL_RANK", 0)
    device = choose_device(device_preference, local_rank)
    if world_size > 1 and not dist.is_initialized():          # NCCL's device: the current one (choose_device)
        _ENDED.clear()        # an earlier run's groups, idle since its cleanup: freed before a new one is made
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo", store=_next_store(),
                                rank=rank, world_size=world_size)
    return DistEnv(rank=rank, world_size=world_size, local_rank=local_rank, device=device)


# The process group destroyed by cleanup, kept alive until the process exits or setup makes the next one.
_ENDED: list = []
# The process's rendezvous store (torchrun's, or rank 0's TCPStore at MASTER_ADDR:MASTER_PORT), once made, and the
# number of groups made on it: {"store": ..., "groups": n}.
_STORE: dict = {}


def _next_store() -> dist.Store:
    """The store of the process's next group: one rendezvous a process (``env://``, as ``init_process_group``
    makes it), each group under a prefix of its own. With a new rendezvous a group, rank 0 closed its store's
    server as it freed the earlier group in its next :func:`setup`, and a rank that came to its next setup
    first could connect to the server being closed: its init failed ("TCPStore recv failure") or waited for
    good (2 CI runs of 3 inits in a process). One server, alive to the process's end, leaves no such moment."""
    if not _STORE:
        _STORE.update(store=next(dist.rendezvous("env://"))[0], groups=0)
    _STORE["groups"] += 1
    return dist.PrefixStore(f"pointgeope_group_{_STORE['groups']}", _STORE["store"])


@atexit.register
def _free_ended() -> None:
    """Free the kept groups as the process exits, while Python and torch still run: left to the interpreter's
    teardown, a gloo group's destructor aborted a process whose run had ended well now and then ("terminate
    called without an active exception", exit code 134; 3 of 10 processes that ran three groups)."""
    _ENDED.clear()
    _STORE.clear()


def cleanup() -> None:
    """Destroy the process group, keeping the object itself alive until the process exits. Otherwise the last
    reference is often the DDP model's reducer, freed (the GIL held) as a stop's traceback is dropped, right
    after a collective: the group's destructor joins its gloo worker thread, which waits for the GIL to free
    that collective's tensors, and the rank hangs for good (seen with two ranks stopping together after a
    broadcast). Kept, the worker finishes while Python runs on, and the group is freed, idle, at exit, or by
    the next :func:`setup` in the same process (a script that trains, then evaluates): kept longer, each
    earlier group held its gloo threads, sockets and rank 0's store, and a new group's init hung now and then."""
    if dist.is_available() and dist.is_initialized():
        _ENDED.append(dist.group.WORLD)
        dist.destroy_process_group()


def barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def all_reduce_sum(values: torch.Tensor) -> torch.Tensor:
    """Sum ``values`` over all ranks in place (a no-op in a single process); returns it."""
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def any_rank(flag: bool, device: torch.device) -> bool:
    """True on every rank when ``flag`` is true on any rank (e.g. "a loss was not finite: stop")."""
    if not (dist.is_available() and dist.is_initialized()):
        return flag
    t = torch.tensor([1 if flag else 0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def read_agreed(values: list[torch.Tensor], flag: torch.Tensor) -> tuple[list[float], bool, list[float]]:
    """``(values, up, means)``: the values of the 0-dim tensors ``values``, whether the 0-dim boolean ``flag``
    (all on this rank's device) is true on any rank, and each value's mean over the ranks, in one host read:
    under DDP one all-reduce (sum) of ``[values | flag]`` is queued on the device first, and this rank's values
    and the sums are read together (``up``: a sum of flags above 0). In a single process ``means`` are the
    values. Collective under DDP."""
    local = torch.cat([torch.stack([v.to(torch.float32) for v in values]), flag.reshape(1).to(torch.float32)])
    n = len(values)
    if dist.is_available() and dist.is_initialized():
        summed = local.clone()
        dist.all_reduce(summed, op=dist.ReduceOp.SUM)
        read = torch.cat([local, summed]).tolist()
        return read[:n], read[-1] > 0, [total / dist.get_world_size() for total in read[n + 1:-1]]
    read = local.tolist()
    return read[:n], bool(read[n]), read[:n]


def broadcast_buffers(module: torch.nn.Module) -> None:
    """Give every rank rank 0's buffers of ``module`` (BatchNorm's running mean, variance and batch count),
    in place; a no-op in a single process. DDP broadcasts them at the start of each forward only, so after
    the last step of an epoch each rank holds its own running statistics while rank 0's alone are saved:
    a validation that shares rooms among ranks must first score rank 0's model everywhere."""
    if dist.is_available() and dist.is_initialized():
        for buffer in module.buffers():
            dist.broadcast(buffer.data, src=0)


def share_refusal(refusal: UserError | FloatingPointError | None) -> None:
    """Every rank raises rank 0's ``refusal`` (a check only rank 0 makes: the run folder, the fold's lock, the
    model state it saves), so that each one ends with its one line and exit code (2, or 1 for a
    FloatingPointError: a run that diverged) rather than waiting in the next collective for a peer that has
    gone. Collective under DDP (every rank calls it; only rank 0's argument counts: the others give
    ``None``); in a single process it raises ``refusal`` if there is one."""
    if dist.is_available() and dist.is_initialized():
        message = [None if refusal is None else (isinstance(refusal, FloatingPointError), str(refusal))]
        dist.broadcast_object_list(message, src=0)
        if refusal is None and message[0] is not None:
            diverged, text = message[0]
            raise (FloatingPointError if diverged else UserError)(text)
    if refusal is not None:
        raise refusal


@contextlib.contextmanager
def refusal_shared() -> Iterator[None]:
    """Run the block (a check that only rank 0 makes, e.g. ``if env.is_main: writable_folder(...)``) and
    then :func:`share_refusal` its :class:`UserError`, or ``None``: every rank ends with rank 0's one line.
    Collective under DDP: every rank enters the block."""
    refusal = None
    try:
        yield
    except UserError as err:
        refusal = err
    share_refusal(refusal)


def whole_step(env: DistEnv) -> contextlib.AbstractContextManager:
    """Under DDP, the block (a training step) runs to its end before a stop (Ctrl-C, SIGTERM) is raised
    (:func:`pointgeope.errors.stops_deferred`): a stop inside its backward would abandon the gradients'
    all-reduces in flight, and the rank hang as its model is freed. In a single process, nothing."""
    return stops_deferred() if env.distributed else contextlib.nullcontext()


@contextlib.contextmanager
def peer_end_said(env: DistEnv) -> Iterator[None]:
    """Under DDP, a collective that failed because another process of the run ended raises
    :class:`PeerEnded`, which names this rank and says that the same command resumes the run from the last
    checkpoint (the block's ``finally`` blocks have released the fold's lock and deleted its temporary
    files: nothing is lost)."""
    try:
        yield
    except RuntimeError as err:
        gone = _PEER_GONE.search(str(err))
        if not env.distributed or gone is None:
            raise
        raise PeerEnded(f"rank {env.rank} of {env.world_size}: another process of this run ended "
                        f"({gone.group()}), so this one stops too; the same command resumes the run from the last "
                        "checkpoint") from None
