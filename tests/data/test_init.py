"""The package's lazy exports resolve."""
from __future__ import annotations

import pointgeope.data as data


def test_every_export_resolves_to_its_module():
    for name in data.__all__:
        obj = getattr(data, name)
        assert obj.__module__ == f"pointgeope.data.{data._EXPORTS[name]}"
