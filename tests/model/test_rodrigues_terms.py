"""Tests of Rodrigues' terms: the torch owner ``pointgeope.geope.rotation_terms`` against the matrix exponential
of the rotation vector (an independent definition), and the Triton kernels' in-kernel copy
``triton_attention._rodrigues_terms`` against the torch owner (under Triton's interpreter on the CPU, compiled
on CUDA)."""
import pytest
import torch

triton = pytest.importorskip("triton")   # decorates the kernel below in its test, in the interpreter mode then
import triton.language as tl  # noqa: E402

from pointgeope.geope import rotation_terms  # noqa: E402
from pointgeope.model import kernel_choice  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _displacements(dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of displacements with the origin (``u = 0``) and a tiny one among them, and block scales."""
    g = torch.Generator().manual_seed(0)
    disp = torch.randn(37, 3, generator=g, dtype=torch.float64) * 2
    disp[0] = 0
    disp[1] = torch.tensor([1e-3, 0.0, 0.0])
    scale = torch.rand(5, generator=g, dtype=torch.float64) * 4
    return disp.to(dtype), scale.to(dtype)


def test_rotation_terms_rebuild_the_matrix_exponential_of_the_rotation_vector():
    disp, scale = _displacements(torch.float64)
    u, cos, sin, versine = rotation_terms(disp, scale)
    assert u.shape == (37, 3) and cos.shape == sin.shape == versine.shape == (37, 5)
    cross = torch.zeros(37, 3, 3, dtype=torch.float64)
    cross[:, 0, 1], cross[:, 0, 2], cross[:, 1, 2] = -u[:, 2], u[:, 1], -u[:, 0]
    cross = cross - cross.transpose(1, 2)                                          # [u]_x
    eye = torch.eye(3, dtype=torch.float64)
    R = (cos[..., None, None] * eye + sin[..., None, None] * cross[:, None]
         + versine[..., None, None] * (u[:, :, None] * u[:, None, :])[:, None])    # (37, 5, 3, 3)
    w = disp[:, None, :] * scale[None, :, None]                                    # rotation vectors k_b d
    skew = torch.zeros(37, 5, 3, 3, dtype=torch.float64)
    skew[..., 0, 1], skew[..., 0, 2], skew[..., 1, 2] = -w[..., 2], w[..., 1], -w[..., 0]
    torch.testing.assert_close(R, torch.linalg.matrix_exp(skew - skew.transpose(-1, -2)), rtol=0, atol=1e-12)
    assert (u[0] == 0).all() and (cos[0] == 1).all() and (sin[0] == 0).all() and (versine[0] == 0).all()


def test_rotation_terms_cast_to_the_products_dtype_before_the_versine():
    disp, scale = _displacements()
    u, cos, sin, versine = rotation_terms(disp, scale, torch.bfloat16)
    want = rotation_terms(disp, scale)
    assert u.dtype == cos.dtype == sin.dtype == versine.dtype == torch.bfloat16
    assert torch.equal(cos, want[1].to(torch.bfloat16)) and torch.equal(versine, 1 - want[1].to(torch.bfloat16))


def _terms_kernel(d_ptr, s_ptr, u_ptr, t_ptr, M, NB, BLOCK_M: tl.constexpr, BLOCK_B: tl.constexpr):
    """``u (M, 3)`` and ``(cos, sin, 1 - cos) (M, NB, 3)`` of the kernels' ``_rodrigues_terms``; decorated in
    the test (``terms`` is that helper, set in this module's globals), in the interpreter mode of the moment."""
    m = tl.arange(0, BLOCK_M)[:, None]
    b = tl.arange(0, BLOCK_B)[None, :]
    rows = m < M
    dx = tl.load(d_ptr + m * 3, mask=rows, other=0.0)
    dy = tl.load(d_ptr + m * 3 + 1, mask=rows, other=0.0)
    dz = tl.load(d_ptr + m * 3 + 2, mask=rows, other=0.0)
    ux, uy, uz, cos, sin, versine = terms(dx, dy, dz, tl.load(s_ptr + b, mask=b < NB, other=0.0))  # noqa: F821
    tl.store(u_ptr + m * 3, ux, mask=rows)
    tl.store(u_ptr + m * 3 + 1, uy, mask=rows)
    tl.store(u_ptr + m * 3 + 2, uz, mask=rows)
    both = rows & (b < NB)
    tl.store(t_ptr + (m * NB + b) * 3, cos, mask=both)
    tl.store(t_ptr + (m * NB + b) * 3 + 1, sin, mask=both)
    tl.store(t_ptr + (m * NB + b) * 3 + 2, versine, mask=both)


def test_triton_rodrigues_terms_equal_the_torch_owner(monkeypatch):
    from pointgeope.model import fused_attention

    if DEVICE == "cpu":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        assert kernel_choice.current().interpret
    monkeypatch.setitem(globals(), "terms", fused_attention.triton_kernels()._rodrigues_terms)
    kernel = triton.jit(_terms_kernel)
    disp, scale = (t.to(DEVICE) for t in _displacements())
    u = torch.full((37, 3), float("nan"), device=DEVICE)
    t = torch.full((37, 5, 3), float("nan"), device=DEVICE)
    kernel[(1,)](disp, scale, u, t, 37, 5, BLOCK_M=64, BLOCK_B=8)
    want_u, cos, sin, versine = rotation_terms(disp, scale)
    torch.testing.assert_close(u, want_u, rtol=0, atol=2e-7)
    torch.testing.assert_close(t, torch.stack([cos, sin, versine], dim=-1), rtol=0, atol=2e-6)
    assert (u[0] == 0).all() and torch.equal(t[0].cpu(), torch.tensor([[1.0, 0.0, 0.0]] * 5))
