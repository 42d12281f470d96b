"""The allowed values of the run configuration (:mod:`pointgeope.engine.config`): the range of every
numeric key (its table: :mod:`pointgeope.engine.config_ranges`), the values of the few text and list keys
that a type does not fix, the model keys that must agree with each other, and the samples and test that go
with the backbone.

:mod:`pointgeope.engine.config` checks each layer (file, override, checkpoint) with :func:`value_problem`
as it reads it, so that the error names the file or the override, then the merged model section with
:func:`agreement_problem` and the whole with :func:`pipeline_problem`. They return the problem as text
(``None`` when there is none)::

    override 'train.epochs=0': train.epochs: expected an integer >= 1, got 0
    override 'train.device=xyz': train.device: expected auto, cpu, cuda or cuda:N (cuda:N: GPU N), got 'xyz'
    configs/x.yaml with the overrides: model.blocks: expected one entry per stage, 2 as in model.planes ...

A new numeric key of the config needs its entry in :data:`~pointgeope.engine.config_ranges.RANGES` (a test
checks that none is missing). This module reads values only: it imports nothing of the config (which imports it).
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pointgeope.engine.config_ranges import range_problem

if TYPE_CHECKING:
    from pointgeope.model.config import ModelConfig


# The devices a run (train.device) or a prediction (predict --device) can name: what the engine supports.
DEVICES = "auto, cpu, cuda or cuda:N (cuda:N: GPU N)"
_DEVICE = re.compile(r"auto|cpu|cuda(:(0|[1-9][0-9]*))?")
MAX_DEVICE_INDEX = 127  # torch keeps a device index in 8 bits: cuda:128 would silently be cuda:-128


def device_problem(value: str, name: str = "train.device") -> str | None:
    """What is wrong with the device name ``value`` of option or key ``name``, or ``None``: one of
    :data:`DEVICES` with ``N`` in 0..:data:`MAX_DEVICE_INDEX` (whether CUDA and GPU N are there is known
    when the run starts: ``distributed.choose_device``)."""
    match = _DEVICE.fullmatch(value)
    if match is None:
        return f"{name}: expected {DEVICES}, got {value!r}"
    if match.group(2) is not None and int(match.group(2)) > MAX_DEVICE_INDEX:
        return (f"{name}: expected cuda:N with a GPU number N from 0 to {MAX_DEVICE_INDEX}, got {value!r}; "
                "`nvidia-smi -L` lists this machine's GPUs")
    return None


def value_problem(value: Any, name: str) -> str | None:
    """What is wrong with ``value`` of key ``name`` alone (its type already checked), or ``None``: a number
    outside its range, a device the engine does not know, no test-time scale."""
    if name == "train.device":
        return device_problem(value, name)
    if name == "eval.tta.scales" and not value:
        return "eval.tta.scales: expected at least one scale, got []"
    return range_problem(value, name)


def agreement_problem(m: ModelConfig, presets: list[str] | None = None) -> str | None:
    """What is wrong between the model keys that must agree, or ``None``: the backbone's own keys and
    encoding (:func:`backbone_problem`), the encoding's own keys (:func:`encoding_problem`, against
    ``model.pe``; with an ablation's ``presets``, :func:`presets_problem`, against each of them), then the
    stages (:func:`stages_problem`)."""
    return (backbone_problem(m) or (presets_problem(m, presets) if presets is not None else encoding_problem(m))
            or stages_problem(m))


def stages_problem(m: ModelConfig) -> str | None:
    """PTv1: one entry per network stage in each model list, the first stage unstrided, each width divisible
    by ``model.share_planes``; PTv3: :func:`ptv3_problem`; ``None`` when all agree."""
    if m.backbone == "ptv3":
        return ptv3_problem(m)
    for key in ("blocks", "strides", "neighbours", "decoder_blocks"):
        value = getattr(m, key)
        if len(value) != len(m.planes):
            return (f"model.{key}: expected one entry per stage, {len(m.planes)} as in model.planes "
                    f"{m.planes}, got {len(value)}: {value}")
    if m.strides and m.strides[0] != 1:
        return f"model.strides[0]: expected 1 (the first stage keeps every point), got {m.strides[0]}"
    for i, width in enumerate(m.planes):
        if width % m.share_planes:
            return f"model.planes[{i}]: expected a multiple of model.share_planes ({m.share_planes}), got {width}"
    return None


def pipeline_problem(cfg) -> str | None:
    """The samples and the test against the backbone (``cfg`` a ``Config``), or ``None``: the one owner of
    the pairing. PTv3 (``model.backbone: ptv3``) takes the samples with grid coordinates of
    ``data.augment: pointcept_ptv3`` and tests with ``eval.protocol: ptv3``; those two are PTv3's only (PTv1's
    forward takes no ``grid_coord``); ``data.mix_prob`` (Mix3D) and ``data.crop_rate`` (the sphere crop) are
    keys of PTv3's samples, and so is ``data.normal`` (its ``[rgb | normal]`` features)."""
    d, protocol, backbone = cfg.data, cfg.eval.protocol, cfg.model.backbone
    if backbone == "ptv3" and (d.augment != "pointcept_ptv3" or protocol != "ptv3"):
        return (f"model.backbone=ptv3 takes samples with grid coordinates: expected data.augment=pointcept_ptv3 "
                f"and eval.protocol=ptv3, got {d.augment} and {protocol} (configs/s3dis/_ptv3_recipe.yaml sets both)")
    if backbone != "ptv3":
        ptv3_only = [(k, fix) for k, fix, on in (
            ("data.augment=pointcept_ptv3", "data.augment=ptv1", d.augment == "pointcept_ptv3"),
            ("eval.protocol=ptv3", "eval.protocol=ptv1", protocol == "ptv3")) if on]
        if ptv3_only:
            return (f"{' and '.join(k for k, _ in ptv3_only)}: PTv3's samples and test, but model.backbone="
                    f"{backbone}, whose forward takes no grid coordinates; set model.backbone=ptv3 (a "
                    f"configs/s3dis/ptv3_*.yaml), or {' and '.join(fix for _, fix in ptv3_only)}")
    if d.augment != "pointcept_ptv3":
        if d.normal:
            return (f"data.normal=true: PTv3's [rgb | normal] features, but data.augment={d.augment} makes PTv1's "
                    "[rgb | xyz] samples; remove it, or set model.backbone=ptv3 (a configs/s3dis/ptv3_*.yaml)")
        if d.mix_prob > 0:
            return f"data.mix_prob={d.mix_prob} needs data.augment=pointcept_ptv3 (Mix3D mixes its samples)"
        if d.crop_rate is not None:
            return (f"data.crop_rate={d.crop_rate} needs data.augment=pointcept_ptv3 (its sphere crop; "
                    f"data.augment={d.augment} crops to data.voxel_max only): remove it")
    return None


def backbone_problem(m: ModelConfig) -> str | None:
    """A key of the other backbone set away from its default, or an encoding the backbone does not have:
    PTv1 takes ``attention.PRESETS``, PTv3 ``qk_encodings.QK_ENCODINGS``; ``None`` when all agree."""
    from pointgeope.model.config import PTv3Config, ptv1_settings
    from pointgeope.model.presets import PRESETS, QK_ENCODINGS

    if m.backbone == "ptv1":
        changed = [f"model.ptv3.{k}" for k, v in vars(m.ptv3).items() if v != getattr(PTv3Config(), k)]
        if changed:
            return (f"{', '.join(changed)}: PTv3 keys, but model.backbone=ptv1; set model.backbone: ptv3, "
                    "or remove them")
        if m.pe not in PRESETS:
            return (f"model.pe: {m.pe!r} is a PTv3 encoding (model.backbone: ptv3); PTv1 takes one of "
                    f"{', '.join(PRESETS)}")
        return None
    ptv1 = ptv1_settings(m)
    changed = [f"model.{k}" for k in ptv1 if k != "pe"]
    if changed:
        return (f"{', '.join(changed)}: PTv1 keys, but model.backbone=ptv3 (its widths and depths are "
                "model.ptv3.enc_channels, model.ptv3.enc_depths, ...); remove them")
    if "pe" in ptv1:
        rpe = "; PTv3's own relative position bias is model.ptv3.enable_rpe: true" if "rpe" in m.pe else ""
        return (f"model.pe: {m.pe!r} is a PTv1 preset, but model.backbone=ptv3; expected one of "
                f"{', '.join(QK_ENCODINGS)}{rpe}")
    return None


# The encodings without positions of any kind (no rotation, no sinusoid, no bias): they take the other encodings'
# keys of their backbone and use none, so an ablation sets them for every preset (`--presets rpe,geope
# model.geope_learnable=true`, `--presets none,point3drope model.point3drope_scale=1`): with no positions a scale
# or a frequency is moot
FREQUENCY_FREE = ("none", "rpe")
FREQUENCY_KEYS = ("geope_base", "geope_learnable")
ENCODING_KEYS = (*FREQUENCY_KEYS, "point3drope_scale", "rope_mixed_init")  # one kind of encoding's (encoding_problem)
ONE_READER_KEYS = {"point3drope_scale": "point3drope",
                   "rope_mixed_init": "rope-mixed"}  # a key one encoding alone reads
# what the other encodings turn at, for the message of a GeoPE key they do not read
OWN_FREQUENCIES = {"point3drope": "Utonia's fixed frequencies (base 10; its scale: model.point3drope_scale)",
                   "pointrope": "LitePT's fixed frequencies (base 100 per grid cell)",
                   "rope-mixed": "RoPE-Mixed's own learnt frequencies (model.rope_mixed_init=axial starts them "
                                 "from model.geope_base; random draws them at base 10)"}


def frequency_keys_read(m: ModelConfig, pe: str | None = None) -> tuple[str, ...]:
    """The keys of :data:`FREQUENCY_KEYS` that the encoding ``pe`` (default ``model.pe``) reads on ``m``'s
    backbone: PTv3's ``qk_encodings.GEOPE_FREQUENCY_ENCODINGS`` both; PTv1's ``attention.frequency_keys``."""
    from pointgeope.model.presets import GEOPE_FREQUENCY_ENCODINGS, PRESETS, frequency_keys

    pe = m.pe if pe is None else pe
    if m.backbone == "ptv3":
        return FREQUENCY_KEYS if pe in GEOPE_FREQUENCY_ENCODINGS else ()
    return frequency_keys(PRESETS[pe], m.rope_mixed_init)


def encodings_of(backbone: str) -> tuple[str, ...]:
    """The encodings of ``backbone``: PTv3's ``QK_ENCODINGS``, PTv1's ``attention.PRESETS``."""
    from pointgeope.model.presets import PRESETS, QK_ENCODINGS

    return tuple(QK_ENCODINGS) if backbone == "ptv3" else tuple(PRESETS)


def _encodings(m: ModelConfig) -> tuple[str, ...]:
    """The encodings of ``m``'s backbone (:func:`encodings_of`)."""
    return encodings_of(m.backbone)


def keys_read(m: ModelConfig, pe: str) -> tuple[str, ...]:
    """The keys of :data:`ENCODING_KEYS` that ``pe`` reads on ``m``'s backbone (:data:`ONE_READER_KEYS`:
    ``point3drope_scale`` ``point3drope``'s only, ``rope_mixed_init`` ``rope-mixed``'s only)."""
    return frequency_keys_read(m, pe) + tuple(key for key, reader in ONE_READER_KEYS.items() if pe == reader)


def unread_keys(m: ModelConfig, pe: str | None = None) -> list[str]:
    """The keys of :data:`ENCODING_KEYS` set on ``m`` away from their defaults that ``pe`` (default
    ``model.pe``, one of the backbone's encodings) would silently ignore: those it does not read, except, for
    the encodings without positions (:data:`FREQUENCY_FREE`), those another encoding of the backbone reads."""
    from pointgeope.model.config import ModelConfig

    pe, default = m.pe if pe is None else pe, ModelConfig()
    changed = [k for k in ENCODING_KEYS if getattr(m, k) != getattr(default, k)]
    if pe in FREQUENCY_FREE:
        return [k for k in changed if not any(k in keys_read(m, other) for other in _encodings(m))]
    return [k for k in changed if k not in keys_read(m, pe)]


def _setting(m: ModelConfig, keys: list[str]) -> str:
    """``model.geope_base=50.0, model.geope_learnable=true``: ``keys`` as set on ``m``."""
    return ", ".join(f"model.{k}={str(getattr(m, k)).lower() if k == 'geope_learnable' else getattr(m, k)}"
                     for k in keys)


def encoding_problem(m: ModelConfig) -> str | None:
    """A key of one kind of encoding set away from its default with an encoding that does not read it
    (:func:`unread_keys`), or ``None``: ``model.point3drope_scale`` (``point3drope`` only),
    ``model.rope_mixed_init`` (``rope-mixed`` only: its initial frequencies); on either backbone
    ``model.geope_base`` and ``model.geope_learnable`` (GeoPE's frequencies) with an encoding that turns at
    other frequencies (:func:`frequency_keys_read`: ``point3drope``, ``pointrope``, ``rope-mixed``). The
    encodings without positions, :data:`FREQUENCY_FREE` (``none``, PTv1's ``rpe``), take every key that
    another encoding of their backbone reads: an ablation with the keys on keeps its baseline
    (:func:`presets_problem` checks an ablation's encodings in place of ``model.pe``)."""
    keys = unread_keys(m)
    if not keys:
        return None
    own = [key for key in ONE_READER_KEYS if key in keys]
    if own:
        return (f"{_setting(m, own[:1])}: only model.pe={ONE_READER_KEYS[own[0]]} reads it, but model.pe={m.pe}; "
                "remove it")
    readers = [pe for pe in _encodings(m) if set(keys) <= set(frequency_keys_read(m, pe))]
    return (f"{_setting(m, keys)}: GeoPE's frequencies, but model.pe={m.pe} turns at {OWN_FREQUENCIES[m.pe]}, so "
            f"{'they' if len(keys) > 1 else 'it'} would change nothing; remove {'them' if len(keys) > 1 else 'it'}, "
            f"or set model.pe to one of {', '.join(readers)}")


def presets_problem(m: ModelConfig, presets: list[str]) -> str | None:
    """:func:`encoding_problem` for the encodings an ablation runs in place of ``model.pe`` (``pointgeope
    ablate --presets``, which checks its config with it: ``agreement_problem(m, presets)``): the first
    key that one of them would ignore, the message naming them (a preset not of the backbone is left to
    :func:`backbone_problem`, which names it on the trial's check)."""
    known = [p for p in presets if p in _encodings(m)]
    for key in ENCODING_KEYS:
        ignoring = [p for p in known if key in unread_keys(m, p)]
        if not ignoring:
            continue
        readers = [p for p in known if key in keys_read(m, p)]
        if readers:
            return (f"{_setting(m, [key])}: read by --presets {', '.join(readers)}, but --presets "
                    f"{', '.join(ignoring)} would ignore it; remove it, or leave {', '.join(ignoring)} out of "
                    "--presets")
        named = [p for p in _encodings(m) if key in keys_read(m, p)] or ["an encoding of the other backbone"]
        return (f"{_setting(m, [key])}: no preset of --presets {', '.join(presets)} reads it (only "
                f"{', '.join(named)} {'do' if len(named) > 1 else 'does'}), so it would change nothing; remove it")
    return None


def ptv3_problem(m: ModelConfig) -> str | None:
    """PTv3's lists of one entry per stage (``enc_*``) or per stage but the last (``stride``, ``dec_*``),
    at least one order and one stage (one stage has no pooling and no decoder: the head reads the stage's
    ``enc_channels[0]``, as Pointcept's), strides powers of two, widths divisible by their heads, heads wide
    enough for ``model.pe`` (the rules of ``model.ptv3_rules``, which imports no torch); ``None`` when all agree."""
    from pointgeope.model.presets import ORDERS
    from pointgeope.model.ptv3_rules import head_width_problem, stride_problem

    p, stages = m.ptv3, len(m.ptv3.enc_depths)
    if not p.order:
        return f"model.ptv3.order: expected at least one of {', '.join(ORDERS)}, got []"
    if not stages:
        return (f"model.ptv3.enc_depths: expected at least 1 stage (one entry a stage; the published network has "
                f"5: [2, 2, 2, 6, 2]), got {p.enc_depths}")
    lists = {k: stages for k in ("enc_channels", "enc_num_head", "enc_patch_size")}
    lists.update({k: stages - 1 for k in ("stride", "dec_depths", "dec_channels", "dec_num_head", "dec_patch_size")})
    for key, want in lists.items():
        if len(getattr(p, key)) != want:
            return (f"model.ptv3.{key}: expected {want} entries for the {stages} stage{'s' * (stages > 1)} of "
                    f"model.ptv3.enc_depths {p.enc_depths}, got {len(getattr(p, key))}: {getattr(p, key)}")
    for i, stride in enumerate(p.stride):
        problem = stride_problem(stride)
        if problem:
            return f"model.ptv3.stride[{i}]: {problem} (its pooling merges stride^3 voxels into one)"
    for side in ("enc", "dec"):
        for i, (width, heads) in enumerate(zip(getattr(p, f"{side}_channels"), getattr(p, f"{side}_num_head"),
                                               strict=True)):
            if width % heads:
                return (f"model.ptv3.{side}_channels[{i}]: expected a multiple of model.ptv3.{side}_num_head[{i}] "
                        f"({heads}), got {width}")
            problem = head_width_problem(m.pe, width // heads)
            if problem:
                return f"model.ptv3.{side}_channels[{i}] / {side}_num_head[{i}] with model.pe={m.pe}: {problem}"
    return None
