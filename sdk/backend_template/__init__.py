"""The files `day0 scaffold` renders into a new backend package.

Every template ends in `.tmpl` and is rendered by replacing `{{key}}` placeholders; the directory
`package/` becomes the Python package `src/NAME_triton_backend/` and `gitignore` becomes `.gitignore`.
The device model is not a template: the scaffold copies the chosen model's YAML verbatim.

Two shapes of backend (`CODEGENS`): "interp" (the files here: a lowering table whose rules
cpu_interp's interpreter runs) and "llvm" (the same files, with those under `llvm/` replacing or
adding to them and `DROPPED` left out: an emitter table writing LLVM IR, compiled in stages).
"""
from __future__ import annotations

import re
from pathlib import Path

from .. import __version__

TEMPLATE_DIR = Path(__file__).resolve().parent
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


def package_name(name: str) -> str:
    return f"{name}_triton_backend"


def placeholders(name: str, device_model: str) -> dict[str, str]:
    """The values templates may use."""
    return {
        "name": name,                                    # backend name: mynpu
        "Name": "".join(p[:1].upper() + p[1:] for p in name.split("_")),  # class prefix: MyNpu
        "NAME": name.upper(),                            # environment variable prefix: MYNPU
        "package": package_name(name),                   # mynpu_triton_backend
        "device_model": device_model,                    # the model it was generated for
        "sdk_version": __version__,
    }


#: the shapes a package can start from (`day0 scaffold --codegen`); the first is the default
CODEGENS = ("interp", "llvm")
#: per shape, the common templates it leaves out (by their path under TEMPLATE_DIR, without .tmpl)
DROPPED = {"llvm": ("package/lowering.py",)}


def templates(codegen: str = "interp") -> dict[str, Path]:
    """The template of each file a `codegen`-shaped package has, by its path under TEMPLATE_DIR."""
    def under(root: Path) -> dict[str, Path]:
        return {src.relative_to(root).with_suffix("").as_posix(): src for src in sorted(root.rglob("*.tmpl"))}
    common = {rel: src for rel, src in under(TEMPLATE_DIR).items() if rel.split("/")[0] not in CODEGENS}
    if codegen == "interp":
        return common
    if codegen not in CODEGENS:
        raise ValueError(f"codegen '{codegen}': choose one of {', '.join(CODEGENS)}")
    kept = {rel: src for rel, src in common.items() if rel not in DROPPED.get(codegen, ())}
    return {**kept, **under(TEMPLATE_DIR / codegen)}


def render(name: str, device_model: str, device_model_yaml: str, codegen: str = "interp") -> dict[str, str]:
    """Every file of the package, as {relative path: text}."""
    values = placeholders(name, device_model)

    def substitute(match: re.Match) -> str:
        return values[match.group(1)]

    files: dict[str, str] = {}
    for rel, src in sorted(templates(codegen).items()):
        rel = re.sub(r"^package/", f"src/{values['package']}/", rel)
        rel = ".gitignore" if rel == "gitignore" else rel
        files[rel] = _PLACEHOLDER.sub(substitute, src.read_text(encoding="utf-8"))
    header = (f"# The device {name} targets: a copy of day0's '{device_model}' made by `day0 scaffold`.\n"
              f"# Edit it to describe your accelerator (each figure with its source); validate it with\n"
              f"# `day0 devices show src/{values['package']}/device_model.yaml`.\n")
    files[f"src/{values['package']}/device_model.yaml"] = header + device_model_yaml
    return files
