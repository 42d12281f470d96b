"""Tests of the attention layer of every preset on pointgeope/model/fused_attention.py's Triton path (CPU
tensors under Triton's interpreter): against the torch path and the float64 layer reference of
test_attention.py, on packed batches of tiny clouds whose kNN repeats neighbours; bf16 autocast's accuracy; the
compiled kernels on CUDA. The ops themselves: test_fused_attention.py."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")          # imported before TRITON_INTERPRET is set (test_fused_attention.py says why)
from pointgeope.model import fused_attention
from pointgeope.model.attention import PositionalEncoding
from tests.model.fused_inputs import cuda, packed
from tests.model.test_attention import PRESET_NAMES, _layer, _reference

# Triton's interpreter and the Triton path for this module's tests only (tests/model/conftest.py)
pytestmark = pytest.mark.usefixtures("interpreted")


def _layer_inputs(channels=16, k=8):
    coord, idx = packed(sizes=(5, 2, 9), k=k)
    feat = torch.randn(coord.shape[0], channels, generator=torch.Generator().manual_seed(3))
    return coord, feat, idx


def _run(layer, coord, feat, idx, path, monkeypatch, autocast=None):
    """Output, input gradient and parameter gradients of ``layer`` on the ``path`` kernels."""
    monkeypatch.setenv("POINTGEOPE_KERNELS", path)
    layer.zero_grad(set_to_none=True)
    x = feat.clone().requires_grad_()
    with torch.autocast("cpu", dtype=autocast or torch.float32, enabled=autocast is not None):
        out = layer(coord, x, idx)
    out.float().square().sum().backward()
    return out.detach(), x.grad, {n: p.grad for n, p in layer.named_parameters() if p.grad is not None}


# The kernels each encoding is meant to run on the Triton path (fused_attention's docstring), by the names of
# triton_attention's kernels (each launched as ``<name>_forward`` and ``<name>_backward``).
FUSED = {"rpe": ("relation", "aggregate"), "none": ("relation", "aggregate"), "ape": ("relation", "aggregate"),
         "geope": ("frame", "aggregate"), "geope+rpe": ("frame", "aggregate"),
         "lingeope": ("linear", "aggregate"), "lingeope+rpe": ("linear", "aggregate"),
         "rope3d": ("aggregate",), "rope3d+rpe": ("aggregate",), "rope-mixed": ("aggregate",),
         "pointrope": ("aggregate",)}
ENCODINGS = [(name, {}, FUSED[name]) for name in PRESET_NAMES] + [
    (PositionalEncoding("geope", True, "geope"), {}, ("frame",)),     # a geope value term: relation only
    ("geope", {"geope_learnable": True}, ("aggregate",)),              # learnt frequencies: torch relation
    ("lingeope", {"geope_learnable": True}, ("aggregate",))]
KERNELS = ("relation", "frame", "linear", "aggregate")


class _LaunchSpy:
    """Stands for one kernel of ``triton_attention``: ``kernel[grid](...)`` records the kernel's name, then
    launches it."""

    def __init__(self, kernel, name: str, launches: list[str]):
        self.kernel, self.name, self.launches = kernel, name, launches

    def __getitem__(self, grid):
        launch = self.kernel[grid]

        def run(*args, **meta):
            self.launches.append(self.name)
            return launch(*args, **meta)

        return run


@pytest.fixture
def launches(monkeypatch) -> list[str]:
    """Names of the attention kernels launched during the test, in order (every kernel of the module the
    fused path takes them from, as decorated now: the interpreter's)."""
    module, names = fused_attention.triton_kernels(), []
    for kernel in KERNELS:
        for way in ("forward", "backward"):
            name = f"{kernel}_{way}"
            monkeypatch.setattr(module, name, _LaunchSpy(getattr(module, name), name, names))
    return names


@pytest.mark.parametrize("pe,options,fused", ENCODINGS, ids=lambda v: str(v) if isinstance(v, str) else None)
def test_layer_on_the_triton_path_equals_the_torch_path_and_the_float64_reference(pe, options, fused, monkeypatch,
                                                                                 launches, torch_batch_norm):
    """Every kernel the encoding is meant to use is launched, once forward and once backward, on the Triton
    path and on it only (a relation gone back to torch would fail here, not only be slower); the outputs
    and gradients equal the torch path's and the float64 layer reference. Batch norm stays on torch's path
    on both (``torch_batch_norm``): only the attention's kernels differ."""
    coord, feat, idx = _layer_inputs()
    layer = _layer(pe, **options)
    want = sorted(f"{kernel}_{way}" for kernel in fused for way in ("forward", "backward"))
    fused_run = _run(layer, coord, feat, idx, "triton", monkeypatch)
    assert sorted(launches) == want
    del launches[:]
    torch_run = _run(layer, coord, feat, idx, "torch", monkeypatch)
    assert launches == []
    torch.testing.assert_close(fused_run[0], torch_run[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fused_run[0].double(), _reference(layer, coord, feat, idx), rtol=1e-4, atol=1e-4)
    layer.train()                                              # batch statistics, gradients of every parameter
    fused_run, torch_run = (_run(layer, coord, feat, idx, p, monkeypatch) for p in ("triton", "torch"))
    assert sorted(launches) == want
    torch.testing.assert_close(fused_run[1], torch_run[1], rtol=1e-4, atol=1e-5)
    assert fused_run[2].keys() == torch_run[2].keys()
    for name, grad in fused_run[2].items():          # a bias's gradient sums every pair, with cancellation
        torch.testing.assert_close(grad, torch_run[2][name], rtol=1e-4, atol=5e-5, msg=name)


def _bf16_errors(pe: str, path: str, monkeypatch) -> tuple[float, float]:
    """Relative errors (norm of the difference / norm) of the layer's output and input gradient under
    bfloat16 autocast on ``path``, against the float64 layer; eval mode and a fixed linear loss, so that the
    gradient's error is the backward's own."""
    coord, idx = packed(sizes=(30, 10, 20), k=8)
    feat = torch.randn(coord.shape[0], 16, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    g = torch.randn(coord.shape[0], 16, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    layer, runs = _layer(pe).eval().double(), []
    for dtype, choice in ((torch.float64, "torch"), (torch.float32, path)):
        monkeypatch.setenv("POINTGEOPE_KERNELS", choice)
        x = feat.to(dtype, copy=True).requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.float32):
            out = layer.to(dtype)(coord.to(dtype), x, idx)
        (out.double() * g).sum().backward()
        runs.append((out.detach().double(), x.grad.double()))
    assert out.dtype == torch.bfloat16                         # autocast ran
    (exact, exact_grad), (half, half_grad) = runs
    return ((half - exact).norm() / exact.norm()).item(), ((half_grad - exact_grad).norm() / exact_grad.norm()).item()


def test_layer_under_bf16_autocast_is_as_accurate_as_rpe_on_the_torch_kernels(monkeypatch):
    """The fused path's bf16 error against the float64 layer, measured against the published RPE layer's
    own bf16 error on the torch kernels: the output's at most 1.5 times it (measured 1.0-1.1x), the input
    gradient's at most 2 times (measured 1.0-1.6x: fewer elements, a noisier ratio)."""
    base = _bf16_errors("rpe", "torch", monkeypatch)
    assert 1e-3 < base[0] < 1e-2, base                     # bf16's error (float32 gives ~1e-7)
    for pe in ("rpe", "geope", "lingeope"):
        fused = _bf16_errors(pe, "triton", monkeypatch)
        assert fused[0] <= 1.5 * base[0] and fused[1] <= 2 * base[1], (pe, fused, base)


@cuda
@pytest.mark.parametrize("pe", ["rpe", "geope", "lingeope", "none", "ape"])
@pytest.mark.parametrize("amp", [None, torch.bfloat16])
def test_layer_on_cuda_triton_equals_torch_kernels(pe, amp, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    coord, idx = packed(sizes=(200, 3, 50), k=16)
    feat = torch.randn(coord.shape[0], 32, generator=torch.Generator().manual_seed(4))
    torch.manual_seed(0)
    layer = fused_attention_layer(pe).cuda().train()
    runs = []
    for path in ("triton", "torch"):
        monkeypatch.setenv("POINTGEOPE_KERNELS", path)
        layer.zero_grad(set_to_none=True)
        x = feat.cuda().requires_grad_()
        with torch.autocast("cuda", dtype=amp or torch.float32, enabled=amp is not None):
            out = layer(coord.cuda(), x, idx.cuda())
        out.float().square().sum().backward()
        runs.append((out.float(), x.grad))
    tol = 1e-4 if amp is None else 3e-2
    for a, b in zip(*runs, strict=True):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol * b.abs().max().item())


def fused_attention_layer(pe):
    from pointgeope.model.attention import PointTransformerLayer
    return PointTransformerLayer(32, share_planes=8, neighbours=16, pe=pe)


@pytest.mark.parametrize("pe", ["rpe", "geope", "lingeope"])
def test_an_int32_knn_runs_on_the_triton_path_as_int64(pe, monkeypatch, launches, torch_batch_norm):
    """A kNN of one's own in int32: the layer's torch path took it, while the kernels' argument check refused it
    ("expected idx ... int64"), so the same call failed on CUDA's default path only."""
    coord, feat, idx = _layer_inputs()
    layer = _layer(pe)
    want = _run(layer, coord, feat, idx, "triton", monkeypatch)
    del launches[:]
    got = _run(layer, coord, feat, idx.int(), "triton", monkeypatch)
    assert launches                                            # the kernels ran, not the torch path
    for a, b in zip(got[:2], want[:2], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
