"""The shared expert's sigmoid gate and the combine with the routed experts (Qwen3-Next, Qwen3.5):

    out = routed + sigmoid(x . w_gate) * shared

x [T, hidden] is the MoE block's input, w_gate [hidden] the single row of the shared-expert gate
(a linear layer hidden -> 1), shared [T, hidden] the shared expert's output, routed [T, hidden] the
fused-MoE output. One program per token: the gate logit is a dot over the hidden size in fp32 (a
loop over column blocks), then the epilogue scales, adds and rounds once.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sdk.conformance.spec import Case, KernelSpec, Tolerance, register


@triton.jit
def _shared_expert_gate_kernel(x_ptr, wg_ptr, shared_ptr, routed_ptr, out_ptr, stride_x, stride_s, stride_r,
                               stride_o, hidden, BLOCK: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for c0 in range(0, hidden, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        mask = cols < hidden
        x = tl.load(x_ptr + t * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(wg_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        acc += x * w
    gate = tl.sigmoid(tl.sum(acc, axis=0))
    for c0 in range(0, hidden, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        mask = cols < hidden
        s = tl.load(shared_ptr + t * stride_s + cols, mask=mask, other=0.0).to(tl.float32)
        r = tl.load(routed_ptr + t * stride_r + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + t * stride_o + cols, (r + gate * s).to(out_ptr.dtype.element_ty), mask=mask)


def shared_expert_gate(x: torch.Tensor, w_gate: torch.Tensor, shared: torch.Tensor, routed: torch.Tensor,
                       out: torch.Tensor) -> None:
    """out = routed + sigmoid(x @ w_gate) * shared; [T, hidden] tensors with unit column stride,
    w_gate [hidden] (the gate layer's weight row)."""
    T, hidden = x.shape
    block = min(1024, triton.next_power_of_2(hidden))
    _shared_expert_gate_kernel[(T,)](x, w_gate, shared, routed, out, x.stride(0), shared.stride(0),
                                     routed.stride(0), out.stride(0), hidden, BLOCK=block,
                                     num_warps=max(1, min(8, block * x.element_size() // 512)))


def _inputs(case, dtype, device, gen):
    T, H = case.params["tokens"], case.params["hidden"]
    t = {"x": torch.randn((T, H), generator=gen),
         # logits of order one: weights ~ N(0, 1/hidden), so some tokens take the shared expert
         # almost fully and some almost not at all
         "w_gate": torch.randn((H,), generator=gen) * 1.5 * H ** -0.5,
         "shared": torch.randn((T, H), generator=gen), "routed": torch.randn((T, H), generator=gen)}
    t = {k: v.to(dtype).to(device) for k, v in t.items()}
    t["out"] = torch.empty((T, H), dtype=dtype, device=device)
    return t


def _reference(inp, case):
    x, w = inp["x"].double(), inp["w_gate"].double()
    gate = torch.sigmoid(x @ w)[:, None]
    return {"out": inp["routed"].double() + gate * inp["shared"].double()}


_QN = "Qwen3-Next-80B-A3B (sdk/models/configs/qwen3_next.json): hidden 2048, shared_expert_intermediate_size 512"
register(KernelSpec(
    name="shared_expert_sigmoid_gate", group="moe", models=("qwen3_next", "qwen3_5"),
    cases=(
        Case("odd_T37_H1000", {"tokens": 37, "hidden": 1000}, source="odd sizes: masked tail"),
        Case("qwen3_next_T16_H2048", {"tokens": 16, "hidden": 2048}, source=_QN + "; 16 tokens"),
        Case("qwen3_next_T8192_H2048", {"tokens": 8192, "hidden": 2048}, quick=False,
             source=_QN + "; 8192-token prefill"),
        Case("qwen3_next_T256_H2048", {"tokens": 256, "hidden": 2048}, quick=False,
             source=_QN + "; a 256-sequence decode batch"),
    ),
    dtypes=("bf16", "fp32"),
    make_inputs=_inputs,
    run=lambda inp, case: shared_expert_gate(inp["x"], inp["w_gate"], inp["shared"], inp["routed"], inp["out"]),
    reference=_reference, outputs=("out",),
    tolerance={"bf16": Tolerance(atol=2e-2, rtol=1e-2), "fp32": Tolerance(atol=1e-5, rtol=1.3e-5)},
    description="out = routed + sigmoid(x . w_gate) * shared: the shared expert's gate GEMV, sigmoid, scale "
                "and the combine with the routed experts fused in one pass per token",
    triton_kernels=(_shared_expert_gate_kernel,),
    upstream="PyTorch in vLLM, no hand-written Triton: Qwen2MoeMLP.forward (model_executor/models/qwen2_moe.py, "
             "Qwen3-Next's and Qwen3.5's shared expert) computes F.sigmoid(expert_gate(x)) * out, the gate a "
             "ReplicatedLinear(hidden, 1); MoERunner (model_executor/layers/fused_moe/runner/moe_runner.py) adds "
             "shared_output + fused_output inside the fused-MoE custom op, so these run as eager torch ops; with "
             "fused shared experts the gate row joins the router GEMM and the top-k kernel applies the sigmoid",
))
