"""cpu_interp's reference interpreter (backends/cpu_interp/reference.py): a backend mode of its own,
and the definition the batched fast path is held to, bit for bit.

The fast subset here: a few suite kernels chosen so that together they use every op the quick
suite uses, the feature kernels of tests/test_cpu_interp_features.py that reach the ops the suite
does not (descriptors, atomics, spin waits, map_elementwise, pointer tables ...), and the small
kernels of tests/ttir_kernels.py. The tutorials replay every launch too (test_cpu_interp_tutorials);
the whole quick suite runs in tests/slow/test_cpu_interp_reference_suite.py."""
from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

import sdk
import test_cpu_interp_features as features
import ttir_kernels as K
from backends.cpu_interp import ops, ops_arith, ops_dot, ops_math, reference
from cpu_interp_differential import compare, quick_items, shadow
from sdk.backend import registry
from sdk.errors import ConfigError, KernelFault

#: (kernel, case, dtype) of the suite whose ops, together, are every op the quick suite uses
SUITE_SUBSET = [
    ("gdn_gating", "n100_hv32", "bf16"),
    ("fp8_per_token_group_quant", "deepseek_v3_q_lora_T9_K1536_ue8m0", "fp32"),
    ("sampling_gumbel", "philox_odd_V2500_temp", "bf16"),
    ("runner_positions_slot_mapping", "group_without_slots", "int32"),
    ("sampling_topk_topp_pivot", "topk_only_B6_V2000", "fp32"),
    ("gdn_chunk_scaled_dot_kkt", "b2_t37_h1x2_k48_v40", "fp32"),
    ("gdn_fused_recurrent", "decode_n6_h2x4_d32", "fp32"),
    ("causal_conv1d_prefill", "qwen3_next_width3_nosilu", "fp32"),
    ("moe_mxfp4_gemm", "odd_T7_E8_k4_gateup_swiglu_N144_K320", "bf16"),
    ("unified_attention", "gemma2_softcap50_w40_h4x2_d256", "fp32"),
    ("lora_shrink", "qkv_m37_h512_r16_l4", "fp16"),
    ("sampling_topk_topp_mask", "B12_V1000", "fp32"),  # an integer max (arith.maxsi)
]


def _item(kernel: str, case: str, dtype: str):
    for spec, c, d in quick_items([kernel]):
        if c.name == case and d == dtype:
            return spec, c, d
    raise AssertionError(f"no quick item {kernel}/{case}/{dtype}")


@pytest.mark.parametrize("kernel,case,dtype", SUITE_SUBSET, ids=["/".join(i) for i in SUITE_SUBSET])
def test_suite_kernels_agree_bit_for_bit(kernel, case, dtype):
    assert compare(*_item(kernel, case, dtype)) == []


FEATURES = [("test_heuristics_constexpr_libdevice_noinline", (300, "exp")),
            ("test_shape_ops_scan_gather_histogram", ()), ("test_divergent_loops_branches_early_return", ()),
            ("test_atomics_serial_order", ()), ("test_tensor_descriptors", ()),
            ("test_atomic_add_old_values_form_a_serial_order", ()),
            ("test_pointer_table_reaches_tensors_that_are_not_arguments", ()),
            ("test_pointer_to_pointers_stores_and_atomics", ()), ("test_barrier_and_hints_keep_results", ()),
            ("test_host_tensor_descriptors", ("nan",)), ("test_a_program_may_wait_on_a_later_one", ()),
            ("test_volatile_spin_waits_complete", ()), ("test_descriptor_gather_and_reduce", ()),
            ("test_descriptor_chosen_per_program", ()), ("test_map_elementwise_branches_per_element", ()),
            ("test_pointers_selected_among_arguments", ()), ("test_u64_scalar_arguments_keep_their_bits", ()),
            ("test_fp8e4b15_converts_as_triton_defines_it", ())]


@pytest.mark.parametrize("name,args", FEATURES, ids=[n for n, _ in FEATURES])
def test_feature_kernels_agree_bit_for_bit(name, args):
    """The feature test itself (its kernels against PyTorch), every launch replayed on the reference."""
    with shadow() as differences, sdk.activate("cpu_interp"):
        getattr(features, name)(*args)
    assert differences == []


def test_small_kernels_agree_bit_for_bit():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(512, generator=g)
    nan = lambda *shape: torch.full(shape, float("nan"))
    with shadow() as differences, sdk.activate("cpu_interp"):
        K.masked_copy[(4,)](x, nan(512), 300, BLOCK=128)
        K.row_reductions[(5,)](x, nan(15), 70, BLOCK=128)
        K.scans[(1,)](x[:64], nan(64), BLOCK=64)
        K.small_dot[(1,)](x[:128].reshape(16, 8), x[128:256].reshape(8, 16), nan(16, 16), M=16, N=16, K=8)
        K.loops[(1,)](x, nan(32), 5, BLOCK=32)
        K.atomics[(3,)](x, torch.zeros(4), 300, BLOCK=128)
        K.shapes[(1,)](x[:128], nan(128), R=8, C=16)
        K.casts[(1,)](x[:64] * 50, nan(64), torch.zeros(64, dtype=torch.int64), BLOCK=64)
        K.math_fns[(1,)](x[:64], nan(64), BLOCK=64)
        K.random_bits[(1,)](nan(64), 1234, BLOCK=64)
        K.block_ptr[(1,)](x[:300], nan(300), 20, 15, BM=16, BN=16)
        K.calls[(1,)](x[:64], nan(64), 1.5, BLOCK=64)
    assert differences == []


# -------------------------------------------------------------------------- the backend mode
def test_the_reference_table_is_the_batched_table_and_shares_its_math():
    assert reference.TABLE.names() == ops.TABLE.names()
    for family in (ops_arith.ARITH, ops_math.MATH, ops_dot.DOT):  # one definition per op
        for name in family.names():
            assert reference.TABLE.get(name) is family.get(name) is ops.TABLE.get(name)


@triton.jit
def _scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 3.0, mask=offs < n)


def test_reference_mode_by_variant_name_and_by_option():
    be = registry.get("cpu_interp@reference")
    assert be.lowering is not reference.TABLE and be.target == registry.get("cpu_interp").target
    assert all(be.lowering.get(n) is reference.TABLE.get(n) for n in reference.TABLE.names())
    x = torch.randn(100, generator=torch.Generator().manual_seed(3))
    y = torch.full_like(x, float("nan"))
    with sdk.activate("cpu_interp@reference"):
        _scale[(4,)](x, y, 100, BLOCK=32)
    torch.testing.assert_close(y, x * 3.0)
    assert {type(k.interp()) for k in be._programs.values()} == {reference.Program}
    y.fill_(float("nan"))
    with sdk.activate("cpu_interp"):  # one launch may choose its interpreter through the option
        _scale[(4,)](x, y, 100, BLOCK=32, cpu_interpreter="reference")
        assert any(type(k.interp()) is reference.Program for k in registry.get("cpu_interp")._programs.values())
        with pytest.raises(ConfigError, match="unknown interpreter 'nope'"):
            _scale[(4,)](x, y, 100, BLOCK=32, cpu_interpreter="nope")
    torch.testing.assert_close(y, x * 3.0)


@triton.jit
def _off_by_one(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs <= n), mask=offs < n)


@triton.jit
def _checked(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.device_assert(tl.load(x_ptr + offs, mask=offs < n, other=0.0) >= 0, "negative input")


def test_reference_faults_name_the_program_and_the_line():
    x = torch.randn(100, generator=torch.Generator().manual_seed(4))
    with sdk.activate("cpu_interp@reference"):
        with pytest.raises(KernelFault, match=r"out-of-bounds load from .* in program \(3, 0, 0\).*"
                                              r"mask=offs <= n"):
            _off_by_one[(4,)](x, torch.empty(100), 100, BLOCK=32)
        with pytest.raises(KernelFault, match=r"device assertion failed in program \(0, 0, 0\).*negative input"):
            _checked[(1,)](x, 100, BLOCK=128, debug=True)
