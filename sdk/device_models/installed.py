"""Device models that installed backends ship, known by name like the shipped ones.

A backend package that has a `device_model.yaml` beside its top-level module (what `day0 scaffold`
generates: `src/NAME_triton_backend/device_model.yaml`) registers that model under the model's
own `name:` when the backend is installed: its `day0.backends` entry point is the registration.
So `day0 devices show NAME`, `day0 conformance --device NAME`, results files and reports all name
the device by its model's name, never by the path of its YAML file. Finding them imports nothing
(the packages are located, not loaded); a shipped model of the same name wins. This module finds
the files; loader.py reads them (`installed_models`, `name_of`).
"""
from __future__ import annotations

import importlib.util
from importlib.metadata import entry_points
from pathlib import Path

ENTRY_POINT_GROUP = "day0.backends"
FILE_NAME = "device_model.yaml"


def _package_dir(module: str) -> Path | None:
    top = module.split(".")[0]
    try:
        spec = importlib.util.find_spec(top)  # a top-level package: located, not imported
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def installed_files() -> dict[str, Path]:
    """Backend name -> the device model file its package ships, for every installed backend that
    ships one."""
    out: dict[str, Path] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        where = _package_dir(ep.value.split(":")[0])
        if where is not None and (where / FILE_NAME).is_file():
            out.setdefault(ep.name, where / FILE_NAME)
    return out
