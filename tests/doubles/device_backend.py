"""A backend double with device memory of its own: what a real accelerator looks like to the SDK.

* GuardedHeap: device memory in an address space of its own (never a host address), reachable
  from the host only through the allocator (copies, views handed to the executor); each allocation
  has guard bytes before and after it, checked after every launch and when freed; every range an
  allocator call touches is checked against its allocation. Every copy is logged.
* StreamDevice: asynchronous; each stream is a worker thread running its queue in order (copies,
  launches, event records); a fault met on a stream is raised by the next synchronize.
* DeviceHeapBackend: delegates everything it executes to cpu_interp's rules (borrowed), running
  them over views of the heap. `launch_delay_s` adds device time per launch (for timing tests).

Register it with DAY0_BACKENDS="device_heap=doubles.device_backend:DeviceHeapBackend".
"""
from __future__ import annotations

import bisect
import ctypes
import dataclasses
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from backends.cpu_interp import CpuInterpBackend
from sdk.backend import Backend, KernelInfo, LoweringTable, Options, Target
from sdk.device import Allocator, Device, Event
from sdk.errors import KernelFault
from sdk.ttir import Module

BASE = 0x1000_0000_0000    # device addresses start here: far from any host mapping
GUARD = 64                 # guard bytes before and after each allocation
CANARY = 0xCD
ALIGN = 256


class StreamEvent(Event):
    def __init__(self, device: "StreamDevice", enable_timing: bool = True) -> None:
        super().__init__(device, enable_timing)
        self._reached = threading.Event()

    def record(self, stream: Any = None) -> None:
        self.t = None
        self._reached.clear()

        def reach() -> None:
            self.t = time.perf_counter()
            self._reached.set()
        self.device.enqueue(stream, reach)

    def query(self) -> bool:
        return self._reached.is_set()

    def synchronize(self) -> None:
        self._reached.wait()


class StreamDevice(Device):
    """Streams are worker threads, each running its queue in order."""

    synchronous = False

    def __init__(self) -> None:
        super().__init__()
        self._queues: dict[int, queue.Queue] = {}
        self._errors: dict[int, list[BaseException]] = {}
        self._lock = threading.Lock()
        self.new_stream()

    def default_stream(self) -> int:
        return 1

    def new_stream(self) -> int:
        with self._lock:
            sid = len(self._queues) + 1
            q: queue.Queue = queue.Queue()
            self._queues[sid], self._errors[sid] = q, []
        threading.Thread(target=self._work, args=(sid, q), daemon=True, name=f"device-stream-{sid}").start()
        return sid

    def enqueue(self, stream: Any, work: Callable[[], None]) -> None:
        self._queues[stream or self.default_stream()].put(work)

    def _work(self, sid: int, q: queue.Queue) -> None:
        while True:
            work = q.get()
            try:
                work()
            except BaseException as exc:  # the host sees it at its next synchronize
                self._errors[sid].append(exc)
            finally:
                q.task_done()

    def synchronize(self, stream: Any = None) -> None:
        sids = list(self._queues) if stream is None else [stream or self.default_stream()]
        for sid in sids:
            self._queues[sid].join()
        for sid in sids:
            if self._errors[sid]:
                first, self._errors[sid] = self._errors[sid][0], []
                raise first

    def event(self, enable_timing: bool = True) -> StreamEvent:
        return StreamEvent(self, enable_timing)


@dataclass
class _Block:
    address: int
    size: int
    data: np.ndarray        # guard + payload + guard
    number: int


@dataclass
class Copy:
    kind: str               # "in" (host -> device) or "out"
    host: int               # host address
    device: int             # device address
    nbytes: int


@dataclass
class GuardedHeap(Allocator):
    device: StreamDevice
    log: list[Copy] = field(default_factory=list)
    _blocks: dict[int, _Block] = field(default_factory=dict)
    _bases: list[int] = field(default_factory=list)
    _next: int = BASE
    _count: int = 0

    # ------------------------------------------------------------------------------ memory
    def alloc(self, nbytes: int) -> int:
        data = np.full(GUARD + nbytes + GUARD, CANARY, np.uint8)
        address = self._next
        self._next += (nbytes + ALIGN - 1) // ALIGN * ALIGN + ALIGN  # a gap: no allocation borders another
        self._count += 1
        self._blocks[address] = _Block(address, nbytes, data, self._count)
        bisect.insort(self._bases, address)
        return address

    def free(self, address: int) -> None:
        block = self._blocks.pop(address, None)
        if block is None:
            raise KernelFault(f"free of {address:#x}: not a device allocation")
        self._bases.remove(address)
        self._check(block, "when freed")

    def extent(self, address: int) -> tuple[int, int]:
        block = self._find(address)
        return block.address, block.size

    def view(self, address: int, nbytes: int) -> np.ndarray:
        block = self._span(address, nbytes, "view")
        at = GUARD + address - block.address
        return block.data[at:at + nbytes]

    def copy_in(self, dst: int, src_host: int, nbytes: int, stream: Any = None) -> None:
        target = self.view(dst, nbytes)
        self.log.append(Copy("in", src_host, dst, nbytes))

        def run() -> None:
            target[:] = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(src_host))
        self.device.enqueue(stream, run)

    def copy_out(self, dst_host: int, src: int, nbytes: int, stream: Any = None) -> None:
        source = self.view(src, nbytes)
        self.log.append(Copy("out", dst_host, src, nbytes))

        def run() -> None:
            np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(dst_host))[:] = source
        self.device.enqueue(stream, run)

    # ------------------------------------------------------------------------------ checks
    def check_guards(self) -> None:
        for block in list(self._blocks.values()):
            self._check(block, "after a launch")

    def live(self) -> int:
        return len(self._blocks)

    def _find(self, address: int) -> _Block:
        k = bisect.bisect_right(self._bases, address) - 1
        if k >= 0:
            block = self._blocks[self._bases[k]]
            if address < block.address + max(block.size, 1):
                return block
        raise KernelFault(f"{address:#x} is not inside any device allocation")

    def _span(self, address: int, nbytes: int, what: str) -> _Block:
        block = self._find(address)
        if address + nbytes > block.address + block.size:
            raise KernelFault(f"{what} of {nbytes} bytes at offset {address - block.address} overruns device "
                              f"allocation #{block.number} of {block.size} bytes")
        return block

    @staticmethod
    def _check(block: _Block, when: str) -> None:
        before, after = block.data[:GUARD], block.data[GUARD + block.size:]
        if (before != CANARY).any() or (after != CANARY).any():
            side = "underrun" if (before != CANARY).any() else "overrun"
            raise KernelFault(f"device allocation #{block.number} at {block.address:#x} ({block.size} bytes): "
                              f"{side}, a guard byte was overwritten (found {when})")


class DeviceHeapBackend(Backend):
    """cpu_interp's rules (borrowed) executed over a guarded device heap on asynchronous streams."""

    name = "device_heap"
    target = Target.from_device_model("device_heap", "generic_npu")
    binary_ext = "heapbin"
    launch_delay_s = 0.0
    _launches = 0

    def __init__(self) -> None:
        self.device = StreamDevice()
        self.allocator = GuardedHeap(self.device)
        super().__init__()
        self.executor = CpuInterpBackend()
        self.executor.lowering = self.lowering  # the interpreter, running this backend's table

    def lowering_table(self) -> LoweringTable:
        table = LoweringTable()
        table.update(CpuInterpBackend().lowering, borrowed=True)
        return table

    def parse_options(self, opts: dict) -> Options:
        options = self.executor.parse_options(opts)  # cpu_interp's numerics (fp8 formats, checks)
        return dataclasses.replace(options, arch=self.target.arch, backend_name=self.name)

    def lower(self, module: Module, options: Options) -> Any:
        return self.executor.lower(module, options)

    def load(self, artifact: bytes, kernel: KernelInfo) -> Any:
        return self.executor.load(artifact, kernel)

    def take_launch_stats(self) -> list[dict]:
        """Copies and launches since the last call, and the allocations still live."""
        log, self.allocator.log = self.allocator.log, []
        launches, self._launches = self._launches, 0
        return [{"heap": {"launches": launches, "copies_in": sum(c.kind == "in" for c in log),
                          "copies_out": sum(c.kind == "out" for c in log),
                          "bytes_in": sum(c.nbytes for c in log if c.kind == "in"),
                          "bytes_out": sum(c.nbytes for c in log if c.kind == "out"),
                          "live_allocations": self.allocator.live()}}]

    def launch(self, kernel: Any, grid: tuple[int, int, int], args: list[Any], stream: Any = None) -> None:
        self._launches += 1

        def run() -> None:
            if self.launch_delay_s:
                time.sleep(self.launch_delay_s)
            self.executor.launch(kernel, grid, args)
            self.allocator.check_guards()
        self.device.enqueue(stream, run)
