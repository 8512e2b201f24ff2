"""Explain why `import triton` fails: Triton imports every `triton.backends` entry point at start-up,
so one half-removed backend package breaks every Triton program on the machine."""
from __future__ import annotations

import importlib.util
from importlib.metadata import entry_points


def broken_triton_plugins() -> list[str]:
    """One line per `triton.backends` entry point whose module cannot be found."""
    out = []
    for ep in entry_points(group="triton.backends"):
        try:
            found = importlib.util.find_spec(ep.value) is not None
        except (ImportError, ValueError) as exc:
            found, why = False, str(exc)
        else:
            why = f"module '{ep.value}' not found"
        if not found:
            dist = getattr(getattr(ep, "dist", None), "name", None) or "its package"
            out.append(f"triton.backends entry point '{ep.name}' ({dist}): {why}; "
                       f"reinstall or `pip uninstall {dist}`")
    return out


def triton_import_error() -> str | None:
    """None when triton imports; else a one-line explanation."""
    try:
        import triton  # noqa: F401
    except Exception as exc:  # any failure here is fatal for every kernel
        broken = broken_triton_plugins()
        if broken:
            return "triton cannot start: " + " | ".join(broken)
        return f"triton cannot start: {type(exc).__name__}: {exc}"
    return None
