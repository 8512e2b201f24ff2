"""Programs that wait on each other: one at a time, handing over when one spins.

A kernel whose programs spin on a flag another program raises (a `while` over an atomic or a
volatile load: stream-K fix-up, decoupled look-back, a ticket lock) needs the programs to make
progress concurrently, as they do on a device. Each program runs on its own thread, but only the
one holding the baton executes: a program passes it on at the end, or after `SPIN` iterations of
a spin loop, to the next program not yet started (in launch order), else to the longest waiting
one. So the result is that of a serial interleaving, deterministic, and a program waiting on a
later one no longer hangs. When every remaining program only spins and no memory changes for
`PATIENCE` rounds, the launch stops with a KernelFault naming them.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Callable

import numpy as np

from sdk.errors import KernelFault

SPIN = 64        # spin-loop iterations a program runs before handing over
PATIENCE = 200   # hand-overs per waiting program without any memory change: a deadlock


class _Abort(BaseException):
    """Unwinds a suspended program's thread when the launch stops."""


class Cooperative:
    def __init__(self, total: int, run_one: Callable[[int, "Cooperative"], None], memory) -> None:
        self.total, self.run_one, self.memory = total, run_one, memory
        self.cv = threading.Condition()
        self.turn: int | None = None        # the program holding the baton; None: the scheduler
        self.outcome: dict[int, object] = {}
        self.abort = False
        self._spins: dict[int, int] = {}
        self.where = ""                     # the spin loop's source location, for the deadlock message

    # --------------------------------------------------------------- inside a program's thread
    def spin(self, pid: int, where: str) -> None:
        """Called by a spin loop each iteration: every SPIN iterations, hand the baton back."""
        n = self._spins.get(pid, 0) + 1
        self._spins[pid] = n
        if n % SPIN:
            return
        self.where = where
        with self.cv:
            self.outcome[pid] = "spin"
            self.turn = None
            self.cv.notify_all()
            self.cv.wait_for(lambda: self.turn == pid)
            if self.abort:
                raise _Abort()

    def _thread(self, pid: int) -> None:
        with self.cv:
            self.cv.wait_for(lambda: self.turn == pid)
        try:
            if self.abort:
                raise _Abort()
            with np.errstate(all="ignore"):
                self.run_one(pid, self)
            result: object = "done"
        except _Abort:
            return
        except BaseException as exc:  # handed to the launching thread
            result = exc
        with self.cv:
            self.outcome[pid] = result
            self.turn = None
            self.cv.notify_all()

    # ------------------------------------------------------------------- the launching thread
    def _hand(self, pid: int) -> object:
        with self.cv:
            self.turn = pid
            self.cv.notify_all()
            self.cv.wait_for(lambda: self.turn is None)
            return self.outcome[pid]

    def run(self) -> None:
        waiting: deque[int] = deque()
        threads: dict[int, threading.Thread] = {}
        started = 0
        stale, version = 0, self.memory.version
        try:
            while started < self.total or waiting:
                if started < self.total:
                    pid, started = started, started + 1
                    threads[pid] = threading.Thread(target=self._thread, args=(pid,), daemon=True,
                                                    name=f"cpu_interp program {pid}")
                    threads[pid].start()
                else:
                    pid = waiting.popleft()
                outcome = self._hand(pid)
                if isinstance(outcome, BaseException):
                    raise outcome
                if outcome == "spin":
                    waiting.append(pid)
                else:
                    threads.pop(pid).join()
                if self.memory.version != version or outcome != "spin":
                    stale, version = 0, self.memory.version
                elif started == self.total:
                    stale += 1
                    if stale > PATIENCE * len(waiting):
                        raise KernelFault(
                            f"programs {sorted(waiting)} (linear ids) wait on each other forever: every one "
                            f"spins at {self.where} and no memory changes")
        finally:
            if threads:
                with self.cv:
                    self.abort = True
                for pid, t in threads.items():
                    with self.cv:
                        self.turn = pid
                        self.cv.notify_all()
                    t.join(timeout=5)
