"""The nvidia_ref Backend: Triton's own CUDA pipeline behind the day0 contract.

* `lower` runs CUDA's stages (ttgir -> llir -> ptx -> cubin) for the variant's arch, from the TTIR the
  SDK hands over (after CUDA's own TTIR passes, see `ttir_passes`). No GPU is needed to compile.
* Real mode (`nvidia_ref`, `nvidia_ref@sm_90`): tensors are CUDA tensors used in place, the cubin is
  loaded by Triton's CUDA driver and launched by Triton's own `CudaLauncher`.
* Compile-only mode (`nvidia_ref@sm_89/compile`): tensors stay on the CPU; a launch inside
  `sdk.launches.compile_only()` runs nothing and records what the kernel costs on that arch
  (`take_launch_stats`, and the block's list gets the binary too); a launch outside one is an error,
  since it would leave the kernel's outputs unwritten.
* Without a GPU, real mode is unavailable however it is selected (`sdk.activate`, the CLI, or
  `TRITON_DEFAULT_BACKEND=nvidia_ref`, which selects a driver without asking): the first launch
  says so in one line instead of failing inside torch's CUDA bindings.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from sdk.backend import Artifact, Backend, KernelInfo, Target
from sdk.capabilities import Capabilities
from sdk.device import Device
from sdk.errors import BackendUnavailable
from sdk.ttir import Module

from . import cuda
from .archs import WARP_SIZE, Arch, parse_arch
from .table import capabilities

_STAT_KEYS = ("registers", "spill_stores", "spill_loads", "stack_bytes", "static_smem_bytes")


def _current_gpu_arch() -> str | None:
    try:
        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"sm_{major}{minor}"
    except Exception:  # a broken CUDA install reads as "no GPU"
        pass
    return None


@dataclass
class _Loaded:
    """A kernel ready to launch: Triton's CUDA launcher and function handle (real mode), or the
    facts a compile-only launch records."""

    name: str
    stats: dict
    launcher: Any = None
    function: Any = None
    packed: tuple = ()
    binary: bytes = b""  # compile-only: the cubin, for `sdk.launches.compile_only()`

    @property
    def triton_launcher(self) -> Any:
        """Triton's CudaLauncher (real mode): the bridge calls it directly with Triton's own
        arguments and `function`, which keeps a launch within one Python frame of Triton's."""
        return self.launcher


class NvidiaRefBackend(Backend):
    name = "nvidia_ref"
    target = Target.from_device_model("nvidia_ref", "nvidia_h100")
    binary_ext = "cubin"
    torch_device = "cuda"
    ignores_warps = False
    passes_tensors: ClassVar[bool] = True  # launch takes Triton's arguments as they are (see sdk.backend)
    stands_in_for: ClassVar[tuple[str, ...]] = ("nvidia",)  # Triton's own CUDA backend, while selected

    def __init__(self, arch: str | None = None, compile_only: bool = False) -> None:
        self.arch: Arch = parse_arch(arch or _current_gpu_arch() or "sm_90")
        self.compile_only = compile_only
        # instance attributes shadow the class defaults: this instance's arch and mode
        self.target = target_of(self.arch)
        self.torch_device = "cpu" if compile_only else "cuda"
        self.ttir_passes = cuda.ttir_passes(self.arch.capability)
        self._stats: list[dict] = []
        self._cuda_utils: Any = None
        if not compile_only:  # asked before every launch: bind the two C calls directly
            ok, why = self.available()
            self.current_stream = _raw_cuda_stream if ok else _unavailable(self.name, why)
            self.device = CudaDevice()
        super().__init__()

    def variant(self, arch: str | None = None, compile_only: bool = False) -> "NvidiaRefBackend":
        return type(self)(arch=arch or self.arch.name, compile_only=compile_only)

    # -------------------------------------------------------------------------- compile
    def capabilities(self) -> Capabilities:
        return capabilities()

    def load_dialects(self, context: Any) -> None:
        from triton._C.libtriton import nvidia
        nvidia.load_dialects(context)

    def parse_options(self, opts: dict) -> Any:
        """CUDA's own options for this arch (not sdk.backend.Options): frontend semantics match CUDA."""
        return cuda.parse_options(self.arch.capability, opts)

    def custom_type_conversions(self) -> Any:
        """Triton's own PTX conversions for fp8e4b15 (min.f16x2 exists from sm_80 on)."""
        from triton.language.extra import cuda
        return cuda.convert_custom_float8_sm80 if self.arch.capability >= 80 else cuda.convert_custom_float8_sm70

    def min_dot_size(self, lhs_type: Any, rhs_type: Any) -> tuple[int, int, int]:
        from triton.backends.nvidia.compiler import min_dot_size
        return min_dot_size(cuda.cuda_backend(self.arch.capability).target)(lhs_type, rhs_type)

    def lower(self, module: Module, options: Any, mlir: Any = None) -> Artifact:
        if mlir is None:
            raise BackendUnavailable("nvidia_ref lowers from Triton's live MLIR module; "
                                     "compile through the Triton bridge (sdk.activate)")
        cubin, meta, log = cuda.compile_ttir(mlir, self.arch.capability, options)
        facts = meta.pop("ptx_facts")
        stats = cuda.ptxas_stats(log)
        meta.update({f"ptxas_{k}": v for k, v in stats.items()})
        meta.update(ptx_target=facts["ptx_target"], code_path=cuda.code_path(facts["instructions"]),
                    ptx_instructions=facts["instructions"], nvidia_arch=self.arch.name)
        return Artifact(cubin, meta)

    def load(self, artifact: bytes, kernel: KernelInfo) -> _Loaded:
        md = kernel.metadata
        stats = {"kernel": kernel.name, "arch": self.arch.name,
                 **{k: getattr(md, f"ptxas_{k}", 0) for k in _STAT_KEYS},
                 "shared_bytes": md.shared, "num_warps": md.num_warps, "num_stages": getattr(md, "num_stages", None),
                 "ptx_target": getattr(md, "ptx_target", ""), "code_path": getattr(md, "code_path", ""),
                 "ptx_instructions": dict(getattr(md, "ptx_instructions", None) or {})}
        if self.compile_only:
            return _Loaded(kernel.name, stats, binary=bytes(artifact))
        from triton.backends.nvidia import driver as nv
        device = torch.cuda.current_device()
        utils = self._utils()
        loaded = utils.load_binary(kernel.name, artifact, md.shared, device)  # (module, function, n_regs, ...)
        function = loaded[1]
        stats.update(loaded_registers=loaded[2], loaded_spills=loaded[3])
        if kernel.src is None:
            raise BackendUnavailable("nvidia_ref needs Triton's compile source to build its launcher "
                                     "(KernelInfo.src); launch through the Triton bridge")
        launcher = _with_cuda_driver_active(lambda: nv.CudaLauncher(kernel.src, md))
        return _Loaded(kernel.name, stats, launcher, function, (md.num_warps, md.num_ctas, md.shared))

    def _utils(self) -> Any:
        if self._cuda_utils is None:
            from triton.backends.nvidia.driver import CudaUtils
            self._cuda_utils = CudaUtils()
        return self._cuda_utils

    # ---------------------------------------------------------------------------- launch
    def launch(self, kernel: _Loaded, grid: tuple[int, int, int], args: Any, stream: Any = None) -> None:
        """Compile-only: record the facts. Real mode: the bridge normally calls Triton's launcher
        directly (`_Loaded.triton_launcher`); this is the same launch for callers of the contract."""
        if kernel.launcher is None:  # compile-only: nothing runs, the facts are recorded
            from sdk.launches import compiling_only
            compiled = compiling_only()
            if compiled is None:
                raise BackendUnavailable(
                    f"nvidia_ref@{self.arch.name}/compile compiles only: launching '{kernel.name}' would "
                    f"run nothing and leave its outputs unwritten; compile on purpose inside `with "
                    f"sdk.launches.compile_only() as compiled:` (each launch's compiled kernel is "
                    f"appended to `compiled`), or select nvidia_ref on a CUDA GPU to run it")
            facts = {**kernel.stats, "grid": list(grid)}
            self._stats.append(facts)
            compiled.append({**facts, "binary": kernel.binary})
            return
        # `args` are Triton's own (passes_tensors): tensors, scalars and constexprs, in order
        kernel.launcher(grid[0], grid[1], grid[2], stream, kernel.function, kernel.packed, None, None, None, *args)

    def take_launch_stats(self) -> list[dict]:
        out, self._stats = self._stats, []
        return out

    def current_stream(self, device: Any = None) -> int:
        """Compile-only: no stream. Real mode replaces this with `_raw_cuda_stream` (torch's current
        stream, so launches order with torch's own work)."""
        return 0

    def synchronize(self) -> None:
        self.device.synchronize()

    # --------------------------------------------------------------------------- queries
    def available(self) -> tuple[bool, str]:
        if self.compile_only:
            return True, ""
        try:
            if not torch.cuda.is_available():
                return False, ("torch.cuda.is_available() is False (no CUDA GPU or a CPU-only torch); "
                               f"use nvidia_ref@{self.arch.name}/compile to compile without a GPU")
        except Exception as exc:
            return False, f"torch cannot reach CUDA: {exc}"
        here = _current_gpu_arch()
        if here and not _runs_on(self.arch.capability, parse_arch(here).capability):
            return False, (f"the GPU here is {here}; a cubin for {self.arch.name} does not run on it "
                           f"(use nvidia_ref@{self.arch.name}/compile to compile only)")
        return True, ""

    def device_properties(self) -> dict[str, int]:
        """Real mode: the GPU's own. Compile-only: the arch's device model (archs.py otherwise)."""
        if not self.compile_only:
            return dict(self._utils().get_device_properties(torch.cuda.current_device()))
        return self.arch.properties()


def target_of(arch: Arch) -> Target:
    """The target of one generation: from its device model when it has one."""
    if arch.device_model is not None:
        return Target.from_device_model("nvidia_ref", arch.device_model)
    return Target("nvidia_ref", arch.name, WARP_SIZE, None, None)


class CudaDevice(Device):
    """The CUDA GPU through torch: torch's current stream, CUDA events, torch.cuda as the device
    interface (Triton's do_bench times with CUDA events)."""

    synchronous = False

    def current_stream(self) -> Any:
        return _raw_cuda_stream()

    def synchronize(self, stream: Any = None) -> None:
        torch.cuda.synchronize()

    def event(self, enable_timing: bool = True) -> Any:
        return torch.cuda.Event(enable_timing=enable_timing)

    def interface(self) -> Any:
        return torch.cuda


def _runs_on(cubin_cap: int, gpu_cap: int) -> bool:
    """SASS runs on the same major generation at an equal or newer minor; Triton compiles sm_90
    and newer for the arch-specific 'a' targets, which run only on that exact arch."""
    if cubin_cap >= 90:
        return cubin_cap == gpu_cap
    return cubin_cap // 10 == gpu_cap // 10 and cubin_cap <= gpu_cap


def _raw_cuda_stream(device: Any = None) -> int:
    return torch._C._cuda_getCurrentRawStream(torch._C._cuda_getDevice())


def _unavailable(name: str, why: str) -> Any:
    """The stream hook of a real-mode backend that cannot run here: Triton asks for the stream
    before every launch, so the first launch fails with why (one line), however it was selected."""
    def current_stream(device: Any = None) -> int:
        raise BackendUnavailable(f"backend '{name}' cannot run here: {why}")
    return current_stream


def _with_cuda_driver_active(make: Any) -> Any:
    """Triton 3.8's CudaLauncher reads `driver.active.utils.launch`: build it with CUDA's driver active."""
    from triton.runtime import driver
    from triton.backends.nvidia.driver import CudaDriver
    previous = driver._active
    try:
        driver.set_active(CudaDriver())
        return make()
    finally:
        driver._active = previous
