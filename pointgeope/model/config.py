"""The network's hyperparameters, written once: the ``model:`` section of a run's YAML config
(``pointgeope.engine.config``) and what ``PointTransformerSeg`` takes (as nanoGPT's ``GPTConfig``).

The defaults are the published S3DIS network, Point Transformer Seg50 with its relative position encoding
(``pe: rpe``). Lists rather than tuples, so that the YAML machinery checks every entry. The voxel size that
GeoPE's phases use is the data's (``data.grid_size``), passed to the network beside this config.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pointgeope.constants import NUM_CLASSES
from pointgeope.model.attention import PRESETS

__all__ = ["ModelConfig", "PresetName"]

# The names of ``PRESETS``: a new preset needs no edit here, and a typo in a config gets "did you mean".
PresetName = Literal[tuple(PRESETS)]


@dataclass
class ModelConfig:
    """``PointTransformerSeg``'s arguments (see ``pointgeope/model/network.py`` for the stage layout)."""

    pe: PresetName = "rpe"                  # positional encoding preset (attention.PRESETS)
    in_channels: int = 6                    # [rgb | xyz]; +1 with data.height, -3 with data.color=false
    num_classes: int = NUM_CLASSES          # output classes (the 13 of S3DIS)
    planes: list[int] = field(default_factory=lambda: [32, 64, 128, 256, 512])  # width per stage
    blocks: list[int] = field(default_factory=lambda: [1, 2, 3, 5, 2])          # encoder blocks per stage
    strides: list[int] = field(default_factory=lambda: [1, 4, 4, 4, 4])         # FPS stride per stage
    neighbours: list[int] = field(default_factory=lambda: [8, 16, 16, 16, 16])  # k per stage
    decoder_blocks: list[int] = field(default_factory=lambda: [1, 1, 1, 1, 1])  # blocks after each transition-up
    share_planes: int = 8                   # channel groups per attention weight
    geope_base: float = 100.0               # GeoPE frequency base (the paper's lambda)
    geope_learnable: bool = False           # learn GeoPE's block frequencies
    rope_mixed_init: Literal["random", "axial"] = "random"  # RoPE-Mixed's initial frequencies: its authors'
    #                                         random directions at base 10, or rope3d's axial ones
