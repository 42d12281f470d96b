"""Tests of pointgeope/engine/checkpoint.py: weights_only round trip, RNG states, atomicity, clear errors."""
from __future__ import annotations

import pickle
import random
import re

import numpy as np
import pytest
import torch

from pointgeope.engine.checkpoint import (
    CheckpointDenied,
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
)
from pointgeope.engine.config import Config, config_to_dict, load_config
from pointgeope.engine.config_diff import config_differences
from pointgeope.engine.rng_states import rng_state, set_rng_state
from pointgeope.engine.weights import load_model_state


def draws() -> tuple:
    return random.random(), float(np.random.rand()), float(torch.rand(1))


def test_round_trip_with_weights_only_and_rng_states(tmp_path):
    net = torch.nn.Linear(3, 4)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    net(torch.randn(5, 3)).sum().backward()
    opt.step()
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    state = rng_state()
    expected = draws()
    cfg = config_to_dict(Config())
    save_checkpoint(tmp_path / "last.pt", {"config": cfg, "model": net.state_dict(), "optimizer": opt.state_dict(),
                                           "rng": [state], "epoch": 3})
    # torch.load(weights_only=True) is what load_checkpoint uses; it must accept the whole file.
    raw = torch.load(tmp_path / "last.pt", weights_only=True)
    assert raw["epoch"] == 3
    ckpt = load_checkpoint(tmp_path / "last.pt", cfg)
    other = torch.nn.Linear(3, 4)
    load_model_state(other, ckpt, tmp_path / "last.pt")
    assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(), other.state_dict().values(), strict=True))
    assert ckpt["optimizer"]["state"][0]["momentum_buffer"].shape == (4, 3)
    draws()  # move every generator on
    set_rng_state(ckpt["rng"][0])
    assert draws() == expected


def test_corrupt_file_is_an_error_naming_it(tmp_path):
    path = tmp_path / "last.pt"
    save_checkpoint(path, {"model": {"w": torch.ones(1000)}})
    path.write_bytes(path.read_bytes()[:300])  # truncated
    with pytest.raises(CheckpointError, match=f"{re.escape(str(path))}: not a readable checkpoint"):
        load_checkpoint(path)
    with pytest.raises(CheckpointError, match="found nothing"):
        load_checkpoint(tmp_path / "none.pt")


def test_a_flipped_bit_in_a_tensors_bytes_is_an_error_naming_the_part(tmp_path):
    from tests.zip_bits import flip_bit

    path = tmp_path / "last.pt"
    save_checkpoint(path, {"model": {"w": torch.arange(1000, dtype=torch.float32)}})
    part = flip_bit(path, 4000, 401)        # the tensor's bytes: a low bit of w[100]
    assert torch.load(path, weights_only=True)["model"]["w"][100] != 100      # torch reads another weight
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(path)
    assert str(err.value) == (f"{path}: not a readable checkpoint (its part {part} does not match the "
                              "CRC-32 saved with it: its bytes changed after it was written); if it is a fold's "
                              "last.pt, delete it to start the fold again")
    assert load_checkpoint(path, mmap=True)["model"]["w"].shape == (1000,)   # a look at its keys: not read whole


def test_a_checkpoint_saved_without_crcs_is_read(tmp_path, monkeypatch):
    """torch.serialization.set_crc32_options(False) (torch 2.6 on) writes a CRC-32 of 0 for every part, a file
    torch.load reads as it is: it was refused as one whose bytes changed, and its advice was to delete it."""
    crc_options = getattr(torch.serialization, "set_crc32_options", None)
    if crc_options is None:
        pytest.skip("this torch writes every CRC-32")
    path, weights = tmp_path / "last.pt", torch.arange(1000, dtype=torch.float32)
    crc_options(False)
    try:
        save_checkpoint(path, {"model": {"w": weights}})
    finally:
        crc_options(True)
    assert load_checkpoint(path)["model"]["w"].equal(weights)


def test_a_file_that_cannot_be_read_again_is_still_one_checkpoint_error(tmp_path, monkeypatch):
    """torch.load fails because the file cannot be read (EIO, or the file removed meanwhile): the look at its
    first bytes fails too, and that OSError escaped in place of the CheckpointError. The error is quoted
    whole: in a deep folder (a long temporary path) its cut at 200 characters lost the file name."""
    path = tmp_path / ("deep_" * 40) / "last.pt"
    path.parent.mkdir()
    save_checkpoint(path, {"config": {}})

    def unreadable(f, *args, **kwargs):
        path.unlink()                                       # gone before the second look
        raise OSError(5, "Input/output error", str(f))

    monkeypatch.setattr(torch, "load", unreadable)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(path)
    assert str(err.value) == (f"{path}: not a readable checkpoint (OSError: [Errno 5] Input/output error: "
                              f"'{path}'); if it is a fold's last.pt, delete it to start the fold again")


def test_a_checkpoint_this_user_may_not_read_is_not_called_damaged(tmp_path, monkeypatch):
    """EACCES (another user's file, a folder without search permission) said "not a readable checkpoint ...;
    if it is a fold's last.pt, delete it to start the fold again": advice that throws a sound training away.
    It is the permission's line, naming what refused it (tests/test_denied.py checks the names with real
    mode bits; root reads anywhere, so the refusal is simulated here)."""
    path = tmp_path / "last.pt"
    save_checkpoint(path, {"config": {}})

    def denied(f, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(f))

    monkeypatch.setattr(torch, "load", denied)
    with pytest.raises(CheckpointDenied) as err:
        load_checkpoint(path)
    assert str(err.value).startswith(f"Permission denied: {path}")
    assert "delete" not in str(err.value) and str(err.value).endswith("or use another folder")


def test_a_pickle_refused_by_safe_loading_is_said_so_without_torchs_unsafe_advice(tmp_path):
    """torch's message ended "Re-running torch.load with weights_only set to False will likely succeed" (it
    would run the file's code); the error keeps what the file is and training's own advice only."""
    from fractions import Fraction

    path = tmp_path / "last.pt"
    torch.save({"x": Fraction(1, 3)}, path)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(path)
    assert str(err.value) == (f"{path}: not a readable checkpoint (a pickle that safe loading refuses "
                              "(UnpicklingError)); if it is a fold's last.pt, delete it to start the fold again")


def test_foreign_file_is_an_error(tmp_path):
    torch.save({"state_dict": {}}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="expected a pointgeope-checkpoint file"):
        load_checkpoint(tmp_path / "other.pt")


def test_other_config_is_an_error_listing_keys(tmp_path):
    saved = config_to_dict(Config())
    save_checkpoint(tmp_path / "last.pt", {"config": saved})
    now = config_to_dict(Config())
    now["optim"]["lr"] = 0.1
    now["data"]["root"] = "elsewhere"     # free: where the data lives
    now["eval"]["tta"]["flips"] = True    # free: how the final evaluation is done
    with pytest.raises(CheckpointError,
                       match=r"last\.pt: written with another config \(optim\.lr: checkpoint 0\.5, now 0\.1\)"):
        load_checkpoint(tmp_path / "last.pt", now)
    now["optim"]["lr"] = 0.5
    assert load_checkpoint(tmp_path / "last.pt", now)["config"] == saved
    assert config_differences(saved, now) == []


@pytest.mark.parametrize("key, value", [("data.hierarchy", "loader"), ("data.cache", True),
                                        ("train.cuda_graphs", True)])
def test_keys_of_speed_and_memory_only_may_differ(tmp_path, key, value):
    """Where the point hierarchy is built, the room cache and CUDA graphs give the same steps: a fold resumes,
    and evaluate or predict reads it, with them changed; a key beside them is still refused."""
    saved = config_to_dict(Config())
    save_checkpoint(tmp_path / "last.pt", {"config": saved})
    section, name = key.split(".")
    assert saved[section][name] != value
    now = config_to_dict(Config())
    now[section][name] = value
    assert config_differences(saved, now) == []
    assert load_checkpoint(tmp_path / "last.pt", now)["config"] == saved
    now["data"]["grid_size"] = 0.05                 # what the network trained on: refused
    with pytest.raises(CheckpointError, match=r"written with another config \(data\.grid_size: checkpoint 0\.04, "
                                              r"now 0\.05\)"):
        load_checkpoint(tmp_path / "last.pt", now)


def test_failed_save_keeps_the_previous_file(tmp_path):
    path = tmp_path / "last.pt"
    save_checkpoint(path, {"epoch": 1})
    with pytest.raises((AttributeError, pickle.PicklingError), match=r"[Cc]an't pickle"):   # (3.14: PicklingError)
        save_checkpoint(path, {"epoch": 2, "bad": lambda: None})  # not picklable
    assert load_checkpoint(path)["epoch"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]


def test_torchs_reason_is_quoted_to_its_first_sentence_never_mid_word():
    from pointgeope.engine.checkpoint import first_sentence

    assert first_sentence("PytorchStreamReader failed: no central directory. This is an internal miniz error, "
                          "which means...\nmore") == "PytorchStreamReader failed: no central directory"
    assert first_sentence("[Errno 22] Invalid argument") == "[Errno 22] Invalid argument"
    assert first_sentence("word " * 60) == ("word " * 40).strip() + "..."


def test_a_damaged_last_pt_leaves_best_pts_own_epochs_with_a_warning(tmp_path):
    from pointgeope.engine.checkpoint import fold_progress, unfinished_warning

    best, last = tmp_path / "best.pt", tmp_path / "last.pt"
    save_checkpoint(best, {"epoch": 2, "config": {"train": {"epochs": 5}}})
    save_checkpoint(last, {"epoch": 4, "config": {"train": {"epochs": 5}}})
    ckpt = load_checkpoint(best)
    assert fold_progress(best, ckpt) == (4, 5)                        # intact: last.pt's epochs
    last.write_bytes(last.read_bytes()[:200])
    logged = []
    assert fold_progress(best, ckpt, log=logged.append) == (2, 5)     # cut short: best.pt's own
    assert len(logged) == 1 and logged[0].startswith(f"warning: {last}: not a readable checkpoint (")
    assert logged[0].endswith("; best.pt is used (saved at epoch 2 of 5: how far the fold trained after it is unknown)")
    assert unfinished_warning(best, ckpt) == logged[0]


@pytest.mark.parametrize("entries, named", [
    ({"epoch": None, "config": {"train": {"epochs": 5}}}, "'epoch' entry to be a whole number >= 0, got None"),
    ({"epoch": "x", "config": {"train": {"epochs": 5}}}, "'epoch' entry to be a whole number >= 0, got 'x'"),
    ({"epoch": 2, "config": {"train": {"epochs": []}}},
     "'config.train.epochs' entry to be a whole number >= 0, got []"),
    ({"epoch": -1, "config": {"train": {"epochs": 5}}}, "'epoch' entry to be a whole number >= 0, got -1"),
])
def test_a_damaged_epoch_count_is_one_checkpoint_error(tmp_path, entries, named):
    """int() of a damaged entry (a checkpoint whose CRCs are intact: rewritten by a tool) was a TypeError or
    ValueError traceback in predict and evaluate. An intact best.pt beside such a last.pt is used with its own
    epochs and a warning, as beside a last.pt cut short (it was refused for last.pt's entry)."""
    from pointgeope.engine.checkpoint import fold_progress

    save_checkpoint(tmp_path / "last.pt", entries)
    message = (f"{tmp_path / 'last.pt'}: damaged checkpoint: expected its {named}; use the run's own "
               "checkpoint")
    with pytest.raises(CheckpointError, match=f"^{re.escape(message)}$"):
        fold_progress(tmp_path / "last.pt", load_checkpoint(tmp_path / "last.pt"))
    save_checkpoint(tmp_path / "best.pt", {"epoch": 1, "config": {"train": {"epochs": 5}}})
    logged = []
    assert fold_progress(tmp_path / "best.pt", load_checkpoint(tmp_path / "best.pt"), log=logged.append) == (1, 5)
    warning = (f"warning: {message}; best.pt is used (saved at epoch 1 of 5: how far the fold trained after it is "
               "unknown)")
    assert logged == [warning]


def test_a_predict_entry_that_is_no_mapping_is_one_checkpoint_error(tmp_path):
    """set() of an int 'predict' entry was a TypeError traceback in predict."""
    from pointgeope.engine.prediction_info import checkpoint_prediction_info

    ckpt = {"config": config_to_dict(Config()), "predict": 7}
    with pytest.raises(CheckpointError, match=r"^c\.pt: damaged checkpoint: expected its 'predict' entry to be a "
                                              r"mapping, got 7; use the run's own checkpoint$"):
        checkpoint_prediction_info(ckpt, "c.pt")


def test_a_folds_config_without_config_yaml_skips_a_last_pt_cut_short(tmp_path):
    """fold_config read only the first checkpoint there: a last.pt cut short stopped it although an intact
    best.pt records the same training's config; neither readable: the error of the last one tried, best.pt's."""
    from pointgeope.engine.checkpoint import fold_config

    cfg = load_config(None, ["train.epochs=3"])
    save_checkpoint(tmp_path / "best.pt", {"config": config_to_dict(cfg)})
    (tmp_path / "last.pt").write_bytes(b"cut short")
    said = []
    assert fold_config(tmp_path, log=said.append) == cfg
    assert said == [f"{tmp_path / 'config.yaml'}: not there; using the config that best.pt carries (it trained "
                    "the fold)"]
    (tmp_path / "best.pt").write_bytes(b"cut short too")
    with pytest.raises(CheckpointError, match=r"best\.pt: not a readable checkpoint"):
        fold_config(tmp_path, log=said.append)


@pytest.mark.parametrize("best", [0.625, np.float64(0.625)], ids=["float", "numpy"])
def test_a_pointcept_checkpoint_is_named_with_the_api_that_loads_it(tmp_path, best):
    """Pointcept's trainer saves its segmentor's weights under 'state_dict' (DDP's module. prefix) and the best
    mean IoU as a numpy float, which weights_only loading refuses: either way one line that says what the file
    is and how to load it, for training's, evaluate's and predict's loads alike."""
    from pointgeope.engine.predict_model import DAMAGED_MODEL, UNREADABLE_MODEL

    path = tmp_path / "model_best.pth"
    torch.save({"epoch": 100, "state_dict": {"module.backbone.embedding.stem.conv.weight": torch.ones(2, 3),
                                             "module.seg_head.weight": torch.ones(13, 2)},
                "optimizer": {"state": {}, "param_groups": []}, "best_metric_value": best}, path)
    for kwargs in ({}, dict(unreadable=UNREADABLE_MODEL, damaged_file=DAMAGED_MODEL)):
        with pytest.raises(CheckpointError) as err:
            load_checkpoint(path, **kwargs)
        line = str(err.value)
        assert line.startswith(f"{path}: a checkpoint of Pointcept's trainer") and "\n" not in line
        assert "PTv3Segmentor.load_state_dict(pointcept_state_dict(path))" in line and "docs/ptv3.md" in line


def test_a_state_dict_of_other_keys_is_not_taken_for_pointcepts(tmp_path):
    torch.save({"state_dict": {"conv1.weight": torch.ones(1)}, "best": np.float64(1)}, tmp_path / "a.pt")
    torch.save({"state_dict": {"conv1.weight": torch.ones(1)}}, tmp_path / "b.pt")
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        load_checkpoint(tmp_path / "a.pt")
    with pytest.raises(CheckpointError, match="expected a pointgeope-checkpoint file"):
        load_checkpoint(tmp_path / "b.pt")


def test_a_changed_bit_in_a_parts_directory_entry_is_an_error_naming_the_part(tmp_path):
    """A flipped bit in a part's central directory entry: its compression method stored -> deflated (0 -> 8),
    which torch.load reads as other weights without a word. The CRC check, reading the part as its entry says, ended in
    zlib's 'Error -3 while decompressing data' as a traceback; now the one line of a part that does not match, as
    for a flipped bit in its bytes."""
    import struct
    import zipfile

    path, weights = tmp_path / "last.pt", torch.arange(1000, dtype=torch.float32)
    save_checkpoint(path, {"model": {"w": weights}})
    with zipfile.ZipFile(path) as archive:
        part = next(i for i in archive.infolist() if i.file_size == 4000)   # the tensor's bytes
    data = bytearray(path.read_bytes())
    entry = data.index(b"PK\x01\x02")                                       # the central directory's entries
    while data[entry + 46:entry + 46 + len(part.filename)] != part.filename.encode():
        entry = data.index(b"PK\x01\x02", entry + 4)
    assert struct.unpack("<H", data[entry + 10:entry + 12]) == (zipfile.ZIP_STORED,)
    data[entry + 10] ^= zipfile.ZIP_DEFLATED                                   # one bit: 0 -> 8
    path.write_bytes(bytes(data))
    # What torch.load reads from it is not asserted: its inflate of the stored bytes fails without a word and the
    # part's storage is returned unfilled, so it holds whatever the allocator hands out (zeros, other numbers,
    # or the stored weights an earlier tensor of the same bytes left there: CI twice). It varies from one call
    # to the next in one process, no setting changed; the refusal below reads the parts itself
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(path)
    assert str(err.value) == (f"{path}: not a readable checkpoint (its part {part.filename} does not match the "
                              "CRC-32 saved with it: its bytes changed after it was written); if it is a fold's "
                              "last.pt, delete it to start the fold again")


def test_a_damaged_setting_of_a_saved_config_is_said_on_one_bounded_line(tmp_path):
    """A fold's metrics.json or config edited into a newline and a thousand characters: the note of a complete
    fold's untested eval values (train's log, ablate's report.md) and the differences of a stale trial or a refused
    resume say it as one bounded line, marked. Before: the newline verbatim in the note (a second list item of
    the ablation's report.md) and the thousand characters in the differences."""
    from pointgeope.engine.checkpoint import untested_eval
    from pointgeope.engine.config import Config, config_to_dict
    from pointgeope.engine.config_diff import describe_differences

    today = config_to_dict(Config())     # a record of today's keys (one without eval.class_mean is of before it)
    note = untested_eval(tmp_path / "area_1", {"eval": {**today["eval"], "max_fragments": "2\n- injected"}}, today)
    assert note.startswith("its test did not use this command's eval.max_fragments=null (it used '2\\n- injected' "
                           "(looks damaged)), which train does not apply to a complete fold: pointgeope evaluate ")
    assert "\n" not in note
    said = describe_differences([("model.pe", "rpe\n" + "x" * 1000, "geope"), ("model.planes", [1, 2], [3])],
                                "it used")
    assert said == ("model.pe: it used 'rpe\\n" + "x" * 55 + "... (1,007 characters) (looks damaged), now 'geope'; "
                    "model.planes: it used [1, 2], now [3]")
