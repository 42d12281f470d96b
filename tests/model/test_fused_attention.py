"""Tests of pointgeope/model/fused_attention.py's ops (and their kernels, triton_attention.py) on CPU tensors
under Triton's interpreter: the kernels against float64 per-pair sums written from the definition and
``gradcheck``, on packed batches of tiny clouds whose kNN repeats neighbours; the kernel choice. The layer on
these kernels: test_fused_attention_layer.py."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")          # imported here, before TRITON_INTERPRET is set: Triton's own library
                                       # stays compiled for the CUDA tests and torch.compile in this process
from pointgeope.model import fused_attention, kernels
from tests.model.fused_inputs import cuda, packed
from tests.model.linear_gradcheck import LINEAR

# Triton's interpreter and the Triton path for this module's tests only (tests/model/conftest.py)
pytestmark = pytest.mark.usefixtures("interpreted")


def _pairs_reference(w, v, idx, delta, s):
    """``y[i, g G + h] = sum_j p_j value_j`` with ``p = softmax_j w[i, :, h]``, pair by pair in float64."""
    n, k, groups = w.shape
    y = torch.zeros(n, v.shape[1], dtype=torch.float64)
    for i in range(n):
        for h in range(groups):
            logits = [w[i, j, h].double() for j in range(k)]
            top = max(logits)
            e = [torch.exp(x - top) for x in logits]
            for g in range(s):
                c = g * groups + h
                for j in range(k):
                    value = v[idx[i, j], c].double() + (0 if delta is None else delta[i, j, c].double())
                    y[i, c] += e[j] / sum(e) * value
    return y


def _aggregate_inputs(dtype, k=4, channels=8, s=2, seed=1, delta=True, sizes=(3, 1, 6, 2)):
    _, idx = packed(sizes, k=k)
    g = torch.Generator().manual_seed(seed)
    n = idx.shape[0]
    w = torch.randn(n, k, channels // s, generator=g, dtype=torch.float64).to(dtype)
    v = torch.randn(n, channels, generator=g, dtype=torch.float64).to(dtype)
    d = torch.randn(n, k, channels, generator=g, dtype=torch.float64).to(dtype) if delta else None
    return w, v, idx, d


# One rounding to each output dtype moves a value ``x`` by at most ``u |x|``: the unit roundoff when rounding to
# nearest (float32, float16, and bfloat16 on a GPU); bfloat16 twice that, since Triton's CPU interpreter
# (numpy has no bfloat16) converts float32 to it by truncation, toward zero.
UNIT_ROUNDOFF = {torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -11}


def _assert_rounded_once(got, want, dtype, accumulation=1e-6):
    """``got`` is ``want`` (float64) rounded once to ``dtype``: within ``u |want|`` plus the float32
    accumulation's own error (``accumulation``, absolute: the sums are of values of order 1). Not the few
    units a looser tolerance allows, under which an output rounded to a coarser type would pass."""
    excess = (got.double() - want).abs() - (UNIT_ROUNDOFF[dtype] * want.abs() + accumulation)
    assert excess.max().item() <= 0, f"{dtype}: off by {excess.max().item():.3g} beyond one rounding"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("with_delta", [True, False])
def test_aggregate_matches_the_pair_sums_of_the_definition(dtype, with_delta):
    w, v, idx, d = _aggregate_inputs(dtype, delta=with_delta)
    assert (idx[:, 0] == idx[:, 1]).any()                       # repeated neighbours are in the batch
    y = fused_attention.aggregate(w, v, idx, d, 2)
    assert y.dtype == dtype
    _assert_rounded_once(y, _pairs_reference(w, v, idx, d, 2), dtype)


def test_aggregate_gradients_are_the_float64_autograd_of_the_definition():
    w, v, idx, d = (t.requires_grad_() if t.dtype != torch.int64 else t for t in _aggregate_inputs(torch.float32))
    gy = torch.randn(idx.shape[0], 8)
    fused_attention.aggregate(w, v, idx, d, 2).backward(gy)
    ref = [t.detach().double().requires_grad_() for t in (w, v, d)]
    p = torch.softmax(ref[0], dim=1)                            # (N, k, G)
    y = ((ref[1][idx] + ref[2]).unflatten(-1, (2, 4)) * p.unsqueeze(2)).sum(1).flatten(1)
    y.backward(gy.double())
    for got, want in zip((w, v, d), ref, strict=True):
        torch.testing.assert_close(got.grad.double(), want.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_nan_or_inf_logit_spoils_its_softmax_row_as_torchs(bad):
    """torch's softmax of a row with a NaN (or +inf: ``inf - inf``) logit is NaN throughout, so the row's output and
    the gradients of every value and delta it weighs are NaN. Before, the kernel's sum guard (``total > 0``, false
    for NaN) divided by 1 instead: the other weights stayed finite and the values' gradients of that row were
    finite, hiding the NaN there. Now the NaNs and the finite values are torch's (float64 autograd)."""
    w, v, idx, d = (t.requires_grad_() if t.dtype != torch.int64 else t for t in _aggregate_inputs(torch.float64))
    with torch.no_grad():
        w[2, 1, 0] = bad
    gy = torch.randn(idx.shape[0], 8, dtype=torch.float64)
    fused_attention.aggregate(w, v, idx, d, 2).backward(gy)
    ref = [t.detach().clone().requires_grad_() for t in (w, v, d)]
    p = torch.softmax(ref[0], dim=1)
    y = ((ref[1][idx] + ref[2]).unflatten(-1, (2, 4)) * p.unsqueeze(2)).sum(1).flatten(1)
    y.backward(gy)
    assert ref[1].grad.isnan().any()
    for got, want in zip((w, v, d), ref, strict=True):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-10, atol=1e-10, equal_nan=True)


@pytest.mark.parametrize("with_delta", [True, False])
def test_aggregate_and_relation_pass_gradcheck_in_float64(with_delta):
    """The aggregation's full Jacobian (``fast_mode=False``: every input and output element; softmax makes it
    nonlinear) of inputs small enough for it: clouds of 2 and 1 points, k = 2 (the single point repeats its
    neighbour), 2 groups of one channel (wider groups: the float64 autograd test above); the relation, linear in
    ``v`` and ``q``, in fast mode (``v^T J u``: an error of 0.1 in one of its O(1) entries fails it; smaller ones
    the float32 gradients against the reference above)."""
    w, v, idx, d = _aggregate_inputs(torch.float64, k=2, channels=2, s=2, delta=with_delta, sizes=(2, 1))
    inputs = [w.requires_grad_(), v.requires_grad_(), idx] + ([d.requires_grad_()] if with_delta else [None])
    assert torch.autograd.gradcheck(lambda *t: fused_attention.aggregate(*t, 2), inputs, fast_mode=False)
    q = torch.randn_like(v).requires_grad_()
    assert torch.autograd.gradcheck(fused_attention.relation, [v, idx, q, inputs[3]], **LINEAR)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_relation_is_the_gathered_key_minus_the_query_plus_delta(dtype):
    _, idx = packed(k=5)
    g = torch.Generator().manual_seed(2)
    n, k, c = *idx.shape, 70                                   # 70 channels: two channel blocks, one partial
    key, q = (torch.randn(n, c, generator=g).to(dtype).requires_grad_() for _ in range(2))
    d = torch.randn(n, k, c, generator=g).to(dtype).requires_grad_()
    out = fused_attention.relation(key, idx, q, d)
    want = torch.stack([torch.stack([key[idx[i, j]].double() - q[i].double() + d[i, j].double()
                                     for j in range(k)]) for i in range(n)])
    tol = {torch.float32: 1e-6, torch.bfloat16: 2e-2, torch.float16: 2e-3}[dtype]
    _assert_rounded_once(out, want, dtype)
    gr = torch.randn(n, k, c, generator=g).to(dtype)
    out.backward(gr)
    grad_key = torch.zeros(n, c, dtype=torch.float64).index_add_(0, idx.reshape(-1), gr.double().reshape(-1, c))
    torch.testing.assert_close(key.grad.double(), grad_key, rtol=tol, atol=tol)
    torch.testing.assert_close(q.grad.double(), -gr.double().sum(1), rtol=tol, atol=tol)
    assert torch.equal(d.grad, gr)


def _assert_values_and_grads(out, want, got, ref, dtype, tol):
    """``out`` (in ``dtype``) equals the float64 ``want``, and the gradients of the inputs ``got`` those of
    their float64 copies ``ref`` for the same random output gradient (rounded to ``dtype``)."""
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), want, rtol=tol, atol=tol)
    gr = torch.randn(want.shape, dtype=torch.float64)
    out.backward(gr.to(dtype))
    want.backward(gr.to(dtype).double())
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a.grad.double(), b.grad, rtol=tol, atol=tol * b.grad.abs().max().item())


def _frame_inputs(dtype, channels=8, k=4, sizes=(3, 1, 6, 2)):
    """Points, neighbours, GeoPE's rotation tables of the points (float32 at least), queries and deltas."""
    from pointgeope.geope import frequencies
    from pointgeope.model.rotation import geometry_dtype, rotation_tables

    coord, idx = packed(sizes, k=k, dtype=torch.float64)
    g = torch.Generator().manual_seed(5)
    x, q = (torch.randn(idx.shape[0], channels, generator=g, dtype=torch.float64).to(dtype) for _ in range(2))
    d = torch.randn(*idx.shape, channels, generator=g, dtype=torch.float64).to(dtype)
    scale = frequencies(channels).double() * 25.0 / 3                         # 4 cm voxels
    tables = rotation_tables(coord.to(geometry_dtype(dtype)), scale.to(geometry_dtype(dtype)), channels)
    return coord, idx, tables, x, q, d, scale


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2), (torch.float16, 2e-3)])
def test_frame_relation_is_todays_query_frame_plus_delta(dtype, tol):
    """Against ``rotation.query_frame`` (values and gradients, 8 channels: two blocks and two pass-through)."""
    from pointgeope.model.rotation import query_frame

    coord, idx, tables, x, q, d, scale = _frame_inputs(dtype)
    got = [t.clone().requires_grad_() for t in (x, q, d)]
    ref = [t.double().requires_grad_() for t in (x, q, d)]
    out = fused_attention.frame_relation(got[0], idx, tables, got[1], got[2])
    want = query_frame(ref[0], idx, coord, scale, ref[1]) + ref[2]
    _assert_values_and_grads(out, want, got, ref, dtype, tol)


def test_frame_relation_passes_gradcheck_in_float64():
    """In fast mode (the map is linear in ``x`` and ``q``: ``v^T J u`` fails with an error of 0.1 in one of the
    Jacobian's O(1) entries, measured; smaller errors fail the float32 gradients against ``query_frame`` above);
    one block and a pass-through channel; delta's gradient is the incoming one (checked above)."""
    _, idx, tables, x, q, _, _ = _frame_inputs(torch.float64, channels=4, k=2, sizes=(2, 1))
    assert torch.autograd.gradcheck(fused_attention.frame_relation, [x.requires_grad_(), idx, tables,
                                                                     q.requires_grad_()], **LINEAR)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2), (torch.float16, 2e-3)])
@pytest.mark.parametrize("channels", [7, 8])
def test_linear_relation_is_todays_relative_frame_plus_delta(dtype, tol, channels):
    """Against ``linear_rotation.relative_frame`` (values and gradients); 7 and 8 channels: one and two
    pass-through channels after the blocks; the zero displacement of every point to itself included."""
    from pointgeope.model.linear_rotation import relative_frame

    coord, idx, _, x, q, d, scale = _frame_inputs(dtype, channels=channels)
    disp = coord[idx] - coord.unsqueeze(1)
    got = [t.clone().requires_grad_() for t in (x, q, d)]
    ref = [t.double().requires_grad_() for t in (x, q, d)]
    out = fused_attention.linear_relation(got[0], idx, disp.float(), scale.float(), got[1], got[2])
    want = relative_frame(ref[0], idx, disp, scale, ref[1]) + ref[2]
    _assert_values_and_grads(out, want, got, ref, dtype, tol)


def test_linear_relation_passes_gradcheck_in_float64():
    """In fast mode: linear in ``x`` and ``q`` (the displacements take no gradient), as the frame relation's."""
    coord, idx, _, x, q, _, scale = _frame_inputs(torch.float64, channels=4, k=2, sizes=(2, 1))
    disp = coord[idx] - coord.unsqueeze(1)
    assert torch.autograd.gradcheck(lambda a, b: fused_attention.linear_relation(a, idx, disp, scale, b),
                                    [x.requires_grad_(), q.requires_grad_()], **LINEAR)


def _op_inputs(op):
    """Float64 arguments of the fused ``op`` and the positions of the tensors that take gradients."""
    if op == "aggregate":
        w, v, idx, d = _aggregate_inputs(torch.float64)
        return [w, v, idx, d, 2], [0, 1, 3]
    coord, idx, tables, x, q, d, scale = _frame_inputs(torch.float64)
    if op == "relation":
        return [x, idx, q, d], [0, 2, 3]
    if op == "frame_relation":
        return [x, idx, tables, q, d], [0, 3, 4]
    return [x, idx, coord[idx] - coord.unsqueeze(1), scale, q, d], [0, 4, 5]


@pytest.mark.parametrize("op", ["relation", "frame_relation", "linear_relation", "aggregate"])
def test_a_backward_whose_kernel_failed_since_its_forward_gives_the_same_gradients(interpreted, op):
    """The forward in Triton, then the kernel turned off before the backward: the torch fallback (autograd of
    the reference, for the relations at zeros of the inputs' shapes and dtypes: linear in them) gives the
    Triton backward's gradients, in float64."""
    args, leaves = _op_inputs(op)
    grads = []
    for fails in (False, True):
        run = [t.clone().requires_grad_() if i in leaves else t for i, t in enumerate(args)]
        out = getattr(fused_attention, op)(*run)
        interpreted.setattr(fused_attention.KERNELS[op], "ran", set())         # the backward's path only
        if fails:
            with pytest.warns(kernels.KernelFallbackWarning, match=op):
                kernels.fail(op, RuntimeError("injected"))
        out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(7), dtype=out.dtype))
        assert fused_attention.KERNELS[op].ran == {"torch" if fails else "triton"}
        grads.append([run[i].grad for i in leaves])
    for triton_grad, torch_grad in zip(*grads, strict=True):
        torch.testing.assert_close(torch_grad, triton_grad, rtol=1e-12, atol=1e-12)


def test_the_kernel_choice_follows_the_environment(monkeypatch):
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert all(fused_attention.enabled(op, cpu) for op in fused_attention.KERNELS)   # triton + TRITON_INTERPRET=1
    monkeypatch.setenv("POINTGEOPE_KERNELS", "torch")
    assert not fused_attention.enabled("aggregate", cpu) and not fused_attention.enabled("aggregate", cuda)
    assert "POINTGEOPE_KERNELS=torch" in kernels.status()
    monkeypatch.delenv("POINTGEOPE_KERNELS")
    assert not fused_attention.enabled("aggregate", cpu)        # the CPU keeps its torch kernels by default
    assert fused_attention.enabled("aggregate", cuda)
    monkeypatch.setattr(torch, "are_deterministic_algorithms_enabled", lambda: True)
    assert not fused_attention.enabled("linear_relation", cuda)  # atomics' sums are not reproducible
    monkeypatch.setenv("POINTGEOPE_KERNELS", "cuda")
    with pytest.raises(ValueError, match=r"POINTGEOPE_KERNELS: expected one of triton, torch .*got 'cuda'"):
        fused_attention.enabled("aggregate", cpu)


def test_kernels_are_redecorated_when_the_interpreter_mode_changes(monkeypatch):
    module = fused_attention.triton_kernels()
    assert module.INTERPRET
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not fused_attention.triton_kernels().INTERPRET
    monkeypatch.setenv("TRITON_INTERPRET", "true")   # the words of every switch (TRITON_INTERPRET=true once
    assert fused_attention.triton_kernels().INTERPRET  # left these kernels compiled while the ops interpreted)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert fused_attention.triton_kernels().INTERPRET


@cuda
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_compiled_kernels_on_cuda_match_the_float64_definition(dtype, tol, monkeypatch):
    """The kernels compiled for the GPU (no interpreter), values and gradients, repeated neighbours."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    _check_kernels_on(torch.device("cuda"), dtype, tol)


def _check_kernels_on(device, dtype, tol):
    """Both kernels on ``device`` in ``dtype`` against float64 autograd of the definition on the same
    (rounded) inputs, with linear losses (gradients independent of the outputs' rounding)."""
    w, v, idx, d = _aggregate_inputs(torch.float64, k=16, channels=64, s=8, sizes=(300, 5, 40))
    q = torch.randn_like(v)
    got = [t.to(device, dtype).requires_grad_() for t in (w, v, d, q)]
    ref = [t.detach().double().cpu().requires_grad_() for t in got]
    gy, gr = torch.randn(idx.shape[0], 64, dtype=torch.float64), torch.randn(*idx.shape, 64, dtype=torch.float64)
    y = ((ref[1][idx] + ref[2]).unflatten(-1, (8, 8)) * torch.softmax(ref[0], 1).unsqueeze(2)).sum(1).flatten(1)
    r = ref[1][idx] - ref[3].unsqueeze(1) + ref[2]
    ((y * gy).sum() + (r * gr).sum()).backward()
    y = fused_attention.aggregate(got[0], got[1], idx.to(device), got[2], 8)
    r = fused_attention.relation(got[1], idx.to(device), got[3], got[2])
    ((y.double() * gy.to(device)).sum() + (r.double() * gr.to(device)).sum()).backward()
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a.grad.double().cpu(), b.grad, rtol=tol, atol=tol * b.grad.abs().max().item())
    from pointgeope.model.rotation import query_frame

    coord, idx, tables, x, q, d, scale = _frame_inputs(dtype, channels=64, k=16, sizes=(300, 5, 40))
    want = query_frame(x.double(), idx, coord, scale, q.double()) + d.double()    # today's kernel, float64
    out = fused_attention.frame_relation(x.to(device), idx.to(device), tables.to(device), q.to(device), d.to(device))
    torch.testing.assert_close(out.double().cpu(), want, rtol=tol, atol=tol * want.abs().max().item())
    from pointgeope.model.linear_rotation import relative_frame

    disp = coord[idx] - coord.unsqueeze(1)
    want = relative_frame(x.double(), idx, disp, scale, q.double()) + d.double()
    out = fused_attention.linear_relation(x.to(device), idx.to(device), disp.float().to(device),
                                          scale.float().to(device), q.to(device), d.to(device))
    torch.testing.assert_close(out.double().cpu(), want, rtol=tol, atol=tol * want.abs().max().item())
