"""Running a compiled kernel over its grid: arguments packed for the native code, programs split
into contiguous chunks run on a thread pool (every core; ctypes releases the GIL for the call),
one scratch arena per worker, and a fault turned into the interpreter's message.

When several programs fault, the one with the lowest linear id is reported (chunks start in order
and a fault stops chunks not yet started), so the report does not depend on thread timing.
"""
from __future__ import annotations

import ctypes
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from sdk.backend import DeviceArg, TensorDescArg
from sdk.errors import KernelFault

from . import jit
from .core import FAULT_ASSERT, FAULT_OOB, FAULT_STEP

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
        self.module = module
        self.meta = meta
        self.params: list[str] = meta["params"]
        self.arena = int(meta["arena"])
        self.fn = _KERNEL(jit.load(data))
        self._ops = None

    # ------------------------------------------------------------------------------ launch
    def run(self, grid, args: list[Any], extra: list[DeviceArg] = ()) -> None:
        gx, gy, gz = (int(g) for g in grid)
        total = gx * gy * gz
        if total == 0:
            return
        words, ranges, by_index = self._pack(args)
        tensors = list(by_index.values()) + list(extra)
        a_ptr, r_ptr = words.ctypes.data, ranges.ctypes.data
        n_workers = workers()
        if total == 1 or n_workers == 1:
            fault = np.zeros(8, np.int64)
            rc = self.fn(a_ptr, r_ptr, _arena(self.arena), fault.ctypes.data, 0, total, gx, gy, gz)
            if rc:
                raise self._fault(fault, tensors, by_index)
            return
        n_chunks = min(total, n_workers * _CHUNKS_PER_WORKER)
        bounds = [total * k // n_chunks for k in range(n_chunks + 1)]
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
        faults = [f.result() for f in futures]
        faults = [f for f in faults if f is not None]
        if faults:
            first = min(faults, key=lambda f: int(f[5]) + gx * (int(f[6]) + gy * int(f[7])))
            raise self._fault(first, tensors, by_index)
        _ = (words, ranges)  # alive until every program is done

    def _pack(self, args) -> tuple[np.ndarray, np.ndarray, dict[int, DeviceArg]]:
        """(one i64 word per parameter, [first byte, end] per parameter, the tensor arguments by
        parameter position)."""
        n = len(self.params)
        words = np.zeros(max(n, 1), np.int64)
        ranges = np.zeros(2 * max(n, 1), np.int64)
        tensors = {}
        for k, (kind, a) in enumerate(zip(self.params, args)):
            if isinstance(a, TensorDescArg):
                raise KernelFault("internal: a tensor descriptor reached the compiled tier")
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
        return words, ranges, tensors

    # ------------------------------------------------------------------------------ faults
    def _op(self, index: int):
        if self._ops is None:
            self._ops = list(self.module.walk())
        return self._ops[index]

    def _fault(self, rec: np.ndarray, tensors: list[DeviceArg], by_index: dict[int, DeviceArg]) -> KernelFault:
        from ..interp import where
        kind, index = int(rec[0]), int(rec[1])
        op = self._op(index)
        pid = (int(rec[5]), int(rec[6]), int(rec[7]))
        if kind == FAULT_ASSERT:
            msg = op.attrs.get("message", "")
            return KernelFault(f"device assertion failed in program {pid} at {where(op)}"
                               + (f" ({msg})" if msg else ""))
        if kind == FAULT_STEP:
            return KernelFault(f"scf.for with a non-positive step ({int(rec[2])}), at {where(op)}")
        if kind == FAULT_OOB:
            origin = [by_index.get(k) for k in sorted(op.__dict__.get("origin_args") or ())]
            return _oob(op, int(rec[2]), int(rec[3]), pid, tensors, origin)
        return KernelFault(f"internal: unknown fault kind {kind} at {where(op)}")


def _oob(op, lo_addr: int, hi_addr: int, pid, tensors: list[DeviceArg], origin) -> KernelFault:
    """The interpreter's out-of-bounds message (memory.Memory._fault) from the compiled tier's
    fault record: the lowest and highest live address of the faulting program's access."""
    from ..interp import where
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
