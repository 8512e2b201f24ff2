"""GeGLU: gelu_tanh(gate) * up over the fused gate/up projection output (Gemma-2 / Gemma-3 MLPs).

x [rows, 2 * I] holds gate then up; out [rows, I]. gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g +
0.044715 g^3))), PyTorch's approximate="tanh" (hidden_activation gelu_pytorch_tanh). tanh is
formed from exp (1 - 2 / (exp(2y) + 1), saturating for large |y|), so no libdevice call is needed.
Widths: transformers' Gemma2Config / Gemma3TextConfig defaults have intermediate 9216 (hidden 2304);
Gemma-2-9B has 14336 (hidden 3584).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sdk.conformance.refmath import compute_dtype
from sdk.conformance.spec import Case, KernelSpec, Tolerance, register


@triton.jit
def _gelu_tanh_and_mul_kernel(x_ptr, out_ptr, stride_x, stride_out, inter, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inter
    gate = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * stride_x + inter + cols, mask=mask, other=0.0).to(tl.float32)
    y = 0.7978845608028654 * (gate + 0.044715 * gate * gate * gate)
    e = tl.exp(tl.minimum(2.0 * tl.abs(y), 80.0))
    t = 1.0 - 2.0 / (e + 1.0)                       # tanh(|y|), in [0, 1)
    t = tl.where(y < 0, -t, t)
    out = 0.5 * gate * (1.0 + t) * up
    tl.store(out_ptr + row * stride_out + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


def _inputs(case, dtype, device, gen):
    rows, inter = case.params["rows"], case.params["inter"]
    x = (torch.randn((rows, 2 * inter), generator=gen) * 2.0).to(dtype).to(device)
    return {"x": x, "out": torch.empty((rows, inter), dtype=dtype, device=device)}


def _run(inp, case):
    x, out = inp["x"], inp["out"]
    rows, inter = out.shape
    block = min(1024, triton.next_power_of_2(inter))
    _gelu_tanh_and_mul_kernel[(rows, triton.cdiv(inter, block))](
        x, out, x.stride(0), out.stride(0), inter, BLOCK=block, num_warps=max(1, min(4, block * x.element_size() // 512)))


def _reference(inp, case):
    x = inp["x"].to(compute_dtype(inp["x"]))  # fp64 for fp32 data, fp32 for 16-bit data
    inter = case.params["inter"]
    return {"out": torch.nn.functional.gelu(x[:, :inter], approximate="tanh") * x[:, inter:]}


register(KernelSpec(
    name="gelu_tanh_and_mul", group="activation", models=("gemma3",),
    cases=(
        Case("odd_T37_I1000", {"rows": 37, "inter": 1000}, source="odd sizes: masked tail"),
        Case("gemma2_rows8_I9216", {"rows": 8, "inter": 9216},
             source="Gemma-2 / Gemma-3 (transformers Gemma2Config, Gemma3TextConfig defaults) intermediate 9216"),
        Case("gemma2_9b_T8192_I14336", {"rows": 8192, "inter": 14336}, quick=False,
             source="Gemma-2-9B MLP intermediate 14336, 8192-token prefill"),
    ),
    dtypes=("bf16", "fp16", "fp32"),
    make_inputs=_inputs, run=_run, reference=_reference,
    outputs=("out",),
    tolerance={"bf16": Tolerance(atol=2e-2, rtol=1e-2), "fp16": Tolerance(atol=2e-3, rtol=1e-3),
               "fp32": Tolerance(atol=1e-5, rtol=1.3e-5)},
    description="gelu_tanh(x[:, :I]) * x[:, I:] (GeGLU) for the fused gate/up projection, fp32 math",
    triton_kernels=(_gelu_tanh_and_mul_kernel,),
    upstream="Inductor-generated in vLLM (GeluAndMul(approximate='tanh') in model_executor/layers/activation.py "
             "runs as PyTorch under torch.compile; with custom ops on, the C++ op _C.gelu_tanh_and_mul)",
))
