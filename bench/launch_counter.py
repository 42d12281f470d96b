"""What ``bench/launch_count.py`` counts: :class:`LaunchCounter`, a model on the CPU of the GPU kernel launches of
code run along the CUDA path's kernel choices (:func:`cuda_choices`) and, on request, its mixed precision
(:func:`cuda_autocast`); :func:`count_step` (a training step, by phase) and :func:`count_forward` (a forward
without gradients, as the test of a trained model runs it).

One launch each (:class:`LaunchCounter`): every aten op dispatched but views and metadata (:data:`NO_KERNEL`, shared
with ``bench_step_ops.py``), allocations (``empty``) and host reads of a scalar (``_local_scalar_dense``); every
Triton launch (``InterpretedFunction.run``), not the torch ops the interpreter runs to move its arguments. An op
that autograd's key would decompose (``CompositeImplicitAutograd``: ``linear``, ``reshape``, ``to``,
``batch_norm``) and that reaches the counter whole, as under ``torch.inference_mode`` (no autograd key), is
decomposed here and its parts counted: what runs on the device (``addmm``; nothing for a view or a cast to the
same type), the same count as under ``torch.no_grad``.
``TRITON_INTERPRET=1`` must be set before Triton is first imported (``launch_count.py`` sets it first thing).
"""
from __future__ import annotations

import collections
import contextlib
import sys
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_step_ops import NO_KERNEL  # the one list of views and metadata

__all__ = ["NOT_LAUNCHED", "PHASES", "TEST_PHASES", "LaunchCounter", "cuda_choices", "cuda_autocast", "count_step",
           "count_forward"]

NOT_LAUNCHED = NO_KERNEL | {"empty_strided", "_to_copy_host", "set_", "resize_"}
PHASES = ("forward", "loss", "backward", "optimizer")     # a training step
TEST_PHASES = ("forward", "output")                       # a test forward: the model, then its logits' float


class LaunchCounter(TorchDispatchMode):
    """Counts what would be GPU kernel launches (module docstring): aten ops outside :data:`NOT_LAUNCHED` and
    Triton launches (:meth:`triton_launches`), by phase, op, forward module and backward node.

    ``phase`` is set by the caller's hooks (:func:`count_step`); ``modules`` is the stack of the forward's module
    names (:meth:`module_hooks`)."""

    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()              # (phase, op) -> launches
        self.where = collections.Counter()            # (phase, module or autograd node) -> launches
        self.detail = collections.Counter()           # (phase, module class or autograd node, op) -> launches
        self.phase, self.modules, self._in_triton, self.kinds = "forward", [], 0, {}

    def _place(self) -> str:
        if self.phase == "backward":
            node = torch._C._current_autograd_node()
            return node.name() if node is not None else "(engine)"
        return self.modules[-1] if self.modules and self.phase == "forward" else f"({self.phase})"

    def _count(self, op: str) -> None:
        place = self._place()
        self.ops[self.phase, op] += 1
        self.where[self.phase, place] += 1
        self.detail[self.phase, self.kinds.get(place, place), op] += 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd"):
            with self:                                # its parts through this mode again (module docstring)
                out = func.decompose(*args, **(kwargs or {}))
            if out is not NotImplemented:
                return out
        name = func.__name__.split(".")[0]
        if self.phase in ("forward", "loss") and torch._C._current_autograd_node() is not None:
            self.phase = "backward"                   # an op run by autograd's engine
        if not self._in_triton and name not in NOT_LAUNCHED:
            self._count(name)
        return func(*args, **(kwargs or {}))

    @contextlib.contextmanager
    def triton_launches(self):
        """Count every launch of a Triton kernel (``triton:<kernel>``) and none of the torch ops the interpreter
        runs to copy its arguments in and out."""
        from triton.runtime.interpreter import InterpretedFunction

        run, counter = InterpretedFunction.run, self

        def counted(fn, *args, grid, warmup, **kwargs):
            if not warmup:
                counter._count(f"triton:{fn.__name__}")
            counter._in_triton += 1
            try:
                return run(fn, *args, grid=grid, warmup=warmup, **kwargs)
            finally:
                counter._in_triton -= 1

        InterpretedFunction.run = counted
        try:
            yield self
        finally:
            InterpretedFunction.run = run

    @contextlib.contextmanager
    def module_hooks(self, model: torch.nn.Module):
        """Keep :attr:`modules`, the names of the modules whose forward runs now (``model``'s own named
        ``(model)``)."""
        names = {id(m): name or "(model)" for name, m in model.named_modules()}
        self.kinds = {name or "(model)": type(m).__name__ for name, m in model.named_modules()}

        def enter(module, args):
            self.modules.append(names.get(id(module), type(module).__name__))

        def leave(module, args, out):
            self.modules.pop()

        pre = torch.nn.modules.module.register_module_forward_pre_hook(enter)
        post = torch.nn.modules.module.register_module_forward_hook(leave, always_call=True)
        try:
            yield
        finally:
            pre.remove()
            post.remove()

    def total(self, phase: str | None = None) -> int:
        return sum(n for (p, _), n in self.ops.items() if phase in (None, p))

    def summary(self, model: torch.nn.Module, top: int = 25, phases: tuple[str, ...] = PHASES) -> dict:
        """The counts as JSON: total, by phase (``phases``), top ops, forward by module class and stage, backward by
        node."""
        ops = collections.Counter()
        for (_, op), n in self.ops.items():
            ops[op] += n
        classes, stages, nodes = collections.Counter(), collections.Counter(), collections.Counter()
        kinds = {name or "(model)": type(m).__name__ for name, m in model.named_modules()}
        for (phase, place), n in self.where.items():
            if phase == "forward":
                classes[kinds.get(place, place)] += n
                stages[".".join(place.split(".")[:2])] += n
            elif phase == "backward":
                nodes[place] += n
        triton = sum(n for op, n in ops.items() if op.startswith("triton:"))
        return {"launches": self.total(), "triton": triton, "aten": self.total() - triton,
                "by_phase": {p: self.total(p) for p in phases},
                "top_ops": dict(ops.most_common(top)),
                "forward_by_module_class": dict(classes.most_common()),
                "forward_by_stage": dict(sorted(stages.items())),
                "backward_by_node": dict(nodes.most_common(top)),
                "ops_by_place": self._ops_by_place()}

    def _ops_by_place(self) -> dict:
        """``{phase: {module class or autograd node: {op: launches}}}``, the largest first."""
        out: dict = {}
        for (phase, place, op), n in sorted(self.detail.items(), key=lambda item: -item[1]):
            out.setdefault(phase, {}).setdefault(place, {})[op] = n
        return out


@contextlib.contextmanager
def cuda_choices(opt_in: tuple[str, ...] = ()):
    """The CUDA default's kernel choices for CPU tensors (module docstring): Triton where a CUDA tensor gets it,
    the opt-in kernels not (but those named in ``opt_in``, as ``POINTGEOPE_KERNELS=triton`` would turn them on
    for themselves alone: their ``cuda_default`` made ``True`` inside the block), one range of queries for the
    CPU's cache-sized steps."""
    from pointgeope.model import kernels, rotation

    use, steps = kernels.use_triton, rotation._STEP_ELEMENTS
    cuda = torch.device("cuda")
    known = {kernel.name: kernel for kernel in kernels.registered()}
    if set(opt_in) - set(known):
        raise ValueError(f"expected registered kernels to opt in, got {sorted(set(opt_in) - set(known))}; "
                         f"registered: {', '.join(sorted(known))}")
    chosen = {name: known[name] for name in opt_in}
    defaults = {name: kernel.cuda_default for name, kernel in chosen.items()}

    def as_on_cuda(kernel: str, device: torch.device, atomics: bool = False) -> bool:
        return use(kernel, cuda if device.type == "cpu" else device, atomics)

    kernels.use_triton, rotation._STEP_ELEMENTS = as_on_cuda, 1 << 62
    for kernel in chosen.values():
        kernel.cuda_default = True
    try:
        yield
    finally:
        kernels.use_triton, rotation._STEP_ELEMENTS = use, steps
        for name, kernel in chosen.items():
            kernel.cuda_default = defaults[name]


def count_step(step, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> LaunchCounter:
    """The launches of one call of ``step()`` (a training step of ``model`` with ``optimizer``) along
    :func:`cuda_choices`, by phase: forward (inside ``model``), loss (after it), backward (in autograd's engine),
    optimizer (from ``optimizer.step``)."""
    counter = LaunchCounter()

    def forward_done(module, args, out):
        counter.phase = "loss"

    hooks = [model.register_forward_pre_hook(lambda *a: setattr(counter, "phase", "forward")),
             model.register_forward_hook(forward_done),
             optimizer.register_step_pre_hook(lambda *a: setattr(counter, "phase", "optimizer"))]
    return _run_counted(counter, model, hooks, step)


@contextlib.contextmanager
def cuda_autocast():
    """The engine's mixed precision (``train.amp``, ``eval.amp``: ``build.autocast_dtype``) on CPU tensors as on
    CUDA ones: ``bf16`` autocasts the CPU's forward to bfloat16 (CUDA's rule that the CPU runs float32 set aside).
    A model of CUDA's autocast: the CPU's lists of ops cast down (the matrix products, as CUDA's) and kept in
    float32 are torch's own, close to CUDA's but not the same."""
    from pointgeope.engine import build

    rule = build.autocast_dtype

    def as_on_cuda(amp: str, device: torch.device):
        return rule(amp, torch.device("cuda") if device.type == "cpu" else device)

    build.autocast_dtype = as_on_cuda
    try:
        yield
    finally:
        build.autocast_dtype = rule


def count_forward(forward, model: torch.nn.Module) -> LaunchCounter:
    """The launches of one call of ``forward()`` (a test forward of ``model``, no gradient) along
    :func:`cuda_choices`, by phase (:data:`TEST_PHASES`): forward (inside ``model``), output (after it: the
    logits made float32, a softmax where the votes sum probabilities)."""
    counter = LaunchCounter()
    hooks = [model.register_forward_pre_hook(lambda *a: setattr(counter, "phase", "forward")),
             model.register_forward_hook(lambda *a: setattr(counter, "phase", "output"))]
    return _run_counted(counter, model, hooks, forward)


def _run_counted(counter: LaunchCounter, model: torch.nn.Module, hooks: list, call) -> LaunchCounter:
    """``call()`` counted by ``counter`` along :func:`cuda_choices`, by module of ``model``; ``hooks`` (the
    phase switches) removed after it."""
    try:
        with cuda_choices(), counter.module_hooks(model), counter.triton_launches():
            with counter:
                call()
    finally:
        for hook in hooks:
            hook.remove()
    return counter
