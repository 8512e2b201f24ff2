"""Encoder attention: every token of a sequence attends to every other (no causal mask), as serving
stacks run the encoders of BERT-style embedding models, of encoder-decoders and of vision towers.

encoder_attention: q [T, HQ, D], k and v [T, HKV, D] (HQ a multiple of HKV: grouped KV heads), the
sequences packed along T, sequence n starting at start_loc[n] and seq_lens[n] long (vLLM's layout:
no KV cache, the encoder's own keys and values). Optionally a local window: query i sees key j only
when i - j <= window_left and j - i <= window_right (0: unbounded), as ModernBERT's local layers
do. Head dims need not be powers of two (SigLIP's 72, Qwen2.5-VL's ViT 80): the head dimension is
padded to one and masked. Flash-style online softmax over key blocks; a windowed program visits
only the key blocks its window reaches.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sdk.conformance.kernels.fit import launch_first_fit
from sdk.conformance.refmath import compute_dtype
from sdk.conformance.refmath import encoder_attention as encoder_attention_reference
from sdk.conformance.spec import Case, KernelSpec, Tolerance, register

LOG2E = 1.4426950408889634


@triton.jit
def encoder_attention_kernel(q, k, v, o, start_loc, seq_lens, qk_scale, stride_qt, stride_qh, stride_kt,
                             stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
                             HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, BD: tl.constexpr,
                             WINDOW_LEFT: tl.constexpr, WINDOW_RIGHT: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PREC: tl.constexpr):
    i_n, i_hq, i_m = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    L = tl.load(seq_lens + i_n)
    if i_m * BLOCK_M >= L:
        return
    bos = tl.load(start_loc + i_n).to(tl.int64)
    i_hk = i_hq // (HQ // HKV)
    o_m = i_m * BLOCK_M + tl.arange(0, BLOCK_M)
    o_d = tl.arange(0, BD)
    m_m, m_d = o_m < L, o_d < D
    b_q = tl.load(q + (bos + o_m[:, None]) * stride_qt + i_hq * stride_qh + o_d[None, :],
                  mask=m_m[:, None] & m_d[None, :], other=0.)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BD], dtype=tl.float32)
    lo = 0
    hi = L
    if WINDOW_LEFT > 0:  # the first key the block's first query sees, down to a block boundary
        lo = tl.maximum(0, i_m * BLOCK_M - WINDOW_LEFT) // BLOCK_N * BLOCK_N
    if WINDOW_RIGHT > 0:  # one past the last key the block's last query sees
        hi = tl.minimum(L, (i_m + 1) * BLOCK_M + WINDOW_RIGHT)
    for start in range(lo, hi, BLOCK_N):
        o_n = start + tl.arange(0, BLOCK_N)
        seen = (o_n < L)[None, :] & m_m[:, None]
        if WINDOW_LEFT > 0:
            seen = seen & (o_m[:, None] - o_n[None, :] <= WINDOW_LEFT)
        if WINDOW_RIGHT > 0:
            seen = seen & (o_n[None, :] - o_m[:, None] <= WINDOW_RIGHT)
        b_kt = tl.load(k + (bos + o_n[None, :]) * stride_kt + i_hk * stride_kh + o_d[:, None],
                       mask=(o_n < L)[None, :] & m_d[:, None], other=0.)
        s = tl.dot(b_q, b_kt, input_precision=PREC) * qk_scale
        s = tl.where(seen, s, float("-inf"))
        # rows past the sequence see nothing: keep their maximum finite so that no NaN is made
        m_new = tl.maximum(tl.maximum(m_i, tl.max(s, 1)), -1e30)
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        b_v = tl.load(v + (bos + o_n[:, None]) * stride_vt + i_hk * stride_vh + o_d[None, :],
                      mask=(o_n < L)[:, None] & m_d[None, :], other=0.)
        acc = acc * alpha[:, None] + tl.dot(p.to(b_v.dtype), b_v, input_precision=PREC)
        m_i = m_new
    acc = acc / l_i[:, None]
    tl.store(o + (bos + o_m[:, None]) * stride_ot + i_hq * stride_oh + o_d[None, :],
             acc.to(o.dtype.element_ty), mask=m_m[:, None] & m_d[None, :])


def encoder_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                      start_loc: torch.Tensor, seq_lens: torch.Tensor, max_len: int, scale: float,
                      window_left: int = 0, window_right: int = 0) -> None:
    """Bidirectional varlen attention into `o` (shapes in the module docstring)."""
    HQ, D = q.shape[1], q.shape[2]
    HKV = k.shape[1]
    BD = triton.next_power_of_2(D)
    configs = [dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2),
               dict(BLOCK_M=32, BLOCK_N=32, num_warps=4, num_stages=1)]
    launch_first_fit(
        encoder_attention_kernel, lambda c: (seq_lens.shape[0], HQ, triton.cdiv(max_len, c["BLOCK_M"])),
        (q, k, v, o, start_loc, seq_lens, scale * LOG2E, q.stride(0), q.stride(1), k.stride(0), k.stride(1),
         v.stride(0), v.stride(1), o.stride(0), o.stride(1)), configs,
        HQ=HQ, HKV=HKV, D=D, BD=BD, WINDOW_LEFT=window_left, WINDOW_RIGHT=window_right,
        PREC="ieee" if q.dtype == torch.float32 else "tf32")


def _make(case, dtype, device, gen):
    p = case.params
    lens, HQ, HKV, D = p["lens"], p["HQ"], p["HKV"], p["D"]
    T = sum(lens)
    d = {n: torch.randn((T, h, D), generator=gen).to(device=device, dtype=dtype)
         for n, h in (("q", HQ), ("k", HKV), ("v", HKV))}
    starts = [0]
    for n in lens[:-1]:
        starts.append(starts[-1] + n)
    d["start_loc"] = torch.tensor(starts, dtype=torch.int32, device=device)
    d["seq_lens"] = torch.tensor(lens, dtype=torch.int32, device=device)
    d["o"] = torch.empty((T, HQ, D), dtype=dtype, device=device)
    return d


def _run(x, case):
    p = case.params
    w = p.get("window", 0)
    encoder_attention(x["q"], x["k"], x["v"], x["o"], x["start_loc"], x["seq_lens"], max(p["lens"]),
                      p["D"] ** -0.5, w, w)


def _ref(x, case):
    """Per sequence: softmax(q k^T scale) v over all of its keys (or those within the window), fp64
    for fp32 data, fp32 for 16-bit data (sdk.conformance.refmath)."""
    p = case.params
    return {"o": encoder_attention_reference(x["q"], x["k"], x["v"], p["lens"], p["D"] ** -0.5,
                                             p.get("window", 0), compute_dtype(x["q"]))}


BERT = "BERT-base / RoBERTa-base / E5 and BGE embedding models: 12 heads of 64, sequences up to 512"
MODERNBERT = ("ModernBERT-base: 12 heads of 64, 8192 positions; its local layers see 64 tokens either side "
              "(local_attention 128)")
register(KernelSpec(
    name="encoder_attention", group="attention", models=(),
    cases=(Case("bert_h4_varlen", dict(lens=[37, 100, 1], HQ=4, HKV=4, D=64), True,
                BERT + "; heads scaled down, three packed sequences, one of a single token"),
           Case("siglip_h2_d72", dict(lens=[81], HQ=2, HKV=2, D=72), True,
                "SigLIP-so400m vision tower: head dim 72 (not a power of two); heads and patches scaled down"),
           Case("t5gemma_gqa_h4x2_d128", dict(lens=[50, 77], HQ=4, HKV=2, D=128), True,
                "T5Gemma encoder: grouped KV heads (8 q over 4 KV, head dim 256 in the 2B); scaled down"),
           Case("modernbert_local_w64", dict(lens=[300], HQ=2, HKV=2, D=64, window=64), True,
                MODERNBERT + "; heads scaled down, 300 tokens"),
           Case("bert_base_b8", dict(lens=[512, 512, 512, 512, 384, 200, 77, 16], HQ=12, HKV=12, D=64), False,
                BERT + "; a batch of eight"),
           Case("xlm_roberta_large_b4", dict(lens=[512, 512, 300, 128], HQ=16, HKV=16, D=64), False,
                "XLM-RoBERTa-large (BGE-M3's encoder): 16 heads of 64"),
           Case("modernbert_t8192_local", dict(lens=[8192], HQ=12, HKV=12, D=64, window=64), False,
                MODERNBERT),
           Case("whisper_large_v3_b2", dict(lens=[1500, 1500], HQ=20, HKV=20, D=64), False,
                "Whisper-large-v3 encoder: 20 heads of 64 over 1500 audio frames (30 s)"),
           Case("siglip_so400m_b4", dict(lens=[729, 729, 729, 729], HQ=16, HKV=16, D=72), False,
                "SigLIP-so400m-patch14-384 (Gemma 3's tower at 896 px: 4096 patches): 16 heads of 72, "
                "729 patches per image"),
           Case("qwen2_5_vl_vit_windows", dict(lens=[64] * 32 + [1024], HQ=16, HKV=16, D=80), False,
                "Qwen2.5-VL ViT: 16 heads of 80; windowed layers attend within windows of 64 patches, "
                "full layers over the whole image")),
    dtypes=("fp32", "bf16", "fp16"), make_inputs=_make, run=_run, reference=_ref, outputs=("o",),
    tolerance={"fp32": Tolerance(atol=2e-5, rtol=1e-4), "bf16": Tolerance(atol=1e-2, rtol=1e-2),
               "fp16": Tolerance(atol=2e-3, rtol=2e-3)},
    description="bidirectional varlen attention without a cache (encoders of embedding models, "
                "encoder-decoders and vision towers), GQA, optional local window, any head dim",
    triton_kernels=(encoder_attention_kernel,),
    upstream="vllm: v1/attention/ops/triton_prefill_attention.py context_attention_fwd (is_causal=False; "
             "the Triton attention backend's _forward_encoder_attention for ENCODER_ONLY and ENCODER "
             "layers, sliding_window_q/k for local attention)"))
