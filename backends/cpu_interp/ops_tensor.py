"""Shape ops, reductions, scans, dot, histogram, program ids, assert and print.

Values carry a leading program axis (P, or 1 when every program holds the same value), so a TTIR
axis `a` is numpy axis `a + 1`.
"""
from __future__ import annotations

import sys
from functools import lru_cache

import numpy as np

from sdk.errors import KernelFault
from sdk.ttir import PointerType

from .memory import value_dtype
from .ops_memory import Ptrs
from .table import rule


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
        return Ptrs(b, None, _ptr_width(op.result.type), x.shape[:1] + tuple(shape))
    return b  # compact: element-wise rules broadcast it; shape-sensitive rules call full()


@lru_cache(maxsize=None)
def _ptr_width(t) -> int:
    from sdk.numerics import numpy_dtype
    p = t.element.pointee
    return numpy_dtype(str(p.element if hasattr(p, "dims") else p)).itemsize


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
_FAST_REDUCE = {"arith.addf": np.add, "arith.addi": np.add, "arith.mulf": np.multiply, "arith.muli": np.multiply,
                "arith.maxnumf": np.fmax, "arith.minnumf": np.fmin, "arith.maximumf": np.maximum,
                "arith.minimumf": np.minimum, "arith.maxsi": np.maximum, "arith.minsi": np.minimum,
                "arith.andi": np.bitwise_and, "arith.ori": np.bitwise_or, "arith.xori": np.bitwise_xor}
_EXACT_TYPES = {"f32", "f64", "f16", "i1", "i8", "i16", "i32", "i64"}


def _fast_combine(op):
    """The numpy ufunc of a one-op combine region over plain types, or None."""
    cached = op.__dict__.get("_fast")
    if cached is not None:
        return cached or None
    fn = False
    region = op.regions[0]
    if len(op.operands) == 1 and len(region.blocks) == 1:
        ops = region.blocks[0].ops
        if (len(ops) == 2 and ops[0].name in _FAST_REDUCE and ops[1].operands == [ops[0].result]
                and ops[0].operands == region.blocks[0].args and str(op.operands[0].type.element) in _EXACT_TYPES):
            fn = _FAST_REDUCE[ops[0].name]
    op.__dict__["_fast"] = fn
    return fn or None


@rule("tt.reduce")
def _reduce(ctx, op, *xs):
    ax = int(op.attrs["axis"]) + 1
    xs = _fulls(op, xs)
    fast = _fast_combine(op)
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


_FAST_SCAN = {"arith.addf": np.add, "arith.addi": np.add, "arith.mulf": np.multiply, "arith.muli": np.multiply,
              "arith.maxnumf": np.fmax, "arith.minnumf": np.fmin, "arith.maximumf": np.maximum,
              "arith.minimumf": np.minimum, "arith.maxsi": np.maximum, "arith.minsi": np.minimum}


@rule("tt.scan")
def _scan(ctx, op, *xs):
    ax = int(op.attrs["axis"]) + 1
    rev = bool(op.attrs.get("reverse", False))
    xs = _fulls(op, xs)
    xs = [np.flip(x, ax) if rev else x for x in _lead(*xs)]
    fast = _fast_combine(op)
    if fast is not None and fast in _FAST_SCAN.values():
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


# ---------------------------------------------------------------------------------------- dot
@rule("tt.dot")
def _dot(ctx, op, a, b, c):
    """fp inputs (f16, bf16, fp8, f32 incl. tf32 precision) are multiplied and accumulated in fp32
    (f64 in f64); int8 in int32. tf32/tf32x3/bf16x3 input precisions are computed in full fp32."""
    out_dt = value_dtype(op.result.type)
    a, b, c = _fulls(op, (a, b, c))
    if out_dt.kind in "iu":
        acc = np.matmul(a.astype(np.int64), b.astype(np.int64)) + c
        return acc.astype(out_dt)
    work = np.float64 if out_dt == np.float64 or a.dtype == np.float64 else np.float32
    prod = np.matmul(a.astype(work, copy=False), b.astype(work, copy=False))
    out = prod + c.astype(work, copy=False)
    if str(op.result.type.element) == "bf16":
        from .memory import from_raw, to_raw
        return from_raw("bf16", to_raw("bf16", out.astype(np.float32)))
    return out.astype(out_dt, copy=False)


@rule("tt.dot_scaled")
def _dot_scaled(ctx, op, a, b, c, *scales):
    """Microscaled dot (OCP MX): operands in e2m1 (two fp4 values per byte), e4m3, e5m2, bf16 or
    fp16, each optionally with e8m0 scales (one per 32 elements along K); computed in fp32."""
    has_a, has_b = _scale_presence(op, len(scales))
    scales = list(scales)
    a_scale = scales.pop(0) if has_a else None
    b_scale = scales.pop(0) if has_b else None
    af = _mx_decode(a, str(op.attrs.get("lhs", "")), -1 if op.attrs.get("lhs_k_pack", True) else -2)
    bf = _mx_decode(b, str(op.attrs.get("rhs", "")), -2 if op.attrs.get("rhs_k_pack", True) else -1)
    if a_scale is not None:
        s = _e8m0(a_scale)  # (P, M, K/32)
        af = af * np.repeat(s, af.shape[-1] // s.shape[-1], axis=-1)
    if b_scale is not None:
        s = _e8m0(b_scale)  # (P, N, K/32)
        bf = bf * np.swapaxes(np.repeat(s, bf.shape[-2] // s.shape[-1], axis=-1), -1, -2)
    return (np.matmul(af, bf) + c).astype(value_dtype(op.result.type))


def _scale_presence(op, n: int) -> tuple[bool, bool]:
    if "has_a_scale" in op.attrs:
        return bool(op.attrs["has_a_scale"]), bool(op.attrs["has_b_scale"])
    seg = op.attrs.get("operandSegmentSizes") or op.attrs.get("operand_segment_sizes")
    if seg is not None and len(seg) == 5:
        return bool(seg[3]), bool(seg[4])
    return n >= 1, n >= 2


_E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
                 np.float32)


def _mx_decode(x, fmt: str, axis: int) -> np.ndarray:
    """Operand values as fp32; e2m1 bytes unpacked along `axis` (low nibble first)."""
    x = np.asarray(x)
    if fmt != "e2m1":
        return x.astype(np.float32)
    byte = x.astype(np.int64) & 0xFF
    pair = np.stack([_E2M1[byte & 0xF], _E2M1[byte >> 4]], axis=axis)  # (.., K/2, 2, ..): 2i, 2i+1
    shape = list(x.shape)
    shape[axis] *= 2
    return pair.reshape(shape)


def _e8m0(s) -> np.ndarray:
    """e8m0 scale bytes -> 2**(byte - 127) (0xFF is NaN)."""
    byte = np.asarray(s).astype(np.int64) & 0xFF
    return np.where(byte == 0xFF, np.nan, np.exp2(byte.astype(np.float32) - 127.0)).astype(np.float32)


# ------------------------------------------------------------------------------- assert, print
@rule("tt.assert")
def _assert(ctx, op, cond, *rest):
    c = np.asarray(cond)
    bad = ~c.astype(bool)
    if ctx.active is not None:
        bad = bad & ctx.lanes(bad.ndim)
    if bad.any():
        from .interp import where
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
    prefix = str(op.attrs.get("prefix", ""))
    hexa = bool(op.attrs.get("hex", False))
    for lane in range(ctx.P):
        if ctx.active is not None and not ctx.active[lane]:
            continue
        parts = [np.asarray(v)[lane if np.shape(v)[0] > 1 else 0] for v in vals]
        text = " ".join(_printable(p, hexa) for p in parts)
        if prefix.strip():
            print(f"pid {ctx.pid_of(lane)}{prefix}{text}", file=sys.stdout)
        else:
            print(f"pid {ctx.pid_of(lane)} [{op.loc}] {text}", file=sys.stdout)
    sys.stdout.flush()


def _printable(x: np.ndarray, hexa: bool) -> str:
    x = np.asarray(x)
    if hexa and x.dtype.kind in "iub":
        return np.array2string(x, threshold=64, formatter={"int": lambda v: hex(int(v))}) if x.ndim else hex(int(x))
    return np.array2string(x, threshold=64) if x.ndim else str(x.item())
