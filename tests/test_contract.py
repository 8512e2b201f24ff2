"""The backend contract's data: capabilities (what a backend accepts, separate from how it implements
it), targets and device properties from the device model, a lowering table of its own per backend
instance, options that carry check flags, and the read/write sets the bridge copies by."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import triton
import triton.language as tl

from backends.cpu_interp import CpuInterpBackend
from backends.cpu_interp.table import TABLE
from sdk.backend import Backend, BackendLoadError, Target, device_properties_of, validate
from sdk.capabilities import Capabilities, OpSupport
from sdk.capture import capture
from sdk.device_models import load
from sdk.lowering import LoweringTable
from sdk.ttir.access import access


# ------------------------------------------------------------------------------ capabilities
@triton.jit
def mixed(x_ptr, h_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    h = tl.load(h_ptr + offs)
    tl.store(out_ptr + offs, tl.exp(x) + h.to(tl.float32) * 2.0)


def _module(kernel, *args, **kw):
    with capture() as modules:
        kernel[(1,)](*args, **kw)
    return modules[0]


def test_capabilities_are_data_and_narrow_by_types():
    x, h = torch.randn(32), torch.randn(32).half()
    module = _module(mixed, x, h, torch.empty(32), BLOCK=32)
    caps = Capabilities.of(["tt.make_range", "tt.splat", "tt.addptr", "tt.load", "tt.store", "tt.return",
                            "arith.constant", "arith.extf", OpSupport.make("arith.mulf", dtypes={"f16"}),
                            OpSupport.make("arith.addf", signatures=("f32 x f32 -> f32",))])
    missing = {op.key() for op in caps.missing(module)}
    assert missing == {"math.exp(f32 -> f32)", "arith.mulf(f32 x f32 -> f32)"}
    assert not caps.with_ops("arith.mulf").missing(module) == []  # math.exp is still missing
    assert (caps | Capabilities.of(dialects=["math"])).with_ops("arith.mulf").missing(module) == []
    again = Capabilities.from_json(json.loads(json.dumps(caps.to_json())))
    assert again == caps and {op.key() for op in again.missing(module)} == missing


def test_a_rule_narrows_with_data_never_with_code():
    table = LoweringTable()
    with pytest.raises(TypeError, match="dtypes=, signatures= or attrs="):
        table.register("arith.addf", lambda ctx, op, a, b: a + b, accepts=lambda op: True)
    table.register("tt.extern_elementwise", lambda ctx, op, *a: None, attrs={"symbol": ["__nv_expf"]})
    support = table.capabilities().to_json()["ops"][0]
    assert support == {"name": "tt.extern_elementwise", "attrs": {"symbol": ["__nv_expf"]}}


def test_cpu_interp_declares_its_libdevice_symbols_as_data():
    caps = CpuInterpBackend().capabilities()
    (extern,) = [e for e in caps.ops if e.name == "tt.extern_elementwise"]
    symbols = dict(extern.attrs)["symbol"]
    assert "__nv_expf" in symbols and "__nv_no_such_function" not in symbols


def test_each_backend_instance_has_a_lowering_table_of_its_own():
    a, b = CpuInterpBackend(), CpuInterpBackend()
    before = set(TABLE.names())
    a.lowering.register("tt.made_up_op", lambda ctx, op: None)
    del a.lowering._rules["arith.addf"]
    assert "tt.made_up_op" not in b.lowering and "arith.addf" in b.lowering
    assert set(TABLE.names()) == before
    assert "arith.addf" in b.capabilities() and "arith.addf" not in a.capabilities()


# -------------------------------------------------------------------- target and properties
def test_target_and_device_properties_come_from_the_device_model():
    model = load("host_cpu")
    be = CpuInterpBackend()
    assert be.target == Target("cpu_interp", model.triton.arch.value, model.triton.warp_size.value,
                               model.vector.lanes_per_unit.value, "host_cpu")
    props, stated = be.device_properties(), device_properties_of(model)
    assert {k: v for k, v in props.items() if k != "max_num_regs"} == {k: v for k, v in stated.items()
                                                                       if k != "max_num_regs"}
    # a backend that ignores warps takes any num_warps with the same n_regs: its register file holds
    # one program of the most warps Triton launches (32), so host code never sizes a grid of zero
    assert be.ignores_warps and props["max_num_regs"] == max(stated["max_num_regs"],
                                                             be.registers_per_thread * props["warpSize"] * 32)
    assert props["multiprocessor_count"] == model.compute.units.value
    assert props["max_shared_mem"] == int(model.memory.per_unit.sram_kib.value * 1024)


def test_nvidia_ref_compile_only_properties_follow_its_arch_and_model():
    from sdk.backend import registry
    h100 = registry.get("nvidia_ref@sm_90/compile")
    assert h100.target == Target.from_device_model("nvidia_ref", "nvidia_h100")
    assert h100.device_properties() == device_properties_of(load("nvidia_h100"))
    a100 = registry.get("nvidia_ref@sm_80/compile")  # no shipped model: the arch table's figures
    assert a100.target.device_model is None and a100.target.warp_size == 32
    assert a100.device_properties()["max_shared_mem"] == 166912


def test_a_target_that_contradicts_its_device_model_is_refused_at_registration():
    class Drifted(CpuInterpBackend):
        name = "drifted"
        target = dataclasses.replace(CpuInterpBackend.target, backend="drifted", warp_size=32)

    with pytest.raises(BackendLoadError, match="target.warp_size is 32 but its device model 'host_cpu' says 1"):
        validate(Drifted, "drifted")

    class NoStages(Backend):
        name = "nostages"
        target = Target.from_device_model("nostages", "host_cpu")

        def lowering_table(self):
            return LoweringTable()

        def load(self, artifact, kernel):
            return None

        def launch(self, kernel, grid, args, stream=None):
            pass

    with pytest.raises(BackendLoadError, match=r"implement lower\(\) or stages\(\)"):
        validate(NoStages, "nostages")
    with pytest.raises(BackendLoadError, match="gives no triton.arch"):
        Target.from_device_model("x", "google_tpu_v5e")


# ---------------------------------------------------------------------------------- options
def test_check_flags_travel_in_the_options(monkeypatch):
    be = CpuInterpBackend()
    assert be.parse_options({"checks": ["races"]}).checks == ("races",)
    monkeypatch.setenv("DAY0_CHECK_UNINIT", "1")  # read when options are parsed, not at import
    options = be.parse_options({})
    assert options.checks == ("uninit",)
    from sdk.backend import KernelInfo
    text = _module(mixed, torch.randn(8), torch.randn(8).half(), torch.empty(8), BLOCK=8).text
    program = be.load(text.encode(), KernelInfo("mixed", (), options))
    assert program.flags == {"check_uninit": True}


# ------------------------------------------------------------------------- read / write sets
@triton.jit
def rw_kinds(src_ptr, dst_ptr, both_ptr, counter_ptr, unused_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    p = src_ptr
    acc = tl.zeros((BLOCK,), tl.float32)
    for i in range(n):  # a loop-carried pointer still points into src
        acc += tl.load(p + offs)
        p += BLOCK
    tl.store(dst_ptr + offs, acc)
    tl.store(both_ptr + offs, tl.load(both_ptr + offs) + 1.0)
    tl.atomic_add(counter_ptr, 1)


@triton.jit
def raw_pointer(table_ptr, out_ptr, BLOCK: tl.constexpr):
    addr = tl.load(table_ptr)
    ptr = addr.to(tl.pointer_type(tl.float32))
    tl.store(out_ptr + tl.arange(0, BLOCK), tl.load(ptr + tl.arange(0, BLOCK)))


def test_read_and_write_sets_come_from_the_ttir():
    t = torch.zeros(64)
    module = _module(rw_kinds, t, t, t, torch.zeros(1, dtype=torch.int32), t, 2, BLOCK=16)
    assert access(module) == ("r", "w", "rw", "rw", "", "")
    # a pointer made from an integer may reach any argument
    module = _module(raw_pointer, torch.tensor([t.data_ptr()]), torch.empty(16), BLOCK=16)
    assert access(module) == ("rw", "rw")
