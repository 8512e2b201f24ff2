"""Shape ops, reductions, scans, histogram, program ids, assert and print (tt.dot: ops_dot.py).

Values carry a leading program axis (P, or 1 when every program holds the same value), so a TTIR
axis `a` is numpy axis `a + 1`.
"""
from __future__ import annotations

import sys
from functools import lru_cache

import numpy as np

from sdk.errors import KernelFault
from sdk.ttir import PointerType

from .pointers import Ptrs
from .printing import print_text
from .table import rule
from .values import pointee_width, value_dtype, where


def full(x, t) -> np.ndarray:
    """`x` broadcast to the TTIR type's shape (splat/broadcast results stay compact: (L, 1, ...))."""
    shape = tuple(t.shape)
    if x.shape[1:] != shape:
        return np.broadcast_to(x, x.shape[:1] + shape)
    return x


def _fulls(op, xs):
    return [full(np.asarray(x), v.type) for x, v in zip(xs, op.operands)]


def _lead(*xs):
    """Broadcast the leading (program) axes of several arrays to a common length."""
    n = max(np.shape(x)[0] for x in xs)
    return [x if x.shape[0] == n else np.broadcast_to(x, (n,) + x.shape[1:]) for x in xs]


# --------------------------------------------------------------------------------- program ids
@rule("tt.get_program_id")
def _pid(ctx, op):
    return ctx.pid[op.attrs["axis"]]


@rule("tt.get_num_programs")
def _nprog(ctx, op):
    return np.array([ctx.grid[op.attrs["axis"]]], np.int32)


# ------------------------------------------------------------------------------------- shapes
@lru_cache(maxsize=None)
def _arange(start: int, end: int) -> np.ndarray:
    a = np.arange(start, end, dtype=np.int32)[None]
    a.setflags(write=False)
    return a


@rule("tt.make_range")
def _range(ctx, op):
    return _arange(int(op.attrs["start"]), int(op.attrs["end"]))


@rule("tt.splat")
def _splat(ctx, op, x):
    shape = op.result.type.shape
    x = np.asarray(x)
    if x.ndim == 0:
        x = x.reshape(1)
    b = x.reshape(x.shape[:1] + (1,) * len(shape))
    if isinstance(op.result.type.element, PointerType):
        return Ptrs(b, None, pointee_width(op.result.type), x.shape[:1] + tuple(shape))
    return b  # compact: element-wise rules broadcast it; shape-sensitive rules call full()


@rule("tt.unsplat")
def _unsplat(ctx, op, x):
    return np.asarray(x).reshape(x.shape[0], -1)[:, 0]


@rule("tt.broadcast")
def _broadcast(ctx, op, x):
    if isinstance(x, Ptrs):
        return Ptrs(x.base, x.off, x.w, x.shape[:1] + tuple(op.result.type.shape))
    return x  # compact (see splat)


@rule("tt.expand_dims")
def _expand_dims(ctx, op, x):
    ax = int(op.attrs["axis"]) + 1
    if isinstance(x, Ptrs):
        shape = list(x.shape)
        shape.insert(ax, 1)
        return Ptrs(np.expand_dims(x.base, ax), None if x.off is None else np.expand_dims(x.off, ax), x.w, shape)
    return np.expand_dims(x, ax)


@rule("tt.reshape")
def _reshape(ctx, op, x):
    x = full(np.asarray(x), op.operands[0].type)
    return x.reshape(x.shape[:1] + tuple(op.result.type.shape))


@rule("tt.trans")
def _trans(ctx, op, x):
    order = op.attrs.get("order", [1, 0])
    x = full(np.asarray(x), op.operands[0].type)
    return np.transpose(x, (0,) + tuple(int(o) + 1 for o in order))


@rule("tt.join")
def _join(ctx, op, a, b):
    a, b = _lead(*_fulls(op, (a, b)))
    return np.stack([a, b], axis=-1)


@rule("tt.split")
def _split(ctx, op, x):
    x = full(np.asarray(x), op.operands[0].type)
    return x[..., 0], x[..., 1]


@rule("tt.cat")
def _cat(ctx, op, a, b):
    a, b = _lead(*_fulls(op, (a, b)))
    return np.concatenate([a, b], axis=1)


@rule("tt.gather")
def _gather(ctx, op, src, idx):
    src, idx = _lead(*_fulls(op, (src, idx)))
    ax = int(op.attrs.get("axis", 0)) + 1
    return np.take_along_axis(src, idx.astype(np.int64), axis=ax)


@rule("tt.histogram")
def _histogram(ctx, op, x, mask=None):
    nb = op.result.type.shape[0]
    x = full(np.asarray(x), op.operands[0].type).astype(np.int64)
    ok = (x >= 0) & (x < nb)
    if mask is not None:
        ok &= mask
    n = x.shape[0]
    flat = (x + np.arange(n).reshape((n,) + (1,) * (x.ndim - 1)) * nb)[ok]
    return np.bincount(flat, minlength=n * nb).reshape(n, nb).astype(value_dtype(op.result.type))


# ------------------------------------------------------------------------------ reduce and scan
@rule("tt.reduce")
def _reduce(ctx, op, *xs):
    ax = int(op.attrs["axis"]) + 1
    xs = _fulls(op, xs)
    fast = ctx.facts.combine.get(op)
    if fast is not None:
        x = xs[0]
        return fast.reduce(x, axis=ax, dtype=x.dtype)
    region = op.regions[0]
    vals = [np.moveaxis(np.asarray(x), ax, -1) for x in _lead(*xs)]
    while vals[0].shape[-1] > 1:
        n = vals[0].shape[-1]
        h = n // 2
        left = [v[..., 0:2 * h:2] for v in vals]
        right = [v[..., 1:2 * h:2] for v in vals]
        comb = ctx.run(region, left + right)
        comb = [np.broadcast_to(c, left[0].shape) for c in comb]
        if n % 2:
            comb = [np.concatenate([c, v[..., n - 1:]], axis=-1) for c, v in zip(comb, vals)]
        vals = comb
    out = [np.ascontiguousarray(v[..., 0]).astype(value_dtype(r.type), copy=False) for v, r in zip(vals, op.results)]
    return out[0] if len(out) == 1 else out


#: combine ufuncs a scan applies with `accumulate` (the bitwise ones go through the region)
SCAN_UFUNCS = frozenset({np.add, np.multiply, np.fmax, np.fmin, np.maximum, np.minimum})


@rule("tt.scan")
def _scan(ctx, op, *xs):
    ax = int(op.attrs["axis"]) + 1
    rev = bool(op.attrs.get("reverse", False))
    xs = _fulls(op, xs)
    xs = [np.flip(x, ax) if rev else x for x in _lead(*xs)]
    fast = ctx.facts.combine.get(op)
    if fast is not None and fast in SCAN_UFUNCS:
        outs = [fast.accumulate(xs[0], axis=ax, dtype=xs[0].dtype)]
    else:
        region = op.regions[0]
        vals = [np.moveaxis(x, ax, 0) for x in xs]
        outs_t = [np.empty_like(v) for v in vals]
        acc = [v[0] for v in vals]
        for o, a in zip(outs_t, acc):
            o[0] = a
        for i in range(1, vals[0].shape[0]):
            acc = ctx.run(region, acc + [v[i] for v in vals])
            for o, a in zip(outs_t, acc):
                o[i] = a
        outs = [np.moveaxis(o, 0, ax) for o in outs_t]
    outs = [np.flip(o, ax) if rev else o for o in outs]
    outs = [o.astype(value_dtype(r.type), copy=False) for o, r in zip(outs, op.results)]
    return outs[0] if len(outs) == 1 else outs


# ------------------------------------------------------------------------------- assert, print
@rule("tt.assert")
def _assert(ctx, op, cond, *rest):
    c = np.asarray(cond)
    bad = ~c.astype(bool)
    if ctx.active is not None:
        bad = bad & ctx.lanes(bad.ndim)
    if bad.any():
        lane = int(np.argmax(bad.reshape(bad.shape[0], -1).any(axis=1))) if bad.shape[0] > 1 else 0
        msg = op.attrs.get("message", "")
        raise KernelFault(f"device assertion failed in program {ctx.pid_of(lane)} at {where(op)}"
                          + (f" ({msg})" if msg else ""))


@rule("gpu.barrier")
@rule("ttg.barrier")
@rule("llvm.intr.assume")
def _no_effect(ctx, op, *args):
    """A barrier between the threads of one program, and an optimisation hint: every op here
    already acts on a whole program's block at once, and no hint changes a result."""
    return None


@rule("tt.print")
def _print(ctx, op, *vals):
    """Each live program's values, one line per element as Triton's GPU backends print them."""
    for lane in range(ctx.P):
        if ctx.active is not None and not ctx.active[lane]:
            continue
        parts = [np.asarray(v)[lane if np.shape(v)[0] > 1 else 0] for v in vals]
        sys.stdout.write(print_text(ctx.pid_of(lane), op, parts))
    sys.stdout.flush()
