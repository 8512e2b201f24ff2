"""scripts/library_sweep.py: bad input is one line and exit 2, nothing is overwritten without --force,
and a real library op runs through the worker (tests/slow/test_sweep_scripts_slow.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


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
