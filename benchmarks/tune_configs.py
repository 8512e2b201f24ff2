"""Try launch configurations of one conformance kernel: each is checked against the reference, then timed.

    python benchmarks/tune_configs.py --kernel attn_paged_decode --case qwen3next_b64_s4096 \\
        --sweep BLOCK_N=32,64 --sweep num_warps=4,8 [--param page=16] [--dtype bf16] --out tune.json

Every combination of the `--sweep` values is passed to the kernel's launch wrapper as keyword
overrides of its default configuration (the wrapper decides which keys it takes); `--param`
overrides the case's own parameters (shapes, block sizes that also shape the inputs). The default
configuration is always measured first. A variant that fails the conformance check is reported and
not timed. On a GPU the time is the do_bench median after warm-up (L2 flushed between runs); with
`--device cpu` (for trying the script without a GPU) it is the median wall time of a few calls.
Prints a table (fastest first) and writes JSON (--out).
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _fail(msg: str) -> None:
    print(f"tune_configs: {msg}", file=sys.stderr)
    raise SystemExit(2)


def _value(text: str) -> Any:
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def _pairs(items: list[str], what: str) -> list[tuple[str, list[Any]]]:
    out = []
    for item in items:
        key, sep, values = item.partition("=")
        if not sep or not key or not values:
            _fail(f"{what} '{item}' is not KEY=V1[,V2...]")
        out.append((key, [_value(v) for v in values.split(",")]))
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", required=True, help="conformance kernel name")
    ap.add_argument("--case", default="", help="case name (default: the kernel's first full case)")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--sweep", action="append", default=[], metavar="KEY=V1,V2",
                    help="launch-wrapper override to try, repeatable (all combinations are tried)")
    ap.add_argument("--param", action="append", default=[], metavar="KEY=V",
                    help="override a case parameter for every variant, repeatable")
    ap.add_argument("--backend", default="nvidia_ref", help="day0 backend (default nvidia_ref)")
    ap.add_argument("--device", default="cuda", help="torch device of the tensors (default cuda)")
    ap.add_argument("--warmup-ms", type=float, default=10.0)
    ap.add_argument("--rep-ms", type=float, default=40.0)
    ap.add_argument("--out", default="tune.json", help="JSON results file (default tune.json)")
    return ap.parse_args(argv)


def _timer(device: str, warmup_ms: float, rep_ms: float):
    if device.startswith("cuda"):
        from triton.testing import do_bench
        return lambda fn: float(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))

    def wall(fn) -> float:
        fn()
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)
    return wall


def reference_outputs(spec: Any, case: Any, dtype: str, device: str) -> tuple[dict, dict]:
    """The seeded inputs every variant starts from, and the reference's outputs for them (once)."""
    import torch
    from gpu_roofline import clone_inputs
    from sdk.conformance.check import case_seed
    from sdk.conformance.spec import DTYPES
    gen = torch.Generator().manual_seed(case_seed(spec.name, case.name, dtype))
    pristine = spec.make_inputs(case, DTYPES[dtype], device, gen)
    return pristine, spec.reference(clone_inputs(pristine), case)


def measure(spec: Any, case: Any, dtype: str, pristine: dict, ref: dict, config: dict, timer) -> dict:
    from gpu_roofline import clone_inputs, min_bytes
    from sdk.conformance.check import compare, poison_
    row: dict[str, Any] = {"config": config}
    inputs = clone_inputs(pristine)
    for name in spec.outputs:
        if name not in spec.inplace:
            poison_(inputs[name])
    try:
        spec.run(inputs, case, **config)
    except Exception as exc:  # a configuration the compiler or the wrapper rejects
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()] or [""]
        said = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
        return {**row, "status": "error", "error": f"{type(exc).__name__}: {said}"[:300]}
    bad = [f"{name}: {stats.get('reason', 'mismatch')}" for name in spec.outputs
           for ok, stats in [compare(inputs[name], ref[name], spec.tolerance_for(name, dtype))] if not ok]
    if bad:
        return {**row, "status": "fail", "error": "; ".join(bad)[:300]}
    inputs = clone_inputs(pristine)
    row["ms"] = timer(lambda: spec.run(inputs, case, **config))
    row["GBps"] = min_bytes(spec, inputs) / (row["ms"] * 1e-3) / 1e9
    row["status"] = "pass"
    return row


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import sdk
    from sdk.conformance.spec import Case, registered
    from sdk.errors import Day0Error
    specs = registered()
    spec = specs.get(args.kernel)
    if spec is None:
        _fail(f"unknown kernel '{args.kernel}' (known: {', '.join(sorted(specs))})")
    cases = {c.name: c for c in spec.cases}
    if args.case and args.case not in cases:
        _fail(f"kernel '{spec.name}' has no case '{args.case}' (it has: {', '.join(cases)})")
    case = cases[args.case] if args.case else next((c for c in spec.cases if not c.quick), spec.cases[-1])
    if args.dtype not in spec.dtypes:
        _fail(f"kernel '{spec.name}' has no dtype '{args.dtype}' (it has: {', '.join(spec.dtypes)})")
    params = dict(case.params)
    for key, values in _pairs(args.param, "--param"):
        if key not in params:
            _fail(f"case '{case.name}' has no parameter '{key}' (it has: {', '.join(params)})")
        params[key] = values[0]
    case = Case(case.name, params, case.quick, case.source)
    sweep = _pairs(args.sweep, "--sweep")
    variants = [{}] + [dict(zip([k for k, _ in sweep], combo))
                       for combo in itertools.product(*[v for _, v in sweep])] if sweep else [{}]
    timer = _timer(args.device, args.warmup_ms, args.rep_ms)
    rows = []
    try:
        with sdk.activate(args.backend):
            pristine, ref = reference_outputs(spec, case, args.dtype, args.device)
            for k, config in enumerate(variants):
                row = measure(spec, case, args.dtype, pristine, ref, config, timer)
                rows.append(row)
                shown = " ".join(f"{a}={b}" for a, b in config.items()) or "(default)"
                took = f"{row['ms'] * 1e3:9.1f} us {row['GBps']:7.0f} GB/s" if "ms" in row else row["error"]
                print(f"[{k + 1}/{len(variants)}] {row['status']:5s} {shown:50s} {took}", flush=True)
    except Day0Error as exc:
        _fail(str(exc))
    timed = sorted((r for r in rows if "ms" in r), key=lambda r: r["ms"])
    print(f"\n{spec.name} / {case.name} / {args.dtype}: fastest first")
    for r in timed:
        shown = " ".join(f"{a}={b}" for a, b in r["config"].items()) or "(default)"
        print(f"  {r['ms'] * 1e3:9.1f} us  {r['GBps']:7.0f} GB/s  {shown}")
    with open(args.out, "w") as f:
        json.dump({"kernel": spec.name, "case": case.name, "params": params, "dtype": args.dtype,
                   "backend": args.backend, "device": args.device, "rows": rows}, f, indent=1)
    print(f"results: {args.out}")
    return 0 if timed else 1


if __name__ == "__main__":
    sys.exit(main())
