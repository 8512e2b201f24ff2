"""Capture the TTIR of kernel launches without running them.

`with capture() as modules: kernel[grid](...)` compiles each launched kernel through Triton's real
frontend and the SDK's TTIR passes, records the `sdk.ttir.Module`, and launches nothing. `day0 ops`
uses it to learn which ops the suite needs; tests use it to get TTIR for any kernel.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .backend import Backend, DeviceArg, KernelInfo, Options, Target, registry
from .capabilities import TTIR_DIALECTS, Capabilities
from .ttir import Module

NAME = "ttir_capture"


@dataclass(frozen=True)
class Launch:
    """One captured launch: the kernel's TTIR, its grid and its runtime arguments (tensor
    arguments as DeviceArgs carrying their extents, scalars as they were passed)."""

    module: Module
    grid: tuple[int, int, int]
    args: list
    num_warps: int = 0   # as the launch asked for them; 0: not given (the target's default applies)
    num_stages: int = 0


class CaptureBackend(Backend):
    """Lowers nothing and runs nothing: it only keeps the modules it was given."""

    name = NAME
    target = Target(backend=NAME, arch="any", warp_size=1, vector_width=1)  # no device: it runs nothing
    binary_ext = "ttir_capture"

    def __init__(self) -> None:
        super().__init__()
        self.modules: list[Module] = []
        self.launches: list[Launch] = []
        self.fp8: tuple[str, ...] | None = None  # the fp8 types of the target it stands for
        self.props: dict | None = None            # the device properties it reports, likewise
        self.queried = False                      # whether a launch wrapper asked for them
        # on-chip bytes one program of a loaded module needs on the target (module, num_warps,
        # num_stages) -> bytes; a launch needing more than props' max_shared_mem is refused as
        # that target's compiler refuses it (OutOfResources), so wrappers and autotuners move on
        self.shared_check: Any = None
        self.refused = False

    def capabilities(self) -> Capabilities:
        return Capabilities.of(dialects=TTIR_DIALECTS)  # every op of a TTIR module

    def parse_options(self, opts: dict) -> Options:
        """num_warps / num_stages as the launch gave them; 0 where it gave none, so that an
        analysis can apply the default of the target it stands for."""
        from dataclasses import replace
        options = super().parse_options(opts)
        options = replace(options, num_warps=opts.get("num_warps") or 0, num_stages=opts.get("num_stages") or 0)
        if self.fp8 is not None and "supported_fp8_dtypes" not in opts:
            options = replace(options, supported_fp8_dtypes=tuple(self.fp8))
        return options

    def lower(self, module: Module, options: Options) -> bytes:
        return module.text.encode()

    def device_properties(self) -> dict[str, int]:
        """The properties of the target the capture stands for (`props`); without them it stands
        for no device: host code that sizes a grid from these (persistent kernels) sees one unit,
        so a capture records the smallest grid such code launches."""
        self.queried = True
        alone = {"multiprocessor_count": 1, "max_shared_mem": 1 << 20, "max_num_regs": 65536, "warpSize": 1}
        return {**alone, **(self.props or {})}

    def load(self, artifact: bytes, kernel: KernelInfo) -> Any:
        from .ttir import parse
        module = parse(artifact)  # bytes: a corrupted artifact is a TTIRSyntaxError
        module.relocate(kernel.source_file)
        meta = kernel.metadata
        module.launch_options = (getattr(meta, "num_warps", 0) or 0, getattr(meta, "num_stages", 0) or 0)
        return module

    def map_tensor(self, tensor: Any, name: str) -> DeviceArg:
        from .numerics import TORCH_TO_TTIR
        dtype = TORCH_TO_TTIR.get(str(tensor.dtype).replace("torch.", ""), "")
        # the tensor travels along, so that an analysis may read scalars a kernel loads (lengths, offsets)
        return DeviceArg(name, tensor.data_ptr(), tensor.numel() * tensor.element_size(), dtype, tensor)

    def launch(self, kernel: Any, grid: tuple[int, int, int], args: list[Any], stream: Any = None) -> None:
        warps, stages = getattr(kernel, "launch_options", (0, 0))
        limit = (self.props or {}).get("max_shared_mem")
        if self.shared_check is not None and limit:
            need = self.shared_check(kernel, warps, stages)
            if need > limit:
                from triton.runtime.errors import OutOfResources
                self.refused = True
                raise OutOfResources(need, limit, "shared memory")
        self.modules.append(kernel)
        self.launches.append(Launch(kernel, tuple(grid), list(args), warps, stages))


class capture:
    """Context manager collecting the TTIR module of every kernel launched inside it.

    `fp8`: the fp8 types (Triton's names: fp8e4nv, fp8e5, fp8e4b8 ...) of the target the capture
    stands for, as its compiler would report them; kernels that pick a code path by them (native fp8
    or an emulation) take the path that target would. None: Triton's defaults. `props`: the device
    properties it reports to launch wrappers that size tiles or grids by them (max_shared_mem,
    multiprocessor_count ...); `queried` says afterwards whether any wrapper asked. `shared_check`:
    (module, num_warps, num_stages) -> shared bytes the target's compiler would allocate; a launch
    over props' max_shared_mem is refused with OutOfResources, as on the target (`refused` says
    afterwards whether any was)."""

    def __init__(self, fp8: tuple[str, ...] | None = None, props: dict | None = None, shared_check: Any = None):
        self.fp8, self.props, self.queried, self.shared_check, self.refused = fp8, props, False, shared_check, False

    def __enter__(self) -> list[Module]:
        from .triton_bridge import activate
        if NAME not in registry.infos:
            registry.register(CaptureBackend)
        self.backend = registry.get(NAME)
        self.backend.modules = []
        self.backend.launches = []
        self.backend.fp8, self.backend.props, self.backend.queried = self.fp8, self.props, False
        self.backend.shared_check, self.backend.refused = self.shared_check, False
        self.launches = self.backend.launches
        self._activation = activate(NAME)
        return self.backend.modules

    def __exit__(self, *exc: Any) -> None:
        self.queried, self.refused = self.backend.queried, self.backend.refused
        self.backend.fp8, self.backend.props, self.backend.shared_check = None, None, None
        self._activation.deactivate()
