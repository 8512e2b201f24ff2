"""What cpu_interp learns about a kernel before running it, kept in side tables keyed by op.

The IR is shared (Triton's cache, the lowering check, other backends read it), so nothing here is
written onto it: `analyse(module)` returns a `Facts` whose tables map ops (compared by identity) to
what the interpreter needs to know about them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sdk.ttir import Module, Op, PointerType, Region

from .provenance import PointerOrigins, pointer_origins

ATOMICS = frozenset({"tt.atomic_rmw", "tt.atomic_cas"})

#: one-op combine regions that a numpy ufunc computes directly (see `combine_ufunc`)
COMBINE_UFUNCS = {
    "arith.addf": np.add, "arith.addi": np.add, "arith.mulf": np.multiply, "arith.muli": np.multiply,
    "arith.maxnumf": np.fmax, "arith.minnumf": np.fmin, "arith.maximumf": np.maximum,
    "arith.minimumf": np.minimum, "arith.maxsi": np.maximum, "arith.minsi": np.minimum,
    "arith.andi": np.bitwise_and, "arith.ori": np.bitwise_or, "arith.xori": np.bitwise_xor}
#: i1 is held as numpy bool, where np.add is OR and np.maximum is OR: its own ops wrap at width 1
#: (addi is XOR) and read it signed for maxsi/minsi (1 is -1, so maxsi is AND and minsi is OR)
COMBINE_UFUNCS_I1 = {
    "arith.addi": np.bitwise_xor, "arith.muli": np.bitwise_and, "arith.maxsi": np.bitwise_and,
    "arith.minsi": np.bitwise_or, "arith.andi": np.bitwise_and, "arith.ori": np.bitwise_or,
    "arith.xori": np.bitwise_xor}
#: element types whose compute values are exactly the type's values (bf16 and fp8 are float32 that
#: must be rounded after every step, so a ufunc over them would skip roundings)
_EXACT_TYPES = frozenset({"f32", "f64", "f16", "i1", "i8", "i16", "i32", "i64"})


@dataclass
class Facts:
    """Side tables of one module (see the module docstring)."""

    origins: PointerOrigins                               # where each access's pointer comes from
    discarded: set[Op] = field(default_factory=set)       # atomics whose old value nothing reads
    spin_loops: set[Op] = field(default_factory=set)      # scf.while loops waiting on other programs
    combine: dict[Op, np.ufunc] = field(default_factory=dict)  # tt.reduce / tt.scan computed by a ufunc
    unaligned: bool = False   # pointers are re-typed (int_to_ptr, bitcast): check alignment on access
    max_numel: int = 1        # the largest tensor of the kernel, in elements

    @property
    def serial(self) -> bool:
        """Programs wait on each other: they must run one at a time (cooperative.py)."""
        return bool(self.spin_loops)


def analyse(module: Module) -> Facts:
    facts = Facts(pointer_origins(module))
    for func in module.funcs.values():
        read = {id(v) for op in func.walk() for v in op.operands}
        for op in func.walk():
            if op.name in ATOMICS and not any(id(r) in read for r in op.results):
                facts.discarded.add(op)
            elif op.name == "scf.while" and spins(op):
                facts.spin_loops.add(op)
            elif op.name in ("tt.reduce", "tt.scan"):
                fn = combine_ufunc(op)
                if fn is not None:
                    facts.combine[op] = fn
            elif op.name in ("tt.int_to_ptr", "tt.bitcast") and any(
                    isinstance(r.type.element, PointerType) for r in op.results):
                facts.unaligned = True
            for r in op.results:
                facts.max_numel = max(facts.max_numel, int(np.prod(r.type.shape, dtype=np.int64)))
    return facts


def spins(loop: Op) -> bool:
    """A while loop whose body makes an atomic or a volatile load: it may wait for another program
    (a lock, a flag), so programs must make progress concurrently."""
    return any(o.name in ATOMICS or (o.name == "tt.load" and o.attrs.get("isVolatile"))
               for region in loop.regions for o in _walk(region))


def padding_of(op: Op) -> str:
    """"nan" or "zero": what a block pointer's or tensor descriptor's out-of-bounds elements read
    as (its `padding` attribute, printed as a number or a name by Triton's versions)."""
    return "nan" if op.attrs.get("padding") in (2, "2", "nan", "PAD_NAN") else "zero"


def combine_ufunc(op: Op) -> np.ufunc | None:
    """The numpy ufunc of a tt.reduce / tt.scan whose combine region is a single associative op of
    its two block arguments over one operand of an exact type; None otherwise."""
    region = op.regions[0]
    if len(op.operands) != 1 or len(region.blocks) != 1:
        return None
    block = region.blocks[0]
    ops = block.ops
    if (len(ops) == 2 and ops[0].name in COMBINE_UFUNCS and ops[1].operands == [ops[0].result]
            and ops[0].operands == block.args and str(op.operands[0].type.element) in _EXACT_TYPES):
        if str(op.operands[0].type.element) == "i1":
            return COMBINE_UFUNCS_I1.get(ops[0].name)
        return COMBINE_UFUNCS[ops[0].name]
    return None


def _walk(region: Region):
    for b in region.blocks:
        for o in b.ops:
            yield from o.walk()
