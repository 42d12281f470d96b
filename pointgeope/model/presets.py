"""The named choices of the model's config, in a module that imports no torch: PTv1's positional-encoding presets
(:data:`PRESETS`, how positions enter :class:`~pointgeope.model.attention.PointTransformerLayer`, and which of the
layer's options each reads: :func:`options_read`), PTv3's q/k encodings (:data:`QK_ENCODINGS`,
:mod:`pointgeope.model.qk_encodings`) and serialization orders (:data:`ORDERS`,
:mod:`pointgeope.model.ptv3.serialization`). :mod:`pointgeope.model.config` builds its ``Literal`` types from them
and the config's checks read them, so that a PTv1 run's config is read and checked (``pointgeope train``'s first
step, ``pointgeope ablate``'s parent process) without torch's import (~2 s of CPU; PTv3's checks build its
encodings, with torch); the modules that use them import them from here.
"""
from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Literal

__all__ = ["Rotation", "ValueTerm", "ROTATIONS", "PAIR_ROTATIONS", "MixedInit", "PositionalEncoding", "PRESETS",
           "options_read", "frequency_keys", "QKName", "QK_ENCODINGS", "GEOPE_FREQUENCY_ENCODINGS", "POINT3DROPE_SCALE",
           "ORDERS"]

Rotation = Literal["none", "geope", "lingeope", "rope3d", "rope-mixed", "pointrope"]
ValueTerm = Literal["rpe", "geope", "none"]
ROTATIONS = typing.get_args(Rotation)
PAIR_ROTATIONS = ("rope3d", "rope-mixed", "pointrope")      # 2D rotations of channel pairs (rope.py)
MixedInit = Literal["random", "axial"]


@dataclass(frozen=True)
class PositionalEncoding:
    """How positions enter the attention: the relation's rotation, its ``delta`` term, the value term and
    absolute position features added to queries and keys.

    ``value="geope"`` applies the relation's kind of rotation to the values (linear when the relation is
    ``lingeope``, RoPE's with ``rope3d``/``rope-mixed``/``pointrope``, standard GeoPE otherwise).
    """

    rotation: Rotation = "none"
    relation_delta: bool = True
    value: ValueTerm = "rpe"
    absolute: bool = False

    def __post_init__(self):
        if self.rotation not in ROTATIONS:
            raise ValueError(f"expected rotation in {ROTATIONS}, got {self.rotation!r}")
        if self.value not in ("rpe", "geope", "none"):
            raise ValueError(f"expected value in ('rpe', 'geope', 'none'), got {self.value!r}")

    @property
    def needs_delta(self) -> bool:
        return self.relation_delta or self.value == "rpe"

    @property
    def value_rotation(self) -> str | None:
        """The rotation of the values (``value="geope"``): the relation's kind, standard GeoPE where the
        relation has none; ``None`` for the other value terms."""
        if self.value != "geope":
            return None
        return "geope" if self.rotation == "none" else self.rotation

    @property
    def rotates(self) -> bool:
        """Whether keys or values are turned by positions (a block of three channels at least)."""
        return self.rotation != "none" or self.value == "geope"

    @property
    def uses_positions(self) -> bool:
        """Whether positions enter other than through ``delta``'s MLP (a rotation or the sinusoids)."""
        return self.rotates or self.absolute

    @staticmethod
    def preset(name: str | PositionalEncoding) -> PositionalEncoding:
        """The named preset (a key of ``PRESETS``)."""
        if isinstance(name, PositionalEncoding):
            return name
        if name not in PRESETS:
            raise ValueError(f"unknown positional encoding {name!r}; expected one of {sorted(PRESETS)}")
        return PRESETS[name]


PRESETS: dict[str, PositionalEncoding] = {
    "rpe": PositionalEncoding("none", True, "rpe"),          # Point Transformer as published
    "geope": PositionalEncoding("geope", False, "rpe"),      # GeoPE replaces the relation's RPE
    "lingeope": PositionalEncoding("lingeope", False, "rpe"),
    "geope+rpe": PositionalEncoding("geope", True, "rpe"),
    "lingeope+rpe": PositionalEncoding("lingeope", True, "rpe"),
    "none": PositionalEncoding("none", False, "none"),
    # baselines of GeoPE on the same network: axial RoPE at GeoPE's frequencies (isolates the coupling of
    # the axes), LitePT's PointROPE (its own frequencies and grids), RoPE-Mixed (learnt mixed frequencies),
    # sinusoids
    "rope3d": PositionalEncoding("rope3d", False, "rpe"),
    "rope3d+rpe": PositionalEncoding("rope3d", True, "rpe"),
    "rope-mixed": PositionalEncoding("rope-mixed", False, "rpe"),
    "pointrope": PositionalEncoding("pointrope", False, "rpe"),
    "ape": PositionalEncoding("none", False, "rpe", absolute=True),
}


def options_read(pe: PositionalEncoding, mixed_init: MixedInit = "random") -> tuple[str, ...]:
    """The options of a layer's positions that ``pe`` reads (``attention.position_scales`` and PointROPE's grid), by
    their names in ``pointgeope.nn.GeoPEPointTransformerConv``: ``pos_scale``, ``base``, ``learnable`` where its
    rotations or sinusoids turn at GeoPE's block scales; RoPE-Mixed ``mixed_init`` and ``pos_scale``, and
    ``base`` with ``mixed_init="axial"`` only (its learnt frequencies start there; random ones are drawn at base
    10), never ``learnable`` (its frequencies are always learnt); PointROPE ``grid_unit`` only (its frequencies
    are constants per cell); nothing without rotations and sinusoids (``rpe``, ``none``). The one owner of
    which option an encoding reads: :func:`frequency_keys` (the config's ``model.geope_*`` keys) is this rule."""
    if pe.rotation == "pointrope":
        return ("grid_unit",)
    if not (pe.rotation in PAIR_ROTATIONS or pe.absolute or pe.rotates):
        return ()
    if pe.rotation == "rope-mixed":
        return ("pos_scale", "base", "mixed_init") if mixed_init == "axial" else ("pos_scale", "mixed_init")
    return ("pos_scale", "base", "learnable")


def frequency_keys(pe: PositionalEncoding, mixed_init: MixedInit) -> tuple[str, ...]:
    """The keys of GeoPE's frequencies (``model.geope_base``, ``model.geope_learnable``) that a layer of ``pe``
    reads: those of its options ``base`` and ``learnable`` that :func:`options_read` lists (both where its
    rotations or sinusoids turn at GeoPE's block scales; ``geope_base`` alone for RoPE-Mixed with
    ``mixed_init="axial"``; neither for PointROPE or without rotations and sinusoids)."""
    read = options_read(pe, mixed_init)
    return tuple(f"geope_{option}" for option in ("base", "learnable") if option in read)


QKName = Literal["none", "geope", "lingeope", "rope3d", "point3drope", "pointrope"]
QK_ENCODINGS: tuple[str, ...] = typing.get_args(QKName)
# The encodings at GeoPE's frequencies (model.geope_base, pos_scale = 1 / grid_size, model.geope_learnable):
GEOPE_FREQUENCY_ENCODINGS: tuple[str, ...] = ("geope", "lingeope", "rope3d")
POINT3DROPE_SCALE = 0.5         # Utonia's S3DIS configs (semseg-utonia-v1m1-3*-s3dis-*.py) start every pipeline with
#                                 RandomScale([0.5, 0.5]): its Point3DRoPE reads half-metres, 0.5 x metres
ORDERS = ("z", "z-trans", "hilbert", "hilbert-trans")
