"""LLVM through llvmlite: optimise a kernel's IR for this CPU, emit a native object, cache it, and
load it with MCJIT.

Optimisation and code generation run in a child process (llvm_server.py): llvmlite's LLVM stops
its process when one of its internal checks fails, so a crash there is retried once with the
vectorisers off and, failing again, refuses the kernel (it runs on the interpreter), instead of
taking the caller down. DAY0_CPU_COMPILE_INPROCESS=1 compiles in this process instead.

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
import struct
import subprocess
import sys
import threading
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm

_LOCK = threading.Lock()          # loading objects
_COMPILE_LOCK = threading.Lock()  # the compile server (one request at a time)
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
    from .llvm_server import target_machine as make
    tm = make()
    _register_libm()
    return tm


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


#: modules outside this package whose code shapes the emitted code (pointer origins decide the
#: bounds checks; the numerics module gives the rounding constants)
_OUTSIDE = ("backends.cpu_interp.provenance", "sdk.numerics")


@functools.lru_cache(maxsize=None)
def fingerprint() -> str:
    """This package's source and what it emits code from, so that an edited compiler never reuses
    an old object."""
    digest = hashlib.sha256()
    import importlib.util
    outside = [Path(importlib.util.find_spec(name).origin) for name in _OUTSIDE]
    for path in sorted(Path(__file__).parent.glob("*.py")) + outside:
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


class CompileError(Exception):
    """LLVM could not compile a kernel (it crashed, or rejected the IR)."""


def compile_ir(text: str) -> bytes:
    """LLVM IR text -> an optimised native object for this CPU."""
    if os.environ.get("DAY0_CPU_COMPILE_INPROCESS", "") not in ("", "0"):
        from .llvm_server import compile_ir as compile_here
        return compile_here(target_machine(), text)
    with _COMPILE_LOCK:
        for vectorize in (True, False):
            try:
                return _server().request(text, vectorize)
            except _Crashed:
                _SERVER[0].close()
                _SERVER[0] = None  # a fresh one for the retry
        raise CompileError("LLVM crashed compiling it (twice, the second time with the vectorisers off)")


def optimized_ir(text: str) -> str:
    """The optimised IR, for reading what LLVM made of a kernel (in this process)."""
    from .llvm_server import optimize
    return str(optimize(target_machine(), text))


class _Crashed(Exception):
    pass


class _Server:
    def __init__(self) -> None:
        script = Path(__file__).with_name("llvm_server.py")
        boot = ("import importlib.util as u, sys; s = u.spec_from_file_location('day0_llvm_server', sys.argv[1]); "
                "m = u.module_from_spec(s); s.loader.exec_module(m); m.serve()")
        self.proc = subprocess.Popen([sys.executable, "-S", "-c", boot, str(script)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=_server_env())

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001 - exiting anyway
            self.proc.kill()
        for f in (self.proc.stdout,):
            f.close()

    def request(self, text: str, vectorize: bool) -> bytes:
        data = text.encode()
        try:
            self.proc.stdin.write(struct.pack("<II", len(data), int(vectorize)) + data)
            self.proc.stdin.flush()
            head = self.proc.stdout.read(5)
            if len(head) < 5:
                raise _Crashed
            status, n = struct.unpack("<BI", head)
            body = self.proc.stdout.read(n)
        except (BrokenPipeError, OSError):
            raise _Crashed from None
        if len(body) < n:
            raise _Crashed
        if status:
            raise CompileError(body.decode(errors="replace"))
        return body


_SERVER: list[_Server | None] = [None]


def _server() -> _Server:
    srv = _SERVER[0]
    if srv is None or srv.proc.poll() is not None:
        if srv is not None:
            srv.close()
        srv = _SERVER[0] = _Server()
        if not _EXIT_HOOK:
            import atexit
            atexit.register(_close_server)
            _EXIT_HOOK.append(True)
    return srv


_EXIT_HOOK: list = []


def _close_server() -> None:
    if _SERVER[0] is not None:
        _SERVER[0].close()
        _SERVER[0] = None


def _server_env() -> dict:
    """The child finds llvmlite where this process did (-S skips site: its path is passed on)."""
    env = dict(os.environ)
    paths = [str(Path(llvmlite.__file__).parent.parent)]
    env["PYTHONPATH"] = os.pathsep.join(paths + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


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
