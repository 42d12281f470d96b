"""The words of a recorded device (:mod:`pointgeope.engine.machine_record`'s ``device`` and, on CUDA,
``device_name``): ``cuda (NVIDIA H200)``, ``cpu``. One owner for the report's machine notes
(:mod:`pointgeope.report.machine`) and predict's skip lines (:mod:`pointgeope.engine.predict_record`), so that
both say a device alike; a damaged value is said as :func:`pointgeope.recorded_text.recorded_text` says it (one
line, bounded, marked), and what a record lacks as :data:`NOT_RECORDED`. No torch here: the report imports it, and
imports none.
"""
from __future__ import annotations

from pointgeope.recorded_text import recorded_text

NOT_RECORDED = "not recorded"   # the words of an aspect a record lacks (a record of an older version)


def device_text(record: dict) -> str | None:
    """``"<device> (<device_name>)"`` where ``record`` names the model, ``"<device>"`` where it does not,
    ``None`` where it records no device."""
    device = record.get("device")
    if device is None:
        return None
    name = record.get("device_name")
    return f"{recorded_text(device)} ({recorded_text(name)})" if name else recorded_text(device)
