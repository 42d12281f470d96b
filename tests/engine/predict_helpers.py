"""What the tests of `pointgeope predict` share: a predictor whose labels follow each point's colour, and
scans written by other libraries than pointgeope."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pointgeope.engine.config import config_to_dict, load_config
from pointgeope.engine.predict_model import Predictor
from pointgeope.engine.prediction_info import prediction_metadata
from tests.engine.test_evaluate import ColourClassifier


def colour_predictor(voxel_max=300, batch_points=2000) -> Predictor:
    """A Predictor whose "network" labels each point by its own red channel (test_evaluate's
    ColourClassifier): a label that lands on another point than its own shows as a wrong class."""
    cfg = load_config(None, ["data.grid_size=0.1", f"data.voxel_max={voxel_max}",
                             f"eval.batch_points={batch_points}", "train.amp=none"])
    info = prediction_metadata(config_to_dict(cfg))
    return Predictor(ColourClassifier(), cfg, info, torch.device("cpu"), "colour.pt")


def write_scan(path, coord, color):
    """``coord``/``color`` written by another library than pointgeope: Open3D, laspy or numpy."""
    if path.suffix == ".ply":
        o3d = pytest.importorskip("open3d")
        pcd = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(coord))
        pcd.colors = o3d.utility.Vector3dVector(color / 255.0)
        o3d.io.write_point_cloud(str(path), pcd)
    elif path.suffix == ".las":
        laspy = pytest.importorskip("laspy")
        las = laspy.LasData(laspy.LasHeader(point_format=2, version="1.2"))
        las.header.scales, las.header.offsets = np.full(3, 0.001), np.zeros(3)
        las.x, las.y, las.z = coord.T
        las.red, las.green, las.blue = (color.astype(np.uint16) * 257).T
        las.write(path)
    elif path.suffix == ".npy":
        np.save(path, np.c_[coord, color])
    else:
        np.savetxt(path, np.c_[coord, color], fmt="%.3f,%.3f,%.3f,%d,%d,%d" if path.suffix == ".csv"
                   else "%.3f %.3f %.3f %d %d %d")


RUN_CAP_WARNING = "fragments (the run's eval.max_fragments; "


def without_run_cap_warning(err: str) -> list[str]:
    """The lines of ``err`` (stderr) but the warning that the run's own ``eval.max_fragments`` cut a scan: the
    tiny run's config (configs/demo.yaml) caps at 2 fragments, which cuts every room with a voxel of 3 or more
    points; tests/engine/test_predict.py tests that warning, the other tests what else is said."""
    return [line for line in err.splitlines() if RUN_CAP_WARNING not in line]
