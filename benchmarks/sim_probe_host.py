"""Host-cost probe on a GPU machine: what each piece of host work a launch wrapper does costs on this
machine's host and runtime, timed alone through day0's nvidia_ref backend.

    python3 benchmarks/sim_probe_host.py --out probe_host.json [--backend nvidia_ref]

1. Host time, by the host's clock (`time.perf_counter` around a batch of calls, the median of the
   per-call means of 15 batches; the GPU is never the bottleneck: each call's device work is tiny):
   - `launch`: an empty one-program Triton launch (one tensor argument);
   - `launch_wide`: a one-program launch with 8 tensor and 8 integer arguments (argument binding);
   - `property_query`: a launch wrapper asking the driver for the device's properties, as the
     suite's wrappers ask (`triton.runtime.driver.active.utils.get_device_properties`, through
     sdk.conformance.kernels.paged_attention._max_shared_mem);
   - `target_query`: a wrapper asking the target which fp8 types it has (quant_fp8.native_fp8: the
     current target, then the compiler's options for it);
   - `copy_from_host`: a tensor built from host data on the device (`torch.tensor(list, device=...)`:
     a copy from pageable host memory, which waits for the stream);
   - `read_back`: a value read back to the host (`.item()` of a device scalar);
   - `torch_kernel`: the median over five small PyTorch kernels a wrapper runs (an in-place add, a
     fill, a cumsum, a cast, a gather), each listed too;
   - the harness's own host work around each call: `event_record` (a CUDA event recorded) and
     `flush_enqueue` (its L2 flush, a 256 MiB fill, enqueued).
2. The suite's timing harness (`triton.testing.do_bench` median, warmup 5 ms, rep 25 ms, as
   benchmarks/sim_measure.py times every call; it zeroes a 256 MiB buffer on the GPU before each
   call): synthetic calls made of the pieces above and of host busy-waits of known length (some
   after 300 us of other host work, where a call's host work outlasts the flush), against the same
   pieces timed by the host's clock, and the GPU time of the flush itself. These show how the
   measured time of a call follows from its host and device work.
Prints a table and writes JSON.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BATCHES = 15
BATCH_S = 0.03
DO_BENCH = {"warmup": 5, "rep": 25}   # benchmarks/sim_measure.py's settings
REPEATS = 3


def host_clock(fn, batches: int = BATCHES, most: int = 2000) -> dict:
    """Seconds per call by the host's clock: the median over batches of the mean per call (at most
    `most` calls a batch: calls whose device work outlasts their host work must not fill the
    launch queue, which would make the host wait)."""
    import torch
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t0, 1e-6)
    n = int(min(most, max(5, BATCH_S / one)))
    per = []
    for _ in range(batches):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        per.append((time.perf_counter() - t0) / n)
    torch.cuda.synchronize()
    return {"us": statistics.median(per) * 1e6, "min_us": min(per) * 1e6, "max_us": max(per) * 1e6,
            "calls_per_batch": n, "batches": batches}


def harness(fn) -> dict:
    """What the suite's timing harness measures for `fn`: the median of REPEATS do_bench medians."""
    from triton.testing import do_bench
    fn()
    runs = [float(do_bench(fn, return_mode="median", **DO_BENCH)) * 1e3 for _ in range(REPEATS)]
    return {"us": statistics.median(runs), "runs_us": runs}


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def flush_time() -> dict:
    """GPU time of the harness's flush (zeroing its 256 MiB buffer), by CUDA events."""
    import torch
    import triton
    cache = triton.runtime.driver.active.get_empty_cache_for_benchmark()
    times = []
    for _ in range(20):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        s.record()
        triton.runtime.driver.active.clear_cache(cache)
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    return {"us": statistics.median(times), "bytes": cache.numel() * cache.element_size()}


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--backend", default="nvidia_ref")
    args = ap.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("sim_probe_host: needs a CUDA GPU", file=sys.stderr)
        return 2
    import triton
    import triton.language as tl
    import sdk
    from sdk.conformance.kernels.paged_attention import _max_shared_mem
    from sdk.conformance.kernels.quant_fp8 import native_fp8

    @triton.jit
    def _touch(p):
        tl.store(p, tl.load(p) + 1.0)

    @triton.jit
    def _wide(p0, p1, p2, p3, p4, p5, p6, p7, s0, s1, s2, s3, s4, s5, s6, s7):
        v = tl.load(p1) + tl.load(p2) + tl.load(p3) + tl.load(p4) + tl.load(p5) + tl.load(p6) + tl.load(p7)
        tl.store(p0, v + (s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7).to(tl.float32))

    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(5)
    x = torch.rand(1, device=dev, generator=g)
    ps = [torch.rand(16, device=dev, generator=g) for _ in range(8)]
    small = torch.rand(4096, device=dev, generator=g)
    ints = torch.randint(0, 4096, (4096,), device=dev, generator=g, dtype=torch.int32)
    idx = torch.randint(0, 4096, (1024,), device=dev, generator=g, dtype=torch.int64)
    host_list = torch.randint(0, 1 << 20, (64,), generator=torch.Generator().manual_seed(6)).tolist()
    scalar = torch.rand((), device=dev, generator=g)
    big_src = torch.rand(16 << 20, device=dev, generator=g)   # 64 MiB
    big_dst = torch.empty_like(big_src)

    def launch():
        _touch[(1,)](x)

    def launch_wide():
        _wide[(1,)](*ps, 3, 5, 7, 9, 11, 13, 15, 17)  # none 1: Triton would fold it

    def prop():
        return _max_shared_mem(x)

    def copy():
        return torch.tensor(host_list, dtype=torch.int32, device=dev)

    def read_back():
        return scalar.item()

    torch_ops = {
        "add_": lambda: small.add_(1.0),
        "fill": lambda: torch.zeros(4096, device=dev),
        "cumsum": lambda: torch.cumsum(ints, 0),
        "cast": lambda: ints.to(torch.int64),
        "gather": lambda: small[idx],
    }
    rows: dict = {}
    with sdk.activate(args.backend):
        launch(), launch_wide(), prop(), native_fp8(), copy(), read_back()
        torch.cuda.synchronize()
        host = {"launch": launch, "launch_wide": launch_wide, "property_query": prop,
                "target_query": native_fp8, "copy_from_host": copy, "read_back": read_back,
                "spin_100us": lambda: spin(100e-6)}
        host.update({f"torch_kernel_{k}": f for k, f in torch_ops.items()})
        events = iter([torch.cuda.Event(enable_timing=True) for _ in range(BATCHES * 2000 + 10)])
        host["event_record"] = lambda: next(events).record()
        cache = triton.runtime.driver.active.get_empty_cache_for_benchmark()
        host["flush_enqueue"] = lambda: triton.runtime.driver.active.clear_cache(cache)
        for name, fn in host.items():
            rows[name] = host_clock(fn, most=40 if name == "flush_enqueue" else 2000)
            print(f"host  {name:26s} {rows[name]['us']:9.2f} us  ({rows[name]['min_us']:.2f}-{rows[name]['max_us']:.2f})",
                  flush=True)
        rows["torch_kernel"] = {"us": statistics.median(rows[f"torch_kernel_{k}"]["us"] for k in torch_ops),
                                "of": [f"torch_kernel_{k}" for k in torch_ops]}
        print(f"host  {'torch_kernel (median)':26s} {rows['torch_kernel']['us']:9.2f} us", flush=True)

        def seq(*parts):
            def fn():
                for p in parts:
                    p()
            return fn

        def t4():
            for f in torch_ops.values():
                f()

        def devcopy():
            big_dst.copy_(big_src)

        bench = {
            "launch": launch,
            "launch_x4": seq(launch, launch, launch, launch),
            "target_query+launch": seq(native_fp8, launch),
            "property_query+launch": seq(prop, launch),
            "copy_from_host+launch": seq(copy, launch),
            "launch+read_back": seq(launch, read_back),
            "torch_kernels_x5+launch": seq(t4, launch),
            "device_copy_64MiB": devcopy,
        }
        for us in (25, 50, 100, 200, 400):
            bench[f"spin_{us}us+launch"] = seq(lambda us=us: spin(us * 1e-6), launch)
        bench["spin_200us+device_copy_64MiB"] = seq(lambda: spin(200e-6), devcopy)
        bench["copy_from_host+spin_100us+launch"] = seq(copy, lambda: spin(100e-6), launch)
        # the same pieces after 300 us of host work: calls whose host work outlasts the flush
        bench["launch_x2"] = seq(launch, launch)
        long = lambda: spin(300e-6)  # noqa: E731
        bench["spin_300us+launch"] = seq(long, launch)
        bench["spin_300us+launch_x4"] = seq(long, launch, launch, launch, launch)
        bench["spin_300us+target_query+launch"] = seq(long, native_fp8, launch)
        bench["spin_300us+torch_kernels_x5+launch"] = seq(long, t4, launch)
        timed = {}
        for name, fn in bench.items():
            timed[name] = harness(fn)
            print(f"bench {name:34s} {timed[name]['us']:9.2f} us", flush=True)
        flush = flush_time()
        print(f"flush {flush['bytes'] >> 20} MiB zeroed on the GPU: {flush['us']:.1f} us", flush=True)
    result = {"format": "day0-sim-probe-host/1", "date": _dt.datetime.now(_dt.timezone.utc).isoformat(),
              "gpu": torch.cuda.get_device_name(), "cpu": _cpu(), "cpus": os.cpu_count(),
              "python": platform.python_version(), "triton": triton.__version__, "torch": torch.__version__,
              "backend": args.backend, "host_clock": rows, "harness": timed, "flush": flush,
              "settings": {"batches": BATCHES, "batch_s": BATCH_S, "do_bench": DO_BENCH, "repeats": REPEATS}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=1))
    os.replace(tmp, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
