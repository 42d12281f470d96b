"""pointgeope/engine/step.py: the training step's one host read, its one gradient norm, and the check before
the update (state.FoldCheckpoints.before_update) on one process and under DDP (two gloo processes)."""
from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.multiprocessing as mp
from torch.overrides import TorchFunctionMode

from pointgeope.engine.config import Config, OptimConfig, TrainConfig
from pointgeope.engine.distributed import DistEnv
from pointgeope.engine.state import FoldCheckpoints, Learner, LoopState
from pointgeope.engine.step import train_step
from tests.engine.conftest import free_port, join_rank

CPU = torch.device("cpu")
ENV = DistEnv(rank=0, world_size=1, local_rank=0, device=CPU)
T = torch.Tensor
HOST_READS = {T.item, T.tolist, T.__bool__, T.__int__, T.__float__, T.__index__, T.numpy, T.nonzero}


class Calls(TorchFunctionMode):
    """The names of the torch functions called inside the block."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen.append(getattr(func, "__name__", repr(func)))
        return func(*args, **(kwargs or {}))

    def reads(self) -> list[str]:
        return [n for n in self.seen if n in {getattr(f, "__name__", "") for f in HOST_READS}]


class Net(torch.nn.Module):
    """``pointgeope``'s network interface (pos, x, offsets) around two linear layers; ``scale`` multiplies the
    logits (a large one makes large gradients)."""

    def __init__(self, scale: float = 1.0):
        super().__init__()
        self.a, self.b, self.scale = torch.nn.Linear(6, 8), torch.nn.Linear(8, 4), scale

    def forward(self, pos, x, offset, hierarchy=None):
        return self.b(torch.relu(self.a(x))) * self.scale


def _setup(clip=None, seed=0, scale=1.0):
    torch.manual_seed(seed)
    net = Net(scale)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    learner = Learner(net, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0),
                      torch.amp.GradScaler("cuda", enabled=False))
    return Config(train=TrainConfig(loss="ce"), optim=OptimConfig(grad_clip=clip)), learner


def _batch(seed=0, n=50):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 4, (n,), generator=g)
    y[::7] = 255
    return SimpleNamespace(pos=torch.rand(n, 3, generator=g), x=torch.rand(n, 6, generator=g), y=y,
                           ptr=torch.tensor([0, n]))


def _check(learner, run: Path, batch, env=ENV):
    return FoldCheckpoints(run, learner, env, {}, {}).before_update(LoopState(epoch=1, step=7, batch=3), batch, 1)


@pytest.mark.parametrize("clip", [None, 0.05])
def test_a_checked_step_reads_the_host_once_and_computes_one_gradient_norm(clip, tmp_path):
    """The step as train_epoch runs it (the check before the update): one host read (the loss and the
    check's flag together; before: the loss's ``item``, then the gradient norm's ``bool``), and with
    ``optim.grad_clip`` one norm over the gradients (one ``_foreach_norm``; before: the check's and
    ``clip_grad_norm_``'s own)."""
    cfg, learner = _setup(clip)
    batch = _batch()
    with Calls() as calls:
        train_step(cfg, learner, learner.model, batch, CPU, _check(learner, tmp_path, batch))
    assert calls.reads() == ["tolist"]
    assert calls.seen.count("_foreach_norm") == 1
    with Calls() as calls:   # no check (the bench scripts): the loss's one read, and a norm only to clip
        train_step(cfg, learner, learner.model, batch, CPU)
    assert calls.reads() == ["item"]
    assert calls.seen.count("_foreach_norm") == (clip is not None)


@pytest.mark.parametrize("clip", [None, 0.05, 1e6])
def test_steps_are_torch_own_clip_and_sgd_bit_for_bit(clip, tmp_path):
    """Three checked steps against a reference written with torch's own calls (cross entropy, backward,
    ``clip_grad_norm_``, ``SGD.step``) on a twin: the same losses and weights, bit for bit, whether the clip
    bites (0.05) or not (1e6)."""
    cfg, learner = _setup(clip)
    twin = copy.deepcopy(learner.model)
    opt = torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9)
    for seed in range(3):
        batch = _batch(seed)
        _, loss = train_step(cfg, learner, learner.model, batch, CPU, _check(learner, tmp_path, batch))
        opt.zero_grad()
        want = torch.nn.functional.cross_entropy(twin(batch.pos, batch.x, None), batch.y, ignore_index=255)
        want.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(twin.parameters(), clip)
        opt.step()
        assert loss == want.item()
    for a, b in zip(learner.model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(a, b)


class _Poison(torch.autograd.Function):
    """Identity forward; a backward that puts ``value`` into the gradient."""

    @staticmethod
    def forward(ctx, x, value):
        ctx.value = value
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.value, None


def _poisoned_net(value: float):
    cfg, learner = _setup()
    forward = learner.model.forward
    learner.model.forward = lambda *a, **k: _Poison.apply(forward(*a, **k), value)
    return cfg, learner


def test_a_non_finite_loss_stops_before_the_update_naming_the_step(tmp_path):
    cfg, learner = _setup()
    before = copy.deepcopy(learner.model.state_dict())
    batch = _batch()
    batch.x[1, 0] = float("nan")   # a labelled point (0 is ignored)
    with pytest.raises(FloatingPointError) as stop:
        train_step(cfg, learner, learner.model, batch, CPU, _check(learner, tmp_path, batch))
    assert str(stop.value).startswith("fold 1: the loss is nan at epoch 2, step 7 (batch 3 of the epoch); "
                                      "the weights were not updated")
    assert (tmp_path / "nan_step_7.pt").is_file()
    assert all(torch.equal(a, before[k]) for k, a in learner.model.state_dict().items())


def test_a_finite_loss_with_non_finite_gradients_stops_naming_the_parameter(tmp_path):
    cfg, learner = _poisoned_net(float("nan"))
    with pytest.raises(FloatingPointError) as stop:
        batch = _batch()
        train_step(cfg, learner, learner.model, batch, CPU, _check(learner, tmp_path, batch))
    assert "the gradients are not finite at epoch 2, step 7 (batch 3 of the epoch), with a loss of " in str(stop.value)
    assert "the gradient of 'a.weight' holds " in str(stop.value)    # the first parameter, in the model's order
    assert " NaN or infinite values of 48 (the first such parameter)" in str(stop.value)


def test_finite_gradients_whose_norm_overflows_are_no_finding(tmp_path):
    """Gradients of 1e30 are finite, their float32 norm is not: the step goes on (the check then looks at
    each gradient, finds them finite), and its loss is returned."""
    cfg, learner = _poisoned_net(1e30)
    batch = _batch()
    with Calls() as calls:
        _, loss = train_step(cfg, learner, learner.model, batch, CPU, _check(learner, tmp_path, batch))
    assert loss == pytest.approx(1.386, abs=0.2) and calls.reads()[0] == "tolist" and len(calls.reads()) > 1
    assert not list(tmp_path.iterdir())


@pytest.mark.filterwarnings(r"ignore:Detected call of `lr_scheduler.step\(\)`")
def test_under_fp16_the_scaler_skips_non_finite_gradients_itself(tmp_path):
    """With the grad scaler enabled (torch's own, on the CPU) the check leaves non-finite gradients to it: it
    skips the step (the weights unchanged) and halves its scale; no stop, nothing saved."""
    cfg, learner = _poisoned_net(float("inf"))
    learner.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    before = copy.deepcopy(learner.model.state_dict())
    batch = _batch()
    train_step(cfg, learner, learner.model, batch, CPU, _check(learner, tmp_path, batch))
    assert all(torch.equal(w, before[k]) for k, w in learner.model.state_dict().items())
    assert learner.scaler.get_scale() == 512.0 and not list(tmp_path.iterdir())


@pytest.mark.parametrize("clip", [None, 0.05])
def test_under_fp16_a_clipped_step_clips_the_unscaled_gradients_as_torch_does(clip, tmp_path):
    """The norm computed once clips the unscaled gradients: torch's recipe (scale, backward, unscale_,
    clip_grad_norm_, step, update) on a twin gives the same weights, bit for bit."""
    cfg, learner = _setup(clip)
    learner.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    twin = copy.deepcopy(learner.model)
    opt = torch.optim.SGD(twin.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    for seed in range(2):
        batch = _batch(seed)
        train_step(cfg, learner, learner.model, batch, CPU, _check(learner, tmp_path, batch))
        opt.zero_grad()
        scaler.scale(torch.nn.functional.cross_entropy(twin(batch.pos, batch.x, None), batch.y,
                                                       ignore_index=255)).backward()
        if clip is not None:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(twin.parameters(), clip)
        scaler.step(opt)
        scaler.update()
    for a, b in zip(learner.model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(a, b)


def _ddp_rank(rank: int, world: int, port: int, out: str, bad: int) -> None:
    """Rank ``rank`` of a gloo group: one checked step, rank ``bad``'s loss NaN (-1: none); what it ended
    with goes to ``out/rank<rank>.txt``."""
    join_rank(rank, world, port)
    from pointgeope.engine import distributed

    env = distributed.setup("cpu")
    try:
        cfg, learner = _setup(seed=0)
        batch = _batch(seed=rank)
        if rank == bad:
            batch.x[1, 0] = float("nan")   # a labelled point (0 is ignored)
        run = Path(out) / f"run{rank}"
        run.mkdir()
        try:
            _, loss = train_step(cfg, learner, learner.model, batch, env.device, _check(learner, run, batch, env))
            said = f"went on {loss!r}"
        except FloatingPointError as err:
            said = f"stopped {str(err).split('; the weights')[0]}"
        (Path(out) / f"rank{rank}.txt").write_text(said)
    finally:
        distributed.cleanup()


@pytest.mark.parametrize("bad", [1, -1])
def test_under_ddp_every_rank_stops_when_one_ranks_loss_is_not_finite(tmp_path, bad):
    """Two processes: rank 1's loss NaN stops both ranks before the update (the agreement is in the step's
    one read); with none bad, each goes on with its own loss."""
    mp.start_processes(_ddp_rank, args=(2, free_port(), str(tmp_path), bad), nprocs=2, join=True,
                       start_method="fork")
    said = [(tmp_path / f"rank{r}.txt").read_text() for r in range(2)]
    losses = []     # each rank's loss, by a plain forward of the same weights and batch
    for rank in range(2):
        _, learner = _setup(seed=0)
        batch = _batch(seed=rank)
        losses.append(torch.nn.functional.cross_entropy(learner.model(batch.pos, batch.x, None), batch.y,
                                                        ignore_index=255).item())
    if bad == 1:
        where = "at epoch 2, step 7 (batch 3 of the epoch)"
        peer = f"stopped fold 1: another process's loss or gradients were not finite {where}, this one's loss"
        assert said == [f"{peer} {losses[0]:.6g}", f"stopped fold 1: the loss is nan {where}"]
    else:
        assert said == [f"went on {loss!r}" for loss in losses]
