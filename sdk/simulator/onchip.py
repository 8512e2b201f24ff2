"""What one program keeps on chip, the way the target's Triton compiler allocates it.

GPUs keep a program's tiles in registers and put in shared memory only what the compiler stages
there; a scratchpad device (an NPU, a TPU) keeps every live tile in its scratchpad. For GPUs the
estimate follows Triton's NVIDIA and AMD pipelines:

- a tt.dot operand loaded inside the dot's loop is software-pipelined through `num_stages` buffers
  (cp.async on sm_80 and newer, TMA or cp.async on sm_90; `num_stages` is the launch's, else the
  target's default), so the loop holds num_stages copies of each such tile;
- an operand loaded outside the loop (attention's query block) sits in shared memory once, for the
  whole loop, where the matrix instruction reads it from there (mma.sync's ldmatrix path, and
  wgmma's and tcgen05's shared-memory operands); an operand the program computed (attention's
  probabilities) stays in registers as wgmma's A operand and as mma.sync's, and goes through shared
  memory once as a B operand;
- outside the pipelined loops: scratch for reductions across warps, layout conversions (transposes,
  reshapes) and the dot epilogue's accumulator, each freed before the next is needed, so the
  largest counts.

The result is the shared memory of the whole program: loops' staged buffers and the scratch that is
live beside them, the largest over the program. `fit.py` checks it against the device.
"""
from __future__ import annotations

from dataclasses import dataclass

from .analysis import LaunchCounts

#: matrix-instruction families and where they read their operands from
PATHS = ("mma", "wgmma", "tcgen05", "mfma", "scratchpad")


@dataclass(frozen=True)
class Staging:
    """How a target's compiler places tiles: its matrix path, default pipelining depth and warps."""

    path: str                  # one of PATHS
    default_stages: int        # num_stages when a launch gives none
    default_warps: int = 4
    warp_size: int = 32

    @property
    def gpu(self) -> bool:
        return self.path != "scratchpad"


def staging_for_arch(arch: str) -> Staging:
    """Triton's defaults for an NVIDIA arch ('sm_90') or an AMD one ('gfx942')."""
    a = arch.lower()
    if a.startswith("sm_"):
        cap = int("".join(ch for ch in a[3:] if ch.isdigit()) or 0)
        path = "wgmma" if cap == 90 else ("tcgen05" if cap in (100, 103, 110) else "mma")
        return Staging(path, default_stages=3)
    if a.startswith("gfx"):
        return Staging("mfma", default_stages=2, warp_size=64)
    return Staging("scratchpad", default_stages=2, default_warps=1, warp_size=1)


def staging_for(device) -> Staging:
    """From a device model: its Triton arch where it names one, else a scratchpad device (double
    buffering, as NPU compilers do)."""
    arch = device.triton.arch.value if device.triton and device.triton.arch else ""
    st = staging_for_arch(arch) if arch else Staging("scratchpad", default_stages=2, default_warps=1, warp_size=1)
    if st.path == "scratchpad" or device.memory.per_unit.registers_kib is None:
        return Staging("scratchpad", default_stages=2, default_warps=1, warp_size=device.warp_size or 1)
    return st


#: device-model fp8 dtypes -> Triton's names for them
_FP8_TRITON = {"fp8e4m3": "fp8e4nv", "fp8e5m2": "fp8e5", "fp8e4m3fnuz": "fp8e4b8", "fp8e5m2fnuz": "fp8e5b16"}


def triton_fp8_for_arch(arch: str) -> tuple[str, ...]:
    """The fp8 types Triton's backend for an arch supports ('sm_89' and newer add e4m3)."""
    a = arch.lower()
    if a.startswith("sm_"):
        cap = int("".join(ch for ch in a[3:] if ch.isdigit()) or 0)
        return tuple(sorted({"fp8e5", "fp8e4b15"} | ({"fp8e4nv"} if cap >= 89 else set())))
    if a.startswith("gfx"):
        return ("fp8e4b8", "fp8e4nv", "fp8e5", "fp8e5b16")
    return ()


def triton_fp8(device) -> tuple[str, ...]:
    """The fp8 types a Triton target for the device would report: its arch's where it names an
    NVIDIA or AMD one, else those the device model supports."""
    arch = device.triton.arch.value if device.triton and device.triton.arch else ""
    if arch.lower().startswith(("sm_", "gfx")):
        return triton_fp8_for_arch(arch)
    return tuple(sorted(t for d, t in _FP8_TRITON.items() if device.supports(d)))


def device_props(device) -> dict:
    """What Triton's driver would report for the device to launch wrappers that size their tiles
    and grids by it."""
    regs = device.memory.per_unit.registers_kib
    return {"multiprocessor_count": device.units, "max_shared_mem": device.max_program_bytes,
            "max_num_regs": int(regs.value * 1024 // 4) if regs else 65536,
            "warpSize": device.warp_size or 1, "sm_clock_rate": int(device.clock_hz / 1000)}


def target_profile(device) -> tuple:
    """What a launch wrapper can see of the target (fp8 types, device properties), hashable."""
    st = staging_for(device)
    return (triton_fp8(device), tuple(sorted(device_props(device).items())), (st.path, st.default_stages))


def stages_of(c: LaunchCounts, st: Staging) -> int:
    return c.num_stages or st.default_stages


def warps_of(c: LaunchCounts, st: Staging) -> int:
    return c.num_warps or st.default_warps


def shared_bytes(c: LaunchCounts, st: Staging) -> int:
    """Shared memory (or scratchpad) bytes one program of this launch needs on the target."""
    if not st.gpu:
        return max(c.footprint_bytes, _staged_peak(c, st))
    return max(_staged_peak(c, st), _scratch(c, st))


def _staged_peak(c: LaunchCounts, st: Staging) -> int:
    stages = stages_of(c, st)
    warps = warps_of(c, st)
    per_loop: dict = {}
    for d in c.dots.values():
        if d.execs <= 0:
            continue
        path = dot_path(d, st, warps)
        total = 0
        for operand, (size, src) in enumerate(((d.a_bytes, d.a_src), (d.b_bytes, d.b_src))):
            total += size * _copies(src, operand, stages, path, _bits(d.operand))
        per_loop[d.loop] = per_loop.get(d.loop, 0) + total
    if not per_loop:
        return 0
    # a loop's buffers are live during the loop and its nested loops
    peak = 0
    for loop, total in per_loop.items():
        live, parent = total, c.loops[loop].parent if loop in c.loops else None
        while parent is not None:
            live += per_loop.get(parent, 0)
            parent = c.loops[parent].parent if parent in c.loops else None
        peak = max(peak, live)
    return peak


def _bits(operand: str) -> int:
    if operand in ("fp32", "tf32", "int32"):
        return 32
    if operand == "fp64":
        return 64
    return 8 if operand.startswith(("fp8", "int8", "uint8", "fp4")) else 16


def dot_path(d, st: Staging, warps: int) -> str:
    """The matrix path one dot takes: Hopper's and Blackwell's asynchronous instructions need
    16- or 8-bit operands, 64-row tiles per warpgroup and whole warpgroups; others fall back to
    mma.sync."""
    if st.path in ("wgmma", "tcgen05"):
        if _bits(d.operand) <= 16 and d.m % 64 == 0 and warps % 4 == 0:
            return st.path
        return "mma"
    return st.path


def _copies(src: str, operand: int, stages: int, path: str, bits: int) -> int:
    """How many copies of one dot operand tile live in shared memory.

    Pipelined through `stages`: the asynchronous paths (TMA feeding wgmma or tcgen05) keep one
    buffer per stage; cp.async feeding mma.sync keeps stages - 1 (the last stage reads registers;
    unpipelined, none)."""
    if path == "scratchpad":
        return max(stages, 1) if src == "loop_load" else (1 if src == "load" or operand == 1 else 1)
    if src == "loop_load":
        # unpipelined (num_stages 1) mma.sync operands go from global memory to registers
        return max(stages, 1) if path in ("wgmma", "tcgen05") else max(stages - 1, 0)
    if src == "load":
        return 1
    # computed in registers: a 16-bit A operand feeds the matrix unit from registers; 32-bit (tf32)
    # ones and every B operand go through shared memory once
    return 0 if operand == 0 and bits <= 16 else 1


def _scratch(c: LaunchCounts, st: Staging) -> int:
    """Reductions across warps, layout conversions and the epilogue, outside the staged loops:
    at most one tile's worth (the largest reduced or transposed tensor) and usually far less."""
    return max(min(c.reduce_bytes // 4, 4096), c.reshape_bytes)
