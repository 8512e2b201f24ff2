"""`day0 scaffold`: bad input writes nothing; a generated backend installs, passes its own tests,
is listed by `day0 backends`, and runs conformance kernels: every one `unsupported` (missing ops
listed) without delegation, every one passing with it, through its native runtime's device heap
(host tensors copied only at launch boundaries) and launch path."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sdk.cli import main
from sdk.device_models import MODELS_DIR

NAME = "scaffoldcheck"
KERNELS = "silu_and_mul,rmsnorm,moe_align_block_size"  # elementwise, reduction, atomics + 5 launches


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def scaffold(capsys, *args: str) -> tuple[int, list[str]]:
    rc = main(["scaffold", *args])
    return rc, capsys.readouterr().err.strip().splitlines()


# ------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("name, why", [
    ("a/b", "Python identifier"), ("../evil", "Python identifier"), ("class", "not a keyword"),
    ("1npu", "Python identifier"), ("my-npu", "Python identifier"), ("", "Python identifier"),
    ("cpu_interp", "taken by day0-sdk"), ("nvidia", "Triton's own backends"),
])
def test_bad_name_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, name, why):
    rc, err = scaffold(capsys, name, "--out", str(tmp_path))
    assert rc == 2 and len(err) == 1 and why in err[0], err
    assert list(tmp_path.iterdir()) == []


def test_unknown_device_model_writes_nothing(tmp_path, capsys):
    rc, err = scaffold(capsys, "mynpu", "--device-model", "no_such_npu", "--out", str(tmp_path))
    assert rc == 2 and len(err) == 1 and "unknown device model 'no_such_npu'" in err[0]
    rc, err = scaffold(capsys, "mynpu", "--device-model", str(tmp_path / "missing.yaml"), "--out", str(tmp_path))
    assert rc == 2 and len(err) == 1 and "no such device model file" in err[0]
    assert list(tmp_path.iterdir()) == []


def test_missing_out_directory_is_an_error(tmp_path, capsys):
    rc, err = scaffold(capsys, "mynpu", "--out", str(tmp_path / "nope"))
    assert rc == 2 and len(err) == 1 and "no such directory" in err[0]
    assert list(tmp_path.iterdir()) == []


def test_existing_directory_is_untouched_without_force(tmp_path, capsys):
    target = tmp_path / "mynpu_triton_backend"
    target.mkdir()
    (target / "mine.txt").write_text("vendor work")
    rc, err = scaffold(capsys, "mynpu", "--out", str(tmp_path))
    assert rc == 2 and len(err) == 1 and "already exists; pass --force" in err[0]
    assert tree(tmp_path) == {"mynpu_triton_backend/mine.txt": b"vendor work"}

    assert scaffold(capsys, "mynpu", "--out", str(tmp_path), "--force")[0] == 0
    files = tree(target)
    assert "mine.txt" not in files and "src/mynpu_triton_backend/backend.py" in files
    assert [p.name for p in tmp_path.iterdir()] == ["mynpu_triton_backend"]  # no staging left over


def test_rendered_files_and_device_model_copy(tmp_path, capsys):
    model = MODELS_DIR / "nvidia_l4.yaml"
    assert scaffold(capsys, "mynpu", "--device-model", str(model), "--out", str(tmp_path))[0] == 0
    files = tree(tmp_path / "mynpu_triton_backend")
    assert {"pyproject.toml", "setup.py", "README.md", ".gitignore", "runtime/runtime.cpp",
            "tests/test_backend.py"} <= set(files)
    for part in ("__init__", "backend", "lowering", "memory", "launch", "plugin/__init__",
                 "plugin/compiler", "plugin/driver"):
        assert f"src/mynpu_triton_backend/{part}.py" in files
    assert not [p for p, text in files.items() if b"{{" in text], "unrendered placeholder"
    copy = files["src/mynpu_triton_backend/device_model.yaml"].decode()
    assert copy.endswith(model.read_text()) and "nvidia_l4" in copy.splitlines()[0]
    pyproject = files["pyproject.toml"].decode()
    assert 'mynpu = "mynpu_triton_backend:MynpuBackend"' in pyproject
    assert 'mynpu = "mynpu_triton_backend.plugin"' in pyproject


# ---------------------------------------------------------------------- generated package
ROOT = Path(__file__).resolve().parent.parent  # the checkout whose sdk is under test


#: directories the generated packages are installed into (installed_package), on every command's path
SITES: list[str] = []


def run(*cmd: str, cwd: Path, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    path = os.pathsep.join([*SITES, str(ROOT), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(cmd, cwd=cwd, env={**os.environ, "PYTHONPATH": path, **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


def installed_package(root: Path, name: str, *scaffold_args: str):
    """`day0 scaffold NAME [args]` into root, pip-installed into a directory of its own that every
    command `run` starts is given on its path (the body of a fixture): yields the project directory.
    Not into the environment running the tests, where other test processes (pytest -n) would find
    its entry points registered before or after its modules are there, and Triton, which imports
    every registered backend, would not start."""
    assert main(["scaffold", name, *scaffold_args, "--out", str(root)]) == 0
    project, site = root / f"{name}_triton_backend", root / "site"
    pip = run(sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps",
              "--target", str(site), str(project), cwd=root)
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    SITES.append(str(site))
    try:
        yield project
    finally:
        SITES.remove(str(site))


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The scaffolded package, installed for the module (installed_package)."""
    yield from installed_package(tmp_path_factory.mktemp("scaffold"), NAME)


def day0(project: Path, *args: str, delegate: bool) -> subprocess.CompletedProcess:
    env = {f"{NAME.upper()}_DELEGATE": "1" if delegate else "0",
           "TRITON_CACHE_DIR": str(project.parent / "triton-cache")}
    return run(sys.executable, "-m", "sdk.cli", *args, cwd=project.parent, env=env)


def records(path: Path) -> list[dict]:
    return [r for r in map(json.loads, path.read_text().splitlines()) if r["type"] == "record"]
