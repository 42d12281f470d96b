"""Tests of pointgeope/viz/show.py's choose_mode: the modes it refuses are those of colors.missing_modes (the
rule's one owner), each with the reason that owner gives, and its default is one the room can draw."""
from __future__ import annotations

import itertools
from types import SimpleNamespace

import numpy as np
import pytest

from pointgeope.viz import VizError
from pointgeope.viz.colors import MODES, NEEDS_PRED, missing_modes
from pointgeope.viz.show import choose_mode


@pytest.mark.parametrize("labelled, has_pred", list(itertools.product((True, False), repeat=2)))
def test_choose_mode_refuses_what_missing_modes_names_and_says_its_reason(labelled, has_pred):
    room = SimpleNamespace(name="office_1", pred=np.zeros(3, dtype=np.uint8) if has_pred else None)
    missing = missing_modes(labelled, has_pred)
    for mode in MODES:
        if mode not in missing:
            assert choose_mode(mode, room, "Area_1.h5", labelled) == mode
            continue
        with pytest.raises(VizError) as err:
            choose_mode(mode, room, "Area_1.h5", labelled)
        said = str(err.value)
        assert said.startswith(f"--mode {mode}")
        if missing[mode] == NEEDS_PRED:                    # e.g. error with labels but no predictions
            assert "needs --pred" in said and "no ground truth" not in said
        else:                                              # error with neither: the labels are what it lacks
            assert "has no ground truth" in said and "needs --pred" not in said
    default = choose_mode(None, room, "Area_1.h5", labelled)
    assert default not in missing and default == ("gt" if labelled else "pred" if has_pred else "rgb")
