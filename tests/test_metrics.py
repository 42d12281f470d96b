"""Tests of pointgeope/metrics.py against confusion matrices worked out by hand."""
from __future__ import annotations

import math
from fractions import Fraction as F

import numpy as np
import pytest
import torch

from pointgeope.metrics import ConfusionMeter, confusion_matrix, mean_of_fold_scores, pool, pooled_scores, scores

# A 3-class example, rows = ground truth, columns = prediction:
#
#            pred 0  pred 1  pred 2 | GT
#   gt 0        3       1       0   |  4
#   gt 1        1       2       0   |  3
#   gt 2        0       1       2   |  3
#   ------------------------------------
#   PRED        4       4       2   | 10
#
#   TP = (3, 2, 2); union = GT + PRED - TP = (5, 5, 3)
#   OA   = 7/10
#   acc  = (3/4, 2/3, 2/3)   mAcc = (9/12 + 8/12 + 8/12) / 3 = 25/36
#   IoU  = (3/5, 2/5, 2/3)   mIoU = (3/5 + 2/5 + 2/3) / 3 = 5/9
HAND = np.array([[3, 1, 0], [1, 2, 0], [0, 1, 2]])
HAND_PAIRS = [(0, 0)] * 3 + [(0, 1)] + [(1, 0)] + [(1, 1)] * 2 + [(2, 1)] + [(2, 2)] * 2  # (gt, pred)


def _close(value: float, exact: F) -> bool:
    return math.isclose(value, float(exact), rel_tol=0, abs_tol=1e-12)


def _hand_labels():
    target = np.array([g for g, _ in HAND_PAIRS] + [255, 255])  # two unlabelled points
    pred = np.array([p for _, p in HAND_PAIRS] + [2, 0])
    return pred, target


def test_confusion_matrix_of_the_hand_example():
    pred, target = _hand_labels()
    m = confusion_matrix(pred, target, num_classes=3)
    assert m.dtype == np.int64 and m.shape == (3, 3)
    np.testing.assert_array_equal(m, HAND)


def test_scores_of_the_hand_example():
    s = scores(HAND)
    assert _close(s["oa"], F(7, 10))
    assert _close(s["macc"], F(25, 36))
    assert _close(s["miou"], F(5, 9))
    for got, want in zip(s["iou"], (F(3, 5), F(2, 5), F(2, 3)), strict=True):
        assert _close(got, want)
    for got, want in zip(s["acc"], (F(3, 4), F(2, 3), F(2, 3)), strict=True):
        assert _close(got, want)


def test_ignore_index_is_configurable():
    pred, target = _hand_labels()
    target = np.where(target == 255, -1, target)
    np.testing.assert_array_equal(confusion_matrix(pred, target, 3, ignore_index=-1), HAND)
    with pytest.raises(ValueError, match=r"target labels in 0\.\.2.*-1"):
        confusion_matrix(pred, target, 3)  # -1 is not the ignore label here


def test_out_of_range_labels_are_named():
    with pytest.raises(ValueError, match=r"pred labels in 0\.\.2, got 2 values out of range: 3, 7"):
        confusion_matrix([0, 3, 7], [0, 1, 2], 3)
    with pytest.raises(ValueError, match=r"target labels.*: 5"):
        confusion_matrix([0, 1], [0, 5], 3)
    with pytest.raises(ValueError, match="same shape"):
        confusion_matrix([0, 1], [0], 3)
    with pytest.raises(ValueError, match="integer pred"):
        confusion_matrix([0.5], [0], 3)


def test_absent_class_is_nan_and_left_out_of_the_means():
    # class 3 has neither ground truth nor prediction: same means as the 3-class example
    m = np.zeros((4, 4), dtype=np.int64)
    m[:3, :3] = HAND
    s = scores(m)
    assert math.isnan(s["iou"][3]) and math.isnan(s["acc"][3])
    assert _close(s["oa"], F(7, 10)) and _close(s["macc"], F(25, 36)) and _close(s["miou"], F(5, 9))


def test_false_positives_of_a_class_without_ground_truth():
    # one gt-0 point predicted as class 3: IoU_3 = 0 counts in mIoU, acc_3 is undefined
    m = np.zeros((4, 4), dtype=np.int64)
    m[:3, :3] = HAND
    m[0, 3] = 1
    s = scores(m)
    assert s["iou"][3] == 0.0 and math.isnan(s["acc"][3])
    # gt 0: TP 3, GT 5, PRED 4 -> union 6, acc 3/5, IoU 1/2
    assert _close(s["oa"], F(7, 11))
    assert _close(s["macc"], (F(3, 5) + F(2, 3) + F(2, 3)) / 3)
    assert _close(s["miou"], (F(1, 2) + F(2, 5) + F(2, 3) + 0) / 4)


def test_empty_confusion_is_nan():
    s = scores(np.zeros((3, 3), dtype=np.int64))
    assert all(math.isnan(s[k]) for k in ("oa", "macc", "miou"))
    with pytest.raises(ValueError, match="square"):
        scores(np.zeros((2, 3)))


def test_pooled_and_mean_of_folds_differ_when_folds_differ():
    a = np.array([[2, 0], [0, 2]])  # OA 1, mIoU 1
    b = np.array([[4, 4], [4, 4]])  # OA 1/2, IoU 4/12 -> mIoU 1/3
    np.testing.assert_array_equal(pool([a, b]), [[6, 4], [4, 6]])
    pooled = pooled_scores([a, b])  # OA 12/20, IoU 6/14
    mean = mean_of_fold_scores([a, b])
    assert _close(pooled["oa"], F(3, 5)) and _close(pooled["miou"], F(3, 7))
    assert _close(mean["oa"], F(3, 4)) and _close(mean["miou"], F(2, 3))
    assert _close(mean["iou"][0], F(2, 3)) and _close(mean["acc"][1], F(3, 4))


def test_pooled_and_mean_of_folds_agree_on_proportional_folds():
    a = HAND
    b = 3 * HAND  # same rates, three times the points
    pooled, mean = pooled_scores([a, b]), mean_of_fold_scores([a, b])
    for key in ("oa", "macc", "miou"):
        assert math.isclose(pooled[key], mean[key], abs_tol=1e-12)
    np.testing.assert_allclose(pooled["iou"], mean["iou"], atol=1e-12)


def test_mean_of_folds_skips_a_class_absent_from_one_fold():
    a = np.array([[1, 0], [0, 1]])
    b = np.array([[2, 0], [0, 0]])  # class 1 absent: NaN in b, mean over a only
    mean = mean_of_fold_scores([a, b])
    assert mean["iou"] == [1.0, 1.0]


def test_a_class_mean_on_a_tie_prints_rounded_half_up():
    """Under ``present`` the IoUs of this matrix are 1/5, 1/16 and 6/25 (hand: TP 15, 4, 12 over unions 75,
    64, 50), their mean 0.1675 exactly, a tie that prints 16.8; the binary mean, 0.16749999999999998, printed
    16.7. The accuracies 15/42, 4/36, 12/32 (mean 0.2814153439...) are no tie and print 28.1 either way."""
    from pointgeope.report.tables import pct

    m = np.array([[15, 17, 10], [24, 4, 8], [9, 11, 12]])
    s = scores(m, "present")
    assert s["iou"] == [0.2, 0.0625, 0.24]
    assert s["miou"] == 0.1675 and pct(s["miou"], 1) == "16.8"
    assert _close(s["macc"], (F(15, 42) + F(4, 36) + F(12, 32)) / 3) and pct(s["macc"], 1) == "28.1"
    assert pct(float(np.mean(s["iou"])), 1) == "16.7"                      # the binary mean's miss


def _oa_fold(right: int, points: int = 10000) -> np.ndarray:
    """A 2-class fold of ``points`` points of class 0, ``right`` of them right: OA = right / points."""
    return np.array([[right, points - right], [0, 0]])


@pytest.mark.parametrize("rights, printed", [
    ((2324, 2226), "22.8"),                               # exact mean 0.2275; binary 0.22749999999999998
    ((763, 348, 6654, 3396, 1434, 6755), "32.3"),         # six folds: 0.3225; binary 0.32249999999999995
    ((4942, 7474, 8629), "70.2"),                         # 0.7015; binary 0.7014999999999999
])
def test_the_mean_of_folds_on_a_tie_prints_rounded_half_up(rights, printed):
    """The folds' OA are k/10000 (decimals of four places); their exact mean (hand: sum / n) ends in 5 at the
    second decimal of the percentage, a tie, which the report's rounding (half up) sends up. The mean taken in
    binary landed below the tie and printed one tenth lower."""
    from pointgeope.report.tables import pct

    exact = F(sum(rights), 10000 * len(rights))
    assert exact * 1000 % 1 == F(1, 2)                    # the case is a tie at 0.1 %
    mean = mean_of_fold_scores([_oa_fold(r) for r in rights])
    assert mean["oa"] == float(exact) and pct(mean["oa"], 1) == printed
    assert mean["iou"][0] == float(exact)                 # IoU of class 0 = right / points as well
    assert pct(float(np.mean([r / 10000 for r in rights])), 1) != printed   # the binary mean's miss


def test_pool_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="matrix 1 has shape"):
        pool([np.zeros((3, 3)), np.zeros((2, 2))])
    with pytest.raises(ValueError, match="none"):
        pool([])


def test_all_classes_rule_is_the_authors_mean_with_absent_classes_as_zero():
    """PTv1's tool/test.py: ``mean(TP / (union + 1e-10))`` and ``mean(TP / (GT + 1e-10))`` over all C.
    Class 3 absent (no ground truth, no prediction): 0 in both means; class 4 with one false positive and
    no ground truth: IoU 0, accuracy 0."""
    m = np.zeros((5, 5), dtype=np.int64)
    m[:3, :3] = HAND
    m[0, 4] = 1                                   # gt 0: TP 3, GT 5, PRED 4 -> union 6
    s = scores(m, "all")                          # exact up to the +1e-10 in the denominators
    assert math.isclose(s["miou"], float((F(1, 2) + F(2, 5) + F(2, 3) + 0 + 0) / 5), rel_tol=0, abs_tol=1e-10)
    assert math.isclose(s["macc"], float((F(3, 5) + F(2, 3) + F(2, 3) + 0 + 0) / 5), rel_tol=0, abs_tol=1e-10)
    assert _close(s["oa"], F(7, 11))
    present = scores(m, "present")               # the per-class values do not depend on the rule
    assert s["iou"][:3] == present["iou"][:3] and math.isnan(s["iou"][3]) and s["iou"][4] == 0.0
    assert _close(present["miou"], (F(1, 2) + F(2, 5) + F(2, 3) + 0) / 4)
    assert _close(present["macc"], (F(3, 5) + F(2, 3) + F(2, 3)) / 3)
    with pytest.raises(ValueError, match="class_mean"):
        scores(m, "some")


def test_the_rules_agree_where_every_class_has_ground_truth():
    """The pooled 6-fold matrix (every class present): both rules give the same means (to the 1e-10)."""
    g = np.random.default_rng(0)
    folds = [g.integers(0, 50, size=(13, 13)) + np.diag(g.integers(1, 500, size=13)) for _ in range(6)]
    for rule_a, rule_b in ((pooled_scores(folds, "all"), pooled_scores(folds, "present")),
                           (mean_of_fold_scores(folds, "all"), mean_of_fold_scores(folds, "present"))):
        for key in ("oa", "macc", "miou"):
            assert math.isclose(rule_a[key], rule_b[key], rel_tol=0, abs_tol=1e-10)
    gap = [fold.copy() for fold in folds]
    gap[0][9, :] = 0
    gap[0][:, 9] = 0                              # no sofa in one area: its own scores differ by the rule
    assert scores(gap[0], "all")["miou"] < scores(gap[0], "present")["miou"] - 1e-3
    meter = ConfusionMeter(3)
    meter.update(torch.tensor([0, 1, 0]), torch.tensor([0, 1, 0]))
    assert math.isclose(meter.scores("all")["miou"], 2 / 3, abs_tol=1e-10) and meter.scores()["miou"] == 1.0


def test_fold_matrices_of_different_sizes_are_refused_naming_the_matrix():
    """numpy said "inhomogeneous shape" for mean_of_fold_scores; both fold functions name the matrix."""
    for fn in (mean_of_fold_scores, pooled_scores, pool):
        with pytest.raises(ValueError, match=r"one shape \(3, 3\), matrix 1 has shape \(2, 2\) \(confusions\[1\]\)"):
            fn([np.eye(3), np.eye(2)])
    with pytest.raises(ValueError, match="none"):
        mean_of_fold_scores([])


def test_pool_refuses_fractional_counts_instead_of_truncating():
    with pytest.raises(ValueError, match=r"expected whole counts in confusions\[1\] \(matrix 1\), got 2\.5"):
        pool([np.eye(2), np.array([[2.5, 0.0], [0.0, 1.0]])])
    np.testing.assert_array_equal(pool([np.eye(2), 2.0 * np.eye(2)]), [[3, 0], [0, 3]])   # whole floats are counts
    big = np.array([[2**60 + 1, 0], [0, 1]], dtype=np.int64)
    assert pool([big, big])[0, 0] == 2**61 + 2                                              # int64 sums stay exact


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_scores_refuse_nan_and_infinite_counts(bad):
    m = np.array([[3.0, 1.0], [bad, 2.0]])
    with pytest.raises(ValueError, match=r"expected confusion a confusion matrix of finite counts, got 1 NaN"):
        scores(m)
    with pytest.raises(ValueError, match=r"expected confusions\[0\] a confusion matrix of finite counts"):
        mean_of_fold_scores([m])


def test_scores_refuse_negative_counts():
    """A negative count (an overflowed or hand-edited matrix) would give IoUs outside [0, 1] without a word."""
    with pytest.raises(ValueError, match=r"expected confusion a confusion matrix of non-negative counts, got -1"):
        scores(np.array([[3, -1], [0, 2]]))
    with pytest.raises(ValueError, match=r"expected confusions\[1\] a confusion matrix of non-negative counts"):
        pool([np.eye(2), np.array([[1, 0], [-2, 1]])])
