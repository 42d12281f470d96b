"""Tests of the buffers pointgeope/model/norm.py hands its Triton kernels uninitialised (``torch.empty``: no fill
launched): the statistics ``(5, C)``, the partials ``(2, T, C)`` and the backward's sums ``(2, C)``. Each is
stored in full by the kernel that fills it before any kernel reads it, or not read at all (fixed statistics and
no parameter gradient: the sums), so whatever memory they get, the results are the same bits. Checked by the
reducing kernels' stores (the last program's of each channel block) on buffers of NaN, and by every path of the
modules (training and eval, with and without ReLU, float32, float64 and bfloat16 rows, frozen parameters, a padded
batch's real rows) with every ``torch.empty`` of norm.py filled with NaN, against the same module on fresh memory,
under the interpreter."""
from __future__ import annotations

import contextlib
import copy
import warnings

import pytest
import torch

pytest.importorskip("triton")          # imported before TRITON_INTERPRET is set (test_fused_attention.py says why)
from pointgeope.model import kernels, norm, norm_tickets, padding
from tests.model.test_kernels import Failing


def _tiled(channels: int, f64: bool, partials: int) -> tuple[int, int, int, int, int]:
    """(rows, ROWS, BLOCK_R, BLOCK_T, BLOCK_C) for ``partials`` programs along the rows at ``norm.tiles``, the
    last one short of its ``ROWS`` rows."""
    block_r, block_c, block_t = norm.tiles(channels, f64)
    return partials * block_r - block_r // 2, block_r, block_r, block_t, block_c


# 3 channels in one masked tile; 70 in two tiles of 64, the second masked, each with its own ticket (three channel
# tiles, 130 channels, were the same path once more: test_norm_launches.py runs three tiles through the module)
SHAPES = [(3, 5), (70, 67)]


@pytest.mark.parametrize("channels, partials", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_grad_sums_stores_both_sums_of_every_channel(interpreted, channels, partials, dtype):
    """Channels no multiple of the tile and two channel tiles, 67 partials (more than two steps of the last
    program's reduction): each of the ``2 C`` sums (``sum g``, ``sum g (x - mean) invstd``, no ReLU) is the float64
    sum of the definition, none left as the buffer held it (NaN), the partials' buffer NaN before as well."""
    f64 = dtype == torch.float64
    rows, per, block_r, block_t, block_c = _tiled(channels, f64, partials)
    g = torch.Generator().manual_seed(0)
    x, up = torch.randn(rows, channels, generator=g, dtype=dtype), torch.randn(rows, channels, generator=g, dtype=dtype)
    stats = torch.randn(5, channels, generator=g, dtype=dtype)
    stats[1] = stats[1].abs() + 0.5
    scratch = torch.full((2, partials, channels), float("nan"), dtype=dtype)
    sums = torch.full((2, channels), float("nan"), dtype=dtype)
    with norm_tickets.taken(x.device, -(-channels // block_c)) as tickets:
        norm._launch(norm.triton_kernels().grad_sums, (partials, -(-channels // block_c)), x, up, x, stats,
                     scratch[0], scratch[1], sums, tickets, rows, channels, partials, per, RELU=False, RESIDUAL=False,
                     F64=f64, BLOCK_R=block_r, BLOCK_T=block_t, BLOCK_C=block_c, device=x.device)   # x: masks, unread
    assert not sums.isnan().any()
    x64, up64, s64 = x.double(), up.double(), stats.double()
    want = torch.stack([up64.sum(0), (up64 * (x64 - s64[0]) * s64[1]).sum(0)])
    tol = 1e-10 if f64 else 1e-4
    torch.testing.assert_close(sums.double(), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("channels, partials", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_statistics_stores_every_row_of_every_channel(interpreted, channels, partials, dtype):
    """The training statistics into a ``(5, C)`` buffer of NaN (the partials' too): mean, ``1 / sqrt(var + eps)``,
    scale ``w invstd``, shift ``b - mean scale`` and the unbiased variance of every channel, as float64 torch
    computes them from the rows."""
    f64 = dtype == torch.float64
    rows, per, block_r, block_t, block_c = _tiled(channels, f64, partials)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(rows, channels, generator=g, dtype=dtype) * 3 + 2
    w, b = torch.rand(channels, generator=g, dtype=dtype) + 0.5, torch.randn(channels, generator=g, dtype=dtype)
    stats = torch.full((5, channels), float("nan"), dtype=dtype)
    scratch = torch.full((2, partials, channels), float("nan"), dtype=dtype)
    eps = 1e-5
    with norm_tickets.taken(x.device, -(-channels // block_c)) as tickets:
        norm._launch(norm.triton_kernels().statistics, (partials, -(-channels // block_c)), x, scratch[0], scratch[1],
                     w, b, stats, stats, tickets, rows, channels, partials, per, eps, PREFIX=False, F64=f64,
                     BLOCK_R=block_r, BLOCK_T=block_t, BLOCK_C=block_c, device=x.device)
    assert not stats.isnan().any()
    x64 = x.double()
    mean, var = x64.mean(0), x64.var(0, unbiased=False)
    invstd = 1 / torch.sqrt(var + eps)
    want = torch.stack([mean, invstd, w.double() * invstd, b.double() - mean * w.double() * invstd, x64.var(0)])
    tol = 1e-10 if f64 else 1e-5
    torch.testing.assert_close(stats.double(), want, rtol=tol, atol=tol)


class _Poisoned:
    """norm.py's ``torch`` with ``empty`` giving NaN-filled floating point memory (``made`` counts them)."""

    def __init__(self):
        self.made = 0

    def __getattr__(self, name):
        return getattr(torch, name)

    def empty(self, *size, **kwargs):
        out = torch.empty(*size, **kwargs)
        self.made += 1
        return out.fill_(float("nan")) if out.is_floating_point() else out


def _step(module: norm.BatchNorm, x: torch.Tensor, g: torch.Tensor, valid: int | None) -> list[torch.Tensor]:
    """Output, the gradients that are asked for and the module's buffers after one forward and backward."""
    x = x.detach().requires_grad_()
    rows = padding.batch_rows({x.shape[0]: torch.tensor(valid)}) if valid is not None else contextlib.nullcontext()
    with rows:
        y = module(x)
    y.backward(g.to(y.dtype))
    grads = [t.grad for t in (x, module.weight, module.bias) if t.requires_grad]
    return [y.detach(), *grads, *module.buffers()]


CASES = [(relu, train, dtype, False, None) for relu in (True, False) for train in (True, False)
         for dtype in (torch.float32, torch.float64, torch.bfloat16)]
CASES += [(relu, False, torch.float32, True, None) for relu in (True, False)]      # no sums: the finish not run
CASES += [(relu, True, torch.float32, False, 41) for relu in (True, False)]        # a padded batch's real rows


@pytest.mark.parametrize("relu, train, dtype, frozen, valid", CASES)
def test_uninitialised_buffers_change_no_bit(interpreted, relu, train, dtype, frozen, valid):
    g = torch.Generator().manual_seed(3)
    cls = norm.BatchNormReLU if relu else norm.BatchNorm
    module = cls(70).train(train)
    module = module.double() if dtype == torch.float64 else module
    with torch.no_grad():
        module.weight.copy_(torch.rand(70, generator=g) + 0.5)
        module.bias.copy_(torch.randn(70, generator=g))
        module.running_mean.copy_(torch.randn(70, generator=g))
        module.running_var.copy_(torch.rand(70, generator=g) + 0.5)
    module.requires_grad_(not frozen)
    x = (torch.randn(77, 70, generator=g, dtype=torch.float64) * 2 + 0.5).to(dtype)
    up = torch.randn(77, 70, generator=g, dtype=torch.float64)
    twin = copy.deepcopy(module)
    poisoned = _Poisoned()
    with warnings.catch_warnings():
        warnings.simplefilter("error", kernels.KernelFallbackWarning)          # the kernels ran, no fallback
        want = _step(twin, x, up, valid)
        interpreted.setattr(norm, "torch", poisoned)
        got = _step(module, x, up, valid)
    assert poisoned.made >= 2                      # statistics and the output's or sums' buffers came from here
    assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("momentum", [0.1, None])
def test_the_kernel_path_counts_batches_as_torch(interpreted, relu, momentum, device):
    """``num_batches_tracked`` (the kernel adds the batch in ``normalize``, or the module with ``momentum=None``,
    whose step is read from it first): after three training batches and an evaluation, the state dict is torch's
    ``BatchNorm1d``'s (keys, the count exactly, the running buffers to rounding). On CUDA the compiled kernels."""
    if device == "cuda":
        interpreted.setenv("TRITON_INTERPRET", "0")
    g = torch.Generator().manual_seed(4)
    ours = (norm.BatchNormReLU if relu else norm.BatchNorm)(20, momentum=momentum).to(device)
    theirs = torch.nn.BatchNorm1d(20, momentum=momentum).to(device)
    for train in (True, True, True, False):
        ours.train(train), theirs.train(train)
        x = (torch.randn(50, 20, generator=g) * 2 + 1).to(device)
        with warnings.catch_warnings():
            warnings.simplefilter("error", kernels.KernelFallbackWarning)
            ours(x)
        theirs(x)
    got, want = ours.state_dict(), theirs.state_dict()
    assert list(got) == list(want)
    assert got["num_batches_tracked"].dtype == torch.int64 and int(got["num_batches_tracked"]) == 3
    for name in ("running_mean", "running_var"):
        torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=1e-6)


def test_a_failing_last_kernel_counts_the_batch_once(interpreted):
    """``normalize`` fails (the statistics ran): the torch path answers and counts the batch, once."""
    interpreted.setattr(norm.triton_kernels(), "normalize", Failing(RuntimeError("PassManager::run failed (injected)")))
    module = norm.BatchNormReLU(7).train()
    with pytest.warns(kernels.KernelFallbackWarning, match="batch_norm_relu"):
        module(torch.randn(40, 7))
    assert int(module.num_batches_tracked) == 1
    module(torch.randn(40, 7))                                      # the torch path from now on
    assert int(module.num_batches_tracked) == 2
