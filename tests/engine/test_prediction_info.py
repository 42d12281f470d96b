"""What predict needs from a checkpoint: its "predict" entry, written and read back checked
(pointgeope/engine/prediction_info.py)."""
from __future__ import annotations

import json

import pytest

from pointgeope.constants import CLASS_NAMES, PALETTE, class_names, class_palette
from pointgeope.engine.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from pointgeope.engine.config import Config, config_to_dict, load_config
from pointgeope.engine.prediction_info import checkpoint_prediction_info, prediction_metadata


def test_prediction_metadata_loads_with_weights_only(tmp_path):
    cfg = config_to_dict(load_config(None, ["data.color=false", "data.height=true", "model.in_channels=4",
                                            "data.grid_size=0.05"]))
    save_checkpoint(tmp_path / "m.pt", {"config": cfg, "predict": prediction_metadata(cfg, 0.012)})
    info = checkpoint_prediction_info(load_checkpoint(tmp_path / "m.pt"), tmp_path / "m.pt")
    assert info == {"class_names": list(CLASS_NAMES), "palette": [list(c) for c in PALETTE], "grid_size": 0.05,
                    "features": ["xyz", "height"], "in_channels": 4, "spacing": 0.012}
    # a checkpoint written before the "predict" entry: derived from its config, without the spacing
    old = checkpoint_prediction_info({"config": config_to_dict(Config())}, "old.pt")
    assert old["features"] == ["rgb", "xyz"] and old["spacing"] is None and old["in_channels"] == 6
    with pytest.raises(CheckpointError, match=r"^x\.pt: expected a model checkpoint with a config"):
        checkpoint_prediction_info({"model": {}}, "x.pt")


@pytest.mark.parametrize("edit, got", [
    ({"class_names": ["a"] * 5}, "5 class names"),            # an IndexError in predict's summary
    ({"palette": [[1, 2, 3]]}, "1 colour"),                    # an IndexError in the PLY writer, reported as a bug
    ({"palette": [[1, 2, 300]] * 13}, "the colour [1, 2, 300]"),  # wrapped to 44 in a uint8 colour
    ({"palette": [[1, 2]] * 13}, "the colour [1, 2]"),
    ({"class_names": None}, "class_names None"),
])
def test_a_predict_entry_that_does_not_fit_the_network_is_refused(edit, got):
    cfg = config_to_dict(Config())
    info = {**prediction_metadata(cfg), **edit}
    with pytest.raises(CheckpointError) as err:
        checkpoint_prediction_info({"config": cfg, "predict": info}, "m.pt")
    assert str(err.value) == ("m.pt: damaged checkpoint: expected its 'predict' entry to hold 13 class names and 13 "
                              f"[r, g, b] colours of 0..255 (model.num_classes), got {got}; use the run's own "
                              "checkpoint")
    assert checkpoint_prediction_info({"config": cfg, "predict": prediction_metadata(cfg)}, "m.pt")["palette"][0] == \
        list(PALETTE[0])


def test_a_network_of_more_classes_than_s3dis_gets_a_name_and_a_colour_for_each():
    """model.num_classes is accepted up to 254 and the data check takes labels below it (labels of one's
    own): each class past S3DIS's 13 is named class_K and coloured apart from every other class."""
    cfg = config_to_dict(load_config(None, ["model.num_classes=15"]))
    info = checkpoint_prediction_info({"config": cfg, "predict": prediction_metadata(cfg, 0.02)}, "m.pt")
    assert info["class_names"] == [*CLASS_NAMES, "class_13", "class_14"]
    assert info["palette"][:13] == [list(c) for c in PALETTE]
    assert info["palette"][13] == [217, 76, 76]             # hue 0, saturation 0.65, value 0.85 (documented)
    wide = class_palette(255)
    assert len({tuple(c) for c in wide}) == 255              # no two classes alike
    assert all(type(v) is int and 0 <= v <= 255 for c in wide for v in c)
    assert class_palette(15) == wide[:15] and class_names(5) == list(CLASS_NAMES[:5])


def test_an_entry_written_with_13_names_for_more_classes_is_padded_the_same_way():
    """Checkpoints of such a network written before it named the others hold S3DIS's 13 names and colours:
    predict reads them padded as they are written now; an entry of other names is still damaged."""
    cfg = config_to_dict(load_config(None, ["model.num_classes=15"]))
    old = {**prediction_metadata(cfg), "class_names": list(CLASS_NAMES), "palette": [list(c) for c in PALETTE]}
    info = checkpoint_prediction_info({"config": cfg, "predict": old}, "m.pt")
    assert info == prediction_metadata(cfg)
    other = {**old, "class_names": ["room"] * 13}
    with pytest.raises(CheckpointError, match=r"^m\.pt: damaged checkpoint: expected its 'predict' entry to hold 15 "
                                              r"class names .* got 13 class names; use the run's own checkpoint$"):
        checkpoint_prediction_info({"config": cfg, "predict": other}, "m.pt")


@pytest.mark.slow
def test_a_run_of_more_classes_than_s3dis_trains_evaluates_and_predicts(two_folds, tmp_path):
    """predict called such a run's own checkpoint damaged (13 names for 15 classes)."""
    import numpy as np

    from pointgeope.cli import main as cli
    from pointgeope.h5 import list_rooms
    from pointgeope.h5_predictions import read_predictions
    from tests.engine.conftest import train_fold

    assert train_fold(two_folds, tmp_path / "run", "model.num_classes=15", "train.epochs=1") == 0
    fold = tmp_path / "run" / "area_1"
    assert json.loads((fold / "metrics.json").read_text())["class_names"] == [*CLASS_NAMES, "class_13", "class_14"]
    assert cli(["predict", str(fold), str(two_folds / "Area_1.h5"), "--out", str(tmp_path / "o")]) == 0
    for room in list_rooms(two_folds / "Area_1.h5"):
        np.testing.assert_array_equal(np.load(tmp_path / "o" / "Area_1" / f"{room}_pred.npy"),
                                      read_predictions(fold / "predictions" / "Area_1.h5", room))
        assert (tmp_path / "o" / "Area_1" / f"{room}_pred.ply").is_file()
    # its predictions name the 15 classes: the viewer takes labels 13 and 14 (a 1-epoch model on labels 0..12
    # predicts none: a copy of its file gets some) and draws them in their palette colours; the report
    # tabulates them (both refused or drew them black)
    import shutil

    import h5py

    from pointgeope.h5_predictions import predictions_attrs
    from pointgeope.viz.colors import label_colors
    from tests.viz.test_ply import _read_ply

    preds = fold / "predictions" / "Area_1.h5"
    assert predictions_attrs(preds, "class_names") == [[*CLASS_NAMES, "class_13", "class_14"]]
    room = sorted(list_rooms(two_folds / "Area_1.h5"))[0]
    more = shutil.copy(preds, tmp_path / "more.h5")
    with h5py.File(more, "a") as f:
        f[room]["pred"][:2] = [13, 14]
    ply = tmp_path / "pred.ply"
    assert cli(["viz", str(two_folds / "Area_1.h5"), "--room", room, "--pred", str(more), "--mode", "pred",
                "--max-points", "0", "--ply", str(ply)]) == 0
    v = _read_ply(ply)[1]
    assert list(v["pred"][:2]) == [13, 14]
    np.testing.assert_array_equal(np.stack([v["red"], v["green"], v["blue"]], 1), label_colors(v["pred"], 15))
    assert cli(["report", str(tmp_path / "run"), "--out", str(tmp_path / "report")]) == 0
    assert json.loads((tmp_path / "report" / "report.json").read_text())["class_names"][-1] == "class_14"


@pytest.mark.parametrize("edit, got", [
    ({"features": [{"device": "cuda"}]}, "features to be a list of rgb, xyz, normal, height, got [{'device': 'cuda'}]"),
    ({"features": "rgbxyz"}, "features to be a list of rgb, xyz, normal, height, got 'rgbxyz'"),
    ({"features": []}, "features to be a list of rgb, xyz, normal, height, got []"),
    ({"features": ["xyz"]}, "in_channels to be the width of its features [xyz], got 6"),  # a colour network
    ({"in_channels": "6"}, "in_channels to be the width of its features [rgb | xyz], got '6'"),
    ({"grid_size": "x"}, "grid_size to be a number of metres > 0, got 'x'"),
    ({"grid_size": 0.0}, "grid_size to be a number of metres > 0, got 0.0"),
    ({"spacing": "x"}, "spacing to be a number of metres >= 0 or null, got 'x'"),
    ({"spacing": float("nan")}, "spacing to be a number of metres >= 0 or null, got nan"),
])
def test_a_predict_entry_with_damaged_values_is_refused(edit, got):
    """The entry's features, in_channels, grid_size and spacing (its CRCs intact, rewritten by a tool):
    features [{...}] was "TypeError: sequence item 0: expected str instance, dict found" in predict's first
    line, a spacing 'x' a TypeError in the scale check, and features ["xyz"] of a colour network let a scan
    without colour through its colour check."""
    cfg = config_to_dict(Config())
    info = {**prediction_metadata(cfg, 0.02), **edit}
    with pytest.raises(CheckpointError) as err:
        checkpoint_prediction_info({"config": cfg, "predict": info}, "m.pt")
    assert str(err.value) == (f"m.pt: damaged checkpoint: expected its 'predict' entry's {got}; use the run's own "
                              "checkpoint")
    assert checkpoint_prediction_info({"config": cfg, "predict": {**info, **prediction_metadata(cfg, 0.02)}}, "m.pt")
