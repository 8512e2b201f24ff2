"""The reference interpreter: TTIR run one program at a time, every value a plain numpy array.

Read this file first. It says what every TTIR op means on this backend, with nothing but the
semantics in the way:
  * a launch runs its programs one after the other, in the order of their linear id
    (x fastest); a program runs its entry function's ops in order (regions recursively);
  * a value is a numpy array of its TTIR shape (a scalar: a 0-d array) held as values.py says
    (bf16 / fp8 as float32 rounded to the type, pointers as int64 addresses); block pointers and
    tensor descriptors are the small records below;
  * memory is the launch's tensors (`refmemory.Memory`): every live lane of an access must address
    an element of one of them, else a KernelFault names the program and the source line;
  * `TABLE` maps each op name to `rule(state, op, *operand_values) -> result value(s)`. Element-wise
    ops and tt.dot are the shared, shape-agnostic definitions of ops_arith.py, ops_math.py and
    ops_dot.py (one definition per op for every interpreter); everything else is defined here.

Programs that wait on each other (a while loop spinning on an atomic or a volatile load) are run
by the cooperative scheduler (cooperative.py), which hands over between programs while they spin.
The batched interpreter (interp.py) computes exactly the same results for many programs at once;
the differential tests (tests/cpu_interp_differential.py) hold it to that, bit for bit.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from sdk.backend import DeviceArg, LoweringTable, TensorDescArg, unsupported
from sdk.errors import ConfigError, Day0Error, KernelFault
from sdk.numerics import numpy_dtype
from sdk.ttir import Module, Op, PointerType, Region, ScalarType

from .analysis import combine_ufunc, padding_of, spins
from .atomics import kind_of
from .cooperative import Cooperative
from .ops_arith import ARITH
from .ops_dot import DOT
from .ops_math import MATH
from .ops_tensor import SCAN_UFUNCS
from .printing import print_text
from .provenance import pointer_origins
from .refmemory import Memory
from .table import merge
from .values import pointee, pointee_width, scalar_arg, value_dtype, where

TABLE = LoweringTable()
rule = TABLE.rule
merge(TABLE, ARITH, MATH, DOT)
TERMINATORS = frozenset({"scf.yield", "scf.condition", "tt.return", "tt.reduce.return", "tt.scan.return",
                         "tt.map_elementwise.return", "cf.br", "cf.cond_br"})


# ----------------------------------------------------------------------------- the interpreter
class Program:
    """A loaded kernel; `run(grid, args)` launches it."""

    def __init__(self, module: Module, table: LoweringTable = TABLE, flags: dict | None = None):
        """`flags`: the batched interpreter's run-time checks (checkers.py); the reference runs
        none of them, so a kernel asked to check anything is refused."""
        on = sorted(k for k, v in (flags or {}).items() if v)
        if on:
            raise ConfigError(f"the reference interpreter does not run the checks {', '.join(on)} "
                              f"(the batched interpreter does)")
        self.flags: dict = {}
        for op in module.walk():
            if table.get(op.name) is None:
                raise KernelFault(f"the reference interpreter has no rule for {unsupported(op)}")
        self.module, self.table = module, table
        self.spin_loops = {op for op in module.walk() if op.name == "scf.while" and spins(op)}
        self.raw_ops = pointer_origins(module).raw  # accesses through raw pointers (provenance.py)

    def run(self, grid: tuple[int, int, int], args: list[Any], extra: list[DeviceArg] = ()) -> None:
        gx, gy, gz = (int(g) for g in grid)
        tensors = [a.base if isinstance(a, TensorDescArg) else a for a in args]
        mem = Memory([a for a in tensors if isinstance(a, DeviceArg)] + list(extra), self.raw_ops, strict=bool(extra))
        entry = self.module.entry
        values = [_argument(a, v.type) for v, a in zip(entry.args, args)]

        def run_one(linear: int, sched: Cooperative | None = None) -> None:
            pid = (linear % gx, linear // gx % gy, linear // (gx * gy))
            State(self, pid, (gx, gy, gz), mem, sched).run(entry.body, values)

        with np.errstate(all="ignore"):  # float exceptions are values (inf, nan), never warnings
            if self.spin_loops:
                Cooperative(gx * gy * gz, run_one, mem).run()
            else:
                for linear in range(gx * gy * gz):
                    run_one(linear)


class State:
    """One running program: what a rule sees as its first argument."""

    def __init__(self, program: Program, pid, grid, mem: Memory, sched: Cooperative | None):
        self.program, self.pid, self.grid, self.mem, self.sched = program, pid, grid, mem, sched
        self.env: dict = {}  # SSA value -> its array, for the function running now

    def run(self, region: Region, args: list) -> list:
        """Run a region from its entry block, following cf branches; return what its terminator
        (scf.yield, tt.return, ...) yields."""
        labels = {b.label: b for b in region.blocks}
        block = region.entry
        while True:
            term, vals = self._block(block, args)
            if term is None:
                return vals
            if term.name == "cf.br":
                block, args = labels[term.successors[0]], vals
            elif term.name == "cf.cond_br":
                taken, other = (labels[s] for s in term.successors)
                n = len(taken.args)
                block, args = (taken, vals[1:1 + n]) if vals[0] else (other, vals[1 + n:])
            else:
                return vals

    def _block(self, block, args: list) -> tuple[Op | None, list]:
        env = self.env
        env.update(zip(block.args, args))
        for op in block.ops:
            operands = [env[v] for v in op.operands]
            if op.name in TERMINATORS:
                return op, operands
            try:
                out = self.program.table.get(op.name)(self, op, *operands)
            except Day0Error:
                raise
            except Exception as exc:  # a rule's numpy error becomes a fault naming the op and line
                raise KernelFault(f"{op.name} ({op.type_signature()}) failed in program {self.pid} at "
                                  f"{where(op)}: {type(exc).__name__}: {exc}") from None
            outs = out if isinstance(out, (list, tuple)) else [out]
            for r, v in zip(op.results, outs):
                env[r] = np.asarray(v) if isinstance(v, np.generic) else v
        return None, []  # a terminator without operands may be left implicit (scf.yield)

    def call(self, name: str, args: list) -> list:
        saved, self.env = self.env, {}
        try:
            return self.run(self.program.module.funcs[name].body, args)
        finally:
            self.env = saved


def _terminator(state, op, *vals):
    """Terminators end a block: `State.run` reads their operands (the rule only names them)."""
    return list(vals)


for _name in TERMINATORS:
    TABLE.register(_name, _terminator)


def _argument(a: Any, t) -> Any:
    """A launch argument as the value of the entry-function parameter of type `t`."""
    if isinstance(a, DeviceArg):
        return np.array(a.address, np.int64)
    if isinstance(a, TensorDescArg):
        return TensorDesc(a.base.address, list(a.shape), list(a.strides), tuple(t.block.shape),
                          str(t.block.element), a.padding)
    if isinstance(t, PointerType):
        return np.array(0 if a is None else int(a), np.int64)
    if isinstance(t, ScalarType):
        return scalar_arg(a, str(t))
    return a


# ------------------------------------------------------------------------------- control flow
@rule("scf.for")
def _for(state, op, lb, ub, step, *carried):
    if step <= 0:
        raise KernelFault(f"scf.for with a non-positive step ({int(step)}) at {where(op)}")
    carried = list(carried)
    for i in range(int(lb), int(ub), int(step)):
        carried = state.run(op.regions[0], [np.array(i, lb.dtype)] + carried)
    return carried


@rule("scf.if")
def _if(state, op, cond):
    then, other = op.regions[0], op.regions[1] if len(op.regions) > 1 else None
    if cond:
        return state.run(then, [])
    if other is not None and other.blocks and other.blocks[0].ops:
        return state.run(other, [])
    if op.results:
        raise KernelFault(f"scf.if with results and no else region at {where(op)}")
    return []


@rule("scf.while")
def _while(state, op, *vals):
    before, after = op.regions
    while True:
        cond, *fwd = state.run(before, list(vals))
        if not cond:
            return fwd
        vals = state.run(after, fwd)
        if state.sched is not None and op in state.program.spin_loops:  # let the others progress
            gx, gy, _ = state.grid
            x, y, z = state.pid
            state.sched.spin(x + gx * (y + gy * z), where(op))


@rule("scf.execute_region")
def _execute_region(state, op):
    return state.run(op.regions[0], [])


@rule("tt.call")
def _call(state, op, *args):
    callee = op.attrs["callee"]
    return state.call(getattr(callee, "name", callee), list(args))


@rule("tt.map_elementwise")
def _map_elementwise(state, op, *xs):
    """A scalar function of `pack` consecutive elements of each input, applied to every group."""
    pack, shape = int(op.attrs.get("pack", 1)), tuple(op.results[0].type.shape)
    flat = [np.broadcast_to(x, shape).reshape(-1) for x in xs]
    n = flat[0].size if flat else int(np.prod(shape))
    if pack < 1 or n % pack:
        raise KernelFault(f"tt.map_elementwise: pack = {pack} does not divide the {n} elements")
    outs = [state.run(op.regions[0], [x[g + k] for x in flat for k in range(pack)]) for g in range(0, n, pack)]
    res = [np.array([o[j * pack + k] for o in outs for k in range(pack)], value_dtype(r.type)).reshape(shape)
           for j, r in enumerate(op.results)]
    return res[0] if len(res) == 1 else res


# ------------------------------------------------------------------------- programs and shapes
@rule("tt.get_program_id")
def _program_id(state, op):
    return np.array(state.pid[op.attrs["axis"]], np.int32)


@rule("tt.get_num_programs")
def _num_programs(state, op):
    return np.array(state.grid[op.attrs["axis"]], np.int32)


@rule("tt.make_range")
def _make_range(state, op):
    return np.arange(int(op.attrs["start"]), int(op.attrs["end"]), dtype=np.int32)


@rule("tt.splat")
@rule("tt.broadcast")
def _broadcast(state, op, x):
    return np.broadcast_to(x, op.result.type.shape)


@rule("tt.unsplat")
def _unsplat(state, op, x):
    return x.reshape(-1)[0]


@rule("tt.expand_dims")
def _expand_dims(state, op, x):
    return np.expand_dims(x, int(op.attrs["axis"]))


@rule("tt.reshape")
def _reshape(state, op, x):
    return np.reshape(x, op.result.type.shape)


@rule("tt.trans")
def _trans(state, op, x):
    return np.transpose(x, [int(o) for o in op.attrs.get("order", [1, 0])])


@rule("tt.join")
def _join(state, op, a, b):
    return np.stack([a, b], axis=-1)


@rule("tt.split")
def _split(state, op, x):
    return x[..., 0], x[..., 1]


@rule("tt.cat")
def _cat(state, op, a, b):
    return np.concatenate([a, b], axis=0)


@rule("tt.gather")
def _gather(state, op, src, idx):
    return np.take_along_axis(src, idx.astype(np.int64), axis=int(op.attrs.get("axis", 0)))


@rule("tt.histogram")
def _histogram(state, op, x, mask=None):
    bins = op.result.type.shape[0]
    x = x.astype(np.int64)
    keep = (x >= 0) & (x < bins) & (True if mask is None else mask)
    return np.bincount(x[keep], minlength=bins).astype(value_dtype(op.result.type))


@rule("ub.poison")
def _poison(state, op):
    return np.zeros(op.result.type.shape, value_dtype(op.result.type))  # any value will do: zero


# ----------------------------------------------------------------------------- reduce and scan
@rule("tt.reduce")
def _reduce(state, op, *xs):
    """A one-op associative combine over exact types is numpy's ufunc reduce (its order: pairwise
    for sums); any other combine region runs on a tree of pairs (0+1, 2+3, ...; an odd last element
    joins the next level), the region applied element-wise to whole arrays of pairs."""
    axis = int(op.attrs["axis"])
    fn = combine_ufunc(op)
    if fn is not None:
        return fn.reduce(xs[0], axis=axis, dtype=xs[0].dtype)
    vals = [np.moveaxis(x, axis, -1) for x in xs]
    while vals[0].shape[-1] > 1:
        n, h = vals[0].shape[-1], vals[0].shape[-1] // 2
        left, right = [v[..., 0:2 * h:2] for v in vals], [v[..., 1:2 * h:2] for v in vals]
        pairs = [np.broadcast_to(c, left[0].shape) for c in state.run(op.regions[0], left + right)]
        vals = [np.concatenate([p, v[..., n - 1:]], axis=-1) if n % 2 else p for p, v in zip(pairs, vals)]
    out = [v[..., 0].astype(value_dtype(r.type)) for v, r in zip(vals, op.results)]
    return out[0] if len(out) == 1 else out


@rule("tt.scan")
def _scan(state, op, *xs):
    """Inclusive scan along `axis` (from the end when `reverse`), element by element in order."""
    axis, reverse = int(op.attrs["axis"]), bool(op.attrs.get("reverse", False))
    xs = [np.flip(x, axis) if reverse else x for x in xs]
    fn = combine_ufunc(op)
    if fn is not None and fn in SCAN_UFUNCS:
        outs = [fn.accumulate(xs[0], axis=axis, dtype=xs[0].dtype)]
    else:
        vals = [np.moveaxis(x, axis, 0) for x in xs]
        acc, steps = [v[0] for v in vals], [[v[0]] for v in vals]
        for i in range(1, vals[0].shape[0]):
            acc = state.run(op.regions[0], acc + [v[i] for v in vals])
            for s, a in zip(steps, acc):
                s.append(np.broadcast_to(a, vals[0].shape[1:]))
        outs = [np.moveaxis(np.stack(s), 0, axis) for s in steps]
    outs = [(np.flip(o, axis) if reverse else o).astype(value_dtype(r.type)) for o, r in zip(outs, op.results)]
    return outs[0] if len(outs) == 1 else outs


# ---------------------------------------------------------------------------------- pointers
@rule("tt.addptr")
def _addptr(state, op, ptr, offset):
    return ptr + offset.astype(np.int64) * pointee_width(op.result.type)


@rule("tt.int_to_ptr")
def _int_to_ptr(state, op, x):
    return x.astype(np.int64)


@rule("tt.ptr_to_int")
def _ptr_to_int(state, op, x):
    return x.astype(value_dtype(op.result.type))


@dataclass(frozen=True)
class BlockPtr:
    """A `tt.make_tensor_ptr` value: a block of a strided tensor (sizes, strides, offsets in elements)."""

    base: int
    shape: tuple
    strides: tuple
    offsets: tuple
    block: tuple
    elem: str

    def addresses(self, checked) -> tuple[np.ndarray, np.ndarray | None]:
        """The block's addresses, and which of its elements lie inside the tensor along the dims
        in `checked` (None: none checked)."""
        width, nd = numpy_dtype(self.elem).itemsize, len(self.block)
        addr, inside = np.int64(self.base), None
        for d, n in enumerate(self.block):
            i = (int(self.offsets[d]) + np.arange(n, dtype=np.int64)).reshape([n if k == d else 1 for k in range(nd)])
            addr = addr + i * int(self.strides[d]) * width
            if d in checked:
                ok = (i >= 0) & (i < int(self.shape[d]))
                inside = ok if inside is None else inside & ok
        return np.broadcast_to(addr, self.block), None if inside is None else np.broadcast_to(inside, self.block)


@dataclass(frozen=True)
class TensorDesc:
    """A `tt.make_tensor_descriptor` value (or a host TensorDescriptor argument)."""

    base: int
    shape: list
    strides: list
    block: tuple
    elem: str
    padding: str = "zero"  # what out-of-bounds loads read: "zero" or "nan"

    def at(self, offsets) -> BlockPtr:
        return BlockPtr(self.base, tuple(self.shape), tuple(self.strides), tuple(offsets[-len(self.block):]),
                        self.block, self.elem)


@rule("tt.make_tensor_ptr")
def _make_tensor_ptr(state, op, base, *rest):
    t = op.result.type.pointee
    n = len(t.shape)
    return BlockPtr(int(base), rest[:n], rest[n:2 * n], rest[2 * n:3 * n], tuple(t.shape), str(t.element))


@rule("tt.advance")
def _advance(state, op, bp, *deltas):
    return BlockPtr(bp.base, bp.shape, bp.strides, tuple(int(o) + int(d) for o, d in zip(bp.offsets, deltas)),
                    bp.block, bp.elem)


@rule("tt.make_tensor_descriptor")
def _make_tensor_descriptor(state, op, base, *rest):
    block, n = op.result.type.block, len(rest) // 2
    return TensorDesc(int(base), [int(x) for x in rest[:n]], [int(x) for x in rest[n:]], tuple(block.shape),
                      str(block.element), padding_of(op))


# ------------------------------------------------------------------------------------- memory
def _boundary_check(op) -> list[int]:
    dims = op.attrs.get("boundaryCheck", op.attrs.get("boundary_check")) or []
    return [int(d) for d in (dims if isinstance(dims, (list, tuple)) else [dims])]


@rule("tt.load")
def _load(state, op, ptr, mask=None, other=None):
    if isinstance(ptr, BlockPtr):  # out-of-bounds elements of the checked dims read the padding
        addr, inside = ptr.addresses(_boundary_check(op))
        nan = padding_of(op) == "nan" and inside is not None
        return state.mem.load(state, op, addr, inside, np.float32(np.nan) if nan else None, ptr.elem)
    return state.mem.load(state, op, ptr, mask, other, pointee(op.operands[0].type))


@rule("tt.store")
def _store(state, op, ptr, value, mask=None):
    if isinstance(ptr, BlockPtr):
        addr, inside = ptr.addresses(_boundary_check(op))
        return state.mem.store(state, op, addr, value, inside, ptr.elem)
    return state.mem.store(state, op, ptr, value, mask, pointee(op.operands[0].type))


@rule("tt.descriptor_load")
def _descriptor_load(state, op, desc, *offsets):
    addr, inside = desc.at(offsets).addresses(range(len(desc.block)))
    fill = np.float32(np.nan) if desc.padding == "nan" else None
    return state.mem.load(state, op, addr, inside, fill, desc.elem).reshape(op.result.type.shape)


@rule("tt.descriptor_store")
def _descriptor_store(state, op, desc, *rest):
    addr, inside = desc.at(rest[:-1]).addresses(range(len(desc.block)))
    state.mem.store(state, op, addr, np.reshape(rest[-1], desc.block), inside, desc.elem)


@rule("tt.descriptor_reduce")
def _descriptor_reduce(state, op, desc, *rest):
    addr, inside = desc.at(rest[:-1]).addresses(range(len(desc.block)))
    state.mem.atomic(state, op, kind_of(op, desc.elem), addr, np.reshape(rest[-1], desc.block), inside,
                     desc.elem)


def _rows(desc: TensorDesc, rows, col) -> tuple[np.ndarray, np.ndarray]:
    """Addresses and in-bounds mask of rows `rows` from column `col` on, of a 2-D descriptor whose
    block is one row of C elements: shape (len(rows), C)."""
    r = rows.astype(np.int64).reshape(-1, 1)
    c = int(col) + np.arange(desc.block[-1], dtype=np.int64)
    addr = desc.base + (r * desc.strides[0] + c * desc.strides[1]) * numpy_dtype(desc.elem).itemsize
    return addr, (r >= 0) & (r < desc.shape[0]) & (c >= 0) & (c < desc.shape[1])


@rule("tt.descriptor_gather")
def _descriptor_gather(state, op, desc, rows, col):
    addr, inside = _rows(desc, rows, col)
    return state.mem.load(state, op, addr, inside, np.float32(np.nan) if desc.padding == "nan" else None, desc.elem)


@rule("tt.descriptor_scatter")
def _descriptor_scatter(state, op, desc, rows, col, value):
    addr, inside = _rows(desc, rows, col)
    state.mem.store(state, op, addr, value, inside, desc.elem)


@rule("tt.atomic_rmw")
def _atomic_rmw(state, op, ptr, value, mask=None):
    return state.mem.atomic(state, op, kind_of(op), ptr, value, mask, pointee(op.operands[0].type))


@rule("tt.atomic_cas")
def _atomic_cas(state, op, ptr, cmp, value):
    return state.mem.atomic(state, op, "cas", ptr, value, None, pointee(op.operands[0].type), cmp=cmp)


# ------------------------------------------------------------------------------ assert, print
@rule("tt.assert")
def _assert(state, op, cond, *rest):
    if not np.all(cond):
        msg = op.attrs.get("message", "")
        raise KernelFault(f"device assertion failed in program {state.pid} at {where(op)}" + (f" ({msg})" if msg else ""))


@rule("tt.print")
def _print(state, op, *vals):
    sys.stdout.write(print_text(state.pid, op, list(vals)))
    sys.stdout.flush()


@rule("gpu.barrier")
@rule("ttg.barrier")
@rule("llvm.intr.assume")
def _no_effect(state, op, *args):
    """A barrier among one program's threads, or a hint: a program here is one sequence of ops."""
    return None
