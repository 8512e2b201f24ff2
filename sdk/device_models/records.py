"""Typed, frozen records a device model YAML file is loaded into.

Every figure is a `Figure`: a value plus the source it came from. Units are in the field names
(`clock_mhz`, `sram_kib`, `bandwidth_gb_per_s`, `tflop_per_s` ...); `DeviceModel` adds accessors in
SI units (bytes, bytes/s, FLOP/s, seconds) for the simulator and the reports.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Mapping, TypeVar

from .dtypes import FP8_DTYPES, canonical_dtype

T = TypeVar("T")

#: Dtypes every device can load, store and compute with on its vector unit (possibly emulated);
#: fp64, bf16 and the fp8 family depend on the model's `features`.
BASE_DTYPES = ("fp32", "fp16", "int1", "int8", "int16", "int32", "int64",
               "uint8", "uint16", "uint32", "uint64")


@dataclass(frozen=True)
class Figure(Generic[T]):
    """One published, derived, measured or assumed figure and where it comes from."""

    value: T
    source: str
    note: str = ""
    datasheet: Figure[T] | None = None  # the datasheet figure when `value` is a measured ceiling
    measured: Figure[T] | None = None   # a ceiling measured on the device, kept beside the datasheet value

    @property
    def source_kind(self) -> str:
        """'datasheet' (a URL), 'derived', 'measured' or 'assumed'."""
        s = self.source.lower()
        if s.startswith(("http://", "https://")):
            return "datasheet"
        for kind in ("derived", "measured", "assumed"):
            if s.startswith(kind):
                return kind
        return "other"


@dataclass(frozen=True)
class Compute:
    unit_name: str               # what the vendor calls one compute unit: SM, CU, Tensix, TPC ...
    units: Figure[int]
    clock_mhz: Figure[float]


@dataclass(frozen=True)
class UnitMemory:
    """On-chip memory private to one compute unit (shared memory, LDS, scratchpad)."""

    kind: str
    sram_kib: Figure[float]
    max_per_program_kib: Figure[float] | None = None
    registers_kib: Figure[float] | None = None  # register file (GPUs keep tiles there too)


@dataclass(frozen=True)
class SharedMemory:
    """On-chip memory shared by all units (L2, last-level cache, global buffer)."""

    kind: str
    sram_mib: Figure[float]


@dataclass(frozen=True)
class Dram:
    kind: str
    bandwidth_gb_per_s: Figure[float]
    size_gb: Figure[float]


@dataclass(frozen=True)
class Memory:
    per_unit: UnitMemory
    dram: Dram
    shared: SharedMemory | None = None


@dataclass(frozen=True)
class VectorUnit:
    lanes_per_unit: Figure[int]               # 32-bit lanes per compute unit
    tflop_per_s: Mapping[str, Figure[float]]  # dtype -> whole-device rate


@dataclass(frozen=True)
class MatrixUnit:
    tile_mnk: Figure[tuple[int, int, int]]
    tflop_per_s: Mapping[tuple[str, str], Figure[float]]  # (operand, accumulator) -> rate


@dataclass(frozen=True)
class SpecialFunction:
    """Transcendentals (exp, log, rsqrt, sin ...)."""

    gop_per_s: Figure[float]


@dataclass(frozen=True)
class Grid:
    max_programs: Figure[tuple[int, int, int]]
    bound_to_cores: Figure[bool]


@dataclass(frozen=True)
class Atomics:
    ops: Mapping[str, Figure[tuple[str, ...]]]  # op ("add", "cas" ...) -> dtypes


@dataclass(frozen=True)
class Features:
    fp64: Figure[bool]
    fp8: Figure[bool]
    bf16: Figure[bool]


@dataclass(frozen=True)
class Alignment:
    vector_bytes: Figure[int]
    matrix_bytes: Figure[int]
    allocation_bytes: Figure[int]


#: host work a launch wrapper does around its launches, each timed alone on the host that drives
#: the device (benchmarks/sim_probe_host.py): an empty Triton launch, the wrapper asking the driver
#: for device properties, asking the target for its fp8 types, a tensor built from host data (a
#: pageable copy), a value read back, another small PyTorch kernel
HOST_COSTS = ("launch", "property_query", "target_query", "copy_from_host", "read_back", "torch_kernel")


@dataclass(frozen=True)
class Launch:
    overhead_us: Figure[float]
    #: HOST_COSTS name -> microseconds, measured on the host and runtime that drive the device
    host_us: Mapping[str, Figure[float]] | None = None


@dataclass(frozen=True)
class TritonTarget:
    backend: Figure[str] | None = None   # Triton's GPUTarget.backend ("cuda", "hip")
    arch: Figure[str] | None = None      # "sm_90", "gfx942"
    warp_size: Figure[int] | None = None


@dataclass(frozen=True)
class DeviceModel:
    """A whole device. Load one with `sdk.device_models.load(name_or_path)`."""

    name: str
    display_name: str
    vendor: str
    kind: str          # gpu | npu | tpu | cpu
    fictional: bool
    summary: str
    compute: Compute
    memory: Memory
    vector: VectorUnit
    matrix: MatrixUnit | None
    special_function: SpecialFunction
    grid: Grid
    atomics: Atomics
    features: Features
    alignment: Alignment
    launch: Launch
    triton: TritonTarget | None
    path: str = ""

    def __hash__(self) -> int:
        return hash((self.name, self.path))

    # ---- compute -------------------------------------------------------------------------------
    @property
    def units(self) -> int:
        return self.compute.units.value

    @property
    def clock_hz(self) -> float:
        return self.compute.clock_mhz.value * 1e6

    def matrix_flops_per_s(self, operand: str, acc: str | None = None) -> float | None:
        """Matrix-unit FLOP/s for (operand dtype, accumulator dtype); the best accumulator when
        `acc` is None; None when the matrix unit does not take that combination."""
        if self.matrix is None:
            return None
        op = canonical_dtype(operand)
        if acc is not None:
            fig = self.matrix.tflop_per_s.get((op, canonical_dtype(acc)))
            return None if fig is None else fig.value * 1e12
        rates = [f.value for (o, _), f in self.matrix.tflop_per_s.items() if o == op]
        return max(rates) * 1e12 if rates else None

    def vector_flops_per_s(self, dtype: str) -> float | None:
        """Vector-unit FLOP/s (or op/s for integers) for `dtype`; None when no rate is given."""
        fig = self.vector.tflop_per_s.get(canonical_dtype(dtype))
        return None if fig is None else fig.value * 1e12

    def peak_flops_per_s(self, dtype: str) -> float:
        """The best of matrix and vector rates for `dtype` (0.0 when neither is given)."""
        rates = [r for r in (self.matrix_flops_per_s(dtype), self.vector_flops_per_s(dtype)) if r]
        return max(rates, default=0.0)

    @property
    def special_function_ops_per_s(self) -> float:
        return self.special_function.gop_per_s.value * 1e9

    # ---- memory --------------------------------------------------------------------------------
    @property
    def dram_bytes_per_s(self) -> float:
        return self.memory.dram.bandwidth_gb_per_s.value * 1e9

    @property
    def dram_bytes(self) -> int:
        return int(self.memory.dram.size_gb.value * 1e9)

    @property
    def on_chip_bytes_per_unit(self) -> int:
        return int(self.memory.per_unit.sram_kib.value * 1024)

    @property
    def max_program_bytes(self) -> int:
        """On-chip bytes one program may use (the per-program limit, else the whole unit)."""
        limit = self.memory.per_unit.max_per_program_kib
        return int(limit.value * 1024) if limit else self.on_chip_bytes_per_unit

    @property
    def program_on_chip_bytes(self) -> int:
        """What one program's live tiles may occupy: its on-chip memory plus, on devices that keep
        tiles in registers (GPUs), the unit's register file."""
        regs = self.memory.per_unit.registers_kib
        return self.max_program_bytes + (int(regs.value * 1024) if regs else 0)

    @property
    def shared_on_chip_bytes(self) -> int:
        shared = self.memory.shared
        return int(shared.sram_mib.value * 1024 * 1024) if shared else 0

    @property
    def total_on_chip_bytes(self) -> int:
        return self.units * self.on_chip_bytes_per_unit + self.shared_on_chip_bytes

    # ---- grid, launch, alignment ---------------------------------------------------------------
    @property
    def max_grid(self) -> tuple[int, int, int]:
        return self.grid.max_programs.value

    @property
    def grid_bound_to_cores(self) -> bool:
        return self.grid.bound_to_cores.value

    @property
    def launch_overhead_s(self) -> float:
        return self.launch.overhead_us.value * 1e-6

    @property
    def host_launch_s(self) -> float:
        """An empty launch as measured on the host and runtime that drive the device, where the
        model keeps one (a property of that host, its CPU and driver, as much as of the device);
        else the launch overhead figure."""
        o = self.launch.overhead_us
        return (o.measured.value if o.measured is not None else o.value) * 1e-6

    @property
    def host_costs_s(self) -> dict[str, float]:
        """Seconds of each piece of host work (HOST_COSTS) measured on the host that drives the
        device, where the model keeps them; empty where it keeps none."""
        host = self.launch.host_us or {}
        return {k: fig.value * 1e-6 for k, fig in host.items()}

    @property
    def warp_size(self) -> int | None:
        return self.triton.warp_size.value if self.triton and self.triton.warp_size else None

    # ---- dtypes --------------------------------------------------------------------------------
    def supports(self, dtype: str) -> bool:
        """Whether the device can compute with `dtype` at all (on any unit, possibly emulated).

        fp64 and bf16 follow `features`; an fp8 variant needs `features.fp8` and, when the rate
        tables name fp8 variants, one of those; any other dtype is supported when it is a base
        dtype or appears in a rate table."""
        d = canonical_dtype(dtype)
        listed = set(self.vector.tflop_per_s)
        if self.matrix is not None:
            listed |= {o for o, _ in self.matrix.tflop_per_s} | {a for _, a in self.matrix.tflop_per_s}
        if d == "fp64":
            return self.features.fp64.value
        if d == "bf16":
            return self.features.bf16.value
        if d in FP8_DTYPES:
            named = listed & set(FP8_DTYPES)
            return self.features.fp8.value and (not named or d in named)
        return d in BASE_DTYPES or d in listed

    def supports_dot(self, operand: str, acc: str) -> bool:
        """Whether the matrix unit takes this (operand, accumulator) pair."""
        return self.matrix_flops_per_s(operand, acc) is not None

    def supports_atomic(self, op: str, dtype: str) -> bool:
        fig = self.atomics.ops.get(op)
        return fig is not None and canonical_dtype(dtype) in fig.value

    @property
    def peak_bf16_tflop_per_s(self) -> float:
        return self.peak_flops_per_s("bf16") / 1e12

