"""Which tensor an address falls in, checked: the bounds and provenance half of a launch's memory.

Every access is checked on its live lanes: all addresses must fall inside the tensor argument the
pointer derives from (its provenance, see provenance.py; from the tensor's first element to the end
of its storage), else a KernelFault names that argument, the element/byte range, the program and the
kernel source line; an access that lands in another argument is a fault too. Accesses through raw
pointers (made from integers or loaded from pointer tables) may reach several tensors at once and
tensors registered with `extra_tensors`; where none are registered, any memory the process has
mapped too (checked against the OS's map, so a bad address is a KernelFault, not a crash).

Lanes: a value of the batched interpreter has a leading program axis; the live lanes of an access
are those its mask keeps, of the programs `ctx.active` keeps (see `live_lanes`).
"""
from __future__ import annotations

import bisect
import ctypes
import sys

import numpy as np

from sdk.backend import DeviceArg
from sdk.errors import KernelFault

from .provenance import PointerOrigins
from .values import where


class AddressSpace:
    """The tensors of one launch, by address; `locate` maps an access's addresses to them."""

    def __init__(self, args: list[DeviceArg], origins: PointerOrigins, unaligned: bool = False,
                 raw_strict: bool = False, by_index: dict[int, DeviceArg] | None = None):
        self.args = sorted(args, key=lambda a: a.address)
        self.origins = origins
        self.by_index = by_index or {}  # entry-argument position -> its tensor (pointer provenance)
        self.raw_strict = raw_strict  # raw pointers too must stay inside known tensors (extra_tensors given)
        self.unaligned = unaligned    # pointers may be re-typed: check alignment on access
        self.foreign: dict[tuple[int, int], DeviceArg] = {}  # mapped memory reached by raw pointers
        self._runs: dict | None = None  # accessible_runs of the OS's map, read when first needed

    def find(self, addr: int) -> DeviceArg | None:
        for arg in self.args:
            if arg.address <= addr < arg.address + arg.nbytes:
                return arg
        return None

    def nearest(self, addr: int) -> DeviceArg | None:
        below = [a for a in self.args if a.address <= addr]
        if below:
            return below[-1]
        return self.args[0] if self.args else None

    def origin(self, op) -> list[DeviceArg] | None:
        """The tensors an access's pointer may derive from (None: raw, or not known per tensor)."""
        if op in self.origins.raw:
            return None
        ks = self.origins.args.get(op)
        if not ks:
            return None
        found = [self.by_index.get(k) for k in sorted(ks)]
        return None if any(a is None for a in found) else found

    def _single(self, addr: np.ndarray, m: np.ndarray | None, width: int):
        """(arg, byte offsets) when every live address lies in the argument of the first live
        lane; masked-off lanes get offset 0. None otherwise."""
        a0 = int(addr.flat[0]) if m is None else int(addr.flat[int(np.argmax(m))])
        arg = self.find(a0)
        if arg is None:
            return None
        off = addr - arg.address
        if m is not None:
            off = np.where(m, off, 0)
        if int(off.min()) < 0 or int(off.max()) + width > arg.nbytes:
            return None
        return arg, off

    def _elements(self, op, arg: DeviceArg, off: np.ndarray, width: int, what: str):
        """Byte offsets into `arg` -> element indices (alignment checked where pointers were re-typed)."""
        if width > 1:
            if self.unaligned and (off & (width - 1)).any():
                raise KernelFault(f"misaligned {what} of '{arg.name}' ({width}-byte elements) at "
                                  f"{where(op)}")
            off >>= (width.bit_length() - 1)
        return arg, off

    def locate(self, ctx, op, addr: np.ndarray, m: np.ndarray | None, width: int, what: str):
        """[(arg, lanes, element indices)] covering every live lane; `lanes` is None when the one
        part holds them all (then masked-off lanes have index 0). The programs of a batch may
        address different tensors (a base pointer chosen by program id), but each program's access
        stays inside one argument, unless its pointer may come from several (a select between
        arguments) or is raw (see provenance.py)."""
        origin = self.origin(op)
        if origin is not None and len(origin) == 1:  # the one tensor this pointer may address
            arg = origin[0]
            off = addr - arg.address
            if m is not None:
                off = np.where(m, off, 0)
            if off.size and (int(off.min()) < 0 or int(off.max()) + width > arg.nbytes):
                self._fault(ctx, op, addr, m, width, what, arg)
            return [(arg, None, self._elements(op, arg, off, width, what)[1])]
        found = self._single(addr, m, width)
        if found is not None and (origin is None or any(found[0] is o for o in origin)):
            arg, idx = self._elements(op, *found, width, what)
            return [(arg, None, idx)]
        raw = op in self.origins.raw
        live = np.ones(addr.shape, bool) if m is None else np.broadcast_to(m, addr.shape)
        a = addr[live].astype(np.int64)
        regions = origin if origin is not None else self.args + list(self.foreign.values()) if raw else self.args
        owner = self._owners(a, width, regions)
        lost = a[owner < 0]
        if origin is not None:  # every lane inside one of the pointer's own tensors
            if lost.size:
                stray = np.zeros(addr.shape, bool)
                stray[live] = owner < 0
                p = int(np.argmax(stray.reshape(stray.shape[0], -1).any(axis=1)))
                row = np.zeros(addr.shape, bool)
                row[p] = live[p]  # the whole access of the first program that strays
                bad = int(lost[0])
                near = min(origin, key=lambda r: min(abs(bad - r.address), abs(bad - r.address - r.nbytes)))
                self._fault(ctx, op, addr, row, width, what, near)
            if op not in self.origins.lanes:
                self._one_tensor_per_program(ctx, op, addr, live, owner, width, what, regions)
        elif not raw and op not in self.origins.lanes:
            self._one_tensor_per_program(ctx, op, addr, live, owner, width, what, regions)
        elif lost.size and (not raw or self.raw_strict):  # lanes may reach known tensors only
            self._fault_at(ctx, op, addr, live, int(lost[0]), width, what)
        elif lost.size:
            self._map_foreign(ctx, op, addr, live, lost, width, what)
            regions = self.args + list(self.foreign.values())
            owner = self._owners(a, width, regions)
        parts = []
        for k in np.unique(owner):
            arg = regions[int(k)]
            mine = owner == k
            sel = np.zeros(addr.shape, bool)
            sel[live] = mine
            off = a[mine] - arg.address
            if width > 1 and (off % width).any():
                raise KernelFault(f"misaligned {what} of '{arg.name}' ({width}-byte elements) at {where(op)}")
            idx = np.zeros(addr.shape, np.int64)
            idx[sel] = off // width
            parts.append((arg, sel, idx))
        return parts

    def _one_tensor_per_program(self, ctx, op, addr, live, owner, width, what, regions) -> None:
        """Fault unless every program's live lanes lie in one argument (the first live lane's)."""
        own = np.full(addr.shape, -1, np.int64)
        own[live] = owner
        P = addr.shape[0]
        own, lv = own.reshape(P, -1), live.reshape(P, -1)
        first = own[np.arange(P), np.argmax(lv, axis=1)]
        bad = lv.any(axis=1) & ((first < 0) | ((own != first[:, None]) & lv).any(axis=1))
        if not bad.any():
            return
        p = int(np.argmax(bad))
        row = np.zeros(addr.shape, bool)
        row[p] = live[p]
        if first[p] < 0:
            self._fault_at(ctx, op, addr, row, int(addr[p].reshape(-1)[int(np.argmax(lv[p]))]), width, what)
        self._fault(ctx, op, addr, row, width, what, regions[int(first[p])])

    def _fault_at(self, ctx, op, addr, live, bad: int, width: int, what: str) -> None:
        """Fault for the live lanes at address `bad`, against the tensor nearest to it."""
        self._fault(ctx, op, addr, live & (addr == bad), width, what, self.find(bad) or self.nearest(bad))

    @staticmethod
    def _owners(a: np.ndarray, width: int, regions: list[DeviceArg]) -> np.ndarray:
        """Index into `regions` of the first one holding each address (-1: none), element-aligned
        with that region's start. Regions that do not overlap (the usual case: a raw pointer's
        accesses map a region per cluster of addresses, hundreds over a kernel that walks a
        tensor it was not given) are searched by address, not one by one."""
        held = sorted((r.address, r.address + r.nbytes, k) for k, r in enumerate(regions) if r.nbytes > 0)
        if len(held) > 4:
            lo, hi, index = (np.array(column, np.int64) for column in zip(*held))
            if (lo[1:] >= hi[:-1]).all():  # disjoint: an address lies in one region at most
                j = np.maximum(np.searchsorted(lo, a, side="right") - 1, 0)
                hit = (a >= lo[j]) & (a + width <= hi[j])
                if width > 1:
                    hit &= (a - lo[j]) % width == 0
                return np.where(hit, index[j], -1)
        owner = np.full(a.shape, -1, np.int64)
        for k, r in enumerate(regions):
            hit = (owner < 0) & (a >= r.address) & (a + width <= r.address + r.nbytes)
            if width > 1:
                hit &= (a - r.address) % width == 0
            owner[hit] = k
        return owner

    def _map_foreign(self, ctx, op, addr, live, a: np.ndarray, width: int, what: str) -> None:
        """Make mapped memory at addresses outside every known tensor addressable, one region per
        cluster of nearby addresses in one run of mappings (and per alignment class); fault on the
        lowest address of a cluster that no mapping holds."""
        write = what != "load from"
        for residue in np.unique(a % max(width, 1)):
            u = np.unique(a[a % max(width, 1) == residue])
            breaks = np.nonzero(np.diff(u) > (1 << 16))[0] + 1
            for cluster in np.split(u, breaks):
                lo, hi = int(cluster[0]), int(cluster[-1]) + width
                groups = [cluster]
                if self._run(lo, hi, write) is None:  # a hole between the lanes, or a bad lane
                    held = [self._run(int(x), int(x) + width, write) for x in cluster]
                    if any(r is None for r in held):
                        bad = int(cluster[[r is None for r in held].index(True)])
                        lane = int(np.argmax((addr == bad) & live))
                        per_prog = int(np.prod(addr.shape[1:], dtype=np.int64))
                        pid = ctx.pid_of(lane // max(1, per_prog) if addr.shape[0] > 1 else 0) if ctx else (0, 0, 0)
                        access = "writable " if write else ""
                        raise KernelFault(
                            f"{what} address {bad:#x} through a raw pointer in program {pid}: the address is in "
                            f"no tensor argument and in no {access}mapped memory, at {where(op)} (tensors a "
                            f"pointer table addresses can be registered with backends.cpu_interp.extra_tensors "
                            f"to have their bounds checked)")
                    starts = np.array([r[0] for r in held])
                    groups = np.split(cluster, np.nonzero(np.diff(starts))[0] + 1)
                for group in groups:
                    lo, hi = int(group[0]), int(group[-1]) + width
                    buf = np.ctypeslib.as_array((ctypes.c_uint8 * (hi - lo)).from_address(lo))
                    self.foreign[(lo, hi)] = DeviceArg(f"memory at {lo:#x}", lo, hi - lo, "", buf)

    def _run(self, lo: int, hi: int, write: bool) -> tuple[int, int] | None:
        """The run of readable (and writable) mappings of this process holding [lo, hi), or None."""
        for attempt in range(2):  # the second time with a fresh map (memory mapped since)
            if self._runs is None or attempt:
                self._runs = accessible_runs(process_maps())
            run = run_holding(self._runs, lo, hi, write)
            if run is not None:
                return run
        return None

    def _fault(self, ctx, op, addr, m, width, what, arg):
        live = addr if m is None else np.where(m, addr, 0)
        if arg is None:
            raise KernelFault(f"{what} at address {int(live.flat[0]):#x}, outside every tensor argument, "
                              f"at {where(op)}")
        off = addr.astype(np.int64) - arg.address
        bad = (off < 0) | (off + width > arg.nbytes)
        live = np.ones(off.shape, bool) if m is None else np.broadcast_to(m, off.shape)
        bad &= live
        per_prog = int(np.prod(addr.shape[1:], dtype=np.int64))
        first = int(np.argmax(bad.ravel()))
        lane = first // max(1, per_prog) if addr.shape[0] > 1 else 0
        mine = live[lane] if addr.shape[0] > 1 else live[0]
        liveoff = (off[lane] if addr.shape[0] > 1 else off[0])[mine]
        lo, hi = int(liveoff.min()), int(liveoff.max()) + width
        pid = ctx.pid_of(lane) if ctx is not None else (0, 0, 0)
        n = arg.nbytes // width
        other = self.find(int(addr.reshape(-1)[first]))
        inside = f" (inside '{other.name}', another argument)" if other is not None and other is not arg else ""
        raise KernelFault(
            f"out-of-bounds {what} '{arg.name}': elements [{lo // width}, {-(-hi // width)}) (bytes [{lo}, {hi})) "
            f"of a {n}-element ({arg.nbytes}-byte) tensor{inside} in program {pid}, at {where(op)}")

    # ---------------------------------------------------------------------------- access


def process_maps() -> list[tuple[int, int, str]]:
    """(start, end, permissions) of this process's memory mappings, sorted (empty where the OS
    does not say: then raw pointers reach only known tensors)."""
    if not sys.platform.startswith("linux"):
        return []
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            span, perms = line.split()[:2]
            start, end = span.split("-")
            out.append((int(start, 16), int(end, 16), perms))
    out.sort()
    return out


def accessible_runs(maps: list[tuple[int, int, str]]) -> dict[str, tuple[list[int], list[int]]]:
    """For "r" (readable) and "rw" (readable and writable): (starts, ends) of the runs of adjacent
    mappings in `maps` (process_maps) that all allow it, sorted."""
    out = {}
    for need in ("r", "rw"):
        starts: list[int] = []
        ends: list[int] = []
        for start, end, perms in maps:
            if not all(p in perms for p in need):
                continue
            if ends and ends[-1] == start:
                ends[-1] = end
            else:
                starts.append(start)
                ends.append(end)
        out[need] = (starts, ends)
    return out


def run_holding(runs: dict, lo: int, hi: int, write: bool) -> tuple[int, int] | None:
    """The run of `runs` (accessible_runs) holding all of [lo, hi), or None."""
    starts, ends = runs["rw" if write else "r"]
    k = bisect.bisect_right(starts, lo) - 1
    if k >= 0 and hi <= ends[k]:
        return starts[k], ends[k]
    return None


def access_shape(ctx, *xs) -> tuple[int, ...]:
    """The shape of an access: its operands broadcast, with a lane per program once control flow
    has diverged (then every program accesses for itself)."""
    shape = np.broadcast_shapes(*[np.shape(x) for x in xs if x is not None])
    if ctx is not None and ctx.active is not None and shape[0] != ctx.P:
        shape = (ctx.P,) + tuple(shape[1:])
    return shape


def live_lanes(ctx, mask, shape) -> np.ndarray | None:
    """The mask of live lanes (explicit mask and active programs) or None when all are live."""
    act = ctx.lanes(len(shape)) if ctx is not None else None
    if mask is None and act is None:
        return None
    m = mask if act is None else (act if mask is None else np.logical_and(mask, act))
    m = np.broadcast_to(m, shape)
    if m.all():
        return None
    return m
