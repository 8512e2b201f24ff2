"""Which of a kernel's pointer arguments it reads and which it may write, read off its TTIR.

The bridge copies a host tensor into a device backend's memory only when the kernel reads it or may
write it, and back out only when it may write it. The answer is conservative: a pointer that
escapes (turned into an integer, stored to memory, passed to inline assembly) is read and written,
and a kernel that makes pointers from integers (`tt.int_to_ptr`) may touch every argument.

    access(module) -> ("r", "w", "", "rw", ...)   one entry per parameter of the kernel
"""
from __future__ import annotations

from .ir import Module, Op, PointerType, TensorDescType, TensorType, Value

#: op -> which operand is the memory it accesses, and how
_SINKS = {
    "tt.load": (0, "r"), "tt.descriptor_load": (0, "r"), "tt.descriptor_gather": (0, "r"),
    "tt.prefetch": (0, ""),
    "tt.store": (0, "w"), "tt.descriptor_store": (0, "w"), "tt.descriptor_scatter": (0, "w"),
    "tt.atomic_rmw": (0, "rw"), "tt.atomic_cas": (0, "rw"), "tt.descriptor_reduce": (0, "rw"),
}
#: ops whose pointer results point into what their pointer operands point into
_CARRY = frozenset({
    "tt.addptr", "tt.splat", "tt.broadcast", "tt.expand_dims", "tt.reshape", "tt.trans", "tt.cat",
    "tt.join", "tt.split", "tt.bitcast", "tt.make_tensor_ptr", "tt.advance", "tt.make_tensor_descriptor",
    "arith.select", "tt.unsplat", "tt.gather", "tt.reinterpret_tensor_descriptor",
})
#: ops after which a pointer can no longer be followed
_ESCAPE = frozenset({"tt.ptr_to_int", "tt.elementwise_inline_asm", "tt.extern_elementwise"})


def _is_memory(t) -> bool:
    while isinstance(t, TensorType):
        t = t.elem
    return isinstance(t, (PointerType, TensorDescType))


def access(module: Module) -> tuple[str, ...]:
    """"r", "w", "rw" or "" for each parameter of the module's entry function (non-pointer
    parameters get "")."""
    entry = module.entry
    origin: dict[int, frozenset[int]] = {id(v): frozenset({k}) for k, v in enumerate(entry.args)
                                         if _is_memory(v.type)}
    modes = {k: set() for k in range(len(entry.args))}
    if any(op.name == "tt.int_to_ptr" for op in module.walk()):
        return tuple("rw" if _is_memory(v.type) else "" for v in entry.args)

    def of(v: Value) -> frozenset[int]:
        return origin.get(id(v), frozenset())

    def flow(targets, sources) -> bool:
        """Give `targets` the origins of `sources`; whether anything changed."""
        merged = frozenset().union(*(of(s) for s in sources)) if sources else frozenset()
        changed = False
        for t in targets:
            if merged - of(t) and _is_memory(t.type):  # only pointers carry what they point into
                origin[id(t)] = of(t) | merged
                changed = True
        return changed

    ops = list(module.walk())
    targets = _branch_targets(module)
    changed = True
    while changed:  # a fixpoint: loops carry pointers around their back edges
        changed = False
        for op in ops:
            changed |= _step(op, module, of, flow, modes, targets)
    return tuple("".join(sorted(modes[k], key="rw".index)) if _is_memory(v.type) else ""
                 for k, v in enumerate(entry.args))


def _step(op: Op, module: Module, of, flow, modes, branch_targets) -> bool:
    if op.name in _SINKS:
        at, how = _SINKS[op.name]
        for k in of(op.operands[at]):
            modes[k].update(how)
        for v in op.operands[at + 1:]:  # a pointer stored as a value escapes
            for k in of(v):
                modes[k].update("rw")
        return flow(op.results, []) if op.results else False
    if op.name in _ESCAPE:
        for v in op.operands:
            for k in of(v):
                modes[k].update("rw")
        return False
    if op.name == "tt.call":
        callee = module.funcs.get(getattr(op.attrs.get("callee"), "name", ""))
        if callee is None:
            for v in op.operands:
                for k in of(v):
                    modes[k].update("rw")
            return False
        changed = False
        for arg, v in zip(callee.args, op.operands):
            changed |= flow([arg], [v])
        returns = [x for o in callee.walk() if o.name == "tt.return" for x in o.operands]
        return flow(op.results, returns) | changed
    if op.regions:
        # structured control flow and combiners: block arguments and results may hold anything
        # the op's operands or its regions' terminators hand over
        terms = [x for r in op.regions for b in r.blocks for o in b.ops[-1:] for x in o.operands]
        sources = list(op.operands) + terms
        targets = [a for r in op.regions for b in r.blocks for a in b.args] + list(op.results)
        return flow(targets, sources)
    if op.name in ("cf.br", "cf.cond_br"):  # into the arguments of the blocks it branches to
        return flow(branch_targets.get(id(op), []), op.operands)
    if op.name in _CARRY or any(_is_memory(r.type) for r in op.results):
        if any(not _is_memory(r.type) for r in op.results):  # a pointer bitcast to an integer
            for v in op.operands:
                for k in of(v):
                    modes[k].update("rw")
        return flow(op.results, op.operands)
    return False  # any other op taking a pointer (a comparison, a print) touches no memory


def _branch_targets(module: Module) -> dict[int, list[Value]]:
    """For each cf.br / cf.cond_br: the arguments of the other blocks of its region."""
    out: dict[int, list[Value]] = {}

    def visit(region) -> None:
        later = [a for b in region.blocks[1:] for a in b.args]
        for block in region.blocks:
            for op in block.ops:
                if op.name in ("cf.br", "cf.cond_br"):
                    out[id(op)] = later
                for r in op.regions:
                    visit(r)

    for func in module.funcs.values():
        visit(func.body)
    return out
