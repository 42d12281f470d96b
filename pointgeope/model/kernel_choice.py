"""Which kernels run: the three environment switches, read by one function into one immutable choice.

=====================  ===========================================================================
``POINTGEOPE_KERNELS``  unset: the device's default (Triton on CUDA where it imports, torch elsewhere);
                        ``triton``: Triton wherever it can run (CUDA, and CPU tensors under the
                        interpreter); ``torch``: no Triton kernel anywhere (``torch.compile``'s included)
``POINTGEOPE_COMPILE``  a switch (default on): the GeoPE pair kernels compiled by ``torch.compile`` on CUDA
                        (:mod:`pointgeope.model.geope_pairs`); off: their eager kernels
``TRITON_INTERPRET``    a switch (default off): Triton's CPU interpreter (Triton reads it too, when it is
                        imported); on: Triton kernels can take CPU tensors (how the tests run them)
=====================  ===========================================================================

A switch is on for ``1``, ``true``, ``on``, ``yes`` and off for ``0``, ``false``, ``off``, ``no`` (any
case, unset: its default); any other value is a :class:`KernelChoiceError` (a :class:`UserError`: one line
naming the variable and the accepted values). :func:`from_environment` is the only reader of the three
variables; its result is cached per set of raw values, so a test or a benchmark that changes one is seen
at the next call. :func:`forced` chooses a path for a block of code without touching ``os.environ``: a
context variable, so another thread keeps its own choice; a thread started inside the block sees it when
it runs in a copy of the block's context (``contextvars.copy_context``, as
:class:`~pointgeope.engine.prefetch.Prefetch` does for the hierarchy built beside the step).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import importlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from types import ModuleType

from pointgeope.errors import UserError

__all__ = ["PATHS", "KernelChoice", "KernelChoiceError", "parse_switch", "from_environment", "current", "forced",
           "kernel_module"]

PATHS = ("triton", "torch")
ON, OFF = ("1", "true", "on", "yes"), ("0", "false", "off", "no")
_KERNELS, _COMPILE, _INTERPRET = "POINTGEOPE_KERNELS", "POINTGEOPE_COMPILE", "TRITON_INTERPRET"


class KernelChoiceError(UserError, ValueError):
    """A switch holds a value it does not accept, or ``POINTGEOPE_KERNELS=triton`` cannot run here."""


@dataclass(frozen=True)
class KernelChoice:
    """The kernel switches of this process (module docstring).

    Attributes:
        path: ``"triton"``, ``"torch"`` or ``None`` (the device's default).
        compile: whether the GeoPE pair kernels may be compiled by ``torch.compile`` on CUDA.
        interpret: whether Triton runs in its CPU interpreter.
    """

    path: str | None = None
    compile: bool = True
    interpret: bool = False

    def __post_init__(self):
        if self.path not in (*PATHS, None):
            raise KernelChoiceError(f"expected a kernel path in {PATHS} (or None), got {self.path!r}")


def parse_switch(name: str, raw: str | None, default: bool) -> bool:
    """``raw`` (the value of variable ``name``, ``None`` or blank: ``default``) as a boolean switch."""
    value = (raw or "").strip().lower()
    if not value:
        return default
    if value in ON or value in OFF:
        return value in ON
    raise KernelChoiceError(f"{name}: expected one of {', '.join(ON)} (on) or {', '.join(OFF)} (off), or unset, "
                            f"got {raw!r}")


@lru_cache(maxsize=16)
def _parse(kernels: str | None, compile_: str | None, interpret: str | None) -> KernelChoice:
    path = (kernels or "").strip().lower()
    if path and path not in PATHS:
        raise KernelChoiceError(f"{_KERNELS}: expected one of {', '.join(PATHS)} (or unset for the device's "
                                f"default), got {path!r}")
    return KernelChoice(path or None, parse_switch(_COMPILE, compile_, True),
                        parse_switch(_INTERPRET, interpret, False))


def from_environment(environ: Mapping[str, str] | None = None) -> KernelChoice:
    """The choice the environment (``os.environ`` unless given) asks for: the one reader of the switches."""
    env = os.environ if environ is None else environ
    return _parse(env.get(_KERNELS), env.get(_COMPILE), env.get(_INTERPRET))


_forced: contextvars.ContextVar[KernelChoice | None] = contextvars.ContextVar("pointgeope_kernel_choice",
                                                                              default=None)


def current() -> KernelChoice:
    """The choice in force here: the innermost :func:`forced` block's, else the environment's."""
    return _forced.get() or from_environment()


@contextlib.contextmanager
def forced(path: str) -> Iterator[KernelChoice]:
    """The environment's choice with ``path`` (``"triton"`` or ``"torch"``) inside the block, in this
    context only (module docstring); the choice before it after the block."""
    if path not in PATHS:
        raise KernelChoiceError(f"expected a kernel path in {PATHS}, got {path!r}")
    choice = dataclasses.replace(current(), path=path)
    token = _forced.set(choice)
    try:
        yield choice
    finally:
        _forced.reset(token)


def kernel_module(name: str) -> ModuleType:
    """The module of Triton kernels ``name`` (one that records the mode it was decorated in as ``INTERPRET``),
    reloaded if ``TRITON_INTERPRET`` asks for the other mode now: its kernels run in the mode in force."""
    module = importlib.import_module(name)
    if module.INTERPRET != current().interpret:
        module = importlib.reload(module)
    return module
