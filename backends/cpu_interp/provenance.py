"""Where a kernel's pointers come from: its arguments, or raw addresses.

A pointer derived only from tensor arguments (addptr, splat, broadcast, select ... of them) must
stay inside one of those tensors: anything else is a bug the memory checks report. A pointer made
from an integer (`tt.int_to_ptr`, an int-to-pointer bitcast) or loaded from memory (a pointer
table, as grouped GEMMs and MoE kernels keep) may address any memory the process owns, the way it
does on a device. This module marks each load, store and atomic whose pointer may be raw with
`op.__dict__["raw_ptr"] = True`; `memory.Memory` then accepts addresses outside the arguments
where they are mapped memory.

The analysis is a forward fixed point over the whole module; values flowing through regions
(loop-carried pointers, if results, calls) are followed conservatively: an op with regions whose
operands or yielded values may be raw makes all its pointer results and region arguments raw.
"""
from __future__ import annotations

from sdk.ttir import Module, Op, PointerType, TensorDescType, TensorType

MEMORY_OPS = frozenset({"tt.load", "tt.store", "tt.atomic_rmw", "tt.atomic_cas", "tt.descriptor_load",
                        "tt.descriptor_store", "tt.descriptor_reduce", "tt.descriptor_gather",
                        "tt.descriptor_scatter"})


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


def _yielded(op: Op):
    for region in op.regions:
        for block in region.blocks:
            if block.ops:
                yield from block.ops[-1].operands


def mark_raw_pointers(module: Module) -> bool:
    """Mark memory ops whose pointer may be raw; True when the module has any."""
    raw: set[int] = set()
    funcs = module.funcs
    changed = True
    while changed:
        changed = False

        def mark(values) -> None:
            nonlocal changed
            for v in values:
                if id(v) not in raw and _pointer_like(v.type):
                    raw.add(id(v))
                    changed = True

        for func in funcs.values():
            for op in func.walk():
                if _seed(op):
                    mark(op.results)
                    continue
                operands_raw = any(id(v) in raw for v in op.operands)
                if op.regions:
                    if operands_raw or any(id(v) in raw for v in _yielded(op)):
                        mark(op.results)
                        for region in op.regions:
                            for block in region.blocks:
                                mark(block.args)
                elif op.name == "tt.call" and operands_raw:
                    callee = funcs.get(_callee(op))
                    if callee is not None:
                        mark([a for a, v in zip(callee.args, op.operands) if id(v) in raw])
                    mark(op.results)
                elif operands_raw and op.name not in MEMORY_OPS:
                    mark(op.results)
            for op in func.walk():  # a function returning a raw pointer makes its call sites raw
                if op.name == "tt.return" and any(id(v) in raw for v in op.operands):
                    for other in funcs.values():
                        for call in other.walk():
                            if call.name == "tt.call" and _callee(call) == func.name:
                                mark(call.results)
    any_raw = False
    for func in funcs.values():
        for op in func.walk():
            if op.name in MEMORY_OPS and op.operands and id(op.operands[0]) in raw:
                op.__dict__["raw_ptr"] = True
                any_raw = True
    return any_raw
