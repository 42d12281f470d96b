"""Tests of how many Triton kernels pointgeope/model/norm.py launches a call (in the eager step each launch is host
time: ``docs/gpu.md``), counted at Triton's launch point under the interpreter, with the results still torch's
``BatchNorm1d`` (and ``relu``); and of the int32 tickets (norm_tickets.py) by which the last program of a reducing
launch finishes its partials: left at zero after every launch, zeroed in place when a launch stops part way, and
never freed (a captured CUDA graph keeps their address)."""
from __future__ import annotations

import contextlib
import gc
import warnings
import weakref

import pytest
import torch

pytest.importorskip("triton")          # imported before TRITON_INTERPRET is set (test_fused_attention.py says why)
from pointgeope.model import kernels, norm, norm_tickets, padding


def _pair(relu: bool, channels: int, train: bool, frozen: bool = False):
    """The module under test and torch's ``BatchNorm1d`` with the same random parameters and buffers."""
    g = torch.Generator().manual_seed(5)
    ours = (norm.BatchNormReLU if relu else norm.BatchNorm)(channels).train(train)
    with torch.no_grad():
        ours.weight.copy_(torch.rand(channels, generator=g) + 0.5)
        ours.bias.copy_(torch.randn(channels, generator=g))
        ours.running_mean.copy_(torch.randn(channels, generator=g))
        ours.running_var.copy_(torch.rand(channels, generator=g) + 0.5)
    ref = torch.nn.BatchNorm1d(channels).train(train)
    ref.load_state_dict(ours.state_dict())
    ours.requires_grad_(not frozen), ref.requires_grad_(not frozen)
    return ours, ref


def _forward_backward(module, x, g, relu_after=False, valid=None, launched=None):
    """Output, gradients asked for and the Triton launches of the forward and of the backward (where counted)."""
    x = x.detach().requires_grad_()
    rows = padding.batch_rows({x.shape[0]: torch.tensor(valid)}) if valid is not None else contextlib.nullcontext()
    with rows:
        y = module(x)
    y = torch.relu(y) if relu_after else y
    forward = list(launched) if launched is not None else None
    y.backward(g)
    backward = launched[len(forward):] if launched is not None else None
    grads = [t.grad for t in (x, module.weight, module.bias) if t.requires_grad]
    return [y.detach(), *grads], forward, backward


# (relu, train, frozen) -> (forward launches, backward launches)
COUNTS = {(True, True, False): (2, 2), (False, True, False): (2, 2), (True, False, False): (1, 2),
          (False, False, False): (1, 2), (True, False, True): (1, 1), (True, True, True): (2, 2)}


@pytest.mark.parametrize("relu, train, frozen", list(COUNTS))
def test_a_call_launches_two_kernels_forward_in_training_one_in_eval_and_two_backward(launched, relu, train, frozen):
    """Training: the statistics (partials and their reduction, one launch) and the normalisation; backward the
    sums (partials and their reduction, one launch) and ``dx``. Eval: the normalisation alone, its scale and
    shift made from the running buffers (and stored for the backward); backward one kernel fewer where no
    parameter asks for a gradient and the statistics are fixed. 130 channels (three channel blocks), 100 rows (four
    partials, the last short): the count does not grow with the rows (many partials, several steps of their
    reduction: test_norm_buffers.py). The results are torch's ``BatchNorm1d`` (and ``relu``)'s."""
    ours, ref = _pair(relu, 130, train, frozen)
    g = torch.Generator().manual_seed(6)
    x, up = torch.randn(100, 130, generator=g) * 2 + 1, torch.randn(100, 130, generator=g)
    with warnings.catch_warnings():
        warnings.simplefilter("error", kernels.KernelFallbackWarning)
        got, forward, backward = _forward_backward(ours, x, up, launched=launched)
    want, _, _ = _forward_backward(ref, x, up, relu_after=relu)
    assert (len(forward), len(backward)) == COUNTS[relu, train, frozen], (forward, backward)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-4 * max(1.0, float(b.abs().max())))
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(getattr(ours, name), getattr(ref, name), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("relu", [True, False])
def test_a_padded_batch_launches_two_kernels_each_way(launched, relu):
    """A padded batch's real rows (the CUDA-graph step's case): two launches each way, the statistics those of
    the first ``valid`` rows (torch's ``BatchNorm1d`` on them, the padding's rows given no gradient, as a loss
    that does not read them; their ``dx``, of the fixed statistics, not compared here)."""
    ours, ref = _pair(relu, 70, True)
    g = torch.Generator().manual_seed(7)
    x, up = torch.randn(300, 70, generator=g) * 2 + 1, torch.randn(300, 70, generator=g)
    valid = 250                     # within the eighth of ten partials of 32 rows
    up[valid:] = 0
    got, forward, backward = _forward_backward(ours, x, up, valid=valid, launched=launched)
    want, _, _ = _forward_backward(ref, x[:valid], up[:valid], relu_after=relu)
    assert (len(forward), len(backward)) == (2, 2), (forward, backward)
    for a, b in zip([got[0][:valid], got[1][:valid], *got[2:]], want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-4 * max(1.0, float(b.abs().max())))


def test_the_tickets_are_left_at_zero(interpreted):
    """After a training forward and backward of three channel blocks, every ticket is 0 again: the next launch's
    starting point (a ticket left counted would make an earlier program take the partials as all stored)."""
    module = norm.BatchNormReLU(130).train()
    x = torch.randn(100, 130, requires_grad=True)
    module(x).sum().backward()
    with norm_tickets.taken(x.device, 3) as tickets:
        assert tickets.dtype == torch.int32 and int(tickets.count_nonzero()) == 0


class _StoppedPartWay:
    """Stands in for the statistics kernel: launches all its programs but the last row of partials (their tickets
    taken, none the last), then raises, as a launch stopped part way."""

    def __init__(self, kernel):
        self.kernel = kernel

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.kernel[(grid[0] - 1, *grid[1:])](*args, **kwargs)
            raise RuntimeError("stopped part way (injected)")
        return launch


def test_a_launch_stopped_part_way_leaves_no_ticket_counted(interpreted):
    """The statistics launch stops after all but its last row of programs took their tickets: the torch path
    answers (a fallback), and the next call on the kernels (the failure forgotten) has its statistics right:
    the tickets it found were fresh zeros, not the stopped launch's counts."""
    k = norm.triton_kernels()
    ours, ref = _pair(True, 70, True)
    x = torch.randn(300, 70, generator=torch.Generator().manual_seed(8)) * 2 + 1
    interpreted.setattr(k, "statistics", _StoppedPartWay(k.statistics))
    with pytest.warns(kernels.KernelFallbackWarning, match="batch_norm_relu"):
        torch.testing.assert_close(ours(x), torch.relu(ref(x)), rtol=1e-5, atol=1e-5)
    interpreted.undo()              # the kernel back, the interpreter and the Triton path again
    interpreted.setenv("TRITON_INTERPRET", "1")
    interpreted.setenv("POINTGEOPE_KERNELS", "triton")
    kernels.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error", kernels.KernelFallbackWarning)
        y = ours(x)
    torch.testing.assert_close(y, torch.relu(ref(x)), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.running_var, ref.running_var, rtol=1e-6, atol=1e-6)


def test_taken_zeroes_in_place_the_tickets_of_a_launch_that_raised(interpreted):
    """A launch raising inside :func:`norm_tickets.taken` (its tickets maybe counted: here one set to 3): the
    error goes on, and the next ``taken`` hands the same buffer, zeroed (a CUDA graph recorded with it still
    launches on its address: a buffer dropped and made anew would leave the graph counting from freed memory)."""
    device = torch.device("cpu")
    with pytest.raises(KeyboardInterrupt), norm_tickets.taken(device, 2) as tickets:
        tickets[1] = 3
        raise KeyboardInterrupt
    with norm_tickets.taken(device, 2) as again:
        assert again is tickets
        assert int(again.count_nonzero()) == 0 and again.numel() >= 2


def test_an_outgrown_ticket_buffer_is_kept(interpreted):
    """More channel blocks than the buffer holds make a larger one; the old one stays alive (nothing else is
    handed its memory while a captured graph may still count tickets there) and the new one is zeroed."""
    device = torch.device("cpu")
    with norm_tickets.taken(device, 2) as tickets:
        old = weakref.ref(tickets)
        size = tickets.numel()
    del tickets
    with norm_tickets.taken(device, size + 1) as larger:
        assert larger.numel() > size and int(larger.count_nonzero()) == 0
    gc.collect()
    assert old() is not None
