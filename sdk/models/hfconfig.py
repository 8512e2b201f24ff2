"""Build a transformers config object from a config.json's values, reading JSON numbers as the
config class declares them.

JSON has one number type: a published config may write `1` for a field transformers declares as
a float (DBRX's `moe_normalize_expert_weights`), or `4096.0` for an integer field. transformers'
strict config classes reject both with a type error, though the value is the one meant. Here a
whole-valued float becomes an int for a field that takes ints and not floats, and an int becomes
a float for a field that takes floats and not ints; nested sub-configs (a dict for a field typed
as a config class) and lists of numbers are read the same way. Everything else is passed as
given, and transformers' own validation still judges it.

    from sdk.models.hfconfig import config_object
    cfg = config_object("dbrx", {...})      # the DbrxConfig of those values
"""
from __future__ import annotations

import contextlib
import dataclasses
import types
import typing
import warnings
from typing import Any, Iterator

__all__ = ["config_object", "json_numbers", "quiet_transformers", "special_floats"]

#: transformers' config files write the floats JSON lacks as {"__float__": "Infinity" | "-Infinity" | "NaN"}
_SPECIAL_FLOATS = {"Infinity": float("inf"), "-Infinity": float("-inf"), "NaN": float("nan")}


def special_floats(value: Any) -> Any:
    """`value` (a config.json's contents or part of them) with transformers' written form of the
    floats JSON cannot hold read back as those floats (Mamba-2's time_step_limit [0.0, inf])."""
    if isinstance(value, dict):
        if len(value) == 1 and value.get("__float__") in _SPECIAL_FLOATS:
            return _SPECIAL_FLOATS[value["__float__"]]
        return {k: special_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [special_floats(v) for v in value]
    return value


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' notes on a config's values and Python warnings held back: for a config built
    again and again (a probe, a rebuild), or one whose problems reach the user as one line."""
    import transformers
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        transformers.logging.set_verbosity(verbosity)


def config_object(model_type: str, fields: dict[str, Any]):
    """transformers' config object of `model_type` from `fields` (a config.json's keys other than
    model_type), numbers read as the config class declares them and written special floats as floats."""
    from transformers import CONFIG_MAPPING
    cls = CONFIG_MAPPING[model_type]
    return cls(**json_numbers(cls, special_floats(fields)))


def json_numbers(cls: type, fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` with each number given as the type `cls` declares for its key (see the module)."""
    hints = _hints(cls)
    if not hints:
        return dict(fields)
    return {k: _as_declared(hints[k], v) if k in hints else v for k, v in fields.items()}


def _hints(cls: type) -> dict[str, Any]:
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        return {}
    try:
        return typing.get_type_hints(cls)
    except Exception:  # an annotation that does not resolve here: its fields are passed as given
        return {f.name: f.type for f in dataclasses.fields(cls) if not isinstance(f.type, str)}


def _options(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _as_declared(annotation: Any, value: Any) -> Any:
    options = _options(annotation)
    plain = {o for o in options if isinstance(o, type)}
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and float in plain and int not in plain:
        return float(value)
    if isinstance(value, float) and value.is_integer() and int in plain and float not in plain:
        return int(value)
    if isinstance(value, dict):
        for option in options:
            if isinstance(option, type) and dataclasses.is_dataclass(option):
                return json_numbers(option, value)
        return value
    if isinstance(value, list):
        for option in options:
            if typing.get_origin(option) is list and typing.get_args(option):
                (item,) = typing.get_args(option)[:1]
                return [_as_declared(item, v) for v in value]
        return value
    return value
