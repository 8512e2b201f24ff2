"""What benchmarks of cpu_interp's compiled tier share: one suite item launched and timed in a
worker process (cpu_bounds_checks.py, cpu_compiled_ab.py)."""
from __future__ import annotations

import statistics
import time


def measure(kernel: str, case_name: str, dtype: str, reps: int, outputs: str) -> dict:
    """In a worker process whose environment chose the setting (DAY0_CPU_TIER=compiled and what
    else is measured): the item's inputs from the suite's seed, a warm-up launch (compiling, or
    reading the object cache), then `reps` timed launches on fresh copies of the inputs, each
    checked to have run on the compiled tier alone; the median launch time, and the outputs of the
    last launch saved to `outputs`. It imports the `sdk` that comes first on the path: a benchmark
    may run it against another checkout's."""
    import torch

    import sdk
    from sdk.backend import get_backend
    from sdk.conformance.check import case_seed
    from sdk.conformance.spec import DTYPES, registered

    spec = registered()[kernel]
    case = next(c for c in spec.cases if c.name == case_name)
    gen = torch.Generator().manual_seed(case_seed(spec.name, case.name, dtype))
    base = spec.make_inputs(case, DTYPES[dtype], "cpu", gen)
    times = []
    with sdk.activate("cpu_interp"):
        backend = get_backend("cpu_interp")
        for rep in range(reps + 1):
            x = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in base.items()}
            backend.take_launch_stats()
            start = time.perf_counter()
            spec.run(x, case)
            elapsed = time.perf_counter() - start
            tiers = {s["tier"] for s in backend.take_launch_stats()}
            if tiers != {"compiled"}:
                raise SystemExit(f"{kernel}: ran on {sorted(tiers)}, not the compiled tier")
            if rep:  # the first launch compiles (or reads the object cache)
                times.append(elapsed)
    torch.save({n: x[n] for n in spec.outputs}, outputs)
    return {"seconds": statistics.median(times)}
