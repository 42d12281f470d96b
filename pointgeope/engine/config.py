"""The run configuration: typed dataclasses read from YAML, with ``base:`` includes and overrides.

A config file is a YAML mapping with (some of) the sections ``data``, ``model``, ``optim``, ``train`` and
``eval``; every key it leaves out keeps the default below (the published S3DIS recipe of Point Transformer:
SGD, lr 0.5, momentum 0.9, weight decay 1e-4, 100 epochs x loop 30, lr x0.1 at 60 % and 80 %, batch 16,
grid 0.04 m, at most 80k points per sample). A file may start from another one::

    base: _base.yaml          # resolved relative to this file; its keys are overridden by this file's
    model:
      pe: geope

and command-line overrides ``section.key=value`` (the value is parsed as a YAML scalar or list,
``optim.lr=0.1``, ``model.planes=[16,32]``; a text key's is the text as it is, :mod:`.config_override`) are
applied last. Every layer is checked on its own against the dataclasses (:mod:`.config_check`), so an
unknown key or a value of the wrong type is an error naming the file and the key's line (or the override)
and the key, with the closest known key as a suggestion, and every number is checked against its allowed
range, and the device and test-time scales their values (:mod:`pointgeope.engine.config_values`, e.g.
``train.epochs: expected an integer >= 1, got 0``)::

    ConfigError: configs/s3dis/pt_geope.yaml:7: unknown key 'optim.learning_rate'; did you mean 'optim.lr'?

Keys that must agree with each other are checked on the whole; a problem of the file's alone names the line
of the first key it names that a file of the ``base:`` chain sets (``FILE:LINE``), one that the overrides
bring names the file "with the overrides" (:mod:`pointgeope.engine.config_yaml` reads the lines).

A key given twice in one file is an error naming it and both lines (:mod:`pointgeope.engine.config_yaml`).
The resolved config is saved in the run folder (:func:`save_config`) and reloads to an equal object.
"""
from __future__ import annotations

import dataclasses
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from pointgeope.atomic import write_text_atomic
from pointgeope.constants import IGNORE_LABEL
from pointgeope.engine import config_override
from pointgeope.engine.config_check import ConfigError, build, check_mapping, merge
from pointgeope.engine.config_choices import choice_problem
from pointgeope.engine.config_override import override_key  # noqa: F401  (its users import it from here)
from pointgeope.engine.config_text import config_text
from pointgeope.engine.config_values import agreement_problem, pipeline_problem
from pointgeope.engine.config_yaml import DuplicateKeyError, LineError, at_line, key_line, load_yaml_lines
from pointgeope.engine.record_keys import as_recorded
from pointgeope.model.config import ModelConfig  # the model: section is the network's own config
from pointgeope.recorded_text import repr_bounded


@dataclass
class DataConfig:
    root: str = "data/s3dis"                # folder of prepared Area_N.h5 + folds.json
    grid_size: float = 0.04                 # voxel size (m) for training samples and test fragments
    voxel_max: int | None = 80000           # crop samples/fragments to this many points (None: no crop)
    loop: int = 30                          # each training room is seen `loop` times per epoch
    batch_size: int = 16                    # samples per optimiser step, summed over all DDP ranks
    num_workers: int = 4                    # DataLoader worker processes per rank (0: main process)
    augment: Literal["ptv1", "pointcept", "none", "pointcept_ptv3"] = "ptv1"  # training augmentations: the
    #                                         authors' set, Pointcept's PTv1 variant, or none (data/transforms.py);
    #                                         pointcept_ptv3: Pointcept's whole PTv3 pipeline, its grid and crops
    #                                         included (data/ptv3_transforms.py, docs/ptv3-recipe.md)
    height: bool = False                    # append the normalised height to the features (7 channels)
    color: bool = True                      # rgb features; false: geometry only, [xyz] (3 channels)
    normal: bool = False                    # pointcept_ptv3: [rgb | normal] for [rgb | xyz], Pointcept's S3DIS
    #                                         features (prepare's unit normals, data/features.py); false, or
    #                                         absent in a run recorded before the key: [rgb | xyz]
    cache: bool = False                     # each loader worker keeps the rooms it read in memory
    crop_rate: float | None = None          # pointcept_ptv3: keep this fraction of a sample's voxels, nearest to a
    #                                         random point (PTv3: 0.6; None: no such crop); voxel_max caps after it
    mix_prob: float = 0.0                   # Mix3D: merge a batch's samples pairwise with this probability (PTv3:
    #                                         0.8; needs pointcept_ptv3's samples, data/mix3d.py)
    hierarchy: Literal["auto", "beside", "loader", "device"] = "auto"  # where a batch's point hierarchy is built
    #                                         (train, evaluate, predict): on the host where batches are made, or
    #                                         beside the step on CUDA (elsewhere by the model); device: beside's
    #                                         former name; auto: engine/placement.py


@dataclass
class OptimConfig:
    name: Literal["sgd", "adamw"] = "sgd"   # the optimiser: SGD with momentum (the authors'), or AdamW
    lr: float = 0.5                         # the learning rate at the start (before the schedule's factors)
    momentum: float = 0.9                   # SGD only, not under onecycle (which cycles it 0.95 -> 0.85)
    weight_decay: float = 1e-4              # L2 penalty (SGD) or decoupled decay (AdamW), see no_weight_decay
    scheduler: Literal["multistep", "cosine", "onecycle"] = "multistep"  # lr x gamma at each milestone, cosine
    #                                         to 0, or one cycle per group (PTv3, engine/schedule.py)
    milestones: list[float] = field(default_factory=lambda: [0.6, 0.8])  # fractions of train.epochs
    gamma: float = 0.1                      # multistep factor
    grad_clip: float | None = None          # max gradient norm (None: no clipping)
    block_lr: float | None = None           # the lr of the parameters named *block* (PTv3: 0.0006; None: lr)
    pct_start: float = 0.05                 # onecycle: fraction of the steps spent warming up to the peak
    anneal_strategy: Literal["cos", "linear"] = "cos"  # onecycle: the shape of the warm-up and the decay
    div_factor: float = 10.0                # onecycle: the start lr is the peak / div_factor
    final_div_factor: float = 1000.0        # onecycle: the last lr is the start lr / final_div_factor
    # parameters without weight decay: pe_frequencies = learnt positional frequencies (RoPE-Mixed's, GeoPE's
    # with model.geope_learnable), as RoPE-Mixed's authors exclude its freqs (rope-vit no_weight_decay);
    # []: decay on every parameter, as PTv1's authors do (they have no such parameters)
    no_weight_decay: list[Literal["pe_frequencies"]] = field(default_factory=lambda: ["pe_frequencies"])


@dataclass
class TrainConfig:
    epochs: int = 100                       # passes over the training rooms (each data.loop times)
    seed: int = 0                           # seeds the weights and every sample's randomness (seed, epoch, index)
    device: str = "auto"                    # auto (CUDA if present, else CPU) | cpu | cuda | cuda:1 ... (checked)
    threads: int | None = None              # torch CPU threads per process (None: torch's default)
    amp: Literal["bf16", "fp16", "none"] = "none"  # training's mixed precision on CUDA (CPU: float32, logged);
    #                                         none: float32; the test's is eval.amp
    run_dir: str = "runs/default"           # where the folds are written: RUN/area_K/ (train.py --run-dir)
    val_every: int = 0                      # validate on the test area every n epochs (0: never); best.pt
    checkpoint_every: int = 0               # also save last.pt every n steps inside an epoch (0: epoch ends)
    epochs_per_run: int | None = None       # stop cleanly after n >= 1 epochs in this invocation, over all its
    #                                         folds (job time limits); the same command (without --force) continues
    progress: bool = True                   # tqdm bars (rank 0, only on a TTY)
    ignore_index: int = IGNORE_LABEL        # the label skipped by the loss and by every metric (train, eval)
    loss: Literal["ce", "ce_lovasz"] = "ce"  # cross entropy, or plus the Lovász-softmax loss (PTv3, engine/losses.py)
    lovasz_weight: float = 1.0              # ce_lovasz: the weight of the Lovász-softmax term
    cuda_graphs: bool = False               # PTv1 on one GPU: each step replays a CUDA graph of its padded batch
    #                                         (engine/graphs.py; float32 or bf16, the hierarchy given)


@dataclass
class TTAConfig:
    scales: list[float] = field(default_factory=lambda: [1.0])  # isotropic scalings about the room centre
    flips: bool = False                     # also the mirror image in x
    rotations: int = 1                      # number of z-rotations by 2*pi*k/rotations


@dataclass
class EvalConfig:
    checkpoint: Literal["last", "best"] = "last"  # the checkpoint evaluated: last.pt, or best.pt (train.val_every)
    tta: TTAConfig = field(default_factory=TTAConfig)
    batch_points: int | None = None         # fragments are stacked into one forward up to this many points
    #                                         (None: 400,000 on the CPU, 1,600,000 on CUDA, halved while it does
    #                                         not fit)
    vote: Literal["logits", "softmax"] = "logits"  # what each point sums over its predictions (authors: logits)
    max_fragments: int | None = None        # predict at most this many voxel fragments per room (None: all)
    # mAcc / mIoU over: all 13 classes, an absent class counting 0 (the PTv1 authors' tool/test.py), or the
    # classes present (pointgeope.metrics); the same on the pooled 6-fold matrix and on areas with every class
    class_mean: Literal["all", "present"] = "all"
    # the test-time pieces: ptv1 (fragments at data.grid_size cut into crops of data.voxel_max, eval.tta) or
    # ptv3 (Pointcept's: 10 scale/flip views, grid-sample fragments on PTv3's grid, no crop; data/ptv3_test.py)
    protocol: Literal["ptv1", "ptv3"] = "ptv1"
    amp: Literal["bf16", "fp16", "none"] = "none"  # the test's mixed precision on CUDA (CPU: float32, logged);
    #                                         none: float32, as both authors test, whatever train.amp


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)


def config_problem(cfg: Config, presets: list[str] | None = None, record: bool = False) -> str | None:
    """What is wrong between the keys that must agree with each other (each key alone was checked as read),
    or ``None``; the encodings' own keys are checked against ``model.pe``, or against each of an ablation's
    ``presets`` where given (``config_values.agreement_problem``); a key that the chosen optimiser, schedule
    or loss never reads (``config_choices.choice_problem``; not in a ``record`` of a run, which ran without it)."""
    return agreement_problem(cfg.model, presets) or pipeline_problem(cfg) or (None if record else choice_problem(cfg))


# --- files and overrides ----------------------------------------------------------------------------------

def _read_layers(path: Path, seen: tuple[Path, ...] = (), origins: dict | None = None) -> dict:
    """The checked, merged mapping of ``path`` and its ``base:`` chain; ``origins`` (given): filled with
    ``(file, line)`` of each dotted key, where the chain sets it last (for the messages of the whole)."""
    path = path.expanduser().resolve()   # a leading ~ is home: --config=~/c.yaml (zsh keeps the ~), base: ~/c.yaml
    if path in seen:
        raise ConfigError(f"{path}: 'base:' includes form a cycle: {' -> '.join(map(str, seen + (path,)))}")
    if not path.is_file():  # the recipes of configs/ are in a clone of the repository, not in the wheel
        fix = ("give a YAML file, e.g. configs/demo.yaml" if path.is_dir()
               else f"{seen[-1]} names it as its 'base:' (a path from that file's folder)" if seen
               else "the recipes (configs/demo.yaml, configs/s3dis/...) come with a clone of the repository, in its "
                    "configs/ folder, not with the pip package: run from a clone, or give the path of your own file")
        found = "a folder" if path.is_dir() else "nothing"
        raise ConfigError(f"expected a config file, found {found} at {path}; {fix}")
    if path.suffix == ".py":   # Pointcept's (mmcv's) form, which YAML reads as a scalar or a syntax error
        raise ConfigError(f"{path}: expected a YAML config, got a Python file (Pointcept's form); Pointcept's PTv3 "
                          "S3DIS recipe is configs/s3dis/_ptv3_recipe.yaml, each step in docs/ptv3-recipe.md")
    try:
        raw, lines = load_yaml_lines(config_text(path))   # UTF-8, or UTF-16 as YAML reads it; not binary
    except DuplicateKeyError as err:
        raise ConfigError(f"{path}: {err}") from None
    except LineError as err:
        raise ConfigError(f"{path}:{err.line}: {err}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    if raw is None:  # an empty file or only comments: not a config of the defaults (a failed save or copy?)
        sections = ", ".join(f"{f.name}:" for f in dataclasses.fields(Config))
        raise ConfigError(f"{path}: the config is empty (expected a YAML mapping of sections: {sections}); give a "
                          "config such as configs/demo.yaml (an empty mapping, '{}', runs the defaults)")
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a YAML mapping of sections, got {type(raw).__name__} "
                          f"{repr_bounded(raw, 40)}; give a config such as configs/demo.yaml")
    has_base, base = "base" in raw, raw.pop("base", None)
    layer = check_mapping(raw, Config, str(path), lines=lines)
    if has_base and (not isinstance(base, str) or not base.strip()):   # 'base:' or "": not the defaults, a folder
        raise ConfigError(f"{at_line(str(path), lines, 'base')}: expected 'base:' to be a file name, got {base!r}; "
                          "give the base config's file (e.g. base: demo.yaml), or remove the line")
    below = None if base is None else _read_layers(path.parent / Path(base).expanduser(), seen + (path,), origins)
    merged = layer if below is None else merge(below, layer)
    if origins is not None:
        # a base's entry (model.planes[3]) outlives a shorter list set on top; harmless, as the problems of
        # the whole (config_problem) name keys, not entries
        origins.update({key: (path, line) for key, line in lines.items()})
    return merged


def parse_override(text: str) -> dict:
    """``'optim.lr=0.1'`` -> ``{'optim': {'lr': 0.1}}``: the value read as YAML, a text key's as it is
    (:func:`pointgeope.engine.config_override.parse_override`)."""
    return config_override.parse_override(text, Config, ConfigError)


def _overridden(merged: dict, overrides: typing.Sequence[str], where: str, presets: list[str] | None = None,
                origins: dict | None = None, record: bool = False) -> Config:
    """The config of the checked mapping ``merged`` (read from ``where``) with ``section.key=value``
    ``overrides`` applied last, each checked as it is read, then the whole: a problem of the whole is
    ``where``'s alone when ``merged`` has it without the overrides (a key of the file, whatever the
    overrides, e.g. the ``data.root`` of train's ``--data-root``), named at the line of the file that sets
    the first key the problem names (``origins``: :func:`_read_layers`'), else ``where`` "with the
    overrides"; ``presets``: :func:`config_problem`'s."""
    layered = merged
    for text in overrides:
        layered = merge(layered, check_mapping(parse_override(text), Config, f"override {text!r}"))
    cfg = build(Config, layered)
    said = config_problem(cfg, presets, record)
    if said:
        if overrides and config_problem(build(Config, merged), presets, record) != said:
            raise ConfigError(f"{where} with the overrides: {said}")
        file, line = key_line(origins or {}, said) or (None, None)
        at = where if file is None else f"{where if file == Path(where).resolve() else file}:{line}"
        raise ConfigError(f"{at}: {said}")
    return _home_expanded(cfg)


def _home_expanded(cfg: Config) -> Config:
    """``cfg`` with a leading ``~`` of its folders (``data.root``, ``train.run_dir``) made the home folder, as a
    shell does to an option: no shell reads a YAML file, and ``run_dir: ~/runs/x`` made a folder named ``~``."""
    cfg.data.root, cfg.train.run_dir = os.path.expanduser(cfg.data.root), os.path.expanduser(cfg.train.run_dir)
    return cfg


def load_config(path: str | Path | None = None, overrides: typing.Sequence[str] = (),
                presets: list[str] | None = None) -> Config:
    """The :class:`Config` of a YAML file (``None``: the defaults) with ``section.key=value`` overrides;
    ``presets``: an ablation's encodings, against each of which the encodings' own keys are checked in place of
    ``model.pe`` (:func:`config_problem`)."""
    origins: dict = {}
    merged = _read_layers(Path(path), origins=origins) if path is not None else {}
    return _overridden(merged, overrides, str(path) if path is not None else "the defaults", presets, origins)


def config_to_dict(cfg: Config) -> dict:
    return dataclasses.asdict(cfg)


def config_from_dict(raw: dict, where: str = "config", overrides: typing.Sequence[str] = ()) -> Config:
    """The :class:`Config` of a saved plain mapping (a checkpoint's), with ``section.key=value`` overrides; a
    key it lacks as it was before the key existed (:func:`pointgeope.engine.record_keys.as_recorded`)."""
    return _overridden(check_mapping(as_recorded(raw), Config, where), overrides, where, record=True)


def load_record(path: str | Path, overrides: typing.Sequence[str] = ()) -> Config:
    """The :class:`Config` of a run's saved ``config.yaml`` (:func:`save_config`'s) with overrides; a key it
    lacks as it was before the key existed (:func:`pointgeope.engine.record_keys.as_recorded`)."""
    origins: dict = {}
    return _overridden(as_recorded(_read_layers(Path(path), origins=origins)), overrides, str(path), origins=origins,
                       record=True)


def save_config(cfg: Config, path: str | Path) -> None:
    """Write the resolved config as YAML, atomically."""
    write_text_atomic(path, yaml.safe_dump(config_to_dict(cfg), sort_keys=False, default_flow_style=False))
