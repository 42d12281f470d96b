"""Prepared S3DIS rooms (HDF5), training blocks, transforms and batches."""
