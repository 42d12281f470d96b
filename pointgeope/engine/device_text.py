"""The words of a recorded device (:mod:`pointgeope.engine.machine_record`'s ``device`` and, on CUDA,
``device_name``): ``cuda (NVIDIA H200)``, ``cpu``. One owner for the report's machine notes
(:mod:`pointgeope.report.machine`) and predict's skip lines (:mod:`pointgeope.engine.predict_record`), so that
both say a device alike. No torch here: the report imports it, and imports none.
"""
from __future__ import annotations


def device_text(record: dict) -> str | None:
    """``"<device> (<device_name>)"`` where ``record`` names the model, ``"<device>"`` where it does not,
    ``None`` where it records no device."""
    device = record.get("device")
    if device is None:
        return None
    return f"{device} ({record['device_name']})" if record.get("device_name") else str(device)
