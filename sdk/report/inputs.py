"""What a report reads: results files (through `sdk.conformance.results.load_results`), the model
manifests, and optional simulator predictions.

A *device column* is one (backend, arch, device) of the records: a run on cpu_interp is one column,
a compile-only run of nvidia_ref for sm_89 and sm_121 is two. Several files of one column (shards)
are merged, a later record of the same item replacing an earlier one. Every file must come from the
same suite version: items of two different suites are not comparable, and that is an error.

Simulator file (`--sim SIM.json`), written by a simulator or by hand:

    {"device": "nvidia_l4",
     "kernels": {"rmsnorm": {"time_s": 1.2e-05, "fits": true, "why": ""},
                 "moe_fused_gemm": {"time_s": null, "fits": false, "why": "tile needs 180 KiB"}}}

`time_s` is the predicted time of one launch of the kernel's largest case (null when unknown), `fits`
says whether it fits on the device at all, `why` explains a "does not fit" (a string or a list).
The file `day0 simulate --out` writes holds one such entry per device under "by_device"; it is read
as one simulator result per device.
"""
from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ..conformance.results import Record, ResultSet, load_results
from ..errors import ConfigError
from ..fileio import clean, read_text


@dataclass(frozen=True)
class Column:
    """One device column of a report."""

    backend: str       # base backend name ("nvidia_ref"), no arch/compile suffix
    arch: str          # "sm_89", "host", "" when unknown
    device: str        # device model name ("nvidia_l4"), "" when unknown
    compile_only: bool

    @property
    def key(self) -> str:
        parts = [self.backend]
        if self.arch and self.arch not in ("host", "any"):
            parts.append(self.arch)
        if self.device:
            parts.append(self.device)
        return "/".join(parts) + ("/compile" if self.compile_only else "")

    @property
    def label(self) -> str:
        where = self.device or self.arch or "?"
        arch = f" {self.arch}" if self.arch and self.arch not in ("host", "any", where, self.backend) else ""
        return f"{where} ({self.backend}{arch}{', compile-only' if self.compile_only else ''})"

    @property
    def verb(self) -> str:
        """What a passing item means on this column."""
        return "compiled" if self.compile_only else "passed"

    def matches(self, name: str) -> bool:
        """`--device NAME` selects a column by device model, arch, backend or key."""
        return name in (self.device, self.arch, self.backend, self.key)


@dataclass
class ColumnData:
    column: Column
    records: list[Record]
    files: list[str] = field(default_factory=list)


@dataclass
class Inputs:
    suite_version: str
    columns: list[ColumnData]
    warnings: list[str]
    triton: str = ""


def _base(backend: str) -> str:
    return backend.split("@", 1)[0].split("/", 1)[0]


def column_of(rec: Record, rs: ResultSet) -> Column:
    backend = rec.backend or rs.header.backend
    compile_only = rec.status == "compiled" or rs.header.compile_only or backend.endswith("/compile")
    arch = rec.arch or (rs.header.archs[0] if len(rs.header.archs) == 1 else "")
    return Column(_base(backend), arch, _device_name(rec.device or rs.header.device), bool(compile_only))


@functools.lru_cache(maxsize=64)
def _device_name(device: str) -> str:
    """A device column is named by its device model's name; files written when a backend's target
    named its model by a YAML path are read as that model's name."""
    from ..device_models import is_path, name_of
    return name_of(device) if device and is_path(device) else device


def load_inputs(paths: Iterable[str | os.PathLike[str]], allow_incomplete: bool = False) -> Inputs:
    """Load and group results files into device columns. Raises ConfigError (one line) on a missing,
    malformed or truncated file, or on files from different suite versions. An incomplete file (a
    run still going, or stopped: no end line) is an error too, unless `allow_incomplete`: then it
    is read with a warning that starts with "INCOMPLETE"."""
    sets: list[ResultSet] = [load_results(p) for p in paths]
    if not sets:
        raise ConfigError("no results files given")
    for rs in sets:
        if rs.complete is False and not allow_incomplete:
            raise ConfigError(f"{rs.incomplete_message()}; or use a complete results file")
    suites = [rs for rs in sets if rs.header.mode != "model"]  # whole-model runs need no suite
    first = suites[0] if suites else sets[0]
    for rs in suites[1:]:
        if rs.header.suite_version != first.header.suite_version:
            raise ConfigError(
                f"{rs.path} is from suite version {rs.header.suite_version} but {first.path} is from "
                f"{first.header.suite_version}: their items are not comparable; re-run one of them "
                f"with the same suite")
    columns: dict[Column, ColumnData] = {}
    owner: dict[tuple, list] = {}
    warnings: list[str] = []
    for rs in sets:
        if rs.complete is False:
            warnings.append(f"INCOMPLETE results, not a finished run: {rs.incomplete_message()}")
        warnings.extend(rs.warnings)
        if not rs.records:  # a header only (a run that stopped at once): an empty column
            h = rs.header
            col = Column(_base(h.backend), h.archs[0] if len(h.archs) == 1 else "", _device_name(h.device),
                         h.compile_only)
            columns.setdefault(col, ColumnData(col, [], [rs.path]))
            warnings.append(f"{rs.path}: no records (the run wrote its header only)")
        for rec in rs.records:  # within one file a later record of an item replaces the earlier
            col = column_of(rec, rs)
            data = columns.setdefault(col, ColumnData(col, []))
            if rs.path not in data.files:
                data.files.append(rs.path)
            data.records.append(rec)
            owner.setdefault((col, rec.key), []).append((rs.path, rec))
    for (col, key), held in owner.items():  # two files with one item of one device: no silent pick
        files = list(dict.fromkeys(path for path, _ in held))
        if len(files) > 1 and len({r.status for _, r in held}) > 1:
            raise ConfigError(
                f"{files[0]} and {files[1]} both hold {'/'.join(x for x in key if x)} for {col.label} "
                f"with different outcomes ({', '.join(sorted({r.status for _, r in held}))}); report one "
                f"run per device, or `day0 merge` the files whose later results should stand")
    for data in columns.values():  # of an item's records, the latest stands (identical outcomes)
        latest: dict[tuple, Record] = {}
        for r in data.records:
            latest.pop(r.key, None)
            latest[r.key] = r
        data.records = list(latest.values())
    # run columns first, then compile-only ones; otherwise in the order the files list them
    ordered = sorted(columns.values(), key=lambda d: d.column.compile_only)
    return Inputs(first.header.suite_version, ordered, warnings, first.header.triton)


# ------------------------------------------------------------------------------ manifests
@dataclass(frozen=True)
class ModelNeeds:
    """What one model needs: the suite kernels, and the families the suite does not cover."""

    name: str
    kernels: tuple[str, ...]
    missing: tuple[str, ...] = ()
    family: str = ""


def _manifest_list() -> list[Any]:
    try:
        from ..conformance import manifests as mf
    except ImportError:
        return []
    loader = getattr(mf, "load_manifests", None)
    if not callable(loader):
        return []
    loaded = loader()
    return list(loaded.values() if isinstance(loaded, dict) else loaded)


def _get(obj: Any, name: str, default: Any = None) -> Any:
    return obj.get(name, default) if isinstance(obj, dict) else getattr(obj, name, default)


def model_needs(records: Iterable[Record] = ()) -> dict[str, ModelNeeds]:
    """Model -> needs, from the model manifests when there are any, else from the `models` that
    each kernel's records declare."""
    out: dict[str, ModelNeeds] = {}
    for m in _manifest_list():
        name = _get(m, "name")
        if not name:
            continue
        kernels = tuple(_get(k, "name", k) if not isinstance(k, str) else k
                        for k in (_get(m, "kernels") or ()))
        missing = _get(m, "missing") or _get(m, "missing_families") or ()
        missing = tuple(_get(x, "family", None) or _get(x, "name", None) or str(x) for x in missing)
        out[name] = ModelNeeds(name, kernels, missing, str(_get(m, "family", "") or ""))
    if out:
        return out
    by_model: dict[str, list[str]] = {}
    for r in records:
        if r.tier == "model":  # a whole model's run needs no suite kernel
            continue
        for model in r.models:
            ks = by_model.setdefault(model, [])
            if r.kernel not in ks:
                ks.append(r.kernel)
    return {m: ModelNeeds(m, tuple(ks)) for m, ks in sorted(by_model.items())}


# ------------------------------------------------------------------------------ provenance
def kernel_provenance(kernels: Iterable[str]) -> dict[str, str]:
    """Kernel -> what it mirrors (`KernelSpec.upstream` on one line), for each of `kernels` that the
    suite installed here registers. Reading it imports every kernel module (seconds), so a report
    asks only for the kernels it shows, and an empty request imports nothing."""
    wanted = sorted(set(kernels))
    if not wanted:
        return {}
    from ..conformance.spec import registered
    specs = registered()
    return {k: " ".join(specs[k].upstream.split()) for k in wanted if k in specs and specs[k].upstream.strip()}


# ------------------------------------------------------------------------------ simulator
@dataclass(frozen=True)
class SimKernel:
    time_s: float | None
    fits: bool | None
    why: str = ""


@dataclass
class SimResult:
    device: str
    kernels: dict[str, SimKernel]
    path: str = ""


def load_sims(path: str | os.PathLike[str]) -> list[SimResult]:
    """Every device's predictions in a simulator file: one entry, or `day0 simulate`'s by_device."""
    p = Path(path)
    data = _read_json(p)
    if isinstance(data, dict) and isinstance(data.get("by_device"), dict):
        return [_sim_entry(p, entry) for entry in data["by_device"].values()]
    return [_sim_entry(p, data)]


def load_sim(path: str | os.PathLike[str]) -> SimResult:
    """Read a one-device simulator file (schema in this module's docstring); ConfigError when malformed."""
    p = Path(path)
    return _sim_entry(p, _read_json(p))


def _read_json(p: Path) -> Any:
    text = read_text(p, "simulator file")  # a regular file only; undecodable bytes become U+FFFD
    try:
        return clean(json.loads(text))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{p}: not JSON ({exc.msg} at line {exc.lineno})") from None
    except (ValueError, RecursionError) as exc:  # an integer of thousands of digits, deep nesting
        raise ConfigError(f"{p}: cannot read simulator file ({' '.join(str(exc).split())[:120]})") from None


def _sim_entry(p: Path, data: Any) -> SimResult:
    if not isinstance(data, dict) or not isinstance(data.get("device"), str) \
            or not isinstance(data.get("kernels"), dict):
        raise ConfigError(f"{p}: a simulator file is {{\"device\": NAME, \"kernels\": {{KERNEL: "
                          f"{{\"time_s\", \"fits\", \"why\"}}}}}}")
    kernels: dict[str, SimKernel] = {}
    for name, entry in data["kernels"].items():
        if not isinstance(entry, dict):
            raise ConfigError(f"{p}: kernel '{name}' is not an object with time_s/fits/why")
        t, fits = entry.get("time_s"), entry.get("fits")
        if t is not None and (isinstance(t, bool) or not isinstance(t, (int, float)) or t < 0):
            raise ConfigError(f"{p}: kernel '{name}': time_s must be a number of seconds or null")
        if fits is not None and not isinstance(fits, bool):
            raise ConfigError(f"{p}: kernel '{name}': fits must be true, false or null")
        why = entry.get("why") or ""
        why = "; ".join(map(str, why)) if isinstance(why, list) else str(why)
        kernels[name] = SimKernel(None if t is None else float(t), fits, why)
    return SimResult(data["device"], kernels, str(p))
