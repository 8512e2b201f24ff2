"""exp, exp2, log and log2 of float32 in plain LLVM IR (no calls, no branches), so that loops
over them vectorise; float64 goes to the C library through LLVM's intrinsics.

exp/exp2: x = n*ln2 + r (Cody-Waite, |r| <= ln2/2), a degree-7 Taylor polynomial in r (truncation
below 1e-8 relative), scaled by 2**n in two steps so that subnormal results round once. log/log2:
x = m * 2**e with m in [sqrt(1/2), sqrt(2)), log(m) by Cephes' degree-9 polynomial. Errors are
within about 1 ulp of the correctly rounded result, like numpy's own float32 implementations
(which the interpreter uses); special values (NaN, +-inf, 0, negatives, subnormals) follow C.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from .numerics import call, f32c, i32c, is_nan
from .types import F32, I32

_LN2_HI = 0.693145751953125          # ln 2 in 12 bits: n * _LN2_HI is exact
_LN2_LO = 1.428606765330187045e-06
_EXP_TAYLOR = [1.0 / math.factorial(k) for k in range(8)]          # e**r
_EXP2_TAYLOR = [math.log(2) ** k / math.factorial(k) for k in range(8)]  # 2**r
_LOG_POLY = [7.0376836292E-2, -1.1514610310E-1, 1.1676998740E-1, -1.2420140846E-1, 1.4249322787E-1,
             -1.6668057665E-1, 2.0000714765E-1, -2.4999993993E-1, 3.3333331174E-1]


def unary(fx, name: str, x: ir.Value) -> ir.Value:
    if x.type != F32:
        return call(fx, f"llvm.{name}", x)
    return {"exp": exp_f32, "exp2": exp2_f32, "log": log_f32, "log2": log2_f32}[name](fx, x)


def _fmuladd(fx, a, b, c):
    fn = fx.kc.intrinsic("llvm.fmuladd.f32", F32, [F32, F32, F32])
    return fx.b.call(fn, [a, b, c])


def _horner(fx, coeffs, r):
    """coeffs[0] + coeffs[1]*r + ... (coefficients in increasing degree)."""
    acc = f32c(coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = _fmuladd(fx, acc, r, f32c(c))
    return acc


def _scale(fx, p: ir.Value, n: ir.Value) -> ir.Value:
    """p * 2**n for integer n in [-152, 130] (i32): two exact power-of-two factors, one rounding."""
    b = fx.b
    n1 = b.ashr(n, i32c(1))
    n2 = b.sub(n, n1)
    s1 = b.bitcast(b.shl(b.add(n1, i32c(127)), i32c(23)), F32)
    s2 = b.bitcast(b.shl(b.add(n2, i32c(127)), i32c(23)), F32)
    return b.fmul(b.fmul(p, s1), s2)


def exp_f32(fx, x: ir.Value) -> ir.Value:
    b = fx.b
    xc = call(fx, "llvm.minimumnum", call(fx, "llvm.maximumnum", x, f32c(-104.0)), f32c(89.0))
    nf = call(fx, "llvm.roundeven", b.fmul(xc, f32c(1.0 / math.log(2))))
    r = _fmuladd(fx, nf, f32c(-_LN2_HI), xc)
    r = _fmuladd(fx, nf, f32c(-_LN2_LO), r)
    p = _horner(fx, _EXP_TAYLOR, r)
    y = _scale(fx, p, b.fptosi(nf, I32))
    return b.select(is_nan(fx, x), x, y)


def exp2_f32(fx, x: ir.Value) -> ir.Value:
    b = fx.b
    xc = call(fx, "llvm.minimumnum", call(fx, "llvm.maximumnum", x, f32c(-151.0)), f32c(129.0))
    nf = call(fx, "llvm.roundeven", xc)
    r = b.fsub(xc, nf)
    p = _horner(fx, _EXP2_TAYLOR, r)
    y = _scale(fx, p, b.fptosi(nf, I32))
    return b.select(is_nan(fx, x), x, y)


def _log_parts(fx, x: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(e as float32, log(m)) with x = m * 2**e, m in [sqrt(1/2), sqrt(2)), for finite x > 0."""
    b = fx.b
    tiny = b.fcmp_ordered("<", x, f32c(2.0 ** -126))
    xs = b.select(tiny, b.fmul(x, f32c(2.0 ** 23)), x)
    bits = b.bitcast(xs, I32)
    e = b.sub(b.and_(b.lshr(bits, i32c(23)), i32c(0xFF)), i32c(126))
    e = b.select(tiny, b.sub(e, i32c(23)), e)
    m = b.bitcast(b.or_(b.and_(bits, i32c(0x807FFFFF)), i32c(0x3F000000)), F32)  # [0.5, 1)
    low = b.fcmp_ordered("<", m, f32c(math.sqrt(0.5)))
    e = b.select(low, b.sub(e, i32c(1)), e)
    f = b.select(low, b.fsub(b.fadd(m, m), f32c(1.0)), b.fsub(m, f32c(1.0)))
    z = b.fmul(f, f)
    y = b.fmul(b.fmul(_horner(fx, _LOG_POLY[::-1], f), f), z)
    y = _fmuladd(fx, f32c(-0.5), z, y)
    return b.sitofp(e, F32), (f, y)


def _log_special(fx, x: ir.Value, y: ir.Value) -> ir.Value:
    b = fx.b
    y = b.select(b.fcmp_ordered("==", x, f32c(np.inf)), x, y)
    y = b.select(b.fcmp_ordered("==", x, f32c(0.0)), f32c(-np.inf), y)
    y = b.select(b.fcmp_ordered("<", x, f32c(0.0)), f32c(np.nan), y)
    return b.select(is_nan(fx, x), x, y)


def log_f32(fx, x: ir.Value) -> ir.Value:
    b = fx.b
    e, (f, y) = _log_parts(fx, x)
    y = _fmuladd(fx, e, f32c(-2.12194440e-4), y)
    r = b.fadd(f, y)
    r = _fmuladd(fx, e, f32c(0.693359375), r)
    return _log_special(fx, x, r)


def log2_f32(fx, x: ir.Value) -> ir.Value:
    b = fx.b
    e, (f, y) = _log_parts(fx, x)
    log2e = 1.0 / math.log(2)
    # log2(m) = (f + y) * log2(e), with the low part of log2(e) carried separately
    hi = f32c(log2e)
    lo = f32c(log2e - float(np.float32(log2e)))
    s = b.fadd(f, y)
    r = _fmuladd(fx, s, lo, b.fmul(s, hi))
    r = b.fadd(r, e)
    return _log_special(fx, x, r)
