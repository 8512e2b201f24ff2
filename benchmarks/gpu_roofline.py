"""Roofline of the conformance suite on a real GPU through nvidia_ref, beside PyTorch and Inductor.

    python benchmarks/gpu_roofline.py --out results/h100/roofline.json
        [--kernels K,..] [--groups G,..] [--dtypes bf16] [--no-compile] [--budget-s 280]

1. Ceilings: device-to-device copy bandwidth (2 GiB copied; bytes read + written) and the bf16
   matmul rate of torch.matmul at 8192^3 (random data).
2. For every conformance kernel at its full cases (its largest case where it has none marked
   full): the median time (triton.testing.do_bench after warm-up) of the day0 kernel launched by
   its spec's wrapper through the backend, and of the same operation written as production
   PyTorch (benchmarks/baselines.py: bf16 in memory, fp32 inside, vectorized) in eager mode and
   under torch.compile (Inductor writes Triton too: it is the competitor).
3. Minimal traffic = every tensor the spec allocates read once, outputs written once (in-place
   outputs read and written); FLOPs = what torch's FlopCounterMode counts in the spec's reference
   (matmuls, attention). The roofline time is max(bytes / copy bandwidth, flops / matmul rate);
   "of roof" is that time over the measured one. A kernel is memory-class when its bytes set the
   roof: its target is >= 80% of roof and no slower than torch.compile. A compute-class kernel's
   target is >= 70% of the FLOP rate PyTorch reaches on the same shapes (torch.matmul, _scaled_mm,
   scaled_dot_product_attention in the baseline), or of the 8192^3 matmul rate where no baseline
   exists. Targets given in microseconds are shown.

One failing kernel never stops the table; a kernel started after --budget-s seconds is skipped
(said so). Prints a table and writes JSON (--out).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import time
import traceback
from typing import Any

#: torch.compile times measured on the H100 at 8192 tokens, bf16 (microseconds), each at
#: the shape it was measured at (hidden 2048 for the norms, Llama's 14336-wide MLP for SiLU-and-mul);
#: moe_topk_softmax: 235 us in torch, the fused kernel should be >= 10x faster.
TARGETS_US = {("fused_add_rmsnorm", "qwen3_next_T8192_H2048"): 50.7,
              ("gated_rmsnorm", "qwen3_next_T8192_H32_D128"): 96.4,
              ("rope_neox_partial", "qwen3_next_T8192_q16_kv2"): 58.3,
              ("silu_and_mul", "llama3_1_T8192_I14336"): 236.0,
              ("moe_topk_softmax", "qwen3_next_T8192_E512_k10"): 23.5}
MEMORY_TARGET, COMPUTE_TARGET = 0.80, 0.70


def _fail(msg: str) -> None:
    print(f"gpu_roofline: {msg}", file=sys.stderr)
    raise SystemExit(2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="roofline.json", help="JSON results file (default: roofline.json)")
    ap.add_argument("--kernels", default="", help="only these conformance kernels (comma-separated)")
    ap.add_argument("--groups", default="", help="only these kernel groups (comma-separated)")
    ap.add_argument("--dtypes", default="bf16", help="dtypes to time where a kernel has them (default bf16)")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile of the PyTorch baselines")
    ap.add_argument("--budget-s", type=float, default=280.0,
                    help="start no new kernel after this many seconds (default 280)")
    ap.add_argument("--warmup-ms", type=float, default=10.0)
    ap.add_argument("--rep-ms", type=float, default=40.0)
    ap.add_argument("--backend", default="nvidia_ref", help="day0 backend to time (default nvidia_ref)")
    return ap.parse_args(argv)


# ------------------------------------------------------------------------------- measuring
def bench(fn, warmup_ms: float, rep_ms: float) -> float:
    """Median milliseconds of `fn` (triton.testing.do_bench: warm-up, L2 flushed between runs)."""
    from triton.testing import do_bench
    return float(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))


def ceilings(args: argparse.Namespace) -> dict[str, float]:
    import torch
    n = 1 << 30  # bf16 elements: 2 GiB
    src = torch.empty(n, dtype=torch.bfloat16, device="cuda").uniform_()
    dst = torch.empty_like(src)
    ms = bench(lambda: dst.copy_(src), args.warmup_ms, args.rep_ms * 2)
    copy_gbs = 2 * src.numel() * src.element_size() / (ms * 1e-3) / 1e9
    del src, dst
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    ms_mm = bench(lambda: a @ b, args.warmup_ms, args.rep_ms * 2)
    tflops = 2 * 8192 ** 3 / (ms_mm * 1e-3) / 1e12
    del a, b
    torch.cuda.empty_cache()
    return {"copy_GBps": copy_gbs, "copy_ms": ms, "matmul_bf16_TFLOPs": tflops, "matmul_ms": ms_mm}


def min_bytes(spec: Any, inputs: dict) -> int:
    """Every tensor read once; outputs written once (in-place ones read and written)."""
    import torch
    total = 0
    for name, value in inputs.items():
        tensors = value if isinstance(value, (list, tuple)) else [value]
        for t in tensors:
            if not isinstance(t, torch.Tensor):
                continue
            nbytes = t.numel() * t.element_size()
            if name in spec.outputs:
                total += nbytes * (2 if name in spec.inplace else 1)
            else:
                total += nbytes
    return total


def count_flops(fn) -> int:
    from torch.utils.flop_counter import FlopCounterMode
    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return int(counter.get_total_flops())


def clone_inputs(inputs: dict) -> dict:
    import torch
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def full_cases(spec: Any) -> list:
    full = [c for c in spec.cases if not c.quick]
    return full or [spec.cases[-1]]


def measure_case(spec: Any, case: Any, dtype: str, args: argparse.Namespace, ceil: dict) -> dict:
    import torch
    import sdk
    from sdk.conformance.spec import DTYPES
    row: dict[str, Any] = {"kernel": spec.name, "group": spec.group, "case": case.name, "dtype": dtype}
    gen = torch.Generator().manual_seed(0)
    inputs = spec.make_inputs(case, DTYPES[dtype], "cuda", gen)
    pristine = clone_inputs(inputs)
    row["bytes"] = min_bytes(spec, inputs)
    try:
        row["flops"] = count_flops(lambda: spec.reference(clone_inputs(pristine), case))
    except Exception as exc:  # a reference the counter cannot follow: traffic only
        row["flops"], row["flops_note"] = 0, f"{type(exc).__name__}: {exc}"[:200]
    with sdk.activate(args.backend):
        spec.run(inputs, case)  # compile + first launch outside the timing
        torch.cuda.synchronize()
        row["day0_ms"] = bench(lambda: spec.run(inputs, case), args.warmup_ms, args.rep_ms)
    from baselines import BASELINES
    factory = BASELINES.get(spec.name)
    if factory is None:
        row["torch_error"] = "no PyTorch baseline for this kernel"
    else:
        try:
            eager = factory(clone_inputs(pristine), case)
            eager()
            row["torch_ms"] = bench(eager, args.warmup_ms, args.rep_ms)
        except Exception as exc:
            row["torch_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        if not args.no_compile and "torch_ms" in row:
            try:
                compiled = torch.compile(factory(clone_inputs(pristine), case))
                compiled()
                torch.cuda.synchronize()
                row["compile_ms"] = bench(compiled, args.warmup_ms, args.rep_ms)
            except Exception as exc:
                row["compile_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
    judge(row, ceil)
    return row


def judge(row: dict, ceil: dict) -> None:
    """Roofline fraction and verdict (pure arithmetic; also used by the CPU test of the table)."""
    t = row.get("day0_ms")
    if not t:
        return
    mem_s = row["bytes"] / (ceil["copy_GBps"] * 1e9)
    cmp_s = row.get("flops", 0) / (ceil["matmul_bf16_TFLOPs"] * 1e12)
    row["class"] = "compute" if cmp_s > mem_s else "memory"
    row["GBps"] = row["bytes"] / (t * 1e-3) / 1e9
    row["TFLOPs"] = row.get("flops", 0) / (t * 1e-3) / 1e12
    row["of_roof"] = max(mem_s, cmp_s) / (t * 1e-3)
    notes = []
    if row["class"] == "memory":
        ok = row["of_roof"] >= MEMORY_TARGET
        if not ok:
            notes.append(f"{row['of_roof']:.0%} of copy BW (target {MEMORY_TARGET:.0%})")
        if row.get("compile_ms"):
            if t > row["compile_ms"]:
                ok = False
                notes.append(f"{t / row['compile_ms']:.2f}x torch.compile's time")
    elif row.get("torch_ms"):  # the rate PyTorch reaches on these very shapes
        share = row["torch_ms"] / t
        ok = share >= COMPUTE_TARGET
        if not ok:
            notes.append(f"{share:.0%} of PyTorch's rate on this shape (target {COMPUTE_TARGET:.0%})")
    else:
        ok = row["of_roof"] >= COMPUTE_TARGET
        if not ok:
            notes.append(f"{row['TFLOPs'] / ceil['matmul_bf16_TFLOPs']:.0%} of matmul rate (target {COMPUTE_TARGET:.0%})")
    target = TARGETS_US.get((row["kernel"], row["case"]))
    if target and row["dtype"] == "bf16":
        row["target_us"] = target
        if t * 1e3 > target:
            ok = False
            notes.append(f"{t * 1e3:.1f} us vs the {target} us target")
    row["verdict"] = "meets" if ok else "misses"
    row["notes"] = "; ".join(notes)


# ------------------------------------------------------------------------------------ table
def _fmt(v: Any, spec: str) -> str:
    return format(v, spec) if isinstance(v, (int, float)) and v is not None else "-"


def row_line(r: dict) -> str:
    us = lambda k: _fmt(r[k] * 1e3, ".1f") if r.get(k) else ("err" if r.get(k.replace("_ms", "_error")) else "-")
    status = r.get("verdict") or r.get("status", "")
    detail = r.get("notes") or r.get("error", "")
    return (f"{r['kernel'][:26]:26s} {r.get('case', '')[:30]:30s} {r.get('dtype', ''):4s} "
            f"{r.get('class', '-'):7s} {us('day0_ms'):>9s} {us('torch_ms'):>9s} {us('compile_ms'):>10s} "
            f"{_fmt(r.get('GBps'), '.0f'):>7s} {_fmt(r.get('TFLOPs'), '.1f'):>8s} "
            f"{_fmt(r.get('of_roof'), '.0%'):>7s}  {status}{'  ' + detail if detail else ''}")


def table(rows: list[dict], ceil: dict | None) -> str:
    out = []
    if ceil:
        out.append(f"ceilings: copy {ceil['copy_GBps']:.0f} GB/s (read+write), "
                   f"bf16 matmul 8192^3 {ceil['matmul_bf16_TFLOPs']:.0f} TFLOP/s")
    head = (f"{'kernel':26s} {'case':30s} {'dt':4s} {'class':7s} {'day0 us':>9s} {'torch us':>9s} "
            f"{'compile us':>10s} {'GB/s':>7s} {'TFLOP/s':>8s} {'of roof':>7s}  verdict")
    out += [head, "-" * len(head)]
    out += [row_line(r) for r in rows]
    done = [r for r in rows if r.get("verdict")]
    if done:
        met = sum(r["verdict"] == "meets" for r in done)
        out.append(f"{met}/{len(done)} measured items meet their target; "
                   f"{sum(1 for r in rows if r.get('status') == 'error')} errors, "
                   f"{sum(1 for r in rows if r.get('status') == 'skipped')} skipped")
    return "\n".join(out)


# ------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import torch
    except Exception as exc:
        _fail(f"cannot import torch: {exc}")
    if not torch.cuda.is_available():
        _fail("needs a CUDA GPU (torch.cuda.is_available() is False); nothing was measured")
    import triton
    from sdk.conformance.spec import registered
    specs = registered()
    want_k = {k for k in args.kernels.split(",") if k}
    want_g = {g for g in args.groups.split(",") if g}
    unknown = want_k - set(specs)
    if unknown:
        _fail(f"unknown kernel(s): {', '.join(sorted(unknown))}")
    chosen = [s for n, s in sorted(specs.items())
              if (not want_k or n in want_k) and (not want_g or s.group in want_g)]
    dtypes = [d for d in args.dtypes.split(",") if d]
    start = time.monotonic()
    ceil = ceilings(args)
    print(table([], ceil), flush=True)
    rows: list[dict] = []
    result = {"date": _dt.date.today().isoformat(), "gpu": torch.cuda.get_device_name(),
              "triton": triton.__version__, "torch": torch.__version__, "backend": args.backend,
              "ceilings": ceil, "rows": rows}
    for spec in chosen:
        for case in full_cases(spec):
            for dtype in [d for d in dtypes if d in spec.dtypes] or [spec.dtypes[0]]:
                base = {"kernel": spec.name, "group": spec.group, "case": case.name, "dtype": dtype}
                if time.monotonic() - start > args.budget_s:
                    rows.append({**base, "status": "skipped", "error": f"time budget {args.budget_s:.0f} s spent"})
                    continue
                t0 = time.monotonic()
                try:
                    row = measure_case(spec, case, dtype, args, ceil)
                    row["status"] = "measured"
                except Exception as exc:
                    row = {**base, "status": "error", "error": f"{type(exc).__name__}: {exc}".splitlines()[0][:300],
                           "traceback": traceback.format_exc()[-2000:]}
                    torch.cuda.empty_cache()
                row["wall_s"] = round(time.monotonic() - t0, 2)
                rows.append(row)
                print(row_line(row), flush=True)
                with open(args.out, "w") as f:  # rewritten after each item: a killed run keeps its rows
                    json.dump(result, f, indent=1)
    print()
    print(table(rows, ceil))
    print(f"total {time.monotonic() - start:.0f} s; results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
