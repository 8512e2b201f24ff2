"""Gated MLP activation: silu(gate) * up over the fused gate/up projection output.

Widths: Qwen3-Next experts have moe_intermediate 512, and a fused-MoE layer applies the activation
to every (token, expert) row, so 8192 tokens x top-10 give 81920 rows of width 512; Llama-3.1-8B's
dense MLP gives 8192 rows of width 14336.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sdk.conformance.refmath import compute_dtype
from sdk.conformance.spec import Case, KernelSpec, Tolerance, register


@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, stride_x, stride_out, inter, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inter
    gate = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * stride_x + inter + cols, mask=mask, other=0.0).to(tl.float32)
    y = gate * tl.sigmoid(gate) * up
    tl.store(out_ptr + row * stride_out + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def _inputs(case, dtype, device, gen):
    rows, inter = case.params["rows"], case.params["inter"]
    x = (torch.randn((rows, 2 * inter), generator=gen) * 2.0).to(dtype).to(device)
    return {"x": x, "out": torch.empty((rows, inter), dtype=dtype, device=device)}


def _config(inter: int, itemsize: int) -> dict:
    """Columns per program and warps (overridable by keyword): 16-byte accesses per thread."""
    block = min(1024, triton.next_power_of_2(inter))
    return dict(BLOCK=block, num_warps=max(1, min(4, block * itemsize // 512)))


def _run(inp, case, **config):
    x, out = inp["x"], inp["out"]
    rows, inter = out.shape
    cfg = {**_config(inter, x.element_size()), **config}
    grid = (rows, triton.cdiv(inter, cfg["BLOCK"]))
    _silu_and_mul_kernel[grid](x, out, x.stride(0), out.stride(0), inter, **cfg)


def _reference(inp, case):
    x = inp["x"].to(compute_dtype(inp["x"]))  # fp64 for fp32 data, fp32 for 16-bit data
    inter = case.params["inter"]
    gate, up = x[:, :inter], x[:, inter:]
    return {"out": torch.nn.functional.silu(gate) * up}


register(KernelSpec(
    name="silu_and_mul", group="activation",
    models=("qwen3_5", "qwen3_next", "llama3_1", "mixtral", "deepseek_v3", "glm4_5", "kimi_k2", "llama4",
            "granite4_h", "falcon_h1", "jamba", "minimax", "qwen2_5_vl"),
    cases=(
        Case("odd_T37_I1000", {"rows": 37, "inter": 1000}, source="odd sizes: masked tail"),
        Case("qwen3_next_moe_rows40_I512", {"rows": 40, "inter": 512},
             source="Qwen3-Next expert width 512, 4 tokens x top-10"),
        Case("qwen3_next_moe_T8192_k10_I512", {"rows": 81920, "inter": 512}, quick=False,
             source="Qwen3-Next-80B-A3B fused MoE: 8192 tokens x top-10 rows, moe_intermediate 512"),
        Case("llama3_1_T8192_I14336", {"rows": 8192, "inter": 14336}, quick=False,
             source="Llama-3.1-8B dense MLP intermediate 14336, 8192-token prefill"),
    ),
    dtypes=("bf16", "fp32"),
    make_inputs=_inputs, run=_run, reference=_reference,
    outputs=("out",),
    tolerance={"bf16": Tolerance(atol=2e-2, rtol=1e-2), "fp32": Tolerance(atol=1e-5, rtol=1.3e-5)},
    description="silu(x[:, :I]) * x[:, I:] for the fused gate/up projection, fp32 math",
    triton_kernels=(_silu_and_mul_kernel,),
    upstream="C++ op in vLLM (torch.ops._C.silu_and_mul: SiluAndMul.forward_cuda in "
             "model_executor/layers/activation.py, and the fused-MoE activation between the two expert GEMMs); "
             "a dense MLP under torch.compile with custom ops off runs SiluAndMul.forward_native as "
             "Inductor-generated Triton",
))
