"""Block-scaled fp8 GEMM (w8a8), the linear layers of block-fp8 checkpoints: y = (A * As) @ (B * Bs)^T.

A: fp8 e4m3 activations [M, K] with one fp32 scale per token and group of 128 along K (the output
of `fp8_per_token_group_quant`); B: fp8 e4m3 weights [N, K] with one fp32 scale per 128 x 128
block. Each K tile of 128 is one dot product, scaled by its activation and weight scales and
added to an fp32 accumulator; the output is bf16 (or fp16). N and K need not be multiples of
128: the last scale block is partial (DeepSeek-V3's kv_a_proj_with_mqa has N = 512 + 64 = 576).

Shapes: DeepSeek-V3 (hidden 7168, q_lora 1536, kv_lora 512, 128 heads x (128 + 64) q/k dims, MoE
intermediate 2048 / dense 18432) and Kimi-K2 (the same architecture with 64 heads). Targets
without fp8 e4m3 decode the fp8 bytes to bf16 in the kernel and multiply in bf16 (exact: every
e4m3 value is a bf16 value), the weight-only path serving stacks take on Ampere.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sdk.conformance.kernels.quant_fp8 import _e4m3_bits_to_f32, group_quant_reference, native_fp8
from sdk.conformance.refmath import compute_dtype
from sdk.conformance.spec import Case, KernelSpec, Tolerance, register

BLOCK = 128  # the checkpoints' weight block and activation group


@triton.jit
def _load_fp8_operand(ptrs, mask, NATIVE_FP8: tl.constexpr):
    """An fp8 e4m3 tile as the dot product takes it: e4m3 itself, or bf16 decoded from its bytes."""
    if NATIVE_FP8:
        return tl.load(ptrs, mask=mask, other=0.0)
    else:
        return _e4m3_bits_to_f32(tl.load(ptrs, mask=mask, other=0)).to(tl.bfloat16)


@triton.jit
def _block_fp8_gemm_kernel(a_ptr, b_ptr, c_ptr, as_ptr, bs_ptr, M, N, K,
                           stride_am, stride_bn, stride_cm, stride_as_m, stride_as_k,
                           stride_bs_n, stride_bs_k,
                           GROUP_N: tl.constexpr, GROUP_K: tl.constexpr, NATIVE_FP8: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                           GROUP_M: tl.constexpr):
    # BLOCK_K divides GROUP_K: a K tile never straddles two scale groups
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * num_n
    first_m = (pid // per_group) * GROUP_M
    rows_in_group = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % rows_in_group
    pid_n = (pid % per_group) // rows_in_group
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mmask = offs_m < M
    nmask = offs_n < N
    a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + offs_n[None, :].to(tl.int64) * stride_bn + offs_k[:, None]
    as_ptrs = as_ptr + offs_m * stride_as_m
    bs_ptrs = bs_ptr + (offs_n // GROUP_N) * stride_bs_n
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kmask = offs_k < K - k0
        a = _load_fp8_operand(a_ptrs, mmask[:, None] & kmask[None, :], NATIVE_FP8)
        b = _load_fp8_operand(b_ptrs, kmask[:, None] & nmask[None, :], NATIVE_FP8)
        sa = tl.load(as_ptrs + (k0 // GROUP_K) * stride_as_k, mask=mmask, other=0.0)
        sb = tl.load(bs_ptrs + (k0 // GROUP_K) * stride_bs_k, mask=nmask, other=0.0)
        acc += tl.dot(a, b) * sa[:, None] * sb[None, :]
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mmask[:, None] & nmask[None, :])


def _config(m: int, native: bool) -> dict:
    """Tiles: BLOCK_K 128 (one scale group per step) with fp8 operands; bf16 operands decoded from
    fp8 take BLOCK_K 64 so that two stages fit the smallest shared memory of the targets. 64-row
    tiles take 8 warps: with 4, each K step's scaled partial product spills registers."""
    block_m = 16 if m <= 16 else 32 if m <= 32 else 64
    warps = 8 if block_m == 64 else 4
    if native:
        return dict(BLOCK_M=block_m, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=warps, num_stages=3)
    return dict(BLOCK_M=block_m, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=warps, num_stages=2)


def block_fp8_gemm(a, a_scale, b, b_scale, c, emulate_fp8: bool = False, **config) -> None:
    """c[M, N] = (a * a_scale) @ (b * b_scale)^T for fp8 a [M, K], b [N, K] (rows contiguous),
    a_scale [M, cdiv(K, 128)] and b_scale [cdiv(N, 128), cdiv(K, 128)] (any strides)."""
    m, k = a.shape
    n = b.shape[0]
    assert a.stride(1) == 1 and b.stride(1) == 1 and c.stride(1) == 1
    native = native_fp8() and not emulate_fp8
    cfg = {**_config(m, native), **config}
    assert BLOCK % cfg["BLOCK_K"] == 0
    grid = (triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"]),)
    if not native:
        a, b = a.view(torch.uint8), b.view(torch.uint8)
    _block_fp8_gemm_kernel[grid](
        a, b, c, a_scale, b_scale, m, n, k, a.stride(0), b.stride(0), c.stride(0),
        a_scale.stride(0), a_scale.stride(1), b_scale.stride(0), b_scale.stride(1),
        GROUP_N=BLOCK, GROUP_K=BLOCK, NATIVE_FP8=native, **cfg)


def quantize_weight_blocks(w: torch.Tensor, block: int = BLOCK):
    """fp8 e4m3 weights [..., N, K] with one fp32 scale per block x block tile (amax / 448), as the
    released block-fp8 checkpoints store them; partial edge blocks allowed. Works in fp32 on w's
    device; w itself is left as it is. Whole tiles are read in place (a padded copy only for
    partial edge blocks), and the largest magnitude is the larger of -min and max (no |w| copy)."""
    *lead, n, k = w.shape
    nb, kb = triton.cdiv(n, block), triton.cdiv(k, block)
    if n % block or k % block or w.dtype != torch.float32 or not w.is_contiguous():
        padded = torch.zeros((*lead, nb * block, kb * block), dtype=torch.float32, device=w.device)
        padded[..., :n, :k] = w
    else:
        padded = w
    tiles = padded.view(*lead, nb, block, kb, block)
    amax = torch.maximum(tiles.amax(dim=(-3, -1)), tiles.amin(dim=(-3, -1)).neg_())
    scale = amax.clamp_min_(1e-12) / 448.0                                           # [..., nb, kb]
    q = (tiles / scale[..., :, None, :, None]).clamp_(-448, 448).view(*lead, nb * block, kb * block)
    return q[..., :n, :k].to(torch.float8_e4m3fn).contiguous(), scale


def dequant(q: torch.Tensor, scale: torch.Tensor, rows_per_scale: int, block: int = BLOCK,
            dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Values in `dtype` (fp64 unless asked) of block-scaled fp8 or int8 data q [..., R, C] with
    scale [..., cdiv(R, rows_per_scale), cdiv(C, block)], on q's device (activations:
    rows_per_scale 1; weights: 128)."""
    r, c = q.shape[-2:]
    s = scale.to(dtype).repeat_interleave(rows_per_scale, dim=-2)[..., :r, :]
    return q.to(dtype) * s.repeat_interleave(block, dim=-1)[..., :c]


def _inputs(case, dtype, device, gen):
    p = case.params
    m, n, k = p["M"], p["N"], p["K"]
    x = torch.randn((m, k), generator=gen)
    a, a_scale = group_quant_reference(_pad_cols(x, BLOCK))
    a = a[:, :k].contiguous()
    w = torch.randn((n, k), generator=gen) / k ** 0.5
    b, b_scale = quantize_weight_blocks(w)
    return {"a": a.to(device), "a_scale": a_scale.float().to(device), "b": b.to(device),
            "b_scale": b_scale.to(device), "c": torch.empty((m, n), dtype=dtype, device=device)}


def _pad_cols(x: torch.Tensor, block: int) -> torch.Tensor:
    """x with zero columns up to a multiple of `block` (a partial last group quantises as itself)."""
    k = x.shape[1]
    return torch.nn.functional.pad(x, (0, triton.cdiv(k, block) * block - k))


def _run(inp, case, **config):
    block_fp8_gemm(inp["a"], inp["a_scale"], inp["b"], inp["b_scale"], inp["c"],
                   emulate_fp8=bool(case.params.get("emulate_fp8")), **config)


def _reference(inp, case):
    """The dequantised operands multiplied in fp32 (refmath: the outputs are 16-bit)."""
    dt = compute_dtype(inp["c"])
    a = dequant(inp["a"], inp["a_scale"], 1, dtype=dt)
    return {"c": a @ dequant(inp["b"], inp["b_scale"], BLOCK, dtype=dt).T}


_DS = "DeepSeek-V3 config (deepseek-ai/DeepSeek-V3, block-fp8 weights): "
_KIMI = "Kimi-K2 config (moonshotai/Kimi-K2-Instruct, block-fp8 weights): "
register(KernelSpec(
    name="gemm_fp8_block_w8a8", group="gemm", models=("deepseek_v3", "kimi_k2", "glm4_5"),
    cases=(
        Case("odd_M37_N200_K320", {"M": 37, "N": 200, "K": 320},
             source="odd sizes: partial last scale block in N (200 = 128 + 72) and K (320 = 2 x 128 + 64)"),
        Case("deepseek_v3_kv_a_T5_N576_K896", {"M": 5, "N": 576, "K": 896},
             source=_DS + "kv_a_proj_with_mqa N = kv_lora 512 + rope 64 = 576; K = hidden 7168 / 8"),
        Case("deepseek_v3_q_b_T16_N384_K1536_emulated", {"M": 16, "N": 384, "K": 1536, "emulate_fp8": True},
             source=_DS + "q_b_proj input q_lora 1536, N = 24576 / 64; fp8 decoded to bf16 in the kernel"),
        Case("deepseek_v3_kv_a_T4096_N576_K7168", {"M": 4096, "N": 576, "K": 7168}, quick=False,
             source=_DS + "kv_a_proj_with_mqa: hidden 7168 -> 512 + 64, 4096-token prefill"),
        Case("deepseek_v3_q_b_T4096_N24576_K1536", {"M": 4096, "N": 24576, "K": 1536}, quick=False,
             source=_DS + "q_b_proj: q_lora 1536 -> 128 heads x 192"),
        Case("deepseek_v3_kv_b_T4096_N32768_K512", {"M": 4096, "N": 32768, "K": 512}, quick=False,
             source=_DS + "kv_b_proj: kv_lora 512 -> 128 heads x (128 + 128)"),
        Case("deepseek_v3_dense_down_T8_N7168_K18432", {"M": 8, "N": 7168, "K": 18432}, quick=False,
             source=_DS + "dense-layer down projection 18432 -> 7168, 8-token decode"),
        Case("kimi_k2_o_proj_T4096_N7168_K8192", {"M": 4096, "N": 7168, "K": 8192}, quick=False,
             source=_KIMI + "o_proj 64 heads x 128 = 8192 -> hidden 7168"),
    ),
    dtypes=("bf16", "fp16"),
    make_inputs=_inputs, run=_run, reference=_reference, outputs=("c",),
    tolerance={"bf16": Tolerance(atol=2e-2, rtol=1.6e-2), "fp16": Tolerance(atol=4e-3, rtol=4e-3)},
    description="fp8 e4m3 x fp8 e4m3 with 1x128 activation and 128x128 weight scales applied per K tile, "
                "fp32 accumulation, bf16/fp16 output; the reference multiplies the dequantised operands in fp32 (refmath: 16-bit outputs)",
    triton_kernels=(_block_fp8_gemm_kernel,),
    upstream="vllm: model_executor/layers/quantization/utils/fp8_utils.py w8a8_triton_block_scaled_mm "
             "(_w8a8_triton_block_scaled_mm; TritonFp8BlockScaledMMKernel). On CUDA vLLM prefers "
             "FlashInfer/DeepGEMM, CUTLASS or Marlin and takes it last; on ROCm after AITER, on XPU after "
             "XPU's own op",
))
