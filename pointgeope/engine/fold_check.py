"""A fold's data checked before its first epoch, so that what would stop or spoil the run hours into it is said
now: the fold has training areas, every area file of it opens and reads (``pointgeope.data.check``), and the
warnings of the data at hand, once in each fold's ``log.txt``: the network's classes that no point of the fold
holds (:mod:`pointgeope.engine.data_classes`), rooms without colour where the run feeds colour
(:mod:`pointgeope.data.color_record`), and with ``data.normal`` rooms without normals (refused) or normals of
another estimate than the current one (:mod:`pointgeope.data.normal_record`).
"""
from __future__ import annotations

from pathlib import Path

import torch

from pointgeope.data.check import check_areas
from pointgeope.data.color_record import colorless_warning
from pointgeope.data.folds import Fold
from pointgeope.data.normal_record import not_current_line
from pointgeope.data.ptv3_dataset import check_normals
from pointgeope.data.rooms import list_area_rooms
from pointgeope.engine import distributed
from pointgeope.engine.config import Config
from pointgeope.engine.data_classes import absent_classes_warning, label_counts
from pointgeope.engine.runio import Log
from pointgeope.errors import UserError
from pointgeope.plural import counted

__all__ = ["check_fold"]


def check_fold(cfg: Config, fold: int, folds: dict[int, Fold], env: distributed.DistEnv, log: Log,
               said: set[str]) -> None:
    """Refuse a fold without training areas; open and read every area file of the fold (rank 0), so that
    a damaged file (or, with ``data.normal``, one without normals) stops the run now rather than hours into
    it; warn of the network's classes that none of its points holds (:mod:`pointgeope.engine.data_classes`) and,
    fed colour, of rooms without (:mod:`pointgeope.data.color_record`: once a command, ``said``; in each log.txt)."""
    root, test_areas, train_areas = Path(cfg.data.root), list(folds[fold].test), list(folds[fold].train)
    if not train_areas:
        raise UserError(f"fold {fold}: {root / 'folds.json'} lists no training area (it tests on "
                        f"{', '.join(test_areas)}); prepare more than one area, or edit folds.json")
    log(f"fold {fold}: train on {', '.join(train_areas)}, test on {', '.join(test_areas)}; "
        f"device {env.device}, {counted(env.world_size, 'process')} of "
        f"{counted(torch.get_num_threads(), 'torch CPU thread')}")
    if env.is_main:
        checked = check_areas(root, train_areas + test_areas, cfg.model.num_classes)
        log("checked " + ", ".join(f"{a} ({counted(len(r), 'room')})" for a, r in checked.items()))
        counts = label_counts(root, list(checked), checked)     # prepare's record where the check vouches for it
        if line := absent_classes_warning(cfg.model.num_classes, counts, list(checked), cfg.eval.class_mean,
                                          cfg.train.ignore_index):
            log(line)       # classes of the network that no point of the fold's areas holds
        if cfg.data.color and (line := colorless_warning(root, train_areas)):
            log.once(line, said)   # prepare's record of the rooms all 0 0 0
        if cfg.data.normal:     # PTv3's [rgb | normal]: the test rooms' normals too, before hours of training
            check_normals(list_area_rooms(root, train_areas + test_areas))
            if line := not_current_line(root, train_areas + test_areas):  # another estimate's: trained on as is
                log.once(line, said)
    distributed.barrier()
