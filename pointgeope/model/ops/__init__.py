"""Point ops over packed batches (kNN, farthest point sampling, 3-NN interpolation) on CPU and CUDA."""
from pointgeope.model.ops.backends import fps_backend, knn_backend, summary
from pointgeope.model.ops.fps import fps, sample_counts
from pointgeope.model.ops.gather import gather
from pointgeope.model.ops.interpolate import interpolate
from pointgeope.model.ops.knn import knn
from pointgeope.model.ops.offsets import check_offset, counts, offset_from_counts

__all__ = ["knn", "fps", "interpolate", "gather", "sample_counts", "knn_backend", "fps_backend", "summary",
           "check_offset", "counts", "offset_from_counts"]
