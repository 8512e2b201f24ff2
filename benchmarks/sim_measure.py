"""Measured times of every suite kernel's full cases on a GPU, for calibrating and validating the simulator.

    python3 benchmarks/sim_measure.py --out h100.json [--budget-s 330] [--warm-jobs 6]
        [--kernels K,..] [--groups G,..] [--conformance-out conf.jsonl --conformance-jobs 8]

Phases (each in its own processes, so that a kernel that breaks its CUDA context or hangs costs one
item, never the run):
1. warm: `--warm-jobs` processes launch every item once (compiling it into Triton's on-disk cache and
   running autotuners' candidates), in parallel; errors are recorded.
2. ceilings, on the idle GPU: device-to-device copy (2 GiB, bytes read + written), copy of a 16 MiB
   buffer that stays in L2, bf16 matmul 8192^3, fp8 matmul 8192^3 (torch._scaled_mm), the time of an
   empty Triton launch (directly and through the day0 backend), and the device's properties.
3. time: one process, one item after another: inputs built with the simulator's seed for the item
   (sdk.conformance.check.case_seed), one launch outside the timing, then the median of
   triton.testing.do_bench (L2 flushed before each call), then one profiled call with the GPU time
   of each kernel it launched. An item silent for `--item-timeout` seconds is killed and recorded.
4. optionally, `day0 conformance --full` with the time left (resumable: records appear as they finish).

Items: every registered kernel's full cases (the quick ones where it has none), in bf16 where the
kernel takes bf16, else its first dtype. Prints a table and writes JSON (rewritten after each item).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent


# ------------------------------------------------------------------------------------- items
def select_items(kernels: str = "", groups: str = "", quick: bool = False) -> list[dict]:
    """(kernel, case, dtype) items: kernel tier first, then the library tier."""
    from sdk.conformance.spec import registered
    specs = registered()
    want_k = {k for k in kernels.split(",") if k}
    want_g = {g for g in groups.split(",") if g}
    unknown = want_k - set(specs)
    if unknown:
        raise SystemExit(f"sim_measure: unknown kernel(s): {', '.join(sorted(unknown))}")
    items = []
    for name, spec in sorted(specs.items(), key=lambda kv: (kv[1].tier != "kernel", kv[0])):
        if (want_k and name not in want_k) or (want_g and spec.group not in want_g):
            continue
        qk = [c for c in spec.cases if c.quick]
        cases = (qk[:1] if quick else ([c for c in spec.cases if not c.quick] or qk))
        dtype = "bf16" if "bf16" in spec.dtypes else spec.dtypes[0]
        for case in cases:
            items.append({"kernel": name, "group": spec.group, "tier": spec.tier, "case": case.name,
                          "dtype": dtype})
    return items


def _key(item: dict) -> str:
    return f"{item['kernel']}/{item['case']}/{item['dtype']}"


def _inputs(item: dict, device: str):
    import torch
    from sdk.conformance.check import case_seed
    from sdk.conformance.spec import DTYPES, registered
    spec = registered()[item["kernel"]]
    case = next(c for c in spec.cases if c.name == item["case"])
    gen = torch.Generator(device="cpu").manual_seed(case_seed(spec.name, case.name, item["dtype"]))
    return spec, case, spec.make_inputs(case, DTYPES[item["dtype"]], device, gen)


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:400]


def _append(path: Path, row: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _read_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut short by a kill
            pass
    return rows


# --------------------------------------------------------------------------------- phase: warm
def phase_warm(items: list[dict], log: Path, backend: str, device: str) -> int:
    import torch
    import sdk
    for item in items:
        t0 = time.monotonic()
        row = {"key": _key(item)}
        try:
            spec, case, inputs = _inputs(item, device)
            with sdk.activate(backend):
                spec.run(inputs, case)
            if device == "cuda":
                torch.cuda.synchronize()
            row["ok"] = True
        except Exception as exc:
            row["ok"], row["error"] = False, _err(exc)
            if device == "cuda" and _context_broken():
                row["wall_s"] = round(time.monotonic() - t0, 2)
                _append(log, row)
                return 3
        finally:
            inputs = None
        row["wall_s"] = round(time.monotonic() - t0, 2)
        _append(log, row)
        if device == "cuda":
            torch.cuda.empty_cache()
    return 0


def _context_broken() -> bool:
    import torch
    try:
        torch.cuda.synchronize()
        torch.zeros(1, device="cuda").add_(1).item()
        return False
    except Exception:
        return True


# ----------------------------------------------------------------------------- phase: ceilings
def _bench(fn, warmup_ms: float, rep_ms: float, device: str) -> float:
    """Median milliseconds: triton.testing.do_bench on a GPU (L2 flushed before each call), a
    host clock around synchronous calls elsewhere."""
    if device == "cuda":
        from triton.testing import do_bench
        return float(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))
    import statistics
    fn()
    times = []
    deadline = time.perf_counter() + rep_ms / 1e3
    while len(times) < 3 or (time.perf_counter() < deadline and len(times) < 50):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def phase_ceilings(out: Path, backend: str) -> int:
    import torch
    import triton
    import triton.language as tl
    res: dict[str, Any] = {}
    props = torch.cuda.get_device_properties(0)
    res["props"] = {k: getattr(props, k) for k in ("name", "multi_processor_count", "L2_cache_size",
                                                   "total_memory", "shared_memory_per_block_optin",
                                                   "shared_memory_per_multiprocessor", "regs_per_multiprocessor",
                                                   "max_threads_per_multi_processor", "clock_rate",
                                                   "memory_clock_rate", "memory_bus_width")
                    if hasattr(props, k)}
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,"
                            "power.limit,temperature.gpu", "--format=csv"], capture_output=True, text=True, timeout=20)
        res["nvidia_smi"] = q.stdout.strip()
    except Exception as exc:
        res["nvidia_smi"] = _err(exc)
    n = 1 << 30
    src = torch.empty(n, dtype=torch.bfloat16, device="cuda").uniform_()
    dst = torch.empty_like(src)
    ms = _bench(lambda: dst.copy_(src), 10, 80, "cuda")
    res["copy_GBps"] = 2 * n * 2 / (ms * 1e-3) / 1e9
    del src, dst
    small = torch.empty(8 << 20, dtype=torch.bfloat16, device="cuda").uniform_()  # 16 MiB
    sdst = torch.empty_like(small)
    for _ in range(20):
        sdst.copy_(small)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(200):
        sdst.copy_(small)
    end.record()
    torch.cuda.synchronize()
    res["l2_copy_GBps"] = 2 * small.numel() * 2 * 200 / (start.elapsed_time(end) * 1e-3) / 1e9
    del small, sdst
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda", generator=g)
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda", generator=g)
    ms = _bench(lambda: a @ b, 10, 100, "cuda")
    res["matmul_bf16_TFLOPs"] = 2 * 8192 ** 3 / (ms * 1e-3) / 1e12
    try:
        a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).t().contiguous().t()
        one = torch.ones((), device="cuda")
        ms = _bench(lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16), 10, 100, "cuda")
        res["matmul_fp8_TFLOPs"] = 2 * 8192 ** 3 / (ms * 1e-3) / 1e12
    except Exception as exc:
        res["matmul_fp8_error"] = _err(exc)
    del a, b
    torch.cuda.empty_cache()

    @triton.jit
    def _touch(p):
        tl.store(p, tl.load(p) + 1.0)

    x = torch.zeros(1, device="cuda")
    _touch[(1,)](x)
    res["empty_launch_us"] = 1e3 * _bench(lambda: _touch[(1,)](x), 5, 50, "cuda")
    try:
        import sdk
        with sdk.activate(backend):
            _touch[(1,)](x)
            res["empty_launch_day0_us"] = 1e3 * _bench(lambda: _touch[(1,)](x), 5, 50, "cuda")
    except Exception as exc:
        res["empty_launch_day0_error"] = _err(exc)
    try:
        res.update(_chase_latency())
    except Exception as exc:
        res["latency_error"] = _err(exc)
    out.write_text(json.dumps(res, indent=1))
    return 0


def _chase_latency() -> dict:
    """Nanoseconds per dependent load: one program follows a random cycle through a buffer far
    larger than L2 (DRAM latency) and through one that fits in it (L2 latency)."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _chase(nxt, out, steps):
        i = tl.zeros((), tl.int64)
        for _ in range(steps):
            i = tl.load(nxt + i)
        tl.store(out, i)

    res = {}
    out = torch.zeros(1, dtype=torch.int64, device="cuda")
    for label, n in (("dram_latency_ns", 1 << 26), ("l2_latency_ns", 1 << 16)):
        perm = torch.randperm(n, device="cuda", generator=torch.Generator(device="cuda").manual_seed(1))
        nxt = torch.empty(n, dtype=torch.int64, device="cuda")
        nxt[perm] = torch.roll(perm, -1)
        per = {}
        for steps in (1000, 3000):
            _chase[(1,)](nxt, out, steps)
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            _chase[(1,)](nxt, out, steps)
            end.record()
            torch.cuda.synchronize()
            per[steps] = start.elapsed_time(end) * 1e6  # ns
        res[label] = (per[3000] - per[1000]) / 2000
        del perm, nxt
    return res


# --------------------------------------------------------------------------------- phase: time
def phase_time(items: list[dict], rows_out: Path, backend: str, device: str, warmup_ms: float,
               rep_ms: float, profile: bool) -> int:
    import torch
    import sdk
    flush = torch.empty(256 << 20, dtype=torch.int8, device=device) if device == "cuda" else None
    for item in items:
        t0 = time.monotonic()
        row = dict(item)
        _append(rows_out.with_suffix(".started"), {"key": _key(item)})
        try:
            spec, case, inputs = _inputs(item, device)
            with sdk.activate(backend):
                spec.run(inputs, case)  # compile (or load from the cache) and autotune outside the timing
                if device == "cuda":
                    torch.cuda.synchronize()
                row["day0_ms"] = _bench(lambda: spec.run(inputs, case), warmup_ms, rep_ms, device)
                if profile and device == "cuda":
                    row["launches"] = _profile(lambda: spec.run(inputs, case), flush)
            row["status"] = "measured"
        except Exception as exc:
            row["status"], row["error"] = "error", _err(exc)
            row["traceback"] = traceback.format_exc()[-1500:]
        inputs = None
        row["wall_s"] = round(time.monotonic() - t0, 2)
        _append(rows_out, row)
        if device == "cuda":
            if row["status"] == "error" and _context_broken():
                return 3
            torch.cuda.empty_cache()
    return 0


def _profile(fn, flush) -> list[dict]:
    """GPU time of each kernel one call launches: one profiler session over 3 back-to-back calls
    (L2 flushed once before them), the median per kernel position."""
    import statistics
    import torch
    from torch.profiler import ProfilerActivity, profile
    try:
        flush.zero_()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
        kernels = sorted(((e.time_range.start, e.name, e.time_range.elapsed_us()) for e in prof.events()
                          if e.device_type == torch.autograd.DeviceType.CUDA), key=lambda k: k[0])
    except Exception as exc:
        return [{"error": _err(exc)}]
    n = len(kernels) // 3
    if n == 0 or len(kernels) % 3 or any(kernels[i][1] != kernels[i + n][1] for i in range(n)):
        return [{"name": name[:120], "us": us} for _, name, us in kernels]  # calls differ: all of them
    return [{"name": kernels[i][1][:120], "us": statistics.median(kernels[i + j * n][2] for j in range(3))}
            for i in range(n)]


# ------------------------------------------------------------------------------ orchestration
def _worker(phase: str, args: argparse.Namespace, items_file: Path, extra: list[str]) -> subprocess.Popen:
    cmd = [sys.executable, str(HERE), "--phase", phase, "--items-file", str(items_file), "--backend", args.backend,
           "--device", args.device, "--warmup-ms", str(args.warmup_ms), "--rep-ms", str(args.rep_ms)] + extra
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(cmd, env=env, cwd=str(ROOT))


def _wait(proc: subprocess.Popen, deadline: float) -> int | None:
    while proc.poll() is None:
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            return None
        time.sleep(0.2)
    return proc.returncode


def run_warm(items: list[dict], args: argparse.Namespace, work: Path, deadline: float) -> dict:
    jobs = max(1, min(args.warm_jobs, len(items)))
    procs, logs = [], []
    for i in range(jobs):
        shard = items[i::jobs]
        f = work / f"warm{i}.items.json"
        f.write_text(json.dumps(shard))
        log = work / f"warm{i}.jsonl"
        logs.append(log)
        procs.append(_worker("warm", args, f, ["--log", str(log)]))
    for p in procs:
        _wait(p, deadline)
    rows = [r for log in logs for r in _read_rows(log)]
    return {"items": len(items), "done": len(rows), "errors": {r["key"]: r["error"] for r in rows if not r.get("ok")},
            "wall_s": {r["key"]: r["wall_s"] for r in rows}}


def run_time(items: list[dict], args: argparse.Namespace, work: Path, deadline: float, result: dict,
             out: Path) -> None:
    rows_out = work / "time.jsonl"
    started = rows_out.with_suffix(".started")
    done: dict[str, dict] = {}
    pending = list(items)
    while pending:
        if time.monotonic() > deadline:
            for it in pending:
                done[_key(it)] = {**it, "status": "skipped", "error": "time budget spent"}
            break
        f = work / "time.items.json"
        f.write_text(json.dumps(pending))
        n_started0, n_rows0 = len(_read_rows(started)), len(_read_rows(rows_out))
        proc = _worker("time", args, f, ["--rows-out", str(rows_out)] + ([] if args.profile else ["--no-profile"]))
        t_spawn, seen_started, t_item, why = time.monotonic(), 0, None, ""
        while proc.poll() is None:
            time.sleep(0.3)
            _collect(_read_rows(rows_out), done, result, out)
            n_started = len(_read_rows(started)) - n_started0
            if n_started != seen_started:
                seen_started, t_item = n_started, time.monotonic()
            now = time.monotonic()
            if t_item is not None and now - t_item > args.item_timeout:
                why = f"timeout: no result within {args.item_timeout:.0f} s"
            elif t_item is None and now - t_spawn > 180:
                why = "the timing process did not start"
            elif now > deadline:
                why = "time budget spent"
            if why:
                proc.kill()
                proc.wait()
                break
        _collect(_read_rows(rows_out), done, result, out)
        starts = [r["key"] for r in _read_rows(started)[n_started0:]]
        remaining = [it for it in pending if _key(it) not in done]
        if not starts:
            for it in remaining:
                done[_key(it)] = {**it, "status": "error", "error": why or "the timing process exited at once"}
            break
        if remaining and starts[-1] == _key(remaining[0]):
            # the item that was running when the process died or was killed
            it = remaining[0]
            done[_key(it)] = {**it, "status": "error", "error": why or "the timing process died (CUDA context lost?)"}
            print(row_line(done[_key(it)]), flush=True)
            remaining = remaining[1:]
        pending = remaining
    result["rows"] = [done[_key(it)] for it in items if _key(it) in done]
    _write(out, result)


def _collect(rows: list[dict], done: dict, result: dict, out: Path) -> None:
    new = False
    for r in rows:
        k = _key(r)
        if k not in done:
            done[k] = r
            print(row_line(r), flush=True)
            new = True
    if new:
        result["rows"] = list(done.values())
        _write(out, result)


def _write(out: Path, result: dict) -> None:
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=1))
    os.replace(tmp, out)


def row_line(r: dict) -> str:
    us = f"{r['day0_ms'] * 1e3:10.1f}" if r.get("day0_ms") else f"{'-':>10s}"
    launches = r.get("launches") or []
    ks = f"{len(launches):3d}" if launches and "error" not in launches[0] else "  -"
    tail = r.get("error", "")[:90] if r.get("status") != "measured" else ""
    return f"{r['kernel'][:34]:34s} {r['case'][:36]:36s} {r['dtype']:5s} {us} {ks}  {r.get('status', '')} {tail}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("sim_measure.json"))
    ap.add_argument("--kernels", default="")
    ap.add_argument("--groups", default="")
    ap.add_argument("--quick", action="store_true", help="one quick case per kernel (a dry run)")
    ap.add_argument("--backend", default="nvidia_ref")
    ap.add_argument("--device", default="cuda", help="torch device of the inputs (cuda; cpu for a dry run)")
    ap.add_argument("--budget-s", type=float, default=330.0, help="no item starts after this many seconds")
    ap.add_argument("--warm-s", type=float, default=150.0, help="the warm phase ends after this many seconds")
    ap.add_argument("--warm-jobs", type=int, default=10)
    ap.add_argument("--item-timeout", type=float, default=90.0)
    ap.add_argument("--warmup-ms", type=float, default=5.0)
    ap.add_argument("--rep-ms", type=float, default=25.0)
    ap.add_argument("--no-profile", dest="profile", action="store_false")
    ap.add_argument("--conformance-out", type=Path, help="then run day0 conformance --full into this file")
    ap.add_argument("--conformance-jobs", type=int, default=8)
    ap.add_argument("--total-s", type=float, default=450.0, help="conformance stops this many seconds after the start")
    ap.add_argument("--work-dir", type=Path, help="scratch folder for the worker processes (default: beside --out)")
    # worker-only arguments
    ap.add_argument("--phase", choices=("warm", "ceilings", "time"), help=argparse.SUPPRESS)
    ap.add_argument("--items-file", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--log", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--rows-out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))

    if args.phase == "warm":
        return phase_warm(json.loads(args.items_file.read_text()), args.log, args.backend, args.device)
    if args.phase == "time":
        return phase_time(json.loads(args.items_file.read_text()), args.rows_out, args.backend, args.device,
                          args.warmup_ms, args.rep_ms, args.profile)
    if args.phase == "ceilings":
        return phase_ceilings(args.log, args.backend)

    t_start = time.monotonic()
    import torch
    import triton
    items = select_items(args.kernels, args.groups, args.quick)
    work = args.work_dir or args.out.with_name(args.out.stem + "_work")
    work.mkdir(parents=True, exist_ok=True)
    for stale in work.glob("*"):
        stale.unlink()
    result: dict[str, Any] = {"format": "day0-sim-measure/1", "date": _dt.datetime.now(_dt.timezone.utc).isoformat(),
                              "gpu": torch.cuda.get_device_name() if args.device == "cuda" else args.device,
                              "triton": triton.__version__, "torch": torch.__version__, "backend": args.backend,
                              "python": sys.version.split()[0], "items": len(items),
                              "settings": {"warmup_ms": args.warmup_ms, "rep_ms": args.rep_ms,
                                           "timing": "triton.testing.do_bench median, L2 flushed before each call"},
                              "rows": []}
    print(f"{len(items)} items; warming with {args.warm_jobs} processes", flush=True)
    result["warm"] = run_warm(items, args, work, t_start + args.warm_s)
    print(f"warm: {result['warm']['done']}/{len(items)} launched in {time.monotonic() - t_start:.0f} s, "
          f"{len(result['warm']['errors'])} errors", flush=True)
    if args.device == "cuda":
        ceil_file = work / "ceilings.json"
        p = _worker("ceilings", args, work / "none.json", ["--log", str(ceil_file)])
        _wait(p, time.monotonic() + 90)
        result["ceilings"] = json.loads(ceil_file.read_text()) if ceil_file.exists() else {"error": "not measured"}
        print(f"ceilings: {json.dumps({k: v for k, v in result['ceilings'].items() if k != 'props'})}", flush=True)
    _write(args.out, result)
    run_time(items, args, work, t_start + args.budget_s, result, args.out)
    measured = [r for r in result["rows"] if r.get("status") == "measured"]
    result["wall_s"] = round(time.monotonic() - t_start, 1)
    _write(args.out, result)
    print(f"\n{len(measured)}/{len(items)} items measured in {result['wall_s']:.0f} s; results: {args.out}", flush=True)
    if args.conformance_out:
        left = args.total_s - (time.monotonic() - t_start)
        if left > 30:
            cmd = [sys.executable, "-m", "sdk.cli", "conformance", "--backend", args.backend, "--full",
                   "--jobs", str(args.conformance_jobs), "--timeout", "200", "--out", str(args.conformance_out),
                   "--resume" if args.conformance_out.exists() else "--force"]
            print(f"conformance for {left:.0f} s: {' '.join(cmd[1:])}", flush=True)
            try:
                subprocess.run(cmd, cwd=str(ROOT), timeout=left, stdout=sys.stdout, stderr=sys.stderr)
            except subprocess.TimeoutExpired:
                print("conformance stopped at the time limit (the results file continues with --resume)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
