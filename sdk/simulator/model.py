"""Would a kernel fit a device, and how long would it take there.

Fit: what one program keeps on chip as the target's compiler allocates it (sdk.simulator.onchip:
staged dot operands times the pipelining depth, scratch; on a scratchpad device every live tile)
against what one program may use (shared memory or scratchpad); the grid against the device's
limits; every dtype path (tt.dot operand/accumulator, atomics, fp64/fp8 arithmetic) against what
the device model lists. A GPU program whose tiles outgrow the register file still runs (the compiler
spills): that is a note, not a verdict.
Time: sdk.simulator.timing, from the device's datasheet figures and the learned efficiencies
(efficiencies.json); the launches of one call share L2 (a later launch reads what an earlier one
wrote from it).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..device_models.records import DeviceModel
from .analysis import LaunchCounts
from .onchip import staging_for
from .timing import Efficiencies, launch_time

EFFICIENCIES = Path(__file__).with_name("efficiencies.json")


@dataclass
class Prediction:
    time_s: float
    fits: bool
    why: list[str] = field(default_factory=list)
    bound: str = ""              # "memory", "matrix", "vector", "latency", "programs", "launch", "torch" or "host"
    bytes: float = 0.0           # DRAM bytes
    flops: float = 0.0
    programs: int = 0
    footprint_bytes: int = 0     # peak live tile bytes of one program (registers + on-chip memory)
    shared_bytes: int = 0        # what one program keeps in shared memory / the scratchpad
    estimated: bool = False
    notes: list[str] = field(default_factory=list)
    terms: dict = field(default_factory=dict)
    #: whence the programs a unit holds at once: "compiled" (what the target's compiler allocated
    #: for every launch), "estimated" (from the launches' tiles), "mixed", or "" off GPUs
    occupancy: str = ""
    #: the device's own busy time: the launches and the PyTorch kernels a wrapper runs, without
    #: the host work that may keep the device waiting (time_s is the longer of the two)
    device_s: float = 0.0
    device_bound: str = ""       # the bound of device_s: a launch's bound, or "torch"

    def as_dict(self) -> dict:
        return {"time_s": self.time_s, "fits": self.fits, "why": self.why, "bound": self.bound,
                "bytes": self.bytes, "flops": self.flops, "programs": self.programs,
                "footprint_bytes": self.footprint_bytes, "shared_bytes": self.shared_bytes,
                "estimated": self.estimated, "notes": self.notes,
                "terms": {k: v for k, v in self.terms.items()}, "occupancy": self.occupancy,
                "device_s": self.device_s, "device_bound": self.device_bound}


def load_efficiencies(path: Path | None = None) -> Efficiencies:
    """The learned efficiencies (the shipped file unless `path`); defaults where none is stored."""
    p = Path(path) if path else EFFICIENCIES
    if not p.exists():
        return Efficiencies()
    data = json.loads(p.read_text())
    return Efficiencies.from_dict(data.get("efficiencies", data))


_DEFAULT: list = []


def _default_eff() -> Efficiencies:
    if not _DEFAULT:
        _DEFAULT.append(load_efficiencies())
    return _DEFAULT[0]


def fit_reasons(c: LaunchCounts, device: DeviceModel, shared: int) -> list[str]:
    why: list[str] = []
    budget = device.max_program_bytes
    if budget and shared > budget:
        where = "shared memory" if device.memory.per_unit.registers_kib else "on-chip memory"
        why.append(f"{c.kernel}: one program needs {shared / 1024:.0f} KiB of {where}, "
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
    return why


def predict_launch(c: LaunchCounts, device: DeviceModel, eff: Efficiencies | None = None,
                   l2_resident: dict | None = None) -> Prediction:
    eff = eff or _default_eff()
    st = staging_for(device)
    t = launch_time(c, device, eff, l2_resident, st)
    why = fit_reasons(c, device, t.shared_bytes)
    notes = list(t.notes)
    regs = device.memory.per_unit.registers_kib
    if st.gpu and regs and c.footprint_bytes > t.shared_bytes + regs.value * 1024:
        notes.append(f"{c.kernel}: {c.footprint_bytes / 1024:.0f} KiB of live tiles exceed the register file: "
                     "the compiler spills")
    total_flops = sum(v for (_, dtype, _), v in c.flops.items()
                      if not dtype.startswith(("int", "uint"))) * max(c.programs, 1)
    return Prediction(t.time_s, not why, why, t.bound, t.dram_bytes, total_flops, c.programs,
                      c.footprint_bytes, t.shared_bytes, c.estimated, notes, dict(t.terms), t.occupancy,
                      device_s=t.time_s, device_bound=t.bound)


def predict(launches: list[LaunchCounts], device: DeviceModel, eff: Efficiencies | None = None) -> Prediction:
    """A kernel's launches (one case) on one device: times add up, every check must pass; the
    launches share L2."""
    eff = eff or _default_eff()
    resident: dict = {}
    parts = [predict_launch(c, device, eff, resident) for c in launches]
    if not parts:
        return Prediction(0.0, True, ["launches no kernel"])
    terms: dict = {}
    for p in parts:
        for k, v in p.terms.items():
            terms[k] = terms.get(k, 0.0) + v
    host = getattr(launches, "host", None)
    torch_s = torch_device_time(host, device, eff)
    device_s = sum(p.time_s for p in parts) + torch_s
    host_s = host_time(host, len(parts), eff, device)
    terms["torch"] = torch_s
    terms["host"] = host_s
    device_bound = "torch" if torch_s > max(p.time_s for p in parts) else max(parts, key=lambda p: p.time_s).bound
    bound = "host" if host_s > device_s else device_bound
    return Prediction(
        time_s=max(device_s, host_s), fits=all(p.fits for p in parts),
        why=[w for p in parts for w in p.why],
        bound=bound, bytes=sum(p.bytes for p in parts),
        flops=sum(p.flops for p in parts), programs=max(p.programs for p in parts),
        footprint_bytes=max(p.footprint_bytes for p in parts), shared_bytes=max(p.shared_bytes for p in parts),
        estimated=any(p.estimated for p in parts), notes=sorted({n for p in parts for n in p.notes}),
        terms=terms, occupancy=_occupancy(parts), device_s=device_s, device_bound=device_bound)


def _occupancy(parts: list[Prediction]) -> str:
    kinds = {p.occupancy for p in parts}
    return kinds.pop() if len(kinds) == 1 else "mixed"


def host_scale(device: DeviceModel, eff: Efficiencies) -> float:
    """How much longer fixed per-launch costs take on the host that drives `device` than on the
    calibration GPU's host: the ratio of an empty launch measured on each (DeviceModel.host_launch_s
    against `launch_reference_s`). The host costs (host_*), the launch floor and a PyTorch kernel's
    fixed device time scale by it: they are the host's and the runtime's, not the datasheet's."""
    return device.host_launch_s / eff.launch_reference_s if eff.launch_reference_s else 1.0


def host_time(host, launches: int, eff: Efficiencies, device: DeviceModel | None = None) -> float:
    """Host seconds of one call: each launch's argument binding and driver call, each question the
    launch wrapper asks the driver, each copy between host and device (a pageable copy waits for
    the host) and each other PyTorch kernel it launches (`host`: sdk.simulator.run.HostWork;
    without it, launches only). Views and allocations cost the host about a microsecond each: not
    counted.

    Each piece costs what the device model measured on the host that drives `device`
    (DeviceModel.host_costs_s: benchmarks/sim_probe_host.py), and where it measured none, the cost
    learned on the calibration GPU's host (`host_*`) scaled by host_scale. The learned costs lump
    values read back with copies from the host, and count as other kernels the kernels less those
    copies (one too few per value read back), as they were learned."""
    n = host.launches if host is not None else launches
    queries = host.property_queries if host is not None else 0
    targets = host.target_queries if host is not None else 0
    kernels = getattr(host, "torch_kernels", 0) if host is not None else 0
    copies = getattr(host, "torch_copies", 0) if host is not None else 0
    reads = getattr(host, "torch_reads", 0) if host is not None else 0
    measured = device.host_costs_s if device is not None else {}
    scale = host_scale(device, eff) if device is not None else 1.0

    def cost(name: str, learned: float) -> float:
        return measured[name] if name in measured else learned * scale

    if not measured:
        return scale * (n * eff.host_launch_s + queries * eff.host_query_s + targets * eff.host_target_s
                        + max(kernels - copies, 0) * eff.host_torch_op_s + copies * eff.host_copy_s)
    from_host = max(copies - reads, 0)  # each also counted among the kernels
    return (n * cost("launch", eff.host_launch_s) + queries * cost("property_query", eff.host_query_s)
            + targets * cost("target_query", eff.host_target_s) + from_host * cost("copy_from_host", eff.host_copy_s)
            + reads * cost("read_back", eff.host_copy_s)
            + max(kernels - from_host, 0) * cost("torch_kernel", eff.host_torch_op_s))


def torch_device_time(host, device: DeviceModel, eff: Efficiencies) -> float:
    """Device seconds of the PyTorch kernels a wrapper runs on the launches' stream (`host`:
    sdk.simulator.run.HostWork): a fixed cost each, scaled by the device's launch overhead as the
    launch floor is, and their bytes at the contiguous DRAM efficiency."""
    kernels = getattr(host, "torch_kernels", 0) if host is not None else 0
    if not kernels:
        return 0.0
    scale = host_scale(device, eff)
    nbytes = getattr(host, "torch_bytes", 0)
    return kernels * eff.torch_kernel_s * scale + nbytes / (device.dram_bytes_per_s * eff.dram.get("contiguous", 0.85))


def relative_error(predicted: float, measured: float) -> float:
    """|log(predicted / measured)| as a percentage: 10% means 1.1x either way."""
    return 100 * (math.exp(abs(math.log(predicted / measured))) - 1)
