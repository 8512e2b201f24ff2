"""Runs a TTIR module: one program at a time, each op a numpy operation from the lowering table."""
from __future__ import annotations

from typing import Any

import numpy as np

from sdk.backend import DeviceArg, LoweringTable
from sdk.errors import KernelFault
from sdk.numerics import numpy_dtype
from sdk.ttir import Block, Module, PointerType, ScalarType


class Memory:
    """The tensors of one launch, addressed by the pointers the kernel computes."""

    def __init__(self, args: list[DeviceArg]):
        self.args = args

    def locate(self, addr: np.ndarray, mask: np.ndarray, width: int, loc: Any) -> tuple[DeviceArg, np.ndarray]:
        live = addr[mask]
        for arg in self.args:
            if live.size == 0 or (live.min() >= arg.address and live.max() + width <= arg.address + arg.nbytes):
                return arg, (addr - arg.address)
        for arg in self.args:
            if arg.address <= live.min() < arg.address + max(arg.nbytes, 1) + (1 << 20):
                lo, hi = int(live.min() - arg.address), int(live.max() - arg.address) + width
                raise KernelFault(f"out-of-bounds access to '{arg.name}': bytes [{lo}, {hi}) of {arg.nbytes}"
                                  f" at {loc}")
        raise KernelFault(f"access to an address outside every tensor argument at {loc}")


class Ctx:
    def __init__(self, program: "Program", pid: tuple[int, int, int], grid: tuple[int, int, int], mem: Memory):
        self.program, self.pid, self.grid, self.mem = program, pid, grid, mem

    def run_block(self, block: Block, env: dict, args: list) -> list:
        for v, a in zip(block.args, args):
            env[v] = a
        for op in block.ops:
            rule = self.program.table.get(op.name)
            out = rule(self, op, *[env[v] for v in op.operands])
            if op.name in ("scf.yield", "tt.return", "tt.reduce.return", "tt.scan.return", "scf.condition"):
                return out
            if len(op.results) == 1:
                env[op.results[0]] = out
            else:
                for r, o in zip(op.results, out or ()):
                    env[r] = o
        return []


class Program:
    def __init__(self, module: Module, table: LoweringTable):
        self.module, self.table = module, table

    def run(self, grid: tuple[int, int, int], args: list[Any]) -> None:
        func = self.module.entry
        mem = Memory([a for a in args if isinstance(a, DeviceArg)])
        values = []
        for v, a in zip(func.args, args):
            if isinstance(a, DeviceArg):
                values.append(np.int64(a.address))
            elif isinstance(v.type, PointerType):
                values.append(np.int64(0 if a is None else a))
            else:
                values.append(np.array(a, dtype=numpy_dtype(str(v.type))) if isinstance(v.type, ScalarType) else a)
        for z in range(grid[2]):
            for y in range(grid[1]):
                for x in range(grid[0]):
                    Ctx(self, (x, y, z), grid, mem).run_block(func.body.entry, {}, values)
