"""Element-wise `arith.*` ops and Triton's element-wise `tt.*` ops as LLVM IR, with the
interpreter's numerics (backends/cpu_interp/ops_arith.py states them; each emitter here follows
the rule of the same name there):
  * integer add/sub/mul/neg wrap; division by zero gives -1 (quotient) / the dividend
    (remainder), INT_MIN / -1 gives INT_MIN; shift amounts of the width or more give 0 (shli,
    shrui) or the sign (shrsi)
  * float ops round to the result type after every op (f16, bf16, fp8 computed in float32);
    no contraction into fma, subnormals kept
  * fptosi / fptoui saturate (NaN -> 0), through 16 bits for narrower results
Every emitter is branch-free, so element-wise chains vectorise.
"""
from __future__ import annotations

from typing import Callable

from llvmlite import ir

from sdk.ttir import TensorType

from .numerics import call, finish, round_to
from .table import TABLE
from .tensors import TV, Lazy, Splat
from .types import F64, I1, I8, I32, I64, Elem, Unsupported, elem_of, shape_of


# ------------------------------------------------------------------------------- plumbing
def apply(fx, op, fn: Callable, vals, cost: int = 1, result_type=None):
    """fn(fx, *element values) over the operands: a scalar, a splat (every operand uniform), or a
    lazy tensor."""
    t = result_type if result_type is not None else op.results[0].type
    if not isinstance(t, TensorType):
        return fn(fx, *vals)
    shape, e = shape_of(t), elem_of(t)
    if all(not isinstance(v, TV) or isinstance(v, Splat) for v in vals):
        return Splat(fn(fx, *[v.value if isinstance(v, Splat) else v for v in vals]), shape, e)
    tvs = [v if isinstance(v, TV) else Splat(v, shape, elem_of(o.type)) for v, o in zip(vals, op.operands)]
    return Lazy(fn, tvs, shape, e, cost, op)


def elementwise(name: str, cost: int = 1, accepts=None):
    """Register `emit(fx, op, *element values) -> value` as the rule of element-wise op `name`."""
    def deco(emit):
        def rule(fx, op, *vals):
            return apply(fx, op, lambda fx, *s: emit(fx, op, *s), vals, cost)
        TABLE.register(name, rule, accepts)
        return emit
    return deco


def res(op) -> Elem:
    return elem_of(op.results[0].type)


def arg(op, k: int = 0) -> Elem:
    return elem_of(op.operands[k].type)


def iconst(t: ir.IntType, v: int) -> ir.Constant:
    return ir.Constant(t, v & ((1 << t.width) - 1))


# ------------------------------------------------------------------------------ constants
def constant_scalar(value, e: Elem) -> ir.Constant:
    if e.is_float:
        return ir.Constant(e.reg, float(value))
    if e.name == "i1":
        return ir.Constant(I1, int(bool(value)))
    if e.is_ptr:
        raise Unsupported("a pointer constant")
    return iconst(e.reg, int(value))


# ---------------------------------------------------------------------------- float arith
def _float_binary(name: str, build: Callable, cost: int = 1):
    @elementwise(name, cost)
    def emit(fx, op, a, b_):
        return finish(fx, build(fx, a, b_), res(op).name)


_float_binary("arith.addf", lambda fx, a, b: fx.b.fadd(a, b))
_float_binary("arith.subf", lambda fx, a, b: fx.b.fsub(a, b))
_float_binary("arith.mulf", lambda fx, a, b: fx.b.fmul(a, b))
_float_binary("arith.divf", lambda fx, a, b: fx.b.fdiv(a, b), cost=4)
_float_binary("tt.precise_divf", lambda fx, a, b: fx.b.fdiv(a, b), cost=4)
_float_binary("arith.remf", lambda fx, a, b: fx.b.frem(a, b), cost=20)
_float_binary("arith.maxnumf", lambda fx, a, b: call(fx, "llvm.maximumnum", a, b))
_float_binary("arith.minnumf", lambda fx, a, b: call(fx, "llvm.minimumnum", a, b))
_float_binary("arith.maximumf", lambda fx, a, b: call(fx, "llvm.maximum", a, b))
_float_binary("arith.minimumf", lambda fx, a, b: call(fx, "llvm.minimum", a, b))


@elementwise("arith.negf")
def _negf(fx, op, a):
    return fx.b.fneg(a)


@elementwise("tt.precise_sqrt", cost=4)
def _psqrt(fx, op, a):
    return finish(fx, call(fx, "llvm.sqrt", a), res(op).name)


@elementwise("tt.clampf", cost=2)
def _clampf(fx, op, x, lo, hi):
    if str(op.attrs.get("propagateNan", "none")).lower() == "all":
        r = call(fx, "llvm.minimum", call(fx, "llvm.maximum", x, lo), hi)
    else:
        r = call(fx, "llvm.minimumnum", call(fx, "llvm.maximumnum", x, lo), hi)
    return finish(fx, r, res(op).name)


# ---------------------------------------------------------------------------- integer arith
def _int_binary(name: str, build: Callable, cost: int = 1, widen_i1: bool = False):
    """An integer op on the operands' type; `widen_i1`: i1 operands computed as 0/1 in i8 (the
    interpreter's view of i1 for signed arithmetic)."""
    @elementwise(name, cost)
    def emit(fx, op, a, b_):
        if widen_i1 and a.type == I1:
            return fx.b.trunc(build(fx, fx.b.zext(a, I8), fx.b.zext(b_, I8)), I1)
        return build(fx, a, b_)


def _smax(fx, a, b):
    return fx.b.select(fx.b.icmp_signed(">", a, b), a, b)


def _smin(fx, a, b):
    return fx.b.select(fx.b.icmp_signed("<", a, b), a, b)


def _umax(fx, a, b):
    return fx.b.select(fx.b.icmp_unsigned(">", a, b), a, b)


def _umin(fx, a, b):
    return fx.b.select(fx.b.icmp_unsigned("<", a, b), a, b)


class _SignedDivision:
    """LLVM's sdiv / srem of a by b with the divisor made safe (0 and -1 replaced by 1: division by
    zero is undefined, INT_MIN / -1 overflows), and the flags that patch the results to what the
    interpreter defines for those divisors."""

    def __init__(self, fx, a, b):
        bd = self.bd = fx.b
        t = self.t = a.type
        self.a, self.zero, self.m1 = a, iconst(t, 0), iconst(t, -1)
        self.is0, self.ism1 = bd.icmp_unsigned("==", b, self.zero), bd.icmp_unsigned("==", b, self.m1)
        self.safe = bd.select(bd.or_(self.is0, self.ism1), iconst(t, 1), b)
        self.q, self.r = bd.sdiv(a, self.safe), bd.srem(a, self.safe)

    def floor(self):
        """The quotient rounded toward minus infinity (truncated, one less when inexact and the
        signs differ), and whether it was inexact."""
        bd, zero = self.bd, self.zero
        inexact = bd.icmp_unsigned("!=", self.r, zero)
        neg = bd.icmp_unsigned("!=", bd.icmp_signed("<", self.r, zero), bd.icmp_signed("<", self.safe, zero))
        return bd.select(bd.and_(inexact, neg), bd.sub(self.q, iconst(self.t, 1)), self.q), inexact

    def quotient(self, q):
        """q where b is neither 0 nor -1; -1 for b == 0, -a for b == -1."""
        bd = self.bd
        return bd.select(self.ism1, bd.sub(self.zero, self.a), bd.select(self.is0, self.m1, q))


def _divsi(fx, a, b):
    d = _SignedDivision(fx, a, b)
    return d.quotient(d.q)


def _remsi(fx, a, b):
    d = _SignedDivision(fx, a, b)
    return d.bd.select(d.ism1, d.zero, d.bd.select(d.is0, a, d.r))


def _floordivsi(fx, a, b):
    d = _SignedDivision(fx, a, b)
    return d.quotient(d.floor()[0])


def _ceildivsi(fx, a, b):
    # the interpreter: floor quotient, plus one when inexact
    d = _SignedDivision(fx, a, b)
    fq, inexact = d.floor()
    return d.quotient(d.bd.select(inexact, d.bd.add(fq, iconst(d.t, 1)), fq))


def _divui(fx, a, b):
    bd = fx.b
    t = a.type
    is0 = bd.icmp_unsigned("==", b, iconst(t, 0))
    q = bd.udiv(a, bd.select(is0, iconst(t, 1), b))
    return bd.select(is0, iconst(t, -1), q)


def _remui(fx, a, b):
    bd = fx.b
    t = a.type
    is0 = bd.icmp_unsigned("==", b, iconst(t, 0))
    r = bd.urem(a, bd.select(is0, iconst(t, 1), b))
    return bd.select(is0, a, r)


_int_binary("arith.addi", lambda fx, a, b: fx.b.add(a, b))
_int_binary("arith.subi", lambda fx, a, b: fx.b.sub(a, b))
_int_binary("arith.muli", lambda fx, a, b: fx.b.mul(a, b))
_int_binary("arith.andi", lambda fx, a, b: fx.b.and_(a, b))
_int_binary("arith.ori", lambda fx, a, b: fx.b.or_(a, b))
_int_binary("arith.xori", lambda fx, a, b: fx.b.xor(a, b))
_int_binary("arith.maxsi", _smax, widen_i1=True)
_int_binary("arith.minsi", _smin, widen_i1=True)
_int_binary("arith.maxui", _umax)
_int_binary("arith.minui", _umin)
_int_binary("arith.divsi", _divsi, cost=8, widen_i1=True)
_int_binary("arith.remsi", _remsi, cost=8, widen_i1=True)
_int_binary("arith.floordivsi", _floordivsi, cost=8, widen_i1=True)
_int_binary("arith.ceildivsi", _ceildivsi, cost=8, widen_i1=True)
_int_binary("arith.divui", _divui, cost=8)
_int_binary("arith.remui", _remui, cost=8)


def _shift(kind: str):
    def build(fx, a, b):
        bd = fx.b
        t = a.type
        if t == I1:  # any set amount shifts everything out
            return bd.select(b, a if kind == "shrsi" else iconst(I1, 0), a)
        bits = iconst(t, t.width)
        big = bd.icmp_unsigned(">=", b, bits)
        amt = bd.select(big, iconst(t, t.width - 1), b)
        if kind == "shli":
            return bd.select(big, iconst(t, 0), bd.shl(a, amt))
        if kind == "shrui":
            return bd.select(big, iconst(t, 0), bd.lshr(a, amt))
        return bd.ashr(a, amt)
    return build


for _k in ("shli", "shrui", "shrsi"):
    _int_binary(f"arith.{_k}", _shift(_k))


@elementwise("tt.mulhiui", cost=2)
def _mulhiui(fx, op, a, b):
    bd = fx.b
    t = a.type
    wide = ir.IntType(t.width * 2)
    p = bd.mul(bd.zext(a, wide), bd.zext(b, wide))
    return bd.trunc(bd.lshr(p, iconst(wide, t.width)), t)


# ---------------------------------------------------------------------------------- compares
_CMPI = ("eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge")
_CMPF = ("false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq", "ugt", "uge", "ult", "ule",
         "une", "uno", "true")
_REL = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def _predicate(op, names):
    p = op.attrs["predicate"]
    return names[p] if isinstance(p, int) else str(p)


@elementwise("arith.cmpi")
def _cmpi(fx, op, a, b):
    pred = _predicate(op, _CMPI)
    bd = fx.b
    if a.type.__class__ is ir.PointerType:
        a, b = bd.ptrtoint(a, I64), bd.ptrtoint(b, I64)
    if pred in ("eq", "ne"):
        return bd.icmp_unsigned(_REL[pred], a, b)
    if pred[0] == "u":
        return bd.icmp_unsigned(_REL[pred[1:]], a, b)
    return bd.icmp_signed(_REL[pred[1:]], a, b)  # i1 as signed is 0 / -1, as in the interpreter


@elementwise("arith.cmpf")
def _cmpf(fx, op, a, b):
    pred = _predicate(op, _CMPF)
    bd = fx.b
    if pred in ("false", "true"):
        return ir.Constant(I1, int(pred == "true"))
    if pred == "ord":
        return bd.fcmp_ordered("ord", a, b)
    if pred == "uno":
        return bd.fcmp_unordered("uno", a, b)
    rel = {"one": "!=", "une": "!="}.get(pred) or _REL[pred[1:]]
    if pred[0] == "u":
        return bd.fcmp_unordered(rel, a, b)
    return bd.fcmp_ordered(rel, a, b)


@TABLE.rule("arith.select")
def _select(fx, op, c, a, b):
    return apply(fx, op, lambda fx, c_, a_, b_: fx.b.select(c_, a_, b_), [c, a, b])


# ------------------------------------------------------------------------------------ casts
@elementwise("arith.extf")
def _extf(fx, op, x):
    e = res(op)
    return fx.b.fpext(x, F64) if e.name == "f64" and x.type != F64 else x


def _rounding(op, key: str, default: str = "rtne") -> str:
    mode = str(op.attrs.get(key, default))
    return "rtz" if mode in ("toward_zero", "1", "rtz") else "rtne"


@elementwise("arith.truncf", cost=3)
def _truncf(fx, op, x):
    return round_to(fx, x, res(op).name, _rounding(op, "roundingmode"))


@elementwise("tt.fp_to_fp", cost=6)
def _fp_to_fp(fx, op, x):
    return round_to(fx, x, res(op).name, _rounding(op, "rounding"))


@elementwise("arith.extsi")
def _extsi(fx, op, x):
    return fx.b.sext(x, res(op).reg)


@elementwise("arith.extui")
def _extui(fx, op, x):
    return fx.b.zext(x, res(op).reg)


@elementwise("arith.trunci")
def _trunci(fx, op, x):
    return fx.b.trunc(x, res(op).reg)


def _resize(fx, x, t: ir.IntType, signed: bool) -> ir.Value:
    if x.type.width == t.width:
        return x
    if x.type.width > t.width:
        return fx.b.trunc(x, t)
    return fx.b.sext(x, t) if signed else fx.b.zext(x, t)


@elementwise("arith.index_cast")
def _index_cast(fx, op, x):
    return _resize(fx, x, res(op).reg, signed=True)


@elementwise("arith.index_castui")
def _index_castui(fx, op, x):
    return _resize(fx, x, res(op).reg, signed=False)


def _int_to_float(fx, op, x, signed: bool):
    dst = res(op).name
    src_bits = x.type.width
    bd = fx.b
    conv = bd.sitofp if signed else bd.uitofp
    if dst in ("f32", "f64"):
        return conv(x, res(op).reg)
    if src_bits <= 32:  # exact in float64, then one rounding
        return round_to(fx, conv(x, F64), dst)
    return round_to(fx, conv(x, F64), dst)  # 64-bit: through float64, as the interpreter


@elementwise("arith.sitofp", cost=2)
def _sitofp(fx, op, x):
    return _int_to_float(fx, op, x, signed=True)


@elementwise("arith.uitofp", cost=2)
def _uitofp(fx, op, x):
    return _int_to_float(fx, op, x, signed=False)


def float_to_int(fx, x: ir.Value, e: Elem, signed: bool) -> ir.Value:
    """Truncating float -> integer conversion of type `e`, saturating (NaN -> 0): results narrower
    than 16 bits saturate at 16 bits and wrap; i1 keeps the low bit of the value clamped to
    [-32768, 65535]."""
    bd = fx.b
    if x.type != F64:
        x = bd.fpext(x, F64)
    if e.name == "i1":
        t = call_sat(fx, "llvm.fptosi.sat", x, I32)
        t = bd.select(bd.icmp_signed("<", t, ir.Constant(I32, -32768)), ir.Constant(I32, -32768), t)
        t = bd.select(bd.icmp_signed(">", t, ir.Constant(I32, 65535)), ir.Constant(I32, 65535), t)
        return bd.trunc(t, I1)
    bits = max(e.reg.width, 16)
    wide = ir.IntType(bits)
    r = call_sat(fx, "llvm.fptosi.sat" if signed else "llvm.fptoui.sat", x, wide)
    return r if bits == e.reg.width else bd.trunc(r, e.reg)


def call_sat(fx, name: str, x: ir.Value, t: ir.IntType) -> ir.Value:
    src = "f64" if x.type == F64 else "f32"
    fn = fx.kc.intrinsic(f"{name}.i{t.width}.{src}", t, [x.type])
    return fx.b.call(fn, [x])


@elementwise("arith.fptosi", cost=2)
def _fptosi(fx, op, x):
    return float_to_int(fx, x, res(op), signed=True)


@elementwise("arith.fptoui", cost=2)
def _fptoui(fx, op, x):
    return float_to_int(fx, x, res(op), signed=False)


def _bitcast(fx, op, x):
    from .numerics import from_mem, to_mem
    src, dst = arg(op), res(op)
    if src.is_ptr or dst.is_ptr or src.name == dst.name:
        if src.is_ptr != dst.is_ptr:
            raise Unsupported("a bitcast between pointers and integers")
        return x
    raw = to_mem(fx, x, src)
    if src.name == "i1" or dst.name == "i1":
        raw = fx.b.zext(raw, I8) if raw.type == I1 else raw
        return from_mem(fx, fx.b.trunc(raw, I8) if raw.type != I8 else raw, dst)
    if raw.type != dst.mem:
        raw = fx.b.bitcast(raw, dst.mem)
    return from_mem(fx, raw, dst)


TABLE.register("arith.bitcast", lambda fx, op, x: apply(fx, op, lambda fx, s: _bitcast(fx, op, s), [x], 2))
TABLE.register("tt.bitcast", lambda fx, op, x: apply(fx, op, lambda fx, s: _bitcast(fx, op, s), [x], 2))


__all__ = ["apply", "elementwise", "constant_scalar", "float_to_int", "res", "arg", "iconst"]
