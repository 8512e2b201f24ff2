"""The whole quick conformance suite on a backend with device memory of its own
(tests/doubles/device_backend.py: a guarded heap in an address space of its own, asynchronous
streams, cpu_interp's rules borrowed): every item comes out as it does on cpu_interp (passes, or
fails there too the same way: the library tier records upstream code that cannot run off CUDA as an
error on every backend), every launch's host tensors crossing into device memory and back at the
launch boundary only."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


def _conformance(tmp_path, backend: str, *more: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    out = tmp_path / f"{backend}.jsonl"
    env = dict(os.environ, DAY0_BACKENDS="device_heap=doubles.device_backend:DeviceHeapBackend",
               PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")]),
               TRITON_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-m", "sdk.cli", "conformance", "--backend", backend, "--quick",
                           "--out", str(out), *more], capture_output=True, text=True, env=env, timeout=3600)
    lines = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    assert proc.returncode in (0, 1) and lines and lines[-1]["type"] == "end", (proc.stdout[-2000:], proc.stderr[-2000:])
    return proc, [r for r in lines if r["type"] == "record"]


def test_the_quick_suite_passes_through_device_memory(tmp_path):
    proc, recs = _conformance(tmp_path, "device_heap")
    assert len(recs) > 250 and sum(r["status"] == "pass" for r in recs) > 250
    # an item that does not pass must not pass on cpu_interp either, with the same outcome
    others = {(r["kernel"], r["case"], r["dtype"]): (r["status"], r.get("detail", ""))
              for r in recs if r["status"] not in ("pass", "skipped")}
    if others:
        _, ref = _conformance(tmp_path, "cpu_interp", "--kernels", ",".join(sorted({k for k, _, _ in others})))
        on_cpu = {(r["kernel"], r["case"], r["dtype"]): (r["status"], r.get("detail", "")) for r in ref}
        differ = {item: (got, on_cpu.get(item)) for item, got in others.items() if on_cpu.get(item) != got}
        assert not differ, (differ, proc.stdout[-2000:])
    for r in recs:
        if r["status"] != "pass":
            continue
        assert r["native"] == 0.0, r  # every op borrowed from cpu_interp
        (heap,) = [s["heap"] for s in r["launch_stats"]]
        assert heap["launches"] >= 1 and heap["live_allocations"] == 0, r  # every crossing freed
        assert heap["copies_out"] <= heap["copies_in"], r
