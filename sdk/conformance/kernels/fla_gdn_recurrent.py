"""Gated DeltaNet per-token kernels: the gating, the q/k L2 norm, and the fused recurrent update that
vLLM runs for decode and short speculative runs, over a state pool indexed per sequence.

Layout (Qwen3-Next linear attention, varlen as vLLM packs it): q, k [1, T, H, K]; v [1, T, HV, V];
g, beta [1, T, HV]; cu_seqlens [N + 1]; ssm_state_indices [N] picks each sequence's slot in the
state pool [num_slots, HV, K, V], read at the sequence's start and written back after its last token.
Per token: h <- h exp(g); v <- beta (v - h^T k); h <- h + k (x) v; o = h^T (q scale).
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from sdk.conformance.spec import Case, KernelSpec, Tolerance, register

MODELS = ("qwen3_5", "qwen3_next")
SRC = "Qwen3-Next-80B-A3B linear attention: 16 key heads, 32 value heads, head dim 128"


def _np2(n: int) -> int:
    return triton.next_power_of_2(n)


@triton.jit
def gdn_l2norm_kernel(x, y, N, D: tl.constexpr, eps, BR: tl.constexpr, BD: tl.constexpr):
    o_r = tl.program_id(0) * BR + tl.arange(0, BR)
    o_d = tl.arange(0, BD)
    m = (o_r < N)[:, None] & (o_d < D)[None, :]
    off = o_r.to(tl.int64)[:, None] * D + o_d[None, :]
    b_x = tl.load(x + off, mask=m, other=0.).to(tl.float32)
    b_y = b_x * tl.rsqrt(tl.sum(b_x * b_x, 1) + eps)[:, None]
    tl.store(y + off, b_y.to(y.dtype.element_ty), mask=m)


@triton.jit
def gdn_gating_kernel(A_log, a, b, dt_bias, g, beta, N, HV: tl.constexpr, BR: tl.constexpr,
                      BH: tl.constexpr, THRESHOLD: tl.constexpr):
    o_r = tl.program_id(0) * BR + tl.arange(0, BR)
    o_h = tl.arange(0, BH)
    m_h = o_h < HV
    m = (o_r < N)[:, None] & m_h[None, :]
    off = o_r.to(tl.int64)[:, None] * HV + o_h[None, :]
    b_Alog = tl.load(A_log + o_h, mask=m_h, other=0.).to(tl.float32)
    b_bias = tl.load(dt_bias + o_h, mask=m_h, other=0.).to(tl.float32)
    x = tl.load(a + off, mask=m, other=0.).to(tl.float32) + b_bias[None, :]
    sp = tl.where(x <= THRESHOLD, tl.log(1. + tl.exp(tl.minimum(x, THRESHOLD))), x)
    tl.store(g + off, -tl.exp(b_Alog)[None, :] * sp, mask=m)
    b_b = tl.load(b + off, mask=m, other=0.).to(tl.float32)
    tl.store(beta + off, tl.sigmoid(b_b).to(beta.dtype.element_ty), mask=m)



# ----------------------------------------------------------------------------- l2norm and gating specs
def _make_l2(case, dtype, device, gen):
    p = case.params
    x = torch.randn((p["T"], p["H"], p["D"]), generator=gen) * 2.0 + 0.1
    return {"x": x.to(device=device, dtype=dtype), "y": torch.empty(x.shape, dtype=dtype, device=device)}


def _run_l2(x, case):
    D = x["x"].shape[-1]
    N = x["x"].numel() // D
    BD = _np2(D)
    BR = max(1, min(64, 8192 // BD))
    gdn_l2norm_kernel[(triton.cdiv(N, BR),)](x["x"], x["y"], N, D=D, eps=1e-6, BR=BR, BD=BD, num_warps=4)


def _ref_l2(x, case):
    xd = x["x"].double()
    return {"y": xd / torch.sqrt((xd * xd).sum(-1, keepdim=True) + 1e-6)}


register(KernelSpec(
    name="gdn_l2norm", group="fla_gdn", models=MODELS,
    cases=(Case("t37_h3_d96", dict(T=37, H=3, D=96), True, "odd token count and head dim (masks)"),
           Case("t64_h4_d128", dict(T=64, H=4, D=128), True, SRC + "; scaled down"),
           Case("qwen3next_t8192_q", dict(T=8192, H=16, D=128), False, SRC + "; q/k before the chunk")),
    dtypes=("bf16", "fp32"), make_inputs=_make_l2, run=_run_l2, reference=_ref_l2, outputs=("y",),
    tolerance={"fp32": Tolerance(atol=1e-5, rtol=1.3e-5), "bf16": Tolerance(atol=1e-2, rtol=1e-2)},
    description="L2 normalisation of q/k rows over the head dim (eps 1e-6)",
    triton_kernels=(gdn_l2norm_kernel,),
    upstream="vllm: third_party/flash_linear_attention/ops/l2norm.py l2norm_fwd (l2norm_fwd_kernel; 0.11: "
             "model_executor/layers/fla/ops/l2norm.py); vLLM 0.33's prefill fuses it with the gating into "
             "fused_gdn_prefill_post_conv.py _fused_post_conv_kernel"))


def _make_gating(case, dtype, device, gen):
    N, HV = case.params["N"], case.params["HV"]
    A_log = torch.log(torch.empty(HV).uniform_(1, 16, generator=gen))
    dt = torch.exp(torch.empty(HV).uniform_(math.log(1e-3), math.log(0.1), generator=gen))
    a = torch.randn((N, HV), generator=gen) * 2.0
    a[0, 0] = 30.0  # one pre-activation above the softplus threshold
    d = dict(A_log=A_log, dt_bias=torch.log(torch.expm1(dt)), a=a.to(dtype),
             b=torch.randn((N, HV), generator=gen).to(dtype))
    d = {n: t.to(device) for n, t in d.items()}
    d["g"] = torch.empty((N, HV), dtype=torch.float32, device=device)
    d["beta"] = torch.empty((N, HV), dtype=dtype, device=device)
    return d


def _run_gating(x, case):
    N, HV = x["a"].shape
    BH = _np2(HV)
    BR = max(1, min(128, 4096 // BH))
    gdn_gating_kernel[(triton.cdiv(N, BR),)](x["A_log"], x["a"], x["b"], x["dt_bias"], x["g"], x["beta"],
                                             N, HV=HV, BR=BR, BH=BH, THRESHOLD=20.0, num_warps=4)


def _ref_gating(x, case):
    sp = torch.nn.functional.softplus(x["a"].double() + x["dt_bias"].double(), beta=1.0, threshold=20.0)
    return {"g": -torch.exp(x["A_log"].double()) * sp, "beta": torch.sigmoid(x["b"].double())}


register(KernelSpec(
    name="gdn_gating", group="fla_gdn", models=MODELS,
    cases=(Case("n37_hv6", dict(N=37, HV=6), True, "odd token and head counts (masks)"),
           Case("n100_hv32", dict(N=100, HV=32), True, SRC),
           Case("qwen3next_n8192", dict(N=8192, HV=32), False, SRC + "; prefill tokens")),
    dtypes=("bf16", "fp32"), make_inputs=_make_gating, run=_run_gating, reference=_ref_gating,
    outputs=("g", "beta"),
    tolerance={"fp32": Tolerance(atol=1e-5, rtol=1e-5), "bf16": Tolerance(atol=1e-2, rtol=1e-2)},
    output_tolerance={"g": Tolerance(atol=1e-5, rtol=1e-5)},
    description="GDN gates: g = -exp(A_log) softplus(a + dt_bias) (threshold 20), beta = sigmoid(b)",
    triton_kernels=(gdn_gating_kernel,),
    upstream="vllm 0.11: model_executor/models/qwen3_next.py fused_gdn_gating (fused_gdn_gating_kernel); "
             "0.33 fuses the gating into third_party/flash_linear_attention/ops/fused_gdn_prefill_post_conv.py "
             "_fused_post_conv_kernel (prefill) and fused_sigmoid_gating.py "
             "fused_sigmoid_gating_delta_rule_update_kernel (decode)"))


# -------------------------------------------------------------------------------- fused recurrent
@triton.jit
def gdn_fused_recurrent_kernel(q, k, v, g, beta, o, state_pool, cu_seqlens, state_idx, scale,
                               H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr,
                               BK: tl.constexpr, BV: tl.constexpr, USE_QK_L2NORM: tl.constexpr):
    i_v, i_nh = tl.program_id(0), tl.program_id(1)
    i_n, i_hv = i_nh // HV, i_nh % HV
    i_h = i_hv // (HV // H)
    bos = tl.load(cu_seqlens + i_n).to(tl.int64)
    eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)
    slot = tl.load(state_idx + i_n).to(tl.int64)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k, m_v = o_k < K, o_v < V
    m_h = m_k[:, None] & m_v[None, :]
    p_s = state_pool + ((slot * HV + i_hv) * K + o_k[:, None]) * V + o_v[None, :]
    b_h = tl.load(p_s, mask=m_h, other=0.).to(tl.float32)
    for t in range(bos, eos):
        b_q = tl.load(q + (t * H + i_h) * K + o_k, mask=m_k, other=0.).to(tl.float32)
        b_k = tl.load(k + (t * H + i_h) * K + o_k, mask=m_k, other=0.).to(tl.float32)
        b_v = tl.load(v + (t * HV + i_hv) * V + o_v, mask=m_v, other=0.).to(tl.float32)
        b_g = tl.load(g + t * HV + i_hv).to(tl.float32)
        b_beta = tl.load(beta + t * HV + i_hv).to(tl.float32)
        if USE_QK_L2NORM:
            b_q = b_q * tl.rsqrt(tl.sum(b_q * b_q) + 1e-6)
            b_k = b_k * tl.rsqrt(tl.sum(b_k * b_k) + 1e-6)
        b_q = b_q * scale
        b_h = b_h * tl.exp(b_g)
        b_v = (b_v - tl.sum(b_h * b_k[:, None], 0)) * b_beta
        b_h = b_h + b_k[:, None] * b_v[None, :]
        b_o = tl.sum(b_h * b_q[:, None], 0)
        tl.store(o + (t * HV + i_hv) * V + o_v, b_o.to(o.dtype.element_ty), mask=m_v)
    tl.store(p_s, b_h.to(state_pool.dtype.element_ty), mask=m_h)


def _make_recurrent(case, dtype, device, gen):
    p = case.params
    lens, H, HV, K, V = p["lens"], p["H"], p["HV"], p["K"], p["V"]
    N, T = len(lens), sum(lens)
    q, k = torch.randn((1, T, H, K), generator=gen), torch.randn((1, T, H, K), generator=gen)
    if not p["l2norm"]:  # the caller normalised them already
        q, k = q / q.norm(dim=-1, keepdim=True), k / k.norm(dim=-1, keepdim=True)
    A_log = torch.log(torch.empty(HV).uniform_(1, 16, generator=gen))
    dt_bias = torch.log(torch.expm1(torch.exp(torch.empty(HV).uniform_(math.log(1e-3), math.log(0.1),
                                                                        generator=gen))))
    a = torch.randn((1, T, HV), generator=gen)
    g = -torch.exp(A_log) * torch.nn.functional.softplus(a + dt_bias)
    slots = torch.randperm(N, generator=gen) * 2          # even slots used, odd slots untouched
    pool = 0.5 * torch.randn((2 * N, HV, K, V), generator=gen)
    d = dict(q=q.to(dtype), k=k.to(dtype), v=torch.randn((1, T, HV, V), generator=gen).to(dtype), g=g,
             beta=torch.sigmoid(torch.randn((1, T, HV), generator=gen)).to(dtype),
             cu_seqlens=torch.tensor([0] + lens, dtype=torch.int32).cumsum(0).to(torch.int32),
             ssm_state_indices=slots.to(torch.int32), state_pool=pool.to(dtype))
    d = {n: t.to(device) for n, t in d.items()}
    d["state_untouched"] = d["state_pool"][1::2]           # a view: slots no sequence owns
    d["o"] = torch.empty((1, T, HV, V), dtype=dtype, device=device)
    d["scale"] = K ** -0.5
    return d


def _run_recurrent(x, case):
    _, _, H, K = x["k"].shape
    HV, V = x["v"].shape[2], x["v"].shape[3]
    N = x["ssm_state_indices"].shape[0]
    BV = min(64, _np2(V))
    gdn_fused_recurrent_kernel[(triton.cdiv(V, BV), N * HV)](
        x["q"], x["k"], x["v"], x["g"], x["beta"], x["o"], x["state_pool"], x["cu_seqlens"],
        x["ssm_state_indices"], x["scale"], H=H, HV=HV, K=K, V=V, BK=_np2(K), BV=BV,
        USE_QK_L2NORM=case.params["l2norm"], num_warps=4)


def _ref_recurrent(x, case):
    HV = x["v"].shape[2]
    q, k = (x[n][0].double().repeat_interleave(HV // x[n].shape[2], dim=1) for n in ("q", "k"))
    if case.params["l2norm"]:
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    v, g, beta = x["v"][0].double(), x["g"][0].double(), x["beta"][0].double()
    pool = x["state_pool"].double().clone()
    o = torch.zeros_like(v)
    cu = x["cu_seqlens"].tolist()
    for n, slot in enumerate(x["ssm_state_indices"].tolist()):
        S = pool[slot].clone()                                          # [HV, K, V]
        for t in range(cu[n], cu[n + 1]):
            S = S * torch.exp(g[t])[:, None, None]
            vt = beta[t][:, None] * (v[t] - torch.einsum("hkv,hk->hv", S, k[t]))
            S = S + k[t][:, :, None] * vt[:, None, :]
            o[t] = torch.einsum("hkv,hk->hv", S, q[t] * x["scale"])
        pool[slot] = S
    return {"o": o[None], "state_pool": pool, "state_untouched": x["state_untouched"]}


register(KernelSpec(
    name="gdn_fused_recurrent", group="fla_gdn", models=MODELS,
    cases=(Case("decode_n6_h2x4_d32", dict(lens=[1] * 6, H=2, HV=4, K=32, V=32, l2norm=True), True,
                SRC + "; scaled down, one token per sequence"),
           Case("spec_lens_1_5_3_k48_v40", dict(lens=[1, 5, 3], H=1, HV=2, K=48, V=40, l2norm=False),
                True, SRC + "; scaled down, multi-token runs, head dims that need masks"),
           Case("qwen3next_decode_n64", dict(lens=[1] * 64, H=16, HV=32, K=128, V=128, l2norm=True),
                False, SRC + "; batch 64 decode"),
           Case("qwen3next_spec_n16x4", dict(lens=[4] * 16, H=16, HV=32, K=128, V=128, l2norm=True),
                False, SRC + "; 16 sequences x 4 speculative tokens")),
    dtypes=("bf16", "fp32"), make_inputs=_make_recurrent, run=_run_recurrent, reference=_ref_recurrent,
    outputs=("o", "state_pool", "state_untouched"), inplace=("state_pool", "state_untouched"),
    tolerance={"fp32": Tolerance(rmse=2e-5), "bf16": Tolerance(rmse=8e-3)},
    output_tolerance={"state_untouched": Tolerance(exact=True)},
    description="fused recurrent gated delta rule over a slot-indexed state pool (decode / spec decode)",
    triton_kernels=(gdn_fused_recurrent_kernel,),
    upstream="vllm: third_party/flash_linear_attention/ops/fused_recurrent.py fused_recurrent_gated_delta_rule "
             "(fused_recurrent_gated_delta_rule_fwd_kernel; 0.11: model_executor/layers/fla/ops/fused_recurrent.py)"))
