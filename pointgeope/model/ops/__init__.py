"""Point ops over packed batches (kNN, farthest point sampling, 3-NN interpolation) on CPU and CUDA, and the
network's whole sampling and neighbourhood hierarchy built from them."""
from pointgeope.model.ops.backends import OpsBackends, fps_backend, knn_backend, summary
from pointgeope.model.ops.fps import fps, sample_counts
from pointgeope.model.ops.gather import gather
from pointgeope.model.ops.hierarchy import HierarchySpec, PointHierarchy
from pointgeope.model.ops.interpolate import interpolate, interpolate_from
from pointgeope.model.ops.knn import knn
from pointgeope.model.ops.offsets import check_offset, cloud_of_rows, counts, offset_from_counts

__all__ = ["knn", "fps", "interpolate", "interpolate_from", "gather", "sample_counts", "knn_backend", "fps_backend",
           "summary", "OpsBackends", "HierarchySpec", "PointHierarchy", "check_offset", "cloud_of_rows", "counts",
           "offset_from_counts"]
