"""scripts/thirdparty_sweep.py: a library that is not installed is skipped with its install command
(never a pass), bad input is one line and exit 2, and real mamba_ssm / torchao / sglang ops run
through the worker to a pass against the references when the libraries are importable."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "thirdparty_sweep.py"
INSTALL = ("MAMBA_FORCE_BUILD=TRUE MAMBA_SKIP_CUDA_BUILD=TRUE pip install --no-deps --no-build-isolation "
           "--target DIR mamba-ssm==2.3.2.post1 torchao==0.18.0; pip install --no-deps --target DIR "
           "sglang==0.5.23 orjson ipython traitlets; then PYTHONPATH=DIR")


def _run(*argv: str, cwd: Path, pythonpath: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_DEFAULT_BACKEND"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), pythonpath]))
    return subprocess.run([sys.executable, str(SCRIPT), *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900)


def _rows(path: Path) -> dict:
    return {(r["op"], r["dtype"]): r for r in json.loads(path.read_text())["results"]}


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    for argv, text in ((("--only", "no_such_op", "--out", "x"), "matches no op"),
                       (("--only", "sglang.merge_state_triton"), "--out is required")):
        proc = _run(*argv, cwd=tmp_path)
        assert proc.returncode == 2 and text in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def _libs_path() -> str:
    """Where the swept libraries import from: this process's path (PYTHONPATH set by the caller)."""
    missing = [m for m in ("mamba_ssm", "torchao", "sglang") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not importable; install: {INSTALL}")
    return os.environ.get("PYTHONPATH", "")


def test_third_party_ops_run_and_are_compared(tmp_path):
    libs = _libs_path()
    only = ("mamba_ssm.selective_state_update[state_batch_indices],mamba_ssm.k_activations.swiglu,"
            "rmsnorm_fn[no standin],torchao.blockwise.fp8_blockwise_act_quant,torchao.mx_formats.triton_mxfp8_dequant_dim0,"
            "sglang.merge_state_triton")
    proc = _run("--only", only, "--out", str(tmp_path / "s"), cwd=tmp_path, pythonpath=libs)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = _rows(tmp_path / "s.json")
    for key, outputs in {("mamba_ssm.selective_state_update[state_batch_indices]", "fp32"): {"out", "state"},
                         ("mamba_ssm.k_activations.swiglu", "bf16"): {"y", "dxy"},
                         ("torchao.blockwise.fp8_blockwise_act_quant", "fp32"): {"y", "s"},
                         ("sglang.merge_state_triton", "fp32"): {"v", "s"}}.items():
        row = rows[key]
        assert row["status"] == "pass" and row["kernels"], row
        assert set(row["errors"]) == outputs
        assert all(e["rel"] <= e["bound"] and e["finite"] for e in row["errors"].values())
    # the library's own mistake (scales converted by value, read as exponents): stated, not a pass
    mx = rows[("torchao.mx_formats.triton_mxfp8_dequant_dim0", "fp32")]
    assert mx["status"] == "fail" and mx["class"].startswith("b: torchao/prototype/mx_formats/kernels.py:")
    # without the stand-in, mamba_ssm's torch.cuda.device call stops a CPU-only torch: stated too
    assert rows[("mamba_ssm.layernorm_gated.rmsnorm_fn[no standin]", "fp32")]["status"] == "error"
    meta = json.loads((tmp_path / "s.json").read_text())["meta"]
    assert meta["versions"]["mamba-ssm"] != "not installed" and meta["command"].startswith("python scripts/")
