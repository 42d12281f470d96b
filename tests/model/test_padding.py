"""Padded batches (model/padding.py): the dummy cloud changes nothing real, and the padded network reads nothing
on the host. The reference is the unpadded batch through torch's own batch norm."""
from __future__ import annotations

import contextlib
import copy
import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from pointgeope.model import PointTransformerSeg, norm, padding
from pointgeope.model.kernel_choice import forced
from pointgeope.model.ops.hierarchy import HierarchySpec

# three stages, so that every cloud keeps more than k points at every stage: with fewer, the kNN repeats
# neighbours, equal pair rows land on the ReLU's kink in exact arithmetic and rounding picks its gradient
SMALL = dict(planes=(8, 16, 16), share_planes=4, blocks=(1, 1, 1), decoder_blocks=(1, 1, 1), strides=(1, 4, 4),
             neighbours=(8, 16, 16))
IGNORE = 255


def _batch(sizes=(300, 420), seed=0):
    g = torch.Generator().manual_seed(seed)
    coord = torch.rand(sum(sizes), 3, generator=g, dtype=torch.float64)
    feat = torch.rand(sum(sizes), 6, generator=g, dtype=torch.float64)
    label = torch.randint(0, 13, (sum(sizes),), generator=g)
    label[::7] = IGNORE
    return coord, feat, torch.tensor(sizes).cumsum(0), label


def _padded(model, coord, feat, offset, label):
    h = model.hierarchy_spec(coord, offset)
    real, spec = padding.stage_sizes(h), model.hierarchy_spec
    k = spec.neighbours
    sizes = padding.padded_sizes(coord.shape[0], offset.shape[0], spec.strides, k)
    prefixes = {r: torch.tensor(v) for r, v in padding.row_prefixes(real, sizes, k).items()}
    return h, sizes, prefixes, padding.pad_batch(coord, feat, label, h, sizes, IGNORE)


def assert_same_step(model, twin, want, label, got, loss) -> None:
    """The padded step (``twin``: logits ``got`` of every row, ``loss``) ended where the batch's own step did
    (``model``: logits ``want`` of the real rows, ``label``): the real rows' logits, the loss, every gradient
    and every running buffer, to float64 rounding."""
    torch.testing.assert_close(got[:want.shape[0]], want, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(loss, F.cross_entropy(want, label, ignore_index=IGNORE), rtol=1e-10, atol=0)
    for (name, a), b in zip(model.named_parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-8, atol=1e-10, msg=name)
    for (name, a), b in zip(model.named_buffers(), twin.buffers(), strict=True):
        torch.testing.assert_close(b, a, rtol=1e-9, atol=1e-12, msg=name)


@pytest.mark.parametrize("pe", ["rpe", "geope"])
def test_padded_step_equals_unpadded(pe):
    """Logits of the real rows, the loss, every gradient and every running statistic of one training step:
    the padded batch (a dummy cloud at every stage, statistics over the real prefix) = the batch itself."""
    torch.manual_seed(0)
    model = PointTransformerSeg(pe=pe, **SMALL).double().train()
    twin = copy.deepcopy(model)
    coord, feat, offset, label = _batch()
    h, sizes, prefixes, (pc, pf, po, pl, ph) = _padded(model, coord, feat, offset, label)
    assert pc.shape[0] == sizes[0] > coord.shape[0] and po.shape[0] == offset.shape[0] + 1
    with forced("torch"):
        want = model(coord, feat, offset, hierarchy=h)
        F.cross_entropy(want, label, ignore_index=IGNORE).backward()
        with padding.batch_rows(prefixes):
            got = twin.body(pc, pf, ph)
        loss = F.cross_entropy(got, pl, ignore_index=IGNORE)
        loss.backward()
    assert_same_step(model, twin, want, label, got, loss)


def test_prefix_batch_norm_is_torch_on_the_prefix():
    """Against F.batch_norm of the first n rows: values, gradients, running buffers (float32 rows)."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(50, 5, generator=g) * 3 + 1
    w, b = torch.rand(5, generator=g).requires_grad_(), torch.randn(5, generator=g).requires_grad_()
    rm, rv, rm2, rv2 = torch.zeros(5), torch.ones(5), torch.zeros(5), torch.ones(5)
    xa, xb = x.clone().requires_grad_(), x[:37].clone().requires_grad_()
    got = norm.prefix_batch_norm(xa, torch.tensor(37), w, b, rm, rv, 0.1, 1e-5)
    want = F.batch_norm(xb, rm2, rv2, w, b, True, 0.1, 1e-5)
    torch.testing.assert_close(got[:37], want)
    gw = torch.autograd.grad(got[:37].square().sum(), (xa, w, b))
    ww = torch.autograd.grad(want.square().sum(), (xb, w, b))
    torch.testing.assert_close(gw[0][:37], ww[0])
    assert gw[0][37:].abs().max() == 0                # dummy rows feed nothing real
    for a, v in zip(gw[1:], ww[1:], strict=True):
        torch.testing.assert_close(a, v)
    torch.testing.assert_close(rm, rm2)
    torch.testing.assert_close(rv, rv2)


@pytest.mark.parametrize("momentum,track", [(None, True), (0.1, False), (0.3, True)])
def test_a_batch_norm_in_a_padded_batch_is_torchs_on_the_real_rows(momentum, track):
    """``norm.BatchNorm`` inside ``batch_rows`` against torch's ``BatchNorm1d`` on the real rows alone, three
    steps: outputs and running buffers (``momentum=None``: the cumulative average, its step a tensor)."""
    ours, theirs = norm.BatchNorm(5, momentum=momentum, track_running_stats=track), \
        torch.nn.BatchNorm1d(5, momentum=momentum, track_running_stats=track)
    g = torch.Generator().manual_seed(4)
    for step in range(3):
        x = torch.randn(30, 5, generator=g) * (step + 1) + step
        with padding.batch_rows({30: torch.tensor(21)}):
            got = ours(x)
        torch.testing.assert_close(got[:21], theirs(x[:21]))
    assert torch.equal(ours.num_batches_tracked, theirs.num_batches_tracked) if track else ours.running_mean is None
    if track:
        torch.testing.assert_close(ours.running_mean, theirs.running_mean)
        torch.testing.assert_close(ours.running_var, theirs.running_var)


def test_prefix_batch_norm_gradients_of_every_row():
    """A loss of every row, the dummy ones too (they see the real statistics): the hand-written backward
    against autograd through the definition written here with a mask (float64)."""
    g = torch.Generator().manual_seed(2)
    x = (torch.randn(40, 6, generator=g, dtype=torch.float64) * 2 - 1).requires_grad_()
    w = (torch.rand(6, generator=g, dtype=torch.float64) + 0.5).requires_grad_()
    b = torch.randn(6, generator=g, dtype=torch.float64).requires_grad_()
    up = torch.randn(40, 6, generator=g, dtype=torch.float64)
    n = 29
    mask = (torch.arange(40) < n).double().unsqueeze(1)
    mean = (x * mask).sum(0) / n
    var = ((x - mean) ** 2 * mask).sum(0) / n
    want = torch.autograd.grad(((x - mean) / torch.sqrt(var + 1e-5) * w + b).mul(up).sum(), (x, w, b))
    got = torch.autograd.grad(norm.prefix_batch_norm(x, torch.tensor(n), w, b, None, None, 0.1, 1e-5).mul(up).sum(),
                              (x, w, b))
    for a, v in zip(got, want, strict=True):
        torch.testing.assert_close(a, v, rtol=1e-10, atol=1e-12)


def test_prefix_batch_norm_saves_its_input_only():
    """bf16 rows: autograd keeps ``x`` in bf16 and ``(C,)`` vectors, not float32 ``(R, C)`` copies (what a
    padded step's memory would otherwise double)."""
    x = torch.randn(1000, 32, dtype=torch.bfloat16, requires_grad=True)
    w, b = torch.ones(32, requires_grad=True), torch.zeros(32, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel() * t.element_size()) or t,
                                                  lambda t: t):
        norm.prefix_batch_norm(x, torch.tensor(900), w, b, None, None, 0.1, 1e-5)
    assert sum(saved) <= x.numel() * 2 + 4 * 32 * 4 + 64


@pytest.mark.parametrize("clouds", [1, 3, 16])
def test_padded_sizes_hold_every_batch_of_that_size(clouds):
    """Above every stage's rows for any split of the points into clouds (tiny clouds keep one sample at
    every stage), at most about 1/16 (or 64 rows) more at the first, and no row count naming two stages."""
    strides, k = (1, 4, 4, 4, 4), (8, 16, 16, 16, 16)
    g = torch.Generator().manual_seed(clouds)
    for points in (5_000, 80_000 * clouds, 1_000_003):
        sizes = padding.padded_sizes(points, clouds, strides, k)
        assert points < sizes[0] <= max(points * 17 // 16 + 1, points + 64)
        counts = [r for big, kk in zip(sizes, k, strict=True) for r in (big, big * kk)]
        assert len(set(counts)) == len(counts)
        for split in range(20):          # the real stage sizes of random splits, and the extreme ones
            cut = torch.randperm(points - 1, generator=g)[:clouds - 1].add(1).sort().values.tolist()
            if split == 0:
                cut = list(range(1, clouds))                     # clouds of one point, and one large
            n = [b - a for a, b in zip([0] + cut, cut + [points], strict=True)]
            for s, stride in enumerate(strides):
                n = [max(1, m // stride) for m in n]
                assert sum(n) < sizes[s], (points, split, s)


def test_padded_sizes_avoid_a_row_count_of_two_stages():
    """64 rows in 16 clouds with k = 8, then stride 4 and k = 16: stage 1 would get 64 / 4 + 16 = 32 rows, whose
    512 pair rows are stage 0's 64 x 8: it gets 33. Stride 1 keeps the rows of the stage before."""
    assert padding.padded_sizes(50, 16, (1, 4), (8, 16)) == (64, 33)
    assert padding.padded_sizes(50, 15, (1, 4), (8, 16)) == (64, 31)
    assert padding.padded_sizes(100, 1, (1, 1), (8, 16))[1] == padding.padded_sizes(100, 1, (1,), (8,))[0]


def test_unknown_row_count_raises():
    bn = norm.BatchNorm(4).train()
    with padding.batch_rows({10: torch.tensor(5)}), pytest.raises(ValueError, match="over 12 rows"):
        bn(torch.randn(12, 4))


@pytest.mark.parametrize("extra", [-1, 1])
def test_padded_sizes_of_another_stage_count_are_refused_by_name(extra):
    h = HierarchySpec((1, 4), (8, 16))(_batch()[0], torch.tensor([300, 720]))
    sizes = padding.padded_sizes(720, 2, (1, 4, 4)[:2 + extra], (8, 16, 16)[:2 + extra])
    with pytest.raises(ValueError, match=r"^expected one padded size above each stage's rows \(720, 180\), got "):
        padding.pad_hierarchy(h, sizes)


@pytest.mark.parametrize("name", ["up", "up_dist2"])
def test_a_hierarchy_with_an_up_stage_too_many_is_refused_not_padded_short(name):
    """``up`` and ``up_dist2`` hold the S - 1 stages below the last; one more is a hierarchy's bug, which the
    padding must not hide by dropping it (it pairs stage s with ``extra[s]`` for s < S - 1 only)."""
    h = HierarchySpec((1, 4), (8, 16))(_batch()[0], torch.tensor([300, 720]))
    sizes = padding.padded_sizes(720, 2, (1, 4), (8, 16))
    assert len(getattr(padding.pad_hierarchy(h, sizes), name)) == 1 == len(getattr(h, name))
    bad = dataclasses.replace(h, **{name: getattr(h, name) * 2})
    with pytest.raises(ValueError, match=r"^zip\(\) argument 2 is shorter than argument 1$"):
        padding.pad_hierarchy(bad, sizes)


class _ValueReads(TorchFunctionMode):
    """Records the tensor methods that read values on the host (``.tolist()``, ``.item()``, ``bool()``, ...)."""

    READS = {"tolist", "item", "__bool__", "__int__", "__float__", "__index__", "numpy"}

    def __init__(self, seen: list):
        super().__init__()
        self.seen = seen

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in self.READS:
            self.seen.append(func.__name__)
        return func(*args, **(kwargs or {}))


class _SizedByValues(TorchDispatchMode):
    """Records the ops whose output size depends on values (the device must finish before the host goes on)."""

    SIZED = {"_local_scalar_dense", "nonzero", "masked_select", "unique_dim", "_unique2", "unique_consecutive"}

    def __init__(self, seen: list):
        super().__init__()
        self.seen = seen

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in self.SIZED or (name == "repeat_interleave" and (kwargs or {}).get("output_size") is None
                                  and len(args) > 1 and isinstance(args[1], torch.Tensor)):
            self.seen.append(name)
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def _host_reads():
    seen: list[str] = []
    with _ValueReads(seen), _SizedByValues(seen):
        yield seen


@pytest.mark.parametrize("pe", ["rpe", "geope"])
def test_padded_body_reads_nothing_on_the_host(pe):
    """The forward and backward a CUDA graph records (``body`` on a padded batch) read no value back: the
    same step that builds its hierarchy does (a control: the mode would see one); given its hierarchy, the
    unpadded step reads nothing either (its offsets' values are the hierarchy's)."""
    model = PointTransformerSeg(pe=pe, **SMALL).train()
    coord, feat, offset, label = (t.float() if t.is_floating_point() else t for t in _batch())
    h, sizes, prefixes, (pc, pf, po, pl, ph) = _padded(model, coord, feat, offset, label)
    with forced("torch"), _host_reads() as control:
        model(coord, feat, offset).sum().backward()
    assert "tolist" in control                       # the checks of model(...)'s offsets, the hierarchy's ops
    with forced("torch"), _host_reads() as given:
        model(coord, feat, offset, hierarchy=h).sum().backward()
    assert given == []
    with forced("torch"), _host_reads() as reads, padding.batch_rows(prefixes):
        F.cross_entropy(model.body(pc, pf, ph), pl, ignore_index=IGNORE).backward()
    assert reads == []
