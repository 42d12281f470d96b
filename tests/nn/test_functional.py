"""Tests of pointgeope/nn/functional.py: attention scores see positions only through GeoPE's relation
``R(t_i)^T R(t_j)`` (docs/GEOPE_SPEC.md), checked against quaternion sandwiches and the spec's vectors."""
from __future__ import annotations

import inspect
import json
import math

import numpy as np
import pytest
import torch

from pointgeope.geope import BlockScale, frequencies
from pointgeope.nn import geope_attention, geope_qk
from tests.nn import reference as ref


def reference_scores(q, k, pos_q, pos_k, base, pos_scale):
    """``q_i . R(t_i)^T R(t_j) k_j`` for every pair, the rotation from quaternions, pair by pair."""
    return torch.tensor([[float(q[i] @ ref.geope_turn(k[j], pos_q[i], pos_k[j], base, pos_scale, linear=False))
                          for j in range(k.shape[0])] for i in range(q.shape[0])], dtype=torch.float64)


@pytest.mark.parametrize("axes", [1, 2, 3])
def test_scores_are_the_relative_rotation_between_query_and_key(axes):
    gen = torch.Generator().manual_seed(axes)
    q, k = (torch.randn(n, 8, generator=gen, dtype=torch.float64) for n in (5, 6))   # 2 blocks + 2 pass-through
    pos_q, pos_k = (torch.rand(n, axes, generator=gen, dtype=torch.float64) * 2 for n in (5, 6))
    q_rot, k_rot = geope_qk(q, k, pos_q, pos_k, base=10.0, pos_scale=3.0)
    torch.testing.assert_close(q_rot @ k_rot.T, reference_scores(q, k, pos_q, pos_k, 10.0, 3.0), atol=1e-10, rtol=0)


@pytest.mark.parametrize("pos_dtype", [torch.float32, torch.bfloat16])
def test_float64_features_are_turned_in_float64_whatever_the_positions_dtype(pos_dtype):
    """float64 queries and keys are rotated in float64 (the spec's 1e-10) from the exact values of float32 or
    bfloat16 positions: with phases of ~100 radians, block scales rounded to float32 gave errors of ~3e-6."""
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(6, 12, generator=gen, dtype=torch.float64) for _ in range(2))
    pos = (torch.rand(6, 3, generator=gen) * 4).to(pos_dtype)
    q_rot, k_rot = geope_qk(q, k, pos)
    assert q_rot.dtype == k_rot.dtype == torch.float64
    origin = torch.zeros(3, dtype=torch.float64)
    for got, x in ((q_rot, q), (k_rot, k)):                      # R(0)^T R(t_i) x_i = R(t_i) x_i
        want = torch.stack([ref.geope_turn(x[i], origin, pos[i].double(), 100.0, 25.0, linear=False)
                            for i in range(6)])
        torch.testing.assert_close(got, want, atol=1e-10, rtol=0)


@pytest.mark.parametrize("wide", ["q", "k", "block_scale"])
def test_one_float64_input_turns_both_sides_in_float64(wide):
    """Where any input is float64 both rotations run in float64 and each output is rounded once to its own dtype:
    the float32 side equals the all-float64 rotation rounded to float32 (it was turned in float32, 4e-5 off at
    phases of ~500 rad)."""
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(200, 6, generator=gen) for _ in range(2))
    pos = torch.rand(200, 3, generator=gen) * 20
    scale = BlockScale(6)(torch.float64, "cpu")
    want_q, want_k = geope_qk(q.double(), k.double(), pos.double(), block_scale=scale)
    args = dict(q=q, k=k, block_scale=scale.float())
    args[wide] = scale if wide == "block_scale" else args[wide].double()
    got_q, got_k = geope_qk(args["q"], args["k"], pos, block_scale=args["block_scale"])
    assert (got_q.dtype, got_k.dtype) == (args["q"].dtype, args["k"].dtype)
    if wide == "block_scale":          # its own precision: the float64 k_b, not those rounded to float32
        want_q, want_k = want_q.float(), want_k.float()
    else:                              # the float32 k_b that came, in float64 arithmetic
        want_q, want_k = geope_qk(q.double(), k.double(), pos.double(), block_scale=scale.float().double())
        want_q, want_k = want_q.to(args["q"].dtype), want_k.to(args["k"].dtype)
    torch.testing.assert_close(got_q, want_q, atol=0, rtol=0)
    torch.testing.assert_close(got_k, want_k, atol=0, rtol=0)


def test_scores_match_the_spec_vectors(geope_vectors_path):
    """One block at pos_scale 1: block 0's phases are the positions, so the spec's matrices give the scores."""
    cases = [c for c in json.loads(geope_vectors_path.read_text())["matrix"] if c["axes"] == 3]
    assert len(cases) >= 10
    gen = torch.Generator().manual_seed(0)
    for a, b in zip(cases[:-1], cases[1:], strict=True):
        q, k = torch.randn(2, 3, generator=gen, dtype=torch.float64)
        m_a, m_b = torch.tensor(a["matrix"], dtype=torch.float64), torch.tensor(b["matrix"], dtype=torch.float64)
        q_rot, k_rot = geope_qk(q[None], k[None], torch.tensor([a["phases"]], dtype=torch.float64),
                                torch.tensor([b["phases"]], dtype=torch.float64), pos_scale=1.0)
        torch.testing.assert_close(q_rot[0] @ k_rot[0], q @ m_a.T @ m_b @ k, atol=1e-10, rtol=0)


def test_positions_enter_only_through_the_relation():
    """Points on one line through the origin turn about the same axis, so ``R(t_i)^T R(t_j)`` depends on their
    difference only: sliding both along the line keeps every score; a shift off the line changes them (standard
    GeoPE is not translation invariant), and equal positions give the plain dot product."""
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(4, 9, generator=gen, dtype=torch.float64), torch.randn(4, 9, generator=gen, dtype=torch.float64)
    axis = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64) / math.sqrt(5.25)
    s_q, s_k = (torch.rand(4, 1, generator=gen, dtype=torch.float64),
                torch.rand(4, 1, generator=gen, dtype=torch.float64))

    def scores(pos_q, pos_k):
        q_rot, k_rot = geope_qk(q, k, pos_q, pos_k, pos_scale=2.0)
        return q_rot @ k_rot.T
    on_line = scores(s_q * axis, s_k * axis)
    torch.testing.assert_close(scores((s_q + 0.7) * axis, (s_k + 0.7) * axis), on_line, atol=1e-12, rtol=0)
    shift = torch.tensor([0.0, 0.3, 0.7], dtype=torch.float64)
    assert (scores(s_q * axis + shift, s_k * axis + shift) - on_line).abs().max() > 1e-2
    same = torch.rand(4, 3, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(torch.diagonal(scores(same, same)), (q * k).sum(1), atol=1e-12, rtol=0)


def test_attention_with_heads_and_a_window_mask_is_softmax_of_the_relative_scores():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 6, generator=gen, dtype=torch.float64) for _ in range(3))   # (B, H, L, C)
    pos = torch.rand(2, 5, 3, generator=gen, dtype=torch.float64)
    window = (torch.arange(5)[:, None] - torch.arange(5)).abs() <= 1                           # neighbours in a row
    got = geope_attention(q, k, v, pos[:, None], attn_mask=window)
    for b in range(2):
        for h in range(2):
            scores = reference_scores(q[b, h], k[b, h], pos[b], pos[b], 100.0, 25.0) / math.sqrt(6)
            weight = torch.softmax(scores.masked_fill(~window, -math.inf), dim=-1)
            torch.testing.assert_close(got[b, h], weight @ v[b, h], atol=1e-10, rtol=0)


def test_block_scale_argument_and_gradients():
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(4, 6, generator=gen, dtype=torch.float64, requires_grad=True) for _ in range(2))
    pos = torch.rand(4, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    scales = BlockScale(6, base=100.0, pos_scale=5.0)
    torch.testing.assert_close(geope_qk(q, k, pos, block_scale=scales(torch.float64, pos.device)),
                               geope_qk(q, k, pos, pos_scale=5.0), atol=1e-14, rtol=0)
    freq = frequencies(6).requires_grad_()                       # learnt frequencies: k_b = pos_scale w_b / 3

    def attention(q, k, pos, freq):
        return geope_attention(q, k, k, pos, block_scale=freq * 5.0 / 3)
    assert torch.autograd.gradcheck(attention, (q, k, pos, freq), fast_mode=False)
    with pytest.raises(ValueError, match="same width"):
        geope_qk(q, k[:, :5], pos)


def test_positions_of_heads_must_keep_the_head_dim():
    """`(B, L, 3)` against `(B, H, L, C)` broadcast silently when B == H (other scores) and cryptically when not:
    both are refused with the expected shape; `(B, 1, L, 3)` and a shared `(L, 3)` are accepted."""
    gen = torch.Generator().manual_seed(0)
    pos = torch.rand(2, 5, 3, generator=gen)
    for heads in (2, 3):
        q = torch.randn(2, heads, 5, 6, generator=gen)
        with pytest.raises(ValueError, match=rf"expected pos_q of shape \(5, A\) or \(1\|2, 1\|{heads}, 5, A\) for q "
                                             rf"\(2, {heads}, 5, 6\) \(e.g. \(B, 1, L, A\) for \(B, H, L, C\) heads\), "
                                             r"got \(2, 5, 3\)"):
            geope_qk(q, q, pos)
        q_rot, _ = geope_qk(q, q, pos[:, None])
        torch.testing.assert_close(q_rot[1, 0], geope_qk(q[1, 0], q[1, 0], pos[1])[0], atol=1e-6, rtol=0)
        shared, _ = geope_qk(q, q, pos[0])
        torch.testing.assert_close(shared[1, 1], geope_qk(q[1, 1], q[1, 1], pos[0])[0], atol=1e-6, rtol=0)
    q = torch.randn(2, 2, 5, 6, generator=gen)
    with pytest.raises(ValueError, match=r"expected pos_k of shape .* got \(2, 1, 4, 3\)"):
        geope_qk(q, q, pos[:, None], torch.rand(2, 1, 4, 3))
    with pytest.raises(ValueError, match=r"expected pos_q of shape .* got \(2, 1, 5, 4\)"):
        geope_attention(q, q, q, torch.rand(2, 1, 5, 4))


@pytest.mark.parametrize("name,value,error,message", [
    ("pos_scale", float("nan"), ValueError, "expected pos_scale a finite number > 0, got nan"),
    ("pos_scale", 0.0, ValueError, "expected pos_scale a finite number > 0, got 0.0"),
    ("base", 0, ValueError, "expected base a finite number > 0, got 0.0"),
    ("base", -5.0, ValueError, "expected base a finite number > 0, got -5.0"),
    ("base", float("inf"), ValueError, "expected base a finite number > 0, got inf"),
    ("base", "100", TypeError, "expected base a finite number > 0, got '100'"),
])
def test_frequency_settings_must_be_finite_and_positive(name, value, error, message):
    """`base=0`, `-5` or `pos_scale=nan` gave NaN scores, and `geope_attention` then finite garbage."""
    q = torch.randn(4, 6)
    pos = torch.rand(4, 3)
    for call in (lambda: geope_qk(q, q, pos, **{name: value}), lambda: geope_attention(q, q, q, pos, **{name: value})):
        with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
            call()


def test_integer_features_non_finite_positions_and_bad_block_scales_are_refused():
    q, pos = torch.randn(4, 6), torch.rand(4, 3)
    with pytest.raises(TypeError, match=r"expected q a floating-point tensor, got dtype torch.int64"):
        geope_qk(torch.ones(4, 6, dtype=torch.long), q, pos)
    with pytest.raises(TypeError, match=r"expected pos_k a floating-point tensor, got dtype torch.int32"):
        geope_qk(q, q, pos, pos.int())
    bad = pos.clone()
    bad[2, 0] = float("nan")
    with pytest.raises(ValueError, match=r"expected finite pos_q, got 1 NaN or infinite entries \(the first in row 2"):
        geope_attention(q, q, q, bad)
    with pytest.raises(ValueError, match=r"expected block_scale of shape \(C // 3,\) = \(2,\), got \(3,\)"):
        geope_qk(q, q, pos, block_scale=torch.ones(3))
    with pytest.raises(ValueError, match=r"expected q and k of width C >= 3 \(one rotated block\), got 2"):
        geope_qk(q[:, :2], q[:, :2], pos)


def test_positions_beyond_the_point_ops_limit_are_refused_by_name():
    """Finite positions beyond ~1.8e19 overflowed the rotation axis' float32 norm: NaN scores without a word.
    They are refused as `knn_graph` refuses them (+-2^60); the limit itself is taken."""
    q, pos = torch.randn(1, 1, 6, 6), torch.rand(6, 3)
    huge = (1 + pos) * 1e20                                  # every entry beyond the limit
    with pytest.raises(ValueError, match=r"expected pos_q within \+-2\^60 .* got 18 entries outside "
                                         r"\(the first in row 0: \["):
        geope_attention(q, q, q, huge[None, None])
    with pytest.raises(ValueError, match=r"expected pos_k within \+-2\^60 .* got 18 entries outside"):
        geope_qk(q, q, pos, huge)
    edge = torch.full((6, 3), 2.0 ** 60)
    assert all(t.isfinite().all() for t in geope_qk(q, q, edge))


def test_bfloat16_positions_beyond_the_limit_are_refused_as_float32_ones():
    """bfloat16 has float32's range (float16's ends at 65504): positions of 1e25 passed the NaN-only check
    of half dtypes and came back as NaN queries without a word. They are refused like float32 ones."""
    q, pos = torch.randn(6, 6, dtype=torch.bfloat16), torch.rand(6, 3)
    with pytest.raises(ValueError, match=r"expected pos_q within \+-2\^60 .* got 18 entries outside"):
        geope_qk(q, q, ((1 + pos) * 1e25).bfloat16())
    assert all(t.isfinite().all() for t in geope_qk(q, q, (pos * 10).bfloat16()))   # within it: taken


def test_default_key_positions_of_another_length_name_pos_k_missing():
    """`pos_k` defaults to `pos_q`: with more keys than queries the message named a `pos_k` the user never
    passed, and the query length as the shape it wanted."""
    with pytest.raises(ValueError, match=r"^expected pos_k for k's 7 keys, got none \(it defaults to pos_q, of 5 "
                                         r"rows\): pass pos_k of shape \(7, A\)$"):
        geope_qk(torch.randn(2, 5, 6), torch.randn(2, 7, 6), torch.rand(5, 3))
    with pytest.raises(ValueError, match=r"expected pos_k of shape \(7, A\) or \(1\|2, 7, A\) for k \(2, 7, 6\), "
                                         r"got \(5, 3\)"):
        geope_qk(torch.randn(2, 5, 6), torch.randn(2, 7, 6), torch.rand(5, 3), torch.rand(5, 3))


@pytest.mark.parametrize("name,value", [("pos_scale", -1.0), ("pos_scale", 1.0), ("base", 3.0), ("base", "x")])
def test_frequency_settings_next_to_block_scale_are_refused(name, value):
    """With `block_scale` its `k_b` are the frequencies: `pos_scale`/`base` were silently unread (even invalid
    ones), though documented as checked. Set away from their defaults they are refused; at them they run."""
    q, pos, scale = torch.randn(4, 6), torch.rand(4, 3), BlockScale(6)(torch.float32, torch.device("cpu"))
    message = rf"expected no {name} with block_scale .* got {name}={value!r}, which would change nothing"
    for call in (geope_qk, lambda q, k, pos, **kw: geope_attention(q, k, k, pos, **kw)):
        with pytest.raises(ValueError, match=message):
            call(q, q, pos, block_scale=scale, **{name: value})
    torch.testing.assert_close(geope_qk(q, q, pos, block_scale=scale, base=100.0, pos_scale=25), geope_qk(q, q, pos))
    for default in (np.float32(25.0), torch.tensor(25.0), np.int64(25)):    # the default as a NumPy or torch number
        torch.testing.assert_close(geope_qk(q, q, pos, block_scale=scale, pos_scale=default), geope_qk(q, q, pos))


def _defaults(fn) -> tuple:
    params = inspect.signature(fn).parameters
    return params["base"].default, params["pos_scale"].default


def test_the_default_frequencies_are_block_scales():
    """`base` and `pos_scale` default to `BlockScale`'s: the functions' signatures say so, and a call without
    them equals one with `block_scale` built by `BlockScale(C)` at its own defaults."""
    assert _defaults(geope_qk) == _defaults(geope_attention) == _defaults(BlockScale) == (100.0, 25.0)
    gen = torch.Generator().manual_seed(3)
    q, k, pos = torch.randn(5, 9, generator=gen), torch.randn(5, 9, generator=gen), torch.rand(5, 3, generator=gen)
    scale = BlockScale(9)(torch.float32, torch.device("cpu"))
    for got, want in zip(geope_qk(q, k, pos), geope_qk(q, k, pos, block_scale=scale), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_the_refusal_beside_block_scale_reads_the_signatures_defaults(monkeypatch):
    """The refusal of `base` or `pos_scale` beside `block_scale` compared them with a copy of the signature's
    defaults, which a change of the signature alone left behind (the new default refused as "set"). It reads
    `geope_qk`'s own: changed there, the new numbers are accepted and the old ones refused."""
    q, pos = torch.randn(4, 6), torch.rand(4, 3)
    scale = BlockScale(6)(torch.float32, torch.device("cpu"))
    monkeypatch.setattr(geope_qk, "__kwdefaults__", {**geope_qk.__kwdefaults__, "base": 7.0, "pos_scale": 2.0})
    want = geope_qk(q, q, pos, block_scale=scale)                   # the new defaults, unset
    for got, expected in zip(geope_qk(q, q, pos, block_scale=scale, base=7.0, pos_scale=2.0), want,  # set
                             strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"expected no pos_scale with block_scale .* got pos_scale=25.0"):
        geope_qk(q, q, pos, block_scale=scale, pos_scale=25.0)


def test_uncentred_positions_are_said_once_from_the_read_the_checks_already_make(monkeypatch):
    """UTM-scale positions (6.5e5 m) turn by float32 phases of millions of radians, whose rounding step is
    half a radian: rotations of noise (float32 scores far from float64's), without a word. One warning per
    process now, from the one host read a positions tensor already took (its finiteness), none for centred
    positions, and the pipeline's centring (minimum 0) makes the float32 scores those of float64."""
    import warnings

    import pointgeope.nn.checks as checks

    monkeypatch.setattr(checks, "_phase_warned", False)
    reads = []

    def counted(fn, name):  # each wrapper holds its own method and name, not the loop's last
        return lambda self, *a: reads.append(name) or fn(self, *a)

    for name in ("tolist", "item", "__bool__", "__float__", "__int__"):
        monkeypatch.setattr(torch.Tensor, name, counted(getattr(torch.Tensor, name), name))
    gen = torch.Generator().manual_seed(0)
    q, pos = torch.randn(16, 6, generator=gen), torch.rand(16, 3, generator=gen) * 20
    utm = pos.double() + torch.tensor([651_234.0, 4_812_345.0, 120.0], dtype=torch.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        qc, kc = geope_qk(q, q, pos)
        assert caught == [] and len(reads) == 1
        reads.clear()
        qu, ku = geope_qk(q, q, utm.float())
        assert len(reads) == 1 and [str(w.message)[:43] for w in caught] == [
            "GeoPE: pos_q up to 4.81e+06 in float32 turn"]
        assert "rounded in steps of 4.17 rad; centre them (subtract their minimum or mean" in str(caught[0].message)
        geope_qk(q, q, utm.float())
        assert len(caught) == 1                                    # once per process
        monkeypatch.setattr(checks, "_phase_warned", False)
        exact = [a @ b.T for a, b in (geope_qk(q.double(), q.double(), utm),)][0]
        assert len(caught) == 1                                    # float64 positions hold these phases
    monkeypatch.undo()
    assert (qu @ ku.T - exact).abs().max() > 1.0                   # float32: noise
    centred = geope_qk(q.double(), q.double(), pos.double())
    torch.testing.assert_close(qc @ kc.T, (centred[0] @ centred[1].T).float(), atol=1e-4, rtol=1e-4)
