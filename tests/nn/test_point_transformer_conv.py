"""Tests of pointgeope/nn/point_transformer_conv.py: ``pe="rpe"`` against PyG's layer, every preset against
an edge-by-edge computation from its definition and, where the formulations meet, against the network's
``PointTransformerLayer``; PyG batches; float64 gradcheck."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader
from torch_geometric.nn import PointTransformerConv
from torch_geometric.utils import softmax

from pointgeope.geope import apply_geope
from pointgeope.model import PRESETS, PointTransformerLayer, PositionalEncoding
from pointgeope.model.attention import options_for
from pointgeope.model.ops import knn
from pointgeope.nn import GeoPEPointTransformerConv, knn_graph
from tests.nn import reference as ref

GRID_UNIT = 0.3          # PointROPE's cell in the tests: a few cells across the [0, 1) cube
ALL = [*PRESETS, PositionalEncoding("geope", False, "geope"), PositionalEncoding("none", False, "geope")]


def mlp(inp: int, out: int) -> nn.Module:
    return nn.Sequential(nn.Linear(inp, 8), nn.Tanh(), nn.Linear(8, out))


def own_options(pe) -> dict:
    """The test's `pos_scale` and PointROPE's `grid_unit`, those of them `pe` reads (it refuses the others)."""
    return options_for(pe, pos_scale=4.0, grid_unit=GRID_UNIT)


def make_conv(pe, in_channels=4, channels=12, **kwargs) -> GeoPEPointTransformerConv:
    encoding = PositionalEncoding.preset(pe)
    pos_nn = mlp(kwargs.get("axes", 3), channels) if encoding.needs_delta else None
    return GeoPEPointTransformerConv(in_channels, channels, pos_nn=pos_nn, attn_nn=mlp(channels, channels), pe=pe,
                                     **own_options(pe), **kwargs).double()


def graph(n=9, k=4, in_channels=4, axes=3, seed=0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    pos = torch.rand(n, 3, generator=gen, dtype=torch.float64)
    x = torch.randn(n, in_channels, generator=gen, dtype=torch.float64)
    return x, pos[:, :axes].contiguous(), knn_graph(pos, k)


def with_self_loops(edge_index: torch.Tensor, num_nodes: int) -> list[tuple[int, int]]:
    """``N(i) u {i}``: the graph's edges ``(j, i)`` without self-loops, then one loop per node."""
    edges = [(j, i) for j, i in edge_index.T.tolist() if j != i]
    return edges + [(i, i) for i in range(num_nodes)]


def turn(conv, v, pos_i, pos_j, rotation):
    """A source feature in its target's frame, by the definition of ``rotation``."""
    if rotation in ("geope", "lingeope"):
        return ref.geope_turn(v, pos_i, pos_j, conv.base, conv.pos_scale, linear=rotation == "lingeope")
    if rotation == "pointrope":
        cell = torch.floor(pos_j / GRID_UNIT) - torch.floor(pos_i / GRID_UNIT)
        return ref.pair_turn(v, cell, ref.pointrope_freq(v.shape[0]))
    freq = (conv.pair_freq.detach() if rotation == "rope-mixed"
            else ref.axial_freq(v.shape[0], conv.base, conv.pos_scale))
    return v if rotation == "none" else ref.pair_turn(v, pos_j - pos_i, freq)


def edge_terms(conv, pe, x, pos, j, i):
    """The relation ``r_ij`` and the value ``v_ij`` of one edge, from the class docstring's equations."""
    channels = conv.out_channels
    query, key = conv.lin_dst.weight @ x[i], turn(conv, conv.lin_src.weight @ x[j], pos[i], pos[j], pe.rotation)
    if pe.absolute:
        freq = ref.axial_freq(channels, conv.base, conv.pos_scale)
        query, key = query + ref.sinusoids(pos[i], freq, channels), key + ref.sinusoids(pos[j], freq, channels)
    delta = conv.pos_nn(pos[i] - pos[j]) if pe.needs_delta else None
    relation = query - key + (delta if pe.relation_delta else 0)
    value = conv.lin.weight @ x[j]
    if pe.value == "rpe":
        value = value + delta
    elif pe.value == "geope":
        value = turn(conv, value, pos[i], pos[j], "geope" if pe.rotation == "none" else pe.rotation)
    return conv.attn_nn(relation), value


def reference_output(conv, pe, x, pos, edges) -> torch.Tensor:
    """``x'_i = sum_j softmax_j(gamma(r_ij)) v_ij`` over the list ``edges`` of ``(j, i)``, node by node."""
    out = torch.zeros(x.shape[0], conv.out_channels, dtype=torch.float64)
    for i in range(x.shape[0]):
        logits, values = zip(*(edge_terms(conv, pe, x, pos, j, i) for j, t in edges if t == i), strict=True)
        out[i] = (torch.softmax(torch.stack(logits), dim=0) * torch.stack(values)).sum(0)
    return out


@pytest.fixture(params=["cpu-kernel", "torch"])
def frame(request, monkeypatch):
    """The per-edge rotations on the CPU kernel (numba, the default where installed) or on the torch path (what
    CUDA tensors take)."""
    if request.param == "torch":
        from pointgeope.nn import target_frame  # the one place that decides
        monkeypatch.setattr(target_frame, "frame_backend", lambda keys: "torch")
    return request.param


@pytest.mark.parametrize("pe,axes", [(pe, 3) for pe in ALL] + [("geope", 2), ("lingeope+rpe", 1)], ids=str)
def test_every_preset_equals_its_definition_edge_by_edge(pe, axes, frame):
    torch.manual_seed(0)
    conv, (x, pos, edge_index) = make_conv(pe, axes=axes), graph(axes=axes)
    expected = reference_output(conv, PositionalEncoding.preset(pe), x, pos, with_self_loops(edge_index, 9))
    with torch.no_grad():
        torch.testing.assert_close(conv(x, pos, edge_index), expected, atol=1e-10, rtol=0)


def gradients(module, out, inputs):
    weight = torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)
    params = dict(module.named_parameters())
    grads = torch.autograd.grad((out * weight).sum(), [*inputs, *params.values()])
    return dict(zip([f"input{n}" for n in range(len(inputs))] + list(params), grads, strict=True))


@pytest.mark.parametrize("bipartite", [False, True])
@pytest.mark.parametrize("self_loops", [True, False])
def test_rpe_is_pygs_layer_in_values_and_gradients(bipartite, self_loops):
    torch.manual_seed(0)
    in_channels = (4, 5) if bipartite else 4
    pyg = PointTransformerConv(in_channels, 12, mlp(3, 12), mlp(12, 12), add_self_loops=self_loops).double()
    ours = GeoPEPointTransformerConv(in_channels, 12, mlp(3, 12), mlp(12, 12), add_self_loops=self_loops,
                                     pe="rpe").double()
    ours.load_state_dict(pyg.state_dict())                                     # strict: the same parameters
    x, pos, edge_index = graph(n=9, in_channels=4)
    edge_index = torch.cat([edge_index, torch.tensor([[0, 3], [0, 3]])], 1)  # two self-loops among the edges
    if bipartite:                                                              # 9 sources -> 5 targets
        x_t = torch.randn(5, 5, dtype=torch.float64)
        x, pos, edge_index = (x, x_t), (pos, pos[:5] + 0.1), edge_index[:, edge_index[1] < 5]
    leaves = [t.requires_grad_() for t in (x if bipartite else (x,)) + (pos if bipartite else (pos,))]
    expected, got = pyg(x, pos, edge_index), ours(x, pos, edge_index)
    torch.testing.assert_close(got, expected, atol=0, rtol=0)
    want, have = gradients(pyg, expected, leaves), gradients(ours, got, leaves)
    assert want.keys() == have.keys()
    for name in want:
        torch.testing.assert_close(have[name], want[name], atol=0, rtol=0, msg=name)


def test_rpe_default_parameters_are_pygs():
    torch.manual_seed(3)
    pyg = PointTransformerConv(4, 8)
    torch.manual_seed(3)
    ours = GeoPEPointTransformerConv(4, 8)
    assert list(ours.state_dict()) == list(pyg.state_dict())
    for name, value in pyg.state_dict().items():
        assert torch.equal(ours.state_dict()[name], value), name


GEOPE_TURNS = ["geope", "geope+rpe", PositionalEncoding("geope", False, "geope"),
               PositionalEncoding("none", False, "geope")]


def per_edge_geope(conv, pe, x, pos, edges) -> torch.Tensor:
    """The layer's output with ``R(t_i)^T R(t_j)`` applied edge by edge (``apply_geope`` twice on every gathered
    key and value), vectorised over the list ``edges`` of ``(j, i)``; ``x``, ``pos``: (source, target) pairs."""
    (x_s, x_t), (p_s, p_t) = x, pos
    src, dst = torch.tensor(edges).T
    scale = conv.block_scale(torch.float64, p_s.device)

    def turn(v):
        return apply_geope(apply_geope(v, p_s[src], scale), p_t[dst], scale, inverse=True)
    key = conv.lin_src(x_s)[src]
    key = turn(key) if pe.rotation == "geope" else key
    delta = conv.pos_nn(p_t[dst] - p_s[src]) if pe.needs_delta else 0
    relation = conv.lin_dst(x_t)[dst] - key + (delta if pe.relation_delta else 0)
    alpha = softmax(conv.attn_nn(relation), dst, num_nodes=x_t.shape[0])
    value = conv.lin(x_s)[src]
    value = turn(value) if pe.value == "geope" else value + delta
    return torch.zeros(x_t.shape[0], conv.out_channels, dtype=value.dtype).index_add(0, dst, alpha * value)


def bipartite_graph(bipartite: bool, self_loops: bool = False):
    """``graph(n=9)``'s features, positions and edges, or (``bipartite``) 9 sources -> 5 targets; with
    ``self_loops`` two of the graph's own, which the layer replaces by one a node."""
    x, pos, edge_index = graph(n=9, in_channels=4)
    if self_loops:
        edge_index = torch.cat([edge_index, torch.tensor([[0, 3], [0, 3]])], 1)
    if bipartite:
        x_t = torch.randn(5, 5, dtype=torch.float64)
        x, pos, edge_index = (x, x_t), (pos, pos[:5] + 0.1), edge_index[:, edge_index[1] < 5]
    return x, pos, edge_index


def assert_per_edge_geope(conv, pe, x, pos, edge_index, leaves) -> dict:
    """The layer's outputs and gradients of ``leaves`` and its parameters equal both rotations per edge
    (``per_edge_geope``); returns the reference's gradients."""
    pairs = (x, pos) if isinstance(x, tuple) else ((x, x), (pos, pos))
    edges = with_self_loops(edge_index, min(pairs[1][0].shape[0], pairs[1][1].shape[0]))
    expected, got = per_edge_geope(conv, PositionalEncoding.preset(pe), *pairs, edges), conv(x, pos, edge_index)
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)
    want, have = gradients(conv, expected, leaves), gradients(conv, got, leaves)
    for name in want:
        torch.testing.assert_close(have[name], want[name], atol=1e-12, rtol=1e-10, msg=name)
    return want


@pytest.fixture
def node_turns(monkeypatch) -> list:
    """The calls of the per-node-coefficient turn (`turn_into_targets`) the layer makes."""
    from pointgeope.nn import point_transformer_conv
    calls, turn = [], point_transformer_conv.turn_into_targets
    monkeypatch.setattr(point_transformer_conv, "turn_into_targets", lambda *a, **kw: calls.append(1) or turn(*a, **kw))
    return calls


@pytest.mark.parametrize("bipartite", [False, True])
@pytest.mark.parametrize("pe", GEOPE_TURNS, ids=str)
def test_standard_geope_turned_once_a_node_is_the_per_edge_rotation(pe, bipartite, node_turns):
    """``forward`` turns the sources by ``R(t_j)`` once a node and ``message`` by ``R(t_i)^T`` per edge: the
    outputs and the gradients (features, positions, weights, learnt frequencies) are those of both rotations
    per edge, with bipartite (source, target) inputs too; positions and frequencies that need a gradient take
    autograd's path, not the per-node coefficients."""
    torch.manual_seed(0)
    conv = make_conv(pe, in_channels=(4, 5) if bipartite else 4, learnable=True)
    x, pos, edge_index = bipartite_graph(bipartite, self_loops=True)
    leaves = [t.requires_grad_() for t in (x if bipartite else (x,)) + (pos if bipartite else (pos,))]
    assert "block_scale.freq" in assert_per_edge_geope(conv, pe, x, pos, edge_index, leaves)
    assert node_turns == []


@pytest.mark.parametrize("bipartite", [False, True])
@pytest.mark.parametrize("pe,channels", [("geope", 12), ("geope+rpe", 14), (GEOPE_TURNS[2], 14), (GEOPE_TURNS[3], 12)],
                         ids=str)
def test_target_rotation_from_per_node_coefficients_is_the_per_edge_rotation(pe, channels, bipartite, frame,
                                                                             node_turns):
    """With positions and frequencies as data (no gradient), `message` turns the keys (and the values of
    `value="geope"`) by $R(t_i)^T$ from per-target coefficients (`target_frame`, which it is shown to call):
    outputs and gradients (features, weights) equal `apply_geope` twice per edge, with pass-through channels
    (14 = 4 blocks + 2) and bipartite inputs."""
    torch.manual_seed(0)
    conv = make_conv(pe, in_channels=(4, 5) if bipartite else 4, channels=channels)
    x, pos, edge_index = bipartite_graph(bipartite)
    leaves = [t.requires_grad_() for t in (x if bipartite else (x,))]
    assert "lin_src.weight" in assert_per_edge_geope(conv, pe, x, pos, edge_index, leaves)
    assert node_turns                                                   # the per-node coefficients ran


def test_bipartite_target_positions_of_other_axes_are_refused():
    conv = make_conv("geope")
    x, pos, edge_index = graph()
    with pytest.raises(ValueError, match=r"expected pos\[1\] \(targets\) of shape \(N, 3\), got \(\d+, 2\)"):
        conv((x, x), (pos, pos[:, :2]), edge_index)


class _Negate(nn.Module):
    def forward(self, x):
        return -x


MEETING = ["geope", "lingeope", "rope3d", "rope-mixed", "pointrope", "ape", "none",
           PositionalEncoding("geope", False, "geope")]


@pytest.mark.parametrize("pe", MEETING, ids=str)
def test_presets_without_relation_delta_are_the_networks_layer(pe, frame):
    """Where the relation has no delta_ij the two formulations meet: PyG's ``W_1 x_i - key`` is minus the
    network's ``key - q_i``, so with ``gamma = linear_w(-.)``, ``h = linear_p(-.)`` (PyG feeds ``p_i - p_j``),
    the network's weights and kNN neighbourhoods, one channel group and no biases, the outputs are equal."""
    torch.manual_seed(0)
    channels, k, (x, pos, _) = 12, 4, graph(n=10, in_channels=12)
    layer = PointTransformerLayer(channels, share_planes=1, neighbours=k, pe=pe, grid_size=0.25,
                                  grid_unit=GRID_UNIT).double()
    pos_nn = None if layer.linear_p is None else nn.Sequential(_Negate(), layer.linear_p)
    conv = GeoPEPointTransformerConv(channels, channels, pos_nn, nn.Sequential(_Negate(), layer.linear_w), pe=pe,
                                     **own_options(pe)).double()   # pos_scale = 1 / grid_size
    with torch.no_grad():
        for lin, ours in ((layer.linear_q, conv.lin_dst), (layer.linear_k, conv.lin_src), (layer.linear_v, conv.lin)):
            lin.bias.zero_()
            ours.weight.copy_(lin.weight)
        if layer.pair_freq is not None:
            conv.pair_freq.copy_(layer.pair_freq)
        for bn in (m for m in layer.modules() if isinstance(m, nn.BatchNorm1d)):   # not the identity
            bn.running_mean.uniform_(-0.3, 0.3), bn.running_var.uniform_(0.5, 2.0)
    layer.eval(), conv.eval()
    offset = torch.tensor([10])
    idx, _ = knn(pos, pos, k, offset, offset)                                       # includes the point itself
    edge_index = torch.stack([idx.reshape(-1), torch.arange(10).repeat_interleave(k)])
    x_net, x_conv = x.clone().requires_grad_(), x.clone().requires_grad_()
    expected, got = layer(pos, x_net, idx), conv(x_conv, pos, edge_index)
    torch.testing.assert_close(got, expected, atol=1e-10, rtol=0)
    (expected * expected).sum().backward(), (got * got).sum().backward()
    torch.testing.assert_close(x_conv.grad, x_net.grad, atol=1e-9, rtol=0)


@pytest.mark.parametrize("pe", ALL, ids=str)
def test_a_dataloader_batch_is_its_graphs_side_by_side(pe):
    torch.manual_seed(0)
    conv = make_conv(pe)
    graphs = [Data(x=x, pos=pos, edge_index=e) for x, pos, e in (graph(n, seed=n) for n in (5, 9, 7))]
    batch = next(iter(DataLoader(graphs, batch_size=3)))
    with torch.no_grad():
        expected = torch.cat([conv(g.x, g.pos, g.edge_index) for g in graphs])
        torch.testing.assert_close(conv(batch.x, batch.pos, batch.edge_index), expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("pe", ALL, ids=str)
def test_gradcheck_of_features_and_positions(pe):
    torch.manual_seed(0)
    conv, (x, pos, edge_index) = make_conv(pe, in_channels=2, channels=6), graph(n=5, k=2, in_channels=2)
    x.requires_grad_(), pos.requires_grad_()
    assert torch.autograd.gradcheck(lambda x, pos: conv(x, pos, edge_index), (x, pos), fast_mode=False)
    assert torch.autograd.gradcheck(lambda x: conv(x, pos.detach(), edge_index), (x,), fast_mode=False)


@pytest.mark.parametrize("pe,name", [("geope", "block_scale.freq"), ("lingeope", "block_scale.freq"),
                                     ("rope3d", "block_scale.freq"), ("rope-mixed", "pair_freq")])
def test_gradcheck_of_learnt_frequencies(pe, name):
    torch.manual_seed(0)
    learnt = {} if pe == "rope-mixed" else {"learnable": True}             # RoPE-Mixed's pair_freq is always learnt
    conv, (x, pos, edge_index) = make_conv(pe, in_channels=2, channels=6, **learnt), graph(n=5, k=2, in_channels=2)
    freq = dict(conv.named_parameters())[name].detach().clone().requires_grad_()

    def forward(freq):
        return torch.func.functional_call(conv, {name: freq}, (x, pos, edge_index))
    assert torch.autograd.gradcheck(forward, (freq,), fast_mode=False)
