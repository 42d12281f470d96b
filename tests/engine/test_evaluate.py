"""Tests of pointgeope/engine/evaluate.py: votes as the published fragments give them, aligned predictions."""
from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import zlib

import numpy as np
import pytest
import torch

from pointgeope.engine.config import TTAConfig, load_config
from pointgeope.engine.evaluate import room_seed, tta_views, view_coord, vote_room

C = 13


class ColourClassifier(torch.nn.Module):
    """Logits that depend only on each point's own red channel: class = (round(255 * red) // 20) % 13.

    A prediction that landed on another point than the one it was made for would show up as a wrong
    class, so the per-point alignment of the vote is tested exactly. Records every forward's sizes."""

    def __init__(self):
        super().__init__()
        self.calls: list[int] = []

    def forward(self, coord, feat, offset):
        self.calls.append(int(coord.shape[0]))
        cls = (torch.round(feat[:, 0] * 255).long() // 20) % C
        return torch.nn.functional.one_hot(cls, C).float() * 5.0


def room(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    coord = (rng.random((n, 3)) * [4.0, 3.0, 2.5]).astype(np.float32)
    coord[: n // 3] = coord[0]  # a dense clump: many points per voxel -> many fragments
    color = rng.integers(0, 256, (n, 3), dtype=np.uint8)
    return coord, color


def expected_class(color):
    return (color[:, 0].astype(np.int64) // 20) % C


def voxels_of(coord, grid_size):
    """Voxel -> point indices, from the definition floor((p - min p) / grid_size) in float32."""
    keys = np.floor((coord - coord.min(0)) / np.float32(grid_size)).astype(np.int64)
    _, inverse, counts = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
    return inverse.ravel(), counts


def test_votes_follow_the_published_fragments_without_crops():
    """No crop (voxel_max above the room): fragment f predicts one point of every voxel, so over the
    F = max count fragments voxel v's points share F votes, each point floor(F/c) or ceil(F/c) of them."""
    coord, color = room()
    cfg = load_config(None, ["data.grid_size=0.2", "data.voxel_max=100000", "train.amp=none"])
    model = ColourClassifier()
    result = vote_room(model, coord, color, cfg, torch.device("cpu"), seed=1)
    voxel, counts = voxels_of(coord, 0.2)
    f = counts.max()
    assert result.fragments == [f] and f >= 1000          # the clump of 1000 identical points
    per_voxel = np.bincount(voxel, weights=result.votes)
    np.testing.assert_array_equal(per_voxel, f)
    c = counts[voxel]
    assert np.all((result.votes == f // c) | (result.votes == -(-f // c)))
    assert sum(model.calls) == f * len(counts)             # every fragment is the whole grid-sampled room
    assert result.filled == 0
    # raw logits summed (the authors' vote): 5 per prediction on the point's own class
    np.testing.assert_allclose(result.scores.max(1), 5.0 * result.votes)
    assert (result.scores.argmax(1) == expected_class(color)).all()


def test_softmax_vote_sums_probabilities():
    coord, color = room(n=600, seed=7)
    cfg = load_config(None, ["data.grid_size=0.2", "data.voxel_max=100000", "eval.vote=softmax"])
    result = vote_room(ColourClassifier(), coord, color, cfg, torch.device("cpu"), seed=1)
    np.testing.assert_allclose(result.scores.sum(1), result.votes, rtol=1e-5)
    assert (result.scores.argmax(1) == expected_class(color)).all()


def test_capped_fragments_fill_the_rest_from_their_voxel():
    coord, color = room(n=900, seed=8)
    cfg = load_config(None, ["data.grid_size=0.2", "data.voxel_max=100000", "eval.max_fragments=3"])
    model = ColourClassifier()
    result = vote_room(model, coord, color, cfg, torch.device("cpu"), seed=2)
    voxel, counts = voxels_of(coord, 0.2)
    assert sum(model.calls) == 3 * len(counts)             # three fragments of every voxel
    assert (result.votes >= 1).all()
    assert result.filled == int(np.maximum(counts - 3, 0).sum())   # ranks >= 3 of each voxel
    # a filled point holds its voxel's three predictions (5 logits each), a predicted point its own one
    total = result.scores.sum(1)
    dense = counts[voxel] > 3
    assert set(np.unique(total[dense])) == {5.0, 15.0}
    np.testing.assert_array_equal(np.bincount(voxel[dense], weights=total[dense] == 15.0, minlength=len(counts)),
                                  np.maximum(counts - 3, 0))
    np.testing.assert_array_equal(total[~dense], 5.0 * result.votes[~dense])   # 3 fragments mod count


def test_votes_count_the_crops_covering_each_point():
    coord, color = room(n=1200, seed=2)         # 400 fragments of ~800 voxels: overlapping crops of 300
    cfg = load_config(None, ["data.grid_size=0.1", "data.voxel_max=300", "eval.batch_points=1000"])
    model = ColourClassifier()
    result = vote_room(model, coord, color, cfg, torch.device("cpu"), seed=5)
    voxel, counts = voxels_of(coord, 0.1)
    assert (result.votes >= 1).all()
    # each fragment holds every voxel once and its crops cover it: a voxel gets >= F votes in all
    assert (np.bincount(voxel, weights=result.votes) >= counts.max()).all()
    assert sum(model.calls) > counts.max() * len(counts)  # crops overlap
    np.testing.assert_allclose(result.scores.sum(1), 5.0 * result.votes, rtol=1e-5)
    assert (result.scores.argmax(1) == expected_class(color)).all()
    assert max(model.calls) <= 1000  # never more than eval.batch_points in one forward


def test_batching_does_not_change_the_vote():
    coord, color = room(n=600, seed=3)          # 200 fragments of ~400 voxels: crops of 200
    base = ["data.grid_size=0.1", "data.voxel_max=200"]
    one = vote_room(ColourClassifier(), coord, color, load_config(None, base + ["eval.batch_points=1"]),
                    torch.device("cpu"), seed=0)
    many = vote_room(ColourClassifier(), coord, color, load_config(None, base + ["eval.batch_points=100000"]),
                     torch.device("cpu"), seed=0)
    np.testing.assert_array_equal(one.votes, many.votes)
    np.testing.assert_allclose(one.scores, many.scores, atol=1e-6)


def test_tta_views_multiply_the_votes():
    coord, color = room(n=1200, seed=4)
    cfg = load_config(None, ["data.grid_size=0.2", "data.voxel_max=100000", "eval.tta.rotations=3",
                             "eval.tta.flips=true", "eval.tta.scales=[0.9, 1.0]"])
    assert len(tta_views(cfg.eval.tta)) == 12
    result = vote_room(ColourClassifier(), coord, color, cfg, torch.device("cpu"), seed=0)
    assert len(result.fragments) == 12
    assert result.votes.min() >= 12                        # every view predicts every point at least once
    assert (result.scores.argmax(1) == expected_class(color)).all()


def test_tta_views_rotate_by_two_pi_k_over_rotations():
    """``eval.tta``: z-rotations by ``2 pi k / rotations`` (angles written out), for every scale and flip,
    in the order scales x flips x rotations; the views turn a point about the room centre by those angles."""
    quarter = tta_views(TTAConfig(scales=[1.0], flips=False, rotations=4))
    assert [(s, f) for s, f, _ in quarter] == [(1.0, False)] * 4
    np.testing.assert_allclose([a for *_, a in quarter], [0.0, 1.5707963267948966, 3.141592653589793,
                                                          4.71238898038469], rtol=1e-15, atol=0)
    third = tta_views(TTAConfig(scales=[0.9, 1.1], flips=True, rotations=3))
    assert [(s, f) for s, f, _ in third] == ([(0.9, False)] * 3 + [(0.9, True)] * 3
                                             + [(1.1, False)] * 3 + [(1.1, True)] * 3)
    np.testing.assert_allclose([a for *_, a in third], [0.0, 2.0943951023931953, 4.1887902047863905] * 4,
                               rtol=1e-15, atol=0)
    # (2, 0, 0) of a room from (0, 0, 0) to (2, 0, 0) (centre (1, 0, 0)) turns to +y, -x, -y of the centre
    coord = np.array([[0, 0, 0], [2, 0, 0]], np.float32)
    turned = [view_coord(coord, s, f, a)[1] for s, f, a in quarter]
    np.testing.assert_allclose(turned, [[2, 0, 0], [1, 1, 0], [0, 0, 0], [1, -1, 0]], atol=1e-6)


def test_room_seed_is_the_documented_crc32_formula():
    """``(seed * 1000003 + crc32(utf-8 name)) mod 2^32``, crc32 from ``zlib`` here (with one value written
    out: crc32(b"a") = 0xE8B7BE43); a name with an undecodable byte of its file name counts that byte."""
    assert room_seed(3, "a") == 3_907_355_916 == (3 * 1_000_003 + 0xE8B7BE43) % 2**32
    assert room_seed(0, "office_1") == zlib.crc32(b"office_1")
    assert room_seed(7, "Area_5/hallway_6") == (7 * 1_000_003 + zlib.crc32(b"Area_5/hallway_6")) % 2**32
    assert room_seed(0, "caf\u00e9") == zlib.crc32(b"caf\xc3\xa9")               # utf-8 of e-acute
    assert room_seed(0, os.fsdecode(b"caf\xe9")) == zlib.crc32(b"caf\xe9")         # surrogate-escaped byte
    big = 5000                                                                     # 5000 * 1000003 > 2^32
    assert room_seed(big, "office_1") == (big * 1_000_003 + zlib.crc32(b"office_1")) - 2**32
    assert len({room_seed(0, f"office_{k}") for k in range(1, 40)}) == 39          # rooms get their own seeds


def test_room_seed_is_the_same_in_another_process():
    """Evaluate and a later ``predict`` run in different processes: the seed may not depend on the
    process (``hash(str)`` does, through PYTHONHASHSEED). The other process runs room_seed's own source (it
    needs ``zlib`` alone), not the toolkit's imports (~5 CPU s of torch and PyG)."""
    import inspect

    names = ["office_1", "conferenceRoom_2", "Area_5/hallway_6"]
    here = [room_seed(s, n) for s in (0, 11) for n in names]
    code = (f"import sys, zlib\n{inspect.getsource(room_seed)}\n"
            "print([room_seed(s, n) for s in (0, 11) for n in sys.argv[1:]])")
    hash_seed = "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1"       # not this process's
    out = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": hash_seed}).stdout
    assert out.strip() == str(here)


def test_view_coord_is_a_similarity_about_the_centre():
    coord, _ = room(n=50)
    assert view_coord(coord, 1.0, False, 0.0) is coord
    v = view_coord(coord, 2.0, True, math.pi / 2)
    centre = (coord.min(0) + coord.max(0)) / 2
    d = coord - centre
    np.testing.assert_allclose(v - centre, np.stack([-2 * d[:, 1], -2 * d[:, 0], 2 * d[:, 2]], 1), atol=1e-5)
    with pytest.raises(ValueError, match="rotations >= 1"):
        tta_views(TTAConfig(rotations=0))
    with pytest.raises(ValueError, match=r"eval.tta.rotations: expected an integer >= 1, got 0$"):
        load_config(None, ["eval.tta.rotations=0"])  # the config is refused when read, before any view


def test_validation_skips_the_configured_ignore_index(two_folds):
    """``train.ignore_index`` is the one value for the loss and the metrics: validation scores skip it."""
    from pointgeope.engine import distributed
    from pointgeope.engine.evaluate import validate
    from pointgeope.h5 import list_rooms, read_room

    env = distributed.DistEnv(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
    labels = {room: read_room(two_folds / "Area_1.h5", room, ("label",))["label"]
              for room in list_rooms(two_folds / "Area_1.h5")}
    label = np.concatenate([labels[r] for r in sorted(labels)])
    oa = {}
    for ignored in (255, 2):  # no label, then every wall point
        cfg = load_config(None, [f"data.root={two_folds}", "data.grid_size=0.1", "eval.batch_points=20000",
                                 "train.progress=false", f"train.ignore_index={ignored}"])
        s, preds = validate(cfg, ColourClassifier(), two_folds, ["Area_1"], env)
        pred = np.concatenate([preds["Area_1"][r] for r in sorted(labels)])
        keep = label != ignored
        oa[ignored] = s["oa"]
        assert s["oa"] == pytest.approx(float((pred[keep] == label[keep]).mean()), abs=1e-12)
    assert (label == 2).sum() > 0 and oa[2] != oa[255]


# --- the pipelined path against a straightforward sequential one ----------------------------------------------

def sequential_votes(model, coord, color, cfg, seed):
    """The definition of the module docstring, one piece at a time and nothing ahead: for each view,
    its fragments and crops in order, each piece alone through the network, its logits added to its points.
    Its pieces come from the data module's own ``room_pieces``: this checks the pipelining, not the rules of
    the pieces, which have their own references (``tests/data/test_fragments.py``: ``authors_fragments``,
    ``published_crops``)."""
    from pointgeope.data.dataset import room_sample
    from pointgeope.data.fragments import fill_from_voxels, room_pieces, voxel_fragments
    from pointgeope.data.transforms import ToData

    scores = np.zeros((coord.shape[0], C), np.float64)
    votes = np.zeros(coord.shape[0], np.int64)
    first = None
    for v, (scale, flip, angle) in enumerate(tta_views(cfg.eval.tta)):
        rng = np.random.default_rng([seed, v])
        sample = room_sample(view_coord(coord, scale, flip, angle), color, height=False)
        fragments = voxel_fragments(sample["coord"], cfg.data.grid_size, rng)
        first = first or fragments
        for index, piece in room_pieces(sample, fragments, cfg.data.voxel_max, rng, cfg.eval.max_fragments):
            data = ToData()(piece)
            with torch.inference_mode():
                logits = model(data.pos, data.x, torch.tensor([index.shape[0]]))
            for row, point in enumerate(index):
                scores[point] += logits[row].double().numpy()
                votes[point] += 1
    scores = scores.astype(np.float32)
    votes = votes.astype(np.int32)
    fill_from_voxels(first.groups, scores, votes)
    return scores, votes


@pytest.mark.parametrize("thread", [True, False], ids=["background-thread", "inline"])
def test_pipelined_votes_equal_a_sequential_reference_with_a_real_network(monkeypatch, thread):
    """A small Point Transformer (random weights, eval mode): the batched path, its pieces and their
    hierarchy made in the background thread (or inline, as on a CPU whose cores torch uses), gives the
    reference's votes and labels exactly, scores to float tolerance; with crops, two views and capped
    fragments (so filling runs too)."""
    from pointgeope.engine import build, placement

    monkeypatch.setattr(placement, "pipelined", lambda device: thread)
    made_in = set()

    coord, color = room(n=2400, seed=11)
    cfg = load_config(None, ["data.grid_size=0.1", "data.voxel_max=250", "eval.batch_points=900",
                             "eval.max_fragments=3", "eval.tta.rotations=2", "train.amp=none",
                             "model.planes=[8, 16]", "model.blocks=[1, 1]", "model.strides=[1, 4]",
                             "model.neighbours=[8, 8]", "model.decoder_blocks=[1, 1]"])
    torch.manual_seed(0)
    model = build.model(cfg).eval()
    spec = model.hierarchy_spec

    class Recording:                             # records which thread builds the hierarchy
        def __call__(self, coord, offset):
            made_in.add(threading.current_thread().name)
            return spec(coord, offset)

        def check(self, *args):
            return spec.check(*args)

    model.hierarchy_spec = Recording()
    result = vote_room(model, coord, color, cfg, torch.device("cpu"), seed=3)
    model.hierarchy_spec = spec
    scores, votes = sequential_votes(model, coord, color, cfg, seed=3)
    assert result.filled > 0 and votes.max() > 2
    assert made_in == ({"vote_room batches"} if thread else {"MainThread"})   # the thread, or the forward
    np.testing.assert_array_equal(result.votes, votes)
    np.testing.assert_allclose(result.scores, scores, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(result.scores.argmax(1), scores.argmax(1))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_votes_with_the_hierarchy_beside_equal_the_in_line_ones(monkeypatch):
    """On CUDA the thread that cuts the pieces copies each batch to the device and builds its hierarchy on a
    side stream (engine.ahead.copy_and_build) while the batch before runs: the votes equal those of the model
    building each hierarchy in line, and the side stream really made them."""
    from pointgeope.engine import ahead, build, placement, vote_batches

    coord, color = room(n=2400, seed=11)
    cfg = load_config(None, ["data.grid_size=0.1", "data.voxel_max=250", "eval.batch_points=900",
                             "eval.max_fragments=3", "train.amp=none", "model.planes=[8, 16]", "model.blocks=[1, 1]",
                             "model.strides=[1, 4]", "model.neighbours=[8, 8]", "model.decoder_blocks=[1, 1]"])
    torch.manual_seed(0)
    cuda = torch.device("cuda")
    model = build.model(cfg).eval().to(cuda)
    calls, made = [], ahead.copy_and_build
    monkeypatch.setattr(vote_batches, "copy_and_build", lambda *a: calls.append(1) or made(*a))
    side = vote_room(model, coord, color, cfg, cuda, seed=3)
    assert len(calls) > 1
    monkeypatch.setattr(placement, "hierarchy_place", lambda *a, **k: placement.HierarchyPlace("model", "test", cuda))
    in_line = vote_room(model, coord, color, cfg, cuda, seed=3)
    np.testing.assert_array_equal(side.votes, in_line.votes)
    np.testing.assert_allclose(side.scores, in_line.scores, rtol=1e-5, atol=1e-5)


class SmallMemoryClassifier(ColourClassifier):
    """Logits of ColourClassifier plus each cloud's mean red, found through ``offset`` (a batch split with
    wrong offsets changes the scores), on a device that holds at most ``capacity`` points per forward: more
    raise the out-of-memory error of CUDA. Records every attempt as ``(points, fitted)``."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity, self.attempts = capacity, []

    def forward(self, coord, feat, offset):
        n = int(coord.shape[0])
        self.attempts.append((n, n <= self.capacity))
        if n > self.capacity:
            raise torch.cuda.OutOfMemoryError(f"{n} points do not fit")
        if int(offset[-1]) != n:
            raise ValueError(f"offset[-1] = {int(offset[-1])} for {n} points")
        sizes = torch.diff(offset, prepend=offset.new_zeros(1))
        cloud = torch.repeat_interleave(torch.arange(len(sizes)), sizes)
        mean_red = torch.zeros(len(sizes)).index_add_(0, cloud, feat[:, 0]) / sizes
        return super().forward(coord, feat, offset) + mean_red[cloud, None]


def test_a_batch_that_does_not_fit_is_halved_with_the_same_votes():
    """A batch over the capacity raises; it is then run in halves (each attempt after a refusal at most
    half of the refused one), later batches start at the size that fitted, and the votes and scores equal
    those of a device with room for every batch."""
    coord, color = room(n=600, seed=2)          # 200 fragments (the clump), ~580 batches, the first halved twice
    cfg = load_config(None, ["data.grid_size=0.1", "data.voxel_max=300", "eval.batch_points=2000"])
    roomy = SmallMemoryClassifier(capacity=10**9)
    roomy_votes = vote_room(roomy, coord, color, cfg, torch.device("cpu"), seed=5)
    small = SmallMemoryClassifier(capacity=700)
    tight = vote_room(small, coord, color, cfg, torch.device("cpu"), seed=5)
    np.testing.assert_array_equal(tight.votes, roomy_votes.votes)
    np.testing.assert_allclose(tight.scores, roomy_votes.scores, atol=1e-5)
    refused = [t for t, (_, fitted) in enumerate(small.attempts) if not fitted]
    first = small.attempts[refused[0]][0] if refused else 0
    assert first > 1400 and max(n for n, _ in roomy.attempts) == first      # the first full batch: refused
    for t in refused:                                                       # then halved, as often as needed
        assert small.attempts[t + 1][0] <= small.attempts[t][0] // 2
    assert all(n <= first // 2 for n, _ in small.attempts[refused[0] + 1:])  # later batches keep the cut
    assert len(refused) < len(small.attempts) // 3                         # not a refusal per batch
    assert sum(n for n, fitted in small.attempts if fitted) == int(roomy_votes.votes.sum())


def test_a_piece_alone_that_does_not_fit_is_an_error():
    coord, color = room(n=800, seed=2)
    cfg = load_config(None, ["data.grid_size=0.1", "data.voxel_max=300", "eval.batch_points=2000"])
    with pytest.raises(torch.cuda.OutOfMemoryError):
        vote_room(SmallMemoryClassifier(capacity=100), coord, color, cfg, torch.device("cpu"), seed=5)


def test_the_pieces_are_pinned_for_the_runs_own_gpu_in_the_producer_thread(monkeypatch):
    """Evaluation on ``cuda:1``: the thread that cuts and pins the room's pieces pins them with cuda:1 as its
    current device. CUDA's current device is per thread and a new thread's is cuda:0, so pinning there opened
    a context on cuda:0 (memory on a GPU the run does not use; an error where cuda:0 is another process's in
    exclusive mode). Fakes of ``set_device`` (per thread, as CUDA's) and of pinning (records the device)."""
    from pointgeope.engine import evaluate
    from pointgeope.engine.config import Config

    local, pinned = threading.local(), []
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: setattr(local, "device", torch.device(device).index))
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda t: pinned.append(getattr(local, "device", 0)) or t)
    coord, color = room(600)
    made = []
    thread = threading.Thread(target=lambda: made.extend(evaluate._room_batches(
        coord, color, Config(), 0, 100_000, None, torch.device("cuda", 1), False, evaluate._Layout(), False)))
    thread.start()
    thread.join()
    assert made and pinned and set(pinned) == {1}, pinned
