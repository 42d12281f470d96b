"""Tests of pointgeope/engine/config.py and config_values.py: checked YAML layers, overrides, round trip,
every shipped config, the allowed values."""
from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from pointgeope.engine.config import (
    Config,
    ConfigError,
    config_from_dict,
    config_to_dict,
    load_config,
    parse_override,
    save_config,
)
from pointgeope.engine.config_ranges import RANGES, Range

REPO = Path(__file__).resolve().parents[2]


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_defaults_are_the_published_s3dis_recipe():
    cfg = Config()
    assert (cfg.optim.name, cfg.optim.lr, cfg.optim.momentum, cfg.optim.weight_decay) == ("sgd", 0.5, 0.9, 1e-4)
    assert (cfg.optim.scheduler, cfg.optim.milestones, cfg.optim.gamma) == ("multistep", [0.6, 0.8], 0.1)
    assert (cfg.train.epochs, cfg.data.loop, cfg.data.batch_size) == (100, 30, 16)
    assert (cfg.data.grid_size, cfg.data.voxel_max, cfg.train.ignore_index) == (0.04, 80000, 255)
    # RoPE-Mixed's authors: no weight decay on its frequencies, random mixed directions at the start
    assert (cfg.optim.no_weight_decay, cfg.model.rope_mixed_init) == (["pe_frequencies"], "random")


def test_unknown_key_names_file_key_and_closest(tmp_path):
    path = write(tmp_path / "c.yaml", "optim:\n  weight_decai: 0.1\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    msg = str(err.value)
    assert str(path) in msg and "'optim.weight_decai'" in msg and "did you mean 'optim.weight_decay'" in msg


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n", "null\n"])
def test_an_empty_config_file_is_refused_not_read_as_the_defaults(tmp_path, text):
    """An emptied config (a failed save or copy) started a 100-epoch run of the default recipe."""
    path = write(tmp_path / "c.yaml", text)
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: the config is empty \(expected a YAML mapping "
                                          r"of sections: data:, model:, .*\); give a config such as configs/demo.yaml"):
        load_config(path)
    assert load_config(write(tmp_path / "d.yaml", "{}\n")) == Config()  # an explicit empty mapping: the defaults


@pytest.mark.parametrize("text, got", [("[]\n", "list []"), ("0\n", "int 0"), ("false\n", "bool False"),
                                       ("''\n", "str ''"), ("- a\n", "list ['a']")])
def test_a_config_that_is_not_a_mapping_is_refused_even_when_falsy(tmp_path, text, got):
    path = write(tmp_path / "c.yaml", text)
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: expected a YAML mapping of sections, got "
                                          rf"{re.escape(got)}; give a config such as configs/demo.yaml$"):
        load_config(path)


def test_unknown_section_is_an_error(tmp_path):
    path = write(tmp_path / "c.yaml", "trian:\n  epochs: 3\n")
    with pytest.raises(ConfigError, match=r"unknown key 'trian'; did you mean 'train'"):
        load_config(path)


@pytest.mark.parametrize("text, key", [
    ("train:\n  epochs: ten\n", "train.epochs: expected int"),
    ("train:\n  epochs: 1.5\n", "train.epochs: expected int"),
    ("data:\n  augment: 1\n", "data.augment: expected one of 'ptv1', 'pointcept', 'none'"),
    ("model:\n  planes: 32\n", r"model.planes: expected list\[int\]"),
    ("model:\n  planes: [32, x]\n", r"model.planes\[1\]: expected int"),
    ("model:\n  pe: geope2\n", "model.pe: expected one of .* did you mean 'geope'"),
    ("optim: 3\n", "expected a mapping for optim"),
])
def test_wrong_type_names_the_key(tmp_path, text, key):
    path = write(tmp_path / "c.yaml", text)
    with pytest.raises(ConfigError, match=key):
        load_config(path)


def test_floats_accept_ints_and_exponent_strings(tmp_path):
    cfg = load_config(write(tmp_path / "c.yaml", "optim:\n  lr: 1\n  weight_decay: 1e-4\n"))
    assert cfg.optim.lr == 1.0 and isinstance(cfg.optim.lr, float)
    assert cfg.optim.weight_decay == 1e-4


def test_base_include_relative_to_file_and_overridden(tmp_path):
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub" / "_base.yaml", "optim:\n  lr: 0.2\n  momentum: 0.8\ntrain:\n  epochs: 7\n")
    path = write(tmp_path / "sub" / "top.yaml", "base: _base.yaml\noptim:\n  lr: 0.3\n")
    cfg = load_config(path)
    assert (cfg.optim.lr, cfg.optim.momentum, cfg.train.epochs) == (0.3, 0.8, 7)


def test_error_in_base_names_the_base_file(tmp_path):
    write(tmp_path / "_base.yaml", "train:\n  epoch: 7\n")
    path = write(tmp_path / "top.yaml", "base: _base.yaml\n")
    with pytest.raises(ConfigError, match=r"_base\.yaml:2: unknown key 'train\.epoch'; did you mean 'train\.epochs'"):
        load_config(path)


def test_base_cycle_is_an_error(tmp_path):
    write(tmp_path / "a.yaml", "base: b.yaml\n")
    write(tmp_path / "b.yaml", "base: a.yaml\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_config(tmp_path / "a.yaml")


def test_overrides_parse_yaml_values_and_apply_last(tmp_path):
    path = write(tmp_path / "c.yaml", "optim:\n  lr: 0.3\n")
    cfg = load_config(path, ["optim.lr=0.01", "model.planes=[8, 16, 24, 32, 40]", "eval.tta.flips=true",
                             "data.voxel_max=null", "train.run_dir=runs/x"])
    assert cfg.optim.lr == 0.01 and cfg.model.planes == [8, 16, 24, 32, 40] and cfg.eval.tta.flips is True
    assert cfg.data.voxel_max is None and cfg.train.run_dir == "runs/x"
    assert parse_override("eval.tta.scales=[0.9,1.1]") == {"eval": {"tta": {"scales": [0.9, 1.1]}}}


@pytest.mark.parametrize("text, match", [
    ("optim.lrr=0.1", r"override 'optim.lrr=0.1': unknown key 'optim.lrr'; did you mean 'optim.lr'"),
    ("optim.lr=fast", r"override 'optim.lr=fast': optim.lr: expected float"),
    ("lr=0.1", "expected section.key=value"),
])
def test_bad_overrides(text, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, [text])


def test_saved_config_reloads_identically(tmp_path):
    cfg = load_config(REPO / "configs" / "s3dis" / "pt_geope.yaml", ["eval.tta.scales=[0.9, 1.0, 1.1]"])
    save_config(cfg, tmp_path / "run" / "config.yaml")
    again = load_config(tmp_path / "run" / "config.yaml")
    assert again == cfg
    assert config_from_dict(config_to_dict(cfg)) == cfg
    assert not list((tmp_path / "run").glob("*.tmp"))


CONFIGS = sorted((REPO / "configs").rglob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[str(p.relative_to(REPO)) for p in CONFIGS])
def test_every_shipped_config_loads(path):
    cfg = load_config(path)
    assert isinstance(cfg, Config)


def test_s3dis_configs_differ_only_in_pe_and_run_dir():
    cfgs = {p.stem: load_config(p) for p in (REPO / "configs" / "s3dis").glob("pt_*.yaml")}
    assert set(cfgs) == {"pt_rpe", "pt_geope", "pt_lingeope", "pt_geope_rpe", "pt_lingeope_rpe", "pt_none",
                         "pt_rope3d", "pt_rope3d_rpe", "pt_rope_mixed", "pt_pointrope", "pt_ape"}
    for name, cfg in cfgs.items():
        assert cfg.model.pe == name[3:].replace("_rpe", "+rpe").replace("_", "-")
        assert cfg.train.run_dir == f"runs/{name}"
        plain = config_to_dict(cfg)
        plain["model"].pop("pe"), plain["train"].pop("run_dir")
        reference = config_to_dict(Config())
        reference["model"].pop("pe"), reference["train"].pop("run_dir")
        assert plain == reference  # the published recipe = the dataclass defaults


@pytest.mark.parametrize("typed, meant", [
    ("optim.learning_rate", "optim.lr"),         # an abbreviation: the initials
    ("optim.lrr", "optim.lr"),                   # a prefix
    ("optim.weight_decai", "optim.weight_decay"),  # a misspelling
    ("optim.decay", "optim.weight_decay"),       # a shared word
    ("data.batchsize", "data.batch_size"),
    ("train.epoch", "train.epochs"),
    ("eval.tta.rotation", "eval.tta.rotations"),  # inside a nested section
])
def test_did_you_mean_picks_the_key_meant(typed, meant):
    with pytest.raises(ConfigError, match=rf"unknown key '{typed}'; did you mean '{meant}'\?$"):
        load_config(None, [f"{typed}=1"])


def test_no_close_key_lists_the_section():
    with pytest.raises(ConfigError, match=r"unknown key 'optim.zzz'; known keys: optim.name, optim.lr, "):
        load_config(None, ["optim.zzz=1"])


def _numeric_keys(cls, prefix: str = "") -> list[str]:
    """Every key of the dataclass ``cls`` whose type is int or float, alone, optional or in a list."""
    import dataclasses
    import types
    import typing

    keys = []
    for name, tp in typing.get_type_hints(cls).items():
        if dataclasses.is_dataclass(tp):
            keys += _numeric_keys(tp, f"{prefix}{name}.")
            continue
        args = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType, list) else (tp,)
        inner = [a for arg in args for a in (typing.get_args(arg) if typing.get_origin(arg) is list else (arg,))]
        if any(a in (int, float) for a in inner):
            keys.append(prefix + name)
    return keys


def test_every_numeric_key_has_its_range_and_the_defaults_are_inside():
    keys = _numeric_keys(Config)
    assert {"train.epochs", "optim.lr", "model.planes", "eval.tta.scales", "eval.max_fragments"} <= set(keys)
    assert sorted(set(keys) - set(RANGES)) == [], "give each new numeric key its range in RANGES"
    assert sorted(set(RANGES) - set(keys)) == []
    config_from_dict(config_to_dict(Config()))  # the published recipe passes its own checks


@pytest.mark.parametrize("grid", ["5e-324", "1e-300", "1e-7"])
def test_a_grid_finer_than_a_micrometre_is_refused_when_the_config_is_read(grid):
    """5e-324 (a subnormal) was accepted as > 0 and ended training in a traceback (GeoPE's position scale
    1 / grid_size = inf); 1e-300 overflowed float32 into NaN losses blamed on optim.lr. The bound says why, as
    the upper one does (it gave none); 0 and -1 are told the bound alone."""
    with pytest.raises(ConfigError, match=rf"^override 'data.grid_size={grid}': data.grid_size: expected a finite "
                                          rf"number >= 1e-06, got {float(grid)!r}; the bound is there because a "
                                          r"micrometre is finer than any scanner's noise, .* overflows float32"):
        load_config(None, [f"data.grid_size={grid}"])
    for zero in ("0", "-1"):
        with pytest.raises(ConfigError, match=rf"data.grid_size: expected a finite number >= 1e-06, got {zero}\.0$"):
            load_config(None, [f"data.grid_size={zero}"])
    assert load_config(None, ["data.grid_size=1e-6"]).data.grid_size == 1e-6


def test_a_grid_beyond_a_kilometre_is_refused_naming_why():
    """1e308 passed and training ended in a traceback once the first stage multiplied it by its stride
    ("expected grid_unit a finite number > 0, got inf"); a checkpoint's config is checked the same way."""
    with pytest.raises(ConfigError, match=r"^override 'data.grid_size=1e308': data.grid_size: expected a finite number "
                                          r"<= 1000, got 1e\+308; the bound is there because a voxel of that edge"):
        load_config(None, ["data.grid_size=1e308"])
    assert load_config(None, ["data.grid_size=1000"]).data.grid_size == 1000


def test_a_test_view_scale_beyond_10_is_refused_naming_why():
    """eval.tta.scales=[1e308] made every coordinate of the view infinite: evaluate and predict ended in a
    traceback ("expected finite coord"); 0 stays refused as not > 0 (the bound's text kept the open side)."""
    with pytest.raises(ConfigError, match=r"^override 'eval.tta.scales=\[1, 1e308\]': eval.tta.scales\[1\]: expected "
                                          r"a finite number <= 10, got 1e\+308; the bound is there because a view "
                                          r"scales"):
        load_config(None, ["eval.tta.scales=[1, 1e308]"])
    with pytest.raises(ConfigError, match=r"^override 'eval.tta.scales=\[0\]': eval.tta.scales\[0\]: expected a "
                                          r"finite number > 0, got 0.0$"):
        load_config(None, ["eval.tta.scales=[0]"])
    assert load_config(None, ["eval.tta.scales=[0.9, 10]"]).eval.tta.scales == [0.9, 10]


def test_range_bounds_and_their_text():
    positive, unit = Range(0, open_low=True), Range(0, 1)
    assert 1e-12 in positive and 0 not in positive and -1 not in positive
    assert all(x not in positive for x in (math.nan, math.inf))
    assert 0 in unit and 1 in unit and 1.0000001 not in unit and -0.0 in unit
    assert (str(positive), str(unit), str(Range(1)), str(Range(high=2.5)), str(Range())) == \
        ("> 0", "in [0, 1]", ">= 1", "<= 2.5", "")
    with pytest.raises(ConfigError, match=r"^override 'eval.tta.scales=\[1, -2\]': eval.tta.scales\[1\]: "
                                          r"expected a finite number > 0, got -2.0$"):
        load_config(None, ["eval.tta.scales=[1, -2]"])
    with pytest.raises(ConfigError, match=r"^the defaults with the overrides: model.planes\[2\]: expected a "
                                          r"multiple of model.share_planes \(8\), got 132$"):
        load_config(None, ["model.planes=[32, 64, 132, 256, 512]"])
    with pytest.raises(ConfigError, match=r"^override 'eval.tta.scales=\[\]': eval.tta.scales: expected at "
                                          r"least one scale, got \[\]$"):
        load_config(None, ["eval.tta.scales=[]"])


def test_config_values_does_not_import_config():
    """The value table and the config imported each other (the table needed ``Config`` for the agreement
    check, ``Config`` needs the table): the table now reads the model section alone, one direction."""
    import pointgeope.engine
    from tests.conftest import module_imports

    imports = module_imports(pointgeope.engine)
    here = Path(pointgeope.engine.__file__).parent
    assert [n for n in imports[here / "config_values.py"] if n.startswith("pointgeope.engine")] == \
        ["pointgeope.engine.config_ranges"]
    assert not [n for n in imports[here / "config_ranges.py"] if n.startswith("pointgeope.engine")]


@pytest.mark.parametrize("device", ["auto", "cpu", "cuda", "cuda:1"])
def test_train_device_takes_auto_cpu_and_cuda(device):
    assert load_config(None, [f"train.device={device}"]).train.device == device


@pytest.mark.parametrize("device", ["xyz", "mps", "meta", "cuda:-1", "CPU"])
def test_any_other_train_device_is_refused_when_the_config_is_read(device):
    with pytest.raises(ConfigError, match=rf"train.device: expected auto, cpu, cuda or cuda:N .*got '{device}'"):
        load_config(None, [f"train.device={device}"])


@pytest.mark.parametrize("overrides, refused", [
    (["model.pe=pointrope", "model.geope_base=50"],
     ("model.geope_base=50.0: GeoPE's frequencies, but model.pe=pointrope turns at LitePT's fixed frequencies (base "
      "100 per grid cell), so it would change nothing; remove it, or set model.pe to one of geope, lingeope, "
      "geope+rpe, lingeope+rpe, rope3d, rope3d+rpe, ape")),
    (["model.pe=pointrope", "model.geope_learnable=true"],
     "model.geope_learnable=true: GeoPE's frequencies, but model.pe=pointrope"),
    (["model.pe=rope-mixed", "model.geope_learnable=true"],
     "but model.pe=rope-mixed turns at RoPE-Mixed's own learnt frequencies"),
    (["model.pe=rope-mixed", "model.geope_base=50"],
     "model.geope_base=50.0: GeoPE's frequencies, but model.pe=rope-mixed"),
    (["model.pe=rope-mixed", "model.rope_mixed_init=axial", "model.geope_base=50"], None),   # its start
    (["model.pe=rpe", "model.geope_learnable=true", "model.geope_base=50"], None),  # the ablation's baseline
    (["model.pe=none", "model.geope_learnable=true"], None),
    (["model.pe=ape", "model.geope_learnable=true"], None),                          # its sinusoids' frequencies
    (["model.pe=rope3d+rpe", "model.geope_learnable=true", "model.geope_base=50"], None),
])
def test_ptv1_refuses_geope_keys_its_encoding_does_not_read(overrides, refused):
    """As PTv3 does: PTv1 accepted model.geope_base / model.geope_learnable with pointrope or rope-mixed and
    ignored them. The baselines without frequencies (rpe, none) take them, so an ablation sets them for all."""
    if refused is None:
        assert load_config(None, overrides).model.pe == overrides[0].split("=")[1]
        return
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    assert refused in str(err.value) and "\n" not in str(err.value)


def test_a_key_of_the_file_is_the_files_whatever_the_overrides(tmp_path):
    """train's --data-root and --run-dir are overrides: a key refused in the file itself was said to be the
    file's "with the overrides"; the file alone is named now (at the key's line), and an override that makes
    the problem still is."""
    config = tmp_path / "pr.yaml"
    config.write_text("model:\n  pe: pointrope\n  geope_base: 50\n")
    problem = (r"model.geope_base=50.0: GeoPE's frequencies, but model.pe=pointrope turns at LitePT's fixed "
               r"frequencies")
    for overrides in ([], ["data.root=s3dis", "train.run_dir=runs/pr"]):
        with pytest.raises(ConfigError, match=rf"^{re.escape(str(config))}:3: {problem}"):
            load_config(config, overrides)
    config.write_text("model:\n  pe: pointrope\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(config))} with the overrides: {problem}"):
        load_config(config, ["data.root=s3dis", "model.geope_base=50"])


def test_a_missing_config_says_where_the_recipes_are_and_a_missing_base_who_names_it(tmp_path, monkeypatch):
    """Before: "expected a config file, found nothing at PATH" and no fix; the recipes of configs/ come with a
    clone, not with the wheel (pip install pointgeope), so a user of the wheel met it at the first command."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        load_config(Path("configs/demo.yaml"))
    assert str(err.value) == (
        f"expected a config file, found nothing at {tmp_path / 'configs' / 'demo.yaml'}; the recipes "
        "(configs/demo.yaml, configs/s3dis/...) come with a clone of the repository, in its configs/ folder, not "
        "with the pip package: run from a clone, or give the path of your own file")
    (tmp_path / "mine").mkdir()
    top = write(tmp_path / "mine" / "top.yaml", "base: ../_base.yaml\n")
    with pytest.raises(ConfigError) as err:
        load_config(top)
    assert str(err.value) == (f"expected a config file, found nothing at {tmp_path / '_base.yaml'}; {top} names it "
                              "as its 'base:' (a path from that file's folder)")


def test_a_ptv3_encoding_on_ptv1_with_its_geope_keys_is_the_backbones_one_line():
    """The backbone's check comes before the encoding's keys: PTv1 with ``model.pe=point3drope`` and a GeoPE
    key raised ``KeyError: 'point3drope'`` (the encoding's table holds PTv1's encodings) instead of the line
    saying point3drope is a PTv3 encoding."""
    demo = REPO / "configs" / "demo.yaml"
    with pytest.raises(ConfigError, match=r"model.pe: 'point3drope' is a PTv3 encoding \(model.backbone: ptv3\)"):
        load_config(demo, ["model.backbone=ptv1", "model.pe=point3drope", "model.geope_base=50"])


def test_a_python_config_is_named_as_such(tmp_path):
    """Pointcept's configs are Python: YAML read one as 'expected <document start>, but found <scalar>'."""
    config = tmp_path / "semseg-pt-v3m1-0-base.py"
    config.write_text('_base_ = ["../_base_/default_runtime.py"]\n\nbatch_size = 12  # bs: total bs in all gpus\n')
    with pytest.raises(ConfigError) as err:
        load_config(config)
    assert str(err.value) == (f"{config}: expected a YAML config, got a Python file (Pointcept's form); Pointcept's "
                              "PTv3 S3DIS recipe is configs/s3dis/_ptv3_recipe.yaml, each step in docs/ptv3-recipe.md")


@pytest.mark.parametrize("key, value, side", [("model.geope_base", "1e-300", "overflow"),
                                              ("model.geope_base", "1e60", "rounds to 0"),
                                              ("model.point3drope_scale", "1e30", "overflow"),
                                              ("model.point3drope_scale", "1e-40", "rounds to 0")])
def test_a_frequency_key_whose_phases_leave_float32_is_refused_when_the_config_is_read(key, value, side):
    """The encodings refuse a phase per unit beyond [2^-126, 2^66] when built (geope_checks.check_phase_scales), a
    ValueError: `pointgeope train model.geope_base=1e-300` ended in its traceback, exit 1. The key's range keeps
    every such value out where the config is read, in one line naming the key."""
    with pytest.raises(ConfigError, match=rf"^override '{key}={value}': {key}: expected a finite number [<>]= "
                                          rf"1e[-+]\d+, got {re.escape(repr(float(value)))}; the bound is there "
                                          rf"because .*{side}"):
        load_config(None, [f"{key}={value}"])


def test_every_frequency_key_in_range_builds_at_every_grid_size_and_width():
    """The ranges of model.geope_base and model.point3drope_scale are within check_phase_scales' bounds at the ends
    of data.grid_size's range (pos_scale = 1 / grid_size) and at the widest widths (the slowest frequency's
    exponent nearest -2/3 for GeoPE, -1 for Point3DRoPE), where the encodings are built."""
    from pointgeope.geope import BlockScale
    from pointgeope.model.qk_encodings import GeoPEQK, Point3DRoPEQK

    base, scale, grid = RANGES["model.geope_base"], RANGES["model.point3drope_scale"], RANGES["data.grid_size"]
    for b in (base.low, base.high):
        for g in (grid.low, grid.high):
            BlockScale(3 * 2 ** 14, base=b, pos_scale=1 / g, axes=3)       # model.planes' widest
            GeoPEQK(6 * 1024, base=b, pos_scale=1 / g)
    for s in (scale.low, scale.high):
        Point3DRoPEQK(6 * 1024, pos_scale=s)
