"""Backend doubles for staged compilation.

* LicmBackend: cpu_interp with an MLIR stage of its own between Triton's TTIR passes and lowering:
  canonicalize, CSE and Triton's loop-invariant code motion, through Triton's Python bindings.
* TextBackend: a backend that compiles, with no lowering table: its capabilities are data (only
  what an elementwise kernel needs), its stages take the day0 IR to a text IR of its own and then to
  a binary (a header and the IR, zlib-compressed); it runs the binary by unpacking it and handing the
  TTIR to cpu_interp's interpreter.
"""
from __future__ import annotations

import json
import zlib
from typing import Any

from backends.cpu_interp import CpuInterpBackend
from sdk.backend import Artifact, Backend, KernelInfo, Target
from sdk.capabilities import Capabilities, OpSupport
from sdk.stages import Stage, StageContext, lower_stage, mlir_passes, triton_passes
from sdk.ttir import Module, parse

#: stage name -> how many times it ran in this process (a cache hit runs none)
RUNS: dict[str, int] = {}


def _counted(stage: Stage) -> Stage:
    def run(src: Any, ctx: StageContext) -> Any:
        RUNS[stage.name] = RUNS.get(stage.name, 0) + 1
        return stage.run(src, ctx)
    return Stage(stage.name, run, stage.takes)


class LicmBackend(CpuInterpBackend):
    name = "licm_stage"
    target = Target.from_device_model("licm_stage", "host_cpu")
    binary_ext = "licmbin"

    def stages(self, options: Any) -> list[Stage]:
        own = mlir_passes("hoisted", ("common.canonicalizer", "common.cse", "ttir.triton_licm"))
        return [_counted(triton_passes(self.ttir_passes)), _counted(own), _counted(lower_stage(self.binary_ext))]


ELEMENTWISE = Capabilities.of(
    ["tt.get_program_id", "tt.make_range", "tt.splat", "tt.addptr", "tt.load", "tt.store", "tt.return",
     "arith.constant", "arith.addi", "arith.muli", "arith.cmpi",
     OpSupport.make("arith.mulf", dtypes={"f32"}), OpSupport.make("arith.addf", dtypes={"f32"})])


class TextBackend(Backend):
    name = "text_stages"
    target = Target.from_device_model("text_stages", "host_cpu")
    binary_ext = "txtbin"

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, type, bool]] = []  # (stage, input type, live MLIR module present)
        self.executor = CpuInterpBackend()

    def capabilities(self) -> Capabilities:
        return ELEMENTWISE

    def stages(self, options: Any) -> list[Stage]:
        return [triton_passes(self.ttir_passes), Stage("txtir", self._emit, takes="ir"),
                Stage(self.binary_ext, self._assemble)]

    def _emit(self, module: Module, ctx: StageContext) -> str:
        self.seen.append(("txtir", type(module), ctx.mlir is not None))
        ops = sorted({op.name for op in module.walk()})
        return f"; {ctx.kernel}: {len(ops)} op kinds\n; ops: {' '.join(ops)}\n" + module.text

    def _assemble(self, text: str, ctx: StageContext) -> Artifact:
        self.seen.append((self.binary_ext, type(text), ctx.mlir is not None))
        header = json.dumps({"kernel": ctx.kernel, "format": 1}).encode()
        return Artifact(b"TXTB" + len(header).to_bytes(4, "little") + header + zlib.compress(text.encode()),
                        {"shared": 0})

    def load(self, artifact: bytes, kernel: KernelInfo) -> Any:
        assert artifact[:4] == b"TXTB"
        n = int.from_bytes(artifact[4:8], "little")
        text = zlib.decompress(artifact[8 + n:]).decode()
        module = parse(text.split("\n", 2)[2])
        from backends.cpu_interp.interp import Program
        return Program(module, self.executor.lowering)

    def launch(self, kernel: Any, grid: tuple[int, int, int], args: list[Any], stream: Any = None) -> None:
        kernel.run(grid, args)
