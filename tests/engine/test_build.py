"""Tests of pointgeope/engine/build.py: the parameter groups, the learning-rate schedule and the resumable sampler."""
from __future__ import annotations

import contextlib
import math

import pytest
import torch

from pointgeope.engine import build, placement
from pointgeope.engine.build import ResumableSampler, lr_factor, scheduler
from pointgeope.engine.config import load_config
from pointgeope.engine.distributed import DistEnv
from pointgeope.engine.placement import hierarchy_place


def env(rank=0, world=1):
    return DistEnv(rank=rank, world_size=world, local_rank=rank, device=torch.device("cpu"))


def test_multistep_is_ptv1_schedule():
    cfg = load_config(None)  # 100 epochs, x0.1 at int(60) and int(80)
    spe = 7
    factors = {e: lr_factor(cfg, spe, e * spe) for e in (0, 59, 60, 79, 80, 99)}
    assert factors == pytest.approx({0: 1.0, 59: 1.0, 60: 0.1, 79: 0.1, 80: 0.01, 99: 0.01})
    assert lr_factor(cfg, spe, 60 * spe - 1) == 1.0  # last step of epoch 59
    # milestones floor(0.6 * 3) = 1 and floor(0.8 * 3) = 2, as PTv1's int()
    short = load_config(None, ["train.epochs=3"])
    assert [lr_factor(short, spe, e * spe) for e in range(3)] == pytest.approx([1.0, 0.1, 0.01])


def test_cosine_schedule_and_lambda_lr_steps():
    cfg = load_config(None, ["optim.scheduler=cosine", "train.epochs=4", "optim.lr=0.2"])
    assert lr_factor(cfg, 5, 0) == 1.0 and lr_factor(cfg, 5, 10) == pytest.approx(0.5)
    assert lr_factor(cfg, 5, 20) == pytest.approx(0.0, abs=1e-12)
    assert lr_factor(cfg, 5, 30) == pytest.approx(0.0, abs=1e-12)   # past the end it stays at 0, no second rise
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.2)
    sched = scheduler(cfg, opt, 5)
    for _ in range(5):
        opt.step(), sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.2 * (1 + math.cos(math.pi * 5 / 20)) / 2)
    state = sched.state_dict()
    assert state["last_epoch"] == 5 and state["lr_lambdas"] == [None]  # plain, weights_only-loadable


def test_sampler_skip_resumes_inside_an_epoch():
    data = list(range(23))
    full = ResumableSampler(data, env(), seed=4)
    full.set_epoch(3)
    order = list(full)
    assert sorted(order) == data
    part = ResumableSampler(data, env(), seed=4)
    part.set_epoch(3, skip_batches=2, batch_size=4)
    assert list(part) == order[8:] and len(part) == 15
    full.set_epoch(4)
    assert list(full) != order  # a new permutation each epoch


def test_sampler_shards_differ_between_ranks():
    data = list(range(20))
    shards = []
    for rank in range(2):
        s = ResumableSampler(data, env(rank, 2), seed=0)
        s.set_epoch(1)
        shards.append(list(s))
    assert not set(shards[0]) & set(shards[1]) and sorted(shards[0] + shards[1]) == data


def test_model_input_channels_follow_the_features():
    small = ["model.planes=[8, 16]", "model.blocks=[1, 1]", "model.strides=[1, 4]", "model.neighbours=[8, 8]",
             "model.decoder_blocks=[1, 1]"]
    net = build.model(load_config(None, small + ["data.color=false", "model.in_channels=3"]))
    coord = torch.rand(64, 3)
    assert net(coord, coord.clone(), torch.tensor([64])).shape == (64, 13)   # x = [xyz]
    with pytest.raises(ValueError, match=r"model.in_channels=6 but data.color=False, data.height=True give 4 "
                                         r"feature channels \(\[xyz \| height\]\); set model.in_channels=4"):
        build.model(load_config(None, small + ["data.color=false", "data.height=true"]))


def _loader(overrides: list[str]):
    """A seeded model of the config with ``overrides`` and its training loader of Area_2 (epoch 0)."""
    cfg = load_config(None, overrides)
    torch.manual_seed(0)
    net = build.model(cfg)
    dataset = build.train_dataset(cfg, ["Area_2"])
    sampler = ResumableSampler(dataset, env(), seed=0)
    sampler.set_epoch(0)
    place = hierarchy_place(cfg, torch.device("cpu"))
    return net, build.train_loader(cfg, dataset, sampler, env(), net, place)


def _first_batch(overrides: list[str]):
    """A seeded model of the config with ``overrides`` and the first training batch of Area_2 for it."""
    net, loader = _loader(overrides)
    return net, next(iter(loader))


def test_training_batches_carry_the_models_hierarchy_from_the_workers(tiny_root):
    """The loader's workers build each batch's point hierarchy (CPU libraries) for the model: the same
    indices the model computes itself, so the training step is unchanged."""
    from tests.engine.conftest import TINY

    net, batch = _first_batch(TINY + [f"data.root={tiny_root}", "data.num_workers=2"])
    expected = net.hierarchy_spec(batch.pos, batch.ptr[1:])
    for field in ("offsets", "samples", "neighbours", "down", "up", "up_dist2"):
        for got, want in zip(getattr(batch.hierarchy, field), getattr(expected, field), strict=True):
            assert (got is None and want is None) or torch.equal(got, want), field
    net.eval()
    with torch.no_grad():
        torch.testing.assert_close(net(batch.pos, batch.x, batch.ptr[1:], hierarchy=batch.hierarchy),
                                   net(batch.pos, batch.x, batch.ptr[1:]), atol=0, rtol=0)


# --- where the training hierarchy is built (data.hierarchy) --------------------------------------------------

@pytest.mark.parametrize("fps, knn, device, expected", [
    ("triton", "triton", "cuda", "beside"),       # the Triton kernels on CUDA: beside the step
    ("numba", "torch", "cuda", "loader"),         # FPS through the host: the loader's workers
    ("triton", "torch", "cuda", "loader"),        # brute-force kNN in torch: still the loader
    ("numba", "pykdtree", "cpu", "loader"),       # the CPU: today's behaviour
])
def test_auto_hierarchy_follows_the_device_kernels(monkeypatch, fps, knn, device, expected):
    monkeypatch.setattr(placement.backends, "fps_backend", lambda d: fps)
    monkeypatch.setattr(placement.backends, "knn_backend", lambda d, k=1: knn)
    place = hierarchy_place(load_config(None), torch.device(device))
    assert place.where == expected and place.why.startswith("data.hierarchy=auto") and f"fps={fps}" in place.why
    beside = "beside" if device == "cuda" else "model"
    for explicit, where in (("beside", beside), ("device", beside), ("loader", "loader")):   # wins on every device
        got = hierarchy_place(load_config(None, [f"data.hierarchy={explicit}"]), torch.device(device))
        assert got.where == where and got.why.startswith(f"data.hierarchy={explicit}")
    former = hierarchy_place(load_config(None, ["data.hierarchy=device"]), torch.device(device)).line()
    assert former.endswith("(data.hierarchy=device; 'device' is the former name of 'beside', which it still means)")


def test_auto_hierarchy_asks_for_the_models_widest_knn(monkeypatch):
    """A stage of more neighbours than the Triton kNN takes (65 > 64) runs on the next backend; the line said
    knn=triton and put the hierarchy beside the step, where that kNN is not a device kernel."""
    monkeypatch.setattr(placement.backends.kernels, "use_triton", lambda kernel, device, atomics=False: True)
    cuda = torch.device("cuda")
    assert hierarchy_place(load_config(None), cuda).where == "beside"                    # k 8 and 16
    wide = hierarchy_place(load_config(None, ["model.neighbours=[8,16,16,16,65]"]), cuda)
    assert wide.where == "loader" and "fps=triton" in wide.why and "knn=triton" not in wide.why


@pytest.mark.parametrize("device, threads_free, expected", [("cuda", True, "beside"), ("cpu", True, "loader"),
                                                            ("cpu", False, "model")])
def test_evaluation_reads_the_same_setting_and_logs_the_same_way(monkeypatch, device, threads_free, expected):
    """Evaluation and predict decide by the same function: auto keeps their own default (beside the forward on
    CUDA, the thread that cuts the pieces when a core is free); an explicit data.hierarchy holds for them too."""
    monkeypatch.setattr(placement, "pipelined", lambda d: threads_free or d.type != "cpu")
    place = hierarchy_place(load_config(None), torch.device(device), evaluation=True)
    assert place.where == expected and place.line().startswith("point hierarchy: built ")
    loader = hierarchy_place(load_config(None, ["data.hierarchy=loader"]), torch.device(device), evaluation=True)
    assert loader.where == "loader"
    assert loader.line() == hierarchy_place(load_config(None, ["data.hierarchy=loader"]), torch.device(device)).line()


def test_the_hierarchy_beside_the_step_hands_over_the_same_batches_hierarchies_and_losses(tiny_root):
    """HierarchyAhead (a thread builds batch i + 1's hierarchy while batch i trains; on CUDA on a second
    stream) yields the loader's batches in their order, each with the hierarchy the model would build, so
    every step's loss equals the in-model one's."""
    from pointgeope.engine.ahead import HierarchyAhead
    from tests.engine.conftest import TINY

    net, loader = _loader(TINY + [f"data.root={tiny_root}", "data.hierarchy=device", "data.loop=2"])
    plain = list(loader)
    ahead = HierarchyAhead(loader, net.hierarchy_spec, torch.device("cpu"))
    assert len(ahead) == len(loader) >= 2
    net.eval()
    with torch.no_grad():
        for got, want in zip(ahead, plain, strict=True):
            assert torch.equal(got.pos, want.pos) and torch.equal(got.y, want.y)
            expected = net.hierarchy_spec(want.pos, want.ptr[1:])
            for field in ("samples", "neighbours", "down", "up"):
                for a, b in zip(getattr(got.hierarchy, field), getattr(expected, field), strict=True):
                    assert (a is None and b is None) or torch.equal(a, b), field
            torch.testing.assert_close(net(got.pos, got.x, got.ptr[1:], hierarchy=got.hierarchy),
                                       net(want.pos, want.x, want.ptr[1:]), atol=0, rtol=0)


class _Recorder:
    """A ``HierarchySpec`` that keeps every hierarchy it builds."""

    def __init__(self, spec, path=None):
        self.spec, self.built, self.path = spec, [], path

    def __call__(self, coord, offset):
        from pointgeope.model.kernel_choice import forced

        with forced(self.path) if self.path else contextlib.nullcontext():
            self.built.append(self.spec(coord, offset))
        return self.built[-1]

    def check(self, *args):
        return self.spec.check(*args)


def test_device_hierarchy_batches_carry_none_and_train_the_same(tiny_root, monkeypatch):
    """``data.hierarchy=loader`` builds the hierarchy in the loader with the CPU backends (numba FPS,
    pykdtree); ``device`` hands over the blocks alone and the model builds it with the device's kernels: on
    CUDA the Triton ones, run here in Triton's interpreter (``POINTGEOPE_KERNELS=triton``, which makes them
    the CPU's defaults; a spy proves the FPS kernel ran). The same FPS samples at every stage and the same
    neighbour sets, so the loss and gradients of a step agree up to float rounding (neighbours listed in
    another order are summed in another order: 1.4e-6 at most, measured with the attention and batch norm on
    the Triton kernels too). The hierarchy is built on the Triton path, the rest of the step on torch's: the
    interpreter's attention and norms (tested in tests/model) were most of the test's time."""
    pytest.importorskip("triton")
    from pointgeope.model import kernel_choice
    from pointgeope.model.ops import triton_fps
    from tests.engine.conftest import TINY

    if not kernel_choice.current().interpret:
        pytest.skip("TRITON_INTERPRET is not set (a CUDA machine): the Triton kernels cannot run on CPU tensors")
    runs = {}
    for place in ("loader", "device"):
        if place == "device":
            monkeypatch.setenv("POINTGEOPE_KERNELS", "triton")
            launches = []
            monkeypatch.setattr(triton_fps, "fps_triton", lambda *a, fn=triton_fps.fps_triton:
                                launches.append(1) or fn(*a))  # noqa: B023 - the loop's last iteration makes it
        # 100 voxels a sample: 25 points a cloud at stage 2, over its 8 neighbours
        net, batch = _first_batch(TINY + [f"data.root={tiny_root}", f"data.hierarchy={place}", "data.voxel_max=100"])
        # what the model builds itself, on the path POINTGEOPE_KERNELS chose (triton where place is device)
        net.hierarchy_spec = built = _Recorder(net.hierarchy_spec, kernel_choice.current().path)
        with kernel_choice.forced("torch"):
            loss = net(batch.pos, batch.x, batch.ptr[1:], hierarchy=getattr(batch, "hierarchy", None)).square().mean()
            loss.backward()
        runs[place] = (batch, built, loss.detach(), [p.grad.clone() for p in net.parameters()])
    (loader, from_loader, loss_l, grads_l), (device, from_device, loss_d, grads_d) = runs["loader"], runs["device"]
    assert getattr(device, "hierarchy", None) is None and loader.hierarchy is not None
    assert from_loader.built == [] and len(from_device.built) == 1 and launches   # once, where configured
    assert torch.equal(loader.pos, device.pos)
    want, got = loader.hierarchy, from_device.built[0]
    for g, w in zip(got.samples + got.offsets, want.samples + want.offsets, strict=True):
        assert (g is None and w is None) or torch.equal(g, w)
    for g, w in zip(got.neighbours + got.down[1:] + got.up, want.neighbours + want.down[1:] + want.up, strict=True):
        assert torch.equal(g.sort(1).values, w.sort(1).values)
    torch.testing.assert_close(loss_d, loss_l, rtol=1e-5, atol=0)
    for a, b in zip(grads_d, grads_l, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["sgd", "adamw"])
@pytest.mark.parametrize("pe,learnable", [("rope-mixed", False), ("geope", True)])
def test_positional_frequencies_get_no_weight_decay(name, pe, learnable):
    """With zero gradients a step is weight decay alone: every weight shrinks by ``lr * wd`` (SGD's
    ``grad + wd p``, AdamW's decoupled ``p (1 - lr wd)``) but the learnt frequencies do not; with
    ``optim.no_weight_decay=[]`` they shrink as well."""
    overrides = [f"optim.name={name}", "optim.lr=0.5", "optim.weight_decay=0.1",
                 *(["optim.momentum=0.0"] if name == "sgd" else []),   # AdamW has no momentum (refused)
                 f"model.pe={pe}", f"model.geope_learnable={str(learnable).lower()}",
                 "model.planes=[16,32]", "model.blocks=[1,1]", "model.strides=[1,4]", "model.neighbours=[8,8]",
                 "model.decoder_blocks=[1,1]"]
    for no_weight_decay, kept in (("[pe_frequencies]", True), ("[]", False)):
        cfg = load_config(None, overrides + [f"optim.no_weight_decay={no_weight_decay}"])
        net = build.model(cfg)
        freqs = net.frequency_parameters()
        assert len(freqs) == 4                                              # one per attention layer
        before = [p.detach().clone() for p in net.parameters()]
        opt = build.optimizer(cfg, net)
        for p in net.parameters():
            p.grad = torch.zeros_like(p)
        opt.step()
        ids = {id(p) for p in freqs}
        for p, old in zip(net.parameters(), before, strict=True):
            decayed = old * (1 - 0.5 * 0.1)
            torch.testing.assert_close(p.detach(), old if id(p) in ids and kept else decayed, atol=1e-7, rtol=1e-6)
        assert len(opt.param_groups) == (2 if kept else 1)


def test_a_network_without_learnt_frequencies_keeps_one_parameter_group():
    cfg = load_config(None, ["model.pe=pointrope", "model.planes=[16]", "model.blocks=[1]", "model.strides=[1]",
                             "model.neighbours=[8]", "model.decoder_blocks=[1]"])
    net = build.model(cfg)
    groups = build.optimizer(cfg, net).param_groups
    assert len(groups) == 1 and len(groups[0]["params"]) == len(list(net.parameters()))


def test_auto_takes_the_loader_when_the_device_kernels_fall_back(monkeypatch, kernel_failures_forgotten):
    """The check at training start: a hierarchy of two small clouds through the default (Triton) backends;
    a kernel that fails there falls back, and training builds its hierarchy in the loader instead. (The
    fixture forgets the failure even if an assertion stops the test partway.)"""
    pytest.importorskip("triton")
    from pointgeope.model.kernels import KernelFallbackWarning
    from pointgeope.model.ops import triton_knn
    from tests.model.test_kernels import COMPILE_ERROR, Failing

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")   # CPU tensors: the interpreter
    if device.type == "cpu":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("POINTGEOPE_KERNELS", "triton")
    spec = build.model(load_config(None, ["model.planes=[8, 16]", "model.blocks=[1, 1]", "model.strides=[1, 4]",
                                          "model.neighbours=[8, 8]", "model.decoder_blocks=[1, 1]"])).hierarchy_spec
    # two clouds of 40 points: 10 at stage 2, over its 8 neighbours (the interpreter's FPS goes with the points)
    assert placement.device_kernels_run(spec, device, points=80)
    monkeypatch.setattr(triton_knn, "_knn_kernel", Failing(COMPILE_ERROR))
    with pytest.warns(KernelFallbackWarning, match="knn"):
        assert not placement.device_kernels_run(spec, device, points=80)
    assert "knn" in kernel_failures_forgotten.failures()
