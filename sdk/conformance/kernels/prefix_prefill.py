"""Prefix-prefill attention: new query tokens over a cached prefix read through the block table, plus
themselves causally, as vLLM's `context_attention_fwd` runs the prefill part of a chunked-prefill batch.

Serving path: vLLM's ROCm attention backend (`chunked_prefill_paged_decode`) launches this kernel for
every sequence with more than one new token (skip_decode: one-token sequences are left to the paged
decode kernel, their rows of `out` untouched), then the decode kernel for the rest.

Layouts (the paged-attention cache layout this kernel reads, not the NHD layout of the unified
kernel):
  q, out [T, Hq, D]; k, v [T, Hkv, D]: the new tokens of all sequences packed along T,
  b_start_loc [B + 1] (their offsets), b_seq_len [B] (cached + new tokens per sequence; the cached
  prefix is b_seq_len - query length long, the queries sit at the positions after it);
  k_cache [num_blocks, Hkv, D / x, block_size, x] with x = 16 bytes / element size;
  v_cache [num_blocks, Hkv, D, block_size]; block_table [B, max_blocks] (page ids).
The new tokens' own keys and values are read from k and v (the cache pages for their positions may
hold anything). Options: GQA (query head h reads KV head h // (Hq / Hkv)), sliding window (a query at
position i sees keys i - window < j <= i), attention sinks (one logit per head in the softmax
denominator, gpt-oss). Softmax in fp32, online over cache tiles of 32 keys and new-token tiles.

One program per (sequence, query head, block of BLOCK_M new tokens), as upstream. Block sizes need not
be powers of two (hybrid models page attention in blocks large enough for a mamba state: 544 tokens
for Qwen3-Next / Qwen3.5): each key's page is looked up per token.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sdk.conformance.kernels.paged_attention import _max_shared_mem
from sdk.conformance.refmath import attention, compute_dtype
from sdk.conformance.spec import Case, KernelSpec, Tolerance, register


@triton.jit
def _online_softmax(m_i, l_i, acc, s, v, PREC: tl.constexpr):
    """One tile of scores s [M, N] (-inf where not visible) and values v [N, D] into the running
    max, sum and unnormalised output; rows that have seen nothing stay empty (no NaN)."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_use = tl.where(m_new > float("-inf"), m_new, 0.0)
    p = tl.exp(s - m_use[:, None])
    alpha = tl.exp(m_i - m_use)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PREC)
    return m_new, l_i, acc


@triton.jit
def _prefix_prefill_kernel(q, k, v, k_cache, v_cache, out, block_table, b_start_loc, b_seq_len, sinks,
                           scale, window, stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
                           stride_ot, stride_oh, stride_kcb, stride_kch, stride_kcd, stride_kct,
                           stride_vcb, stride_vch, stride_vcd, stride_vct, stride_bt,
                           G: tl.constexpr, D: tl.constexpr, BD: tl.constexpr, X: tl.constexpr,
                           PAGE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                           CACHE_TILE: tl.constexpr, USE_WINDOW: tl.constexpr, USE_SINKS: tl.constexpr,
                           SKIP_DECODE: tl.constexpr, PREC: tl.constexpr):
    b = tl.program_id(0)
    head = tl.program_id(1)
    m_blk = tl.program_id(2)
    kv_head = head // G
    q_start = tl.load(b_start_loc + b)
    q_len = tl.load(b_start_loc + b + 1) - q_start
    ctx = tl.load(b_seq_len + b) - q_len
    if SKIP_DECODE and q_len == 1:
        return
    if m_blk * BLOCK_M >= q_len:
        return
    offs_m = m_blk * BLOCK_M + tl.arange(0, BLOCK_M)
    m_ok = offs_m < q_len
    offs_d = tl.arange(0, BD)
    d_ok = offs_d < D
    tok = (q_start + offs_m).to(tl.int64)
    q_tile = tl.load(q + tok[:, None] * stride_qt + head * stride_qh + offs_d[None, :],
                     mask=m_ok[:, None] & d_ok[None, :], other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    if USE_SINKS:
        m_i = tl.zeros([BLOCK_M], dtype=tl.float32) + tl.load(sinks + head).to(tl.float32)
        l_i += 1.0
    acc = tl.zeros([BLOCK_M, BD], dtype=tl.float32)

    # the cached prefix, every key visible but for the window
    q_pos = ctx + offs_m
    table_row = block_table + b.to(tl.int64) * stride_bt
    n_start = 0
    if USE_WINDOW:  # keys before the first row's window are never seen
        n_start = (tl.maximum(ctx + m_blk * BLOCK_M - window + 1, 0) // CACHE_TILE) * CACHE_TILE
    for n0 in range(n_start, ctx, CACHE_TILE):
        offs_n = n0 + tl.arange(0, CACHE_TILE)
        n_ok = offs_n < ctx
        page = tl.load(table_row + offs_n // PAGE, mask=n_ok, other=0).to(tl.int64)
        slot = offs_n % PAGE
        kt = tl.load(k_cache + page[None, :] * stride_kcb + kv_head * stride_kch + (offs_d[:, None] // X) * stride_kcd
                     + slot[None, :] * stride_kct + offs_d[:, None] % X, mask=d_ok[:, None] & n_ok[None, :], other=0.0)
        s = tl.dot(q_tile, kt, input_precision=PREC) * scale
        seen = n_ok[None, :] & m_ok[:, None]
        if USE_WINDOW:
            seen = seen & (q_pos[:, None] - offs_n[None, :] < window)
        s = tl.where(seen, s, float("-inf"))
        vt = tl.load(v_cache + page[:, None] * stride_vcb + kv_head * stride_vch + offs_d[None, :] * stride_vcd
                     + slot[:, None] * stride_vct, mask=n_ok[:, None] & d_ok[None, :], other=0.0)
        m_i, l_i, acc = _online_softmax(m_i, l_i, acc, s, vt, PREC)

    # the new tokens themselves, causally
    n_end = tl.minimum((m_blk + 1) * BLOCK_M, q_len)
    for n0 in range(0, n_end, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        n_ok = offs_n < q_len
        ktok = (q_start + offs_n).to(tl.int64)
        kt = tl.load(k + ktok[None, :] * stride_kt + kv_head * stride_kh + offs_d[:, None],
                     mask=d_ok[:, None] & n_ok[None, :], other=0.0)
        s = tl.dot(q_tile, kt, input_precision=PREC) * scale
        seen = n_ok[None, :] & m_ok[:, None] & (offs_n[None, :] <= offs_m[:, None])
        if USE_WINDOW:
            seen = seen & (offs_m[:, None] - offs_n[None, :] < window)
        s = tl.where(seen, s, float("-inf"))
        vt = tl.load(v + ktok[:, None] * stride_vt + kv_head * stride_vh + offs_d[None, :],
                     mask=n_ok[:, None] & d_ok[None, :], other=0.0)
        m_i, l_i, acc = _online_softmax(m_i, l_i, acc, s, vt, PREC)

    o = acc / l_i[:, None]
    tl.store(out + tok[:, None] * stride_ot + head * stride_oh + offs_d[None, :], o.to(out.dtype.element_ty),
             mask=m_ok[:, None] & d_ok[None, :])


# ------------------------------------------------------------------------------------------ launch
def _config(q: torch.Tensor) -> dict:
    """Tiles as upstream (128 new tokens per program, new-token tiles of 64, cache tiles of 32 keys) for
    16-bit inputs up to head dim 128; at head dim 256, 32 rows and new-token tiles of 32, so that the
    fp32 accumulator and the operands stay in 8 warps' registers. fp32 dots run on FMA units with both
    operands in registers: 16 rows and tiles of 32. Then halved until the query block, a K and a V
    tile and the probabilities fit nine tenths of the device's shared memory (queried from the active
    driver, as a serving stack sizes its launches)."""
    bd = triton.next_power_of_2(q.shape[2])
    elt = q.element_size()
    budget = _max_shared_mem(q) * 9 // 10
    if elt <= 2:
        block_m, block_n = (128, 64) if bd <= 128 else (32, 32)
    else:
        block_m, block_n = 16, 32

    def need(bm, bn):
        return (bm * bd + 2 * bn * bd + bm * bn) * elt

    while need(block_m, block_n) > budget and block_m > 16:
        if block_n > 32:
            block_n //= 2
        else:
            block_m //= 2
    return dict(BLOCK_M=block_m, BLOCK_N=block_n, CACHE_TILE=32, num_warps=8, num_stages=1)


def context_attention_fwd(q, k, v, out, k_cache, v_cache, block_table, b_start_loc, b_seq_len, max_q_len: int,
                          sm_scale: float | None = None, sliding_window: int = 0, sinks=None,
                          skip_decode: bool = True, **config) -> None:
    """out for every new token of the batch; k_cache [blocks, Hkv, D / x, page, x], v_cache
    [blocks, Hkv, D, page]. One-token sequences are skipped when `skip_decode` (their rows untouched)."""
    T, HQ, D = q.shape
    HKV = k.shape[1]
    _, _, _, PAGE, X = k_cache.shape
    B = b_seq_len.shape[0]
    cfg = {**_config(q), **config}
    grid = (B, HQ, triton.cdiv(max_q_len, cfg["BLOCK_M"]))
    _prefix_prefill_kernel[grid](
        q, k, v, k_cache, v_cache, out, block_table, b_start_loc, b_seq_len, sinks,
        D ** -0.5 if sm_scale is None else sm_scale, int(sliding_window),
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), out.stride(0), out.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), k_cache.stride(3),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), v_cache.stride(3), block_table.stride(0),
        G=HQ // HKV, D=D, BD=triton.next_power_of_2(D), X=X, PAGE=PAGE, USE_WINDOW=sliding_window > 0,
        USE_SINKS=sinks is not None, SKIP_DECODE=skip_decode,
        PREC="ieee" if q.dtype == torch.float32 else "tf32", **cfg)


# ------------------------------------------------------------------------------ inputs, reference
def _lens(p) -> tuple[list[int], list[int]]:
    """(query lengths, cached prefix lengths): `seqs` [(new, cached), ...] then `decodes` one-token
    sequences over contexts (count, first, step)."""
    seqs = list(p["seqs"])
    n, ctx0, step = p.get("decodes", (0, 0, 0))
    return [q for q, _ in seqs] + [1] * n, [c for _, c in seqs] + [max(1, ctx0 - step * i) for i in range(n)]


def _make_inputs(case, dtype, device, gen):
    p = case.params
    q_lens, ctx = _lens(p)
    HQ, HKV, D, PAGE = p["HQ"], p["HKV"], p["D"], p["page"]
    T, B = sum(q_lens), len(q_lens)
    seq_lens = [a + c for a, c in zip(q_lens, ctx)]
    pages = [triton.cdiv(n, PAGE) for n in seq_lens]
    num_blocks = sum(pages) + 3                                  # a few pages nobody owns
    perm = torch.randperm(num_blocks, generator=gen)
    table = torch.zeros((B, max(pages)), dtype=torch.int32)
    used = 0
    for b, n in enumerate(pages):
        table[b, :n] = perm[used:used + n].to(torch.int32)
        used += n
    x = 16 // torch.empty((), dtype=dtype).element_size()
    t = {"q": torch.randn((T, HQ, D), generator=gen), "k": torch.randn((T, HKV, D), generator=gen),
         "v": torch.randn((T, HKV, D), generator=gen),
         "k_cache": torch.randn((num_blocks, HKV, D // x, PAGE, x), generator=gen),
         "v_cache": torch.randn((num_blocks, HKV, D, PAGE), generator=gen)}
    t = {n: a.to(dtype=dtype, device=device) for n, a in t.items()}
    # rows the kernel computes start as NaN; skipped (decode) rows hold what the decode kernel wrote
    skip = p.get("skip_decode", True)
    out = torch.randn((T, HQ, D), generator=gen).to(dtype)
    row = 0
    for n in q_lens:
        if not (skip and n == 1):
            out[row:row + n] = float("nan")
        row += n
    t.update(out=out.to(device), block_table=table.to(device),
             b_start_loc=torch.tensor([0] + q_lens, dtype=torch.int32).cumsum(0).to(torch.int32).to(device),
             b_seq_len=torch.tensor(seq_lens, dtype=torch.int32, device=device),
             sinks=(torch.randn((HQ,), generator=gen) * 2.0 + 1.0).to(device) if p.get("sinks") else None)
    return t


def _run(t, case, **config):
    p = case.params
    context_attention_fwd(t["q"], t["k"], t["v"], t["out"], t["k_cache"], t["v_cache"], t["block_table"],
                          t["b_start_loc"], t["b_seq_len"], max(_lens(p)[0]), sliding_window=p.get("window", 0),
                          sinks=t["sinks"], skip_decode=p.get("skip_decode", True), **config)


def _reference(t, case):
    """Per sequence: the prefix's keys and values gathered from the pages the block table names,
    then the new tokens' own; causal, window and sinks as stated; skipped rows as they were. fp64
    for fp32 data, fp32 for 16-bit data (sdk.conformance.refmath)."""
    p = case.params
    f = {n: (a.cpu() if isinstance(a, torch.Tensor) else a) for n, a in t.items()}
    _, HQ, D = f["q"].shape
    blocks, HKV, _, PAGE, _ = f["k_cache"].shape
    dt = compute_dtype(f["q"])
    out = f["out"].to(dt, copy=True)
    starts = f["b_start_loc"].tolist()
    window = p.get("window", 0)
    for b, L in enumerate(f["b_seq_len"].tolist()):
        s0, n = starts[b], starts[b + 1] - starts[b]
        if p.get("skip_decode", True) and n == 1:
            continue
        ctx = L - n
        pg = f["block_table"][b, :triton.cdiv(ctx, PAGE)].long()
        kc = f["k_cache"][pg].permute(0, 3, 1, 2, 4).reshape(-1, HKV, D)[:ctx]           # [ctx, Hkv, D]
        vc = f["v_cache"][pg].permute(0, 3, 1, 2).reshape(-1, HKV, D)[:ctx]
        keys = torch.cat([kc, f["k"][s0:s0 + n]])
        vals = torch.cat([vc, f["v"][s0:s0 + n]])
        out[s0:s0 + n] = attention(f["q"][s0:s0 + n], keys, vals, D ** -0.5, q_pos=ctx + torch.arange(n),
                                   causal=True, window=window, sinks=f["sinks"], dtype=dt)
    return {"out": out}


LLAMA = "Llama-3.1-8B: 32 q / 8 kv heads x 128, block size 16"
QNEXT = ("Qwen3-Next-80B-A3B / Qwen3.5-35B-A3B: 16 q / 2 kv heads x 256; block size 544 = vLLM's hybrid "
         "alignment (the GDN state of a sequence over 2 x 2 x 256 x 2 bytes per token, rounded to 16)")
GPTOSS = "gpt-oss-120b / 20b: 64 q / 8 kv heads x 64, a sink logit per head, sliding window 128"
GLM = "GLM-4.5: 96 q / 8 kv heads x 128 (GQA group 12)"
L4 = "Llama-4 Scout: 40 q / 8 kv heads x 128 (GQA group 5)"
MIXTRAL = "Mixtral-8x7B: 32 q / 8 kv heads x 128 (the attention of Llama-3.1-8B)"

_CASES = (
    Case("llama_h4x1_d128_p16", dict(seqs=[(29, 40), (21, 0), (45, 13)], decodes=(2, 37, 20), HQ=4, HKV=1, D=128,
                                     page=16),
         source=LLAMA + "; heads /8; chunked prefills over cached prefixes (one starting mid-page), a fresh "
                        "prefill; two decodes left to the decode kernel"),
    Case("qwen3next_h2x1_d256_p544", dict(seqs=[(19, 600), (12, 0)], decodes=(1, 700, 0), HQ=2, HKV=1, D=256,
                                          page=544),
         source=QNEXT + "; heads /8; a prefix across two pages"),
    Case("gptoss_sinks_w128_h8x1_d64", dict(seqs=[(150, 180), (9, 3)], HQ=8, HKV=1, D=64, page=16, sinks=True,
                                            window=128),
         source=GPTOSS + "; heads /8; 150 new tokens (two 16-bit query blocks) past the window: keys of "
                         "the prefix and of the chunk outside it"),
    Case("odd_h6x2_d80_p24_no_skip", dict(seqs=[(17, 30), (1, 50), (5, 0)], HQ=6, HKV=2, D=80, page=24,
                                          skip_decode=False),
         source="odd sizes: GQA group 3, head dim 80 (masked), block size 24; skip_decode off, so the "
                "one-token sequence is computed here"),
    Case("llama3_8b_b64", dict(seqs=[(1024, 0), (777, 1200), (2048, 0), (301, 3000), (1500, 0), (64, 4000),
                                     (999, 0), (513, 2500)], decodes=(56, 4096, 53), HQ=32, HKV=8, D=128, page=16),
         quick=False, source=LLAMA + "; 8 prefills / chunked prefills and 56 decodes (skipped)"),
    Case("qwen3next_b32_p544", dict(seqs=[(2048, 0), (1000, 3000), (4096, 0), (77, 6000)], decodes=(28, 8192, 211),
                                    HQ=16, HKV=2, D=256, page=544), quick=False, source=QNEXT),
    Case("gptoss_b32_sinks_w128", dict(seqs=[(2048, 0), (300, 1000), (1024, 0), (5, 4000)], decodes=(28, 8192, 250),
                                       HQ=64, HKV=8, D=64, page=16, sinks=True, window=128), quick=False,
         source=GPTOSS + " (the sliding-window layers)"),
    Case("glm4_5_b32", dict(seqs=[(2048, 0), (700, 2100), (3000, 0), (9, 5000)], decodes=(28, 8192, 260), HQ=96,
                            HKV=8, D=128, page=16), quick=False, source=GLM),
    Case("llama4_scout_b32", dict(seqs=[(4096, 0), (1000, 3000), (2500, 0), (40, 7000)], decodes=(28, 8192, 270),
                                  HQ=40, HKV=8, D=128, page=16), quick=False, source=L4),
)

register(KernelSpec(
    name="prefix_prefill_attention", group="attention",
    # every model served on vLLM's Triton attention: none needs softcap or ALiBi, which this kernel lacks
    models=("llama3_1", "mixtral", "qwen3_next", "qwen3_5", "gpt_oss", "glm4_5", "llama4", "gemma3", "nemotron_h",
            "granite4_h", "falcon_h1", "jamba", "minimax", "qwen2_5_vl"),
    cases=_CASES, dtypes=("bf16", "fp16", "fp32"), make_inputs=_make_inputs, run=_run, reference=_reference,
    outputs=("out",), inplace=("out",),
    tolerance={"fp32": Tolerance(atol=2e-5, rtol=1e-4), "bf16": Tolerance(atol=1e-2, rtol=1e-2),
               "fp16": Tolerance(atol=2e-3, rtol=2e-3)},
    description="prefill of a chunked-prefill batch over a paged cache in the x-packed K / transposed V layout: "
                "new tokens attend to their cached prefix through the block table and to themselves causally; "
                "GQA, sliding window, sinks, fp32 online softmax; one-token sequences skipped (rows untouched)",
    triton_kernels=(_prefix_prefill_kernel,),
    upstream="vllm: v1/attention/ops/prefix_prefill.py context_attention_fwd (_fwd_kernel; "
             "attention/ops/prefix_prefill.py in 0.11), the prefill half of chunked_prefill_paged_decode "
             "(ROCm attention backend)",
))
