"""Element-wise `arith.*` ops and Triton's element-wise `tt.*` ops, with the GPU's numerics.

Values as values.py holds them: iN as signed numpy intN, i1 as bool, f16/f32/f64 as float16/32/64,
bf16 and fp8 as float32 already rounded to the type. The rules are pure and shape-agnostic: they
ignore `ctx`, and operands of an element-wise op broadcast to the result's shape whatever leading
axes they carry, so the batched interpreter (a program axis), the single-program reference
(reference.py) and a compiled tier share these definitions (the table `ARITH`). Float exceptions
are values, never warnings: the interpreters run every rule under `np.errstate(all="ignore")`.

Integer numerics are LLVM's with the poison cases resolved as an NVIDIA GPU resolves them:
  * add/sub/mul/neg wrap (two's complement); signed/unsigned ops reinterpret through views.
  * shifts by >= the bit width (amount read as unsigned): shl / shrui give 0, shrsi the sign
    (PTX clamps the shift amount to the width).
  * division by zero: quotient all ones (-1), remainder = dividend; INT_MIN / -1 = INT_MIN, rem 0.
  * fptosi / fptoui saturate (NaN -> 0); results narrower than 16 bits saturate at 16 bits and wrap
    (NVPTX converts through a 16-bit register).
Float ops are IEEE round-to-nearest-even in the operand type (bf16 / fp8 computed in float32 and
rounded back: exact for add/sub/mul/div/sqrt). arith.divf and math.sqrt are approximate on the GPU
(div.full, sqrt.approx: <= 2 ulp); here they are correctly rounded, like tt.precise_divf/sqrt.
The GPU also contracts a separate mulf + addf into one fma (enable_fp_fusion); here each op rounds,
so such a pair may differ from the GPU by an ulp of the sum. Subnormals are kept (no flush to zero).
"""
from __future__ import annotations

import numpy as np

from sdk.backend import LoweringTable
from sdk.numerics import compute_dtype, from_storage, int_bits, round_to, to_storage
from sdk.ttir import DenseAttr, ScalarType, TensorType

from .values import elem_name, value_dtype

ARITH = LoweringTable()
rule = ARITH.rule

_UNSIGNED = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
_SIGNED = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}


# ------------------------------------------------------------------------------------- helpers
def finish(name: str, x) -> np.ndarray:
    """A float result computed in any float dtype -> compute values of element type `name`."""
    x = np.asarray(x)
    if name in ("f16", "f32", "f64") and x.dtype == compute_dtype(name):
        return x
    return round_to(name, x)


def as_int(x, name: str) -> np.ndarray:
    """An integer operand as its signed compute array (i1 as int8 0/1)."""
    if name == "i1":
        return np.asarray(x).astype(np.int8)
    return np.asarray(x, dtype=compute_dtype(name))


def unsigned(x, name: str) -> np.ndarray:
    """Reinterpret an integer operand as unsigned of its width."""
    if name == "i1":
        return np.asarray(x).astype(np.uint8)
    return np.asarray(x, dtype=compute_dtype(name)).view(_UNSIGNED[int_bits(name)])


def from_int(x, name: str) -> np.ndarray:
    """An integer result (any int dtype, wrapped to the width) -> compute values of `name`."""
    if name == "i1":
        return (np.asarray(x) & 1).astype(np.bool_)
    return np.asarray(x).astype(compute_dtype(name))


def _float_rule(fn):
    """rule(a, b, ...) on float compute values, rounded to the result's element type."""
    def rule_(ctx, op, *args):
        return finish(elem_name(op.result.type), fn(*args))
    return rule_


def _int_rule(fn, view=as_int):
    """rule on integer operands (viewed signed or unsigned), the result wrapped to its width."""
    def rule_(ctx, op, *args):
        name = elem_name(op.operands[0].type)
        return from_int(fn(*[view(a, name) for a in args]), elem_name(op.result.type))
    return rule_


# --------------------------------------------------------------------------------- constants
@rule("arith.constant")
def _constant(ctx, op):
    """The attribute's value as the result type's compute values (a dense literal: whole tensor)."""
    v, t = op.attrs["value"], op.result.type
    if isinstance(v, DenseAttr):
        return np.broadcast_to(np.array(v.values, dtype=value_dtype(t)), t.shape).copy()
    return np.array(v, dtype=value_dtype(t))


# ------------------------------------------------------------------------------- float arith
def _maximum(a, b):
    """IEEE maximum: NaN propagates, +0 > -0."""
    r = np.where(a == b, np.where(np.signbit(a), b, a), np.maximum(a, b))
    return np.where(np.isnan(a) | np.isnan(b), np.float32(np.nan).astype(r.dtype), r)


def _minimum(a, b):
    r = np.where(a == b, np.where(np.signbit(a), a, b), np.minimum(a, b))
    return np.where(np.isnan(a) | np.isnan(b), np.float32(np.nan).astype(r.dtype), r)


_FLOAT_BINARY = {
    "arith.addf": np.add, "arith.subf": np.subtract, "arith.mulf": np.multiply,
    "arith.divf": np.divide, "arith.remf": np.fmod, "tt.precise_divf": np.divide,
    "arith.maxnumf": np.fmax, "arith.minnumf": np.fmin,   # a NaN operand is ignored
    "arith.maximumf": _maximum, "arith.minimumf": _minimum,  # a NaN operand propagates
}
for _name, _fn in _FLOAT_BINARY.items():
    ARITH.register(_name, _float_rule(_fn))
ARITH.register("arith.negf", _float_rule(np.negative))
ARITH.register("tt.precise_sqrt", _float_rule(np.sqrt))


@rule("tt.clampf")
def _clampf(ctx, op, x, lo, hi):
    """min(max(x, lo), hi); propagateNan=all propagates a NaN x, none returns lo for it."""
    if str(op.attrs.get("propagateNan", "none")).lower() == "all":
        r = _minimum(_maximum(x, lo), hi)
    else:
        r = np.fmin(np.fmax(x, lo), hi)
    return finish(elem_name(op.result.type), r)


# ----------------------------------------------------------------------------- integer arith
def _trunc_div(a, b):
    """Quotient truncated toward zero; b has no zeros and no -1."""
    q = a // b
    return q + (((a - q * b) != 0) & ((a < 0) != (b < 0)))


def _divsi(a, b):
    safe = np.where((b == 0) | (b == -1), 1, b).astype(a.dtype)
    return np.where(b == -1, np.negative(a), np.where(b == 0, -1, _trunc_div(a, safe)))


def _remsi(a, b):
    safe = np.where((b == 0) | (b == -1), 1, b).astype(a.dtype)
    return np.where(b == -1, 0, np.where(b == 0, a, np.fmod(a, safe)))


def _floordivsi(a, b):
    safe = np.where((b == 0) | (b == -1), 1, b).astype(a.dtype)
    return np.where(b == -1, np.negative(a), np.where(b == 0, -1, a // safe))


def _ceildivsi(a, b):
    safe = np.where((b == 0) | (b == -1), 1, b).astype(a.dtype)
    q = a // safe
    q = q + ((a - q * safe) != 0)
    return np.where(b == -1, np.negative(a), np.where(b == 0, -1, q))


def _divui(a, b):
    safe = np.where(b == 0, 1, b).astype(a.dtype)
    return np.where(b == 0, np.iinfo(a.dtype).max, a // safe)


def _remui(a, b):
    safe = np.where(b == 0, 1, b).astype(a.dtype)
    return np.where(b == 0, a, a % safe)


def _shift_amount(b):
    return b.astype(np.uint64) if b.dtype.kind == "u" else b.view(_UNSIGNED[b.dtype.itemsize * 8]).astype(np.uint64)


def _logical_shift(shift):
    """shli / shrui on the unsigned view; an amount of the bit width or more gives 0 (PTX)."""
    def rule(a, b):
        bits = a.dtype.itemsize * 8
        amt = _shift_amount(b)
        ua = a.view(_UNSIGNED[bits])
        r = shift(ua, np.minimum(amt, bits - 1).astype(ua.dtype))
        return np.where(amt >= bits, 0, r).astype(ua.dtype).view(a.dtype)
    return rule


_shl = _logical_shift(np.left_shift)
_shrui = _logical_shift(np.right_shift)


def _shrsi(a, b):
    bits = a.dtype.itemsize * 8
    amt = _shift_amount(b)
    return np.right_shift(a, np.minimum(amt, bits - 1).astype(a.dtype))


_INT_BINARY = {
    "arith.addi": np.add, "arith.subi": np.subtract, "arith.muli": np.multiply,
    "arith.andi": np.bitwise_and, "arith.ori": np.bitwise_or, "arith.xori": np.bitwise_xor,
    "arith.maxsi": np.maximum, "arith.minsi": np.minimum,
    "arith.divsi": _divsi, "arith.remsi": _remsi, "arith.floordivsi": _floordivsi,
    "arith.ceildivsi": _ceildivsi,
}
for _name, _fn in _INT_BINARY.items():
    ARITH.register(_name, _int_rule(_fn))
for _name, _fn in {"arith.divui": _divui, "arith.remui": _remui, "arith.maxui": np.maximum,
                   "arith.minui": np.minimum}.items():
    ARITH.register(_name, _int_rule(_fn, view=unsigned))


def _shift_rule(fn):
    def rule_(ctx, op, a, b):
        name = elem_name(op.result.type)
        if name == "i1":  # width 1: any set amount shifts everything out
            a8, b8 = as_int(a, name), as_int(b, name)
            return from_int(np.where(b8 != 0, 0 if fn is not _shrsi else a8, a8), name)
        return fn(as_int(a, name), as_int(b, name))
    return rule_


ARITH.register("arith.shli", _shift_rule(_shl))
ARITH.register("arith.shrui", _shift_rule(_shrui))
ARITH.register("arith.shrsi", _shift_rule(_shrsi))


def mulhi_u(a, b):
    """High half of the unsigned product (32-bit through uint64, 64-bit through 32-bit limbs)."""
    if a.dtype.itemsize <= 4:
        bits = a.dtype.itemsize * 8
        return ((a.astype(np.uint64) * b.astype(np.uint64)) >> np.uint64(bits)).astype(a.dtype)
    m = np.uint64(0xFFFFFFFF)
    a_lo, a_hi, b_lo, b_hi = a & m, a >> np.uint64(32), b & m, b >> np.uint64(32)
    ll, lh, hl, hh = a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi
    mid = (ll >> np.uint64(32)) + (lh & m) + (hl & m)
    return hh + (lh >> np.uint64(32)) + (hl >> np.uint64(32)) + (mid >> np.uint64(32))


ARITH.register("tt.mulhiui", _int_rule(mulhi_u, view=unsigned))


# ---------------------------------------------------------------------------------- compares
_CMPI = ("eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge")
_CMPF = ("false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq", "ugt", "uge", "ult", "ule",
         "une", "uno", "true")
_REL = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
        "ge": np.greater_equal}


def _predicate(op, names):
    p = op.attrs["predicate"]
    return names[p] if isinstance(p, int) else str(p)


@rule("arith.cmpi")
def _cmpi(ctx, op, a, b):
    pred = _predicate(op, _CMPI)
    name = elem_name(op.operands[0].type)
    if pred in ("eq", "ne"):
        return _REL[pred](a, b)
    if name == "i1":  # i1 as signed is 0 / -1
        view = (lambda x, n: np.asarray(x).astype(np.uint8)) if pred[0] == "u" else \
               (lambda x, n: -np.asarray(x).astype(np.int8))
    elif name == "ptr":
        view = lambda x, n: np.asarray(x, dtype=np.int64).view(np.uint64)
    else:
        view = unsigned if pred[0] == "u" else as_int
    return _REL[pred[1:]](view(a, name), view(b, name))


@rule("arith.cmpf")
def _cmpf(ctx, op, a, b):
    pred = _predicate(op, _CMPF)
    a, b = np.asarray(a), np.asarray(b)
    if pred in ("false", "true"):
        return np.full(np.broadcast_shapes(a.shape, b.shape), pred == "true")
    unordered = np.isnan(a) | np.isnan(b)
    if pred == "ord":
        return ~unordered
    if pred == "uno":
        return unordered
    rel = {"one": "ne", "une": "ne"}.get(pred, pred[1:])
    r = _REL[rel](a, b)
    return r | unordered if pred[0] == "u" else r & ~unordered


@rule("arith.select")
def _select(ctx, op, c, a, b):
    c = np.asarray(c)
    if isinstance(op.operands[0].type, ScalarType) and isinstance(op.result.type, TensorType):
        c = c.reshape(c.shape + (1,) * len(op.result.type.shape))  # i1 scalar picks whole tensors
    return np.where(c, a, b)


# ----------------------------------------------------------------------------------- casts
@rule("arith.extf")
def _extf(ctx, op, x):
    return np.asarray(x).astype(compute_dtype(elem_name(op.result.type)))


@rule("arith.truncf")
def _truncf(ctx, op, x):
    mode = str(op.attrs.get("roundingmode", "to_nearest_even"))
    return round_to(elem_name(op.result.type), x, "rtz" if mode in ("toward_zero", "1") else "rtne")


@rule("tt.fp_to_fp")
def _fp_to_fp(ctx, op, x):
    """fp8 <-> f16/bf16/f32 and f32 -> f16/bf16 with `rounding`. Widening is exact; narrowing rounds
    (fp8 saturates: cvt.rn.satfinite on sm_90)."""
    dst = elem_name(op.result.type)
    return round_to(dst, x, str(op.attrs.get("rounding", "rtne")))


@rule("arith.extsi")
def _extsi(ctx, op, x):
    src = elem_name(op.operands[0].type)
    x = -np.asarray(x).astype(np.int8) if src == "i1" else np.asarray(x)
    return x.astype(compute_dtype(elem_name(op.result.type)))


@rule("arith.extui")
def _extui(ctx, op, x):
    src = elem_name(op.operands[0].type)
    return unsigned(x, src).astype(compute_dtype(elem_name(op.result.type)))


@rule("arith.trunci")
def _trunci(ctx, op, x):
    return from_int(np.asarray(x), elem_name(op.result.type))


@rule("arith.index_cast")
def _index_cast(ctx, op, x):
    src = elem_name(op.operands[0].type)
    x = -np.asarray(x).astype(np.int8) if src == "i1" else np.asarray(x)
    return from_int(x.astype(np.int64), elem_name(op.result.type))


@rule("arith.index_castui")
def _index_castui(ctx, op, x):
    src = elem_name(op.operands[0].type)
    return from_int(unsigned(x, src).astype(np.uint64).view(np.int64), elem_name(op.result.type))


def _int_to_float(x, src_bits, dst):
    """Round to nearest even: up to 32 bits through float64 (exact), 64-bit integers by numpy's own
    correctly rounded cast to f32/f64 (to narrower types through float64: may round twice)."""
    if src_bits > 32 and dst in ("f32", "f64"):
        return x.astype(compute_dtype(dst))
    return round_to(dst, x.astype(np.float64))


@rule("arith.sitofp")
def _sitofp(ctx, op, x):
    src = elem_name(op.operands[0].type)
    x = -np.asarray(x).astype(np.int8) if src == "i1" else np.asarray(x)
    return _int_to_float(x, int_bits(src) if src != "i1" else 8, elem_name(op.result.type))


@rule("arith.uitofp")
def _uitofp(ctx, op, x):
    src = elem_name(op.operands[0].type)
    return _int_to_float(unsigned(x, src), int_bits(src) if src != "i1" else 8, elem_name(op.result.type))


def float_to_int(x, name: str, signed: bool) -> np.ndarray:
    """Truncated float -> integer of element type `name`, saturating like cvt.rzi (NaN -> 0)."""
    x = np.trunc(np.asarray(x, dtype=np.float64))
    if name == "i1":
        return from_int(np.where(np.isnan(x), 0, np.clip(x, -32768, 65535)).astype(np.int64), name)
    bits = max(int_bits(name), 16)
    if signed:
        lo, hi = -(2.0 ** (bits - 1)), 2.0 ** (bits - 1)
        out_t = _SIGNED[bits]
    else:
        lo, hi = 0.0, 2.0 ** bits
        out_t = _UNSIGNED[bits]
    ok = (x >= lo) & (x < hi)
    r = np.where(ok, x, 0).astype(out_t)
    r = np.where(x >= hi, np.iinfo(out_t).max, np.where(x < lo, np.iinfo(out_t).min, r)).astype(out_t)
    return from_int(r.view(_SIGNED[bits]), name)


@rule("arith.fptosi")
def _fptosi(ctx, op, x):
    return float_to_int(x, elem_name(op.result.type), signed=True)


@rule("arith.fptoui")
def _fptoui(ctx, op, x):
    return float_to_int(x, elem_name(op.result.type), signed=False)


def _bitcast(ctx, op, x):
    src, dst = elem_name(op.operands[0].type), elem_name(op.result.type)
    if src == "ptr" or dst == "ptr" or src == dst:
        return x
    raw = np.asarray(to_storage(src, x))
    if src == "i1" or dst == "i1":
        return from_storage(dst, raw.astype(np.uint8))
    return from_storage(dst, raw.view(_UNSIGNED[raw.dtype.itemsize * 8]))


ARITH.register("arith.bitcast", _bitcast)
ARITH.register("tt.bitcast", _bitcast)

__all__ = ["ARITH", "elem_name", "finish", "as_int", "unsigned", "from_int", "float_to_int", "mulhi_u"]
