"""MLA prefill attention (DeepSeek-V3, Kimi-K2): the new tokens of a prefill step attend, per head,
with up-projected keys and values instead of the latent cache the decode reads.

Per head: q and k are 192 wide (qk_nope 128 from the up-projection, then qk_rope 64: q's own rotated
dims, k's the token's single k_pe shared by every head); v is 128 wide (v_head_dim) and a view of
the kv_b projection output [T, H, 128 + 128] (head stride 256). softmax_scale = 192^-0.5 x YaRN
mscale^2. Sequences are packed along T and delimited by cu_seqlens.

The step, as the serving stack's MLA prefill runs it:
  1. cached context (chunked prefill): the context tokens of every request, gathered from the latent
     cache and up-projected a chunk at a time (chunk c holds context positions [c x C, (c + 1) x C) of
     each request), each chunk attended without a causal mask; each chunk yields an output and its
     log-sum-exp, merged into the running context result by merge_attn_states;
  2. the new tokens attend to each other, causally (query i sees keys j <= i of its own sequence);
  3. the two merge by their log-sum-exps (merge_attn_states), or the new-token output is the result
     where no request has context.
One kernel covers 1 and 2: a program takes BLOCK_M queries of one sequence and one head, online
softmax over key tiles (two dots per tile, nope and rope parts, so 192 needs no padding to 256),
writing the normalised output and the lse (natural log, [H, T]); an empty key set writes zeros and
lse -inf, which the merge treats as "no contribution". Causal masking is bottom-right aligned (query
i of a q_len-token block sits at key position k_len - q_len + i), as FlashAttention's varlen does.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sdk.conformance.kernels.fit import launch_first_fit
from sdk.conformance.kernels.mla import _softmax_scale
from sdk.conformance.kernels.paged_attention import merge_attn_states_kernel
from sdk.conformance.refmath import attention, compute_dtype
from sdk.conformance.spec import Case, KernelSpec, Tolerance, register

LOG2E = 1.4426950408889634
_LN2 = tl.constexpr(0.6931471805599453)  # lse in natural log: log2-units times ln 2
NOPE, ROPE, V_DIM = 128, 64, 128


def _prec(x: torch.Tensor) -> str:
    return "ieee" if x.dtype == torch.float32 else "tf32"


@triton.jit
def mla_prefill_attn_kernel(q, k, v, o, lse, cu_q, cu_k, qk_scale, num_tokens,
                            stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
                            DN: tl.constexpr, DR: tl.constexpr, DV: tl.constexpr, CAUSAL: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr):
    i_m, i_h, i_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    q_start = tl.load(cu_q + i_b)
    q_len = tl.load(cu_q + i_b + 1) - q_start
    if i_m * BLOCK_M >= q_len:
        return
    k_start = tl.load(cu_k + i_b)
    k_len = tl.load(cu_k + i_b + 1) - k_start
    offs_m = i_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_ok = offs_m < q_len
    offs_dn = tl.arange(0, DN)
    offs_dr = DN + tl.arange(0, DR)
    offs_dv = tl.arange(0, DV)
    q_rows = q + (q_start + offs_m).to(tl.int64)[:, None] * stride_qt + i_h * stride_qh
    b_qn = tl.load(q_rows + offs_dn[None, :], mask=m_ok[:, None], other=0.)
    b_qr = tl.load(q_rows + offs_dr[None, :], mask=m_ok[:, None], other=0.)
    shift = k_len - q_len                 # causal: query i sits at key position shift + i
    end = k_len
    if CAUSAL:
        end = tl.minimum(k_len, shift + (i_m + 1) * BLOCK_M)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, DV], dtype=tl.float32)
    for n0 in range(0, end, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        n_ok = offs_n < end
        k_cols = k + (k_start + offs_n).to(tl.int64)[None, :] * stride_kt + i_h * stride_kh
        b_knt = tl.load(k_cols + offs_dn[:, None], mask=n_ok[None, :], other=0.)        # [DN, N]
        b_krt = tl.load(k_cols + offs_dr[:, None], mask=n_ok[None, :], other=0.)        # [DR, N]
        s = tl.dot(b_qn, b_knt, input_precision=PREC)
        s = tl.dot(b_qr, b_krt, acc=s, input_precision=PREC) * qk_scale               # log2 units
        keep = n_ok[None, :]
        if CAUSAL:
            keep = keep & (offs_n[None, :] <= shift + offs_m[:, None])
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new > float("-inf"), m_new, 0.)
        p = tl.exp2(s - m_use[:, None])
        alpha = tl.exp2(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, 1)
        b_v = tl.load(v + (k_start + offs_n).to(tl.int64)[:, None] * stride_vt + i_h * stride_vh + offs_dv[None, :],
                      mask=n_ok[:, None], other=0.)
        acc = acc * alpha[:, None] + tl.dot(p.to(b_v.dtype), b_v, input_precision=PREC)
        m_i = m_new
    has = l_i > 0
    out = acc / tl.where(has, l_i, 1.)[:, None]
    tok = (q_start + offs_m).to(tl.int64)
    tl.store(o + tok[:, None] * stride_ot + i_h * stride_oh + offs_dv[None, :], out.to(o.dtype.element_ty),
             mask=m_ok[:, None])
    tl.store(lse + i_h * num_tokens + tok, tl.where(has, (m_i + tl.log2(tl.where(has, l_i, 1.))) * _LN2,
                                                    float("-inf")), mask=m_ok)


def _configs(dtype: torch.dtype) -> list[dict]:
    """Tiles in order of preference, each free of register spills where it fits (checked with
    nvidia_ref's compile-only facts on sm_80 / sm_89 / sm_90 / sm_120): 16-bit inputs take 128 x 64
    with three stages where shared memory holds 128 KiB (sm_80, sm_90), else 64 x 64; fp32 dots run
    on FMA units, whose operands live in registers, so fp32 takes 16 x 16."""
    if dtype == torch.float32:
        return [dict(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=2),
                dict(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=1)]
    return [dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3),
            dict(BLOCK_M=64, BLOCK_N=64, num_warps=8, num_stages=2),
            dict(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=1),
            dict(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=1)]


def mla_prefill_attention(q, k, v, cu_q, cu_k, max_q_len: int, scale: float, o, lse, causal: bool) -> None:
    """o [T, H, 128] and lse [H, T] of q [T, H, 192] over k [Tk, H, 192], v [Tk, H, 128] (any strides
    with unit stride over the head dim), per sequence b: queries cu_q[b]:cu_q[b+1], keys cu_k[b]:cu_k[b+1]."""
    T, H, _ = q.shape
    B = cu_q.shape[0] - 1
    launch_first_fit(
        mla_prefill_attn_kernel, lambda c: (triton.cdiv(max_q_len, c["BLOCK_M"]), H, B),
        (q, k, v, o, lse, cu_q, cu_k, scale * LOG2E, T, q.stride(0), q.stride(1), k.stride(0), k.stride(1),
         v.stride(0), v.stride(1), o.stride(0), o.stride(1)),
        _configs(q.dtype), DN=NOPE, DR=q.shape[2] - NOPE, DV=v.shape[2], CAUSAL=causal, PREC=_prec(q))


def merge_states(out, out_lse, prefix, prefix_lse, suffix, suffix_lse) -> None:
    """out = the attention over both key sets from each one's output and lse ([H, T], natural log);
    out_lse, when given, their combined lse. out, prefix and suffix share their strides."""
    T, H, D = out.shape
    merge_attn_states_kernel[(T, H)](out, out_lse if out_lse is not None else prefix_lse, prefix, prefix_lse,
                                     suffix, suffix_lse, T, out.stride(0), out.stride(1), D=D,
                                     BD=triton.next_power_of_2(D), OUTPUT_LSE=out_lse is not None, num_warps=1)


def mla_prefill(x: dict) -> None:
    """The prefill step: attention over each context chunk (if any) merged into one context result,
    causal attention of the new tokens, and the merge of the two into x["o"]."""
    q, o, cu = x["q"], x["o"], x["cu_seqlens"]
    T, H, _ = q.shape
    dev, dt = q.device, q.dtype
    chunks = x["context_chunks"]
    new_lse = torch.empty((H, T), dtype=torch.float32, device=dev)
    if not chunks:  # no request has context: the new tokens' attention is the result
        mla_prefill_attention(q, x["k"], x["v"], cu, cu, x["max_q_len"], x["scale"], o, new_lse, causal=True)
        return
    ctx_o = ctx_lse = None
    for ch in chunks:
        c_o = torch.empty((T, H, V_DIM), dtype=dt, device=dev)
        c_lse = torch.empty((H, T), dtype=torch.float32, device=dev)
        mla_prefill_attention(q, ch["k"], ch["v"], cu, ch["cu_seqlens"], x["max_q_len"], x["scale"], c_o, c_lse,
                              causal=False)
        if ctx_o is not None:
            merged, merged_lse = torch.empty_like(c_o), torch.empty_like(c_lse)
            merge_states(merged, merged_lse, ctx_o, ctx_lse, c_o, c_lse)
            c_o, c_lse = merged, merged_lse
        ctx_o, ctx_lse = c_o, c_lse
    new_o = torch.empty((T, H, V_DIM), dtype=dt, device=dev)
    mla_prefill_attention(q, x["k"], x["v"], cu, cu, x["max_q_len"], x["scale"], new_o, new_lse, causal=True)
    merge_states(o, None, ctx_o, ctx_lse, new_o, new_lse)


# ------------------------------------------------------------------------------------------- spec
def _keys_values(n: int, H: int, gen, dtype, device):
    """k [n, H, 192] = (k_nope | k_pe broadcast over heads), as the serving stack concatenates them,
    and v [n, H, 128], a view of the kv_b projection output [n, H, 128 + 128]."""
    kv_nope = torch.randn((n, H, NOPE + V_DIM), generator=gen).to(dtype)
    k_pe = torch.randn((n, 1, ROPE), generator=gen).to(dtype)
    k = torch.cat([kv_nope[..., :NOPE], k_pe.expand(n, H, ROPE)], dim=-1)
    kv_nope = kv_nope.to(device)
    return k.to(device), kv_nope[..., NOPE:]


def _cu(lens) -> torch.Tensor:
    return torch.tensor([0] + list(lens), dtype=torch.int32).cumsum(0).to(torch.int32)


def _make_inputs(case, dtype, device, gen):
    p = case.params
    q_lens, H = p["q_lens"], p["heads"]
    ctx_lens, C = p.get("ctx_lens", [0] * len(q_lens)), p.get("chunk", 1)
    T = sum(q_lens)
    x = dict(q=torch.randn((T, H, NOPE + ROPE), generator=gen).to(dtype).to(device),
             cu_seqlens=_cu(q_lens).to(device), max_q_len=max(q_lens), scale=_softmax_scale(p["yarn_factor"]))
    x["k"], x["v"] = _keys_values(T, H, gen, dtype, device)
    # chunk c holds context positions [c C, (c + 1) C) of every request, packed request by request
    x["context_chunks"] = []
    for c in range(max(triton.cdiv(n, C) for n in ctx_lens)):
        lens = [max(0, min(C, n - c * C)) for n in ctx_lens]
        k, v = _keys_values(sum(lens), H, gen, dtype, device)
        x["context_chunks"].append(dict(k=k, v=v, cu_seqlens=_cu(lens).to(device)))
    x["o"] = torch.empty((T, H, V_DIM), dtype=dtype, device=device)
    return x


def _reference(x, case):
    """Per request: its context chunks' keys and values in order, then its new tokens' own, causal
    over the new tokens; fp64 for fp32 data, fp32 for 16-bit data (sdk.conformance.refmath)."""
    cu = x["cu_seqlens"].tolist()
    dt = compute_dtype(x["q"])
    out = torch.empty((cu[-1],) + x["o"].shape[1:], dtype=dt, device=x["q"].device)
    for b, (a, e) in enumerate(zip(cu[:-1], cu[1:])):
        ks, vs = [], []
        for ch in x["context_chunks"]:                  # the request's context, chunk by chunk, in order
            s, t = ch["cu_seqlens"][b].item(), ch["cu_seqlens"][b + 1].item()
            ks.append(ch["k"][s:t])
            vs.append(ch["v"][s:t])
        ks.append(x["k"][a:e])
        vs.append(x["v"][a:e])
        k, v = torch.cat(ks), torch.cat(vs)
        n_ctx = k.shape[0] - (e - a)
        out[a:e] = attention(x["q"][a:e], k, v, x["scale"], q_pos=n_ctx + torch.arange(e - a),
                             causal=True, dtype=dt)
    return {"o": out}


DSV3 = ("DeepSeek-V3 (sdk/models/configs/deepseek_v3.json): 128 heads, q/k 192 = qk_nope 128 + qk_rope 64, "
        "v_head_dim 128, softmax scale 192^-0.5 x YaRN mscale^2 (factor 40)")
KIMI = "Kimi-K2: 64 heads, the DeepSeek-V3 attention dims, YaRN factor 32"
register(KernelSpec(
    name="mla_prefill", group="attention", models=("deepseek_v3", "kimi_k2"),
    cases=(Case("dsv3_h4_new_37_66", dict(q_lens=[37, 66], heads=4, yarn_factor=40), True,
                DSV3 + "; heads scaled down, two prompts without context"),
           Case("dsv3_h3_chunked_ctx", dict(q_lens=[19, 33, 5], ctx_lens=[70, 0, 41], chunk=48, heads=3,
                                            yarn_factor=40), True,
                DSV3 + "; heads scaled down, chunked prefill: contexts 70 / 0 / 41 in chunks of 48 (the second without the third request), merged"),
           Case("dsv3_h128_varlen", dict(q_lens=[4096, 2048, 1500, 597], heads=128, yarn_factor=40), False,
                DSV3 + "; all 128 heads (data-parallel attention), four packed prompts"),
           Case("dsv3_tp8_h16_chunked", dict(q_lens=[2048, 1024, 512], ctx_lens=[8192, 0, 3000], chunk=4096,
                                             heads=16, yarn_factor=40), False,
                DSV3 + "; 16 heads per GPU at TP 8, contexts up to 8192 in chunks of 4096"),
           Case("kimi_k2_h64_chunked", dict(q_lens=[4096, 1000], ctx_lens=[12288, 700], chunk=8192, heads=64,
                                            yarn_factor=32), False,
                KIMI + "; all 64 heads, a 4096-token chunk after 12288 cached tokens")),
    dtypes=("bf16", "fp16", "fp32"), make_inputs=_make_inputs, run=lambda x, case: mla_prefill(x),
    reference=_reference, outputs=("o",),
    tolerance={"fp32": Tolerance(atol=2e-5, rtol=1e-4), "bf16": Tolerance(atol=1e-2, rtol=1e-2),
               "fp16": Tolerance(atol=2e-3, rtol=2e-3)},
    description="MLA prefill: varlen attention with q/k 192 (nope 128 + shared rope 64) and v 128, causal over "
                "the new tokens, non-causal over each cached-context chunk, merged by log-sum-exp",
    triton_kernels=(mla_prefill_attn_kernel, merge_attn_states_kernel),
    upstream="vllm: model_executor/layers/attention/mla_attention.py (_forward_prefill: new tokens causal; "
             "_compute_prefill_context: cached context a chunk at a time, non-causal; merge_attn_states) through an "
             "MLAPrefillBackend (v1/attention/backends/mla/prefill/): flash_attn_varlen_func (vllm_flash_attn) on "
             "CUDA, FlashInfer or TRT-LLM ragged on Blackwell, AITER's flash_attn_varlen_func on ROCm, AITER's "
             "Triton MHA (aiter.ops.triton.mha) under the AITER Triton MLA backend; vLLM ships no Triton MLA "
             "prefill kernel of its own; the merge mirrors v1/attention/ops/triton_merge_attn_states.py",
))
