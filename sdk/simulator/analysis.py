"""What one launch of a kernel does, read from its TTIR and its launch arguments.

Counts are per program, averaged over a sample of programs spread over the grid, multiplied by
loop trip counts where the loop bounds follow from the scalar arguments, the program id, or scalars
the kernel loads from its (captured) tensor arguments; a bound that does not is counted once and
the result is marked `estimated`. Bytes are the tensors loaded and stored (masks
ignored), attributed to the tensor argument each pointer derives from, so that DRAM traffic can be
capped at each argument's size (re-reads served on chip); flops are 2*M*N*K per tt.dot and one per
element per floating-point op.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ..backend import DeviceArg
from ..ttir import Block, Module, Op, PointerType, ScalarType, TensorType, Type, Value

_SPECIAL = ("math.exp", "math.exp2", "math.log", "math.log2", "math.sqrt", "math.rsqrt", "math.sin",
            "math.cos", "math.tanh", "math.erf", "math.log1p", "math.expm1", "tt.extern_elementwise",
            "tt.precise_sqrt", "tt.precise_divf", "arith.divf")
_RMW_OPS = {"add": "add", "fadd": "add", "max": "max", "umax": "max", "min": "min", "umin": "min",
            "and": "and", "or": "or", "xor": "xor", "exch": "xchg"}


@dataclass
class LaunchCounts:
    kernel: str
    grid: tuple[int, int, int]
    bytes_loaded: float = 0.0          # per program
    bytes_stored: float = 0.0          # per program
    loaded_by_arg: dict = field(default_factory=lambda: defaultdict(float))  # arg name -> per program
    stored_by_arg: dict = field(default_factory=lambda: defaultdict(float))
    extents: dict = field(default_factory=dict)       # arg name -> bytes the argument spans
    flops: dict = field(default_factory=lambda: defaultdict(float))  # (unit, operand, acc) -> per program
    footprint_bytes: int = 0           # peak live on-chip tensor bytes per program
    dot_types: set = field(default_factory=set)       # (operand dtype, acc dtype)
    atomics: set = field(default_factory=set)         # (op, dtype)
    dtypes: set = field(default_factory=set)          # element types the kernel computes with
    estimated: bool = False

    @property
    def programs(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    def dram_bytes(self) -> float:
        """Bytes the launch moves through DRAM: each argument's traffic capped at its size (a tile
        re-read by many programs comes from on-chip caches); traffic through pointers of unknown
        origin counts in full."""
        p = self.programs
        total = 0.0
        for by_arg, flat in ((self.loaded_by_arg, self.bytes_loaded), (self.stored_by_arg, self.bytes_stored)):
            known = 0.0
            for name, per_program in by_arg.items():
                known += per_program
                total += min(per_program * p, self.extents.get(name, math.inf))
            total += max(flat - known, 0.0) * p
        return total

    def totals(self) -> dict:
        p = self.programs
        return {"bytes": self.dram_bytes(),
                "flops": {"/".join(k): v * p for k, v in self.flops.items()}}


def dtype_name(t: Type) -> str:
    """TTIR element type -> device-model dtype name."""
    e = t.element
    if isinstance(e, PointerType):
        e = e.pointee.element
    name = str(e)
    return {"f32": "fp32", "f16": "fp16", "bf16": "bf16", "f64": "fp64", "f8E4M3FN": "fp8e4m3",
            "f8E5M2": "fp8e5m2", "f8E4M3FNUZ": "fp8e4m3fnuz", "f8E5M2FNUZ": "fp8e5m2fnuz", "i1": "int1",
            "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64"}.get(name, name)


def _numel(t: Type) -> int:
    return math.prod(t.shape) if isinstance(t, TensorType) else 1


def _bytes(t: Type) -> int:
    e = t.element
    if isinstance(e, PointerType):
        e = e.pointee
        if isinstance(e, TensorType):  # block pointer: the block it addresses
            return _numel(e) * max(1, e.elem.bits // 8)
    return _numel(t) * max(1, e.bits // 8) if isinstance(e, ScalarType) else 0


def analyse(module: Module, grid: tuple[int, int, int], args: list[Any], samples: int = 8,
            unwritten: list[tuple[int, int]] = ()) -> LaunchCounts:
    """Counts of one launch: per-program figures are the mean over up to `samples` programs spread
    evenly over the grid (program ids enter loop bounds: causal attention, varlen sequences).
    `unwritten`: (address, bytes) ranges whose contents are not real data (outputs of earlier
    launches that a capture did not run); scalars there are not read."""
    func = module.entry
    total = math.prod(grid) or 1
    n = min(samples, total)
    picks = sorted({round(k * (total - 1) / max(n - 1, 1)) for k in range(n)})
    runs = [_analyse_program(module, grid, args, _pid_of(p, grid), unwritten) for p in picks]
    counts = runs[0]
    if len(runs) > 1:
        n = len(runs)
        counts.bytes_loaded = sum(r.bytes_loaded for r in runs) / n
        counts.bytes_stored = sum(r.bytes_stored for r in runs) / n
        for field_name in ("flops", "loaded_by_arg", "stored_by_arg"):
            merged = defaultdict(float)
            for r in runs:
                for key, val in getattr(r, field_name).items():
                    merged[key] += val / n
            setattr(counts, field_name, merged)
        counts.estimated = any(r.estimated for r in runs)
        for r in runs[1:]:
            counts.dot_types |= r.dot_types
            counts.atomics |= r.atomics
            counts.dtypes |= r.dtypes
    counts.footprint_bytes = max(_peak_live(b) for b in func.body.blocks)
    return counts


def _pid_of(linear: int, grid: tuple[int, int, int]) -> tuple[int, int, int]:
    return (linear % grid[0], (linear // grid[0]) % grid[1], linear // (grid[0] * grid[1]))


def _analyse_program(module: Module, grid: tuple[int, int, int], args: list[Any],
                     pid: tuple[int, int, int], unwritten: list[tuple[int, int]] = ()) -> LaunchCounts:
    func = module.entry
    counts = LaunchCounts(func.name, tuple(grid))
    env: dict[Value, Any] = {}
    walker = _Walker(module, counts, grid, pid, [a for a in args if isinstance(a, DeviceArg)])
    walker.unwritten = list(unwritten)
    for v, a in zip(func.args, args):
        env[v] = a.address if isinstance(a, DeviceArg) else a
        if isinstance(a, DeviceArg):
            walker.origin[v] = a.name
            counts.extents[a.name] = a.nbytes or math.inf
    for block in func.body.blocks:  # blocks after an early return (cf.cond_br): an upper bound
        walker.block(block, env, 1.0)
    return counts


class _Walker:
    def __init__(self, module: Module, counts: LaunchCounts, grid: tuple[int, int, int],
                 pid: tuple[int, int, int] = (0, 0, 0), memory: list[DeviceArg] = ()):
        self.module, self.c, self.grid, self.pid = module, counts, grid, pid
        self.memory = list(memory)
        self.unwritten: list[tuple[int, int]] = []
        self.origin: dict[Value, str] = {}  # pointer value -> the tensor argument it points into

    def _traffic(self, by_arg: dict, ptr: Value, amount: float) -> None:
        name = self.origin.get(ptr)
        if name is not None:
            by_arg[name] += amount

    def block(self, block: Block, env: dict, mult: float) -> None:
        for op in block.ops:
            self.op(op, env, mult)

    def op(self, op: Op, env: dict, mult: float) -> None:
        c, n = self.c, op.name
        for r in op.results:
            if isinstance(r.type.element, ScalarType) and r.type.element.is_float:
                c.dtypes.add(dtype_name(r.type))
        self._propagate_origin(op)
        if n == "tt.load" or n == "tt.descriptor_load":
            c.bytes_loaded += mult * _bytes(op.results[0].type)
            self._traffic(c.loaded_by_arg, op.operands[0], mult * _bytes(op.results[0].type))
        elif n == "tt.store" or n == "tt.descriptor_store":
            c.bytes_stored += mult * _bytes(op.operands[1].type)
            self._traffic(c.stored_by_arg, op.operands[0], mult * _bytes(op.operands[1].type))
        elif n in ("tt.atomic_rmw", "tt.atomic_cas"):
            val = op.operands[1] if n == "tt.atomic_rmw" else op.operands[2]
            c.bytes_loaded += mult * _bytes(val.type)
            c.bytes_stored += mult * _bytes(val.type)
            self._traffic(c.loaded_by_arg, op.operands[0], mult * _bytes(val.type))
            self._traffic(c.stored_by_arg, op.operands[0], mult * _bytes(val.type))
            kind = _RMW_OPS.get(op.attrs.get("atomic_rmw_op", ""), "cas") if n == "tt.atomic_rmw" else "cas"
            c.atomics.add((kind, dtype_name(val.type)))
        elif n == "tt.dot":
            a, b, acc = (v.type for v in op.operands[:3])
            m, k = a.shape[-2], a.shape[-1]
            nn = b.shape[-1]
            batch = math.prod(a.shape[:-2]) if len(a.shape) > 2 else 1
            operand, accum = dtype_name(a), dtype_name(acc)
            if operand == "fp32" and op.attrs.get("inputPrecision", "tf32") in ("tf32", "tf32x3"):
                operand = "tf32"
            c.dot_types.add((operand, accum))
            c.flops[("matrix", operand, accum)] += mult * 2.0 * batch * m * nn * k
        elif n in _SPECIAL:
            c.flops[("special", dtype_name(op.results[0].type), "")] += mult * _numel(op.results[0].type)
        elif n.startswith("arith.") and n.endswith("f") and op.results and n != "arith.constant":
            c.flops[("vector", dtype_name(op.results[0].type), "")] += mult * _numel(op.results[0].type)
        elif n == "tt.reduce" or n == "tt.scan":
            per = sum(1 for inner in op.regions[0].entry.ops if inner.name.startswith("arith."))
            c.flops[("vector", dtype_name(op.operands[0].type), "")] += mult * per * _numel(op.operands[0].type)
        if n == "scf.for":
            trips = self._trips(env, op)
            body = op.regions[0].entry
            self.block(body, dict(env), mult * trips)
        elif n == "scf.if":
            cond = env.get(op.operands[0])
            taken = op.regions if cond is None else (op.regions[:1] if cond else op.regions[1:2])
            for region in taken:  # an unknown condition counts both sides: an upper bound
                self.block(region.entry, dict(env), mult)
        elif n == "scf.while":
            self.c.estimated = True
            for region in op.regions:
                for block in region.blocks:
                    self.block(block, dict(env), mult)
        elif n == "tt.call":
            callee = self.module.funcs.get(op.attrs["callee"].name)
            if callee is not None:
                inner = {v: env.get(a) for v, a in zip(callee.args, op.operands)}
                for v, a in zip(callee.args, op.operands):
                    if a in self.origin:
                        self.origin[v] = self.origin[a]
                for block in callee.body.blocks:
                    self.block(block, inner, mult)
        vals = [env.get(v) for v in op.operands]
        if n == "tt.load" and not isinstance(op.results[0].type, TensorType) and len(op.operands) == 1:
            folded = [self._read_scalar(vals[0], op.results[0].type)]
        elif n == "tt.addptr" and not isinstance(op.results[0].type, TensorType) and None not in vals[:2]:
            folded = [vals[0] + int(vals[1]) * _bytes_of(op.results[0].type.pointee)]
        else:
            folded = _fold(op, vals, self.grid, self.pid)
        for r, val in zip(op.results, folded):
            env[r] = val

    def _read_scalar(self, address: Any, type_: Type) -> Any:
        """A scalar the kernel loads (a sequence length, an offset), read from the captured tensor."""
        if address is None or not isinstance(type_, ScalarType) or not type_.is_int:
            return None
        if any(lo <= address < lo + size for lo, size in self.unwritten):
            return None
        for arg in self.memory:
            t = arg.handle
            if t is None or not arg.address <= address < arg.address + arg.nbytes:
                continue
            if not t.is_contiguous() or t.dtype.is_floating_point:
                return None
            index = (address - arg.address) // t.element_size()
            return int(t.reshape(-1)[index])
        return None

    def _propagate_origin(self, op: Op) -> None:
        """Pointers keep the argument they came from through splat/broadcast/addptr/reshape...,
        block pointers, and loop-carried values of scf.for."""
        if op.name == "scf.for":
            body = op.regions[0].entry
            for init, arg, res in zip(op.operands[3:], body.args[1:], op.results):
                if init in self.origin:
                    self.origin[arg] = self.origin[res] = self.origin[init]
            return
        if not op.operands or op.operands[0] not in self.origin:
            return
        for r in op.results:
            t = r.type.element if isinstance(r.type, TensorType) else r.type
            if isinstance(t, PointerType):
                self.origin[r] = self.origin[op.operands[0]]

    def _trips(self, env: dict, op: Op) -> float:
        lb, ub, step = (env.get(v) for v in op.operands[:3])
        if None in (lb, ub, step) or step == 0:
            self.c.estimated = True
            return 1.0
        return float(max(0, -(-(int(ub) - int(lb)) // int(step))))


def _bytes_of(t: Type) -> int:
    return max(1, t.bits // 8) if isinstance(t, ScalarType) else 8


def _fold(op: Op, vals: list, grid: tuple[int, int, int], pid: tuple[int, int, int] = (0, 0, 0)) -> list:
    """Evaluate scalar integer arithmetic (loop bounds) for the program `pid`."""
    n, a = op.name, vals
    if op.results and isinstance(op.results[0].type, TensorType):
        return [None] * len(op.results)
    try:
        if n == "arith.constant":
            v = op.attrs.get("value")
            return [v if isinstance(v, (int, float, bool)) else None]
        if n == "tt.get_program_id":
            return [pid[op.attrs["axis"]]]
        if n == "tt.get_num_programs":
            return [grid[op.attrs["axis"]]]
        if None in a:
            return [None] * len(op.results)
        simple = {"arith.addi": lambda: a[0] + a[1], "arith.subi": lambda: a[0] - a[1],
                  "arith.muli": lambda: a[0] * a[1], "arith.divsi": lambda: int(a[0] / a[1]),
                  "arith.divui": lambda: a[0] // a[1], "arith.remsi": lambda: a[0] % a[1],
                  "arith.ceildivsi": lambda: -(-a[0] // a[1]), "arith.floordivsi": lambda: a[0] // a[1],
                  "arith.maxsi": lambda: max(a), "arith.minsi": lambda: min(a),
                  "arith.extsi": lambda: a[0], "arith.extui": lambda: a[0], "arith.trunci": lambda: a[0],
                  "arith.index_cast": lambda: a[0], "arith.select": lambda: a[1] if a[0] else a[2],
                  "arith.cmpi": lambda: _cmp(op.attrs["predicate"], a[0], a[1])}
        if n in simple:
            return [simple[n]()]
    except (ZeroDivisionError, TypeError, KeyError):
        pass
    return [None] * len(op.results)


def _cmp(pred: str, x, y) -> bool:
    return {"slt": x < y, "sle": x <= y, "sgt": x > y, "sge": x >= y, "eq": x == y, "ne": x != y,
            "ult": x < y, "ule": x <= y, "ugt": x > y, "uge": x >= y}[pred]


def _value_bytes(v: Value) -> int:
    t = v.type
    if not isinstance(t, TensorType) or isinstance(t.elem, PointerType) or str(t.elem) == "i1":
        return 0  # addresses and masks live in registers / are recomputed, not in the scratchpad
    return _bytes(t)


def _peak_live(block: Block) -> int:
    """Peak bytes of tensor values live at once in a block (nested regions counted at their op)."""
    last_use: dict[Value, int] = {}
    for i, op in enumerate(block.ops):
        for v in _uses(op):
            last_use[v] = i
    live: dict[Value, int] = {v: _value_bytes(v) for v in block.args}
    peak = sum(live.values())
    for i, op in enumerate(block.ops):
        inner = max((_peak_live(r.entry) for r in op.regions), default=0)
        for r in op.results:
            live[r] = _value_bytes(r)
        peak = max(peak, sum(live.values()) + inner)
        for v in [v for v in live if last_use.get(v, -1) <= i]:
            del live[v]
    return peak


def _uses(op: Op):
    yield from op.operands
    for region in op.regions:
        for block in region.blocks:
            for inner in block.ops:
                yield from _uses(inner)
