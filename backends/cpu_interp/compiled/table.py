"""The compiled tier's emitter table: one rule per TTIR op it lowers to LLVM IR.

It is a `sdk.backend.LoweringTable`, the same structure as the interpreter's rule table, whose rules
emit code instead of computing: `rule(fx, op, *operand values) -> result value(s)` with `fx` the
function emitter (core.py). `TABLE.missing(module)` lists what a kernel needs that the tier lacks:
such a kernel runs on the interpreter, and the results say so.
"""
from sdk.backend import LoweringTable

TABLE = LoweringTable()
rule = TABLE.rule
