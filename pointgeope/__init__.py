"""pointgeope: 3D point-cloud semantic segmentation with GeoPE positional embeddings.

Data flows one way: raw S3DIS -> ``data_prep`` -> HDF5 -> ``pointgeope.data`` -> ``pointgeope.model``
-> ``pointgeope.engine`` -> metrics and report -> ``pointgeope.viz``.
"""
__version__ = "0.2.0.dev0"
