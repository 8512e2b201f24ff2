"""Dense GEMMs as a serving stack launches them for linear layers: y = x @ W^T.

`gemm_bf16`: bf16/fp16/fp32 operands, fp32 accumulation, a grouped (L2-friendly) tile order and a
tile configuration chosen from the problem size the way serving stacks keep per-shape tables.
`gemm_fp8_w8a8`: fp8 e4m3 activations with one scale per token and fp8 e4m3 weights with one
scale per output channel (the "w8a8" path of FP8 checkpoints), fp32 accumulation, bf16 output.
On a target without fp8 e4m3 (sm_80, sm_86) the operands are read as bytes and decoded exactly into
bf16 before the dot, the weight-only path serving stacks take on Ampere.
Shapes: Llama-3.1-8B projections (hidden 4096, intermediate 14336), Qwen3-Next attention
projections (hidden 2048, 16 heads x 256 = 4096), 8192-token prefill and 8-token decode.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sdk.conformance.kernels.quant_fp8 import _e4m3_bits_to_f32, native_fp8
from sdk.conformance.refmath import compute_dtype
from sdk.conformance.spec import Case, KernelSpec, Tolerance, register


@triton.jit
def _gemm_kernel(a_ptr, b_ptr, c_ptr, sa_ptr, sb_ptr, M, N, K,
                 stride_am, stride_ak, stride_bn, stride_bk, stride_cm, stride_cn,
                 SCALED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, PRECISION: tl.constexpr,
                 FP8_BITS: tl.constexpr = False):
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    # grouped order: GROUP_M row-tiles share each column of B while it is in L2
    per_group = GROUP_M * num_n
    group = pid // per_group
    first_m = group * GROUP_M
    rows_in_group = min(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % rows_in_group
    pid_n = (pid % per_group) // rows_in_group
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_n[None, :].to(tl.int64) * stride_bn + offs_k[:, None] * stride_bk
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_n[None, :] < N) & (offs_k[:, None] < k_left), other=0.0)
        if FP8_BITS:  # e4m3 bytes on a target without fp8: decoded exactly into bf16
            a = _e4m3_bits_to_f32(a).to(tl.bfloat16)
            b = _e4m3_bits_to_f32(b).to(tl.bfloat16)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if SCALED:
        sa = tl.load(sa_ptr + offs_m, mask=offs_m < M, other=0.0)
        sb = tl.load(sb_ptr + offs_n, mask=offs_n < N, other=0.0)
        acc = acc * sa[:, None] * sb[None, :]
    c = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def _config(m: int, n: int, k: int, itemsize: int) -> dict:
    """Tile table by problem size (what serving stacks tune per GPU and keep as data)."""
    if m * n * k <= 1 << 24:  # tiny problems: small tiles, one or a few programs
        return dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=4, num_warps=4, num_stages=2)
    if m <= 64:  # decode: few rows, stream the weights
        return dict(BLOCK_M=max(16, triton.next_power_of_2(m)), BLOCK_N=128, BLOCK_K=128 // itemsize * 2,
                    GROUP_M=1, num_warps=4, num_stages=4)
    if itemsize == 1:
        return dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=128, GROUP_M=8, num_warps=8, num_stages=3)
    if itemsize == 4:
        return dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=32, GROUP_M=8, num_warps=8, num_stages=3)
    return dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3)


def _launch(a, b, c, sa=None, sb=None, emulate_fp8: bool = False, **config):
    m, k = a.shape
    n = b.shape[0]
    cfg = {**_config(m, n, k, a.element_size()), **config}
    grid = (triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"]),)
    scaled = sa is not None
    fp8_bits = a.dtype == torch.float8_e4m3fn and (emulate_fp8 or not native_fp8())
    if fp8_bits:
        a, b = a.view(torch.uint8), b.view(torch.uint8)
    _gemm_kernel[grid](a, b, c, sa if scaled else c, sb if scaled else c, m, n, k,
                       a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                       SCALED=scaled, PRECISION="ieee" if a.dtype == torch.float32 else "tf32",
                       FP8_BITS=fp8_bits, **cfg)


# ------------------------------------------------------------------------------- bf16 / fp16 / fp32
def _dense_inputs(case, dtype, device, gen):
    m, n, k = case.params["M"], case.params["N"], case.params["K"]
    x = torch.randn((m, k), generator=gen).to(dtype).to(device)
    w = (torch.randn((n, k), generator=gen) / k ** 0.5).to(dtype).to(device)
    return {"x": x, "w": w, "y": torch.empty((m, n), dtype=dtype, device=device)}


def _dense_run(inp, case, **config):
    _launch(inp["x"], inp["w"], inp["y"], **config)


def _dense_reference(inp, case):
    dt = compute_dtype(inp["x"])  # fp64 for fp32 data, fp32 for 16-bit data (sdk.conformance.refmath)
    return {"y": inp["x"].to(dt) @ inp["w"].to(dt).T}


_DENSE_CASES = (
    Case("odd_M37_N96_K80", {"M": 37, "N": 96, "K": 80}, source="odd sizes: masked edges in M, N and K"),
    Case("qwen3_next_o_proj_T24", {"M": 24, "N": 128, "K": 256},
         source="Qwen3-Next-80B-A3B o_proj (4096 -> 2048) scaled down /16, 24 tokens"),
    Case("llama3_1_gate_up_decode_T8", {"M": 8, "N": 28672, "K": 4096}, quick=False,
         source="Llama-3.1-8B fused gate/up projection (4096 -> 2 x 14336), 8-token decode"),
    Case("llama3_1_down_T8192", {"M": 8192, "N": 4096, "K": 14336}, quick=False,
         source="Llama-3.1-8B down projection (14336 -> 4096), 8192-token prefill"),
    Case("square_8192", {"M": 8192, "N": 8192, "K": 8192}, quick=False,
         source="8192^3, the shape the device's peak bf16 rate is measured at"),
)

register(KernelSpec(
    name="gemm_bf16", group="gemm",
    models=("qwen3_5", "qwen3_next", "llama3_1", "mixtral", "deepseek_v3", "mamba2", "gpt_oss", "glm4_5",
            "kimi_k2", "llama4", "gemma3", "nemotron_h", "granite4_h", "falcon_h1", "jamba", "minimax", "qwen2_5_vl"),
    cases=_DENSE_CASES, dtypes=("bf16", "fp16", "fp32"),
    make_inputs=_dense_inputs, run=_dense_run, reference=_dense_reference, outputs=("y",),
    tolerance={"bf16": Tolerance(atol=2e-2, rtol=1.6e-2), "fp16": Tolerance(atol=2e-3, rtol=2e-3),
               "fp32": Tolerance(atol=1e-4, rtol=1e-4)},
    description="linear layer y = x @ W^T: grouped tile order, fp32 accumulation, per-shape tile table",
    triton_kernels=(_gemm_kernel,),
    upstream="vendor BLAS in vLLM (UnquantizedLinearMethod: torch.nn.functional.linear -> cuBLAS / "
             "hipBLASLt); no hand-written Triton",
))


# ------------------------------------------------------------------------------------- fp8 w8a8
def _quantize(t: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric e4m3 quantization with one scale per row (dim=1) — what the checkpoint stores."""
    amax = t.abs().amax(dim=dim, keepdim=True).clamp_min(1e-6)
    scale = amax / 448.0
    return (t / scale).to(torch.float8_e4m3fn), scale.squeeze(dim).to(torch.float32)


def _fp8_inputs(case, dtype, device, gen):
    m, n, k = case.params["M"], case.params["N"], case.params["K"]
    xq, sx = _quantize(torch.randn((m, k), generator=gen), 1)
    wq, sw = _quantize(torch.randn((n, k), generator=gen) / k ** 0.5, 1)
    return {"x": xq.to(device), "sx": sx.to(device), "w": wq.to(device), "sw": sw.to(device),
            "y": torch.empty((m, n), dtype=dtype, device=device)}


def _fp8_run(inp, case, **config):
    _launch(inp["x"], inp["w"], inp["y"], inp["sx"], inp["sw"],
            emulate_fp8=bool(case.params.get("emulate_fp8")), **config)


def _fp8_reference(inp, case):
    dt = compute_dtype(inp["x"])  # fp32 for fp8 data judged by relative RMSE (sdk.conformance.refmath)
    x = inp["x"].to(dt) * inp["sx"].to(dt)[:, None]
    w = inp["w"].to(dt) * inp["sw"].to(dt)[:, None]
    return {"y": x @ w.T}


register(KernelSpec(
    name="gemm_fp8_w8a8", group="gemm", models=("llama3_1",),
    cases=(
        Case("odd_M37_N96_K80", {"M": 37, "N": 96, "K": 80}, source="odd sizes: masked edges"),
        Case("llama3_1_qkv_T16", {"M": 16, "N": 192, "K": 256},
             source="Llama-3.1-8B FP8 qkv projection (4096 -> 6144) scaled down /16, 16 tokens"),
        Case("llama3_1_qkv_T16_emulated", {"M": 16, "N": 192, "K": 256, "emulate_fp8": True},
             source="as llama3_1_qkv_T16, through the byte decode into bf16 that targets without "
                    "fp8e4nv (sm_80, sm_86) take, checked on every target"),
        Case("llama3_1_down_T8192", {"M": 8192, "N": 4096, "K": 14336}, quick=False,
             source="Llama-3.1-8B FP8 down projection, 8192-token prefill"),
        Case("square_8192", {"M": 8192, "N": 8192, "K": 8192}, quick=False,
             source="8192^3 fp8 e4m3, against torch._scaled_mm"),
    ),
    dtypes=("bf16",),
    make_inputs=_fp8_inputs, run=_fp8_run, reference=_fp8_reference, outputs=("y",),
    tolerance={"bf16": Tolerance(rmse=1e-2)},
    description="fp8 e4m3 GEMM with per-token activation and per-channel weight scales, bf16 output",
    triton_kernels=(_gemm_kernel,),
    upstream="vendor library in vLLM (CUTLASS ops.cutlass_scaled_mm or torch._scaled_mm; ROCm: AITER / "
             "hipBLASLt); vLLM's Triton triton_scaled_mm (quantization/compressed_tensors/triton_scaled_mm.py) "
             "is not among the kernels it selects for fp8",
))
