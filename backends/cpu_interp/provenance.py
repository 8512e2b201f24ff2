"""Where a kernel's pointers come from: which tensor arguments, or raw addresses.

A pointer derived from one tensor argument (addptr, splat, broadcast ... of it) must stay inside
that tensor: anything else is a bug the memory checks report. A pointer that may come from
several arguments addresses one of them per program (chosen by an `if` on the program id) or, after
a `select` on a tensor condition, one per lane. A pointer made from an integer (`tt.int_to_ptr`, an int-to-pointer bitcast) or
loaded from memory (a pointer table, as grouped GEMMs and MoE kernels keep) may address any memory
the process owns, as it does on a device.

`pointer_origins` computes, by a forward fixed point over the whole module, the origins of every
pointer value and returns, for each load, store and atomic (side tables keyed by the op; the IR is
left as it is): `args[op]`, the positions of the entry arguments its pointer may derive from (bounds
are checked against those, never against whichever tensor the address happens to fall in); `raw`,
the accesses whose pointer may be raw; `lanes`, those whose lanes may come from different arguments
(a select on a tensor condition). A pointer chosen per program by control flow still addresses one
argument per program. Values flowing through scf.for / scf.if / scf.while follow their positions;
other region ops and calls are followed conservatively.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from sdk.ttir import Module, Op, PointerType, TensorDescType, TensorType

MEMORY_OPS = frozenset({"tt.load", "tt.store", "tt.atomic_rmw", "tt.atomic_cas", "tt.descriptor_load",
                        "tt.descriptor_store", "tt.descriptor_reduce", "tt.descriptor_gather",
                        "tt.descriptor_scatter"})
RAW = "raw"
LANES = "lanes"  # lanes of one value may come from different origins (a select on a tensor condition)


def _pointer_like(t) -> bool:
    if isinstance(t, TensorType):
        t = t.element
    return isinstance(t, (PointerType, TensorDescType))


def _seed(op: Op) -> bool:
    """An op that turns something other than a pointer into a pointer."""
    if not op.results or not _pointer_like(op.result.type):
        return False
    if op.name == "tt.int_to_ptr":
        return True
    if op.name in ("tt.bitcast", "arith.bitcast"):
        return not _pointer_like(op.operands[0].type)
    return op.name == "tt.load"  # a pointer read from memory


def _callee(op: Op) -> str:
    c = op.attrs.get("callee", "")
    return str(getattr(c, "name", c)).lstrip("@")


def _terminator(region) -> list:
    block = region.blocks[-1] if region.blocks else None
    return list(block.ops[-1].operands) if block is not None and block.ops else []


class _Origins:
    def __init__(self) -> None:
        self.of: dict[int, frozenset] = {}
        self.changed = False

    def get(self, v) -> frozenset:
        return self.of.get(id(v), frozenset())

    def add(self, v, origins) -> None:
        if not origins or not _pointer_like(v.type):
            return
        old = self.of.get(id(v), frozenset())
        new = old | frozenset(origins)
        if new != old:
            self.of[id(v)] = new
            self.changed = True

    def union(self, values) -> frozenset:
        out: frozenset = frozenset()
        for v in values:
            out |= self.get(v)
        return out


def _flow(op: Op, o: _Origins, funcs: dict) -> None:
    """Propagate origins through one op (not into its regions' ops: the walk reaches those)."""
    if _seed(op):
        for r in op.results:
            o.add(r, {RAW})
        return
    if op.name == "scf.for":
        body = op.regions[0].blocks[0]
        init, yields = op.operands[3:], _terminator(op.regions[0])
        for k, r in enumerate(op.results):
            src = o.get(init[k]) | (o.get(yields[k]) if k < len(yields) else frozenset())
            o.add(r, src)
            if k + 1 < len(body.args):
                o.add(body.args[k + 1], src)
        return
    if op.name == "scf.if":
        for region in op.regions:
            for k, v in enumerate(_terminator(region)):
                if k < len(op.results):
                    o.add(op.results[k], o.get(v))
        return
    if op.name == "scf.while":
        before, after = op.regions[0].blocks[0], op.regions[1].blocks[0]
        cond, yields = _terminator(op.regions[0])[1:], _terminator(op.regions[1])
        for k, a in enumerate(before.args):
            o.add(a, o.get(op.operands[k]) if k < len(op.operands) else frozenset())
            if k < len(yields):
                o.add(a, o.get(yields[k]))
        for k, v in enumerate(cond):
            if k < len(after.args):
                o.add(after.args[k], o.get(v))
            if k < len(op.results):
                o.add(op.results[k], o.get(v))
        return
    if op.regions:  # any other region op: everything may flow anywhere
        src = o.union(op.operands) | o.union(v for r in op.regions for v in _terminator(r))
        for r in op.results:
            o.add(r, src)
        for region in op.regions:
            for block in region.blocks:
                for a in block.args:
                    o.add(a, src)
        return
    if op.name == "tt.call":
        callee = funcs.get(_callee(op))
        if callee is not None:
            for a, v in zip(callee.args, op.operands):
                o.add(a, o.get(v))
            rets = o.union(v for inner in callee.walk() if inner.name == "tt.return" for v in inner.operands)
            for r in op.results:
                o.add(r, rets)
        else:
            for r in op.results:
                o.add(r, {RAW})
        return
    if op.name in ("cf.br", "cf.cond_br"):  # block arguments of the successors: conservatively all
        return
    if op.name not in MEMORY_OPS:
        src = o.union(op.operands)
        if op.name == "arith.select" and isinstance(op.operands[0].type, TensorType) and \
                o.get(op.operands[1]) != o.get(op.operands[2]):
            src |= {LANES}
        for r in op.results:
            o.add(r, src)


@dataclass
class PointerOrigins:
    """Per memory op: where its pointer may come from (see the module docstring)."""

    args: dict[Op, frozenset[int]] = field(default_factory=dict)  # entry-argument positions
    raw: set[Op] = field(default_factory=set)     # the pointer may be raw
    lanes: set[Op] = field(default_factory=set)   # lanes of one access may come from different arguments


def pointer_origins(module: Module) -> PointerOrigins:
    """The origins of the pointer of every load, store and atomic of `module`."""
    o = _Origins()
    funcs = module.funcs
    entry = module.entry
    for k, a in enumerate(entry.args):
        o.add(a, {("arg", k)})
    o.changed = True
    while o.changed:
        o.changed = False
        for func in funcs.values():
            cf_blocks = [b for b in func.body.blocks[1:]]
            for op in func.walk():
                _flow(op, o, funcs)
            if cf_blocks:  # a multi-block body (early returns): its block arguments may be anything
                src = o.union(v for op in func.walk() for v in op.operands)
                for b in cf_blocks:
                    for a in b.args:
                        o.add(a, src)
    out = PointerOrigins()
    for func in funcs.values():
        for op in func.walk():
            if op.name in MEMORY_OPS and op.operands:
                origins = o.get(op.operands[0])
                if RAW in origins:
                    out.raw.add(op)
                if LANES in origins:
                    out.lanes.add(op)
                out.args[op] = frozenset(k for x in origins if isinstance(x, tuple) for k in x[1:])
    return out
