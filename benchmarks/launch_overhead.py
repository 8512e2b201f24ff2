"""Per-launch host time of a tiny kernel through the day0 bridge (nvidia_ref active) vs the same
kernel through Triton's own CUDA backend.

    python benchmarks/launch_overhead.py --out results/h100/launch_overhead.json [--launches 10000]

Each launch is timed on its own (perf_counter_ns around `kernel[grid](...)`), after warm-up and
compilation; the two paths alternate in rounds so that clock drift hits both, and the GPU is
synchronised between rounds (outside the timing) so a full launch queue never blocks a launch.
Reports the median and mean per path and the median difference (target: <= 2 us).

Also the host time of what launch wrappers ask the active driver on every call (device properties
to size a grid, the current target to pick a code path), per path, with a profile of the bridge's
slowest query, so that a per-call cost a wrapper pays through the bridge and not on Triton is seen.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import statistics
import sys
import time

import triton
import triton.language as tl

TARGET_US = 2.0


@triton.jit
def tiny(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="launch_overhead.json", help="JSON results file")
    ap.add_argument("--launches", type=int, default=10_000, help="timed launches per path (default 10000)")
    ap.add_argument("--rounds", type=int, default=10, help="alternating rounds (default 10)")
    ap.add_argument("--backend", default="nvidia_ref", help="day0 backend (default nvidia_ref)")
    return ap.parse_args(argv)


def summarize(name: str, samples_ns: list[int]) -> dict:
    us = [s / 1e3 for s in samples_ns]
    q = statistics.quantiles(us, n=100) if len(us) > 1 else us * 99
    return {"path": name, "launches": len(us), "median_us": statistics.median(us),
            "mean_us": statistics.fmean(us), "p10_us": q[9], "p90_us": q[89], "min_us": min(us)}


def report(direct: dict, bridge: dict) -> dict:
    extra = bridge["median_us"] - direct["median_us"]
    return {"direct": direct, "bridge": bridge, "extra_median_us": extra, "target_us": TARGET_US,
            "verdict": "meets" if extra <= TARGET_US else "misses"}


def render(res: dict) -> str:
    lines = [f"{'path':34s} {'median us':>10s} {'mean us':>9s} {'p10':>7s} {'p90':>7s} {'launches':>9s}"]
    for key, label in (("direct", "Triton direct (CUDA backend)"), ("bridge", "day0 bridge (nvidia_ref)")):
        r = res[key]
        lines.append(f"{label:34s} {r['median_us']:10.2f} {r['mean_us']:9.2f} {r['p10_us']:7.2f} "
                     f"{r['p90_us']:7.2f} {r['launches']:9d}")
    lines.append(f"extra per launch through the bridge: {res['extra_median_us']:+.2f} us (median; target "
                 f"<= {res['target_us']} us): {res['verdict']}")
    return "\n".join(lines)


QUERIES = {
    "get_device_properties": lambda d: d.utils.get_device_properties(0),
    "get_current_target": lambda d: d.get_current_target(),
}


def time_queries(n: int) -> dict:
    """Median host time (us) of each wrapper query through `triton.runtime.driver.active`."""
    out = {}
    for name, q in QUERIES.items():
        q(triton.runtime.driver.active)
        samples = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            q(triton.runtime.driver.active)
            samples.append(time.perf_counter_ns() - t0)
        out[name] = statistics.median(samples) / 1e3
    return out


def profile_query(name: str, n: int = 200) -> str:
    import cProfile
    import io
    import pstats
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        QUERIES[name](triton.runtime.driver.active)
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("cumtime").print_stats(12)
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("launch_overhead: needs a CUDA GPU (torch.cuda.is_available() is False); nothing was measured",
              file=sys.stderr)
        return 2
    import sdk

    x = torch.randn(128, device="cuda")
    out = torch.empty_like(x)
    grid = (1,)

    def launch():
        tiny[grid](x, out, 128, BLOCK=128)

    def timed(n: int) -> list[int]:
        samples = []
        clock = time.perf_counter_ns
        for _ in range(n):
            t0 = clock()
            launch()
            samples.append(clock() - t0)
        torch.cuda.synchronize()
        return samples

    # warm-up and compile on both paths; check the bridge computes the same thing
    launch()
    torch.cuda.synchronize()
    want = out.clone()
    with sdk.activate(args.backend):
        out.zero_()
        launch()
        torch.cuda.synchronize()
    if not torch.equal(out, want):
        print("launch_overhead: the bridge's result differs from Triton's; not timing a wrong kernel",
              file=sys.stderr)
        return 1
    for _ in range(200):
        launch()
    with sdk.activate(args.backend):
        for _ in range(200):
            launch()
    torch.cuda.synchronize()

    per_round = max(1, args.launches // args.rounds)
    direct_ns, bridge_ns = [], []
    for _ in range(args.rounds):
        direct_ns += timed(per_round)
        with sdk.activate(args.backend):
            bridge_ns += timed(per_round)
    res = report(summarize("direct", direct_ns), summarize("bridge", bridge_ns))
    res["queries_us"] = {"direct": time_queries(2000)}
    with sdk.activate(args.backend):
        res["queries_us"]["bridge"] = time_queries(2000)
        slowest = max(res["queries_us"]["bridge"], key=res["queries_us"]["bridge"].get)
        profile = profile_query(slowest)
    res.update(date=_dt.date.today().isoformat(), gpu=torch.cuda.get_device_name(), triton=triton.__version__,
               torch=torch.__version__, backend=args.backend)
    print(render(res))
    print(f"{'wrapper query (median us)':34s} {'direct':>10s} {'bridge':>10s}")
    for q in QUERIES:
        print(f"{q:34s} {res['queries_us']['direct'][q]:10.2f} {res['queries_us']['bridge'][q]:10.2f}")
    print(f"profile of {slowest} through the bridge:\n{profile}")
    from sdk.fileio import atomic_write_text
    atomic_write_text(args.out, json.dumps(res, indent=1) + "\n")
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
