"""Calibrates cpu_interp's tier "auto": what interpreting costs, and what compiling costs.

The tier "auto" (backends/cpu_interp/tier.py) interprets a kernel until its interpretation has cost
what compiling it would, then compiles it. Both sides are estimates made without a clock, so
that the same launches always choose the same way:
  * the interpreter's cost of a chunk of programs, `interp.chunk_cost`: ops executed x OP_SECONDS
    + per program, elements its ops touched x ELEMENT_SECONDS and dot multiply-adds x MAC_SECONDS,
    times the chunk's programs;
  * compiling, `tier.COMPILE_SECONDS`: LLVM's median time per kernel.
This script runs the kernel tier's quick cases (first dtype) on the interpreter, times every chunk, fits the three
constants (least squares on the relative error) and compiles each kernel met once, with no cache,
for LLVM's times. It prints a table and writes JSON; the constants in interp.py and tier.py are
set from its output on the machine the project's CPU results come from.

    python benchmarks/cpu_auto_calibrate.py --out results/cpu_interp/auto_calibration.json
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ["DAY0_CPU_TIER"] = "interp"


def _record_chunks(rows: list) -> None:
    """Time every chunk of every interpreted launch (the entry function's body run once)."""
    from backends.cpu_interp import interp
    plain = interp.Program.run_region

    def run_region(self, ctx, region, args):
        if region is not self.entry.body:
            return plain(self, ctx, region, args)
        t0 = time.perf_counter()
        out = plain(self, ctx, region, args)
        rows.append((self.entry.name, ctx.steps, ctx.P * ctx.elements, ctx.P * ctx.macs, time.perf_counter() - t0))
        return out
    interp.Program.run_region = run_region


def _fit(rows: list) -> tuple[float, float]:
    """(OP_SECONDS, ELEMENT_SECONDS, MAC_SECONDS) minimising the squared relative error over the
    chunks, none negative."""
    import itertools
    import numpy as np
    a = np.array([r[1:4] for r in rows], float)
    t = np.array([r[4] for r in rows], float)
    a = a / t[:, None]
    best, coef = math.inf, np.zeros(3)
    for k in (3, 2, 1):  # every subset of the terms; keep the best fit with no negative figure
        for cols in itertools.combinations(range(3), k):
            c, *_ = np.linalg.lstsq(a[:, cols], np.ones_like(t), rcond=None)
            r = float(((a[:, cols] @ c - 1) ** 2).sum())
            if (c >= 0).all() and r < best:
                best, coef = r, np.zeros(3)
                coef[list(cols)] = c
    return tuple(float(c) for c in coef)


def _compile_times(modules: dict) -> list[dict]:
    """LLVM's time for each kernel met, compiled afresh (no cache)."""
    from backends.cpu_interp import compiled
    from backends.cpu_interp.compiled import jit
    out = []
    for name, module in modules.items():
        text, meta, why = compiled.emit(module, True)
        if text is None:
            continue
        t0 = time.perf_counter()
        try:
            jit.compile_ir(text)
        except jit.CompileError:
            continue
        out.append({"kernel": name, "emit_s": meta["emit_s"], "llvm_s": round(time.perf_counter() - t0, 4)})
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kernels", help="comma-separated kernel-tier kernels (default: all of them)")
    p.add_argument("--out", help="write JSON here")
    p.add_argument("--force", action="store_true", help="overwrite --out")
    a = p.parse_args(argv)
    if a.out and Path(a.out).exists() and not a.force:
        print(f"cpu_auto_calibrate: {a.out} exists (use --force)", file=sys.stderr)
        return 2
    import torch
    import sdk
    from backends.cpu_interp import interp, tier
    from sdk.conformance.check import case_seed
    from sdk.conformance.spec import DTYPES, registered
    suite = registered()
    names = a.kernels.split(",") if a.kernels else [n for n, s in suite.items() if s.tier == "kernel"]
    unknown = [n for n in names if n not in suite]
    if unknown:
        print(f"cpu_auto_calibrate: unknown kernel(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    rows: list = []
    _record_chunks(rows)
    modules: dict = {}
    plain_init = interp.Program.__init__

    def init(self, module, *args, **kw):
        plain_init(self, module, *args, **kw)
        modules.setdefault(module.entry.name, module)
    interp.Program.__init__ = init
    t_start = time.perf_counter()
    with sdk.activate("cpu_interp"):
        for n in names:
            spec = suite[n]
            dtype, before = spec.dtypes[0], len(rows)
            for case in (c for c in spec.cases if c.quick):
                gen = torch.Generator().manual_seed(case_seed(spec.name, case.name, dtype))
                inputs = spec.make_inputs(case, DTYPES[dtype], "cpu", gen)
                spec.run(inputs, case)  # compiles (Triton) and loads the kernels: not timed
                del rows[before:]
                spec.run(inputs, case)
                before = len(rows)
            print(f"  {n}: {len(rows)} chunk(s) so far", file=sys.stderr)
    run_s = time.perf_counter() - t_start
    timed = [r for r in rows if r[4] > 0]
    op_s, el_s, mac_s = _fit(timed)
    ratios = [(s * op_s + e * el_s + m * mac_s) / t for _, s, e, m, t in timed]
    err = [abs(math.log(x)) for x in ratios]
    llvm = _compile_times(modules)
    llvm_med = statistics.median(x["llvm_s"] for x in llvm) if llvm else None
    summary = {"chunks": len(timed), "kernels": len(names), "op_seconds": op_s, "element_seconds": el_s,
               "mac_seconds": mac_s,
               "median_abs_log_error": statistics.median(err), "within_2x": sum(e < math.log(2) for e in err) / len(err),
               "llvm_median_s": llvm_med, "llvm_kernels": len(llvm),
               "in_use": {"op_seconds": interp.OP_SECONDS, "element_seconds": interp.ELEMENT_SECONDS,
                          "mac_seconds": interp.MAC_SECONDS,
                          "compile_seconds": tier.COMPILE_SECONDS},
               "run_s": round(run_s, 1), "load_average": os.getloadavg()[0]}
    print(f"{'chunks':>8} {'op s':>10} {'element s':>11} {'mac s':>10} {'median |log err|':>17} {'within 2x':>10} "
          f"{'LLVM median s':>14}")
    print(f"{len(timed):>8} {op_s:>10.2e} {el_s:>11.2e} {mac_s:>10.2e} {summary['median_abs_log_error']:>17.3f} "
          f"{summary['within_2x']:>10.0%} {llvm_med if llvm_med is None else round(llvm_med, 3)!s:>14}")
    print(f"in use: OP_SECONDS {interp.OP_SECONDS:.2e}, ELEMENT_SECONDS {interp.ELEMENT_SECONDS:.2e}, "
          f"MAC_SECONDS {interp.MAC_SECONDS:.2e}, "
          f"COMPILE_SECONDS {tier.COMPILE_SECONDS}")
    if a.out:
        from sdk.fileio import atomic_write_text
        atomic_write_text(Path(a.out), json.dumps({"summary": summary, "llvm": llvm,
                                                   "chunks": [list(r) for r in timed]}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
