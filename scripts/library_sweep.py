"""Sweep the public Triton-backed ops of flash-linear-attention (fla-core) and Liger Kernel on a
day0 backend (cpu_interp by default), well beyond the library tier's items.

Each op runs at small, realistic shapes on seeded inputs (never all zeros), forward and, where the
op has autograd, backward with seeded cotangents; every tensor the library allocates is poisoned
(NaN) first. Outputs and gradients are compared with an independent reference computed with plain
PyTorch in fp64 (the library's own naive implementation where it ships one, else one written in
`library_sweep_fla.py` / `library_sweep_liger.py`), which must launch no Triton kernel. An op passes
when a kernel of the library ran on the backend and every compared tensor is within its relative
error bound (||lib - ref|| / ||ref||); it fails (with the largest errors), errors (exception class
and first line), crashes or times out, or is skipped (with why).

Ops run in a worker process, one after another; a worker that dies or hangs is replaced and the
op it was running is recorded as crash / timeout. Results: a markdown table and a JSON file.

    python scripts/library_sweep.py --out results/cpu_interp/library_sweep [--force]
    python scripts/library_sweep.py --only 'fla.ops.gla.*,liger.rms_norm' --out /tmp/s --force
    python scripts/library_sweep.py --list

Another sweep (scripts/thirdparty_sweep.py) reuses this machinery with its own `Sweep`: its ops,
its libraries and its file as the worker's entry point.

Exit status: 0 when every op passed or has a stated reason (its `expect`), 1 when some non-pass
has none (a suspected backend bug), 2 for bad command-line input.
"""
from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
SCRIPTS = Path(__file__).resolve().parent
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))

DTYPES = {"fp32": "float32", "bf16": "bfloat16"}
# relative error bounds (||lib - ref|| / ||ref||) unless an op states its own
DEFAULT_TOL = {"fp32": 1e-4, "bf16": 2e-2}
LIBS = {"fla": "fla-core", "liger": "liger-kernel"}


@dataclass
class SweepOp:
    """One public op of a library, as the sweep calls it."""

    name: str                                   # "fla.ops.gla.chunk_gla" / "liger.rms_norm"
    lib: str                                    # "fla" / "liger"
    make: Callable[[Any, Any], dict]            # (generator, dtype) -> named inputs
    call: Callable[[dict], dict]                # the library call -> named outputs
    ref: Callable[[dict], dict]                 # the reference on fp64 copies -> named outputs
    grads: tuple[str, ...] = ()                 # inputs to differentiate (empty: forward only)
    dtypes: tuple[str, ...] = ("fp32",)
    tol: dict[str, float] = field(default_factory=dict)   # "fp32" / "bf16" / "name@bf16" -> bound
    skip: str = ""                              # why it is not run
    expect: str = ""                            # the stated reason of a known non-pass ("b: ...")
    note: str = ""                              # shapes, variant
    no_cotangent: tuple[str, ...] = ()          # outputs compared but not backpropagated through
    cpu_tier: str = ""                          # "interp" / "compiled": run in a worker with
                                                # DAY0_CPU_TIER set so; "" keeps the sweep's default
    context: Callable[[], Any] | None = None    # a context manager around the library's calls
                                                # (forward and backward), e.g. a stated stand-in

    def bound(self, name: str, dtype: str) -> float:
        for key in (f"{name}@{dtype}", name, dtype):
            if key in self.tol:
                return self.tol[key]
        return DEFAULT_TOL[dtype]


class NotInstalled(Exception):
    """Raised by an op's `make` when its library cannot be imported: the item is `skipped` with
    this message (what to install), never a pass or a failure."""


def all_ops() -> list[SweepOp]:
    import library_sweep_fla
    import library_sweep_liger
    return library_sweep_fla.OPS + library_sweep_liger.OPS


@dataclass(frozen=True)
class Sweep:
    """One sweep script: its ops, the libraries they come from and the file its workers run."""

    title: str                                  # "Library sweep"
    script: Path                                # the script; run with --worker in each worker
    libs: dict[str, str]                        # kernel origin (sdk.launches) -> pip distribution
    load: Callable[[], list[SweepOp]]           # the ops, imported in the worker too
    legend: str = ("`class`: (b) the library itself needs CUDA, (c) the reference or bound is the "
                   "sweep's.")


SWEEP = Sweep("Library sweep", Path(__file__).resolve(), LIBS, all_ops)


def item_ids(ops: list[SweepOp]) -> list[str]:
    return [f"{op.name}@{dt}" for op in ops for dt in op.dtypes]


# ------------------------------------------------------------------------------ one op, in-process
def _cast_inputs(x: dict, grads: tuple[str, ...], dtype: Any | None) -> dict:
    import torch
    out = {}
    for n, t in x.items():
        if isinstance(t, torch.Tensor):
            t = t.detach().clone()
            if dtype is not None and t.is_floating_point():
                t = t.to(dtype)
            if n in grads:
                t.requires_grad_(True)
        out[n] = t
    return out


def _outputs(res: dict) -> dict:
    import torch
    return {n: t for n, t in res.items() if isinstance(t, torch.Tensor)}


def _rel(a: Any, b: Any) -> tuple[float, float, bool]:
    """(relative error, max abs error, lib finite where ref finite)."""
    import torch
    a, b = a.detach().double().reshape(b.shape), b.detach().double()
    finite = torch.isfinite(b)
    ok = bool(torch.isfinite(a)[finite].all())
    d = (a - b)[finite] if ok else torch.nan_to_num(a - b, nan=1e30, posinf=1e30, neginf=1e30)[finite]
    if d.numel() == 0:
        return 0.0, 0.0, ok
    denom = float(b[finite].norm())
    rel = float(d.norm()) / max(denom, 1e-30) if denom > 0 else float(d.norm())
    return rel, float(d.abs().max()), ok


def run_one(op: SweepOp, dtype_name: str) -> dict:
    """Run `op` at `dtype_name` on the active backend; the result record (without timing)."""
    import torch
    from sdk import launches
    from sdk.conformance.library import poisoned_allocations

    dtype = getattr(torch, DTYPES[dtype_name])
    seed = zlib.crc32(f"{op.name}@{dtype_name}".encode())
    gen = torch.Generator().manual_seed(seed)
    base = op.make(gen, dtype)
    xl = _cast_inputs(base, op.grads, None)
    around = op.context() if op.context else contextlib.nullcontext()
    with launches.record() as rec, poisoned_allocations(), around:
        out = _outputs(op.call(xl))
        cot = {}
        if op.grads:
            gcot = torch.Generator().manual_seed(seed + 1)
            diff = {n: t for n, t in out.items()
                    if t.requires_grad and t.is_floating_point() and n not in op.no_cotangent}
            for n, t in diff.items():
                cot[n] = torch.randn(t.shape, generator=gcot, dtype=torch.float32).to(t.dtype)
            # copies: a library's backward may write into its cotangents (Liger's in_place=True)
            torch.autograd.backward([diff[n] for n in cot], [cot[n].clone() for n in cot])
            for n in op.grads:
                if xl[n].grad is not None:
                    out["d" + n] = xl[n].grad
    mine = [k for k in rec.kernels if k.origin == op.lib]
    tiers = sorted({k.tier for k in mine if k.tier})
    if op.cpu_tier and tiers and tiers != [op.cpu_tier]:
        return {"kernels": sorted({k.name for k in mine}), "tiers": tiers, "status": "error",
                "detail": f"asked for cpu tier {op.cpu_tier}, ran on {'/'.join(tiers)}"}
    record = {"kernels": sorted({k.name for k in mine}), "tiers": tiers,
              "other_kernels": sorted({f"{k.origin}:{k.name}" for k in rec.kernels if k.origin != op.lib})}
    faults = [k for k in rec.kernels if k.status in ("fault", "unsupported")]
    if faults:
        k = faults[0]
        return {**record, "status": "fail", "detail": f"kernel {k.name} {k.status}: {k.detail.splitlines()[0] if k.detail else ''}"}
    if not any(k.status == "ran" for k in mine):
        return {**record, "status": "fail",
                "detail": f"no {op.lib} Triton kernel ran on the backend (the library took another path)"}

    xr = _cast_inputs(base, op.grads, torch.float64)
    with launches.record() as rrec:
        ref = _outputs(op.ref(xr))
        if op.grads:
            pairs = [(ref[n], cot[n].double()) for n in cot if n in ref and ref[n].requires_grad]
            torch.autograd.backward([p[0] for p in pairs], [p[1] for p in pairs])
            for n in op.grads:
                if xr[n].grad is not None:
                    ref["d" + n] = xr[n].grad
    if rrec.kernels:
        return {**record, "status": "error", "detail": "reference launched Triton kernels "
                f"({', '.join(sorted(k.name for k in rrec.kernels))}): not independent"}
    errors, worst = {}, []
    for n, r in ref.items():
        if n not in out:
            if n.startswith("d"):
                worst.append(f"{n}: the library gave no gradient")
            continue
        rel, mx, ok = _rel(out[n], r)
        bound = op.bound(n, dtype_name)
        errors[n] = {"rel": rel, "max_abs": mx, "bound": bound, "finite": ok}
        if not ok:
            worst.append(f"{n}: non-finite values (NaN/inf) where the reference is finite")
        elif not rel <= bound:
            worst.append(f"{n}: rel {rel:.2e} > {bound:.0e} (max abs {mx:.2e})")
    status = "fail" if worst else "pass"
    return {**record, "status": status, "errors": errors, "detail": "; ".join(worst[:4])}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


def worker(ids: list[str], results: Path, backend: str, sweep: Sweep = SWEEP) -> None:
    """Run the items `ids` one after another, appending a start line and a result line each."""
    os.environ.setdefault("TRITON_DEFAULT_BACKEND", backend)
    import warnings
    warnings.filterwarnings("ignore")
    import sdk
    sdk.activate(backend)
    ops = {op.name: op for op in sweep.load()}
    with open(results, "a", encoding="utf-8") as fh:
        for item in ids:
            name, dt = item.rsplit("@", 1)
            op = ops[name]
            fh.write(json.dumps({"id": item, "start": True}) + "\n")
            fh.flush()
            t0 = time.perf_counter()
            try:
                rec = run_one(op, dt)
            except NotInstalled as exc:
                rec = {"status": "skipped", "detail": str(exc)}
            except Exception as exc:  # the library's or the backend's error, recorded
                rec = _not_installed(exc, op, sweep) or _error(exc)
            rec.update(id=item, seconds=round(time.perf_counter() - t0, 2))
            fh.write(json.dumps(rec) + "\n")
            fh.flush()


def _not_installed(exc: Exception, op: SweepOp, sweep: Sweep) -> dict | None:
    """A `skipped` record when `exc` says the op's own library is missing (the module not found is
    its origin or its pip distribution's import name: liger-kernel -> liger_kernel); else None."""
    dist = sweep.libs.get(op.lib, op.lib)
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] in (op.lib, dist.replace("-", "_")):
        return {"status": "skipped", "detail": f"not installed: pip install {dist} ({_first_line(exc)})"}
    return None


def _error(exc: Exception) -> dict:
    """An `error` record: the exception's first line and the innermost file:line it came from."""
    tb = traceback.extract_tb(exc.__traceback__)
    where = next((f"{Path(f.filename).name}:{f.lineno}" for f in reversed(tb)), "")
    return {"status": "error", "detail": _first_line(exc), "where": where}


# ------------------------------------------------------------------------------ the driver
def _read_lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # a line cut short by a crash
    return out


def drive(ops: list[SweepOp], backend: str, timeout: float, log: Callable[[str], None],
          sweep: Sweep = SWEEP) -> dict[str, dict]:
    """Run every item in worker processes; a worker that dies or stalls is replaced. Items of ops
    that ask for a cpu tier run in workers of their own with DAY0_CPU_TIER set (a kernel keeps the
    tier it was loaded with, so one process runs one tier)."""
    results: dict[str, dict] = {}
    for op in ops:
        if op.skip:
            for dt in op.dtypes:
                results[f"{op.name}@{dt}"] = {"id": f"{op.name}@{dt}", "status": "skipped", "detail": op.skip}
    tier_of = {f"{op.name}@{dt}": op.cpu_tier for op in ops for dt in op.dtypes}
    pending = [i for i in item_ids(ops) if i not in results]
    with tempfile.TemporaryDirectory(prefix="day0-sweep-") as tmp:
        path = Path(tmp) / "results.jsonl"
        while pending:
            tier = tier_of[pending[0]]
            todo = [i for i in pending if tier_of[i] == tier]
            env = dict(os.environ, TRITON_DEFAULT_BACKEND=backend)
            if tier:
                env["DAY0_CPU_TIER"] = tier
            env.setdefault("DAY0_CPU_TIER", "auto")
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
            ids_file = Path(tmp) / "ids.json"
            ids_file.write_text(json.dumps(todo))
            proc = subprocess.Popen([sys.executable, str(sweep.script), "--worker", str(ids_file), str(path),
                                     "--backend", backend], env=env, stdout=subprocess.DEVNULL,
                                    stderr=open(Path(tmp) / "worker.err", "ab"))
            seen, started, last = len(_read_lines(path)), None, time.monotonic()
            while True:
                rc = proc.poll()
                lines = _read_lines(path)
                for line in lines[seen:]:
                    if line.get("start"):
                        started, last = line["id"], time.monotonic()
                    else:
                        results[line["id"]] = line
                        log(f"{line['status']:8s} {line['id']}  {line.get('seconds', 0):.1f}s  "
                            f"{line.get('detail', '')[:150]}")
                        started = None
                seen = len(lines)
                if rc is not None:
                    break
                if started and time.monotonic() - last > timeout:
                    proc.kill()  # the worker this loop started
                    proc.wait()
                    results[started] = {"id": started, "status": "timeout",
                                        "detail": f"no result in {timeout:.0f} s", "seconds": timeout}
                    log(f"timeout  {started}")
                    started = None
                    break
                time.sleep(0.5)
            if started:  # the worker died inside this item
                err = (Path(tmp) / "worker.err").read_text(errors="replace").strip().splitlines()
                results[started] = {"id": started, "status": "crash",
                                    "detail": f"worker exited with {proc.returncode}: {err[-1][:200] if err else ''}"}
                log(f"crash    {started}")
            elif proc.returncode not in (0, None, -9):
                err = (Path(tmp) / "worker.err").read_text(errors="replace").strip().splitlines()
                raise RuntimeError(f"sweep worker failed before any op: {err[-1] if err else proc.returncode}")
            pending = [i for i in pending if i not in results]
    return results


# ------------------------------------------------------------------------------ reports
def _versions(dists: tuple[str, ...] = ("fla-core", "liger-kernel")) -> dict:
    import importlib.metadata as md
    out = {}
    for dist in (*dists, "triton", "torch", "day0-sdk"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def report(ops: list[SweepOp], results: dict[str, dict], backend: str, wall: float,
           sweep: Sweep = SWEEP, command: str = "") -> tuple[str, dict]:
    rows = []
    for op in ops:
        for dt in op.dtypes:
            r = results.get(f"{op.name}@{dt}", {"status": "missing", "detail": ""})
            cls = ""
            if r["status"] != "pass" and op.expect:
                cls = op.expect
            rows.append({"op": op.name, "lib": sweep.libs[op.lib], "dtype": dt, "status": r["status"],
                         "detail": r.get("detail", ""), "class": cls, "note": op.note,
                         "seconds": r.get("seconds"), "tiers": r.get("tiers", []),
                         "kernels": r.get("kernels", []), "errors": r.get("errors", {}),
                         "where": r.get("where", "")})
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    dists = tuple(dict.fromkeys(sweep.libs.values()))
    script = f"scripts/{sweep.script.name}"
    command = command or f"python {script}"
    meta = {"backend": backend, "cpu_tier": os.environ.get("DAY0_CPU_TIER", "auto"), "command": command,
            "versions": _versions(dists), "host": f"{platform.machine()}, {os.cpu_count()} cores",
            "wall_seconds": round(wall, 1), "counts": counts,
            "tolerance": "relative error ||lib - ref|| / ||ref|| per output and gradient; "
                         f"default bounds {DEFAULT_TOL}"}
    v = meta["versions"]
    libs = ", ".join(f"{d} {v[d]}" for d in dists)
    lines = [f"# {sweep.title} on {backend}", "",
             f"Generated by `{command}`; {libs}, triton {v['triton']}, torch {v['torch']}; DAY0_CPU_TIER="
             f"{meta['cpu_tier']}; {meta['host']}; {meta['wall_seconds']:.0f} s.", "",
             "Every op runs forward (and backward where it has autograd) on seeded inputs against a "
             "PyTorch reference in fp64; errors are relative (||lib - ref|| / ||ref||). "
             f"{sweep.legend}", "",
             "Counts: " + ", ".join(f"{k} {n}" for k, n in sorted(counts.items())), "",
             "| op | dtype | status | tier | worst error | detail / class | s |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        worst = max(row["errors"].items(), key=lambda kv: kv[1]["rel"] / kv[1]["bound"], default=None)
        werr = f"{worst[0]} {worst[1]['rel']:.1e}" if worst else ""
        detail = (row["detail"] + (f" [{row['class']}]" if row["class"] else "")).replace("|", "\\|")
        secs = f"{row['seconds']:.0f}" if row["seconds"] is not None else ""
        lines.append(f"| `{row['op']}` | {row['dtype']} | {row['status']} | {'/'.join(row['tiers'])} | "
                     f"{werr} | {detail[:220]} | {secs} |")
    return "\n".join(lines) + "\n", {"meta": meta, "results": rows}


def main(argv: list[str] | None = None, sweep: Sweep = SWEEP, description: str = "") -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        backend = argv[argv.index("--backend") + 1] if "--backend" in argv else "cpu_interp"
        worker(json.loads(Path(argv[1]).read_text()), Path(argv[2]), backend, sweep)
        return 0
    ap = argparse.ArgumentParser(description=description or __doc__.split("\n\n")[0])
    ap.add_argument("--out", help="output path without suffix: writes OUT.md and OUT.json")
    ap.add_argument("--force", action="store_true", help="overwrite existing output files")
    ap.add_argument("--only", default="", help="comma-separated op-name patterns (fnmatch)")
    ap.add_argument("--backend", default="cpu_interp")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds an op may run (default 600)")
    ap.add_argument("--list", action="store_true", help="list the ops and exit")
    args = ap.parse_args(argv)
    ops = sweep.load()
    if args.only:
        pats = [p.strip() for p in args.only.split(",") if p.strip()]
        ops = [op for op in ops if any(fnmatch.fnmatch(op.name, p) or p in op.name for p in pats)]
        if not ops:
            print(f"error: --only {args.only!r} matches no op (see --list)", file=sys.stderr)
            return 2
    if args.list:
        for op in ops:
            print(f"{op.name:60s} {','.join(op.dtypes):10s} {'skip: ' + op.skip if op.skip else op.note}")
        return 0
    if not args.out:
        print("error: --out is required (output path without suffix)", file=sys.stderr)
        return 2
    if args.timeout <= 0:
        print("error: --timeout must be positive", file=sys.stderr)
        return 2
    md_path, json_path = Path(args.out + ".md"), Path(args.out + ".json")
    for p in (md_path, json_path):
        if p.exists() and not args.force:
            print(f"error: {p} exists; pass --force to overwrite it", file=sys.stderr)
            return 2
        if not p.parent.is_dir():
            print(f"error: {p.parent} is not a directory", file=sys.stderr)
            return 2
    from sdk.fileio import atomic_write_text, json_text
    t0 = time.monotonic()
    results = drive(ops, args.backend, args.timeout, lambda s: print(s, flush=True), sweep)
    command = " ".join(["python", f"scripts/{sweep.script.name}", *argv])
    text, data = report(ops, results, args.backend, time.monotonic() - t0, sweep, command)
    atomic_write_text(md_path, text)
    atomic_write_text(json_path, json_text(data, indent=1) + "\n")
    unexplained = [r for r in data["results"] if r["status"] not in ("pass", "skipped") and not r["class"]]
    print(f"wrote {md_path} and {json_path}: " + ", ".join(f"{k} {n}" for k, n in sorted(data['meta']['counts'].items())))
    if unexplained:
        print(f"{len(unexplained)} non-pass item(s) without a stated reason (suspected backend bugs): "
              + ", ".join(f"{r['op']}@{r['dtype']}" for r in unexplained[:20]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
