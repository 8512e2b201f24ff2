"""scripts/library_sweep.py: bad input is one line and exit 2, nothing is overwritten without --force,
and a real library op runs through the worker to a pass with its errors recorded."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "library_sweep.py"


def _run(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_DEFAULT_BACKEND"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, str(SCRIPT), *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    for argv, text in ((("--only", "no_such_op", "--out", "x"), "matches no op"),
                       (("--only", "liger.swiglu"), "--out is required"),
                       (("--out", str(tmp_path / "missing" / "s")), "is not a directory")):
        proc = _run(*argv, cwd=tmp_path)
        assert proc.returncode == 2 and text in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_existing_results_are_not_overwritten_without_force(tmp_path):
    (tmp_path / "s.md").write_text("keep")
    proc = _run("--only", "liger.swiglu", "--out", str(tmp_path / "s"), cwd=tmp_path)
    assert proc.returncode == 2 and "pass --force" in proc.stderr
    assert (tmp_path / "s.md").read_text() == "keep"


def test_a_library_op_runs_and_is_compared(tmp_path):
    pytest.importorskip("liger_kernel", reason="liger-kernel not installed (pip install liger-kernel)")
    proc = _run("--only", "liger.swiglu,liger.dyt", "--out", str(tmp_path / "s"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = {(r["op"], r["dtype"]): r for r in json.loads((tmp_path / "s.json").read_text())["results"]}
    ok = rows[("liger.swiglu", "fp32")]
    assert ok["status"] == "pass" and ok["kernels"] and set(ok["errors"]) == {"c", "da", "db"}
    assert all(e["rel"] <= e["bound"] and e["finite"] for e in ok["errors"].values())
    # dyt's backward needs a GPU's SM count: an error, explained, which does not fail the run
    dyt = rows[("liger.dyt", "fp32")]
    assert dyt["status"] == "error" and dyt["class"].startswith("b:") and "NUM_SMS" in dyt["detail"]
    assert rows[("liger.dyt[forward]", "fp32")]["status"] == "pass"
    md = (tmp_path / "s.md").read_text()
    assert "| `liger.swiglu` | fp32 | pass |" in md and "liger-kernel" in md
