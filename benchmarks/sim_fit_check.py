"""The simulator's on-chip estimate and fit verdicts against real compiles of every kernel for every arch.

    python benchmarks/sim_fit_check.py COMPILE.jsonl [--out fit_check.json] [--kernels K,..]

COMPILE.jsonl: records of `day0 conformance --backend nvidia_ref --compile-only --arch ...` (each
carries every launch's shared memory as ptxas and Triton allocated it). For each (kernel, case,
dtype) the kernel's launches are captured once (no GPU, no compile for a GPU); for each arch the
simulator predicts each launch's shared memory with that arch's staging rules
(sdk.simulator.onchip) and whether the item fits: captured as that arch's Triton target would
compile it (its fp8 types and device properties: kernels that pick native fp8 or an emulation, or
size tiles by the device, pick as there; a type the target lacks fails the capture, as it fails the
compile; a configuration over the arch's shared memory is refused, so that first-fit wrappers and
autotuners take the next, as they do there), and shared memory within the arch's
opt-in limit (backends/nvidia_ref/archs.py: its table, or the arch's device model). A record that compiled fits; one whose compile failed
for shared memory or an unsupported type does not; other failures give no verdict.
Prints agreement per arch and the worst byte estimates; writes JSON with --out.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

def _records(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            if r.get("type") == "record":
                out.append(r)
    return out


def _refused(record: dict) -> bool:
    """Whether a failed compile is the device refusing the kernel (shared memory, a type it lacks)
    rather than an error of another kind."""
    detail = str(record.get("detail", "")).lower()
    return ("out of resource" in detail and "shared memory" in detail) or "not supported in this architecture" in detail


def _capture(suite, key: tuple, arch: str, captured: dict, get_backend, capture_case):
    from sdk.simulator.onchip import staging_for_arch, triton_fp8_for_arch
    if (key, arch) in captured:
        return captured[(key, arch)]
    spec = suite[key[0]]
    case = next((c for c in spec.cases if c.name == key[1]), None)
    if case is None:
        out = "case not in the suite"
    else:
        props = get_backend(f"nvidia_ref@{arch}/compile").device_properties()
        try:
            out = capture_case(spec, case, key[2], triton_fp8_for_arch(arch), props, staging_for_arch(arch))
        except Exception as exc:
            text = " ".join(str(exc).split())
            if "not supported in this architecture" in text:
                out = f"{type(exc).__name__}: " + text[text.find("type "):][:160]
            else:
                out = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[-1][:200]}"
    captured[(key, arch)] = out
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("compile", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--kernels", default="")
    args = ap.parse_args(argv)
    from backends.nvidia_ref.archs import parse_arch
    from sdk.conformance.spec import registered
    from sdk.simulator.onchip import shared_bytes, staging_for_arch
    from sdk.simulator.run import capture_case

    suite = registered()
    want = {k for k in args.kernels.split(",") if k}
    records = [r for r in _records(args.compile) if r["kernel"] in suite and (not want or r["kernel"] in want)]
    captured: dict[tuple, list | str] = {}
    from sdk.backend import get_backend

    def launches_for(key: tuple, arch: str):
        """Captured as the arch's compile-only target: its fp8 types and device properties; the
        sm_90 capture is reused where the wrapper asked for neither."""
        first = _capture(suite, key, "sm_90", captured, get_backend, capture_case)
        limit = get_backend(f"nvidia_ref@{arch}/compile").device_properties()["max_shared_mem"]
        st = staging_for_arch(arch)
        if arch == "sm_90" or (isinstance(first, list) and not first.target_dependent
                               and all(shared_bytes(c, st) <= limit for c in first)):
            return first
        return _capture(suite, key, arch, captured, get_backend, capture_case)

    t0 = time.monotonic()
    rows = []
    for r in records:
        key = (r["kernel"], r["case"], r["dtype"])
        arch = parse_arch(r["arch"])
        limit = arch.max_shared_mem or arch.properties()["max_shared_mem"]
        row = {"kernel": r["kernel"], "case": r["case"], "dtype": r["dtype"], "arch": r["arch"],
               "compiled": r["status"] == "compiled", "status": r["status"], "limit": limit}
        if r["status"] not in ("compiled", "failed") or (r["status"] == "failed" and not _refused(r)):
            row["error"] = f"no verdict from the compile: {r['status']} {str(r.get('detail', ''))[:120]}"
            rows.append(row)
            continue
        launches = launches_for(key, r["arch"])
        if isinstance(launches, str):
            if "not supported in this architecture" in launches or launches.startswith("OutOfResources"):
                row.update(fits=False, why=[launches], launches=[])
            else:
                row["error"] = launches
            rows.append(row)
            continue
        st = staging_for_arch(r["arch"])
        pred = [shared_bytes(c, st) for c in launches]
        stats = r.get("launch_stats") or []
        row["launches"] = []
        names = [s["kernel"] for s in stats]
        for i, c in enumerate(launches):
            real = stats[i]["shared_bytes"] if i < len(stats) and names[i] == c.kernel else None
            row["launches"].append({"kernel": c.kernel, "predicted": pred[i], "real": real,
                                    "num_stages": stats[i]["num_stages"] if real is not None else None})
        why = [f"{c.kernel}: {p} B of shared memory, {limit} available"
               for c, p in zip(launches, pred) if p > limit]
        row["fits"] = not why
        row["why"] = why
        rows.append(row)
    judged = [r for r in rows if "fits" in r]
    agree = [r for r in judged if r["fits"] == r["compiled"]]
    by_arch = defaultdict(lambda: [0, 0])
    for r in judged:
        by_arch[r["arch"]][0] += r["fits"] == r["compiled"]
        by_arch[r["arch"]][1] += 1
    pairs = [(l["predicted"], l["real"]) for r in judged for l in r["launches"] if l["real"]]
    ratios = [p / q for p, q in pairs if q > 0 and p > 0]
    within = sum(1 for p, q in pairs if abs(p - q) <= max(0.25 * q, 1024)) / len(pairs) if pairs else 0.0
    summary = {"items": len(rows), "judged": len(judged), "agree": len(agree),
               "agreement": len(agree) / len(judged) if judged else None,
               "by_arch": {a: {"agree": v[0], "of": v[1]} for a, v in sorted(by_arch.items())},
               "not_simulated": sorted({f"{r['kernel']}/{r['case']}/{r['dtype']}: {r['error']}" for r in rows if "error" in r}),
               "launches_compared": len(pairs), "launch_bytes_within_25pct_or_1KiB": within,
               "median_abs_log_ratio": statistics.median(abs(math.log(x)) for x in ratios) if ratios else None,
               "wall_s": round(time.monotonic() - t0, 1)}
    print(f"{'arch':8s} agree/of")
    for a, v in summary["by_arch"].items():
        print(f"{a:8s} {v['agree']}/{v['of']}")
    print(f"fit verdicts agree on {len(agree)}/{len(judged)} (kernel, case, dtype, arch) items "
          f"({100 * summary['agreement']:.1f}%)" if judged else "nothing judged")
    for r in judged:
        if r["fits"] != r["compiled"]:
            print(f"  disagree: {r['kernel']}/{r['case']}/{r['dtype']}@{r['arch']}: compiled={r['compiled']} "
                  f"predicted fits={r['fits']} {'; '.join(r['why'])[:160]} "
                  f"{[(l['predicted'], l['real']) for l in r['launches']]}")
    print(f"launch shared memory within 25% (or 1 KiB): {100 * within:.0f}% of {len(pairs)} launches")
    worst = sorted(((abs(math.log(max(p, 1) / max(q, 1))), r["kernel"], l["kernel"], r["arch"], p, q)
                    for r in judged for l in r["launches"] if l["real"] is not None
                    for p, q in [(l["predicted"], l["real"])]), reverse=True)
    seen = set()
    for _, k, lk, a, p, q in worst:
        if (k, lk) in seen:
            continue
        seen.add((k, lk))
        print(f"  {k[:28]:28s} {lk[:32]:32s} {a:7s} predicted {p:7d} real {q:7d}")
        if len(seen) >= 25:
            break
    if args.out:
        args.out.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
