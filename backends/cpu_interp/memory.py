"""The memory of one launch of the batched interpreter: loads, stores and atomics over the tensors.

Addresses are checked by `AddressSpace` (addressing.py: bounds, provenance, raw pointers); the
atomics' semantics are atomics.py's. A load or store of a lazy pointer tensor (pointers.py) whose
every lane lies in one tensor takes a fast path that gathers whole rows. Optional checks (flags;
see checkers.py):
  check_uninit  reads of memory the caller declared uninitialised (sdk.memcheck) that no launch wrote
  check_races   two programs storing different values to one element, unordered by atomics or a lock
"""
from __future__ import annotations

import numpy as np

from sdk.backend import DeviceArg
from sdk.numerics import compute_dtype, from_storage, numpy_dtype, to_storage
from sdk.ttir import PointerType, TensorType

from .addressing import AddressSpace, access_shape, live_lanes
from .analysis import Facts
from .atomics import serial_rmw
from .checkers import RaceCheck, UninitCheck
from .pointers import Ptrs


class Memory(AddressSpace):
    """The tensors of one launch (AddressSpace) with the accesses rules make on them."""

    def __init__(self, args: list[DeviceArg], flags: dict, facts: Facts, raw_strict: bool = False,
                 by_index: dict[int, DeviceArg] | None = None):
        super().__init__(args, facts.origins, facts.unaligned, raw_strict, by_index)
        self.facts = facts
        self.flags = flags
        self._views: dict[tuple[int, str], np.ndarray] = {}
        self.uninit: UninitCheck | None = None
        if flags.get("check_uninit"):
            from sdk.memcheck import declared
            self.uninit = UninitCheck(declared())
            if not self.uninit.regions:
                self.uninit = None
        self.races = RaceCheck() if flags.get("check_races") else None
        self.version = 0  # bumped by every store and every atomic that changes memory

    def view(self, arg: DeviceArg, dt: np.dtype) -> np.ndarray:
        key = (id(arg), dt.str)
        v = self._views.get(key)
        if v is None:
            n = arg.nbytes // dt.itemsize
            v = self._views[key] = arg.handle[:n * dt.itemsize].view(dt)
        return v

    # ------------------------------------------------------------ fast path: base + offsets
    def _plan(self, op, ptr, w):
        """For a lazy pointer tensor whose every lane (masked or not) lies inside one argument:
        (arg, per-program base index, element offsets). None sends the access to the exact path."""
        if not isinstance(ptr, Ptrs) or ptr.w != w or self.uninit or self.races or self.unaligned:
            return None
        base, off = ptr.base, ptr.off
        bmin = int(base.min())
        origin = self.origin(op)
        arg = origin[0] if origin is not None and len(origin) == 1 else self.find(bmin)
        if arg is None or (origin is not None and not any(arg is o for o in origin)):
            return None
        if off is None:
            lo, hi = bmin, int(base.max())
        else:
            axes = tuple(i for i, (b, o) in enumerate(zip(base.shape, off.shape)) if b == 1 and o > 1)
            if len(axes) == off.ndim or base.size == 1:
                lo, hi = bmin + int(off.min()) * w, int(base.max()) + int(off.max()) * w
            else:
                omin = off.min(axis=axes, keepdims=True) if axes else off
                omax = off.max(axis=axes, keepdims=True) if axes else off
                lo, hi = int((base + omin * w).min()), int((base + omax * w).max())
        if lo < arg.address or hi + w > arg.address + arg.nbytes:
            return None
        return arg, (base - arg.address) // w, off

    def _rows(self, bidx, off, shape):
        """Row starts when offsets are contiguous along the last axis (a row copy per lane)."""
        if off is None or off.shape[-1] < 8 or bidx.shape[-1] != 1 or off.size > (1 << 17):
            return None
        if not (off[..., 1:] - off[..., :-1] == 1).all():
            return None
        starts = np.broadcast_to(bidx + off[..., :1], shape[:-1] + (1,))[..., 0]
        return starts

    def _fast_load(self, ctx, op, ptr, mask, other, elem, dt, shape):
        plan = self._plan(op, ptr, dt.itemsize)
        if plan is None:
            return None
        arg, bidx, off = plan
        view = self.view(arg, dt)
        starts = self._rows(bidx, off, shape)
        if starts is not None:
            raw = np.lib.stride_tricks.sliding_window_view(view, shape[-1])[starts]
        else:
            raw = view[bidx if off is None else bidx + off]
        vals = from_storage(elem, raw)
        if vals.shape != shape:
            vals = np.broadcast_to(vals, shape)
        m = live_lanes(ctx, mask, shape)
        if m is None:
            return vals
        cdt = compute_dtype(elem)
        return np.where(m, vals, _fill(other, (), cdt) if other is None else other).astype(cdt, copy=False)

    def _fast_store(self, ctx, op, ptr, val, mask, elem, dt, shape):
        plan = self._plan(op, ptr, dt.itemsize)
        if plan is None:
            return False
        self.version += 1
        arg, bidx, off = plan
        view = self.view(arg, dt)
        raw = np.broadcast_to(to_storage(elem, val), shape)
        m = live_lanes(ctx, mask, shape)
        if m is None:
            starts = self._rows(bidx, off, shape)
            if starts is not None:
                win = np.lib.stride_tricks.sliding_window_view(view, shape[-1], writeable=True)
                win[starts] = raw
                return True
            idx = bidx if off is None else bidx + off
            view[np.broadcast_to(idx, shape)] = raw
            return True
        idx = np.broadcast_to(bidx if off is None else bidx + off, shape)
        view[idx[m]] = raw[m]
        return True

    def load(self, ctx, op, ptr: np.ndarray, mask, other, elem: str) -> np.ndarray:
        dt = numpy_dtype(elem)
        w = dt.itemsize
        shape = access_shape(ctx, ptr, mask, other)
        out = self._fast_load(ctx, op, ptr, mask, other, elem, dt, shape)
        if out is not None:
            return out
        ptr = np.asarray(ptr)
        addr = np.broadcast_to(ptr, shape)
        m = live_lanes(ctx, mask, shape)
        cdt = compute_dtype(elem)
        if m is not None and not m.any():
            return _fill(other, shape, cdt)
        parts = self.locate(ctx, op, addr, m, w, "load from")
        if len(parts) == 1 and parts[0][1] is None:
            arg, _, idx = parts[0]
            raw = self.view(arg, dt)[idx]
            if self.uninit:
                self.uninit.read(ctx, op, arg, idx, w, m, "load from")
        else:
            raw = np.zeros(shape, dt)
            for arg, sel, idx in parts:
                raw[sel] = self.view(arg, dt)[idx[sel]]
                if self.uninit:
                    self.uninit.read(ctx, op, arg, idx, w, sel, "load from")
        vals = from_storage(elem, raw)
        if self.races is not None and op.attrs.get("isVolatile"):
            self._sync(ctx, op, addr, m, release=False)
        if m is None:
            return vals
        return np.where(m, vals, _fill(other, (), cdt) if other is None else other).astype(cdt, copy=False)

    def store(self, ctx, op, ptr: np.ndarray, val, mask, elem: str) -> None:
        dt = numpy_dtype(elem)
        w = dt.itemsize
        shape = access_shape(ctx, ptr, mask, val)
        if self._fast_store(ctx, op, ptr, val, mask, elem, dt, shape):
            return
        addr = np.broadcast_to(np.asarray(ptr), shape)
        m = live_lanes(ctx, mask, shape)
        if m is not None and not m.any():
            return
        raw = np.broadcast_to(to_storage(elem, val), shape)
        self.version += 1
        for arg, sel, idx in self.locate(ctx, op, addr, m, w, "store to"):
            lanes = m if sel is None else sel
            view = self.view(arg, dt)
            if self.races:
                self.races.store(ctx, op, arg, idx, w, lanes, raw)
            if lanes is None:
                view[idx] = raw
            else:
                view[idx[lanes]] = raw[lanes]
            if self.uninit:
                self.uninit.wrote(arg, idx, w, lanes)

    def atomic(self, ctx, op, kind: str, ptr, val, mask, elem: str, cmp=None) -> np.ndarray:
        """Read-modify-write on every live lane, lanes in program order (a serial order)."""
        dt = numpy_dtype(elem)
        w = dt.itemsize
        ptr = np.asarray(ptr)
        shape = access_shape(ctx, ptr, mask, val, cmp)
        if ctx is not None and shape[0] != ctx.P:  # every program performs its own atomic
            shape = (ctx.P,) + tuple(shape[1:])
        addr = np.broadcast_to(ptr, shape)
        m = live_lanes(ctx, mask, shape)
        cdt = compute_dtype(elem)
        out = np.zeros(shape, cdt)
        if m is not None and not m.any():
            return out
        reads = kind != "exch" or op not in self.facts.discarded  # the old value matters
        for arg, sel, idx in self.locate(ctx, op, addr, m, w, "atomic on"):
            lanes = m if sel is None else sel
            if self.uninit and reads:
                self.uninit.read(ctx, op, arg, idx, w, lanes, "atomic on")
            self._atomic_part(op, kind, arg, idx, lanes, val, cmp, elem, shape, out)
            if self.uninit:
                self.uninit.wrote(arg, idx, w, lanes)
        self._sync(ctx, op, addr, m, release=True)
        return out

    def _sync(self, ctx, op, addr, m, release: bool) -> None:
        """Under the race check: a scalar atomic or volatile load orders the stores around it."""
        t = op.operands[0].type  # a scalar pointer only (not a tensor of them, a block pointer, a descriptor)
        if self.races is None or ctx is None or not isinstance(t, PointerType) or isinstance(t.pointee, TensorType):
            return
        live = np.ones(addr.shape, bool) if m is None else np.broadcast_to(m, addr.shape)
        progs = np.broadcast_to(ctx.program_ids().reshape((ctx.P,) + (1,) * (addr.ndim - 1)), addr.shape)
        self.races.sync(progs[live], addr[live], release)

    def _atomic_part(self, op, kind, arg, idx, m, val, cmp, elem, shape, out) -> None:
        """The atomic on the lanes `m` (None: all) whose memory is `arg`; old values into `out`."""
        dt = numpy_dtype(elem)
        view = self.view(arg, dt)
        sel = np.ones(shape, bool) if m is None else m
        lanes = np.nonzero(sel.ravel())[0]
        fval = np.broadcast_to(np.asarray(val, compute_dtype(elem)), shape).ravel()[lanes]
        fcmp = None if cmp is None else np.broadcast_to(cmp, shape).ravel()[lanes]
        old, changes = serial_rmw(view, kind, idx.ravel()[lanes], fval, fcmp, elem,
                                  keep_old=op not in self.facts.discarded)
        self.version += changes
        if old is not None:
            out.ravel()[lanes] = old

    def finish(self) -> None:
        """End of the launch (every check reports as it happens)."""


def _fill(other, shape, cdt):
    if other is None:
        return np.zeros(shape, cdt)
    return np.broadcast_to(np.asarray(other, cdt), shape).copy()
