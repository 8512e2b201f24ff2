"""nvidia_ref's lowering table: Triton's CUDA pipeline lowers every TTIR op, so every op of the
dialects TTIR is made of is accepted. The named rules are markers (the real lowering is
`cuda.compile_ttir`); they make `day0 ops --backend nvidia_ref` list what it covers."""
from __future__ import annotations

from typing import Any

from sdk.backend import LoweringTable
from sdk.ttir import Op

#: The dialects a TTIR module is made of; Triton's CUDA backend lowers all of their ops.
TTIR_DIALECTS = ("tt", "arith", "math", "scf", "cf", "ub", "builtin", "llvm", "gpu")

#: Op names registered by Triton's TTIR dialects (read from libtriton of Triton 3.6 / 3.8).
TTIR_OPS = """
tt.addptr tt.advance tt.assert tt.atomic_cas tt.atomic_rmw tt.bitcast tt.broadcast tt.call tt.cat
tt.clampf tt.descriptor_gather tt.descriptor_load tt.descriptor_reduce tt.descriptor_scatter
tt.descriptor_store tt.dot tt.dot_scaled tt.elementwise_inline_asm tt.expand_dims tt.extern_elementwise
tt.fp_to_fp tt.func tt.gather tt.get_num_programs tt.get_program_id tt.histogram tt.int_to_ptr tt.join
tt.load tt.make_range tt.make_tensor_descriptor tt.make_tensor_ptr tt.map_elementwise
tt.map_elementwise.return tt.mulhiui tt.precise_divf tt.precise_sqrt tt.print tt.ptr_to_int tt.reduce
tt.reduce.return tt.reshape tt.return tt.scan tt.scan.return tt.splat tt.split tt.store tt.trans
tt.unsplat
arith.addf arith.addi arith.addui_extended arith.andi arith.bitcast arith.ceildivsi arith.ceildivui
arith.cmpf arith.cmpi arith.constant arith.divf arith.divsi arith.divui arith.extf arith.extsi
arith.extui arith.floordivsi arith.fptosi arith.fptoui arith.index_cast arith.index_castui
arith.maximumf arith.maxnumf arith.maxsi arith.maxui arith.minimumf arith.minnumf arith.minsi
arith.minui arith.mulf arith.muli arith.mulsi_extended arith.mului_extended arith.negf arith.ori
arith.remf arith.remsi arith.remui arith.select arith.shli arith.shrsi arith.shrui arith.sitofp
arith.subf arith.subi arith.truncf arith.trunci arith.uitofp arith.xori
math.absf math.absi math.acos math.acosh math.asin math.asinh math.atan math.atan2 math.atanh
math.cbrt math.ceil math.copysign math.cos math.cosh math.ctlz math.ctpop math.cttz math.erf
math.erfc math.exp math.exp2 math.expm1 math.floor math.fma math.fpowi math.ipowi math.isfinite
math.isinf math.isnan math.isnormal math.log math.log10 math.log1p math.log2 math.powf math.round
math.roundeven math.rsqrt math.sin math.sinh math.sqrt math.tan math.tanh math.trunc
scf.condition scf.execute_region scf.for scf.if scf.index_switch scf.while scf.yield
cf.assert cf.br cf.cond_br cf.switch ub.poison
""".split()


def _by_triton(*_: Any, **__: Any) -> None:
    """Marker rule: the op is lowered by Triton's CUDA pipeline, not op by op here."""


class CudaTable(LoweringTable):
    """Accepts every op of the TTIR dialects, named here or not (a newer Triton's new op included)."""

    def supports(self, op: Op) -> bool:
        return op.name.partition(".")[0] in TTIR_DIALECTS or super().supports(op)


def make_table() -> CudaTable:
    table = CudaTable()
    for name in TTIR_OPS:
        table.register(name, _by_triton)
    return table
