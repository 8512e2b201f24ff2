"""Benchmark scripts that take a while: run by CI's slow tier."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script(name: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / name), *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=timeout)


def test_bounds_check_benchmark_times_both_settings_and_compares_outputs(tmp_path):
    out = tmp_path / "b.json"
    proc = _script("cpu_bounds_checks.py", "--kernels", "rmsnorm", "--reps", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    row = json.loads(out.read_text())["rows"][0]
    assert row["kernel"] == "rmsnorm" and row["same_bits"] is True
    assert row["checked_s"] > 0 and row["unchecked_s"] > 0
    assert row["ratio"] == pytest.approx(row["checked_s"] / row["unchecked_s"])
    again = _script("cpu_bounds_checks.py", "--kernels", "rmsnorm", "--out", str(out))
    assert again.returncode == 2 and "exists" in again.stderr and len(again.stderr.strip().splitlines()) == 1
    bad = _script("cpu_bounds_checks.py", "--kernels", "no_such_kernel")
    assert bad.returncode == 2 and "unknown kernel 'no_such_kernel'" in bad.stderr


def test_compiled_ab_times_both_trees_and_compares_their_outputs(tmp_path, capsys):
    """One quick item against the committed HEAD: both trees run it on the compiled tier,
    their outputs agree, and the JSON holds the row."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import cpu_compiled_ab
    out = tmp_path / "ab.json"
    code = cpu_compiled_ab.main(["--items", "gemm_bf16/odd_M37_N96_K80/fp32", "--reps", "1", "--base", "HEAD",
                                 "--out", str(out)])
    assert code == 0, capsys.readouterr()
    data = json.loads(out.read_text())
    [row] = data["rows"]
    assert row["same"] and row["base_s"] > 0 and row["new_s"] > 0 and data["meta"]["base"]
    assert cpu_compiled_ab.main(["--items", "gemm_bf16/odd_M37_N96_K80/fp32", "--out", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
