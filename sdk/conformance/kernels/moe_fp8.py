"""The fused-MoE expert GEMM with block-fp8 experts, as DeepSeek-V3/R1 and Kimi-K2 are served.

Same conventions as `moe_fused_gemm` (moe.py): pairs token * top_k + slot sorted by expert into
runs padded to BLOCK_M (`sorted_token_ids`, sentinel T * top_k), `expert_ids` per block. Here the
activations are fp8 e4m3 with one scale per row and group of 128 along K (quantised per token
before the GEMM), the expert weights fp8 e4m3 [E, N, K] with one scale per 128 x 128 block
[E, N/128, K/128]. Each K tile is scaled by its two scales before it joins the fp32 accumulator.
Gate/up reads one activation row per token (row = pair // top_k); down reads one row per pair
(the quantised SwiGLU output) and multiplies the pair's routing weight before the store.

Shapes: DeepSeek-V3 (256 experts top-8, hidden 7168, moe_intermediate 2048), Kimi-K2 (384
experts top-8, same widths), GLM-4.5-FP8 (160 experts top-8, hidden 5120, moe_intermediate 1536).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sdk.conformance.kernels.gemm_fp8_block import _load_fp8_operand, _pad_cols, dequant, quantize_weight_blocks
from sdk.conformance.kernels.moe import _align_ref, _routing
from sdk.conformance.kernels.quant_fp8 import group_quant_reference, native_fp8
from sdk.conformance.refmath import compute_dtype
from sdk.conformance.spec import Case, KernelSpec, Tolerance, register

BLOCK = 128


@triton.jit
def _fused_moe_fp8_block_kernel(a_ptr, b_ptr, c_ptr, as_ptr, bs_ptr, topk_w_ptr, sorted_ptr, expert_ids_ptr,
                                total_ptr, N, K, num_valid, stride_am, stride_be, stride_bn, stride_cm,
                                stride_as_m, stride_as_k, stride_bs_e, stride_bs_n, stride_bs_k,
                                TOP_K: tl.constexpr, MUL_ROUTED_WEIGHT: tl.constexpr,
                                GROUP_N: tl.constexpr, GROUP_K: tl.constexpr, NATIVE_FP8: tl.constexpr,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                                GROUP_M: tl.constexpr):
    # C[pair, :] = (A[row] * As[row]) @ (W[expert] * Ws[expert])^T, row = pair // TOP_K
    pid = tl.program_id(0)
    n_pid_n = tl.cdiv(N, BLOCK_N)
    n_pid_m = tl.num_programs(0) // n_pid_n
    first_m = (pid // (GROUP_M * n_pid_n)) * GROUP_M
    group_size = tl.minimum(n_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * n_pid_n)) % group_size
    pid_n = (pid % (GROUP_M * n_pid_n)) // group_size
    if pid_m * BLOCK_M >= tl.load(total_ptr):
        return
    pairs = tl.load(sorted_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    pmask = pairs < num_valid
    expert = tl.load(expert_ids_ptr + pid_m).to(tl.int64)
    rows = tl.where(pmask, pairs // TOP_K, 0).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    nmask = offs_n < N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows[:, None] * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + expert * stride_be + offs_n[None, :].to(tl.int64) * stride_bn + offs_k[:, None]
    as_ptrs = as_ptr + rows * stride_as_m
    bs_ptrs = bs_ptr + expert * stride_bs_e + (offs_n // GROUP_N) * stride_bs_n
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kmask = offs_k < K - k0
        a = _load_fp8_operand(a_ptrs, pmask[:, None] & kmask[None, :], NATIVE_FP8)
        b = _load_fp8_operand(b_ptrs, kmask[:, None] & nmask[None, :], NATIVE_FP8)
        sa = tl.load(as_ptrs + (k0 // GROUP_K) * stride_as_k, mask=pmask, other=0.0)
        sb = tl.load(bs_ptrs + (k0 // GROUP_K) * stride_bs_k, mask=nmask, other=0.0)
        acc += tl.dot(a, b) * sa[:, None] * sb[None, :]
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    if MUL_ROUTED_WEIGHT:
        w = tl.load(topk_w_ptr + pairs, mask=pmask, other=0.0).to(tl.float32)
        acc = acc * w[:, None]
    c_ptrs = c_ptr + pairs.to(tl.int64)[:, None] * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=pmask[:, None] & nmask[None, :])


def _config(native: bool, block_m: int) -> dict:
    """BLOCK_K 128 with fp8 operands (one scale group per step); 64 with bf16 decoded from fp8 bytes,
    two stages, so that the tiles fit the smallest shared memory of the targets. 64-row blocks take
    8 warps: with 4, each K step's scaled partial product spills registers."""
    warps = 8 if block_m >= 64 else 4
    if native:
        return dict(BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=warps, num_stages=3)
    return dict(BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=warps, num_stages=2)


def fused_moe_fp8_block(a, a_scale, w, w_scale, out, topk_weights, topk_ids, sorted_token_ids, expert_ids,
                        num_tokens_post_padded, block_m: int, down: bool, emulate_fp8: bool = False,
                        **config) -> None:
    """out[T, k, N] for fp8 a ([T, K], or [T * k, K] for down) and fp8 w [E, N, K] with block scales."""
    E, N, K = w.shape
    native = native_fp8() and not emulate_fp8
    cfg = {**_config(native, block_m), **config}
    assert BLOCK % cfg["BLOCK_K"] == 0
    if not native:
        a, w = a.view(torch.uint8), w.view(torch.uint8)
    grid = (expert_ids.numel() * triton.cdiv(N, cfg["BLOCK_N"]),)
    _fused_moe_fp8_block_kernel[grid](
        a, w, out, a_scale, w_scale, topk_weights, sorted_token_ids, expert_ids, num_tokens_post_padded,
        N, K, topk_ids.numel(), a.stride(0), w.stride(0), w.stride(1), N,
        a_scale.stride(0), a_scale.stride(1), w_scale.stride(0), w_scale.stride(1), w_scale.stride(2),
        TOP_K=1 if down else topk_ids.shape[1], MUL_ROUTED_WEIGHT=down, GROUP_N=BLOCK, GROUP_K=BLOCK,
        NATIVE_FP8=native, BLOCK_M=block_m, **cfg)


def _inputs(case, dtype, device, gen):
    p = case.params
    T, E, k, N, K, bm = p["tokens"], p["experts"], p["topk"], p["n"], p["k"], p["block_m"]
    ids, weights = _routing(T, E, k, gen)
    sorted_ids, expert_ids, total = _align_ref(ids, E, bm)
    x = torch.randn((T * k if p["down"] else T, K), generator=gen)
    a, a_scale = group_quant_reference(_pad_cols(x, BLOCK))
    w = torch.empty((E, N, K), dtype=torch.float8_e4m3fn)
    w_scale = torch.empty((E, triton.cdiv(N, BLOCK), triton.cdiv(K, BLOCK)), dtype=torch.float32)
    chunk = max(1, (1 << 26) // (N * K))  # experts per step: full-size experts stay within host memory
    for e in range(0, E, chunk):
        n_e = min(chunk, E - e)
        w[e:e + n_e], w_scale[e:e + n_e] = quantize_weight_blocks(torch.randn((n_e, N, K), generator=gen).div_(K ** 0.5))
    return {"a": a[:, :K].contiguous().to(device), "a_scale": a_scale.float().to(device),
            "w": w.to(device), "w_scale": w_scale.to(device), "topk_ids": ids.to(device),
            "topk_weights": weights.to(device), "sorted_token_ids": sorted_ids.to(device),
            "expert_ids": expert_ids.to(device), "num_tokens_post_padded": total.to(device),
            "out": torch.empty((T, k, N), dtype=dtype, device=device)}


def _run(inp, case, **config):
    p = case.params
    fused_moe_fp8_block(inp["a"], inp["a_scale"], inp["w"], inp["w_scale"], inp["out"], inp["topk_weights"],
                        inp["topk_ids"], inp["sorted_token_ids"], inp["expert_ids"],
                        inp["num_tokens_post_padded"], p["block_m"], bool(p["down"]),
                        emulate_fp8=bool(p.get("emulate_fp8")), **config)


def _reference(inp, case):
    p = case.params
    T, k = inp["topk_ids"].shape
    N = inp["w"].shape[1]
    dt = compute_dtype(inp["out"])  # fp32: the outputs are 16-bit (refmath)
    a = dequant(inp["a"], inp["a_scale"], 1, dtype=dt)
    flat = inp["topk_ids"].flatten().long()
    rows = a if p["down"] else a.repeat_interleave(k, dim=0)
    out = torch.empty((T * k, N), dtype=dt, device=a.device)
    small = inp["w"].numel() <= 1 << 24  # dequantise all experts at once, or one at a time
    w_all = dequant(inp["w"], inp["w_scale"], BLOCK, dtype=dt) if small else None
    for e in flat.unique().tolist():
        sel = flat == e
        w_e = w_all[e] if small else dequant(inp["w"][e], inp["w_scale"][e], BLOCK, dtype=dt)
        out[sel] = rows[sel] @ w_e.T
    if p["down"]:
        out = out * inp["topk_weights"].to(dt).flatten()[:, None]
    return {"out": out.view(T, k, N)}


_DS = "DeepSeek-V3 config (deepseek-ai/DeepSeek-V3, fp8 experts with 128x128 block scales): "
_DS_EP8 = {"experts": 32, "topk": 8}
register(KernelSpec(
    name="moe_fused_gemm_fp8_block", group="moe", models=("deepseek_v3", "kimi_k2", "glm4_5"),
    cases=(
        Case("odd_T13_E8_k4_gateup_N200_K320", {"tokens": 13, "experts": 8, "topk": 4, "n": 200, "k": 320,
                                                "block_m": 16, "down": False},
             source="odd sizes: partial last scale block in N (200 = 128 + 72) and K (320 = 2 x 128 + 64)"),
        Case("deepseek_v3_T4_E12_k8_down_N256_K256", {"tokens": 4, "experts": 12, "topk": 8, "n": 256,
                                                      "k": 256, "block_m": 16, "down": True},
             source=_DS + "top-8 down projection with routed weights; experts and widths scaled down"),
        Case("deepseek_v3_T4_E12_k8_gateup_emulated", {"tokens": 4, "experts": 12, "topk": 8, "n": 256,
                                                       "k": 256, "block_m": 16, "down": False,
                                                       "emulate_fp8": True},
             source=_DS + "top-8 gate/up, scaled down; fp8 decoded to bf16 in the kernel"),
        Case("deepseek_v3_ep8_T2048_gateup_N4096_K7168", {"tokens": 2048, **_DS_EP8, "n": 4096, "k": 7168,
                                                          "block_m": 64, "down": False}, quick=False,
             source=_DS + "gate/up hidden 7168 -> 2 x moe_intermediate 2048; 256 experts over 8 GPUs "
                          "(expert parallel 8): the 32 experts of one GPU, top-8 among them"),
        Case("deepseek_v3_ep8_T2048_down_N7168_K2048", {"tokens": 2048, **_DS_EP8, "n": 7168, "k": 2048,
                                                        "block_m": 64, "down": True}, quick=False,
             source=_DS + "down moe_intermediate 2048 -> hidden 7168 with routed weights; one GPU's 32 experts"),
        Case("kimi_k2_ep16_T16_E24_k8_gateup_N4096_K7168", {"tokens": 16, "experts": 24, "topk": 8, "n": 4096,
                                                            "k": 7168, "block_m": 16, "down": False}, quick=False,
             source="Kimi-K2 config (moonshotai/Kimi-K2-Instruct): 384 experts top-8 over 16 GPUs (expert "
                    "parallel 16: 24 local), decode batch of 16"),
        Case("glm4_5_ep8_T1024_E20_k8_gateup_N3072_K5120", {"tokens": 1024, "experts": 20, "topk": 8,
                                                             "n": 3072, "k": 5120, "block_m": 64, "down": False},
             quick=False, source="GLM-4.5-FP8 config (zai-org/GLM-4.5-FP8): 160 experts top-8 over 8 GPUs (20 "
                                 "local), hidden 5120 -> 2 x moe_intermediate 1536"),
    ),
    dtypes=("bf16", "fp16"),
    make_inputs=_inputs, run=_run, reference=_reference, outputs=("out",),
    tolerance={"bf16": Tolerance(atol=2e-2, rtol=1.6e-2), "fp16": Tolerance(atol=4e-3, rtol=4e-3)},
    description="grouped expert GEMM over BLOCK_M-aligned token runs with fp8 e4m3 activations (1x128 "
                "scales) and experts (128x128 scales), scaled per K tile, fp32 accumulation",
    triton_kernels=(_fused_moe_fp8_block_kernel,),
    upstream="vllm: model_executor/layers/fused_moe/fused_moe.py fused_moe_kernel with use_fp8_w8a8 and "
             "block_shape [128, 128] (fused_experts); on Hopper/Blackwell CUDA vLLM may pick DeepGEMM, "
             "CUTLASS or FlashInfer MoE kernels instead",
))
