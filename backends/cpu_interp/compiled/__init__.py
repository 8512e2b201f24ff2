"""cpu_interp's compiled tier: a kernel's TTIR lowered to LLVM IR with llvmlite, optimised for this
CPU, and run natively over the grid on every core.

It is the worked example of a backend that compiles: `lower` turns the day0 IR into a binary
(here a native object, cached), `load` maps it, `launch` runs it. The modules, in the order a
vendor would read them:
  types.py      TTIR element types -> LLVM types (compute, scratch, memory)
  tensors.py    block tensors: lazy element-wise values fused into loop nests, scratch buffers
  core.py       the function emitter: arena, loop nests, faults, the grid loop
  table.py      the emitter table (a LoweringTable), filled by the op families:
  ops_arith.py  ops_math.py (mathlib.py)  ops_memory.py  ops_tensor.py  control.py
  prepare.py    the module it lowers: descriptors and out-of-line calls rewritten by Triton's own passes
  numerics.py   f16 / bf16 / fp8 rounding and conversions, bit for bit the interpreter's
  jit.py        optimise, emit the object, cache it (memory and disk), load it with MCJIT
  launch.py     run the kernel over the grid on a thread pool; faults as the interpreter words them
  abi.py        the fault kinds compiled code reports and the launcher reads

A kernel that needs something the tier does not lower runs on the interpreter instead, and says
why (`refusal`); so does a launch with the interpreter's extra checks on (DAY0_CHECK_UNINIT,
DAY0_CHECK_RACES), which only the interpreter implements, and one whose tensors are not at host
addresses (`runtime_refusal`). Selected with the tier "compiled" or "auto" (tier.py);
tests/test_cpu_compiled*.py hold it to the interpreter.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

from sdk.ttir import Module

TIERS = ("interp", "compiled", "auto")


@dataclass
class Built:
    """A compiled kernel: the object, what the launcher needs (`meta`), or why there is none."""

    data: bytes | None
    meta: dict
    refusal: str = ""
    cached: bool = False


def refusal(module: Module, bounds_check: bool = True, checks: tuple = ()) -> str:
    """Why the compiled tier does not lower `module` ("" when it does, as far as a walk tells);
    `checks`: the interpreter's run-time checks the options turned on."""
    from .table import TABLE
    from . import control, ops_arith, ops_math, ops_memory, ops_tensor  # noqa: F401  (register rules)
    if checks:
        return (f"the {' and '.join(checks)} check{'s run' if len(checks) > 1 else ' runs'} on the interpreter "
                f"(options.checks, DAY0_CHECK_*)")
    from .prepare import lowerable
    from .types import Unsupported
    try:
        module = lowerable(module)
    except Unsupported as exc:
        return f"not lowered by the compiled tier: {exc}"
    missing = sorted({f"{m.name} ({m.signature})" if m.signature else m.name for m in TABLE.missing(module)})
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        return f"not lowered by the compiled tier: {', '.join(missing[:3])}{more}"
    for op in module.walk():
        if op.name == "scf.while" and any(o.name in ("tt.atomic_cas", "tt.atomic_rmw") or
                                          (o.name == "tt.load" and o.attrs.get("isVolatile"))
                                          for r in op.regions for b in r.blocks for x in b.ops for o in x.walk()):
            return ("spins on other programs (a while loop over atomics or volatile loads): programs must "
                    "interleave, which the interpreter's cooperative scheduler provides")
    return ""


def emit(module: Module, bounds_check: bool = True) -> tuple[str | None, dict, str]:
    """(the kernel's LLVM IR, what the launcher needs, "") or (None, {}, why it is not lowered)."""
    from .core import KernelCompiler
    from .types import Unsupported, elem_of
    why = refusal(module, bounds_check)
    if why:
        return None, {}, why
    from .prepare import flag_count, lowerable, unit_strides
    t0 = time.perf_counter()
    try:
        lowered = lowerable(module)
        fixed = unit_strides(module, lowered, flag_count(module, lowered))
        kc = KernelCompiler(lowered, bounds_check, fixed=fixed)
        text = kc.build()
        params = [elem_of(a.type).name for a in kc.module.entry.args]
    except Unsupported as exc:
        return None, {}, f"not lowered by the compiled tier: {exc}"
    from .ops_memory import program_order
    return text, {"params": params, "fixed": {str(k): v for k, v in fixed.items()}, "arena": kc.arena,
                  "serial": program_order(kc.module),
                  "emit_s": round(time.perf_counter() - t0, 4)}, ""


def cache_key(module: Module, bounds_check: bool = True) -> str:
    """The object cache's key: the TTIR, the options that shape the code, this compiler's source,
    llvmlite's and LLVM's versions and the host CPU (jit.cache_key)."""
    from . import jit
    return jit.cache_key(module.text, {"bounds_check": bounds_check})


def assemble(module: Module, text: str, meta: dict, bounds_check: bool = True) -> Built:
    """LLVM IR -> the native object (from the cache when it holds this kernel's)."""
    from . import jit
    key = cache_key(module, bounds_check)
    hit = jit.cached(key)
    if hit is not None:
        return Built(hit[0], hit[1], cached=True)
    t0 = time.perf_counter()
    try:
        data = jit.compile_ir(text)
    except jit.CompileError as exc:
        return Built(None, {}, f"LLVM could not compile it: {exc}")
    meta = dict(meta, llvm_s=round(time.perf_counter() - t0, 4))
    jit.store(key, data, meta)
    return Built(data, meta)


def build(module: Module, bounds_check: bool = True) -> Built:
    """Compile `module` (or take it from the cache): `emit`, then `assemble`."""
    from . import jit
    hit = jit.cached(cache_key(module, bounds_check))
    if hit is not None:
        return Built(hit[0], hit[1], cached=True)
    text, meta, why = emit(module, bounds_check)
    if text is None:
        return Built(None, {}, why)
    return assemble(module, text, meta, bounds_check)


def runtime_refusal(args=(), extra=()) -> str:
    """Why a compiled kernel's launch must run on the interpreter now ("" when it need not): the
    interpreter's checks asked for, or a tensor whose address is not where its bytes lie in this
    process (a backend with an address space of its own lends cpu_interp views of its memory;
    native code reaches memory by address, the interpreter through the views)."""
    on = [n for n in ("DAY0_CHECK_UNINIT", "DAY0_CHECK_RACES") if os.environ.get(n, "") not in ("", "0")]
    if on:
        return f"{' and '.join(on)} set: those checks run on the interpreter"
    import numpy as np
    from sdk.backend import DeviceArg
    for a in list(args) + list(extra):
        if isinstance(a, DeviceArg) and a.nbytes and not (isinstance(a.handle, np.ndarray)
                                                          and a.handle.ctypes.data == a.address):
            return (f"'{a.name}' is at {a.address:#x} in the backend's address space, not in this process's "
                    f"memory: native code reaches memory by address")
    return ""


__all__ = ["TIERS", "Built", "assemble", "build", "cache_key", "emit", "refusal", "runtime_refusal"]
