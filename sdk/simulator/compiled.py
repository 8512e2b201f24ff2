"""What a target's compiler allocates for one launch: registers per thread and shared memory, from a
real compile of the launch's TTIR by Triton's own compiler for the device model's Triton target.

A GPU unit holds as many programs at once as its register file, shared memory and thread slots
allow, and those follow from what the compiler allocated, which an estimate from the kernel's live
tiles cannot tell apart (attention with 256-wide heads keeps 166-182 registers for each of 256
threads, one program per SM on an H100; with 128-wide heads, 144 for each of 128, three). Where the
device model names a Triton target (`triton.backend`, `triton.arch`) whose compiler is installed here
and reports what it allocated without a device -- Triton's CUDA backend: ptxas ships with Triton
and says how many registers it used -- each launch is compiled once (kept in Triton's cache beside
its own compiles, keyed by the TTIR, warps, stages, target and Triton's version) and the unit's
occupancy follows from the allocation and the device model's register file, shared memory and
thread slots (`programs_per_unit`). Elsewhere `allocation` returns None and the timing model keeps
its estimate.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import re
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

#: what a CUDA multiprocessor allocates in, on every generation Triton compiles for (compute
#: capability 7.5 to 12.x; CUDA occupancy calculator and programming guide, "Compute Capabilities"):
#: registers per warp in units of 256, 1 KiB of shared memory reserved per block (8.0 and newer),
#: at most 32 resident blocks and 2048 threads per multiprocessor
CUDA_REGISTER_UNIT = 256
CUDA_RESERVED_SHARED = 1024
CUDA_MAX_BLOCKS = 32
CUDA_MAX_THREADS = 2048

FORMAT = "day0-sim-compiled/2"


@dataclass(frozen=True)
class Allocation:
    """What the compiler allocated for one program of a launch."""

    registers: int       # 32-bit registers per thread
    shared_bytes: int    # shared memory per program (Triton's `shared`: static and dynamic)
    num_warps: int
    spill_bytes: int     # bytes spilled to local memory (stores)
    target: str          # "cuda:90"


_FAST: dict = {}   # (ttir, num_warps, num_stages, target) -> allocation (None: none)


def compile_target(device) -> tuple[str, int, int] | None:
    """(Triton backend, capability, warp size) of the device model's Triton target where it names a
    CUDA one ('cuda', 'sm_90'), the only target whose compiler reports registers here; else None."""
    t = device.triton
    if t is None or t.backend is None or t.arch is None or t.backend.value != "cuda":
        return None
    m = re.fullmatch(r"sm_?(\d{2,3})a?", t.arch.value.strip())
    if not m:
        return None
    return "cuda", int(m.group(1)), (t.warp_size.value if t.warp_size else 32)


def allocation(ttir: str, num_warps: int, num_stages: int, device) -> Allocation | None:
    """The allocation of one launch on the device's target (compiled once, then cached), or None
    where that target cannot be compiled here or the compile failed. `num_warps` / `num_stages`:
    as the launch asked (0: the target's default)."""
    target = compile_target(device)
    if target is None or not ttir:
        return None
    return _allocation(ttir, num_warps, num_stages, target)


def _allocation(ttir: str, num_warps: int, num_stages: int, target: tuple) -> Allocation | None:
    fast = (ttir, num_warps, num_stages, target)  # a string caches its hash: cheap on every prediction
    if fast in _FAST:
        return _FAST[fast]
    manager, name = _cache_entry(ttir, num_warps, num_stages, target)
    found = _read(manager, name)
    if found is None:
        try:
            found = _compile(ttir, num_warps, num_stages, target)
        except Exception:  # a kernel the target's compiler refuses: no allocation, the estimate stands
            found = {}
        _write(manager, name, found)
    _FAST[fast] = found or None
    return _FAST[fast]


def prefetch(work, jobs: int = 1, progress: Callable[[int, int, list], None] | None = None) -> int:
    """Compile, in `jobs` worker processes, the launches of `work` ((launches, devices) pairs: a
    call's LaunchCounts and the devices it is predicted for) for each device whose target can be
    compiled here, where the allocation is not cached, so that predictions read them; returns how
    many were compiled. The result does not depend on `jobs`: each allocation is the compile of its
    launch. `progress(done, total, archs)` is called before the first compile and after each
    (archs: the targets compiled for, "sm_89" and the like); not at all when nothing is compiled."""
    todo = {}
    for launches, devices in work:
        targets = {t for t in (compile_target(d) for d in devices) if t is not None}
        for c in launches if isinstance(launches, list) else ():
            ttir = getattr(c, "ttir", "")
            for t in targets:
                key = (ttir, c.num_warps, c.num_stages, t)
                if ttir and key not in _FAST and key not in todo:
                    manager, name = _cache_entry(*key)
                    found = _read(manager, name)
                    if found is None:
                        todo[key] = True
                    else:
                        _FAST[key] = found or None
    keys = list(todo)
    archs = [f"sm_{a}" for a in sorted({k[3][1] for k in keys})]
    if progress and keys:
        progress(0, len(keys), archs)

    def compiled_in_order():
        if jobs > 1 and len(keys) > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor
            with ProcessPoolExecutor(max_workers=min(jobs, len(keys)),
                                     mp_context=multiprocessing.get_context("spawn")) as pool:
                yield from pool.map(_compile_key, keys, chunksize=4)
        else:
            yield from map(_compile_key, keys)

    for n, (key, result) in enumerate(zip(keys, compiled_in_order()), 1):
        _FAST[key] = result  # a worker's compile; in this process _allocation has stored it already
        if progress:
            progress(n, len(keys), archs)
    return len(keys)


def _compile_key(key: tuple) -> Allocation | None:
    return _allocation(*key)


def programs_per_unit(a: Allocation, device) -> int:
    """Programs one multiprocessor holds at once with this allocation: the fewest its register file
    (registers per warp rounded up to the allocation unit), its shared memory (with the per-block
    reserve) and its block and thread slots allow; at least one."""
    warp = device.warp_size or 32
    threads = a.num_warps * warp
    limits = [CUDA_MAX_BLOCKS, CUDA_MAX_THREADS // max(threads, 1)]
    regs = device.memory.per_unit.registers_kib
    if regs and a.registers:
        per_warp = math.ceil(a.registers * warp / CUDA_REGISTER_UNIT) * CUDA_REGISTER_UNIT
        limits.append((int(regs.value * 1024 // 4) // per_warp) // max(a.num_warps, 1))
    if a.shared_bytes:
        limits.append(device.on_chip_bytes_per_unit // (a.shared_bytes + CUDA_RESERVED_SHARED))
    return max(1, min(limits))


def _compile(ttir: str, num_warps: int, num_stages: int, target: tuple[str, int, int]) -> Allocation:
    """Triton's own stages for the target, from TTIR to the binary; registers from ptxas's report."""
    from triton import knobs
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    compiler = _compiler(GPUTarget(*target))
    opts = {}
    if num_warps:
        opts["num_warps"] = num_warps
    if num_stages:
        opts["num_stages"] = num_stages
    options = compiler.parse_options(opts)
    context = ir.context()
    ir.load_dialects(context)
    compiler.load_dialects(context)
    with tempfile.NamedTemporaryFile("w", suffix=".ttir") as f:
        f.write(ttir)
        f.flush()
        module = ir.parse_mlir_module(f.name, context)
    module.context = context
    stages: dict = {}
    from triton.backends.compiler import Language
    compiler.add_stages(stages, options, Language.TRITON)
    metadata: dict = {}
    log = io.StringIO()
    src = module
    with knobs.nvidia.scope(), contextlib.redirect_stdout(log):
        knobs.nvidia.dump_ptxas_log = True
        for fn in stages.values():
            src = fn(src, metadata)
    used = [int(x) for x in re.findall(r"Used (\d+) registers", log.getvalue())]
    spills = [int(x) for x in re.findall(r"(\d+) bytes spill stores", log.getvalue())]
    if not used:
        raise RuntimeError("the compiler reported no register count")
    return Allocation(max(used), int(metadata.get("shared", 0)), int(options.num_warps), max(spills or [0]),
                      f"{target[0]}:{target[1]}")


def _compiler(target):
    """Triton's own compiler for the target (not one a day0 backend put in Triton's table)."""
    from triton.backends import backends
    for b in backends.values():
        cls = b.compiler
        if not cls.__module__.startswith("sdk.") and cls.supports_target(target):
            return cls(target)
    raise RuntimeError(f"no Triton compiler for {target}")


def _cache_entry(ttir: str, num_warps: int, num_stages: int, target: tuple):
    """Where an allocation is kept: Triton's own cache (TRITON_CACHE_DIR), beside its compiles, under
    a key of the TTIR without its source locations (a kernel compiled from another checkout names
    other files), the launch options, the target and Triton's version."""
    import triton
    from triton.runtime.cache import get_cache_manager
    digest = hashlib.sha256(f"{FORMAT}\0{triton.__version__}\0{target}\0{num_warps}\0{num_stages}\0".encode()
                            + without_locations(ttir).encode()).hexdigest()
    return get_cache_manager(digest), "day0_allocation.json"


def without_locations(ttir: str) -> str:
    """MLIR text without its location attributes (`loc(...)` on ops and the `#locN = loc(...)`
    aliases), which name source files and lines and decide nothing the compiler allocates."""
    out, i, n = [], 0, len(ttir)
    while i < n:
        j = ttir.find("loc(", i)
        if j < 0:
            out.append(ttir[i:])
            break
        if j > 0 and (ttir[j - 1].isalnum() or ttir[j - 1] in "_#"):  # `#loc(`? part of a longer name
            out.append(ttir[i:j + 4])
            i = j + 4
            continue
        out.append(ttir[i:j].rstrip(" "))
        depth, k, quoted = 0, j + 3, False
        while k < n:
            ch = ttir[k]
            if quoted:
                if ch == "\\":
                    k += 1
                elif ch == '"':
                    quoted = False
            elif ch == '"':
                quoted = True
            elif ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        i = k + 1
    return "\n".join(line for line in "".join(out).splitlines() if not line.startswith("#loc"))


def _read(manager, name: str):
    """The cached allocation, {} for a compile that failed, None when nothing is cached."""
    path = manager.get_file(name)
    if path is None:
        return None
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    if data.get("format") != FORMAT:
        return None
    return Allocation(**data["allocation"]) if data.get("allocation") else {}


def _write(manager, name: str, result) -> None:
    try:
        manager.put(json.dumps({"format": FORMAT, "allocation": asdict(result) if result else None}), name, binary=False)
    except OSError:  # a read-only cache: compile again next time
        pass
