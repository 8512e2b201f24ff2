"""`math.*` ops and libdevice calls (`tt.extern_elementwise`) as LLVM IR.

Accuracy follows the interpreter (ops_math.py there): what numpy computes in the operand's float
type is computed here in float32 (f16, bf16, fp8 and f32 operands) or float64 and rounded to the
result type; functions numpy lacks (erf, erfc, lgamma, ...) are computed in float64 and rounded
once. exp, exp2, log and log2 of float32 come from `mathlib` (vectorisable, <= 1 ulp); the other
transcendental functions call the C math library through LLVM intrinsics where LLVM has one.
sqrt, division, fma, rounding, abs and copysign are exact. A libdevice symbol missing from
`EXTERN` is not lowered: the kernel runs on the interpreter.
"""
from __future__ import annotations

from typing import Callable

from llvmlite import ir

from . import mathlib
from .numerics import call, finish, is_nan
from .ops_arith import apply, elementwise, float_to_int, iconst, res
from .table import TABLE
from .types import F32, F64, I1

# ------------------------------------------------------------------------------ primitives
#: functions with an LLVM intrinsic (lowered to the C library where the target has no instruction)
_INTRINSIC = {"exp", "exp2", "log", "log2", "log10", "sin", "cos", "tan", "asin", "acos", "atan", "sinh",
              "cosh", "tanh", "sqrt", "fabs", "floor", "ceil", "trunc", "round", "roundeven", "rint",
              "nearbyint", "pow", "atan2", "copysign", "fma", "minimumnum", "maximumnum"}
#: float32 functions computed by the C library in float32 (numpy computes them in float32 too)
_LIBM_F32 = {"expm1", "log1p", "asinh", "acosh", "atanh", "cbrt", "fmod", "hypot", "nextafter"}
#: functions computed in float64 and rounded once (the interpreter takes them from torch in float64)
_LIBM_F64 = {"erf", "erfc", "lgamma", "tgamma"}


def libm(fx, name: str, *xs: ir.Value) -> ir.Value:
    """C math library function `name` (double) or `name`+"f" (float), by the operands' type."""
    t = xs[0].type
    sym = name if t == F64 else name + "f"
    fn = fx.kc.declared.get(sym)
    if fn is None:
        fn = fx.kc.intrinsic(sym, t, [t] * len(xs))
        fn.attributes.add("nounwind")
        fn.attributes.add("readnone")
    return fx.b.call(fn, list(xs))


def fn_of(name: str) -> Callable:
    """fx, x.. (float32 or float64 values) -> the function's value in that type."""
    if name in ("exp", "exp2", "log", "log2"):
        return lambda fx, *xs: mathlib.unary(fx, name, xs[0])
    if name in _LIBM_F64:
        def f64(fx, *xs):
            wide = [x if x.type == F64 else fx.b.fpext(x, F64) for x in xs]
            return libm(fx, name, *wide)
        return f64
    if name in _INTRINSIC:
        return lambda fx, *xs: call(fx, f"llvm.{name}", *xs)
    return lambda fx, *xs: libm(fx, name, *xs)


def _rsqrt(fx, x):
    return fx.b.fdiv(ir.Constant(x.type, 1.0), call(fx, "llvm.sqrt", x))


def _round_away(fx, x):
    return call(fx, "llvm.round", x)


def _fpowi(fx, x, n):
    return call(fx, "llvm.pow", x, fx.b.sitofp(n, x.type))


_MATH: dict[str, tuple[Callable, int]] = {
    "math.absf": (fn_of("fabs"), 1), "math.ceil": (fn_of("ceil"), 1), "math.floor": (fn_of("floor"), 1),
    "math.trunc": (fn_of("trunc"), 1), "math.round": (_round_away, 1), "math.roundeven": (fn_of("roundeven"), 1),
    "math.sqrt": (fn_of("sqrt"), 4), "math.rsqrt": (_rsqrt, 6), "math.exp": (fn_of("exp"), 12),
    "math.exp2": (fn_of("exp2"), 10), "math.expm1": (fn_of("expm1"), 20), "math.log": (fn_of("log"), 12),
    "math.log2": (fn_of("log2"), 12), "math.log10": (fn_of("log10"), 20), "math.log1p": (fn_of("log1p"), 20),
    "math.sin": (fn_of("sin"), 20), "math.cos": (fn_of("cos"), 20), "math.tan": (fn_of("tan"), 20),
    "math.asin": (fn_of("asin"), 20), "math.acos": (fn_of("acos"), 20), "math.atan": (fn_of("atan"), 20),
    "math.sinh": (fn_of("sinh"), 20), "math.cosh": (fn_of("cosh"), 20), "math.tanh": (fn_of("tanh"), 20),
    "math.asinh": (fn_of("asinh"), 20), "math.acosh": (fn_of("acosh"), 20), "math.atanh": (fn_of("atanh"), 20),
    "math.cbrt": (fn_of("cbrt"), 20), "math.erf": (fn_of("erf"), 20), "math.erfc": (fn_of("erfc"), 20),
    "math.atan2": (fn_of("atan2"), 20), "math.copysign": (fn_of("copysign"), 1), "math.powf": (fn_of("pow"), 20),
    "math.fma": (fn_of("fma"), 2), "math.fpowi": (_fpowi, 20),
}


def _register_float(name: str, fn: Callable, cost: int) -> None:
    @elementwise(name, cost)
    def emit(fx, op, *xs):
        return finish(fx, fn(fx, *xs), res(op).name)


for _name, (_fn, _cost) in _MATH.items():
    _register_float(_name, _fn, _cost)


def _isinf(fx, x):
    return fx.b.fcmp_ordered("==", call(fx, "llvm.fabs", x), ir.Constant(x.type, float("inf")))


def _isfinite(fx, x):
    return fx.b.fcmp_ordered("<", call(fx, "llvm.fabs", x), ir.Constant(x.type, float("inf")))


for _name, _fn in {"math.isnan": lambda fx, x: is_nan(fx, x), "math.isinf": _isinf,
                   "math.isfinite": _isfinite}.items():
    elementwise(_name)((lambda fn: lambda fx, op, x: fn(fx, x))(_fn))


@elementwise("math.absi")
def _absi(fx, op, x):
    b = fx.b
    return b.select(b.icmp_signed("<", x, iconst(x.type, 0)), b.sub(iconst(x.type, 0), x), x)


@elementwise("math.ctpop")
def _ctpop(fx, op, x):
    return call(fx, "llvm.ctpop", x)


def _count(name):
    def emit(fx, op, x):
        fn = fx.kc.intrinsic(f"{name}.i{x.type.width}", x.type, [x.type, I1])
        return fx.b.call(fn, [x, ir.Constant(I1, 0)])
    return emit


elementwise("math.ctlz")(_count("llvm.ctlz"))
elementwise("math.cttz")(_count("llvm.cttz"))


# ------------------------------------------------------------------------------- libdevice
def _float_extern(base: str) -> Callable:
    fn = fn_of(base)
    return lambda fx, *xs: fn(fx, *xs)


EXTERN: dict[str, Callable] = {}
"""`__nv_*` symbol -> fx, *operand values -> result (rounded / converted to the result type by the
rule)."""

for _base in ("exp", "exp2", "log", "log2", "log10", "expm1", "log1p", "sin", "cos", "tan", "asin", "acos",
              "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "sqrt", "cbrt", "floor", "ceil",
              "trunc", "round", "rint", "nearbyint", "erf", "erfc", "lgamma", "tgamma", "pow", "atan2",
              "fmod", "hypot", "copysign", "fma", "fabs"):
    impl = {"round": _round_away, "rint": fn_of("roundeven"), "nearbyint": fn_of("roundeven"),
            "fabs": fn_of("fabs")}.get(_base) or _float_extern(_base)
    EXTERN[f"__nv_{_base}"] = impl
    EXTERN[f"__nv_{_base}f"] = impl
EXTERN["__nv_rsqrtf"] = EXTERN["__nv_rsqrt"] = _rsqrt
EXTERN["__nv_fmaxf"] = EXTERN["__nv_fmax"] = fn_of("maximumnum")
EXTERN["__nv_fminf"] = EXTERN["__nv_fmin"] = fn_of("minimumnum")
EXTERN["__nv_fmaf_rn"] = EXTERN["__nv_fma_rn"] = fn_of("fma")
for _sym, _base in {"fast_expf": "expf", "fast_exp10f": None, "fast_logf": "logf", "fast_log2f": "log2f",
                    "fast_log10f": "log10f", "fast_sinf": "sinf", "fast_cosf": "cosf", "fast_tanf": "tanf",
                    "fast_powf": "powf"}.items():
    if _base is not None:
        EXTERN[f"__nv_{_sym}"] = EXTERN[f"__nv_{_base}"]
EXTERN["__nv_fast_fdividef"] = EXTERN["__nv_fdiv_rn"] = EXTERN["__nv_ddiv_rn"] = lambda fx, a, b: fx.b.fdiv(a, b)
EXTERN["__nv_fadd_rn"] = EXTERN["__nv_dadd_rn"] = lambda fx, a, b: fx.b.fadd(a, b)
EXTERN["__nv_fsub_rn"] = EXTERN["__nv_dsub_rn"] = lambda fx, a, b: fx.b.fsub(a, b)
EXTERN["__nv_fmul_rn"] = EXTERN["__nv_dmul_rn"] = lambda fx, a, b: fx.b.fmul(a, b)
EXTERN["__nv_fsqrt_rn"] = EXTERN["__nv_dsqrt_rn"] = fn_of("sqrt")
EXTERN["__nv_frsqrt_rn"] = _rsqrt
EXTERN["__nv_frcp_rn"] = EXTERN["__nv_drcp_rn"] = lambda fx, x: fx.b.fdiv(ir.Constant(x.type, 1.0), x)
EXTERN["__nv_saturatef"] = lambda fx, x: fx.b.select(
    is_nan(fx, x), ir.Constant(x.type, 0.0),
    call(fx, "llvm.minimumnum", call(fx, "llvm.maximumnum", x, ir.Constant(x.type, 0.0)), ir.Constant(x.type, 1.0)))
_PRED = {"__nv_isnanf": is_nan, "__nv_isnand": is_nan, "__nv_isinff": _isinf, "__nv_isinfd": _isinf,
         "__nv_finitef": _isfinite, "__nv_isfinited": _isfinite}


@TABLE.rule("tt.extern_elementwise", attrs={"symbol": sorted(set(EXTERN) | set(_PRED))})
def _extern(fx, op, *vals):
    sym = op.attrs["symbol"]
    out = res(op)

    def emit(fx, *xs):
        if sym in _PRED:
            r = _PRED[sym](fx, xs[0])
            return fx.b.zext(r, out.reg) if out.is_int and out.reg != I1 else r
        if any(x.type not in (F32, F64) for x in xs):
            raise_unsupported(op)
        wide = F64 if any(x.type == F64 for x in xs) else F32
        xs = [x if x.type == wide else fx.b.fpext(x, wide) for x in xs]
        r = EXTERN[sym](fx, *xs)
        if out.is_float:
            return finish(fx, r, out.name)
        return float_to_int(fx, r, out, signed=True)
    return apply(fx, op, emit, vals, 20)


def raise_unsupported(op):
    from .types import Unsupported
    raise Unsupported(f"tt.extern_elementwise {op.attrs.get('symbol')} ({op.type_signature()})")


__all__ = ["EXTERN", "libm", "fn_of"]
