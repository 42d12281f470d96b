"""Tests of pointgeope/model/first_order.py: the network's memory-lean Functions (rotations, RoPE, the Triton
attention and batch-norm kernels, the padded batch's norm) refuse second derivatives by name, with the way that
works, instead of a silently wrong result, and keep their first order; the way they name (positions that require
grad: plain autograd; the torch path) gives exact second derivatives."""
from __future__ import annotations

import pytest
import torch

from pointgeope.model.first_order import first_order_only
from pointgeope.model.network import PointTransformerSeg
from tests.model.linear_gradcheck import LINEAR
from tests.model.test_network_gradients import TWO_STAGES


class _Square(torch.autograd.Function):
    """``x^2`` whose backward ``2 x g`` would be differentiable: marked, it must still refuse a second pass."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    @first_order_only("do it another way")
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * x * g


def test_marked_backward_is_unchanged_once_and_refuses_twice_by_name():
    x = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64, requires_grad=True)
    g, = torch.autograd.grad(_Square.apply(x).sum(), x)
    torch.testing.assert_close(g, 2 * x.detach())
    g, = torch.autograd.grad(_Square.apply(x).sum(), x, create_graph=True)   # a first order under create_graph
    torch.testing.assert_close(g.detach(), 2 * x.detach())
    with pytest.raises(RuntimeError, match=r"second derivatives \(create_graph=True\) through pointgeope's _Square "
                                           r"are not implemented \(its backward is first-order only\): do it another"):
        torch.autograd.grad(g.sum(), x)


def _penalty(model, coord, feat):
    out = model(coord, feat, torch.tensor([5, 16]))
    g, = torch.autograd.grad(out.pow(2).sum(), feat, create_graph=True)
    return torch.autograd.grad(g.pow(2).sum(), feat)[0]


def _tiny(pe: str):
    torch.manual_seed(0)
    model = PointTransformerSeg(pe=pe, **TWO_STAGES).double().eval()
    g = torch.Generator().manual_seed(1)
    coord = torch.rand(16, 3, generator=g, dtype=torch.float64)
    return model, coord, torch.rand(16, 3, generator=g, dtype=torch.float64).requires_grad_()


@pytest.mark.parametrize("pe,function", [("lingeope", "_RelativeFrame"), ("rope3d", "_PointPairFrame")])
def test_network_rotations_refuse_second_derivatives_and_name_the_way_that_works(pe, function):
    """Coordinates as data take the memory-lean Functions: a gradient penalty in the features failed on an
    internal op's "out=" message; it is refused by name. With `coord.requires_grad_()` (the way the message
    names) the network runs under plain autograd and its second derivatives pass `gradgradcheck` (in `fast_mode`:
    a wrong second derivative anywhere shows in `v^T H u` for its random `u, v` as in the full matrix, which
    would take 2 network passes per element of the features and of the logits' gradient)."""
    model, coord, feat = _tiny(pe)
    with pytest.raises(RuntimeError, match=rf"through pointgeope's {function} are not implemented .* make the "
                                           r"positions require grad \(coord.requires_grad_\(\)\)"):
        _penalty(model, coord, feat)
    coord.requires_grad_()
    assert torch.autograd.gradgradcheck(lambda f: model(coord, f, torch.tensor([5, 16])), (feat,),
                                        fast_mode=True)


def test_standard_geope_in_torch_ops_keeps_exact_second_derivatives():
    """`_QueryFrame`'s backward off the GPU kernels is torch ops on constant tables: differentiated, it is exact
    (`exact=`), and is not refused (`fast_mode`: the test above says why)."""
    model, coord, feat = _tiny("geope")
    assert torch.autograd.gradgradcheck(lambda f: model(coord, f, torch.tensor([5, 16])), (feat,),
                                        fast_mode=True)


@pytest.mark.parametrize("op", ["aggregate", "relation"])
def test_triton_attention_kernels_refuse_second_derivatives(op, interpreted):
    """The fused kernels (Triton's interpreter on the CPU) have a kernel for a backward: refused by name."""
    from pointgeope.model import fused_attention
    from tests.model.fused_inputs import packed
    _, idx = packed((3, 6), k=4)
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(idx.shape[0], 4, 4, generator=gen).requires_grad_()
    v = torch.randn(idx.shape[0], 8, generator=gen).requires_grad_()
    if op == "aggregate":
        y, function = fused_attention.aggregate(w, v, idx, None, 2), "_Aggregate"
    else:
        y, function = fused_attention.relation(v, idx, v.flip(0)), "_Relation"
    first, = torch.autograd.grad(y.pow(2).sum(), v, create_graph=True)
    with pytest.raises(RuntimeError, match=rf"through pointgeope's {function} are not implemented .* "
                                           r"POINTGEOPE_KERNELS=torch"):
        torch.autograd.grad(first.sum(), v)


def test_pointrope_names_that_its_grid_angles_have_no_plain_autograd_way():
    """PointROPE's angles are grid cells (made without a graph): the message advised coord.requires_grad_(),
    after which the same error came back."""
    model, coord, feat = _tiny("pointrope")
    coord.requires_grad_()
    with pytest.raises(RuntimeError, match=r"_PointPairFrame are not implemented .* but PointROPE's "
                                           r"\(pe='pointrope'\) angles are grid cells, .*use another encoding"):
        _penalty(model, coord, feat)


@pytest.mark.parametrize("layout", ["blocks", "pairs"])
def test_token_rotations_have_exact_second_derivatives(layout):
    """PTv3's per-token rotations (``turn_tokens``: GeoPE's blocks, RoPE's and PointROPE's channel pairs) on
    constant tables: their backward is the inverse rotation as the same Function, so a gradient penalty
    differentiates it; it was refused (first-order only)."""
    from pointgeope.model.qk_kernels import block_tables, half_tables, swap_matrix, turn_tokens

    g = torch.Generator().manual_seed(2)
    x = torch.rand(2, 2, 5, 8, generator=g, dtype=torch.float64).requires_grad_()
    pos = torch.rand(2, 5, 3, generator=g, dtype=torch.float64)
    if layout == "blocks":
        tables, swap = block_tables(pos, torch.tensor([1.0, 2.0], dtype=torch.float64), 8), None
    else:
        first, second = torch.tensor([0, 2, 4]), torch.tensor([1, 3, 5])
        tables = half_tables(pos * 3.0, first, second, 8)
        swap = swap_matrix(first, second, 8).double()
    # linear in x: linear_gradcheck.py's fast mode (the backward too: linear in x and in the incoming gradient)
    assert torch.autograd.gradcheck(lambda v: turn_tokens(v, tables, swap), (x,), **LINEAR)
    assert torch.autograd.gradgradcheck(lambda v: turn_tokens(v, tables, swap), (x,), **LINEAR)


# The kernels' Functions of batch norm and of GeoPE's fused relations: float64 inputs on CPU tensors, the way
# each names (the torch path) checked to be twice differentiable.
KERNEL_REFUSAL = r"through pointgeope's {} are not implemented \(its backward is first-order only\): set " \
                 r"POINTGEOPE_KERNELS=torch \(torch's ops, twice differentiable\)"


def _refused_second_order(fn, inputs: list[torch.Tensor], function: str, way: str = KERNEL_REFUSAL):
    """The first-order gradients of ``sum(fn(*inputs)^2)`` taken with ``create_graph=True`` (returned), once
    checked that a second derivative of them is refused by ``function``'s name and the way that works."""
    first = torch.autograd.grad(fn(*inputs).pow(2).sum(), inputs, create_graph=True)
    with pytest.raises(RuntimeError, match=way.format(function)):
        torch.autograd.grad(sum(g.sum() for g in first), inputs)
    return [g.detach() for g in first]


def _reference_grads(fn, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    return list(torch.autograd.grad(fn(*leaves).pow(2).sum(), leaves))


def _norm_inputs():
    g = torch.Generator().manual_seed(6)     # (the draw of test_norm.py's gradcheck: no pre-activation at the kink)
    x = torch.randn(23, 5, generator=g, dtype=torch.float64).requires_grad_()
    w = (torch.rand(5, generator=g, dtype=torch.float64) + 0.5).requires_grad_()
    b = torch.randn(5, generator=g, dtype=torch.float64).requires_grad_()
    return [x, w, b]


@pytest.mark.parametrize("relu", [True, False])
def test_fused_batch_norm_refuses_second_derivatives_by_name(interpreted, relu):
    """``_FusedBatchNorm`` (the Triton kernels, interpreted): a gradient penalty is refused by name with
    POINTGEOPE_KERNELS=torch; the first-order gradients taken under ``create_graph`` equal torch's batch norm's;
    on the torch path the way names, the second derivatives pass ``gradgradcheck``."""
    from pointgeope.model import norm

    op = norm.batch_norm_relu if relu else norm.batch_norm
    kernel = norm.KERNEL if relu else norm.PLAIN_KERNEL
    kernel.ran.clear()
    inputs = _norm_inputs()
    got = _refused_second_order(op, inputs, "_FusedBatchNorm")
    assert kernel.ran == {"triton"}

    def torchs(x, w, b):
        y = torch.nn.functional.batch_norm(x, None, None, w, b, True)
        return torch.relu(y) if relu else y
    for a, want in zip(got, _reference_grads(torchs, inputs), strict=True):
        torch.testing.assert_close(a, want, rtol=1e-10, atol=1e-12)
    interpreted.setenv("POINTGEOPE_KERNELS", "torch")
    assert torch.autograd.gradgradcheck(op, inputs)


def test_prefix_batch_norm_refuses_second_derivatives_by_name():
    """``_PrefixBatchNorm`` (a padded batch's statistics over its real rows, torch ops with a hand-written
    backward): refused by name, saying to train unpadded; its first order under ``create_graph`` equals autograd
    through the definition with a mask."""
    from pointgeope.model.prefix_norm import prefix_batch_norm

    x, w, b = _norm_inputs()
    n = 17

    def definition(x, w, b):
        mask = (torch.arange(x.shape[0]) < n).double().unsqueeze(1)
        mean = (x * mask).sum(0) / n
        var = ((x - mean) ** 2 * mask).sum(0) / n
        return (x - mean) / torch.sqrt(var + 1e-5) * w + b

    def padded(x, w, b):
        return prefix_batch_norm(x, torch.tensor(n), w, b, None, None, 0.1, 1e-5)
    got = _refused_second_order(padded, [x, w, b], "_PrefixBatchNorm",
                                r"through pointgeope's {} are not implemented .*: batch norm over a padded batch "
                                r"\(train.cuda_graphs\) is first-order: train unpadded \(train.cuda_graphs: false\)")
    for a, want in zip(got, _reference_grads(definition, [x, w, b]), strict=True):
        torch.testing.assert_close(a, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("op", ["frame_relation", "linear_relation"])
def test_geope_relations_refuse_second_derivatives_by_name(interpreted, op):
    """``_FrameRelation`` and ``_LinearRelation`` (GeoPE's fused relations, interpreted): a second derivative in
    ``x`` and ``q`` is refused by name with POINTGEOPE_KERNELS=torch; their first order under ``create_graph``
    equals that of GeoPE's torch relations (``rotation.query_frame``, ``linear_rotation.relative_frame``); on
    the torch path the way names, the second derivatives pass ``gradgradcheck``."""
    from pointgeope.model import fused_attention
    from pointgeope.model.linear_rotation import relative_frame
    from pointgeope.model.rotation import query_frame
    from tests.model.test_fused_attention import _frame_inputs

    coord, idx, tables, x, q, d, scale = _frame_inputs(torch.float64, sizes=(3, 6))
    disp = coord[idx] - coord.unsqueeze(1)
    if op == "frame_relation":
        def fused(a, b):
            return fused_attention.frame_relation(a, idx, tables, b, d)

        def torchs(a, b):
            return query_frame(a, idx, coord, scale, b) + d
        function = "_FrameRelation"
    else:
        def fused(a, b):
            return fused_attention.linear_relation(a, idx, disp, scale, b, d)

        def torchs(a, b):
            return relative_frame(a, idx, disp, scale, b) + d
        function = "_LinearRelation"
    inputs = [x.requires_grad_(), q.requires_grad_()]
    fused_attention.KERNELS[op].ran.clear()
    got = _refused_second_order(fused, inputs, function)
    assert fused_attention.KERNELS[op].ran == {"triton"}
    for a, want in zip(got, _reference_grads(torchs, inputs), strict=True):
        torch.testing.assert_close(a, want, rtol=1e-10, atol=1e-12)
    interpreted.setenv("POINTGEOPE_KERNELS", "torch")
    assert torch.autograd.gradgradcheck(fused, inputs, **LINEAR)        # linear in x and q
