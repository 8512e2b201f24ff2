"""nvidia_ref's capabilities: Triton's CUDA pipeline lowers every TTIR op, so every op of the
dialects TTIR is made of is accepted, whatever its types (data: no rules; the lowering is
`cuda.compile_ttir`). The op names are listed so that `day0 ops --backend nvidia_ref` can say what
it covers."""
from __future__ import annotations

from sdk.capabilities import TTIR_DIALECTS, Capabilities

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


def capabilities() -> Capabilities:
    return Capabilities.of(TTIR_OPS, dialects=TTIR_DIALECTS)
