"""`day0 conformance`: run the model-derived kernel suite on a backend and say which models run.

    day0 conformance                                  quick suite on cpu_interp
    day0 conformance --backend mydev --models qwen3_5 --jobs 4 --junit results.xml
    day0 conformance --shard 2/4 --out shard2.jsonl   then `day0 merge all.jsonl shard*.jsonl`
    day0 conformance --backend nvidia_ref --arch sm_80,sm_90 --compile-only
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

from ..errors import ConfigError

EPILOG = """\
exit status:
  0  every selected item ran and passed (compile-only: compiled), or there was nothing to run;
     items of an optional library that is not installed are "skipped" (the table says so)
  1  the run completed but some item did not pass (fail, unsupported, error, crash or timeout)
  2  bad input: unknown backend, device, kernel, model or group; malformed --shard; an --out that
     exists (without --resume or --force), cannot be written, or belongs to another run

The results file is JSON Lines: a header line, then one record per (kernel, case, dtype) appended
as each finishes, and an end line once the run completes; an interrupted run's file has no end line
(reports call it incomplete) and continues with --resume. Extra kernel modules are imported
from DAY0_KERNELS="pkg.mod,..."; extra backends from DAY0_BACKENDS="name=pkg.mod:Class,...".
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "conformance", help="run the conformance suite on a backend",
        description="Run every selected (kernel, case, dtype) of the conformance suite in worker "
        "processes, append a record per item to a results file, and print which models run.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="cpu_interp", metavar="B",
                   help="backend name, or a variant NAME@ARCH[/compile] (default: cpu_interp)")
    p.add_argument("--device", metavar="D", help="device model NAME or PATH the results are for "
                   "(default: the backend's target device model)")
    p.add_argument("--models", metavar="M,..", help="only the kernels these models need")
    p.add_argument("--kernels", metavar="K,..", help="only these kernels")
    p.add_argument("--groups", metavar="G,..", help="only the kernels of these groups")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", dest="full", action="store_false", help="quick cases only (default)")
    mode.add_argument("--full", dest="full", action="store_true", help="every case, full-size shapes too")
    p.set_defaults(full=False)
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="worker processes (default: one per device when several are visible, pinned "
                   "one per device; else 1)")
    p.add_argument("--shard", metavar="I/N", help="run shard I of N (1-based) of the selected items")
    p.add_argument("--out", metavar="PATH", help="results file (default: day0-results/<backend>.jsonl)")
    p.add_argument("--junit", metavar="PATH", help="also write JUnit XML (a testsuite per kernel group)")
    again = p.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true",
                       help="continue --out: skip the items it already holds")
    again.add_argument("--force", action="store_true", help="overwrite an existing --out (and --junit)")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S",
                   help="seconds one item may take before its worker is killed (default 300)")
    p.add_argument("--arch", metavar="A,B,..", help="run (or with --compile-only, compile) the suite "
                   "once per arch, through the variants B@ARCH; all records in one file")
    p.add_argument("--compile-only", action="store_true",
                   help="compile every kernel without running it (variants B@ARCH/compile); "
                   "records say compiled/failed/unsupported and carry launch stats")
    p.add_argument("--explain", action="store_true",
                   help="also say which of the backend's lowerings ran each kernel and why (backends "
                   "with several, as cpu_interp's compiled tier and interpreter, report it per launch)")
    p.set_defaults(func=run)


_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def _backends(base: str, archs: list[str], compile_only: bool) -> list[tuple[str, str]]:
    """(backend name to activate, arch) for each pass over the suite; validates every name."""
    from ..backend import registry
    from ..errors import BackendUnavailable
    if archs and "@" in base:
        raise ConfigError(f"--arch cannot be combined with a variant backend name ('{base}')")
    if archs:
        names = [f"{base}@{a}" + ("/compile" if compile_only else "") for a in archs]
    elif compile_only and "/compile" not in base:
        name, _, arch = base.partition("@")
        names = [f"{name}@{arch or registry.get(name).target.arch}/compile"]
    else:
        names = [base]
    out = []
    for name in names:
        be = registry.get(name)
        ok, why = be.available()
        if not ok:
            raise BackendUnavailable(f"backend '{name}' cannot run here: {why}")
        out.append((name, be.target.arch))
    return out


def _device(args: argparse.Namespace, base: str) -> str:
    if args.device:
        from .. import device_models
        return device_models.load(args.device).name
    from ..backend import registry
    from ..device_models import name_of
    return name_of(registry.get(base).target.device_model) or "unknown"  # a name, never a YAML path


def _out_path(args: argparse.Namespace, base: str) -> Path:
    if args.out:
        return Path(args.out)
    return Path("day0-results") / f"{_SAFE.sub('_', base)}.jsonl"


def _stop_on_sigterm() -> None:
    """A terminated run (CI cancel, `timeout`, `kill`) stops its workers as Ctrl-C does."""
    import signal
    import threading

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, interrupt)


def run(args: argparse.Namespace) -> int:
    _stop_on_sigterm()
    from ..conformance.results import (SKIPPED, Record, ResultWriter, launch_stats_of, load_results, new_header,
                                       suite_version)
    from ..fileio import same_file
    from ..conformance.runner import Item, Progress, load_suite, model_kernels, model_missing, parse_shard
    from ..conformance.runner import run_items
    from ..conformance.runner import select, shard
    from ..conformance.table import render, render_compile_matrix

    shard_spec = parse_shard(args.shard) if args.shard is not None else None
    if args.jobs is None:
        args.jobs = 0  # decided once the items (and their backends' devices) are known
    elif args.jobs < 1:
        raise ConfigError(f"--jobs must be at least 1, got {args.jobs}")
    if not 0 < args.timeout < 1e9:
        raise ConfigError(f"--timeout must be a positive, finite number of seconds, got {args.timeout:g}")
    archs = [a.strip() for a in (args.arch or "").split(",") if a.strip()]
    if args.arch is not None and not archs:
        raise ConfigError("--arch needs at least one arch name (e.g. --arch sm_80,sm_90)")
    for a in archs:
        if not re.fullmatch(r"[A-Za-z0-9_.+-]+", a):
            raise ConfigError(f"--arch '{a}' is not an arch name (letters, digits, _ . + -)")

    suite = load_suite()
    if not suite:
        print("the conformance suite has no kernels: nothing to run")
        return 0
    for flag in ("kernels", "models", "groups"):
        given = getattr(args, flag)
        if given is not None and not [x for x in given.split(",") if x.strip()]:
            raise ConfigError(f"--{flag} names nothing; give one or more comma-separated names")
    selected = select(suite, kernels=args.kernels, models=args.models, groups=args.groups,
                      full=args.full)
    base = args.backend
    compile_only = args.compile_only or "/compile" in base
    variants = _backends(base, archs, args.compile_only)
    header_backend = base.split("@")[0]
    device = _device(args, base)
    from ..backend import registry
    # each arch variant stands for its own device (nvidia_ref@sm_89 -> nvidia_l4), unless --device says
    from ..device_models import name_of
    item_device = {name: device if args.device else (name_of(registry.get(name).target.device_model) or "unknown")
                   for name, _ in variants}
    items = [Item(spec.name, case.name, dtype, name, arch)
             for name, arch in variants for spec, case, dtype in selected]
    if shard_spec:
        items = shard(items, *shard_spec)
    if args.jobs == 0:
        from ..conformance.runner import device_slots
        args.jobs = max(1, len(device_slots(items, dict(os.environ))))

    out = _out_path(args, header_backend + ("-compile" if compile_only else ""))
    if args.junit:
        junit = Path(args.junit)
        _check_writable(junit, "--junit")
        if same_file(junit, out):
            raise ConfigError(f"--junit {junit} is the results file --out; name another file")
        if junit.exists() and not args.force:
            raise ConfigError(f"{junit} already exists; pass --force to overwrite it")
    if out.is_dir():
        raise ConfigError(f"--out {out} is a directory; name a results file")
    header = new_header(suite_version(suite.values()), header_backend, device,
                        mode="full" if args.full else "quick", compile_only=compile_only,
                        archs=[a for _, a in variants])
    earlier = []
    if args.resume and out.exists():
        rs = load_results(out)
        for w in rs.warnings:
            print(f"day0: warning: {w}", file=sys.stderr)
        why = rs.header.compatible(header)
        if not why and rs.header.mode != header.mode:
            why = f"mode '{rs.header.mode}' != '{header.mode}'"
        if why:
            raise ConfigError(f"cannot resume {out}: it holds another run ({why}); "
                              "use another --out or --force")
        wanted = {it.key for it in items}
        earlier = [r for r in rs.records if r.key in wanted]
        done = {r.key for r in earlier}
        items = [it for it in items if it.key not in done]
    elif out.exists() and not args.force:
        raise ConfigError(f"{out} already exists; pass --resume to continue it or --force to overwrite it")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        writer = ResultWriter(out, header, append=bool(args.resume and out.exists()))
    except OSError as exc:
        raise ConfigError(f"cannot write --out {out}: {exc.strerror or exc}") from None

    specs = suite
    records: list[Record] = list(earlier)
    progress = Progress(len(items))
    t0 = time.monotonic()
    if earlier:
        print(f"resuming {out}: {len(earlier)} item(s) already done, {len(items)} to run",
              file=sys.stderr)
    elif not items:
        print("no conformance items match the selection", file=sys.stderr)

    def on_result(item: Item, outcome: dict) -> None:
        spec = specs[item.kernel]
        fields = {k: v for k, v in outcome.items() if k in Record.__dataclass_fields__}
        fields["launch_stats"] = launch_stats_of(fields.get("launch_stats"))  # a backend hook's output
        ident = {"kernel": item.kernel, "group": spec.group, "models": list(spec.models),
                 "case": item.case, "dtype": item.dtype, "backend": item.backend,
                 "device": item_device.get(item.backend, device),
                 "arch": item.arch, "triton": header.triton, "torch": header.torch}
        try:
            rec = Record.from_dict({"tier": spec.tier, "library": spec.library,  # the worker adds the version
                                    **fields, **ident})
        except ValueError as exc:  # an outcome the record cannot hold: this item's error, not the run's
            rec = Record.from_dict({"tier": spec.tier, "library": spec.library, **ident,
                                    "status": "failed" if compile_only else "error",
                                    "detail": f"malformed outcome from the worker: {exc}"[:500]})
        writer.write(rec)
        records.append(rec)
        progress.update(rec)

    try:
        run_items(items, on_result, jobs=args.jobs, timeout=args.timeout)
        writer.finish()  # the run completed: the end line marks the file complete
    finally:
        progress.close()
        writer.close()
    elapsed = time.monotonic() - t0

    where = ", ".join(f"{arch} ({item_device.get(name) or '?'})" for name, arch in variants) \
        if compile_only else device
    title = (f"Day-0 table: {header_backend} on {where} ({'compile-only' if compile_only else header.mode}"
             f"{', shard ' + args.shard if args.shard else ''})")
    if compile_only and records:
        print(render_compile_matrix(records))
    print(render(records, model_kernels(suite), title, model_missing()))
    if args.explain:
        print(_explain(records))
    print(f"{len(items)} item(s) run in {elapsed:.1f} s with {args.jobs} worker(s); results: {out}")
    if args.junit:
        from ..conformance.junit import write_junit
        try:
            write_junit(args.junit, records, header)
        except OSError as exc:
            raise ConfigError(f"cannot write --junit {args.junit}: {exc.strerror or exc}") from None
        print(f"JUnit XML: {args.junit}")
    return 0 if all(r.passed or r.status == SKIPPED for r in records) else 1


def _explain(records: list) -> str:
    """Which lowering ran each kernel, and why, from the launch stats the backend reported (entries
    with "kernel", "tier" and "detail"): one line per (tier, why), the kernels it covers."""
    seen: dict[tuple[str, str], dict[str, set[str]]] = {}
    for r in records:
        for s in r.launch_stats:
            if isinstance(s, dict) and s.get("tier") and s.get("kernel"):
                by = seen.setdefault((str(s["tier"]), str(s.get("detail", ""))), {})
                by.setdefault(str(s["kernel"]), set()).add(r.kernel)
    if not seen:
        return "lowerings: the backend reports none per launch (it has one)"
    lines = ["lowerings (which of the backend's ran each Triton kernel, and why):"]
    for (tier, why), kernels in sorted(seen.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        lines.append(f"  {tier}: {len(kernels)} kernel(s){' - ' + why if why else ''}")
        if len(kernels) <= 8:
            for k, items in sorted(kernels.items()):
                lines.append(f"      {k}  ({', '.join(sorted(items))})")
    return "\n".join(lines)


def _check_writable(path: Path, flag: str) -> None:
    if path.is_dir():
        raise ConfigError(f"{flag} {path} is a directory; name a file")
    parent = path.parent if str(path.parent) else Path(".")
    try:
        parent.mkdir(parents=True, exist_ok=True)  # a command creates the folders it writes into
    except OSError:
        pass  # said below, in one line
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise ConfigError(f"cannot write {flag} {path}: directory '{parent}' does not exist or is not writable")
