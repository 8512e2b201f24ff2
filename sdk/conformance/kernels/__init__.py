"""Conformance kernel families: importing this package registers every kernel in it."""
import importlib
import pkgutil

for _mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if not _mod.startswith("_"):
        importlib.import_module(f"{__name__}.{_mod}")
