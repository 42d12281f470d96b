"""Tests of pointgeope/model/network.py: shapes, permutations, inputs, parameter count, overfitting a room."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Batch, Data

from pointgeope.constants import CLASS_INDEX
from pointgeope.model import OpsBackends, PointTransformerSeg
from tests.model.shared_stage import layers_of, shared_and_alone

PRESET_NAMES = ["rpe", "geope", "lingeope", "geope+rpe", "lingeope+rpe", "none", "rope3d", "rope3d+rpe", "rope-mixed",
                "ape"]
TINY = dict(blocks=(1, 1, 1), planes=(16, 24, 32), strides=(1, 4, 4), neighbours=(8, 8, 8), decoder_blocks=(1, 1, 1),
            share_planes=8)


def _batch(sizes=(130, 70), seed=0):
    g = torch.Generator().manual_seed(seed)
    coord = torch.rand(sum(sizes), 3, generator=g) * torch.tensor([3.0, 3.0, 2.0])
    feat = torch.cat([torch.rand(sum(sizes), 3, generator=g), coord], dim=1)
    return coord, feat, torch.tensor(sizes).cumsum(0)


@pytest.mark.parametrize("pe", PRESET_NAMES)
def test_every_preset_gives_logits_and_a_finite_backward(pe):
    torch.manual_seed(0)
    model = PointTransformerSeg(pe=pe, **TINY).train()
    coord, feat, offset = _batch()
    logits = model(coord, feat, offset)
    assert logits.shape == (200, 13)
    torch.nn.functional.cross_entropy(logits, torch.randint(0, 13, (200,))).backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def _graph_nodes(root) -> set[str]:
    """The names of every node of the autograd graph behind ``root``'s ``grad_fn``."""
    seen, stack, names = set(), [root.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.add(type(node).__name__)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return names


@pytest.mark.parametrize("pe", ["rpe", "geope", "lingeope"])
def test_the_backward_copies_no_pair_tensor_through_a_view(pe):
    """An in-place op on a view (a ReLU on the ``(N, k, C)`` view of BatchNorm's rows) makes autograd record
    ``CopySlices``, whose backward clones and copies the whole base tensor: three extra passes over the
    largest tensors of the step. The published step has none."""
    model = PointTransformerSeg(pe=pe, **TINY).train()
    coord, feat, offset = _batch()
    names = _graph_nodes(model(coord, feat, offset).sum())
    assert "AddmmBackward0" in names                      # the walk reaches the layers
    assert not names & {"CopySlices", "AsStridedBackward0"}


def test_outputs_follow_a_permutation_within_each_cloud():
    """With first-point FPS (the pure-torch backend) the network is equivariant to any permutation that
    keeps each cloud's first point first: FPS, kNN and interpolation only see geometry (every FPS backend
    starts from the first point, ``fps.FPS_RULE``)."""
    torch.manual_seed(0)
    model = PointTransformerSeg(pe="geope", backends=OpsBackends(knn="pykdtree", fps="torch"), **TINY).eval()
    coord, feat, offset = _batch(seed=1)
    g = torch.Generator().manual_seed(2)
    perm = torch.cat([torch.cat([torch.tensor([0]), 1 + torch.randperm(129, generator=g)]),
                      130 + torch.cat([torch.tensor([0]), 1 + torch.randperm(69, generator=g)])])
    with torch.no_grad():
        out = model(coord, feat, offset)
        out_perm = model(coord[perm], feat[perm], offset)
    torch.testing.assert_close(out_perm, out[perm], atol=1e-4, rtol=1e-4)


def test_geometric_data_and_batch_inputs():
    torch.manual_seed(0)
    model = PointTransformerSeg(**TINY).eval()
    coord, feat, offset = _batch()
    batch = Batch.from_data_list([Data(pos=coord[:130], x=feat[:130]), Data(pos=coord[130:], x=feat[130:])])
    with torch.no_grad():
        expected = model(coord, feat, offset)
        torch.testing.assert_close(model(batch), expected)
        torch.testing.assert_close(model(Data(pos=coord[:130], x=feat[:130])),
                                   model(coord[:130], feat[:130], offset[:1]))


def test_bad_inputs_are_clear_errors():
    model = PointTransformerSeg(**TINY)
    coord, feat, offset = _batch()
    with pytest.raises(ValueError, match=r"coord of shape \(N, 3\)"):
        model(coord[:, :2], feat, offset)
    with pytest.raises(ValueError, match=r"feat of shape \(200, 6\)"):
        model(coord, feat[:, :5], offset)
    with pytest.raises(ValueError, match=r"offset\[-1\] == number of points 200"):
        model(coord, feat, torch.tensor([130, 190]))
    with pytest.raises(ValueError, match="one entry per stage"):
        PointTransformerSeg(blocks=(1, 2))
    with pytest.raises(ValueError, match="unknown positional encoding 'rope'"):
        PointTransformerSeg(pe="rope", **TINY)


def _published_parameter_count(in_channels=6, num_classes=13) -> int:
    """Parameters of the authors' PointTransformerSeg50 (POSTECH-CVLab/point-transformer,
    ``model/pointtransformer/pointtransformer_seg.py``, ``blocks=[2, 3, 4, 6, 3]``), counted from its layout."""
    def lin(i, o, bias=True):
        return i * o + (o if bias else 0)

    def bn(c):
        return 2 * c

    def layer(c, s=8):   # q, k, v; linear_p = Lin(3,3) BN(3) Lin(3,c); linear_w = BN(c) Lin(c,c/s) BN(c/s) Lin(c/s,c/s)
        return 3 * lin(c, c) + lin(3, 3) + bn(3) + lin(3, c) + bn(c) + lin(c, c // s) + bn(c // s) + lin(c // s, c // s)

    def block(c):        # linear1 bn1 transformer2 bn2 linear3 bn3
        return lin(c, c, False) + bn(c) + layer(c) + bn(c) + lin(c, c, False) + bn(c)

    planes, strides, modules = [32, 64, 128, 256, 512], [1, 4, 4, 4, 4], [2, 3, 4, 6, 3]
    total, width = 0, in_channels
    for c, stride, m in zip(planes, strides, modules, strict=True):     # TransitionDown + (m - 1) blocks
        total += lin(width + (3 if stride > 1 else 0), c, False) + bn(c) + (m - 1) * block(c)
        width = c
    total += lin(2 * 512, 512) + bn(512) + lin(512, 512) + block(512)              # dec5: head TransitionUp
    for fine, coarse in ((256, 512), (128, 256), (64, 128), (32, 64)):             # dec4 .. dec1
        total += lin(fine, fine) + bn(fine) + lin(coarse, fine) + bn(fine) + block(fine)
    return total + lin(32, 32) + bn(32) + lin(32, num_classes)                      # cls


def test_parameter_count_of_the_published_model():
    published = _published_parameter_count()
    assert 7.7e6 < published < 7.9e6                   # "7.8M"
    for pe in ("rpe", "geope", "lingeope", "rope3d", "rope-mixed", "ape"):
        count = sum(p.numel() for p in PointTransformerSeg(pe=pe).parameters())
        assert abs(count - published) <= 0.01 * published, (pe, count, published)
    assert sum(p.numel() for p in PointTransformerSeg(pe="rpe").parameters()) == published
    count = {pe: sum(p.numel() for p in PointTransformerSeg(pe=pe).parameters()) for pe in ("geope", "rope3d", "ape")}
    assert count["rope3d"] == count["geope"] == count["ape"]       # the baselines add no parameter to GeoPE's
    # RoPE-Mixed learns a (3 m, 3) frequency matrix per layer, m = C // 6: C = 32, 64, 128, 256, 512 with
    # 2, 3, 4, 6, 3 layers (encoder blocks + one decoder block per stage)
    layers = {32: 2, 64: 3, 128: 4, 256: 6, 512: 3}
    mixed = sum(p.numel() for p in PointTransformerSeg(pe="rope-mixed").parameters())
    assert mixed - count["rope3d"] == sum(n * 9 * (c // 6) for c, n in layers.items())


def _read_room(room):
    coords, colors, labels = [], [], []
    for path in sorted((room / "Annotations").glob("*.txt")):
        values = np.loadtxt(path, dtype=np.float64, ndmin=2)
        coords.append(values[:, :3])
        colors.append(values[:, 3:6])
        labels.append(np.full(len(values), CLASS_INDEX[path.stem.rsplit("_", 1)[0]]))
    return np.concatenate(coords), np.concatenate(colors), np.concatenate(labels)


def test_tiny_network_overfits_a_real_room(s3dis_real):
    coord, color, label = _read_room(s3dis_real / "Area_1" / "office_2")
    assert len(label) == 100
    coord = torch.tensor(coord - coord.min(0), dtype=torch.float32)
    feat = torch.cat([torch.tensor(color / 255.0, dtype=torch.float32), coord], dim=1)
    target = torch.tensor(label)
    offset = torch.tensor([100])
    torch.manual_seed(0)
    model = PointTransformerSeg(pe="geope", blocks=(1, 1), planes=(32, 64), strides=(1, 4), neighbours=(8, 8),
                                decoder_blocks=(1, 1), grid_size=0.5).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)          # 100 points: a second OpenMP thread only waits on the shared cores
    try:
        step, accuracy, loss = _fit(model, optimizer, coord, feat, offset, target)
    finally:
        torch.set_num_threads(threads)
    assert accuracy > 0.95, (step, accuracy, loss.item())


def _fit(model, optimizer, coord, feat, offset, target):
    accuracy = 0.0
    for step in range(1, 101):                     # reaches 100% after ~40 steps (~40 ms each, one thread)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(coord, feat, offset), target)
        loss.backward()
        optimizer.step()
        if step % 10 == 0:                         # accuracy in eval mode (BatchNorm running statistics)
            model.eval()
            with torch.no_grad():
                accuracy = (model(coord, feat, offset).argmax(1) == target).float().mean().item()
            model.train()
            if accuracy > 0.95:
                break
    return step, accuracy, loss


def test_model_does_not_import_the_data_code():
    """Data flows one way: no module of pointgeope/model imports pointgeope.data, pointgeope.scans or data_prep."""
    import pointgeope.model
    from tests.conftest import module_imports

    imports = module_imports(pointgeope.model)
    assert len(imports) >= 8
    for path, name in ((path, name) for path, names in imports.items() for name in names):
        assert not name.startswith(("pointgeope.data", "pointgeope.scans", "data_prep")), f"{path}: imports {name}"


def test_cloud_means_sum_in_float32_under_autocast():
    """The head's per-cloud means of bf16 rows under bf16 autocast: float32 sums (bf16 sums of 5,000 rows of
    about 1 would stall at 256 and lose every term below 1), equal to the float64 means of the same values."""
    from pointgeope.model.network import cloud_means
    from pointgeope.model.ops import cloud_of_rows

    g = torch.Generator().manual_seed(0)
    feat = (torch.rand(9_000, 4, generator=g) + 0.5).to(torch.bfloat16)
    offset = torch.tensor([5_000, 5_100, 9_000])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = cloud_means(feat, offset, cloud_of_rows(offset, 9_000))
    want = torch.stack([part.double().mean(0) for part in feat.split([5_000, 100, 3_900])])
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=0)


@pytest.mark.parametrize("pe, path", [("geope", "torch"), ("geope+rpe", "torch"), ("geope", "triton")])
def test_the_layers_of_a_stage_share_one_rotation_table_and_nothing_changes(pe, path, monkeypatch, request):
    """The forward builds one GeoPE table per stage (stage_memo.shared), and its logits and every
    gradient are bit for bit those of the same network building a table per layer: on the torch path and
    on the Triton kernels (interpreted), which keep the table for their backward. Two clouds of 40 and 32
    points: stages of 72, 18 and 5 rows (distinct, each with a second cloud; both clouds hold k = 8 at the
    second stage, no cyclic fill); the hierarchy's k-NN and FPS
    on torch's path (the Triton ones, interpreted, would be most of the time and none of the subject)."""
    if path == "triton":
        request.getfixturevalue("interpreted_cpu")
        request.getfixturevalue("torch_batch_norm")
    tiny = {**TINY, "backends": OpsBackends(knn="torch", fps="torch")}

    from pointgeope.model import fused_attention, rotation

    fused = []
    relation = fused_attention.frame_relation
    monkeypatch.setattr(fused_attention, "frame_relation", lambda *a, **kw: fused.append(1) or relation(*a, **kw))
    built = []
    build = rotation._build_tables
    monkeypatch.setattr(rotation, "_build_tables", lambda *a: built.append(a[0].shape[0]) or build(*a))
    coord, feat, offset = _batch((40, 32))
    runs = shared_and_alone(monkeypatch, built, pe, tiny, coord, feat, offset)
    (shared, shared_grads, shared_built), (alone, alone_grads, alone_built) = runs
    assert torch.equal(shared, alone)
    assert all(torch.equal(a, b) for a, b in zip(shared_grads, alone_grads, strict=True))
    layers = layers_of(tiny)
    assert len(alone_built) == layers                                     # a table per layer without sharing
    assert len(shared_built) == len(set(alone_built)) == 3                # one per stage (3 stages, distinct N)
    assert len(fused) == (2 * layers if path == "triton" else 0)          # the kernels took the shared tables


@pytest.mark.parametrize("mixed_init", ["random", "axial"])
@pytest.mark.parametrize("pe", [*PRESET_NAMES, "pointrope"])
def test_frequency_keys_names_the_keys_that_change_the_network(pe, mixed_init):
    """``attention.frequency_keys`` (the config's rule for ``model.geope_base`` / ``model.geope_learnable``)
    lists a key exactly when setting it changes the network: ``geope_base`` its logits, ``geope_learnable`` its
    parameters."""
    from pointgeope.model.attention import PRESETS, frequency_keys

    coord, feat, offset = _batch()

    def built(**keys):
        torch.manual_seed(0)
        model = PointTransformerSeg(pe=pe, rope_mixed_init=mixed_init, **TINY, **keys).eval()
        with torch.no_grad():
            return model(coord, feat, offset), [name for name, _ in model.named_parameters()]

    (plain, names), (based, _), (_, learnt) = built(), built(geope_base=50.0), built(geope_learnable=True)
    read = frequency_keys(PRESETS[pe], mixed_init)
    assert ("geope_base" in read) == (not torch.equal(plain, based))
    assert ("geope_learnable" in read) == (learnt != names)
