"""`day0 scaffold NAME`: a new device backend package, ready to `pip install -e`.

    day0 scaffold NAME [--codegen interp|llvm] [--device-model MODEL|PATH] [--out DIR]
                       [--force]

Writes DIR/NAME_triton_backend/ (see sdk/backend_template/) in one of two shapes (`--codegen`).
Everything is validated before the first byte is written: the files are rendered into a temporary
directory beside the target and moved into place at the end, so a failed scaffold leaves nothing
behind and an existing package is only replaced with --force.
"""
from __future__ import annotations

import argparse
import importlib.util
import keyword
import shutil
import sys
import tempfile
from importlib.metadata import entry_points
from pathlib import Path

from ..backend import ENTRY_POINT_GROUP
from ..backend_template import CODEGENS, package_name, render
from ..device_models import MODELS_DIR, is_path, load
from ..errors import Day0Error

DEFAULT_DEVICE_MODEL = "generic_npu"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "scaffold", help="generate a new backend package",
        description="Generate NAME_triton_backend/: a pip-installable day0 backend with a table to fill "
        "family by family (interpreter rules; with --codegen llvm, emitter rules writing LLVM IR), memory "
        "and launch hooks over a native C++ runtime stub, the device model it targets, tests and a "
        "bring-up checklist.")
    p.add_argument("name", metavar="NAME", help="backend name: a lowercase Python identifier, e.g. mynpu")
    p.add_argument("--codegen", default=CODEGENS[0], metavar="|".join(CODEGENS),
                   help="the backend's shape: 'interp' (default): a lowering table of rules that "
                   "cpu_interp's interpreter runs, the start for any device; 'llvm': for a toolchain that "
                   "is an LLVM target: an emitter table writing LLVM IR with llvmlite, compiled in stages "
                   "(TTIR passes, 'llir', a binary), with program ids, pointers, masked loads and stores, "
                   "shapes, arithmetic and reductions written; kernels needing other ops run on cpu_interp "
                   "when delegating")
    p.add_argument("--device-model", default=DEFAULT_DEVICE_MODEL, metavar="MODEL",
                   help=f"shipped model name or YAML path to copy into the package (default "
                   f"{DEFAULT_DEVICE_MODEL})")
    p.add_argument("--out", default=".", metavar="DIR", help="existing directory to create the package in "
                   "(default: the current directory)")
    p.add_argument("--force", action="store_true", help="replace an existing NAME_triton_backend/")
    p.set_defaults(func=_scaffold)


def check_name(name: str) -> None:
    """Raise Day0Error unless `name` can name a new backend."""
    if not name.isidentifier() or keyword.iskeyword(name) or not name.isascii():
        raise Day0Error(f"backend name '{name}' must be a Python identifier (letters, digits, '_'; "
                        f"not a keyword), e.g. 'mynpu'")
    taken = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    if name in taken and _dist(taken[name]) != package_name(name).replace("_", "-"):
        raise Day0Error(f"backend name '{name}' is taken by {_dist(taken[name])} ({taken[name].value}); "
                        f"choose another")
    if name in _triton_builtin_backends():
        raise Day0Error(f"backend name '{name}' is one of Triton's own backends; choose another")


def _dist(ep) -> str:
    dist = getattr(ep, "dist", None)
    return dist.name.lower().replace("_", "-") if dist else "an installed package"


def _triton_builtin_backends() -> set[str]:
    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.submodule_search_locations:
        return set()
    root = Path(next(iter(spec.submodule_search_locations))) / "backends"
    return {p.parent.name for p in root.glob("*/compiler.py")}


def model_text(spec: str) -> tuple[str, str]:
    """(model name, YAML text) of a shipped model or a model file; validated."""
    model = load(spec)
    path = Path(spec) if is_path(spec) else MODELS_DIR / f"{model.name}.yaml"
    return model.name, path.read_text(encoding="utf-8")


def _scaffold(args: argparse.Namespace) -> int:
    if args.codegen not in CODEGENS:
        raise Day0Error(f"--codegen '{args.codegen}': choose one of {', '.join(CODEGENS)}")
    check_name(args.name)
    model, yaml_text = model_text(args.device_model)
    out = Path(args.out)
    if not out.is_dir():
        raise Day0Error(f"--out {out}: no such directory")
    target = out / package_name(args.name)
    if (target.exists() or target.is_symlink()) and not args.force:
        raise Day0Error(f"{target} already exists; pass --force to replace it")
    files = render(args.name, model, yaml_text, args.codegen)

    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=out))
    try:
        for rel, text in files.items():
            path = staging / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()
        staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    if not args.name.islower():
        print(f"note: '{args.name}' is not lowercase; package indexes and Triton normalise names, "
              f"lowercase avoids surprises", file=sys.stderr)
    print(f"created {target} ({len(files)} files): backend '{args.name}' ({args.codegen} shape) targeting "
          f"device model '{model}'")
    print(f"next:\n  pip install -e {target}\n  day0 ops --backend {args.name}\n"
          f"  {args.name.upper()}_DELEGATE=1 day0 conformance --backend {args.name} --quick")
    return 0
