"""The reference interpreter's memory: the launch's tensors, addressed by int64 pointers, checked.

An access (load, store, atomic) is an array of addresses and a mask of its live lanes. Every live
lane must address a whole element of one tensor (an argument, or one registered with
`backends.cpu_interp.extra_tensors`): inside it and aligned to the element size from its start.
A raw pointer (made from an integer or loaded from a pointer table: provenance.py says which
accesses use one) may also address memory the process has mapped, as on a device, unless tensors
were registered with `extra_tensors` (then it too must stay inside known tensors). Otherwise the
access is a KernelFault naming the program, the address, the tensor nearest to it and the source
line, and nothing is read or written. Masked-off lanes are never touched: a load gives them
`other` (zero without one).
"""
from __future__ import annotations

import bisect
import ctypes

import numpy as np

from sdk.backend import DeviceArg
from sdk.errors import KernelFault
from sdk.numerics import compute_dtype, from_storage, numpy_dtype, to_storage

from .addressing import process_maps
from .atomics import serial_rmw
from .values import where


class Memory:
    def __init__(self, tensors: list[DeviceArg], raw_ops=frozenset(), strict: bool = False):
        self.tensors = sorted(tensors, key=lambda t: t.address)
        self.starts = np.array([t.address for t in self.tensors], np.int64)
        self.sizes = np.array([t.nbytes for t in self.tensors], np.int64)
        self.raw_ops, self.strict = raw_ops, strict  # accesses through raw pointers; tensors registered
        self._maps: list[tuple[int, int, str]] | None = None
        self.version = 0  # counts the writes that changed memory (the cooperative scheduler reads it)

    def view(self, t: DeviceArg, elem: str) -> np.ndarray:
        """Tensor `t`'s bytes as whole elements of type `elem` (storage dtype)."""
        dt = numpy_dtype(elem)
        return t.handle[:t.nbytes // dt.itemsize * dt.itemsize].view(dt)

    def parts(self, state, op, addr: np.ndarray, live: np.ndarray, elem: str, what: str):
        """[(tensor, lanes of it, element indices)] for the live lanes of an access; a fault when a
        live lane addresses no whole element of any tensor (or of mapped memory, for raw pointers)."""
        width = numpy_dtype(elem).itemsize
        t = np.searchsorted(self.starts, addr, side="right") - 1  # the last tensor starting at or below
        rel = addr - (self.starts[t] if self.tensors else 0)
        inside = (t >= 0) & (rel >= 0) & (rel + width <= (self.sizes[t] if self.tensors else 0))
        bad = live & (~inside | (rel % width != 0))
        out = [(self.tensors[j], live & inside & (t == j), rel // width) for j in np.unique(t[live & inside])]
        if bad.any() and op in self.raw_ops and not self.strict and not (live & inside & (rel % width != 0)).any():
            return out + self._mapped(state, op, addr, bad, width, what)
        if bad.any():
            self._fault(state, op, int(addr[bad].flat[0]), width, what)
        return out

    def _mapped(self, state, op, addr: np.ndarray, lanes: np.ndarray, width: int, what: str):
        """Parts for lanes outside every tensor, in memory the process has mapped (readable, and
        writable unless loaded from): one per mapping, spanning the lanes' addresses in it."""
        need = "r" if what == "load from" else "rw"
        spans: dict[tuple[int, int], list[int]] = {}
        for a in np.unique(addr[lanes]).tolist():
            span = self._mapping(a, a + width, need)
            if span is None:
                self._fault(state, op, a, width, what)
            spans.setdefault(span, []).append(a)
        out = []
        for (start, end), found in spans.items():
            lo, hi = min(found), max(found) + width
            mine = lanes & (addr >= start) & (addr < end)
            if ((addr[mine] - lo) % width).any():
                self._fault(state, op, int(addr[mine].flat[0]), width, what)
            buf = np.ctypeslib.as_array((ctypes.c_uint8 * (hi - lo)).from_address(lo))
            out.append((DeviceArg(f"memory at {lo:#x}", lo, hi - lo, "", buf), mine, (addr - lo) // width))
        return out

    def _mapping(self, lo: int, hi: int, need: str) -> tuple[int, int] | None:
        """The mapping of this process holding [lo, hi) with permissions `need`, or None."""
        for attempt in range(2):  # the second time with a fresh map (memory mapped since)
            if self._maps is None or attempt:
                self._maps = process_maps()
            k = bisect.bisect_right([m[0] for m in self._maps], lo) - 1
            if k >= 0 and hi <= self._maps[k][1] and all(p in self._maps[k][2] for p in need):
                return self._maps[k][0], self._maps[k][1]
        return None

    def load(self, state, op, ptr, mask, other, elem: str) -> np.ndarray:
        addr, live = _lanes(ptr, mask, other)
        raw = np.zeros(addr.shape, numpy_dtype(elem))
        for t, lanes, idx in self.parts(state, op, addr, live, elem, "load from"):
            raw[lanes] = self.view(t, elem)[idx[lanes]]
        vals = from_storage(elem, raw)
        if live.all():
            return vals
        return np.where(live, vals, 0 if other is None else other).astype(compute_dtype(elem))

    def store(self, state, op, ptr, value, mask, elem: str) -> None:
        addr, live = _lanes(ptr, mask, value)
        raw = np.broadcast_to(to_storage(elem, value), addr.shape)
        for t, lanes, idx in self.parts(state, op, addr, live, elem, "store to"):
            self.view(t, elem)[idx[lanes]] = raw[lanes]
            self.version += 1

    def atomic(self, state, op, kind: str, ptr, value, mask, elem: str, cmp=None) -> np.ndarray:
        """Every live lane in order (row-major) reads, combines and writes, as atomics to one address
        serialise on a device; returns the values each lane read (zero for masked-off lanes)."""
        addr, live = _lanes(ptr, mask, value, cmp)
        cdt = compute_dtype(elem)
        old = np.zeros(addr.shape, cdt)
        val = np.broadcast_to(np.asarray(value, cdt), addr.shape)
        for t, lanes, idx in self.parts(state, op, addr, live, elem, "atomic on"):
            got, changes = serial_rmw(self.view(t, elem), kind, idx[lanes], val[lanes],
                                      None if cmp is None else np.broadcast_to(cmp, addr.shape)[lanes], elem)
            old[lanes] = got
            self.version += changes
        return old

    def _fault(self, state, op, bad: int, width: int, what: str) -> None:
        near = min(self.tensors, key=lambda t: min(abs(bad - t.address), abs(bad - t.address - t.nbytes)),
                   default=None)
        rel = "" if near is None else (f"; the nearest tensor is '{near.name}' ({near.nbytes // width} elements), "
                                       f"this is its element {(bad - near.address) / width:g}")
        raise KernelFault(f"out-of-bounds {what} address {bad:#x} in program {state.pid}: no tensor argument "
                          f"holds a whole element there{rel}, at {where(op)}")


def _lanes(ptr, mask, *others) -> tuple[np.ndarray, np.ndarray]:
    """The access's addresses and live-lane mask, broadcast to one shape."""
    shape = np.broadcast_shapes(*(np.shape(x) for x in (ptr, mask, *others) if x is not None))
    addr = np.broadcast_to(np.asarray(ptr, np.int64), shape)
    return addr, np.broadcast_to(np.ones((), bool) if mask is None else np.asarray(mask, bool), shape)
