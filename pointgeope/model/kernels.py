"""The Triton kernels of the package, each registered once, and what happens when one fails: the one place that
runs a kernel for the point ops (FPS, kNN), the fused attention, the batch norm, GeoPE's shift tables and the
compiled GeoPE pair kernels.

**Registering.** A kernel is a :class:`Kernel`: its name, its Triton function, its torch function (the same
arguments, the same result), whether it sums with atomics, and its ``pointgeope info --check`` cases;
:func:`register` adds it. Calling it (``KERNEL(device, *args)``) runs the Triton function where
:func:`use_triton` says so, else the torch one; so a new kernel gets the switch, the fallback, the tests'
spies (a test replaces ``KERNEL.triton``) and the check (:mod:`pointgeope.model.kernel_check` runs every
registered case) by being registered.

**Which path.** :mod:`pointgeope.model.kernel_choice` reads the switches (``POINTGEOPE_KERNELS``,
``TRITON_INTERPRET``): ``torch``: torch everywhere; ``triton``: Triton wherever it can run (:func:`runs_on`:
CUDA tensors, CPU tensors under the interpreter); unset: Triton on CUDA only, but for the kernels registered
opt-in (``cuda_default=False``: not shown to pay on a GPU), which run with ``triton`` only, and those that are a
CUDA default in some calls only (``cuda_default`` a :class:`DefaultWhere`, asked at each call: the plain batch
norm inside a padded batch), elsewhere opt-in. Kernels that
sum with atomics (linear GeoPE's fused relation; the other fused attention ops when ``gather_backward.SCATTER``
is ``atomic``: a kernel's ``atomics`` may be a function, asked at each call) leave Triton whenever
``torch.use_deterministic_algorithms(True)`` asks for reproducible sums.

**Never a broken default.** A Triton kernel that fails to compile or launch on this device (a compiler
error, too few registers or too little shared memory, a driver or ptxas mismatch) is replaced by its torch
function for the rest of the process, with one warning (:class:`KernelFallbackWarning`) naming the kernel,
the error and the switch; the record of failed kernels (:data:`FAILURES`) is shared by every thread, behind
a lock. Every new specialisation compiles, so any call can be the one that fails: each costs a ``try`` block
when nothing fails. Out-of-memory errors and the package's own argument checks are not failures of a kernel:
they propagate (``evaluate`` halves its batch on them). The public functions of the kernels check their
arguments before the dispatch, so a caller's wrong shape, dtype, device or index is one line and never turns a
kernel off: the attention's and the batch norm's raise :class:`KernelArgumentError` (a ``ValueError``), the
point ops' (``ops.knn``, ``ops.fps``) a ``ValueError`` or ``TypeError`` of their own, also before any kernel. A kernel
asked for explicitly (:meth:`Kernel.explicit`, ``backend="triton"`` of the point ops) does not fall back: it is asked
for to be measured or compared, and its error says so; on tensors it cannot take (:func:`require_runs_on`) it says what
to do.
"""
from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import torch

from pointgeope.model.kernel_choice import PATHS, KernelChoiceError, current
from pointgeope.recorded_text import bounded

__all__ = ["PATHS", "KernelChoiceError", "KernelFallbackWarning", "KernelArgumentError", "Kernel", "CheckCase",
           "DefaultWhere", "register", "registered", "triton_imports", "use_triton", "runs_on", "require_runs_on",
           "check_runnable", "failures", "reset", "status", "FAILURES", "launch_device"]


class KernelFallbackWarning(RuntimeWarning):
    """A Triton kernel failed on this device; its torch path runs from now on."""


class KernelArgumentError(ValueError):
    """Arguments a kernel's public function refuses (shapes, dtypes, devices, indices out of range), raised
    before the dispatch: the caller's mistake, never a failure of the kernel (:func:`_is_kernel_failure`)."""


class _Failures:
    """The kernels turned off in this process, ``name -> "ErrorType: first line"``; any thread may add one."""

    def __init__(self):
        self._lock, self._failed = threading.Lock(), {}

    def add(self, kernel: str, err: BaseException) -> str | None:
        """Record ``err`` for ``kernel``; its text if it is the kernel's first failure, else None."""
        first = bounded(str(err).strip().splitlines()[0], 300) if str(err).strip() else ""   # marked where cut
        with self._lock:
            if kernel in self._failed:
                return None
            self._failed[kernel] = text = f"{type(err).__name__}: {first}"
        return text

    def __contains__(self, kernel: str) -> bool:
        with self._lock:
            return kernel in self._failed

    def snapshot(self) -> dict[str, str]:
        with self._lock:
            return dict(self._failed)

    def clear(self) -> None:
        with self._lock:
            self._failed.clear()


FAILURES = _Failures()


@cache
def triton_imports() -> bool:
    """Whether Triton imports (a broken install counts as none: the torch paths run)."""
    try:
        import triton.language  # noqa: F401
    except Exception:  # noqa: BLE001 - ImportError, or a build that fails to load its driver
        return False
    return True


def launch_device(device: torch.device) -> contextlib.AbstractContextManager:
    """Context to launch a Triton kernel on ``device``: Triton launches on the current CUDA device, which
    need not be the tensors' (``cuda:1`` while the current one is ``cuda:0``). The one device guard of every
    launch (the point ops', the fused attention's, the norm's)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def runs_on(device: torch.device) -> bool:
    """Whether a Triton kernel can take tensors on ``device`` at all: CUDA, or the CPU in the interpreter."""
    return device.type == "cuda" or (device.type == "cpu" and current().interpret)


def require_runs_on(device: torch.device, what: str) -> None:
    """Raise :class:`KernelArgumentError` where a Triton kernel cannot take tensors on ``device``
    (:func:`runs_on`), saying what to do; ``what`` names the kernel or backend (the one interpreter rule)."""
    if not runs_on(device):
        raise KernelArgumentError(f"{what} runs on CUDA tensors (or on CPU tensors under TRITON_INTERPRET=1, for "
                                  f"tests), got {device.type} tensors: move them to CUDA, set TRITON_INTERPRET=1, "
                                  "or take the default path (backend=None)")


def use_triton(kernel: str, device: torch.device, atomics: bool = False) -> bool:
    """Whether ``kernel`` runs in Triton for tensors on ``device`` (module docstring): not after it failed,
    never with ``POINTGEOPE_KERNELS=torch``, with ``triton`` wherever :func:`runs_on`, unset on CUDA only;
    ``atomics`` kernels not under deterministic algorithms."""
    path = current().path
    if path == "torch" or kernel in FAILURES or not triton_imports():
        return False
    if atomics and torch.are_deterministic_algorithms_enabled():
        return False
    return device.type == "cuda" or (path == "triton" and runs_on(device))


def check_runnable(device: torch.device) -> None:
    """Raise :class:`KernelChoiceError` for a switch with a value it does not accept, or where
    ``POINTGEOPE_KERNELS=triton`` cannot run on ``device``: Triton does not import, or CPU tensors without
    the interpreter. The commands call it once at start."""
    choice = current()                        # (validates every switch)
    if choice.path != "triton":
        return
    if not triton_imports():
        raise KernelChoiceError("POINTGEOPE_KERNELS=triton: Triton does not import here (pip install triton); "
                                "unset POINTGEOPE_KERNELS to use the torch kernels")
    if device.type == "cpu" and not choice.interpret:
        raise KernelChoiceError("POINTGEOPE_KERNELS=triton on the CPU needs TRITON_INTERPRET=1 (Triton's interpreter, "
                                "for tests: very slow); unset POINTGEOPE_KERNELS to use the CPU's kernels")
    if device.type not in ("cpu", "cuda"):
        raise KernelChoiceError(f"POINTGEOPE_KERNELS=triton: Triton runs on CUDA devices, got {device.type}; "
                                "unset POINTGEOPE_KERNELS")


def _capturing(device: torch.device) -> bool:
    """Whether ``device``'s current stream is recording a CUDA graph (``engine/graphs.py``): an error then is the
    capture's, which the graph step handles; it says nothing about the kernel."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _is_kernel_failure(err: Exception) -> bool:
    """A failure to compile or launch, not the program's: out-of-memory errors and our own argument checks
    (``ValueError`` raised before any kernel) propagate."""
    if isinstance(err, (torch.OutOfMemoryError, KernelChoiceError)):
        return False
    return not (isinstance(err, ValueError) and type(err).__module__.startswith("pointgeope"))


@dataclass(frozen=True)
class CheckCase:
    """One row of ``pointgeope info --check``: ``run()`` through the kernel (timed), ``reference()`` on its
    torch path, ``compare(got, want) -> (max_diff, note)``; the kernel passes where max_diff <= tolerance."""

    label: str
    run: Callable[[], Any]
    reference: Callable[[], Any]
    compare: Callable[[Any, Any], tuple[float, str]]
    tolerance: float


@dataclass(frozen=True)
class DefaultWhere:
    """A kernel's ``cuda_default`` where it pays in some calls only: a CUDA default where ``holds()`` (asked at
    each call, as a function ``atomics`` is), elsewhere opt-in; ``where`` names those calls in ``pointgeope info``
    (``"in padded batches"``)."""

    where: str
    holds: Callable[[], bool]


@dataclass
class Kernel:
    """A Triton kernel and its torch path (module docstring). ``check(device, points, pairs)`` gives its
    :class:`CheckCase` list at sizes ``points`` (point ops) and ``pairs`` (queries of the attention)."""

    name: str
    triton: Callable[..., Any]
    torch: Callable[..., Any]
    atomics: bool | Callable[[], bool] = False      # or asked at each call: a kernel with a choice of sums
    check: Callable[[torch.device, int, int], list[CheckCase]] | None = None
    cuda_default: bool | DefaultWhere = True      # False: opt-in, Triton only with POINTGEOPE_KERNELS=triton
    ran: set[str] = field(default_factory=set, compare=False, repr=False)    # paths :meth:`dispatch` took

    def sums_with_atomics(self) -> bool:
        """Whether the kernel sums with atomics now (``atomics``, called if a function)."""
        return self.atomics() if callable(self.atomics) else self.atomics

    def default_here(self) -> bool:
        """Whether the kernel is a CUDA default for this call: ``cuda_default``, asked if a :class:`DefaultWhere`."""
        default = self.cuda_default
        return default.holds() if isinstance(default, DefaultWhere) else default

    def enabled(self, device: torch.device) -> bool:
        """Whether a call for tensors on ``device`` runs the Triton function."""
        opted_in = self.default_here() or current().path == "triton"
        return opted_in and use_triton(self.name, device, self.sums_with_atomics())

    def __call__(self, device: torch.device, *args, **kwargs):
        """``triton(*args)`` where :meth:`enabled`, else ``torch(*args)``, by :meth:`dispatch`."""
        return self.dispatch(device, lambda: self.triton(*args, **kwargs), lambda: self.torch(*args, **kwargs))

    def still_runs(self) -> bool:
        """Whether a backward whose forward ran in Triton runs in Triton too: unless the kernel failed since,
        or it sums with atomics now under ``torch.use_deterministic_algorithms(True)``."""
        atomics = self.sums_with_atomics() and torch.are_deterministic_algorithms_enabled()
        return self.name not in FAILURES and not atomics

    def dispatch(self, device: torch.device, triton_fn: Callable[[], Any], torch_fn: Callable[[], Any],
                 decided: bool | None = None):
        """``triton_fn()`` where :meth:`enabled`, else ``torch_fn()``; if ``triton_fn`` fails to compile or
        launch, the kernel is off for the rest of the process (one warning) and ``torch_fn()`` answers.
        A backward pass dispatches its own pair of functions under the kernel's name with ``decided``, whether
        its forward ran in Triton: it follows the forward (:meth:`still_runs`) instead of asking the switch
        again, which a :func:`~pointgeope.model.kernel_choice.forced` block (a context variable) may not reach
        in autograd's backward thread. The paths taken are recorded in :attr:`ran` (``info --check``)."""
        if not (self.enabled(device) if decided is None else decided and self.still_runs()):
            self.ran.add("torch")
            return torch_fn()
        try:
            out = triton_fn()
        except Exception as err:  # any compiler, resource or driver error of the kernel
            if not _is_kernel_failure(err) or _capturing(device):    # a CUDA graph's capture: its own error
                raise
            fail(self.name, err)
            self.ran.add("torch")
            return torch_fn()
        self.ran.add("triton")
        return out

    def explicit(self, *args, **kwargs):
        """``triton(*args)`` with no fallback (an explicit ``backend="triton"``); its error says why, and tensors
        it cannot take (:func:`require_runs_on`, the first tensor argument's device) are refused first."""
        device = next((a.device for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
        if device is not None:
            require_runs_on(device, f"the Triton kernel {self.name}")
        try:
            return self.triton(*args, **kwargs)
        except Exception as err:
            if _is_kernel_failure(err):
                err.add_note(f"pointgeope: the Triton kernel {self.name} was asked for explicitly "
                             "(backend='triton'), so it does not fall back to torch; backend=None falls back")
            raise


_REGISTRY: dict[str, Kernel] = {}


def register(name: str, triton: Callable[..., Any], torch: Callable[..., Any],
             atomics: bool | Callable[[], bool] = False,
             check: Callable[[torch.device, int, int], list[CheckCase]] | None = None,
             cuda_default: bool | DefaultWhere = True) -> Kernel:
    """Add a kernel (module docstring) and return it; a module imported again replaces its kernels."""
    _REGISTRY[name] = kernel = Kernel(name, triton, torch, atomics, check, cuda_default)
    return kernel


def registered() -> list[Kernel]:
    """Every kernel of the package, by name. The modules that register them are imported first: the package
    imports its modules at their first use, and a kernel whose module no caller had imported yet was missing
    (``pointgeope info`` read 2 of the 14, its ``--check`` checked 5)."""
    import pointgeope.model.network  # noqa: F401  (imports every module that registers a kernel)

    return [_REGISTRY[name] for name in sorted(_REGISTRY)]


def fail(kernel: str, err: BaseException) -> None:
    """Turn ``kernel`` off for the rest of the process, with one warning (the first time)."""
    text = FAILURES.add(kernel, err)
    if text is not None:
        warnings.warn(f"Triton kernel {kernel} failed on this device ({text}); its torch path runs from now on. "
                      "POINTGEOPE_KERNELS=torch chooses the torch paths from the start; `pointgeope info --check` "
                      "tests every kernel", KernelFallbackWarning, stacklevel=3)


def failures() -> dict[str, str]:
    """The kernels turned off in this process, with their errors."""
    return FAILURES.snapshot()


def reset() -> None:
    """Forget the failures (tests)."""
    FAILURES.clear()


def status() -> str:
    """One line for ``pointgeope info``."""
    try:
        path = current().path
    except KernelChoiceError as err:
        return f"invalid: {err}"
    if path == "torch":
        return "torch on every device (POINTGEOPE_KERNELS=torch)"
    if not triton_imports():
        return "torch (Triton does not import)"
    opt_in = ", ".join(k.name for k in registered() if k.cuda_default is False)
    some = ", ".join(f"{k.name} {k.cuda_default.where}" for k in registered() if isinstance(k.cuda_default,
                                                                                           DefaultWhere))
    where = ("Triton on CUDA, and on the CPU under TRITON_INTERPRET=1 (POINTGEOPE_KERNELS=triton)" if path
             else "Triton on CUDA" + (f" ({some} only; elsewhere with POINTGEOPE_KERNELS=triton)" if some else "")
             + ", torch on the CPU" + (f" (opt-in with POINTGEOPE_KERNELS=triton: {opt_in})" if opt_in else ""))
    failed = "; ".join(f"{k} fell back to torch ({e})" for k, e in failures().items())
    return where + (f"; {failed}" if failed else "")
