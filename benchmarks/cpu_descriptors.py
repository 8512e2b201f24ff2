"""What tensor descriptors cost on cpu_interp's compiled tier: the same math written with plain
pointers and masks, with a descriptor made in the kernel, and with a host TensorDescriptor, each
launched on the compiled tier; the descriptor kernel also on the interpreter (where every
descriptor kernel ran before the compiled tier lowered them). One run.

    python benchmarks/cpu_descriptors.py [--size 2048] [--reps 3] [--threads 1] [--out cpu_descriptors.json]

Two workloads with ragged edges (sizes not multiples of the tiles, so edge tiles are masked):
a tiled matmul (fp16 in, fp32 accumulate, fp16 out; `--size`+24 cubed) and a tile copy that
scales (fp32, `--size`*4+3 by `--size`*2+8). Per variant: a warm-up launch (compiling), then
`--reps` timed launches, wall clock, median kept; each launch is checked to have run on the tier
asked for. The compiled variants' outputs must equal the pointer variant's bit for bit (exit status
1 otherwise); the interpreter's row reports its largest difference (a dot's partial sums may round
in another order there). Prints a table, writes JSON. `--threads` sets DAY0_CPU_THREADS before anything is compiled (1 by default: the
ratio, not the machine's parallelism, is the point).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def mm_ptr(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        acc = tl.zeros((BM, BN), tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            rk = k * BK + tl.arange(0, BK)
            x = tl.load(a + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
            y = tl.load(b + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc = tl.dot(x, y, acc, input_precision="ieee")
        tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))

    @triton.jit
    def mm_host(ad, bd, cd, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pm, pn = tl.program_id(0) * BM, tl.program_id(1) * BN
        acc = tl.zeros((BM, BN), tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            acc = tl.dot(ad.load([pm, k * BK]), bd.load([k * BK, pn]), acc, input_precision="ieee")
        cd.store([pm, pn], acc.to(tl.float16))

    @triton.jit
    def mm_desc(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        ad = tl.make_tensor_descriptor(a, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
        bd = tl.make_tensor_descriptor(b, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
        cd = tl.make_tensor_descriptor(c, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
        mm_host(ad, bd, cd, K, BM, BN, BK)  # the same tiles, inlined, over descriptors made here

    @triton.jit
    def copy_ptr(x, y, M, N, BM: tl.constexpr, BN: tl.constexpr):
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        m = (rm[:, None] < M) & (rn[None, :] < N)
        tl.store(y + rm[:, None] * N + rn[None, :], tl.load(x + rm[:, None] * N + rn[None, :], mask=m) * 3.0, mask=m)

    @triton.jit
    def copy_desc(x, y, M, N, BM: tl.constexpr, BN: tl.constexpr):
        xd = tl.make_tensor_descriptor(x, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
        yd = tl.make_tensor_descriptor(y, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
        pm, pn = tl.program_id(0) * BM, tl.program_id(1) * BN
        yd.store([pm, pn], xd.load([pm, pn]) * 3.0)

    @triton.jit
    def copy_host(xd, yd, BM: tl.constexpr, BN: tl.constexpr):
        pm, pn = tl.program_id(0) * BM, tl.program_id(1) * BN
        yd.store([pm, pn], xd.load([pm, pn]) * 3.0)

    return locals()


def workloads(size: int):
    """name -> (inputs, output name, {variant: launch(tier, tensors)})."""
    import torch
    import triton
    from triton.tools.tensor_descriptor import TensorDescriptor
    k = kernels()
    gen = torch.Generator().manual_seed(2026)
    n = size + 24  # not a multiple of the tiles; rows stay 16-byte aligned, as descriptors need
    BM = BN = 64
    BK = 32
    mm_in = {"a": torch.randn(n, n, generator=gen).half(), "b": torch.randn(n, n, generator=gen).half(),
             "c": torch.full((n, n), float("nan")).half()}
    g_mm = (triton.cdiv(n, BM), triton.cdiv(n, BN))

    def mm_variant(name):
        def go(tier, t):
            a, b, c = t["a"], t["b"], t["c"]
            if name == "pointers":
                k["mm_ptr"][g_mm](a, b, c, n, n, n, BM=BM, BN=BN, BK=BK, cpu_tier=tier)
            elif name == "descriptor in kernel":
                k["mm_desc"][g_mm](a, b, c, n, n, n, BM=BM, BN=BN, BK=BK, cpu_tier=tier)
            else:
                k["mm_host"][g_mm](TensorDescriptor.from_tensor(a, [BM, BK]), TensorDescriptor.from_tensor(b, [BK, BN]),
                                   TensorDescriptor.from_tensor(c, [BM, BN]), n, BM=BM, BN=BN, BK=BK, cpu_tier=tier)
        return go

    M, N = size * 4 + 3, size * 2 + 8
    cp_in = {"x": torch.randn(M, N, generator=gen), "y": torch.full((M, N), float("nan"))}
    g_cp = (triton.cdiv(M, BM), triton.cdiv(N, 128))

    def cp_variant(name):
        def go(tier, t):
            if name == "pointers":
                k["copy_ptr"][g_cp](t["x"], t["y"], M, N, BM=BM, BN=128, cpu_tier=tier)
            elif name == "descriptor in kernel":
                k["copy_desc"][g_cp](t["x"], t["y"], M, N, BM=BM, BN=128, cpu_tier=tier)
            else:
                k["copy_host"][g_cp](TensorDescriptor.from_tensor(t["x"], [BM, 128]),
                                     TensorDescriptor.from_tensor(t["y"], [BM, 128]), BM=BM, BN=128, cpu_tier=tier)
        return go
    variants = ("pointers", "descriptor in kernel", "host descriptor")
    return {f"matmul {n}^3 fp16": (mm_in, "c", {v: mm_variant(v) for v in variants}),
            f"scaled copy {M}x{N} fp32": (cp_in, "y", {v: cp_variant(v) for v in variants})}


def timed(launch, tier: str, inputs: dict, reps: int):
    """(median seconds of `reps` launches after a warm-up one, the output tensors of the last)."""
    from sdk.backend import get_backend
    backend = get_backend("cpu_interp")
    times, t = [], None
    for rep in range(reps + 1):
        t = {name: v.clone() for name, v in inputs.items()}
        backend.take_launch_stats()
        start = time.perf_counter()
        launch(tier, t)
        elapsed = time.perf_counter() - start
        ran = {s["tier"] for s in backend.take_launch_stats()}
        if ran != {tier}:
            raise SystemExit(f"cpu_descriptors: asked for tier {tier}, ran on {sorted(ran)}")
        if rep:
            times.append(elapsed)
    return statistics.median(times), t


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=2048, help="problem size (see above)")
    p.add_argument("--reps", type=int, default=3, help="timed launches per variant (median kept)")
    p.add_argument("--threads", type=int, default=1, help="DAY0_CPU_THREADS for the compiled launches")
    p.add_argument("--out", help="write JSON here (an existing file only with --force)")
    p.add_argument("--force", action="store_true")
    args = p.parse_args(argv)
    if args.size < 64 or args.reps < 1 or args.threads < 1:
        print("cpu_descriptors: --size must be at least 64, --reps and --threads at least 1", file=sys.stderr)
        return 2
    if args.out and Path(args.out).exists() and not args.force:
        print(f"cpu_descriptors: {args.out} exists; pass --force to overwrite it", file=sys.stderr)
        return 2
    os.environ["DAY0_CPU_THREADS"] = str(args.threads)
    import torch
    import sdk
    rows = []
    print(f"{'workload':30s} {'variant':22s} {'tier':9s} {'median':>9s} {'vs pointers':>11s}  same bits")
    with sdk.activate("cpu_interp"):
        for work, (inputs, out, variants) in workloads(args.size).items():
            base = None
            for variant, launch in variants.items():
                tiers = ("compiled", "interp") if variant == "descriptor in kernel" else ("compiled",)
                for tier in tiers:
                    secs, got = timed(launch, tier, inputs, args.reps)
                    if base is None:
                        base = (secs, got[out])
                    bits = torch.int16 if got[out].element_size() == 2 else torch.int32
                    same = bool(torch.equal(got[out].view(bits), base[1].view(bits)))
                    diff = float((got[out].double() - base[1].double()).abs().max())
                    row = {"workload": work, "variant": variant, "tier": tier, "seconds": secs,
                           "vs_pointers": secs / base[0], "same_bits": same, "max_abs_diff": diff}
                    rows.append(row)
                    print(f"{work:30s} {variant:22s} {tier:9s} {secs:8.3f}s {row['vs_pointers']:10.2f}x  {same}"
                          + ("" if same else f" (max |diff| {diff:.3g})"), flush=True)
    if args.out:
        from sdk.fileio import atomic_write_text
        import triton
        meta = {"size": args.size, "reps": args.reps, "threads": args.threads, "triton": triton.__version__,
                "torch": torch.__version__, "host": platform.node(), "cpu_count": os.cpu_count(),
                "load_average": os.getloadavg()[0], "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        atomic_write_text(Path(args.out), json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    # the compiled variants compute the same sums in the same order; the interpreter may round a
    # dot's partial sums in another order, so its row reports the difference instead
    return 0 if all(r["same_bits"] for r in rows if r["tier"] == "compiled") else 1


if __name__ == "__main__":
    raise SystemExit(main())
