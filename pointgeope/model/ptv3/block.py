"""The PTv3 block: xCPE, pre-norm serialized attention, MLP, each a residual branch, with DropPath.

For features ``x`` (N, C) of a stage (``pre_norm=True``, Pointcept's default)::

    x = x + Norm(Linear(SubMConv3d_3(x)))              xCPE: the conditional positional encoding
                                                       (after an unpooling: of its skip branch, as Pointcept)
    x = x + DropPath(Attn(LN_1(x)))                    serialized patch attention (one order per block)
    x = x + DropPath(MLP(LN_2(x)))                     MLP: Linear(C, r C), GELU, Linear(r C, C)

(``pre_norm=False`` applies LN_1, LN_2 after each residual sum instead.) Submodule names follow Pointcept's
``Block`` (``cpe.0`` the convolution, ``cpe.1`` the linear, ``cpe.2`` the norm, ``norm1.0``, ``attn``,
``norm2.0``, ``mlp.0.fc1``, ``mlp.0.fc2``) so its ``state_dict`` loads.
"""
from __future__ import annotations

from collections.abc import Callable

from torch import Tensor, nn

from pointgeope.model.ptv3.attention import PatchEncoding, SerializedAttention
from pointgeope.model.ptv3.sparse_conv import SubMConv3d, build_neighbours
from pointgeope.model.ptv3.structure import PointBatch

__all__ = ["MLP", "Block", "DropPath", "neighbours"]


class DropPath(nn.Module):
    """Stochastic depth (Huang et al., 2016) per row as timm's ``DropPath`` on (N, C): in training each row is
    zeroed with probability p and the others scaled by ``1 / (1 - p)``; identity in eval or at p = 0."""

    def __init__(self, drop_prob: float = 0.0) -> None:
        super().__init__()
        self.drop_prob = drop_prob

    def forward(self, x: Tensor) -> Tensor:
        if self.drop_prob == 0.0 or not self.training:
            return x
        keep = 1.0 - self.drop_prob
        mask = x.new_empty((x.shape[0],) + (1,) * (x.dim() - 1)).bernoulli_(keep)
        return x * mask.div_(keep) if keep > 0.0 else x * mask

    def extra_repr(self) -> str:
        return f"drop_prob={self.drop_prob}"


class MLP(nn.Module):
    """``fc2(drop(act(fc1(x))))`` then dropout, as Pointcept's ``MLP``: (N, C_in) -> (N, C_out)."""

    def __init__(self, in_channels: int, hidden_channels: int, out_channels: int,
                 act_layer: Callable[[], nn.Module] = nn.GELU, drop: float = 0.0) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_channels, hidden_channels)
        self.act = act_layer()
        self.fc2 = nn.Linear(hidden_channels, out_channels)
        self.drop = nn.Dropout(drop)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


def neighbours(point: PointBatch, kernel_size: int):
    """The stage's neighbour table for ``kernel_size`` (Pointcept's ``indice_key``), cached on ``point``."""
    key = ("subm", kernel_size)
    if key not in point.cache:
        point.cache[key] = build_neighbours(point.grid_coord, point.batch, kernel_size)
    return point.cache[key]


class Block(nn.Module):
    """One PTv3 block (module docstring); arguments as Pointcept's ``Block`` (``cpe_indice_key`` is accepted
    and unused: the neighbour table is cached per stage on the point structure), plus the attention's
    ``pe`` hook. forward(point) updates ``point.feat`` (N, C) and returns ``point``."""

    def __init__(self, channels: int, num_heads: int, patch_size: int = 48, mlp_ratio: float = 4.0,
                 qkv_bias: bool = True, qk_scale: float | None = None, attn_drop: float = 0.0,
                 proj_drop: float = 0.0, drop_path: float = 0.0,
                 norm_layer: Callable[[int], nn.Module] = nn.LayerNorm,
                 act_layer: Callable[[], nn.Module] = nn.GELU, pre_norm: bool = True, order_index: int = 0,
                 cpe_indice_key: str | None = None, enable_rpe: bool = False, enable_flash: bool = True,
                 upcast_attention: bool = True, upcast_softmax: bool = True,
                 pe: PatchEncoding | None = None) -> None:
        super().__init__()
        self.pre_norm = pre_norm
        self.cpe = nn.ModuleList([SubMConv3d(channels, channels, 3, bias=True),
                                  nn.Linear(channels, channels), norm_layer(channels)])
        self.norm1 = nn.Sequential(norm_layer(channels))
        self.attn = SerializedAttention(channels, num_heads, patch_size, qkv_bias=qkv_bias, qk_scale=qk_scale,
                                        attn_drop=attn_drop, proj_drop=proj_drop, order_index=order_index,
                                        enable_rpe=enable_rpe, enable_flash=enable_flash,
                                        upcast_attention=upcast_attention, upcast_softmax=upcast_softmax,
                                        pe=pe)
        self.norm2 = nn.Sequential(norm_layer(channels))
        self.mlp = nn.Sequential(MLP(channels, int(channels * mlp_ratio), channels, act_layer, proj_drop))
        self.drop_path = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

    def forward(self, point: PointBatch) -> PointBatch:
        conv, linear, norm = self.cpe
        x = point.feat
        conv_in = x if point.conv_feat is None else point.conv_feat     # after an unpooling: the skip branch
        point.conv_feat = None
        x = x + norm(linear(conv(conv_in, neighbours(point, 3))))
        point.feat = self.norm1(x) if self.pre_norm else x
        x = x + self.drop_path(self.attn(point))
        if not self.pre_norm:
            x = self.norm1(x)
        y = self.drop_path(self.mlp(self.norm2(x) if self.pre_norm else x))
        x = x + y
        point.feat = x if self.pre_norm else self.norm2(x)
        return point
