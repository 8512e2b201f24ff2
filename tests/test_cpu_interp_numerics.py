"""cpu_interp element-wise numerics, through real kernels launched with `kernel[grid](...)`, each op
family checked against an independent reference: torch on the same inputs (float ops, bf16/f16/fp8
rounding), Python integers (wrapping integer ops), Python's math module (libdevice and math.*), and
Triton's own interpreter (Philox random numbers, bit for bit). Inputs are seeded random with special
values mixed in; outputs are poisoned first."""
from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from fractions import Fraction

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

import sdk
from sdk.numerics import from_storage, round_to, to_storage

BLOCK = 256
N = 1024


@pytest.fixture(autouse=True)
def cpu_interp():
    with sdk.activate("cpu_interp"):
        yield


def launch(kernel, *args, n=N, **consts):
    kernel[(triton.cdiv(n, BLOCK),)](*args, BLOCK=BLOCK, **consts)


def poisoned(n=N, dtype=torch.float32):
    if dtype.is_floating_point:
        return torch.full((n,), float("nan"), dtype=dtype)
    return torch.full((n,), 0x5A, dtype=dtype)


def floats(seed, n=N, dtype=torch.float32, specials=True):
    """Random values over many magnitudes, with NaN, +-inf, +-0 and subnormals mixed in."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g, dtype=torch.float64) * torch.pow(10.0, torch.randint(-6, 7, (n,), generator=g))
    if specials:
        x[:12] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-40, -3e-39, 1.0,
                               -1.0, 0.5, 65504.0, 3e38], dtype=torch.float64)
    return x.to(dtype)


def assert_bits_equal(out, ref):
    """Equal bit for bit, except that any NaN equals any NaN."""
    out, ref = out.float() if out.dtype != torch.float64 else out, ref.float() if ref.dtype != torch.float64 else ref
    nan = torch.isnan(out) & torch.isnan(ref)
    same = (out == ref) & (torch.signbit(out) == torch.signbit(ref))
    bad = ~(same | nan)
    assert not bad.any(), f"{int(bad.sum())} mismatches, first at {bad.nonzero()[:4].flatten().tolist()}: " \
                          f"got {out[bad][:4].tolist()} expected {ref[bad][:4].tolist()}"


# ------------------------------------------------------------------------------ float arith
@triton.jit
def float_binary(x_ptr, y_ptr, o_ptr, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    if OP == "add":
        r = x + y
    elif OP == "sub":
        r = x - y
    elif OP == "mul":
        r = x * y
    elif OP == "div":
        r = x / y
    elif OP == "rem":
        r = x % y
    elif OP == "maxnum":
        r = tl.maximum(x, y)
    elif OP == "minnum":
        r = tl.minimum(x, y)
    elif OP == "maximum":
        r = tl.maximum(x, y, propagate_nan=tl.PropagateNan.ALL)
    elif OP == "minimum":
        r = tl.minimum(x, y, propagate_nan=tl.PropagateNan.ALL)
    else:
        r = -x
    tl.store(o_ptr + offs, r)


def _fmod(x, y):  # C fmod (torch's vectorised fmod loses exactness for huge quotients)
    with np.errstate(all="ignore"):
        return torch.from_numpy(np.fmod(x.float().numpy(), y.float().numpy())).to(x.dtype)


# Unary minus: Triton 3.8 emits arith.negf (-0.0 for +0.0); 3.6 emits arith.subf(0, x) (+0.0 for +0.0),
# which is what a GPU running 3.6 computes too.
_NEG_IS_NEGF = tuple(int(v) for v in triton.__version__.split(".")[:2]) >= (3, 8)
FLOAT_REF = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "rem": _fmod,
             "maxnum": torch.fmax, "minnum": torch.fmin, "maximum": torch.maximum, "minimum": torch.minimum,
             "neg": (lambda x, y: -x) if _NEG_IS_NEGF else (lambda x, y: torch.zeros_like(x) - x)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op", list(FLOAT_REF))
def test_float_binary(op, dtype):
    x, y = floats(1, dtype=dtype), floats(2, dtype=dtype).flip(0)
    if op in ("maximum", "minimum"):  # the order of +0 / -0 is not what this compares
        y = torch.where(y == 0, torch.ones_like(y), y)
    out = poisoned(dtype=dtype)
    launch(float_binary, x, y, out, OP=op)
    assert_bits_equal(out, FLOAT_REF[op](x, y))


@triton.jit
def float_precise(x_ptr, y_ptr, z_ptr, o_ptr, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    z = tl.load(z_ptr + offs)
    if OP == "div_rn":
        r = tl.div_rn(x, y)
    elif OP == "fdiv":
        r = tl.fdiv(x, y)
    elif OP == "sqrt_rn":
        r = tl.sqrt_rn(tl.abs(x))
    elif OP == "fma":
        r = tl.fma(x, y, z)
    elif OP == "clamp":
        r = tl.clamp(x, tl.minimum(y, z), tl.maximum(y, z))
    else:
        r = tl.clamp(x, tl.minimum(y, z), tl.maximum(y, z), propagate_nan=tl.PropagateNan.ALL)
    tl.store(o_ptr + offs, r)


def _fma_ref(a: float, b: float, c: float) -> float:
    """a*b+c rounded once to float32, from exact rationals."""
    if not all(map(math.isfinite, (a, b, c))):
        return float(np.float32(a) * np.float32(b) + np.float32(c))
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    f = np.float32(float(exact))
    cands = [f, np.nextafter(f, np.float32(np.inf)), np.nextafter(f, np.float32(-np.inf))]
    cands = [c_ for c_ in cands if np.isfinite(c_)] or [f]
    best = min(cands, key=lambda c_: (abs(Fraction(float(c_)) - exact),
                                      int(np.array(c_, np.float32).view(np.uint32)) & 1))
    return float(best)


@pytest.mark.parametrize("tier", ["interp", "compiled"])
@pytest.mark.parametrize("op", ["div_rn", "fdiv", "sqrt_rn", "fma", "clamp", "clamp_nan"])
def test_float_precise_fma_clamp(op, tier):
    x, y, z = floats(3), floats(4).flip(0), floats(5).roll(7)
    if op == "fma":  # keep products finite-ish and the exact reference cheap
        x, y, z = floats(3, specials=False), floats(4, specials=False), floats(5, specials=False)
    out = poisoned()
    launch(float_precise, x, y, z, out, OP=op, cpu_tier=tier)  # auto would interpret a launch this small
    lo, hi = torch.fmin(y, z), torch.fmax(y, z)
    if op in ("div_rn", "fdiv"):
        ref = x / y
    elif op == "sqrt_rn":
        ref = torch.sqrt(x.abs().double()).float()  # rounded once from float64: exact for sqrt
    elif op == "fma":
        ref = torch.tensor([_fma_ref(*v) for v in zip(x.tolist(), y.tolist(), z.tolist())], dtype=torch.float32)
    elif op == "clamp":  # min(max(x, lo), hi) ignoring NaN: a NaN x gives lo
        ref = torch.fmin(torch.fmax(x, lo), hi)
    else:
        ref = torch.minimum(torch.maximum(x, lo), hi)
    assert_bits_equal(out, ref)


# --------------------------------------------------------------------------------- compares
@triton.jit
def compares(x_ptr, y_ptr, o_ptr, UNSIGNED: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    if UNSIGNED:
        x = x.to(tl.uint32)
        y = y.to(tl.uint32)
    r = (x < y).to(tl.int32) | ((x <= y).to(tl.int32) << 1) | ((x > y).to(tl.int32) << 2)
    r = r | ((x >= y).to(tl.int32) << 3) | ((x == y).to(tl.int32) << 4) | ((x != y).to(tl.int32) << 5)
    tl.store(o_ptr + offs, r)


def _cmp_ref(x, y):
    return ((x < y).int() | ((x <= y).int() << 1) | ((x > y).int() << 2) | ((x >= y).int() << 3)
            | ((x == y).int() << 4) | ((x != y).int() << 5))


@pytest.mark.parametrize("kind", ["f32", "bf16", "i32", "u32"])
def test_compares_with_nan_and_unsigned(kind):
    if kind in ("f32", "bf16"):
        dt = torch.float32 if kind == "f32" else torch.bfloat16
        x, y = floats(6, dtype=dt), floats(6, dtype=dt).roll(3)
        y[100:200] = x[100:200]
        ref = _cmp_ref(x, y)
    else:
        g = torch.Generator().manual_seed(7)
        x = torch.randint(-2**31, 2**31, (N,), generator=g, dtype=torch.int64).to(torch.int32)
        y = torch.randint(-5, 5, (N,), generator=g, dtype=torch.int32)
        y[:300] = x[:300].roll(1)
        ref = _cmp_ref(x.long() & 0xFFFFFFFF, y.long() & 0xFFFFFFFF) if kind == "u32" else _cmp_ref(x, y)
    out = poisoned(dtype=torch.int32)
    launch(compares, x, y, out, UNSIGNED=kind == "u32")
    assert torch.equal(out, ref.int())


# ------------------------------------------------------------------------------- integer ops
@triton.jit
def int_binary(x_ptr, y_ptr, o_ptr, OP: tl.constexpr, UNSIGNED: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    if UNSIGNED:
        x = x.to(tl.uint32)
        y = y.to(tl.uint32)
    if OP == "add":
        r = x + y
    elif OP == "sub":
        r = x - y
    elif OP == "mul":
        r = x * y
    elif OP == "div":
        r = x // y
    elif OP == "rem":
        r = x % y
    elif OP == "and":
        r = x & y
    elif OP == "or":
        r = x | y
    elif OP == "xor":
        r = x ^ y
    elif OP == "shl":
        r = x << y
    elif OP == "shr":
        r = x >> y
    elif OP == "max":
        r = tl.maximum(x, y)
    else:
        r = tl.minimum(x, y)
    tl.store(o_ptr + offs, r.to(o_ptr.dtype.element_ty, bitcast=True))


def _wrap(v: int, bits: int, signed: bool) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if signed and v >= 1 << (bits - 1) else v


def _int_ref(op, a, b, bits, signed):
    if op in ("shl", "shr"):
        amount = b & ((1 << bits) - 1)  # the amount is read as unsigned
        if op == "shl":
            return 0 if amount >= bits else a << amount
        return (-1 if a < 0 else 0) if amount >= bits else a >> amount  # python >> is arithmetic
    if op in ("div", "rem"):
        q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)  # truncating division
        return q if op == "div" else a - q * b
    return {"add": a + b, "sub": a - b, "mul": a * b, "and": a & b, "or": a | b, "xor": a ^ b,
            "max": max(a, b), "min": min(a, b)}[op]


INT_OPS = ["add", "sub", "mul", "div", "rem", "and", "or", "xor", "shl", "shr", "max", "min"]


@pytest.mark.parametrize("kind", ["i32", "u32", "i64", "i8"])
@pytest.mark.parametrize("op", INT_OPS)
def test_integer_ops_wrap(op, kind):
    bits, signed = {"i32": (32, True), "u32": (32, False), "i64": (64, True), "i8": (8, True)}[kind]
    tdt = {32: torch.int32, 64: torch.int64, 8: torch.int8}[bits]
    g = torch.Generator().manual_seed(hash((op, kind)) % 1000)
    lo, hi = -(1 << (bits - 1)), 1 << (bits - 1)
    x = torch.randint(lo, hi - 1, (N,), generator=g, dtype=torch.int64)
    y = torch.randint(lo, hi - 1, (N,), generator=g, dtype=torch.int64)
    y[:200] = torch.randint(-3, 4, (200,), generator=g)
    x[:4] = torch.tensor([lo, lo, hi - 1, -1])
    y[:4] = torch.tensor([-1, 1, -1, 2])
    if op in ("shl", "shr"):
        y = torch.randint(0, bits + 9, (N,), generator=g)
    if op in ("div", "rem"):
        y = torch.where(y == 0, torch.ones_like(y), y)
    x, y = x.to(tdt), y.to(tdt)
    out = poisoned(dtype=tdt)
    launch(int_binary, x, y, out, OP=op, UNSIGNED=not signed)
    to_py = (lambda v: v) if signed else (lambda v: v & ((1 << bits) - 1))
    ref = [_wrap(_int_ref(op, to_py(a), to_py(b), bits, signed), bits, True)
           for a, b in zip(x.tolist(), y.tolist())]
    assert out.tolist() == ref


# ------------------------------------------------------------------------------ conversions
@triton.jit
def convert(x_ptr, o_ptr, MODE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    if MODE == "rtz":
        r = x.to(o_ptr.dtype.element_ty, fp_downcast_rounding="rtz")
    elif MODE == "bitcast":
        r = x.to(o_ptr.dtype.element_ty, bitcast=True)
    else:
        r = x.to(o_ptr.dtype.element_ty)
    tl.store(o_ptr + offs, r)


FP8 = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}


_NARROWING = [(s, d) for s in (torch.float32, torch.float16, torch.bfloat16)
              for d in (torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2)
              if s != d and {s, d} != {torch.float16, torch.bfloat16}]  # pairs Triton narrows in one op


@pytest.mark.parametrize("src, dst", _NARROWING)
def test_float_narrowing_rtne_and_fp8_saturation(src, dst):
    x = floats(8, dtype=torch.float64) / torch.pow(10.0, torch.randint(0, 4, (N,)))
    x[12:40] = torch.linspace(-600, 600, 28, dtype=torch.float64)
    x = x.to(src)
    out = torch.zeros(N, dtype=dst)
    launch(convert, x, out, MODE="rn")
    if dst in FP8:  # satfinite: finite overflow and +-inf become +-max; torch itself does not saturate
        m = FP8[dst]
        ref = x.float().clamp(-m, m).to(dst)
    else:
        ref = x.float().to(dst)
    assert_bits_equal(out.float(), ref.float())
    keep = ~torch.isnan(ref.float())
    assert torch.equal(out.view(torch.uint8 if dst in FP8 else torch.int16)[keep],
                       ref.view(torch.uint8 if dst in FP8 else torch.int16)[keep])


def test_bf16_round_toward_zero():
    x = floats(9)
    out = torch.zeros(N, dtype=torch.bfloat16)
    launch(convert, x, out, MODE="rtz")
    bits = x.view(torch.int32)
    ref = torch.where(torch.isnan(x), x, (bits & ~0xFFFF).view(torch.float32))
    assert_bits_equal(out.float(), ref)


@pytest.mark.parametrize("fp8", [torch.float8_e4m3fn, torch.float8_e5m2])
@pytest.mark.parametrize("dst", [torch.float32, torch.float16, torch.bfloat16])
def test_fp8_widening_every_code(fp8, dst):
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).repeat(N // 256).view(fp8)
    out = poisoned(dtype=dst)
    launch(convert, codes, out, MODE="ext")
    assert_bits_equal(out.float(), codes.float())


@pytest.mark.parametrize("src,dst", [(torch.int32, torch.float32), (torch.int32, torch.bfloat16),
                                     (torch.int32, torch.float16), (torch.int64, torch.float32),
                                     (torch.int8, torch.float32), (torch.int64, torch.float64)])
def test_int_to_float(src, dst):
    g = torch.Generator().manual_seed(10)
    info = torch.iinfo(src)
    x = torch.randint(info.min, info.max, (N,), generator=g, dtype=torch.int64)
    x[:300] = torch.randint(-70000, 70000, (300,), generator=g)
    x = x.to(src)
    out = poisoned(dtype=dst)
    launch(convert, x, out, MODE="rn")
    assert_bits_equal(out, x.to(dst))


@pytest.mark.parametrize("dst", [torch.int32, torch.int64, torch.int8])
def test_float_to_int_truncates_and_saturates(dst):
    x = floats(11, dtype=torch.float64) * 1e3
    x = x.float()
    out = poisoned(dtype=dst)
    launch(convert, x, out, MODE="rn")
    bits = torch.iinfo(dst).bits
    sat = max(bits, 16)  # cvt.rzi saturates at the register width (16 bits for i8), NaN -> 0
    lo, hi = -(2 ** (sat - 1)), 2 ** (sat - 1) - 1
    ref = [0 if math.isnan(v) else _wrap(int(max(lo, min(hi, math.trunc(v)))) if math.isfinite(v)
                                         else (hi if v > 0 else lo), bits, True) for v in x.tolist()]
    assert out.tolist() == ref


def test_float_int_bitcast():
    x = floats(12)
    out = poisoned(dtype=torch.int32)
    launch(convert, x, out, MODE="bitcast")
    keep = ~torch.isnan(x)
    assert torch.equal(out[keep], x.view(torch.int32)[keep])


# --------------------------------------------------------------------------------- math ops
@triton.jit
def unary_math(x_ptr, o_ptr, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    if FN == "exp":
        r = tl.exp(x)
    elif FN == "exp2":
        r = tl.exp2(x)
    elif FN == "log":
        r = tl.log(x)
    elif FN == "log2":
        r = tl.log2(x)
    elif FN == "sin":
        r = tl.sin(x)
    elif FN == "cos":
        r = tl.cos(x)
    elif FN == "sqrt":
        r = tl.sqrt(x)
    elif FN == "rsqrt":
        r = tl.rsqrt(x)
    elif FN == "abs":
        r = tl.abs(x)
    elif FN == "floor":
        r = tl.floor(x)
    elif FN == "ceil":
        r = tl.ceil(x)
    elif FN == "erf":
        r = tl.erf(x)
    elif FN == "tanh":
        r = libdevice.tanh(x)
    elif FN == "erfc":
        r = libdevice.erfc(x)
    elif FN == "expm1":
        r = libdevice.expm1(x)
    elif FN == "log1p":
        r = libdevice.log1p(x)
    elif FN == "rint":
        r = libdevice.rint(x)
    elif FN == "round":
        r = libdevice.round(x)
    elif FN == "trunc":
        r = libdevice.trunc(x)
    elif FN == "atan":
        r = libdevice.atan(x)
    elif FN == "asin":
        r = libdevice.asin(x)
    elif FN == "cbrt":
        r = libdevice.cbrt(x)
    elif FN == "lgamma":
        r = libdevice.lgamma(x)
    else:
        r = libdevice.sinh(x)
    tl.store(o_ptr + offs, r)


@triton.jit
def binary_math(x_ptr, y_ptr, o_ptr, FN: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    if FN == "pow":
        r = libdevice.pow(x, y)
    elif FN == "atan2":
        r = libdevice.atan2(x, y)
    elif FN == "fmod":
        r = libdevice.fmod(x, y)
    elif FN == "hypot":
        r = libdevice.hypot(x, y)
    elif FN == "copysign":
        r = libdevice.copysign(x, y)
    else:
        r = libdevice.remainder(x, y)
    tl.store(o_ptr + offs, r)


def _ulps(out: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Distance in float32 units in the last place (NaN vs NaN and equal infinities: 0)."""
    def key(v):
        i = v.astype(np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    d = np.abs(key(out) - key(ref)).astype(np.float64)
    both_nan = np.isnan(out) & np.isnan(ref)
    d = np.where(both_nan, 0, np.where(np.isnan(out) | np.isnan(ref), np.inf, d))
    return d


def _math_ref(fn, *cols):
    out = []
    for args in zip(*cols):
        try:
            out.append(fn(*args))
        except (ValueError, OverflowError, ZeroDivisionError):
            out.append(float("nan"))
    return np.array(out, dtype=np.float64).astype(np.float32)


def _erfc(x):
    return math.erfc(x)


def _rsqrt(x):
    return math.inf if x == 0 else 1 / math.sqrt(x)


def _round_half_away(x):
    if not math.isfinite(x):
        return x
    a = abs(x)
    return math.copysign(math.floor(a) + 1 if a - math.floor(a) >= 0.5 else math.floor(a), x)


UNARY = [  # (tl.* / libdevice function, Python reference, input domain, allowed ulps)
    ("exp", math.exp, (-80, 80), 2), ("exp2", lambda v: 2.0 ** v, (-120, 120), 2),
    ("log", math.log, (1e-30, 1e30), 2), ("log2", math.log2, (1e-30, 1e30), 2),
    ("sin", math.sin, (-100, 100), 2), ("cos", math.cos, (-100, 100), 2),
    ("sqrt", math.sqrt, (0, 1e30), 0), ("rsqrt", _rsqrt, (1e-20, 1e20), 1),
    ("abs", abs, (-1e5, 1e5), 0), ("floor", math.floor, (-1e5, 1e5), 0),
    ("ceil", math.ceil, (-1e5, 1e5), 0), ("erf", math.erf, (-5, 5), 1),
    ("tanh", math.tanh, (-10, 10), 2), ("erfc", _erfc, (-5, 9), 1),
    ("expm1", math.expm1, (-5, 5), 2), ("log1p", math.log1p, (-0.9, 100), 2),
    ("rint", lambda v: float(round(v)), (-1e4, 1e4), 0),
    ("round", _round_half_away, (-1e4, 1e4), 0), ("trunc", math.trunc, (-1e4, 1e4), 0),
    ("atan", math.atan, (-1e3, 1e3), 2), ("asin", math.asin, (-1, 1), 2),
    ("cbrt", lambda v: math.copysign(abs(v) ** (1 / 3), v), (-1e6, 1e6), 2),
    ("lgamma", math.lgamma, (0.1, 30), 2), ("sinh", math.sinh, (-20, 20), 2),
]


@pytest.mark.parametrize("fn,ref,domain,ulps", UNARY, ids=[u[0] for u in UNARY])
def test_unary_math_against_python_math(fn, ref, domain, ulps):
    g = np.random.default_rng(13)
    lo, hi = domain
    if lo > 0 and hi / lo > 1e6:
        x = np.exp(g.uniform(math.log(lo), math.log(hi), N)).astype(np.float32)
    else:
        x = g.uniform(lo, hi, N).astype(np.float32)
    x[:8] = np.float32([lo, hi, (lo + hi) / 2, lo, hi, lo, hi, lo])
    if fn in ("rint", "round"):
        x[8:16] = np.float32([0.5, 1.5, 2.5, -0.5, -2.5, 3.5, -1.5, 1e4 + 0.5])
    out = poisoned()
    launch(unary_math, torch.from_numpy(x), out, FN=fn)
    d = _ulps(out.numpy(), _math_ref(ref, x.astype(np.float64).tolist()))
    assert d.max() <= ulps, f"max {d.max()} ulp at x={x[d.argmax()]!r}"


BINARY = [
    ("pow", math.pow, (0.01, 10), (-20, 20), 2), ("atan2", math.atan2, (-10, 10), (-10, 10), 3),
    ("fmod", math.fmod, (-1e4, 1e4), (0.5, 100), 0), ("hypot", math.hypot, (-1e3, 1e3), (-1e3, 1e3), 1),
    ("copysign", math.copysign, (-10, 10), (-1, 1), 0), ("remainder", math.remainder, (-1e4, 1e4), (0.5, 100), 0),
]


@pytest.mark.parametrize("fn,ref,dx,dy,ulps", BINARY, ids=[b[0] for b in BINARY])
def test_binary_math_against_python_math(fn, ref, dx, dy, ulps):
    g = np.random.default_rng(14)
    x = g.uniform(*dx, N).astype(np.float32)
    y = g.uniform(*dy, N).astype(np.float32)
    out = poisoned()
    launch(binary_math, torch.from_numpy(x), torch.from_numpy(y), out, FN=fn)
    d = _ulps(out.numpy(), _math_ref(ref, x.astype(np.float64).tolist(), y.astype(np.float64).tolist()))
    assert d.max() <= ulps, f"max {d.max()} ulp at x={x[d.argmax()]!r}, y={y[d.argmax()]!r}"


# ---------------------------------------------------------------------- integer / predicates
@triton.jit
def int_math(x_ptr, y_ptr, o_ptr, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    if OP == "umulhi":
        r = tl.umulhi(x.to(tl.uint32), y.to(tl.uint32)).to(tl.int32)
    elif OP == "mulhi":
        r = libdevice.mulhi(x, y)
    elif OP == "abs":
        r = tl.abs(x)
    elif OP == "popc":
        r = libdevice.popc(x)
    elif OP == "clz":
        r = libdevice.clz(x)
    elif OP == "ffs":
        r = libdevice.ffs(x)
    elif OP == "brev":
        r = libdevice.brev(x)
    else:
        r = libdevice.byte_perm(x, y, 0x3715 + tl.zeros_like(x))
    tl.store(o_ptr + offs, r)


def _brev32(v):
    return int(f"{v & 0xFFFFFFFF:032b}"[::-1], 2)


INT_MATH = {
    "umulhi": lambda a, b: ((a & 0xFFFFFFFF) * (b & 0xFFFFFFFF)) >> 32,
    "mulhi": lambda a, b: (a * b) >> 32,
    "abs": lambda a, b: abs(a),
    "popc": lambda a, b: bin(a & 0xFFFFFFFF).count("1"),
    "clz": lambda a, b: 32 - (a & 0xFFFFFFFF).bit_length(),
    "ffs": lambda a, b: ((a & -a) & 0xFFFFFFFF).bit_length(),
    "brev": lambda a, b: _brev32(a),
    "byte_perm": lambda a, b: int.from_bytes(bytes(((b & 0xFFFFFFFF) << 32 | (a & 0xFFFFFFFF)).to_bytes(8, "little")[s]
                                                    for s in (5, 1, 7, 3)), "little"),
}


@pytest.mark.parametrize("op", list(INT_MATH))
def test_integer_math(op):
    g = torch.Generator().manual_seed(16)
    x = torch.randint(-2**31, 2**31, (N,), generator=g, dtype=torch.int64).to(torch.int32)
    y = torch.randint(-2**31, 2**31, (N,), generator=g, dtype=torch.int64).to(torch.int32)
    x[:3] = torch.tensor([-2**31, 0, -1], dtype=torch.int32)
    out = poisoned(dtype=torch.int32)
    launch(int_math, x, y, out, OP=op)
    assert out.tolist() == [_wrap(INT_MATH[op](a, b), 32, True) for a, b in zip(x.tolist(), y.tolist())]


@triton.jit
def float_queries(x_ptr, o_ptr, i_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    bits = (libdevice.isnan(x).to(tl.int32) | (libdevice.isinf(x).to(tl.int32) << 1)
            | ((libdevice.signbit(x) != 0).to(tl.int32) << 2) | ((libdevice.finitef(x) != 0).to(tl.int32) << 3))
    tl.store(o_ptr + offs, bits)
    tl.store(i_ptr + offs, libdevice.float2int_rn(x).to(tl.int64) + libdevice.llrint(x * 1e6))


def test_float_predicates_and_rounding_conversions():
    x = floats(17)
    x[12:20] = torch.tensor([0.5, 1.5, 2.5, -0.5, -2.5, 3e9, -3e9, 1e30])
    out, iout = poisoned(dtype=torch.int32), poisoned(dtype=torch.int64)
    launch(float_queries, x, out, iout)
    ref = [int(math.isnan(v)) | int(math.isinf(v)) << 1 | int(math.copysign(1, v) < 0) << 2 | int(math.isfinite(v)) << 3
           for v in x.tolist()]
    assert out.tolist() == ref

    def sat(v, bits):
        if math.isnan(v):
            return 0
        lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        return hi if v >= hi else lo if v <= lo else int(round(v))  # round(): half to even
    scaled = (x * 1e6).tolist()  # float32 product, as in the kernel
    assert iout.tolist() == [_wrap(sat(v, 32) + sat(s, 64), 64, True) for v, s in zip(x.tolist(), scaled)]


# --------------------------------------------------------- rules outside what kernels reach
class _T:  # a minimal stand-in for an op (rule unit tests)
    def __init__(self, name, result, operands, **attrs):
        from sdk.ttir import ScalarType, TensorType
        ty = lambda n: TensorType((4,), ScalarType(n))
        self.name, self.attrs = name, attrs
        self.result = type("V", (), {"type": ty(result)})()
        self.results = [self.result]
        self.operands = [type("V", (), {"type": ty(o)})() for o in operands]


def _rule(name):
    from backends.cpu_interp.ops import TABLE
    return TABLE.get(name)


def test_division_by_zero_and_overflow_conventions():
    a = np.array([[7, -7, -2**31, 5]], np.int32)
    b = np.array([[0, 0, -1, -1]], np.int32)
    with np.errstate(all="ignore"):
        q = _rule("arith.divsi")(None, _T("arith.divsi", "i32", ["i32", "i32"]), a, b)
        r = _rule("arith.remsi")(None, _T("arith.remsi", "i32", ["i32", "i32"]), a, b)
        qu = _rule("arith.divui")(None, _T("arith.divui", "i32", ["i32", "i32"]), a, b)
    assert q.tolist() == [[-1, -1, -2**31, -5]]
    assert r.tolist() == [[7, -7, 0, 0]]
    assert qu.tolist() == [[-1, -1, 0, 0]]


def test_unknown_libdevice_symbol_is_unsupported_at_compile_time():
    from backends.cpu_interp.ops import TABLE
    from backends.cpu_interp.ops_math import LIBDEVICE
    known = _T("tt.extern_elementwise", "f32", ["f32"], symbol="__nv_expf")
    unknown = _T("tt.extern_elementwise", "f32", ["i32", "f32"], symbol="__nv_jnf")
    assert TABLE.supports(known) and "__nv_powf" in LIBDEVICE
    assert not TABLE.supports(unknown)


@pytest.mark.parametrize("name,td", [("f8E4M3FN", torch.float8_e4m3fn), ("f8E5M2", torch.float8_e5m2),
                                     ("f8E4M3FNUZ", torch.float8_e4m3fnuz), ("f8E5M2FNUZ", torch.float8_e5m2fnuz),
                                     ("bf16", torch.bfloat16)])
def test_storage_round_trip_matches_torch(name, td):
    raw = np.arange(256 if name != "bf16" else 65536, dtype=np.uint8 if name != "bf16" else np.uint16)
    vals = from_storage(name, raw)
    ref = torch.from_numpy(raw.view(np.int8 if name != "bf16" else np.int16)).view(td).float().numpy()
    assert_bits_equal(torch.from_numpy(vals), torch.from_numpy(ref))
    keep = ~np.isnan(vals)
    assert np.array_equal(to_storage(name, vals)[keep], raw[keep])
    x = np.random.default_rng(18).standard_normal(4096).astype(np.float32) * 30
    if name != "bf16":
        m = float(torch.finfo(td).max)
        x = np.clip(x, -m, m)
    rounded = round_to(name, x)
    assert_bits_equal(torch.from_numpy(rounded), torch.from_numpy(x).to(td).float())


# ------------------------------------------------------------------ Philox vs Triton's interpreter
RANDOM_KERNELS = '''
import triton
import triton.language as tl


@triton.jit
def random_kernel(f_ptr, n_ptr, i_ptr, seed, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(f_ptr + offs, tl.rand(seed, offs), mask=mask)
    tl.store(n_ptr + offs, tl.randn(seed + 1, offs), mask=mask)
    tl.store(i_ptr + offs, tl.randint(seed + 2, offs), mask=mask)
'''
REFERENCE_RUNNER = '''
import importlib.util, sys, numpy as np, torch
spec = importlib.util.spec_from_file_location("random_kernels", sys.argv[1])
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
n = int(sys.argv[2])
f, r, i = torch.empty(n), torch.empty(n), torch.empty(n, dtype=torch.int32)
mod.random_kernel[(-(-n // 256),)](f, r, i, int(sys.argv[3]), n, BLOCK=256)
np.savez(sys.argv[4], f=f.numpy(), r=r.numpy(), i=i.numpy())
'''


@pytest.mark.parametrize("tier", ["interp", "compiled"])
def test_philox_random_bit_exact_with_triton_interpreter(tmp_path, tier):
    """tl.rand and tl.randint bit for bit Triton's interpreter's on both tiers; tl.randn too on the
    interpreter, whose log, cos and sin are numpy's as in Triton's interpreter; on the compiled
    tier, whose float32 math is its own (compiled/mathlib.py: about 1 ulp), within 4 ulp of
    max(|x|, 1) (Box-Muller's r * cos(t): near a zero of cos the error is absolute, not relative)."""
    src = tmp_path / "random_kernels.py"
    src.write_text(textwrap.dedent(RANDOM_KERNELS))
    runner = tmp_path / "runner.py"
    runner.write_text(textwrap.dedent(REFERENCE_RUNNER))
    n, seed = 3000, 1234
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    env.pop("TRITON_DEFAULT_BACKEND", None)
    python = "/work/venv38/bin/python" if os.path.exists("/work/venv38/bin/python") else sys.executable
    done = subprocess.run([python, str(runner), str(src), str(n), str(seed), str(tmp_path / "ref.npz")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    ref = np.load(tmp_path / "ref.npz")

    import importlib.util
    spec = importlib.util.spec_from_file_location("random_kernels", src)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    f, r, i = poisoned(n), poisoned(n), poisoned(n, dtype=torch.int32)
    mod.random_kernel[(triton.cdiv(n, 256),)](f, r, i, seed, n, BLOCK=256, cpu_tier=tier)
    assert np.array_equal(i.numpy(), ref["i"])
    assert np.array_equal(f.numpy().view(np.uint32), ref["f"].view(np.uint32))
    if tier == "interp":
        assert np.array_equal(r.numpy().view(np.uint32), ref["r"].view(np.uint32))
    else:
        ulp = np.spacing(np.maximum(np.abs(ref["r"]), 1).astype(np.float32))
        assert (np.abs(r.numpy() - ref["r"]) <= 4 * ulp).all()


# ------------------------------------------------------------------ microscaled dot (OCP MX)
_FP4 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


@triton.jit
def mx_dot_kernel(a_ptr, as_ptr, b_ptr, bs_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                  A_FMT: tl.constexpr, B_FMT: tl.constexpr, A_DIV: tl.constexpr, B_DIV: tl.constexpr,
                  SCALED: tl.constexpr):
    rm, rn = tl.arange(0, M), tl.arange(0, N)
    ra, rb = tl.arange(0, K // A_DIV), tl.arange(0, K // B_DIV)
    rs = tl.arange(0, K // 32)
    a = tl.load(a_ptr + rm[:, None] * (K // A_DIV) + ra[None, :])
    b = tl.load(b_ptr + rb[:, None] * N + rn[None, :])
    if SCALED:
        a_s = tl.load(as_ptr + rm[:, None] * (K // 32) + rs[None, :])
        b_s = tl.load(bs_ptr + rn[:, None] * (K // 32) + rs[None, :])
        c = tl.dot_scaled(a, a_s, A_FMT, b, b_s, B_FMT)
    else:
        c = tl.dot_scaled(a, None, A_FMT, b, None, B_FMT)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], c)


def _fp4(codes: torch.Tensor, dim: int) -> torch.Tensor:
    """Pack e2m1 codes two per byte along `dim` (the first of a pair in the low nibble)."""
    even = codes.index_select(dim, torch.arange(0, codes.shape[dim], 2))
    odd = codes.index_select(dim, torch.arange(1, codes.shape[dim], 2))
    return (even | (odd << 4)).to(torch.uint8).contiguous()


@pytest.mark.parametrize("a_fmt, b_fmt, scaled", [("e4m3", "e4m3", True), ("e5m2", "e4m3", True),
                                                  ("e2m1", "bf16", True), ("e2m1", "e2m1", False),
                                                  ("bf16", "e2m1", True)])
def test_dot_scaled_formats_and_scales(a_fmt, b_fmt, scaled):
    M, N, K = 16, 32, 64
    gen = torch.Generator().manual_seed(21)

    def operand(fmt, rows, cols, k_dim):
        if fmt == "e2m1":
            codes = torch.randint(0, 16, (rows, cols), generator=gen, dtype=torch.uint8)
            return _fp4(codes, k_dim), _FP4[codes.long()]
        x = torch.randn(rows, cols, generator=gen)
        t = x.to({"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2, "bf16": torch.bfloat16}[fmt])
        return (t.view(torch.uint8) if fmt != "bf16" else t), t.float()

    a, a_val = operand(a_fmt, M, K, 1)
    b, b_val = operand(b_fmt, K, N, 0)
    a_s = torch.randint(120, 134, (M, K // 32), generator=gen, dtype=torch.uint8)
    b_s = torch.randint(120, 134, (N, K // 32), generator=gen, dtype=torch.uint8)
    if scaled:
        a_val = a_val * torch.pow(2.0, a_s.float() - 127).repeat_interleave(32, 1)
        b_val = b_val * torch.pow(2.0, b_s.float() - 127).repeat_interleave(32, 1).T
    c = torch.full((M, N), float("nan"))
    mx_dot_kernel[(1,)](a, a_s, b, b_s, c, M, N, K, a_fmt, b_fmt, 2 if a_fmt == "e2m1" else 1,
                        2 if b_fmt == "e2m1" else 1, scaled)
    torch.testing.assert_close(c, a_val @ b_val, rtol=1e-5, atol=1e-4)
