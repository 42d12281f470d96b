"""Point Transformer V3 (Wu et al., CVPR 2024, arXiv 2312.10035), Pointcept's ``PT-v3m1``.

A U-Net over serialized points. With S stages of widths C_s::

    serialize (the orders, shuffled if shuffle_orders) -> Embedding (SubMConv 5^3, BN, GELU)   (N, C_0)
    encoder  s = 0..S-1:  [SerializedPooling(stride_{s-1}) if s > 0] + enc_depths[s] Blocks   (N_s, C_s)
    decoder  s = S-2..0:  SerializedUnpooling(skip from encoder stage s) + dec_depths[s] Blocks  (N_s, D_s)

Block ``i`` of a stage attends along order ``i mod len(order)``. Module names, parameters and buffers are
Pointcept's (``embedding.stem.conv.weight``, ``enc.enc1.down.proj.weight``, ``enc.enc0.block0.attn.qkv.weight``,
``dec.dec0.up.proj_skip.0.weight``, ...), so a Pointcept ``PT-v3m1`` ``state_dict`` loads with ``strict=True``.

The same torch seed gives the same network as Pointcept's: the orders are shuffled by the same
``torch.randperm`` draws (at serialization if ``shuffle_orders``, and at every pooling, in eval too, as
Pointcept's pooling always does; ``pooling_shuffle_orders=False`` turns the latter off, and
``shuffle_in_eval=False`` at construction turns both off while the network is in eval mode, each module reading
its own mode; the network and every pooling keep their own copy of the flag, so setting the network's attribute
afterwards changes the serialization only).
"""
from __future__ import annotations

from functools import partial

import torch
from torch import Tensor, nn

from pointgeope.model.ptv3.attention import PatchEncoding
from pointgeope.model.ptv3.block import Block
from pointgeope.model.ptv3.embedding import Embedding
from pointgeope.model.ptv3.pooling import SerializedPooling, SerializedUnpooling, shuffles_now
from pointgeope.model.ptv3.serialization import ORDERS
from pointgeope.model.ptv3.structure import PointBatch
from pointgeope.model.ptv3_rules import stride_problem

__all__ = ["PointTransformerV3"]


def _encoder_only(enc_mode: bool | None, cls_mode: bool | None) -> bool:
    """The encoder-only switch from its two names in Pointcept's PT-v3m1: ``enc_mode`` (since Pointcept v1.6.1)
    and ``cls_mode`` (up to v1.6.0); either alone, or both when they agree (else a ``ValueError``)."""
    if cls_mode is not None and enc_mode is not None and bool(cls_mode) != bool(enc_mode):
        raise ValueError(f"enc_mode={enc_mode!r} and cls_mode={cls_mode!r} are two names of one switch, the "
                         "encoder-only network (Pointcept's cls_mode up to v1.6.0, enc_mode since v1.6.1), and "
                         "disagree: pass one of them")
    return bool(enc_mode if enc_mode is not None else cls_mode)


def _check_lengths(num_stages: int, enc: dict, dec: dict, stride: tuple, enc_mode: bool) -> None:
    """A ``ValueError`` naming the argument whose length does not match the stages, or the pooling stride that
    is no power of two (1, 2, 4, ...)."""
    if len(stride) != num_stages - 1:
        raise ValueError(f"expected stride of {num_stages - 1} values for {num_stages} stages, got {stride}")
    for name, value in enc.items():
        if len(value) != num_stages:
            raise ValueError(f"expected {name} of {num_stages} values (one per stage), got {value}")
    for name, value in ({} if enc_mode else dec).items():
        if len(value) != num_stages - 1:
            raise ValueError(f"expected {name} of {num_stages - 1} values (stages - 1), got {value}")
    for s, value in enumerate(stride):
        problem = stride_problem(value)
        if problem:
            raise ValueError(f"stride[{s}]: {problem}")


class PointTransformerV3(nn.Module):
    """PT-v3m1 (module docstring). Constructor arguments are Pointcept's, in its order (S3DIS config values as
    defaults where they differ from Pointcept's own); in addition ``pe`` (the attention's positional encoding, see
    :mod:`pointgeope.model.ptv3.attention`), ``pooling_shuffle_orders``, ``shuffle_in_eval`` and ``cls_mode``,
    the name of ``enc_mode`` (the encoder only) in Pointcept up to v1.6.0, so that the configs of that release
    build too (given with ``enc_mode``, the two must agree). Pointcept's PDNorm (``pdnorm_bn``/``pdnorm_ln``) is
    not implemented and raises a ``ValueError``.

    Shapes:
        forward(coord (N, 3) any float, grid_coord (N, 3) int >= 0, feat (N, in_channels) in the model's dtype
        (else a ``TypeError`` naming ``feat``, as PTv1's; under autocast a half dtype or float32), offset (B,) the
        end of each cloud, a tensor or a host list) -> (N, dec_channels[0]) per-point features in input order
        (enc_mode: the coarsest stage's (N_S, enc_channels[-1]), rows in its pooled order; one stage, no
        decoder: (N, enc_channels[0]) in input order, with or without enc_mode).
    """

    def __init__(self, in_channels: int = 6, order=("z", "z-trans", "hilbert", "hilbert-trans"),
                 stride=(2, 2, 2, 2), enc_depths=(2, 2, 2, 6, 2), enc_channels=(32, 64, 128, 256, 512),
                 enc_num_head=(2, 4, 8, 16, 32), enc_patch_size=(1024, 1024, 1024, 1024, 1024),
                 dec_depths=(2, 2, 2, 2), dec_channels=(64, 64, 128, 256), dec_num_head=(4, 4, 8, 16),
                 dec_patch_size=(1024, 1024, 1024, 1024), mlp_ratio: float = 4, qkv_bias: bool = True,
                 qk_scale: float | None = None, attn_drop: float = 0.0, proj_drop: float = 0.0,
                 drop_path: float = 0.3, pre_norm: bool = True, shuffle_orders: bool = True,
                 enable_rpe: bool = False, enable_flash: bool = True, upcast_attention: bool = False,
                 upcast_softmax: bool = False, enc_mode: bool | None = None, pdnorm_bn: bool = False,
                 pdnorm_ln: bool = False, pdnorm_decouple: bool = True, pdnorm_adaptive: bool = False,
                 pdnorm_affine: bool = True, pdnorm_conditions=("ScanNet", "S3DIS", "Structured3D"),
                 pe: PatchEncoding | None = None, pooling_shuffle_orders: bool = True,
                 shuffle_in_eval: bool = True, cls_mode: bool | None = None) -> None:
        super().__init__()
        enc_mode = _encoder_only(enc_mode, cls_mode)
        self.order = (order,) if isinstance(order, str) else tuple(order)
        bad = [o for o in self.order if o not in ORDERS]
        if bad or not self.order:
            raise ValueError(f"expected order among {ORDERS}, got {order!r}")
        if pdnorm_bn or pdnorm_ln:
            raise ValueError("pdnorm_bn / pdnorm_ln (Point Prompt Training's PDNorm) are not implemented: "
                             "set both to False")
        self.num_stages, self.enc_mode, self.shuffle_orders = len(enc_depths), enc_mode, shuffle_orders
        self.shuffle_in_eval = shuffle_in_eval
        _check_lengths(self.num_stages, dict(enc_channels=enc_channels, enc_num_head=enc_num_head,
                                             enc_patch_size=enc_patch_size),
                       dict(dec_depths=dec_depths, dec_channels=dec_channels, dec_num_head=dec_num_head,
                            dec_patch_size=dec_patch_size), tuple(stride), enc_mode)
        # one stage: no decoder (Pointcept's is then empty), the output is stage 0's, as with enc_mode
        self.out_channels = enc_channels[-1] if enc_mode or self.num_stages == 1 else dec_channels[0]
        bn = partial(nn.BatchNorm1d, eps=1e-3, momentum=0.01)
        block = partial(Block, mlp_ratio=mlp_ratio, qkv_bias=qkv_bias, qk_scale=qk_scale, attn_drop=attn_drop,
                        proj_drop=proj_drop, norm_layer=nn.LayerNorm, act_layer=nn.GELU, pre_norm=pre_norm,
                        enable_rpe=enable_rpe, enable_flash=enable_flash, upcast_attention=upcast_attention,
                        upcast_softmax=upcast_softmax, pe=pe)
        self.embedding = Embedding(in_channels, enc_channels[0], norm_layer=bn, act_layer=nn.GELU)
        pool = partial(SerializedPooling, norm_layer=bn, act_layer=nn.GELU, shuffle_orders=pooling_shuffle_orders,
                       shuffle_in_eval=shuffle_in_eval)
        self.enc = self._encoder(block, pool, stride, enc_depths, enc_channels, enc_num_head, enc_patch_size,
                                 drop_path)
        if not enc_mode:
            unpool = partial(SerializedUnpooling, norm_layer=bn, act_layer=nn.GELU)
            self.dec = self._decoder(block, unpool, enc_channels, dec_depths, list(dec_channels),
                                     dec_num_head, dec_patch_size, drop_path)

    def _encoder(self, block, pool, stride, depths, channels, heads, patches, drop_path) -> nn.Sequential:
        """``enc.enc{s}``: ``down`` (s > 0) then ``block{i}``; drop-path rates linear in 0..drop_path."""
        rates = torch.linspace(0, drop_path, sum(depths)).tolist()
        enc = nn.Sequential()
        for s in range(self.num_stages):
            stage = nn.Sequential()
            if s > 0:
                stage.add_module("down", pool(channels[s - 1], channels[s], stride=stride[s - 1]))
            for i in range(depths[s]):
                stage.add_module(f"block{i}", block(channels[s], heads[s], patch_size=patches[s],
                                                    drop_path=rates[sum(depths[:s]) + i],
                                                    order_index=i % len(self.order)))
            if len(stage):
                enc.add_module(f"enc{s}", stage)
        return enc

    def _decoder(self, block, unpool, enc_channels, depths, channels, heads, patches, drop_path) -> nn.Sequential:
        """``dec.dec{s}`` for s = S-2..0: ``up`` then ``block{i}``; each stage's rates reversed."""
        rates = torch.linspace(0, drop_path, sum(depths)).tolist()
        channels = channels + [enc_channels[-1]]
        dec = nn.Sequential()
        for s in reversed(range(self.num_stages - 1)):
            stage_rates = rates[sum(depths[:s]):sum(depths[:s + 1])][::-1]
            stage = nn.Sequential()
            stage.add_module("up", unpool(channels[s + 1], enc_channels[s], channels[s]))
            for i in range(depths[s]):
                stage.add_module(f"block{i}", block(channels[s], heads[s], patch_size=patches[s],
                                                    drop_path=stage_rates[i], order_index=i % len(self.order)))
            dec.add_module(f"dec{s}", stage)
        return dec

    def forward_points(self, coord: Tensor, grid_coord: Tensor, feat: Tensor, offset: Tensor) -> PointBatch:
        """The network on checked inputs; returns the final point structure (the input stage unless
        enc_mode)."""
        point = PointBatch.from_inputs(coord, grid_coord, feat, offset)
        point.serialize(self.order, shuffle=shuffles_now(self.shuffle_orders, self))
        point = self.embedding(point)
        point = self.enc(point)
        if not self.enc_mode:
            point = self.dec(point)
        return point

    @property
    def cls_mode(self) -> bool:
        """``enc_mode`` by its name up to Pointcept v1.6.0 (read only)."""
        return self.enc_mode

    def forward(self, coord: Tensor, grid_coord: Tensor, feat: Tensor, offset: Tensor) -> Tensor:
        return self.forward_points(coord, grid_coord, feat, offset).feat
