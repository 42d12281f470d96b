"""Tests of pointgeope/engine/eval_weights.py: the test's half-precision copies of the weights (Linears, sparse
convolutions) give the logits of autocast's own casts bit for bit (PTv1 ``rpe`` and ``geope``, PTv3; one piece
per forward and many), leave no state behind, never outlive their run, and copy nothing in float32.

CUDA's autocast is stood in for by the CPU's (``build.autocast_dtype`` asked as for a CUDA device): the same rule
for a Linear, ``linear(x.to(h), W.to(h), b.to(h))``."""
from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from pointgeope.engine import build, eval_weights
from pointgeope.engine.config import Config, EvalConfig, load_config
from pointgeope.engine.eval_weights import ALIGN_BYTES, cast_weights
from pointgeope.engine.evaluate import vote_room
from pointgeope.model.ptv3.sparse_conv import SubMConv3d
from tests.engine.test_evaluate import room
from tests.engine.test_ptv3_engine import PTV3_DEMO
from tests.engine.test_vote_depth import NET as PTV3_NET, box_room

BF16 = torch.bfloat16
PTV1 = ["data.grid_size=0.1", "data.voxel_max=250", "eval.max_fragments=2", "eval.tta.rotations=2",
        "model.planes=[8, 16]", "model.blocks=[1, 1]", "model.strides=[1, 4]", "model.neighbours=[8, 8]",
        "model.decoder_blocks=[1, 1]"]


@pytest.fixture
def as_on_cuda(monkeypatch):
    """The engine's precision rule with the CPU taken for CUDA: ``eval.amp: bf16`` autocasts the CPU's test."""
    rule = build.autocast_dtype
    monkeypatch.setattr(build, "autocast_dtype", lambda amp, device: rule(amp, torch.device("cuda")))


def linears(model: nn.Module) -> list[nn.Linear]:
    return [m for m in model.modules() if isinstance(m, nn.Linear)]


def weight_dtypes(model: nn.Module) -> list[set[torch.dtype]]:
    """A forward pre-hook that records, at each forward, the dtypes the Linears' ``weight`` and ``bias`` and the
    sparse convolutions' ``weight`` read as (the attention layers' q, k, v too, which the layer reads without
    calling them)."""
    seen: list[set[torch.dtype]] = []
    model.register_forward_pre_hook(lambda module, args: seen.append(
        {t.dtype for m in linears(module) for t in (m.weight, m.bias) if t is not None}
        | {m.weight.dtype for m in module.modules() if isinstance(m, SubMConv3d)}))
    return seen


class WeightCasts(TorchDispatchMode):
    """Counts the casts (``aten._to_copy``, ``aten.to``, to another dtype) of a tensor made from the model's
    weights alone: its parameters, what its modules read as ``weight`` and ``bias``, and views and results of ops
    on those only."""

    def __init__(self, model: nn.Module):
        super().__init__()
        roots = [*model.parameters(), *(getattr(m, n) for m in model.modules() for n in ("weight", "bias")
                                        if isinstance(getattr(m, n, None), torch.Tensor))]
        self.ids, self.keep, self.casts = {id(t) for t in roots}, roots, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if tensors and all(id(t) in self.ids for t in tensors):
            outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
            self.casts += func.__name__.split(".")[0] in ("_to_copy", "to") and outs[0].dtype != tensors[0].dtype
            self.ids.update(id(o) for o in outs)
            self.keep += outs
        return out


def dataclass_amp(cfg: Config, amp: str) -> Config:
    return dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, amp=amp))


def tiny(backbone: str, batch_points: int, amp: str = "bf16"):
    """(model in eval mode, cfg, room arguments of ``vote_room``) of a small PTv1 or PTv3 network."""
    if backbone == "ptv3":
        # one block a stage (test_vote_depth's net has four): each kind of layer is copied and cast all the same
        cfg = load_config(PTV3_DEMO, [*PTV3_NET, "model.ptv3.enc_depths=[1, 1]", "model.ptv3.dec_depths=[1]",
                                      f"eval.batch_points={batch_points}", f"eval.amp={amp}"])
        coord, color, normal = box_room(3.0, n=1500)
        kwargs = {"normal": normal}
    else:
        cfg = load_config(None, [*PTV1, f"model.pe={backbone}", f"eval.batch_points={batch_points}",
                                 f"eval.amp={amp}"])
        (coord, color), kwargs = room(n=1500, seed=3), {}
    torch.manual_seed(0)
    return build.model(cfg).eval(), cfg, (coord, color), kwargs


@pytest.mark.parametrize("batch_points", [1, 10**6], ids=["piece-a-forward", "one-batch"])
@pytest.mark.parametrize("backbone", ["rpe", "geope", "ptv3"])
def test_the_copies_give_autocasts_scores_bit_for_bit(as_on_cuda, monkeypatch, backbone, batch_points):
    """``vote_room`` under ``eval.amp: bf16``: its scores with the copies (every layer reading bf16 weights)
    equal those of autocast casting the float32 weights at each call, bit for bit; float32's differ (the
    comparison sees a rounding)."""
    model, cfg, (coord, color), kwargs = tiny(backbone, batch_points)
    seen = weight_dtypes(model)
    copied = vote_room(model, coord, color, cfg, torch.device("cpu"), seed=1, **kwargs)
    assert seen and all(dtypes == {BF16} for dtypes in seen)
    seen.clear()
    monkeypatch.setattr(eval_weights, "copies", lambda *args: contextlib.nullcontext(0))
    cast = vote_room(model, coord, color, cfg, torch.device("cpu"), seed=1, **kwargs)
    assert seen and all(dtypes == {torch.float32} for dtypes in seen)
    assert np.array_equal(copied.votes, cast.votes) and copied.votes.max() >= 1
    assert np.array_equal(copied.scores, cast.scores)
    plain = vote_room(model, coord, color, dataclass_amp(cfg, "none"), torch.device("cpu"), seed=1, **kwargs)
    assert not np.array_equal(plain.scores, cast.scores)


def test_fp16_copies_give_autocasts_logits_bit_for_bit():
    """The rule is autocast's for any half dtype: float16 copies, float16 autocast, the same logits."""
    model, cfg, _, _ = tiny("rpe", 10**6)
    g = torch.Generator().manual_seed(0)
    coord = torch.rand(300, 3, generator=g) * 2
    feat, offset = torch.cat([torch.rand(300, 3, generator=g), coord], 1), torch.tensor([120, 300])
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.float16):
        cast = model(coord, feat, offset)
        with cast_weights(model, torch.float16) as n:
            copied = model(coord, feat, offset)
    assert n == sum(1 + (m.bias is not None) for m in linears(model)) and copied.dtype == torch.float16
    assert torch.equal(copied, cast)


def snapshot(model: nn.Module) -> tuple:
    """Everything a module keeps: its state dict (each tensor's storage and values), its parameters and buffers
    (the objects), and every submodule's instance attributes."""
    state = {k: (v.data_ptr(), v.dtype, v.clone()) for k, v in model.state_dict().items()}
    return (state, [id(p) for p in model.parameters()], [(n, id(b)) for n, b in model.named_buffers()],
            [sorted(vars(m)) for m in model.modules()])


def same(a: tuple, b: tuple) -> bool:
    (sa, *rest_a), (sb, *rest_b) = a, b
    return rest_a == rest_b and sa.keys() == sb.keys() and all(
        sa[k][:2] == sb[k][:2] and torch.equal(sa[k][2], sb[k][2]) for k in sa)


@pytest.mark.parametrize("backbone", ["geope", "ptv3"])
def test_nothing_is_left_behind_also_after_an_error(backbone):
    """Inside the ``with`` every Linear and sparse convolution reads a bf16 copy while the parameters, state dict
    and buffers stay the float32 ones; after it, and after an exception raised inside it, the model is as
    before."""
    model = tiny(backbone, 10**6)[0]
    before = snapshot(model)
    convs = [m for m in model.modules() if isinstance(m, SubMConv3d)]
    assert bool(convs) == (backbone == "ptv3")
    with cast_weights(model, BF16) as n:
        assert n == sum(1 + (m.bias is not None) for m in linears(model)) + len(convs) > 0
        assert all(m.weight.dtype == BF16 and m._parameters["weight"].dtype == torch.float32
                   for m in linears(model) + convs)
        assert same(snapshot(model)[:3] + (before[3],), before)     # only the instance attributes differ
    assert same(snapshot(model), before)
    with pytest.raises(RuntimeError, match="inside"), cast_weights(model, BF16):
        raise RuntimeError("inside")
    assert same(snapshot(model), before)
    assert all(m.weight is m._parameters["weight"] for m in linears(model) + convs)


def test_a_weight_changed_between_two_runs_is_seen(as_on_cuda):
    """Training tests between epochs: the second run's copies are of the weights it starts with, so its
    logits are autocast's of the new weights, not the first run's."""
    model, cfg, _, _ = tiny("rpe", 10**6)
    device = torch.device("cpu")
    g = torch.Generator().manual_seed(1)
    coord = torch.rand(200, 3, generator=g) * 2
    feat, offset = torch.cat([torch.rand(200, 3, generator=g), coord], 1), torch.tensor([200])

    def run(copies: bool) -> torch.Tensor:
        with torch.inference_mode(), eval_weights.copies(model, cfg, device) if copies else \
                contextlib.nullcontext(), build.autocast(cfg, device, evaluation=True):
            return model(coord, feat, offset)
    first = run(True)
    with torch.no_grad():
        model.head[-1].weight.mul_(2.0)
        model.head[-1].bias.add_(1.0)
    second = run(True)
    assert torch.equal(second, run(False)) and not torch.equal(second, first)


def test_float32_copies_nothing(as_on_cuda):
    """``eval.amp: none`` (float32): no copy, every Linear reads its parameter."""
    model = tiny("rpe", 10**6)[0]
    with eval_weights.copies(model, Config(eval=EvalConfig(amp="none")), torch.device("cuda")) as n:
        assert n == 0 and all(m.weight is m._parameters["weight"] for m in linears(model))


def test_bf16_on_the_cpu_copies_nothing():
    """``eval.amp: bf16`` on the CPU tests in float32 (``build.autocast_dtype``): no copy there either."""
    model = tiny("rpe", 10**6)[0]
    with eval_weights.copies(model, Config(eval=EvalConfig(amp="bf16")), torch.device("cpu")) as n:
        assert n == 0 and all(m.weight is m._parameters["weight"] for m in linears(model))


def test_only_what_autocast_would_cast_is_copied_and_nested_runs_keep_the_outer_copies():
    """float64 Linears (autocast leaves them), lazy ones (no values yet), ones already in the dtype and a
    Linear without bias's missing bias are not copied; an inner ``with`` copies nothing and its end leaves the
    outer copies in place."""
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 4).double(), nn.LazyLinear(2), nn.Linear(4, 4).to(BF16),
                          nn.Linear(4, 5, bias=False))
    with cast_weights(model, BF16) as n:
        assert n == 3                                        # [0].weight, [0].bias, [4].weight
        assert model[0].weight.dtype == model[0].bias.dtype == model[4].weight.dtype == BF16
        assert model[1].weight.dtype == torch.float64 and model[3].weight is model[3]._parameters["weight"]
        with cast_weights(model, BF16) as inner:
            assert inner == 0
        assert model[0].weight.dtype == BF16 and "weight" in vars(model[0])
    assert all("weight" not in vars(m) and "bias" not in vars(m) for m in model)


@pytest.fixture
def copies_made(monkeypatch) -> list[int]:
    """How many tensors each ``cast_weights`` of the engine copied, in the order of the ``with``s."""
    made, real = [], eval_weights.cast_weights

    @contextlib.contextmanager
    def recording(model, dtype):
        with real(model, dtype) as n:
            made.append(n)
            yield n
    monkeypatch.setattr(eval_weights, "cast_weights", recording)
    return made


def test_evaluate_copies_the_weights_once_for_all_its_rooms(as_on_cuda, copies_made, tiny_root):
    """``predict_areas`` (evaluate's and validation's test) under ``eval.amp: bf16``: one copy of every Linear's
    weight and bias for the area's rooms, none made again by each room's ``vote_room``."""
    from pointgeope.engine.distributed import DistEnv
    from pointgeope.engine.evaluate import predict_areas
    from pointgeope.h5 import list_rooms

    cfg = load_config(None, [*PTV1, f"data.root={tiny_root}", "eval.amp=bf16", "train.progress=false"])
    torch.manual_seed(0)
    model = build.model(cfg)
    env = DistEnv(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
    preds, _ = predict_areas(model, cfg, ["Area_1"], env)
    rooms = len(list_rooms(tiny_root / "Area_1.h5"))
    assert len(preds["Area_1"]) == rooms >= 2
    assert copies_made == [sum(1 + (m.bias is not None) for m in linears(model))] + [0] * rooms
    assert all("weight" not in vars(m) for m in linears(model))


def test_predict_copies_the_weights_once_for_all_its_scans(as_on_cuda, copies_made, tiny_run, tiny_root, tmp_path):
    """``pointgeope predict`` of two scans with ``eval.amp=bf16``: one copy of the weights for the run."""
    from pointgeope.cli import main as cli
    from pointgeope.h5 import list_rooms

    rooms, raw = list(list_rooms(tiny_root / "Area_1.h5"))[:2], tiny_root.parent / "raw" / "Area_1"
    assert cli(["predict", str(tiny_run), *map(str, (raw / r for r in rooms)), "--out", str(tmp_path),
                "eval.amp=bf16"]) == 0
    assert len(copies_made) == 1 + len(rooms) and copies_made[0] > 0 and copies_made[1:] == [0] * len(rooms)


@pytest.mark.parametrize("backbone", ["rpe", "geope", "ptv3"])
def test_the_test_forward_casts_no_weight_inside_the_copies(backbone):
    """One bf16 autocast forward in inference mode: autocast casts weights (Linears' and, in PTv3, each sparse
    convolution offset's) without the copies, and none inside them."""
    model = tiny(backbone, 10**6)[0]
    g = torch.Generator().manual_seed(2)
    grid = torch.randperm(8 ** 3, generator=g)[:150]
    grid = torch.stack([grid // 64, grid // 8 % 8, grid % 8], 1)
    coord = (grid.float() + torch.rand(150, 3, generator=g)) * 0.1
    feat = torch.rand(150, 6, generator=g) if backbone == "ptv3" else torch.cat([torch.rand(150, 3, generator=g),
                                                                                  coord], 1)
    extra = {"grid_coord": grid} if backbone == "ptv3" else {}
    counts = []
    for copies in (False, True):
        with torch.inference_mode(), torch.autocast("cpu", dtype=BF16), \
                cast_weights(model, BF16) if copies else contextlib.nullcontext():
            with WeightCasts(model) as casts:
                model(coord, feat, torch.tensor([150]), **extra)
        counts.append(casts.casts)
    assert counts[0] >= sum(1 + (m.bias is not None) for m in linears(model)) and counts[1] == 0


def test_a_sparse_convolution_reads_each_offset_as_autocasts_cast_of_it():
    """A ``SubMConv3d``'s copy: each kernel offset's ``(C_out, C_in)`` a view of the copy with the values and the
    strides of autocast's cast of the float32 slice, its block on an ``ALIGN_BYTES`` boundary of the storage; the
    bias stays the float32 parameter (added in float32)."""
    torch.manual_seed(0)
    conv = SubMConv3d(5, 6, kernel_size=3)
    param = conv.weight
    with cast_weights(conv, BF16) as n:
        assert n == 1 and conv.bias is conv._parameters["bias"] and conv.weight.dtype == BF16
        offsets = conv.weight.reshape(6, -1, 5)
        assert offsets.data_ptr() == conv.weight.data_ptr() and offsets.shape == (6, 27, 5)   # a view
        start = conv.weight.untyped_storage().data_ptr()
        for i in range(27):
            cast = param.reshape(6, -1, 5)[:, i].t().to(BF16)          # autocast's: the product's operand
            mine = offsets[:, i].t()
            assert torch.equal(mine, cast) and mine.stride() == cast.stride() == (1, 5)
            assert (mine.data_ptr() - start) % ALIGN_BYTES == 0
    assert conv.weight is param


def test_a_parameter_assigned_inside_the_run_is_read_and_no_copy_is_left_behind():
    """A Parameter assigned to a copied name inside the ``with`` (``module.weight = ...``,
    ``load_state_dict(assign=True)``) replaces the copy for the rest of the run; the ``with`` ends without
    error and takes out every other module's copy (a float32 forward after it reads the float32 parameters)."""
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    new = nn.Parameter(torch.full((4, 3), 0.5))
    with cast_weights(model, BF16) as n:
        assert n == 4
        model[0].weight = new
        assert model[0].weight is new and model[1].weight.dtype == BF16
    assert all("weight" not in vars(m) and "bias" not in vars(m) for m in model)
    assert model[0].weight is new and model[1].weight is model[1]._parameters["weight"]
    x = torch.ones(2, 3)
    assert torch.equal(model(x), model[1](torch.full((2, 4), 1.5) + model[0].bias))


def test_a_nested_run_of_another_dtype_is_refused():
    """An inner ``with`` in float16 inside a bfloat16 one would leave the bf16 copies in place and float16
    autocast would round them again (values neither cast gives alone): refused, the outer copies kept."""
    model = nn.Sequential(nn.Linear(3, 4))
    with cast_weights(model, BF16):
        with pytest.raises(RuntimeError, match=r"inside cast_weights\(torch.bfloat16\)"), \
                cast_weights(model, torch.float16):
            pass
        assert model[0].weight.dtype == BF16
    assert "weight" not in vars(model[0])


def test_a_training_step_after_a_run_gives_the_weights_of_one_without_the_copies(as_on_cuda):
    """Validation between epochs: step, a bf16 test run with the copies, step, and the same with autocast
    casting at each call: the same parameters and momentum buffers bit for bit, and the optimiser holds the
    model's parameters."""
    def train(copies: bool) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        model, cfg, _, _ = tiny("geope", 10**6)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        g = torch.Generator().manual_seed(1)
        coord = torch.rand(200, 3, generator=g) * 2
        feat, offset = torch.cat([torch.rand(200, 3, generator=g), coord], 1), torch.tensor([90, 200])
        label = torch.randint(0, cfg.model.num_classes, (200,), generator=g)
        for _ in range(2):
            model.train()
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(coord, feat, offset), label).backward()
            optimizer.step()
            model.eval()
            with torch.inference_mode(), (eval_weights.copies(model, cfg, torch.device("cpu")) if copies
                                          else contextlib.nullcontext()), build.autocast(cfg, torch.device("cpu"),
                                                                                          evaluation=True):
                model(coord, feat, offset)
        assert [id(p) for p in optimizer.param_groups[0]["params"]] == [id(p) for p in model.parameters()]
        return ([p.detach().clone() for p in model.parameters()],
                [optimizer.state[p]["momentum_buffer"] for p in model.parameters()])
    (weights, momenta), (weights_cast, momenta_cast) = train(True), train(False)
    assert all(torch.equal(a, b) for a, b in zip(weights + momenta, weights_cast + momenta_cast, strict=True))
