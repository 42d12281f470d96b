"""Tests of pointgeope/model/ops/hierarchy.py: the network's point hierarchy against brute force, batching
as shifted per-cloud hierarchies, and a network that takes a given hierarchy."""
from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Batch, Data

from pointgeope.model import OpsBackends, PointTransformerSeg
from pointgeope.model.ops import HierarchySpec, PointHierarchy, backends
from tests.model.fps_reference import reference_fps
from tests.model.test_ops import _brute_knn, _clouds

SPEC = HierarchySpec(strides=(1, 4, 4), neighbours=(8, 6, 5))
TINY = dict(blocks=(1, 1, 1), planes=(16, 24, 32), strides=(1, 4, 4), neighbours=(8, 6, 5), decoder_blocks=(1, 1, 1),
            share_planes=8)


def _cloud_of(offset: torch.Tensor) -> torch.Tensor:
    sizes = torch.diff(offset, prepend=torch.zeros(1, dtype=torch.long))
    return torch.repeat_interleave(torch.arange(len(offset)), sizes)


@pytest.mark.parametrize("knn_backend", [b for b in ("numba", "pykdtree", "scipy", "torch") if backends.available(b)])
def test_every_stage_holds_the_brute_force_neighbourhoods_of_exact_fps_samples(knn_backend):
    """First-point FPS (pure torch) so that the samples are checkable against a numpy FPS; the kNN of
    every kind (stage, transition down, 3-NN up) has the brute-force distances and stays in its cloud."""
    coord, offset = _clouds([900, 40, 3], seed=11)
    spec = HierarchySpec((1, 4, 4), (8, 6, 5), OpsBackends(knn=knn_backend, fps="torch"))
    h = spec(coord, offset)
    assert h.stages == 3 and h.samples[0] is None and h.down[0] is None
    assert [o.tolist() for o in h.offsets] == [[900, 940, 943], [225, 235, 236], [56, 58, 59]]
    coords = h.coords(coord)
    for s in (1, 2):
        fine, off = coords[s - 1], h.offsets[s - 1]
        start = 0
        for b, end in enumerate(off.tolist()):                  # FPS of each cloud, from its first point
            lo, hi = (h.offsets[s][b - 1].item() if b else 0), h.offsets[s][b].item()
            expected = reference_fps(fine[start:end].numpy(), hi - lo)
            assert (h.samples[s][lo:hi] - start).tolist() == expected
            start = end
        torch.testing.assert_close(coords[s], fine[h.samples[s]])
    pairs = [(coords[s], coords[s], h.neighbours[s], h.offsets[s], h.offsets[s]) for s in range(3)]       # stages
    pairs += [(coords[s], coords[s - 1], h.down[s], h.offsets[s], h.offsets[s - 1]) for s in (1, 2)]    # down
    pairs += [(coords[s], coords[s + 1], h.up[s], h.offsets[s], h.offsets[s + 1]) for s in (0, 1)]      # up
    for query, support, idx, q_off, s_off in pairs:
        k = idx.shape[1]
        expected = _brute_knn(query, support, k, q_off, s_off)
        got = ((query[:, None].double() - support[idx].double()) ** 2).sum(-1)
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-6)
        assert torch.equal(_cloud_of(s_off)[idx], _cloud_of(q_off)[:, None].expand(-1, k))
    for s in (0, 1):
        torch.testing.assert_close(h.up_dist2[s].double(), _brute_knn(coords[s], coords[s + 1], 3, h.offsets[s],
                                                                      h.offsets[s + 1]), atol=1e-6, rtol=1e-6)


def test_a_batch_hierarchy_is_the_per_cloud_hierarchies_with_shifted_rows():
    """What the data loader relies on: with the default backends (numba FPS, pykdtree) the hierarchy of a
    packed batch equals each cloud's own hierarchy, rows shifted by the cloud's start in every stage."""
    coord, offset = _clouds([1500, 1100, 300], seed=12)
    whole = SPEC(coord, offset)
    starts = [0, 1500, 2600]
    parts = [SPEC(coord[a:a + n], torch.tensor([n])) for a, n in zip(starts, [1500, 1100, 300], strict=True)]

    def shifted(field: str, stage: int, base_stage: int) -> torch.Tensor:
        out, base = [], 0
        for part in parts:
            out.append(getattr(part, field)[stage] + base)
            base += part.offsets[base_stage][0].item()
        return torch.cat(out)

    for s in range(3):
        assert torch.equal(whole.neighbours[s], shifted("neighbours", s, s))
        if s:
            assert torch.equal(whole.samples[s], shifted("samples", s, s - 1))
            assert torch.equal(whole.down[s], shifted("down", s, s - 1))
        if s < 2:
            assert torch.equal(whole.up[s], shifted("up", s, s + 1))
            assert torch.equal(whole.up_dist2[s], torch.cat([p.up_dist2[s] for p in parts]))


def test_the_network_gives_the_same_output_and_gradients_with_a_given_hierarchy():
    torch.manual_seed(0)
    model = PointTransformerSeg(pe="geope", **TINY).train()
    coord, offset = _clouds([300, 200], seed=13)
    feat = torch.cat([torch.rand(500, 3), coord], dim=1)
    given = model.hierarchy_spec(coord, offset)
    outputs = []
    for hierarchy in (None, given):
        torch.manual_seed(1)
        model.zero_grad()
        out = model(coord, feat, offset, hierarchy=hierarchy)
        out.square().mean().backward()
        outputs.append((out.detach(), [p.grad.clone() for p in model.parameters()]))
    assert torch.equal(outputs[0][0], outputs[1][0])
    assert all(torch.equal(a, b) for a, b in zip(outputs[0][1], outputs[1][1], strict=True))
    with pytest.raises(ValueError, match="point hierarchy"):
        model(coord[:300], feat[:300], offset[:1], hierarchy=given)


def test_a_batch_carries_its_hierarchy_to_another_device():
    coord, offset = _clouds([200, 100], seed=14)
    batch = Batch.from_data_list([Data(pos=coord[:200]), Data(pos=coord[200:])])
    batch.hierarchy = SPEC(batch.pos, batch.ptr[1:])
    moved = batch.to("meta")                          # a device every CPU build has
    assert isinstance(moved.hierarchy, PointHierarchy)
    assert moved.hierarchy.neighbours[2].device.type == "meta" and moved.hierarchy.samples[0] is None
    assert moved.hierarchy.up_dist2[0].shape == batch.hierarchy.up_dist2[0].shape
