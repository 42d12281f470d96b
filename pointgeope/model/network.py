"""Point Transformer segmentation network (PTv1, Zhao et al. 2021), with a choice of positional encoding.

The published S3DIS model ("PointTransformerSeg50"): a U-Net over point sets of 5 encoder and 5 decoder
stages. ``ModelConfig``'s defaults reproduce it (about 7.8M parameters for 6 input channels and 13 classes)::

    stage        points   width   k    encoder                        decoder
    1            N        32      8    Linear-BN-ReLU + 1 block       up(64 -> 32)   + 1 block
    2            N/4      64      16   down(FPS+kNN) + 2 blocks       up(128 -> 64)  + 1 block
    3            N/16     128     16   down + 3 blocks                up(256 -> 128) + 1 block
    4            N/64     256     16   down + 5 blocks                up(512 -> 256) + 1 block
    5            N/256    512     16   down + 2 blocks                global head    + 1 block
    head: Linear(32, 32)-BN-ReLU-Linear(32, num_classes)

``blocks`` counts attention blocks per encoder stage: ``(1, 2, 3, 5, 2)`` is the authors'
``blocks=[2, 3, 4, 6, 3]``, which counts the transition-down as the first module of each stage.
The kNN neighbourhood of a stage is computed once and shared by all its blocks (the authors recompute
the same indices in every layer). All point ops (FPS, kNN, 3-NN) depend on the coordinates alone and run
up front (``ops.HierarchySpec``): the model computes its ``PointHierarchy`` itself, or takes one that the
data loader computed in its CPU workers (``model(coord, feat, offset, hierarchy=...)``).
"""
from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor, nn

from pointgeope.model import stage_memo
from pointgeope.model.attention import PointTransformerLayer, PositionalEncoding
from pointgeope.model.config import ModelConfig
from pointgeope.model.coord_check import warn_coarse
from pointgeope.model.norm import BatchNormReLU
from pointgeope.model.ops import (
    HierarchySpec,
    OpsBackends,
    PointHierarchy,
    check_offset,
    cloud_of_rows,
    gather,
    interpolate_from,
)
from pointgeope.model.ops.checks import check_count, check_finite, check_flag, check_model_dtype
from pointgeope.model.ops.hierarchy_check import check_hierarchy
from pointgeope.model.ops.offsets import offset_tensor
from pointgeope.model.residual_norm import BatchNormAddReLU
from pointgeope.model.rotation import constant
from pointgeope.model.small_batch import check_stage_rows
from pointgeope.number_kind import is_integer_tensor

__all__ = ["OpsBackends", "PointTransformerBlock", "TransitionDown", "TransitionUp", "PointTransformerSeg",
           "stage_grid_units", "check_sizes"]


def stage_grid_units(grid_size: float, strides: tuple[int, ...]) -> list[float]:
    """PointROPE's grid unit of every stage, metres: ``u_s = grid_size * sqrt(strides[0] * ... * strides[s])``.

    LitePT pools a voxel grid by 2 per axis between stages (its unit doubles) and recomputes the integer
    grid coordinates at each stage; on the surfaces that make up a room that keeps about one point in four.
    PTv1's stages come from FPS instead, keeping one point in ``stride``: on a surface the spacing of the
    samples grows by ``sqrt(stride)``, so the unit that keeps about one sample per cell grows as much. With
    the published strides ``(1, 4, 4, 4, 4)`` this is LitePT's doubling: 4, 8, 16, 32, 64 cm from 4 cm."""
    units, kept = [], 1
    for stride in strides:
        kept *= stride
        units.append(grid_size * math.sqrt(kept))
    return units


class PointTransformerBlock(nn.Module):
    """Bottleneck residual block: ``relu(x + BN(Linear(relu(BN(attn(relu(BN(Linear(x)))))))))``."""

    def __init__(self, channels: int, share_planes: int, neighbours: int, **layer_args):
        super().__init__()
        self.linear1 = nn.Linear(channels, channels, bias=False)
        self.bn1 = BatchNormReLU(channels)               # BatchNorm1d and its ReLU in one op (norm.py)
        self.attention = PointTransformerLayer(channels, share_planes, neighbours, **layer_args)
        self.bn2 = BatchNormReLU(channels)
        self.linear3 = nn.Linear(channels, channels, bias=False)
        self.bn3 = BatchNormAddReLU(channels)            # relu(BatchNorm1d + feat): one launch in eval (residual_norm)

    def forward(self, coord: Tensor, feat: Tensor, idx: Tensor) -> Tensor:
        x = self.bn1(self.linear1(feat))
        x = self.bn2(self.attention(coord, x, idx))
        return self.bn3(self.linear3(x), feat)


class TransitionDown(nn.Module):
    """Stride 1: ``Linear-BN-ReLU``. Stride > 1: the FPS samples (``n // stride`` per cloud) each gather
    their ``k`` nearest input points as ``[p_j - p_i | x_j]`` (``3 + C_in``), then ``Linear-BN-ReLU`` and a
    max over the neighbours. The samples and their neighbours come from the ``PointHierarchy``."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, neighbours: int):
        super().__init__()
        self.stride, self.neighbours = stride, neighbours
        self.linear = nn.Linear(in_channels + (3 if stride > 1 else 0), out_channels, bias=False)
        self.bn = BatchNormReLU(out_channels)            # BatchNorm1d and its ReLU in one op (norm.py)

    def forward(self, feat: Tensor, coord: Tensor | None = None, new_coord: Tensor | None = None,
                idx: Tensor | None = None) -> Tensor:
        """``feat (N, C_in)``; with stride > 1 also ``coord (N, 3)``, the samples' ``new_coord (M, 3)`` and
        their neighbours ``idx (M, k)`` (rows of ``coord``) -> ``(M, C_out)``."""
        if self.stride == 1:
            return self.bn(self.linear(feat))
        grouped = torch.cat([coord[idx] - new_coord.unsqueeze(1), gather(feat, idx)], dim=-1)    # (M, k, 3 + C)
        m, k, _ = grouped.shape
        x = self.bn(self.linear(grouped.view(m * k, -1)))                  # (M k, C_out) rows, not a view
        return x.view(m, k, -1).max(dim=1).values                          # (M, C_out)


def cloud_means(feat: Tensor, offset: Tensor, cloud: Tensor) -> Tensor:
    """The mean of every cloud's rows ``(B, C)`` float32 (float64 for float64 ``feat``), of ``feat (N, C)`` with
    cloud ends ``offset (B,)`` and row clouds ``cloud (N,)``: one float32 product with the ``(B, N)`` membership
    (autocast off: bf16 sums of a cloud's rows would lose their small terms), the same sums in every run and
    no value read on the host."""
    acc = torch.float64 if feat.dtype == torch.float64 else torch.float32
    with torch.autocast(feat.device.type, enabled=False):
        member = (torch.arange(offset.shape[0], device=feat.device).unsqueeze(1) == cloud).to(acc)   # (B, N)
        sizes = torch.diff(offset, prepend=offset.new_zeros(1)).unsqueeze(1).to(acc)                # (B, 1)
        return member @ feat.to(acc) / sizes


def up_distances(fine: Tensor, coarse: Tensor, idx: Tensor, dist2: Tensor) -> Tensor:
    """The squared distances ``(N, 3)`` of the fine points ``fine (N, 3)`` to their 3 nearest coarse points
    ``coarse[idx]``, for the transition-up's inverse-distance weights: the hierarchy's ``dist2`` (data) unless
    the coordinates need a gradient, where they are recomputed so that the weights' share of it flows too. A
    distance of 0 stays a constant: a sample of the point itself stays at distance 0 wherever the point moves
    (``sqrt``'s infinite slope at 0 would otherwise turn the gradient into NaN)."""
    if constant(fine, coarse):
        return dist2
    d2 = (fine.unsqueeze(1) - coarse[idx]).square().sum(-1)
    return torch.where(d2 > 0, d2, d2.detach())


class TransitionUp(nn.Module):
    """Decoder fusion. ``in_channels`` from the coarse level, ``out_channels`` of the fine skip level:
    ``Linear-BN-ReLU(skip) + interpolate_3NN(Linear-BN-ReLU(coarse))``. Without ``out_channels`` (the head
    of the decoder) each point is fused with its cloud's mean: ``Linear-BN-ReLU([x | Linear-ReLU(mean)])``.
    """

    def __init__(self, in_channels: int, out_channels: int | None = None):
        super().__init__()
        self.is_head = out_channels is None
        if self.is_head:
            self.linear1 = nn.Sequential(nn.Linear(2 * in_channels, in_channels), BatchNormReLU(in_channels))
            self.linear2 = nn.Sequential(nn.Linear(in_channels, in_channels), nn.ReLU(inplace=True))
        else:
            self.linear1 = nn.Sequential(nn.Linear(out_channels, out_channels), BatchNormReLU(out_channels))
            self.linear2 = nn.Sequential(nn.Linear(in_channels, out_channels), BatchNormReLU(out_channels))

    def forward(self, feat: Tensor, offset: Tensor, coarse: Tensor | None = None, idx: Tensor | None = None,
                dist2: Tensor | None = None) -> Tensor:
        """Fine ``feat (N, C)`` and ``offset``; unless the head, the ``coarse (M, C_in)`` features with the
        fine points' 3 nearest coarse rows ``idx (N, 3)`` and squared distances ``dist2 (N, 3)``."""
        if self.is_head:
            cloud = cloud_of_rows(offset, feat.shape[0])                                    # (N,)
            glob = self.linear2(cloud_means(feat, offset, cloud).to(feat.dtype))           # (B, C)
            return self.linear1(torch.cat([feat, glob[cloud]], dim=1))                     # (N, 2C)
        return self.linear1(feat) + interpolate_from(self.linear2(coarse), idx, dist2)


def check_sizes(cfg: ModelConfig) -> None:
    """The PTv1 sizes of ``cfg`` before a layer is built (a ``ValueError`` / ``TypeError`` naming the key, where torch
    said "integer modulo by zero" or "negative dimension", or built a head of 0 classes): ``backbone`` "ptv1"
    (PTv3 is ``PTv3Seg``), ``in_channels``, ``num_classes``, ``share_planes`` and every ``planes`` entry ints >= 1,
    ``blocks`` and ``decoder_blocks`` entries ints >= 0, one entry per stage, ``strides[0] == 1`` (the strides'
    and neighbours' values are ``HierarchySpec``'s to check)."""
    if cfg.backbone != "ptv1":
        raise ValueError(f"expected backbone 'ptv1' for PointTransformerSeg, got {cfg.backbone!r}; Point Transformer "
                         f"V3 (backbone 'ptv3') is pointgeope.model.ptv3.seg.PTv3Seg(config, grid_size), which "
                         f"pointgeope.engine.build.model builds for it")
    for name in ("in_channels", "num_classes", "share_planes"):
        check_count(name, getattr(cfg, name))
    lists = {name: getattr(cfg, name) for name in ("planes", "blocks", "strides", "neighbours", "decoder_blocks")}
    for name, value in lists.items():
        if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
            raise TypeError(f"expected {name} a list of ints, one per stage, got {value!r}")
    for name, minimum in (("planes", 1), ("blocks", 0), ("decoder_blocks", 0)):
        for i, count in enumerate(lists[name]):
            check_count(f"{name}[{i}]", count, minimum)
    for name, value in lists.items():
        if len(value) != len(lists["planes"]):
            raise ValueError(f"expected {name} with one entry per stage ({len(lists['planes'])}, from planes), "
                             f"got {tuple(value)}")
    if lists["strides"][0] != 1:
        raise ValueError(f"expected strides[0] == 1 (the first stage keeps every point), got {lists['strides'][0]}")


class PointTransformerSeg(nn.Module):
    """Point Transformer for semantic segmentation.

    Args:
        config: the hyperparameters (``ModelConfig``; default: the published network with ``pe="rpe"``).
            ``pe`` may also be a ``PositionalEncoding``. ``backbone`` must be ``"ptv1"``, and the sizes are
            checked by name (``check_sizes``).
        grid_size: voxel size (m) of the data; GeoPE phases use ``pos_scale = 1 / grid_size``.
        backends: point ops backends (default: measured per device).
        check_finite: check that ``feat`` is finite in every call (``geope_checks.check_finite``: a ``ValueError``
            naming the first bad row; a NaN or an infinity turns every logit of its cloud into NaN without a word),
            one host read a call, on a GPU one synchronisation (with a given ``hierarchy``, its values too: a few
            reads a stage, ``ops.hierarchy_check``): off by default, as in torch's modules. The
            training loader checks its batches' features on the CPU instead (``pointgeope.data.loader``).
        **overrides: fields of ``config`` to replace, e.g. ``PointTransformerSeg(pe="geope", planes=(16, 32))``.

    Shapes:
        ``coord (N, 3)``, ``feat (N, in_channels)``, ``offset (B,)`` cumulative counts, a tensor or a host list
        -> ``(N, num_classes)``; or a single sample or batch with ``pos``, ``x`` (and for a batch ``ptr``, or a
        sorted ``batch`` vector: PyG's convention): a ``pointgeope.data.points.Points`` or a ``torch_geometric``
        ``Data``/``Batch``.
        ``hierarchy``: the ``PointHierarchy`` of ``coord`` built by ``model.hierarchy_spec`` (e.g. in the
        data loader), or ``None`` to build it here. A given one is checked (``ops.hierarchy_check``): its
        shapes always, its indices, distances and ``coord`` where that reads no GPU value (on the CPU, or with
        ``check_finite``).

    Dtypes: ``feat`` in the model's dtype, ``coord`` in it or narrower (float16 into float32), as ``nn.Linear``
    wants them: a float64 cloud from NumPy into a float32 model is a ``TypeError`` naming ``coord`` (cast it, or
    the model), not a cast (a PyTorch module casts nothing; far from the origin float32 loses millimetres). Under
    autocast, what autocast casts is taken (``ops.checks.check_model_dtype``). A ``coord`` whose dtype's step at its
    largest ``|x|`` passes an eighth of ``grid_size`` (float32 UTM metres) is warned once per network
    (``model.coord_check``).
    """

    def __init__(self, config: ModelConfig | None = None, *, grid_size: float = 0.04,
                 backends: OpsBackends = OpsBackends(), check_finite: bool = False, **overrides):
        super().__init__()
        self.check_finite = check_flag("check_finite", check_finite)    # "no", [False]: truthy, not False
        cfg = dataclasses.replace(config or ModelConfig(), **overrides)
        check_sizes(cfg)
        planes, strides, neighbours = tuple(cfg.planes), tuple(cfg.strides), tuple(cfg.neighbours)
        blocks, decoder_blocks, stages = tuple(cfg.blocks), tuple(cfg.decoder_blocks), len(cfg.planes)
        self.config = dataclasses.replace(cfg, planes=list(planes), blocks=list(blocks), strides=list(strides),
                                          neighbours=list(neighbours), decoder_blocks=list(decoder_blocks))
        self.in_channels, self.num_classes, self.grid_size = cfg.in_channels, cfg.num_classes, grid_size
        self.pe = PositionalEncoding.preset(cfg.pe)
        self.strides, self.neighbours, self.backends = strides, neighbours, backends
        self.hierarchy_spec = HierarchySpec(strides, neighbours, backends)
        layer_args = dict(pe=self.pe, grid_size=grid_size, geope_base=cfg.geope_base,
                          geope_learnable=cfg.geope_learnable, mixed_init=cfg.rope_mixed_init)
        units = stage_grid_units(grid_size, strides)

        def stage_blocks(count: int, width: int, k: int, s: int) -> nn.ModuleList:
            return nn.ModuleList(PointTransformerBlock(width, cfg.share_planes, k, grid_unit=units[s], **layer_args)
                                 for _ in range(count))

        widths = (cfg.in_channels,) + planes
        self.down = nn.ModuleList(TransitionDown(widths[s], planes[s], strides[s], neighbours[s])
                                  for s in range(stages))
        self.encoder = nn.ModuleList(stage_blocks(blocks[s], planes[s], neighbours[s], s) for s in range(stages))
        self.up = nn.ModuleList(TransitionUp(planes[s + 1] if s + 1 < stages else planes[s],
                                             planes[s] if s + 1 < stages else None)
                                for s in range(stages))
        self.decoder = nn.ModuleList(stage_blocks(decoder_blocks[s], planes[s], neighbours[s], s)
                                     for s in range(stages))
        self.head = nn.Sequential(nn.Linear(planes[0], planes[0]), BatchNormReLU(planes[0]), nn.Identity(),
                                  nn.Linear(planes[0], cfg.num_classes))      # (Identity: the ReLU's index, head.3)

    def frequency_parameters(self) -> list[nn.Parameter]:
        """The learnt positional frequencies of every attention layer (``PointTransformerLayer``'s)."""
        return [p for m in self.modules() if isinstance(m, PointTransformerLayer) for p in m.frequency_parameters()]

    def forward(self, coord, feat: Tensor | None = None, offset: Tensor | list[int] | None = None,
                hierarchy: PointHierarchy | None = None) -> Tensor:
        coord, feat, offset, counts = self._inputs(coord, feat, offset, read=hierarchy is None)
        if self.check_finite:
            check_finite("feat", feat)
        if hierarchy is None or self.check_finite:    # a given hierarchy's step reads nothing (a CUDA graph's body)
            warn_coarse(self, coord, self.grid_size)                 # float32 UTM metres: once, a RuntimeWarning
        if hierarchy is None:
            hierarchy = self.hierarchy_spec(coord, counts)           # host offsets: no second copy from the device
        else:
            self.hierarchy_spec.check(hierarchy, coord.shape[0], offset.shape[0])
            check_hierarchy(hierarchy, coord, self.strides, values=self.check_finite)   # values: on the CPU
        if self.training:           # the stages' sizes, no value read: torch's BatchNorm error named nothing
            check_stage_rows([n.shape[0] for n in hierarchy.neighbours], self.strides, offset.shape[0])
        return self.body(coord, feat, hierarchy)

    def body(self, coord: Tensor, feat: Tensor, hierarchy: PointHierarchy) -> Tensor:
        """The network on checked inputs and their hierarchy, reading no value on the host (what a CUDA graph
        records, ``engine/graphs.py``): ``coord (N, 3)``, ``feat (N, in_channels)`` -> ``(N, num_classes)``."""
        with stage_memo.shared():      # GeoPE tables, displacements once a stage, not per layer
            return self._body(coord, feat, hierarchy)

    def _body(self, coord: Tensor, feat: Tensor, hierarchy: PointHierarchy) -> Tensor:
        h, coords = hierarchy, hierarchy.coords(coord)
        skips = []
        for s, (down, blocks) in enumerate(zip(self.down, self.encoder, strict=True)):
            fine = coords[s - 1] if s else coord
            feat = down(feat, fine, coords[s], h.down[s])
            for block in blocks:
                feat = block(coords[s], feat, h.neighbours[s])
            skips.append(feat)
        last = len(skips) - 1
        for s in reversed(range(len(skips))):
            if s == last:
                feat = self.up[s](skips[s], h.offsets[s])
            else:
                dist2 = up_distances(coords[s], coords[s + 1], h.up[s], h.up_dist2[s])
                feat = self.up[s](skips[s], h.offsets[s], feat, h.up[s], dist2)
            for block in self.decoder[s]:
                feat = block(coords[s], feat, h.neighbours[s])
        return self.head(feat)

    def _inputs(self, coord, feat, offset, read: bool = True) -> tuple[Tensor, Tensor, Tensor, list[int] | None]:
        """Check ``(coord, feat, offset)`` or unpack a ``Points`` or ``torch_geometric`` ``Data``/``Batch``;
        ``offset`` a tensor or a host list (``check_offset``'s). Returns ``coord``, ``feat``, the offsets as an int64
        tensor (on ``coord``'s device where they came as a list) and as the checked host list. Without ``read`` (a
        hierarchy given, whose clouds the network uses, checked by their count) an offset tensor's values are not
        read: on a GPU that read waits for the queue to drain, once a training step and a test batch."""
        if not isinstance(coord, Tensor):
            coord, feat, offset = geometric_inputs(coord, feat, offset)
        if feat is None or offset is None:
            raise ValueError("expected model(coord, feat, offset) with all three tensors")
        if coord.dim() != 2 or coord.shape[1] != 3:
            raise ValueError(f"expected coord of shape (N, 3), got {tuple(coord.shape)}")
        if feat.dim() != 2 or feat.shape != (coord.shape[0], self.in_channels):
            raise ValueError(f"expected feat of shape ({coord.shape[0]}, {self.in_channels}), got {tuple(feat.shape)}")
        if not coord.is_floating_point() or not feat.is_floating_point():
            raise ValueError(f"expected floating point coord and feat, got {coord.dtype} and {feat.dtype}")
        dtype = self.head[-1].weight.dtype          # coordinate differences meet the features in the Linears
        check_model_dtype("feat", feat, dtype)
        check_model_dtype("coord", coord, dtype, narrower=True)
        if not isinstance(offset, Tensor):                           # a host list: checked there, then moved
            host = offset_tensor(offset)
            return coord, feat, host.to(coord.device), check_offset(host, coord.shape[0])
        if not read:
            if offset.dim() != 1 or not is_integer_tensor(offset):
                raise ValueError(f"expected offset an integer tensor of shape (B,), got {offset.dtype} "
                                 f"{tuple(offset.shape)}")
            return coord, feat, offset.long(), None
        return coord, feat, offset.long(), check_offset(offset, coord.shape[0])


def geometric_inputs(data, feat, offset) -> tuple[Tensor, Tensor, Tensor | list[int]]:
    """``(pos, x, offset)`` of a ``Points`` or ``torch_geometric`` ``Data``/``Batch``: the offsets are ``ptr[1:]``,
    or without ``ptr`` the ends of the runs of its ``batch`` vector (PyG's convention: sorted, each example's points
    together), or one cloud without either."""
    if feat is not None or offset is not None:
        raise ValueError("expected either model(coord, feat, offset) or model(data), not both")
    if getattr(data, "pos", None) is None or getattr(data, "x", None) is None:
        raise ValueError(f"expected a Points or torch_geometric Data/Batch with pos and x, got {type(data).__name__}")
    pos, ptr, batch = data.pos, getattr(data, "ptr", None), getattr(data, "batch", None)
    if ptr is not None:
        return pos, data.x, ptr[1:]
    if batch is None:
        return pos, data.x, [pos.shape[0]]
    if not isinstance(batch, Tensor) or batch.shape != pos.shape[:1] or batch.is_floating_point():
        got = f"{batch.dtype} {tuple(batch.shape)}" if isinstance(batch, Tensor) else type(batch).__name__
        raise ValueError(f"expected data.batch an integer tensor of shape ({pos.shape[0]},), got {got}")
    down = (batch[1:] < batch[:-1]).nonzero()
    if down.numel():
        i = int(down[0, 0]) + 1
        raise ValueError(f"expected data.batch sorted (PyG's convention: each example's points together, in "
                         f"order), got batch[{i}] = {int(batch[i])} after {int(batch[i - 1])}; sort the points by it")
    return pos, data.x, torch.unique_consecutive(batch, return_counts=True)[1].cumsum(0)
