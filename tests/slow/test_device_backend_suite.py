"""The whole quick conformance suite on a backend with device memory of its own
(tests/doubles/device_backend.py: a guarded heap in an address space of its own, asynchronous
streams, cpu_interp's rules borrowed): every item passes as it does on cpu_interp, every launch's
host tensors crossing into device memory and back at the launch boundary only."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent


def test_the_quick_suite_passes_through_device_memory(tmp_path):
    out = tmp_path / "device_heap.jsonl"
    env = dict(os.environ, DAY0_BACKENDS="device_heap=doubles.device_backend:DeviceHeapBackend",
               PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")]),
               TRITON_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-m", "sdk.cli", "conformance", "--backend", "device_heap", "--quick",
                           "--out", str(out)], capture_output=True, text=True, env=env, timeout=3600)
    recs = [r for r in map(json.loads, out.read_text().splitlines()) if r["type"] == "record"]
    failed = [(r["kernel"], r["case"], r["dtype"], r["status"], r.get("detail", "")[:200])
              for r in recs if r["status"] not in ("pass", "skipped")]
    assert proc.returncode == 0 and not failed, (failed, proc.stdout[-2000:], proc.stderr[-2000:])
    assert len(recs) > 250 and sum(r["status"] == "pass" for r in recs) > 250
    for r in recs:
        if r["status"] != "pass":
            continue
        assert r["native"] == 0.0, r  # every op borrowed from cpu_interp
        (heap,) = [s["heap"] for s in r["launch_stats"]]
        assert heap["launches"] >= 1 and heap["live_allocations"] == 0, r  # every crossing freed
        assert heap["copies_out"] <= heap["copies_in"], r
