"""RMSNorm family: plain, fused residual-add, and the gated per-head norm of linear-attention layers.

Shapes: Qwen3-Next hidden 2048 (RMSNorm weight stored zero-centred, applied as 1 + w), Llama-3.1 /
Mixtral hidden 4096, DeepSeek-V3 hidden 7168; the gated norm runs over head_dim 128 of the 32 value
heads of Qwen3-Next's Gated DeltaNet output. eps 1e-6 throughout.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sdk.conformance.spec import Case, KernelSpec, Tolerance, register

EPS = 1e-6
_TOL = {"bf16": Tolerance(atol=2e-2, rtol=1e-2), "fp32": Tolerance(atol=1e-5, rtol=1.3e-5)}


def _randn(shape, gen, dtype, device, scale=1.0, shift=0.0):
    return (torch.randn(shape, generator=gen) * scale + shift).to(dtype).to(device)


def _row_warps(block: int, elem_bytes: int) -> int:
    # about 16 bytes per thread per row; 1..8 warps
    return max(1, min(8, block * elem_bytes // (16 * 32)))


# --------------------------------------------------------------------------------------- rmsnorm
@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, out_ptr, stride_x, stride_out, n_cols, eps,
                    WEIGHT_OFFSET: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    var = tl.sum(x * x, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32) + WEIGHT_OFFSET
    tl.store(out_ptr + row * stride_out + cols, (x * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


def _norm_inputs(case, dtype, device, gen):
    p = case.params
    T, H = p["tokens"], p["hidden"]
    offset = p.get("weight_offset", 0.0)
    # zero-centred weights (applied as 1 + w) are small; plain weights sit around 1
    w = _randn((H,), gen, dtype, device, scale=0.1, shift=0.0 if offset else 1.0)
    return {"x": _randn((T, H), gen, dtype, device, scale=2.0), "weight": w,
            "out": torch.empty((T, H), dtype=dtype, device=device)}


def _rmsnorm_run(inp, case):
    x, out = inp["x"], inp["out"]
    T, H = x.shape
    block = triton.next_power_of_2(H)
    _rmsnorm_kernel[(T,)](x, inp["weight"], out, x.stride(0), out.stride(0), H, EPS,
                          WEIGHT_OFFSET=float(case.params.get("weight_offset", 0.0)), BLOCK=block,
                          num_warps=_row_warps(block, x.element_size()))


def _rms_ref(x: torch.Tensor, w: torch.Tensor, offset: float) -> torch.Tensor:
    x = x.double()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * (w.double() + offset)


def _rmsnorm_ref(inp, case):
    return {"out": _rms_ref(inp["x"], inp["weight"], case.params.get("weight_offset", 0.0))}


_NORM_CASES = (
    Case("odd_T37_H1000", {"tokens": 37, "hidden": 1000}, source="odd sizes: masked tail"),
    Case("qwen3_next_T16_H2048", {"tokens": 16, "hidden": 2048, "weight_offset": 1.0},
         source="Qwen3-Next hidden 2048, zero-centred weight"),
    Case("qwen3_next_T8192_H2048", {"tokens": 8192, "hidden": 2048, "weight_offset": 1.0}, quick=False,
         source="Qwen3-Next-80B-A3B hidden 2048, 8192-token prefill"),
    Case("llama3_1_T8192_H4096", {"tokens": 8192, "hidden": 4096}, quick=False,
         source="Llama-3.1-8B hidden 4096, 8192-token prefill"),
    Case("deepseek_v3_T4096_H7168", {"tokens": 4096, "hidden": 7168}, quick=False,
         source="DeepSeek-V3 hidden 7168, 4096-token prefill"),
)

register(KernelSpec(
    name="rmsnorm", group="norms",
    models=("qwen3_5", "qwen3_next", "llama3_1", "mixtral", "deepseek_v3", "mamba2", "gpt_oss", "glm4_5",
            "kimi_k2", "llama4", "gemma3", "nemotron_h", "granite4_h", "falcon_h1", "jamba", "minimax",
            "qwen2_5_vl"),
    cases=_NORM_CASES, dtypes=("bf16", "fp32"),
    make_inputs=_norm_inputs, run=_rmsnorm_run, reference=_rmsnorm_ref,
    outputs=("out",), tolerance=_TOL,
    description="RMSNorm over the hidden size, one row per program, fp32 statistics",
    triton_kernels=(_rmsnorm_kernel,),
    upstream="vLLM IR op rms_norm (vllm/ir/ops/layernorm.py, called by RMSNorm in "
             "model_executor/layers/layernorm.py): Inductor-generated from its PyTorch definition under "
             "torch.compile (custom ops off, the default), else the C++ op _C.rms_norm (kernels/vllm_c.py); no "
             "hand-written Triton",
))


# ----------------------------------------------------------------------------- fused_add_rmsnorm
@triton.jit
def _fused_add_rmsnorm_kernel(x_ptr, res_ptr, w_ptr, stride_x, stride_res, n_cols, eps,
                              WEIGHT_OFFSET: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(res_ptr + row * stride_res + cols, mask=mask, other=0.0).to(tl.float32)
    s = (x + r).to(res_ptr.dtype.element_ty)
    tl.store(res_ptr + row * stride_res + cols, s, mask=mask)
    s = s.to(tl.float32)
    var = tl.sum(s * s, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32) + WEIGHT_OFFSET
    tl.store(x_ptr + row * stride_x + cols, (s * rstd * w).to(x_ptr.dtype.element_ty), mask=mask)


def _fused_inputs(case, dtype, device, gen):
    inp = _norm_inputs(case, dtype, device, gen)
    del inp["out"]
    inp["residual"] = _randn(inp["x"].shape, gen, dtype, device, scale=4.0)
    return inp


def _fused_run(inp, case):
    x, res = inp["x"], inp["residual"]
    T, H = x.shape
    block = triton.next_power_of_2(H)
    _fused_add_rmsnorm_kernel[(T,)](x, res, inp["weight"], x.stride(0), res.stride(0), H, EPS,
                                    WEIGHT_OFFSET=float(case.params.get("weight_offset", 0.0)),
                                    BLOCK=block, num_warps=_row_warps(block, x.element_size()))


def _fused_ref(inp, case):
    # the residual stream is stored in the activation dtype, and the norm reads it back from there
    res = (inp["x"].double() + inp["residual"].double()).to(inp["x"].dtype)
    return {"x": _rms_ref(res, inp["weight"], case.params.get("weight_offset", 0.0)), "residual": res}


register(KernelSpec(
    name="fused_add_rmsnorm", group="norms",
    models=("qwen3_5", "qwen3_next", "llama3_1", "mixtral", "deepseek_v3", "mamba2", "gpt_oss", "glm4_5",
            "kimi_k2", "llama4", "gemma3", "nemotron_h", "jamba", "qwen2_5_vl"),
    cases=_NORM_CASES, dtypes=("bf16", "fp32"),
    make_inputs=_fused_inputs, run=_fused_run, reference=_fused_ref,
    outputs=("x", "residual"), inplace=("x", "residual"), tolerance=_TOL,
    output_tolerance={"residual": Tolerance(exact=True)},
    description="residual += x, then x = RMSNorm(residual), both in place (residual add bit-exact)",
    triton_kernels=(_fused_add_rmsnorm_kernel,),
    upstream="vLLM IR op fused_add_rms_norm (vllm/ir/ops/layernorm.py, called by RMSNorm in "
             "model_executor/layers/layernorm.py): Inductor-generated from its PyTorch definition under "
             "torch.compile (custom ops off, the default), else the C++ op _C.fused_add_rms_norm "
             "(kernels/vllm_c.py); no hand-written Triton",
))


# --------------------------------------------------------------------------------- gated_rmsnorm
@triton.jit
def _gated_rmsnorm_kernel(x_ptr, z_ptr, w_ptr, out_ptr, n_rows, eps,
                          D: tl.constexpr, BLOCK_D: tl.constexpr, ROWS: tl.constexpr):
    # x, z, out: contiguous [n_rows, D] (tokens x heads flattened); w: [D] shared by every head
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_D)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < D)
    offs = rows[:, None] * D + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    z = tl.load(z_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    var = tl.sum(x * x, axis=1) / D
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=cols < D, other=0.0).to(tl.float32)
    y = x * rstd[:, None] * w[None, :] * (z * tl.sigmoid(z))
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def _gated_inputs(case, dtype, device, gen):
    p = case.params
    shape = (p["tokens"], p["heads"], p["head_dim"])
    return {"x": _randn(shape, gen, dtype, device), "z": _randn(shape, gen, dtype, device, scale=2.0),
            "weight": _randn((p["head_dim"],), gen, dtype, device, scale=0.1, shift=1.0),
            "out": torch.empty(shape, dtype=dtype, device=device)}


def _gated_run(inp, case):
    x = inp["x"]
    D = x.shape[-1]
    n_rows = x.numel() // D
    block_d = triton.next_power_of_2(D)
    rows = max(1, min(16, 2048 // block_d))
    _gated_rmsnorm_kernel[(triton.cdiv(n_rows, rows),)](
        x, inp["z"], inp["weight"], inp["out"], n_rows, EPS, D=D, BLOCK_D=block_d, ROWS=rows,
        num_warps=4)


def _gated_ref(inp, case):
    z = inp["z"].double()
    return {"out": _rms_ref(inp["x"], inp["weight"], 0.0) * z * torch.sigmoid(z)}


register(KernelSpec(
    name="gated_rmsnorm", group="norms", models=("qwen3_5", "qwen3_next"),
    cases=(
        Case("odd_T37_H3_D100", {"tokens": 37, "heads": 3, "head_dim": 100}, source="odd sizes: masked rows and cols"),
        Case("qwen3_next_T16_H8_D128", {"tokens": 16, "heads": 8, "head_dim": 128},
             source="Qwen3-Next linear-attention head_dim 128, heads scaled /4"),
        Case("qwen3_next_T8192_H32_D128", {"tokens": 8192, "heads": 32, "head_dim": 128}, quick=False,
             source="Qwen3-Next-80B-A3B: 32 value heads x 128, 8192-token prefill"),
    ),
    dtypes=("bf16", "fp32"),
    make_inputs=_gated_inputs, run=_gated_run, reference=_gated_ref,
    outputs=("out",), tolerance=_TOL,
    description="y = RMSNorm(x) * w * silu(z) per head (Gated DeltaNet output norm), several rows per program",
    triton_kernels=(_gated_rmsnorm_kernel,),
    upstream="vllm 0.33: third_party/flash_linear_attention/ops/layernorm_guard.py rmsnorm_fn "
             "(layer_norm_fwd_kernel, norm_before_gate), reached from RMSNormGated.forward_cuda in "
             "model_executor/layers/layernorm.py (fla_rms_norm_gated); 0.11: "
             "model_executor/layers/fla/ops/layernorm_guard.py; the Mamba-2 mixer's norm-after-gate variant is "
             "mamba/ops/layernorm_gated.py _layer_norm_fwd_1pass_kernel",
))
