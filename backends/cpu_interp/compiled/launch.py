"""Running a compiled kernel over its grid: arguments packed for the native code, programs split
into contiguous chunks run on a thread pool (every core; ctypes releases the GIL for the call),
one scratch arena per worker, and a fault turned into the interpreter's message.

A kernel whose atomics must apply in program order (ops_memory.program_order) runs its programs
one after another on the calling thread, as the interpreter does. When several programs fault,
the one with the lowest linear id is reported (chunks start in order and a fault stops chunks
not yet started), so the report does not depend on thread timing.
"""
from __future__ import annotations

import ctypes
import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

import numpy as np

from sdk.backend import DeviceArg
from sdk.errors import Day0Error, KernelFault

from . import jit, prepare
from .abi import FAULT_ASSERT, FAULT_OOB, FAULT_RAW, FAULT_STEP

_KERNEL = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                           ctypes.c_int64, ctypes.c_int64, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32)
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()
_LOCAL = threading.local()
#: chunks per worker: enough to balance uneven programs, few enough to keep call overhead small
_CHUNKS_PER_WORKER = 4


def workers() -> int:
    env = os.environ.get("DAY0_CPU_THREADS", "")
    return max(1, int(env)) if env.strip().isdigit() else max(1, os.cpu_count() or 1)


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL._max_workers != workers():
            _POOL = ThreadPoolExecutor(max_workers=workers(), thread_name_prefix="day0-cpu")
        return _POOL


def _drain(futures) -> None:
    """Wait until no future of `futures` runs (those not started are cancelled), even through
    further interruptions: native code cannot be stopped, and what it writes must outlive it."""
    for f in futures:
        f.cancel()
    pending = [f for f in futures if not f.done()]
    while pending:
        try:
            wait(pending)
        except BaseException:
            pass
        pending = [f for f in pending if not f.done()]


def _arena(nbytes: int) -> int:
    """This thread's scratch arena, 64-byte aligned, at least `nbytes` long."""
    buf = getattr(_LOCAL, "arena", None)
    if buf is None or buf.nbytes < nbytes + 64:
        buf = _LOCAL.arena = np.empty(max(nbytes, 1 << 16) + 64, np.uint8)
    addr = buf.ctypes.data
    return addr + (-addr) % 64


class NativeKernel:
    """A compiled kernel loaded into this process. `run(grid, args, extra)` launches it."""

    def __init__(self, module, data: bytes, meta: dict):
        self.module = prepare.lowerable(module)  # what the object was compiled from
        self.desc_flags = prepare.flag_count(module, self.module)
        self.meta = meta
        self.params: list[str] = meta["params"]
        self.fixed = {int(k): int(v) for k, v in meta.get("fixed", {}).items()}  # compiled in as constants
        self.arena = int(meta["arena"])
        self.serial = bool(meta.get("serial"))  # programs one after another, in order (ops_memory.program_order)
        self.fn = _KERNEL(jit.load(data))
        self._ops = None
        self._origins = None  # the pointer origins (provenance.py), worked out at the first fault

    # ------------------------------------------------------------------------------ launch
    def run(self, grid, args: list[Any], extra: list[DeviceArg] = (), first: int = 0) -> None:
        """Run programs `first`.. of the launch (linear order; the ones before ran elsewhere)."""
        gx, gy, gz = (int(g) for g in grid)
        total = gx * gy * gz
        if total <= first:
            return
        words, ranges, by_index = self._pack(args, list(extra))
        _LAUNCHES[0] += 1
        tensors = list(by_index.values()) + list(extra)
        a_ptr, r_ptr = words.ctypes.data, ranges.ctypes.data
        n_workers = workers()
        if total - first == 1 or n_workers == 1 or self.serial:
            fault = np.zeros(8, np.int64)
            rc = self.fn(a_ptr, r_ptr, _arena(self.arena), fault.ctypes.data, first, total, gx, gy, gz)
            if rc:
                raise self._fault(fault, tensors, by_index)
            return
        n_chunks = min(total - first, n_workers * _CHUNKS_PER_WORKER)
        bounds = [first + (total - first) * k // n_chunks for k in range(n_chunks + 1)]
        stop = threading.Event()

        def task(first: int, last: int):
            if stop.is_set():
                return None
            fault = np.zeros(8, np.int64)
            rc = self.fn(a_ptr, r_ptr, _arena(self.arena), fault.ctypes.data, first, last, gx, gy, gz)
            if rc:
                stop.set()
                return fault
            return None

        futures = [_pool().submit(task, bounds[k], bounds[k + 1]) for k in range(n_chunks)]
        try:
            faults = [f.result() for f in futures]
        except BaseException:
            # interrupted while waiting (Ctrl-C, a signal handler, a test timeout): chunks not yet
            # started are dropped, and the ones running finish before the exception frees the
            # arguments, tensors and buffers their native code is writing
            stop.set()
            _drain(futures)
            raise
        faults = [f for f in faults if f is not None]
        if faults:
            first = min(faults, key=lambda f: int(f[5]) + gx * (int(f[6]) + gy * int(f[7])))
            raise self._fault(first, tensors, by_index)
        _ = (words, ranges)  # alive until every program is done

    def _pack(self, args, extra: list[DeviceArg]) -> tuple[np.ndarray, np.ndarray, dict[int, DeviceArg]]:
        """(one i64 word per parameter; [first byte, end) per parameter, then what raw-pointer
        checks read: the mapped-memory callback, whether extra tensors were registered (then raw
        pointers must stay inside tensors), and every tensor's [first byte, end); the tensor
        arguments by parameter position)."""
        args = prepare.expand_args(args, self.desc_flags)
        n = len(self.params)
        words = np.zeros(max(n, 1), np.int64)
        known = [a for a in args if isinstance(a, DeviceArg)] + list(extra)
        ranges = np.zeros(2 * n + 3 + 2 * len(known), np.int64)
        ranges[2 * n] = _REGION_ADDR
        ranges[2 * n + 1] = int(bool(extra))
        ranges[2 * n + 2] = len(known)
        for k, a in enumerate(known):
            ranges[2 * n + 3 + 2 * k], ranges[2 * n + 4 + 2 * k] = a.address, a.address + a.nbytes
        tensors = {}
        for k, (kind, a) in enumerate(zip(self.params, args)):
            if isinstance(a, DeviceArg):
                words[k] = a.address
                ranges[2 * k], ranges[2 * k + 1] = a.address, a.address + a.nbytes
                tensors[k] = a
            elif kind == "ptr":
                words[k] = 0 if a is None else int(a)
            elif kind in ("f32", "f16", "bf16") or kind.startswith("f8"):
                v = np.float32(np.float16(a)) if kind == "f16" else np.float32(a)
                words[k] = int(np.array([v], np.float32).view(np.int32)[0])
            elif kind == "f64":
                words[k] = int(np.array([float(a)], np.float64).view(np.int64)[0])
            else:
                v = int(a) & 0xFFFFFFFFFFFFFFFF
                words[k] = v - (1 << 64) if v >= 1 << 63 else v
        for k, v in self.fixed.items():
            if words[k] != v:
                raise Day0Error(f"cpu_interp: kernel {self.module.entry.name} was compiled for parameter {k} "
                                f"= {v} (a host descriptor's innermost stride), and is launched with {words[k]}")
        return words, ranges, tensors

    # ------------------------------------------------------------------------------ faults
    def _op(self, index: int):
        if self._ops is None:
            self._ops = list(self.module.walk())
        return self._ops[index]

    def _fault(self, rec: np.ndarray, tensors: list[DeviceArg], by_index: dict[int, DeviceArg]) -> KernelFault:
        from ..values import where
        kind, index = int(rec[0]), int(rec[1])
        op = self._op(index)
        pid = (int(rec[5]), int(rec[6]), int(rec[7]))
        if kind == FAULT_ASSERT:
            msg = op.attrs.get("message", "")
            return KernelFault(f"device assertion failed in program {pid} at {where(op)}"
                               + (f" ({msg})" if msg else ""))
        if kind == FAULT_STEP:
            return KernelFault(f"scf.for with a non-positive step ({int(rec[2])}), at {where(op)}")
        if kind == FAULT_RAW:
            return _raw(op, int(rec[2]), int(rec[3]), bool(rec[4]), pid, tensors,
                        strict=len(tensors) > len(by_index))
        if kind == FAULT_OOB:
            if self._origins is None:
                from ..provenance import pointer_origins
                self._origins = pointer_origins(self.module)
            origin = [by_index.get(k) for k in sorted(self._origins.args.get(op, ()))]
            return _oob(op, int(rec[2]), int(rec[3]), pid, tensors, origin)
        return KernelFault(f"internal: unknown fault kind {kind} at {where(op)}")


def _raw(op, lo: int, hi: int, write: bool, pid, tensors: list[DeviceArg], strict: bool) -> KernelFault:
    """The interpreter's faults for a raw pointer that left every tensor of the launch: against the
    nearest tensor when tensors were registered with extra_tensors, else at `lo`, the lowest
    address of a lane that no mapping of the process covers."""
    from ..values import where
    from .types import pointee
    what = {"tt.load": "load from", "tt.store": "store to"}.get(op.name, "atomic on")
    width = pointee(op.operands[0].type).width
    if strict and tensors:
        below = [t for t in tensors if t.address <= lo]
        arg = max(below, key=lambda t: t.address) if below else min(tensors, key=lambda t: t.address)
        off = lo - arg.address
        return KernelFault(
            f"out-of-bounds {what} '{arg.name}': elements [{off // width}, {-(-(off + width) // width)}) "
            f"(bytes [{off}, {off + width})) of a {arg.nbytes // width}-element ({arg.nbytes}-byte) tensor "
            f"in program {pid}, at {where(op)}")
    bad = lo
    access = "writable " if write else ""
    return KernelFault(
        f"{what} address {bad:#x} through a raw pointer in program {pid}: the address is in no tensor argument "
        f"and in no {access}mapped memory, at {where(op)} (tensors a pointer table addresses can be registered "
        f"with backends.cpu_interp.extra_tensors to have their bounds checked)")


# ------------------------------------------------------------------------- mapped memory
#: the process's accessible runs of mappings, read from the OS's map when first asked and again
#: (at most once per launch) when it does not hold an address: {"r": (starts, ends), "rw": ...}
_MAPS: dict = {"runs": None, "launch": -1}
_LAUNCHES = [0]  # counted by NativeKernel.run


def _region(lo: int, hi: int, write: int, out: int) -> int:
    """Whether [lo, hi) lies in mappings of this process (readable, and writable when `write`);
    if so, writes the first byte and the end of the run of such mappings holding it at `out`
    (two i64): the callback raw-pointer checks call."""
    from ..addressing import accessible_runs, process_maps, run_holding
    for fresh in (False, True):
        if fresh or _MAPS["runs"] is None:
            if fresh and _MAPS["launch"] == _LAUNCHES[0]:
                break  # read during this launch already: memory mapped since is not the reason
            _MAPS["runs"], _MAPS["launch"] = accessible_runs(process_maps()), _LAUNCHES[0]
        run = run_holding(_MAPS["runs"], lo, hi, bool(write))
        if run is not None:
            (ctypes.c_int64 * 2).from_address(out)[:] = list(run)
            return 1
    return 0


_REGION = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                           ctypes.c_int64)(_region)
_REGION_ADDR = ctypes.cast(_REGION, ctypes.c_void_p).value


def _oob(op, lo_addr: int, hi_addr: int, pid, tensors: list[DeviceArg], origin) -> KernelFault:
    """The interpreter's out-of-bounds message (memory.Memory._fault) from the compiled tier's
    fault record: the lowest and highest live address of the faulting program's access."""
    from ..values import where
    from .types import pointee
    what = {"tt.load": "load from", "tt.store": "store to"}.get(op.name, "atomic on")
    known = [a for a in origin if a is not None]
    width = pointee(op.operands[0].type).width
    def holds(r, x):
        return r.address <= x and x + width <= r.address + r.nbytes
    bad = next((x for x in (lo_addr, hi_addr) if not any(holds(r, x) for r in known)), lo_addr)
    if not known:
        return KernelFault(f"{what} at address {bad:#x}, outside every tensor argument, at {where(op)}")
    arg = known[0] if len(known) == 1 else min(
        known, key=lambda r: min(abs(bad - r.address), abs(bad - r.address - r.nbytes)))
    lo, hi = lo_addr - arg.address, hi_addr - arg.address + width
    n = arg.nbytes // width
    other = next((t for t in tensors if t.address <= bad < t.address + t.nbytes), None)
    inside = f" (inside '{other.name}', another argument)" if other is not None and other is not arg else ""
    return KernelFault(
        f"out-of-bounds {what} '{arg.name}': elements [{lo // width}, {-(-hi // width)}) (bytes [{lo}, {hi})) "
        f"of a {n}-element ({arg.nbytes}-byte) tensor{inside} in program {pid}, at {where(op)}")
