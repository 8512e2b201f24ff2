"""cpu_interp's two tiers against each other and against PyTorch's CPU operations: suite kernels at
full shapes (the largest practical full case of each), one run.

    python benchmarks/cpu_tiers.py [--kernels rmsnorm,gemm_bf16] [--reps 5] [--interp-limit 60]
                                   [--out cpu_tiers.json]

Per kernel, in fresh processes with empty caches: the compiled tier cold (every Triton kernel of
the item compiled; the LLVM time of each is recorded), the compiled tier again on the warm caches
(what a second process pays), the interpreter, and the same math as PyTorch's own CPU ops in the
kernel's dtype (`TORCH` below). Times are medians of `--reps` launches after a warm-up launch
(wall clock; an interpreter launch longer than `--interp-limit` seconds is timed once). Each
compiled result is checked against the suite's reference. Prints a table and the geometric means
(compiled vs PyTorch, interpreter vs compiled) and the median compile time per Triton kernel,
and writes JSON.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# kernel -> (full case, dtype): the largest practical full-size case of each
CASES = {
    "silu_and_mul": ("qwen3_next_moe_T8192_k10_I512", "bf16"),
    "gelu_tanh_and_mul": ("gemma2_9b_T8192_I14336", "bf16"),
    "rmsnorm": ("llama3_1_T8192_H4096", "bf16"),
    "fused_add_rmsnorm": ("llama3_1_T8192_H4096", "bf16"),
    "gated_rmsnorm": ("qwen3_next_T8192_H32_D128", "bf16"),
    "rope_neox_partial": ("qwen3_next_T8192_q16_kv2", "bf16"),
    "causal_conv1d_update": ("qwen3_next_B256_dim8192", "bf16"),
    "gemm_bf16": ("llama3_1_gate_up_decode_T8", "bf16"),
    "attn_prefill_gqa_gated": ("qwen3next_varlen_4", "bf16"),
}


# ----------------------------------------------------------------- the same math in PyTorch
def _silu_and_mul(inp, case):
    import torch
    x, i = inp["x"], case.params["inter"]
    torch.mul(torch.nn.functional.silu(x[:, :i]), x[:, i:], out=inp["out"])


def _gelu_tanh_and_mul(inp, case):
    import torch
    x, i = inp["x"], case.params["inter"]
    torch.mul(torch.nn.functional.gelu(x[:, :i], approximate="tanh"), x[:, i:], out=inp["out"])


def _rms_weight(inp, case):
    return inp["weight"] + case.params.get("weight_offset", 0.0)


def _rmsnorm(inp, case):
    import torch
    x = inp["x"]
    inp["out"].copy_(torch.nn.functional.rms_norm(x, (x.shape[-1],), _rms_weight(inp, case), 1e-6))


def _fused_add_rmsnorm(inp, case):
    import torch
    x, res = inp["x"], inp["residual"]
    res.add_(x)
    x.copy_(torch.nn.functional.rms_norm(res, (x.shape[-1],), _rms_weight(inp, case), 1e-6))


def _gated_rmsnorm(inp, case):
    import torch
    x, z = inp["x"], inp["z"]
    y = torch.nn.functional.rms_norm(x, (x.shape[-1],), inp["weight"], 1e-6)
    torch.mul(y, torch.nn.functional.silu(z), out=inp["out"])


def _rope_neox(inp, case):
    cache = inp["cos_sin_cache"]
    half = cache.shape[1] // 2
    rows = cache[inp["positions"]]
    cos, sin = rows[:, None, :half], rows[:, None, half:]
    for t in (inp["q"], inp["k"]):
        x1, x2 = t[..., :half], t[..., half:2 * half]
        r1, r2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
        x1.copy_(r1)
        x2.copy_(r2)


def _causal_conv1d_update(inp, case):
    import torch
    st, idx, w = inp["conv_states"], inp["cache_indices"].long(), inp["weight"]
    window = torch.cat([st[idx], inp["x"][:, :, None]], dim=2)
    y = (window * w).sum(-1)
    if inp["bias"] is not None:
        y = y + inp["bias"]
    inp["out"].copy_(torch.nn.functional.silu(y) if case.params["silu"] else y)
    st[idx] = window[:, :, 1:]


def _gemm(inp, case):
    import torch
    torch.mm(inp["x"], inp["w"].t(), out=inp["y"])


def _attn_prefill(inp, case):
    import torch
    q, k, v = inp["q"], inp["k"], inp["v"]
    cu = inp["cu_seqlens"].tolist()
    for a, b in zip(cu[:-1], cu[1:]):
        o = torch.nn.functional.scaled_dot_product_attention(
            q[a:b].transpose(0, 1), k[a:b].transpose(0, 1), v[a:b].transpose(0, 1), is_causal=True,
            scale=inp["scale"], enable_gqa=True)
        inp["o"][a:b] = o.transpose(0, 1) * torch.sigmoid(inp["gate"][a:b])


TORCH = {"silu_and_mul": _silu_and_mul, "gelu_tanh_and_mul": _gelu_tanh_and_mul, "rmsnorm": _rmsnorm,
         "fused_add_rmsnorm": _fused_add_rmsnorm, "gated_rmsnorm": _gated_rmsnorm,
         "rope_neox_partial": _rope_neox, "causal_conv1d_update": _causal_conv1d_update, "gemm_bf16": _gemm,
         "attn_prefill_gqa_gated": _attn_prefill}


# ----------------------------------------------------------------------------------- worker
def _timed(fn, reps: int, limit: float) -> tuple[float, list[float]]:
    """(the first call's seconds, the timed calls' seconds)."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    if first > limit:
        return first, [first]
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return first, times


def worker(args) -> dict:
    """One kernel on one tier in this process (the environment chose the tier and the caches)."""
    import torch
    import sdk
    from backends.cpu_interp import compiled
    from sdk.backend import get_backend
    from sdk.conformance.check import case_seed, compare
    from sdk.conformance.runner import load_suite
    from sdk.conformance.spec import DTYPES
    builds, emitted = [], {}
    emit, assemble = compiled.emit, compiled.assemble

    def timed_emit(module, bounds_check=True):
        t0 = time.perf_counter()
        out = emit(module, bounds_check)
        emitted[id(module)] = time.perf_counter() - t0
        return out

    def timed_assemble(module, text, meta, bounds_check=True):
        t0 = time.perf_counter()
        out = assemble(module, text, meta, bounds_check)
        builds.append({"kernel": module.entry.name, "s": time.perf_counter() - t0 + emitted.get(id(module), 0.0),
                       "cached": out.cached, "refusal": out.refusal})
        return out
    compiled.emit, compiled.assemble = timed_emit, timed_assemble
    spec = load_suite()[args.kernel]
    case = next(c for c in spec.cases if c.name == args.case)
    gen = torch.Generator().manual_seed(case_seed(spec.name, case.name, args.dtype))
    inputs = spec.make_inputs(case, DTYPES[args.dtype], "cpu", gen)
    before = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    out = {"kernel": args.kernel, "tier": os.environ.get("DAY0_CPU_TIER", "")}
    with sdk.activate("cpu_interp"):
        get_backend("cpu_interp").take_launch_stats()
        t0 = time.perf_counter()
        spec.run(inputs, case)  # compiles (cold caches), or loads (warm)
        out["first_s"] = time.perf_counter() - t0
        out["builds"] = builds
        ref = spec.reference(before, case)
        out["verdict"] = "pass" if all(compare(inputs[n], ref[n], spec.tolerance_for(n, args.dtype))[0]
                                       for n in spec.outputs) else "fail"
        if not args.first_only:
            limit = args.limit if out["tier"] == "interp" else math.inf
            _, out["times"] = _timed(lambda: spec.run(inputs, case), args.reps, limit)
        out["tiers"] = sorted({(s["tier"], s["detail"]) for s in get_backend("cpu_interp").take_launch_stats()})
    if args.torch:
        fresh = spec.make_inputs(case, DTYPES[args.dtype], "cpu", torch.Generator().manual_seed(1))
        _, out["torch_times"] = _timed(lambda: TORCH[args.kernel](fresh, case), args.reps, math.inf)
    return out


# ----------------------------------------------------------------------------------- parent
def _run_worker(kernel, case, dtype, tier, caches, reps, limit, torch_too=False, first_only=False,
                timeout=3600) -> dict:
    env = dict(os.environ, DAY0_CPU_TIER=tier, DAY0_CPU_CACHE_DIR=str(caches / "day0"),
               TRITON_CACHE_DIR=str(caches / "triton"))
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--kernel", kernel, "--case", case,
           "--dtype", dtype, "--reps", str(reps), "--interp-limit", str(limit)]
    cmd += ["--torch"] if torch_too else []
    cmd += ["--first-only"] if first_only else []
    try:
        proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode or not lines:
        return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    return json.loads(lines[-1])


def _median(xs):
    return statistics.median(xs) if xs else None


def _geomean(xs):
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernels", help="comma-separated subset of: " + ", ".join(CASES))
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--interp-limit", dest="limit", type=float, default=60.0)
    p.add_argument("--out", help="write JSON here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--kernel", help=argparse.SUPPRESS)
    p.add_argument("--case", help=argparse.SUPPRESS)
    p.add_argument("--dtype", help=argparse.SUPPRESS)
    p.add_argument("--torch", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--first-only", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    names = [k.strip() for k in args.kernels.split(",")] if args.kernels else list(CASES)
    unknown = [k for k in names if k not in CASES]
    if unknown:
        print(f"error: unknown kernel(s) {', '.join(unknown)}; choose from {', '.join(CASES)}", file=sys.stderr)
        return 2
    rows = []
    print(f"{'kernel':24} {'case':30} {'interp':>9} {'compiled':>9} {'torch':>9} {'c/torch':>8} "
          f"{'i/c':>7} {'compile':>8} {'warm':>6}  check", flush=True)
    for kernel in names:
        case, dtype = CASES[kernel]
        with tempfile.TemporaryDirectory(prefix="day0-tiers-") as tmp:
            caches = Path(tmp)
            cold = _run_worker(kernel, case, dtype, "compiled", caches, args.reps, args.limit, torch_too=True)
            warm = _run_worker(kernel, case, dtype, "compiled", caches, args.reps, args.limit, first_only=True)
        with tempfile.TemporaryDirectory(prefix="day0-tiers-") as tmp:
            interp = _run_worker(kernel, case, dtype, "interp", Path(tmp), args.reps, args.limit)
        c, i, t = (_median(r.get(key, [])) for r, key in ((cold, "times"), (interp, "times"), (cold, "torch_times")))
        compile_s = [b["s"] for b in cold.get("builds", []) if not b["cached"] and not b["refusal"]]
        row = {"kernel": kernel, "case": case, "dtype": dtype, "compiled_s": c, "interp_s": i, "torch_s": t,
               "compiled_vs_torch": c / t if c and t else None, "interp_vs_compiled": i / c if c and i else None,
               "compile_s": compile_s, "warm_first_s": warm.get("first_s"),
               "warm_builds": [b for b in warm.get("builds", []) if not b["cached"]],
               "cold_first_s": cold.get("first_s"), "tiers": cold.get("tiers"), "verdict": cold.get("verdict"),
               "errors": {k: r["error"] for k, r in (("compiled", cold), ("warm", warm), ("interp", interp))
                          if "error" in r}}
        rows.append(row)

        def f(x, w=9, fmt="{:.3f}"):
            return (fmt.format(x) if x is not None else "-").rjust(w)
        native = all(tier == "compiled" for tier, _ in (row["tiers"] or []))
        print(f"{kernel:24} {case[:30]:30} {f(i)} {f(c)} {f(t)} {f(row['compiled_vs_torch'], 8, '{:.2f}x')} "
              f"{f(row['interp_vs_compiled'], 7, '{:.1f}x')} {f(sum(compile_s), 8)} {f(row['warm_first_s'], 6, '{:.2f}')}"
              f"  {row['verdict'] or '-'}{'' if native else ' (not all compiled)'}"
              f"{'  ' + '; '.join(f'{k}: {v}' for k, v in row['errors'].items()) if row['errors'] else ''}",
              flush=True)
    per_kernel_compile = [s for r in rows for s in r["compile_s"]]
    summary = {"geomean_compiled_vs_torch": _geomean([r["compiled_vs_torch"] for r in rows]),
               "geomean_interp_vs_compiled": _geomean([r["interp_vs_compiled"] for r in rows]),
               "compile_median_s": _median(per_kernel_compile), "compile_max_s": max(per_kernel_compile, default=None),
               "warm_recompiles": sum(len(r["warm_builds"]) for r in rows), "threads": os.cpu_count(),
               "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}
    print(f"\ngeomean compiled / PyTorch: {summary['geomean_compiled_vs_torch'] or 0:.2f}x   "
          f"geomean interp / compiled: {summary['geomean_interp_vs_compiled'] or 0:.1f}x   "
          f"compile median {summary['compile_median_s'] or 0:.2f} s (max {summary['compile_max_s'] or 0:.2f} s) "
          f"per Triton kernel, {summary['warm_recompiles']} compiles on a warm cache   "
          f"(load average {summary['load_average'] or 0:.1f} on {summary['threads']} cores)")
    if args.out:
        from sdk.fileio import atomic_write_text
        atomic_write_text(args.out, json.dumps({"rows": rows, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
