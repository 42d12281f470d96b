"""Count the GPU kernel launches of one training step on the CPU: the ops and Triton kernels of the CUDA path.

At 2 x 80k points the eager step waits on its launches (``docs/gpu.md``: 2,393 kernels for ``rpe`` and 2,735 for
``geope`` under run 8's profiler, the GPU busy 43.7 of 126.5 ms), and how many there are is decided by the code,
not the GPU. This script runs one training step (``engine.step.train_step``: forward, float32 loss, backward,
SGD with ``foreach`` as on CUDA, hierarchy given as the loader hands it over) of ``PointTransformerSeg50`` on a
small synthetic batch on the CPU, along the CUDA path's kernel choices (:func:`cuda_choices`):

- ``TRITON_INTERPRET=1`` (set here before Triton is imported) and :func:`kernels.use_triton` asked as for a CUDA
  tensor, so every kernel registered with ``cuda_default=True`` runs in Triton's interpreter and the opt-in ones
  (``cuda_default=False``, and a ``kernels.DefaultWhere`` outside its calls: the blocks' third norm on the plain
  kernel outside a padded batch, so in the eager step counted here) stay on torch, as on CUDA by default;
- one range of queries for the CPU's cache-sized steps (``rotation._STEP_ELEMENTS``): a GPU takes all at once.

What is counted (:class:`LaunchCounter`), one launch each:

- every aten op dispatched (a ``TorchDispatchMode``) except views and metadata (:data:`NO_KERNEL`, shared with
  ``bench_step_ops.py``: ``view``, ``expand``, ``t``, ``slice``, ``as_strided``, ``detach``, ``unsqueeze``, ...),
  allocations (``empty``: no kernel) and host reads of a scalar (``_local_scalar_dense``: a copy, no kernel);
- every Triton launch (``InterpretedFunction.run``, the interpreter's launch point of ``kernel[grid](...)``,
  through which ``fused_attention._launch``, ``norm``'s and ``gather_backward``'s launches all go); the torch
  ops the interpreter runs to move its arguments are not counted.

It is a model of the GPU's count, not the count itself: a CUDA op may launch more than one kernel (torch's batch
norm, a reduction in two passes, the cross entropy, the ``_foreach_*`` ops launch one kernel per chunk of tensors,
about ``ceil(tensors / 110)``), or none (a copy onto itself); ``tensor.item()`` is a copy, not a kernel. The
breakdown: by phase (forward, loss, backward, optimizer), by op, by the innermost module of a forward op
(``encoder.3.1.attention``, summed by class) and by the autograd node of a backward op.

``--before DIR`` also counts the package at ``DIR`` (e.g. ``git worktree add /tmp/main main``), in a child
process with ``PYTHONPATH=DIR``, in the same run: ``before`` and ``after`` in one file.

Usage: python bench/launch_count.py [--out bench/results/launch_count.json] [--points 800] [--clouds 2]
       [--presets rpe geope] [--before DIR]
"""
from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"           # before anything imports Triton (torch_geometric does)

import argparse
import collections
import contextlib
import json
import subprocess
import sys
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_io import git_commit, save_json, tree_dirty
from bench_step_ops import NO_KERNEL  # the one list of views and metadata

NOT_LAUNCHED = NO_KERNEL | {"empty_strided", "_to_copy_host", "set_", "resize_"}
PHASES = ("forward", "loss", "backward", "optimizer")


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

    def summary(self, model: torch.nn.Module, top: int = 25) -> dict:
        """The counts as JSON: total, by phase, top ops, forward by module class and stage, backward by node."""
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
                "by_phase": {p: self.total(p) for p in PHASES},
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
def cuda_choices():
    """The CUDA default's kernel choices for CPU tensors (module docstring): Triton where a CUDA tensor gets it,
    the opt-in kernels not, one range of queries for the CPU's cache-sized steps."""
    from pointgeope.model import kernels, rotation

    use, steps = kernels.use_triton, rotation._STEP_ELEMENTS
    cuda = torch.device("cuda")

    def as_on_cuda(kernel: str, device: torch.device, atomics: bool = False) -> bool:
        return use(kernel, cuda if device.type == "cpu" else device, atomics)

    kernels.use_triton, rotation._STEP_ELEMENTS = as_on_cuda, 1 << 62
    try:
        yield
    finally:
        kernels.use_triton, rotation._STEP_ELEMENTS = use, steps


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
    try:
        with cuda_choices(), counter.module_hooks(model), counter.triton_launches():
            with counter:
                step()
    finally:
        for hook in hooks:
            hook.remove()
    return counter


def preset_step(preset: str, points: int, clouds: int):
    """(step, model, optimizer) of one preset: the network (seed 0), the benches' SGD with ``foreach`` (CUDA's
    default) and ``train_step`` on ``clouds`` synthetic rooms of ``points`` points, hierarchy given."""
    from bench_train_step import make_inputs, sgd_learner, step_batch
    from pointgeope.engine.step import train_step
    from pointgeope.model import PointTransformerSeg

    device = torch.device("cpu")
    torch.manual_seed(0)
    model = PointTransformerSeg(pe=preset).train()
    x = make_inputs(points, clouds, device, model.hierarchy_spec)
    batch = step_batch(x["coord"], x["feat"], x["offset"], x["label"], x["hierarchy"])
    cfg, learner = sgd_learner(model, "none", device, foreach=True)
    return (lambda: train_step(cfg, learner, model, batch, device)), model, learner.optimizer


def count(presets: list[str], points: int, clouds: int) -> dict:
    """Each preset's launches of its second step (the first, on the same path, creates the optimiser's momentum
    buffers and what the kernels keep from call to call: the norm's zeroed tickets, ``norm_tickets``)."""
    out = {}
    for preset in presets:
        step, model, optimizer = preset_step(preset, points, clouds)
        with cuda_choices():
            step()
        out[preset] = count_step(step, model, optimizer).summary(model)
        print(f"{preset}: {out[preset]['launches']} launches ({out[preset]['triton']} Triton), by phase "
              f"{out[preset]['by_phase']}", flush=True)
    return out


def counted_elsewhere(tree: Path, args) -> dict:
    """The same count of the package at ``tree`` (this script, ``PYTHONPATH=tree``), in a child process."""
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    cmd = [sys.executable, __file__, "--json-only", "--points", str(args.points), "--clouds", str(args.clouds),
           "--presets", *args.presets]
    done = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def gpu_reference(name: str = "h200_run8_bench_train_step.json") -> dict:
    """The kernels that torch's profiler saw in one step of the same presets at 2 x 80k points on a GPU (the
    committed ``bench_train_step.py --profile`` result ``name``), with its aten op calls, for the sanity check
    of the count; empty where the file is not there."""
    path = Path(__file__).resolve().parent / "results" / "gpu" / name
    if not path.exists():
        return {}
    profile = json.loads(path.read_text()).get("profile", {})
    return {"file": name, "presets": {pe: {"kernels": row.get("kernels"),
                                           "op_calls": {e["name"]: e["calls"] for e in row.get("top", [])}}
                                      for pe, row in profile.items()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "launch_count.json")
    parser.add_argument("--points", type=int, default=800, help="points per cloud (the counts do not depend on it)")
    parser.add_argument("--clouds", type=int, default=2)
    parser.add_argument("--presets", nargs="+", default=["rpe", "geope"])
    parser.add_argument("--before", type=Path, help="also count the package of this source tree, as 'before'")
    parser.add_argument("--before-label", default="", help="what the --before tree is (e.g. 'main at d9b32c7')")
    parser.add_argument("--json-only", action="store_true", help="print the counts as one JSON line, write nothing")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.json_only:
        with contextlib.redirect_stdout(sys.stderr):
            counts = count(args.presets, args.points, args.clouds)
        print(json.dumps(counts))
        return 0
    import pointgeope

    out = {"commit": git_commit(short=True), "dirty": tree_dirty(), "torch": torch.__version__,
           "points": args.points, "clouds": args.clouds, "package": str(Path(pointgeope.__file__).parent),
           "counted": "aten ops but views/metadata/allocations, plus Triton launches; one step (forward, loss, "
                      "backward, SGD foreach), hierarchy given, CUDA's default kernel choices (bench/launch_count.py)"}
    if args.before:
        out["before"] = {"tree": str(args.before), "label": args.before_label,
                         "presets": counted_elsewhere(args.before, args)}
    out["after"] = {"presets": count(args.presets, args.points, args.clouds)}
    if args.before:
        out["saved"] = {p: out["before"]["presets"][p]["launches"] - out["after"]["presets"][p]["launches"]
                        for p in args.presets}
    out["gpu_profiler"] = gpu_reference()
    save_json(args.out, out, indent=1)
    totals = {"after": {p: r["launches"] for p, r in out["after"]["presets"].items()}}
    if args.before:
        totals = {"before": {p: r["launches"] for p, r in out["before"]["presets"].items()}, **totals,
                  "saved": out["saved"]}
    print(json.dumps(totals))
    return 0


if __name__ == "__main__":
    sys.exit(main())
