"""Tests of standard GeoPE's relation with the points' turn folded into its kernel (pointgeope/model/frame_fold.py,
triton_frame_fold.py) in Triton's interpreter: against the relation written from its definition (explicit 3x3
rotation matrices in float64, rotate then relate, pair by pair), ``gradcheck``, the unfolded kernels' bits, the
edge cases of the kNN lists, and the switch (``frame_fold.FOLD``) in a GeoPE layer's step: no ``apply_shifted``."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from pointgeope.geope import frequencies, rotation_matrix
from pointgeope.model import fused_attention, gather_backward, kernels
from pointgeope.model.frame_fold import NAME, folding
from pointgeope.model.rotation import geometry_dtype, rotation_tables
from tests.model.linear_gradcheck import LINEAR

pytestmark = pytest.mark.usefixtures("interpreted_cpu")


def _inputs(n: int, k: int, channels: int, dtype: torch.dtype, seed: int = 0, idx: torch.Tensor | None = None):
    """Points in a 2 m cube at the recipe's first scales (4 cm voxels), random neighbour lists (repeats and the
    point itself among them), features, queries and deltas in ``dtype``, the tables in the geometry's dtype."""
    g = torch.Generator().manual_seed(seed)
    coord = torch.rand(n, 3, generator=g, dtype=torch.float64) * 2
    idx = torch.randint(0, n, (n, k), generator=g) if idx is None else idx
    scale = frequencies(channels).double() * 25.0 / 3
    x, q = (torch.randn(n, channels, generator=g, dtype=torch.float64).to(dtype) for _ in range(2))
    delta = torch.randn(n, k, channels, generator=g, dtype=torch.float64).to(dtype)
    geometry = geometry_dtype(dtype)
    return coord, idx, scale, rotation_tables(coord.to(geometry), scale.to(geometry), channels), x, q, delta


def _definition(x, idx, coord, scale, q, delta):
    """``r_ij = R_i^T (R_j x_j) - q_i + delta_ij`` in float64 from the definition: block ``b`` of point ``p`` turned by
    the 3x3 matrix ``rotation_matrix(3 k_b p)``, the channels past the blocks passed through; pair by pair."""
    n, channels = x.shape
    blocks = channels // 3
    mats = rotation_matrix(3 * scale[:, None] * coord[:, None, :])                  # (N, n, 3, 3)
    out = []
    for i in range(n):
        row = []
        for j in idx[i].tolist():
            turned = mats[j] @ x[j, : 3 * blocks].view(blocks, 3, 1)                # R_j x_j, per block
            back = (mats[i].transpose(-1, -2) @ turned).flatten()                   # R_i^T of it
            row.append(torch.cat([back, x[j, 3 * blocks:]]))
        out.append(torch.stack(row))
    r = torch.stack(out) - q.unsqueeze(1)
    return r if delta is None else r + delta


def _folded(*args):
    with folding():
        return fused_attention.frame_relation(*args)


def _against_definition(coord, idx, scale, tables, x, q, delta, dtype, tol):
    """Values and the gradients of ``x``, ``q``, ``delta`` for a random output gradient against autograd of the
    float64 definition on the same (rounded) inputs."""
    got = [t.clone().requires_grad_() for t in (x, q, delta)]
    ref = [t.double().requires_grad_() for t in (x, q, delta)]
    fused_attention.KERNELS[NAME].ran.clear()
    out = _folded(got[0], idx, tables, got[1], got[2])
    want = _definition(ref[0], idx, coord, scale, ref[1], ref[2])
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), want, rtol=tol, atol=tol)
    g = torch.randn(want.shape, generator=torch.Generator().manual_seed(9), dtype=torch.float64).to(dtype)
    out.backward(g)
    want.backward(g.double())
    for a, b in zip(got, ref, strict=True):
        torch.testing.assert_close(a.grad.double(), b.grad, rtol=tol, atol=tol * b.grad.abs().max().item())
    assert fused_attention.KERNELS[NAME].ran == {"triton"}
    return out


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("channels", [8, 7, 9])
def test_the_folded_relation_is_the_definition_values_and_gradients(dtype, tol, channels):
    """Against the float64 definition; 8, 7 and 9 channels: two, one and no pass-through channels (the last block
    partial or whole)."""
    _against_definition(*_inputs(11, 5, channels, dtype), dtype, tol)


def test_the_folded_relation_passes_gradcheck_in_float64():
    """Full Jacobians of ``x`` and ``q`` (the backward's atomics into the points' rows and the queries' sum), one
    block and a pass-through channel; ``delta``'s gradient is the incoming one (checked above)."""
    _, idx, _, tables, x, q, _ = _inputs(3, 2, 4, torch.float64, seed=2)
    assert torch.autograd.gradcheck(_folded, [x.requires_grad_(), idx, tables, q.requires_grad_()], **LINEAR)


@pytest.mark.parametrize("case", ["k=1", "one point", "duplicate points", "all self"])
def test_edge_cases_of_the_neighbour_lists(case):
    """One neighbour, a single point, points at the same position (the same rotation: ``R_i^T R_j = I``, so ``x_j -
    q_i``) and every pair pointing to its query (``x_i - q_i``): values and gradients against the definition
    (float64), and the exact identity where it holds."""
    self_lists = torch.arange(6).repeat(3, 1).T.contiguous()
    n, k, idx = {"k=1": (6, 1, None), "one point": (1, 4, torch.zeros(1, 4, dtype=torch.int64)),
                 "duplicate points": (6, 4, None), "all self": (6, 3, self_lists)}[case]
    coord, idx, scale, _, x, q, delta = _inputs(n, k, 7, torch.float64, seed=3, idx=idx)
    if case == "duplicate points":
        coord = coord[:1].expand(n, 3).contiguous()
    tables = rotation_tables(coord, scale, 7)
    out = _against_definition(coord, idx, scale, tables, x, q, delta, torch.float64, 1e-12)
    if case in ("duplicate points", "all self"):                                  # R_i^T R_j = I
        torch.testing.assert_close(out.detach(), x[idx] - q.unsqueeze(1) + delta, rtol=0, atol=1e-12)


def test_the_forward_is_the_unfolded_kernels_bits_and_the_backward_within_rounding():
    """float32, width 64 (22 blocks, one pass-through channel), k = 8: the same expression as ``apply_shifted``'s
    kernel followed by the unfolded relation's, so the same bits; the gradients summed after ``R_j^T`` per pair, not
    before it, within a few float32 roundings."""
    _, idx, _, tables, x, q, delta = _inputs(16, 8, 64, torch.float32, seed=4)
    runs = []
    for fold in (False, True):
        leaves = [t.clone().requires_grad_() for t in (x, q)]
        with folding(fold):
            out = fused_attention.frame_relation(leaves[0], idx, tables, leaves[1], delta)
        out.backward(torch.ones_like(out))
        runs.append((out, *(t.grad for t in leaves)))
    assert torch.equal(runs[0][0], runs[1][0])
    torch.testing.assert_close(runs[1][1], runs[0][1], rtol=1e-5, atol=1e-5)
    assert torch.equal(runs[1][2], runs[0][2])                                   # -sum_j g: the same sum


def test_a_backward_whose_kernel_failed_since_its_forward_gives_the_same_gradients(interpreted_cpu):
    """The folded forward in Triton, then its kernel turned off before the backward: the torch fallback of the
    backward's one owner (``fused_attention.frame_backward`` under this op's name: the reference's gradients by
    autograd, at zeros of the inputs' shapes) gives the Triton backward's gradients, in float64."""
    _, idx, _, tables, x, q, delta = _inputs(5, 3, 7, torch.float64, seed=4)
    grads = []
    for fails in (False, True):
        leaves = [t.clone().requires_grad_() for t in (x, q, delta)]
        out = _folded(leaves[0], idx, tables, leaves[1], leaves[2])
        interpreted_cpu.setattr(fused_attention.KERNELS[NAME], "ran", set())          # the backward's path only
        if fails:
            with pytest.warns(kernels.KernelFallbackWarning, match=NAME):
                kernels.fail(NAME, RuntimeError("injected"))
        out.backward(torch.randn(out.shape, generator=torch.Generator().manual_seed(7), dtype=out.dtype))
        assert fused_attention.KERNELS[NAME].ran == {"torch" if fails else "triton"}
        grads.append([t.grad for t in leaves])
    for triton_grad, torch_grad in zip(*grads, strict=True):
        torch.testing.assert_close(torch_grad, triton_grad, rtol=1e-12, atol=1e-12)


def test_off_by_default_and_never_under_sorted_sums(monkeypatch):
    """``FOLD`` off: the unfolded kernel; on: the folded one, but not where the backward sums by source point
    (``gather_backward.SCATTER`` sorted, or deterministic algorithms: the fold's atomics would leave Triton)."""
    _, idx, _, tables, x, q, _ = _inputs(6, 3, 8, torch.float32)
    ran = {name: fused_attention.KERNELS[name].ran for name in ("frame_relation", NAME)}

    def which():
        for r in ran.values():
            r.clear()
        fused_attention.frame_relation(x, idx, tables, q)
        return [name for name, r in ran.items() if r == {"triton"}]
    assert which() == ["frame_relation"]
    with folding():
        assert which() == [NAME]
        with gather_backward.scatter("sorted"):
            assert which() == ["frame_relation"]
        monkeypatch.setattr(torch, "are_deterministic_algorithms_enabled", lambda: True)
        assert which() == ["frame_relation"]


def test_the_environment_switch_and_its_one_line_error(monkeypatch):
    """``POINTGEOPE_FRAME_FOLD`` where ``FOLD`` is not set in code: off unset, a switch's words, one line naming the
    variable for anything else; ``FOLD`` set in code wins."""
    from pointgeope.model import frame_fold
    from pointgeope.model.kernel_choice import KernelChoiceError

    monkeypatch.delenv(frame_fold.ENV, raising=False)
    assert not frame_fold.folds()
    for raw, on in (("1", True), ("Yes", True), ("off", False)):
        monkeypatch.setenv(frame_fold.ENV, raw)
        assert frame_fold.folds() is on
        with folding(not on):
            assert frame_fold.folds() is not on
    monkeypatch.setenv(frame_fold.ENV, "fold")
    with pytest.raises(KernelChoiceError, match=r"^POINTGEOPE_FRAME_FOLD: expected one of 1, true.*got 'fold'$"):
        frame_fold.folds()


def test_a_geope_layers_step_with_the_fold_launches_no_turn_of_the_points(launched, torch_batch_norm):
    """A standard GeoPE layer's training step: with the fold, the relation's kernels alone (no ``shifted`` launch of
    ``apply_shifted``, forward or backward); output and gradients as without it."""
    from pointgeope.model import PointTransformerLayer

    g = torch.Generator().manual_seed(4)
    coord, feat = torch.rand(40, 3, generator=g) * 2, torch.randn(40, 24, generator=g)
    idx = torch.cdist(coord, coord).topk(6, largest=False).indices
    torch.manual_seed(0)
    layer = PointTransformerLayer(24, share_planes=4, neighbours=6, pe="geope").train()
    runs = []
    for fold in (False, True):
        launched.clear()
        x = feat.clone().requires_grad_()
        with folding(fold):
            out = layer(coord, x, idx)
            out.square().sum().backward()
        runs.append((out.detach(), x.grad, [n for n in launched if n in ("shifted", "frame_forward",
                                                                        "frame_backward", "fold_forward",
                                                                        "fold_backward")]))
    assert runs[0][2] == ["shifted", "frame_forward", "frame_backward", "shifted"]
    assert runs[1][2] == ["fold_forward", "fold_backward"]
    for a, b in zip(runs[1][:2], runs[0][:2], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_a_backward_whose_kernel_fails_gives_the_torch_gradients():
    """The folded forward in Triton, its backward kernel failing (a compiler or driver error of this device): one
    warning, the kernel off, and the gradients of the torch reference, in float64."""
    _, idx, _, tables, x, q, delta = _inputs(7, 3, 8, torch.float64, seed=5)
    grads = []
    for fails in (False, True):
        leaves = [t.clone().requires_grad_() for t in (x, q)]
        out = _folded(leaves[0], idx, tables, leaves[1], delta)
        if fails:
            with pytest.warns(kernels.KernelFallbackWarning, match=NAME):
                kernels.fail(NAME, RuntimeError("injected"))
        out.backward(torch.ones_like(out))
        grads.append([t.grad for t in leaves])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-12)
