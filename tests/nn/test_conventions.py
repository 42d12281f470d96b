"""PyG's conventions for pointgeope/nn/point_transformer_conv.py: settings in `repr` and in the saved state
(a checkpoint of other settings refuses to load, naming them), PyG's `state_dict` into `pe="rpe"`, `pe="none"`
refusing `pos_nn` keys, TorchScript as PyG's layer (or a clear refusal), `torch.compile` without graph breaks
of ours, and checked hyperparameters and positions."""
from __future__ import annotations

import dataclasses
import inspect
import io
import json
import re
import warnings

import pytest
import torch
from torch_geometric.nn import PointTransformerConv

from pointgeope.model.attention import PRESETS, options_for
from pointgeope.nn import GeoPEPointTransformerConv, knn_graph


def graph(n=12, in_channels=4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    pos = torch.rand(n, 3, generator=gen)
    return torch.randn(n, in_channels, generator=gen), pos, knn_graph(pos, 4)


def roundtrip(state: dict) -> dict:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer)


@pytest.mark.parametrize("pe,settings", [
    ("geope", "pos_scale=25.0, base=100.0"), ("lingeope+rpe", "pos_scale=25.0, base=100.0"),
    ("rope3d", "pos_scale=25.0, base=100.0"), ("ape", "pos_scale=25.0, base=100.0"),
    ("pointrope", "grid_unit=0.04"), ("rope-mixed", ""), ("rpe", ""), ("none", "")])
def test_repr_names_the_settings_the_outputs_depend_on(pe, settings):
    conv = GeoPEPointTransformerConv(4, 12, pe=pe, **options_for(pe, grid_unit=0.04))
    assert repr(conv) == f"GeoPEPointTransformerConv(4, 12, pe={pe!r}{', ' * bool(settings)}{settings})"


@pytest.mark.parametrize("pe,name,other", [("geope", "pos_scale", 10.0), ("geope", "base", 1000.0),
                                           ("ape", "pos_scale", 10.0), ("pointrope", "grid_unit", 0.3)])
def test_a_checkpoint_of_other_settings_refuses_to_load_naming_them(pe, name, other):
    """It loaded silently before and gave other outputs."""
    torch.manual_seed(0)
    saved = GeoPEPointTransformerConv(4, 12, pe=pe, **options_for(pe, grid_unit=0.04))
    state = roundtrip(saved.state_dict())
    assert float(state[name]) == getattr(saved, name) and state[name].dtype == torch.float64
    other_layer = GeoPEPointTransformerConv(4, 12, pe=pe, **{**options_for(pe, grid_unit=0.04), name: other})
    with pytest.raises(RuntimeError, match=rf"{name}: the checkpoint was saved with {name}=.*this layer has "
                                           rf"{name}={other}; build it with {name}="):
        other_layer.load_state_dict(state)
    with pytest.raises(RuntimeError, match=rf"{name}: the checkpoint was saved"):   # not even non-strict
        other_layer.load_state_dict(state, strict=False)
    same = GeoPEPointTransformerConv(4, 12, pe=pe, **options_for(pe, grid_unit=0.04))
    same.load_state_dict(state)
    x, pos, edge_index = graph()
    with torch.no_grad():
        assert torch.equal(same(x, pos, edge_index), saved(x, pos, edge_index))
        assert not torch.allclose(other_layer(x, pos, edge_index), saved(x, pos, edge_index))


@pytest.mark.parametrize("saved_pe,other", [("geope", "lingeope"), ("geope", "rope3d"), ("geope", "geope+rpe"),
                                             ("ape", "geope"), ("rope3d", "lingeope+rpe")])
def test_a_checkpoint_of_another_encoding_refuses_to_load_naming_it(saved_pe, other):
    """The same parameters and the same saved pos_scale and base: a geope layer's checkpoint loaded into a lingeope,
    rope3d or ape layer without a word and gave other outputs. A checkpoint without the name (saved before it was
    kept) still loads."""
    torch.manual_seed(0)
    saved = GeoPEPointTransformerConv(4, 12, pe=saved_pe)
    state = roundtrip(saved.state_dict())
    assert json.loads(bytes(state["pe"].tolist()).decode()) == dataclasses.asdict(PRESETS[saved_pe])
    other_layer = GeoPEPointTransformerConv(4, 12, pe=other)
    with pytest.raises(RuntimeError, match=rf"pe: the checkpoint was saved with pe='{re.escape(saved_pe)}', this "
                                           rf"layer has pe='{re.escape(other)}'; build it with pe="):
        other_layer.load_state_dict(state, strict=False)
    same = GeoPEPointTransformerConv(4, 12, pe=saved_pe)
    same.load_state_dict(state)
    x, pos, edge_index = graph()
    with torch.no_grad():
        assert torch.equal(same(x, pos, edge_index), saved(x, pos, edge_index))
    older = {k: v for k, v in state.items() if k != "pe"}
    with pytest.warns(UserWarning, match=rf"loaded as pe='{re.escape(saved_pe)}', unconfirmed; if it was trained "):
        GeoPEPointTransformerConv(4, 12, pe=saved_pe).load_state_dict(older)


def test_a_model_of_old_layers_warns_once_from_the_line_that_loads_it():
    """A model of three layers saved without ``pe`` warned three times (one ~300-character text per layer, each
    pointing at a line of the library); under Python's default filter it is one warning, at the caller's line."""
    model = torch.nn.ModuleList(GeoPEPointTransformerConv(4, 4, pe="geope") for _ in range(3))
    older = {k: v for k, v in model.state_dict().items() if not k.endswith(".pe")}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        line = inspect.currentframe().f_lineno + 1
        torch.nn.ModuleList(GeoPEPointTransformerConv(4, 4, pe="geope") for _ in range(3)).load_state_dict(older)
    assert [(w.filename, w.lineno) for w in caught] == [(__file__, line)]
    assert len(str(caught[0].message)) <= 160


@pytest.mark.parametrize("damaged", [torch.tensor([255, 0], dtype=torch.uint8), torch.tensor(1.5), "geope"])
def test_a_damaged_saved_encoding_name_is_an_error_naming_the_key(damaged):
    """A saved `pe` that is not UTF-8 bytes (a damaged or hand-edited checkpoint) failed with Python's
    "'utf-8' codec can't decode byte 0xff" or "cannot convert 'float' object to bytes", naming no key."""
    state = GeoPEPointTransformerConv(4, 12, pe="geope").state_dict()
    state["pe"] = damaged
    with pytest.raises(RuntimeError, match=r"pe: expected the encoding as UTF-8 bytes \(uint8\), got "):
        GeoPEPointTransformerConv(4, 12, pe="geope").load_state_dict(state)


def test_pygs_checkpoint_loads_into_rpe_and_not_into_geope():
    torch.manual_seed(0)
    pyg = PointTransformerConv(4, 12)
    rpe = GeoPEPointTransformerConv(4, 12, pe="rpe")
    rpe.load_state_dict(roundtrip(pyg.state_dict()))
    assert list(rpe.state_dict()) == list(pyg.state_dict())
    with pytest.raises(RuntimeError, match=r"Missing key\(s\) in state_dict: \"pos_scale\", \"base\""):
        GeoPEPointTransformerConv(4, 12, pe="geope").load_state_dict(pyg.state_dict())
    with pytest.raises(RuntimeError, match=r"Unexpected key\(s\) in state_dict: \"pos_scale\", \"base\""):
        rpe.load_state_dict(GeoPEPointTransformerConv(4, 12, pe="geope").state_dict())


def test_none_refuses_pos_nn_keys():
    """`pe="none"` has no h_Theta: PyG's `pos_nn.*` loaded strictly and were dropped without a word before."""
    pyg = PointTransformerConv(4, 12)
    none = GeoPEPointTransformerConv(4, 12, pe="none")
    with pytest.raises(RuntimeError, match=r"Unexpected key\(s\) in state_dict: \"pos_nn.weight\", \"pos_nn.bias\""):
        none.load_state_dict(pyg.state_dict())
    result = none.load_state_dict(pyg.state_dict(), strict=False)
    assert result.unexpected_keys == ["pos_nn.weight", "pos_nn.bias"]


@pytest.mark.parametrize("pe", ["rpe", "none"])
def test_torchscript_scripts_rpe_and_none_as_pygs_layer(pe):
    torch.manual_seed(0)
    attn_nn = torch.nn.Sequential(torch.nn.Linear(12, 12), torch.nn.ReLU())
    conv = GeoPEPointTransformerConv(4, 12, attn_nn=attn_nn, pe=pe)
    scripted = torch.jit.script(conv)
    x, pos, edge_index = graph()
    torch.testing.assert_close(scripted(x, pos, edge_index), conv(x, pos, edge_index), atol=0, rtol=0)
    model = torch.jit.script(torch.nn.ModuleList([conv]))                    # as a submodule too
    torch.testing.assert_close(model[0](x, pos, edge_index), conv(x, pos, edge_index), atol=0, rtol=0)


def test_torchscript_of_a_rotation_is_refused_with_a_clear_error():
    with pytest.raises(NotImplementedError, match=r"TorchScript is supported for pe='rpe' and pe='none' only .* "
                                                  r"got pe='geope': use torch.compile or eager"):
        torch.jit.script(GeoPEPointTransformerConv(4, 12, pe="geope"))


@pytest.mark.parametrize("kwargs,error,message", [
    ({"pos_scale": float("nan")}, ValueError, r"expected pos_scale a finite number > 0, got nan"),
    ({"pos_scale": -1.0}, ValueError, r"expected pos_scale a finite number > 0, got -1.0"),
    ({"base": 0}, ValueError, r"expected base a finite number > 0, got 0.0"),
    ({"base": -5}, ValueError, r"expected base a finite number > 0, got -5.0"),
    ({"base": None}, TypeError, r"expected base a finite number > 0, got None"),
    ({"pe": "pointrope", "grid_unit": float("inf")}, ValueError,
     r"expected grid_unit a finite number > 0 \(PointROPE's cell size\), got inf"),
    ({"axes": 2.0}, TypeError, r"expected axes an int >= 1, got 2.0"),
    ({"axes": 4}, ValueError, r"expected axes in \(1, 2, 3\), got 4"),
])
def test_hyperparameters_are_checked_naming_them(kwargs, error, message):
    """`pos_scale=nan`, `base=0` or `-5` gave NaN outputs before."""
    with pytest.raises(error, match=message):
        GeoPEPointTransformerConv(4, 12, **{"pe": "geope", **kwargs})


OPTIONS = {"pos_scale": 7.0, "base": 50.0, "learnable": True, "grid_unit": 0.1, "mixed_init": "axial"}
ALL_OPTIONS, ROTATION_OPTIONS = set(OPTIONS), {"grid_unit", "mixed_init"}
IGNORED = {"rpe": ALL_OPTIONS, "none": ALL_OPTIONS, "geope": ROTATION_OPTIONS, "lingeope": ROTATION_OPTIONS,
           "geope+rpe": ROTATION_OPTIONS, "lingeope+rpe": ROTATION_OPTIONS, "rope3d": ROTATION_OPTIONS,
           "rope3d+rpe": ROTATION_OPTIONS, "ape": ROTATION_OPTIONS, "rope-mixed": {"base", "learnable", "grid_unit"},
           "pointrope": {"pos_scale", "base", "learnable", "mixed_init"}}


@pytest.mark.parametrize("pe", sorted(IGNORED))
def test_an_option_is_refused_exactly_where_the_preset_would_ignore_it(pe, monkeypatch):
    """`pe="rpe", learnable=True` (shown in `repr`, nothing learnt), `pointrope` with `pos_scale`, `geope` with
    `grid_unit`, ... were accepted and changed nothing. Now each option set away from its default is refused, in
    one line naming it and the preset, exactly where it changes neither the outputs nor the parameters (checked
    with the refusal switched off); an accepted one changes them, and `repr` shows `learnable=True` only where
    something is learnt."""
    from pointgeope.nn import point_transformer_conv

    x, pos, edge_index = graph()

    def built(**option):
        torch.manual_seed(0)
        conv = GeoPEPointTransformerConv(4, 12, pe=pe, **{**options_for(pe, grid_unit=0.04), **option})
        with torch.no_grad():
            return conv(x, pos, edge_index), [name for name, _ in conv.named_parameters()], repr(conv)
    plain, refused = built(), set()
    for name, value in OPTIONS.items():
        try:
            out, params, text = built(**{name: value})
        except ValueError as error:
            assert re.fullmatch(rf"{re.escape(f'{name}={value!r}: pe={pe!r}')}( with mixed_init='random')? does not "
                                r"read it, so it would change nothing \(it reads [^()\n]+\); remove it", str(error))
            refused.add(name)
            continue
        assert not torch.equal(out, plain[0]) or params != plain[1], name
        assert ("learnable=True" in text) == (name == "learnable"), text
    assert refused == IGNORED[pe]
    monkeypatch.setattr(point_transformer_conv, "check_read", lambda pe, defaults, **options: None)
    for name in refused:
        out, params, _ = built(**{name: OPTIONS[name]})
        assert torch.equal(out, plain[0]) and params == plain[1], name


@pytest.mark.parametrize("pe", sorted(IGNORED))
def test_options_for_keeps_what_the_preset_reads(pe):
    """``options_for``: of every option set away from its default, what the layer does not refuse (above),
    which it accepts together; RoPE-Mixed's ``base`` with ``mixed_init="axial"`` only."""
    options = {name: value for name, value in OPTIONS.items() if name != "mixed_init"}
    kept = options_for(pe, **options)
    assert kept == {name: value for name, value in options.items() if name not in IGNORED[pe]}
    GeoPEPointTransformerConv(4, 12, pe=pe, **kept)
    axial = options_for(pe, **options, mixed_init="axial")
    assert ("base" in axial) == (pe not in ("rpe", "none", "pointrope"))
    assert ("mixed_init" in axial) == (pe == "rope-mixed") and GeoPEPointTransformerConv(4, 12, pe=pe, **axial)


def test_refused_options_are_named_together_with_what_the_preset_reads():
    with pytest.raises(ValueError, match=r"^base=50.0, learnable=True: pe='rope-mixed' with mixed_init='random' does "
                                         r"not read them, so they would change nothing \(it reads only pos_scale, "
                                         r"mixed_init\); remove them$"):
        GeoPEPointTransformerConv(4, 12, pe="rope-mixed", base=50.0, learnable=True)
    with pytest.raises(ValueError, match=r"^pos_scale=3.0: pe='none' does not read it, so it would change nothing "
                                         r"\(it reads no frequencies or grid\); remove it$"):
        GeoPEPointTransformerConv(4, 12, pe="none", pos_scale=3.0)
    axial = GeoPEPointTransformerConv(4, 12, pe="rope-mixed", mixed_init="axial", base=50.0)   # its start: read
    assert repr(axial) == "GeoPEPointTransformerConv(4, 12, pe='rope-mixed')"
    GeoPEPointTransformerConv(4, 12, pe="rpe", pos_scale=25.0, learnable=False)                 # the defaults: taken


def test_channels_are_checked():
    with pytest.raises(TypeError, match=r"expected out_channels an int >= 1, got 12.5"):
        GeoPEPointTransformerConv(4, 12.5)
    with pytest.raises(ValueError, match=r"expected in_channels >= 1, got 0"):
        GeoPEPointTransformerConv(0, 12)
    GeoPEPointTransformerConv(-1, 12)                                             # lazy, as PyG


@pytest.mark.parametrize("pe", ["rpe", "geope", "ape"])
def test_positions_must_be_finite_floats(pe):
    conv = GeoPEPointTransformerConv(4, 12, pe=pe)
    x, pos, edge_index = graph()
    bad = pos.clone()
    bad[5, 2] = float("inf")
    with pytest.raises(ValueError, match=r"expected finite pos, got 1 NaN or infinite entries \(the first in row 5"):
        conv(x, bad, edge_index)
    with pytest.raises(ValueError, match=r"expected finite pos\[1\] \(targets\)"):
        conv((x, x), (pos, bad), edge_index)
    with pytest.raises(TypeError, match=r"expected pos a floating-point tensor, got dtype torch.int64"):
        conv(x, (pos * 10).long(), edge_index)


@pytest.mark.parametrize("pe", ["rpe", "geope"])
def test_positions_not_a_tensor_are_named_as_passed(pe):
    """A NumPy array (or a list of rows) as `pos` was taken for a (sources, targets) pair and named
    `pos[0] (sources)`, an argument the user did not pass; a pair of two is still a pair, a list of two too."""
    import numpy as np

    conv = GeoPEPointTransformerConv(4, 12, pe=pe)
    x, pos, edge_index = graph()
    for given, what in ((pos.numpy(), "ndarray"), (pos.tolist(), "a list of 12"), ((pos,), "a tuple of 1")):
        with pytest.raises(TypeError, match=rf"^expected pos a tensor or a \(sources, targets\) pair of tensors, "
                                            rf"got {what}$"):
            conv(x, given, edge_index)
    with pytest.raises(TypeError, match=r"^expected pos\[0\] \(sources\) a tensor, got ndarray$"):
        conv((x, x), (np.asarray(pos), pos), edge_index)
    with torch.no_grad():
        assert torch.equal(conv((x, x), [pos, pos], edge_index), conv(x, pos, edge_index))


@pytest.mark.parametrize("pe", ["rpe", "geope", "lingeope"])
def test_features_and_positions_of_other_row_counts_are_one_error_naming_both(pe):
    """30 feature rows and 40 positions (edges within the first 30): `geope` failed inside `apply_geope`, PyG's
    `rpe` with an IndexError on a self loop; one position a node is the layer's contract for every preset."""
    conv = GeoPEPointTransformerConv(4, 12, pe=pe)
    x, pos, _ = graph(n=40)
    edge_index = knn_graph(pos[:30], 4)
    with pytest.raises(ValueError, match=r"expected x and pos with one row a node, got x of 30 rows and pos of 40"):
        conv(x[:30], pos, edge_index)
    with pytest.raises(ValueError, match=r"expected x\[0\] and pos\[0\] \(sources\) with one row a node, got x\[0\] "
                                         r"of 40 rows and pos\[0\] \(sources\) of 30"):
        conv((x, x[:30]), (pos[:30], pos[:30]), edge_index)
    assert conv((x[:30], x[:20]), (pos[:30], pos[:20]), edge_index[:, edge_index[1] < 20]).shape == (20, 12)


def test_rpe_positions_have_the_width_pos_nn_takes():
    """`rpe` reads positions through `pos_nn` only (PyG's rule): 2 columns with a `pos_nn` of 2 inputs run, with the
    default `Linear(3, C)` they are PyG's shape error, not ours; a rotation checks its `axes`."""
    x, pos, edge_index = graph()
    out = GeoPEPointTransformerConv(4, 12, pos_nn=torch.nn.Linear(2, 12))(x, pos[:, :2], edge_index)
    assert out.shape == (12, 12)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        GeoPEPointTransformerConv(4, 12)(x, pos[:, :2], edge_index)
    with pytest.raises(ValueError, match=r"expected pos of shape \(N, 3\), got \(12, 2\)"):
        GeoPEPointTransformerConv(4, 12, pe="geope+rpe", pos_nn=torch.nn.Linear(2, 12))(x, pos[:, :2], edge_index)


@pytest.fixture(scope="module")
def pyg_graph_breaks() -> int:
    """The graph breaks of PyG's own ``PointTransformerConv`` on ``graph(n=40)``: one count for every encoding."""
    torch._dynamo.reset()
    x, pos, edge_index = graph(n=40)
    return torch._dynamo.explain(PointTransformerConv(4, 12))(x, pos, edge_index).graph_break_count


@pytest.mark.parametrize("pe", ["rpe", "geope", "ape", "lingeope", "rope3d"])
def test_torch_compile_breaks_no_more_than_pygs_layer_and_gives_the_eager_values(pe, pyg_graph_breaks):
    """The `torch.mul(..., out=)` on strided views of the rotation made 19 graph breaks; now the breaks are
    PyG's own (the data-dependent `remove_self_loops`): the per-edge rotations' CPU kernel is a custom op
    (`pointgeope::turn_edges`), which the graph keeps whole; whether numba is installed is looked up once, not
    traced (torch 2.11 broke at `importlib.util.find_spec`); and the traced graphs (`aot_eager`, forward and
    backward) give the eager outputs and gradients."""
    from torch._dynamo.backends.debugging import ExplainWithBackend

    torch.manual_seed(0)
    conv = GeoPEPointTransformerConv(4, 12, pe=pe)
    x, pos, edge_index = graph(n=40)
    torch._dynamo.reset()
    # one trace: the graphs and break reasons that torch._dynamo.explain counts (graphs - 1 breaks), collected
    # while the same graphs are compiled with aot_eager (a second trace for explain cost half the test's time)
    explainer = ExplainWithBackend("aot_eager")
    compiled = torch.compile(conv, backend=explainer)
    x_eager, x_compiled = x.clone().requires_grad_(), x.clone().requires_grad_()
    eager, traced = conv(x_eager, pos, edge_index), compiled(x_compiled, pos, edge_index)
    explained = explainer.output()
    assert explained.graph_break_count == pyg_graph_breaks == 2, [b.reason for b in explained.break_reasons]
    ours = [(b.reason.splitlines()[0], [f"{f.filename}:{f.lineno}" for f in b.user_stack])
            for b in explained.break_reasons if not any("torch_geometric" in f.filename for f in b.user_stack)]
    assert not ours     # every break in PyG's code: one of ours need not change the count (2.11: lingeope's made 2)
    torch.testing.assert_close(traced, eager, atol=1e-6, rtol=1e-5)
    eager.square().sum().backward(), traced.square().sum().backward()
    torch.testing.assert_close(x_compiled.grad, x_eager.grad, atol=1e-5, rtol=1e-5)
