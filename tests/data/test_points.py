"""``Points``, the data path's container, and its collation: equal to torch_geometric's ``Data`` and ``Batch``
(PyG's own collation is the independent reference), and the loader's choice between the two."""
from __future__ import annotations

import pickle

import pytest
import torch
from torch_geometric.data import Batch, Data

from pointgeope.data.loader import make_loader
from pointgeope.data.points import Points, collate
from pointgeope.model.ops.hierarchy import HierarchySpec


def _samples(sizes, seed=0, mix=True):
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in sizes:
        fields = {"pos": torch.rand(n, 3, generator=g), "x": torch.rand(n, 6, generator=g),
                  "y": torch.randint(0, 13, (n,), generator=g), "grid_coord": torch.randint(0, 9, (n, 3), generator=g)}
        if mix:
            fields["mix_draw"] = torch.rand(1, generator=g)
        out.append(fields)
    return out


@pytest.mark.parametrize("sizes", [(5,), (3, 1, 7), (4, 4, 9, 2)])
def test_collate_equals_pygs_batch(sizes):
    """Every field, ptr, batch, num_graphs and num_nodes as PyG's Batch.from_data_list makes them."""
    samples = _samples(sizes, seed=len(sizes))
    ours = collate([Points(**f) for f in samples])
    theirs = Batch.from_data_list([Data(**f) for f in samples])
    assert sorted(ours.keys()) == sorted(theirs.keys())
    for key in ours.keys():
        assert torch.equal(getattr(ours, key), theirs[key]), key
        assert getattr(ours, key).dtype == theirs[key].dtype, key
    assert ours.num_graphs == theirs.num_graphs == len(sizes)
    assert ours.num_nodes == theirs.num_nodes == sum(sizes)
    assert ours.mix_draw.shape == (len(sizes),)


def test_a_sample_reads_as_pygs_data():
    f = _samples((6,), mix=False)[0]
    p, d = Points(**f), Data(**f)
    assert p.num_nodes == d.num_nodes == 6 and p.num_graphs == 1
    assert "grid_coord" in p and "normal" not in p
    assert p.keys() == ["pos", "x", "y", "grid_coord"]
    assert [k for k, _ in p] == p.keys() and all(v is getattr(p, k) for k, v in p)
    p.hierarchy = "later"                                       # a field set afterwards is a field
    assert p.keys()[-1] == "hierarchy"
    assert repr(Points(pos=torch.zeros(2, 3), note="a")) == "Points(pos=[2, 3], note=str)"


def test_collate_refuses_samples_of_different_fields_and_none():
    a, b = _samples((2, 3), mix=False)
    del b["grid_coord"]
    with pytest.raises(ValueError, match=r"the same fields, got \['grid_coord', 'pos', 'x', 'y'\] in sample 1 and "
                                         r"\['pos', 'x', 'y'\] in sample 2 of 2"):
        collate([Points(**a), Points(**b)])
    with pytest.raises(ValueError, match="at least one sample"):
        collate([])
    with pytest.raises(ValueError, match=r"sample 1 of 1 of a batch to carry a 'pos' or 'x' tensor, got keys \['y'\]"):
        collate([Points(y=torch.zeros(3))])


def test_to_moves_tensors_and_objects_that_move_and_keeps_the_rest():
    """``to(device)`` returns a new Points (the original untouched); a built PointHierarchy moves with it and stays
    built (its values are not checked again), a string stays; a batch survives pickling (loader workers send it so)."""
    pos = torch.rand(12, 3, generator=torch.Generator().manual_seed(1))
    h = HierarchySpec(strides=(1, 4), neighbours=(3, 2))(pos, torch.tensor([12]))
    p = Points(pos=pos, note="kept", hierarchy=h)
    q = p.to("meta")                                          # a device that needs none
    assert q is not p and p.pos.device.type == "cpu" and q.pos.device.type == "meta" and q.note == "kept"
    moved = q.hierarchy
    assert h.built and moved is not h and moved.built
    assert {t.device.type for t in moved.neighbours + moved.up} == {"meta"} and h.neighbours[1].device.type == "cpu"
    r = pickle.loads(pickle.dumps(collate([p, p])))
    assert r.num_graphs == 2 and torch.equal(r.pos, torch.cat([pos, pos])) and r.note == ["kept", "kept"]


def test_the_loader_yields_points_for_points_and_pygs_batch_for_its_data():
    samples = _samples((3, 5, 2, 4), mix=False)
    ours = next(iter(make_loader([Points(**f) for f in samples], batch_size=4, shuffle=False)))
    theirs = next(iter(make_loader([Data(**f) for f in samples], batch_size=4, shuffle=False)))
    assert type(ours) is Points and isinstance(theirs, Batch)
    for key in ("pos", "x", "y", "grid_coord", "ptr", "batch"):
        assert torch.equal(getattr(ours, key), getattr(theirs, key)), key
