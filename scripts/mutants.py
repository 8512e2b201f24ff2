"""The planted bugs of scripts/mutation_check.py: bugs a backend engineer makes, one per mutant.

Each mutant is a list of edits (file, exact original snippet, replacement) applied to a scratch copy
of the tree; `d2` names the default-suite pytest files that should catch it, `d1` optionally narrows
the conformance run (`--d1-scope subset`). `equivalent` says why a mutant changes nothing observable.
Areas: interp (cpu_interp's rules and memory, shared by both interpreters where the file is), ref
(the single-program reference interpreter only), numerics (sdk/numerics.py: rounding to narrow
floats), compiled (the llvmlite tier), machinery (day0's comparison, verdict and report).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    id: str
    area: str
    what: str
    edits: tuple[tuple[str, str, str], ...]
    d2: tuple[str, ...] = ()
    d1: tuple[str, ...] = ()
    equivalent: str = ""
    note: str = ""
    full_d1: bool = False  # never stop d1 early (the mutant is in how a run ends: its exit code)


BASELINE = Mutant("baseline", "", "no edit", ())


def describe(m: Mutant) -> dict:
    return {"id": m.id, "area": m.area, "what": m.what, "files": sorted({e[0] for e in m.edits}),
            "equivalent": m.equivalent, "note": m.note}


INTERP = ("tests/test_cpu_interp_mutants.py", "tests/test_cpu_interp_numerics.py", "tests/test_cpu_interp_features.py",
          "tests/test_cpu_interp_reference.py", "tests/test_cpu_interp_tutorials.py",
          "tests/test_cpu_interp_language_corners.py")
COMPILED = ("tests/test_cpu_compiled.py", "tests/test_cpu_compiled_language.py", "tests/test_cpu_compiled_layouts.py",
            "tests/test_cpu_interp_numerics.py", "tests/test_cpu_interp_mutants.py",
            "tests/test_cpu_interp_language_corners.py")
COMPARE = ("tests/test_conformance_compare.py", "tests/test_runner_results.py", "tests/test_runner.py")
REPORT = ("tests/test_report.py", "tests/test_report_headline.py", "tests/test_coverage.py", "tests/test_results_files.py")

A = "backends/cpu_interp/ops_arith.py"
M = "backends/cpu_interp/ops_math.py"
D = "backends/cpu_interp/ops_dot.py"
T = "backends/cpu_interp/ops_tensor.py"
OM = "backends/cpu_interp/ops_memory.py"
MEM = "backends/cpu_interp/memory.py"
ADR = "backends/cpu_interp/addressing.py"
AT = "backends/cpu_interp/atomics.py"
IN = "backends/cpu_interp/interp.py"
REF = "backends/cpu_interp/reference.py"
NUM = "sdk/numerics.py"
CA = "backends/cpu_interp/compiled/ops_arith.py"
CT = "backends/cpu_interp/compiled/ops_tensor.py"
CM = "backends/cpu_interp/compiled/ops_memory.py"
CN = "backends/cpu_interp/compiled/numerics.py"
CHK = "sdk/conformance/check.py"
VER = "sdk/verdict.py"
CMD = "sdk/commands/conformance.py"


def _m(id, area, what, edits, d2, **kw) -> Mutant:
    if isinstance(edits[0], str):
        edits = (edits,)
    return Mutant(id, area, what, tuple(tuple(e) for e in edits), tuple(d2), **kw)


# A backend bug that machinery mutants are paired with: the last program of every launch never runs
# (its outputs keep the poison), so that a lenient comparison has something to let through.
_LAST_PROGRAM_DROPPED = (IN, "ids = np.arange(at, min(total, at + chunk), dtype=np.int64)",
                         "ids = np.arange(at, min(total - (total > 1), at + chunk), dtype=np.int64)")

MUTANTS: tuple[Mutant, ...] = (
    # ------------------------------------------------------------------ element-wise arithmetic
    _m("arith_maximumf_nan", "interp", "tl.maximum (arith.maximumf) ignores a NaN operand instead of propagating it",
       (A, '"arith.maximumf": _maximum,', '"arith.maximumf": np.fmax,'), INTERP),
    _m("arith_clamp_propagate_nan", "interp", "tl.clamp ignores propagate_nan=ALL",
       (A, 'if str(op.attrs.get("propagateNan", "none")).lower() == "all":\n        r = _minimum(',
        'if False:\n        r = _minimum('), INTERP),
    _m("arith_divsi_floor", "interp", "integer // on negative operands floors (Python) instead of truncating (C)",
       (A, "    return q + (((a - q * b) != 0) & ((a < 0) != (b < 0)))", "    return q"), INTERP),
    _m("arith_remsi_mod", "interp", "integer % takes the divisor's sign (Python mod) instead of the dividend's (C)",
       (A, "np.where(b == 0, a, np.fmod(a, safe))", "np.where(b == 0, a, np.mod(a, safe))"), INTERP),
    _m("arith_shrsi_logical", "interp", ">> on signed integers shifts in zeros (logical) instead of the sign",
       (A, 'ARITH.register("arith.shrsi", _shift_rule(_shrsi))', 'ARITH.register("arith.shrsi", _shift_rule(_shrui))'),
       INTERP),
    _m("arith_shift_overwidth", "interp", "a shift by >= the bit width shifts by width-1 instead of giving 0",
       (A, "        return np.where(amt >= bits, 0, r).astype(ua.dtype).view(a.dtype)",
        "        return r.astype(ua.dtype).view(a.dtype)"), INTERP),
    _m("arith_cmpi_unsigned_as_signed", "interp", "unsigned integer compares (ult/ugt ...) compare as signed",
       (A, 'view = unsigned if pred[0] == "u" else as_int', "view = as_int"), INTERP),
    _m("arith_cmpf_unordered", "interp", "float compares ignore NaN ordering (une/one and the u* predicates)",
       (A, 'return r | unordered if pred[0] == "u" else r & ~unordered', "return r"), INTERP),
    _m("arith_select_swapped", "interp", "tl.where picks the false operand where the condition holds",
       (A, "    return np.where(c, a, b)\n", "    return np.where(c, b, a)\n"), INTERP),
    _m("arith_fptosi_no_saturation", "interp", "float -> int casts out of range give 0 instead of saturating",
       (A, "    r = np.where(x >= hi, np.iinfo(out_t).max, np.where(x < lo, np.iinfo(out_t).min, r)).astype(out_t)\n",
        "    r = r.astype(out_t)\n"), INTERP),
    _m("arith_fptosi_rounds", "interp", "float -> int casts round to nearest instead of truncating toward zero",
       (A, "    x = np.trunc(np.asarray(x, dtype=np.float64))", "    x = np.rint(np.asarray(x, dtype=np.float64))"),
       INTERP),
    _m("arith_truncf_rtz_ignored", "interp", "fp downcast rounding='rtz' ignored (always round to nearest even)",
       (A, 'return round_to(elem_name(op.result.type), x, "rtz" if mode in ("toward_zero", "1") else "rtne")',
        'return round_to(elem_name(op.result.type), x, "rtne")'), INTERP),
    _m("arith_extui_signed", "interp", "zero-extension (extui) sign-extends",
       (A, "    return unsigned(x, src).astype(compute_dtype(elem_name(op.result.type)))",
        "    return as_int(x, src).astype(compute_dtype(elem_name(op.result.type)))"), INTERP),
    _m("arith_uitofp_signed", "interp", "unsigned int -> float converts as signed",
       (A, "return _int_to_float(unsigned(x, src),", "return _int_to_float(as_int(x, src),"), INTERP),
    _m("arith_mulhi_shift", "interp", "tl.umulhi (tt.mulhiui) shifts the 64-bit product by 31 instead of 32",
       (A, ">> np.uint64(bits)).astype(a.dtype)", ">> np.uint64(bits - 1)).astype(a.dtype)"), INTERP),
    _m("arith_precise_sqrt_approx", "interp", "tl.sqrt_rn (tt.precise_sqrt) computed approximately (exp(log(x)/2))",
       (A, 'ARITH.register("tt.precise_sqrt", _float_rule(np.sqrt))',
        'ARITH.register("tt.precise_sqrt", _float_rule(lambda x: np.exp(np.log(x) * np.asarray(x).dtype.type(0.5))))'),
       INTERP),
    _m("arith_divf_approx", "interp", "float division as multiplication by the reciprocal (two roundings)",
       (A, '"arith.divf": np.divide,', '"arith.divf": lambda a, b: a * (np.asarray(b).dtype.type(1) / b),'), INTERP),
    # ---------------------------------------------------------------------------------- math
    _m("math_exp2_as_exp", "interp", "math.exp2 computed as e**x", (M, '"math.exp2": np.exp2,', '"math.exp2": np.exp,'),
       INTERP),
    _m("math_log2_as_log", "interp", "math.log2 computed as ln", (M, '"math.log2": np.log2,', '"math.log2": np.log,'),
       INTERP),
    _m("math_fma_two_roundings", "interp", "tl.fma rounds the product before adding (no fused rounding)",
       (M, '"math.fma": fma,', '"math.fma": lambda a, b, c: np.multiply(a, b) + c,'), INTERP),
    _m("math_round_half_even", "interp", "math.round rounds half to even instead of away from zero",
       (M, '"math.round": _round_away,', '"math.round": np.rint,'), INTERP),
    _m("math_libdevice_umulhi_signed", "interp", "libdevice umulhi computes the signed high half",
       (M, '"__nv_umulhi": lambda a, b: _mulhi_u_any(a, b),', '"__nv_umulhi": _mulhi_signed,'), INTERP),
    _m("math_float2int_rn_trunc", "interp", "libdevice float2int_rn truncates",
       (M, '_ROUND = {"rn": np.rint,', '_ROUND = {"rn": np.trunc,'), INTERP),
    _m("math_rsqrt_f16", "interp", "math.rsqrt evaluated in half precision",
       (M, "    return x.dtype.type(1) / np.sqrt(x)\n",
        "    return (x.dtype.type(1) / np.sqrt(x.astype(np.float16))).astype(x.dtype)\n"), INTERP),
    # ------------------------------------------------------------------------------------ dot
    _m("dot_acc_dropped", "interp", "tl.dot ignores the accumulator operand",
       (D, "    out = prod + c.astype(work, copy=False)\n", "    out = prod\n"), INTERP),
    _m("dot_fp16_accumulate", "interp", "tl.dot of fp16/bf16 inputs accumulates in fp16",
       (D, "work = np.float64 if out_dt == np.float64 or a.dtype == np.float64 else np.float32",
        "work = np.float64 if out_dt == np.float64 or a.dtype == np.float64 else np.float16"), INTERP),
    _m("dot_int8_wraps", "interp", "int8 tl.dot accumulates in int8 (wraps) instead of int32",
       (D, "acc = np.matmul(a.astype(np.int64), b.astype(np.int64)) + c",
        "acc = np.matmul(a.astype(np.int8), b.astype(np.int8)) + c"), INTERP),
    _m("dot_scaled_nibble_order", "interp", "tl.dot_scaled unpacks e2m1 high nibble first",
       (D, "pair = np.stack([_E2M1[byte & 0xF], _E2M1[byte >> 4]], axis=axis)",
        "pair = np.stack([_E2M1[byte >> 4], _E2M1[byte & 0xF]], axis=axis)"), INTERP),
    _m("dot_scaled_e8m0_bias", "interp", "e8m0 scales decoded with bias 128",
       (D, "np.exp2(byte.astype(np.float32) - 127.0)", "np.exp2(byte.astype(np.float32) - 128.0)"), INTERP),
    # ------------------------------------------------------------------------ shapes, reductions
    _m("pid_axis_swap", "interp", "tl.program_id(0) and (1) swapped",
       (T, 'return ctx.pid[op.attrs["axis"]]', 'return ctx.pid[(1, 0, 2)[op.attrs["axis"]]]'), INTERP),
    _m("num_programs_axis_swap", "interp", "tl.num_programs(0) and (1) swapped",
       (T, 'return np.array([ctx.grid[op.attrs["axis"]]], np.int32)',
        'return np.array([ctx.grid[(1, 0, 2)[op.attrs["axis"]]]], np.int32)'), INTERP),
    _m("trans_order_ignored", "interp", "tl.trans / permute applies the reversed order (2-D: no transpose)",
       (T, "return np.transpose(x, (0,) + tuple(int(o) + 1 for o in order))",
        "return np.transpose(x, (0,) + tuple(int(o) + 1 for o in reversed(order)))"), INTERP),
    _m("join_order", "interp", "tl.join puts b before a", (T, "return np.stack([a, b], axis=-1)",
                                                             "return np.stack([b, a], axis=-1)"), INTERP),
    _m("split_order", "interp", "tl.split returns the halves swapped",
       (T, "return x[..., 0], x[..., 1]", "return x[..., 1], x[..., 0]"), INTERP),
    _m("expand_dims_last", "interp", "tl.expand_dims always appends the new axis last",
       (T, '    ax = int(op.attrs["axis"]) + 1\n    if isinstance(x, Ptrs):', '    ax = -1\n    if isinstance(x, Ptrs):'),
       INTERP),
    _m("reduce_last_axis", "interp", "a one-op reduction (sum/max...) always reduces the last axis",
       (T, "return fast.reduce(x, axis=ax, dtype=x.dtype)", "return fast.reduce(x, axis=-1, dtype=x.dtype)"), INTERP),
    _m("reduce_odd_tail", "interp", "a region reduction drops the last element of an odd-length level",
       (T, "        if n % 2:\n            comb = [np.concatenate", "        if False:\n            comb = [np.concatenate"),
       INTERP, equivalent="block shapes are powers of two: a level of odd length > 1 never occurs"),
    _m("scan_reverse_ignored", "interp", "tl.cumsum(reverse=True) scans forward",
       (T, '    rev = bool(op.attrs.get("reverse", False))\n    xs = _fulls(op, xs)',
        '    rev = False\n    xs = _fulls(op, xs)'), INTERP),
    _m("scan_exclusive", "interp", "a one-op scan is exclusive (the element itself left out)",
       (T, "outs = [fast.accumulate(xs[0], axis=ax, dtype=xs[0].dtype)]",
        "outs = [fast.accumulate(xs[0], axis=ax, dtype=xs[0].dtype) - xs[0]]"), INTERP),
    _m("histogram_mask_ignored", "interp", "tl.histogram ignores its mask",
       (T, "    if mask is not None:\n        ok &= mask\n", "    if False:\n        ok &= mask\n"), INTERP),
    _m("histogram_upper_bound", "interp", "tl.histogram counts value == num_bins into the next program's bins",
       (T, "ok = (x >= 0) & (x < nb)", "ok = (x >= 0) & (x <= nb)"), INTERP,
       equivalent="only a value outside the histogram's range [0, num_bins) sees it, and Triton leaves "
                  "what such a value does unspecified"),
    # ---------------------------------------------------------------------------- memory
    _m("load_other_ignored_fast", "interp", "a masked load fills masked-off lanes with 0, ignoring `other` (row fast path)",
       (MEM, "        cdt = compute_dtype(elem)\n        return np.where(m, vals, _fill(other, (), cdt) if other is None else other)",
        "        cdt = compute_dtype(elem)\n        return np.where(m, vals, _fill(None, (), cdt))"), INTERP),
    _m("load_other_ignored_exact", "interp", "a masked load ignores `other` (exact path: gathers, several tensors)",
       (MEM, "            return vals\n        return np.where(m, vals, _fill(other, (), cdt) if other is None else other)"
             ".astype(cdt, copy=False)\n\n    def store",
        "            return vals\n        return np.where(m, vals, _fill(None, (), cdt)).astype(cdt, copy=False)\n\n    def store"),
       INTERP),
    _m("store_mask_ignored_fast", "interp", "a masked store writes masked-off lanes too (where they are in bounds)",
       (MEM, "        view[idx[m]] = raw[m]\n        return True", "        view[idx] = raw\n        return True"), INTERP),
    _m("mask_last_lane", "interp", "an access whose mask is off only in its last lane is treated as unmasked",
       (ADR, "    m = np.broadcast_to(m, shape)\n    if m.all():", "    m = np.broadcast_to(m, shape)\n    if m[..., :-1].all():"),
       INTERP),
    _m("masked_load_fill_one", "interp", "masked-off lanes of a load without `other` read 1 instead of 0",
       (MEM, "    if other is None:\n        return np.zeros(shape, cdt)", "    if other is None:\n        return np.ones(shape, cdt)"),
       INTERP, note="Triton leaves such lanes undefined: a kernel must not depend on them"),
    _m("addptr_offsets_int32", "interp", "pointer offsets accumulated in int32 (64-bit offsets truncated)",
       (OM, "new = off if p.off is None else np.add(p.off, off, dtype=np.int64)",
        "new = (off if p.off is None else np.add(p.off, off, dtype=np.int64)).astype(np.int32)"), INTERP),
    _m("blockptr_boundary_off_by_one", "interp", "block pointer boundary check lets index == shape through",
       (OM, "ok = (i >= 0) & (i < _expand(self.shape[d], nd))", "ok = (i >= 0) & (i <= _expand(self.shape[d], nd))"),
       INTERP),
    _m("blockptr_padding_nan_ignored", "interp", "padding_option='nan' pads with zeros",
       ("backends/cpu_interp/analysis.py", 'return "nan" if op.attrs.get("padding") in (2, "2", "nan", "PAD_NAN") else "zero"',
        'return "zero"'), INTERP),
    _m("grid_last_program_dropped", "interp", "the last program of a launch never runs", (_LAST_PROGRAM_DROPPED,), INTERP),
    # ---------------------------------------------------------------------------- atomics
    _m("atomic_returns_new", "interp", "atomic_add/max/... return the new value instead of the old",
       (AT, "        if (_bits(new_raw) != _bits(raw_cur)).any():",
        "        old[rnd] = from_storage(elem, new_raw)\n        if (_bits(new_raw) != _bits(raw_cur)).any():"), INTERP),
    _m("atomic_int_add_returns_new", "interp", "integer atomic_add (many lanes) returns the new value",
       (AT, "old[order] = (view[s_idx] + excl).astype(cdt)", "old[order] = (view[s_idx] + excl + s_val).astype(cdt)"),
       INTERP),
    _m("atomic_cas_inverted", "interp", "atomic_cas stores when the value differs from cmp",
       (AT, "hit = _bits(raw_cur) == _bits(raw_cmp[rnd])", "hit = _bits(raw_cur) != _bits(raw_cmp[rnd])"), INTERP),
    _m("atomic_umax_signed", "interp", "atomic umax compares as signed",
       (AT, "out = np.maximum(_unsigned(cur), _unsigned(val)).view(cur.dtype)", "out = np.maximum(cur, val)"), INTERP),
    # ------------------------------------------------------------------------ reference only
    _m("ref_pid_axis_swap", "ref", "the reference interpreter swaps program_id(0) and (1)",
       (REF, 'return np.array(state.pid[op.attrs["axis"]], np.int32)',
        'return np.array(state.pid[(1, 0, 2)[op.attrs["axis"]]], np.int32)'), INTERP),
    # -------------------------------------------------------------------------- narrow floats
    _m("bf16_truncates", "numerics", "f32 -> bf16 truncates instead of rounding to nearest even",
       (NUM, "r = ((b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)).view(np.float32)",
        "r = (b & np.uint32(0xFFFF0000)).view(np.float32)"), INTERP + ("tests/test_cpu_compiled.py",)),
    _m("fp8_truncates", "numerics", "f32 -> fp8 truncates instead of rounding to nearest even",
       (NUM, "        y = ((b + np.uint32((1 << (s - 1)) - 1) + ((b >> np.uint32(s)) & np.uint32(1))) & keep).view(np.float32)",
        "        y = (b & keep).view(np.float32)"), INTERP + ("tests/test_cpu_compiled.py",)),
    _m("fp8_no_satfinite", "numerics", "f32 -> fp8 overflow gives inf / NaN instead of saturating to the max finite",
       (NUM, '    if rounding == "rtz" or satfinite:\n        y = np.where(finite & (y > top), top, y)',
        '    if rounding == "rtz":\n        y = np.where(finite & (y > top), top, y)'), INTERP + ("tests/test_cpu_compiled.py",)),
    _m("round_generic_ties_away", "numerics", "rounding from f64 to narrow floats breaks ties away from zero",
       (NUM, "    q = np.trunc(q) if rounding == \"rtz\" else np.rint(q)    # rint: round half to even",
        "    q = np.trunc(q) if rounding == \"rtz\" else np.floor(q + 0.5)"), INTERP + ("tests/test_cpu_compiled.py",)),
    # ---------------------------------------------------------------------------- compiled tier
    _m("c_maximumf_nan", "compiled", "compiled: arith.maximumf lowered to maximumnum (NaN ignored)",
       (CA, '_float_binary("arith.maximumf", lambda fx, a, b: call(fx, "llvm.maximum", a, b))',
        '_float_binary("arith.maximumf", lambda fx, a, b: call(fx, "llvm.maximumnum", a, b))'), COMPILED),
    _m("c_divsi_floor", "compiled", "compiled: integer // floors instead of truncating",
       (CA, "    d = _SignedDivision(fx, a, b)\n    return d.quotient(d.q)",
        "    d = _SignedDivision(fx, a, b)\n    return d.quotient(d.floor()[0])"), COMPILED),
    _m("c_shrsi_logical", "compiled", "compiled: signed >> lowered to lshr", (CA, "        return bd.ashr(a, amt)",
                                                                             "        return bd.lshr(a, amt)"), COMPILED),
    _m("c_cmpi_unsigned_as_signed", "compiled", "compiled: unsigned compares lowered as signed",
       (CA, "    if pred[0] == \"u\":\n        return bd.icmp_unsigned(_REL[pred[1:]], a, b)",
        "    if pred[0] == \"u\":\n        return bd.icmp_signed(_REL[pred[1:]], a, b)"), COMPILED),
    _m("c_fptoui_as_signed", "compiled", "compiled: float -> unsigned casts saturate as signed",
       (CA, '"llvm.fptosi.sat" if signed else "llvm.fptoui.sat"', '"llvm.fptosi.sat"'), COMPILED),
    _m("c_clamp_propagate_nan", "compiled", "compiled: tl.clamp ignores propagate_nan=ALL",
       (CA, 'if str(op.attrs.get("propagateNan", "none")).lower() == "all":\n        r = call(fx, "llvm.minimum"',
        'if False:\n        r = call(fx, "llvm.minimum"'), COMPILED),
    _m("c_load_other_ignored", "compiled", "compiled: a masked load ignores `other`",
       (CM, "fill = other_tv.at(fx, idx) if other_tv is not None else ir.Constant(e.reg, None)",
        "fill = ir.Constant(e.reg, None)"), COMPILED),
    _m("c_pid_axis_swap", "compiled", "compiled: program_id(0) and (1) swapped",
       (CT, 'return fx.pid[int(op.attrs["axis"])]', 'return fx.pid[(1, 0, 2)[int(op.attrs["axis"])]]'), COMPILED),
    _m("c_scan_reverse_ignored", "compiled", "compiled: reverse scans run forward",
       (CT, '    rev = bool(op.attrs.get("reverse", False))', "    rev = False"), COMPILED),
    _m("c_dot_loops_acc_dropped", "compiled", "compiled: tl.dot (loop-nest path: fp16/bf16/int8) ignores the accumulator",
       (CT, "        acc.put(fx, idx, widen(C.at(fx, idx)))", "        acc.put(fx, idx, widen(ir.Constant(C.at(fx, idx).type, 0)))"),
       COMPILED),
    _m("c_bf16_truncates", "compiled", "compiled: f32 -> bf16 truncates",
       (CN, "r = b.and_(b.add(b.add(bits, i32c(0x7FFF)), lsb), i32c(0xFFFF0000))", "r = b.and_(bits, i32c(0xFFFF0000))"),
       COMPILED),
    # -------------------------------------------------------------- day0's own machinery
    _m("cmp_nonfinite_ignored", "machinery", "compare: non-finite (unwritten, poisoned) outputs are not failed "
       "(paired with the last program of a launch never running)",
       ((CHK, "    if bad_out:\n", "    if bad_out and False:\n"), _LAST_PROGRAM_DROPPED), COMPARE),
    _m("cmp_nonfinite_ignored_alone", "machinery", "compare: non-finite outputs are not failed (no backend bug)",
       (CHK, "    if bad_out:\n", "    if bad_out and False:\n"), COMPARE,
       note="d1 cannot see a lenient comparison while the backend is right: see the paired mutant"),
    _m("cmp_nan_max_ignored", "machinery", "compare: max() drops NaN errors (paired with the last program dropped)",
       ((CHK, "    return math.nan if math.isnan(acc) or math.isnan(value) else max(acc, value)",
         "    return max(acc, value) if not math.isnan(value) else acc"), _LAST_PROGRAM_DROPPED), COMPARE),
    _m("cmp_rtol_as_atol", "machinery", "compare: the relative tolerance is ignored and atol raised to 1e-2 "
       "(paired with float division as reciprocal multiply)",
       ((CHK, "over += int((d > torch.mul(a, tol.rtol, out=t).add_(tol.atol)).sum())",
         "over += int((d > torch.mul(a, 0.0, out=t).add_(max(tol.atol, 1e-2))).sum())"),
        (CHK, "        elif not worst <= tol.atol:", "        elif not worst <= max(tol.atol, 1e-2):"),
        (A, '"arith.divf": np.divide,', '"arith.divf": lambda a, b: a * (np.asarray(b).dtype.type(1) / b),')), COMPARE),
    _m("cmp_first_piece_only", "machinery", "compare: only the first piece of a streamed comparison is judged",
       (CHK, "        for s in range(0, fa.numel(), limit):", "        for s in range(0, min(fa.numel(), limit), limit):"),
       COMPARE),
    _m("poison_zero", "machinery", "outputs are poisoned with zeros (paired with the last program dropped)",
       ((CHK, '        t.fill_(float("nan"))', "        t.zero_()"), _LAST_PROGRAM_DROPPED), COMPARE),
    _m("verdict_last_output_wins", "machinery", "run_case: a later passing output overwrites an earlier failure "
       "(paired with a backend bug)",
       ((CHK, '            if not ok:\n                verdict.status = "fail"',
         '            verdict.status = "pass" if ok else "fail"\n            if not ok:'), _LAST_PROGRAM_DROPPED), COMPARE),
    _m("exit_code_any_pass", "machinery", "day0 conformance exits 0 when any item passes (paired with a backend bug)",
       ((CMD, "    return 0 if all(r.passed or r.status == SKIPPED for r in records) else 1",
         "    return 0 if any(r.passed or r.status == SKIPPED for r in records) else 1"), _LAST_PROGRAM_DROPPED),
       ("tests/test_runner.py", "tests/test_cli_errors.py"), full_d1=True),
    _m("verdict_one_failure_ignored", "machinery", "verdict: a kernel with one failing item still counts as passing",
       (VER, "        elif passed < len(recs):", "        elif passed < len(recs) - 1:"), REPORT),
    _m("verdict_none_pass_is_gaps", "machinery", "verdict: a kernel passing no item is 'runs with gaps', not 'does not run'",
       (VER, "        if passed == 0:\n            v.blocking.append(k)", "        if passed < 0:\n            v.blocking.append(k)"),
       REPORT),
)
