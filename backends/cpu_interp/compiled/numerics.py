"""Float formats in LLVM IR, with the interpreter's rounding (sdk.numerics) bit for bit.

f16, bf16 and fp8 values are computed in float32 and rounded after every op; memory holds their
bits. Everything here is branch-free integer and float arithmetic, so loops that use it still
vectorise:
  round_to     float32 / float64 -> the compute value of a narrower type (rtne or rtz; fp8
               saturates), the port of `sdk.numerics.round_to`
  from_mem     memory bits -> compute value (fp8 through a 256-entry table, as the interpreter)
  to_mem       compute value -> memory bits (rounded first, as `sdk.numerics.to_storage`)
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from sdk import numerics as N

from .types import F16, F32, F64, I1, I8, I16, I32, I64, Elem

_FMT = N._FORMATS


def f32c(x: float) -> ir.Constant:
    return ir.Constant(F32, float(np.float32(x)))


def i32c(x: int) -> ir.Constant:
    return ir.Constant(I32, int(np.int64(x).astype(np.int32)))


def intrinsic(fx, name: str, ty: ir.Type, nargs: int = 1) -> ir.Function:
    suffix = {F32: "f32", F64: "f64"}.get(ty) or f"i{ty.width}"
    return fx.kc.intrinsic(f"{name}.{suffix}", ty, [ty] * nargs)


def call(fx, name: str, *args: ir.Value) -> ir.Value:
    """An LLVM intrinsic overloaded on its first operand's type (`llvm.fabs` ...)."""
    return fx.b.call(intrinsic(fx, name, args[0].type, len(args)), list(args))


def is_nan(fx, x: ir.Value) -> ir.Value:
    return fx.b.fcmp_unordered("uno", x, x)


# ---------------------------------------------------------------------------------- rounding
def round_to(fx, x: ir.Value, name: str, rounding: str = "rtne") -> ir.Value:
    """A float32 or float64 value -> the compute value of element type `name` (float32 for f16,
    bf16, fp8, f32; float64 for f64)."""
    b = fx.b
    if name == "f64":
        return x if x.type == F64 else b.fpext(x, F64)
    if x.type == F64:
        if name == "f32":
            return b.fptrunc(x, F32) if rounding == "rtne" else _f64_to_f32_rz(fx, x)[0]
        # to a narrower type through float32: round to odd first (innocuous double rounding)
        x = _f64_to_f32_odd(fx, x) if rounding == "rtne" else _f64_to_f32_rz(fx, x)[0]
    if name == "f32":
        return x
    if name == "f16" and rounding == "rtne":
        return b.fpext(b.fptrunc(x, F16), F32)
    if name == "bf16" and rounding == "rtne":
        return _bf16_rtne(fx, x)
    mbits, emin, maxval, has_inf = _FMT[name]
    return _round_f32(fx, x, mbits, emin, maxval, has_inf, rounding, satfinite=name.startswith("f8"))


def _bf16_rtne(fx, x: ir.Value) -> ir.Value:
    b = fx.b
    bits = b.bitcast(x, I32)
    lsb = b.and_(b.lshr(bits, i32c(16)), i32c(1))
    r = b.and_(b.add(b.add(bits, i32c(0x7FFF)), lsb), i32c(0xFFFF0000))
    return b.select(is_nan(fx, x), x, b.bitcast(r, F32))


def _round_f32(fx, x, mbits, emin, maxval, has_inf, rounding, satfinite) -> ir.Value:
    b = fx.b
    a = call(fx, "llvm.fabs", x)
    bits = b.bitcast(a, I32)
    s = 23 - mbits
    keep = i32c((0xFFFFFFFF << s) & 0xFFFFFFFF)
    if rounding == "rtz":
        y = b.and_(bits, keep)
    else:
        lsb = b.and_(b.lshr(bits, i32c(s)), i32c(1))
        y = b.and_(b.add(b.add(bits, i32c((1 << (s - 1)) - 1)), lsb), keep)
    y = b.bitcast(y, F32)
    if emin > -126:
        sub = b.fcmp_ordered("<", a, f32c(2.0 ** emin))
        q = b.fmul(a, f32c(2.0 ** (mbits - emin)))
        q = call(fx, "llvm.trunc" if rounding == "rtz" else "llvm.roundeven", q)
        y = b.select(sub, b.fmul(q, f32c(2.0 ** (emin - mbits))), y)
    top = f32c(maxval)
    finite = b.fcmp_ordered("<", a, f32c(np.inf))
    over = b.and_(finite, b.fcmp_ordered(">", y, top))
    y = b.select(over, top if (rounding == "rtz" or satfinite) else f32c(np.inf), y)
    inf = b.fcmp_ordered("==", a, f32c(np.inf))
    y = b.select(inf, top if (satfinite or not has_inf) else a, y)
    y = b.select(is_nan(fx, x), f32c(np.nan), y)
    return call(fx, "llvm.copysign", y, x)


def _f64_to_f32_rz(fx, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(x rounded toward zero to float32, whether that was inexact)."""
    b = fx.b
    t = b.fptrunc(x, F32)
    back = call(fx, "llvm.fabs", b.fpext(t, F64))
    ax = call(fx, "llvm.fabs", x)
    away = b.fcmp_ordered(">", back, ax)  # rounded away from zero: step back by one ulp
    t = b.select(away, b.bitcast(b.sub(b.bitcast(t, I32), i32c(1)), F32), t)
    inexact = b.fcmp_ordered("!=", b.fpext(t, F64), x)
    return t, inexact


def _f64_to_f32_odd(fx, x: ir.Value) -> ir.Value:
    """x rounded to float32 to odd (truncate, then set the last bit when inexact): rounding that
    to a format of at most 22 mantissa bits rounds x itself correctly."""
    b = fx.b
    t, inexact = _f64_to_f32_rz(fx, x)
    odd = b.bitcast(b.or_(b.bitcast(t, I32), i32c(1)), F32)
    return b.select(inexact, odd, t)


def finish(fx, x: ir.Value, name: str) -> ir.Value:
    """A float result computed in float32/float64 -> the compute value of type `name`."""
    if (name == "f32" and x.type == F32) or (name == "f64" and x.type == F64):
        return x
    return round_to(fx, x, name)


# ------------------------------------------------------------------------- memory <-> compute
def from_mem(fx, raw: ir.Value, e: Elem) -> ir.Value:
    """Bits of element type `e` as memory holds them -> its compute value."""
    b = fx.b
    n = e.name
    if n == "i1":
        return b.icmp_unsigned("!=", raw, ir.Constant(I8, 0))
    if n == "f16":
        return b.fpext(raw, F32)
    if n == "bf16":
        return b.bitcast(b.shl(b.zext(raw, I32), i32c(16)), F32)
    if n.startswith("f8"):
        table = fp8_table(fx, n)
        return b.load(b.gep(table, [b.zext(raw, I64)], source_etype=F32), typ=F32)
    return raw


def to_mem(fx, v: ir.Value, e: Elem) -> ir.Value:
    """A compute value of element type `e` -> the bits memory holds (rounded first)."""
    b = fx.b
    n = e.name
    if n == "i1":
        return b.zext(v, I8)
    if n == "f16":
        return b.fptrunc(v, F16)
    if n == "bf16":
        r = _bf16_rtne(fx, v)
        return b.trunc(b.lshr(b.bitcast(r, I32), i32c(16)), I16)
    if n.startswith("f8"):
        r = round_to(fx, v, n)
        if N._FP8[n][3]:  # an infinity stays one (no saturation on store)
            r = b.select(b.fcmp_ordered("==", call(fx, "llvm.fabs", v), f32c(np.inf)), v, r)
        return fp8_encode(fx, r, n)
    return v


def fp8_table(fx, name: str) -> ir.GlobalVariable:
    key = f"day0_fp8_{name}"
    g = fx.kc.ir.globals.get(key)
    if g is None:
        vals = [float(v) for v in N._fp8_table(name)]
        ty = ir.ArrayType(F32, 256)
        g = ir.GlobalVariable(fx.kc.ir, ty, name=key)
        g.global_constant = True
        g.linkage = "internal"
        g.initializer = ir.Constant(ty, vals)
    return g


def fp8_encode(fx, v: ir.Value, name: str) -> ir.Value:
    """fp8 values already in the format's value set (float32) -> codes (`_fp8_encode`)."""
    b = fx.b
    e_bits, m_bits, bias, has_inf = N._FP8[name]
    _, inf_code, nan_code = N._fp8_positive(name)
    a = call(fx, "llvm.fabs", v)
    bits = b.bitcast(a, I32)
    exp = b.shl(b.sub(b.lshr(bits, i32c(23)), i32c(127 - bias)), i32c(m_bits))
    man = b.and_(b.lshr(bits, i32c(23 - m_bits)), i32c((1 << m_bits) - 1))
    code = b.or_(exp, man)
    sub = b.fcmp_ordered("<", a, f32c(2.0 ** (1 - bias)))
    scaled = b.fptosi(b.fmul(a, f32c(2.0 ** (m_bits - 1 + bias))), I32)
    code = b.select(sub, scaled, code)
    if inf_code >= 0:
        code = b.select(b.fcmp_ordered("==", a, f32c(np.inf)), i32c(inf_code), code)
    neg = b.icmp_signed("<", b.bitcast(v, I32), i32c(0))
    if name.endswith("FNUZ"):
        neg = b.and_(neg, b.icmp_unsigned("!=", code, i32c(0)))
    code = b.select(neg, b.or_(code, i32c(0x80)), code)
    code = b.select(is_nan(fx, v), i32c(nan_code), code)
    return b.trunc(code, I8)


__all__ = ["round_to", "finish", "from_mem", "to_mem", "call", "intrinsic", "is_nan", "f32c", "i32c", "I1"]
