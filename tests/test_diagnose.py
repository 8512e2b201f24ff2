"""A broken `triton.backends` plugin stops Triton from starting for every program on the machine:
day0 then says in one line (exit 2) which entry point, which package and, where its import raised,
which file and line, and never blames Triton's own backends for it."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _site(tmp_path: Path, dist: str, package: str, files: dict[str, str]) -> Path:
    """A folder holding an installed distribution `dist` whose triton.backends entry point is
    `<package>.plugin`, with `files` (relative path -> text) under it."""
    site = tmp_path / "site"
    info = site / f"{dist}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[triton.backends]\nbrokenplug = {package}.plugin\n")
    for rel, text in files.items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return site


def _day0(site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "sdk.cli", "backends"], capture_output=True, text=True,
                          env=env, cwd=site.parent, timeout=300)


def _one_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert lines[0].startswith("day0: error: triton cannot start: "), lines[0]
    assert "pip uninstall triton" not in lines[0] and "day0-sdk" not in lines[0], lines[0]
    return lines[0]


def test_a_plugin_whose_module_is_gone(tmp_path):
    site = _site(tmp_path, "halfgone-plug", "halfgone_plug", {})  # the metadata left, the code removed
    line = _one_line(_day0(site))
    assert "entry point 'brokenplug' (halfgone-plug): module 'halfgone_plug.plugin' not found" in line, line
    assert "`pip uninstall halfgone-plug`" in line, line


@pytest.mark.parametrize("where", ["package", "plugin"])
def test_a_plugin_with_a_syntax_error_is_named_with_its_file_and_line(tmp_path, where):
    bad = "x = 1\ndef broken(:\n    pass\n"
    files = {"syn_plug/__init__.py": bad if where == "package" else "",
             "syn_plug/plugin/__init__.py": "",
             "syn_plug/plugin/compiler.py": bad if where == "plugin" else "",
             "syn_plug/plugin/driver.py": ""}
    site = _site(tmp_path, "syn-plug", "syn_plug", files)
    line = _one_line(_day0(site))
    culprit = "syn_plug/__init__.py" if where == "package" else "syn_plug/plugin/compiler.py"
    assert "entry point 'brokenplug' (syn-plug) fails to import: SyntaxError: " in line, line
    assert f"{culprit}:2)" in line and "`pip uninstall syn-plug`" in line, line


def test_a_plugin_missing_a_dependency_names_the_dependency(tmp_path):
    files = {"dep_plug/__init__.py": "", "dep_plug/plugin/__init__.py": "",
             "dep_plug/plugin/compiler.py": "import os\nimport vendor_toolchain_bindings_absent\n",
             "dep_plug/plugin/driver.py": ""}
    site = _site(tmp_path, "dep-plug", "dep_plug", files)
    line = _one_line(_day0(site))
    assert ("entry point 'brokenplug' (dep-plug) fails to import: ModuleNotFoundError: "
            "No module named 'vendor_toolchain_bindings_absent'") in line, line
    assert "dep_plug/plugin/compiler.py:2)" in line, line
