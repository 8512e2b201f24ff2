"""The optional checkers of one launch: uninitialised reads and write races.

Uninitialised reads (DAY0_CHECK_UNINIT=1). Only memory the host declared uninitialised
(`sdk.memcheck.uninitialised`, which the conformance runner applies to every output it poisons) can
be uninitialised; every other byte a launch can reach is initialised, since the host made it. A
declared element becomes initialised when a launch writes it (a store, or an atomic) or the host
changes its bytes between launches. A load, or an atomic whose result depends on the old value,
that touches a declared element nothing has written yet is a fault naming the argument, the
elements, the program and the source line. In-place kernels read arguments that are not declared,
so they are never reported.

Write races (DAY0_CHECK_RACES=1). Two programs of one launch storing different values to one element
is a fault naming both programs and the source line, unless the first store happens before the
second through an atomic, as Triton's atomics (acq_rel) order them: after its store the first program
made an atomic on some scalar address, and the second program made an atomic on that same address
(or a volatile load of it) later, before its own store. That covers a spin-lock critical section
(`while tl.atomic_cas(lock, 0, 1) == 1: pass ... tl.atomic_xchg(lock, 0)`, as in Triton's layer-norm
backward), a ticket or flag handed from program to program, and a counter whose last program
finishes what the others started. Times are those of the serial order cpu_interp ran: programs run
in lockstep unless they spin, so two programs' stores in one store op are never ordered. Two
programs storing the same bits to one element are not reported: the result does not depend on
their order (a flag every program raises, a value every program computes alike).
"""
from __future__ import annotations

import bisect

import numpy as np

from sdk.errors import KernelFault

from .values import where


def _pid_of(ctx, row: int, rows: int) -> tuple[int, int, int]:
    """The program of row `row` of a value with `rows` rows (one row shared by every program: the
    first active one)."""
    if rows == 1 and ctx.P > 1:
        row = int(np.argmax(ctx.active)) if ctx.active is not None else 0
    return ctx.pid_of(row)


def _uint(raw: np.ndarray) -> np.ndarray:
    raw = np.ascontiguousarray(raw)
    return raw.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[raw.dtype.itemsize])


class UninitCheck:
    """Reads of declared-uninitialised bytes (see the module docstring)."""

    def __init__(self, regions) -> None:
        self.regions = [r for r in regions if r.nbytes and r.refresh().any()]

    def _hits(self, arg, idx: np.ndarray, w: int, lanes):
        """(region, byte offsets into it, lanes) for every region the lanes' elements overlap."""
        addr = arg.address + idx.astype(np.int64) * w
        for r in self.regions:
            rel = addr - r.address
            inside = (rel > -w) & (rel < r.nbytes)
            if lanes is not None:
                inside &= lanes
            if inside.any():
                yield r, rel, inside

    def read(self, ctx, op, arg, idx: np.ndarray, w: int, lanes, what: str) -> None:
        if not self.regions:
            return
        if lanes is not None:
            idx = np.broadcast_to(idx, lanes.shape)
        bad = np.zeros(idx.shape, bool)
        for r, rel, inside in self._hits(arg, idx, w, lanes):
            for j in range(w):
                b = rel + j
                ok = inside & (b >= 0) & (b < r.nbytes)
                bad[ok] |= r.pending[b[ok]]
        if not bad.any():
            return
        rows = (bad.shape[0] if bad.ndim else 1, -1)
        bad, idx = bad.reshape(rows), idx.reshape(rows)
        row = int(np.argmax(bad.any(axis=1)))
        mine = idx[row][bad[row]]
        raise KernelFault(
            f"read of uninitialised memory: {what} '{arg.name}' elements [{int(mine.min())}, {int(mine.max()) + 1}) "
            f"in program {_pid_of(ctx, row, bad.shape[0])}, which no launch has written since the caller declared them "
            f"uninitialised (a poisoned or write-only output), at {where(op)}")

    def wrote(self, arg, idx: np.ndarray, w: int, lanes) -> None:
        if not self.regions:
            return
        if lanes is not None:
            idx = np.broadcast_to(idx, lanes.shape)
        for r, rel, inside in self._hits(arg, idx, w, lanes):
            for j in range(w):
                b = rel[inside] + j
                r.pending[b[(b >= 0) & (b < r.nbytes)]] = False


class RaceCheck:
    """Plain stores of different values to one element by two programs not ordered through an
    atomic (see the module docstring). Times are one clock over the launch's serial order of
    stores and synchronising accesses."""

    def __init__(self) -> None:
        self._shadow: dict[tuple[int, int, int], tuple[np.ndarray, ...]] = {}
        self.clock = 0
        self._rel: dict[int, dict[int, list[int]]] = {}  # program -> address -> its atomics there after a store
        self._acq: dict[tuple[int, int], int] = {}        # (program, address) -> its latest access there
        self._stored = np.zeros(0, np.int64)              # per program: the time of its latest store

    # ------------------------------------------------------------------------- synchronisation
    def sync(self, progs, addrs, release: bool) -> None:
        """Scalar atomics (`release`: both halves of acq_rel) or volatile loads (acquire only), one
        lane per program, in the serial order they took effect."""
        for p, a in zip(np.asarray(progs).tolist(), np.asarray(addrs).tolist()):
            t = self.clock
            self.clock += 1
            self._acq[(p, a)] = t
            if release:
                times = self._rel.setdefault(p, {}).setdefault(a, [])
                stored = int(self._stored[p]) if p < self._stored.size else -1
                if not times or times[-1] < stored:  # else an earlier one already follows that store
                    times.append(t)

    def _ordered(self, p: int, t1: int, q: int) -> bool:
        """Whether p's store at time t1 happens before q's store now: p synchronised on some
        address after t1, and q accessed that address (atomically or volatile) after that."""
        for a, times in self._rel.get(p, {}).items():
            k = bisect.bisect_right(times, t1)
            if k < len(times) and self._acq.get((q, a), -1) > times[k]:
                return True
        return False

    # ------------------------------------------------------------------------------ stores
    def store(self, ctx, op, arg, idx: np.ndarray, w: int, lanes, raw: np.ndarray) -> None:
        shape = (ctx.P,) + tuple(idx.shape[1:]) if idx.ndim else (ctx.P,)
        idx = np.broadcast_to(idx.reshape(idx.shape or (1,)), shape)  # every program stores its own lanes
        raw = np.broadcast_to(np.reshape(raw, np.shape(raw) or (1,)), shape)
        prog = np.broadcast_to(ctx.program_ids().reshape((ctx.P,) + (1,) * (len(shape) - 1)), shape)
        live = np.ones(shape, bool) if lanes is None else np.broadcast_to(np.reshape(lanes, np.shape(lanes) or (1,)), shape)
        if ctx.active is not None:
            live = live & ctx.lanes(len(shape))
        e, who, bits = idx[live].astype(np.int64), prog[live], _uint(raw[live])
        if not e.size:
            return
        now = self.clock
        self.clock += 1
        key = (arg.address, arg.nbytes, w)
        sh = self._shadow.get(key)
        if sh is None:
            n = arg.nbytes // w + 1
            sh = self._shadow[key] = (np.full(n, -1, np.int64), np.zeros(n, bits.dtype), np.zeros(n, np.int64))
        writer, sbits, stime = sh
        prev = writer[e]
        clash = (prev >= 0) & (prev != who) & (sbits[e] != bits)
        if clash.any():
            k = np.nonzero(clash)[0]
            triples = np.unique(np.stack([prev[k], stime[e[k]], who[k]], axis=1), axis=0)
            for p, t1, q in triples.tolist():
                if not self._ordered(p, t1, q):
                    j = int(k[np.nonzero((prev[k] == p) & (stime[e[k]] == t1) & (who[k] == q))[0][0]])
                    self._fault(ctx, op, arg, int(e[j]), p, q)
        if e.size > 1:  # programs of this batch storing one element in this very store: unordered
            order = np.lexsort((who, e))
            se, sw, sb = e[order], who[order], bits[order]
            first = np.maximum.accumulate(np.where(np.r_[True, se[1:] != se[:-1]], np.arange(se.size), 0))
            for a, b in ((np.arange(se.size - 1), np.arange(1, se.size)), (first, np.arange(se.size))):
                dup = (se[a] == se[b]) & (sw[a] != sw[b]) & (sb[a] != sb[b])
                if dup.any():
                    j = int(np.argmax(dup))
                    self._fault(ctx, op, arg, int(se[a[j]]), int(sw[a[j]]), int(sw[b[j]]))
        writer[e], sbits[e], stime[e] = who, bits, now
        if self._stored.size == 0:
            self._stored = np.full(int(np.prod(ctx.grid)), -1, np.int64)
        self._stored[who] = now

    @staticmethod
    def _fault(ctx, op, arg, element: int, a: int, b: int) -> None:
        gx, gy, _ = ctx.grid
        pid = lambda n: (n % gx, (n // gx) % gy, n // (gx * gy))
        raise KernelFault(f"race on '{arg.name}': programs {pid(min(a, b))} and {pid(max(a, b))} both store "
                          f"element {element} without atomics (different values, not ordered through an "
                          f"atomic), at {where(op)}")
