"""Conformance results: one `Record` per (kernel, case, dtype, arch), and the results file format.

A results file is JSON Lines (strict JSON: a non-finite number is the string "nan", "inf" or "-inf"):

    {"type": "header", "format": "day0-results/2", "suite_version": "3f2a...", "backend": "cpu_interp",
     "device": "host_cpu", "triton": "3.6.0", "torch": "2.13.0", "day0": "0.1.0", "date": "...",
     "host": "...", "mode": "quick", "compile_only": false, "archs": ["host"], "incremental": true}
    {"type": "record", "kernel": "rmsnorm", "case": "...", "dtype": "bf16", "status": "pass", ...}
    ...
    {"type": "end", "records": 115}

The first line is the header; then one line per record (see `Record` for the fields); the last line,
the end line, says the file is complete and how many record lines it holds. A record whose item
(kernel, case, dtype, arch) appears again later replaces the earlier one.

Two kinds of file, named by the header's `incremental`:
- written as a run goes (`ResultWriter`: `day0 conformance`, `day0 model`), so that a killed run
  resumes: the end line comes when the run finishes. Without it the file is *incomplete* (the run is
  still going, or was stopped): `--resume` continues it, reports say so, merges refuse it. A last
  line cut short by a killed run is dropped with a warning.
- written whole (`write_results`: `day0 merge`), atomically: without its end line it was cut short
  (copied in part, say), and reading it is an error.
Files of format day0-results/1 (before end lines) are read as they are; whether one is complete
cannot be told. Any other malformed line is an error naming the file and line.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import platform
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import ConfigError
from ..fileio import atomic_write_bytes, atomic_writer, clean, clean_text, json_text, read_bytes

FORMAT = "day0-results/2"
#: formats this reader reads; a day0-results/1 file has no end line (its completeness is unknown)
FORMATS = ("day0-results/1", FORMAT)

#: statuses of a run on a device; `PASSING` counts as passed in tables.
RUN_STATUSES = ("pass", "fail", "unsupported", "error", "crash", "timeout", "skipped", "resource")
#: statuses in compile-only mode (`backend@arch/compile`): the kernel compiled, or did not.
COMPILE_STATUSES = ("compiled", "failed", "unsupported", "error", "crash", "timeout", "skipped", "resource")
STATUSES = tuple(dict.fromkeys(RUN_STATUSES + COMPILE_STATUSES))
PASSING = ("pass", "compiled")
#: not run because an optional library is not installed: neither a pass nor a failure; a model
#: whose evidence lacks such items does not "run" (the tables say which library is missing)
SKIPPED = "skipped"


@dataclass
class Record:
    """The outcome of one (kernel, case, dtype) on one backend/arch.

    status: pass | fail | unsupported | error | crash | timeout (run mode), or
        compiled | failed | unsupported | error | crash | timeout (compile-only mode); either mode:
        skipped (a library-tier item whose library is not installed; detail says what to install).
    max_abs / max_rel: the largest absolute / relative error over all outputs (None when not
        compared); rmse: the largest relative RMSE (None unless a tolerance is RMSE-based).
    detail: why it did not pass (mismatch reason, error text, signal, timeout), "" on a pass.
    unsupported_ops: [{"name", "signature", "loc", "source"}] for status "unsupported".
    wall_s: seconds the item took in its worker (inputs + launch + reference + compare);
        launch_s: seconds of the launch alone (None when it did not complete).
    phase_s / phase_peak_mb: where the item's time and memory went, per phase of the harness
        (`sdk.conformance.check.run_case`: inputs, snapshot, poison, launch, reference, compare):
        seconds, and the worker's peak resident MB during the phase; peak_rss_mb: the largest of
        those. Empty / None in files written before these fields existed, and for items that did
        not get as far as a verdict.
    backend: the backend name as selected (a variant: "nvidia_ref@sm_90/compile");
        device: the device model name; arch: the target arch it ran or compiled for.
    launch_stats: what `Backend.take_launch_stats()` returned for this item (compile-only mode:
        registers, spills, shared memory per launched kernel), usually [] when running.
    tier: which evidence this is: "kernel" (the suite's own kernels; files written before the
        field existed read as this), "library" (an upstream library's kernels through its API) or
        "model" (a whole model end to end: `kernel` is the model, `case` the mode, prefill/decode).
    """

    kernel: str
    group: str
    models: list[str]
    case: str
    dtype: str
    status: str
    max_abs: float | None = None
    max_rel: float | None = None
    rmse: float | None = None
    detail: str = ""
    unsupported_ops: list[dict] = field(default_factory=list)
    wall_s: float = 0.0
    launch_s: float | None = None
    backend: str = ""
    device: str = ""
    arch: str = ""
    triton: str = ""
    torch: str = ""
    launch_stats: list[dict] = field(default_factory=list)
    tier: str = "kernel"          # kernel (the suite's own) | library (upstream libraries) | model
    library: str = ""             # library tier: the distribution and version, "fla-core 0.6.0"
    native: float | None = None   # delegation: the smallest share of a kernel's ops the backend's
                                  # own rules lowered (None: all its own, or not known)
    borrowed_ops: list[str] = field(default_factory=list)  # ops lowered by borrowed rules
    kernels: list[dict] = field(default_factory=list)  # model tier: every Triton kernel launched
                                                       # (sdk.launches.KernelRecord.to_json)
    phase_s: dict = field(default_factory=dict)        # seconds per phase of the item (inputs,
                                                       # snapshot, poison, launch, reference, compare)
    phase_peak_mb: dict = field(default_factory=dict)  # peak resident MB of the worker per phase
    peak_rss_mb: float | None = None                   # the worker's peak resident MB over the item

    @property
    def key(self) -> tuple[str, str, str, str]:
        return item_key(self.kernel, self.case, self.dtype, self.arch)

    @property
    def passed(self) -> bool:
        return self.status in PASSING

    def to_json(self) -> str:
        data = {"type": "record", **{f.name: getattr(self, f.name) for f in fields(self)}}
        return json_text(data)  # strict JSON: a non-finite number as "nan", "inf" or "-inf"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Record":
        data = clean(dict(data))  # lone surrogates (undecodable bytes of a message) -> U+FFFD
        known = {f.name for f in fields(cls)}
        missing = [n for n in ("kernel", "case", "dtype", "status") if n not in data]
        if missing:
            raise ValueError(f"missing field(s) {', '.join(missing)}")
        _check_fields(cls, data)
        if data["status"] not in STATUSES:
            raise ValueError(f"unknown status '{data['status']}'")
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs.setdefault("group", "")
        kwargs.setdefault("models", [])
        rec = cls(**kwargs)
        for name in ("max_abs", "max_rel", "rmse"):  # "inf"/"nan" strings back to floats
            value = getattr(rec, name)
            if isinstance(value, str):
                setattr(rec, name, float(value))
        return rec


def _number(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) or v in ("inf", "-inf", "nan")


_FIELD_CHECKS = {
    "str": (lambda v: isinstance(v, str), "a string"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "float": (_number, "a number"),
    "float | None": (lambda v: v is None or _number(v), "a number or null"),
    "list[str]": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of strings"),
    "list[dict]": (lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v), "a list of objects"),
    "dict": (lambda v: isinstance(v, dict) and all(isinstance(k, str) and _number(x) for k, x in v.items()),
             "an object of numbers"),
}


def _check_fields(cls: type, data: Mapping[str, Any]) -> None:
    """Every known field present has the type its dataclass declares (ValueError naming it)."""
    for f in fields(cls):
        if f.name in data:
            check = _FIELD_CHECKS.get(str(f.type))
            if check is not None and not check[0](data[f.name]):
                raise ValueError(f"field '{f.name}' must be {check[1]}, not {json.dumps(data[f.name])[:40]}")


def launch_stats_of(value: Any) -> list[dict]:
    """What a backend's `take_launch_stats()` returned, as a results file holds it: a list of JSON
    objects. A dict alone becomes a list of one; an entry that is not a dict, or a return value that
    is not a list, is kept as its repr with a note; a value JSON cannot hold (an object, a set, a
    numpy scalar, NaN) becomes a JSON one (its repr, its Python number, "nan"). Never raises."""
    if value is None:
        return []
    if isinstance(value, dict):
        value = [value]
    elif not isinstance(value, (list, tuple)):
        return [{"note": f"take_launch_stats() returned {type(value).__name__}, not a list of dicts",
                 "value": _short_repr(value)}]
    out = []
    for entry in value:
        if isinstance(entry, dict):
            out.append({clean_text(str(k)): _json_value(v, 0) for k, v in entry.items()})
        else:
            out.append({"note": f"a launch stat that is a {type(entry).__name__}, not a dict",
                        "value": _short_repr(entry)})
    return out


def _short_repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception as exc:  # noqa: BLE001 - a repr that fails is described instead
        text = f"<{type(value).__name__} whose repr raised {type(exc).__name__}>"
    return clean_text(text[:300])


def _json_value(value: Any, depth: int) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if abs(value) < 1 << 64 else f"<int of {value.bit_length()} bits>"
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return clean_text(value[:10000])
    if depth < 8 and isinstance(value, (list, tuple)):
        return [_json_value(v, depth + 1) for v in value[:10000]]
    if depth < 8 and isinstance(value, dict):
        return {clean_text(str(k)): _json_value(v, depth + 1) for k, v in list(value.items())[:10000]}
    item = getattr(value, "item", None)  # a numpy scalar: its Python number
    if callable(item) and depth < 8 and not isinstance(value, type):
        try:
            plain = item()
        except Exception:  # noqa: BLE001 - an array of several elements, or something else
            plain = value
        if isinstance(plain, (bool, int, float, str)) or plain is None:
            return _json_value(plain, depth + 1)
    return _short_repr(value)


def item_key(kernel: str, case: str, dtype: str, arch: str = "") -> tuple[str, str, str, str]:
    return (kernel, case, dtype, arch)


@dataclass
class Header:
    """The first line of a results file: what ran, where, with which software."""

    suite_version: str
    backend: str
    device: str
    triton: str = ""
    torch: str = ""
    day0: str = ""
    date: str = ""
    host: str = ""
    mode: str = "quick"
    compile_only: bool = False
    archs: list[str] = field(default_factory=list)
    incremental: bool = False  # written as the run goes (see the module docstring)

    def to_json(self) -> str:
        return json_text({"type": "header", "format": FORMAT, **asdict(self)})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Header":
        data = clean(dict(data))
        if data.get("format") not in FORMATS:
            raise ValueError(f"format '{data.get('format')}' is not {' or '.join(FORMATS)}")
        known = {f.name for f in fields(cls)}
        for name in ("suite_version", "backend", "device"):
            if name not in data:
                raise ValueError(f"header has no '{name}'")
        _check_fields(cls, data)
        return cls(**{k: v for k, v in data.items() if k in known})

    def compatible(self, other: "Header") -> str:
        """"" when records of `other` may share a file with these; else what differs."""
        for name in ("suite_version", "backend", "device", "compile_only"):
            a, b = getattr(self, name), getattr(other, name)
            if a != b:
                return f"{name} '{a}' != '{b}'"
        return ""


def new_header(suite_version: str, backend: str, device: str, *, mode: str = "quick",
               compile_only: bool = False, archs: Iterable[str] = ()) -> Header:
    import torch
    import triton

    from .. import __version__
    return Header(suite_version=suite_version, backend=backend, device=device,
                  triton=triton.__version__, torch=torch.__version__, day0=__version__,
                  date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  host=platform.node(), mode=mode, compile_only=compile_only, archs=list(archs))


def suite_version(specs: Iterable[Any]) -> str:
    """A short hash of every registered kernel's name, dtypes and cases (names and params): two
    results files with the same version judged the same items."""
    h = hashlib.sha256()
    for spec in sorted(specs, key=lambda s: s.name):
        h.update(spec.name.encode() + b"\0" + ",".join(spec.dtypes).encode() + b"\0")
        for case in spec.cases:
            params = json.dumps(dict(case.params), sort_keys=True, default=repr)
            h.update(f"{case.name}\0{params}\0{int(case.quick)}\0".encode())
    return h.hexdigest()[:16]


@dataclass
class ResultSet:
    """A loaded results file: the header, the records (last one per item wins), and warnings."""

    header: Header
    records: list[Record]
    path: str = ""
    warnings: list[str] = field(default_factory=list)
    #: True: the file ends with its end line; False: an incremental file without one (its run is
    #: still going or was stopped; `--resume` continues it); None: a day0-results/1 file (unknown)
    complete: bool | None = True
    lines: int = 0  # record lines in the file (before a later record of an item replaced an earlier)

    def incomplete_message(self) -> str:
        """One line saying that this file is incomplete and what to do."""
        return (f"{self.path}: incomplete: {self.lines} record(s) and no end line (the run writing it "
                f"is still going or was stopped); `--resume` with the same --out continues it")

    def keys(self) -> set[tuple[str, str, str, str]]:
        return {r.key for r in self.records}

    def by_status(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.records:
            out[r.status] = out.get(r.status, 0) + 1
        return out


def _dedupe(records: Iterable[Record]) -> list[Record]:
    latest: dict[tuple, Record] = {}
    for r in records:
        latest.pop(r.key, None)  # keep file order of the latest occurrence
        latest[r.key] = r
    return list(latest.values())


def load_results(path: str | os.PathLike[str]) -> ResultSet:
    """Read a results file. Raises ConfigError (one line, naming the file and line) when it is
    missing, not a regular file, empty, not JSON Lines, has no header, a record is malformed, or a
    file written whole lacks its end line. An incremental file without its end line loads with
    `complete=False`; its last line, if a killed run cut it short, is dropped and reported in
    `warnings`. Undecodable bytes become U+FFFD."""
    p = Path(path)
    raw = read_bytes(p, "results file")
    try:
        text, replaced = raw.decode("utf-8"), False
    except UnicodeDecodeError:
        text, replaced = raw.decode("utf-8", errors="replace"), True
    lines = text.split("\n")
    ends_with_newline = text.endswith("\n")
    numbered = [(i + 1, line) for i, line in enumerate(lines) if line.strip()]
    if not numbered:
        raise ConfigError(f"{p}: empty results file (no header line)")
    warnings: list[str] = []
    header: Header | None = None
    legacy = whole = False
    records: list[Record] = []
    end_count: int | None = None
    last_no = numbered[-1][0]
    for no, line in numbered:
        try:
            if end_count is not None:
                raise ValueError("a line after the end line")
            data = json.loads(line)
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            if header is None:
                if data.get("type") != "header":
                    raise ValueError("the first line must be the header (a day0 results file "
                                     "starts with {\"type\": \"header\", ...})")
                header = Header.from_dict(data)
                legacy = data.get("format") != FORMAT
                whole = not legacy and not header.incremental
                continue
            kind = data.get("type")
            if kind == "end" and not legacy:
                count = data.get("records")
                if isinstance(count, bool) or not isinstance(count, int) or count != len(records):
                    raise ValueError(f"the end line counts {json.dumps(count)[:20]} record(s) but the "
                                     f"file holds {len(records)}: it was altered")
                end_count = count
                continue
            if kind != "record":
                raise ValueError(f"unexpected line type '{str(kind)[:40]}'")
            records.append(Record.from_dict(data))
        except (ValueError, TypeError, RecursionError) as exc:
            if isinstance(exc, RecursionError):
                exc = ValueError("JSON nested too deeply")
            cut = no == last_no and not ends_with_newline
            if header is None and replaced:
                raise ConfigError(f"{p}: not a day0 results file (not UTF-8 text)") from None
            if cut and header is None:
                raise ConfigError(f"{p}:{no}: truncated header line; not a complete results file") from None
            if cut and not whole:
                warnings.append(f"{p}:{no}: last line is cut short (a killed run?); ignored it")
                continue
            if cut:
                raise ConfigError(f"{p}:{no}: cut short in the middle of a line; the file was written "
                                  f"whole, so this copy is damaged: write or copy it again") from None
            raise ConfigError(f"{p}:{no}: malformed results line ({' '.join(str(exc).split())[:200]})") from None
    assert header is not None
    complete: bool | None = None if legacy else end_count is not None
    if complete is False and whole:
        raise ConfigError(f"{p}: cut short: no end line after {len(records)} record(s); the file was "
                          f"written whole, so this copy is damaged: write or copy it again")
    return ResultSet(header, _dedupe(records), str(p), warnings, complete, len(records))


def end_line(records: int) -> str:
    """The last line of a complete results file."""
    return json.dumps({"type": "end", "records": records})


class ResultWriter:
    """Writes a results file as a run goes (an incremental file, see the module docstring).

    Each record is one line, flushed at once (a killed process loses at most the line it was
    writing) and fsynced in batches, every `FSYNC_EVERY` records or `FSYNC_SECONDS` seconds, and at
    the end. `finish()` appends the end line (the run is complete); `close()` alone leaves the file
    incomplete and resumable. As a context manager, a block that ends without an exception finishes.
    `append=True` continues an existing file: a cut-short last line and an end line are removed
    first (atomically), and the header marked incremental; the header given is then not written.
    """

    FSYNC_EVERY = 256
    FSYNC_SECONDS = 5.0

    def __init__(self, path: str | os.PathLike[str], header: Header | None, append: bool = False):
        self.path = Path(path)
        self.records = 0
        self.finished = False
        self._unsynced = 0
        self._synced_at = time.monotonic()
        if append:
            self.records = self._reopen(header)
        else:  # the header alone replaces whatever was there, atomically
            atomic_write_bytes(self.path, b"" if header is None else
                               (replace(header, incremental=True).to_json() + "\n").encode())
        self._fh = open(self.path, "a", encoding="utf-8")

    def _reopen(self, header: Header | None) -> int:
        """Make an existing file ready for appending; the number of record lines it holds."""
        raw = read_bytes(self.path, "results file")
        lines = [ln for ln in raw[:raw.rfind(b"\n") + 1].split(b"\n") if ln.strip()]  # drop a cut line
        if lines and _line_type(lines[-1]) == "end":
            lines.pop()
        if not lines:
            lines = [] if header is None else [header.to_json().encode()]
        try:
            first = json.loads(lines[0]) if lines else None
        except ValueError:
            first = None
        if isinstance(first, dict) and first.get("type") == "header":
            first.update(format=FORMAT, incremental=True)
            lines[0] = json.dumps(first).encode()
        atomic_write_bytes(self.path, b"".join(ln + b"\n" for ln in lines))
        return max(len(lines) - 1, 0)

    def write(self, record: Record) -> None:
        self._fh.write(record.to_json() + "\n")
        self._fh.flush()
        self.records += 1
        self._unsynced += 1
        if self._unsynced >= self.FSYNC_EVERY or time.monotonic() - self._synced_at >= self.FSYNC_SECONDS:
            self._sync()

    def _sync(self) -> None:
        try:
            os.fsync(self._fh.fileno())
        except OSError:
            pass
        self._unsynced = 0
        self._synced_at = time.monotonic()

    def finish(self) -> None:
        """The run is complete: append the end line."""
        if not self.finished and not self._fh.closed:
            self._fh.write(end_line(self.records) + "\n")
            self._fh.flush()
            self._sync()
            self.finished = True

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.flush()
            if self._unsynced:
                self._sync()
            self._fh.close()

    def __enter__(self) -> "ResultWriter":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is None:
            self.finish()
        self.close()


def _line_type(line: bytes) -> Any:
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return data.get("type") if isinstance(data, dict) else None


def write_results(path: str | os.PathLike[str], header: Header, records: Iterable[Record]) -> None:
    """Write a whole results file atomically (a reader sees the old file or the complete new one),
    ending with its end line; one fsync."""
    with atomic_writer(path, "w") as fh:
        fh.write(replace(header, incremental=False).to_json() + "\n")
        n = 0
        for r in records:
            fh.write(r.to_json() + "\n")
            n += 1
        fh.write(end_line(n) + "\n")


def merge(sets: list[ResultSet]) -> tuple[Header, list[Record]]:
    """Records of several files of one suite version, backend and device, de-duplicated by item
    (a later file wins). Raises ConfigError naming the first incompatible file."""
    if not sets:
        raise ConfigError("nothing to merge")
    for rs in sets:
        if rs.complete is False:
            raise ConfigError(f"cannot merge {rs.incomplete_message()}, then merge")
    first = sets[0].header
    for rs in sets[1:]:
        why = first.compatible(rs.header)
        if why:
            raise ConfigError(f"cannot merge {rs.path} with {sets[0].path}: {why}")
    archs = list(dict.fromkeys(a for rs in sets for a in rs.header.archs))
    modes = {rs.header.mode for rs in sets}
    header = Header(**{**asdict(first), "archs": archs, "incremental": False,
                       "mode": first.mode if len(modes) == 1 else "mixed"})
    return header, _dedupe(r for rs in sets for r in rs.records)
