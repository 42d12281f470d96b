"""The run configuration: typed dataclasses read from YAML, with ``base:`` includes and overrides.

A config file is a YAML mapping with (some of) the sections ``data``, ``model``, ``optim``, ``train`` and
``eval``; every key it leaves out keeps the default below (the published S3DIS recipe of Point Transformer:
SGD, lr 0.5, momentum 0.9, weight decay 1e-4, 100 epochs x loop 30, lr x0.1 at 60 % and 80 %, batch 16,
grid 0.04 m, at most 80k points per sample). A file may start from another one::

    base: _base.yaml          # resolved relative to this file; its keys are overridden by this file's
    model:
      pe: geope

and command-line overrides ``section.key=value`` (the value is parsed as a YAML scalar or list,
``optim.lr=0.1``, ``model.planes=[16,32]``) are applied last. Every layer is checked on its own against the
dataclasses, so an unknown key or a value of the wrong type is an error naming the file (or the override)
and the key, with the closest known key as a suggestion::

    ConfigError: configs/s3dis/pt_geope.yaml: unknown key 'optim.learning_rate'; did you mean 'optim.lr'?

The resolved config is saved in the run folder (:func:`save_config`) and reloads to an equal object.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

import yaml

from pointgeope.atomic import write_text_atomic
from pointgeope.constants import IGNORE_LABEL
from pointgeope.errors import UserError
from pointgeope.model.config import ModelConfig   # the model: section is the network's own config


class ConfigError(UserError, ValueError):
    """A config file or override that does not fit the :class:`Config` dataclasses."""


@dataclass
class DataConfig:
    root: str = "data/s3dis"                # folder of prepared Area_N.h5 + folds.json
    grid_size: float = 0.04                 # voxel size (m) for training samples and test fragments
    voxel_max: Optional[int] = 80000        # crop samples/fragments to this many points (None: no crop)
    loop: int = 30                          # each training room is seen `loop` times per epoch
    batch_size: int = 16                    # samples per optimiser step, summed over all DDP ranks
    num_workers: int = 4                    # DataLoader worker processes per rank (0: main process)
    augment: Literal["ptv1", "pointcept", "none"] = "ptv1"  # training augmentations: the authors' set,
    #                                         Pointcept's PTv1 variant, or none (data/transforms.py)
    height: bool = False                    # append the normalised height to the features (7 channels)
    color: bool = True                      # rgb features; false: geometry only, [xyz] (3 channels)
    cache: bool = False                     # each loader worker keeps the rooms it read in memory


@dataclass
class OptimConfig:
    name: Literal["sgd", "adamw"] = "sgd"
    lr: float = 0.5
    momentum: float = 0.9                   # SGD only
    weight_decay: float = 1e-4
    scheduler: Literal["multistep", "cosine"] = "multistep"
    milestones: list[float] = field(default_factory=lambda: [0.6, 0.8])  # fractions of train.epochs
    gamma: float = 0.1                      # multistep factor
    grad_clip: Optional[float] = None       # max gradient norm (None: no clipping)


@dataclass
class TrainConfig:
    epochs: int = 100
    seed: int = 0
    device: str = "auto"                    # auto (CUDA if present, else CPU) | cpu | cuda | cuda:1 ...
    threads: Optional[int] = None           # torch CPU threads per process (None: torch's default)
    amp: Literal["bf16", "fp16", "none"] = "none"  # mixed precision on CUDA (ignored on CPU); none: float32
    run_dir: str = "runs/default"
    val_every: int = 0                      # validate on the test area every n epochs (0: never); best.pt
    checkpoint_every: int = 0               # also save last.pt every n steps inside an epoch (0: epoch ends)
    epochs_per_run: Optional[int] = None    # stop cleanly after n epochs in this invocation (job time limits)
    progress: bool = True                   # tqdm bars (rank 0, only on a TTY)
    ignore_index: int = IGNORE_LABEL        # the label skipped by the loss and by every metric (train, eval)


@dataclass
class TTAConfig:
    scales: list[float] = field(default_factory=lambda: [1.0])  # isotropic scalings about the room centre
    flips: bool = False                     # also the mirror image in x
    rotations: int = 1                      # number of z-rotations by 2*pi*k/rotations


@dataclass
class EvalConfig:
    checkpoint: Literal["last", "best"] = "last"
    tta: TTAConfig = field(default_factory=TTAConfig)
    batch_points: int = 400000              # fragments are stacked into one forward up to this many points
    vote: Literal["logits", "softmax"] = "logits"  # what each point sums over its predictions (authors: logits)
    max_fragments: Optional[int] = None     # predict at most this many voxel fragments per room (None: all)


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)


# --- the allowed values of every numeric key ----------------------------------------------------------------

@dataclass(frozen=True)
class Range:
    """The finite values ``x`` with ``low <= x <= high`` (``low < x`` when ``open_low``; ``None``: no bound)."""

    low: float | None = None
    high: float | None = None
    open_low: bool = False

    def __contains__(self, x: float) -> bool:
        if not math.isfinite(x):
            return False
        above = self.low is None or (x > self.low if self.open_low else x >= self.low)
        return above and (self.high is None or x <= self.high)

    def __str__(self) -> str:
        """``"in [0, 1]"``, ``"> 0"``, ``">= 1"``, or ``""`` (finite, no bound)."""
        def num(x: float) -> str:
            return str(int(x)) if float(x).is_integer() else f"{x:g}"

        if self.low is not None and self.high is not None and not self.open_low:
            return f"in [{num(self.low)}, {num(self.high)}]"
        low = "" if self.low is None else f"{'>' if self.open_low else '>='} {num(self.low)}"
        high = "" if self.high is None else f"<= {num(self.high)}"
        return " and ".join(filter(None, (low, high)))


POSITIVE, AT_LEAST_0, AT_LEAST_1 = Range(0, open_low=True), Range(0), Range(1)

# Every int or float key of Config (alone, optional or in a list: each entry) and its allowed values, in
# one place; each layer (file, override, checkpoint) is checked against it as it is read, and a test
# checks that no numeric key is missing. Values outside end in one line naming the key and the range.
RANGES: dict[str, Range] = {
    "data.grid_size": POSITIVE, "data.voxel_max": AT_LEAST_1, "data.loop": AT_LEAST_1,
    "data.batch_size": AT_LEAST_1, "data.num_workers": AT_LEAST_0,
    "model.in_channels": AT_LEAST_1, "model.num_classes": Range(1, 255), "model.planes": AT_LEAST_1,
    "model.blocks": AT_LEAST_0, "model.strides": AT_LEAST_1, "model.neighbours": AT_LEAST_1,
    "model.decoder_blocks": AT_LEAST_0, "model.share_planes": AT_LEAST_1, "model.geope_base": POSITIVE,
    "optim.lr": POSITIVE, "optim.momentum": Range(0, 1), "optim.weight_decay": AT_LEAST_0,
    "optim.milestones": Range(0, 1), "optim.gamma": POSITIVE, "optim.grad_clip": POSITIVE,
    "train.epochs": AT_LEAST_1, "train.seed": Range(0, 2**32 - 1), "train.threads": AT_LEAST_1,
    "train.val_every": AT_LEAST_0, "train.checkpoint_every": AT_LEAST_0, "train.epochs_per_run": AT_LEAST_0,
    "train.ignore_index": Range(-(2**31), 255),
    "eval.tta.scales": POSITIVE, "eval.tta.rotations": AT_LEAST_1, "eval.batch_points": AT_LEAST_1,
    "eval.max_fragments": AT_LEAST_1,
}


def _check_range(value: Any, name: str, where: str) -> None:
    """``value`` (a number, a list of them, or anything else: not checked) within ``RANGES[name]``."""
    values = value if isinstance(value, list) else [value]
    allowed = RANGES.get(name, Range())  # a numeric key without an entry must at least be finite
    for i, x in enumerate(values):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or x in allowed:
            continue
        kind = "an integer" if isinstance(x, int) else "a finite number"
        at = f"{where}[{i}]" if isinstance(value, list) else where
        raise ConfigError(f"{at}: expected {' '.join(filter(None, (kind, str(allowed))))}, got {x!r}")


def _check_stages(cfg: Config, where: str) -> None:
    """The keys that must agree with each other: one entry per network stage in each model list, the
    first stage unstrided, each width divisible by ``model.share_planes``, at least one TTA scale."""
    m = cfg.model
    for key in ("blocks", "strides", "neighbours", "decoder_blocks"):
        value = getattr(m, key)
        if len(value) != len(m.planes):
            raise ConfigError(f"{where}: model.{key}: expected one entry per stage, {len(m.planes)} as in "
                              f"model.planes {m.planes}, got {len(value)}: {value}")
    if m.strides and m.strides[0] != 1:
        raise ConfigError(f"{where}: model.strides[0]: expected 1 (the first stage keeps every point), got "
                          f"{m.strides[0]}")
    for i, width in enumerate(m.planes):
        if width % m.share_planes:
            raise ConfigError(f"{where}: model.planes[{i}]: expected a multiple of model.share_planes "
                              f"({m.share_planes}), got {width}")
    if not cfg.eval.tta.scales:
        raise ConfigError(f"{where}: eval.tta.scales: expected at least one scale, got []")


# --- checking a (partial) mapping against the dataclasses ----------------------------------------------

def _hints(cls) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _type_name(tp) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin is typing.Union:
        return " | ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is list:
        return f"list[{_type_name(typing.get_args(tp)[0])}]"
    return "null" if tp is type(None) else getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp, where: str) -> Any:
    """``value`` as type ``tp`` (ints accepted as floats, '1e-4' strings as floats), else ConfigError."""
    origin = typing.get_origin(tp)
    if origin is typing.Union:
        for option in typing.get_args(tp):
            try:
                return _coerce(value, option, where)
            except ConfigError:
                pass
        raise ConfigError(f"{where}: expected {_type_name(tp)}, got {value!r}")
    if origin is Literal:
        choices = typing.get_args(tp)
        if value in choices:
            return value
        close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"{where}: expected one of {', '.join(map(repr, choices))}, got {value!r}{hint}")
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected {_type_name(tp)}, got {value!r}")
        (item,) = typing.get_args(tp)
        return [_coerce(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if tp is type(None):
        if value is None:
            return None
    elif tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads 1e-4 (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif tp is str:
        if isinstance(value, str):
            return value
    elif dataclasses.is_dataclass(tp):
        if isinstance(value, dict):
            return _check_mapping(value, tp, where)
    raise ConfigError(f"{where}: expected {_type_name(tp)}, got {value!r} ({type(value).__name__})")


def _initials(name: str) -> str:
    return "".join(token[0] for token in name.split("_") if token)


def _similarity(typed: str, known: str) -> float:
    """How likely ``known`` is the key meant by ``typed``, in ``[0, 1]``: the best of the spelling
    similarity (difflib ratio: ``weight_decai`` ~ ``weight_decay``), an abbreviation either way
    (``lr`` = initials of ``learning_rate``), a prefix (``epoch`` ~ ``epochs``) and the shared
    ``_``-separated words (``decay`` ~ ``weight_decay``)."""
    a, b = typed.lower(), known.lower()
    score = difflib.SequenceMatcher(None, a, b).ratio()
    if "_" in a and _initials(a) == b or "_" in b and _initials(b) == a:
        score = max(score, 0.9)
    if len(a) >= 2 and len(b) >= 2 and (a.startswith(b) or b.startswith(a)):
        score = max(score, 0.7 + 0.2 * min(len(a), len(b)) / max(len(a), len(b)))
    words_a, words_b = set(a.split("_")), set(b.split("_"))
    shared = words_a & words_b
    if shared:
        score = max(score, 0.6 + 0.3 * len(shared) / len(words_a | words_b))
    return score


def closest_key(typed: str, known: list[str], cutoff: float = 0.6) -> str | None:
    """The key of ``known`` (one section's keys) most likely meant by ``typed``, or ``None``:
    ``closest_key("learning_rate", ["name", "lr", ...]) == "lr"``."""
    if not known:
        return None
    best = max(known, key=lambda k: _similarity(typed, k))
    return best if _similarity(typed, best) >= cutoff else None


def _check_mapping(raw: dict, cls, where: str, prefix: str = "") -> dict:
    """Check the keys and types of a partial mapping for dataclass ``cls``; returns it coerced."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping for {prefix.rstrip('.') or 'the config'}, got {raw!r}")
    hints = _hints(cls)
    out = {}
    for key, value in raw.items():
        name = f"{prefix}{key}"
        if key not in hints:
            close = closest_key(str(key), list(hints))
            hint = (f"; did you mean '{prefix}{close}'?" if close
                    else f"; known keys: {', '.join(prefix + k for k in hints)}")
            raise ConfigError(f"{where}: unknown key {name!r}{hint}")
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            out[key] = _check_mapping(value, tp, where, prefix=f"{name}.")
        else:
            out[key] = _coerce(value, tp, f"{where}: {name}")
            _check_range(out[key], name, f"{where}: {name}")
    return out


def _merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _build(cls, raw: dict):
    hints = _hints(cls)
    kwargs = {k: (_build(hints[k], v) if dataclasses.is_dataclass(hints[k]) else v) for k, v in raw.items()}
    return cls(**kwargs)


# --- files and overrides ----------------------------------------------------------------------------------

def _read_layers(path: Path, seen: tuple[Path, ...] = ()) -> dict:
    """The checked, merged mapping of ``path`` and its ``base:`` chain."""
    path = path.resolve()
    if path in seen:
        raise ConfigError(f"{path}: 'base:' includes form a cycle: {' -> '.join(map(str, seen + (path,)))}")
    if not path.is_file():
        raise ConfigError(f"expected a config file, found nothing at {path}")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a YAML mapping of sections, got {type(raw).__name__}")
    base = raw.pop("base", None)
    layer = _check_mapping(raw, Config, str(path))
    if base is None:
        return layer
    if not isinstance(base, str):
        raise ConfigError(f"{path}: expected 'base:' to be a file name, got {base!r}")
    return _merge(_read_layers(path.parent / base, seen + (path,)), layer)


def parse_override(text: str) -> dict:
    """``'optim.lr=0.1'`` -> ``{'optim': {'lr': 0.1}}`` (the value parsed as YAML)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or "." not in key:
        raise ConfigError(f"override {text!r}: expected section.key=value, e.g. optim.lr=0.1")
    try:
        parsed = yaml.safe_load(value) if value.strip() else None
    except yaml.YAMLError as err:
        raise ConfigError(f"override {text!r}: value is not valid YAML: {err}") from None
    tree: dict = {}
    node = tree
    parts = key.strip().split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = parsed
    return tree


def load_config(path: str | Path | None = None, overrides: typing.Sequence[str] = ()) -> Config:
    """The :class:`Config` of a YAML file (``None``: the defaults) with ``section.key=value`` overrides."""
    merged = _read_layers(Path(path)) if path is not None else {}
    for text in overrides:
        merged = _merge(merged, _check_mapping(parse_override(text), Config, f"override {text!r}"))
    cfg = _build(Config, merged)
    _check_stages(cfg, f"{path if path is not None else 'the defaults'}{' with the overrides' if overrides else ''}")
    return cfg


def config_to_dict(cfg: Config) -> dict:
    return dataclasses.asdict(cfg)


def config_from_dict(raw: dict, where: str = "config") -> Config:
    cfg = _build(Config, _check_mapping(raw, Config, where))
    _check_stages(cfg, where)
    return cfg


def save_config(cfg: Config, path: str | Path) -> None:
    """Write the resolved config as YAML, atomically."""
    write_text_atomic(path, yaml.safe_dump(config_to_dict(cfg), sort_keys=False, default_flow_style=False))
