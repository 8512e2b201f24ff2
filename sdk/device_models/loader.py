"""Find and read device model files: shipped models by name, a vendor's own model by path."""
from __future__ import annotations

import functools
import os
from pathlib import Path

import yaml

from ..errors import ConfigError, Day0Error, UnknownName
from .installed import installed_files
from .parse import parse_model
from .records import DeviceModel
from .validate import NAME_RE

MODELS_DIR = Path(__file__).resolve().parent
MAX_FILE_BYTES = 1 << 20


def names() -> list[str]:
    """Names of the shipped device models, sorted."""
    return sorted(p.stem for p in MODELS_DIR.glob("*.yaml"))


def is_path(spec: str | os.PathLike[str]) -> bool:
    """Whether a command-line argument names a file (has a path separator or a .yaml/.yml suffix)
    rather than a shipped model."""
    if isinstance(spec, os.PathLike):
        return True
    return ("/" in spec or "\\" in spec or os.sep in spec
            or spec.lower().endswith((".yaml", ".yml")))


def load(spec: str | os.PathLike[str]) -> DeviceModel:
    """A shipped model by NAME (`[a-z0-9_]+`), a model an installed backend ships by its NAME
    (sdk.device_models.installed), or any model file by PATH."""
    if is_path(spec):
        return load_file(Path(spec))
    if NAME_RE.fullmatch(spec) and (MODELS_DIR / f"{spec}.yaml").is_file():
        return _load_shipped(spec)  # one stat, no listing: launch wrappers reach this on every call
    if spec not in names():
        installed = installed_models() if NAME_RE.fullmatch(spec) else {}
        if spec in installed:
            return load_file(installed[spec][0])
        raise UnknownName("device model", spec, sorted(set(names()) | set(installed)))
    return _load_shipped(spec)


@functools.lru_cache(maxsize=None)
def _load_shipped(name: str) -> DeviceModel:
    path = MODELS_DIR / f"{name}.yaml"
    if name not in names():
        raise UnknownName("device model", name, names())
    model = load_file(path)
    if model.name != name:
        raise ConfigError(f"{path.name}: name: must be '{name}' (the file's name), got '{model.name}'")
    return model


def all_models() -> list[DeviceModel]:
    """Every shipped model, sorted by name."""
    return [load(n) for n in names()]


def load_file(path: Path) -> DeviceModel:
    """Read one model file with `yaml.safe_load` and validate it."""
    from ..fileio import read_bytes
    label = path.name or str(path)
    # a regular file only (a named pipe would hang, /dev/zero never end), and not a huge one
    raw = read_bytes(path, "device model file", MAX_FILE_BYTES)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{label}: not UTF-8 text") from None
    return load_text(text, label, str(path))


def load_text(text: str, label: str = "<text>", path: str = "") -> DeviceModel:
    """Validate a model given as YAML text; `label` names it in error messages."""
    try:
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = " ".join(str(exc.problem or exc.context or "syntax error").split())
        raise ConfigError(f"{label}: not valid YAML{where}: {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{label}: not valid YAML: {' '.join(str(exc).split())}") from None
    return parse_model(data, label, path)


# ------------------------------------------------------------------ models installed backends ship
def installed_models() -> dict[str, tuple[Path, str]]:
    """Device model name -> (its file, the backend that ships it), for the models installed backends
    ship. A file that does not validate is left out here (`day0 devices show PATH` says why)."""
    out: dict[str, tuple[Path, str]] = {}
    for backend, path in sorted(installed_files().items()):
        try:
            name = load_file(path).name
        except Day0Error:
            continue
        out.setdefault(name, (path, backend))
    return out


def name_of(spec: str | os.PathLike[str] | None) -> str:
    """The device model name a target's `device_model` (a name or a YAML path) stands for: a path's
    model is read for its `name:`; an unreadable one falls back to its file's stem (or, for a
    package's `device_model.yaml`, the package's folder name). "" for None or ""."""
    if not spec:
        return ""
    if not is_path(spec):
        return str(spec)
    path = Path(spec)
    try:
        return load_file(path).name
    except (Day0Error, OSError):
        return path.parent.name if path.stem == "device_model" and path.parent.name else path.stem
