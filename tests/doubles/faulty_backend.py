"""A backend double: cpu_interp, except that it segfaults launching any kernel whose name contains
"crash" and hangs launching one whose name contains "hang". Register it with
DAY0_BACKENDS="faulty=doubles.faulty_backend:FaultyBackend"."""
from __future__ import annotations

import dataclasses
import os
import signal
import time
from typing import Any

from backends.cpu_interp import CpuInterpBackend
from sdk.backend import LoweringTable, Target


class FaultyBackend(CpuInterpBackend):
    name = "faulty"
    target = Target.from_device_model("faulty", "host_cpu")

    def launch(self, kernel: Any, grid: tuple[int, int, int], args: list[Any], stream: Any = None) -> None:
        name = kernel.entry.name
        if "crash" in name:
            os.kill(os.getpid(), signal.SIGSEGV)
        if "hang" in name:
            time.sleep(1e6)
        super().launch(kernel, grid, args, stream)

    def variant(self, arch: str | None = None, compile_only: bool = False) -> CpuInterpBackend:
        if not compile_only:
            return super().variant(arch, compile_only)
        return CompileOnlyFaulty(arch or self.target.arch)


class CompileOnlyFaulty(FaultyBackend):
    """`faulty@ARCH/compile`: compiles as cpu_interp does, launches nothing, reports stats."""

    def __init__(self, arch: str):
        super().__init__()
        self.target = dataclasses.replace(FaultyBackend.target, arch=arch)  # a variant: another arch
        self._stats: list[dict] = []

    def launch(self, kernel: Any, grid: tuple[int, int, int], args: list[Any], stream: Any = None) -> None:
        self._stats.append({"kernel": kernel.entry.name, "arch": self.target.arch, "registers": 8,
                            "spills": 0, "shared_bytes": 0, "grid": list(grid)})

    def take_launch_stats(self) -> list[dict]:
        out, self._stats = self._stats, []
        return out


class NoAddBackend(CpuInterpBackend):
    """cpu_interp whose lowering table refuses arith.addf: every kernel that adds is unsupported."""

    name = "no_addf"
    target = Target.from_device_model("no_addf", "host_cpu")

    def lowering_table(self) -> LoweringTable:
        table = LoweringTable()
        table.update(super().lowering_table())
        table.register("arith.addf", table.get("arith.addf"), dtypes=())  # accepts no types at all
        return table


class ShortExtentBackend(CpuInterpBackend):
    """cpu_interp that maps the first tensor argument of any kernel whose name contains "softmax"
    one element short: a planted out-of-bounds access the bounds check must name."""

    name = "short_extent"
    target = Target.from_device_model("short_extent", "host_cpu")

    def launch(self, kernel: Any, grid: tuple[int, int, int], args: list[Any], stream: Any = None) -> None:
        if "softmax" in kernel.entry.name:
            from sdk.backend import DeviceArg
            k = next(i for i, a in enumerate(args) if isinstance(a, DeviceArg))
            first = args[k]
            cut = max(0, first.nbytes - 4)
            args = [*args[:k], dataclasses.replace(first, nbytes=cut, handle=first.handle[:cut]), *args[k + 1:]]
        super().launch(kernel, grid, args, stream)


_HELD: list = []


class ContainBackend(CpuInterpBackend):
    """cpu_interp misbehaving as DAY0_CONTAIN says, for the runner's containment tests:
    fork   forks a child that sleeps (its pid appended to DAY0_CONTAIN_FILE), then segfaults;
    leak   keeps 120 MB more resident memory per launch;
    oom    raises an out-of-memory error on an item's first attempt (attempts counted in the file);
    probe  reports the CUDA_VISIBLE_DEVICES it runs with in its launch stats; with DAY0_CONTAIN_FILE,
           appends it there and waits (up to 30 s) until two devices are listed, so that one
           worker cannot run every item before the other has started."""

    name = "contain"
    target = Target.from_device_model("contain", "host_cpu")

    def launch(self, kernel: Any, grid: tuple[int, int, int], args: list[Any], stream: Any = None) -> None:
        mode, path = os.environ.get("DAY0_CONTAIN", ""), os.environ.get("DAY0_CONTAIN_FILE", "")
        if mode == "fork":
            child = os.fork()
            if child == 0:
                time.sleep(1e6)
                os._exit(0)
            with open(path, "a") as fh:
                fh.write(f"{child}\n")
            os.kill(os.getpid(), signal.SIGSEGV)
        if mode == "leak":
            block = bytearray(120 << 20)
            block[::4096] = b"\x01" * len(block[::4096])
            _HELD.append(block)
        if mode == "probe" and path:
            with open(path, "a") as fh:
                fh.write(os.environ.get("CUDA_VISIBLE_DEVICES", "") + "\n")
            deadline = time.monotonic() + 30
            while len(set(open(path).read().split())) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
        if mode == "oom":
            key = f"{args[-1]}-{args[0].dtype}"  # size and dtype tell the items apart
            seen = open(path).read().split() if os.path.exists(path) else []
            with open(path, "a") as fh:
                fh.write(key + "\n")
            if key not in seen:
                raise MemoryError("out of memory on the device")
        super().launch(kernel, grid, args, stream)

    def take_launch_stats(self) -> list[dict]:
        if os.environ.get("DAY0_CONTAIN") == "probe":
            return [{"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                     "threads": [os.environ.get(k, "") for k in ("OMP_NUM_THREADS", "DAY0_CPU_THREADS")]}]
        return []


class HalfSoftmaxBackend(CpuInterpBackend):
    """cpu_interp that halves what any kernel whose name contains "softmax" writes to its fp32
    outputs (parameters named out_ptr* or in_out_ptr*): a planted wrong result, no fault."""

    name = "half_softmax"
    target = Target.from_device_model("half_softmax", "host_cpu")

    def launch(self, kernel: Any, grid: tuple[int, int, int], args: list[Any], stream: Any = None) -> None:
        super().launch(kernel, grid, args, stream)
        if "softmax" in kernel.entry.name:
            import numpy as np
            from sdk.backend import DeviceArg
            for a in args:
                if isinstance(a, DeviceArg) and "out_ptr" in a.name and a.dtype == "f32":
                    a.handle.view(np.float32)[:] *= 0.5
