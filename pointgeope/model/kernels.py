"""Which kernels run, Triton's or torch's, and what happens when a Triton kernel fails: the one place that
decides it for the point ops (FPS, kNN), the fused attention and the compiled GeoPE pair kernels.

``POINTGEOPE_KERNELS`` (read at every call, so a test or a benchmark can switch it):

    unset    the device's default: Triton on CUDA where it imports, torch (and the CPU libraries) elsewhere
    triton   Triton wherever it can run: CUDA tensors, and CPU tensors under ``TRITON_INTERPRET=1`` (Triton's
             interpreter, how the tests run the kernels)
    torch    no Triton kernel anywhere (``torch.compile``'s generated Triton included)

Kernels that sum with atomics (the fused attention's backward) leave Triton whenever
``torch.use_deterministic_algorithms(True)`` asks for reproducible sums.

**Never a broken default.** A Triton kernel that fails to compile or launch on this device (a compiler
error, too few registers or too little shared memory, a driver or ptxas mismatch) is replaced by its torch
path for the rest of the process, with one warning (:class:`KernelFallbackWarning`) naming the kernel, the
error and the switch. Every new specialisation compiles, so any call can be the one that fails: each runs
through :func:`run`, which costs a ``try`` block when nothing fails. Out-of-memory errors are not failures
of a kernel: they propagate (``evaluate`` halves its batch on them). ``pointgeope info --check``
(:mod:`pointgeope.model.kernel_check`) runs every kernel once against its torch path.
"""
from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import TypeVar

import torch

from pointgeope.errors import UserError

__all__ = ["PATHS", "KernelChoiceError", "KernelFallbackWarning", "requested", "interpreted", "triton_imports",
           "use_triton", "runs_on", "check_runnable", "run", "fail", "failures", "status", "chosen"]

PATHS = ("triton", "torch")
T = TypeVar("T")

_failed: dict[str, str] = {}      # kernel -> "ErrorType: first line", for the rest of the process


class KernelChoiceError(UserError, ValueError):
    """``POINTGEOPE_KERNELS`` holds a value that is not a path, or asks for Triton where it cannot run."""


class KernelFallbackWarning(RuntimeWarning):
    """A Triton kernel failed on this device; its torch path runs from now on."""


def requested() -> str | None:
    """``"triton"``, ``"torch"`` or ``None`` (unset: the device's default), from ``POINTGEOPE_KERNELS``."""
    value = os.environ.get("POINTGEOPE_KERNELS", "").strip().lower()
    if value and value not in PATHS:
        raise KernelChoiceError(f"POINTGEOPE_KERNELS: expected one of {', '.join(PATHS)} (or unset for the "
                                f"device's default), got {value!r}")
    return value or None


@contextlib.contextmanager
def chosen(path: str) -> Iterator[None]:
    """``POINTGEOPE_KERNELS=path`` inside the block, its former value (or none) after it (benchmarks, checks)."""
    if path not in PATHS:
        raise KernelChoiceError(f"expected a kernel path in {PATHS}, got {path!r}")
    before = os.environ.get("POINTGEOPE_KERNELS")
    os.environ["POINTGEOPE_KERNELS"] = path
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("POINTGEOPE_KERNELS", None)
        else:
            os.environ["POINTGEOPE_KERNELS"] = before


def interpreted() -> bool:
    """Whether Triton kernels run in its CPU interpreter (``TRITON_INTERPRET=1``, read at each call)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


@lru_cache(maxsize=None)
def triton_imports() -> bool:
    """Whether Triton imports (a broken install counts as none: the torch paths run)."""
    try:
        import triton.language  # noqa: F401
    except Exception:  # noqa: BLE001 - ImportError, or a build that fails to load its driver
        return False
    return True


def use_triton(kernel: str, device: torch.device, atomics: bool = False) -> bool:
    """Whether ``kernel`` runs in Triton for tensors on ``device`` (module docstring): not after it failed,
    never with ``POINTGEOPE_KERNELS=torch``, with ``triton`` on CUDA and on the CPU under the interpreter,
    unset on CUDA only; ``atomics`` kernels not under deterministic algorithms."""
    choice = requested()
    if choice == "torch" or kernel in _failed or not triton_imports():
        return False
    if atomics and torch.are_deterministic_algorithms_enabled():
        return False
    return device.type == "cuda" or (choice == "triton" and runs_on(device))


def runs_on(device: torch.device) -> bool:
    """Whether a Triton kernel can take tensors on ``device`` at all: CUDA, or the CPU in the interpreter."""
    return device.type == "cuda" or (device.type == "cpu" and interpreted())


def check_runnable(device: torch.device) -> None:
    """Raise :class:`KernelChoiceError` if ``POINTGEOPE_KERNELS=triton`` cannot run on ``device``: Triton
    does not import, or CPU tensors without ``TRITON_INTERPRET=1``. The commands call it once at start."""
    if requested() != "triton":               # (validates the value too)
        return
    if not triton_imports():
        raise KernelChoiceError("POINTGEOPE_KERNELS=triton: Triton does not import here (pip install triton); "
                                "unset POINTGEOPE_KERNELS to use the torch kernels")
    if device.type == "cpu" and not interpreted():
        raise KernelChoiceError("POINTGEOPE_KERNELS=triton on the CPU needs TRITON_INTERPRET=1 (Triton's interpreter, "
                                "for tests: very slow); unset POINTGEOPE_KERNELS to use the CPU's kernels")
    if device.type not in ("cpu", "cuda"):
        raise KernelChoiceError(f"POINTGEOPE_KERNELS=triton: Triton runs on CUDA devices, got {device.type}; unset "
                                "POINTGEOPE_KERNELS")


def _is_kernel_failure(err: Exception) -> bool:
    """A failure to compile or launch, not the program's: out-of-memory errors and our own argument checks
    (``ValueError`` raised before any kernel) propagate."""
    if isinstance(err, (torch.OutOfMemoryError, KernelChoiceError)):
        return False
    return not (isinstance(err, ValueError) and type(err).__module__.startswith("pointgeope"))


def run(kernel: str, device: torch.device, triton_fn: Callable[[], T], torch_fn: Callable[[], T],
        atomics: bool = False) -> T:
    """``triton_fn()`` where :func:`use_triton` says so, else ``torch_fn()``; if ``triton_fn`` fails to compile
    or launch, ``kernel`` is off for the rest of the process (one warning) and ``torch_fn()`` answers."""
    if not use_triton(kernel, device, atomics):
        return torch_fn()
    try:
        return triton_fn()
    except Exception as err:  # noqa: BLE001 - any compiler, resource or driver error of the kernel
        if not _is_kernel_failure(err):
            raise
        fail(kernel, err)
    return torch_fn()


def fail(kernel: str, err: BaseException) -> None:
    """Turn ``kernel`` off for the rest of the process, with one warning."""
    first = str(err).strip().splitlines()[0][:300] if str(err).strip() else ""
    _failed[kernel] = f"{type(err).__name__}: {first}"
    warnings.warn(f"Triton kernel {kernel} failed on this device ({_failed[kernel]}); its torch path runs from now "
                  "on. POINTGEOPE_KERNELS=torch chooses the torch paths from the start; `pointgeope info --check` "
                  "tests every kernel", KernelFallbackWarning, stacklevel=3)


def failures() -> dict[str, str]:
    """The kernels turned off in this process, with their errors."""
    return dict(_failed)


def reset() -> None:
    """Forget the failures (tests)."""
    _failed.clear()


def status() -> str:
    """One line for ``pointgeope info``."""
    try:
        choice = requested()
    except KernelChoiceError as err:
        return f"invalid: {err}"
    if choice == "torch":
        return "torch on every device (POINTGEOPE_KERNELS=torch)"
    if not triton_imports():
        return "torch (Triton does not import)"
    where = ("Triton on CUDA, and on the CPU under TRITON_INTERPRET=1 (POINTGEOPE_KERNELS=triton)" if choice
             else "Triton on CUDA, torch on the CPU")
    failed = "; ".join(f"{k} fell back to torch ({e})" for k, e in _failed.items())
    return where + (f"; {failed}" if failed else "")
