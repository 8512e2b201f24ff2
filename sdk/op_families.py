"""The TTIR op families, in the order kernels need them: how a scaffolded backend's table is filled
(family by family) and how `day0 ops` says what a backend lowers with its own rules, what it
delegates, and what it lacks.

    family_of("tt.load")                    -> "memory"
    by_family(backend.lowering, {"tt.load", "tt.dot"})
        -> [{"family": "memory", "total": 5, "own": [...], "delegated": [], "missing": [], "used": [...]}, ...]
"""
from __future__ import annotations

from typing import Any, Iterable

FAMILIES: dict[str, tuple[str, ...]] = {
    # Program ids, ranges and constants: every kernel starts with these.
    "program": ("tt.get_program_id", "tt.get_num_programs", "tt.make_range", "arith.constant",
                "tt.return"),
    # Pointer arithmetic: a pointer is a 64-bit device address; tt.addptr scales by element size.
    "pointers": ("tt.addptr", "tt.int_to_ptr", "tt.ptr_to_int", "tt.bitcast", "tt.make_tensor_ptr",
                 "tt.advance"),
    # Memory: masked loads (lanes off the mask read `other`) and stores; bounds checks belong here.
    "memory": ("tt.load", "tt.store", "tt.make_tensor_descriptor", "tt.descriptor_load",
               "tt.descriptor_store"),
    # Shapes: broadcasting and relayout of register tiles.
    "shape": ("tt.splat", "tt.broadcast", "tt.expand_dims", "tt.reshape", "tt.trans", "tt.join",
              "tt.split", "tt.cat", "tt.unsplat", "tt.gather"),
    # Integer arithmetic, comparisons and selects (i1 masks come from arith.cmpi).
    "int_arith": ("arith.addi", "arith.subi", "arith.muli", "arith.divsi", "arith.divui", "arith.remsi",
                  "arith.remui", "arith.andi", "arith.ori", "arith.xori", "arith.shli", "arith.shrsi",
                  "arith.shrui", "arith.maxsi", "arith.minsi", "arith.maxui", "arith.minui",
                  "arith.ceildivsi", "arith.floordivsi", "arith.cmpi", "arith.select", "arith.extsi",
                  "arith.extui", "arith.trunci", "arith.index_cast", "arith.index_castui",
                  "tt.mulhiui"),
    # Float arithmetic and conversions: rounding of bf16/fp8 results is the usual source of failures.
    "float_arith": ("arith.addf", "arith.subf", "arith.mulf", "arith.divf", "arith.remf", "arith.negf",
                    "arith.maximumf", "arith.minimumf", "arith.maxnumf", "arith.minnumf", "arith.cmpf",
                    "arith.extf", "arith.truncf", "arith.sitofp", "arith.uitofp", "arith.fptosi",
                    "arith.fptoui", "arith.bitcast", "tt.fp_to_fp", "tt.precise_divf",
                    "tt.precise_sqrt", "tt.clampf", "math.fma"),
    # Transcendentals and friends (the special-function unit of your device model).
    "math": ("math.exp", "math.exp2", "math.log", "math.log2", "math.sqrt", "math.rsqrt", "math.absf",
             "math.absi", "math.tanh", "math.erf", "math.sin", "math.cos", "math.floor", "math.ceil",
             "math.round", "math.roundeven", "math.trunc", "math.powf", "math.fpowi", "math.expm1",
             "math.log1p", "math.log10", "math.cbrt", "math.erfc", "math.tan", "math.sinh", "math.cosh",
             "math.asin", "math.acos", "math.atan", "math.atan2", "math.asinh", "math.acosh",
             "math.atanh", "math.copysign", "math.isnan", "math.isinf", "math.isfinite", "math.ctlz",
             "math.cttz", "math.ctpop", "tt.extern_elementwise"),
    # Reductions and scans: the combine region runs through the table too (tt.reduce.return).
    "reductions": ("tt.reduce", "tt.reduce.return", "tt.scan", "tt.scan.return", "tt.histogram"),
    # Matrix multiply: the matrix unit; narrow with `signatures=` to the operand types it takes.
    "dot": ("tt.dot", "tt.dot_scaled"),
    # Structured control flow: loops carry values through scf.yield.
    "control_flow": ("scf.for", "scf.if", "scf.while", "scf.condition", "scf.yield",
                     "scf.execute_region", "tt.call"),
    # Atomics: what your device model's `atomics` section says the hardware supports.
    "atomics": ("tt.atomic_rmw", "tt.atomic_cas"),
    # Debugging aids: device-side asserts and prints.
    "debug": ("tt.assert", "tt.print"),
}

#: the family of ops no family above lists (hints, barriers, dialect odds and ends)
OTHER = "other"
_FAMILY_OF = {op: family for family, ops in FAMILIES.items() for op in ops}


def family_of(op_name: str) -> str:
    return _FAMILY_OF.get(op_name, OTHER)


def by_family(table: Any, used: Iterable[str] = ()) -> list[dict]:
    """Per family (in order; "other" last, when used): of its ops, those the table's own rules
    lower ("own"), those it lowers with rules borrowed from another backend ("delegated"), and
    of the `used` op names, those it lacks ("missing"). `table` is a `sdk.lowering.LoweringTable`."""
    used = set(used)
    groups = dict(FAMILIES)
    extra = tuple(sorted(op for op in used if op not in _FAMILY_OF))
    if extra:
        groups[OTHER] = extra
    out = []
    for family, ops in groups.items():
        own = [op for op in ops if op in table and not table.borrowed(op)]
        delegated = [op for op in ops if op in table and table.borrowed(op)]
        out.append({"family": family, "total": len(ops), "own": own, "delegated": delegated,
                    "missing": [op for op in ops if op in used and op not in table],
                    "used": [op for op in ops if op in used]})
    return out


__all__ = ["FAMILIES", "OTHER", "by_family", "family_of"]
