"""`day0 ops --backend B`: the TTIR ops the suite needs that B does not accept (its capabilities),
found without running anything, each with the kernels and models it blocks; for a backend with a
lowering table, also by op family what its own rules lower and what it delegates (rules borrowed
from another backend), and which kernels run on its own rules alone.

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
        "ranked by the models they block. For a backend with a lowering table, also per op family "
        "(program, pointers, memory, ... in the order kernels need them) which ops its own rules lower and "
        "which it delegates to another backend's rules, and which kernels need no delegated op.")
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
    own = _own_and_delegated(backend, captured, all_keys)
    if args.json:
        print(json.dumps({
            "backend": args.backend, "kernels": names, "items": items, "op_names": len(all_keys),
            "missing": [vars(m) for m in missing], "capture_errors": errors, **own}, indent=1))
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
    if own:
        print(_render_families(args.backend, own))
    for e in errors:
        print(f"day0: warning: could not capture {e}", file=sys.stderr)
    return 0


def _own_and_delegated(backend, captured: list, used: set[str]) -> dict:
    """For a backend with a lowering table: per op family its own and delegated ops (and the used
    ops it lacks), and per kernel the delegated ops it needs and the ops it lacks; else {}."""
    from ..lowering import LoweringTable
    from ..op_families import by_family
    table = getattr(backend, "lowering", None)
    if not isinstance(table, LoweringTable):
        return {}
    needs: dict[str, dict[str, list[str]]] = {}
    for k in captured:
        ops = [op for mod in k.modules for op in mod.walk()]
        lowered = [op.name for op in ops if table.supports(op)]
        needs[k.kernel] = {"delegated": sorted({name for name in lowered if table.borrowed(name)}),
                           "missing": sorted({op.name for op in ops if not table.supports(op)})}
    return {"families": by_family(table, used), "kernels_need": needs}


#: kernels needing delegated or missing ops listed one per line, at most
_KERNEL_LINES = 20


def _render_families(backend: str, own: dict) -> str:
    lines = [f"by op family: the ops {backend}'s own rules lower, of all in the family; of the ops these "
             f"kernels use, those it delegates (borrowed rules) and lacks:"]
    for f in own["families"]:
        used_delegated = [op for op in f["delegated"] if op in f["used"]]
        extra = (f"; delegated: {' '.join(used_delegated)}" if used_delegated else "") + \
                (f"; missing: {' '.join(f['missing'])}" if f["missing"] else "")
        lines.append(f"  {f['family']:13} own {len(f['own'])}/{f['total']}{extra}")
    needs = own["kernels_need"]
    alone = sorted(k for k, n in needs.items() if not n["delegated"] and not n["missing"])
    lines.append(f"kernels on {backend}'s own rules alone: {len(alone)} of {len(needs)}"
                 + (f" ({', '.join(alone)})" if alone else ""))
    others = [(k, n) for k, n in sorted(needs.items()) if n["delegated"] or n["missing"]]
    for k, n in others[:_KERNEL_LINES]:
        said = [f"delegates {', '.join(n['delegated'])}"] if n["delegated"] else []
        said += [f"lacks {', '.join(n['missing'])}"] if n["missing"] else []
        lines.append(f"  {k} {'; '.join(said)}")
    if len(others) > _KERNEL_LINES:
        lines.append(f"  ... and {len(others) - _KERNEL_LINES} more kernel(s) (--json lists every one)")
    return "\n".join(lines)
