"""Would a kernel fit a device, and how long would it take there.

Fit: the peak on-chip bytes of one program against what one program may use on the device (its
scratchpad or shared memory, plus the register file where the device model lists one), the
grid against the device's limits, and every dtype path (tt.dot operand/accumulator, atomics,
fp64/fp8 arithmetic) against what the device model lists.
Time: a roofline with waves. Memory time = DRAM bytes / DRAM bandwidth, where each tensor argument's
traffic is capped at its size (the floor: every input read once, every output written once, re-reads
served on chip); compute time = flops / the rate of
the unit that does them (matrix by operand and accumulator dtype, vector by dtype, special
functions); programs run in waves of `units`, so a partial last wave costs a whole one; plus the
device's launch overhead per launch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..device_models.records import DeviceModel
from .analysis import LaunchCounts


@dataclass
class Prediction:
    time_s: float
    fits: bool
    why: list[str] = field(default_factory=list)
    bound: str = ""              # "memory", "compute", or "launch"
    bytes: float = 0.0
    flops: float = 0.0
    programs: int = 0
    footprint_bytes: int = 0
    estimated: bool = False

    def as_dict(self) -> dict:
        return {"time_s": self.time_s, "fits": self.fits, "why": self.why, "bound": self.bound,
                "bytes": self.bytes, "flops": self.flops, "programs": self.programs,
                "footprint_bytes": self.footprint_bytes, "estimated": self.estimated}


def _rate(device: DeviceModel, unit: str, dtype: str, acc: str) -> float | None:
    if unit == "matrix":
        return device.matrix_flops_per_s(dtype, acc)
    if unit == "special":
        return device.special_function_ops_per_s or device.vector_flops_per_s("fp32")
    return device.vector_flops_per_s(dtype) or (device.vector_flops_per_s("fp32")
                                                if dtype in ("bf16", "fp16", "fp8e4m3", "fp8e5m2") else None)


def predict_launch(c: LaunchCounts, device: DeviceModel) -> Prediction:
    why: list[str] = []
    budget = device.program_on_chip_bytes
    if budget and c.footprint_bytes > budget:
        why.append(f"{c.kernel}: one program needs {c.footprint_bytes / 1024:.0f} KiB on chip, "
                   f"{budget / 1024:.0f} KiB available")
    for axis, (n, cap) in enumerate(zip(c.grid, device.max_grid)):
        if n > cap:
            why.append(f"{c.kernel}: grid axis {'xyz'[axis]} = {n} exceeds the device limit {cap}")
    for operand, acc in sorted(c.dot_types):
        if not device.supports_dot(operand, acc):
            why.append(f"{c.kernel}: no matrix-unit path for tt.dot({operand} -> {acc})")
    for op, dtype in sorted(c.atomics):
        if not device.supports_atomic(op, dtype):
            why.append(f"{c.kernel}: no atomic {op} on {dtype}")
    for dtype in sorted(c.dtypes):
        if not device.supports(dtype):
            why.append(f"{c.kernel}: computes in {dtype}, which the device does not support")
    programs = max(c.programs, 1)
    units = max(device.units, 1)
    waves = math.ceil(programs / units)
    occupancy = programs / (waves * units)
    total_bytes = c.dram_bytes()
    t_mem = total_bytes / device.dram_bytes_per_s
    t_comp = 0.0
    total_flops = 0.0
    for (unit, dtype, acc), per_program in c.flops.items():
        rate = _rate(device, unit, dtype, acc)
        total_flops += per_program * programs
        if rate:
            t_comp += per_program * programs / rate
    t_comp /= occupancy
    overhead = device.launch_overhead_s or 0.0
    time_s = max(t_mem, t_comp) + overhead
    bound = "launch" if overhead > max(t_mem, t_comp) else ("memory" if t_mem >= t_comp else "compute")
    return Prediction(time_s, not why, why, bound, total_bytes, total_flops, programs, c.footprint_bytes,
                      c.estimated)


def predict(launches: list[LaunchCounts], device: DeviceModel) -> Prediction:
    """A kernel's launches (one case) on one device: times add up, every check must pass."""
    parts = [predict_launch(c, device) for c in launches]
    if not parts:
        return Prediction(0.0, True, ["launches no kernel"])
    return Prediction(
        time_s=sum(p.time_s for p in parts), fits=all(p.fits for p in parts),
        why=[w for p in parts for w in p.why],
        bound=max(parts, key=lambda p: p.time_s).bound, bytes=sum(p.bytes for p in parts),
        flops=sum(p.flops for p in parts), programs=max(p.programs for p in parts),
        footprint_bytes=max(p.footprint_bytes for p in parts), estimated=any(p.estimated for p in parts))
