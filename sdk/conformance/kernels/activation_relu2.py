"""ReLU² (squared ReLU): the activation of a non-gated MLP, y = relu(x)^2, elementwise over the up
projection's output.

Nemotron-H-8B's 24 MLP layers compute down(relu(up(x))^2) with intermediate 21504 and no gate
projection, so the activation reads one [T, 21504] tensor (not a fused gate/up pair as SwiGLU does).
fp32 math, one row block per program.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sdk.conformance.refmath import compute_dtype
from sdk.conformance.spec import Case, KernelSpec, Tolerance, register


@triton.jit
def _relu2_kernel(x_ptr, out_ptr, stride_x, stride_out, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.maximum(x, 0.0)
    tl.store(out_ptr + row * stride_out + cols, (r * r).to(out_ptr.dtype.element_ty), mask=mask)


def relu2(x: torch.Tensor, out: torch.Tensor, block: int | None = None) -> None:
    """out = relu(x)^2 for x, out [rows, cols] with unit column stride."""
    rows, cols = x.shape
    block = block or min(2048, triton.next_power_of_2(cols))
    warps = max(1, min(8, block * x.element_size() // 512))  # 16 bytes per thread
    _relu2_kernel[(rows, triton.cdiv(cols, block))](x, out, x.stride(0), out.stride(0), cols, BLOCK=block,
                                                     num_warps=warps)


def _inputs(case, dtype, device, gen):
    rows, cols = case.params["rows"], case.params["cols"]
    x = (torch.randn((rows, cols), generator=gen) * 3.0).to(dtype).to(device)
    return {"x": x, "out": torch.empty((rows, cols), dtype=dtype, device=device)}


def _reference(inp, case):
    x = inp["x"]
    return {"out": torch.relu(x.to(compute_dtype(x))).square_()}


_NEMOTRON = "Nemotron-H-8B (sdk/models/configs/nemotron_h.json): intermediate_size 21504, mlp_hidden_act relu2"
register(KernelSpec(
    name="relu2", group="activation", models=("nemotron_h",),
    cases=(
        Case("odd_T37_I1000", {"rows": 37, "cols": 1000}, source="odd sizes: masked tail"),
        Case("nemotron_h_T4_I21504", {"rows": 4, "cols": 21504}, source=_NEMOTRON + "; 4 tokens"),
        Case("nemotron_h_T8192_I21504", {"rows": 8192, "cols": 21504}, quick=False,
             source=_NEMOTRON + "; 8192-token prefill"),
        Case("nemotron_h_T256_I21504", {"rows": 256, "cols": 21504}, quick=False,
             source=_NEMOTRON + "; a 256-sequence decode batch"),
    ),
    dtypes=("bf16", "fp16", "fp32"),
    make_inputs=_inputs, run=lambda inp, case: relu2(inp["x"], inp["out"]), reference=_reference,
    outputs=("out",),
    tolerance={"bf16": Tolerance(atol=2e-2, rtol=1e-2), "fp16": Tolerance(atol=2e-3, rtol=2e-3),
               "fp32": Tolerance(atol=1e-5, rtol=1.3e-5)},
    description="y = relu(x)^2 over the up projection's output (non-gated MLP), fp32 math",
    triton_kernels=(_relu2_kernel,),
    upstream="Inductor-generated in vLLM (ReLUSquaredActivation.forward_native, torch.square(F.relu(x)), in "
             "model_executor/layers/activation.py under torch.compile with custom ops off, the default); "
             "with custom ops on, the C++ op torch.ops._C.relu_squared; no hand-written Triton",
))
