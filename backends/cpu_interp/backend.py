"""The cpu_interp Backend: the contract's hooks, each a few lines over the interpreter.

It works on host memory: no allocator, so kernels address the host tensors themselves (zero-copy,
`sdk.arguments.host_arg`), and its device is the synchronous host (`sdk.device.HostDevice`)."""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
from typing import Any

from sdk.arguments import host_arg
from sdk.backend import Artifact, Backend, KernelInfo, LoweringTable, Options, Target
from sdk.errors import ConfigError
from sdk.ttir import Module

from . import reference
from .interp import Program
from .ops import TABLE
from . import tier as tiers
from .scratch import scratch_bytes

#: the interpreters that can run a kernel, by the name the option `cpu_interpreter` gives:
#: "batched" (interp.py: every program of a launch at once) and "reference" (reference.py: one
#: program at a time, the definition the batched one is tested against)
INTERPRETERS = {"batched": (TABLE, Program), "reference": (reference.TABLE, reference.Program)}


class CpuInterpBackend(Backend):
    name = "cpu_interp"
    target = Target.from_device_model("cpu_interp", "host_cpu")
    binary_ext = "ttir_cpu"
    torch_device = "cpu"

    def __init__(self, interpreter: str = "batched") -> None:
        self.interpreter = interpreter  # the default of the option cpu_interpreter (see INTERPRETERS)
        super().__init__()
        self._programs: dict[tuple, tiers.TieredKernel] = {}
        self._stats = tiers.Stats()

    def lowering_table(self) -> LoweringTable:
        """This instance's own copy of its interpreter's table: changing it never changes another
        backend's."""
        return INTERPRETERS[self.interpreter][0].copy()

    def variant(self, arch: str | None = None, compile_only: bool = False) -> Backend:
        """`cpu_interp@reference`: the same device run by the reference interpreter."""
        if arch in INTERPRETERS and not compile_only:
            return self if arch == self.interpreter else type(self)(arch)
        return super().variant(arch, compile_only)

    def parse_options(self, opts: dict) -> Options:
        """Every fp8 format Triton's frontend knows is converted here, fp8e4b15 included. The
        interpreter's checks ("uninit", "races") come from `checks`, or DAY0_CHECK_UNINIT /
        DAY0_CHECK_RACES read now (compile time); the tier options (tier.py) from the launch's
        options or the environment; the interpreter that runs what the interpreter runs from
        `cpu_interpreter` (a launch may name it: `kernel[grid](..., cpu_interpreter="reference")`),
        else this backend's."""
        options = super().parse_options(opts)
        if "checks" not in opts:
            env = tuple(c for c in CHECKS if os.environ.get(f"DAY0_CHECK_{c.upper()}", "") not in ("", "0"))
            options = dataclasses.replace(options, checks=env)
        if "supported_fp8_dtypes" not in opts:
            options = dataclasses.replace(options, supported_fp8_dtypes=("fp8e5", "fp8e4nv", "fp8e4b15", "fp8e4b8", "fp8e5b16"))
        which = str(opts.get("cpu_interpreter") or self.interpreter)
        if which not in INTERPRETERS:
            raise ConfigError(f"cpu_interp: unknown interpreter '{which}' (known: {', '.join(INTERPRETERS)})")
        if which == "reference" and options.checks:
            raise ConfigError(f"cpu_interp: the {' and '.join(options.checks)} check(s) run on the batched "
                              f"interpreter only; unset DAY0_CHECK_* or the option checks for the reference one")
        return tiers.CpuOptions(**options.__dict__, **tiers.resolve(opts, which), cpu_interpreter=which)

    def stages(self, options: Options) -> list:
        """Triton's TTIR passes, then "llir" (the compiled tier's LLVM IR, or why the interpreter
        runs the kernel) and the binary "ttir_cpu" (tier.py)."""
        from sdk.stages import Stage, triton_passes
        return [triton_passes(self.ttir_passes), Stage("llir", tiers.emit_stage, takes="ir"),
                Stage(self.binary_ext, tiers.assemble_stage)]

    def lower(self, module: Module, options: Options) -> Artifact:
        """The two stages after "ttir" at once, for callers that lower a module directly."""
        data, tier, why = tiers.lower(self, module, options)
        return Artifact(data, {"shared": scratch_bytes(module), "day0_tier": tier, "day0_tier_detail": why})

    def load(self, artifact: bytes, kernel: KernelInfo) -> tiers.TieredKernel:
        """Parsed and loaded once per artifact and interpreter (Triton may ask again for the same
        kernel); the checks the options turned on go to the interpreter (the DAY0_CHECK_*
        variables still add theirs per launch)."""
        checks = tuple(getattr(kernel.metadata, "checks", None) or ())
        which = getattr(kernel.metadata, "cpu_interpreter", None) or self.interpreter
        table = self.lowering if which == self.interpreter else INTERPRETERS[which][0]
        return tiers.load(artifact, kernel.source_file, table, self._programs, checks, INTERPRETERS[which][1])

    def launch(self, kernel: tiers.TieredKernel, grid: tuple[int, int, int], args: list[Any],
               stream: Any = None) -> None:
        extra = [host_arg(t, f"extra[{k}]") for k, t in enumerate(_EXTRA.get())]
        try:
            kernel.run(grid, args, extra)
        finally:
            self._stats.add(kernel)

    def take_launch_stats(self) -> list[dict]:
        """Per kernel launched since the last call: the tier that ran it (compiled / interp), why,
        and how many launches."""
        return self._stats.take()


#: the run-time checks the batched interpreter offers (Options.checks)
CHECKS = ("uninit", "races")


_EXTRA: contextvars.ContextVar[tuple] = contextvars.ContextVar("day0_cpu_interp_extra", default=())


@contextlib.contextmanager
def extra_tensors(tensors):
    """Tensors that kernels launched inside reach through raw addresses (pointer tables, as in a
    grouped GEMM) rather than as arguments: their memory becomes addressable and bounds-checked."""
    token = _EXTRA.set(tuple(_EXTRA.get()) + tuple(tensors))
    try:
        yield
    finally:
        _EXTRA.reset(token)
