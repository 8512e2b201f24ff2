"""What a rule of the batched interpreter sees: the chunk of programs it runs for, and their state."""
from __future__ import annotations

from typing import Any

import numpy as np

from sdk.ttir import Region


class Ctx:
    """The chunk's programs, the launch's memory, the active-program mask, the kernel's facts.

    `program` is the loaded kernel (interp.Program): it runs regions and calls (`run`, `call`)."""

    def __init__(self, program: Any, grid, pids, mem):
        self.program = program
        self.facts = program.facts      # side tables of the kernel (analysis.py)
        self.grid = grid
        self.pid = pids                 # three int32 arrays of shape (P,)
        self.P = len(pids[0])
        self.mem = mem
        self.active: np.ndarray | None = None  # bool (P,) where control flow diverged, else None
        self.env: list = []
        self.flags = program.flags
        self.sched = None               # the Cooperative scheduler, where programs run one at a time
        self.steps = self.elements = self.macs = 0  # ops executed, what they touched (interp.chunk_cost)

    # ----------------------------------------------------------------------------- masks
    def lanes(self, ndim: int) -> np.ndarray | None:
        """The active mask shaped to broadcast against a value of `ndim` dims (or None)."""
        a = self.active
        return None if a is None else a.reshape((self.P,) + (1,) * (ndim - 1))

    def program_ids(self) -> np.ndarray:
        """Linear program index of each lane (for messages and race checks)."""
        gx, gy, _ = self.grid
        return self.pid[0].astype(np.int64) + gx * (self.pid[1].astype(np.int64) + gy * self.pid[2])

    def pid_of(self, lane: int) -> tuple[int, int, int]:
        return tuple(int(p[lane]) for p in self.pid)

    # ---------------------------------------------------------------------------- regions
    def run(self, region: Region, args: list) -> list:
        """Run a region with `args` bound to its entry block's arguments; return the values its
        terminator yields."""
        return self.program.run_region(self, region, args)

    def call(self, name: str, args: list) -> list:
        """Run function `name` of the module with its own slots."""
        prog = self.program
        saved = self.env
        self.env = [None] * prog.nslots[name]
        for k, c in prog.consts[name]:
            self.env[k] = c
        try:
            return prog.run_region(self, prog.module.funcs[name].body, args)
        finally:
            self.env = saved
