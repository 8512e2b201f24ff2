"""Captured calls kept on disk between `day0 simulate` runs.

Capturing a case builds its inputs on the CPU and compiles its kernels to TTIR; at realistic shapes
that is most of a simulation's time, and it depends neither on the device model nor on the learned
efficiencies. One entry per (kernel, case, dtype, target profile) holds the call's analysed launches
(sdk.simulator.run.Captured) or the reason it could not be captured. The key names everything that
decides what the capture sees:
- the item: kernel name, case name and parameters (the item's share of the suite version), dtype;
- the kernel's source: the files holding its launch wrapper, its input builder and its Triton
  kernels;
- the target profile the wrappers see (fp8 types, device properties, what its compiler stages);
- the capture and analysis code (sdk.capture, sdk.ttir, the simulator's capture and analysis
  modules) and the Triton and PyTorch versions.
Anything else changing leaves old entries unused, never wrong. Entries are pickles written
atomically, one file each, under `$DAY0_SIM_CACHE` (default: `$XDG_CACHE_HOME/day0/sim`, else
`~/.cache/day0/sim`); a file that cannot be read is captured again.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os
import pickle
from pathlib import Path

FORMAT = "day0-sim-capture/1"
#: modules whose code decides what a capture records and how it is analysed
_CODE = ("sdk/capture.py", "sdk/simulator/run.py", "sdk/simulator/torchwork.py", "sdk/simulator/analysis.py",
         "sdk/simulator/onchip.py", "sdk/ttir")
_ROOT = Path(__file__).resolve().parent.parent.parent
_code_digest: list[str] = []


def default_dir() -> Path:
    env = os.environ.get("DAY0_SIM_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "day0" / "sim"


def code_digest() -> str:
    """A hash of the capture and analysis code and the Triton and PyTorch versions."""
    if not _code_digest:
        import torch
        import triton
        h = hashlib.sha256(f"{FORMAT}\0{triton.__version__}\0{torch.__version__}\0".encode())
        for rel in _CODE:
            p = _ROOT / rel
            for f in sorted(p.rglob("*.py")) if p.is_dir() else [p]:
                h.update(f.relative_to(_ROOT).as_posix().encode() + b"\0" + f.read_bytes())
        _code_digest.append(h.hexdigest())
    return _code_digest[0]


def _source_files(spec) -> list[str]:
    files = set()
    for obj in (spec.run, spec.make_inputs, *getattr(spec, "triton_kernels", ())):
        fn = getattr(obj, "fn", obj)  # a Triton JITFunction wraps the Python function
        try:
            src = inspect.getsourcefile(fn)
        except TypeError:
            src = None
        if src:
            files.add(src)
    return sorted(files)


def item_key(spec, case, dtype: str, profile) -> str:
    """The cache key of one (kernel, case, dtype) captured for a target profile."""
    h = hashlib.sha256(code_digest().encode())
    params = json.dumps(dict(case.params), sort_keys=True, default=repr)
    h.update(f"\0{spec.name}\0{case.name}\0{params}\0{dtype}\0{profile!r}\0".encode())
    for f in _source_files(spec):
        h.update(Path(f).read_bytes())
    return h.hexdigest()


class CaptureCache:
    """Get and put captured calls by key; `hits` and `misses` count this run's lookups."""

    def __init__(self, directory: Path | None = None) -> None:
        self.dir = Path(directory) if directory else default_dir()
        self.hits = self.misses = 0

    def _path(self, key: str) -> Path:
        return self.dir / key[:2] / f"{key}.pkl"

    def get(self, key: str):
        """The stored entry (a Captured, or the line saying why the call could not be captured);
        None when there is none or it cannot be read. Counted as a hit or a miss."""
        value = self.peek(key)
        if value is None:
            self.misses += 1
        else:
            self.hits += 1
        return value

    def peek(self, key: str):
        """As get, not counted."""
        p = self._path(key)
        try:
            entry = pickle.loads(p.read_bytes())
        except FileNotFoundError:
            return None
        except Exception:  # a truncated or foreign file: captured again, then replaced
            return None
        if not isinstance(entry, dict) or entry.get("format") != FORMAT:
            return None
        return entry["value"]

    def count_hits(self, n: int) -> None:
        """Count `n` hits found elsewhere (peeked, or by a worker process using the same directory)."""
        self.hits += n

    def put(self, key: str, value) -> None:
        from ..fileio import atomic_write_bytes
        p = self._path(key)
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(p, pickle.dumps({"format": FORMAT, "value": value}, protocol=pickle.HIGHEST_PROTOCOL))
        except OSError:  # a read-only or full disk: the run goes on without keeping the entry
            pass
