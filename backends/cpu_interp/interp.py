"""Runs a TTIR module with every program of a launch batched along a leading axis.

Load time (once per compiled kernel): every function is turned into flat lists of closures, one per
op, that read and write integer slots of an environment list; constants are evaluated once. Run
time: the grid is cut into chunks of programs; each chunk runs the entry function once with values
of shape (P, *tensor_shape) (or (1, ...) for values every program shares). Divergent control flow
runs under a per-program `active` mask (see control.py); spin-lock kernels run one program at a time.
"""
from __future__ import annotations

import math
import os
from typing import Any, Callable

import numpy as np

from sdk.backend import DeviceArg, LoweringTable, TensorDescArg, unsupported
from sdk.errors import Day0Error, KernelFault
from sdk.ttir import Block, Func, Module, Op, PointerType, Region, ScalarType

from .analysis import analyse
from .context import Ctx
from .control import run_blocks
from .cooperative import Cooperative
from .memory import Memory
from .ops_memory import host_descriptor
from .values import scalar_arg, where

TERMINATORS = frozenset({"scf.yield", "tt.return", "tt.reduce.return", "tt.scan.return", "scf.condition",
                         "cf.br", "cf.cond_br", "tt.map_elementwise.return"})
ELEMENT_BUDGET = int(os.environ.get("DAY0_INTERP_CHUNK_ELEMENTS", 1 << 18))


class Code:
    """A block compiled to closures: `steps` run in order, `out` are the terminator's operand slots."""

    __slots__ = ("steps", "ops", "args", "out", "term", "elements", "macs")

    def __init__(self, steps, ops, args, out, term):
        self.steps, self.ops, self.args, self.out, self.term = steps, ops, args, out, term
        # per program, what the block's ops touch: elements (the widest operand or result of
        # each op) and a dot's multiply-adds, for the cost estimate (chunk_cost)
        self.elements = sum(max(map(_numel, [*op.operands, *op.results]), default=1) for op in ops)
        self.macs = sum(_numel(op.results[0]) * _shape(op.operands[0])[-1] for op in ops if op.name == "tt.dot")


def _shape(value) -> tuple:
    return tuple(getattr(value.type, "shape", None) or ())


def _numel(value) -> int:
    return math.prod(_shape(value))


class Program:
    """A loaded kernel: the parsed module, compiled once; `run(grid, args)` launches it."""

    def __init__(self, module: Module, table: LoweringTable, flags: dict | None = None):
        self.module, self.table = module, table
        self.flags = dict(flags or {})  # fixed flags; the DAY0_CHECK_* variables are read per launch
        self.slots: dict[int, int] = {}
        self.nslots: dict[str, int] = {}
        self.consts: dict[str, list[tuple[int, Any]]] = {}
        self._codes: dict[int, Code] = {}
        self.facts = analyse(module)  # side tables: pointer origins, spin loops, ... (analysis.py)
        for name, func in module.funcs.items():
            self._compile_func(name, func)
        self.entry = module.entry

    # ---------------------------------------------------------------------------- compile
    def _compile_func(self, name: str, func: Func) -> None:
        slots: dict[int, int] = {}
        consts: list[tuple[int, Any]] = []

        def slot(v) -> int:
            k = slots.get(id(v))
            if k is None:
                k = slots[id(v)] = len(slots)
            return k

        for v in func.args:
            slot(v)
        self._slot = slot
        self._consts = consts
        self._compile_region(func.body)
        self.slots.update(slots)
        self.nslots[name] = len(slots)
        self.consts[name] = consts

    def _compile_region(self, region: Region) -> None:
        for block in region.blocks:
            self._codes[id(block)] = self._compile_block(block)

    def _compile_block(self, block: Block) -> Code:
        slot = self._slot
        args = [slot(v) for v in block.args]
        steps, ops, out, term = [], [], [], None
        for op in block.ops:
            for reg in op.regions:
                self._compile_region(reg)
            if op.name in TERMINATORS:
                term = op
                out = [slot(v) for v in op.operands]
                break
            rule = self.table.get(op.name)
            if rule is None:  # the SDK checks every op before lower(); this is a safety net
                raise KernelFault(f"cpu_interp has no rule for {unsupported(op)}")
            ins = [slot(v) for v in op.operands]
            outs = [slot(v) for v in op.results]
            if op.name == "arith.constant":
                self._consts.append((outs[0], _constant(rule, op)))
                continue
            steps.append(_step(rule, op, ins, outs))
            ops.append(op)
        return Code(steps, ops, args, out, term)

    def run_region(self, ctx: "Ctx", region: Region, args: list) -> list:
        if len(region.blocks) == 1:
            return self.run_code(ctx, self._codes[id(region.blocks[0])], args)
        return run_blocks(ctx, region, args)

    def code(self, region_or_block) -> Code:
        b = region_or_block.blocks[0] if isinstance(region_or_block, Region) else region_or_block
        return self._codes[id(b)]

    # -------------------------------------------------------------------------------- run
    def run_code(self, ctx: Ctx, code: Code, args: list) -> list:
        env = ctx.env
        for k, a in zip(code.args, args):
            env[k] = a
        op = None
        ctx.steps += len(code.steps)
        ctx.elements += code.elements
        ctx.macs += code.macs
        try:
            for step, op in zip(code.steps, code.ops):
                step(ctx, env)
        except Day0Error:
            raise
        except Exception as exc:  # a rule's numpy error becomes a fault naming the op and line
            raise KernelFault(f"{op.name} ({op.type_signature()}) failed at {where(op)}: "
                              f"{type(exc).__name__}: {exc}") from None
        return [env[k] for k in code.out]

    def run(self, grid: tuple[int, int, int], args: list[Any], extra: list[DeviceArg] = (), first: int = 0,
            until: Callable[[float], bool] | None = None) -> int:
        """Run programs `first`.. of the launch (linear order); returns how many programs are done.
        `until(seconds)` is told, after each chunk, what that chunk is estimated to have cost
        (`chunk_cost`); when it answers True the launch stops there and the caller runs the rest
        (tier.py's auto tier compiles a kernel whose interpretation has cost more than compiling
        it would). Kernels whose programs must interleave (`facts.serial`) always run to the end."""
        func = self.entry
        gx, gy, gz = (int(g) for g in grid)
        total = gx * gy * gz
        if total <= first:
            return total
        flags = {"check_uninit": _env_flag("DAY0_CHECK_UNINIT"), "check_races": _env_flag("DAY0_CHECK_RACES"),
                 **self.flags}
        known = [a.base if isinstance(a, TensorDescArg) else a for a in args]
        mem = Memory([a for a in known if isinstance(a, DeviceArg)] + list(extra), flags, self.facts,
                     raw_strict=bool(extra), by_index={k: a for k, a in enumerate(known) if isinstance(a, DeviceArg)})
        values = []
        for v, a in zip(func.args, args):
            if isinstance(a, DeviceArg):
                values.append(np.array([a.address], np.int64))
            elif isinstance(a, TensorDescArg):
                values.append(host_descriptor(a, v.type))
            elif isinstance(v.type, PointerType):
                values.append(np.array([0 if a is None else int(a)], np.int64))
            elif isinstance(v.type, ScalarType):
                values.append(scalar_arg(a, str(v.type)).reshape(1))
            else:
                values.append(a)
        consts = self.consts[func.name]

        def start(ids: np.ndarray) -> Ctx:
            pids = ((ids % gx).astype(np.int32), ((ids // gx) % gy).astype(np.int32),
                    (ids // (gx * gy)).astype(np.int32))
            ctx = Ctx(self, (gx, gy, gz), pids, mem)
            ctx.env = [None] * self.nslots[func.name]
            for k, c in consts:
                ctx.env[k] = c
            return ctx

        if self.facts.serial:
            def run_one(pid: int, sched: Cooperative) -> None:
                ctx = start(np.array([pid], np.int64))
                ctx.sched = sched
                self.run_region(ctx, func.body, values)
            assert first == 0, "programs that interleave run as one launch"
            Cooperative(total, run_one, mem).run()
        else:
            chunk = max(1, min(total, ELEMENT_BUDGET // self.facts.max_numel))
            with np.errstate(all="ignore"):
                for at in range(first, total, chunk):
                    ids = np.arange(at, min(total, at + chunk), dtype=np.int64)
                    ctx = start(ids)
                    self.run_region(ctx, func.body, values)
                    if until is not None and until(chunk_cost(ctx)):
                        mem.finish()
                        return min(total, at + chunk)
        mem.finish()
        return total


#: the interpreter's cost model, fitted on this machine's runs of the suite's kernels
#: (benchmarks/cpu_auto_calibrate.py): seconds per op executed, per element an op touches in
#: each program, per multiply-add of a dot in each program
OP_SECONDS, ELEMENT_SECONDS, MAC_SECONDS = 7.4e-6, 5.2e-10, 1.9e-10


def chunk_cost(ctx: Ctx) -> float:
    """Estimated seconds of the chunk `ctx` ran, from what it counted: ops executed, and the
    elements and multiply-adds they touched per program, times its programs. Counted, not timed:
    the same launch always costs the same, so a choice made from it (tier.py) is reproducible."""
    return ctx.steps * OP_SECONDS + ctx.P * (ctx.elements * ELEMENT_SECONDS + ctx.macs * MAC_SECONDS)


def check(module: Module, table: LoweringTable) -> None:
    """What loading `module` would reject, found without loading it: an op without a rule, a
    constant its rule cannot evaluate (the compile stage calls this, so that such a kernel fails at
    compile time whichever tier runs it)."""
    for op in module.walk():
        if op.name in TERMINATORS:
            continue
        rule = table.get(op.name)
        if rule is None:
            raise KernelFault(f"cpu_interp has no rule for {unsupported(op)}")
        if op.name == "arith.constant":
            _constant(rule, op)


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def _constant(rule: Callable, op: Op) -> np.ndarray:
    """Evaluate an arith.constant once; held with a leading program axis of 1."""
    v = np.asarray(rule(None, op))
    shape = op.result.type.shape
    if v.shape == tuple(shape):
        v = v.reshape((1,) + tuple(shape))
    elif v.ndim == 0:
        v = v.reshape((1,) * (len(shape) + 1))
    v = np.ascontiguousarray(v)
    v.setflags(write=False)
    return v


def _step(rule: Callable, op: Op, ins: list[int], outs: list[int]) -> Callable:
    n_in = len(ins)
    if len(outs) == 1 and not op.name.startswith("scf."):
        k = outs[0]
        if n_in == 1:
            a = ins[0]

            def step(ctx, env):
                env[k] = rule(ctx, op, env[a])
        elif n_in == 2:
            a, b = ins

            def step(ctx, env):
                env[k] = rule(ctx, op, env[a], env[b])
        elif n_in == 3:
            a, b, c = ins

            def step(ctx, env):
                env[k] = rule(ctx, op, env[a], env[b], env[c])
        else:
            def step(ctx, env):
                env[k] = rule(ctx, op, *[env[i] for i in ins])
    elif not outs:
        def step(ctx, env):
            rule(ctx, op, *[env[i] for i in ins])
    elif len(outs) == 1:
        k = outs[0]

        def step(ctx, env):
            res = rule(ctx, op, *[env[i] for i in ins])
            env[k] = res[0] if isinstance(res, (list, tuple)) else res
    else:
        def step(ctx, env):
            res = rule(ctx, op, *[env[i] for i in ins])
            for k, r in zip(outs, res):
                env[k] = r
    return step

