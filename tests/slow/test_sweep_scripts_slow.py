"""The slower checks of the library and third-party sweep scripts: a real op run through each."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_library_sweep import _run  # noqa: E402
from test_thirdparty_sweep import ROOT, _rows  # noqa: E402
from test_thirdparty_sweep import _run as _run_thirdparty  # noqa: E402


def test_a_library_op_runs_and_is_compared(tmp_path):
    pytest.importorskip("liger_kernel", reason="liger-kernel not installed (pip install liger-kernel)")
    proc = _run("--only", "liger.swiglu,liger.dyt", "--out", str(tmp_path / "s"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = {(r["op"], r["dtype"]): r for r in json.loads((tmp_path / "s.json").read_text())["results"]}
    ok = rows[("liger.swiglu", "fp32")]
    assert ok["status"] == "pass" and ok["kernels"] and set(ok["errors"]) == {"c", "da", "db"}
    assert all(e["rel"] <= e["bound"] and e["finite"] for e in ok["errors"].values())
    # dyt's backward asks the GPU infer_device names for its SM count: an error, explained, which does
    # not fail the run (UnboundLocalError without a GPU; torch.cuda refusing the CPU device with one)
    dyt = rows[("liger.dyt", "fp32")]
    assert dyt["status"] == "error" and dyt["class"].startswith("b: liger_kernel/ops/dyt.py")
    assert "NUM_SMS" in dyt["detail"] or "Expected a cuda device" in dyt["detail"], dyt["detail"]
    assert rows[("liger.dyt[forward]", "fp32")]["status"] == "pass"
    md = (tmp_path / "s.md").read_text()
    assert "| `liger.swiglu` | fp32 | pass |" in md and "liger-kernel" in md


def test_a_library_that_is_not_installed_is_skipped_not_passed(tmp_path):
    probe = subprocess.run([sys.executable, "-c", "import importlib.util as u; "
                            "print(any(u.find_spec(m) for m in ('mamba_ssm', 'torchao', 'sglang')))"],
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    if probe.stdout.strip() != "False":
        pytest.skip("a swept library is importable without PYTHONPATH: nothing is missing to check")
    only = "mamba_ssm.selective_state_update,torchao.blockwise.fp8_blockwise_act_quant,sglang.merge_state_triton"
    proc = _run_thirdparty("--only", only, "--out", str(tmp_path / "s"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = _rows(tmp_path / "s.json")
    assert {r["lib"] for r in rows.values()} == {"mamba-ssm", "torchao", "sglang"}
    for row in rows.values():
        assert row["status"] == "skipped" and row["detail"].startswith("not installed: "), row
        assert "pip install" in row["detail"] and row["lib"] in row["detail"]
    counts = json.loads((tmp_path / "s.json").read_text())["meta"]["counts"]
    assert counts == {"skipped": len(rows)}
