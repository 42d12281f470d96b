"""Tests of pointgeope/model/qkv.py: the queries, keys and values as one product equal three ``nn.Linear`` (values,
gradients, every positional encoding's layer), launch 8 kernels with their backward where three Linears launch 14,
keep no more memory alive than three Linears where only the values are saved (the fused aggregation), run on meta
tensors,
and leave the layer's parameters, state-dict keys and optimiser state as three Linears have them."""
from __future__ import annotations

import collections
from types import SimpleNamespace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from pointgeope.model import attention
from pointgeope.model.attention import PointTransformerLayer
from pointgeope.model.ops import knn
from pointgeope.model.qkv import qkv_product

PRESETS = ["rpe", "geope", "lingeope", "geope+rpe", "none", "rope3d", "rope-mixed", "pointrope", "ape"]
QKV_KEYS = [f"linear_{n}.{p}" for n in "qkv" for p in ("weight", "bias")]


def _linears(c_in=12, c=8, dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    return tuple(torch.nn.Linear(c_in, c).to(dtype) for _ in range(3))


def _three(x, linears):
    """The definition: three separate products ``x W^T + b``."""
    return tuple(x @ lin.weight.T + lin.bias for lin in linears)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-13), (torch.float32, 1e-5)])
def test_product_equals_three_linears(dtype, tol):
    linears = _linears(dtype=dtype)
    x = torch.randn(50, 12, dtype=dtype, requires_grad=True)
    ours, ref = qkv_product(x, linears), _three(x, linears)
    g = [torch.randn(50, 8, dtype=dtype) for _ in range(3)]
    params = [x] + [p for lin in linears for p in (lin.weight, lin.bias)]
    for a, b in zip(ours, ref, strict=True):
        assert a.shape == (50, 8) and a.is_contiguous()
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)
    for a, b in zip(torch.autograd.grad(ours, params, g), torch.autograd.grad(ref, params, g), strict=True):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)


def test_gradcheck():
    x = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    params = [p.detach().requires_grad_() for lin in _linears(c_in=4, c=3) for p in (lin.weight, lin.bias)]

    def f(x, *p):      # qkv_product reads .weight and .bias only: gradcheck's perturbed tensors flow in
        return qkv_product(x, tuple(SimpleNamespace(weight=w, bias=b) for w, b in zip(p[0::2], p[1::2], strict=True)))
    assert torch.autograd.gradcheck(f, (x, *params))
    assert torch.autograd.gradgradcheck(f, (x, *params))       # create_graph: the network's torch path needs it


def test_autocast_as_linear():
    """Under CPU autocast (bfloat16) the product runs in bfloat16 as ``nn.Linear`` does, the gradients come back
    in the parameters' float32, and both agree with three Linears under the same autocast."""
    linears = _linears(dtype=torch.float32)
    x = torch.randn(40, 12, requires_grad=True)
    params = [x] + [p for lin in linears for p in (lin.weight, lin.bias)]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ours, ref = qkv_product(x, linears), tuple(lin(x) for lin in linears)
    assert all(t.dtype == torch.bfloat16 for t in ours)
    g = [torch.randn(40, 8).to(torch.bfloat16) for _ in range(3)]
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-2)
    for a, b in zip(torch.autograd.grad(ours, params, g), torch.autograd.grad(ref, params, g), strict=True):
        assert a.dtype == b.dtype == torch.float32
        torch.testing.assert_close(a, b, rtol=2e-2, atol=5e-2)


def test_linear_without_bias_is_refused():
    linears = (torch.nn.Linear(4, 4), torch.nn.Linear(4, 4, bias=False), torch.nn.Linear(4, 4))
    with pytest.raises(ValueError, match="without"):
        qkv_product(torch.randn(3, 4), linears)


class _Ops(TorchDispatchMode):
    """The aten ops that launch a kernel on CUDA (views, metadata and allocations left out)."""
    VIEWS = {"view", "_unsafe_view", "expand", "t", "transpose", "unsqueeze", "squeeze", "select", "slice",
             "unbind", "split", "split_with_sizes", "as_strided", "detach", "alias", "empty", "empty_strided"}

    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if name not in self.VIEWS:
            self.ops[name] += 1
        return func(*args, **(kwargs or {}))


def test_launches_forward_and_backward():
    linears = _linears(dtype=torch.float32)
    x = torch.randn(30, 12, requires_grad=True)
    g = [torch.randn(30, 8) for _ in range(3)]
    with _Ops() as forward:
        out = qkv_product(x, linears)
    with _Ops() as backward:
        torch.autograd.backward(out, g)
    assert forward.ops == {"stack": 2, "baddbmm": 1, "addmm": 1}   # three Linears: 3 addmm
    assert backward.ops == {"stack": 1, "mm": 2, "sum": 1}      # three Linears: 6 mm, 3 sum, 2 add


def _cloud(n=40, channels=16, k=6, dtype=torch.float64):
    g = torch.Generator().manual_seed(1)
    coord = torch.rand(n, 3, generator=g, dtype=torch.float64).to(dtype)
    feat = torch.randn(n, channels, generator=g, dtype=torch.float64).to(dtype)
    off = torch.tensor([n])
    return coord, feat, knn(coord, coord, k, off, off)[0]


@pytest.mark.parametrize("pe", PRESETS)
def test_layer_equals_three_linears(pe, monkeypatch):
    """The layer's output and every parameter's gradient, float64, with the product and with three Linears."""
    torch.manual_seed(0)
    layer = PointTransformerLayer(16, share_planes=4, neighbours=6, pe=pe).double()
    coord, feat, idx = _cloud()
    feat.requires_grad_(True)

    def run():
        layer.zero_grad(set_to_none=True)
        feat.grad = None
        out = layer(coord, feat, idx)
        out.backward(torch.cos(out.detach() * 3))
        return out.detach(), feat.grad.clone(), {n: p.grad.clone() for n, p in layer.named_parameters()}
    ours = run()
    monkeypatch.setattr(attention, "qkv_product", lambda x, lin: _three(x, lin))
    ref = run()
    torch.testing.assert_close(ours[0], ref[0], rtol=0, atol=1e-12)
    torch.testing.assert_close(ours[1], ref[1], rtol=0, atol=1e-12)
    assert ours[2].keys() == ref[2].keys()
    for name in ref[2]:
        torch.testing.assert_close(ours[2][name], ref[2][name], rtol=0, atol=1e-12, msg=name)


def test_parameters_and_keys_are_three_linears():
    layer = PointTransformerLayer(16, share_planes=4, neighbours=6, pe="geope")
    names = [n for n, _ in layer.named_parameters()]
    assert names[:6] == QKV_KEYS
    assert all(k in layer.state_dict() for k in QKV_KEYS)
    assert isinstance(layer.linear_q, torch.nn.Linear)


def test_old_checkpoint_loads_and_round_trips():
    """A state dict with the three Linears' keys (as the authors' and earlier checkpoints hold them) loads
    strictly, the product then uses its tensors, and the layer saves them back under the same keys."""
    layer = PointTransformerLayer(16, share_planes=4, neighbours=6, pe="rpe").double().eval()
    old = {k: v.clone() for k, v in layer.state_dict().items()}
    g = torch.Generator().manual_seed(3)
    for key in QKV_KEYS:
        old[key] = torch.randn(old[key].shape, generator=g, dtype=torch.float64)
    fresh = PointTransformerLayer(16, share_planes=4, neighbours=6, pe="rpe").double().eval()
    fresh.load_state_dict(old, strict=True)
    x = torch.randn(20, 16, dtype=torch.float64)
    q, k, v = qkv_product(x, (fresh.linear_q, fresh.linear_k, fresh.linear_v))
    for name, got in zip("qkv", (q, k, v), strict=True):
        torch.testing.assert_close(got, x @ old[f"linear_{name}.weight"].T + old[f"linear_{name}.bias"],
                                   rtol=0, atol=1e-13)
    saved = fresh.state_dict()
    assert list(saved) == list(old)
    for key in QKV_KEYS:
        assert torch.equal(saved[key], old[key])


def test_optimiser_state_of_three_linears_resumes():
    """SGD's state (one momentum buffer per tensor) written for a module of three Linears with the layer's
    parameter order loads into an optimiser over the layer and takes the same step."""
    torch.manual_seed(0)
    layer = PointTransformerLayer(16, share_planes=4, neighbours=6, pe="rpe").double()
    coord, feat, idx = _cloud()
    opt = torch.optim.SGD(layer.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    layer(coord, feat, idx).square().sum().backward()
    opt.step()
    state = opt.state_dict()
    assert [p.shape for p in layer.parameters()][:6] == [(16, 16), (16,)] * 3
    assert all(state["state"][i]["momentum_buffer"].shape == p.shape for i, p in enumerate(layer.parameters()))
    again = torch.optim.SGD(layer.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    again.load_state_dict(state)
    assert len(again.state) == len(list(layer.parameters()))


def test_layer_launches_one_product_forward():
    """The layer's forward runs one batched product for q and k and one for v: with ``pe="none"`` (no ``delta``
    MLP) its other products are ``gamma``'s two Linears (three Linears of q, k, v: five ``addmm``)."""
    layer = PointTransformerLayer(16, share_planes=4, neighbours=6, pe="none")
    coord, feat, idx = _cloud(dtype=torch.float32)
    with _Ops() as ops:
        layer(coord, feat, idx)
    assert (ops.ops["baddbmm"], ops.ops["addmm"]) == (1, 3)


def test_values_have_their_own_memory():
    """``v`` does not share its memory with ``q`` and ``k``: a backward that saves ``v`` alone (the fused
    aggregation) keeps ``v``'s ``N x C`` alive, not all three (before: ``v`` was a third of one ``(3, N, C)``)."""
    q, k, v = qkv_product(torch.randn(50, 12, requires_grad=True), _linears(dtype=torch.float32))
    assert v.untyped_storage().nbytes() == v.numel() * v.element_size() == 50 * 8 * 4
    assert v.untyped_storage().data_ptr() not in (q.untyped_storage().data_ptr(), k.untyped_storage().data_ptr())
    assert q.is_contiguous() and k.is_contiguous() and v.is_contiguous()


def _saved_bytes(layer, coord, feat, idx) -> int:
    """Bytes of the storages the layer's forward saves for its backward, the parameters' left out."""
    params = {p.untyped_storage().data_ptr() for p in layer.parameters()}
    saved = {}

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        layer(coord, feat, idx)
    return sum(size for ptr, size in saved.items() if ptr not in params)


def test_layer_saves_what_three_linears_save_on_the_kernel_path(interpreted_cpu, monkeypatch):
    """On the Triton path (CUDA's default: the relation saves neither ``q`` nor ``k``, the aggregation saves
    ``v``) the layer's forward keeps as many bytes for the backward as with three Linears, plus the stacked
    weights ``3 C^2`` (before: ``2 N C`` more, ``q`` and ``k`` held by ``v``'s memory)."""
    pytest.importorskip("triton")
    torch.manual_seed(0)
    n, c = 60, 16
    layer = PointTransformerLayer(c, share_planes=4, neighbours=6, pe="rpe")
    coord, feat, idx = _cloud(n=n, channels=c, dtype=torch.float32)
    feat.requires_grad_(True)
    ours = _saved_bytes(layer, coord, feat, idx)
    monkeypatch.setattr(attention, "qkv_product", lambda x, lin: _three(x, lin))
    assert ours == _saved_bytes(layer, coord, feat, idx) + 3 * c * c * 4


def test_layer_on_meta_tensors_gives_its_shapes():
    """Shapes through the layer on meta tensors (no data), as with three Linears (before: "unknown device type
    for autocast", asked of the meta device), forward and backward."""
    layer = PointTransformerLayer(16, share_planes=4, neighbours=6, pe="rpe").to("meta")
    feat = torch.empty(40, 16, device="meta", requires_grad=True)
    out = layer(torch.empty(40, 3, device="meta"), feat, torch.empty(40, 6, dtype=torch.int64, device="meta"))
    out.sum().backward()
    assert out.is_meta and out.shape == (40, 16) and feat.grad.shape == (40, 16)


def test_without_a_backward_three_products_and_the_same_values():
    """Evaluation (no grad mode, or nothing requiring grad) runs three products (3 launches; the stacks and
    products would take 4 and more host time) with the values the training forward computes."""
    linears = _linears(dtype=torch.float32)
    x = torch.randn(30, 12)
    with torch.no_grad(), _Ops() as ops:
        ours = qkv_product(x, linears)
    assert ops.ops == {"addmm": 3}
    for lin in linears:
        lin.requires_grad_(False)
    with _Ops() as frozen:
        qkv_product(x, linears)
    assert frozen.ops == {"addmm": 3}
    for got, want in zip(ours, qkv_product(x.requires_grad_(), linears), strict=True):
        torch.testing.assert_close(got, want.detach(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("grad", [False, True])
def test_what_one_path_refuses_the_other_refuses_too(grad):
    """The path without a backward (three ``F.linear``) and the one with it (the batched product) take the same
    inputs: before, a ``(B, N, C_in)`` input ran in evaluation and failed in training ("batch1 must be a 3D
    tensor"), and a float64 input with float32 weights was refused in evaluation (``F.linear``) but cast and
    trained in float64."""
    linears = _linears(c_in=4, c=3, dtype=torch.float32)
    for p in (p for lin in linears for p in lin.parameters()):
        p.requires_grad_(grad)
    with pytest.raises(ValueError, match=r"^expected x of shape \(N, C_in\), got \(2, 5, 4\)$"):
        qkv_product(torch.randn(2, 5, 4), linears)
    with pytest.raises(TypeError, match=r"^expected the weights and biases in x's dtype torch.float64 \(as "
                                        r"nn.Linear\), got linears\[0\].weight in torch.float32$"):
        qkv_product(torch.randn(5, 4, dtype=torch.float64), linears)


@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("which", ["weight", "bias"])
def test_the_one_parameter_of_another_dtype_is_named_on_both_paths(grad, which):
    """One parameter in float64 among float32 ones, the input float32: nn.Linear (``F.linear``) refuses it. Before,
    the message named ``linears[0]``'s weight dtype ("expected ... float32, got torch.float32"), and a float64 bias
    was refused without gradients and cast down with them; now both paths name it."""
    linears = _linears(c_in=4, c=3, dtype=torch.float32)
    with torch.no_grad():
        setattr(linears[2], which, torch.nn.Parameter(getattr(linears[2], which).double(), requires_grad=grad))
    with pytest.raises(TypeError, match=rf"^expected the weights and biases in x's dtype torch.float32 \(as "
                                        rf"nn.Linear\), got linears\[2\].{which} in torch.float64$"):
        qkv_product(torch.randn(5, 4, requires_grad=grad), linears)
