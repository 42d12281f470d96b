"""The encoding a GeoPE PyG layer saves in its state_dict (``pe``) names it by its settings: a custom encoding was
saved as its printed ``repr`` and a preset by its name, so a change of that text or a renamed preset stopped a
checkpoint of an equal encoding from loading. Checkpoints saved either way still load."""
from __future__ import annotations

import io
import re

import pytest
import torch

from pointgeope.model.attention import PRESETS, PositionalEncoding
from pointgeope.nn import GeoPEPointTransformerConv, knn_graph

CUSTOM = PositionalEncoding("geope", True, "geope")      # no preset: GeoPE on keys and values, with delta


def _roundtrip(state: dict) -> dict:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer)


def _outputs(layer: GeoPEPointTransformerConv) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1)
    pos = torch.rand(12, 3, generator=gen)
    with torch.no_grad():
        return layer(torch.randn(12, 4, generator=gen), pos, knn_graph(pos, 4))


def _text(text: str) -> torch.Tensor:
    return torch.tensor(list(text.encode()), dtype=torch.uint8)


def test_a_custom_encoding_loads_after_its_printed_form_changes(monkeypatch):
    torch.manual_seed(0)
    with monkeypatch.context() as patch:                 # the dataclass printed otherwise when it was saved
        patch.setattr(PositionalEncoding, "__repr__", lambda self: f"PE<{self.rotation}>")
        saved = GeoPEPointTransformerConv(4, 12, pe=CUSTOM)
        state = _roundtrip(saved.state_dict())
    layer = GeoPEPointTransformerConv(4, 12, pe=PositionalEncoding("geope", True, "geope"))
    layer.load_state_dict(state)
    assert torch.equal(_outputs(layer), _outputs(saved))


def test_a_preset_loads_after_it_is_renamed(monkeypatch):
    torch.manual_seed(0)
    with monkeypatch.context() as patch:                 # "geope" was called "geope-v1" when it was saved
        patch.setitem(PRESETS, "geope-v1", PRESETS["geope"])
        patch.delitem(PRESETS, "geope")
        saved = GeoPEPointTransformerConv(4, 12, pe="geope-v1")
        state = _roundtrip(saved.state_dict())
    layer = GeoPEPointTransformerConv(4, 12, pe="geope")
    layer.load_state_dict(state)
    assert torch.equal(_outputs(layer), _outputs(saved))


@pytest.mark.parametrize(("old", "pe"), [
    ("geope", "geope"), ("ape", "ape"),
    ("PositionalEncoding(rotation='geope', relation_delta=True, value='geope', absolute=False)", CUSTOM)])
def test_checkpoints_saved_by_name_or_by_repr_still_load(old, pe):
    """Older checkpoints: a preset saved by its name, a custom encoding by the dataclass's ``repr`` of then."""
    torch.manual_seed(0)
    saved = GeoPEPointTransformerConv(4, 12, pe=pe)
    state = saved.state_dict()
    state["pe"] = _text(old)
    layer = GeoPEPointTransformerConv(4, 12, pe=pe)
    layer.load_state_dict(state)
    assert torch.equal(_outputs(layer), _outputs(saved))


def test_a_custom_encoding_of_other_settings_refuses_naming_both():
    state = GeoPEPointTransformerConv(4, 12, pe=CUSTOM).state_dict()
    other = PositionalEncoding("lingeope", True, "geope")
    with pytest.raises(RuntimeError, match=re.escape(f"pe: the checkpoint was saved with pe={CUSTOM!r}, this layer "
                                                     f"has pe={other!r}; build it with pe={CUSTOM!r} to load it")):
        GeoPEPointTransformerConv(4, 12, pe=other).load_state_dict(state)
    with pytest.raises(RuntimeError, match=re.escape(f"saved with pe={CUSTOM!r}, this layer has pe='geope+rpe'")):
        GeoPEPointTransformerConv(4, 12, pe="geope+rpe").load_state_dict(state)


@pytest.mark.parametrize("text", [
    '{"rotation": "geope", "colour": "red"}', '{"rotation": "geope", "absolute": 1}', '{"rotation": "twist"}',
    '["geope"]', "{not json", "geope-v9", "PositionalEncoding('geope')", "PositionalEncoding(rotation=f())",
    "__import__('os').system('true')",
    "PositionalEncoding(rotation={[]: 1})", "PositionalEncoding(rotation={'geope', []})",
    '{"rotation": ' + "[" * 5000 + "]" * 5000 + "}", "PositionalEncoding(rotation=" + "-" * 100_000 + "1)",
    "PositionalEncoding(rotation=" + "[" * 300 + "]" * 300 + ")"])
def test_a_saved_encoding_that_names_none_is_an_error_naming_the_key(text):
    """An unknown field, a field of the wrong kind, an unknown rotation, an unknown name, text that is no call of
    the dataclass with literals (parsed, never run); a literal that cannot be built (a list as a dict's key) and
    text nested too deep for Python's parsers, which raised TypeError, RecursionError or MemoryError out of
    ``load_state_dict``. The line says the text, cut where long."""
    state = GeoPEPointTransformerConv(4, 12, pe="geope").state_dict()
    state["pe"] = _text(text)
    with pytest.raises(RuntimeError) as err:
        GeoPEPointTransformerConv(4, 12, pe="geope").load_state_dict(state)
    shown = repr(text) if len(repr(text)) <= 160 else f"{repr(text)[:157]}... ({len(repr(text)):,} characters)"
    assert (f"pe: expected an encoding this version knows (its settings as JSON, or a preset's name), got {shown}; "
            "load it with the version that saved it") in str(err.value)


def test_a_later_versions_encoding_is_said_as_its_text():
    """A checkpoint of a later version (a field this one lacks) was said as a tensor of byte values
    (``got tensor([123,  34,  97, ...``), which names nothing a reader can check."""
    later = '{"absolute": false, "relation_delta": false, "rotation": "geope", "value": "rpe", "window": 2}'
    state = GeoPEPointTransformerConv(4, 12, pe="geope").state_dict()
    state["pe"] = _text(later)
    with pytest.raises(RuntimeError, match=re.escape(f"got {later!r}; load it with the version that saved it")):
        GeoPEPointTransformerConv(4, 12, pe="geope").load_state_dict(state)


def test_a_checkpoint_without_an_encoding_loads_with_a_warning_naming_the_assumption():
    """Saved before layers recorded their encoding: settings but no ``pe``. geope's parameters and settings are
    lingeope's too, so it loaded into a lingeope layer without a word; it still loads (refusing would leave no way
    to load a right one), and says which encoding it was taken for. One with the entry, and PyG's rpe (no settings,
    no entry), load without a word."""
    import warnings

    torch.manual_seed(0)
    old = GeoPEPointTransformerConv(4, 12, pe="geope").state_dict()
    old.pop("pe")
    layer = GeoPEPointTransformerConv(4, 12, pe="lingeope")
    with pytest.warns(UserWarning) as caught:
        layer.load_state_dict(old)
    assert [str(w.message) for w in caught] == [
        "the checkpoint names no encoding (saved before layers recorded it): loaded as pe='lingeope', unconfirmed; "
        "if it was trained with that, save it again to record it"]
    assert "pe" in layer.state_dict()                       # saved again, it names its encoding
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        GeoPEPointTransformerConv(4, 12, pe="lingeope").load_state_dict(layer.state_dict())
        GeoPEPointTransformerConv(4, 12).load_state_dict(GeoPEPointTransformerConv(4, 12).state_dict())
