"""The simulator's predictions against times measured on a real GPU.

Reads roofline JSON files written by benchmarks/gpu_roofline.py (e.g. results/h100/roofline_*.json),
predicts each measured (kernel, case, dtype) on the matching device model from the kernel's captured
TTIR (no GPU needed), and prints measured vs predicted time with the ratio; writes JSON with --out.

    python benchmarks/sim_vs_gpu.py results/h100/roofline_run*.json --device nvidia_h100 --out sim_vs_h100.json
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("roofline", nargs="+", type=Path, help="roofline JSON files from gpu_roofline.py")
    ap.add_argument("--device", default="nvidia_h100", help="device model the GPU runs stand for")
    ap.add_argument("--out", type=Path, help="write the comparison as JSON")
    args = ap.parse_args(argv)

    from sdk.conformance.spec import registered
    from sdk.device_models import load
    from sdk.simulator import predict
    from sdk.simulator.run import capture_case

    device = load(args.device)
    suite = registered()
    measured = {}
    for path in args.roofline:
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            print(f"sim_vs_gpu: cannot read {path}: {exc}", file=sys.stderr)
            return 2
        for row in data.get("rows", []):
            if row.get("day0_ms"):
                measured[(row["kernel"], row["case"], row["dtype"])] = row
    rows = []
    for (kernel, case_name, dtype), row in sorted(measured.items()):
        spec = suite.get(kernel)
        case = next((c for c in spec.cases if c.name == case_name), None) if spec else None
        if case is None:
            continue
        try:
            p = predict(capture_case(spec, case, dtype), device)
        except Exception as exc:  # a wrapper that needs real data cannot be captured
            print(f"  {kernel}/{case_name}: not simulated ({type(exc).__name__})", file=sys.stderr)
            continue
        meas_us, pred_us = row["day0_ms"] * 1e3, p.time_s * 1e6
        rows.append({"kernel": kernel, "case": case_name, "dtype": dtype, "measured_us": meas_us,
                     "predicted_us": pred_us, "ratio": pred_us / meas_us, "bound": p.bound, "estimated": p.estimated,
                     "fits": p.fits, "why": p.why})
    if not rows:
        print("sim_vs_gpu: no measured row could be simulated", file=sys.stderr)
        return 2
    head = f"{'kernel':<24} {'case':<34} {'measured us':>11} {'predicted us':>12} {'pred/meas':>9}  bound"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['kernel']:<24} {r['case'][:34]:<34} {r['measured_us']:>11.1f} {r['predicted_us']:>12.1f} "
              f"{r['ratio']:>9.2f}  {r['bound']}" + ("  (loop trips estimated)" if r["estimated"] else ""))
    exact = [r for r in rows if not r["estimated"]]
    errors = [abs(math.log(r["ratio"])) for r in rows]
    summary = {"device": args.device, "n": len(rows),
               "median_abs_error_pct": 100 * (math.exp(statistics.median(errors)) - 1),
               "geomean_ratio": math.exp(statistics.fmean(math.log(r["ratio"]) for r in rows)),
               "n_static": len(exact),
               "median_abs_error_pct_static": 100 * (math.exp(statistics.median(
                   abs(math.log(r["ratio"])) for r in exact)) - 1) if exact else None}
    print(f"{len(rows)} kernels: geometric-mean predicted/measured {summary['geomean_ratio']:.2f}, "
          f"median |error| {summary['median_abs_error_pct']:.0f}%")
    if exact:
        print(f"{len(exact)} with every loop bound resolved (arguments, program ids, loaded scalars): median |error| "
              f"{summary['median_abs_error_pct_static']:.0f}%")
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
