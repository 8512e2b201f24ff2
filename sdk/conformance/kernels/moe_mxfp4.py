"""MoE expert GEMMs with MXFP4 weights and bf16 activations, as gpt-oss is served on Hopper.

gpt-oss-20b / 120b: 32 / 128 experts, top-4, hidden 2880, expert intermediate 2880. Expert
weights are MXFP4: e2m1 values packed two to a byte (the first in the low nibble), one e8m0
scale (2^(s - 127)) per 32 values along K, stored as the checkpoint does ([E, N, K/2] values,
[E, N, K/32] scales); every expert projection has an fp32 bias. The kernel runs over the suite's
fused-MoE token runs (`sorted_token_ids` padded to BLOCK_M, `expert_ids` per block, see moe.py) and
multiplies either through `tl.dot_scaled` (bf16 x e2m1 with e8m0 scales: native on targets with
microscaled MMA, emulated by Triton elsewhere) or, as matmul_ogs does on Hopper, by decoding the
weights to bf16 in the kernel (integer ops) before a bf16 dot. fp16 activations (not a serving
dtype: vLLM's path asserts bf16) always decode in the kernel: Triton 3.6 emulates fp16 x e2m1
dot_scaled with fp8 conversions that sm_80 lacks.

gate/up (fused activation): the projection's 2I output rows interleave gate (even rows) and
linear (odd rows); each program computes both halves of BLOCK_N outputs and applies gpt-oss's
clamped SwiGLU: g = min(gate, limit), l = clamp(linear, -limit, limit),
out = g * sigmoid(alpha * g) * (l + 1), alpha 1.702, limit 7.0.
down: out = (act @ W^T + bias) * routing weight, one row per (token, slot) pair.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from sdk.conformance.kernels.moe import _align_ref, _routing
from sdk.conformance.refmath import compute_dtype
from sdk.conformance.spec import Case, KernelSpec, Tolerance, register

MX_BLOCK = 32                 # values per e8m0 scale
SWIGLU_ALPHA, SWIGLU_LIMIT = 1.702, 7.0
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
                    dtype=torch.float64)


@triton.jit
def _e2m1_e8m0_to_f32(nib, scale):
    """fp32 value of e2m1 codes (int32, 0..15) times 2^(scale - 127) (e8m0 as int32), integer ops only."""
    sign = (nib & 8) << 28
    e = (nib >> 1) & 3
    m = nib & 1
    bits = tl.where(e == 0, sign | (m * (126 << 23)), sign | ((e + 126) << 23) | (m << 22))
    sbits = tl.where(scale == 0, 0x400000, scale << 23)  # 2^-127 is an fp32 subnormal
    return bits.to(tl.float32, bitcast=True) * sbits.to(tl.float32, bitcast=True)


@triton.jit
def _mx_dot(x_ptrs, xmask, w_ptr, s_ptr, row, omask, k0, K, stride_wn, stride_sn, acc,
            X_FORMAT: tl.constexpr, UPCAST: tl.constexpr, BLOCK_K: tl.constexpr):
    """acc + X[:, k0:k0 + BLOCK_K] @ W[row, k0:k0 + BLOCK_K]^T for MXFP4 rows `row` (w_ptr / s_ptr at
    the expert); x_ptrs point at X[:, k0] (unit stride along K), xmask masks its rows."""
    kp = k0 // 2 + tl.arange(0, BLOCK_K // 2)      # packed bytes along K
    ks = k0 // 32 + tl.arange(0, BLOCK_K // 32)    # scales along K
    w = tl.load(w_ptr + row[None, :] * stride_wn + kp[:, None],
                mask=(kp[:, None] < K // 2) & omask[None, :], other=0)
    if UPCAST:
        # decode in the kernel: byte j holds K positions 2j (low nibble) and 2j + 1 (high nibble), so
        # the even and odd K columns of x meet the low and high nibbles in two bf16 dots
        sc = tl.load(s_ptr + row[None, :] * stride_sn + (kp // 16)[:, None],
                     mask=(kp[:, None] < K // 2) & omask[None, :], other=127).to(tl.int32)
        b = w.to(tl.int32)
        j = tl.arange(0, BLOCK_K // 2)
        xm = xmask[:, None] & (k0 + 2 * j[None, :] < K)
        x_even = tl.load(x_ptrs + 2 * j[None, :], mask=xm, other=0.0)
        x_odd = tl.load(x_ptrs + 2 * j[None, :] + 1, mask=xm, other=0.0)
        acc = tl.dot(x_even, _e2m1_e8m0_to_f32(b & 0xF, sc).to(x_even.dtype), acc)
        acc = tl.dot(x_odd, _e2m1_e8m0_to_f32(b >> 4, sc).to(x_odd.dtype), acc)
    else:
        k = tl.arange(0, BLOCK_K)
        x = tl.load(x_ptrs + k[None, :], mask=xmask[:, None] & (k0 + k[None, :] < K), other=0.0)
        sc = tl.load(s_ptr + row[:, None] * stride_sn + ks[None, :],
                     mask=omask[:, None] & (ks[None, :] < K // 32), other=127)
        acc = tl.dot_scaled(x, None, X_FORMAT, w, sc, "e2m1", acc=acc)
    return acc


@triton.jit
def _mxfp4_moe_kernel(x_ptr, w_ptr, ws_ptr, bias_ptr, out_ptr, topk_w_ptr, sorted_ptr, expert_ids_ptr,
                      total_ptr, N_OUT, K, num_valid, stride_xm, stride_we, stride_wn, stride_se, stride_sn,
                      stride_be, stride_om, alpha, limit,
                      TOP_K: tl.constexpr, SWIGLU: tl.constexpr, MUL_ROUTED_WEIGHT: tl.constexpr,
                      X_FORMAT: tl.constexpr, UPCAST: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    n_pid_n = tl.cdiv(N_OUT, BLOCK_N)
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
    offs_o = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    omask = offs_o < N_OUT
    if SWIGLU:
        w_row = 2 * offs_o.to(tl.int64)        # gate rows; the linear row follows each
    else:
        w_row = offs_o.to(tl.int64)
    x_ptrs = x_ptr + rows * stride_xm
    w_base = w_ptr + expert * stride_we
    s_base = ws_ptr + expert * stride_se
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_lin = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        acc = _mx_dot(x_ptrs[:, None] + k0, pmask, w_base, s_base, w_row, omask, k0, K, stride_wn, stride_sn,
                      acc, X_FORMAT, UPCAST, BLOCK_K)
        if SWIGLU:
            acc_lin = _mx_dot(x_ptrs[:, None] + k0, pmask, w_base, s_base, w_row + 1, omask, k0, K, stride_wn,
                              stride_sn, acc_lin, X_FORMAT, UPCAST, BLOCK_K)
    b_ptrs = bias_ptr + expert * stride_be + w_row
    acc += tl.load(b_ptrs, mask=omask, other=0.0)[None, :]
    if SWIGLU:
        lin = acc_lin + tl.load(b_ptrs + 1, mask=omask, other=0.0)[None, :]
        gate = tl.minimum(acc, limit)
        lin = tl.minimum(tl.maximum(lin, -limit), limit)
        acc = gate * tl.sigmoid(alpha * gate) * (lin + 1.0)
    if MUL_ROUTED_WEIGHT:
        acc = acc * tl.load(topk_w_ptr + pairs, mask=pmask, other=0.0).to(tl.float32)[:, None]
    out_ptrs = out_ptr + pairs.to(tl.int64)[:, None] * stride_om + offs_o[None, :]
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=pmask[:, None] & omask[None, :])


def mxfp4_moe_gemm(x, w, w_scale, bias, out, topk_weights, topk_ids, sorted_token_ids, expert_ids,
                   num_tokens_post_padded, block_m: int, swiglu: bool, upcast: bool | None = None,
                   **config) -> None:
    """gate/up (swiglu=True): x [T, K] -> out [T * k, N/2]; down: x [T * k, K] -> out [T, k, N], weighted.
    w: uint8 [E, N, K/2] (e2m1 pairs), w_scale: uint8 [E, N, K/32] (e8m0), bias: fp32 [E, N].
    upcast: decode the weights in the kernel and multiply in x's dtype instead of tl.dot_scaled
    (default: for fp16 activations, which the serving path does not use)."""
    E, N, K2 = w.shape
    K = 2 * K2
    assert K % MX_BLOCK == 0 and x.shape[1] == K and x.stride(1) == 1
    n_out = N // 2 if swiglu else N
    # BLOCK_K 64 (two scale groups a step) keeps both paths free of register spills on sm_80 - sm_90
    cfg = {**dict(BLOCK_N=64, BLOCK_K=64, GROUP_M=8, num_warps=8 if block_m >= 64 else 4, num_stages=2),
           **config}
    grid = (expert_ids.numel() * triton.cdiv(n_out, cfg["BLOCK_N"]),)
    _mxfp4_moe_kernel[grid](
        x, w, w_scale, bias, out, topk_weights, sorted_token_ids, expert_ids, num_tokens_post_padded,
        n_out, K, topk_ids.numel(), x.stride(0), w.stride(0), w.stride(1), w_scale.stride(0),
        w_scale.stride(1), bias.stride(0), n_out, SWIGLU_ALPHA, SWIGLU_LIMIT,
        TOP_K=topk_ids.shape[1] if swiglu else 1, SWIGLU=swiglu, MUL_ROUTED_WEIGHT=not swiglu,
        X_FORMAT="bf16" if x.dtype == torch.bfloat16 else "fp16",
        UPCAST=(x.dtype != torch.bfloat16) if upcast is None else upcast, BLOCK_M=block_m, **cfg)


def mxfp4_dequant(w: torch.Tensor, w_scale: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Weights [..., N, K] in `dtype` (fp64 unless asked; exact in either) from packed e2m1
    [..., N, K/2] (low nibble first) and e8m0 scales [..., N, K/32], on w's device."""
    b = w.long()
    table = E2M1.to(device=w.device, dtype=dtype)
    vals = torch.stack([table[b & 0xF], table[b >> 4]], dim=-1).flatten(-2)
    scale = torch.pow(2.0, w_scale.to(dtype) - 127.0).repeat_interleave(MX_BLOCK, dim=-1)
    return vals * scale


def _inputs(case, dtype, device, gen):
    p = case.params
    T, E, k, N, K, bm = p["tokens"], p["experts"], p["topk"], p["n"], p["k"], p["block_m"]
    swiglu = not p["down"]
    ids, weights = _routing(T, E, k, gen)
    sorted_ids, expert_ids, total = _align_ref(ids, E, bm)
    x = torch.randn((T if swiglu else T * k, K), generator=gen)
    # e8m0 exponents around the value that gives pre-activations a spread of ~4 (gate/up: past the
    # +-7 clamp now and then) or ~1 (down); e2m1 values have an rms of ~2.9
    target = 4.0 if swiglu else 1.0
    base = round(math.log2(target / (math.sqrt(K) * 2.93))) + 127
    w_scale = torch.randint(base - 2, base + 2, (E, N, K // MX_BLOCK), generator=gen, dtype=torch.uint8)
    w = torch.randint(0, 256, (E, N, K // 2), generator=gen, dtype=torch.uint8)
    bias = torch.randn((E, N), generator=gen) * 0.5
    out = torch.empty((T * k, N // 2) if swiglu else (T, k, N), dtype=dtype, device=device)
    return {"x": x.to(dtype).to(device), "w": w.to(device), "w_scale": w_scale.to(device),
            "bias": bias.float().to(device), "topk_ids": ids.to(device), "topk_weights": weights.to(device),
            "sorted_token_ids": sorted_ids.to(device), "expert_ids": expert_ids.to(device),
            "num_tokens_post_padded": total.to(device), "out": out}


def _run(inp, case, **config):
    mxfp4_moe_gemm(inp["x"], inp["w"], inp["w_scale"], inp["bias"], inp["out"], inp["topk_weights"],
                   inp["topk_ids"], inp["sorted_token_ids"], inp["expert_ids"], inp["num_tokens_post_padded"],
                   case.params["block_m"], swiglu=not case.params["down"], upcast=case.params.get("upcast"),
                   **config)


def _reference(inp, case):
    T, k = inp["topk_ids"].shape
    dt = compute_dtype(inp["out"])  # fp32: the outputs are 16-bit (refmath)
    bias = inp["bias"].to(dt)
    x = inp["x"].to(dt)
    flat = inp["topk_ids"].flatten().long()
    rows = x if case.params["down"] else x.repeat_interleave(k, dim=0)
    y = torch.empty((T * k, inp["w"].shape[1]), dtype=dt, device=x.device)
    small = inp["w"].numel() <= 1 << 23  # dequantise all experts at once, or one at a time
    w_all = mxfp4_dequant(inp["w"], inp["w_scale"], dt) if small else None
    for e in flat.unique().tolist():
        sel = flat == e
        w_e = w_all[e] if small else mxfp4_dequant(inp["w"][e], inp["w_scale"][e], dt)
        y[sel] = rows[sel] @ w_e.T + bias[e]
    if case.params["down"]:
        return {"out": (y * inp["topk_weights"].to(dt).flatten()[:, None]).view(T, k, -1)}
    gate = y[:, 0::2].clamp(max=SWIGLU_LIMIT)
    lin = y[:, 1::2].clamp(-SWIGLU_LIMIT, SWIGLU_LIMIT)
    return {"out": gate * torch.sigmoid(SWIGLU_ALPHA * gate) * (lin + 1.0)}


_OSS = "gpt-oss config (openai/gpt-oss-20b / -120b): hidden 2880, expert intermediate 2880, top-4, MXFP4 experts: "
register(KernelSpec(
    name="moe_mxfp4_gemm", group="moe", models=("gpt_oss",),
    cases=(
        Case("odd_T7_E8_k4_gateup_swiglu_N144_K320", {"tokens": 7, "experts": 8, "topk": 4, "n": 144, "k": 320,
                                                      "block_m": 16, "down": False},
             source="odd sizes: K = 10 scale groups (a partial K tile), 72 outputs (a partial N tile)"),
        Case("gpt_oss_T5_E8_k4_down_N200_K288_upcast", {"tokens": 5, "experts": 8, "topk": 4, "n": 200,
                                                        "k": 288, "block_m": 16, "down": True, "upcast": True},
             source=_OSS + "top-4 down projection with routed weights; experts and widths scaled down "
                           "(K = 2880 / 10: 9 scale groups, a partial K tile); weights decoded in the kernel "
                           "(matmul_ogs's Hopper path)"),
        Case("gpt_oss_20b_T2048_gateup_N5760_K2880", {"tokens": 2048, "experts": 32, "topk": 4, "n": 5760,
                                                      "k": 2880, "block_m": 64, "down": False}, quick=False,
             source=_OSS + "gpt-oss-20b gate/up 2880 -> 2 x 2880 with the clamped SwiGLU"),
        Case("gpt_oss_20b_T2048_down_N2880_K2880", {"tokens": 2048, "experts": 32, "topk": 4, "n": 2880,
                                                    "k": 2880, "block_m": 64, "down": True}, quick=False,
             source=_OSS + "gpt-oss-20b down 2880 -> 2880, routed weights"),
        Case("gpt_oss_120b_T16_E128_gateup_N5760_K2880", {"tokens": 16, "experts": 128, "topk": 4, "n": 5760,
                                                          "k": 2880, "block_m": 16, "down": False}, quick=False,
             source=_OSS + "gpt-oss-120b's 128 experts, decode batch of 16"),
    ),
    dtypes=("bf16", "fp16"),
    make_inputs=_inputs, run=_run, reference=_reference, outputs=("out",),
    tolerance={"bf16": Tolerance(atol=3e-2, rtol=1.6e-2), "fp16": Tolerance(atol=4e-3, rtol=4e-3)},
    description="MXFP4 (e2m1 + e8m0 per 32) expert weights x bf16 activations over fused-MoE token runs "
                "(tl.dot_scaled, or weights decoded in the kernel), expert bias; gate/up fuses gpt-oss's "
                "clamped SwiGLU (alpha 1.702, limit 7), down applies routing weights",
    triton_kernels=(_mxfp4_moe_kernel,),
    upstream="OpenAI triton_kernels matmul_ogs (vendored as vllm/third_party/triton_kernels) as vLLM calls "
             "it for gpt-oss MXFP4 experts on Hopper (fused_moe/experts/gpt_oss_triton_kernels_moe.py "
             "triton_kernel_fused_experts: gate/up with the fused swiglu, down with gammas)",
))
