"""``PTv3Seg`` (pointgeope/model/ptv3/seg.py), PTv3 as the engine builds it: an encoding per head width, and
``lingeope`` (an encoding of pairs, through ``pe.attention``) masked as SDPA is for clouds shorter than a patch."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from pointgeope.engine.config import load_config
from pointgeope.model.ptv3.seg import PTv3Seg

F64 = torch.float64
POINT3DROPE_PRESET = Path(__file__).resolve().parents[3] / "configs" / "s3dis" / "ptv3_point3drope.yaml"

BASE = ["model.backbone=ptv3", "data.augment=pointcept_ptv3", "eval.protocol=ptv3", "model.ptv3.stride=[2]",
        "model.ptv3.enc_depths=[1, 1]", "model.ptv3.enc_num_head=[1, 2]", "model.ptv3.dec_depths=[1]",
        "model.ptv3.dec_num_head=[1]",
        "model.ptv3.drop_path=0.0"]


def net(pe: str, patch: int, channels=(18, 36), dec=18, extra=()) -> PTv3Seg:
    cfg = load_config(None, BASE + [f"model.pe={pe}", f"model.ptv3.enc_channels={list(channels)}",
                                    f"model.ptv3.dec_channels=[{dec}]", f"model.ptv3.enc_patch_size=[{patch}, {patch}]",
                                    f"model.ptv3.dec_patch_size=[{patch}]", *extra])
    torch.manual_seed(0)
    return PTv3Seg(cfg.model, grid_size=0.1).eval()


def cloud(n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    grid = torch.randperm(8 ** 3, generator=g)[:n]
    grid = torch.stack([grid // 64, grid // 8 % 8, grid % 8], 1)
    pos = (grid.float() + torch.rand(n, 3, generator=g)) * 0.1
    return pos, torch.rand(n, 6, generator=g), torch.tensor([n]), grid


@pytest.mark.parametrize("pe", ["lingeope", "geope", "point3drope"])
def test_a_cloud_shorter_than_its_patch_is_masked(pe):
    """40 points in patches of 64 (24 empty slots masked) give what patches of exactly 40 give: the weights
    do not depend on the patch size, so only a missing mask would make them differ."""
    padded, exact = net(pe, 64), net(pe, 40)
    exact.load_state_dict(padded.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(padded(*cloud()[:3], grid_coord=cloud()[3]),
                                   exact(*cloud()[:3], grid_coord=cloud()[3]), atol=1e-5, rtol=1e-5)


def test_each_head_width_gets_its_encoding():
    """Head widths 18 (stage 0) and 12 (stage 1: 24 channels, 2 heads): one encoding each, chosen by q's width."""
    model = net("geope", 64, channels=(18, 24))
    pe = model.backbone.enc.enc0.block0.attn.pe
    assert pe is model.backbone.enc.enc1.block0.attn.pe and sorted(pe.by_width) == ["12", "18"]
    assert pe.by_width["12"].head_dim == 12 and pe.by_width["18"].head_dim == 18
    for width in (12, 18):
        q, v = torch.randn(2, 1, 5, width), torch.randn(2, 1, 5, width)
        coord = torch.rand(2, 5, 3)
        got = pe.attention(q, q, v, coord, coord.long())
        assert torch.equal(got, pe.by_width[str(width)].attention(q, q, v, coord, coord.long()))
    with torch.no_grad():
        out = model(*cloud()[:3], grid_coord=cloud()[3])
    assert out.shape == (40, 13) and bool(torch.isfinite(out).all())


@pytest.mark.parametrize("pe", ["none", "geope", "point3drope"])
def test_bfloat16_autocast_trains_as_float32_does(pe):
    """The training step's forward under bf16 autocast (the CPU's; CUDA's casts the same ops): bf16 logits
    within bf16's precision of the float32 ones, every gradient finite, the whole gradient pointing the same
    way (cosine > 0.999) and no parameter's off by more than 5 % of the whole gradient's norm. (Per parameter
    cosines mean nothing here: the biases before a norm have a gradient of 0 up to rounding.)"""
    model = net(pe, 32).train()
    pos, x, offset, grid = cloud(120, seed=3)
    labels = torch.arange(120) % 13

    def step(amp: bool):
        model.zero_grad()
        torch.manual_seed(0)                      # the same order shuffles and Point3DRoPE draws
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
            logits = model(pos, x, offset, grid_coord=grid)
        torch.nn.functional.cross_entropy(logits.float(), labels).backward()
        return logits.detach(), {n: p.grad.double() for n, p in model.named_parameters() if p.grad is not None}

    full, full_grads = step(False)
    half, half_grads = step(True)
    assert half.dtype == torch.bfloat16 and full.dtype == torch.float32
    assert float((half.float() - full).abs().max()) <= 0.03 * float(full.abs().max())
    assert half_grads.keys() == full_grads.keys()
    assert all(bool(torch.isfinite(g).all()) for g in half_grads.values())
    flat_half = torch.cat([g.flatten() for g in half_grads.values()])
    flat_full = torch.cat([g.flatten() for g in full_grads.values()])
    assert float(torch.nn.functional.cosine_similarity(flat_half, flat_full, 0)) > 0.999
    total = float(flat_full.norm())
    for name, grad in half_grads.items():
        assert float((grad - full_grads[name]).norm()) <= 0.05 * total, name


@pytest.mark.parametrize("pe", ["geope", "point3drope", "pointrope", "rope3d", "lingeope"])
def test_the_coordinates_are_checked_once_at_the_input(pe):
    """The encodings inside the network do not check finiteness (a synchronisation per attention layer on a
    GPU): the network's input check does, naming ``coord``."""
    model = net(pe, 64)
    assert all(not enc.check_finite for enc in model.backbone.enc.enc0.block0.attn.pe.by_width.values())
    pos, x, offset, grid = cloud()
    pos[5, 0] = float("inf")
    with pytest.raises(ValueError, match="expected finite coord"):
        model(pos, x, offset, grid_coord=grid)


def test_shuffles_follow_the_mode_of_each_module():
    """``PTv3Seg`` builds its backbone with ``shuffle_in_eval=False``: in eval mode its forward draws nothing
    from torch's generator (the test and ``predict`` agree whatever its state); in training it draws
    Pointcept's ``randperm(4)`` at serialization (``model.ptv3.shuffle_orders``) and at its one pooling. The
    mode is the modules' own (``train()`` / ``eval()`` of the segmentor reach them), switched back and forth."""
    model = net("none", 16)
    pos, x, offset, grid = cloud(60)

    def state_after_forward():
        torch.manual_seed(5)
        with torch.no_grad():
            model(pos, x, offset, grid_coord=grid)
        return torch.get_rng_state()

    def state_after_draws(draws):
        torch.manual_seed(5)
        for _ in range(draws):
            torch.randperm(4)
        return torch.get_rng_state()

    for mode, draws in ((False, 0), (True, 2), (False, 0), (True, 2)):
        model.train(mode)
        assert torch.equal(state_after_forward(), state_after_draws(draws)), (mode, draws)
    assert not model.backbone.shuffle_in_eval
    assert all(not m.shuffle_in_eval for m in model.modules() if type(m).__name__ == "SerializedPooling")


def utonia_point3drope(x, xyz, base=10.0):
    """Utonia's Point3DRoPE from its definition (Pointcept ``point_transformer_v3m3_utonia.py``), in its own form:
    axis ``a`` owns the third ``u`` of ``2Q`` channels, ``inv_freq = 1 / base^(arange(0, 2Q, 2) / 2Q)``,
    ``emb = [p_a inv_freq, p_a inv_freq]`` and ``u cos(emb) + [-u[Q:], u[:Q]] sin(emb)``, with ``p = xyz`` in
    the units Utonia's network receives. ``x (B, H, L, D)``, ``xyz (B, L, 3)``; ``D`` a multiple of 6."""
    two_q = x.shape[-1] // 3
    inv_freq = 1.0 / base ** (torch.arange(0, two_q, 2, dtype=x.dtype) / two_q)
    thirds = []
    for a in range(3):
        u = x[..., a * two_q: (a + 1) * two_q]
        emb = xyz[:, None, :, a: a + 1] * inv_freq
        emb = torch.cat([emb, emb], -1)
        half = torch.cat([-u[..., two_q // 2:], u[..., : two_q // 2]], -1)
        thirds.append(u * emb.cos() + half * emb.sin())
    return torch.cat(thirds, -1)


def test_the_point3drope_preset_turns_at_utonias_s3dis_angles():
    """Utonia's S3DIS configs (``semseg-utonia-v1m1-3*-s3dis-*.py``) scale every room by 0.5 first
    (``RandomScale([0.5, 0.5])``), so its Point3DRoPE reads half-metres. The preset on metres turns as Utonia's
    definition on half the coordinates: a point 1 m along x turns x's pair 0 (channels 0 and Q = 3) by 0.5 rad
    and pair 1 by 0.5 / 10^(1/3) rad, and random tokens at +-3 m as the definition does."""
    cfg = load_config(POINT3DROPE_PRESET)
    enc = PTv3Seg(cfg.model, cfg.data.grid_size).eval().backbone.enc.enc0.block0.attn.pe.by_width["18"]
    q = torch.zeros(1, 1, 2, 18, dtype=F64)
    q[0, 0, 0, 0] = q[0, 0, 1, 1] = 1.0                                          # x's pairs 0 and 1, first channels
    turned, _ = enc(q, q, torch.tensor([[[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]], dtype=F64))
    for token, pair in ((0, 0), (1, 1)):
        angle = 0.5 * 10.0 ** (-pair / 3)
        want = torch.zeros(18, dtype=F64)
        want[pair], want[pair + 3] = math.cos(angle), math.sin(angle)
        torch.testing.assert_close(turned[0, 0, token], want, atol=1e-15, rtol=0)
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(2, 3, 7, 18, generator=g, dtype=F64) for _ in range(2))
    metres = torch.rand(2, 7, 3, generator=g, dtype=F64) * 6 - 3
    q_out, k_out = enc(q, k, metres)
    torch.testing.assert_close(q_out, utonia_point3drope(q, 0.5 * metres), atol=1e-13, rtol=0)
    torch.testing.assert_close(k_out, utonia_point3drope(k, 0.5 * metres), atol=1e-13, rtol=0)


@pytest.mark.parametrize("pe", ["geope", "lingeope", "rope3d"])
def test_geope_learnable_learns_the_frequencies_of_each_encoding_at_geopes(pe):
    """``model.geope_learnable=true`` makes GeoPE's 6 block frequencies of head width 18 a parameter of
    ``geope``, ``lingeope`` and ``rope3d`` alike (``rope3d`` ignored it before: a geope-vs-rope3d ablation then
    differed in more than the coupling of the axes); one training step gives each a gradient, but ``rope3d``'s
    odd blocks, whose scales its pairs do not read (``k_2j``), exactly 0."""
    model = net(pe, 64, extra=["model.geope_learnable=true"]).train()
    freqs = model.frequency_parameters()
    assert [f.shape for f in freqs] == [torch.Size([6])]
    pos, x, offset, grid = cloud()
    torch.manual_seed(0)
    model(pos, x, offset, grid_coord=grid).square().sum().backward()
    grad = freqs[0].grad
    if pe == "rope3d":
        assert bool((grad[0::2] != 0).all()) and bool((grad[1::2] == 0).all())
    else:
        assert bool((grad != 0).all())


def test_a_ptv1_config_is_refused_naming_the_backbone_and_a_ptv3_config_needs_not_name_it():
    """The mirror of PointTransformerSeg's refusal of backbone 'ptv3': a config whose backbone is not 'ptv3' and
    that reads as PTv1's (a PTv1 key written, a PTv1 preset) built a PTv3 that ignored its sizes. A config made in
    code for PTv3Seg that leaves the backbone at its default builds the same network as one that names it."""
    from pointgeope.model.config import ModelConfig, PTv3Config

    demo = load_config(Path(__file__).resolve().parents[3] / "configs" / "demo.yaml").model
    with pytest.raises(ValueError, match=r"^expected backbone 'ptv3' for PTv3Seg, got 'ptv1' with PTv1's planes, "
                                         r"blocks, strides, neighbours, decoder_blocks; set backbone='ptv3'"):
        PTv3Seg(demo, grid_size=0.04)
    with pytest.raises(ValueError, match=r"got 'ptv1' with PTv1's pe='rpe' \(a PTv1 preset\)"):
        PTv3Seg(ModelConfig(), grid_size=0.04)
    with pytest.raises(ValueError, match=r"got 'ptv2'; set backbone='ptv3'"):
        PTv3Seg(ModelConfig(backbone="ptv2", pe="geope"), grid_size=0.04)
    small = PTv3Config(stride=[2], enc_depths=[1, 1], enc_channels=[18, 36], enc_num_head=[1, 2],
                       enc_patch_size=[16, 16], dec_depths=[1], dec_channels=[18], dec_num_head=[1],
                       dec_patch_size=[16])
    torch.manual_seed(0)
    unnamed = PTv3Seg(ModelConfig(pe="geope", ptv3=small), grid_size=0.1).eval()
    torch.manual_seed(0)
    named = PTv3Seg(ModelConfig(backbone="ptv3", pe="geope", ptv3=small), grid_size=0.1).eval()
    pos, x, offset, grid = cloud(40)
    torch.testing.assert_close(unnamed(pos, x, offset, grid_coord=grid), named(pos, x, offset, grid_coord=grid),
                               rtol=0, atol=0)


def test_the_refusal_of_a_ptv1_config_suggests_a_call_that_builds_ptv1():
    """The call the message names, evaluated as written, builds the PTv1 network (its grid_size is keyword-only)."""
    import re

    import pointgeope
    import pointgeope.model
    from pointgeope.model import PointTransformerSeg

    demo = load_config(Path(__file__).resolve().parents[3] / "configs" / "demo.yaml").model
    with pytest.raises(ValueError) as refused:
        PTv3Seg(demo, 0.04)
    call = re.search(r"(pointgeope\.model\.PointTransformerSeg\([^)]*\))", str(refused.value)).group(1)
    built = eval(call, {  # noqa: S307 - the code the refusal tells a user to write, run as written
        "pointgeope": pointgeope, "config": demo, "grid_size": 0.04})
    assert isinstance(built, PointTransformerSeg)


@pytest.mark.parametrize("pe", ["none", "geope", "point3drope"])
@pytest.mark.parametrize("grid_size", [0.0, -1.0, float("nan"), float("inf")])
def test_a_grid_size_not_a_finite_number_above_0_is_refused_by_its_name(pe, grid_size):
    from pointgeope.model.config import ModelConfig

    with pytest.raises(ValueError, match=r"^expected grid_size a finite number > 0 \(the voxel size, m\), got "):
        PTv3Seg(ModelConfig(backbone="ptv3", pe=pe), grid_size)


@pytest.mark.parametrize("key,value,message", [
    ("enc_num_head", [2, 4, 8, 16], r"^expected enc_num_head of 5 values \(one per stage\), got \[2, 4, 8, 16\]$"),
    ("dec_channels", [64, 64, 128, 256, 512], r"^expected dec_channels of 4 values \(stages - 1\), got "),
])
def test_a_head_list_of_another_length_is_refused_by_its_name_in_code(key, value, message):
    # the head widths of the encodings pair channels with heads (a strict zip): the list is named first
    from pointgeope.model.config import ModelConfig, PTv3Config

    with pytest.raises(ValueError, match=message):
        PTv3Seg(ModelConfig(backbone="ptv3", pe="geope", ptv3=PTv3Config(**{key: value})), 0.1)


def test_float32_utm_positions_are_warned_once():
    """PTv3's forward warns as PTv1's (pointgeope/model/coord_check.py): 5e5 m in [2^18, 2^19), float32 steps of
    2^-5 m = 0.031 m, past an eighth of the 0.1 m voxel; once per network."""
    import warnings
    model = net("geope", 64)
    pos, feat, offset, grid = cloud()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            for _ in range(2):
                model(pos + torch.tensor([5.0e5, 0.0, 0.0]), feat, offset, grid_coord=grid)
            net("geope", 64)(pos, feat, offset, grid_coord=grid)                # metres from 0: nothing to say
    said = [str(w.message) for w in caught if w.category is RuntimeWarning]
    assert len(said) == 1 and "where float32 comes in steps of 0.0312 m (the model's voxels: 0.1 m)" in said[0]


@pytest.mark.parametrize("make", [lambda pos: (pos * 10).long(), lambda pos: pos > 0.3], ids=["int64", "bool"])
def test_positions_not_of_floats_are_refused_in_one_line_not_by_the_coarse_coord_warning(make):
    """The float32-step warning runs before the backbone's input checks; positions of integers or bools are not
    its to read (torch.finfo of int64 was a TypeError, abs of bool a NotImplementedError): the backbone names them."""
    pos, feat, offset, grid = cloud()
    with pytest.raises(ValueError, match=r"expected coord of shape \(N, 3\) float, got \(40, 3\) torch\.(int64|bool)"):
        net("geope", 64)(make(pos), feat, offset, grid_coord=grid)
