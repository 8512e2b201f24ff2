"""Control flow as LLVM IR: scf.for / scf.if / scf.while / scf.execute_region, and the function
body itself (one block, or several joined by cf.br / cf.cond_br, as Triton emits early returns).

Loop-carried block tensors live in two buffers per value that swap roles every iteration (the
body reads one and the yielded value is written into the other), so a value is never overwritten
while the iteration that reads it runs. A loop-carried pointer (or integer) tensor that each
iteration advances by a uniform amount (`ptrs += BLOCK_K * stride`) is carried as one scalar offset
over the initial tensor instead: no buffer, and the addresses stay affine in the loop nests that
use them, so LLVM sees contiguous accesses.
"""
from __future__ import annotations

from llvmlite import ir

from sdk.ttir import DenseAttr, TensorType

from .abi import FAULT_STEP
from .table import TABLE
from .tensors import TV, Buf, Splat, const_i64
from .types import I64, ZERO32, Unsupported, elem_of, pointee, shape_of

rule = TABLE.rule


# --------------------------------------------------------------------------- function body
def emit_function_body(fx, func, params) -> None:
    blocks = func.body.blocks
    if len(blocks) == 1:
        term, _ = fx.emit_block(blocks[0], params)
        _check_return(term)
        fx.b.ret(ZERO32)
        return
    b = fx.b
    start = b.block
    llvm_blocks = {id(blk): fx.branch_new(f"bb{k}") for k, blk in enumerate(blocks)}
    by_label = {blk.label: blk for blk in blocks}
    arg_vals: dict[int, list] = {}
    for blk in blocks[1:]:  # block arguments: phis (scalars) and buffers (tensors)
        b.position_at_start(llvm_blocks[id(blk)])
        vals = []
        for a in blk.args:
            if isinstance(a.type, TensorType):
                vals.append(_alloc_at_entry(fx, a.type))
            else:
                vals.append(b.phi(elem_of(a.type).reg))
        arg_vals[id(blk)] = vals
    b.position_at_end(start)
    b.branch(llvm_blocks[id(blocks[0])])
    for k, blk in enumerate(blocks):
        bb = llvm_blocks[id(blk)]
        b.position_at_end(bb)
        fx.scopes.append({})
        term, vals = fx.emit_block(blk, params if k == 0 else arg_vals[id(blk)])
        fx.scopes.pop()
        if term is None or term.name == "tt.return":
            b.ret(ZERO32)
            continue
        if term.name == "cf.br":
            dest = by_label[term.successors[0]]
            _pass_args(fx, dest, arg_vals[id(dest)], vals)
            b.branch(llvm_blocks[id(dest)])
        elif term.name == "cf.cond_br":
            t_blk, f_blk = by_label[term.successors[0]], by_label[term.successors[1]]
            nt = len(t_blk.args)
            cond, t_args, f_args = vals[0], vals[1:1 + nt], vals[1 + nt:]
            t_bb, f_bb = fx.branch_new("br_true"), fx.branch_new("br_false")
            b.cbranch(cond, t_bb, f_bb)
            for side, dest, args in ((t_bb, t_blk, t_args), (f_bb, f_blk, f_args)):
                b.position_at_end(side)
                _pass_args(fx, dest, arg_vals.get(id(dest), []), args)
                b.branch(llvm_blocks[id(dest)])
        else:
            raise Unsupported(f"a function block ending in {term.name}")


def _check_return(term) -> None:
    if term is not None and term.name != "tt.return":
        raise Unsupported(f"a function body ending in {term.name}")
    if term is not None and term.operands:
        raise Unsupported("a kernel that returns values")


def _alloc_at_entry(fx, t) -> Buf:
    return fx.alloc(shape_of(t), elem_of(t))


def _pass_args(fx, dest, slots: list, vals: list) -> None:
    """Values for a successor's block arguments: phi incomings, buffer copies."""
    for slot, v in zip(slots, vals):
        if isinstance(slot, Buf):
            fx.materialize(_as_tv(v, slot), into=slot)
        else:
            slot.add_incoming(v, fx.b.block)


def _as_tv(v, like: TV) -> TV:
    return v if isinstance(v, TV) else Splat(v, like.shape, like.elem)


# --------------------------------------------------------------------------------- scf.for
def _defining_op(block, v):
    for op in block.ops:
        if any(r is v for r in op.results):
            return op
    return None


def _uniform_step(fx, body, k: int, arg, yielded):
    """When slot k's yielded value is `addptr(arg, splat)` / `addi(arg, splat)`: that op."""
    if not isinstance(arg.type, TensorType):
        return None
    op = _defining_op(body, yielded)
    if op is None or op.name not in ("tt.addptr", "arith.addi") or op.operands[0] is not arg:
        return None
    inc = op.operands[1]
    src = _defining_op(body, inc) or fx.defs.get(id(inc))
    if src is None:
        return None
    if src.name == "tt.splat" or (src.name == "arith.constant" and isinstance(src.attrs.get("value"), DenseAttr)
                                  and src.attrs["value"].splat):
        return op
    return None


class _Offset(TV):
    """A loop-carried tensor as `init (+) splat(offset)`: addptr for pointers, addi for integers.
    `ahead`: what one iteration adds to the offset, when it is known before the loop (a constant,
    a value defined outside it): then a read through the pointer can ask for the next
    iteration's memory early (ops_memory.prefetch_next)."""

    def __init__(self, init: TV, off: ir.Value, is_ptr: bool, mem_type, ahead: ir.Value | None = None):
        self.init, self.off, self.is_ptr, self.mem_type = init, off, is_ptr, mem_type
        self.shape, self.elem, self.cost = init.shape, init.elem, init.cost + 1
        self.ahead = ahead

    def step(self, d):
        return self.init.step(d)

    def from_indices(self):
        return self.init.from_indices()

    def _at(self, fx, idx):
        base = self.init.at(fx, idx)
        if self.is_ptr:
            return fx.b.gep(base, [self.off], source_etype=self.mem_type)
        return fx.b.add(base, self.off)


def _widen(fx, v, t):
    if v.type == t:
        return v
    return fx.b.sext(v, t) if v.type.width < t.width else fx.b.trunc(v, t)


@rule("scf.for")
def _for(fx, op, lb, ub, step, *init):
    b = fx.b
    body = op.regions[0].blocks[0]
    term = body.ops[-1]
    unsigned = bool(op.attrs.get("unsignedCmp"))
    ext = b.zext if unsigned else b.sext
    lb64, ub64, st64 = (v if v.type == I64 else ext(v, I64) for v in (lb, ub, step))
    if not (isinstance(step, ir.Constant) and int(step.constant) > 0):
        fx.fail_if(b.icmp_signed("<=", st64, const_i64(0)), FAULT_STEP, op)
    slots = []  # per carried value: ("scalar"), ("offset", op, init), ("buffer", A, B)
    for k, (v, arg) in enumerate(zip(init, body.args[1:])):
        if not isinstance(arg.type, TensorType):
            slots.append(("scalar",))
            continue
        step_op = _uniform_step(fx, body, k, arg, term.operands[k])
        if step_op is not None:
            slots.append(("offset", step_op, _as_tv(v, _like(arg))))
            continue
        a_buf, b_buf = fx.alloc(shape_of(arg.type), elem_of(arg.type)), fx.alloc(shape_of(arg.type), elem_of(arg.type))
        fx.materialize(_as_tv(v, a_buf), into=a_buf)
        slots.append(("buffer", a_buf, b_buf))
    pre = b.block
    head = fx.branch_new("for")
    loop_body = fx.branch_new("for_body")
    done = fx.branch_new("for_end")
    b.branch(head)
    b.position_at_end(head)
    iv = b.phi(I64, "iv")
    iv.add_incoming(lb64, pre)
    phis = []
    for slot, v, arg in zip(slots, init, body.args[1:]):
        if slot[0] == "scalar":
            p = b.phi(v.type)
            p.add_incoming(v, pre)
            phis.append(p)
        elif slot[0] == "offset":
            is_ptr = elem_of(arg.type).is_ptr
            t = I64 if is_ptr else elem_of(arg.type).reg
            p = b.phi(t)
            p.add_incoming(ir.Constant(t, 0), pre)
            phis.append(p)
        else:
            cur, oth = b.phi(slot[1].ptr.type), b.phi(slot[1].ptr.type)
            cur.add_incoming(slot[1].ptr, pre)
            oth.add_incoming(slot[2].ptr, pre)
            phis.append((cur, oth))
    cond = b.icmp_unsigned("<", iv, ub64) if unsigned else b.icmp_signed("<", iv, ub64)
    b.cbranch(cond, loop_body, done)
    b.position_at_end(loop_body)
    args = [b.trunc(iv, lb.type) if lb.type != I64 else iv]
    for slot, p, arg in zip(slots, phis, body.args[1:]):
        args.append(_carried_value(fx, slot, p, arg, in_body=True))
    for slot, p, arg, y in zip(slots, phis, body.args[1:], term.operands):
        producer = _defining_op(body, y)
        if slot[0] == "buffer" and producer is not None and producer.name == "tt.dot" and fx.uses.get(id(y)) == 1:
            fx.destinations[id(y)] = Buf(p[1], shape_of(arg.type), elem_of(arg.type))  # written in place
    fx.scopes.append({})
    try:
        _, yields = fx.emit_block(body, args)
    finally:
        fx.scopes.pop()
    nexts = []
    for slot, p, y, a in zip(slots, phis, yields, args[1:]):
        if slot[0] == "scalar":
            nexts.append(y)
        elif slot[0] == "offset":
            inc = fx.get(slot[1].operands[1])
            inc = inc.value if isinstance(inc, Splat) else None
            if inc is None:
                raise Unsupported("internal: a uniform loop step that is not a splat")
            nexts.append(b.add(p, _widen(fx, inc, p.type)))
        else:
            cur, oth = p
            if y is a:  # yielded unchanged: the buffers keep their roles
                nexts.append((cur, oth))
            else:
                fx.materialize(_as_tv(y, a), into=Buf(oth, a.shape, a.elem))
                nexts.append((oth, cur))
    nxt = b.add(iv, st64)
    iv.add_incoming(nxt, b.block)
    _close_loop(b, phis, nexts, head, done)
    return [_carried_value(fx, slot, p, arg) for slot, p, arg in zip(slots, phis, body.args[1:])]


def _close_loop(b, phis, nexts, head, done) -> None:
    """The back edge from the builder's block (the latch): each carried phi (a buffer pair's two
    phis, or one) takes its next value from it; then on to the exit block."""
    latch = b.block
    for p, n in zip(phis, nexts):
        if isinstance(p, tuple):
            p[0].add_incoming(n[0], latch)
            p[1].add_incoming(n[1], latch)
        else:
            p.add_incoming(n, latch)
    b.branch(head)
    b.position_at_end(done)


def _like(arg):
    return Splat(None, shape_of(arg.type), elem_of(arg.type))


def _carried_value(fx, slot, p, arg, in_body: bool = False):
    """A carried value as the loop body (`in_body`) or the code after the loop sees it."""
    if slot[0] == "scalar":
        return p
    if slot[0] == "offset":
        e = elem_of(arg.type)
        ahead = None
        if in_body:  # the step, when it is bound before the body is emitted (defined outside the loop)
            inc = fx.vals.get(id(slot[1].operands[1]))
            if isinstance(inc, Splat) and inc.value is not None:
                ahead = _widen(fx, inc.value, p.type)
        return _Offset(slot[2], p, e.is_ptr, pointee(arg.type).mem if e.is_ptr else None, ahead)
    return Buf(p[0], shape_of(arg.type), elem_of(arg.type))


# ---------------------------------------------------------------------------------- scf.if
@rule("scf.if")
def _if(fx, op, cond):
    b = fx.b
    then_r = op.regions[0]
    else_r = op.regions[1] if len(op.regions) > 1 and op.regions[1].blocks and op.regions[1].blocks[0].ops else None
    outs = [fx.alloc(shape_of(r.type), elem_of(r.type)) if isinstance(r.type, TensorType) else None
            for r in op.results]
    t_bb, f_bb, join = fx.branch_new("then"), fx.branch_new("else"), fx.branch_new("endif")
    b.cbranch(cond, t_bb, f_bb)
    incoming = []
    for bb, region in ((t_bb, then_r), (f_bb, else_r)):
        b.position_at_end(bb)
        vals = []
        if region is not None:
            fx.scopes.append({})
            try:
                _, vals = fx.emit_region(region, [])
            finally:
                fx.scopes.pop()
        elif op.results:
            raise Unsupported("scf.if with results and no else region")
        for k, (o, v) in enumerate(zip(outs, vals)):
            if o is not None:
                fx.materialize(_as_tv(v, o), into=o)
        incoming.append((b.block, vals))
        b.branch(join)
    b.position_at_end(join)
    results = []
    for k, (r, o) in enumerate(zip(op.results, outs)):
        if o is not None:
            results.append(o)
            continue
        phi = b.phi(elem_of(r.type).reg)
        for blk, vals in incoming:
            phi.add_incoming(vals[k], blk)
        results.append(phi)
    return results if len(results) != 1 else results[0]


# ------------------------------------------------------------------------------- scf.while
@rule("scf.while")
def _while(fx, op, *init):
    b = fx.b
    before, after = op.regions[0].blocks[0], op.regions[1].blocks[0]
    slots = []
    for v, arg in zip(init, before.args):
        if isinstance(arg.type, TensorType):
            a_buf, b_buf = (fx.alloc(shape_of(arg.type), elem_of(arg.type)) for _ in range(2))
            fx.materialize(_as_tv(v, a_buf), into=a_buf)
            slots.append((a_buf, b_buf))
        else:
            slots.append(None)
    pre = b.block
    head, after_bb, done = fx.branch_new("while"), fx.branch_new("do"), fx.branch_new("endwhile")
    b.branch(head)
    b.position_at_end(head)
    phis, args = [], []
    for slot, v, arg in zip(slots, init, before.args):
        if slot is None:
            p = b.phi(v.type)
            p.add_incoming(v, pre)
            phis.append(p)
            args.append(p)
        else:
            cur, oth = b.phi(slot[0].ptr.type), b.phi(slot[0].ptr.type)
            cur.add_incoming(slot[0].ptr, pre)
            oth.add_incoming(slot[1].ptr, pre)
            phis.append((cur, oth))
            args.append(Buf(cur, shape_of(arg.type), elem_of(arg.type)))
    fx.scopes.append({})
    try:
        term, vals = fx.emit_block(before, args)
    finally:
        fx.scopes.pop()
    if term is None or term.name != "scf.condition":
        raise Unsupported("scf.while whose first region does not end in scf.condition")
    cond, fwd = vals[0], vals[1:]
    b.cbranch(cond, after_bb, done)
    b.position_at_end(after_bb)
    fx.scopes.append({})
    try:
        _, yields = fx.emit_block(after, fwd)
    finally:
        fx.scopes.pop()
    nexts = []
    for slot, p, y, a in zip(slots, phis, yields, args):
        if slot is None:
            nexts.append(y)
        elif y is a:
            nexts.append(p)
        else:
            cur, oth = p
            fx.materialize(_as_tv(y, a), into=Buf(oth, a.shape, a.elem))
            nexts.append((oth, cur))
    _close_loop(b, phis, nexts, head, done)
    return fwd if len(fwd) != 1 else fwd[0]


@rule("scf.execute_region")
def _exec_region(fx, op):
    _, vals = fx.emit_region(op.regions[0], [])
    return vals if len(vals) != 1 else vals[0]


# terminators are read by the constructs above; rules exist so that the table names them
for _name in ("tt.return", "scf.yield", "scf.condition", "tt.reduce.return", "tt.scan.return", "cf.br",
              "cf.cond_br"):
    TABLE.register(_name, lambda fx, op, *vals: list(vals))
