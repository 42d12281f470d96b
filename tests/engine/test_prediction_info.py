"""What predict needs from a checkpoint: its "predict" entry, written and read back checked
(pointgeope/engine/prediction_info.py)."""
from __future__ import annotations

import pytest

from pointgeope.constants import CLASS_NAMES, PALETTE
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
    with pytest.raises(CheckpointError, match="^x.pt: expected a model checkpoint with a config"):
        checkpoint_prediction_info({"model": {}}, "x.pt")


@pytest.mark.parametrize("edit, got", [
    ({"class_names": ["a"] * 5}, "5 class names"),            # an IndexError in predict's summary
    ({"palette": [[1, 2, 3]]}, "1 colours"),                  # an IndexError in the PLY writer, reported as a bug
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
                              f"[r, g, b] colours of 0..255 (model.num_classes), got {got}; use the run's own checkpoint")
    assert checkpoint_prediction_info({"config": cfg, "predict": prediction_metadata(cfg)}, "m.pt")["palette"][0] == \
        list(PALETTE[0])
