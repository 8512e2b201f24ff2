"""Load-to-use latency probe on a GPU: one program following a chain of dependent loads.

    python3 benchmarks/sim_probe_latency.py --out probe_latency.json [--mib 1024 --hops 512,4096]

A buffer of int64 holds a random cycle over its 4 KiB blocks (each block's first element names the
next block to visit, a random permutation drawn on the CPU from a fixed seed): one program of one
warp loads an element, takes it as the index of the next load, and so on, so no load can issue
before the one before it returned. The time of `--hops` chains of different length (the median of
triton.testing.do_bench, L2 flushed before each call) differs by the latency of the extra loads:
per load = (t_long - t_short) / (hops_long - hops_short), free of the launch and the program's
start and end. Two buffers: `dram` (`--mib`, several times the L2, flushed before each call; no
chain visits a block twice, so every load misses L2) and `l2` (16 MiB: more than an SM's L1, less
than the L2; both chains first go once round the whole cycle, then the longer one goes on further
over blocks L2 now holds: the difference is what a load costs when L2 holds it, reported beside).
Checked: each chain ends where the CPU's walk of the same cycle ends. Prints a table and writes JSON.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from sdk.fileio import atomic_write_text, json_text  # noqa: E402

BLOCK_ELEMENTS = 512  # int64 elements in 4 KiB: one visited element per block


@triton.jit
def _chase(next_ptr, out_ptr, start, hops):
    i = start.to(tl.int64)
    for _ in range(hops):
        i = tl.load(next_ptr + i)
    tl.store(out_ptr, i)


def cycle(blocks: int, seed: int) -> torch.Tensor:
    """int64 [blocks * BLOCK_ELEMENTS]: each block's first element the element index of the next
    block of one random cycle through all blocks (the rest -1)."""
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(blocks, generator=g)
    nxt = torch.full((blocks * BLOCK_ELEMENTS,), -1, dtype=torch.int64)
    nxt[order * BLOCK_ELEMENTS] = torch.roll(order, -1) * BLOCK_ELEMENTS
    return nxt


def walk(nxt: torch.Tensor, start: int, hops: int) -> int:
    i = start
    for _ in range(hops):
        i = int(nxt[i])
    return i


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--mib", type=int, default=256, help="size of the buffer that DRAM serves")
    ap.add_argument("--hops", default="512,4096", help="two chain lengths")
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args(argv)
    if args.out.exists() and not args.force:
        print(f"sim_probe_latency: {args.out} exists; pass --force to overwrite it", file=sys.stderr)
        return 2
    try:
        short, long = sorted(int(h) for h in args.hops.split(","))
    except ValueError:
        print("sim_probe_latency: --hops takes two integers, e.g. 512,4096", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("sim_probe_latency: needs a CUDA GPU", file=sys.stderr)
        return 2
    from triton.testing import do_bench
    rows = []
    out = torch.empty(1, dtype=torch.int64, device="cuda")
    for name, mib in (("dram", args.mib), ("l2", 16)):
        blocks = mib * (1 << 20) // (BLOCK_ELEMENTS * 8)
        if name == "dram" and long > blocks:
            print(f"sim_probe_latency: {long} hops would visit blocks twice in {mib} MiB", file=sys.stderr)
            return 2
        host = cycle(blocks, seed=20261124 + mib)
        nxt = host.to("cuda")
        start = int(torch.nonzero(host >= 0)[0])
        lead = blocks if name == "l2" else 0  # once round the cycle first: later loads hit L2
        times = {}
        for hops in (lead + short, lead + long):
            out.fill_(-2)
            _chase[(1,)](nxt, out, start, hops, num_warps=1)
            torch.cuda.synchronize()
            want = walk(host, start, hops)
            if int(out.item()) != want:
                print(f"sim_probe_latency: the {name} chain of {hops} ended at {int(out.item())}, not {want}",
                      file=sys.stderr)
                return 1
            times[hops] = do_bench(lambda: _chase[(1,)](nxt, out, start, hops, num_warps=1),  # noqa: B023
                                   warmup=5, rep=50, return_mode="median") * 1e-3
        a, b = lead + short, lead + long
        per = (times[b] - times[a]) / (b - a)
        rows.append({"buffer": name, "mib": mib, "hops": [a, b], "s": [times[a], times[b]], "latency_s": per})
        print(f"{name:5s} {mib:6d} MiB  {a} hops {times[a] * 1e6:9.1f} us  {b} hops "
              f"{times[b] * 1e6:9.1f} us  per load {per * 1e9:7.1f} ns", flush=True)
    result = {"gpu": torch.cuda.get_device_name(), "triton": triton.__version__, "torch": torch.__version__,
              "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, json_text(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
