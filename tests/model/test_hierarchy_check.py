"""A hierarchy handed to the network (pointgeope/model/ops/hierarchy_check.py): its indices, distances and the
coordinates they index are refused in one line naming the tensor, where before a negative index wrapped to another
point, and a NaN distance or coordinate made the logits NaN, without a word."""
from __future__ import annotations

import dataclasses
import pickle
import re

import pytest
import torch

from pointgeope.model.network import PointTransformerSeg

TWO_STAGES = dict(pe="geope", in_channels=6, num_classes=5, planes=(8, 16), blocks=(1, 1), decoder_blocks=(1, 1),
                  strides=(1, 4), neighbours=(4, 4), share_planes=4)


@pytest.fixture(scope="module")
def case():
    torch.manual_seed(0)
    net = PointTransformerSeg(**TWO_STAGES).eval()
    coord, feat = torch.rand(12, 3), torch.rand(12, 6)
    return net, coord, feat, net.hierarchy_spec(coord, [5, 12])


def _with(h, field: str, stage: int, change):
    """``h`` with ``field[stage]`` replaced by ``change(clone)``."""
    entries = list(getattr(h, field))
    t = entries[stage].clone()
    change(t)
    entries[stage] = t
    return dataclasses.replace(h, **{field: tuple(entries)})


def test_a_sound_hierarchy_gives_the_logits_of_the_one_built_inside(case):
    net, coord, feat, h = case
    torch.testing.assert_close(net(coord, feat, torch.tensor([5, 12]), hierarchy=h), net(coord, feat, [5, 12]),
                               rtol=0, atol=0)


@pytest.mark.parametrize("field, stage, change, message", [
    ("neighbours", 1, lambda t: t.__setitem__((1, 2), -1),
     r"expected hierarchy.neighbours\[1\] rows in \[0, 2\), got 1 outside \(the first in row 1: \[.*-1.*\]\)"),
    ("up", 0, lambda t: t.__setitem__((4, 0), 3),
     r"expected hierarchy.up\[0\] rows in \[0, 2\), got 1 outside \(the first in row 4"),
    ("samples", 1, lambda t: t.__setitem__(0, 12), r"expected hierarchy.samples\[1\] rows in \[0, 12\), got 1"),
    ("down", 1, lambda t: t.__setitem__((1, 0), -13), r"expected hierarchy.down\[1\] rows in \[0, 12\)"),
    ("up_dist2", 0, lambda t: t.__setitem__((3, 1), float("nan")),
     r"expected finite hierarchy.up_dist2\[0\], got 1 NaN or infinite entries \(the first in row 3"),
    ("up_dist2", 0, lambda t: t.__setitem__((3, 1), -1.0), r"expected hierarchy.up_dist2\[0\] >= 0"),
    ("offsets", 1, lambda t: t.__setitem__(1, 4), r"expected hierarchy.offsets\[1\] nondecreasing and ending at "
                                                  r"the stage's 2 points, got \[1, 4\]"),
])
def test_values_a_gather_would_misread_are_named(case, field, stage, change, message):
    net, coord, feat, h = case
    with pytest.raises(ValueError, match=message + ".*; build it with model.hierarchy_spec"):
        net(coord, feat, [5, 12], hierarchy=_with(h, field, stage, change))


def test_shapes_are_named_on_any_device(case):
    """Shapes are attributes (no value read, so checked on a GPU too): a (N,) samples tensor of one row too many."""
    net, coord, feat, h = case
    bad = dataclasses.replace(h, samples=(None, torch.cat([h.samples[1], h.samples[1][:1]])))
    with pytest.raises(ValueError, match=r"expected hierarchy.samples\[1\] an integer tensor of shape \(2,\), got "
                                         r"torch.int64 \(3,\)"):
        net(coord, feat, [5, 12], hierarchy=bad)


@pytest.mark.parametrize("stage", [0, 1])
@pytest.mark.parametrize("dtype", [torch.bool, torch.float32])
def test_neighbours_of_another_dtype_are_named(case, stage, dtype):
    """``neighbours[s]`` of bools or floats is named as ``samples`` and ``down`` are; before, it was taken: a bool
    tensor's 0/1 are in range, so every point gathered rows 0 and 1 of its stage and the logits were wrong without
    a word (floats happened to gather right)."""
    net, coord, feat, h = case
    entries = list(h.neighbours)
    entries[stage] = entries[stage].to(dtype)
    shape = tuple(h.neighbours[stage].shape)
    with pytest.raises(ValueError, match=re.escape(f"expected hierarchy.neighbours[{stage}] an integer tensor of shape "
                                                   f"{shape}, got {dtype} {shape}")):
        net(coord, feat, [5, 12], hierarchy=dataclasses.replace(h, neighbours=tuple(entries)))


@pytest.mark.parametrize("stage", [0, 1])
def test_neighbours_of_three_dimensions_are_named(case, stage):
    """``neighbours[s]`` of shape ``(N_s, k, 1)`` (a stray ``[..., None]``): before, Python's "too many values to
    unpack (expected 2)", naming nothing; now the entry and its expected shape."""
    net, coord, feat, h = case
    entries = list(h.neighbours)
    entries[stage] = entries[stage][..., None]
    shape = tuple(entries[stage].shape)
    with pytest.raises(ValueError, match=re.escape(f"expected hierarchy.neighbours[{stage}] an integer tensor of shape "
                                                   f"(N_{stage}, k), got torch.int64 {shape}; ")):
        net(coord, feat, [5, 12], hierarchy=dataclasses.replace(h, neighbours=tuple(entries)))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 2.0 ** 61])
def test_coordinates_with_a_hierarchy_are_checked_as_without(case, bad):
    """Without a hierarchy the spec refuses them as it builds one; with one made elsewhere (a copy without the
    spec's mark) they reached the network unchecked."""
    net, coord, feat, h = case
    coord = coord.clone()
    coord[7, 1] = bad
    with pytest.raises(ValueError, match=r"expected (finite coord|coord within \+-2\^60).* \(the first in row 7"):
        net(coord, feat, [5, 12], hierarchy=dataclasses.replace(h))


def test_the_specs_mark_follows_moves_and_pickles_but_not_hand_copies(case):
    """The loader's hierarchy crosses a process (pickle) and moves (``to``, ``pin_memory``): it keeps ``built``, so
    a training step reads none of its values; a copy made by hand is checked."""
    net, coord, feat, h = case
    assert h.built and h.to("cpu").built and pickle.loads(pickle.dumps(h)).built
    assert not dataclasses.replace(h).built
    bad = dataclasses.replace(h, neighbours=(h.neighbours[0] - 100,) + h.neighbours[1:])
    with pytest.raises(ValueError, match=r"expected hierarchy.neighbours\[0\] rows in \[0, 12\), got 48 outside"):
        net(coord, feat, [5, 12], hierarchy=bad)


@pytest.mark.parametrize("field, entries, want", [("up", 0, 1), ("up_dist2", 2, 1), ("samples", 1, 2),
                                                  ("down", 3, 2)])
def test_a_field_of_another_number_of_stages_is_named(case, field, entries, want):
    """A hand-made hierarchy whose ``up`` (or any field) has another number of entries than its stages (one less for
    ``up`` and ``up_dist2``) was an IndexError traceback from inside the check, naming nothing."""
    net, coord, feat, h = case
    got = (tuple(getattr(h, field)) * 3)[:entries]
    with pytest.raises(ValueError, match=rf"expected hierarchy.{field} of {want} entries \(2 stages\), got {entries}; "
                                         r"build it with model.hierarchy_spec"):
        net(coord, feat, [5, 12], hierarchy=dataclasses.replace(h, **{field: got}))


def test_apply_with_any_function_drops_the_specs_mark(case):
    """``apply(fn)`` may change values (it kept the mark, so a shifted copy went unchecked on the CPU); ``to`` and
    ``pin_memory``, which only move, keep it."""
    net, coord, feat, h = case
    shifted = h.apply(lambda t: t - 100 if t.dim() == 2 and not t.is_floating_point() else t)   # the indices
    assert not shifted.built and h.to("cpu").built
    with pytest.raises(ValueError, match=r"expected hierarchy.neighbours\[0\] rows in \[0, 12\), got 48 outside"):
        net(coord, feat, [5, 12], hierarchy=shifted)


@pytest.mark.parametrize("change, message", [
    (lambda h: dataclasses.replace(h, neighbours=(h.neighbours[0].tolist(),) + h.neighbours[1:]),
     r"expected hierarchy.neighbours\[0\] a tensor, got list"),
    (lambda h: dataclasses.replace(h, offsets=([5, 12],) + h.offsets[1:]), r"expected hierarchy.offsets\[0\] a tensor, "
                                                                           r"got list"),
    (lambda h: dataclasses.replace(h, neighbours=h.neighbours[0]),
     r"expected hierarchy.neighbours a tuple of tensors, one per stage, got Tensor"),
    (lambda h: dataclasses.replace(h, samples=(None, h.samples[1].numpy())),
     r"expected hierarchy.samples\[1\] a tensor or None \(at stride 1\), got ndarray"),
    (lambda h: {"offsets": h.offsets}, r"expected hierarchy a PointHierarchy \(fields offsets, samples, down, "
                                       r"neighbours, up, up_dist2\), got dict"),
    (lambda h: dataclasses.replace(h, offsets=(), samples=(), down=(), neighbours=(), up=(), up_dist2=()),
     r"expected a point hierarchy of \(stages, k per stage, points, clouds\) = \(2, \(4, 4\), 12, 2\) \(the model's "
     r"HierarchySpec\), got \(0, \(\), None, None\)"),
])
def test_a_field_of_another_type_is_named_with_the_type_it_has(case, change, message):
    """A list (or an array, a dict) where the check reads a tensor's shape was an ``AttributeError`` (``'list' object
    has no attribute 'shape'``) or an ``IndexError`` from inside ``HierarchySpec.check``, naming no field."""
    net, coord, feat, h = case
    with pytest.raises(ValueError, match=message):
        net(coord, feat, [5, 12], hierarchy=change(h))
