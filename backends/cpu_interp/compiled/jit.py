"""LLVM through llvmlite: optimise a kernel's IR for this CPU, emit a native object, cache it, and
load it with MCJIT.

Objects are cached in memory and on disk (DAY0_CPU_CACHE_DIR, default ~/.cache/day0/cpu_compiled),
keyed by the TTIR text, the compile options, this package's source, the llvmlite and LLVM
versions and the host CPU (name and features): a warm cache skips LLVM entirely. A loaded object
stays mapped for the life of the process (one MCJIT engine per object).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import json
import os
import threading
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm

_LOCK = threading.Lock()
_MEMORY: dict[str, tuple[bytes, dict]] = {}
_ENGINES: dict[str, tuple[object, int]] = {}

#: C math library functions the emitted code may call (resolved in this process)
_LIBM = ("expf", "exp", "exp2f", "exp2", "logf", "log", "log2f", "log2", "log10f", "log10", "expm1f", "expm1",
         "log1pf", "log1p", "sinf", "sin", "cosf", "cos", "tanf", "tan", "asinf", "asin", "acosf", "acos",
         "atanf", "atan", "sinhf", "sinh", "coshf", "cosh", "tanhf", "tanh", "asinhf", "asinh", "acoshf",
         "acosh", "atanhf", "atanh", "cbrtf", "cbrt", "erff", "erf", "erfcf", "erfc", "lgammaf", "lgamma",
         "tgammaf", "tgamma", "powf", "pow", "atan2f", "atan2", "fmodf", "fmod", "hypotf", "hypot",
         "nextafterf", "nextafter", "fmaf", "fma", "roundf", "round", "floorf", "floor", "ceilf", "ceil",
         "truncf", "trunc", "rintf", "rint", "nearbyintf", "nearbyint", "roundevenf", "roundeven",
         "copysignf", "copysign", "sqrtf", "sqrt", "fminf", "fmin", "fmaxf", "fmax", "ldexpf", "ldexp",
         "sincosf", "sincos", "exp10f", "exp10")


@functools.lru_cache(maxsize=None)
def target_machine() -> "llvm.TargetMachine":
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    _register_libm()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(), features=host_features(), opt=3,
                                        codemodel="jitdefault")


@functools.lru_cache(maxsize=None)
def host_features() -> str:
    return llvm.get_host_cpu_features().flatten()


def _register_libm() -> None:
    path = ctypes.util.find_library("m")
    lib = ctypes.CDLL(path) if path else ctypes.CDLL(None)
    for name in _LIBM:
        fn = getattr(lib, name, None)
        if fn is not None:
            llvm.add_symbol(name, ctypes.cast(fn, ctypes.c_void_p).value)


@functools.lru_cache(maxsize=None)
def fingerprint() -> str:
    """This package's source, so that an edited compiler never reuses an old object."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def cache_key(ttir: str, options: dict) -> str:
    digest = hashlib.sha256()
    for part in (ttir, json.dumps(options, sort_keys=True), fingerprint(), llvmlite.__version__,
                 ".".join(map(str, llvm.llvm_version_info)), llvm.get_host_cpu_name(), host_features()):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def cache_dir() -> Path | None:
    """Where objects are kept on disk (None: DAY0_CPU_CACHE_DIR is set to an empty string)."""
    env = os.environ.get("DAY0_CPU_CACHE_DIR")
    if env is not None:
        return Path(env) if env else None
    return Path.home() / ".cache" / "day0" / "cpu_compiled"


def cached(key: str) -> tuple[bytes, dict] | None:
    hit = _MEMORY.get(key)
    if hit is not None:
        return hit
    root = cache_dir()
    if root is None:
        return None
    obj, meta = root / f"{key}.o", root / f"{key}.json"
    try:
        data, info = obj.read_bytes(), json.loads(meta.read_text())
    except (OSError, ValueError):
        return None
    if info.get("sha256") != hashlib.sha256(data).hexdigest():
        return None  # a torn or foreign file: compile again
    _MEMORY[key] = (data, info)
    return data, info


def store(key: str, data: bytes, meta: dict) -> None:
    meta = dict(meta, sha256=hashlib.sha256(data).hexdigest())
    _MEMORY[key] = (data, meta)
    root = cache_dir()
    if root is None:
        return
    from sdk.fileio import atomic_write_bytes, atomic_write_text
    try:
        root.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(root / f"{key}.o", data)
        atomic_write_text(root / f"{key}.json", json.dumps(meta))
    except OSError:
        pass  # a read-only or full cache directory only costs a recompile


def compile_ir(text: str) -> bytes:
    """LLVM IR text -> an optimised native object for this CPU."""
    tm = target_machine()
    mod = llvm.parse_assembly(text)
    mod.verify()
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return tm.emit_object(mod)


def optimized_ir(text: str) -> str:
    """The optimised IR (for inspection: `python -m backends.cpu_interp.compiled --ir`)."""
    tm = target_machine()
    mod = llvm.parse_assembly(text)
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = pto.slp_vectorization = pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return str(mod)


def load(data: bytes, symbol: str = "day0_kernel") -> int:
    """Map an object into this process (once per distinct object); the address of `symbol`."""
    key = hashlib.sha256(data).hexdigest()
    with _LOCK:
        hit = _ENGINES.get(key)
        if hit is None:
            tm = target_machine()
            engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
            engine.add_object_file(llvm.ObjectFileRef.from_data(data))
            engine.finalize_object()
            hit = _ENGINES[key] = (engine, engine.get_function_address(symbol))
    return hit[1]
