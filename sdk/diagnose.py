"""Explain why `import triton` fails: Triton imports every `triton.backends` entry point at start-up,
so one half-removed or broken backend package breaks every Triton program on the machine."""
from __future__ import annotations

import os
import sys
import traceback
from importlib.metadata import entry_points


def _locate(name: str):
    """The spec of module `name`, found by the import system's finders without running any package
    on the way (importlib's find_spec of a submodule imports its parents, and a parent may be what
    fails); None if absent."""
    spec, path, parts = None, None, name.split(".")
    for i in range(len(parts)):
        if spec is not None and path is None:  # a module, not a package: it has no submodules
            return None
        full = ".".join(parts[:i + 1])
        mod = sys.modules.get(full)
        spec = getattr(mod, "__spec__", None) if mod is not None else _find(full, path)
        if spec is None:
            return None
        path = spec.submodule_search_locations
    return spec


def _find(fullname: str, path):
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(fullname, path)
        except Exception:  # a finder that cannot answer for this name
            continue
        if spec is not None:
            return spec
    return None


def _package_dirs(name: str) -> list[str]:
    """Where the top-level package of module `name` lives (its directories, or its file)."""
    spec = _locate(name.split(".")[0])
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [os.path.realpath(p) for p in spec.submodule_search_locations]
    return [os.path.realpath(spec.origin)] if spec.origin else []


def _advice(ep) -> tuple[str, str]:
    dist = getattr(getattr(ep, "dist", None), "name", None) or "its package"
    return f"triton.backends entry point '{ep.name}' ({dist})", dist


def broken_triton_plugins(exc: BaseException | None = None) -> list[str]:
    """One line per `triton.backends` entry point that stops Triton from starting: its module is
    missing, or (given the exception `import triton` raised) importing it raised `exc`, named with
    the file and line it was raised at."""
    eps = list(entry_points(group="triton.backends"))
    out = []
    for ep in eps:
        if _locate(ep.value) is None:
            who, dist = _advice(ep)
            out.append(f"{who}: module '{ep.value}' not found; reinstall or `pip uninstall {dist}`")
    if out or exc is None:
        return out
    # every import passes through Triton's own files: blame the innermost frame in another package
    places = [(f.filename, f.lineno) for f in traceback.extract_tb(exc.__traceback__)]
    if isinstance(exc, SyntaxError) and exc.filename:
        places.append((exc.filename, exc.lineno))
    owners = [(ep, d) for ep in eps if not ep.value.startswith("triton.") for d in _package_dirs(ep.value)]
    for filename, line in reversed(places):
        path = os.path.realpath(filename)
        for ep, d in owners:
            if path == d or path.startswith(d + os.sep):
                who, dist = _advice(ep)
                what = exc.msg if isinstance(exc, SyntaxError) else str(exc)
                return [f"{who} fails to import: {type(exc).__name__}: {what} ({filename}:{line}); "
                        f"fix it, reinstall it or `pip uninstall {dist}`"]
    return out


def triton_import_error() -> str | None:
    """None when triton imports; else a one-line explanation."""
    try:
        import triton  # noqa: F401
    except Exception as exc:  # any failure here is fatal for every kernel
        broken = broken_triton_plugins(exc)
        if broken:
            return "triton cannot start: " + " | ".join(broken)
        return f"triton cannot start: {type(exc).__name__}: {exc}"
    return None
