"""Prepared S3DIS rooms (HDF5), training blocks, transforms and batches.

The names below are imported lazily (PEP 562), so importing one light submodule (``pointgeope.data.check``,
``pointgeope.data.rooms``) does not pull in torch. The HDF5 layout itself is
``pointgeope/h5.py``.
"""
from importlib import import_module

# name -> submodule that defines it
_EXPORTS = {
    "load_folds": "folds", "Fold": "folds",
    "S3DISTrain": "dataset", "room_sample": "dataset", "sample_rng": "dataset",
    "make_loader": "loader", "set_epoch": "loader", "Points": "points", "collate": "points",
    "voxel_sample": "voxelize", "random_crop": "voxelize", "crop_nearest": "voxelize",
    "voxel_fragments": "fragments", "split_into_crops": "fragments", "room_pieces": "fragments",
    "s3dis_train_transform": "transforms",
    "S3DISTrainPTv3": "ptv3_dataset", "ptv3_train_transform": "ptv3_transforms", "Mix3D": "mix3d",
    "ptv3_room_pieces": "ptv3_test",
}
__all__ = sorted(_EXPORTS)  # noqa: PLE0605 - a list at run time, from the lazy names' one table


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
