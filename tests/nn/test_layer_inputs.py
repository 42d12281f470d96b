"""Tests of the PyG layer's inputs, options and plumbing (pointgeope/nn/point_transformer_conv.py): positions
the point ops refuse, options that could only be ignored, ``reset_parameters`` and ``repr``, ``pointgeope info``'s
PyG line, the imports of ``pointgeope.nn``, sparse adjacency, and which rotation path runs. Its values against
PyG's layer and each preset's definition: test_point_transformer_conv.py."""
from __future__ import annotations

import re

import pytest
import torch

from pointgeope.nn import GeoPEPointTransformerConv
from tests.nn.test_point_transformer_conv import GEOPE_TURNS, graph, make_conv, mlp


@pytest.mark.parametrize("pe", ["geope", "lingeope", "rope3d", "ape"])
def test_positions_beyond_the_point_ops_limit_are_refused_where_encoded(pe):
    """Positions beyond ~1.8e19 overflowed GeoPE's axis norm in float32 (NaN outputs without a word): every
    encoding that reads positions refuses them beyond +-2^60, as `knn_graph` does; `rpe` (PyG's, positions only
    into `pos_nn`) takes what PyG takes."""
    x, pos, edge_index = graph(n=9, k=4)
    conv = make_conv(pe)
    with pytest.raises(ValueError, match=r"expected pos within \+-2\^60 .* got 27 entries outside"):
        conv(x, (1 + pos) * 1e20, edge_index)
    assert make_conv("rpe")(x, (1 + pos) * 1e20, edge_index).isfinite().all()


@pytest.mark.parametrize("pe", ["geope", "lingeope"])
def test_bfloat16_positions_beyond_the_limit_are_refused(pe):
    """bfloat16 positions (float32's range) beyond 2^60 gave NaN outputs; refused as float32 ones are."""
    x, pos, edge_index = graph(n=9, k=4)
    conv = make_conv(pe).bfloat16()
    with pytest.raises(ValueError, match=r"expected pos within \+-2\^60 .* got 27 entries outside"):
        conv(x.bfloat16(), ((1 + pos) * 1e25).bfloat16(), edge_index)


@pytest.mark.parametrize("pe", ["rpe", "geope", "none"])
def test_features_and_linear_delta_positions_of_another_dtype_are_refused_by_name(pe):
    """A float64 cloud (NumPy's) into a float32 layer failed in torch's matmul, "mat1 and mat2 must have the same
    dtype", naming neither input. Positions are held to the layer's dtype where they enter its default linear
    `pos_nn` (`none` has none: there they only pick neighbours)."""
    x, pos, edge_index = graph(n=9, k=4)
    conv = GeoPEPointTransformerConv(4, 6, pe=pe)
    with pytest.raises(TypeError, match=r"expected x in the model's dtype torch.float32, got torch.float64"):
        conv(x, pos.float(), edge_index)
    if pe == "none":
        assert conv(x.float(), pos, edge_index).dtype == torch.float32
    else:
        with pytest.raises(TypeError, match=r"expected pos in the model's dtype torch.float32, got torch.float64"):
            conv(x.float(), pos, edge_index)
    with pytest.raises(TypeError, match=r"expected x\[1\] in the model's dtype torch.float32, got torch.float16"):
        conv((x.float(), x[:3].half()), (pos.float(), pos[:3].float()), edge_index[:, edge_index[1] < 3])
    with pytest.raises(TypeError, match=r"expected x in the model's dtype torch.float32, got torch.float64"):
        GeoPEPointTransformerConv(-1, 6, pe=pe)(x, pos.float(), edge_index)    # lazy: before its first call


@pytest.mark.parametrize("shape", [(6,), (3, 4), (2, 3, 1)])
def test_an_edge_index_not_of_shape_two_by_e_is_refused_before_the_self_loops(shape):
    """The self-loops' handling ran before PyG's own check: torch's "Sizes of tensors must match" for (6,) and
    (3, 4), and a (2, 3, 1) flattened into edges without a word."""
    x, pos, _ = graph(n=9, k=4)
    with pytest.raises(ValueError, match=rf"expected edge_index of shape \(2, E\), got {re.escape(str(shape))}"):
        make_conv("geope")(x, pos, torch.zeros(shape, dtype=torch.long))


@pytest.mark.parametrize("pe", ["geope", "geope+rpe", "lingeope", "rope3d"])
def test_uncentred_positions_are_said_where_standard_geope_turns_them(pe, monkeypatch):
    """UTM-scale float32 positions: standard GeoPE turns every node by its own phase (millions of radians,
    rounded in steps of a radian): one warning per process. The encodings of differences (lingeope, RoPE)
    turn by ``p_j - p_i`` and are not warned about; float64 positions hold the phases."""
    import warnings

    import pointgeope.nn.checks as checks

    monkeypatch.setattr(checks, "_phase_warned", False)
    x, pos, edge_index = graph(n=9, k=4)
    conv = make_conv(pe).float()
    utm = pos + torch.tensor([651_234.0, 4_812_345.0, 120.0], dtype=torch.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        conv(x.float(), pos.float(), edge_index)
        make_conv(pe)(x, utm, edge_index)                                  # float64
        assert caught == []
        conv(x.float(), utm.float(), edge_index)
        conv(x.float(), utm.float(), edge_index)
    said = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(said) == (pe.startswith("geope")), said
    assert all(s.startswith("GeoPE: pos up to 4.81e+06 in float32 turn by phases up to ") for s in said)


def test_options_that_could_only_be_ignored_are_refused():
    with pytest.raises(ValueError, match="grid_unit"):
        GeoPEPointTransformerConv(4, 12, pe="pointrope")
    with pytest.raises(ValueError, match="no pos_nn"):
        GeoPEPointTransformerConv(4, 12, pos_nn=mlp(3, 12), pe="none")
    with pytest.raises(ValueError, match="3 position axes"):
        GeoPEPointTransformerConv(4, 12, pe="rope3d", axes=2)
    with pytest.raises(ValueError, match="unknown positional encoding"):
        GeoPEPointTransformerConv(4, 12, pe="geope3")
    conv = GeoPEPointTransformerConv(4, 12, pe="geope")
    x, pos, edge_index = graph(axes=2)
    with pytest.raises(ValueError, match=r"expected pos of shape \(N, 3\)"):
        conv(x.float(), pos.float(), edge_index)


def test_reset_parameters_restores_the_initial_frequencies():
    conv = GeoPEPointTransformerConv(4, 12, pe="geope", learnable=True)
    initial = conv.block_scale.freq.detach().clone()
    with torch.no_grad():
        conv.block_scale.freq.mul_(3.0)
    conv.reset_parameters()
    torch.testing.assert_close(conv.block_scale.freq.detach(), initial, atol=0, rtol=0)
    assert repr(conv) == "GeoPEPointTransformerConv(4, 12, pe='geope', pos_scale=25.0, base=100.0, learnable=True)"


def test_info_names_the_tested_pyg_versions_and_flags_another(capsys, monkeypatch):
    from pointgeope import info
    from pointgeope.nn import TESTED_PYG_VERSIONS

    def pyg_line() -> str:
        info.print_info()
        return next(line for line in capsys.readouterr().out.splitlines() if line.startswith("PyG layer"))
    tested = ", ".join(TESTED_PYG_VERSIONS)
    installed = info.package_versions()
    monkeypatch.setattr(info, "package_versions", lambda: {**installed, "torch-geometric": TESTED_PYG_VERSIONS[0]})
    assert pyg_line() == f"PyG layer (pointgeope.nn.GeoPEPointTransformerConv): tested with torch-geometric {tested}"
    monkeypatch.setattr(info, "package_versions", lambda: {**installed, "torch-geometric": "2.4.0"})
    assert pyg_line().endswith(f"torch-geometric {tested} (installed: 2.4.0, not among them)")
    monkeypatch.setattr(info, "package_versions", lambda: {**installed, "torch-geometric": None})
    assert pyg_line().endswith(f'torch-geometric {tested} (not installed: pip install "pointgeope[nn]")')


def test_nn_does_not_import_the_data_or_engine_code():
    """Data flows one way: pointgeope.nn builds on pointgeope.geope and pointgeope.model only."""
    import pointgeope.nn
    from tests.conftest import module_imports

    imports = module_imports(pointgeope.nn)
    assert len(imports) >= 4
    for path, name in ((path, name) for path, names in imports.items() for name in names):
        assert not name.startswith(("pointgeope.data", "pointgeope.engine", "pointgeope.scans", "pointgeope.report",
                                    "pointgeope.viz", "data_prep")), f"{path}: imports {name}"


@pytest.mark.parametrize("pe", ["geope", GEOPE_TURNS[2], "lingeope", "rpe"], ids=str)
def test_torch_sparse_adjacency_gives_the_edge_list_outputs(pe):
    """`adj_t` as a torch.sparse CSR or COO tensor (PyG's `adj_t`, rows the targets): the fast path finds its
    edges' sources through `edge_index_j` as for an edge list."""
    from torch_geometric.utils import to_torch_coo_tensor, to_torch_csr_tensor

    torch.manual_seed(0)
    conv, (x, pos, edge_index) = make_conv(pe), graph(n=12)
    with torch.no_grad():
        expected = conv(x, pos, edge_index)
        for to_sparse in (to_torch_csr_tensor, to_torch_coo_tensor):
            adj_t = to_sparse(edge_index.flip(0), size=(12, 12))
            torch.testing.assert_close(conv(x, pos, adj_t), expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("pe", ["lingeope", "rope3d", "pointrope"])
def test_relative_rotations_take_the_cpu_kernel_where_positions_are_data(pe, monkeypatch):
    """Linear GeoPE's and RoPE's per-edge rotations run as `frame_numba.turn_edges` (one pass) when positions
    and frequencies need no gradient, and through autograd when they do (the reference tests check values)."""
    frame_numba = pytest.importorskip("pointgeope.nn.frame_numba")
    calls, turn = [], frame_numba.turn_edges
    monkeypatch.setattr(frame_numba, "turn_edges", lambda *a: calls.append(1) or turn(*a))
    conv = make_conv(pe)
    x, pos, edge_index = graph(n=9, in_channels=4)
    conv(x, pos, edge_index)
    assert calls == [1]
    conv(x, pos.clone().requires_grad_(), edge_index)
    assert calls == [1]
