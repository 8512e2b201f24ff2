"""How well two runs of benchmarks/sim_measure.py on one kind of GPU agree, and what that means
for the simulator's held-out score.

    python benchmarks/sim_repeat.py results/sim_v2/h200.json results/sim_v2/h200_run2.json \\
        --validation results/sim_v2/validation.json results/sim_v2/validation_h200_run2.json \\
        --out results/sim_v2/repeat_h200.json

Per call measured in both runs: the ratio of the second run's time to the first's, and whether a
run's profile (where it has one) shows the call bound by its wrapper's host work (the rule of
benchmarks/sim_validate.py). A call whose two measurements differ by more than 2x cannot be
predicted within 2x of both. With `--validation` (sim_validate.py's output scored against each run,
in the same order): the kernels predicted more than 2x off in each run, in both, and in one only,
with how far that kernel's own measurements moved between the runs.

Prints a table and writes JSON.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from sim_validate import host_bound, measured_in, profiled_gpu_us  # noqa: E402


def _spread(ratio: float) -> float:
    """How far apart two times are, as a factor >= 1."""
    return max(ratio, 1.0 / ratio)


def compare_runs(first: dict, second: dict) -> dict:
    """Row-by-row agreement of two sim_measure results (see the module docstring)."""
    a, b = measured_in(first), measured_in(second)
    rows = []
    for key in sorted(set(a) & set(b)):
        ratio = b[key]["day0_ms"] / a[key]["day0_ms"]
        gpu = [profiled_gpu_us(r) or None for r in (a[key], b[key])]
        rows.append({"kernel": key[0], "case": key[1], "dtype": key[2],
                     "first_us": a[key]["day0_ms"] * 1e3, "second_us": b[key]["day0_ms"] * 1e3,
                     "ratio": ratio, "first_gpu_us": gpu[0], "second_gpu_us": gpu[1],
                     "host_bound": [host_bound(a[key]), host_bound(b[key])]})

    def summary(rs: list[dict]) -> dict:
        if not rs:
            return {"n": 0}
        dev = [abs(r["ratio"] - 1.0) for r in rs]
        return {"n": len(rs), "median_abs_change_pct": 100 * statistics.median(dev),
                "within_10pct": sum(d <= 0.10 for d in dev),
                "beyond_1_5x": sum(_spread(r["ratio"]) > 1.5 for r in rs),
                "beyond_2x": sum(_spread(r["ratio"]) > 2.0 for r in rs)}

    host = [r for r in rows if any(r["host_bound"])]
    return {"rows": rows, "summary": summary(rows), "summary_host_bound": summary(host),
            "summary_not_host_bound": summary([r for r in rows if not any(r["host_bound"])]),
            "only_in_first": len(set(a) - set(b)), "only_in_second": len(set(b) - set(a))}


def compare_scores(first: dict, second: dict, runs: dict) -> dict:
    """Kernels predicted more than 2x off against each run (sim_validate.py outputs), and how far
    those kernels' own measurements moved between the runs (`runs`: compare_runs' result)."""
    def beyond(v: dict) -> set:
        return {r["kernel"] for r in v["holdout"]["rows_scored"] if _spread(r["ratio"]) > 2.0}
    one, two = beyond(first), beyond(second)
    moved: dict[str, float] = {}
    for r in runs["rows"]:
        moved[r["kernel"]] = max(moved.get(r["kernel"], 1.0), _spread(r["ratio"]))

    def listing(names: set) -> list[dict]:
        return [{"kernel": k, "measurements_moved_x": moved.get(k)} for k in sorted(names)]
    return {"first": {"median_abs_error_pct": first["holdout"]["summary"]["all"]["median_abs_error_pct"],
                      "kernels_beyond_2x": sorted(one)},
            "second": {"median_abs_error_pct": second["holdout"]["summary"]["all"]["median_abs_error_pct"],
                       "kernels_beyond_2x": sorted(two)},
            "beyond_2x_in_both": listing(one & two), "beyond_2x_in_one_run_only": listing(one ^ two)}


def _line(label: str, s: dict) -> str:
    if not s.get("n"):
        return f"  {label:<26} {0:>4}"
    return (f"  {label:<26} {s['n']:>4} {s['median_abs_change_pct']:>12.1f}% {s['within_10pct']:>10} "
            f"{s['beyond_1_5x']:>11} {s['beyond_2x']:>9}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("first", type=Path, help="sim_measure.py JSON of the first run")
    ap.add_argument("second", type=Path, help="sim_measure.py JSON of the second run, same kind of GPU")
    ap.add_argument("--validation", type=Path, nargs=2, metavar=("FIRST", "SECOND"),
                    help="sim_validate.py JSON scored against each run, in the same order")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--force", action="store_true", help="overwrite --out")
    args = ap.parse_args(argv)
    inputs = [args.first, args.second, *(args.validation or [])]
    for f in inputs:
        if not f.is_file():
            print(f"sim_repeat: no such file: {f}", file=sys.stderr)
            return 2
    if args.out.exists() and not args.force:
        print(f"sim_repeat: {args.out} exists (use --force)", file=sys.stderr)
        return 2
    try:
        data = [json.loads(f.read_text()) for f in inputs]
    except (OSError, ValueError) as exc:
        print(f"sim_repeat: cannot read the inputs: {exc}", file=sys.stderr)
        return 2
    for f, d in zip(inputs[:2], data[:2]):
        if not isinstance(d, dict) or "rows" not in d:
            print(f"sim_repeat: {f} is not a sim_measure.py result (no rows)", file=sys.stderr)
            return 2
    for f, d in zip(inputs[2:], data[2:]):
        held = d.get("holdout") if isinstance(d, dict) else None
        if not isinstance(held, dict) or "rows_scored" not in held or "all" not in held.get("summary", {}):
            print(f"sim_repeat: {f} is not a sim_validate.py result with a held-out device", file=sys.stderr)
            return 2
    if data[0].get("gpu") != data[1].get("gpu"):
        print(f"sim_repeat: the runs are of different GPUs ({data[0].get('gpu')} and {data[1].get('gpu')})",
              file=sys.stderr)
        return 2
    runs = compare_runs(data[0], data[1])
    result = {"first": str(args.first), "second": str(args.second), "gpu": data[0].get("gpu"),
              "dates": [data[0].get("date"), data[1].get("date")], **runs}
    print(f"{data[0].get('gpu')}: {runs['summary']['n']} calls measured in both runs "
          f"({args.first.name}, {args.second.name})")
    print(f"  {'calls':<26} {'n':>4} {'median change':>13} {'within 10%':>10} {'beyond 1.5x':>11} {'beyond 2x':>9}")
    print(_line("all", runs["summary"]))
    print(_line("host-bound in a profile", runs["summary_host_bound"]))
    print(_line("not host-bound", runs["summary_not_host_bound"]))
    apart = sorted((r for r in runs["rows"] if _spread(r["ratio"]) > 2.0), key=lambda r: -_spread(r["ratio"]))
    if apart:
        print("  calls whose two measurements differ by more than 2x (us; GPU time where profiled):")
        for r in apart:
            gpu = r["second_gpu_us"] or r["first_gpu_us"]
            print(f"    {r['kernel'] + '/' + r['case']:<58} {r['first_us']:>9.1f} {r['second_us']:>9.1f}"
                  + (f"  gpu {gpu:.1f}" if gpu else ""))
    if args.validation:
        scores = compare_scores(data[2], data[3], runs)
        result["scores"] = scores
        for label in ("first", "second"):
            s = scores[label]
            print(f"  held out against the {label} run: median {s['median_abs_error_pct']:.1f}%, "
                  f"{len(s['kernels_beyond_2x'])} kernels beyond 2x")
        for label, key in (("in both runs", "beyond_2x_in_both"), ("in one run only", "beyond_2x_in_one_run_only")):
            names = ", ".join(f"{x['kernel']} (moved x{x['measurements_moved_x']:.2f})" for x in scores[key])
            print(f"  beyond 2x {label}: {names or 'none'}")
    from sdk.fileio import atomic_write_text, json_text
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, json_text(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
