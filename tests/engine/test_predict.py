"""Tests of pointgeope/engine/predict.py and `pointgeope predict`, what it computes: labels equal to
evaluate's for the same room and seed, input order kept through every input format, probabilities, the
fragment cap and overrides, foreign checkpoints, geometry-only models and a 2M-point scan."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from pointgeope.cli import main as cli
from pointgeope.engine.distributed import DeviceError
from pointgeope.engine.predict import load_predictor, predict_scan
from pointgeope.engine.probabilities import vote_probabilities
from pointgeope.h5 import list_rooms, read_room
from pointgeope.h5_predictions import read_predictions
from pointgeope.scans.scan import Scan
from pointgeope.scans.sources import ScanRef, read_scan
from tests.engine.conftest import one_line, train_fold
from tests.engine.predict_helpers import colour_predictor, write_scan
from tests.engine.test_evaluate import expected_class


def test_labels_equal_evaluate_for_prepared_and_raw_rooms(tiny_run, two_folds, tiny_root, tmp_path):
    evaluated = tiny_run / "predictions" / "Area_1.h5"
    raw = tiny_root.parent / "raw" / "Area_1"
    rooms = list(list_rooms(two_folds / "Area_1.h5"))
    assert cli(["predict", str(tiny_run), str(two_folds / "Area_1.h5"), *map(str, (raw / r for r in rooms)),
                "--out", str(tmp_path)]) == 0
    for room in rooms:
        expected = read_predictions(evaluated, room)
        np.testing.assert_array_equal(np.load(tmp_path / "Area_1" / f"{room}_pred.npy"), expected)
        np.testing.assert_array_equal(np.load(tmp_path / f"{room}_pred.npy"), expected)  # raw room folder
        assert expected.shape == (list_rooms(two_folds / "Area_1.h5")[room],)      # every point of the room


@pytest.mark.parametrize("suffix", [".ply", ".las", ".txt", ".csv", ".npy"])
def test_every_input_format_keeps_the_input_order(tmp_path, suffix):
    rng = np.random.default_rng(7)
    n = 2500
    coord = np.round(rng.random((n, 3)) * [4.0, 3.0, 2.5], 3)
    coord[: n // 50] = coord[0]  # a clump of 50: 50 fragments, points far from their file position
    color = rng.integers(0, 256, (n, 3)).astype(np.uint8)
    write_scan(tmp_path / f"scan{suffix}", coord, color)
    scan = read_scan(ScanRef(tmp_path / f"scan{suffix}", suffix.strip(".").replace("txt", "text")
                             .replace("csv", "text"), "scan"))
    pred, scores, votes, _ = predict_scan(colour_predictor(), scan)
    assert (votes >= 1).all() and (votes > 1).any()   # crops overlap: several predictions were voted
    np.testing.assert_array_equal(pred, expected_class(color))


def test_a_fortran_order_scan_gets_the_labels_of_the_same_points_in_c_order(tiny_run, two_folds, tmp_path):
    """numpy.save keeps a Fortran-order array so; its points gave other labels (the network's input kept
    the layout, and a later step read it as C order)."""
    room = read_room(two_folds / "Area_1.h5", "hallway_1")
    np.save(tmp_path / "hallway_1.npy", np.asfortranarray(np.c_[room["coord"].astype(np.float64), room["color"]]))
    assert not np.load(tmp_path / "hallway_1.npy").flags.c_contiguous
    assert cli(["predict", str(tiny_run), str(tmp_path / "hallway_1.npy"), "--out", str(tmp_path / "o")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "o" / "hallway_1_pred.npy"),
                                  read_predictions(tiny_run / "predictions" / "Area_1.h5", "hallway_1"))


def test_vote_probabilities_of_summed_softmax_and_of_summed_logits():
    rng = np.random.default_rng(0)
    votes = rng.integers(1, 4, 50)
    logits = [rng.normal(size=(50, 13)) * 3 for _ in range(3)]
    summed = sum(z * (votes > k)[:, None] for k, z in enumerate(logits))   # point i voted votes[i] times
    mean_logit = summed / votes[:, None]
    expected = torch.softmax(torch.from_numpy(mean_logit), 1).numpy()
    probs = vote_probabilities(summed.astype(np.float32), votes, "logits", chunk=7)
    assert probs.dtype == np.float32 and probs.shape == (50, 13)
    np.testing.assert_allclose(probs, expected, atol=1e-6)
    softmaxes = [torch.softmax(torch.from_numpy(z), 1).numpy() for z in logits]
    summed_p = sum(p * (votes > k)[:, None] for k, p in enumerate(softmaxes))
    np.testing.assert_allclose(vote_probabilities(summed_p, votes, "softmax", chunk=16),
                               summed_p / votes[:, None], atol=1e-6)   # the mean probability
    np.testing.assert_array_equal(vote_probabilities(summed, votes, "logits").argmax(1), summed.argmax(1))


@pytest.mark.parametrize("vote", ["logits", "softmax"])
def test_the_argmax_of_the_probabilities_is_the_label_at_near_ties(vote):
    """float16 probabilities rounded the two top classes of a near tie to one value, so their argmax took the
    smaller class where the label (the scores' argmax) was the larger: 2.0 against 2.0003 gave 0.4998 twice."""
    rng = np.random.default_rng(1)
    scores = (rng.normal(size=(5000, 13)) * 0.05).astype(np.float32)
    scores[:, 1] = scores[:, 0] + np.float32(3e-4)                 # class 1 leads class 0 by a hair
    if vote == "softmax":
        scores = np.exp(scores) / np.exp(scores).sum(1, keepdims=True)
    probs = vote_probabilities(scores, np.ones(5000, np.int64), vote)
    np.testing.assert_array_equal(probs.argmax(1), scores.argmax(1))
    np.testing.assert_allclose(probs.astype(np.float64).sum(1), 1.0, atol=1e-6)


def test_probabilities_output_matches_the_labels(tiny_run, two_folds, tmp_path):
    area = two_folds / "Area_1.h5"
    assert cli(["predict", str(tiny_run / "last.pt"), str(area), "--out", str(tmp_path), "--probabilities",
                "--format", "npy"]) == 0
    for room in list_rooms(area):
        p = np.load(tmp_path / "Area_1" / f"{room}_probs.npy")
        assert p.dtype == np.float32 and p.shape[1] == 13
        np.testing.assert_allclose(p.astype(np.float64).sum(1), 1.0, atol=1e-6)
        pred = np.load(tmp_path / "Area_1" / f"{room}_pred.npy")
        np.testing.assert_array_equal(p.argmax(1), pred)


def test_foreign_checkpoints_are_one_line_errors(tiny_run, tmp_path, capsys):
    np.save(tmp_path / "s.npy", np.zeros((5, 6)))
    torch.save({"state_dict": {"w": torch.zeros(2)}}, tmp_path / "other.pt")
    (tmp_path / "text.pt").write_text("not torch")
    for model, words in (("other.pt", "expected a pointgeope-checkpoint file"),
                         ("text.pt", "expected a checkpoint (.pt) or a fold folder"), ("none.pt", "found nothing")):
        assert cli(["predict", str(tmp_path / model), str(tmp_path / "s.npy"), "--out", str(tmp_path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and words in err[0] and str(tmp_path / model) in err[0]
    if torch.cuda.is_available():
        assert load_predictor(tiny_run, device="cuda").device.type == "cuda"
    else:
        with pytest.raises(DeviceError, match="--device cuda but CUDA is not available here"):
            load_predictor(tiny_run, device="cuda")


def test_a_file_that_is_no_checkpoint_as_model_is_named_by_its_kind(tiny_root, tmp_path, capsys):
    """MODEL and INPUT swapped (an area file given as the model) got training's advice, "delete it to start
    the fold again", and torch's to load it with weights_only=False (which runs the file's code); predict
    names its model argument and the kind of file now."""
    from fractions import Fraction

    np.save(tmp_path / "s.npy", np.zeros((5, 6)))
    (tmp_path / "text.pt").write_text("not torch")
    torch.save({"x": Fraction(1, 3)}, tmp_path / "pickle.pt")   # a class weights_only loading refuses
    for model, kind in ((tiny_root / "Area_1.h5", "an HDF5 file"), (tmp_path / "s.npy", "a NumPy .npy file"),
                        (tmp_path / "text.pt", "a text file"),
                        (tmp_path / "pickle.pt", "a pickle that safe loading refuses (UnpicklingError)")):
        line = one_line(capsys, 2, ["predict", str(model), str(tmp_path / "s.npy"), "--out", str(tmp_path / "o")])
        assert line == (f"pointgeope predict: error: MODEL {model}: expected a checkpoint (.pt) or a fold folder "
                        f"RUN/area_K, got {kind}")


def test_a_damaged_checkpoint_as_model_is_said_damaged_with_what_to_do(tiny_run, tmp_path, capsys):
    """A checkpoint cut short (a copy interrupted) was told it was no checkpoint, with torch's text cut off
    mid-sentence and no fix; now one full line: damaged, torch's first sentence, what to do."""
    np.save(tmp_path / "s.npy", np.zeros((5, 6)))
    cut = tmp_path / "cut.pt"
    cut.write_bytes((tiny_run / "best.pt").read_bytes()[:100_000])
    line = one_line(capsys, 2, ["predict", str(cut), str(tmp_path / "s.npy"), "--out", str(tmp_path / "o")])
    assert line == (f"pointgeope predict: error: MODEL {cut}: a damaged checkpoint, torch cannot read it "
                    "(RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory; "
                    "cut short or corrupted, e.g. by an interrupted copy); copy it again, or give another checkpoint "
                    "of its fold (RUN/area_K/best.pt or last.pt)")


def test_a_damaged_checkpoint_in_a_fold_folder_is_said_damaged(tiny_run, tmp_path, capsys):
    """MODEL given right, a fold folder, whose last.pt is damaged: it was told "expected a checkpoint (.pt) or a
    fold folder", which is what it gave; it gets training's words, the file named and what to do."""
    import shutil

    fold = tmp_path / "run" / "area_1"
    shutil.copytree(tiny_run, fold)
    (fold / "last.pt").write_bytes((fold / "last.pt").read_bytes()[:100])
    np.save(tmp_path / "s.npy", np.zeros((5, 6)))
    line = one_line(capsys, 2, ["predict", str(fold), str(tmp_path / "s.npy"), "--out", str(tmp_path / "o")])
    assert line.startswith(f"pointgeope predict: error: {fold / 'last.pt'}: not a readable checkpoint (RuntimeError: ")
    assert line.endswith("; if it is a fold's last.pt, delete it to start the fold again") and "MODEL" not in line


def test_fragments_are_capped_by_default_and_by_option_or_override(tiny_run, tmp_path, capsys):
    """A scan of 100 points and 1,501 copies of one point: 1,501 fragments, one pass over the scan each
    (3,000 copies took 77 s, the full S3DIS configs having eval.max_fragments: null). predict now takes
    --max-fragments and evaluate's overrides, and without either caps a config's null at 100, in one
    warning; an override of a key the network was trained with, or of one predict has no use for, is refused."""
    rng = np.random.default_rng(5)
    scan = np.c_[rng.random((100, 3)) * [3, 3, 2], rng.integers(0, 256, (100, 3))]
    np.save(tmp_path / "dense.npy", np.r_[scan, np.repeat([[3.55, 3.55, 2.05, 9, 9, 9]], 1501, axis=0)])
    base = ["predict", str(tiny_run), str(tmp_path / "dense.npy"), "--out", str(tmp_path / "o"), "--format", "npy"]
    assert cli(base + ["eval.max_fragments=null"]) == 0      # the s3dis configs' value: predict's default cap
    err = capsys.readouterr().err.splitlines()
    assert err == [f"warning: {tmp_path / 'dense.npy'}: its densest 0.1 m voxel holds 1,501 points: predicted the "
                   "first 100 of its 1,501 fragments (predict's default cap; a point they miss takes its voxel's "
                   "votes); --max-fragments N or all to choose"]
    assert cli(base + ["eval.max_fragments=null", "--max-fragments", "3"]) == 0
    assert capsys.readouterr().err == ""                       # the user's choice: no warning
    assert cli(base + ["eval.max_fragments=3"]) == 0           # an override of evaluate: the run's cap
    assert capsys.readouterr().err == ""
    for refused in ("model.planes=[16, 32]", "train.device=cuda", "data.root=elsewhere"):   # trained, or no effect
        line = one_line(capsys, 2, base + [refused])
        assert line == (f"pointgeope predict: error: override {refused!r}: predict takes overrides of eval.* and "
                        "of data.hierarchy, train.threads, not of what the network was trained with (nor of the keys "
                        "that set where and how training runs: --device chooses the device)")
    with pytest.raises(SystemExit):                            # argparse: N >= 1 or all
        cli(base + ["--max-fragments", "0"])
    assert "--max-fragments: expected a number of fragments >= 1 or all, got '0'" in capsys.readouterr().err


def test_the_runs_own_fragment_cap_warns_when_it_cuts_a_scan(tiny_run, tmp_path, capsys):
    """configs/demo.yaml sets eval.max_fragments: 2, and a scan with a dense voxel was voted over 2 of its
    fragments without a word (only predict's default cap warned); any cap the user did not choose warns now."""
    ckpt = torch.load(tiny_run / "last.pt", weights_only=True)
    ckpt["config"]["eval"]["max_fragments"] = 2
    torch.save(ckpt, tmp_path / "capped.pt")
    rng = np.random.default_rng(5)
    scan = np.c_[rng.random((100, 3)) * [3, 3, 2], rng.integers(0, 256, (100, 3))]
    np.save(tmp_path / "dense.npy", np.r_[scan, np.repeat([[3.55, 3.55, 2.05, 9, 9, 9]], 20, axis=0)])
    base = ["predict", str(tmp_path / "capped.pt"), str(tmp_path / "dense.npy"), "--out", str(tmp_path / "o")]
    assert cli(base) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"warning: {tmp_path / 'dense.npy'}: its densest 0.1 m voxel holds 20 points: predicted the first 2 of its "
        "20 fragments (the run's eval.max_fragments; a point they miss takes its voxel's votes); --max-fragments "
        "N or all to choose"]
    for chosen in (["--max-fragments", "2"], ["eval.max_fragments=2"], ["--max-fragments", "all"]):
        assert cli(base + chosen) == 0
        assert capsys.readouterr().err == ""                   # the user's choice: no warning


@pytest.mark.slow
def test_geometry_only_model_trains_and_predicts_a_scan_without_colour(two_folds, tmp_path):
    assert train_fold(two_folds, tmp_path / "run", "data.color=false", "model.in_channels=3", "train.epochs=1") == 0
    run = tmp_path / "run" / "area_1"
    predictor = load_predictor(run)
    assert predictor.info["features"] == ["xyz"] and not predictor.uses_color
    room = read_room(two_folds / "Area_1.h5", "office_1")
    np.save(tmp_path / "office_1.npy", room["coord"])                 # (N, 3): no colour
    assert cli(["predict", str(run), str(tmp_path / "office_1.npy"), "--out", str(tmp_path / "o")]) == 0
    pred = np.load(tmp_path / "o" / "office_1_pred.npy")
    np.testing.assert_array_equal(pred, read_predictions(run / "predictions" / "Area_1.h5", "office_1"))
    # the colour of a coloured scan is not used by this model: same labels with random colours
    scan = Scan("office_1", "c", room["coord"].astype(np.float64),
                np.random.default_rng(0).integers(0, 256, (len(pred), 3)).astype(np.uint8))
    np.testing.assert_array_equal(predict_scan(predictor, scan)[0], pred)


@pytest.mark.slow
def test_a_large_scan_is_predicted_in_bounded_pieces():
    """Every one of 400k points gets its own label while no forward pass sees more than
    max(voxel_max, batch_points) points; the stand-in network (ColourClassifier) keeps this test fast and
    exact. The peak memory of the real network against the scan size is measured in bench/bench_predict.py
    (0.25M-2M points; this test took 2M, five times the time for no other piece: the fragments are cropped
    and batched alike)."""
    rng = np.random.default_rng(0)
    n = 400_000
    coord = rng.random((n, 3)) * [30.0, 10.0, 0.0]   # a 30 x 10 m floor: 30k voxels of 0.1 m, ~13 points each
    color = rng.integers(0, 256, (n, 3)).astype(np.uint8)
    predictor = colour_predictor(voxel_max=20_000, batch_points=40_000)
    pred, scores, votes, _ = predict_scan(predictor, Scan("big", "big.npy", coord, color))
    assert pred.shape == (n,) and (votes >= 1).all() and (votes > 1).any()   # fragments of 30k: cropped
    assert 0 < max(predictor.model.calls) <= 40_000
    np.testing.assert_array_equal(pred, expected_class(color))


@pytest.mark.parametrize("override", [" eval.tta.rotations=4", "eval.tta={rotations: 4}"])
def test_an_eval_tta_override_sets_the_views_however_it_is_spelt(tiny_run, override):
    """Without --tta an eval.tta override sets the views (one otherwise). The key is read once, as the
    config reads it: ' eval.tta.rotations=4' passed the check but the views rule, reading the raw text,
    missed it and predicted one view."""
    assert load_predictor(tiny_run).cfg.eval.tta.rotations == 1
    assert load_predictor(tiny_run, overrides=[override]).cfg.eval.tta.rotations == 4


def test_a_damaged_last_pt_does_not_stop_an_intact_best_pt(tiny_run, tmp_path, capsys):
    """last.pt is read beside best.pt only for how far the fold trained: cut short, it refused predict and
    evaluate the best.pt they were asked for; now they use it, with one warning naming last.pt."""
    import shutil

    fold = tmp_path / "run" / "area_1"
    shutil.copytree(tiny_run, fold)
    (fold / "last.pt").write_bytes((tiny_run / "last.pt").read_bytes()[:5000])
    scan = tmp_path / "scan.npy"
    np.save(scan, np.random.default_rng(0).random((500, 6), dtype=np.float32) * [4, 4, 3, 255, 255, 255])
    warning = (f"warning: {fold / 'last.pt'}: not a readable checkpoint (OSError: [Errno 22] Invalid argument); if it "
               "is a fold's last.pt, delete it to start the fold again; best.pt is used (saved at epoch 1 of 1: the "
               "fold finished)")
    for model, extra in ((fold, ["--checkpoint", "best"]), (fold / "best.pt", [])):
        capsys.readouterr()
        assert cli(["predict", str(model), str(scan), "--out", str(tmp_path / "pred"), *extra]) == 0
        assert capsys.readouterr().err.splitlines() == [warning]
        assert np.load(tmp_path / "pred" / "scan_pred.npy").shape == (500,)
    assert cli(["evaluate", str(fold), "--checkpoint", "best"]) == 0
    assert warning in capsys.readouterr().out
    line = one_line(capsys, 2, ["predict", str(fold), str(scan), "--out", str(tmp_path / "pred")])  # last.pt asked
    assert line.startswith(f"pointgeope predict: error: {fold / 'last.pt'}: not a readable checkpoint (")


def test_a_scan_of_one_colour_is_noted_for_a_colour_model_only():
    """The one-colour note ("predict it with a geometry-only model") was printed before any model's
    prediction, the geometry-only model's included, whose labels the colour does not change."""
    coord = np.random.default_rng(3).random((400, 3)) * [4.0, 3.0, 2.5]
    scan = Scan("grey", "grey.las", coord, np.full((400, 3), 7, np.uint8))
    colour = colour_predictor()
    geometry = dataclasses.replace(colour, info={**colour.info, "features": ["xyz"]})
    assert colour.uses_color and not geometry.uses_color
    for predictor, expected in ((colour, 1), (geometry, 0)):
        warnings: list[str] = []
        predict_scan(predictor, scan, warn=warnings.append)
        notes = [w for w in warnings if w.startswith("note: grey.las: every point has the colour (7, 7, 7)")]
        assert len(notes) == expected, warnings


def test_predict_best_of_a_fold_trained_without_validation_says_no_epoch_was_picked(unvalidated_run, tmp_path,
                                                                                    capsys):
    """``train.val_every=0`` rewrites best.pt every epoch: ``predict RUN/area_K --checkpoint best`` predicted
    with the last epoch as if a validation had picked it, exit code 0 and no word, where ``evaluate`` refuses.
    Now the same line, with predict's way to take last.pt, and nothing written; ``--checkpoint last`` predicts."""
    fold, out = unvalidated_run / "area_1", tmp_path / "pred"          # read, not written: the fold is shared
    scan = tmp_path / "scan.npy"
    np.save(scan, np.random.default_rng(0).random((500, 6), dtype=np.float32) * [4, 4, 3, 255, 255, 255])
    capsys.readouterr()
    for model, extra, use_last in ((fold, ["--checkpoint", "best"], "--checkpoint last"),
                                   (fold / "best.pt", [], f"MODEL {fold / 'last.pt'}")):
        assert one_line(capsys, 2, ["predict", str(model), str(scan), "--out", str(out), *extra]) == (
            f"pointgeope predict: error: {fold / 'best.pt'}: no validation picked it: the fold trained without "
            "validation (train.val_every=0), so best.pt holds its last epoch (1), the weights of last.pt; predict "
            f"from its last.pt ({use_last}), or train with train.val_every=1 for a best epoch")
        assert not out.exists()
    assert cli(["predict", str(fold), str(scan), "--out", str(out), "--checkpoint", "last"]) == 0
    assert np.load(out / "scan_pred.npy").shape == (500,)


def test_a_lone_unvalidated_best_pt_is_told_a_way_that_exists(unvalidated_run, tmp_path, capsys):
    """A fold's best.pt copied alone (no last.pt beside it) was told to predict from ``MODEL DIR/last.pt``, a file
    that is not there; the line says to copy it under that name (the same weights), and that prediction is the
    one of the fold's last.pt."""
    import shutil

    fold, lone, scan = unvalidated_run / "area_1", tmp_path / "shared", tmp_path / "scan.npy"
    lone.mkdir()
    shutil.copy(fold / "best.pt", lone / "best.pt")
    np.save(scan, np.random.default_rng(0).random((500, 6), dtype=np.float32) * [4, 4, 3, 255, 255, 255])
    capsys.readouterr()
    assert one_line(capsys, 2, ["predict", str(lone / "best.pt"), str(scan), "--out", str(tmp_path / "o")]) == (
        f"pointgeope predict: error: {lone / 'best.pt'}: no validation picked it: the fold trained without "
        "validation (train.val_every=0), so best.pt holds its last epoch (1), the weights of last.pt; predict from "
        f"a copy of it named last.pt (MODEL {lone / 'last.pt'}: the same weights), or train with train.val_every=1 "
        "for a best epoch")
    shutil.copy(lone / "best.pt", lone / "last.pt")
    assert cli(["predict", str(lone / "last.pt"), str(scan), "--out", str(tmp_path / "copy")]) == 0
    assert cli(["predict", str(fold / "last.pt"), str(scan), "--out", str(tmp_path / "fold")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "copy" / "scan_pred.npy"),
                                  np.load(tmp_path / "fold" / "scan_pred.npy"))
