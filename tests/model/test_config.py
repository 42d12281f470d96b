"""Tests of pointgeope/model/config.py: one config for the YAML section and the network, presets named once."""
from __future__ import annotations

import dataclasses
import typing

import pytest
import torch

from pointgeope.engine import build
from pointgeope.engine.config import Config, ConfigError, load_config
from pointgeope.model import PRESETS, ModelConfig, PointTransformerLayer, PointTransformerSeg
from pointgeope.model.qk_encodings import QK_ENCODINGS

TINY = dict(blocks=[1, 1], planes=[16, 24], strides=[1, 4], neighbours=[8, 8], decoder_blocks=[1, 1])


def test_the_preset_choices_are_the_names_of_presets():
    """model.pe names PTv1's presets, then the PTv3 encodings PTv1 lacks (point3drope), each once."""
    choices = typing.get_args(typing.get_type_hints(ModelConfig)["pe"])
    assert choices[:len(PRESETS)] == tuple(PRESETS)
    assert set(choices[len(PRESETS):]) == set(QK_ENCODINGS) - set(PRESETS) == {"point3drope"}
    assert len(set(choices)) == len(choices)
    assert typing.get_type_hints(Config)["model"] is ModelConfig
    for name in PRESETS:
        assert load_config(overrides=[f"model.pe={name}"]).model.pe == name
    with pytest.raises(ConfigError, match=r"model\.pe: expected one of .* did you mean 'lingeope'"):
        load_config(overrides=["model.pe=lingeop"])


def test_the_default_encoding_is_the_published_rpe_everywhere():
    assert ModelConfig().pe == Config().model.pe == "rpe"
    assert PointTransformerSeg(**TINY).pe == PRESETS["rpe"]
    assert PointTransformerLayer(16, 4, 8).pe == PRESETS["rpe"]


def _outputs(model: torch.nn.Module) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    coord = torch.rand(90, 3, generator=g) * 2
    feat = torch.cat([torch.rand(90, 3, generator=g), coord], dim=1)
    with torch.no_grad():
        return model.eval()(coord, feat, torch.tensor([50, 90]))


def test_a_config_and_keyword_overrides_build_the_same_network():
    cfg = ModelConfig(pe="geope", **TINY)
    torch.manual_seed(0)
    from_config = PointTransformerSeg(cfg, grid_size=0.1)
    torch.manual_seed(0)
    from_keywords = PointTransformerSeg(pe="geope", grid_size=0.1, **{k: tuple(v) for k, v in TINY.items()})
    assert from_config.config == cfg and from_keywords.config == cfg
    assert torch.equal(_outputs(from_config), _outputs(from_keywords))
    torch.manual_seed(0)
    assert not torch.equal(_outputs(PointTransformerSeg(cfg, grid_size=0.2)), _outputs(from_config))  # GeoPE's phases
    with pytest.raises(TypeError, match="planez"):
        PointTransformerSeg(planez=[16])


def test_the_engine_builds_the_config_s_network_at_the_data_s_voxel_size():
    cfg = Config(model=ModelConfig(pe="lingeope", **TINY))
    cfg.data.grid_size = 0.1
    net = build.model(cfg)
    assert net.config == cfg.model and net.pe == PRESETS["lingeope"]
    torch.manual_seed(0)
    expected = PointTransformerSeg(cfg.model, grid_size=0.1)
    assert [t.shape for t in net.state_dict().values()] == [t.shape for t in expected.state_dict().values()]
    assert dataclasses.asdict(cfg)["model"] == dataclasses.asdict(ModelConfig(pe="lingeope", **TINY))
