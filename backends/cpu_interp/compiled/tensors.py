"""Block tensors as the compiled tier holds them: statically shaped values that are either
materialised in a scratch buffer or described lazily, element by element.

A tensor value answers one question, `at(fx, idx)`: the LLVM value of its element at the
multi-index `idx` (a list of i64 values, usually loop induction variables), emitted where the
builder stands. Element-wise ops, splats, broadcasts, expand_dims, transposes, reshapes, ranges,
join and split build lazy values over their operands, so a chain of them costs nothing until a
consumer (a store, a load's address, a reduction, a dot, a loop-carried value) walks a loop nest
over the shape and asks for every element: the whole chain is then fused into that loop body,
where LLVM vectorises it. `FunctionEmitter.materialize` turns any value into a `Buf` (a row-major
scratch buffer) where a consumer needs one or a value is worth keeping (see core.py).
"""
from __future__ import annotations

from typing import Callable

from llvmlite import ir

from .types import I1, I64, Elem, numel

ZERO = ir.Constant(I64, 0)

#: a step (TV.step) that is the same everywhere but known only when the kernel runs (a stride argument)
UNIFORM = "uniform"


def _add_steps(x, y):
    if x is None or y is None:
        return None
    return x + y if isinstance(x, int) and isinstance(y, int) else UNIFORM


def _scale_step(x, k):
    """A step times a factor that is the same everywhere (`k` an int when known, else UNIFORM)."""
    if x is None:
        return None
    if x == 0 or k == 0:
        return 0
    return x * k if isinstance(x, int) and isinstance(k, int) else UNIFORM


def cheap_to_recompute(t: "TV") -> bool:
    """Integer, mask and pointer tensors that are better recomputed where used than kept in a
    buffer: affine ones, and those computed from indices alone at a moderate cost."""
    if not (t.elem.is_int or t.elem.is_ptr):
        return False
    return affine(t) or (t.cost <= 16 and t.from_indices())


def affine(t: "TV") -> bool:
    """Whether every element of `t` is a fixed step per index away from its first one (TV.step
    known along every dimension, maybe only when the kernel runs): a few integer ops per element,
    cheaper to recompute where used than to keep, and affine addresses let LLVM see consecutive
    accesses, which addresses loaded from a buffer hide."""
    return all(t.step(d) is not None for d in range(len(t.shape)))


def const_i64(n: int) -> ir.Constant:
    return ir.Constant(I64, int(n))


def strides_of(shape) -> list[int]:
    out, s = [], 1
    for d in reversed(shape):
        out.append(s)
        s *= int(d)
    return out[::-1]


def linear(fx, idx, shape) -> ir.Value:
    """The row-major linear index of `idx` in `shape`."""
    b = fx.b
    acc = None
    for i, s, d in zip(idx, strides_of(shape), shape):
        if d == 1:
            continue
        term = i if s == 1 else b.mul(i, const_i64(s))
        acc = term if acc is None else b.add(acc, term)
    return acc if acc is not None else ZERO


def delinear(fx, lin, shape) -> list[ir.Value]:
    """`linear`'s inverse."""
    b = fx.b
    out = []
    for s, d in zip(strides_of(shape), shape):
        if d == 1:
            out.append(ZERO)
            continue
        q = lin if s == 1 else b.udiv(lin, const_i64(s))
        out.append(q if s * d == numel(shape) else b.urem(q, const_i64(d)))
    return out


class TV:
    """A block tensor value: `shape`, element type `elem`, and `cost`, a rough count of the
    operations one element costs to produce (what materialisation decisions weigh)."""

    shape: tuple[int, ...]
    elem: Elem
    cost: int = 0
    memo = False  # whether `at` results are worth remembering within one loop body

    def at(self, fx, idx: list) -> ir.Value:
        if not self.memo:
            return self._at(fx, idx)
        key = (id(self), fx.index_key(idx))
        hit = fx.memo_get(key)
        if hit is None:
            hit = self._at(fx, idx)
            fx.memo_put(key, hit, (self, list(idx)))
        return hit

    def _at(self, fx, idx: list) -> ir.Value:
        raise NotImplementedError

    def step(self, d: int):
        """What one step along dimension `d` adds to an element, the same everywhere (an integer
        tensor's value; a pointer tensor's address, in bytes): an int, UNIFORM when it is the same
        everywhere but known only at run time, or None when it may differ (data, an op without a
        rule here). Integer wrap-around is ignored: the answer chooses loop orders and what to
        keep in buffers, never results."""
        return None

    def from_indices(self) -> bool:
        """Whether every element is computed from its indices and scalars alone (no buffer is
        read): masks and offsets, which LLVM recomputes from induction variables for a few
        integer ops, hoisting what does not change along the inner loop."""
        return False

    @property
    def numel(self) -> int:
        return numel(self.shape)


class Splat(TV):
    """Every element the same scalar."""

    def __init__(self, value: ir.Value, shape, elem: Elem):
        self.value, self.shape, self.elem = value, tuple(shape), elem

    def _at(self, fx, idx):
        return self.value

    def step(self, d):
        return 0

    def from_indices(self):
        return True


class Buf(TV):
    """A row-major scratch buffer of `elem.buf` values."""

    cost = 1
    memo = True

    def __init__(self, ptr: ir.Value, shape, elem: Elem, scope: int | None = None):
        self.ptr, self.shape, self.elem = ptr, tuple(shape), elem
        self.scope = scope  # its alias scope (FunctionEmitter.alloc), None for views and phis

    def addr(self, fx, idx) -> ir.Value:
        return fx.b.gep(self.ptr, [linear(fx, idx, self.shape)], source_etype=self.elem.buf)

    def addr_linear(self, fx, lin) -> ir.Value:
        return fx.b.gep(self.ptr, [lin], source_etype=self.elem.buf)

    def _at(self, fx, idx):
        v = fx.b.load(self.addr(fx, idx), typ=self.elem.buf)
        fx.kc.tag(v, self.scope)
        return fx.b.trunc(v, I1) if self.elem.name == "i1" else v

    def put(self, fx, idx, value) -> None:
        self.put_addr(fx, self.addr(fx, idx), value)

    def put_addr(self, fx, addr, value) -> None:
        if self.elem.name == "i1":
            value = fx.b.zext(value, self.elem.buf)
        fx.kc.tag(fx.b.store(value, addr), self.scope)


class Lazy(TV):
    """An element-wise op over operands of the same shape: `fn(fx, *elements)`; `op`: the TTIR op
    it computes (what `step` reads), when there is one."""

    memo = True

    def __init__(self, fn: Callable, operands: list[TV], shape, elem: Elem, cost: int = 1, op=None):
        self.fn, self.operands, self.shape, self.elem = fn, operands, tuple(shape), elem
        self.cost = cost + sum(o.cost for o in operands)
        self.op = op

    def _at(self, fx, idx):
        return self.fn(fx, *[o.at(fx, idx) for o in self.operands])

    def from_indices(self):
        return all(o.from_indices() for o in self.operands)

    def step(self, d):
        steps = [o.step(d) for o in self.operands]
        if all(s == 0 for s in steps):
            return 0  # an element-wise op of operands that do not change along d
        name = self.op.name if self.op is not None else ""
        if name == "arith.muli":  # by a splat
            for k, o in enumerate(self.operands):
                if isinstance(o, Splat):
                    c = o.value
                    return _scale_step(steps[1 - k], int(c.constant) if isinstance(c, ir.Constant) else UNIFORM)
            return None
        if None in steps:
            return None
        if name in ("arith.extsi", "arith.extui", "arith.trunci", "arith.index_cast"):
            return steps[0]
        if name == "arith.addi":
            return _add_steps(steps[0], steps[1])
        if name == "arith.subi":
            return _add_steps(steps[0], _scale_step(steps[1], -1))
        if name == "tt.addptr":
            from .types import pointee
            return _add_steps(steps[0], _scale_step(steps[1], pointee(self.op.results[0].type).width))
        return None


class Range(TV):
    """tt.make_range: start + i along the one dimension (i32)."""

    def __init__(self, start: int, n: int, elem: Elem):
        self.start, self.shape, self.elem = start, (n,), elem

    def _at(self, fx, idx):
        i = fx.b.trunc(idx[0], self.elem.reg)
        return i if self.start == 0 else fx.b.add(i, ir.Constant(self.elem.reg, self.start))

    def step(self, d):
        return 1

    def from_indices(self):
        return True


class Broadcast(TV):
    """Dimensions of size 1 stretched to `shape`."""

    def __init__(self, src: TV, shape):
        self.src, self.shape, self.elem, self.cost = src, tuple(shape), src.elem, src.cost

    def _at(self, fx, idx):
        return self.src.at(fx, [ZERO if s == 1 else i for s, i in zip(self.src.shape, idx)])

    def step(self, d):
        return 0 if self.src.shape[d] == 1 else self.src.step(d)

    def from_indices(self):
        return self.src.from_indices()


class ExpandDims(TV):
    def __init__(self, src: TV, axis: int):
        shape = list(src.shape)
        shape.insert(axis, 1)
        self.src, self.axis, self.shape, self.elem, self.cost = src, axis, tuple(shape), src.elem, src.cost

    def _at(self, fx, idx):
        return self.src.at(fx, idx[:self.axis] + idx[self.axis + 1:])

    def step(self, d):
        return 0 if d == self.axis else self.src.step(d - (d > self.axis))

    def from_indices(self):
        return self.src.from_indices()


class Trans(TV):
    """tt.trans: result dimension d is source dimension order[d]."""

    def __init__(self, src: TV, order):
        self.src, self.order = src, [int(o) for o in order]
        self.shape = tuple(src.shape[o] for o in self.order)
        self.elem, self.cost = src.elem, src.cost

    def _at(self, fx, idx):
        src_idx = [ZERO] * len(self.order)
        for d, o in enumerate(self.order):
            src_idx[o] = idx[d]
        return self.src.at(fx, src_idx)

    def step(self, d):
        return self.src.step(self.order[d])

    def from_indices(self):
        return self.src.from_indices()


class Reshape(TV):
    """Same elements in row-major order, another shape."""

    def __init__(self, src: TV, shape):
        self.src, self.shape, self.elem, self.cost = src, tuple(shape), src.elem, src.cost + 1

    def _at(self, fx, idx):
        lin = linear(fx, idx, self.shape)
        if isinstance(self.src, Buf):
            v = fx.b.load(self.src.addr_linear(fx, lin), typ=self.elem.buf)
            return fx.b.trunc(v, I1) if self.elem.name == "i1" else v
        return self.src.at(fx, delinear(fx, lin, self.src.shape))


class Join(TV):
    """tt.join: a new last dimension of 2, `a` at 0 and `b` at 1."""

    def __init__(self, a: TV, b: TV):
        self.a, self.b_, self.shape, self.elem = a, b, tuple(a.shape) + (2,), a.elem
        self.cost = a.cost + b.cost + 1

    def _at(self, fx, idx):
        first = fx.b.icmp_unsigned("==", idx[-1], ZERO)
        return fx.b.select(first, self.a.at(fx, idx[:-1]), self.b_.at(fx, idx[:-1]))


class Split(TV):
    """One half (k = 0 or 1) of tt.split: the last dimension (of 2) dropped."""

    def __init__(self, src: TV, k: int):
        self.src, self.k, self.shape, self.elem, self.cost = src, k, tuple(src.shape[:-1]), src.elem, src.cost

    def _at(self, fx, idx):
        return self.src.at(fx, list(idx) + [const_i64(self.k)])


class Cat(TV):
    """tt.cat: `a` then `b` along the first dimension (indices clamped into each operand, the
    other's element discarded by a select)."""

    def __init__(self, a: TV, b: TV, shape):
        self.a, self.b_, self.shape, self.elem = a, b, tuple(shape), a.elem
        self.cost = a.cost + b.cost + 2

    def _at(self, fx, idx):
        b = fx.b
        n0 = const_i64(self.a.shape[0])
        first = b.icmp_unsigned("<", idx[0], n0)
        ia = b.select(first, idx[0], const_i64(self.a.shape[0] - 1))
        ib = b.select(first, ZERO, b.sub(idx[0], n0))
        return b.select(first, self.a.at(fx, [ia] + list(idx[1:])), self.b_.at(fx, [ib] + list(idx[1:])))
