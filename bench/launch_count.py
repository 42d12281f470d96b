"""Count the GPU kernel launches of one training step, or of one test forward, on the CPU: the ops and Triton
kernels of the CUDA path.

At 2 x 80k points the eager step waits on its launches (``docs/gpu.md``: 2,393 kernels for ``rpe`` and 2,735 for
``geope`` under run 8's profiler, the GPU busy 43.7 of 126.5 ms), and so does the published test (a 1M-point room
in 5.6 s against 5 s); how many launches there are is decided by the code, not the GPU. This script runs
``PointTransformerSeg50`` on a small synthetic batch on the CPU (hierarchy given, as the loader or the builder
beside the forward hands it over), along the CUDA path's kernel choices (``launch_counter.cuda_choices``):

- ``--what step`` (the default): one training step (``engine.step.train_step``: forward, float32 loss, backward,
  SGD with ``foreach`` as on CUDA), phases forward, loss, backward, optimizer;
- ``--what test``: one test forward as ``evaluate`` and ``predict`` run it (``engine.vote_batches.VoteSink``: the
  model in eval mode under ``torch.inference_mode``, ``eval.amp``'s autocast, the logits made float32), phases
  forward and output; the hierarchy built beside it (on a side stream) is not counted, nor are the copies of the
  weights in ``eval.amp``'s dtype that the run makes once before its first batch (:func:`run_copies`);
- ``--amp bf16``: ``train.amp`` (``--what step``) or ``eval.amp`` (``--what test``) bf16, autocast on the CPU in
  place of CUDA's (``launch_counter.cuda_autocast``: a model, the CPU's autocast lists are not CUDA's).

The kernel choices: ``TRITON_INTERPRET=1`` (set here before Triton is imported) and :func:`kernels.use_triton`
asked as for a CUDA tensor, so every kernel registered with ``cuda_default=True`` runs in Triton's interpreter and
the opt-in ones (``cuda_default=False``, and a ``kernels.DefaultWhere`` outside its calls: the blocks' third norm on
the plain kernel outside a padded batch, so in the eager step counted here) stay on torch, as on CUDA by default;
one range of queries for the CPU's cache-sized steps (``rotation._STEP_ELEMENTS``): a GPU takes all at once.

What is counted (``launch_counter.LaunchCounter``), one launch each:

- every aten op dispatched (a ``TorchDispatchMode``) except views and metadata (``NO_KERNEL``, shared with
  ``bench_step_ops.py``: ``view``, ``expand``, ``t``, ``slice``, ``as_strided``, ``detach``, ``unsqueeze``, ...),
  allocations (``empty``: no kernel) and host reads of a scalar (``_local_scalar_dense``: a copy, no kernel);
- every Triton launch (``InterpretedFunction.run``, the interpreter's launch point of ``kernel[grid](...)``,
  through which ``fused_attention._launch``, ``norm``'s and ``gather_backward``'s launches all go); the torch
  ops the interpreter runs to move its arguments are not counted.

It is a model of the GPU's count, not the count itself: a CUDA op may launch more than one kernel (torch's batch
norm, a reduction in two passes, the cross entropy, the ``_foreach_*`` ops launch one kernel per chunk of tensors,
about ``ceil(tensors / 110)``), or none (a copy onto itself); ``tensor.item()`` is a copy, not a kernel. The
breakdown: by phase, by op, by the innermost module of a forward op (``encoder.3.1.attention``, summed by class)
and by the autograd node of a backward op.

The package's switches set in the environment (``POINTGEOPE_*``, e.g. ``POINTGEOPE_FRAME_FOLD=1``: GeoPE's
relation with the points' turn in its kernel) hold for both sides and are recorded (``switches``).

``--before DIR`` also counts the package at ``DIR`` (e.g. ``git worktree add /tmp/main main``), in a child
process with ``PYTHONPATH=DIR``, in the same run: ``before`` and ``after`` in one file. Each side records the
commit state (``bench_io.git_state``: its commit, whether it had changes) of the checkout its imported
``pointgeope`` lives in (``provenance.PACKAGE_PARENT``, its ``package`` folder beside it), not of the folder the
script was started from or typed after ``--before``: ``PYTHONPATH`` or an editable install elsewhere decides
which code ran, and ``--before-label`` may not say.

Usage: python bench/launch_count.py [--what step|test] [--amp none|bf16] [--out FILE] [--points 800]
       [--clouds 2] [--presets rpe geope] [--before DIR]
  (--out: by default bench/results/launch_count.json for the step, launch_count_test.json for the test,
  ``_bf16`` before ``.json`` with --amp bf16)
"""
from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"           # before anything imports Triton (torch_geometric does)

import argparse
import contextlib
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_io import OUTPUTS, git_state, provenance, save_json
from launch_counter import (  # noqa: F401 - LaunchCounter, cuda_choices: the tests' names here
    PHASES,
    TEST_PHASES,
    LaunchCounter,
    count_forward,
    count_step,
    cuda_autocast,
    cuda_choices,
)
from pointgeope.provenance import PACKAGE_PARENT

RESULTS = Path(__file__).resolve().parent / "results"
COUNTED = {"step": "one step (forward, loss, backward, SGD foreach)",
           "test": "one test forward (eval mode, inference_mode, eval.amp's autocast, logits made float32: VoteSink)"}


def _model_and_inputs(preset: str, points: int, clouds: int) -> tuple[torch.nn.Module, dict]:
    """The network (seed 0, train mode) and ``clouds`` synthetic rooms of ``points`` points with their hierarchy."""
    from bench_train_step import make_inputs
    from pointgeope.model import PointTransformerSeg

    torch.manual_seed(0)
    model = PointTransformerSeg(pe=preset).train()
    return model, make_inputs(points, clouds, torch.device("cpu"), model.hierarchy_spec)


def preset_step(preset: str, points: int, clouds: int, amp: str = "none"):
    """(step, model, optimizer) of one preset: the network, the benches' SGD with ``foreach`` (CUDA's default) and
    ``train_step`` (``train.amp = amp``) on the synthetic rooms, hierarchy given."""
    from bench_train_step import sgd_learner, step_batch
    from pointgeope.engine.step import train_step

    device = torch.device("cpu")
    model, x = _model_and_inputs(preset, points, clouds)
    batch = step_batch(x["coord"], x["feat"], x["offset"], x["label"], x["hierarchy"])
    cfg, learner = sgd_learner(model, amp, device, foreach=True)
    return (lambda: train_step(cfg, learner, model, batch, device)), model, learner.optimizer


def preset_test(preset: str, points: int, clouds: int, amp: str = "none"):
    """(forward, model) of one preset's test: the network in eval mode and ``VoteSink``'s forward of one batch of
    the synthetic rooms (``eval.amp = amp``, hierarchy given as the builder beside the forward hands it over),
    under ``torch.inference_mode`` as ``evaluate.vote_room`` runs it."""
    from pointgeope.engine.config import Config, EvalConfig
    from pointgeope.engine.vote_batches import VoteSink

    model, x = _model_and_inputs(preset, points, clouds)
    model.eval()
    sink = VoteSink(model, None, None, Config(eval=EvalConfig(amp=amp)), torch.device("cpu"))
    batch = SimpleNamespace(pos=x["coord"], x=x["feat"], offset=x["offset"], hierarchy=x["hierarchy"],
                            grid_coord=None)

    def forward():
        with torch.inference_mode():
            return sink._forward(batch)
    return forward, model


def run_copies(model: torch.nn.Module, amp: str):
    """The run around the counted test forward: ``evaluate`` and ``predict`` make ``eval.amp``'s copies of the
    Linears' weights once, before their first batch (``engine.eval_weights.copies``), so they are made before the
    counted forward and not counted; nothing for a tree without them (``--before`` at an older commit)."""
    try:
        from pointgeope.engine import eval_weights
    except ImportError:
        return contextlib.nullcontext()
    from pointgeope.engine.config import Config, EvalConfig
    return eval_weights.copies(model, Config(eval=EvalConfig(amp=amp)), torch.device("cpu"))


def count(presets: list[str], points: int, clouds: int, what: str = "step", amp: str = "none",
          opt_in: tuple[str, ...] = ()) -> dict:
    """Each preset's launches of its second step or test forward (the first, on the same path, creates the
    optimiser's momentum buffers and what the kernels keep from call to call: the norm's zeroed tickets,
    ``norm_tickets``); ``opt_in``: opt-in kernels counted as if they were CUDA defaults (:func:`cuda_choices`)."""
    out = {}
    for preset in presets:
        with cuda_autocast() if amp != "none" else contextlib.nullcontext():     # a context a preset: not re-entrant
            if what == "step":
                step, model, optimizer = preset_step(preset, points, clouds, amp)
                with cuda_choices(opt_in):
                    step()
                    out[preset] = count_step(step, model, optimizer).summary(model, phases=PHASES)
            else:
                forward, model = preset_test(preset, points, clouds, amp)
                with run_copies(model, amp):
                    with cuda_choices(opt_in):
                        forward()
                        out[preset] = count_forward(forward, model).summary(model, phases=TEST_PHASES)
        print(f"{preset} {what}: {out[preset]['launches']} launches ({out[preset]['triton']} Triton), by phase "
              f"{out[preset]['by_phase']}", flush=True)
    return out


def counted_elsewhere(tree: Path, args) -> dict:
    """The same count of the package at ``tree`` (this script, ``PYTHONPATH=tree``), in a child process:
    ``{"package": the folder holding the package the child imported, "presets": its counts}``."""
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    cmd = [sys.executable, __file__, "--json-only", "--points", str(args.points), "--clouds", str(args.clouds),
           "--what", args.what, "--amp", args.amp, *(["--opt-in", *args.opt_in] if args.opt_in else []),
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


def default_out(what: str, amp: str) -> Path:
    """``results/launch_count.json`` (the step), ``launch_count_test.json`` (the test), ``_bf16`` before ``.json``
    with ``--amp bf16``."""
    return RESULTS / f"launch_count{'' if what == 'step' else '_' + what}{'' if amp == 'none' else '_' + amp}.json"


def registered_kernels() -> list[str]:
    """The names ``--opt-in`` takes: every kernel the model registers (``kernels.registered``), sorted."""
    import pointgeope.model  # noqa: F401 - registers the model's kernels
    from pointgeope.model import kernels

    return sorted(kernel.name for kernel in kernels.registered())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--what", choices=("step", "test"), default="step",
                        help="a training step (default) or a test forward (eval mode, no gradient)")
    parser.add_argument("--amp", choices=("none", "bf16"), default="none",
                        help="train.amp (step) or eval.amp (test): bf16 autocasts the CPU's forward, as CUDA's would")
    parser.add_argument("--out", type=Path, help="the JSON written (default: see the module docstring)")
    parser.add_argument("--points", type=int, default=800, help="points per cloud (the counts do not depend on it)")
    parser.add_argument("--clouds", type=int, default=2)
    parser.add_argument("--presets", nargs="+", default=["rpe", "geope"])
    parser.add_argument("--before", type=Path, help="also count the package of this source tree, as 'before'")
    parser.add_argument("--before-label", default="", help="what the --before tree is (e.g. 'main at d9b32c7')")
    parser.add_argument("--opt-in", nargs="+", default=[], metavar="KERNEL",
                        help="opt-in kernels counted as CUDA defaults (e.g. batch_norm_add_relu: the blocks' tail)")
    parser.add_argument("--json-only", action="store_true",
                        help="print the counts and the package's folder as one JSON line, write nothing")
    args = parser.parse_args()
    unknown = sorted(set(args.opt_in) - set(registered_kernels()))
    if unknown:                                     # one line, exit 2, before a preset is built
        parser.error(f"--opt-in: expected registered kernels, got {', '.join(unknown)}; registered: "
                     f"{', '.join(registered_kernels())}")
    torch.set_num_threads(1)
    if args.json_only:
        with contextlib.redirect_stdout(sys.stderr):
            counts = count(args.presets, args.points, args.clouds, args.what, args.amp, tuple(args.opt_in))
        print(json.dumps({"package": str(PACKAGE_PARENT), "presets": counts}))
        return 0
    out = {"provenance": provenance(1, tree=PACKAGE_PARENT), "points": args.points, "clouds": args.clouds,
           "package": str(PACKAGE_PARENT / "pointgeope"),
           "what": args.what, "amp": args.amp, "opt_in": args.opt_in,
           "switches": {k: v for k, v in sorted(os.environ.items()) if k.startswith("POINTGEOPE_")},  # both sides
           "counted": f"aten ops but views/metadata/allocations, plus Triton launches; {COUNTED[args.what]}, "
                      f"hierarchy given, CUDA's default kernel choices, amp {args.amp} (bench/launch_count.py)"}
    if args.before:
        child = counted_elsewhere(args.before, args)
        out["before"] = {"tree": str(args.before), "package": str(Path(child["package"]) / "pointgeope"),
                         **git_state(Path(child["package"]), exclude=(OUTPUTS,)),      # as the loaders'
                         "label": args.before_label, "presets": child["presets"]}
    out["after"] = {"presets": count(args.presets, args.points, args.clouds, args.what, args.amp, tuple(args.opt_in))}
    if args.before:
        out["saved"] = {p: out["before"]["presets"][p]["launches"] - out["after"]["presets"][p]["launches"]
                        for p in args.presets}
    if args.what == "step":
        out["gpu_profiler"] = gpu_reference()
    save_json(args.out or default_out(args.what, args.amp), out, indent=1)
    totals = {"after": {p: r["launches"] for p, r in out["after"]["presets"].items()}}
    if args.before:
        totals = {"before": {p: r["launches"] for p, r in out["before"]["presets"].items()}, **totals,
                  "saved": out["saved"]}
    print(json.dumps(totals))
    return 0


if __name__ == "__main__":
    sys.exit(main())
