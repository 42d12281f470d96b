"""The network's hyperparameters, written once: the ``model:`` section of a run's YAML config
(``pointgeope.engine.config``) and what ``PointTransformerSeg`` takes (as nanoGPT's ``GPTConfig``).

The defaults are the published S3DIS network, Point Transformer Seg50 with its relative position encoding
(``pe: rpe``). ``backbone: ptv3`` picks Point Transformer V3 instead (Pointcept's ``PT-v3m1``,
``pointgeope/model/ptv3/``): its own keys are the ``ptv3:`` subsection (Pointcept's argument names, its S3DIS
values as defaults) and ``pe`` names one of the dot-product encodings of ``pointgeope.model.qk_encodings``;
the PTv1 keys (``planes`` ... ``share_planes``, ``rope_mixed_init``) must then keep their defaults, and the
``ptv3:`` keys theirs under ``backbone: ptv1`` (``engine.config_values.backbone_problem``). Lists rather than tuples, so
that the YAML machinery checks every entry. The voxel size that GeoPE's phases use is the data's (``data.grid_size``),
passed to the network beside this config.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pointgeope.constants import NUM_CLASSES
from pointgeope.model.presets import ORDERS, POINT3DROPE_SCALE, PRESETS, QK_ENCODINGS

__all__ = ["ModelConfig", "PTv3Config", "PresetName", "PTV1_KEYS", "ptv1_settings"]

# The names of ``PRESETS`` (PTv1) and of ``QK_ENCODINGS`` (PTv3): a new one needs no edit here, and a typo in
# a config gets "did you mean". Which backbone takes which: engine.config_values.backbone_problem.
PresetName = Literal[tuple(dict.fromkeys([*PRESETS, *QK_ENCODINGS]))]
OrderName = Literal[tuple(ORDERS)]
PTV1_KEYS = ("planes", "blocks", "strides", "neighbours", "decoder_blocks", "share_planes", "rope_mixed_init")


@dataclass
class PTv3Config:
    """``PointTransformerV3``'s arguments (``pointgeope/model/ptv3/network.py``), Pointcept's names and S3DIS
    values (``configs/s3dis/semseg-pt-v3m1-0-base.py``). The rotary encodings' width variant (head width 18,
    ``qk_encodings.rotary_channels``) is ``enc_channels``/``dec_channels`` = heads x 18."""

    order: list[OrderName] = field(default_factory=lambda: ["z", "z-trans", "hilbert", "hilbert-trans"])  # the
    #                                         space-filling curves; block i of a stage attends along order i mod len
    stride: list[int] = field(default_factory=lambda: [2, 2, 2, 2])                 # pooling stride per stage
    enc_depths: list[int] = field(default_factory=lambda: [2, 2, 2, 6, 2])           # blocks per encoder stage
    enc_channels: list[int] = field(default_factory=lambda: [32, 64, 128, 256, 512])  # width per encoder stage
    enc_num_head: list[int] = field(default_factory=lambda: [2, 4, 8, 16, 32])       # heads per encoder stage
    enc_patch_size: list[int] = field(default_factory=lambda: [1024] * 5)            # points per patch
    dec_depths: list[int] = field(default_factory=lambda: [2, 2, 2, 2])              # blocks per decoder stage
    dec_channels: list[int] = field(default_factory=lambda: [64, 64, 128, 256])      # width per decoder stage
    dec_num_head: list[int] = field(default_factory=lambda: [4, 4, 8, 16])           # heads per decoder stage
    dec_patch_size: list[int] = field(default_factory=lambda: [1024] * 4)            # points per decoder patch
    mlp_ratio: float = 4.0                  # the blocks' MLP width / channels
    qkv_bias: bool = True                   # a bias in the attention's qkv projection
    attn_drop: float = 0.0                  # dropout of the attention weights
    proj_drop: float = 0.0                  # dropout after the attention's output projection
    drop_path: float = 0.3                  # the deepest block's drop-path rate (linear from 0)
    shuffle_orders: bool = True             # shuffle the serialization orders (training; pooling always does)
    enable_rpe: bool = False                # Pointcept's relative position bias in the attention (PTv3's own)


@dataclass
class ModelConfig:
    """``PointTransformerSeg``'s arguments (see ``pointgeope/model/network.py`` for the stage layout), with
    ``backbone: ptv1``; ``backbone: ptv3`` is ``pointgeope.model.ptv3.seg.PTv3Seg``'s (``PointTransformerSeg`` refuses
    it). ``pointgeope.engine.build.model`` builds the one it names."""

    backbone: Literal["ptv1", "ptv3"] = "ptv1"  # Point Transformer v1 (the keys below) or V3 (the ptv3: keys)
    pe: PresetName = "rpe"                  # positional encoding: PTv1's preset (attention.PRESETS) or PTv3's
    #                                         encoding (qk_encodings.QK_ENCODINGS: none, geope, ..., pointrope)
    in_channels: int = 6                    # [rgb | xyz] or [rgb | normal]; +1 with data.height, -3 with
    #                                         data.color=false
    num_classes: int = NUM_CLASSES          # output classes (the 13 of S3DIS)
    planes: list[int] = field(default_factory=lambda: [32, 64, 128, 256, 512])  # width per stage
    blocks: list[int] = field(default_factory=lambda: [1, 2, 3, 5, 2])          # encoder blocks per stage
    strides: list[int] = field(default_factory=lambda: [1, 4, 4, 4, 4])         # FPS stride per stage
    neighbours: list[int] = field(default_factory=lambda: [8, 16, 16, 16, 16])  # k per stage
    decoder_blocks: list[int] = field(default_factory=lambda: [1, 1, 1, 1, 1])  # blocks after each transition-up
    share_planes: int = 8                   # channel groups per attention weight
    geope_base: float = 100.0               # GeoPE frequency base (the paper's lambda; also rope3d's)
    geope_learnable: bool = False           # learn GeoPE's block frequencies (geope, lingeope, rope3d; PTv1's ape)
    #                                         geope_base and this: refused with an encoding that does not read
    #                                         them, taken by none and rpe (config_values.encoding_problem)
    point3drope_scale: float = POINT3DROPE_SCALE  # point3drope turns pair q by scale x metres x 10^(-q/Q): 0.5
    #                                         gives Utonia's S3DIS angles (its configs halve the coordinates)
    rope_mixed_init: Literal["random", "axial"] = "random"  # RoPE-Mixed's initial frequencies: its authors'
    #                                         random directions at base 10, or rope3d's axial ones
    ptv3: PTv3Config = field(default_factory=PTv3Config)  # backbone: ptv3 only


def ptv1_settings(cfg: ModelConfig) -> list[str]:
    """What of ``cfg`` is PTv1's, the one rule of "this config is PTv1's / PTv3's" (``PTv3Seg``'s refusal and
    the engine's check of ``model.backbone``): the :data:`PTV1_KEYS` set away from ``ModelConfig()``'s
    defaults, then ``"pe"`` when ``cfg.pe`` is a PTv1 preset (not one of PTv3's ``QK_ENCODINGS``). Empty: the
    config may be PTv3's."""
    default = ModelConfig()
    return [k for k in PTV1_KEYS if getattr(cfg, k) != getattr(default, k)] + ["pe"] * (cfg.pe not in QK_ENCODINGS)
