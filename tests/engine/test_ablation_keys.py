"""Tests of the encodings' own keys in an ablation (pointgeope/engine/config_values.py's presets_problem, as
pointgeope/engine/ablation.py's plan uses it): each preset's trial is checked, not the config file's model.pe."""
from __future__ import annotations

import pytest

from pointgeope.cli import main as cli
from pointgeope.engine.ablation import plan
from pointgeope.engine.config import ConfigError, load_config
from tests.engine.conftest import DEMO_CONFIG, REPO

PTV3_DEMO = REPO / "configs" / "demo_ptv3.yaml"            # model.pe: geope, which reads no point3drope_scale


def presets_of(config, presets, root, tmp_path, *overrides):
    trials, _ = plan(config, presets, [0], 1, tmp_path / "abl", [f"data.root={root}", *overrides], 1)
    return [t.preset for t in trials]


@pytest.mark.parametrize("presets", [["point3drope"], ["none", "point3drope"]])
def test_a_key_every_trial_takes_runs_whatever_the_files_pe(two_folds, tmp_path, presets):
    """point3drope reads the scale; none (no positions) takes it as it takes GeoPE's keys: the baseline."""
    assert presets_of(PTV3_DEMO, presets, two_folds, tmp_path, "model.point3drope_scale=1") == presets


def test_geope_keys_over_geope_presets_with_a_pointrope_file(two_folds, tmp_path):
    config = tmp_path / "pointrope.yaml"
    config.write_text(f"base: {DEMO_CONFIG}\nmodel:\n  pe: pointrope\n")
    assert presets_of(config, ["geope", "lingeope", "rpe"], two_folds, tmp_path,
                      "model.geope_base=50") == ["geope", "lingeope", "rpe"]


@pytest.mark.parametrize("presets, message", [
    (["geope", "point3drope"], ("model.point3drope_scale=1.0: read by --presets point3drope, but --presets geope "
                               "would ignore it; remove it, or leave geope out of --presets")),
    (["geope", "pointrope", "none"], ("model.point3drope_scale=1.0: no preset of --presets geope, pointrope, none "
                                     "reads it (only point3drope does), so it would change nothing; remove it")),
])
def test_a_key_a_preset_ignores_is_refused_naming_the_presets(two_folds, tmp_path, capsys, presets, message):
    """One line naming the presets, and no `set model.pe` (ablate refuses that override), before any trial."""
    assert cli(["ablate", "--config", str(PTV3_DEMO), "--test-area", "1", "--data-root", str(two_folds),
                "--run-dir", str(tmp_path / "abl"), "--presets", ",".join(presets), "--seeds", "0",
                "model.point3drope_scale=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"pointgeope ablate: error: {PTV3_DEMO} with the overrides: {message}"]
    assert not (tmp_path / "abl").exists()


def test_none_takes_the_keys_of_its_own_backbone_only():
    """PTv3's none takes point3drope's scale (the ablation's baseline); no PTv1 encoding reads it, so PTv1's
    none and rpe refuse it as before."""
    ptv3 = ["model.backbone=ptv3", "data.augment=pointcept_ptv3", "eval.protocol=ptv3", "model.pe=none"]
    assert load_config(None, [*ptv3, "model.point3drope_scale=1"]).model.point3drope_scale == 1.0
    for pe in ("none", "rpe"):
        with pytest.raises(ConfigError, match=rf"model.point3drope_scale=1.0: only model.pe=point3drope reads it, "
                                              rf"but model.pe={pe}; remove it$"):
            load_config(None, [f"model.pe={pe}", "model.point3drope_scale=1"])


def test_load_config_checks_the_encodings_keys_against_an_ablations_presets():
    """With ``presets`` the encodings' own keys are checked against each preset in place of ``model.pe``: the
    same file and override that ``model.pe=geope`` refuses load for presets that all read the key."""
    with pytest.raises(ConfigError, match=r"model.point3drope_scale=1.0: only model.pe=point3drope reads it"):
        load_config(PTV3_DEMO, ["model.point3drope_scale=1"])
    cfg = load_config(PTV3_DEMO, ["model.point3drope_scale=1"], presets=["none", "point3drope"])
    assert (cfg.model.pe, cfg.model.point3drope_scale) == ("geope", 1.0)
    with pytest.raises(ConfigError, match=r"read by --presets point3drope, but --presets geope would ignore it"):
        load_config(PTV3_DEMO, ["model.point3drope_scale=1"], presets=["geope", "point3drope"])


def test_rope_mixeds_initialisation_is_refused_beside_another_encoding():
    """model.rope_mixed_init is read by rope-mixed alone: model.pe=geope model.rope_mixed_init=axial built
    the same network as without it, without a word."""
    with pytest.raises(ConfigError) as err:
        load_config(None, ["model.pe=geope", "model.rope_mixed_init=axial"])
    assert str(err.value) == ("the defaults with the overrides: model.rope_mixed_init=axial: only "
                              "model.pe=rope-mixed reads it, but model.pe=geope; remove it")
    for pe in ("rope-mixed", "rpe", "none"):          # its reader, and the baselines without positions
        assert load_config(None, [f"model.pe={pe}", "model.rope_mixed_init=axial"]).model.rope_mixed_init == "axial"
    with pytest.raises(ConfigError, match=r"model.rope_mixed_init=axial: read by --presets rope-mixed, but "
                                          r"--presets geope would ignore it"):
        load_config(None, ["model.rope_mixed_init=axial"], presets=["geope", "rope-mixed"])


def test_a_runs_record_with_rope_mixeds_initialisation_beside_another_encoding_still_loads_and_resumes():
    """A run trained before the refusal, pe=geope with rope_mixed_init=axial (which it never read): evaluate and
    predict still rebuild its network, and a resume without the key is no difference."""
    from pointgeope.engine.config import config_from_dict, config_to_dict
    from pointgeope.engine.config_diff import config_differences

    record = config_to_dict(load_config(DEMO_CONFIG))
    record["model"]["rope_mixed_init"] = "axial"
    assert config_from_dict(record, where="last.pt's config").model.pe == "geope"
    assert config_differences(record, config_to_dict(load_config(DEMO_CONFIG))) == []
    record["model"]["pe"] = "rope-mixed"                           # where it was read, it still counts
    assert config_from_dict(record, where="x").model.rope_mixed_init == "axial"
    assert [k for k, _, _ in config_differences(record, config_to_dict(load_config(DEMO_CONFIG)))] == \
        ["model.pe", "model.rope_mixed_init"]


@pytest.mark.parametrize("pe", ["rpe", "none"])
def test_a_baseline_run_with_rope_mixeds_initialisation_resumes_with_its_own_config(pe):
    """An ablation's baseline without positions takes model.rope_mixed_init (``ablate --presets rpe,rope-mixed
    model.rope_mixed_init=axial``); its record must read as it was written, or its resume with the very config
    that trained it is refused (``model.rope_mixed_init: checkpoint random, now axial``)."""
    from pointgeope.engine.config import config_from_dict, config_to_dict
    from pointgeope.engine.config_diff import config_differences

    record = config_to_dict(load_config(DEMO_CONFIG, [f"model.pe={pe}", "model.rope_mixed_init=axial"]))
    assert config_differences(record, record) == []
    assert config_from_dict(record, where="last.pt's config").model.rope_mixed_init == "axial"
