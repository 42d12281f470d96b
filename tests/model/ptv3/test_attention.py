"""The attention of PTv3 (pointgeope/model/ptv3/attention.py): heads zero-padded to the width CUDA's fused SDPA
kernels need give the attention of the true width, against softmax(s q k^T + mask) v written out in float64."""
from __future__ import annotations

import pytest
import torch

from pointgeope.model.ptv3 import attention as attention_module
from pointgeope.model.ptv3.attention import aligned_attention, sdpa_alignment
from pointgeope.model.ptv3.seg import PTv3Seg
from tests.model.ptv3.test_seg import cloud, net


def reference(q, k, v, valid, scale):
    """softmax over the valid keys of ``scale q . k``, times v, from the definition."""
    scores = torch.einsum("phid,phjd->phij", q, k) * scale
    if valid is not None:
        scores = scores.masked_fill(~valid, float("-inf"))
    return torch.einsum("phij,phjd->phid", scores.softmax(-1), v)


@pytest.mark.parametrize("width,align", [(18, 8), (18, 4), (5, 8), (16, 8), (18, 1)])
@pytest.mark.parametrize("masked", [False, True])
def test_padded_heads_give_the_attention_of_the_true_width(width, align, masked):
    g = torch.Generator().manual_seed(width + align)
    q, k, v = (torch.randn(3, 2, 10, width, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    valid = (torch.arange(10) < 7).view(1, 1, 1, 10).expand(3, 1, 1, 10) if masked else None
    scale = width ** -0.5
    out = aligned_attention(q, k, v, valid, scale, align=align)
    assert out.shape == (3, 2, 10, width)
    expected = reference(q, k, v, valid, scale)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    grads = torch.autograd.grad((out * expected.detach().cos()).sum(), (q, k, v))
    wanted = torch.autograd.grad((expected * expected.detach().cos()).sum(), (q, k, v))
    for got, want in zip(grads, wanted, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_cuda_pads_to_eight_and_the_cpu_not_at_all():
    assert sdpa_alignment(torch.device("cuda")) == 8 and sdpa_alignment(torch.device("cpu")) == 1


@pytest.mark.parametrize("pe", ["none", "geope", "point3drope", "pointrope", "rope3d", "lingeope"])
def test_the_network_with_padded_heads_is_the_network(pe, monkeypatch):
    """PTv3 at head width 18 with the CUDA padding forced on the CPU: the same logits and gradients. Every
    encoding of tokens reaches SDPA through the layer's one entry (which asks the device's alignment);
    lingeope's per-pair scores never do (no SDPA kernel computes them, so there is nothing to pad)."""
    model: PTv3Seg = net(pe, 16)
    pos, x, offset, grid = cloud(60)

    def run():
        model.zero_grad()
        out = model(pos, x, offset, grid_coord=grid)
        out.square().sum().backward()
        return out.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    plain, plain_grads = run()
    asked = []
    monkeypatch.setattr(attention_module, "sdpa_alignment", lambda device: asked.append(device) or 8)
    padded, padded_grads = run()
    assert len(asked) == (0 if pe == "lingeope" else 3)   # every attention layer (2 encoder, 1 decoder) padded
    torch.testing.assert_close(padded, plain, rtol=1e-5, atol=1e-5)
    assert len(padded_grads) == len(plain_grads)
    for got, want in zip(padded_grads, plain_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_lingeope_gets_the_rpe_bias_in_float32_under_bf16_autocast():
    """Under bf16 autocast without upcasts (the network's defaults), the RPE bias reaches lingeope as the RPE
    makes it, float32, not rounded to q's bf16: lingeope adds it to its float32 scores, as Pointcept adds its
    float32 RPE to ``q k^T`` (type promotion). Only SDPA, which needs one dtype, gets it in the attention's."""
    from pointgeope.model.ptv3.attention import SerializedAttention
    from pointgeope.model.qk_encodings import qk_encoding
    from tests.model.ptv3.test_patches import make_point
    point = make_point((20, 5), 18, 3)
    seen = {}
    lingeope = qk_encoding("lingeope", 6)

    class Recorder:
        def attention(self, q, k, v, coord, grid, *, attn_mask, **kwargs):
            seen.update(q=q.dtype, mask=attn_mask, grid=grid)
            return lingeope.attention(q, k, v, coord, grid, attn_mask=attn_mask, **kwargs)

    torch.manual_seed(0)
    attn = SerializedAttention(18, 3, patch_size=8, enable_rpe=True, upcast_attention=False, upcast_softmax=False,
                               pe=Recorder()).eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        attn(point)
    with torch.no_grad():
        bias = attn.rpe(seen["grid"])
    assert seen["q"] == torch.bfloat16 and seen["mask"].dtype == torch.float32
    valid = torch.isfinite(seen["mask"])                                  # cloud 1 (5 points) pads its patch
    assert torch.equal(seen["mask"][valid], bias[valid]) and not torch.equal(bias, bias.bfloat16().float())


def test_upcasts_keep_float64_and_the_gradient_in_the_features_is_exact():
    """``upcast_attention`` / ``upcast_softmax`` raise half precision to float32; float64 features attended in
    float32 (``.float()`` lowers them), so a float64 network with the upcasts on (``Block``'s and
    ``SerializedAttention``'s defaults) lost half its digits and failed ``gradcheck`` in its features. Now the
    upcasts leave float64 alone: the same as without them, and the gradient matches finite differences."""
    from pointgeope.model.ptv3 import PointTransformerV3

    kw = dict(in_channels=3, order=("z", "hilbert"), stride=(2,), enc_depths=(2, 1), enc_channels=(6, 6),
              enc_num_head=(2, 1), enc_patch_size=(5, 5), dec_depths=(1,), dec_channels=(6,), dec_num_head=(2,),
              dec_patch_size=(5,), mlp_ratio=1, drop_path=0.0, enable_flash=False, enable_rpe=True)
    torch.manual_seed(0)
    plain = PointTransformerV3(**kw).double().eval()
    up = PointTransformerV3(**kw, upcast_attention=True, upcast_softmax=True).double().eval()
    up.load_state_dict(plain.state_dict())
    gen = torch.Generator().manual_seed(1)
    grid = torch.stack([(c := torch.randperm(216, generator=gen)[:14]) // 36, c // 6 % 6, c % 6], 1)
    coord, feat = grid * 0.1, torch.randn(14, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    offset = torch.tensor([9, 14])

    def run(model, x):
        torch.manual_seed(2)
        return model(coord, grid, x, offset)

    torch.testing.assert_close(run(up, feat), run(plain, feat), rtol=1e-13, atol=1e-13)
    assert torch.autograd.gradcheck(lambda x: run(up, x), (feat,))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_under_autocast_the_upcasts_change_nothing(dtype):
    """Autocast casts SDPA's inputs, the upcast float32 ones too, to its dtype (docs/ptv3.md says so; the
    docstrings said the upcasts attend in float32 for half precision, which holds only for a network in half
    precision without autocast): the network with the upcasts equals the one without, bit for bit."""
    from pointgeope.model.ptv3 import PointTransformerV3

    kw = dict(in_channels=3, order=("z", "hilbert"), stride=(2,), enc_depths=(2, 1), enc_channels=(12, 12),
              enc_num_head=(2, 1), enc_patch_size=(5, 5), dec_depths=(1,), dec_channels=(12,), dec_num_head=(2,),
              dec_patch_size=(5,), mlp_ratio=1, drop_path=0.0, enable_flash=False, enable_rpe=True)
    torch.manual_seed(0)
    plain = PointTransformerV3(**kw).eval()
    up = PointTransformerV3(**kw, upcast_attention=True, upcast_softmax=True).eval()
    up.load_state_dict(plain.state_dict())
    gen = torch.Generator().manual_seed(1)
    grid = torch.stack([(c := torch.randperm(216, generator=gen)[:40]) // 36, c // 6 % 6, c % 6], 1)
    coord, feat, offset = grid * 0.1, torch.randn(40, 3, generator=gen), torch.tensor([25, 40])

    def run(model):
        torch.manual_seed(2)
        with torch.no_grad(), torch.autocast("cpu", dtype=dtype):
            return model(coord, grid, feat, offset)

    out = run(up)
    assert out.dtype == dtype and torch.equal(out, run(plain))
    with torch.no_grad():                                     # without autocast the upcast does act
        torch.manual_seed(2)
        half_up = up.to(dtype)(coord, grid, feat.to(dtype), offset)
        torch.manual_seed(2)
        assert not torch.equal(half_up, plain.to(dtype)(coord, grid, feat.to(dtype), offset))
