"""Merge benchmarks/sim_measure.py results of several runs on one GPU into one file.

    python benchmarks/sim_merge.py --out results/sim_v2/h100.json RUN1.json RUN2.json [...]

Each row keeps the run it came from (`run`: the run's id, its date); a later run's measured row
replaces an earlier run's row of the same (kernel, case, dtype) only where the earlier one was not
measured (skipped or error), so that no measurement is silently overwritten by another. Every
run's header (date, GPU, versions, ceilings, warm-up log, wall time) is kept under `runs`; the
top-level header is the first run's, whose ceilings (the empty launch) calibrate the launch floor.
Prints how many rows each run contributed and writes JSON.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _run_header(data: dict, path: Path) -> dict:
    head = {k: v for k, v in data.items() if k not in ("rows", "runs")}
    head["id"] = data.get("date", path.stem)
    head["source_file"] = path.name
    return head


def merge(files: list[Path]) -> dict:
    out: dict = {}
    rows: dict[tuple, dict] = {}
    runs: list[dict] = []
    for path in files:
        data = json.loads(path.read_text())
        if "runs" in data:  # an already merged file: its rows carry their runs
            runs += data["runs"]
            incoming = data["rows"]
        else:
            head = _run_header(data, path)
            runs.append(head)
            incoming = [{**r, "run": head["id"]} for r in data.get("rows", [])]
        if not out:
            out = {k: v for k, v in data.items() if k not in ("rows", "runs")}
        for r in incoming:
            key = (r["kernel"], r["case"], r["dtype"])
            cur = rows.get(key)
            if cur is None or (cur.get("status") != "measured" and r.get("status") == "measured"):
                rows[key] = r
    out["runs"] = runs
    out["rows"] = list(rows.values())
    out["items"] = len(rows)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--force", action="store_true", help="overwrite --out")
    args = ap.parse_args(argv)
    if args.out.exists() and not args.force and args.out not in args.files:
        print(f"sim_merge: {args.out} exists (use --force)", file=sys.stderr)
        return 2
    for f in args.files:
        if not f.exists():
            print(f"sim_merge: no such file: {f}", file=sys.stderr)
            return 2
    merged = merge(args.files)
    from sdk.fileio import atomic_write_text, json_text
    atomic_write_text(args.out, json_text(merged, indent=1) + "\n")
    for run in merged["runs"]:
        n = sum(1 for r in merged["rows"] if r.get("run") == run["id"] and r.get("status") == "measured")
        print(f"  {run['id']} ({run['source_file']}): {n} measured rows kept")
    n = sum(1 for r in merged["rows"] if r.get("status") == "measured")
    print(f"{n}/{len(merged['rows'])} rows measured; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
