"""Patch partition and serialized attention against a reference written from the definition.

The reference walks each cloud along its curve, cuts it into patches of K (the last one: the cloud's last K
points; a cloud of n <= K points: one patch of n), attends with an explicit softmax, and gives each point the
output of the first patch that holds it: Pointcept's flash path, without any padding.
"""
from __future__ import annotations

import pytest
import torch

from pointgeope.model.ptv3.attention import SerializedAttention
from pointgeope.model.ptv3.patches import partition
from pointgeope.model.ptv3.structure import PointBatch
from pointgeope.model.qk_encodings import qk_encoding
from tests.model.qk_reference import lingeope_reference


@pytest.mark.parametrize("counts, k", [((37, 5, 16, 33), 8), ((1,), 4), ((4, 4), 4), ((9,), 1)])
def test_partition_properties(counts, k):
    part = partition(torch.tensor(counts), k)
    n = sum(counts)
    assert torch.equal(part.source[part.slot], torch.arange(n))          # each point's slot holds it
    cloud_of = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts))
    patches = part.source.view(-1, k)
    assert bool((cloud_of[patches] == cloud_of[patches[:, :1]]).all())  # a patch never mixes clouds
    for c, count in enumerate(counts):
        rows = patches[cloud_of[patches[:, 0]] == c]
        if count < k:
            assert rows.shape[0] == 1 and part.valid is not None
        else:
            assert rows.shape[0] == -(-count // k)
            last = rows[-1].tolist()
            start = sum(counts[:c])
            assert sorted(last) == list(range(start + count - k, start + count))   # the cloud's last K
    keys = part.valid.sum().item() if part.valid is not None else part.source.numel()
    assert keys == sum(c if c < k else -(-c // k) * k for c in counts)  # short clouds: only their points


def plain_patch(attn: SerializedAttention):
    """Softmax attention of one patch: ``(q, k, v)`` of its points ``(L, H, D)`` (and their coordinates) ->
    ``(L, H, D)``."""
    def attend(q, key, v, coord):
        scores = torch.einsum("ihd,jhd->hij", q, key) * attn.scale
        return torch.einsum("hij,jhd->ihd", scores.softmax(-1), v)
    return attend


def reference_attention(attn: SerializedAttention, point: PointBatch, k: int, attend=None) -> torch.Tensor:
    """The layer by its definition: every cloud in serialization order cut into patches of ``k`` (the last one
    ending at the cloud's end, a cloud shorter than ``k`` one patch), ``attend`` (default: :func:`plain_patch`)
    on each, a point's output from its first patch, then the projection."""
    attend = attend or plain_patch(attn)
    h, c = attn.num_heads, attn.channels
    q, key, v = attn.qkv(point.feat).view(-1, 3, h, c // h).unbind(1)         # (N, H, D)
    out = torch.full((len(point.feat), h, c // h), float("nan"))
    code = point.serialized_code[attn.order_index]
    for cloud in range(point.num_clouds):
        members = torch.nonzero(point.batch == cloud).flatten()
        members = members[torch.argsort(code[members])]
        n = len(members)
        starts = list(range(0, n, k)) if n > k else [0]
        for s in starts:
            idx = members[s:s + k] if s + k <= n or n <= k else members[n - k:]
            res = attend(q[idx], key[idx], v[idx], point.coord[idx])
            fresh = torch.isnan(out[idx, 0, 0])
            out[idx[fresh]] = res[fresh]
    return attn.proj(out.reshape(-1, c))


def make_point(counts, channels, seed):
    gen = torch.Generator().manual_seed(seed)
    grid = torch.cat([torch.randperm(512, generator=gen)[:n] for n in counts])
    grid = torch.stack([grid // 64, grid // 8 % 8, grid % 8], 1)
    offset = torch.cumsum(torch.tensor(counts), 0)
    point = PointBatch.from_inputs(grid.float() * 0.1, grid, torch.randn(len(grid), channels, generator=gen),
                                   offset)
    point.serialize(("z", "hilbert"))
    return point


@pytest.mark.parametrize("flash", [True, False])
def test_attention_equals_reference(flash):
    point = make_point((45, 7, 16, 29), 12, 0)
    torch.manual_seed(0)
    attn = SerializedAttention(12, 3, patch_size=16, order_index=1, enable_flash=flash).eval()
    k = 16 if flash else 7                                 # the fallback: min(patch_size, smallest cloud)
    with torch.no_grad():
        torch.testing.assert_close(attn(point), reference_attention(attn, point, k), atol=1e-5, rtol=1e-5)


def test_pe_hook_gets_the_patches_and_changes_the_scores():
    point = make_point((20, 5), 8, 1)
    seen = {}

    class Hook:
        """A per-token encoding in the attention's one protocol: turn q, then the layer's own SDPA."""

        def attention(self, q, k, v, coord_patches, grid_patches, *, sdpa, **kwargs):
            seen.update(q=q.shape, coord=coord_patches, grid=grid_patches, sdpa=sdpa)
            return sdpa(q * 2.0, k, v, **kwargs)

    plain = SerializedAttention(8, 2, patch_size=8).eval()
    hooked = SerializedAttention(8, 2, patch_size=8, pe=Hook()).eval()
    hooked.load_state_dict(plain.state_dict())
    with torch.no_grad():
        a, b = plain(point), hooked(point)
    assert seen["q"] == (4, 2, 8, 4)                      # 20 -> 3 patches, 5 -> 1 patch; (P, H, K, D)
    assert seen["sdpa"] == hooked.sdpa                    # the layer's own SDPA entry (upcast, CUDA padding)
    order = point.serialized_order[0]
    first_patch = order[:8]                               # cloud 0's first 8 points along the curve
    assert torch.equal(seen["grid"][0], point.grid_coord[first_patch])
    assert torch.equal(seen["coord"][0], point.coord[first_patch])
    assert not torch.allclose(a, b)
    plain.scale *= 2.0                                     # scaling q by 2 = doubling the softmax scale
    with torch.no_grad():
        torch.testing.assert_close(plain(point), b, atol=1e-5, rtol=1e-5)


def test_lingeope_attention_equals_its_per_pair_reference():
    """lingeope in the patch attention, its one protocol (``pe.attention``), against softmax of
    ``q_i^T R(k_b (p_j - p_i)) k_j / sqrt(D)`` per patch with matrix exponentials (qk_reference.py): the
    patches' coordinates, scale and mask (cloud 1 is shorter than a patch) reach the encoding."""
    point = make_point((45, 7, 16, 29), 18, 2)
    torch.manual_seed(0)
    attn = SerializedAttention(18, 3, patch_size=16, order_index=1, pe=qk_encoding("lingeope", 6)).eval()

    def attend(q, key, v, coord):                                        # (L, H, D) each, coord (L, 3)
        per_patch = [t.transpose(0, 1)[None].double() for t in (q, key, v)]   # (1, H, L, D)
        return lingeope_reference(*per_patch, coord[None].double())[0].transpose(0, 1).float()
    with torch.no_grad():
        torch.testing.assert_close(attn(point), reference_attention(attn, point, 16, attend), atol=1e-5, rtol=1e-5)
