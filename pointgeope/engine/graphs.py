"""The training step as CUDA graphs (``train.cuda_graphs``): record a padded step once, replay it every batch.

A step of the published network launches about 2,600 kernels (3,500 with GeoPE). At 2 x 80k points the GPU
needs 45 ms for them while the host needs about 30 us to launch each, so the step waits on the host
(``docs/gpu.md``). A CUDA graph launches the whole recorded sequence at once. It replays fixed shapes, so
every batch is padded (``model/padding.py``) to sizes that depend on its point count and cloud count alone,
and one graph is recorded per such size, at most :data:`MAX_GRAPHS`::

    batch (n points, B clouds, its hierarchy given)
      -> padded to N_0 > n at every stage by one dummy cloud            (padding.pad_batch)
      -> copied into the graph's inputs; replay: forward, float32 loss, backward
         (batch norm over the real rows: padding.batch_rows; on CUDA both norms' Triton kernels, model/norm.py)
      -> the graph's gradients become the parameters' .grad; eager: clip, optimiser step, schedule
      -> the loss read once (as the eager step does), the real rows' logits returned

Recording one size: three eager passes (forward + backward) on a side stream warm the kernels and the allocator,
then the capture; the batch norms' running buffers are put back as they were, so recording changes no state. Graphs
share one memory pool, which keeps one step's activations for the rest of the run (the warm-up's cached blocks are
released before the capture); eager steps of other sizes allocate beside it. That is why graphs are for steps that
wait on launches (2 x 80k: 0.28-0.41x the eager step on an H200, GPU run 8), not the 16 x 80k recipe's, which keeps
the GPU busy most of its time and needs 50 GiB a step in float32: there the graph took 1.11-1.15x the eager step
(padding costs more than the launches it saves). The eager step (``engine/step.py``) stays the default and runs
where graphs do not apply: the CPU, PTv3, DDP, a hierarchy the model builds, fp16 (its loss scaler skips steps on
the host), the Lovász loss (its sums read values), batches of a size beyond :data:`MAX_GRAPHS`, or once recording
failed; one log line says why.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from pointgeope.engine import build
from pointgeope.engine.config import Config
from pointgeope.engine.losses import segmentation_loss
from pointgeope.engine.state import Learner
from pointgeope.engine.step import checked_update, train_step
from pointgeope.model import padding
from pointgeope.model.gather_backward import forget_transposes

__all__ = ["GraphedStep", "CudaRecorder", "RerunRecorder", "training_step", "MAX_GRAPHS"]

MAX_GRAPHS = 8          # sizes recorded; a batch of another size runs eagerly
WARMUP = 3              # eager passes before a capture


def training_step(cfg: Config, learner: Learner, net: torch.nn.Module, device: torch.device,
                  log: Callable[[str], None], place: str = "beside"):
    """The step ``train_epoch`` runs: ``step(batch, before_update) -> (logits, loss value)``, a
    :class:`GraphedStep` with ``train.cuda_graphs`` where graphs apply (module docstring), else the eager
    ``train_step``. ``place``: where the batches' hierarchy is built (``engine.placement``)."""
    def eager(batch, before_update=None):
        return train_step(cfg, learner, net, batch, device, before_update)
    if not cfg.train.cuda_graphs:
        return eager
    why = _not_graphable(cfg, net, device, place)
    if why:
        log(f"train.cuda_graphs: eager steps ({why})")
        return eager
    log(f"train.cuda_graphs: each batch padded to one of at most {MAX_GRAPHS} sizes, a graph each")
    return GraphedStep(cfg, learner, net, device, CudaRecorder(device), eager, log)


def _not_graphable(cfg: Config, net: torch.nn.Module, device: torch.device, place: str) -> str | None:
    """Why this run's steps cannot be graphs, or None."""
    if device.type != "cuda":
        return f"graphs are CUDA's, and this run is on {device.type}"
    if cfg.model.backbone != "ptv1":
        return f"graphs take PTv1's steps, and model.backbone is {cfg.model.backbone}"
    if isinstance(net, torch.nn.parallel.DistributedDataParallel):
        return "DDP reduces the gradients during the backward, outside a graph"
    if place not in ("beside", "loader"):
        return f"graphs take the batch's hierarchy given, and the model builds it (data.hierarchy: {place})"
    if build.mixed_precision(cfg, device) == torch.float16:
        return "fp16's loss scaler decides on the host whether to step; use bf16"
    if cfg.train.loss != "ce":
        return f"train.loss {cfg.train.loss} reads values on the host (graphs take ce)"
    return None


@dataclass
class _Graph:
    """One recorded size: its input tensors (the batch is copied in), the real-row prefixes, the replay, and
    what a replay writes (logits, loss, one gradient a parameter or None)."""

    inputs: list[Tensor]
    prefixes: Tensor
    replay: Callable[[], None]
    logits: Tensor
    loss: Tensor
    grads: list[Tensor | None]


class GraphedStep:
    """``train_step`` on recorded graphs (module docstring). ``recorder``: :class:`CudaRecorder`, or on the CPU
    :class:`RerunRecorder` (tests: a replay that runs the recorded function again); ``eager(batch,
    before_update)``: the step for batches that no graph takes."""

    def __init__(self, cfg: Config, learner: Learner, net: torch.nn.Module, device: torch.device, recorder,
                 eager: Callable, log: Callable[[str], None] = print):
        self.cfg, self.learner, self.net, self.device = cfg, learner, net, device
        self.recorder, self.eager, self.log = recorder, eager, log
        self.graphs: dict[tuple, _Graph] = {}
        self.failed, self.full = False, False
        self.spec = net.hierarchy_spec

    def __call__(self, batch, before_update: Callable[[Tensor, Tensor | None], float] | None = None):
        h = getattr(batch, "hierarchy", None)
        if self.failed or h is None:
            return self.eager(batch, before_update)
        n, clouds = batch.pos.shape[0], batch.ptr.shape[0] - 1
        self.spec.check(h, n, clouds)
        sizes = padding.padded_sizes(n, clouds, self.spec.strides, self.spec.neighbours)
        key = (clouds, sizes)
        if key not in self.graphs and len(self.graphs) >= MAX_GRAPHS:
            if not self.full:
                self.full = True
                self.log(f"train.cuda_graphs: {MAX_GRAPHS} sizes recorded; batches of other sizes step eagerly")
            return self.eager(batch, before_update)
        padded = padding.pad_batch(batch.pos, batch.x, batch.y, h, sizes, self.cfg.train.ignore_index)
        values = padding.row_prefixes(padding.stage_sizes(h), sizes, self.spec.neighbours)
        graph = self.graphs.get(key)
        if graph is None:
            graph = self._record(key, padded, values)
            if graph is None:
                return self.eager(batch, before_update)
        else:
            for static, new in zip(graph.inputs, _flat(padded), strict=True):
                static.copy_(new, non_blocking=True)
            graph.prefixes.copy_(torch.tensor(list(values.values())), non_blocking=True)
        graph.replay()
        for p, g in zip(self.learner.model.parameters(), graph.grads, strict=True):
            p.grad = g
        return graph.logits[:n], checked_update(self.cfg, self.learner, graph.loss, before_update)

    def _record(self, key: tuple, padded, values: dict[int, int]) -> _Graph | None:
        """Record the padded step of ``key``'s size with this batch as its inputs; None (and eager from now
        on, one log line) where recording fails."""
        coord, feat, _, label, h = padded
        prefixes = torch.tensor(list(values.values()), device=self.device)
        rows = dict(zip(values, prefixes.unbind(), strict=True))
        model, cfg = self.learner.model, self.cfg

        def step() -> tuple[Tensor, Tensor]:
            with build.autocast(cfg, self.device, cache=False), padding.batch_rows(rows):
                logits = self.net.body(coord, feat, h)
            loss = segmentation_loss(logits.float(), label, cfg.train.loss, cfg.train.ignore_index,
                                     cfg.train.lovasz_weight)
            loss.backward()
            return logits, loss

        kept = [b.clone() for b in model.buffers()]
        try:
            replay, (logits, loss) = self.recorder.record(
                step, model, before=lambda: forget_transposes(h.neighbours + tuple(t for t in h.down if t is not None)))
        except Exception as err:  # noqa: BLE001 - any capture failure: the eager step is always correct
            self.failed = True
            self.log(f"train.cuda_graphs: recording failed, eager steps from now on ({type(err).__name__}: {err})")
            return None
        finally:
            for b, old in zip(model.buffers(), kept, strict=True):
                b.copy_(old)
        self.graphs[key] = graph = _Graph(_flat(padded), prefixes, replay, logits, loss,
                                          [p.grad for p in model.parameters()])
        return graph


def _flat(padded) -> list[Tensor]:
    """The tensors of a padded ``(coord, feat, offset, label, hierarchy)``, in a fixed order."""
    coord, feat, _, label, h = padded             # the offset is the hierarchy's offsets[0]
    out = [coord, feat, label]
    for name in ("offsets", "samples", "down", "neighbours", "up", "up_dist2"):
        out += [t for t in getattr(h, name) if t is not None]
    return out


class CudaRecorder:
    """Records on CUDA: :data:`WARMUP` eager passes on a side stream, then ``torch.cuda.graph`` into the pool all
    graphs share. ``record(step, model, before)`` -> ``(replay, step's outputs)``."""

    def __init__(self, device: torch.device):
        self.device = device
        self.pool = torch.cuda.graph_pool_handle()
        # every capture on this one stream of the model's device. torch.cuda.graph's default is one stream made
        # on the current device: with the model on cuda:1 and cuda:0 current it captured none of the step (an
        # empty graph; each replay handed back the recorded batch's loss and gradients). One stream for all:
        # the caching allocator hands a freed block back only on the stream it was freed on, so graphs
        # captured on streams of their own would share nothing of the pool, each holding its own intermediates
        self.capture = torch.cuda.Stream(device)

    def record(self, step: Callable[[], tuple], model: torch.nn.Module, before: Callable[[], None]):
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(WARMUP):
                model.zero_grad(set_to_none=True)
                step()
        torch.cuda.current_stream(self.device).wait_stream(side)
        model.zero_grad(set_to_none=True)      # the capture's backward allocates the graph's own gradients
        before()
        graph, current = torch.cuda.CUDAGraph(), torch.cuda.current_stream(self.device)
        try:
            # thread_local: the loader's pin-memory thread and the next batch's hierarchy keep using CUDA
            # meanwhile; entering, torch.cuda.graph releases the warm-up's cached blocks (empty_cache)
            with torch.cuda.graph(graph, pool=self.pool, stream=self.capture, capture_error_mode="thread_local"):
                out = step()
        except Exception:
            torch.cuda.set_stream(current)     # a failed capture_end leaves the capture's stream current
            raise
        return graph.replay, out


class RerunRecorder:
    """A recorder for the CPU (tests of :class:`GraphedStep`): the step runs once when recorded, and a replay
    runs it again, writing its outputs and gradients into the recorded ones, as a graph's replay does."""

    def record(self, step: Callable[[], tuple], model: torch.nn.Module, before: Callable[[], None]):
        model.zero_grad(set_to_none=True)
        before()
        out = step()
        grads = [p.grad for p in model.parameters()]

        def replay() -> None:                  # a graph writes its tensors and leaves every .grad as it was
            held = [p.grad for p in model.parameters()]
            model.zero_grad(set_to_none=True)
            fresh = step()
            with torch.no_grad():
                for static, new in zip(out, fresh, strict=True):
                    static.copy_(new)
            for static, p, was in zip(grads, model.parameters(), held, strict=True):
                if static is not None:
                    static.copy_(p.grad)
                p.grad = was
        return replay, out
