"""Backends used by the bridge and registry tests."""
from typing import Any

from sdk.backend import Backend, KernelInfo, LoweringTable, Options, Target

raise_on_import = False


def _table(names):
    table = LoweringTable()
    for name in names:
        table.register(name, lambda ctx, op, *a: None)
    return table


class Partial(Backend):
    """Knows only memory and integer ops: anything else is reported as unsupported."""

    name = "partial"
    target = Target.from_device_model("partial", "host_cpu")

    def lowering_table(self) -> LoweringTable:
        return _table(["tt.get_program_id", "tt.make_range", "tt.splat", "tt.addptr", "tt.load", "tt.store",
                       "arith.constant", "arith.muli", "arith.mulf", "arith.addi", "arith.cmpi", "tt.return"])

    def lower(self, module, options: Options) -> bytes:
        return b""

    def load(self, artifact: bytes, kernel: KernelInfo) -> Any:
        return kernel

    def launch(self, kernel, grid, args, stream=None) -> None:
        pass


class NoLaunch(Backend):
    """Forgets the launch hook: registration must say so."""

    name = "nolaunch"
    target = Target(backend="nolaunch", arch="x", warp_size=1, vector_width=1)

    def lowering_table(self) -> LoweringTable:
        return LoweringTable()

    def lower(self, module, options):
        return b""

    def load(self, artifact, kernel):
        return None

