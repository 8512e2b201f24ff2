"""How long `day0 simulate` takes: cold (an empty capture cache), then warm (the same cache).

    python benchmarks/sim_speed.py --out results/sim_v2/speed.json [--full] [--jobs N]
        [--devices nvidia_h100,nvidia_h200,amd_mi300x,google_tpu_v5e] [--cold-triton] [--runs-cold 1]

Each run is the CLI itself in a fresh process (`python -m sdk.cli simulate ...`), timed from start
to exit, with the CPU time it and its worker processes used and the machine's load average
before and after (other people's processes share the cores). `--cold-triton` gives the cold run an
empty Triton cache too (TRITON_CACHE_DIR), so that every kernel is compiled to TTIR again. The warm
run must reproduce the cold run's predictions exactly; the table says whether it did. Prints a
table and writes JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _run(args: list[str], env: dict) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "sdk.cli", "simulate", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"sim_speed: day0 simulate failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("captures:")]
    return {"wall_s": round(wall, 2), "user_s": round(after.ru_utime - before.ru_utime, 1),
            "sys_s": round(after.ru_stime - before.ru_stime, 1), "load_before": [round(x, 2) for x in load],
            "load_after": [round(x, 2) for x in os.getloadavg()], "captures": lines[-1] if lines else ""}


def _cases(path: Path) -> str:
    return json.dumps(json.loads(path.read_text())["cases"], sort_keys=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--devices", default="nvidia_h100,nvidia_h200,amd_mi300x,google_tpu_v5e")
    ap.add_argument("--full", action="store_true", help="the full (realistic) cases")
    ap.add_argument("--jobs", type=int, default=0, help="worker processes (default: the CLI's own)")
    ap.add_argument("--cold-triton", action="store_true", help="an empty Triton cache for the cold run too")
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args(argv)
    if args.out.exists() and not args.force:
        print(f"sim_speed: {args.out} exists; pass --force to overwrite it", file=sys.stderr)
        return 2
    rows = []
    with tempfile.TemporaryDirectory(prefix="day0-sim-speed-") as tmp:
        cache, tri = Path(tmp) / "captures", Path(tmp) / "triton"
        common = ["--device", args.devices, "--cache-dir", str(cache), "--force"] + (["--full"] if args.full else []) \
            + (["--jobs", str(args.jobs)] if args.jobs else [])
        env = dict(os.environ)
        cold_env = {**env, "TRITON_CACHE_DIR": str(tri)} if args.cold_triton else env
        cold = _run(common + ["--out", str(Path(tmp) / "cold.json")], cold_env)
        rows.append({"run": "cold" + (" (Triton cache empty too)" if args.cold_triton else ""), **cold})
        warm = _run(common + ["--out", str(Path(tmp) / "warm.json")], env)
        same = _cases(Path(tmp) / "cold.json") == _cases(Path(tmp) / "warm.json")
        rows.append({"run": "warm", **warm, "same_result_as_cold": same})
    print(f"day0 simulate {'--full ' if args.full else ''}--device {args.devices}"
          f"{f' --jobs {args.jobs}' if args.jobs else ''} ({os.cpu_count()} CPU cores)")
    print(f"  {'run':34s} {'wall':>8s} {'user':>8s} {'sys':>7s}  load before/after  captures")
    for r in rows:
        print(f"  {r['run']:34s} {r['wall_s']:7.1f}s {r['user_s']:7.1f}s {r['sys_s']:6.1f}s  "
              f"{r['load_before'][0]:.2f}/{r['load_after'][0]:.2f}  {r['captures']}")
    print(f"  warm run reproduces the cold run's predictions: {rows[-1]['same_result_as_cold']}")
    from sdk.fileio import atomic_write_text, json_text
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, json_text({"command": "python benchmarks/sim_speed.py " + " ".join(argv or sys.argv[1:]),
                                           "cpu_cores": os.cpu_count(), "full": args.full, "devices": args.devices,
                                           "jobs": args.jobs or "default", "runs": rows}, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
