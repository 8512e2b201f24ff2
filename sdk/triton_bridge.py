"""Any registered day0 Backend -> the `BaseBackend` / `DriverBase` pair Triton expects (3.6 - 3.9).

Three ways to select a backend:
  * `sdk.activate("name")` (a function, also a context manager) sets Triton's active driver;
  * `TRITON_DEFAULT_BACKEND=name` with no code change: the backend's `triton.backends` entry point
    makes Triton discover it, and its driver reports active only when so chosen;
  * the CLI (`day0 conformance --backend name`), which calls `activate`.
Module import is cheap and safe inside Triton's own discovery: nothing here loads the day0 backend
until Triton instantiates the compiler or driver.
"""
from __future__ import annotations

import sys

if "triton" not in sys.modules:
    # Triton's backend discovery imports this module through the day0 plugins. Imported first,
    # this module would be half-built then: let the discovery build a complete copy, which the
    # import system then hands to whoever imported this one.
    _half_built = sys.modules.pop(__name__, None)
    import triton  # noqa: F401
    if __name__ not in sys.modules and _half_built is not None:  # no day0 plugin was discovered
        sys.modules[__name__] = _half_built

import functools
import os
import statistics
import time
import zlib
from dataclasses import dataclass
from typing import Any, Callable

from triton.backends.compiler import BaseBackend, GPUTarget
from triton.backends.driver import DriverBase

from . import launches as _launches
from .arguments import map_arguments
from .backend import Backend, KernelInfo, get_backend
from .errors import BackendConflict, BackendUnavailable
from .stages import DEFERRED as _DEFERRED, Pipeline, deferred_error as _deferred_error

_CPP_TYPES = {"i1": "int8_t", "i8": "int8_t", "i16": "int16_t", "i32": "int32_t", "i64": "int64_t",
              "u1": "uint8_t", "u8": "uint8_t", "u16": "uint16_t", "u32": "uint32_t", "u64": "uint64_t",
              "fp16": "double", "bf16": "double", "fp32": "double", "f32": "double", "fp64": "double"}


# ------------------------------------------------------------------------------- compiler
@functools.lru_cache(maxsize=None)
def _code_fingerprint(backend_cls: type) -> str:
    """A digest of the Python sources of the backend's package and of the SDK's compile path, so
    that Triton's on-disk cache never serves a kernel lowered by different code (an upgraded or
    edited backend)."""
    import hashlib
    from pathlib import Path
    digest = hashlib.sha256()
    here = Path(__file__).parent
    roots = [here / "ttir", Path(__file__), here / "stages.py", here / "capabilities.py", here / "lowering.py"]
    for cls in backend_cls.__mro__:  # the backend's package and those of the backends it builds on
        module = sys.modules.get(cls.__module__)
        if module is None or not getattr(module, "__file__", None) or cls.__module__.startswith(("sdk.", "builtins", "abc")):
            continue
        # the package the class lives in; a module outside any package stands alone
        root = Path(module.__file__).parent if getattr(module, "__package__", "") else Path(module.__file__)
        if root not in roots:
            roots.append(root)
    for root in roots:
        for path in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            try:
                digest.update(path.read_bytes())
            except OSError:
                continue
    return digest.hexdigest()[:16]


def compiler_class(name: str) -> type[BaseBackend]:
    """A concrete `BaseBackend` for the day0 backend called `name` (resolved lazily)."""

    class Day0Compiler(BaseBackend):
        day0_name = name

        @staticmethod
        def supports_target(target: GPUTarget) -> bool:
            # the backend's torch device type, claimed only while this backend is the selected one,
            # so that Triton's exactly-one rule holds with several day0 backends installed
            return selected() == name and target.backend == device_type(get_backend(name))

        def __init__(self, target: GPUTarget) -> None:
            super().__init__(target)
            self.day0 = get_backend(name)
            self.binary_ext = self.day0.binary_ext

        def hash(self) -> str:
            from . import __version__
            return f"day0-{__version__}-{name}-{self.day0.target.arch}-{_code_fingerprint(type(self.day0))}"

        def parse_options(self, opts: dict) -> Any:
            return self.day0.parse_options(dict(opts))

        def add_stages(self, stages: dict, options: Any, language: Any = None) -> None:
            pipeline = Pipeline(self.day0, options)  # one per compile: its stages share a context
            for stage in pipeline.stages:
                stages[stage.name] = pipeline.runner(stage)

        def load_dialects(self, context: Any) -> None:
            self.day0.load_dialects(context)

        def get_module_map(self) -> dict:
            return self.day0.module_map()

        def get_codegen_implementation(self, options: Any) -> dict:
            return {"min_dot_size": self.day0.min_dot_size,
                    "convert_custom_types": self.day0.custom_type_conversions()}

        def pack_metadata(self, metadata: Any) -> tuple:
            return (metadata.num_warps, metadata.num_ctas, metadata.shared)

    Day0Compiler.__name__ = Day0Compiler.__qualname__ = f"Day0Compiler_{name}"
    return Day0Compiler


# ------------------------------------------------------------------------------ selection
_SELECTED: list[str] = []  # sdk.activate nests: the innermost selection wins


def selected() -> str | None:
    """The day0 backend that Triton's compiler and driver serve now: the innermost `activate`, else
    `TRITON_DEFAULT_BACKEND`."""
    return _SELECTED[-1] if _SELECTED else (os.environ.get("TRITON_DEFAULT_BACKEND") or None)


def device_type(backend: Backend) -> str:
    """The torch device type a backend's tensors live on: what its Triton target reports, so that
    libraries which turn the target into `torch.<type>` modules, autocast types or device
    properties (FLA, Inductor) run unchanged."""
    return str(backend.torch_device).split(":")[0]


def _triton_target(backend: Backend) -> GPUTarget:
    t = backend.target
    return GPUTarget(device_type(backend), t.arch, t.warp_size)


def _is_day0(entry: Any) -> bool:
    return getattr(entry.compiler, "day0_name", None) is not None


class _Claim:
    """While a backend is selected: Triton backends it stands in for step aside, any other claimant
    of its device type is an error, and its driver is also reachable under the device type's name
    (Inductor looks up `triton.backends.backends["cpu"]` for host tensors)."""

    def __init__(self, name: str):
        import triton.backends as tb
        backend = get_backend(name)
        target = _triton_target(backend)
        self.removed: dict[str, Any] = {}
        for key, entry in list(tb.backends.items()):
            if _is_day0(entry):
                continue
            try:
                claims = bool(entry.compiler.supports_target(target))
            except Exception:  # a claimant that cannot even answer does not claim
                claims = False
            if not claims:
                continue
            if key in backend.stands_in_for:
                self.removed[key] = entry
                continue
            raise BackendConflict(
                f"backend '{name}' targets torch device type '{target.backend}', which the installed "
                f"Triton backend '{key}' ({entry.compiler.__module__}) also claims; uninstall one of them "
                f"or select '{key}' instead")
        for key in self.removed:
            tb.backends.pop(key)
        self.alias = target.backend
        self.previous = tb.backends.get(self.alias)
        if self.previous is not None and not _is_day0(self.previous):
            self.alias = None  # a Triton backend of that very name that does not claim the target
        elif self.alias != name:
            tb.backends[self.alias] = tb.Backend(compiler=_alias_compiler(name), driver=tb.backends[name].driver)
        else:
            self.alias = None

    def release(self) -> None:
        import triton.backends as tb
        if self.alias is not None:
            if self.previous is None:
                tb.backends.pop(self.alias, None)
            else:
                tb.backends[self.alias] = self.previous
        tb.backends.update(self.removed)


@functools.lru_cache(maxsize=None)
def _alias_compiler(name: str) -> type[BaseBackend]:
    """The compiler of a device-type alias entry: never claims a target (the backend's own entry
    does), so that Triton still finds exactly one compiler."""
    base = compiler_class(name)
    return type(f"{base.__name__}_alias", (base,), {"supports_target": staticmethod(lambda target: False)})


# --------------------------------------------------------------------------------- driver


def device_id(name: str) -> int:
    """A device index of its own per backend, so Triton's per-device kernel caches never mix a
    kernel compiled for one backend with another's."""
    return 1000 + zlib.crc32(name.encode()) % 100_000


_TORCH_KEY_OWNER: dict[str, str] = {}  # device type -> the backend that reports torch's device for it


def current_device_fn(name: str, backend: Backend) -> Callable[[], Any]:
    """What the driver's `get_current_device` returns: the key Triton files kernels under
    (`JITFunction.device_caches[key]`), and hands to the backend's hooks.

    The backend that `TRITON_DEFAULT_BACKEND` names is its device type's driver for the process, as
    Triton's CUDA driver is for CUDA: it reports torch's current device for that type
    (`torch.cuda.current_device()` is an index, `torch.cpu.current_device()` is "cpu"), the key
    that code written for Triton's drivers looks kernels up under. Every other backend (selected
    for a scope with `sdk.activate`), and the default one where torch has no current device for its
    type, reports an index of its own (`device_id`), so that two backends on one device type never
    share Triton's per-device kernel caches; so does a second backend claiming torch's key for a
    device type another one already reports."""
    own = device_id(name)
    dtype = device_type(backend)
    if os.environ.get("TRITON_DEFAULT_BACKEND") == name and _TORCH_KEY_OWNER.get(dtype, name) == name:
        try:
            import torch
            current = torch.get_device_module(dtype).current_device
            current()
        except Exception:  # no device of that type here (a compile-only variant), or no such module
            return lambda: own
        _TORCH_KEY_OWNER[dtype] = name
        return current
    return lambda: own


class _Utils:
    def __init__(self, backend: Backend):
        self.backend = backend

    def load_binary(self, name: str, kernel: bytes, shared: int, device: int) -> tuple:
        if kernel.startswith(_DEFERRED):
            _deferred_error(kernel)
        # the module must not be None: Triton re-runs _init_handles (a new launcher, a new load)
        # before every launch while it is, because launch_metadata checks it
        return name, _Pending(name, kernel), self.backend.registers_per_thread, 0, 1 << 30

    def unload_module(self, module: Any) -> None:
        pass

    def get_device_properties(self, device: Any = None) -> dict:
        return dict(self.backend.device_properties())


@dataclass
class _Pending:
    """The artifact until the launcher (which knows the signature) asks the backend to load it."""

    name: str
    artifact: bytes


def _source_file(src: Any) -> str | None:
    """The file of the Python function behind a compile source (None for IR sources)."""
    fn = getattr(getattr(src, "fn", None), "fn", None)
    code = getattr(fn, "__code__", None)
    return code.co_filename if code is not None else None


class _Launcher:
    """Called by Triton as (gx, gy, gz, stream, function, packed_metadata, launch_metadata,
    enter_hook, exit_hook, *args) with the kernel's actual arguments (tensors stay tensors)."""

    def __init__(self, name: str, backend: Backend, src: Any, metadata: Any):
        self.name = name
        self.backend = backend
        names = list(getattr(getattr(src, "fn", None), "arg_names", None) or src.signature.keys())
        sig = src.signature
        types = [sig.get(n) if isinstance(sig, dict) and n in sig else v
                 for n, v in zip(names, sig.values() if isinstance(sig, dict) else sig)]
        self.params = list(zip(names, types))
        self.flat = list(_flatten(self.params))  # (name, type) per leaf argument, tuples unpacked
        self.metadata = metadata
        self.src = src
        self.kernel = None
        self.raw = backend.passes_tensors
        self.direct = None  # Triton's own launcher, when the loaded kernel brings one (see __call__)
        self.function = None
        # which parameters the kernel reads and may write (from its TTIR; "rw" when unknown)
        self.access = tuple(getattr(metadata, "day0_access", None) or ())

    def _runtime_params(self) -> tuple[tuple[str, str], ...]:
        return tuple((n, t) for n, t in self.flat if t != "constexpr")

    def __call__(self, gx, gy, gz, stream, function, packed_metadata, launch_metadata,
                 enter_hook, exit_hook, *args):
        if self.direct is not None:  # the hot path: one Python frame over Triton's own launcher
            if _launches.RECORDERS:
                return self._recorded(function, lambda: self.direct(
                    gx, gy, gz, stream, self.function, packed_metadata, launch_metadata, enter_hook,
                    exit_hook, *args))
            return self.direct(gx, gy, gz, stream, self.function, packed_metadata, launch_metadata,
                               enter_hook, exit_hook, *args)
        backend = get_backend(self.name)
        if backend is not self.backend:  # registered again since (a notebook, a test): load anew
            self.backend, self.kernel, self.raw = backend, None, backend.passes_tensors
        if self.kernel is None:
            if function.artifact.startswith(_DEFERRED):
                raise _deferred_error(function.artifact)
            info = KernelInfo(function.name, self._runtime_params(), self.metadata, self.src,
                              _source_file(self.src))
            self.kernel = self.backend.load(function.artifact, info)
            if self.raw and getattr(self.kernel, "triton_launcher", None) is not None:
                # a passes_tensors backend whose kernel handle carries a launcher with Triton's
                # own calling convention and the `function` handle it takes (nvidia_ref)
                self.direct, self.function = self.kernel.triton_launcher, self.kernel.function
                return self(gx, gy, gz, stream, function, packed_metadata, launch_metadata,
                            enter_hook, exit_hook, *args)
        if gx * gy * gz == 0:
            return
        if _launches.RECORDERS:
            return self._recorded(function, lambda: self._launch(
                gx, gy, gz, stream, launch_metadata, enter_hook, exit_hook, args))
        self._launch(gx, gy, gz, stream, launch_metadata, enter_hook, exit_hook, args)

    def _recorded(self, function: Any, launch: Any) -> Any:
        """A launch while `sdk.launches.record()` is open: report it, or its fault, by kernel."""
        fn = getattr(getattr(self.src, "fn", None), "fn", None)
        where = getattr(self.metadata, "day0_source", "") or _source_file(self.src) or ""
        ops = tuple(getattr(self.metadata, "day0_ops", ()) or ())
        try:
            out = launch()
        except Exception as exc:
            _launches.faulted(function.name, fn, where, ops, f"{type(exc).__name__}: {exc}")
            raise
        _launches.launched(function.name, fn, where, ops, getattr(self.metadata, "day0_native", None),
                           tuple(getattr(self.metadata, "day0_borrowed", ()) or ()),
                           # a kernel handle may say which of its backend's lowerings ran it, and why
                           str(getattr(self.kernel, "tier", "") or ""), str(getattr(self.kernel, "tier_detail", "") or ""))
        return out

    def _launch(self, gx, gy, gz, stream, launch_metadata, enter_hook, exit_hook, args):
        if enter_hook is not None:
            enter_hook(launch_metadata)
        if self.raw:  # the backend takes Triton's arguments as they are: the short path
            self.backend.launch(self.kernel, (gx, gy, gz), args, stream)
            if exit_hook is not None:
                exit_hook(launch_metadata)
            return
        mapped, crossing = map_arguments(self.backend, self.flat, list(_flatten_values(self.params, args)),
                                         self.access, stream)
        launched = False
        try:
            self.backend.launch(self.kernel, (gx, gy, gz), mapped, stream)
            launched = True
        finally:
            if crossing is not None:  # host tensors that crossed into device memory go back
                crossing.copy_out(launched)
        if exit_hook is not None:
            exit_hook(launch_metadata)


def _flatten(params):
    for name, ty in params:
        if isinstance(ty, tuple):
            yield from _flatten([(f"{name}[{k}]", t) for k, t in enumerate(ty)])
        else:
            yield name, ty


def _flatten_values(params, args):
    for (name, ty), value in zip(params, args):
        if isinstance(ty, tuple):
            yield from _flatten_values([(name, t) for t in ty], value)
        else:
            yield value


def host_benchmark(fn, warmup: float = 25, rep: float = 100, grad_to_none=None, quantiles=None,
                   return_mode: str = "mean", sync: Any = None, **_):
    """`triton.testing.do_bench`'s contract for a device timed by the host's clock: `warmup` and
    `rep` are milliseconds, the backend is synchronised after every timed call, results are
    milliseconds. A call that alone takes longer than `rep` (an interpreter running an autotuner's
    candidates) is measured once: each candidate runs once or twice, not dozens of times."""
    sync = sync or (lambda: None)

    def timed() -> float:
        for x in grad_to_none or ():
            x.grad = None
        t0 = time.perf_counter()
        fn()
        sync()
        return (time.perf_counter() - t0) * 1e3

    first = timed()
    times = [first]
    if first < rep:
        each = max(first, 1e-3)
        for _ in range(min(1000, int(warmup / each))):
            fn()
        sync()
        times = [timed() for _ in range(max(1, min(1000, int(rep / each))))]
    if quantiles:
        qs = statistics.quantiles(times + times, n=100) if len(times) > 1 else [times[0]] * 99
        out = [qs[max(0, min(98, int(q * 100) - 1))] for q in quantiles]
        return out[0] if len(out) == 1 else out
    if return_mode == "all":
        return times
    return {"median": statistics.median, "min": min, "max": max}.get(return_mode, statistics.fmean)(times)


def _emulate_default_backend(name: str) -> None:
    """Triton < 3.8 has no TRITON_DEFAULT_BACKEND: it wants exactly one active driver. When this
    backend is the one chosen, make Triton's in-tree GPU drivers step aside (a CUDA machine stays
    as it was whenever the variable does not name a day0 backend)."""
    import importlib
    import triton
    if os.environ.get("TRITON_DEFAULT_BACKEND") != name:
        return
    if tuple(int(x) for x in triton.__version__.split(".")[:2]) >= (3, 8):
        return
    for mod in ("triton.backends.nvidia.driver", "triton.backends.amd.driver"):
        try:
            module = importlib.import_module(mod)
        except Exception:
            continue
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, DriverBase) and "is_active" in vars(obj):
                obj.is_active = classmethod(lambda cls: False)


def driver_class(name: str) -> type[DriverBase]:
    """A concrete `DriverBase` for the day0 backend `name`; active when selected."""
    _emulate_default_backend(name)

    class Day0Driver(DriverBase):
        day0_name = name

        @classmethod
        def is_active(cls) -> bool:
            return selected() == name

        def __init__(self) -> None:
            super().__init__()
            self.day0 = get_backend(name)
            be = self.day0
            if not _SELECTED and selected() == name and name not in _ENV_CLAIMS:
                _ENV_CLAIMS[name] = _Claim(name)  # chosen by TRITON_DEFAULT_BACKEND: for the process
            self.utils = _Utils(be)
            self.launcher_cls = lambda src, metadata: _Launcher(name, be, src, metadata)
            self.backend = name
            self.get_current_stream = be.current_stream  # asked before every launch: no extra frame
            self.get_current_device = current_device_fn(name, be)  # asked before every launch too

        def get_current_target(self) -> GPUTarget:
            return _triton_target(self.day0)

        def get_active_torch_device(self) -> Any:
            import torch
            return torch.device(self.day0.torch_device)

        def get_current_device(self) -> Any:
            return current_device_fn(self.backend, self.day0)()  # the instance's binding replaces this

        def set_current_device(self, device: Any) -> None:
            pass

        def get_current_stream(self, device: Any = None) -> Any:
            return self.day0.current_stream(device)

        def get_device_capability(self, device: Any = None) -> tuple[int, int]:
            return (0, 0)

        def map_python_to_cpp_type(self, ty: str) -> str:
            return "void*" if ty.startswith("*") else _CPP_TYPES.get(ty, ty)

        def get_benchmarker(self):
            if not self.day0.device.synchronous:  # device events time the device's own work
                from triton.testing import do_bench
                return do_bench
            return functools.partial(host_benchmark, sync=self.day0.synchronize)

        def get_device_interface(self) -> Any:
            return self.day0.device.interface()

        def get_empty_cache_for_benchmark(self) -> Any:
            import torch
            size = 256 * 1024 * 1024 if self.day0.torch_device.startswith("cuda") else 1024 * 1024
            return torch.empty(size // 4, dtype=torch.int, device=self.day0.torch_device)

        def clear_cache(self, cache: Any) -> None:
            cache.zero_()

    Day0Driver.__name__ = Day0Driver.__qualname__ = f"Day0Driver_{name}"
    return Day0Driver


def _drop_day0_modules_quietly() -> None:
    """Triton >= 3.8 unloads a kernel's module in `CompiledKernel.__del__` through whichever driver
    is active then. A day0 kernel collected after its backend was deactivated (or at exit, on a
    machine with no GPU driver) would have Triton look for a driver that is not there and print an
    ignored RuntimeError. A day0 kernel (its function a `_Pending`) holds no device resource: it is dropped here,
    Triton's unload hook still called; every other kernel unloads as Triton does it."""
    from triton.compiler.compiler import CompiledKernel
    original = vars(CompiledKernel).get("__del__")
    if original is None or getattr(original, "_day0", False):
        return

    def __del__(self) -> None:
        if self.module is None or not isinstance(getattr(self, "function", None), _Pending):
            return original(self)
        from triton import knobs
        hook = getattr(knobs.runtime, "kernel_unload_hook", None)
        if hook is not None:
            hook(self.module, self.function, self.name, self.metadata_group, self.hash)
        self.module = None

    __del__._day0 = True
    CompiledKernel.__del__ = __del__


# ------------------------------------------------------------------------------- activate
def register_with_triton(name: str) -> None:
    """Make Triton's backend table know `name` even when its package has no `triton.backends`
    entry point (a backend registered in code, or a test double)."""
    import triton.backends as tb
    _drop_day0_modules_quietly()
    if name not in tb.backends:
        tb.backends[name] = tb.Backend(compiler=compiler_class(name), driver=driver_class(name))


class activate:
    """Make `name` Triton's active backend: `sdk.activate("cpu_interp")` or `with sdk.activate(...):`."""

    def __init__(self, name: str):
        backend = get_backend(name)
        ok, why = backend.available()
        if not ok:
            raise BackendUnavailable(f"backend '{name}' cannot run here: {why}")
        register_with_triton(name)
        from triton.runtime import driver
        import triton.backends as tb
        self.name = name
        self._claim = _Claim(name)
        self._previous = driver._active
        _SELECTED.append(name)
        self._active = True
        driver.set_active(tb.backends[name].driver())

    def __enter__(self) -> "activate":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.deactivate()

    def deactivate(self) -> None:
        if not self._active:
            return
        from triton.runtime import driver
        self._active = False
        for k in range(len(_SELECTED) - 1, -1, -1):
            if _SELECTED[k] == self.name:
                del _SELECTED[k]
                break
        self._claim.release()
        driver._active = self._previous


_ENV_CLAIMS: dict[str, _Claim] = {}
