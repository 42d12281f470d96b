"""Shared fixtures: paths to the reference material and the real S3DIS samples beside the checkout."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
# ../shared beside the checkout; POINTGEOPE_SHARED overrides it.
SHARED = Path(os.environ.get("POINTGEOPE_SHARED", REPO.parent / "shared"))

# One thread per pytest-xdist worker: two workers on two cores, no oversubscription.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


def _require(path: Path) -> Path:
    if not path.exists():
        pytest.fail(f"expected the shared reference material at {path} (set POINTGEOPE_SHARED)")
    return path


@pytest.fixture(scope="session")
def geope_vectors_path() -> Path:
    return _require(SHARED / "reference" / "geope_vectors.json")


@pytest.fixture(scope="session")
def s3dis_real() -> Path:
    return _require(SHARED / "data" / "s3dis_real")


def cuda_devices() -> list[str]:
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
