"""The backend contract: Target, Options, capabilities, stages, device and memory, launch, registry.

A backend is a subclass of `Backend` published through the entry-point group `day0.backends`:

    [project.entry-points."day0.backends"]
    mydev = "mydev_triton_backend:MyDevBackend"

Triton then runs an ordinary `kernel[grid](tensors)` on it through `sdk.triton_bridge`:
    capabilities() -> Capabilities             which ops and types it accepts (data; checked first)
    stages(options) -> [Stage, ...]            compile: "ttir" (Triton's passes), the backend's own
                                               MLIR passes, its IR, the binary (sdk.stages); the
                                               default last stage calls lower(module, options)
    load(artifact, kernel_info) -> kernel      at the first launch
    launch(kernel, grid, args, stream)         args: DeviceArgs for tensors, scalars as they are
    device / allocator                         streams, events, synchronize (sdk.device.Device);
                                               device memory and copies (sdk.device.Allocator, or
                                               None for a backend over host memory)
Target and device properties come from the backend's device model (sdk/device_models).
"""
from __future__ import annotations

import inspect
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, ClassVar

from .capabilities import Capabilities, OpSupport, unsupported
from .device import Allocator, Device, HostDevice
from .errors import BackendLoadError, BackendUnavailable, UnknownName, UnsupportedOps
from .lowering import LoweringTable, Rule
from .records import Artifact, DeviceArg, TensorDescArg
from .ttir import Module

ENTRY_POINT_GROUP = "day0.backends"

__all__ = ["Allocator", "Artifact", "Backend", "BackendInfo", "Capabilities", "Device", "DeviceArg",
           "KernelInfo", "LoweringTable", "OpSupport", "Options", "Registry", "Rule", "Target",
           "TensorDescArg", "get_backend", "registry", "unsupported", "validate"]


@dataclass(frozen=True)
class Target:
    """What a backend compiles for. `arch` is free-form ("sm_90", "host", "npu-v1"). Build it from
    the device model (`Target.from_device_model`): the model is the one source of truth."""

    backend: str
    arch: str
    warp_size: int
    vector_width: int | None          # 32-bit vector lanes per compute unit; None: not stated
    device_model: str | None = None   # a shipped model's name, or the path of a YAML file

    @staticmethod
    def from_device_model(backend: str, device_model: str) -> "Target":
        """The target the device model describes: its `triton:` block's arch and warp size, and its
        vector unit's lanes."""
        model = load_device_model(device_model)
        t = model.triton
        missing = [f for f in ("arch", "warp_size") if t is None or getattr(t, f) is None]
        if missing:
            raise BackendLoadError(
                f"backend '{backend}': device model '{model.name}' gives no {' or '.join('triton.' + m for m in missing)}; "
                f"add them to its `triton:` block (each with its source)")
        return Target(backend, t.arch.value, t.warp_size.value, model.vector.lanes_per_unit.value, device_model)


def load_device_model(spec: str) -> Any:
    from .device_models import load
    return load(spec)


#: the most warps a Triton program launches with (1,024 threads of 32 lanes on a GPU)
MAX_WARPS = 32


def device_properties_of(model: Any) -> dict[str, int]:
    """What libraries ask Triton's driver for (`utils.get_device_properties`), from a device model:
    only what the model states (max_num_regs only where it gives a register file)."""
    props = {"multiprocessor_count": model.units, "max_shared_mem": model.max_program_bytes,
             "sm_clock_rate": int(model.compute.clock_mhz.value * 1000)}  # kHz, as CUDA reports it
    if model.warp_size is not None:
        props["warpSize"] = model.warp_size
    regs = model.memory.per_unit.registers_kib
    if regs is not None:
        props["max_num_regs"] = int(regs.value * 1024) // 4
    return props


@dataclass(frozen=True)
class Options:
    """Compile options Triton's frontend reads, plus the backend's own knobs in `extra`.

    num_warps / num_stages are scheduling hints for GPUs; a device without warps may ignore them
    (its Backend says so through `Backend.ignores_warps`). `checks` turns on run-time checks a
    backend offers ("uninit", "races" for cpu_interp); `dump_stages` / `dump_dir` dump the named
    compile stages (sdk.stages). Backends fill them from the environment when options are parsed
    (compile time), never at import."""

    num_warps: int = 4
    num_stages: int = 1
    num_ctas: int = 1
    debug: bool = False
    sanitize_overflow: bool = False
    arch: str = ""
    backend_name: str = ""
    supported_fp8_dtypes: tuple[str, ...] = ("fp8e5", "fp8e4nv")
    deprecated_fp8_dot_operand_dtypes: tuple[str, ...] = ()
    default_dot_input_precision: str = "ieee"
    allowed_dot_input_precisions: tuple[str, ...] = ("tf32", "tf32x3", "ieee", "bf16x3", "bf16x6")
    max_num_imprecise_acc_default: int = 0
    extern_libs: tuple = ()
    enable_fp_fusion: bool = True
    launch_cooperative_grid: bool = False
    instrumentation_mode: str = ""
    # other backends' tuning knobs that kernels tuned for them pass at launch or in autotune
    # configs (CUDA: maxnreg, launch_pdl; AMD: waves_per_eu, matrix_instr_nonkdim, kpack,
    # schedule_hint): accepted and ignored, as num_warps is by a device without warps, so that code
    # tuned for those devices runs unchanged (Triton rejects a launch keyword no option names)
    maxnreg: int | None = None
    launch_pdl: bool = False
    waves_per_eu: int = 0
    matrix_instr_nonkdim: int = 0
    kpack: int = 1
    schedule_hint: str = ""
    checks: tuple[str, ...] = ()
    dump_stages: tuple[str, ...] = ()
    dump_dir: str = ""
    extra: tuple[tuple[str, Any], ...] = ()

    def hash(self) -> str:
        import hashlib
        return hashlib.sha256(repr(sorted(self.__dict__.items())).encode()).hexdigest()


@dataclass(frozen=True)
class KernelInfo:
    """What `load` receives besides the artifact."""

    name: str
    params: tuple[tuple[str, str], ...]  # (parameter name, Triton type) of the runtime arguments, in order
    metadata: Any                          # Triton's KernelMetadata (num_warps, shared, options ...)
    src: Any = None                        # Triton's compile source (signature, constants), for
                                           # backends that reuse Triton's own launchers
    source_file: str | None = None         # the Python file the kernel is defined in now; see
                                           # sdk.ttir.Module.relocate


class Backend(ABC):
    """Subclass this (or use `day0 scaffold`). See the module docstring for the hooks."""

    name: ClassVar[str]
    target: ClassVar[Target]
    binary_ext: ClassVar[str] = "day0bin"
    torch_device: ClassVar[str] = "cpu"        # where the tensors a kernel receives live; its device
                                               # type is the Triton target's backend (libraries turn
                                               # it into torch.<type>, autocast types, properties)
    stands_in_for: ClassVar[tuple[str, ...]] = ()  # Triton backends (by entry-point name) that step
                                               # aside while this one is selected (nvidia_ref: "nvidia")
    ignores_warps: ClassVar[bool] = True       # num_warps / num_stages are hints it ignores
    passes_tensors: ClassVar[bool] = False     # True: launch gets Triton's arguments as they are
                                               # (tensors unmapped, constexprs included)
    registers_per_thread: ClassVar[int] = 32   # what a compiled kernel's `n_regs` says (host code
                                               # sizing persistent grids divides by it)
    ttir_passes: ClassVar[tuple[str, ...]] = (  # Triton TTIR passes of the default "ttir" stage
        "inliner", "rewrite_tensor_pointer", "canonicalizer", "combine", "reorder_broadcast", "cse",
        "symbol_dce", "loop_unroll")

    def __init__(self) -> None:
        self.lowering: LoweringTable | None = self.lowering_table()
        # a subclass may set its device and allocator before or after calling this
        self.device: Device = self.__dict__.get("device") or HostDevice()
        self.allocator: Allocator | None = self.__dict__.get("allocator")

    # ---------------------------------------------------------------------- what it accepts
    def lowering_table(self) -> LoweringTable | None:
        """The per-op rules of a backend that implements ops rule by rule (an interpreter, an
        emitter), a fresh table per instance; None for a backend that compiles otherwise."""
        return None

    def capabilities(self) -> Capabilities:
        """Which ops and types the backend accepts, as data (default: what its lowering table's
        rules accept). Every op of a kernel is checked against it before any backend stage runs."""
        if self.lowering is None:
            raise BackendLoadError(f"backend '{self.name}' declares neither capabilities() nor lowering_table()")
        return self.lowering.capabilities()

    # ---------------------------------------------------------------------------- compile
    def stages(self, options: Any) -> list:
        """The compile stages, in order (sdk.stages): by default Triton's TTIR passes
        (`ttir_passes`), then `lower` on the checked day0 IR, producing the binary."""
        from .stages import lower_stage, triton_passes
        return [triton_passes(self.ttir_passes), lower_stage(self.binary_ext)]

    def load_dialects(self, context: Any) -> None:
        """Load the MLIR dialects the backend's own stages use into Triton's MLIR context."""

    def lower(self, module: Module, options: Any) -> bytes | Artifact:
        """The default last stage: compile the checked day0 IR (an `sdk.ttir.Module`) to the
        artifact (bytes, cached by Triton). Declare a third parameter `mlir` to also receive the
        live MLIR module it was read from. Backends that declare their own stages need not."""
        raise NotImplementedError(f"backend '{self.name}' implements neither lower() nor stages()")

    @abstractmethod
    def load(self, artifact: bytes, kernel: KernelInfo) -> Any:
        """Turn an artifact into a launchable kernel handle (called once, at the first launch)."""

    # ---------------------------------------------------------------------------- launch
    @abstractmethod
    def launch(self, kernel: Any, grid: tuple[int, int, int], args: list[Any], stream: Any = None) -> None:
        """Queue `kernel` over `grid` on `stream`; `args` are DeviceArgs for tensors and Python
        scalars. A synchronous device returns when it is done; an asynchronous one when queued
        (events recorded on the stream afterwards complete when it does)."""

    def map_tensor(self, tensor: Any, name: str) -> DeviceArg:
        """A tensor the kernel addresses in place: a host tensor of a backend over host memory
        (zero-copy), or a tensor on the backend's own torch device."""
        from .arguments import device_arg, host_arg, ttir_dtype
        if self.allocator is None or str(getattr(tensor, "device", "cpu")).startswith("cpu"):
            return host_arg(tensor, name)
        return device_arg(self.allocator, tensor.data_ptr(), name, ttir_dtype(tensor.dtype))

    def synchronize(self) -> None:
        """Wait until all queued work is done (and release the scratch it used)."""
        self.device.synchronize()
        if self.allocator is not None:
            self.allocator.reclaim()

    def current_stream(self, device: Any = None) -> Any:
        """The stream a launch goes to (Triton asks before every launch)."""
        return self.device.current_stream()

    # --------------------------------------------------------------------------- queries
    def available(self) -> tuple[bool, str]:
        """(True, "") when this backend can run here; else (False, why)."""
        return True, ""

    def device_model(self) -> Any:
        """The device model record (`sdk.device_models.DeviceModel`) the target names."""
        if not self.target.device_model:
            raise BackendUnavailable(f"backend '{self.name}' names no device model (Target.device_model)")
        return load_device_model(self.target.device_model)

    def device_properties(self) -> dict[str, int]:
        """What libraries ask Triton's driver for (`utils.get_device_properties`): from the device
        model. Host code sizes persistent grids as max_num_regs // (n_regs * warpSize * num_warps)
        programs a unit (Triton's fused-softmax tutorial); on a GPU every kernel that compiled fits
        at least once. A backend that ignores warps takes any num_warps with the same `n_regs`
        (registers_per_thread), so it reports a register file that holds one program at the most
        warps Triton launches: never a grid of zero programs."""
        props = device_properties_of(self.device_model())
        if self.ignores_warps and "max_num_regs" in props:
            fits = self.registers_per_thread * props.get("warpSize", 1) * MAX_WARPS
            props["max_num_regs"] = max(props["max_num_regs"], fits)
        return props

    def variant(self, arch: str | None = None, compile_only: bool = False) -> "Backend":
        """This backend for another arch, or compiling without running (`name@arch`,
        `name@arch/compile` in the registry). Backends that can do neither keep this default."""
        if (arch in (None, self.target.arch)) and not compile_only:
            return self
        what = "compile-only mode" if compile_only else f"arch '{arch}'"
        raise BackendUnavailable(f"backend '{self.name}' has no {what}")

    def take_launch_stats(self) -> list[dict]:
        """Per-launch facts gathered since the last call (e.g. registers, spills, shared memory of
        each kernel compiled in compile-only mode); the conformance runner records them."""
        return []

    def parse_options(self, opts: dict) -> Options:
        """Triton's options for one compile; dump settings not given come from DAY0_DUMP_STAGES /
        DAY0_DUMP_DIR, read now (compile time)."""
        from .stages import dump_stages_from_env
        known = {k: opts[k] for k in Options.__dataclass_fields__ if k in opts and opts[k] is not None}
        for key in ("supported_fp8_dtypes", "deprecated_fp8_dot_operand_dtypes", "allowed_dot_input_precisions",
                    "checks", "dump_stages"):
            if key in known:
                known[key] = tuple(known[key])
        if "extern_libs" in known:
            known["extern_libs"] = tuple(dict(known["extern_libs"]).items())
        known.setdefault("arch", self.target.arch)
        known.setdefault("dump_stages", dump_stages_from_env())
        known.setdefault("dump_dir", os.environ.get("DAY0_DUMP_DIR", ""))
        known["backend_name"] = self.name
        return Options(**known)

    def min_dot_size(self, lhs_type: Any, rhs_type: Any) -> tuple[int, int, int]:
        """Smallest (M, N, K) the frontend accepts for tl.dot."""
        return (1, 1, 1)

    def custom_type_conversions(self) -> Any:
        """What Triton's frontend calls to convert to or from fp8e4b15 (`convert_custom_types`);
        by default the integer-op version in `sdk.fp8e4b15`, which any lowering runs."""
        from .fp8e4b15 import convert_custom_types
        return convert_custom_types

    def module_map(self) -> dict[str, Any]:
        """Maps `triton.language.extra.libdevice` to an implementation (CUDA's names by default)."""
        from triton.language.extra.cuda import libdevice
        return {"triton.language.extra.libdevice": libdevice}


# ------------------------------------------------------------------------------ validation
_REQUIRED = {name: inspect.signature(getattr(Backend, name)) for name in Backend.__abstractmethods__}


def validate(cls: Any, source: str) -> None:
    """Check a backend class at registration; name the plugin, the hook and what is wrong."""
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise BackendLoadError(f"backend '{source}': {cls!r} is not a subclass of sdk.backend.Backend")
    for attr in ("name", "target"):
        if not hasattr(cls, attr):
            raise BackendLoadError(f"backend '{source}': class attribute '{attr}' is missing")
    if not isinstance(cls.target, Target):
        raise BackendLoadError(f"backend '{source}': 'target' must be an sdk.backend.Target")
    if cls.name != source:
        raise BackendLoadError(f"backend '{source}': class says its name is '{cls.name}'")
    missing = sorted(getattr(cls, "__abstractmethods__", ()))
    if missing:
        raise BackendLoadError(f"backend '{source}': required hook(s) not implemented: {', '.join(missing)}")
    for either in (("lower", "stages"), ("lowering_table", "capabilities")):
        if not any(_overrides(cls, hook) for hook in either):
            raise BackendLoadError(f"backend '{source}': implement {either[0]}() or {either[1]}()")
    for hook, want in _REQUIRED.items():
        got = inspect.signature(getattr(cls, hook))
        if len(got.parameters) < len([p for p in want.parameters.values() if p.default is p.empty]):
            raise BackendLoadError(f"backend '{source}': hook {hook}{got} must accept {hook}{want}")
    _check_target(cls.target, source)


def _overrides(cls: type, hook: str) -> bool:
    return any(hook in vars(k) for k in cls.__mro__ if k is not Backend and issubclass(k, Backend))


def _check_target(target: Target, source: str) -> None:
    """A target naming a device model says what the model says (one source of truth)."""
    if not target.device_model:
        return
    try:
        want = Target.from_device_model(target.backend, target.device_model)
    except BackendLoadError:
        raise
    except Exception as exc:  # an unreadable model is the backend's problem, named as such
        raise BackendLoadError(f"backend '{source}': device model '{target.device_model}': {exc}") from None
    for key in ("arch", "warp_size", "vector_width"):
        if getattr(target, key) != getattr(want, key):
            raise BackendLoadError(
                f"backend '{source}': target.{key} is {getattr(target, key)!r} but its device model "
                f"'{target.device_model}' says {getattr(want, key)!r}; build the target with "
                f"Target.from_device_model")


# -------------------------------------------------------------------------------- registry
@dataclass
class BackendInfo:
    name: str
    cls: type | None = None
    error: str = ""            # import / validation error, when the package is broken
    origin: str = ""           # the entry point value
    _instance: Backend | None = field(default=None, repr=False)

    @property
    def loaded(self) -> bool:
        return self.cls is not None


class Registry:
    """Backends found through the `day0.backends` entry points, plus any registered in code."""

    def __init__(self) -> None:
        self._infos: dict[str, BackendInfo] | None = None
        self._variants: dict[str, Backend] = {}

    def _discover(self) -> dict[str, BackendInfo]:
        infos: dict[str, BackendInfo] = {}
        for ep in [*entry_points(group=ENTRY_POINT_GROUP), *_env_entry_points()]:
            info = BackendInfo(ep.name, origin=ep.value)
            try:
                cls = ep.load()
                validate(cls, ep.name)
                info.cls = cls
            except BackendLoadError as exc:
                info.error = str(exc)
            except Exception as exc:  # a broken package must not stop the others
                info.error = f"{type(exc).__name__}: {exc}"
            infos[ep.name] = info
        return infos

    @property
    def infos(self) -> dict[str, BackendInfo]:
        if self._infos is None:
            self._infos = self._discover()
        return self._infos

    def register(self, cls: type, name: str | None = None) -> None:
        """Register a backend class directly (tests, notebooks); validated like an entry point."""
        name = name or getattr(cls, "name", "")
        validate(cls, name)
        self.infos[name] = BackendInfo(name, cls, origin=f"{cls.__module__}:{cls.__qualname__}")

    def unregister(self, name: str) -> None:
        self.infos.pop(name, None)

    def names(self) -> list[str]:
        return sorted(self.infos)

    def get(self, name: str) -> Backend:
        """`name`, or a variant: `name@arch` (another arch), `name@arch/compile` (compile only)."""
        if "@" in name:
            return self._variant(name)
        info = self.infos.get(name)
        if info is None:
            raise UnknownName("backend", name, self.names())
        if not info.loaded:
            raise BackendUnavailable(f"backend '{name}' failed to load: {info.error}")
        if info._instance is None:
            info._instance = info.cls()
        return info._instance


    def _variant(self, full: str) -> Backend:
        cached = self._variants.get(full)
        if cached is None:
            base, _, rest = full.partition("@")
            arch, _, mode = rest.partition("/")
            if mode not in ("", "compile"):
                raise UnknownName("backend mode", mode, ["compile"])
            cached = self.get(base).variant(arch=arch or None, compile_only=mode == "compile")
            self._variants[full] = cached
        return cached


def _env_entry_points() -> list:
    """Backends named in DAY0_BACKENDS="name=module:Class,..." (development without installing)."""
    from importlib.metadata import EntryPoint
    spec = os.environ.get("DAY0_BACKENDS", "")
    out = []
    for item in filter(None, (x.strip() for x in spec.split(","))):
        name, _, value = item.partition("=")
        out.append(EntryPoint(name.strip(), value.strip(), ENTRY_POINT_GROUP))
    return out


registry = Registry()


def get_backend(name: str) -> Backend:
    return registry.get(name)


def check_lowering(backend: Backend, module: Module, kernel_name: str) -> None:
    """Raise UnsupportedOps naming every op of `module` the backend does not accept."""
    missing = backend.capabilities().missing(module)
    if missing:
        raise UnsupportedOps(backend.name, kernel_name, missing)
