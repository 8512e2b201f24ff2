"""Softmax attention of the hybrid models' full-attention layers, as serving stacks write it.

attn_prefill_gqa_gated: causal varlen prefill (flash-style online softmax) with grouped KV heads and
Qwen3-Next's output gate, o = softmax(q k^T scale) v * sigmoid(gate). q, gate [T, Hq, D];
k, v [T, Hkv, D]; sequences packed along T and delimited by cu_seqlens [N + 1].
attn_paged_decode: one query token per sequence over a paged KV cache [num_blocks, block_size, Hkv, D]
addressed through block_table [B, max_blocks] and seq_lens [B]; each program takes every query head of
one KV head (GQA), a split of the sequence (split-K), and a second kernel merges the splits by their
log-sum-exp, as vLLM's Triton decode attention does.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sdk.conformance.kernels.fit import launch_first_fit
from sdk.conformance.refmath import attention, compute_dtype
from sdk.conformance.spec import Case, KernelSpec, Tolerance, register

LOG2E = 1.4426950408889634


def _prec(x: torch.Tensor) -> str:
    return "ieee" if x.dtype == torch.float32 else "tf32"


# ------------------------------------------------------------------------------------------ prefill
@triton.jit
def attn_prefill_gqa_gated_kernel(q, k, v, gate, o, cu_seqlens, qk_scale, HQ: tl.constexpr,
                                  HKV: tl.constexpr, D: tl.constexpr, BD: tl.constexpr,
                                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr):
    i_m, i_hq, i_n = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    bos = tl.load(cu_seqlens + i_n)
    L = tl.load(cu_seqlens + i_n + 1) - bos
    if i_m * BLOCK_M >= L:
        return
    i_hk = i_hq // (HQ // HKV)
    o_m = i_m * BLOCK_M + tl.arange(0, BLOCK_M)
    o_d = tl.arange(0, BD)
    m_m, m_d = o_m < L, o_d < D
    tok_m = (bos + o_m).to(tl.int64)
    q_off = (tok_m[:, None] * HQ + i_hq) * D + o_d[None, :]
    b_q = tl.load(q + q_off, mask=m_m[:, None] & m_d[None, :], other=0.)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BD], dtype=tl.float32)
    end = tl.minimum(L, (i_m + 1) * BLOCK_M)  # causal: keys up to the block's last query
    for start in range(0, end, BLOCK_N):
        o_n = start + tl.arange(0, BLOCK_N)
        m_n = o_n < L
        tok_n = (bos + o_n).to(tl.int64)
        b_kt = tl.load(k + (tok_n[None, :] * HKV + i_hk) * D + o_d[:, None],
                       mask=m_n[None, :] & m_d[:, None], other=0.)
        s = tl.dot(b_q, b_kt, input_precision=PREC) * qk_scale
        s = tl.where((o_m[:, None] >= o_n[None, :]) & m_n[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        b_v = tl.load(v + (tok_n[:, None] * HKV + i_hk) * D + o_d[None, :],
                      mask=m_n[:, None] & m_d[None, :], other=0.)
        acc = acc * alpha[:, None] + tl.dot(p.to(b_v.dtype), b_v, input_precision=PREC)
        m_i = m_new
    b_gate = tl.load(gate + q_off, mask=m_m[:, None] & m_d[None, :], other=0.).to(tl.float32)
    acc = acc / l_i[:, None] * tl.sigmoid(b_gate)
    tl.store(o + q_off, acc.to(o.dtype.element_ty), mask=m_m[:, None] & m_d[None, :])


def _make_prefill(case, dtype, device, gen):
    p = case.params
    lens, HQ, HKV, D = p["lens"], p["HQ"], p["HKV"], p["D"]
    T = sum(lens)
    d = dict(q=torch.randn((T, HQ, D), generator=gen), k=torch.randn((T, HKV, D), generator=gen),
             v=torch.randn((T, HKV, D), generator=gen), gate=torch.randn((T, HQ, D), generator=gen))
    d = {n: t.to(device=device, dtype=dtype) for n, t in d.items()}
    d["cu_seqlens"] = torch.tensor([0] + lens, dtype=torch.int32).cumsum(0).to(torch.int32).to(device)
    d["o"] = torch.empty((T, HQ, D), dtype=dtype, device=device)
    d["scale"] = D ** -0.5
    return d


def _run_prefill(x, case):
    T, HQ, D = x["q"].shape
    HKV = x["k"].shape[1]
    cu = x["cu_seqlens"]
    N = cu.shape[0] - 1
    max_len = max(case.params["lens"])
    BD = triton.next_power_of_2(D)
    # preferred tiles first; smaller ones where the target's shared memory cannot hold them
    # (fp32 on 100 KiB parts: sm_86, sm_89, sm_120)
    configs = [dict(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=2)] if BD >= 256 else \
        [dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=2)]
    configs += [dict(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=1),
                dict(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=1)]
    launch_first_fit(
        attn_prefill_gqa_gated_kernel, lambda c: (triton.cdiv(max_len, c["BLOCK_M"]), HQ, N),
        (x["q"], x["k"], x["v"], x["gate"], x["o"], cu, x["scale"] * LOG2E), configs,
        HQ=HQ, HKV=HKV, D=D, BD=BD, PREC=_prec(x["q"]))


def _ref_prefill(x, case):
    """Per sequence: causal softmax attention (GQA), then the sigmoid gate; fp64 for fp32 data, fp32
    for 16-bit data (sdk.conformance.refmath)."""
    dt = compute_dtype(x["q"])
    out = torch.empty(x["q"].shape, dtype=dt, device=x["q"].device)
    cu = x["cu_seqlens"].tolist()
    for a, b in zip(cu[:-1], cu[1:]):
        out[a:b] = attention(x["q"][a:b], x["k"][a:b], x["v"][a:b], x["scale"], causal=True, dtype=dt)
    return {"o": out.mul_(torch.sigmoid(x["gate"].to(dt)))}


QN = "Qwen3-Next-80B-A3B full attention: 16 q heads, 2 KV heads, head dim 256"
register(KernelSpec(
    name="attn_prefill_gqa_gated", group="attention", models=("qwen3_5", "qwen3_next"),
    cases=(Case("lens_37_66_h4x1_d256", dict(lens=[37, 66], HQ=4, HKV=1, D=256), True,
                QN + "; heads scaled down, two ragged sequences"),
           Case("t70_h4x2_d128", dict(lens=[70], HQ=4, HKV=2, D=128), True,
                QN + "; heads and head dim scaled down"),
           Case("qwen3next_t8192", dict(lens=[8192], HQ=16, HKV=2, D=256), False, QN),
           Case("qwen3next_varlen_4", dict(lens=[4096, 2048, 1500, 597], HQ=16, HKV=2, D=256), False,
                QN + "; four packed prompts")),
    dtypes=("bf16", "fp32"), make_inputs=_make_prefill, run=_run_prefill, reference=_ref_prefill,
    outputs=("o",),
    tolerance={"fp32": Tolerance(atol=2e-5, rtol=1e-4), "bf16": Tolerance(atol=1e-2, rtol=1e-2)},
    description="causal varlen GQA prefill attention (online softmax) with the sigmoid output gate",
    triton_kernels=(attn_prefill_gqa_gated_kernel,), upstream="vllm: v1/attention/ops/triton_unified_attention.py kernel_unified_attention (prefill; vLLM applies the Qwen3-Next output gate outside the kernel)"))


# ------------------------------------------------------------------------------------------- decode
@triton.jit
def attn_paged_decode_split_kernel(q, k_cache, v_cache, block_table, seq_lens, part_o, part_lse,
                                   qk_scale, max_blocks, HQ: tl.constexpr, HKV: tl.constexpr,
                                   D: tl.constexpr, BD: tl.constexpr, PAGE: tl.constexpr,
                                   BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
                                   NUM_SPLITS: tl.constexpr, PREC: tl.constexpr):
    i_b, i_hk, i_s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    G: tl.constexpr = HQ // HKV
    seq_len = tl.load(seq_lens + i_b)
    split_len = tl.cdiv(seq_len, NUM_SPLITS)
    start = i_s * split_len
    end = tl.minimum(start + split_len, seq_len)
    if start >= end:
        return
    o_h = tl.arange(0, BLOCK_H)
    o_d = tl.arange(0, BD)
    m_h, m_d = o_h < G, o_d < D
    heads = i_hk * G + o_h
    b_q = tl.load(q + (i_b * HQ + heads[:, None]) * D + o_d[None, :], mask=m_h[:, None] & m_d[None, :],
                  other=0.)
    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, BD], dtype=tl.float32)
    for n0 in range(start, end, BLOCK_N):
        o_n = n0 + tl.arange(0, BLOCK_N)
        m_n = o_n < end
        page = tl.load(block_table + i_b * max_blocks + o_n // PAGE, mask=m_n, other=0).to(tl.int64)
        slot = page * PAGE + o_n % PAGE
        b_kt = tl.load(k_cache + (slot[None, :] * HKV + i_hk) * D + o_d[:, None],
                       mask=m_n[None, :] & m_d[:, None], other=0.)
        s = tl.dot(b_q, b_kt, input_precision=PREC) * qk_scale
        s = tl.where(m_n[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        b_v = tl.load(v_cache + (slot[:, None] * HKV + i_hk) * D + o_d[None, :],
                      mask=m_n[:, None] & m_d[None, :], other=0.)
        acc = acc * alpha[:, None] + tl.dot(p.to(b_v.dtype), b_v, input_precision=PREC)
        m_i = m_new
    row = (i_b * HQ + heads) * NUM_SPLITS + i_s
    tl.store(part_o + row[:, None] * D + o_d[None, :], acc / l_i[:, None], mask=m_h[:, None] & m_d[None, :])
    tl.store(part_lse + row, m_i + tl.log2(l_i), mask=m_h)


@triton.jit
def attn_paged_decode_reduce_kernel(part_o, part_lse, seq_lens, o, HQ: tl.constexpr, D: tl.constexpr,
                                    BD: tl.constexpr, NUM_SPLITS: tl.constexpr, BS: tl.constexpr):
    i_b, i_h = tl.program_id(0), tl.program_id(1)
    seq_len = tl.load(seq_lens + i_b)
    split_len = tl.cdiv(seq_len, NUM_SPLITS)
    o_s = tl.arange(0, BS)
    o_d = tl.arange(0, BD)
    m_s = (o_s < NUM_SPLITS) & (o_s * split_len < seq_len)   # splits that held any token
    row = (i_b * HQ + i_h) * NUM_SPLITS + o_s
    lse = tl.load(part_lse + row, mask=m_s, other=float("-inf"))
    w = tl.exp2(lse - tl.max(lse, 0))
    w = tl.where(m_s, w, 0.)
    b_o = tl.load(part_o + row[:, None] * D + o_d[None, :], mask=m_s[:, None] & (o_d < D)[None, :],
                  other=0.)
    out = tl.sum(w[:, None] * b_o, 0) / tl.sum(w, 0)
    tl.store(o + (i_b * HQ + i_h) * D + o_d, out.to(o.dtype.element_ty), mask=o_d < D)


def _make_decode(case, dtype, device, gen):
    p = case.params
    lens, HQ, HKV, D, PAGE = p["lens"], p["HQ"], p["HKV"], p["D"], p["page"]
    B = len(lens)
    pages = [triton.cdiv(n, PAGE) for n in lens]
    max_blocks = max(pages)
    num_blocks = sum(pages) + 3                                # a few pages nobody owns
    perm = torch.randperm(num_blocks, generator=gen)
    table = torch.zeros((B, max_blocks), dtype=torch.int32)
    used = 0
    for b, n in enumerate(pages):
        table[b, :n] = perm[used:used + n].to(torch.int32)
        used += n
    d = dict(q=torch.randn((B, HQ, D), generator=gen),
             k_cache=torch.randn((num_blocks, PAGE, HKV, D), generator=gen),
             v_cache=torch.randn((num_blocks, PAGE, HKV, D), generator=gen))
    d = {n: t.to(device=device, dtype=dtype) for n, t in d.items()}
    d["block_table"] = table.to(device)
    d["seq_lens"] = torch.tensor(lens, dtype=torch.int32, device=device)
    d["o"] = torch.empty((B, HQ, D), dtype=dtype, device=device)
    d["scale"] = D ** -0.5
    return d


def _decode_config(max_len: int, D: int) -> dict:
    """Split count and tile sizes by context length and head size (overridable by keyword)."""
    num_splits = max(1, min(16, triton.cdiv(max_len, 256)))
    if max_len < 256:
        num_splits = max(1, min(4, triton.cdiv(max_len, 32)))   # short contexts still split
    return dict(num_splits=num_splits, BLOCK_N=64 if D <= 128 else 32, num_warps=4, num_stages=2)


def _run_decode(x, case, **config):
    B, HQ, D = x["q"].shape
    _, PAGE, HKV, _ = x["k_cache"].shape
    cfg = {**_decode_config(max(case.params["lens"]), D), **config}
    num_splits = cfg.pop("num_splits")
    BD = triton.next_power_of_2(D)
    part_o = torch.empty((B, HQ, num_splits, D), dtype=torch.float32, device=x["q"].device)
    part_lse = torch.empty((B, HQ, num_splits), dtype=torch.float32, device=x["q"].device)
    attn_paged_decode_split_kernel[(B, HKV, num_splits)](
        x["q"], x["k_cache"], x["v_cache"], x["block_table"], x["seq_lens"], part_o, part_lse,
        x["scale"] * LOG2E, x["block_table"].shape[1], HQ=HQ, HKV=HKV, D=D, BD=BD, PAGE=PAGE,
        BLOCK_H=max(16, triton.next_power_of_2(HQ // HKV)), NUM_SPLITS=num_splits, PREC=_prec(x["q"]),
        **cfg)
    attn_paged_decode_reduce_kernel[(B, HQ)](
        part_o, part_lse, x["seq_lens"], x["o"], HQ=HQ, D=D, BD=BD, NUM_SPLITS=num_splits,
        BS=triton.next_power_of_2(num_splits), num_warps=4)


def _ref_decode(x, case):
    """Per sequence: its query over the keys and values of the pages the block table names
    (sdk.conformance.refmath: fp64 for fp32 data, fp32 for 16-bit data)."""
    B, HQ, D = x["q"].shape
    PAGE, HKV = x["k_cache"].shape[1], x["k_cache"].shape[2]
    dt = compute_dtype(x["q"])
    out = torch.empty((B, HQ, D), dtype=dt, device=x["q"].device)
    for b, n in enumerate(x["seq_lens"].tolist()):
        pages = x["block_table"][b, :triton.cdiv(n, PAGE)].long()
        ks = x["k_cache"][pages].reshape(-1, HKV, D)[:n]
        vs = x["v_cache"][pages].reshape(-1, HKV, D)[:n]
        out[b] = attention(x["q"][b:b + 1], ks, vs, x["scale"], dtype=dt)[0]
    return {"o": out}


register(KernelSpec(
    name="attn_paged_decode", group="attention", models=("qwen3_5", "qwen3_next", "llama3_1", "mixtral"),
    cases=(Case("b4_lens_1_37_100_32_h4x1_d256", dict(lens=[1, 37, 100, 32], HQ=4, HKV=1, D=256, page=16),
                True, QN + "; heads scaled down, ragged lengths, block size 16"),
           Case("b2_lens_90_17_h8x2_d128", dict(lens=[90, 17], HQ=8, HKV=2, D=128, page=16), True,
                "Llama-3.1-8B GQA (group 4), head dim 128, heads scaled down"),
           Case("qwen3next_b64_s4096", dict(lens=[4096 - 61 * i for i in range(64)], HQ=16, HKV=2, D=256,
                                            page=16), False, QN + "; batch 64, contexts up to 4096"),
           Case("llama3_b64_s4096", dict(lens=[4096 - 37 * i for i in range(64)], HQ=32, HKV=8, D=128,
                                         page=16), False, "Llama-3.1-8B: 32 q heads, 8 KV heads, head dim 128")),
    dtypes=("bf16", "fp32"), make_inputs=_make_decode, run=_run_decode, reference=_ref_decode,
    outputs=("o",),
    tolerance={"fp32": Tolerance(atol=2e-5, rtol=1e-4), "bf16": Tolerance(atol=1e-2, rtol=1e-2)},
    description="paged-KV GQA decode attention, split-K over the context with a log-sum-exp merge",
    triton_kernels=(attn_paged_decode_split_kernel, attn_paged_decode_reduce_kernel), upstream="vllm: v1/attention/ops/triton_decode_attention.py _fwd_grouped_kernel_stage1 + _fwd_kernel_stage2 (GQA)"))
