"""Tests of pointgeope/model/attention.py: presets, a slow float64 reference, gradcheck, translation behaviour,
memory, mixed precision; every preset, GeoPE's baselines (rope3d, pointrope, rope-mixed, ape) included."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from pointgeope.geope import frequencies, rotation_matrix
from pointgeope.model.attention import PRESETS, PointTransformerLayer, PositionalEncoding
from pointgeope.model.ops import knn
from tests.conftest import cuda_devices

PRESET_NAMES = ["rpe", "geope", "lingeope", "geope+rpe", "lingeope+rpe", "none", "rope3d", "rope3d+rpe", "rope-mixed",
                "pointrope", "ape"]


def _cloud(n=60, channels=16, k=8, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    coord = (torch.rand(n, 3, generator=g, dtype=torch.float64) * 2).to(dtype)
    feat = torch.randn(n, channels, generator=g, dtype=torch.float64).to(dtype)
    off = torch.tensor([n])
    idx, _ = knn(coord, coord, k, off, off)
    return coord, feat, idx


def _layer(pe, channels=16, k=8, seed=0, **kw):
    torch.manual_seed(seed)
    layer = PointTransformerLayer(channels, share_planes=4, neighbours=k, pe=pe, **kw)
    # non-trivial BatchNorm statistics for eval mode
    for m in layer.modules():
        if isinstance(m, torch.nn.BatchNorm1d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    if layer.pair_freq is not None:                  # RoPE-Mixed after some training: the axes mix
        layer.pair_freq.data += torch.randn_like(layer.pair_freq)
    return layer.eval()


def test_presets_and_unknown_name():
    assert sorted(PRESETS) == sorted(PRESET_NAMES)
    assert PositionalEncoding.preset("geope") == PositionalEncoding("geope", False, "rpe")
    assert PositionalEncoding.preset("lingeope+rpe") == PositionalEncoding("lingeope", True, "rpe")
    with pytest.raises(ValueError, match=r"expected one of .*'geope'.*'rpe'"):
        PositionalEncoding.preset("rope")
    with pytest.raises(ValueError, match="rotation"):
        PositionalEncoding("quaternion")
    assert PointTransformerLayer(16, 4, 8, pe="none").linear_p is None
    assert PositionalEncoding.preset("ape") == PositionalEncoding("none", False, "rpe", absolute=True)
    with pytest.raises(ValueError, match="at least 6 channels"):
        PointTransformerLayer(4, 4, 8, pe="rope3d")


@pytest.mark.parametrize("pe", PRESET_NAMES + [PositionalEncoding("geope", False, "geope"),
                                              PositionalEncoding("lingeope", True, "geope")])
def test_every_encoding_gives_shapes_and_a_finite_backward(pe):
    coord, feat, idx = _cloud()
    layer = PointTransformerLayer(16, share_planes=4, neighbours=8, pe=pe).train()
    feat = feat.requires_grad_()
    out = layer(coord, feat, idx)
    assert out.shape == (60, 16)
    out.square().mean().backward()
    assert torch.isfinite(feat.grad).all() and feat.grad.abs().sum() > 0
    assert all(torch.isfinite(p.grad).all() for p in layer.parameters() if p.grad is not None)


def _axial(channels, pos_scale):
    """Axial RoPE's frequency vectors from the definition: pair 3j + a turns by pos_scale w_{2j} p_a / 3."""
    w = frequencies(channels).double()
    freq = torch.zeros(3 * (channels // 6), 3, dtype=torch.float64)
    for j in range(channels // 6):
        for a in range(3):
            freq[3 * j + a, a] = pos_scale * w[2 * j] / 3
    return freq


def _pointrope(channels):
    """PointROPE's frequency vectors from LitePT's definition: pair 3q + a turns by 100^(-q/Q) g_a, Q = C // 6."""
    per_axis = channels // 6
    freq = torch.zeros(3 * per_axis, 3, dtype=torch.float64)
    for q in range(per_axis):
        for a in range(3):
            freq[3 * q + a, a] = 1.0 / 100.0 ** (q / per_axis)
    return freq


def _rot2(t):
    return torch.tensor([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]], dtype=torch.float64)


def _frames(layer, pi, pj, freq):
    """(channels, matrix) of every rotated block or pair, taking x_j into the frame of the query at pi:
    GeoPE ``R(t_i)^T R(t_j)`` or ``R(t_j - t_i)``, RoPE ``R(theta(p_i))^T R(theta(p_j))`` per pair."""
    c, pe = layer.channels, layer.pe
    if pe.rotation == "pointrope":                                 # integer cells of the layer's grid unit
        pi, pj = torch.floor(pi / layer.grid_unit), torch.floor(pj / layer.grid_unit)
    if pe.rotation in ("rope3d", "rope-mixed", "pointrope"):
        return [(slice(2 * q, 2 * q + 2), _rot2(-(f @ pi).item()) @ _rot2((f @ pj).item())) for q, f in enumerate(freq)]
    phase = frequencies(c).double() * layer.block_scale.pos_scale
    if pe.rotation == "lingeope":
        mats = [rotation_matrix((pj - pi) * phase[b]) for b in range(c // 3)]
    else:
        mats = [rotation_matrix(pi * phase[b]).T @ rotation_matrix(pj * phase[b]) for b in range(c // 3)]
    return [(slice(3 * b, 3 * b + 3), m) for b, m in enumerate(mats)]


def _reference(layer: PointTransformerLayer, coord, feat, idx):
    """Point Transformer attention written out pair by pair in float64, with explicit per-pair rotation
    matrices (``_frames``: ``pointgeope.geope.rotation_matrix`` for GeoPE, 2x2 matrices for RoPE) and, for
    APE, the sinusoids ``(cos, sin)(f_p . p)`` added to queries and keys."""
    p = {name: t.detach().double() for name, t in layer.state_dict().items()}
    coord, feat = coord.double(), feat.double()

    def bn(x, name):
        return ((x - p[name + ".running_mean"]) / (p[name + ".running_var"] + 1e-5).sqrt() * p[name + ".weight"]
                + p[name + ".bias"])

    def lin(x, name):
        return x @ p[name + ".weight"].T + p[name + ".bias"]

    c, s, pe = layer.channels, layer.share_planes, layer.pe
    freq = p.get("pair_freq", _axial(c, layer.block_scale.pos_scale) if layer.block_scale is not None else None)
    freq = _pointrope(c) if pe.rotation == "pointrope" else freq
    q, key, val = lin(feat, "linear_q"), lin(feat, "linear_k"), lin(feat, "linear_v")
    if pe.absolute:
        for i in range(feat.shape[0]):
            for pair, f in enumerate(freq):
                angle = (f @ coord[i]).item()
                q[i, 2 * pair: 2 * pair + 2] += torch.tensor([math.cos(angle), math.sin(angle)], dtype=torch.float64)
                key[i, 2 * pair: 2 * pair + 2] += torch.tensor([math.cos(angle), math.sin(angle)], dtype=torch.float64)
    out = torch.zeros_like(feat)
    for i in range(feat.shape[0]):
        rel_rows, val_rows = [], []
        for j in idx[i].tolist():
            d = coord[j] - coord[i]
            delta = (lin(F.relu(bn(lin(d, "linear_p.0"), "linear_p.1")), "linear_p.3") if layer.linear_p is not None
                     else 0)
            frames = _frames(layer, coord[i], coord[j], freq) if pe.rotation != "none" or pe.value == "geope" else []

            def turn(x):
                y = x.clone()
                for channels, mat in frames:  # noqa: B023 - called in this iteration only
                    y[channels] = mat @ x[channels]
                return y

            k_j = turn(key[j]) if pe.rotation != "none" else key[j]
            rel_rows.append(k_j - q[i] + (delta if pe.relation_delta else 0))
            v_j = {"rpe": lambda: val[j] + delta, "geope": lambda: turn(val[j]),  # noqa: B023 - called at once
                   "none": lambda: val[j]}[pe.value]()  # noqa: B023 - called at once
            val_rows.append(v_j)
        r = torch.stack(rel_rows)
        w = lin(F.relu(bn(lin(F.relu(bn(r, "linear_w.0")), "linear_w.2"), "linear_w.3")), "linear_w.5")
        w = torch.softmax(w, dim=0)                                  # (k, C/s)
        v = torch.stack(val_rows)
        out[i] = (v * w.repeat(1, s)).sum(0)                         # channel g*C/s + h uses w[:, h]
    return out


@pytest.mark.parametrize("pe", PRESET_NAMES + [PositionalEncoding("geope", True, "geope"),
                                              PositionalEncoding("lingeope", False, "geope"),
                                              PositionalEncoding("rope-mixed", False, "geope"),
                                              PositionalEncoding("pointrope", True, "geope")])
def test_float32_layer_matches_float64_reference(pe):
    coord, feat, idx = _cloud(n=16, channels=16, k=6, seed=1)
    layer = _layer(pe, k=6, grid_size=0.1, grid_unit=0.3)          # PointROPE: 0-6 cells of 30 cm
    expected = _reference(layer, coord, feat, idx)
    torch.testing.assert_close(layer(coord, feat, idx).double(), expected, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("pe", PRESET_NAMES + [PositionalEncoding("rope3d", False, "geope"),
                                              PositionalEncoding("pointrope", False, "geope")])
def test_layer_gradcheck(pe):
    """Gradients of the features (and of RoPE-Mixed's frequencies) against finite differences, float64."""
    coord, feat, idx = _cloud(n=6, channels=12, k=4, seed=6, dtype=torch.float64)
    layer = _layer(pe, channels=12, k=4).double()
    inputs = (feat.requires_grad_(),) + ((layer.pair_freq,) if layer.pair_freq is not None else ())
    threads = torch.get_num_threads()
    torch.set_num_threads(1)         # hundreds of tiny passes: threads only wait on each other (20x on 2 busy cores)
    try:
        assert torch.autograd.gradcheck(lambda x, *_: layer(coord, x, idx), inputs)
    finally:
        torch.set_num_threads(threads)


def test_translation_invariance_of_linear_geope_rope_and_rpe_but_not_standard_geope_nor_ape():
    coord, feat, idx = _cloud(seed=2)
    shift = torch.tensor([1.37, -0.52, 2.11])
    for pe in ("rpe", "lingeope", "lingeope+rpe", "none", "rope3d", "rope3d+rpe", "rope-mixed"):
        layer = _layer(pe)      # pointrope: invariant to shifts by whole cells (test below)
        torch.testing.assert_close(layer(coord + shift, feat, idx), layer(coord, feat, idx), atol=2e-5, rtol=1e-5)
    # Standard GeoPE takes keys into the query's frame R(t_i)^T R(t_j): for 3D axes these rotations do
    # not commute, so R(t_i)^T R(t_j) != R(t_j - t_i) and a global shift changes the relation. RoPE's 2D
    # rotations of one pair commute (invariant above, mixed frequencies too); APE adds e(p_j) - e(p_i).
    for pe in ("geope", "ape"):
        layer = _layer(pe)
        moved, still = layer(coord + shift, feat, idx), layer(coord, feat, idx)
        assert (moved - still).abs().max() > 1e-2, pe


def test_pointrope_layer_builds_its_frequencies_once(monkeypatch):
    """PointROPE's constant frequencies come from one table per device and dtype (``rope.pointrope_table``):
    the second forward builds none (before, every layer built them on the host and copied them to the device
    at every step), and gives the same output."""
    from pointgeope.geope import FixedTables
    from pointgeope.model import rope
    made = []
    monkeypatch.setattr(rope, "_POINTROPE_TABLES", FixedTables())
    monkeypatch.setattr(rope, "pointrope_frequencies",
                        lambda *a, _f=rope.pointrope_frequencies, **kw: made.append(a) or _f(*a, **kw))
    coord, feat, idx = _cloud(seed=3)
    layer = _layer("pointrope", grid_unit=0.25).eval()
    first = layer(coord, feat, idx)
    assert len(made) == 1
    assert torch.equal(layer(coord, feat, idx), first) and len(made) == 1


def test_pointrope_is_invariant_to_shifts_by_whole_cells_only():
    """PointROPE turns by the differences of integer cells: a shift by whole cells of the layer's grid
    unit leaves them (and the layer) as they were; any other shift moves points across cell boundaries."""
    coord, feat, idx = _cloud(seed=2)
    layer = _layer("pointrope", grid_unit=0.25)
    cells = torch.tensor([3.0, -2.0, 7.0]) * 0.25
    torch.testing.assert_close(layer(coord + cells, feat, idx), layer(coord, feat, idx), atol=2e-5, rtol=1e-5)
    assert (layer(coord + 0.1, feat, idx) - layer(coord, feat, idx)).abs().max() > 1e-2
    coarse = _layer("pointrope", grid_unit=0.5)                   # same weights, another stage's unit
    assert (coarse(coord, feat, idx) - layer(coord, feat, idx)).abs().max() > 1e-2
    assert layer.block_scale is None and layer.pair_freq is None and layer.frequency_parameters() == []
    with pytest.raises(ValueError, match="absolute sinusoids with pointrope"):
        PointTransformerLayer(16, 4, 8, pe=PositionalEncoding("pointrope", False, "rpe", absolute=True))


def test_learnable_frequencies_are_trained():
    coord, feat, idx = _cloud(seed=3)
    for pe in ("geope", "lingeope", "rope3d", "ape"):
        layer = PointTransformerLayer(16, 4, 8, pe=pe, geope_learnable=True).train()
        layer(coord, feat, idx).square().mean().backward()
        assert layer.block_scale.freq.grad is not None and layer.block_scale.freq.grad.abs().sum() > 0
    # RoPE-Mixed learns its own per-pair frequency vectors; mixed_init="axial" starts them as rope3d's
    mixed, axial = _layer("rope-mixed", seed=3), _layer("rope3d", seed=3)
    assert mixed.pair_freq.shape == (6, 3) and mixed.block_scale.freq is None
    assert mixed.frequency_parameters() == [mixed.pair_freq] and axial.frequency_parameters() == []
    torch.manual_seed(3)
    fresh = PointTransformerLayer(16, 4, 8, pe="rope-mixed", mixed_init="axial")
    torch.manual_seed(3)
    same = PointTransformerLayer(16, 4, 8, pe="rope3d")
    for name, value in same.state_dict().items():
        assert torch.equal(fresh.state_dict()[name], value), name
    torch.testing.assert_close(fresh.eval()(coord, feat, idx), same.eval()(coord, feat, idx), atol=1e-6, rtol=0)
    mixed.train()(coord, feat, idx).square().mean().backward()
    assert mixed.pair_freq.grad.abs().sum() > 0 and axial is not None


def test_rope_mixed_starts_from_its_authors_random_directions_by_default():
    """By default every layer draws its own random rotation of the axial layout, magnitudes 10^(-q/Q) rad
    per voxel (the original's per patch): pair norms as defined, directions not along the axes."""
    torch.manual_seed(4)
    first, second = (PointTransformerLayer(18, 3, 8, pe="rope-mixed", grid_size=0.05) for _ in range(2))
    norms = first.pair_freq.detach().double().norm(dim=1)
    expected = torch.tensor([20.0 * 10.0 ** (-q / 3) for q in range(3) for _ in range(3)], dtype=torch.float64)
    torch.testing.assert_close(norms, expected, atol=1e-5, rtol=1e-6)
    assert (first.pair_freq.abs() > 1e-3).sum() > 3                          # mixed: several axes per pair
    assert (first.pair_freq - second.pair_freq).abs().max() > 1e-2            # one draw per layer
    geo = PointTransformerLayer(16, 4, 8, pe="geope", geope_learnable=True)
    assert geo.frequency_parameters() == [geo.block_scale.freq]
    with pytest.raises(ValueError, match="mixed_init"):
        PointTransformerLayer(16, 4, 8, pe="rope-mixed", mixed_init="diagonal")


def test_learnable_frequencies_of_older_checkpoints_load():
    """Before the block scale was named, the layer's learnable frequencies were saved as ``geope.freq``."""
    layer = PointTransformerLayer(16, 4, 8, pe="geope", geope_learnable=True)
    state = {("geope.freq" if k == "block_scale.freq" else k): v + 1 for k, v in layer.state_dict().items()}
    fresh = PointTransformerLayer(16, 4, 8, pe="geope", geope_learnable=True)
    fresh.load_state_dict(state)  # strict: every key used, none missing
    assert torch.equal(fresh.block_scale.freq, state["geope.freq"])


def _saved_bytes(layer, coord, feat, idx) -> int:
    saved = {}
    def pack(t):
        saved[(t.data_ptr(), t.numel())] = t.numel() * t.element_size()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        layer(coord, feat.requires_grad_(), idx)
    return sum(saved.values())


def test_rotations_save_no_more_for_backward_than_rpe():
    coord, feat, idx = _cloud(n=400, channels=32, k=16, seed=4)
    sizes = {pe: _saved_bytes(PointTransformerLayer(32, 8, 16, pe=pe).train(), coord, feat.clone(), idx)
             for pe in ("rpe", "geope", "lingeope", "rope3d", "pointrope", "rope-mixed", "ape")}
    for pe in ("geope", "lingeope", "rope3d", "pointrope", "ape"):
        assert sizes[pe] <= 1.01 * sizes["rpe"], sizes
    # RoPE-Mixed's frequency gradient needs the keys (N, C): 1/k of a pair tensor, nothing of pair size
    assert sizes["rope-mixed"] <= 1.01 * sizes["rpe"] + 400 * 32 * 4, sizes


@pytest.mark.parametrize("device", cuda_devices())
def test_mixed_precision_geope_layer_is_as_accurate_as_rpe(device):
    """Under bfloat16 autocast (how ``train.amp=bf16`` trains) the GeoPE layers stay as close to the
    float64 layer as the published RPE layer does: rotations are computed in float32 (phases reach
    hundreds of radians) and rounded once, so the rotation adds no error beyond the other roundings."""
    coord, feat, idx = _cloud(n=2000, channels=64, k=16, seed=5, dtype=torch.float64)
    coord = coord * 4                                  # phases up to ~ 8 m / 0.04 m = 200 rad
    errors = {}
    for pe in ("rpe", "geope", "lingeope", "rope3d", "pointrope", "rope-mixed", "ape"):
        layer = _layer(pe, channels=64, k=16).double()
        with torch.no_grad():
            exact = layer(coord, feat, idx)
            layer = layer.float().to(device)
            with torch.autocast(device, dtype=torch.bfloat16):
                half = layer(coord.float().to(device), feat.float().to(device), idx.to(device))
        errors[pe] = ((half.double().cpu() - exact).norm() / exact.norm()).item()
    assert errors["rpe"] < 0.01, errors                # autocast did run in bfloat16 (float32 gives ~1e-7)
    assert errors["rpe"] > 1e-4, errors
    rotations = ("geope", "lingeope", "rope3d", "pointrope", "rope-mixed", "ape")
    assert all(errors[pe] < 1.1 * errors["rpe"] for pe in rotations), errors
