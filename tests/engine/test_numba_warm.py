"""Tests of pointgeope/engine/numba_warm.py: the training loader of a host-built hierarchy compiles the numba FPS and
kNN once, in the main process, before its workers start (with an empty cache each worker compiled them itself)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pointgeope.engine.config import load_config
from pointgeope.engine.numba_warm import uses_numba, warm_host_hierarchy
from pointgeope.model.ops.backends import OpsBackends, available
from pointgeope.model.ops.hierarchy import HierarchySpec

REPO = Path(__file__).resolve().parents[2]

# In a fresh interpreter (numba's cache filled by the test process): the training loader of a two-worker,
# host-hierarchy config is made (not iterated: no worker has started); each entry point's compiled signatures are
# counted before and after, and how many of them came from the cache.
_SCRIPT = """
import json, sys, torch
from pointgeope.engine import build
from pointgeope.engine.config import load_config
from pointgeope.engine.distributed import DistEnv
from pointgeope.engine.placement import HierarchyPlace
from pointgeope import morton_order, radix
from pointgeope.data import hsv
from pointgeope.data.transforms import s3dis_train_transform
from pointgeope.model.ops import bucket_fps, kd_knn
entries = (bucket_fps._bucket_fps_packed, kd_knn.build_tree, kd_knn.search_own, kd_knn.search,
           morton_order.morton_order, radix.radix_sort, hsv._shift)
cfg = load_config(None, json.loads(sys.argv[1]))
net = build.model(cfg)
env = DistEnv(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
class Rooms(list):                       # a training dataset's transform: the authors' set, with the hue shift
    transform = s3dis_train_transform("ptv1")
dataset = Rooms(range(8))
before = [len(f.signatures) for f in entries]
loader = build.train_loader(cfg, dataset, build.ResumableSampler(dataset, env, seed=0), env, net,
                            HierarchyPlace("loader", "data.hierarchy=loader", env.device))
assert loader.num_workers == 2
print(json.dumps({f.__name__: [n, len(f.signatures), sum(f._cache_hits.values())] for f, n in zip(entries, before)}))
"""

SMALL = ["model.planes=[8, 16]", "model.blocks=[1, 1]", "model.strides=[1, 4]", "model.neighbours=[8, 8]",
         "model.decoder_blocks=[1, 1]", "data.num_workers=2", "data.hierarchy=loader"]


@pytest.mark.slow
@pytest.mark.skipif(not available("numba"), reason="numba is not installed")
def test_the_loader_compiles_the_host_hierarchy_before_its_workers_start():
    """Every numba entry point of the host hierarchy (the FPS, the kd-tree's build, its search from a cloud's own
    points and from other queries, the Morton order of the queries and its radix sort) has a compiled signature
    in a fresh main process once the loader is made, and none before, and so has the transforms' hue shift:
    forked workers inherit them. Before, none had one (each worker compiled all of them at its first batch).

    The test process first compiles (or loads) the same signatures, so numba's cache holds them: the fresh process
    loads each from the cache (a hit), as a spawned worker does, instead of a cold compile of ~20 CPU s. A compile
    on a cache miss is numba's own dispatch of the same call; the signatures made are the same."""
    from pointgeope.data.transforms import s3dis_train_transform
    from pointgeope.engine import build
    from pointgeope.engine.numba_warm import warm_data_transforms

    warm_host_hierarchy(build.model(load_config(None, SMALL)).hierarchy_spec)   # fills numba's cache
    warm_data_transforms(s3dis_train_transform("ptv1"))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", _SCRIPT, json.dumps(SMALL)], env=env, cwd=REPO,
                          check=False, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    counts = json.loads(done.stdout.strip().splitlines()[-1])
    # [signatures before the loader, after it, loaded from the cache]
    assert counts == {name: [0, 1, 1] for name in ("_bucket_fps_packed", "build_tree", "search_own", "search",
                                                   "morton_order", "radix_sort", "_shift")}


def test_no_warm_up_without_a_numba_backend():
    """A spec whose host ops are not numba's (or no spec: PTv3) compiles nothing and builds nothing."""
    assert warm_host_hierarchy(None) is None
    spec = HierarchySpec((1, 4), (8, 8), OpsBackends(knn="torch", fps="torch"))
    assert not uses_numba(spec) and warm_host_hierarchy(spec) is None


@pytest.mark.skipif(not available("numba"), reason="numba is not installed")
def test_the_warm_up_clouds_are_big_enough_for_every_stage():
    """The tiny clouds keep at least ``max(k, 3)`` points at the coarsest stage of the default network, so the
    warm-up runs the same searches as a real batch (a ``k`` larger than a cloud would take other branches)."""
    from pointgeope.engine import build

    spec = build.model(load_config(None)).hierarchy_spec
    assert uses_numba(spec)
    calls = []

    class Spy(HierarchySpec):
        def __call__(self, coord, offset):
            calls.append((coord.dtype, coord.shape, list(offset)))
            return super().__call__(coord, offset)

    assert warm_host_hierarchy(Spy(spec.strides, spec.neighbours, spec.backends)) >= 0
    (dtype, shape, offset), = calls
    per_cloud = offset[0]
    assert dtype == torch.float32 and shape == (2 * per_cloud, 3) and offset == [per_cloud, 2 * per_cloud]
    coarsest = per_cloud
    for stride in spec.strides:
        coarsest = -(-coarsest // stride)
    assert coarsest >= max(*spec.neighbours, 3)


@pytest.mark.skipif(not available("numba"), reason="numba is not installed")
def test_the_warm_up_draws_from_no_global_generator():
    """The warm-up runs between the seeded weights and the first batch: it takes nothing from torch's or numpy's
    global generators, so a run trains the same weights with it as without it."""
    import numpy as np

    spec = HierarchySpec((1, 4), (8, 8))
    torch.manual_seed(5)
    np.random.seed(5)
    before = torch.get_rng_state(), np.random.get_state()[1].copy()
    assert warm_host_hierarchy(spec) is not None
    assert torch.equal(torch.get_rng_state(), before[0]) and np.array_equal(np.random.get_state()[1], before[1])


@pytest.mark.skipif(not available("numba"), reason="numba is not installed")
def test_the_transforms_numba_signatures_are_the_ones_the_warm_up_compiles():
    """After ``warm_data_transforms`` the hue and saturation shift of a sample's float32 colours and the voxel
    sampling of its coordinates compile nothing more: the warm-up gave them the signatures a worker calls
    (before it, with an empty cache, every worker compiled them at its first sample)."""
    import numpy as np

    from pointgeope import radix
    from pointgeope.data import hsv
    from pointgeope.data.transforms import HueSaturationTranslation, s3dis_train_transform
    from pointgeope.data.voxelize import voxel_sample
    from pointgeope.engine.numba_warm import warm_data_transforms

    warm_data_transforms(s3dis_train_transform("ptv1"))
    warmed = {f: set(f.signatures) for f in (hsv._shift, radix.radix_sort)}
    rng = np.random.default_rng(0)
    sample = {"coord": rng.random((500, 3), dtype=np.float32), "color": rng.random((500, 3), dtype=np.float32) * 255}
    shifted = HueSaturationTranslation()(sample, rng)
    kept = voxel_sample(sample["coord"], 0.05, rng)
    assert shifted["color"].shape == (500, 3) and 0 < len(kept) < 500      # both ran (a grid of 0.05 merges)
    assert {f: set(f.signatures) for f in warmed} == warmed


@pytest.mark.parametrize(("augment", "shifts"), [("ptv1", True), ("pointcept", False), ("none", False)])
def test_the_hue_shift_is_warmed_only_where_the_transforms_call_it(monkeypatch, augment, shifts):
    """Only ``data.augment: ptv1`` shifts hues (``HueSaturationTranslation``): the other sets' runs do not compile
    it at start (with an empty cache a compile of seconds, for a function no worker calls); the voxel sort is
    warmed for every set (every dataset's grid sampling sorts)."""
    from pointgeope.data.transforms import s3dis_train_transform
    from pointgeope.engine import numba_warm

    called = []
    monkeypatch.setattr(numba_warm, "shift_hue_saturation", lambda *a: called.append("hue"))
    monkeypatch.setattr(numba_warm, "sort_nonnegative", lambda *a: called.append("sort"))
    numba_warm.warm_data_transforms(s3dis_train_transform(augment))
    assert called == (["hue", "sort"] if shifts else ["sort"])
