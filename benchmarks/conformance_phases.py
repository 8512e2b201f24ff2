"""Where conformance items spend their time and memory: the harness's phases against the launch.

    python benchmarks/conformance_phases.py [--items K/CASE/DTYPE,...] [--backend cpu_interp]
                                            [--timeout 600] [--out conformance_phases.json]
    python benchmarks/conformance_phases.py --from results.jsonl [--top 20]

The first form runs each item through the conformance runner (one worker process, one item at a
time, as `day0 conformance --jobs 1` would) and prints, per item: its status, wall seconds in the
worker, seconds per phase (inputs, snapshot, poison, launch, reference, compare) and the worker's
peak resident MB per phase, then the sums of harness time (everything but the launch) and launch
time. Without --items it runs the full-size items known to be the heaviest on the harness side.
The second form reads a results file instead of running anything and prints the same table for its
`--top` slowest items plus the totals by status. Either way a JSON file holds the rows.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PHASES = ("inputs", "snapshot", "poison", "launch", "reference", "compare")

# full-size items whose harness side dominated or ran out of memory before the phases were measured
HEAVY = (
    "relu2/nemotron_h_T8192_I21504/fp16",
    "gelu_tanh_and_mul/gemma2_9b_T8192_I14336/fp32",
    "merge_attn_states/deepseek_v3_t8192_h128_d128/bf16",
    "attn_prefill_gqa_gated/qwen3next_t8192/bf16",
    "prefix_prefill_attention/glm4_5_b32/bf16",
    "mla_prefill/dsv3_h128_varlen/bf16",
    "mla_prefill/kimi_k2_h64_chunked/bf16",
)


def _row(kernel: str, case: str, dtype: str, rec: dict) -> dict:
    phases = rec.get("phase_s") or {}
    wall = float(rec.get("wall_s") or 0.0)
    launch = float(rec.get("launch_s") or phases.get("launch") or 0.0)
    return {"item": f"{kernel}/{case}/{dtype}", "status": rec.get("status"), "wall_s": wall,
            "launch_s": launch, "harness_s": max(0.0, wall - launch) if rec.get("launch_s") is not None else None,
            "phase_s": phases, "phase_peak_mb": rec.get("phase_peak_mb") or {},
            "peak_rss_mb": rec.get("peak_rss_mb"), "detail": (rec.get("detail") or "")[:120]}


def _table(rows: list[dict]) -> str:
    head = f"{'item':62} {'status':8} {'wall':>7} " + " ".join(f"{p[:6]:>7}" for p in PHASES) + f" {'peakMB':>7}"
    lines = [head, "-" * len(head)]
    for r in rows:
        ph = r["phase_s"]
        cells = " ".join(f"{ph[p]:7.2f}" if p in ph else f"{'-':>7}" for p in PHASES)
        peak = f"{r['peak_rss_mb']:7.0f}" if r.get("peak_rss_mb") else f"{'-':>7}"
        lines.append(f"{r['item'][:62]:62} {str(r['status'])[:8]:8} {r['wall_s']:7.1f} {cells} {peak}")
        if r["phase_peak_mb"]:
            lines.append(f"{'':62} {'peak MB':>16} " + " ".join(
                f"{r['phase_peak_mb'][p]:7.0f}" if p in r["phase_peak_mb"] else f"{'-':>7}" for p in PHASES))
    return "\n".join(lines)


def _totals(rows: list[dict]) -> str:
    wall = sum(r["wall_s"] for r in rows)
    done = [r for r in rows if r["harness_s"] is not None]  # items whose launch completed
    launch = sum(r["launch_s"] for r in done)
    harness = sum(r["harness_s"] for r in done)
    by: dict[str, int] = {}
    for r in rows:
        by[str(r["status"])] = by.get(str(r["status"]), 0) + 1
    return (f"{len(rows)} item(s): " + ", ".join(f"{k} {v}" for k, v in sorted(by.items()))
            + f"; wall {wall:.1f} s; over the {len(done)} whose launch completed: launch {launch:.1f} s, "
              f"harness {harness:.1f} s; the others (timeouts, crashes, errors) {wall - launch - harness:.1f} s")


def run(items: list[str], backend: str, timeout: float) -> list[dict]:
    from sdk.conformance.runner import Item, run_items
    rows: list[dict] = []
    todo = []
    for text in items:
        kernel, case, dtype = text.split("/")
        todo.append(Item(kernel, case, dtype, backend, "host"))

    def on_result(item, outcome: dict) -> None:
        rows.append(_row(item.kernel, item.case, item.dtype, outcome))
        print(_table(rows[-1:]).split("\n", 2)[-1], flush=True)

    run_items(todo, on_result, jobs=1, timeout=timeout)
    return rows


def from_results(path: str, top: int) -> tuple[list[dict], list[dict]]:
    from sdk.conformance.results import load_results
    rs = load_results(path)
    rows = [_row(r.kernel, r.case, r.dtype, {**r.__dict__}) for r in rs.records]
    return rows, sorted(rows, key=lambda r: -r["wall_s"])[:top]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", help="comma-separated KERNEL/CASE/DTYPE (default: the heavy list)")
    ap.add_argument("--backend", default="cpu_interp")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--from", dest="source", help="read a results file instead of running")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--out", default="conformance_phases.json")
    args = ap.parse_args()
    t0 = time.monotonic()
    if args.source:
        rows, shown = from_results(args.source, args.top)
    else:
        items = [x.strip() for x in (args.items or ",".join(HEAVY)).split(",") if x.strip()]
        rows = shown = run(items, args.backend, args.timeout)
    print(_table(shown))
    print(_totals(rows))
    Path(args.out).write_text(json.dumps({"rows": rows, "seconds": time.monotonic() - t0}, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
