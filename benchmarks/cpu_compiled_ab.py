"""A change to the compiled tier, measured: suite items at full shapes launched on the compiled tier
by the working tree and by another revision of it (default HEAD~1), in the same run.

    python benchmarks/cpu_compiled_ab.py [--base REV] [--items KERNEL/CASE/DTYPE,...] [--reps 3]
                                         [--threads 1] [--out cpu_compiled_ab.json [--force]]

The base revision is checked out in a temporary git worktree. Per item and tree, in a fresh process
(caches of its own, so each tree compiles its own objects): the inputs built from the suite's seed, a
warm-up launch (compiling), then `--reps` timed launches of the item's launch wrapper on fresh copies
of its inputs, wall clock, median kept (`compiled_launch.measure`, cpu_bounds_checks.py's too); every
launch is checked to have run on the compiled tier, and the two trees' outputs
are compared (the same math: equal within the item's own tolerance). The trees alternate item by
item, so that a change in the machine's load falls on both. `--threads` sets DAY0_CPU_THREADS (1
by default). Prints a table and the geometric mean of new / base, and writes JSON.
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

# full cases whose launches read tiles along K (linear layers' weights, keys) and along rows
ITEMS = ("gemm_bf16/llama3_1_gate_up_decode_T8/bf16", "gemm_bf16/llama3_1_down_T8192/bf16",
         "gemm_bf16/llama3_1_down_T8192/fp32", "unified_attention/llama3_8b_mixed_b64/bf16",
         "prefix_prefill_attention/llama3_8b_b64/bf16", "mla_prefill/dsv3_tp8_h16_chunked/bf16",
         "moe_fused_gemm/qwen3_next_T4096_gateup_N1024_K2048/bf16", "attn_prefill_gqa_gated/qwen3next_varlen_4/bf16",
         "encoder_attention/bert_base_b8/bf16")

#: a worker in a tree: that tree's sdk first on the path, the launch timed by compiled_launch.measure
_CHILD = (
    "import json, sys; sys.path.append(sys.argv[6]); from compiled_launch import measure; "
    "print(json.dumps(measure(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])))")


def _run(tree: Path, item: str, reps: int, threads: int, work: Path) -> tuple[dict, Path]:
    kernel, case, dtype = item.split("/")
    out = work / f"{tree.name}-{kernel}-{case}-{dtype}.pt"
    env = dict(os.environ, DAY0_CPU_TIER="compiled", DAY0_CPU_THREADS=str(threads), OMP_NUM_THREADS="1",
               DAY0_CPU_CACHE_DIR=str(work / f"objects-{tree.name}"),
               TRITON_CACHE_DIR=str(work / f"triton-{tree.name}"), PYTHONPATH=str(tree))
    proc = subprocess.run([sys.executable, "-c", _CHILD, kernel, case, dtype, str(reps), str(out),
                           str(ROOT / "benchmarks")], cwd=tree, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{item} in {tree}: {(proc.stderr.strip().splitlines() or ['failed'])[-1]}")
    return json.loads(proc.stdout.strip().splitlines()[-1]), out


def _same(item: str, a: Path, b: Path) -> bool:
    import torch

    from sdk.conformance.check import compare
    from sdk.conformance.spec import registered
    kernel, _, dtype = item.split("/")
    spec = registered()[kernel]
    x, y = torch.load(a), torch.load(b)
    return all(compare(x[n], y[n], spec.tolerance_for(n, dtype))[0] for n in spec.outputs)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", default="HEAD~1", help="the revision to compare the working tree with")
    p.add_argument("--items", default=",".join(ITEMS), help="KERNEL/CASE/DTYPE, comma-separated")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", help="write JSON here (an existing file only with --force)")
    p.add_argument("--force", action="store_true")
    args = p.parse_args(argv)
    items = [i.strip() for i in args.items.split(",") if i.strip()]
    if any(len(i.split("/")) != 3 for i in items) or args.reps < 1 or args.threads < 1:
        print("cpu_compiled_ab: error: --items are KERNEL/CASE/DTYPE; --reps and --threads are at least 1",
              file=sys.stderr)
        return 2
    if args.out and Path(args.out).exists() and not args.force:
        print(f"cpu_compiled_ab: error: {args.out} exists; pass --force to overwrite it", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    base_rev = subprocess.run(["git", "rev-parse", "--short", args.base], cwd=ROOT, capture_output=True, text=True)
    if base_rev.returncode != 0:
        print(f"cpu_compiled_ab: error: unknown revision '{args.base}'", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="day0-ab-") as tmp:
        work = Path(tmp)
        base = work / "base"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(base), args.base], cwd=ROOT, check=True)
        try:
            print(f"{'item':64s} {'base s':>8s} {'new s':>8s} {'new/base':>9s}  same", flush=True)
            for item in items:
                old, old_out = _run(base, item, args.reps, args.threads, work)
                new, new_out = _run(ROOT, item, args.reps, args.threads, work)
                row = {"item": item, "base_s": old["seconds"], "new_s": new["seconds"],
                       "ratio": new["seconds"] / old["seconds"], "same": _same(item, old_out, new_out)}
                rows.append(row)
                print(f"{item:64s} {row['base_s']:8.3f} {row['new_s']:8.3f} {row['ratio']:8.2f}x  "
                      f"{'yes' if row['same'] else 'NO'}", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=False)
    geo = math.exp(statistics.fmean(math.log(r["ratio"]) for r in rows))
    print(f"geomean new / base: {geo:.2f}x over {len(rows)} item(s), base {base_rev.stdout.strip()}")
    if args.out:
        from sdk.fileio import atomic_write_text
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        meta = {"base": base_rev.stdout.strip(), "new": f"working tree at {head.stdout.strip()}",
                "reps": args.reps, "threads": args.threads, "host": platform.node(), "cpu_count": os.cpu_count(),
                "load_average": os.getloadavg()[0], "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        atomic_write_text(Path(args.out), json.dumps({"meta": meta, "rows": rows, "geomean_new_vs_base": geo},
                                                     indent=1) + "\n")
    return 0 if all(r["same"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
