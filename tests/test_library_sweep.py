"""scripts/library_sweep.py: bad input is one line and exit 2, nothing is overwritten without --force,
a library that is not installed is skipped and says what to install, and a real library op runs
through the worker (tests/slow/test_sweep_scripts_slow.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "library_sweep.py"


def _run(*argv: str, cwd: Path, first: str = "") -> subprocess.CompletedProcess:
    """The script with this checkout (and `first`, a folder) ahead of the inherited PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_DEFAULT_BACKEND"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [first, str(ROOT), os.environ.get("PYTHONPATH")]))
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


def test_a_library_that_is_not_installed_is_skipped_with_what_to_install(tmp_path):
    hide = tmp_path / "hide" / "liger_kernel"  # found first, and importing it fails as a missing one does
    hide.mkdir(parents=True)
    (hide / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'liger_kernel'\", name='liger_kernel')\n")
    proc = _run("--only", "liger.swiglu", "--out", str(tmp_path / "s"), cwd=tmp_path, first=str(hide.parent))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = json.loads((tmp_path / "s.json").read_text())["results"]
    assert rows and all(r["status"] == "skipped" for r in rows), rows
    assert all("not installed: pip install liger-kernel" in r["detail"] for r in rows), rows
