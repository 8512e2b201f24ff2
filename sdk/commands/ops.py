"""`day0 ops --backend B`: the TTIR ops the suite needs that B does not accept (its capabilities),
found without running anything, each with the kernels and models it blocks.

    day0 ops --backend B [--kernels K,..] [--json]
"""
from __future__ import annotations

import argparse
import json
import re
import sys

from ..errors import ConfigError, UnknownName

_NAME = re.compile(r"[A-Za-z0-9_]+(@[A-Za-z0-9_.]+)?(/compile)?")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "ops", help="ops the suite needs that a backend cannot lower (nothing is run)",
        description="Capture the TTIR of every conformance kernel (quick cases, every dtype) without "
        "running it, and list the ops (with element types) that the backend's capabilities lack, "
        "ranked by the models they block.")
    p.add_argument("--backend", required=True, metavar="B", help="backend name (or NAME@ARCH variant)")
    p.add_argument("--kernels", metavar="K,..", help="only these kernels (comma separated)")
    p.add_argument("--model", action="append", default=[], metavar="NAME|CONFIG.json",
                   help="instead of the suite: the kernels this whole model launches under torch.compile "
                   "(and the Triton libraries transformers calls), captured by running it once on "
                   "cpu_interp at the model tier's scale (repeatable)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(func=run)


def _model_kernels(specs: dict) -> dict[str, list[str]]:
    from ..report.inputs import model_needs
    needs = model_needs()
    if needs:
        return {m: list(n.kernels) for m, n in needs.items()}
    out: dict[str, list[str]] = {}
    for spec in specs.values():
        for m in spec.models:
            out.setdefault(m, []).append(spec.name)
    return out


def run(args: argparse.Namespace) -> int:
    if not _NAME.fullmatch(args.backend):
        raise ConfigError(f"--backend '{args.backend}' is not a backend name")
    from ..backend import registry
    backend = registry.get(args.backend)  # UnknownName / BackendLoadError: one line, exit 2
    from ..conformance.runner import load_suite
    from ..report.ops import capture_suite, missing_ops
    suite = load_suite()
    names = list(suite)
    if args.kernels:
        names = list(dict.fromkeys(k.strip() for k in args.kernels.split(",") if k.strip()))
        if not names:
            raise ConfigError("--kernels names nothing; give one or more comma-separated names")
        for k in names:
            if k not in suite:
                raise UnknownName("kernel", k, list(suite))
    if args.model:
        if args.kernels:
            raise ConfigError("--model and --kernels cannot be combined")
        from ..modeltier.capture import capture_model
        captured = [k for m in args.model for k in capture_model(m)]
        names = [k.kernel for k in captured]
        model_kernels: dict[str, list[str]] = {}
        for k in captured:
            model_kernels.setdefault(k.models[0], []).append(k.kernel)
    else:
        captured = capture_suite(suite[k] for k in names)
        model_kernels = _model_kernels(suite)
    if args.kernels:  # judge models over the selected kernels only
        model_kernels = {m: [k for k in ks if k in names] for m, ks in model_kernels.items()}
        model_kernels = {m: ks for m, ks in model_kernels.items() if ks}
    missing = missing_ops(captured, backend.capabilities(), model_kernels)
    all_keys = {f"{op.name}" for k in captured for mod in k.modules for op in mod.walk()}
    items = sum(k.items for k in captured)
    errors = [f"{k.kernel} {e}" for k in captured for e in k.errors]
    if args.json:
        print(json.dumps({
            "backend": args.backend, "kernels": names, "items": items, "op_names": len(all_keys),
            "missing": [vars(m) for m in missing], "capture_errors": errors}, indent=1))
        return 0
    print(f"{args.backend}: {len(names)} kernel(s), {items} item(s) captured, {len(all_keys)} distinct "
          f"op name(s); {len(missing)} missing op(s)" + (" -- the backend's capabilities cover the suite"
                                                        if not missing and not errors else ""))
    for i, m in enumerate(missing, 1):
        alone = f"; the only missing op of {', '.join(m.alone)}" if m.alone else ""
        print(f"{i:>3}. {m.key}: blocks {len(m.models)} model(s) ({', '.join(m.models) or '-'}), "
              f"{len(m.kernels)} kernel(s) ({', '.join(m.kernels)}){alone}")
        if m.example:
            print(f"       e.g. {m.example}")
    for e in errors:
        print(f"day0: warning: could not capture {e}", file=sys.stderr)
    return 0
