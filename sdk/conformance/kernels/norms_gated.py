"""Mamba-2's gated RMSNorm with the norm after the gate, per group of channels.

y = rmsnorm_g(x * silu(z)) * w, the statistics taken over each group of `group_size` consecutive
channels of a token's inner dim (group size = inner / n_groups), the weight per channel. x is the
SSD output [T, inner]; z, the gate, is a column slice of the mixer's in_proj output, so its rows are
strided by the whole projection width (z, x, B, C, dt side by side). One program per (token, group),
fp32 statistics.

Shapes: Mamba-Codestral-7B and Nemotron-H-8B normalise 8 groups of 1024 of their 8192-wide inner dim;
Granite-4.0-H-Tiny one group of 3072 (48 heads x 64). eps: 1e-5 (layer_norm_epsilon) for the first two,
1e-6 for Granite (rms_norm_eps, GraniteMoeHybridConfig's default; the shipped config leaves it out).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sdk.conformance.spec import Case, KernelSpec, Tolerance, register

EPS = 1e-5  # layer_norm_epsilon of Codestral and Nemotron-H


@triton.jit
def _gated_rmsnorm_grouped_kernel(x_ptr, z_ptr, w_ptr, out_ptr, stride_x, stride_z, stride_out,
                                  group_size, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    group = tl.program_id(1)
    cols = group * group_size + tl.arange(0, BLOCK)
    mask = tl.arange(0, BLOCK) < group_size
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    z = tl.load(z_ptr + row * stride_z + cols, mask=mask, other=0.0).to(tl.float32)
    g = x * (z * tl.sigmoid(z))                        # the gate first, then the norm
    rstd = 1.0 / tl.sqrt(tl.sum(g * g, axis=0) / group_size + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, (g * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


def gated_rmsnorm_grouped(x: torch.Tensor, z: torch.Tensor, weight: torch.Tensor, out: torch.Tensor,
                          n_groups: int, eps: float = EPS) -> None:
    """out = rmsnorm per group(x * silu(z)) * weight; x, z, out [T, inner] with unit column stride."""
    T, inner = x.shape
    if inner % n_groups:
        raise ValueError(f"inner dim {inner} is not a multiple of {n_groups} groups")
    group_size = inner // n_groups
    block = triton.next_power_of_2(group_size)
    _gated_rmsnorm_grouped_kernel[(T, n_groups)](
        x, z, weight, out, x.stride(0), z.stride(0), out.stride(0), group_size, eps, BLOCK=block,
        num_warps=max(1, min(8, block // 256)))


def _inputs(case, dtype, device, gen):
    p = case.params
    T, inner, G = p["tokens"], p["inner"], p["groups"]
    # the in_proj output: [z | x_conv | B | C | dt]; the gate is its first `inner` columns
    width = 2 * inner + 2 * G * p["state"] + p["heads"]
    proj = (torch.randn((T, width), generator=gen) * 2.0).to(dtype)
    w = (1.0 + 0.1 * torch.randn((inner,), generator=gen)).to(dtype)
    return {"x": torch.randn((T, inner), generator=gen).to(dtype).to(device),
            "z": proj.to(device)[:, :inner], "weight": w.to(device),
            "out": torch.empty((T, inner), dtype=dtype, device=device)}


def _run(inp, case):
    gated_rmsnorm_grouped(inp["x"], inp["z"], inp["weight"], inp["out"], case.params["groups"],
                          case.params.get("eps", EPS))


def _reference(inp, case):
    x, z = inp["x"].double(), inp["z"].double()
    T, inner = x.shape
    g = (x * z * torch.sigmoid(z)).view(T, case.params["groups"], -1)
    y = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + case.params.get("eps", EPS))
    return {"out": y.view(T, inner) * inp["weight"].double()}


_CODESTRAL = "Mamba-Codestral-7B (sdk/models/configs/mamba2.json): intermediate 8192, n_groups 8 (groups of 1024)"
_NEMOTRON = "Nemotron-H-8B (sdk/models/configs/nemotron_h.json): 128 heads x 64 = 8192, n_groups 8 (groups of 1024)"
_GRANITE = ("Granite-4.0-H (sdk/models/configs/granite4_h.json): 48 heads x 64 = 3072, mamba_n_groups 1 "
            "(one group of 3072)")
_M2 = {"state": 128, "heads": 128}
register(KernelSpec(
    name="gated_rmsnorm_grouped", group="norms", models=("mamba2", "nemotron_h", "granite4_h"),
    cases=(
        Case("odd_T37_G3x100", {"tokens": 37, "inner": 300, "groups": 3, "state": 20, "heads": 6},
             source="odd sizes: group of 100 (masked block), 3 groups"),
        Case("codestral_T16_G2x1024", {"tokens": 16, "inner": 2048, "groups": 2, "state": 128, "heads": 32},
             source=_CODESTRAL + "; groups scaled /4"),
        Case("granite4_h_T8_G1x3072", {"tokens": 8, "inner": 3072, "groups": 1, "state": 128, "heads": 48,
                                       "eps": 1e-6},
             source=_GRANITE),
        Case("codestral_T8192_G8x1024", {"tokens": 8192, "inner": 8192, "groups": 8, **_M2}, quick=False,
             source=_CODESTRAL + "; 8192-token prefill"),
        Case("nemotron_h_T4096_G8x1024", {"tokens": 4096, "inner": 8192, "groups": 8, **_M2}, quick=False,
             source=_NEMOTRON + "; 4096-token prefill"),
        Case("granite4_h_T8192_G1x3072", {"tokens": 8192, "inner": 3072, "groups": 1, "state": 128,
                                          "heads": 48, "eps": 1e-6}, quick=False,
             source=_GRANITE + "; 8192-token prefill"),
    ),
    dtypes=("bf16", "fp32"),
    make_inputs=_inputs, run=_run, reference=_reference, outputs=("out",),
    tolerance={"bf16": Tolerance(atol=2e-2, rtol=1e-2), "fp32": Tolerance(atol=1e-5, rtol=1.3e-5)},
    description="y = RMSNorm per group(x * silu(z)) * w (norm after the gate), one program per token and "
                "group, the gate a strided slice of the in_proj output",
    triton_kernels=(_gated_rmsnorm_grouped_kernel,),
    upstream="vllm: model_executor/layers/mamba/ops/layernorm_gated.py rms_norm_gated "
             "(_layer_norm_fwd_1pass_kernel, norm_before_gate=False, grid over (rows, groups)), which "
             "Mixer2RMSNormGated.forward_cuda (mamba/mamba_mixer2.py) calls for one group (Granite-4.0-H) "
             "with custom ops on; for several groups (Codestral, Nemotron-H), or custom ops off, vLLM runs "
             "its forward_native as PyTorch / Inductor-generated",
))
