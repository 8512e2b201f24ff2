"""The import graph of sdk/ and backends/ holds its layout: no cycles, no upward arrows.

`python -m sdk.tools.arch` runs here as CI runs it (a cycle or an upward import fails the suite),
and its cycle and arrow detection is checked on planted graphs so that a pass means something."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sdk.tools import arch

ROOT = Path(__file__).resolve().parent.parent


def test_the_repository_layout_holds():
    proc = subprocess.run([sys.executable, "-m", "sdk.tools.arch"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "the layout holds" in proc.stderr


def test_a_planted_cycle_is_found():
    edges = {"backends.x.a": {"backends.x.b"}, "backends.x.b": {"backends.x.c"},
             "backends.x.c": {"backends.x.a"}, "backends.x.d": {"backends.x.a"}}
    assert arch.cycles(edges) == [["backends.x.a", "backends.x.b", "backends.x.c"]]
    assert arch.cycles({"sdk.a": {"sdk.b"}, "sdk.b": set()}) == []


def test_a_planted_upward_arrow_is_found():
    found = arch.upward({"sdk.report.x": {"backends.cpu_interp.memory"},
                         "sdk.conformance.kernels.k": {"backends.nvidia_ref.cuda"},
                         "backends.cpu_interp.memory": {"sdk.numerics"}})
    assert len(found) == 2 and all("upward arrow" in f for f in found)


def test_function_local_imports_count(tmp_path, monkeypatch):
    """An import inside a function is an arrow like any other (it hides a cycle, never removes it)."""
    pkg = tmp_path / "backends" / "p"
    pkg.mkdir(parents=True)
    (tmp_path / "backends" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .a import g\n    return g\n")
    monkeypatch.setattr(arch, "ROOT", tmp_path)
    edges = arch.graph()
    assert edges["backends.p.b"] == {"backends.p.a"}
    assert arch.cycles(edges) == [["backends.p.a", "backends.p.b"]]
