"""How long one launch takes on a device: a tile model for dots, DRAM traffic with L2 reuse, access
patterns, and a latency floor, scaled by a few efficiencies learned on a real GPU.

Every rate comes from the device model's datasheet figures; `Efficiencies` (efficiencies.json,
learned from GPU runs by benchmarks/sim_validate.py) says which fraction of each a Triton kernel
reaches. Terms, for a launch of P programs on U units holding R programs each (R from the registers
and shared memory the target's compiler allocated for the launch, where the target compiles here:
sdk.simulator.compiled; else from the shared memory the launch stages and its live tiles):

- matrix: each tt.dot padded up to the matrix unit's instruction shape (`matrix.tile_mnk`), at the
  unit's rate for its operand and accumulator dtypes; a unit works through its ceil(P / U)
  programs one after another, so a grid smaller than the device leaves units idle. A dtype the unit
  has no rate for runs at the nearest wider rate it has (fp8 at bf16/fp16, tf32 at fp32) or on the
  vector unit, and the prediction says so: the flops are never dropped.
- vector and special functions likewise, at the vector and special-function rates: two pipes that
  overlap, every operation of either taking an issue slot of the vector path (so the longer of the
  vector path, special operations included, and the special-function pipe); boolean mask logic
  takes half a slot (MASK_OP_ISSUE: three-input logic instructions fold two).
- memory: each argument's traffic, its re-reads served by L2 while what the concurrently running
  programs touch fits in it, bytes an earlier launch of the same call wrote and L2 still holds read
  from L2, split by access pattern (contiguous, strided, indirect) with an efficiency per pattern;
  at least the time its stride-2 accesses (interleaved pairs) take one element at a time, at rates
  measured on the calibration GPU (strided_element_time).
- a program's serial path: its compute chain -- vector work at the issue rate of its own warps (a
  one-warp program uses 32 lanes of a unit), the latency of each dot that waits on a value the
  program just computed (its own latency where that value goes through shared memory, as a dot's
  second operand does) and of each reduction or scan across its lanes -- or the rounds of loads
  that a pipelined dot loop keeps in flight (num_stages - 1 iterations at a time), whichever is
  longer, plus the DRAM latency of every other round of dependent loads (a loop's loads issue
  together each iteration; the compute that needs them waits), plus a fixed cost per program; the
  programs a unit holds at once overlap, so per wave.
- program starts: a unit takes on its programs one at a time at a bounded rate, whatever each does
  (`program_start_s` a program): what a launch of a million short programs waits on.
- the launch floor: fixed cost per launch (launch, first wave ramp, last wave drain), learned on
  the calibration GPU and scaled by an empty launch measured on the device's host against one
  measured on that GPU's (DeviceModel.host_launch_s; the launch overhead where none was measured).
time = floor + max(memory, matrix + vector, serial, program starts); within a program the vector work between dots
(attention's softmax) does not overlap them, and runs at a further learned fraction of the vector and
special-function rates (`vector_between_dots`: the matrix unit waits on it, in programs holding few
warps per unit).

A call (sdk.simulator.model.predict) is its launches one after another, plus the PyTorch kernels its
wrapper runs (each a fixed cost and its bytes at the contiguous DRAM efficiency), or its host work
where that takes longer: the device idles while the host binds each launch's arguments and answers the launch
wrapper's questions to the driver (device properties, the target's compiler options), each at a
learned cost (`host_*`) on the calibration GPU's host; the same host code takes longer or shorter on
another host as an empty launch does there (sdk.simulator.model.host_scale), unless the device model
keeps host figures measured on its own host (sdk.simulator.model.host_time)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from ..device_models.records import DeviceModel
from .analysis import LaunchCounts
from .compiled import allocation
from .compiled import programs_per_unit as compiled_programs_per_unit
from .onchip import Staging, dot_path, shared_bytes, staging_for, stages_of, warps_of

#: what a device's threads per unit are when the model does not say (NVIDIA and AMD: 2048)
THREADS_PER_UNIT = 2048
MAX_PROGRAMS_PER_UNIT = 32
MIN_REGISTER_BYTES_PER_THREAD = 128   # 32 registers of 4 bytes
#: the element stride whose loads and stores an access-pattern probe measured (interleaved pairs)
PROBED_STRIDE = 2
#: mma.sync's shape for 16-bit operands: what a dot too small for wgmma/tcgen05 is padded to
MMA_SYNC_TILE = (16, 8, 16)


@dataclass(frozen=True)
class Efficiencies:
    """Fractions of datasheet rates a Triton kernel reaches, and two latencies (learned data)."""

    dram: dict = field(default_factory=lambda: {"contiguous": 0.85, "strided": 0.5, "indirect": 0.6, "scalar": 0.5})
    matrix: dict = field(default_factory=lambda: {"8": 0.6, "16": 0.7, "32": 0.6, "64": 0.7})
    vector: float = 0.5
    special: float = 0.5
    dram_latency_s: float = 8e-7
    vector_between_dots: float = 1.0  # the vector and special rates' further fraction between dots
    # element-strided loads and stores per unit per clock, measured (0: not known, no such floor)
    strided_loads_per_clock: float = 0.0
    strided_stores_per_clock: float = 0.0
    warp_ipc: float = 0.5            # vector instructions a warp issues per clock on its serial path
    program_overhead_s: float = 2e-7  # a program's start and end on a unit
    program_start_s: float = 0.0      # a unit takes on one program at most this often (0: no such limit)
    dot_latency_s: float = 2e-7       # a dot waiting on a value the program just computed (in registers)
    dot_shared_latency_s: float = 4e-7  # ... one whose computed operand goes through shared memory
    reduce_latency_s: float = 1e-7    # a reduction or scan across the lanes of a program
    launch_floor_s: float = 3e-6     # per launch on the calibration device ...
    launch_reference_s: float = 5e-6  # an empty launch on the calibration GPU's host (fixed costs scale by it)
    host_launch_s: float = 5e-6       # host work of one Triton launch (argument binding, the driver call)
    host_query_s: float = 5e-4        # a launch wrapper asking the driver for device properties
    host_target_s: float = 5e-5       # a launch wrapper asking for the target and its compiler options
    torch_kernel_s: float = 2e-6      # device time of one PyTorch kernel a wrapper runs, besides its bytes
    host_torch_op_s: float = 3e-6     # host work of one PyTorch operation a wrapper runs
    host_copy_s: float = 1e-5         # a copy from pageable host memory, or a value read back to the host
    source: str = "defaults"

    def as_dict(self) -> dict:
        return {f.name: _copy(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: dict) -> "Efficiencies":
        """The stored figures over the defaults: rate tables merged key by key, numbers as floats,
        the source as stored ("" when it says none)."""
        base, kw = cls(), {}
        for f in fields(cls):
            default = getattr(base, f.name)
            if isinstance(default, dict):
                kw[f.name] = {**default, **d.get(f.name, {})}
            elif isinstance(default, str):
                kw[f.name] = str(d.get(f.name, ""))
            else:
                kw[f.name] = float(d.get(f.name, default))
        return cls(**kw)


def _copy(value):
    return dict(value) if isinstance(value, dict) else value


@dataclass
class LaunchTime:
    time_s: float
    bound: str                      # memory | matrix | vector | latency | launch
    terms: dict                     # seconds of each term
    dram_bytes: float
    l2_bytes: float
    padded_flops: float
    programs_per_unit: int
    shared_bytes: int
    notes: list
    occupancy: str = ""             # whence programs_per_unit: "compiled", "estimated" ("" off GPUs)


def _bits(dtype: str) -> str:
    if dtype in ("fp32", "tf32", "int32"):
        return "32"
    if dtype == "fp64":
        return "64"
    return "8" if dtype.startswith(("fp8", "int8", "uint8", "fp4")) else "16"


def matrix_rate(device: DeviceModel, operand: str, acc: str) -> tuple[float, str]:
    """FLOP/s for a dot on the device's matrix unit, the path it takes when the unit lacks the
    dtype, and a note saying so ('' when the unit has it)."""
    exact = device.matrix_flops_per_s(operand, acc) or device.matrix_flops_per_s(operand)
    if exact:
        return exact, ""
    fallbacks = {"fp8e4m3": ("bf16", "fp16"), "fp8e5m2": ("bf16", "fp16"), "fp8e4m3fnuz": ("bf16", "fp16"),
                 "fp8e5m2fnuz": ("bf16", "fp16"), "fp8e4b15": ("bf16", "fp16"), "int8": ("bf16", "fp16"),
                 "tf32": ("fp32",), "fp16": ("bf16",), "bf16": ("fp16",), "fp32": ("tf32",)}
    for alt in fallbacks.get(operand, ()):
        r = device.matrix_flops_per_s(alt)
        if r:
            return r, f"no matrix-unit rate for {operand} operands: counted at the {alt} rate (upcast)"
    vec = device.vector_flops_per_s("fp32") or device.vector_flops_per_s(operand) or 1e12
    return vec, f"no matrix unit for {operand} operands: counted at the fp32 vector rate"


def vector_rate(device: DeviceModel, dtype: str) -> float:
    return (device.vector_flops_per_s(dtype) or device.vector_flops_per_s("fp32")
            or max(device.vector.tflop_per_s[k].value for k in device.vector.tflop_per_s) * 1e12)


def programs_per_unit(c: LaunchCounts, device: DeviceModel, st: Staging, smem: int) -> tuple[int, str]:
    """How many programs one unit holds at once (shared memory, registers, threads), and whence:
    "compiled" from what the target's compiler allocated for this launch (sdk.simulator.compiled:
    registers per thread and shared memory of a real compile), "estimated" from the launch's
    staged shared memory and live tiles where the target cannot be compiled here, "" on a device
    that runs one program per core."""
    if not st.gpu or device.grid_bound_to_cores:
        return 1, ""
    alloc = allocation(getattr(c, "ttir", ""), c.num_warps, c.num_stages, device)
    if alloc is not None:
        return compiled_programs_per_unit(alloc, device), "compiled"
    limits = [MAX_PROGRAMS_PER_UNIT]
    if smem > 0:
        limits.append(device.on_chip_bytes_per_unit // smem)
    threads = warps_of(c, st) * st.warp_size
    limits.append(THREADS_PER_UNIT // max(threads, 1))
    regs = device.memory.per_unit.registers_kib
    if regs:
        need = max(threads * MIN_REGISTER_BYTES_PER_THREAD, c.footprint_bytes)
        limits.append(int(regs.value * 1024) // max(need, 1))
    return max(1, min(limits)), "estimated"


def launch_time(c: LaunchCounts, device: DeviceModel, eff: Efficiencies, l2_resident: dict | None = None,
                st: Staging | None = None) -> LaunchTime:
    """Time of one launch. `l2_resident`: {(address, nbytes)} ranges earlier launches of the same
    call wrote and L2 may still hold (updated with what this launch writes)."""
    st = st or staging_for(device)
    notes: list[str] = []
    P = max(c.programs, 1)
    U = max(device.units, 1)
    smem = shared_bytes(c, st)
    R, occupancy = programs_per_unit(c, device, st, smem)
    slots = U * R
    waves = math.ceil(P / slots)
    per_unit = math.ceil(P / U)  # programs each unit works through, one after another at full rate

    # ---- compute -------------------------------------------------------------------------------
    t_mx, padded_total = 0.0, 0.0
    tm, tn, tk = device.matrix.tile_mnk.value if device.matrix else (1, 1, 1)
    warps = warps_of(c, st)
    # vector operations per program decoding microscaled dot operands: issued by the program's own
    # warps between its loads and the dot that waits for them, so on its serial path (below)
    decode = 0.0
    for d in c.dots.values():
        if d.execs <= 0:
            continue
        fallback = st.gpu and st.path in ("wgmma", "tcgen05") and dot_path(d, st, warps) == "mma"
        gm, gn, gk = MMA_SYNC_TILE if fallback else (tm, tn, tk)
        pm, pn, pk = (math.ceil(d.m / gm) * gm, math.ceil(d.n / gn) * gn, math.ceil(d.k / gk) * gk)
        padded = 2.0 * d.batch * pm * pn * pk * d.execs
        operand, per_exec = scaled_path(device, d)
        decode += per_exec * d.execs
        rate, note = matrix_rate(device, operand, d.acc)
        if note:
            notes.append(note)
        key = _bits(operand)
        e = eff.matrix.get(key, 0.7)
        if fallback:
            e *= eff.matrix.get("sync_on_async", 0.6)  # a dot that cannot use the asynchronous path
        padded_total += padded * P
        t_mx += per_unit * padded / (rate * e / U)
    matrix_flops = sum(v for (unit, _, _), v in c.flops.items() if unit == "matrix")
    if not c.dots and matrix_flops:  # dots the walk could not place (a called function)
        for (unit, operand, acc), v in c.flops.items():
            if unit == "matrix":
                rate, note = matrix_rate(device, operand, acc)
                t_mx += per_unit * v / (rate * eff.matrix.get(_bits(operand), 0.7) / U)
                padded_total += v * P
    t_vec = t_sp = 0.0
    # vector work in a program that also runs dots sits between them (attention's softmax and
    # rescaling): the matrix unit idles meanwhile, and it runs at its own learned fraction
    between = eff.vector_between_dots if t_mx > 0 else 1.0
    for (unit, dtype, _), v in c.flops.items():
        if unit not in ("vector", "special"):
            continue
        # every elementwise operation takes issue slots on the vector path; a special one also
        # runs on the special-function unit, a pipe of its own beside it (the two overlap)
        t_vec += per_unit * issue_ops(unit, dtype, v) / (vector_rate(device, dtype) * eff.vector * between / U)
        if unit == "special":
            rate = device.special_function_ops_per_s or vector_rate(device, "fp32")
            t_sp += per_unit * v / (rate * eff.special * between / U)

    # ---- memory --------------------------------------------------------------------------------
    dram, l2_hit = _traffic(c, device, slots, l2_resident)
    raw = sum(c.access.values()) or 1.0
    bw = device.dram_bytes_per_s
    t_mem = sum(dram * share / raw / (bw * eff.dram.get(kind, 0.7)) for kind, share in c.access.items()) \
        if c.access else dram / (bw * eff.dram.get("contiguous", 0.85))
    if l2_hit:
        t_mem += l2_hit / (bw * 3.0)  # L2 serves a few times DRAM bandwidth
    t_mem = max(t_mem, strided_element_time(c, device, eff, per_unit))

    # ---- a program's serial path ----------------------------------------------------------------
    stages = stages_of(c, st)
    piped, other = _latency_rounds(c, stages)
    vec_ops = sum(issue_ops(unit, dtype, v) for (unit, dtype, _), v in c.flops.items()
                  if unit in ("vector", "special")) + decode
    lanes = warps * st.warp_size if st.gpu else device.vector.lanes_per_unit.value
    t_issue = vec_ops / (max(lanes, 1) * device.clock_hz * eff.warp_ipc)
    # a dot waiting on a value the program just computed: from registers (its first operand), or
    # through shared memory (its second: a store, a barrier and a load first)
    in_regs = sum(d.execs for d in c.dots.values() if d.a_src == "computed" and d.b_src != "computed")
    through_smem = sum(d.execs for d in c.dots.values() if d.b_src == "computed")
    chain = (t_issue + in_regs * eff.dot_latency_s + through_smem * eff.dot_shared_latency_s
             + getattr(c, "reductions", 0.0) * eff.reduce_latency_s)
    # loads a pipelined dot loop keeps in flight overlap the program's compute chain; every other
    # round of loads waits for its data before the compute that needs it: it adds to the chain
    t_lat = waves * (other * eff.dram_latency_s + max(piped * eff.dram_latency_s, chain) + eff.program_overhead_s)
    if st.gpu and P <= U:
        # every program has a unit to itself, with no second program to hide its transfers behind:
        # the bytes of the rounds it waits for (those outside pipelined dot loops) stream on its
        # serial path after their latency, at its share of the bandwidth (the launch's memory time)
        t_lat += _waited_share(c, stages) * t_mem

    # a unit takes on its programs one after another at a bounded rate (its scheduler starting each
    # and retiring the one before), however little each does: a launch of a million short programs
    # is bound by that rate, the same on every device with the same units and clock
    t_start = per_unit * eff.program_start_s if st.gpu else 0.0

    t_vs = max(t_vec, t_sp)
    t_comp = t_mx + t_vs
    terms = {"matrix": t_mx, "vector": t_vs, "memory": t_mem, "latency": t_lat, "programs": t_start}
    body = max(t_comp, t_mem, t_lat, t_start)
    bound = ("memory" if body == t_mem else "latency" if body == t_lat else "programs" if body == t_start
             else ("matrix" if t_mx >= t_vs else "vector"))
    # the learned floor, scaled by the device's launch overhead against the calibration device's
    floor = eff.launch_floor_s * (device.host_launch_s / eff.launch_reference_s if eff.launch_reference_s else 1.0)
    if floor > body:
        bound = "launch"
    return LaunchTime(floor + body, bound, terms, dram, l2_hit, padded_total, R, smem, sorted(set(notes)), occupancy)


#: device-model names of the element types of tt.dot_scaled operands
SCALED_TYPES = {"e2m1": "fp4", "e4m3": "fp8e4m3", "e5m2": "fp8e5m2", "bf16": "bf16", "fp16": "fp16"}
#: vector operations per decoded element where Triton decomposes a microscaled dot
#: (DecomposeScaledBlocked): the upcast to the 16-bit compute type, the multiply by the broadcast
#: scale, the select that makes a NaN scale's values NaN, and three layout conversions (the
#: broadcast scale and the NaN mask into the values' layout, the values into the dot operand's);
#: with fastMath the select and the mask's conversion are left out
SCALED_DECODE_OPS, SCALED_DECODE_OPS_FAST = 6, 4


def scaled_path(device: DeviceModel, d) -> tuple[str, float]:
    """(the operand type a dot runs at, vector operations per execution decoding its operands).
    A plain tt.dot: its own type, none. A tt.dot_scaled runs natively where both operands are
    8-bit or narrower and the device's matrix unit has a rate for the narrower one (Blackwell's
    microscaled MMA); elsewhere Triton upcasts the scaled operands and multiplies in bf16 / fp16.
    The decode counts on the program's serial path (launch_time), not against the unit's vector
    throughput: the H100's profiles of such calls (moe_mxfp4_gemm) show the units issuing at a
    quarter to a half of their vector rate, waiting on the decode-then-dot chain."""
    scaled = getattr(d, "scaled", ())
    if not scaled:
        return d.operand, 0.0
    types = [SCALED_TYPES.get(t, t) for t in scaled]
    if all(t not in ("bf16", "fp16") for t in types):
        narrow = "fp4" if "fp4" in types else types[0]
        if device.matrix_flops_per_s(narrow):
            return narrow, 0.0
    ops = SCALED_DECODE_OPS_FAST if getattr(d, "fast_math", False) else SCALED_DECODE_OPS
    return d.operand, float(getattr(d, "decoded", 0)) * ops


#: issue slots of one boolean operation on masks (int1: the `&` of row, column and bounds
#: conditions): three-input logic instructions (NVIDIA's LOP3 and PLOP3) fold a chain of two into
#: one. A property of the instruction set, not fitted: fitted, the weight runs to its bound and
#: the fit moves into a basin that predicts kernels left out of it worse.
MASK_OP_ISSUE = 0.5


def issue_ops(unit: str, dtype: str, ops: float) -> float:
    """Issue slots `ops` elementwise operations of a type take: boolean mask logic at
    MASK_OP_ISSUE each, every other operation one."""
    return ops * MASK_OP_ISSUE if unit == "vector" and dtype == "int1" else ops


def strided_element_time(c: LaunchCounts, device: DeviceModel, eff: Efficiencies, per_unit: int) -> float:
    """Seconds the element-strided accesses of a launch take at the rates an access-pattern probe
    measured on the calibration GPU (benchmarks/sim_probe_access.py: elements per unit per clock,
    loads and stores apart; the same for 2- and 4-byte elements there: the cost is per element, not
    per byte): each unit works through its programs' elements; loads and stores overlap. Only the
    stride the probe measures (PROBED_STRIDE: interleaved pairs) is charged so; other strides keep
    the byte model. 0 where no rate is known."""
    el = getattr(c, "strided_elements", None) or {}
    t = 0.0
    for kind, rate in (("load", eff.strided_loads_per_clock), ("store", eff.strided_stores_per_clock)):
        n = el.get((kind, PROBED_STRIDE), 0.0)
        if rate and n:
            t = max(t, per_unit * n / (rate * device.clock_hz))
    return t


def _round_split(c: LaunchCounts, stages: int) -> tuple[float, float]:
    """A program's load rounds, (those in loops the compiler pipelines -- loops that load their dots'
    operands --, the others, whose data the program waits for)."""
    piped = sum(loop.iterations for loop in c.loops.values() if loop.has_load and loop.has_dot and stages > 1)
    return piped, max(c.load_rounds - piped, 0.0)


def _waited_share(c: LaunchCounts, stages: int) -> float:
    """The share of a program's load rounds whose data it waits for (those outside pipelined loops)."""
    piped, other = _round_split(c, stages)
    return other / (other + piped) if other + piped > 0 else 1.0


def _latency_rounds(c: LaunchCounts, stages: int) -> tuple[float, float]:
    """Dependent load rounds per program, (those of pipelined dot loops, the others): a loop that
    loads the operands of its dots keeps stages - 1 iterations in flight; at least one round for a
    program that loads at all."""
    piped, other = _round_split(c, stages)
    piped /= (stages - 1 if stages > 2 else 1.0)
    if piped + other < 1.0 and c.bytes_loaded:
        other = 1.0 - piped
    return piped, other


def _traffic(c: LaunchCounts, device: DeviceModel, slots: int, l2_resident: dict | None) -> tuple[float, float]:
    """(DRAM bytes, bytes served by L2 from earlier launches) of one launch."""
    P = max(c.programs, 1)
    l2 = device.shared_on_chip_bytes
    iters = max([lp.iterations for lp in c.loops.values() if lp.parent is None] or [1.0])
    reread_sets, first, reread = 0.0, 0.0, 0.0
    hits = 0.0
    resident = l2_resident if l2_resident is not None else {}
    for by_arg, flat, is_load in ((c.loaded_by_arg, c.bytes_loaded, True), (c.stored_by_arg, c.bytes_stored, False)):
        known = 0.0
        for name, per_program in by_arg.items():
            known += per_program
            extent = c.extents.get(name, math.inf)
            total = per_program * P
            unique = min(total, extent)
            if is_load:
                where = c.addresses.get(name)
                cached = resident.get(where, 0.0) if where else 0.0
                if cached:
                    hit = min(unique, cached)
                    hits += hit
                    unique -= hit
                if total > extent:
                    reread += total - extent
                    reread_sets += min(extent, slots * per_program / max(iters, 1.0))
            first += unique
        first += max(flat - known, 0.0) * P
    miss = max(0.0, 1.0 - l2 / reread_sets) if reread_sets > 0 and l2 else (1.0 if reread_sets else 0.0)
    if l2_resident is not None and l2:
        for name, per_program in c.stored_by_arg.items():
            where = c.addresses.get(name)
            if where:
                written = min(per_program * P, c.extents.get(name, math.inf))
                if written <= l2 / 2:
                    resident[where] = written
                else:
                    resident.pop(where, None)
        while sum(resident.values()) > l2 and resident:
            resident.pop(next(iter(resident)))
    return first + reread * miss, hits
