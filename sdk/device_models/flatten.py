"""A `DeviceModel` back into plain data: dotted paths of its figures, or the nested mapping of its
YAML file (`to_dict(load(x))` loads back into an equal model)."""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from .records import DeviceModel, Figure

_SKIP = ("path",)
_TRANSPARENT = ("ops",)  # record fields that are not YAML keys (Atomics.ops)


def figures_of(model: DeviceModel) -> list[tuple[str, Figure[Any]]]:
    """(dotted field path, figure) for every figure of the model, in declaration order."""
    out: list[tuple[str, Figure[Any]]] = []
    _walk(model, "", out)
    return out


def _walk(node: Any, path: str, out: list[tuple[str, Figure[Any]]]) -> None:
    if isinstance(node, Figure):
        out.append((path, node))
    elif dataclasses.is_dataclass(node):
        for f in dataclasses.fields(node):
            if f.name in _SKIP:
                continue
            child = path if f.name in _TRANSPARENT else _join(path, f.name)
            _walk(getattr(node, f.name), child, out)
    elif isinstance(node, Mapping):
        for key, value in node.items():
            key = ".".join(key) if isinstance(key, tuple) else str(key)
            _walk(value, _join(path, key), out)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def figure_to_dict(fig: Figure[Any]) -> dict[str, Any]:
    value = list(fig.value) if isinstance(fig.value, tuple) else fig.value
    out: dict[str, Any] = {"value": value, "source": fig.source}
    if fig.note:
        out["note"] = fig.note
    if fig.datasheet is not None:
        out["datasheet"] = figure_to_dict(fig.datasheet)
    if fig.measured is not None:
        out["measured"] = figure_to_dict(fig.measured)
    return out


def to_dict(model: DeviceModel) -> dict[str, Any]:
    """The model as the nested mapping its YAML file holds (schema version included)."""
    out: dict[str, Any] = {"schema": 1}
    for f in dataclasses.fields(model):
        if f.name not in _SKIP and getattr(model, f.name) is not None:
            out[f.name] = _plain(getattr(model, f.name))
    return out


def _plain(node: Any) -> Any:
    if isinstance(node, Figure):
        return figure_to_dict(node)
    if dataclasses.is_dataclass(node):
        fields = [f.name for f in dataclasses.fields(node)]
        if fields == list(_TRANSPARENT):
            return _plain(getattr(node, fields[0]))
        return {name: _plain(getattr(node, name)) for name in fields
                if getattr(node, name) is not None}
    if isinstance(node, Mapping):
        out: dict[str, Any] = {}
        for key, value in node.items():
            if isinstance(key, tuple):  # (operand, accumulator) -> nested
                out.setdefault(key[0], {})[key[1]] = _plain(value)
            else:
                out[str(key)] = _plain(value)
        return out
    return node
