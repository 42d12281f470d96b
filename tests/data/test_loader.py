"""Batches from worker processes: correct ptr, same blocks as in the main process, shardable."""
from __future__ import annotations

import pickle

import pytest
import torch
from torch.utils.data import DistributedSampler

from pointgeope.data.dataset import S3DISTrain
from pointgeope.data.loader import make_loader, set_epoch
from pointgeope.data.rooms import RoomStore


def batches(loader) -> list:
    return list(loader)


def test_two_workers_give_the_main_process_blocks_with_correct_ptr(prepared):
    root, _ = prepared
    ds = S3DISTrain(root, ["Area_1", "Area_2"], loop=2, voxel_max=500, seed=3)
    ds[0]  # opens an HDF5 handle in the main process: the forked workers must not use it
    loader = make_loader(ds, batch_size=3, num_workers=2, seed=11)
    set_epoch(loader, 2)
    got = batches(loader)
    order = list(loader.sampler)
    assert sorted(order) == list(range(len(ds)))
    assert [b.num_graphs for b in got] == [3, 3, 2]
    position = 0
    for batch in got:
        sizes = torch.bincount(batch.batch)
        torch.testing.assert_close(batch.ptr, torch.cat([torch.zeros(1, dtype=torch.long), sizes.cumsum(0)]))
        assert batch.ptr[-1] == batch.num_nodes == batch.x.shape[0]
        for g in range(batch.num_graphs):
            expected = ds[order[position]]          # the main process, epoch 2, same index
            torch.testing.assert_close(batch.x[batch.ptr[g]:batch.ptr[g + 1]], expected.x)
            position += 1
    # Same epoch, same seed: identical batches again (resume); another epoch: another order.
    again = batches(loader)
    assert all(torch.equal(a.x, b.x) for a, b in zip(got, again, strict=True))
    set_epoch(loader, 3)
    assert list(loader.sampler) != order


def test_distributed_sampler_shards_the_epoch(prepared):
    root, _ = prepared
    ds = S3DISTrain(root, ["Area_1"], loop=3, voxel_max=200)
    shards = []
    for rank in range(2):
        sampler = DistributedSampler(ds, num_replicas=2, rank=rank, shuffle=True, seed=5)
        loader = make_loader(ds, batch_size=2, sampler=sampler)
        set_epoch(loader, 1)
        assert sampler.epoch == 1 and ds.epoch == 1
        shards.append(list(loader.sampler))
    assert sorted(shards[0] + shards[1]) == list(range(len(ds)))


def test_room_store_never_pickles_an_open_handle(prepared):
    root, _ = prepared
    ds = S3DISTrain(root, ["Area_1"], loop=1, cache=True)
    ds[0]
    assert ds.store._files and ds.store._rooms
    clone = pickle.loads(pickle.dumps(ds))
    assert clone.store._files == {} and clone.store._pid is None
    torch.testing.assert_close(clone[1].x, ds[1].x)
    ds.store.close()
    assert isinstance(clone.store, RoomStore)


def _add_count(batch):
    batch.count = torch.tensor([batch.num_graphs, batch.num_nodes])
    return batch


def test_batch_transform_runs_on_every_collated_batch_in_the_workers(prepared):
    root, _ = prepared
    ds = S3DISTrain(root, ["Area_1"], loop=3, voxel_max=300, seed=1)
    got = batches(make_loader(ds, batch_size=2, num_workers=2, seed=3, batch_transform=_add_count))
    assert [b.count.tolist() for b in got] == [[b.num_graphs, b.num_nodes] for b in got]
    assert [b.num_graphs for b in got] == [2] * (len(ds) // 2) + [1] * (len(ds) % 2)


def test_data_code_does_not_import_the_model():
    """Data flows one way: no module of pointgeope/data imports pointgeope.model (the engine joins them)."""
    import pointgeope.data
    from tests.conftest import module_imports

    imports = module_imports(pointgeope.data)
    assert len(imports) >= 8
    for path, name in ((path, name) for path, names in imports.items() for name in names):
        assert not name.startswith("pointgeope.model"), f"{path}: imports {name}"


def test_a_non_finite_feature_is_refused_where_the_batch_is_collated():
    """A sample whose features hold a NaN reached the network, whose logits for its whole cloud were NaN, without a
    word; the loader refuses it on the CPU (no read from the accelerator), naming the sample of the batch and its row
    (it named a row of the packed batch, 6, which no sample has)."""
    from torch_geometric.data import Data

    samples = [Data(pos=torch.rand(4, 3), x=torch.rand(4, 6)) for _ in range(3)]
    samples[1].x[2, 0] = float("nan")
    loader = make_loader(samples, batch_size=3, shuffle=False)
    with pytest.raises(ValueError, match=r"expected finite x \(the input features of the batch's sample 2 of 3, in its "
                                         r"own rows\), got 1 NaN or infinite entries \(the first in row 2"):
        next(iter(loader))
    samples[1].x[2, 0] = 0.5
    assert torch.isfinite(next(iter(loader)).x).all()


def test_the_loader_leaves_samples_that_their_dataset_checked(prepared, monkeypatch):
    """S3DISTrain checks each sample's x as it makes it (naming the room's point), so collation checked it a second
    time (about 0.7 ms a sample); the loader now checks only the samples of other datasets, and of a subclass whose
    own __getitem__ may bypass that check: its NaN is still refused at collation."""
    import pointgeope.data.loader as loader_module
    from pointgeope.data.sample_check import checks_its_samples

    root, _ = prepared
    seen = []
    real = loader_module.check_finite
    monkeypatch.setattr(loader_module, "check_finite", lambda name, x: seen.append(name) or real(name, x))
    ds = S3DISTrain(root, ["Area_1"], loop=1, voxel_max=200, seed=3)
    assert next(iter(make_loader(ds, batch_size=2, shuffle=False))).num_graphs == 2 and seen == []

    class Poisoned(S3DISTrain):
        def __getitem__(self, index):
            data = super().__getitem__(index)
            data.x[0, 0] = float("inf")
            return data

    class Same(S3DISTrain):
        pass

    assert checks_its_samples(ds) and checks_its_samples(Same(root, ["Area_1"], voxel_max=200))
    assert not checks_its_samples([1, 2]) and not checks_its_samples(Poisoned(root, ["Area_1"], voxel_max=200))
    with pytest.raises(ValueError, match=r"expected finite x \(the input features of the batch's sample 1 of 2"):
        next(iter(make_loader(Poisoned(root, ["Area_1"], voxel_max=200, seed=3), batch_size=2, shuffle=False)))
    assert len(seen) == 1


def test_a_subclass_that_fetches_batches_through_getitems_is_still_checked(prepared):
    """torch's DataLoader fetches a batch through the dataset's ``__getitems__`` where it has one, not its
    ``__getitem__``: a subclass adding one may bypass the sample's own check, so the loader checks it."""
    from torch.utils.data import ConcatDataset, Subset

    from pointgeope.data.sample_check import checks_its_samples

    class Batched(S3DISTrain):
        def __getitems__(self, indices):
            samples = [self.to_data(self.sample(i)[0]) for i in indices]      # no check_sample
            samples[1].x[0, 0] = float("nan")
            return samples

    root, _ = prepared
    ds = Batched(root, ["Area_1"], loop=1, voxel_max=200, seed=3)
    assert not checks_its_samples(ds)
    plain = S3DISTrain(root, ["Area_1"], voxel_max=200)
    assert not checks_its_samples(Subset(plain, [0])) and not checks_its_samples(ConcatDataset([plain]))
    with pytest.raises(ValueError, match=r"expected finite x \(the input features of the batch's sample 2 of 2"):
        next(iter(make_loader(ds, batch_size=2, shuffle=False)))
