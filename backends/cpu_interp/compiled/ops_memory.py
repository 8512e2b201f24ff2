"""Pointers and memory as LLVM IR: addptr, loads and stores (masked, bounds-checked), atomics.

A load or store of a block is one loop nest: per element its address and mask (lazy values,
fused into the loop), then the access where the lane is live. The bounds check, on by default,
is the interpreter's (memory.py) and comes first, as there: every live lane must lie inside a
tensor argument its pointer derives from (provenance.py), else the program returns a fault record
from which the launcher writes the interpreter's message (tensor, element range, program, source
line), and no lane of the access is read or written. A raw pointer (made from an integer, or
loaded from a pointer table) is checked lane by lane against the process's memory map instead.

The check is a loop of its own ahead of the access (`Check.prepass`): address arithmetic and one
carried flag, whether a live lane strayed (an or-reduction LLVM vectorises); only a program that
faults walks the lanes again for the lowest and highest live address, from which the message
names the stray one. The access loop after it then needs no per-lane condition beyond the mask,
so its reads and writes stay plain or masked vector accesses.
"""
from __future__ import annotations

from llvmlite import ir

from .abi import FAULT_OOB, FAULT_RAW
from .numerics import from_mem, to_mem
from .ops_arith import apply, elementwise, res
from .table import TABLE
from .tensors import TV, ZERO, Lazy, Splat, Trans
from .types import I1, I8, I64, PTR, Unsupported, elem_of, pointee, shape_of

I64_MAX = ir.Constant(I64, (1 << 63) - 1)
I64_MIN = ir.Constant(I64, -(1 << 63))


# ----------------------------------------------------------------------------- pointers
@TABLE.rule("tt.addptr")
def _addptr(fx, op, p, off):
    e = pointee(op.result.type)

    def emit(fx, p_, o_):
        o64 = o_ if o_.type == I64 else fx.b.sext(o_, I64)
        return fx.b.gep(p_, [o64], source_etype=e.mem)
    return apply(fx, op, emit, [p, off])


@elementwise("tt.int_to_ptr")
def _int_to_ptr(fx, op, x):
    return fx.b.inttoptr(x, PTR)


@elementwise("tt.ptr_to_int")
def _ptr_to_int(fx, op, x):
    return fx.b.ptrtoint(x, res(op).reg)


# ------------------------------------------------------------------------------ checks
def origins(fx, op) -> list[int]:
    """Entry parameters an access's pointer may derive from ([] for a raw pointer: made from an
    integer or loaded from memory)."""
    o = fx.kc.origins
    return [] if op in o.raw else sorted(o.args.get(op, ()))


class Check:
    """Per-element bounds check of one access, made by `prepass` before the access's loop:
    `lane(addr, live)` gives the lane's condition (live and inside a tensor the pointer may
    address) and whether a live lane strayed; `finish` faults when one did."""

    def __init__(self, fx, op, width: int):
        self.fx, self.op, self.width = fx, op, width
        self.ks = origins(fx, op)
        self.raw = fx.bounds_check and not self.ks  # checked by `prepass` instead
        self.on = fx.bounds_check and not self.raw

    def prepass(self, shape, ptr_tv: TV, mask_tv: TV | None, write: bool) -> None:
        """The access's check, before it happens: a pointer derived from tensor arguments by
        `_first`; a raw pointer's lanes as the interpreter checks them: lanes
        inside a tensor of the launch (arguments and `extra_tensors`) are fine; every other live
        lane must lie in memory this process has mapped (the launcher's callback reads the OS's
        map), unless tensors were registered with `extra_tensors`, which makes them faults. Each
        lane is checked on its own (lanes may point into allocations far apart, with unmapped
        memory between them); the last two accessible runs of mappings the callback named are
        carried along, so that it is asked once per run a program's lanes reach, not per lane.
        The lowest address that fails is the one the fault names. Called before every access's
        loop: `finish` walks the same lanes again when the access faults."""
        self.shape, self.ptr_tv, self.mask_tv = shape, ptr_tv, mask_tv
        if self.on:
            self._first()
            return
        if not self.raw:
            return
        fx, b = self.fx, self.fx.b
        count, regions = fx.raw_regions()
        width = ir.Constant(I64, self.width)

        def holds(lo, hi, a, end):
            return b.and_(b.icmp_unsigned(">=", a, lo), b.icmp_unsigned("<=", end, hi))

        def body(idx, accs):
            bad, lo0, hi0, lo1, hi1 = accs
            a = b.ptrtoint(ptr_tv.at(fx, idx), I64)
            end = b.add(a, width)
            stray = b.xor(_inside_any(fx, a, self.width, count, regions), ir.Constant(I1, 1))
            if mask_tv is not None:
                stray = b.and_(stray, mask_tv.at(fx, idx))
            known = b.or_(holds(lo0, hi0, a, end), holds(lo1, hi1, a, end))
            pre = b.block
            ask, joined = fx.branch_new("raw_lane"), fx.branch_new("raw_lane_done")
            b.cbranch(b.and_(stray, b.xor(known, ir.Constant(I1, 1))), ask, joined)
            b.position_at_end(ask)
            ok, start, stop = fx.raw_region(a, end, write)
            asked = [_smin(b, bad, b.select(ok, I64_MAX, a)), b.select(ok, start, lo0), b.select(ok, stop, hi0),
                     b.select(ok, lo0, lo1), b.select(ok, hi0, hi1)]
            ask_end = b.block
            b.branch(joined)
            b.position_at_end(joined)
            out = []
            for before, after in zip(accs, asked):
                phi = b.phi(I64)
                phi.add_incoming(before, pre)
                phi.add_incoming(after, ask_end)
                out.append(phi)
            return out
        zero = ir.Constant(I64, 0)
        bad = fx.for_each(shape, body, [I64_MAX, zero, zero, zero, zero])[0]
        fx.fail_if(b.icmp_signed("!=", bad, I64_MAX), FAULT_RAW, self.op,
                   lambda: [bad, b.add(bad, width), ir.Constant(I64, int(write))])

    def _first(self) -> None:
        """Every live lane checked before any is accessed (a loop of address arithmetic alone), the
        program faulting when one strayed; the access loop that follows carries no check."""
        fx, ptr_tv, mask_tv = self.fx, self.ptr_tv, self.mask_tv

        def body(idx, accs):
            live = None if mask_tv is None else mask_tv.at(fx, idx)
            return self.lane(ptr_tv.at(fx, idx), live, accs)[1]
        self.finish(fx.for_each(self.shape, body, self.init()))
        self.on = False

    def init(self) -> list:
        return [ir.Constant(I1, 0)] if self.on else []

    def _limits(self, k: int):
        b = self.fx.b
        lo, hi = self.fx.arg_range(k)
        return lo, b.sub(b.sub(hi, lo), ir.Constant(I64, self.width))

    def lane(self, p: ir.Value, live: ir.Value | None, accs: list) -> tuple[ir.Value | None, list]:
        """(whether the lane accesses memory, the loop's new accs: whether a live lane strayed)."""
        if not self.on:
            return live, accs
        b = self.fx.b
        a = b.ptrtoint(p, I64)
        ok = None
        for k in self.ks:
            lo, lim = self._limits(k)
            inside = b.and_(b.icmp_unsigned("<=", b.sub(a, lo), lim), b.icmp_signed(">=", lim, ir.Constant(I64, 0)))
            ok = inside if ok is None else b.or_(ok, inside)
        stray = b.xor(ok, ir.Constant(I1, 1))
        new = [b.or_(accs[0], stray if live is None else b.and_(stray, live))]
        return (ok if live is None else b.and_(live, ok)), new

    def finish(self, accs: list) -> None:
        """After the loop: fault when a live lane strayed. Only then are the lowest and highest
        live address, which the message names, worked out (a second walk over the lanes that
        `prepass` was given), so the loop itself carries one flag."""
        if not self.on:
            return
        fx, b = self.fx, self.fx.b
        shape, ptr_tv, mask_tv = self.shape, self.ptr_tv, self.mask_tv

        def span():
            def body(idx, accs):
                a = b.ptrtoint(ptr_tv.at(fx, idx), I64)
                live = None if mask_tv is None else mask_tv.at(fx, idx)
                lo, hi = accs
                return [_smin(b, lo, a if live is None else b.select(live, a, I64_MAX)),
                        _smax(b, hi, a if live is None else b.select(live, a, I64_MIN))]
            return fx.for_each(shape, body, [I64_MAX, I64_MIN])
        fx.fail_if(accs[0], FAULT_OOB, self.op, span)


def _inside_any(fx, a, width: int, count, regions) -> ir.Value:
    """Whether [a, a + width) lies in one of `count` regions ([first byte, end) pairs of i64)."""
    b = fx.b
    pre = b.block
    head, body, done = fx.branch_new("regions"), fx.branch_new("region"), fx.branch_new("regions_end")
    b.branch(head)
    b.position_at_end(head)
    k = b.phi(I64)
    found = b.phi(I1)
    k.add_incoming(ir.Constant(I64, 0), pre)
    found.add_incoming(ir.Constant(I1, 0), pre)
    b.cbranch(b.and_(b.icmp_signed("<", k, count), b.xor(found, ir.Constant(I1, 1))), body, done)
    b.position_at_end(body)
    lo = b.load(b.gep(regions, [b.mul(k, ir.Constant(I64, 2))], source_etype=I64), typ=I64)
    hi = b.load(b.gep(regions, [b.add(b.mul(k, ir.Constant(I64, 2)), ir.Constant(I64, 1))], source_etype=I64),
                typ=I64)
    hit = b.and_(b.icmp_signed(">=", a, lo), b.icmp_signed("<=", b.add(a, ir.Constant(I64, width)), hi))
    k.add_incoming(b.add(k, ir.Constant(I64, 1)), body)
    found.add_incoming(hit, body)
    b.branch(head)
    b.position_at_end(done)
    return found


def _smin(b, x, y):
    return b.select(b.icmp_signed("<", x, y), x, y)


def _smax(b, x, y):
    return b.select(b.icmp_signed(">", x, y), x, y)


def _as_tv(v, shape, e):
    return v if isinstance(v, TV) else Splat(v, shape, e)


def _conditional(fx, cond: ir.Value | None, emit, fallback_type: ir.Type):
    """emit() where `cond` holds (a diamond LLVM's vectoriser turns into masked accesses);
    returns (value or None, whether it ran)."""
    b = fx.b
    if cond is None:
        return emit()
    pre = b.block
    then = fx.branch_new("access")
    join = fx.branch_new("joined")
    b.cbranch(cond, then, join)
    b.position_at_end(then)
    v = emit()
    then_end = b.block
    b.branch(join)
    b.position_at_end(join)
    if v is None:
        return None
    phi = b.phi(v.type)
    phi.add_incoming(v, then_end)
    phi.add_incoming(ir.Constant(v.type, None), pre)
    return phi


def _zeros(fx) -> ir.Value:
    """A readable word of zeros (a constant of the module), the address a gather's masked-off
    lanes read instead of theirs."""
    g = fx.kc.ir.globals.get("day0_zeros")
    if g is None:
        ty = ir.ArrayType(I8, 16)
        g = ir.GlobalVariable(fx.kc.ir, ty, name="day0_zeros")
        g.global_constant = True
        g.linkage = "internal"
        g.initializer = ir.Constant(ty, None)
        g.align = 16
    return g


# ------------------------------------------------------------------------------- loads
def access_order(ptr_tv: TV, shape, width: int) -> list[int] | None:
    """The loop order for reading a block (dimensions, outermost first): row-major (None) unless
    its last dimension is not contiguous in memory and another one is (a transposed tile, such as
    a weight read along K): that one then goes innermost, so that the vectoriser sees
    consecutive addresses. Reads only: the order of a block's stores decides which of two lanes
    writing one address wins."""
    n = len(shape)
    if n < 2 or ptr_tv.step(n - 1) == width:
        return None
    for d in reversed(range(n - 1)):
        if shape[d] > 1 and ptr_tv.step(d) == width:
            return [x for x in range(n) if x != d] + [d]
    return None


def prefetch_next(fx, ptr_tv: TV, shape, width: int, order):
    """For a block read through a loop-carried pointer that every iteration advances by the same
    amount (control.py's offset slots), along a contiguous innermost dimension: a hook that asks
    for the next iteration's cache lines of one row (one prefetch per 64 bytes), for the read's
    loop nest to call before each row, so that the lines arrive while this iteration goes on (a
    tile of weight rows is more streams than the hardware prefetcher follows). None otherwise.
    Prefetching never faults and changes no result."""
    ahead = getattr(ptr_tv, "ahead", None)
    if ahead is None or not shape or not getattr(ptr_tv, "is_ptr", False):
        return None
    inner = (order or list(range(len(shape))))[-1]
    if ptr_tv.step(inner) != width:
        return None
    b = fx.b
    per_line = max(1, 64 // width)
    i32 = ir.IntType(32)
    fn = fx.kc.intrinsic("llvm.prefetch.p0", ir.VoidType(), [PTR, i32, i32, i32])

    def row(idx) -> None:
        for k in range(0, shape[inner], per_line):
            at = list(idx)
            at[inner] = ir.Constant(I64, k)
            p = b.gep(ptr_tv.at(fx, at), [ahead], source_etype=ptr_tv.mem_type)
            b.call(fn, [p, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
    return row


def _rows(fx, shape, body, accs, order, before_row):
    """fx.for_each(shape, body, accs, order), calling before_row(idx) ahead of each innermost loop."""
    if before_row is None:
        return fx.for_each(shape, body, accs, order)
    inner = (order or list(range(len(shape))))[-1]
    outer = list(shape)
    outer[inner] = 1

    def row(idx, accs):
        before_row(idx)
        return fx.loop(shape[inner], lambda i, a: body(idx[:inner] + [i] + idx[inner + 1:], a), accs)
    return fx.for_each(outer, row, accs, order)


def split_mask(mask: TV, inner: int) -> tuple[TV | None, TV | None]:
    """`mask` as (the conjunction of its factors that are the same along dimension `inner`, the
    conjunction of the rest); None for an empty conjunction. A mask of rows in range and columns
    in range, (rows < M)[:, None] & (cols < N)[None, :], splits into the two."""
    if mask.step(inner) == 0:
        return mask, None
    if isinstance(mask, Lazy) and mask.op is not None and mask.op.name == "arith.andi" and len(mask.operands) == 2:
        (ra, la), (rb, lb) = (split_mask(o, inner) for o in mask.operands)
        return _conjoin(ra, rb, mask), _conjoin(la, lb, mask)
    return None, mask


def _conjoin(a: TV | None, b: TV | None, like: TV) -> TV | None:
    if a is None or b is None:
        return a if b is None else b
    return Lazy(lambda fx, x, y: fx.b.and_(x, y), [a, b], like.shape, like.elem, op=like.op)


def _rows_by_mask(fx, shape, inner: int, order, mask_tv: TV, before_row, element) -> None:
    """A masked read whose mask is the same along the innermost loop (rows in or out of range):
    the mask is tested once per row, and the row is read by a loop with no condition in it, or
    filled; element(idx, live) emits one element knowing its row's mask. A loop with no
    condition is one LLVM's vectoriser takes, and one out of which it hoists what does not
    change along the row (such as the row's pointer, read from a buffer)."""
    b = fx.b
    outer = list(shape)
    outer[inner] = 1

    def row(idx, accs):
        at = list(idx)
        at[inner] = ZERO
        live = mask_tv.at(fx, at)
        if before_row is not None:
            before_row(idx)
        blocks = {True: fx.branch_new("row_read"), False: fx.branch_new("row_masked")}
        join = fx.branch_new("row_done")
        b.cbranch(live, blocks[True], blocks[False])
        for taken, block in blocks.items():
            b.position_at_end(block)
            fx.scopes.append({})  # what the branch computes stays in it
            try:
                fx.loop(shape[inner], lambda i, a, t=taken: (element(idx[:inner] + [i] + idx[inner + 1:], t), a)[1])
            finally:
                fx.scopes.pop()
            b.branch(join)
        b.position_at_end(join)
        return accs
    fx.for_each(outer, row, [], order)


@TABLE.rule("tt.load")
def _load(fx, op, ptr, mask=None, other=None):
    e = pointee(op.operands[0].type)
    t = op.result.type
    shape = shape_of(t)
    check = Check(fx, op, e.width)
    ptr_tv = _as_tv(ptr, shape, e)
    order = access_order(ptr_tv, shape, e.width)
    out = fx.alloc(shape, e) if shape else None
    if order is not None:  # the buffer laid out in the order memory is read: a transposed view of it
        out = fx.alloc([shape[d] for d in order], e)
        result = Trans(out, [order.index(d) for d in range(len(shape))])
    mask_tv = None if mask is None else _as_tv(mask, shape, elem_of(op.operands[1].type))
    other_tv = None if other is None else _as_tv(other, shape, e)
    check.prepass(shape, ptr_tv, mask_tv, write=False)
    scalar_result = []
    inner = (order or list(range(len(shape))))[-1] if shape else None
    # lanes not at consecutive addresses along the innermost loop: a gather, not a masked load
    gathered = bool(shape) and ptr_tv.step(inner) != e.width

    def body(idx, accs, row_live=None):
        """One element; `row_live` True or False: its row's mask, known (_rows_by_mask)."""
        b = fx.b
        fill = other_tv.at(fx, idx) if other_tv is not None else ir.Constant(e.reg, None)
        if row_live is False:  # a row masked off: the fill, nothing read
            v = fill
        else:
            p = ptr_tv.at(fx, idx)
            lanes = lane_tv if row_live else mask_tv
            go, accs = check.lane(p, None if lanes is None else lanes.at(fx, idx), accs)
            if go is not None and gathered:  # branch-free: a lane that may not read reads a zero word
                raw = b.load(b.select(go, p, _zeros(fx)), typ=e.mem)
            else:
                raw = _conditional(fx, go, lambda: b.load(p, typ=e.mem), e.mem)
            v = from_mem(fx, raw, e)
            if go is not None:
                v = b.select(go, v, fill)
        if out is not None:
            out.put(fx, idx if order is None else [idx[d] for d in order], v)
        else:
            scalar_result.append(v)
        return accs

    prefetch = prefetch_next(fx, ptr_tv, shape, e.width, order)
    row_tv = lane_tv = None
    if shape and mask_tv is not None and not gathered and shape[inner] > 1:
        # (prepass has checked every lane already, so a row's loop needs no check of its own)
        row_tv, lane_tv = split_mask(mask_tv, inner)
    if row_tv is not None:
        _rows_by_mask(fx, shape, inner, order, row_tv, prefetch, lambda idx, live: body(idx, [], live))
        accs = []
    else:
        accs = _rows(fx, shape, body, check.init(), order, prefetch)
    check.finish(accs)
    if order is not None:
        return result
    return out if out is not None else scalar_result[0]


# ------------------------------------------------------------------------------ stores
@TABLE.rule("tt.store")
def _store(fx, op, ptr, val, mask=None):
    e = pointee(op.operands[0].type)
    shape = shape_of(op.operands[0].type)
    check = Check(fx, op, e.width)
    ptr_tv = _as_tv(ptr, shape, e)
    val_tv = _as_tv(val, shape, e)
    mask_tv = None if mask is None else _as_tv(mask, shape, elem_of(op.operands[2].type))
    check.prepass(shape, ptr_tv, mask_tv, write=True)

    def body(idx, accs):
        p = ptr_tv.at(fx, idx)
        live = None if mask_tv is None else mask_tv.at(fx, idx)
        v = val_tv.at(fx, idx)
        go, accs = check.lane(p, live, accs)

        def access():
            fx.b.store(to_mem(fx, v, e), p)
        _conditional(fx, go, access, e.mem)
        return accs

    accs = fx.for_each(shape, body, check.init())
    check.finish(accs)


# ----------------------------------------------------------------------------- atomics
_ORDER = {"relaxed": "monotonic", "acquire": "acquire", "release": "release", "acq_rel": "acq_rel",
          "seq_cst": "seq_cst", "1": "monotonic", "2": "acquire", "3": "release", "4": "acq_rel"}
_NATIVE_INT = {"add": "add", "max": "max", "min": "min", "umax": "umax", "umin": "umin", "and": "and",
               "or": "or", "xor": "xor", "exch": "xchg", "xchg": "xchg"}


def _ordering(op) -> str:
    return _ORDER.get(str(op.attrs.get("sem", "acq_rel")).lower(), "acq_rel")


def _int_of(e) -> ir.IntType:
    return ir.IntType(e.width * 8)


def _combine(fx, kind: str, cur, val, e):
    """The new value of an atomic from the current one (compute values of `e`)."""
    b = fx.b
    if kind in ("add", "fadd"):
        from .numerics import finish
        return finish(fx, b.fadd(cur, val), e.name) if e.is_float else b.add(cur, val)
    if kind == "exch" or kind == "xchg":
        return val
    if kind in ("max", "min", "umax", "umin"):
        if e.is_float:
            from .numerics import call
            return call(fx, "llvm.maximum" if kind == "max" else "llvm.minimum", cur, val)
        rel = {"max": ">", "min": "<", "umax": ">", "umin": "<"}[kind]
        cmp = b.icmp_unsigned(rel, val, cur) if kind[0] == "u" else b.icmp_signed(rel, val, cur)
        return b.select(cmp, val, cur)
    if kind in ("and", "or", "xor"):
        return {"and": b.and_, "or": b.or_, "xor": b.xor}[kind](cur, val)
    raise Unsupported(f"atomic kind {kind}")


def _atomic_element(fx, op, kind: str, p, val, cmp, e, ordering: str) -> ir.Value:
    """One element's atomic; returns the old value (compute value)."""
    b = fx.b
    if kind != "cas" and e.is_int and e.name != "i1" and kind in _NATIVE_INT:
        return b.atomic_rmw(_NATIVE_INT[kind], p, val, ordering)
    if kind in ("add", "fadd") and e.name in ("f32", "f64"):
        return b.atomic_rmw("fadd", p, val, ordering)
    # compare-and-swap on the bits, with the interpreter's combine and rounding
    it = _int_of(e)
    if kind == "cas":
        want = b.bitcast(to_mem(fx, cmp, e), it) if e.mem != it else to_mem(fx, cmp, e)
        new = b.bitcast(to_mem(fx, val, e), it) if e.mem != it else to_mem(fx, val, e)
        pair = b.cmpxchg(p, want, new, ordering, "monotonic")
        old = b.extract_value(pair, 0)
        return from_mem(fx, b.bitcast(old, e.mem) if e.mem != it else old, e)
    start = b.load_atomic(p, "monotonic", e.width, typ=it)
    pre = b.block
    head = fx.branch_new("cas_retry")
    done = fx.branch_new("cas_done")
    b.branch(head)
    b.position_at_end(head)
    cur_bits = b.phi(it)
    cur_bits.add_incoming(start, pre)
    cur = from_mem(fx, b.bitcast(cur_bits, e.mem) if e.mem != it else cur_bits, e)
    new = to_mem(fx, _combine(fx, kind, cur, val, e), e)
    new_bits = b.bitcast(new, it) if e.mem != it else new
    pair = b.cmpxchg(p, cur_bits, new_bits, ordering, "monotonic")
    seen, ok = b.extract_value(pair, 0), b.extract_value(pair, 1)
    cur_bits.add_incoming(seen, b.block)
    b.cbranch(ok, done, head)
    b.position_at_end(done)
    return cur


def _atomic(fx, op, kind: str, ptr, val, mask, cmp=None):
    e = pointee(op.operands[0].type)
    if e.is_ptr or e.name == "i1":
        raise Unsupported(f"{op.name} on {e.name}")
    shape = shape_of(op.results[0].type)
    check = Check(fx, op, e.width)
    ordering = _ordering(op)
    out = fx.alloc(shape, e) if shape else None
    ptr_tv = _as_tv(ptr, shape, e)
    val_tv = _as_tv(val, shape, e)
    cmp_tv = None if cmp is None else _as_tv(cmp, shape, e)
    mask_tv = None if mask is None else _as_tv(mask, shape, elem_of(op.operands[2].type))
    check.prepass(shape, ptr_tv, mask_tv, write=True)
    scalar = []

    def body(idx, accs):
        b = fx.b
        p = ptr_tv.at(fx, idx)
        live = None if mask_tv is None else mask_tv.at(fx, idx)
        v = val_tv.at(fx, idx)
        c = None if cmp_tv is None else cmp_tv.at(fx, idx)
        go, accs = check.lane(p, live, accs)
        old = _conditional(fx, go, lambda: _atomic_element(fx, op, kind, p, v, c, e, ordering), e.reg)
        if go is not None:
            old = b.select(go, old, ir.Constant(e.reg, None))
        if out is not None:
            out.put(fx, idx, old)
        else:
            scalar.append(old)
        return accs

    accs = fx.for_each(shape, body, check.init())
    check.finish(accs)
    return out if out is not None else scalar[0]


_RMW = {"add": "add", "fadd": "fadd", "max": "max", "min": "min", "umax": "umax", "umin": "umin",
        "and": "and", "or": "or", "xor": "xor", "exch": "exch", "xchg": "exch"}


@TABLE.rule("tt.atomic_rmw")
def _atomic_rmw(fx, op, ptr, val, mask=None):
    kind = str(op.attrs.get("atomic_rmw_op") or op.attrs.get("keywords", ["add"])[0]).lower()
    if kind not in _RMW:
        raise Unsupported(f"tt.atomic_rmw {kind}")
    return _atomic(fx, op, _RMW[kind], ptr, val, mask)


#: read-modify-writes whose final memory is the same in any order (on integers: exact; max and
#: min of floats too), as long as no program reads the old value back
_COMMUTING = frozenset({"add", "max", "min", "umax", "umin", "and", "or", "xor"})


def program_order(module) -> str:
    """Why `module`'s programs must run one after another in program order, as the interpreter
    runs them ("" when they need not): an atomic whose outcome depends on the order programs
    apply it (compare-and-swap, exchange, float addition, or any atomic whose old value is
    used), which on many threads would differ from the interpreter's run to run."""
    used = {id(v) for op in module.walk() for v in op.operands}
    for op in module.walk():
        if op.name not in ("tt.atomic_rmw", "tt.atomic_cas"):
            continue
        e = pointee(op.operands[0].type)
        kind = "cas" if op.name == "tt.atomic_cas" else _RMW.get(
            str(op.attrs.get("atomic_rmw_op") or op.attrs.get("keywords", ["add"])[0]).lower(), "?")
        if kind not in _COMMUTING or (e.is_float and kind in ("add", "fadd")) or id(op.results[0]) in used:
            return f"{op.name} ({kind}) applied in program order"
    return ""


@TABLE.rule("tt.atomic_cas")
def _atomic_cas(fx, op, ptr, cmp, val):
    return _atomic(fx, op, "cas", ptr, val, None, cmp)
