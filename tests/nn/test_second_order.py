"""Second derivatives (``create_graph=True``: gradient penalties, Hessian-vector products, MAML) through GeoPE's
rotations where positions are data: the custom autograd Functions of pointgeope/geope.py (``_RotateVectors``),
pointgeope/nn/target_frame.py (``_TurnIntoTargets``) and pointgeope/nn/frame_numba.py (``turn_edges``) against
float64 finite differences (``gradgradcheck``) and against plain autograd (the same positions with
``requires_grad``, which takes the differentiable Rodrigues formula)."""
from __future__ import annotations

import pytest
import torch

from pointgeope.geope import BlockScale, apply_geope
from pointgeope.nn import geope_attention, geope_qk
from tests.nn.test_point_transformer_conv import graph, make_conv

LAYER_PRESETS = ["geope", "geope+rpe", "lingeope", "rope3d", "pointrope"]   # those with a custom Function


def penalty_gradient(f, x: torch.Tensor) -> torch.Tensor:
    """``d/dx |d (f(x)^2).sum() / dx|^2``: a gradient penalty, a second derivative through every rotation."""
    g, = torch.autograd.grad(f(x).pow(2).sum(), x, create_graph=True)
    return torch.autograd.grad(g.pow(2).sum(), x)[0]


def check_second_order(f_data, f_plain, x: torch.Tensor) -> None:
    """``f_data`` (positions as data: the custom Functions) has exact second derivatives: ``gradgradcheck``,
    and its gradient penalty equals that of ``f_plain`` (positions requiring grad: plain autograd)."""
    assert torch.autograd.gradgradcheck(f_data, (x,), fast_mode=False)
    torch.testing.assert_close(penalty_gradient(f_data, x), penalty_gradient(f_plain, x), atol=1e-10, rtol=1e-10)


@pytest.fixture(params=["cpu-kernel", "torch"])
def frame(request, monkeypatch):
    """The layer's per-edge rotations on the CPU kernel (numba, the default) or on the torch path (CUDA's)."""
    if request.param == "torch":
        from pointgeope.nn import target_frame
        monkeypatch.setattr(target_frame, "frame_backend", lambda keys: "torch")
    return request.param


@pytest.mark.parametrize("pe", LAYER_PRESETS)
def test_layer_second_derivatives_in_the_features_are_exact(pe, frame):
    torch.manual_seed(0)
    conv, (x, pos, edge_index) = make_conv(pe, in_channels=2, channels=6), graph(n=5, k=2, in_channels=2)
    x.requires_grad_()
    plain = pos.clone().requires_grad_()
    check_second_order(lambda x: conv(x, pos, edge_index), lambda x: conv(x, plain, edge_index), x)


@pytest.mark.parametrize("what", ["geope_attention", "geope_qk"])
def test_functional_second_derivatives_are_exact(what):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 6, 7, generator=gen, dtype=torch.float64, requires_grad=True)   # 2 blocks + 1 pass-through
    pos = torch.rand(6, 3, generator=gen, dtype=torch.float64)
    plain = pos.clone().requires_grad_()

    def run(p):
        if what == "geope_attention":                     # self-attention q = k = v = x, as a user would
            return lambda x: geope_attention(x, x, x, p, pos_scale=3.0)
        return lambda x: torch.cat(geope_qk(x, x.flip(1), p, pos_scale=3.0), dim=-1).sin()   # non-linear after
    check_second_order(run(pos), run(plain), x)


def test_rotation_third_derivative_is_exact():
    """The gradient of ``_RotateVectors`` is that Function again, so every order is exact: ``gradgradcheck`` of
    a function that already is a gradient."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(4, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    pos, scale = (torch.rand(4, 3, generator=gen, dtype=torch.float64),
                  BlockScale(6, pos_scale=2.0)(torch.float64, x.device))

    def grad_of(x):
        return torch.autograd.grad(apply_geope(x, pos, scale).sin().sum(), x, create_graph=True)[0]
    assert torch.autograd.gradgradcheck(grad_of, (x,), fast_mode=False)
