"""Constants, program ids, shape ops (lazy views), reductions, scans, dot, gather, histogram,
assert, and the ops with no effect here (barriers, hints).

Reductions and scans run their combine region on scalars inside a loop nest: along the last axis
one output element at a time (a sum of floats may be reassociated, so LLVM vectorises it; the
interpreter's pairwise order differs from it by rounding only), along another axis with the
output dimensions innermost (vectorised across them, in sequential order). `tt.dot` accumulates
in float32 (float64, int32) over a k loop whose innermost j loop LLVM vectorises into fused
multiply-adds.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from sdk.ttir import DenseAttr, TensorType

from .abi import FAULT_ASSERT
from .core import KEEP_COST
from .numerics import finish
from .ops_arith import constant_scalar
from .table import TABLE
from .tensors import (TV, Broadcast, Buf, Cat, ExpandDims, Join, Range, Reshape, Split, Splat, Trans, ZERO,
                      cheap_to_recompute, const_i64)
from .types import F32, F64, I1, I32, I64, Unsupported, elem, elem_of, shape_of

rule = TABLE.rule


def as_tv(v, t) -> TV:
    return v if isinstance(v, TV) else Splat(v, shape_of(t), elem_of(t))


# -------------------------------------------------------------------------------- constants
@rule("arith.constant")
def _constant(fx, op):
    v, t = op.attrs["value"], op.result.type
    e = elem_of(t)
    if not isinstance(t, TensorType):
        return constant_scalar(v.values if isinstance(v, DenseAttr) else v, e)
    if isinstance(v, DenseAttr) and not v.splat:
        flat = np.broadcast_to(np.array(v.values, dtype=np.float64 if e.is_float else np.int64), t.shape).ravel()
        ty = ir.ArrayType(e.buf, len(flat))
        g = ir.GlobalVariable(fx.kc.ir, ty, name=f"day0_const_{fx.kc.op_index(op)}")
        g.global_constant = True
        g.linkage = "internal"
        g.initializer = ir.Constant(ty, [constant_scalar(x, e) if e.name != "i1" else ir.Constant(e.buf, int(x))
                                         for x in flat.tolist()])
        return Buf(g, t.shape, e)
    scalar = v.values if isinstance(v, DenseAttr) else v
    return Splat(constant_scalar(scalar, e), t.shape, e)


@rule("ub.poison")
def _poison(fx, op):
    t = op.result.type
    e = elem_of(t)
    zero = ir.Constant(e.reg, None)
    return Splat(zero, t.shape, e) if isinstance(t, TensorType) else zero


# ------------------------------------------------------------------------------ program ids
@rule("tt.get_program_id")
def _pid(fx, op):
    return fx.pid[int(op.attrs["axis"])]


@rule("tt.get_num_programs")
def _nprog(fx, op):
    return fx.grid[int(op.attrs["axis"])]


# ----------------------------------------------------------------------------------- shapes
@rule("tt.make_range")
def _range(fx, op):
    start, end = int(op.attrs["start"]), int(op.attrs["end"])
    return Range(start, end - start, elem_of(op.result.type))


@rule("tt.splat")
def _splat(fx, op, x):
    return Splat(x, op.result.type.shape, elem_of(op.result.type))


@rule("tt.unsplat")
def _unsplat(fx, op, x):
    return x.at(fx, [ZERO] * len(x.shape))


@rule("tt.broadcast")
def _broadcast(fx, op, x):
    shape = tuple(op.result.type.shape)
    if isinstance(x, Splat):
        return Splat(x.value, shape, x.elem)
    if not isinstance(x, Buf) and x.cost >= KEEP_COST and not cheap_to_recompute(x):
        x = fx.materialize(x)  # computed once per source element, not once per element it is broadcast to
    return Broadcast(x, shape)


@rule("tt.expand_dims")
def _expand_dims(fx, op, x):
    if isinstance(x, Splat):
        return Splat(x.value, op.result.type.shape, x.elem)
    return ExpandDims(x, int(op.attrs["axis"]))


@rule("tt.reshape")
def _reshape(fx, op, x):
    shape = tuple(op.result.type.shape)
    if isinstance(x, Splat):
        return Splat(x.value, shape, x.elem)
    if tuple(x.shape) == shape:
        return x
    return Reshape(x, shape)


@rule("builtin.unrealized_conversion_cast")
def _unrealized_cast(fx, op, x):
    """What Triton's descriptor rewrite (prepare.py) leaves where a load drops its block's
    leading unit dimensions: the same elements at another shape, a reshape. No other cast is lowered."""
    src, dst = op.operands[0].type, op.result.type
    if (isinstance(src, TensorType) and isinstance(dst, TensorType) and src.element == dst.element
            and int(np.prod(src.shape)) == int(np.prod(dst.shape))):
        return _reshape(fx, op, x)
    if src == dst:
        return x
    raise Unsupported(f"builtin.unrealized_conversion_cast from {src} to {dst}")


@rule("tt.trans")
def _trans(fx, op, x):
    order = op.attrs.get("order", [1, 0])
    if isinstance(x, Splat):
        return Splat(x.value, op.result.type.shape, x.elem)
    return Trans(x, order)


@rule("tt.join")
def _join(fx, op, a, b):
    t = op.operands[0].type
    return Join(as_tv(a, t), as_tv(b, t))


@rule("tt.split")
def _split(fx, op, x):
    return Split(x, 0), Split(x, 1)


@rule("tt.cat")
def _cat(fx, op, a, b):
    return Cat(as_tv(a, op.operands[0].type), as_tv(b, op.operands[1].type), op.result.type.shape)


class _Gather(TV):
    """tt.gather: src (a buffer) indexed along `axis` by an index tensor (indices clamped into
    the source)."""

    def __init__(self, src: Buf, index: TV, axis: int):
        self.src, self.index, self.axis = src, index, axis
        self.shape, self.elem, self.cost = index.shape, src.elem, index.cost + 2

    def _at(self, fx, idx):
        b = fx.b
        i = self.index.at(fx, idx)
        i = b.sext(i, I64) if i.type.width < 64 else i
        n = const_i64(self.src.shape[self.axis] - 1)
        i = b.select(b.icmp_signed("<", i, ZERO), ZERO, b.select(b.icmp_signed(">", i, n), n, i))
        full = list(idx)
        full[self.axis] = i
        return self.src.at(fx, full)


@rule("tt.gather")
def _gather(fx, op, src, index):
    return _Gather(fx.materialize(as_tv(src, op.operands[0].type)), as_tv(index, op.operands[1].type),
                   int(op.attrs.get("axis", 0)))


# ------------------------------------------------------------------------- reduce and scan
_ASSOC = {"arith.addf", "arith.mulf", "arith.addi", "arith.muli", "arith.maxnumf", "arith.minnumf",
          "arith.maximumf", "arith.minimumf", "arith.maxsi", "arith.minsi", "arith.maxui", "arith.minui",
          "arith.andi", "arith.ori", "arith.xori"}


def _simple_combine(op) -> str | None:
    """The op name of a one-op combine region `r = f(a, b)` over one operand, else None."""
    region = op.regions[0]
    if len(op.operands) != 1 or len(region.blocks) != 1:
        return None
    ops = region.blocks[0].ops
    if len(ops) == 2 and ops[0].name in _ASSOC and ops[1].operands == [ops[0].result] and \
            ops[0].operands == region.blocks[0].args:
        return ops[0].name
    return None


def _combine(fx, op, accs: list, xs: list, reassoc: bool = False) -> list:
    """The combine region on scalars: accs (the running values) with xs (the next elements)."""
    simple = _simple_combine(op)
    if simple in ("arith.addf", "arith.mulf") and reassoc and accs[0].type in (F32, F64):
        e = elem_of(op.operands[0].type)
        b = fx.b
        build = b.fadd if simple == "arith.addf" else b.fmul
        return [finish(fx, build(accs[0], xs[0], flags=("reassoc", "nsz")), e.name)]
    term, vals = fx.emit_region(op.regions[0], list(accs) + list(xs))
    return list(vals)


def _insert(idx, axis, k):
    out = list(idx)
    out.insert(axis, k)
    return out


def _direct(op) -> bool:
    """Whether a reduction may run as one running value per output: a one-op associative combine
    over a type whose every step is exact or computed in float32/64 (where a sum reassociated by
    the vectoriser differs from the interpreter's pairwise order by rounding only). Narrow floats
    (f16, bf16, fp8 round every step) and any other combine region go through `_reduce_tree`."""
    simple = _simple_combine(op)
    return simple is not None and not elem_of(op.operands[0].type).narrow


@rule("tt.reduce")
def _reduce(fx, op, *xs):
    axis = int(op.attrs["axis"])
    tvs = [as_tv(x, v.type) for x, v in zip(xs, op.operands)]
    shape = tvs[0].shape
    n = shape[axis]
    out_shape = tuple(d for k, d in enumerate(shape) if k != axis)
    res_elems = [elem_of(r.type) for r in op.results]
    inner = all(d == 1 for d in shape[axis + 1:])  # contiguous along the axis: accumulate per output
    if not _direct(op):
        return _reduce_tree(fx, op, tvs, axis, out_shape, res_elems)

    def first(idx):
        return [t.at(fx, _insert(idx, axis, ZERO)) for t in tvs]

    if inner or not out_shape:
        outs = [fx.alloc(out_shape, e) for e in res_elems] if out_shape else None
        scalars = []

        def body(idx, accs):
            init = first(idx)
            if n == 1:
                vals = init
            else:
                vals = fx.loop(n - 1, lambda k, a: _combine(
                    fx, op, a, [t.at(fx, _insert(idx, axis, fx.b.add(k, const_i64(1)))) for t in tvs],
                    reassoc=True), init)
            if outs is None:
                scalars.extend(vals)
            else:
                for o, v in zip(outs, vals):
                    o.put(fx, idx, v)
            return accs
        fx.for_each(out_shape, body)
        if outs is None:
            return scalars[0] if len(scalars) == 1 else scalars
        return outs[0] if len(outs) == 1 else outs
    # along an outer axis: running values in buffers, the output dimensions innermost
    outs = [fx.alloc(out_shape, e) for e in res_elems]

    def init_body(idx, accs):
        for o, v in zip(outs, first(idx)):
            o.put(fx, idx, v)
        return accs
    fx.for_each(out_shape, init_body)
    if n > 1:
        def step(k, accs):
            kk = fx.b.add(k, const_i64(1))

            def body(idx, a):
                cur = [o.at(fx, idx) for o in outs]
                new = _combine(fx, op, cur, [t.at(fx, _insert(idx, axis, kk)) for t in tvs])
                for o, v in zip(outs, new):
                    o.put(fx, idx, v)
                return a
            fx.for_each(out_shape, body)
            return accs
        fx.loop(n - 1, step)
    return outs[0] if len(outs) == 1 else outs


class _AxisFirst(TV):
    """Index 0 along `axis` of a buffer, that axis dropped (a tree reduction's result)."""

    def __init__(self, src: Buf, axis: int):
        self.src, self.axis = src, axis
        self.shape = tuple(d for k, d in enumerate(src.shape) if k != axis)
        self.elem, self.cost = src.elem, 1

    def _at(self, fx, idx):
        return self.src.at(fx, _insert(idx, self.axis, ZERO))


def _reduce_tree(fx, op, tvs, axis: int, out_shape, res_elems):
    """The interpreter's pairwise order: neighbours (2i, 2i+1) combined level by level in a
    working copy of the operands (an odd last element carried up), so results match it bit for
    bit and low-precision sums keep their accuracy."""
    shape = tvs[0].shape
    work = [fx.materialize(t, into=fx.alloc(shape, e)) for t, e in zip(tvs, res_elems)]
    n = shape[axis]
    b = fx.b
    while n > 1:
        h = n // 2
        level = list(shape)
        level[axis] = h

        def pair(idx, accs):
            i = idx[axis]
            two = b.mul(i, const_i64(2))
            left = [w.at(fx, _with(idx, axis, two)) for w in work]
            right = [w.at(fx, _with(idx, axis, b.add(two, const_i64(1)))) for w in work]
            for w, v in zip(work, _combine(fx, op, left, right)):
                w.put(fx, idx, v)
            return accs
        fx.for_each(level, pair)
        if n % 2:
            def carry(idx, accs, last=n - 1, to=h):
                for w in work:
                    w.put(fx, _insert(idx, axis, const_i64(to)), w.at(fx, _insert(idx, axis, const_i64(last))))
                return accs
            fx.for_each(out_shape, carry)
        n = h + n % 2
    if not out_shape:
        vals = [w.at(fx, [ZERO] * len(shape)) for w in work]
        return vals[0] if len(vals) == 1 else vals
    outs = [fx.materialize(_AxisFirst(w, axis)) for w in work]
    return outs[0] if len(outs) == 1 else outs


def _with(idx, axis, k):
    out = list(idx)
    out[axis] = k
    return out


@rule("tt.scan")
def _scan(fx, op, *xs):
    axis = int(op.attrs["axis"])
    rev = bool(op.attrs.get("reverse", False))
    tvs = [as_tv(x, v.type) for x, v in zip(xs, op.operands)]
    shape = tvs[0].shape
    n = shape[axis]
    rest = tuple(d for k, d in enumerate(shape) if k != axis)
    outs = [fx.alloc(shape, elem_of(r.type)) for r in op.results]

    def pos(k):  # the k-th position visited along the axis
        return const_i64(n - 1 - k) if isinstance(k, int) and rev else \
            (fx.b.sub(const_i64(n - 1), k) if rev else (const_i64(k) if isinstance(k, int) else k))

    def first(idx, accs):
        i = _insert(idx, axis, pos(0))
        for o, t in zip(outs, tvs):
            o.put(fx, i, t.at(fx, i))
        return accs
    fx.for_each(rest, first)
    if n > 1:
        def step(k, accs):
            b = fx.b
            kk = b.add(k, const_i64(1))
            here = b.sub(const_i64(n - 1), kk) if rev else kk
            prev = b.add(here, const_i64(1)) if rev else b.sub(here, const_i64(1))

            def body(idx, a):
                i_here, i_prev = _insert(idx, axis, here), _insert(idx, axis, prev)
                new = _combine(fx, op, [o.at(fx, i_prev) for o in outs], [t.at(fx, i_here) for t in tvs])
                for o, v in zip(outs, new):
                    o.put(fx, i_here, v)
                return a
            fx.for_each(rest, body)
            return accs
        fx.loop(n - 1, step)
    return outs[0] if len(outs) == 1 else outs


# -------------------------------------------------------------------------------------- dot
def _fmuladd(fx, a, b, c):
    suffix = "f64" if a.type == F64 else "f32"
    fn = fx.kc.intrinsic(f"llvm.fmuladd.{suffix}", a.type, [a.type] * 3)
    return fx.b.call(fn, [a, b, c])


@rule("tt.dot")
def _dot(fx, op, a, b, c):
    ta, tb, tc = (v.type for v in op.operands)
    if len(ta.shape) == 3:
        return _dot_batched(fx, op, a, b, c)
    ea, out_e = elem_of(ta), elem_of(op.result.type)
    M, K = ta.shape
    N = tb.shape[1]
    A = fx.materialize(as_tv(a, ta))
    B = as_tv(b, tb)
    C = as_tv(c, tc)
    if not isinstance(C, (Buf, Splat)) and out_e.name == "f32":
        C = fx.materialize(C)  # an accumulator computed element-wise (acc * alpha): once, for the fast paths
    vw = fx.kc.vector_width
    # B row-major, copied once if it is held otherwise (a transposed tile: a weight read along K):
    # the register-blocked kernel then keeps the accumulators in registers over the whole k loop,
    # which beat dot products of B^T's rows (lanes summed at the end) 1.3x to 1.8x on GEMM tiles
    B = fx.materialize(B)
    if out_e.name == "f32" and ea.reg == F32 and elem_of(tb).reg == F32 and N % vw == 0 and \
            isinstance(C, (Buf, Splat)):
        out = fx.destination(op.result) or fx.alloc((M, N), out_e)
        _dot_blocked(fx, A, B, C, out, M, N, K, vw)
        return out
    return _dot_loops(fx, A, B, C, ea, out_e, M, N, K)


def _dot_batched(fx, op, a, b, c):
    """A 3-D tt.dot ([Z, M, K] x [Z, K, N]): the 2-D dot of each leading index, run on views of
    the operands' row-major buffers, written into its slice of the result."""
    ta, tb, tc = (v.type for v in op.operands)
    ea, out_e = elem_of(ta), elem_of(op.result.type)
    Z, M, K = ta.shape
    N = tb.shape[2]
    A, B = fx.materialize(as_tv(a, ta)), fx.materialize(as_tv(b, tb))
    C = as_tv(c, tc)
    if not isinstance(C, Splat):
        C = fx.materialize(C)
    out = fx.destination(op.result) or fx.alloc((Z, M, N), out_e)
    vw = fx.kc.vector_width

    def view(buf: Buf, z, rows: int, cols: int) -> Buf:
        at = fx.b.gep(buf.ptr, [fx.b.mul(z, const_i64(rows * cols))], source_etype=buf.elem.buf)
        return Buf(at, (rows, cols), buf.elem)

    def one(z, accs):
        Az, Bz, dest = view(A, z, M, K), view(B, z, K, N), view(out, z, M, N)
        Cz = Splat(C.value, (M, N), C.elem) if isinstance(C, Splat) else view(C, z, M, N)
        if out_e.name == "f32" and ea.reg == F32 and elem_of(tb).reg == F32 and N % vw == 0:
            _dot_blocked(fx, Az, Bz, Cz, dest, M, N, K, vw)
        else:
            fx.materialize(_dot_loops(fx, Az, Bz, Cz, ea, out_e, M, N, K), into=dest)
        return accs
    fx.loop(Z, one)
    return out


def _splat_vec(fx, x, vt):
    b = fx.b
    v = b.insert_element(ir.Constant(vt, None), x, ir.Constant(I32, 0))
    return b.shuffle_vector(v, ir.Constant(vt, None), ir.Constant(ir.VectorType(I32, vt.count), None))


def _dot_blocked(fx, A: Buf, B: Buf, C, out: Buf, M: int, N: int, K: int, vw: int) -> None:
    """out = C + A @ B in float32 by a register-blocked micro-kernel: MR rows x NR columns of
    accumulators stay in vector registers for the whole k loop (per k: NR/vw loads of B, MR
    broadcasts of A, MR*NR/vw fused multiply-adds)."""
    b = fx.b
    vt = ir.VectorType(F32, vw)
    nv = 2 if N % (2 * vw) == 0 else 1
    fma = fx.kc.intrinsic(f"llvm.fmuladd.v{vw}f32", vt, [vt, vt, vt])

    def vec_at(buf: Buf, i, j):
        return b.gep(buf.ptr, [b.add(b.mul(i, const_i64(buf.shape[1])), j)], source_etype=F32)

    def block(i0, rows: int, jb):
        j0 = b.mul(jb, const_i64(nv * vw))
        init = []
        for r in range(rows):
            i = b.add(i0, const_i64(r))
            for v in range(nv):
                j = b.add(j0, const_i64(v * vw))
                if isinstance(C, Splat):
                    init.append(_splat_vec(fx, C.value, vt))
                else:
                    init.append(b.load(vec_at(C, i, j), typ=vt, align=4))

        def kstep(k, accs):
            bs = [b.load(vec_at(B, k, b.add(j0, const_i64(v * vw))), typ=vt, align=4) for v in range(nv)]
            new = []
            for r in range(rows):
                a_rk = b.load(b.gep(A.ptr, [b.add(b.mul(b.add(i0, const_i64(r)), const_i64(K)), k)],
                                    source_etype=F32), typ=F32)
                av = _splat_vec(fx, a_rk, vt)
                for v in range(nv):
                    new.append(b.call(fma, [av, bs[v], accs[r * nv + v]]))
            return new
        accs = fx.loop(K, kstep, init)
        for r in range(rows):
            i = b.add(i0, const_i64(r))
            for v in range(nv):
                b.store(accs[r * nv + v], vec_at(out, i, b.add(j0, const_i64(v * vw))), align=4)

    mr = 4 if M >= 4 else M
    full = M // mr
    fx.loop(full, lambda ib, accs: fx.loop(N // (nv * vw), lambda jb, a2: (
        block(b.mul(ib, const_i64(mr)), mr, jb), a2)[1], accs))
    for r in range(full * mr, M):
        fx.loop(N // (nv * vw), lambda jb, a2: (block(const_i64(r), 1, jb), a2)[1])


def _dot_loops(fx, A: Buf, B: Buf, C, ea, out_e, M: int, N: int, K: int):
    """out = C + A @ B by plain loop nests (i, k, j: LLVM vectorises the j loop); accumulates in
    float32 (float64 for f64, int32 / int64 for integers) and rounds to the result type once."""
    if out_e.is_int:
        acc_t = I32 if out_e.reg.width <= 32 else I64
        work = elem("i32" if acc_t == I32 else "i64")
    elif out_e.name == "f64" or ea.name == "f64":
        acc_t, work = F64, elem("f64")
    else:
        acc_t, work = F32, elem("f32")
    acc = fx.alloc((M, N), work)
    bd = fx.b

    def widen(v):
        if acc_t in (F32, F64):
            return v if v.type == acc_t else bd.fpext(v, acc_t)
        return bd.sext(v, acc_t) if v.type.width < acc_t.width else v

    def init(idx, accs):
        acc.put(fx, idx, widen(C.at(fx, idx)))
        return accs
    fx.for_each((M, N), init)

    def row(i, accs):
        def kstep(k, accs2):
            aik = widen(A.at(fx, [i, k]))

            def col(j, accs3):
                cur = acc.at(fx, [i, j])
                bkj = widen(B.at(fx, [k, j]))
                new = _fmuladd(fx, aik, bkj, cur) if acc_t in (F32, F64) else bd.add(cur, bd.mul(aik, bkj))
                acc.put(fx, [i, j], new)
                return accs3
            return fx.loop(N, col, accs2)
        return fx.loop(K, kstep, accs)
    fx.loop(M, row)
    if out_e.name == work.name:
        return acc
    out = fx.alloc((M, N), out_e)

    def narrow(idx, accs):
        s = acc.at(fx, idx)
        if acc_t in (F32, F64):
            v = finish(fx, s, out_e.name)
        else:
            v = s if out_e.reg == s.type else bd.trunc(s, out_e.reg)
        out.put(fx, idx, v)
        return accs
    fx.for_each((M, N), narrow)
    return out


# ------------------------------------------------------------------------------- dot_scaled
_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


class _E2M1Unpack(TV):
    """Packed e2m1 operand bytes -> float32 values, two per byte along `axis` (low nibble first)."""

    def __init__(self, src: TV, axis: int):
        self.src, self.axis = src, axis
        shape = list(src.shape)
        shape[axis] *= 2
        self.shape, self.elem, self.cost = tuple(shape), elem("f32"), src.cost + 4

    def _at(self, fx, idx):
        b = fx.b
        i = idx[self.axis]
        byte = self.src.at(fx, _with(idx, self.axis, b.lshr(i, const_i64(1))))
        byte = b.zext(byte, I32) if byte.type.width < 32 else b.trunc(byte, I32)
        odd = b.trunc(b.and_(i, const_i64(1)), I32)
        nib = b.and_(b.lshr(byte, b.mul(odd, ir.Constant(I32, 4))), ir.Constant(I32, 0xF))
        table = _global_table(fx, "day0_e2m1", _E2M1)
        return b.load(b.gep(table, [b.zext(nib, I64)], source_etype=F32), typ=F32)


def _global_table(fx, name: str, values: list[float]) -> ir.GlobalVariable:
    g = fx.kc.ir.globals.get(name)
    if g is None:
        ty = ir.ArrayType(F32, len(values))
        g = ir.GlobalVariable(fx.kc.ir, ty, name=name)
        g.global_constant = True
        g.linkage = "internal"
        g.initializer = ir.Constant(ty, values)
    return g


class _MXScaled(TV):
    """An operand times its e8m0 scales (2**(byte - 127), 0xFF NaN): element [.., k, ..] by
    scale[row, k // group], `row` the operand's other axis."""

    def __init__(self, src: TV, scale: TV, k_axis: int):
        self.src, self.scale, self.k_axis = src, scale, k_axis
        self.group = src.shape[k_axis] // scale.shape[-1]
        self.shape, self.elem, self.cost = src.shape, elem("f32"), src.cost + scale.cost + 4

    def _at(self, fx, idx):
        b = fx.b
        row = idx[1 - self.k_axis]
        k = idx[self.k_axis]
        byte = self.scale.at(fx, [row, b.udiv(k, const_i64(self.group))])
        byte = b.zext(byte, I32) if byte.type.width < 32 else b.trunc(byte, I32)
        bits = b.shl(byte, ir.Constant(I32, 23))  # 2**(byte-127) as a float32 exponent (byte 0: zero)
        sc = b.bitcast(bits, F32)
        sc = b.select(b.icmp_unsigned("==", byte, ir.Constant(I32, 0)), ir.Constant(F32, 2.0 ** -127), sc)
        sc = b.select(b.icmp_unsigned("==", byte, ir.Constant(I32, 0xFF)), ir.Constant(F32, float("nan")), sc)
        v = self.src.at(fx, idx)
        return b.fmul(v if v.type == F32 else b.fpext(v, F32), sc)


class _AsF32(TV):
    def __init__(self, src: TV):
        self.src, self.shape, self.elem, self.cost = src, src.shape, elem("f32"), src.cost

    def _at(self, fx, idx):
        v = self.src.at(fx, idx)
        if v.type == F32:
            return v
        if v.type == F64:
            return fx.b.fptrunc(v, F32)
        return fx.b.sitofp(v, F32)


def _scale_presence(op, n: int) -> tuple[bool, bool]:
    if "has_a_scale" in op.attrs:
        return bool(op.attrs["has_a_scale"]), bool(op.attrs["has_b_scale"])
    seg = op.attrs.get("operandSegmentSizes") or op.attrs.get("operand_segment_sizes")
    if seg is not None and len(seg) == 5:
        return bool(seg[3]), bool(seg[4])
    return n >= 1, n >= 2


@rule("tt.dot_scaled")
def _dot_scaled(fx, op, a, b, c, *scales):
    """Microscaled dot (OCP MX), as the interpreter computes it: operands in e2m1 (two per byte),
    e4m3, e5m2, bf16 or fp16, optionally scaled by e8m0 bytes (one per 32 elements along K),
    multiplied and accumulated in float32."""
    has_a, has_b = _scale_presence(op, len(scales))
    scales = list(scales)
    sa = as_tv(scales.pop(0), op.operands[3].type) if has_a else None
    sb = as_tv(scales.pop(0), op.operands[3 + has_a].type) if has_b else None
    A, B = as_tv(a, op.operands[0].type), as_tv(b, op.operands[1].type)
    A = _E2M1Unpack(A, 1 if op.attrs.get("lhs_k_pack", True) else 0) if str(op.attrs.get("lhs")) == "e2m1" \
        else _AsF32(A)
    B = _E2M1Unpack(B, 0 if op.attrs.get("rhs_k_pack", True) else 1) if str(op.attrs.get("rhs")) == "e2m1" \
        else _AsF32(B)
    if sa is not None:
        A = _MXScaled(A, sa, k_axis=1)
    if sb is not None:
        B = _MXScaled(B, sb, k_axis=0)
    M, K = A.shape
    N = B.shape[1]
    out_e = elem_of(op.result.type)
    Abuf, Bbuf = fx.materialize(A), fx.materialize(B)
    C = as_tv(c, op.operands[2].type)
    dest = fx.destination(op.result)
    if out_e.name == "f32" and N % fx.kc.vector_width == 0 and isinstance(C, (Buf, Splat)):
        out = dest or fx.alloc((M, N), out_e)
        _dot_blocked(fx, Abuf, Bbuf, C, out, M, N, K, fx.kc.vector_width)
        return out
    return _dot_loops(fx, Abuf, Bbuf, C, elem("f32"), out_e, M, N, K)


# ------------------------------------------------------------------------------ histogram
@rule("tt.histogram")
def _histogram(fx, op, x, mask=None):
    nb = op.result.type.shape[0]
    e = elem_of(op.result.type)
    out = fx.alloc((nb,), e)
    xt = as_tv(x, op.operands[0].type)
    mt = None if mask is None else as_tv(mask, op.operands[1].type)

    def zero(idx, accs):
        out.put(fx, idx, ir.Constant(e.reg, 0))
        return accs
    fx.for_each((nb,), zero)
    b = fx.b

    def body(idx, accs):
        v = xt.at(fx, idx)
        v64 = b.sext(v, I64) if v.type.width < 64 else v
        ok = b.and_(b.icmp_signed(">=", v64, ZERO), b.icmp_signed("<", v64, const_i64(nb)))
        if mt is not None:
            ok = b.and_(ok, mt.at(fx, idx))
        slot = b.select(ok, v64, ZERO)
        addr = out.addr_linear(fx, slot)
        cur = b.load(addr, typ=e.buf)
        b.store(b.add(cur, b.zext(ok, e.buf)), addr)
        return accs
    fx.for_each(xt.shape, body)
    return out


# --------------------------------------------------------------------------- assert, no-ops
@rule("tt.assert")
def _assert(fx, op, cond, *rest):
    t = op.operands[0].type
    ct = as_tv(cond, t)
    b = fx.b

    def body(idx, accs):
        c = ct.at(fx, idx)
        if c.type != I1:
            c = b.icmp_unsigned("!=", c, ir.Constant(c.type, 0))
        return [b.and_(accs[0], c)]
    ok = fx.for_each(shape_of(t), body, [ir.Constant(I1, 1)])[0]
    fx.fail_if(b.xor(ok, ir.Constant(I1, 1)), FAULT_ASSERT, op)


@rule("gpu.barrier")
@rule("ttg.barrier")
@rule("llvm.intr.assume")
def _no_effect(fx, op, *args):
    """A barrier between a program's threads, and an optimisation hint: nothing to do here."""
    return None
