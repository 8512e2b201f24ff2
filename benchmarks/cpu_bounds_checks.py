"""What the compiled tier's bounds checks cost: suite kernels at full shapes, launched natively with
the checks on (the default) and off (`cpu_bounds_check=False`), one run.

    python benchmarks/cpu_bounds_checks.py [--kernels mla_prefill,gemm_bf16] [--reps 3]
                                           [--threads 1] [--out cpu_bounds_checks.json]

Per kernel (one full case each, `CASES`) and setting, in a fresh process (the setting is read when
a kernel is compiled): the inputs built from the suite's seed, a warm-up launch (compiling, or
reading the object cache), then `--reps` timed launches of the kernel's launch wrapper, wall clock,
median kept; every launch is checked to have run on the compiled tier. The outputs of the two settings are compared bit for bit (a check
never changes what a kernel computes). `--threads` sets DAY0_CPU_THREADS (1 by default: the
ratio, not the machine's parallelism, is the point). Prints a table and the geometric mean of
checked / unchecked, and writes JSON.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from compiled_launch import measure  # noqa: E402

# kernel -> (full case, dtype): loads and stores through several pointer patterns (gathered pages,
# varlen rows, tiles read along K, elementwise rows), each launch a few seconds on one core
CASES = {
    "mla_prefill": ("dsv3_tp8_h16_chunked", "fp32"),
    "unified_attention": ("llama3_8b_mixed_b64", "bf16"),
    "prefix_prefill_attention": ("llama3_8b_b64", "bf16"),
    "gemm_bf16": ("llama3_1_down_T8192", "bf16"),
    "moe_fused_gemm": ("qwen3_next_T4096_down_N2048_K512", "bf16"),
    "mamba2_ssd_chunk_scan": ("codestral_T2048", "bf16"),
    "rmsnorm": ("llama3_1_T8192_H4096", "bf16"),
    "silu_and_mul": ("llama3_1_T8192_I14336", "bf16"),
}


def run_setting(kernel: str, checked: bool, reps: int, threads: int, outputs: str) -> float:
    env = dict(os.environ, DAY0_CPU_TIER="compiled", DAY0_CPU_THREADS=str(threads),
               DAY0_CPU_BOUNDS_CHECK="1" if checked else "0")
    case, dtype = CASES[kernel]
    proc = subprocess.run([sys.executable, __file__, "--worker", kernel, case, dtype, str(reps), outputs],
                          env=env, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"cpu_bounds_checks: {kernel} failed: {(proc.stderr or proc.stdout).strip()[-400:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])["seconds"]


def same_bits(a, b) -> bool:
    import torch
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        a, b = a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)
    return bool(torch.equal(a, b))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kernels", help="comma-separated subset of: " + ", ".join(CASES))
    p.add_argument("--reps", type=int, default=3, help="timed launches per setting (median kept)")
    p.add_argument("--threads", type=int, default=1, help="DAY0_CPU_THREADS for the compiled launches")
    p.add_argument("--out", help="write JSON here (an existing file only with --force)")
    p.add_argument("--force", action="store_true")
    p.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        kernel, case, dtype, reps, outputs = args.worker
        print(json.dumps(measure(kernel, case, dtype, int(reps), outputs)))
        return 0
    kernels = args.kernels.split(",") if args.kernels else list(CASES)
    unknown = [k for k in kernels if k not in CASES]
    if unknown:
        print(f"cpu_bounds_checks: unknown kernel '{unknown[0]}' (choose from {', '.join(CASES)})", file=sys.stderr)
        return 2
    if args.reps < 1 or args.threads < 1:
        print("cpu_bounds_checks: --reps and --threads must be at least 1", file=sys.stderr)
        return 2
    if args.out and Path(args.out).exists() and not args.force:
        print(f"cpu_bounds_checks: {args.out} exists; pass --force to overwrite it", file=sys.stderr)
        return 2
    rows = []
    print(f"{'kernel':26s} {'case':36s} {'dtype':5s} {'checked':>9s} {'unchecked':>9s} {'ratio':>6s}  same bits")
    with tempfile.TemporaryDirectory() as tmp:
        for k in kernels:
            import torch
            secs = {c: run_setting(k, c, args.reps, args.threads, f"{tmp}/{k}.{c}.pt") for c in (True, False)}
            got = {c: torch.load(f"{tmp}/{k}.{c}.pt") for c in (True, False)}
            row = {"kernel": k, "case": CASES[k][0], "dtype": CASES[k][1], "checked_s": secs[True],
                   "unchecked_s": secs[False], "ratio": secs[True] / secs[False],
                   "same_bits": all(same_bits(got[True][n], got[False][n]) for n in got[True])}
            rows.append(row)
            print(f"{k:26s} {row['case']:36s} {row['dtype']:5s} {row['checked_s']:8.3f}s {row['unchecked_s']:8.3f}s "
                  f"{row['ratio']:5.2f}x  {row['same_bits']}", flush=True)
    geo = math.exp(statistics.fmean(math.log(r["ratio"]) for r in rows))
    print(f"geometric mean checked / unchecked: {geo:.2f}x over {len(rows)} kernels")
    if args.out:
        from sdk.fileio import atomic_write_text
        meta = {"reps": args.reps, "threads": args.threads, "host": platform.node(), "cpu_count": os.cpu_count(),
                "load_average": os.getloadavg()[0], "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        atomic_write_text(Path(args.out), json.dumps({"meta": meta, "rows": rows,
                                                      "geomean_checked_vs_unchecked": geo}, indent=1))
    return 0 if all(r["same_bits"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
