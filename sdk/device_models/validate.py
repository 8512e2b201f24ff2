"""Checks for the raw YAML data of a device model. Every failure is a `ConfigError` of one line:
`FILE: FIELD.PATH: what is wrong and what is allowed`."""
from __future__ import annotations

import math
import re
from typing import Any, Callable, Iterable

from ..errors import ConfigError
from .dtypes import DTYPES
from .records import Figure

#: the largest figure a device model may give (beyond any real device by many orders)
LARGEST = 1e30

NAME_RE = re.compile(r"[a-z0-9_]+")
SOURCE_RE = re.compile(r"(https?://\S+.*|derived from \S.*|measured\b.*\S.*|assumed\b.*)", re.DOTALL)
SOURCE_FORMS = "a URL, 'derived from ...', 'measured ...' or 'assumed ...'"
FIGURE_KEYS = ("value", "source", "note", "datasheet", "measured")


def show(value: Any) -> str:
    """A short, YAML-like rendering of a bad value for an error message."""
    if value is None:
        return "null (empty)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        text = repr(value)
        return f"{text[:57]}...'" if len(text) > 60 else text
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = str(value)
    return text[:60]


def join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


class Checker:
    """Walks raw YAML data for one file, failing with the file name and the field path."""

    def __init__(self, file: str):
        self.file = file

    def fail(self, path: str, message: str) -> ConfigError:
        where = f"{self.file}: {path}: " if path else f"{self.file}: "
        return ConfigError(where + message)

    # ---- structure -----------------------------------------------------------------------------
    def mapping(self, node: Any, path: str, required: Iterable[str] = (),
                optional: Iterable[str] = ()) -> dict[str, Any]:
        required, optional = tuple(required), tuple(optional)
        if not isinstance(node, dict):
            raise self.fail(path, f"must be a mapping, got {show(node)}")
        allowed = required + optional
        if allowed:
            for key in node:
                if key not in allowed:
                    raise self.fail(join(path, key), f"unknown key (allowed: {', '.join(allowed)})")
        for key in required:
            if key not in node:
                raise self.fail(join(path, key), "missing required field")
        return node

    def text(self, node: Any, path: str, pattern: re.Pattern[str] | None = None,
             rule: str = "") -> str:
        if not isinstance(node, str) or not node.strip():
            raise self.fail(path, f"must be a non-empty string, got {show(node)}")
        if pattern is not None and not pattern.fullmatch(node):
            raise self.fail(path, f"must be {rule}, got {show(node)}")
        return node

    def flag(self, node: Any, path: str) -> bool:
        if not isinstance(node, bool):
            raise self.fail(path, f"must be true or false, got {show(node)}")
        return node

    def dtype(self, node: Any, path: str) -> str:
        if not isinstance(node, str) or node not in DTYPES:
            raise self.fail(path, f"unknown dtype {show(node)} (allowed: {', '.join(DTYPES)})")
        return node

    def dtype_key(self, key: Any, path: str) -> str:
        if not isinstance(key, str) or key not in DTYPES:
            raise self.fail(join(path, key), f"unknown dtype (allowed: {', '.join(DTYPES)})")
        return key

    # ---- figure values -------------------------------------------------------------------------
    def positive_number(self, v: Any, path: str) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)) \
                or v <= 0:
            raise self.fail(path, f"must be a positive number, got {show(v)}")
        return float(self.not_huge(v, path)) if isinstance(v, float) else self.not_huge(v, path)

    def positive_int(self, v: Any, path: str) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise self.fail(path, f"must be a positive integer, got {show(v)}")
        return self.not_huge(v, path)

    def not_huge(self, v: Any, path: str) -> Any:
        if v > LARGEST:
            raise self.fail(path, f"must be at most {LARGEST:.0e}, got a number of {len(str(int(v)))} digits")
        return v

    def triple(self, v: Any, path: str) -> tuple[int, int, int]:
        if (not isinstance(v, list) or len(v) != 3
                or any(isinstance(x, bool) or not isinstance(x, int) or not 0 < x <= LARGEST for x in v)):
            raise self.fail(path, f"must be a list of 3 positive integers, got {show(v)}"
                            + (f" {v}" if isinstance(v, list) else ""))
        return (v[0], v[1], v[2])

    def dtype_list(self, v: Any, path: str) -> tuple[str, ...]:
        if not isinstance(v, list):
            raise self.fail(path, f"must be a list of dtypes, got {show(v)}")
        out = tuple(self.dtype(x, f"{path}[{i}]") for i, x in enumerate(v))
        if len(set(out)) != len(out):
            raise self.fail(path, "lists a dtype twice")
        return out

    def bool_value(self, v: Any, path: str) -> bool:
        return self.flag(v, path)

    def str_value(self, v: Any, path: str) -> str:
        return self.text(v, path)

    def figure(self, node: Any, path: str, check: Callable[[Any, str], Any]) -> Figure[Any]:
        """A `{value: ..., source: "..."}` mapping (optionally `note`; `measured` beside a datasheet
        value: a ceiling measured on the device, whose source says so; `datasheet` when the value
        itself is a measured ceiling)."""
        if not isinstance(node, dict):
            raise self.fail(path, "must be a figure {value: ..., source: \"...\"}, got "
                            + show(node))
        self.mapping(node, path, ("value", "source"), ("note", "datasheet", "measured"))
        value = check(node["value"], path)
        source = node["source"]
        if not isinstance(source, str) or not SOURCE_RE.fullmatch(source.strip()):
            raise self.fail(join(path, "source"), f"must be {SOURCE_FORMS}, got {show(source)}")
        note = node.get("note", "")
        if note is None or not isinstance(note, str):
            raise self.fail(join(path, "note"), f"must be a string, got {show(note)}")
        datasheet = measured = None
        if "datasheet" in node:
            datasheet = self.figure(node["datasheet"], join(path, "datasheet"), check)
        if "measured" in node:
            measured = self.figure(node["measured"], join(path, "measured"), check)
            if measured.source_kind != "measured":
                raise self.fail(join(path, "measured.source"),
                                f"must say how it was measured ('measured: ...'), got {show(measured.source)}")
        return Figure(value=value, source=source.strip(), note=note.strip(), datasheet=datasheet,
                      measured=measured)
