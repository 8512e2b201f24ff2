"""A conformance worker: a long-lived process that runs items one at a time for the runner.

    python -m sdk.conformance.worker

Protocol (JSON Lines): the worker imports the suite, then writes {"ready": true, "pid": N} on its
result channel; it then reads one request per line on stdin,
    {"backend": "cpu_interp", "kernel": "rmsnorm", "case": "...", "dtype": "bf16"}
and answers each with one line holding the outcome fields of a `Record` (status, max_abs, max_rel,
rmse, detail, unsupported_ops, wall_s, launch_s, launch_stats, phase_s, phase_peak_mb, peak_rss_mb;
for a library-tier item also library and kernels, or status "skipped" when the library does not
import). The result channel is the process's original stdout; fd 1 is pointed at stderr so that
whatever a kernel or backend prints cannot corrupt it. A segfault or hang is the runner's business: it sees the process die or time out.
"""
from __future__ import annotations

import faulthandler
import json
import math
import os
import sys
import time
import traceback
from typing import Any

MAX_DETAIL = 600


def one_line(text: str, limit: int = MAX_DETAIL) -> str:
    flat = " ".join(part.strip() for part in str(text).splitlines() if part.strip())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _kernel_line(exc: BaseException, spec: Any) -> str:
    """'file.py:42: source' of the innermost traceback frame inside the kernel's own module."""
    import inspect
    try:
        home = os.path.realpath(inspect.getsourcefile(spec.run) or "")
    except TypeError:
        return ""
    best = ""
    for e in _chain(exc):
        for frame in traceback.extract_tb(e.__traceback__):
            if os.path.realpath(frame.filename) == home:
                best = f"{os.path.basename(frame.filename)}:{frame.lineno}: {(frame.line or '').strip()}"
    return best


def describe(exc: BaseException, spec: Any) -> str:
    """One line: the exception type and message, plus the kernel source line when known."""
    text = f"{type(exc).__name__}: {one_line(str(exc)) or '(no message)'}"
    where = _kernel_line(exc, spec)
    return one_line(f"{text} [at {where}]" if where and where not in text else text)


def _num(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    return x


_RESOURCE_TEXT = ("out of memory", "cuda error: out of memory", "cudaerrormemoryallocation",
                  "hip out of memory", "resource exhausted")


def is_resource_failure(exc: BaseException) -> bool:
    """The device (or host) ran out of memory: a fact about the run (other items share the device),
    not about the kernel. Triton's OutOfResources (shared memory, registers) is the kernel's own
    configuration exceeding the target, and stays a kernel failure."""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    if type(exc).__name__ == "OutOfResources":
        return False
    text = str(exc).lower()
    return any(t in text for t in _RESOURCE_TEXT)


def rss_mb() -> float:
    """This process's resident memory, in MB (Linux /proc; 0 where it cannot be read)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
    except (OSError, ValueError, IndexError):
        return 0.0


def _die_with_parent() -> None:
    """A worker whose runner is gone (killed with -9) kills its own process group, forked children
    and all, instead of lingering: a thread watches the parent."""
    import threading
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                try:
                    os.killpg(os.getpgid(0), 9)
                finally:
                    os._exit(1)

    threading.Thread(target=watch, name="day0-parent-watch", daemon=True).start()


def run_item(suite: dict, request: dict) -> dict:
    """Run one item in this process and return its outcome fields."""
    import sdk
    from sdk.backend import registry
    from sdk.errors import UnsupportedOps

    from .check import compile_case, run_case
    from .library import library_of, no_library_kernel, session

    spec = suite[request["kernel"]]
    case = next(c for c in spec.cases if c.name == request["case"])
    dtype = request["dtype"]
    name = request["backend"]
    compile_only = "/compile" in name
    out: dict[str, Any] = {"max_abs": None, "max_rel": None, "rmse": None, "detail": "",
                           "unsupported_ops": [], "launch_s": None, "launch_stats": []}
    start = time.perf_counter()
    backend = None
    lib = launched = None
    from sdk import launches
    seen = launches.Recorder()
    launches.RECORDERS.append(seen)  # every kernel the item compiles or launches: how native it ran
    try:
        lib = library_of(spec)  # None for the suite's own kernels
        backend = registry.get(name)
        backend.take_launch_stats()  # drop whatever an earlier item left behind
        with sdk.activate(name):
            # a library is imported only now, with the backend selected (FLA caches its device)
            missing = lib.missing() if lib is not None else ""
            if missing:
                out.update(status="skipped", detail=missing)
            else:
                if lib is not None:
                    out["library"] = lib.label()
                with session(lib) as launched:
                    if compile_only:
                        out["launch_s"] = compile_case(spec, case, dtype, backend.torch_device)
                        out["status"] = "compiled"
                    else:
                        v = run_case(spec, case, dtype, backend.torch_device)
                        out.update(status=v.status, max_abs=_num(v.max_abs), max_rel=_num(v.max_rel),
                                   rmse=_num(v.rmse), detail=one_line(v.detail), launch_s=v.wall_s,
                                   phase_s=v.phase_s, phase_peak_mb=v.phase_peak_mb)
                        if v.phase_peak_mb:
                            out["peak_rss_mb"] = max(v.phase_peak_mb.values())
                if lib is not None and out["status"] in ("pass", "compiled"):
                    why = no_library_kernel(lib, launched, compile_only)
                    if why:
                        out.update(status="failed" if compile_only else "fail", detail=why)
    except Exception as exc:  # noqa: BLE001 - every failure becomes a record
        unsupported = next((e for e in _chain(exc) if isinstance(e, UnsupportedOps)), None)
        if unsupported is not None:
            out["status"] = "unsupported"
            out["unsupported_ops"] = [{"name": op.name, "signature": op.signature, "loc": op.loc,
                                       "source": op.source} for op in unsupported.ops]
            keys = sorted({op.key() for op in unsupported.ops})
            out["detail"] = one_line(f"missing lowering for {', '.join(keys)}")
        elif any(is_resource_failure(e) for e in _chain(exc)):
            out["status"] = "resource"  # the device ran out: says nothing about the kernel
            out["detail"] = describe(exc, spec)
        else:
            out["status"] = "failed" if compile_only else "error"
            out["detail"] = describe(exc, spec)
    finally:
        launches.RECORDERS.remove(seen)
    shares = [k.native for k in seen.kernels if k.native is not None]
    if shares and min(shares) < 1.0:  # a backend borrowing rules (delegation) says how much was its own
        out["native"] = round(min(shares), 4)
        out["borrowed_ops"] = sorted({op for k in seen.kernels for op in k.borrowed_ops})
    out["rss_mb"] = rss_mb()
    if launched is not None:  # the library's kernels, as far as the item got
        out["kernels"] = [k.to_json() for k in launched.kernels]
    if backend is not None:
        try:
            from .results import launch_stats_of  # whatever the hook returned, as JSON objects
            out["launch_stats"] = launch_stats_of(backend.take_launch_stats())
        except Exception as exc:  # noqa: BLE001
            out["launch_stats"] = [{"error": one_line(f"{type(exc).__name__}: {exc}")}]
    out["wall_s"] = time.perf_counter() - start
    return out


def main() -> int:
    if os.getcwd() not in sys.path:  # vendor modules next to the run (DAY0_BACKENDS, DAY0_KERNELS), last
        sys.path.append(os.getcwd())
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)  # anything printed from here on goes to stderr
    faulthandler.enable(file=sys.stderr, all_threads=False)
    _die_with_parent()

    def send(msg: dict) -> None:
        channel.write(json.dumps(msg) + "\n")
        channel.flush()

    try:
        from .runner import load_suite
        suite = load_suite()
    except Exception as exc:  # noqa: BLE001
        send({"fatal": one_line(f"{type(exc).__name__}: {exc}")})
        return 3
    send({"ready": True, "pid": os.getpid()})
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        print(f"day0-worker: {request['kernel']}/{request['case']}/{request['dtype']} "
              f"on {request['backend']}", file=sys.stderr, flush=True)
        send(run_item(suite, request))
    return 0


if __name__ == "__main__":
    sys.exit(main())
