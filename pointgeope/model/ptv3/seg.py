"""PTv3 as the engine runs it: ``PTv3Seg(model_config, grid_size)``, with PTv1's calling convention.

The engine (train, evaluate, predict, DDP) calls every network as ``net(pos, x, offset, grid_coord=...,
hierarchy=...)`` and asks it for ``frequency_parameters()`` and ``hierarchy_spec``. ``PTv3Seg`` is Pointcept's
segmentor (:class:`~pointgeope.model.ptv3.segmentor.PTv3Segmentor`: parameter names ``backbone.*`` and
``seg_head.*``, so the block parameters' ``block`` keyword and Pointcept checkpoints match) built from the
``model:`` section (``backbone: ptv3``, :class:`~pointgeope.model.config.PTv3Config`), with:

- ``pe`` (``model.pe``) an encoding of :mod:`pointgeope.model.qk_encodings` per head width
  (:class:`StageEncodings`), or none; its positions: ``coord`` in metres with ``pos_scale = 1 / grid_size``
  (phases in voxel units), base ``model.geope_base`` and learnt frequencies with ``model.geope_learnable``
  for ``geope``, ``lingeope`` and ``rope3d`` (``qk_encodings.GEOPE_FREQUENCY_ENCODINGS``); for ``point3drope``
  ``coord`` times ``model.point3drope_scale`` (default 0.5: Utonia's S3DIS configs halve the coordinates,
  ``RandomScale(0.5)``, so its angles per metre), base 10 and Utonia's jitter in training; for ``pointrope``
  the stage's grid, base 100 (LitePT's);
- no point hierarchy (``hierarchy_spec = None``; a ``hierarchy`` given is ignored): serialization, pooling
  and the sparse convolution's neighbour tables are built inside the forward;
- in eval mode no shuffled orders (``PointTransformerV3(shuffle_in_eval=False)``, each module reading its own
  mode; a deliberate difference from Pointcept, whose test draws ``torch.randperm`` at every pooling: here the
  test of a run and its ``predict`` give the same labels whatever the random state). Training shuffles the
  serialization orders as configured (``model.ptv3.shuffle_orders``) and the pooled orders always, as Pointcept.
"""
from __future__ import annotations

from torch import Tensor, nn

from pointgeope.geope_checks import check_scale
from pointgeope.model.config import ModelConfig, ptv1_settings
from pointgeope.model.coord_check import warn_coarse
from pointgeope.model.ptv3.network import PointTransformerV3, _check_lengths
from pointgeope.model.ptv3.segmentor import PTv3Segmentor
from pointgeope.model.qk_encodings import GEOPE_FREQUENCY_ENCODINGS, QKEncoding, qk_encoding

__all__ = ["PTv3Seg", "StageEncodings", "check_backbone", "encoding_options"]


def encoding_options(cfg: ModelConfig, grid_size: float) -> dict:
    """The keyword arguments of ``qk_encoding(cfg.pe, D, **options)`` (module docstring); no finiteness check
    in the encodings: the network checks its input coordinates once (``structure.check_inputs``)."""
    if cfg.pe in GEOPE_FREQUENCY_ENCODINGS:
        return dict(base=cfg.geope_base, pos_scale=1.0 / grid_size, learnable=cfg.geope_learnable,
                    check_finite=False)
    if cfg.pe == "point3drope":
        return dict(pos_scale=cfg.point3drope_scale, check_finite=False)
    return dict(check_finite=False)


def check_backbone(cfg: ModelConfig) -> None:
    """``cfg`` describes a PTv3: ``backbone`` "ptv3", or "ptv1" left at its default with nothing of PTv1's written
    (every PTv1 key at its default, ``pe`` one of PTv3's encodings), so that a config made in code for PTv3Seg,
    ``ModelConfig(pe="geope", ptv3=PTv3Config(...))``, need not name the backbone. Else a ``ValueError`` naming the
    keys: a PTv1 config (a PTv1 file, a PTv1 preset) built no PTv3 of its sizes, without a word (the mirror of
    ``PointTransformerSeg``'s refusal of "ptv3")."""
    if cfg.backbone == "ptv3":
        return
    ptv1 = [f"pe={cfg.pe!r} (a PTv1 preset)" if k == "pe" else k for k in ptv1_settings(cfg)]
    if cfg.backbone != "ptv1" or ptv1:
        with_keys = f" with PTv1's {', '.join(ptv1)}" if ptv1 and cfg.backbone == "ptv1" else ""
        raise ValueError(f"expected backbone 'ptv3' for PTv3Seg, got {cfg.backbone!r}{with_keys}; set backbone='ptv3' "
                         "(model.backbone: ptv3; PTv3's sizes are the ptv3 keys), or build PTv1 with "
                         "pointgeope.model.PointTransformerSeg(config, grid_size=grid_size)")


class StageEncodings(nn.Module):
    """The ``pe`` hook of every attention layer: one encoding per head width ``D`` (the stages may differ),
    chosen by ``q.shape[-1]``; a :class:`~pointgeope.model.ptv3.attention.PatchEncoding` (``attention``)."""

    def __init__(self, name: str, head_dims: set[int], **options) -> None:
        super().__init__()
        self.name = name
        self.by_width = nn.ModuleDict({str(d): qk_encoding(name, d, **options) for d in sorted(head_dims)})

    def _for(self, q: Tensor) -> QKEncoding:
        return self.by_width[str(q.shape[-1])]

    def attention(self, q: Tensor, k: Tensor, v: Tensor, coord: Tensor, grid: Tensor, **kwargs) -> Tensor:
        return self._for(q).attention(q, k, v, coord, grid, **kwargs)


class PTv3Seg(PTv3Segmentor):
    """Pointcept's PT-v3m1 segmentor from ``cfg`` (``cfg.backbone == "ptv3"``, or left at its default:
    :func:`check_backbone`) at voxel size ``grid_size`` (m, a finite number > 0, whatever the encoding; else a
    ``ValueError`` naming ``grid_size``).

    Shapes: forward(pos (N, 3) metres, x (N, in_channels), offset (B,) the end of each cloud, grid_coord
    (N, 3) int >= 0) -> logits (N, num_classes), in input order."""

    hierarchy_spec = None       # PTv3 builds no PTv1 point hierarchy (engine.placement says so)

    def __init__(self, cfg: ModelConfig, grid_size: float) -> None:
        check_backbone(cfg)
        grid_size = check_scale("grid_size", grid_size, " (the voxel size, m)")
        p = cfg.ptv3
        _check_lengths(len(p.enc_depths), {"enc_channels": p.enc_channels, "enc_num_head": p.enc_num_head},
                       {"dec_channels": p.dec_channels, "dec_num_head": p.dec_num_head}, tuple(p.stride), False)
        heads = zip(p.enc_channels + p.dec_channels, p.enc_num_head + p.dec_num_head, strict=True)
        pe = None
        if cfg.pe != "none":
            pe = StageEncodings(cfg.pe, {c // h for c, h in heads}, **encoding_options(cfg, grid_size))
        backbone = PointTransformerV3(
            in_channels=cfg.in_channels, order=tuple(p.order), stride=tuple(p.stride),
            enc_depths=tuple(p.enc_depths), enc_channels=tuple(p.enc_channels), enc_num_head=tuple(p.enc_num_head),
            enc_patch_size=tuple(p.enc_patch_size), dec_depths=tuple(p.dec_depths),
            dec_channels=tuple(p.dec_channels), dec_num_head=tuple(p.dec_num_head),
            dec_patch_size=tuple(p.dec_patch_size), mlp_ratio=p.mlp_ratio, qkv_bias=p.qkv_bias,
            attn_drop=p.attn_drop, proj_drop=p.proj_drop, drop_path=p.drop_path, shuffle_orders=p.shuffle_orders,
            enable_rpe=p.enable_rpe, pe=pe, shuffle_in_eval=False)
        super().__init__(cfg.num_classes, backbone.out_channels, backbone)
        self.grid_size = grid_size
        self._encodings = (pe,)     # a tuple: not a second registration (the blocks hold it)

    def forward(self, pos: Tensor, x: Tensor, offset: Tensor, grid_coord: Tensor | None = None,
                hierarchy=None) -> Tensor:
        if grid_coord is None:
            raise ValueError("PTv3 needs grid_coord (N, 3), the points' voxel indices: give samples of "
                             "data.augment=pointcept_ptv3 and eval.protocol=ptv3")
        if isinstance(pos, Tensor):        # else the backbone's checks name it
            warn_coarse(self, pos, self.grid_size)   # float32 UTM metres: once, a RuntimeWarning (its check reads too)
        return super().forward(pos, grid_coord, x, offset)

    def frequency_parameters(self) -> list[nn.Parameter]:
        """The learnt frequencies of the encoding (GeoPE's, of ``geope``, ``lingeope`` or ``rope3d``, with
        ``model.geope_learnable``), else ``[]``."""
        pe = self._encodings[0]
        return [prm for prm in pe.parameters() if prm.requires_grad] if pe is not None else []
