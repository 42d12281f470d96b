"""Tests of pointgeope/model/attention_checks.py: the fused attention's public ops (``relation``,
``aggregate``, ``frame_relation``, ``linear_relation``) refuse wrong shapes, dtypes and out-of-range indices
in one line before any kernel runs (the kernels read past a tensor's end), on the Triton path and on the torch
path alike, and never turn a kernel off."""
from __future__ import annotations

import warnings

import pytest
import torch

pytest.importorskip("triton")

from pointgeope.model import fused_attention as fa, kernels
from pointgeope.model.kernels import KernelArgumentError, KernelFallbackWarning

pytestmark = pytest.mark.usefixtures("interpreted_cpu")
N, K, C = 10, 4, 12


def _inputs():
    g = torch.Generator().manual_seed(0)
    return dict(key=torch.randn(N, C, generator=g), q=torch.randn(N, C, generator=g),
                idx=torch.randint(0, N, (N, K), generator=g), delta=torch.randn(N, K, C, generator=g),
                w=torch.randn(N, K, C // 2, generator=g), tables=torch.randn(5, N, C, generator=g),
                disp=torch.randn(N, K, 3, generator=g), scale=torch.rand(4, generator=g))


def _call(op: str, t: dict, **change):
    t = dict(t, **change)
    if op == "relation":
        return fa.relation(t["key"], t["idx"], t["q"], t["delta"])
    if op == "aggregate":
        return fa.aggregate(t["w"], t["key"], t["idx"], t["delta"], 2)
    if op == "frame_relation":
        return fa.frame_relation(t["key"], t["idx"], t["tables"], t["q"], t["delta"])
    return fa.linear_relation(t["key"], t["idx"], t["disp"], t["scale"], t["q"], t["delta"])


RELATIONS = ("relation", "frame_relation", "linear_relation")
BAD = [(op, name, make, said) for op in RELATIONS + ("aggregate",) for name, make, said in (
    ("idx past the rows", lambda t: dict(idx=t["idx"] + 5),
     r"expected idx in \[0, 10\) .*got values in \[\d+, 1[0-4]\]"),
    ("negative idx", lambda t: dict(idx=t["idx"] - 1), r"expected idx in \[0, 10\) .*got values in \[-1, "),
    ("1-D idx", lambda t: dict(idx=t["idx"][:, 0]), r"expected idx of shape \(N, k\), int64 .*got \(10,\)"),
    ("int32 idx", lambda t: dict(idx=t["idx"].int()), r"int64 .*got \(10, 4\) torch.int32"),
    ("delta of k = 2", lambda t: dict(delta=t["delta"][:, :2]), r"expected delta of shape \(10, 4, 12\)"),
    ("int source rows", lambda t: dict(key=t["key"].long()),
     r"of shape \(N_s, C\), floating, got \(10, 12\) torch.int64"),
)] + [(op, name, make, said) for op in RELATIONS for name, make, said in (
    ("q of 5 rows", lambda t: dict(q=t["q"][:5]), r"expected q of shape \(10, 12\).*got \(5, 12\)"),
    ("q of 4 channels", lambda t: dict(q=t["q"][:, :4]), r"expected q of shape \(10, 12\).*got \(10, 4\)"),
)] + [
    ("aggregate", "w with k = 3", lambda t: dict(w=t["w"][:, :3]),
     r"expected w of shape \(10, 4, G\).*got \(10, 3, 6\)"),
    ("aggregate", "w of 5 groups", lambda t: dict(w=t["w"][..., :5]), r"expected v of 10 channels .*got 12"),
    ("frame_relation", "tables of 4 channels", lambda t: dict(tables=t["tables"][..., :4]),
     r"expected tables of shape \(5, 10, 12\)"),
    ("frame_relation", "idx of other queries", lambda t: dict(idx=t["idx"][:6]), r"expected self-attention"),
    ("linear_relation", "disp of 2 axes", lambda t: dict(disp=t["disp"][..., :2]),
     r"expected disp of shape \(10, 4, 3\)"),
    ("linear_relation", "5 blocks of 12 channels", lambda t: dict(scale=torch.rand(5)), r"block_scale .* 3 n <= 12"),
]


@pytest.mark.parametrize("path", ["triton", "torch"])
@pytest.mark.parametrize("op, name, make, said", BAD, ids=[f"{op}: {name}" for op, name, _, _ in BAD])
def test_a_wrong_argument_is_one_line_before_any_kernel_and_leaves_the_kernel_on(path, op, name, make, said,
                                                                                  monkeypatch):
    monkeypatch.setenv("POINTGEOPE_KERNELS", path)
    t = _inputs()
    ran = []
    monkeypatch.setattr(fa.KERNELS[op], "triton", lambda *a: ran.append("triton"))
    monkeypatch.setattr(fa.KERNELS[op], "torch", lambda *a: ran.append("torch"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelFallbackWarning)
        with pytest.raises(KernelArgumentError, match=said):
            _call(op, t, **make(t))
    assert ran == [] and kernels.failures() == {}
    _call(op, t)                                                     # the same call, right: the kernel runs
    assert ran == [path]


@pytest.mark.parametrize("op", RELATIONS + ("aggregate",))
def test_check_index_false_skips_only_the_range(op, monkeypatch):
    """The opt-out the attention layer takes (its idx: the kNN's rows): no pass over idx, no host read on CUDA;
    the shapes are still checked."""
    t = _inputs()
    ran = []
    monkeypatch.setattr(fa.KERNELS[op], "triton", lambda *a: ran.append(a))
    monkeypatch.setattr(torch, "aminmax", lambda *a: pytest.fail("the range was read"))
    call = {"relation": lambda **c: fa.relation(t["key"], c["idx"], t["q"], check_index=False),
            "aggregate": lambda **c: fa.aggregate(t["w"], t["key"], c["idx"], None, 2, check_index=False),
            "frame_relation": lambda **c: fa.frame_relation(t["key"], c["idx"], t["tables"], t["q"], check_index=False),
            "linear_relation": lambda **c: fa.linear_relation(t["key"], c["idx"], t["disp"], t["scale"], t["q"],
                                                              check_index=False)}[op]
    call(idx=t["idx"] + 5)
    assert len(ran) == 1
    with pytest.raises(KernelArgumentError, match=r"expected idx of shape \(N, k\)"):
        call(idx=t["idx"][:, 0])


@pytest.mark.parametrize("op", RELATIONS + ("aggregate",))
def test_meta_tensors_take_the_shape_checks_and_skip_the_range(op, monkeypatch):
    """Shape propagation on meta tensors (no data) worked before the checks; the range check's host read then
    raised "Tensor.item() cannot be called on meta tensors". A wrong shape is still refused."""
    monkeypatch.setenv("POINTGEOPE_KERNELS", "torch")
    meta = {name: t.to("meta") for name, t in _inputs().items()}
    out = _call(op, meta)
    assert out.is_meta and tuple(out.shape) == ((N, C) if op == "aggregate" else (N, K, C))
    with pytest.raises(KernelArgumentError, match=r"expected idx of shape \(N, k\)"):
        _call(op, meta, idx=meta["idx"][:, 0])
