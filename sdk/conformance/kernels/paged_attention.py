"""Paged attention as a serving stack's Triton attention backend runs it: one kernel for prefill,
chunked prefill and decode over a block table, its split-KV form for decode with a segment
reduction, and the merge of two partial softmax states.

Layouts (NHD, as vLLM keeps them): q, out [T, Hq, D], the batch's query tokens packed along T and
delimited by cu_seqlens_q [B + 1]; k_cache, v_cache [num_blocks, block_size, Hkv, D]; block_table
[B, max_blocks] (int32 page ids); seq_lens [B]: tokens in the cache per sequence, the new ones
included, so sequence b's queries sit at positions seq_len - q_len ... seq_len - 1 (causal).
Options of a launch: sliding window (a query at position i sees keys i - window < j <= i), logit
soft-capping s <- cap * tanh(s / cap) (Gemma-2), attention sinks (gpt-oss: one learned logit per
head that joins the softmax denominator and carries no value), ALiBi (bias slope_h * (j - i)).

A program takes BLOCK_Q query tokens of one sequence times the G = Hq / Hkv query heads sharing a
KV head (BLOCK_M = BLOCK_Q * G rows), so every K/V tile is loaded once per group. Programs are
numbered over all sequences at once: sequence b's query blocks start at cu_seqlens_q[b] // BLOCK_Q + b,
found by a binary search, so one launch covers a batch that mixes prefills and decodes.
Block sizes need not be powers of two: hybrid models page attention in blocks large enough to hold a
mamba / linear-attention state (Qwen3-Next and Qwen3.5: 544 tokens), so the page of every key is looked
up per token.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sdk.conformance.refmath import attention, compute_dtype
from sdk.conformance.spec import Case, KernelSpec, Tolerance, register

LOG2E = tl.constexpr(1.4426950408889634)
_VLLM = "vllm: v1/attention/ops/"


def _prec(x: torch.Tensor) -> str:
    return "ieee" if x.dtype == torch.float32 else "tf32"


def _max_shared_mem(t: torch.Tensor) -> int:
    """Shared memory one program may use on the device that holds `t`, as the active driver reports it."""
    props = triton.runtime.driver.active.utils.get_device_properties(t.device.index or 0)
    return int(props["max_shared_mem"])


# ------------------------------------------------------------------------------- shared device code
@triton.jit
def _tanh(x):
    # the core language has no tanh; 1 - 2 / (e^2x + 1) saturates to +-1 without overflow trouble
    return 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)


@triton.jit
def _find_seq(cu_seqlens_q, pid, num_seqs, BLOCK_Q: tl.constexpr):
    """The sequence whose query blocks hold program `pid`: the last b with
    cu_seqlens_q[b] // BLOCK_Q + b <= pid (those starts increase strictly with b)."""
    lo = 0
    hi = num_seqs
    while lo < hi:
        mid = (lo + hi) // 2
        if tl.load(cu_seqlens_q + mid) // BLOCK_Q + mid <= pid:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


@triton.jit
def _attend(m_i, l_i, acc, q, q_pos, q_ok, slopes, k_cache, v_cache, table_row, kv_head, start, end,
            scale, softcap, window, stride_kb, stride_kt, stride_kh, stride_vb, stride_vt, stride_vh,
            D: tl.constexpr, BD: tl.constexpr, PAGE: tl.constexpr, TILE: tl.constexpr,
            SOFTCAP: tl.constexpr, USE_WINDOW: tl.constexpr, USE_ALIBI: tl.constexpr,
            PREC: tl.constexpr, CAUSAL: tl.constexpr):
    """Online softmax of the rows of `q` over keys start <= j < end of one sequence; m_i (log2
    units), l_i and the unnormalised acc carry the running state in and out. Not CAUSAL: every key
    is visible (cross-attention over an encoder's keys)."""
    offs_d = tl.arange(0, BD)
    d_ok = offs_d < D
    for n0 in range(start, end, TILE):
        offs_n = n0 + tl.arange(0, TILE)
        n_ok = offs_n < end
        page = tl.load(table_row + offs_n // PAGE, mask=n_ok, other=0).to(tl.int64)
        in_page = (offs_n % PAGE).to(tl.int64)
        k = tl.load(k_cache + page[None, :] * stride_kb + in_page[None, :] * stride_kt
                    + kv_head * stride_kh + offs_d[:, None], mask=n_ok[None, :] & d_ok[:, None], other=0.)
        s = tl.dot(q, k, input_precision=PREC) * scale
        if SOFTCAP:
            s = softcap * _tanh(s / softcap)
        ok = q_ok[:, None] & n_ok[None, :]
        if CAUSAL:
            ok = ok & (offs_n[None, :] <= q_pos[:, None])
        if USE_WINDOW:
            ok = ok & (q_pos[:, None] - offs_n[None, :] < window)
        if USE_ALIBI:
            s = s + slopes[:, None] * (offs_n[None, :] - q_pos[:, None]).to(tl.float32)
        s = tl.where(ok, s * LOG2E, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new > float("-inf"), m_new, 0.)      # rows with nothing visible yet
        p = tl.exp2(s - m_use[:, None])
        alpha = tl.exp2(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_cache + page[:, None] * stride_vb + in_page[:, None] * stride_vt
                    + kv_head * stride_vh + offs_d[None, :], mask=n_ok[:, None] & d_ok[None, :], other=0.)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PREC)
        m_i = m_new
    return m_i, l_i, acc


@triton.jit
def _query_block(cu_seqlens_q, seq_lens, pid, num_seqs, window, G: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_Q: tl.constexpr, USE_WINDOW: tl.constexpr, CAUSAL: tl.constexpr):
    """Where program `pid` works: its sequence, first query token, the rows' local query index and
    position, and the keys [kv_start, kv_end) any of its rows may see. q_block < 0: nothing to do."""
    seq = _find_seq(cu_seqlens_q, pid, num_seqs, BLOCK_Q)
    q_start = tl.load(cu_seqlens_q + seq)
    q_len = tl.load(cu_seqlens_q + seq + 1) - q_start
    q_block = pid - (q_start // BLOCK_Q + seq)
    seq_len = tl.load(seq_lens + seq)
    ctx = seq_len - q_len
    rows = tl.arange(0, BLOCK_M)
    q_local = q_block * BLOCK_Q + rows // G
    q_ok = (rows // G < BLOCK_Q) & (q_local < q_len)
    q_pos = ctx + q_local
    kv_end = seq_len
    if CAUSAL:
        kv_end = tl.minimum(ctx + (q_block + 1) * BLOCK_Q, seq_len)   # causal reach of the last row
    kv_start = 0
    if USE_WINDOW:
        kv_start = tl.maximum(ctx + q_block * BLOCK_Q - window + 1, 0)  # reach of the first row
    q_block = tl.where(q_block * BLOCK_Q < q_len, q_block, -1)
    return seq, q_start, q_block, q_local, q_pos, q_ok, kv_start, kv_end


@triton.jit
def _init_state(sinks, head, q_ok, with_sink, BLOCK_M: tl.constexpr, BD: tl.constexpr,
                USE_SINKS: tl.constexpr):
    """The softmax state before any key: empty, or holding the head's sink logit (weight 1 at its
    own maximum) where `with_sink`."""
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    if USE_SINKS:
        sink = tl.load(sinks + head, mask=q_ok, other=0.).to(tl.float32) * LOG2E
        m_i = tl.where(with_sink, sink, m_i)
        l_i = tl.where(with_sink, 1.0, l_i)
    return m_i, l_i, tl.zeros([BLOCK_M, BD], dtype=tl.float32)


# ------------------------------------------------------------------------- unified attention (2D)
@triton.jit
def unified_attention_kernel(q, k_cache, v_cache, out, cu_seqlens_q, seq_lens, block_table, sinks,
                             alibi_slopes, scale, softcap, window, num_seqs,
                             stride_qt, stride_qh, stride_ot, stride_oh, stride_kb, stride_kt, stride_kh,
                             stride_vb, stride_vt, stride_vh, stride_bt,
                             G: tl.constexpr, D: tl.constexpr, BD: tl.constexpr, PAGE: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_Q: tl.constexpr, TILE: tl.constexpr,
                             SOFTCAP: tl.constexpr, USE_WINDOW: tl.constexpr, USE_SINKS: tl.constexpr,
                             USE_ALIBI: tl.constexpr, PREC: tl.constexpr, CAUSAL: tl.constexpr):
    pid, kv_head = tl.program_id(0), tl.program_id(1)
    seq, q_start, q_block, q_local, q_pos, q_ok, kv_start, kv_end = _query_block(
        cu_seqlens_q, seq_lens, pid, num_seqs, window, G, BLOCK_M, BLOCK_Q, USE_WINDOW, CAUSAL)
    if q_block < 0:
        return
    rows = tl.arange(0, BLOCK_M)
    head = kv_head * G + rows % G
    offs_d = tl.arange(0, BD)
    d_ok = offs_d < D
    tok = (q_start + q_local).to(tl.int64)
    io_mask = q_ok[:, None] & d_ok[None, :]
    b_q = tl.load(q + tok[:, None] * stride_qt + head[:, None] * stride_qh + offs_d[None, :], mask=io_mask,
                  other=0.)
    slopes = tl.zeros([BLOCK_M], dtype=tl.float32)
    if USE_ALIBI:
        slopes = tl.load(alibi_slopes + head, mask=q_ok, other=0.)
    m_i, l_i, acc = _init_state(sinks, head, q_ok, True, BLOCK_M, BD, USE_SINKS)
    m_i, l_i, acc = _attend(m_i, l_i, acc, b_q, q_pos, q_ok, slopes, k_cache, v_cache,
                            block_table + seq.to(tl.int64) * stride_bt, kv_head, kv_start, kv_end,
                            scale, softcap, window, stride_kb, stride_kt, stride_kh, stride_vb, stride_vt,
                            stride_vh, D, BD, PAGE, TILE, SOFTCAP, USE_WINDOW, USE_ALIBI, PREC, CAUSAL)
    o = acc / l_i[:, None]
    tl.store(out + tok[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :],
             o.to(out.dtype.element_ty), mask=io_mask)


# ----------------------------------------------------------- split-KV attention (3D) + reduction
@triton.jit
def unified_attention_segments_kernel(q, k_cache, v_cache, segm_acc, segm_max, segm_sum, cu_seqlens_q,
                                      seq_lens, block_table, sinks, alibi_slopes, scale, softcap, window,
                                      num_seqs, stride_qt, stride_qh, stride_kb, stride_kt, stride_kh,
                                      stride_vb, stride_vt, stride_vh, stride_bt,
                                      HQ: tl.constexpr, G: tl.constexpr, D: tl.constexpr,
                                      BD: tl.constexpr, PAGE: tl.constexpr, BLOCK_M: tl.constexpr,
                                      BLOCK_Q: tl.constexpr, TILE: tl.constexpr,
                                      NUM_SEGMENTS: tl.constexpr, SOFTCAP: tl.constexpr,
                                      USE_WINDOW: tl.constexpr, USE_SINKS: tl.constexpr,
                                      USE_ALIBI: tl.constexpr, PREC: tl.constexpr, CAUSAL: tl.constexpr):
    """Segment `seg` of every query row's keys: writes its partial state (max in log2 units, sum of
    exponentials, unnormalised output), empty segments included (max -inf, sum 0)."""
    pid, kv_head, seg = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    seq, q_start, q_block, q_local, q_pos, q_ok, kv_start, kv_end = _query_block(
        cu_seqlens_q, seq_lens, pid, num_seqs, window, G, BLOCK_M, BLOCK_Q, USE_WINDOW, CAUSAL)
    if q_block < 0:
        return
    tiles_per_seg = tl.cdiv(tl.cdiv(kv_end - kv_start, TILE), NUM_SEGMENTS)
    seg_start = kv_start + seg * tiles_per_seg * TILE
    seg_end = tl.minimum(kv_end, seg_start + tiles_per_seg * TILE)
    rows = tl.arange(0, BLOCK_M)
    head = kv_head * G + rows % G
    offs_d = tl.arange(0, BD)
    d_ok = offs_d < D
    tok = (q_start + q_local).to(tl.int64)
    b_q = tl.load(q + tok[:, None] * stride_qt + head[:, None] * stride_qh + offs_d[None, :],
                  mask=q_ok[:, None] & d_ok[None, :], other=0.)
    slopes = tl.zeros([BLOCK_M], dtype=tl.float32)
    if USE_ALIBI:
        slopes = tl.load(alibi_slopes + head, mask=q_ok, other=0.)
    m_i, l_i, acc = _init_state(sinks, head, q_ok, seg == 0, BLOCK_M, BD, USE_SINKS)  # sink: segment 0
    m_i, l_i, acc = _attend(m_i, l_i, acc, b_q, q_pos, q_ok, slopes, k_cache, v_cache,
                            block_table + seq.to(tl.int64) * stride_bt, kv_head, seg_start, seg_end,
                            scale, softcap, window, stride_kb, stride_kt, stride_kh, stride_vb, stride_vt,
                            stride_vh, D, BD, PAGE, TILE, SOFTCAP, USE_WINDOW, USE_ALIBI, PREC, CAUSAL)
    row = (tok * HQ + head) * NUM_SEGMENTS + seg
    tl.store(segm_acc + row[:, None] * D + offs_d[None, :], acc, mask=q_ok[:, None] & d_ok[None, :])
    tl.store(segm_max + row, m_i, mask=q_ok)
    tl.store(segm_sum + row, l_i, mask=q_ok)


@triton.jit
def reduce_segments_kernel(segm_acc, segm_max, segm_sum, out, stride_ot, stride_oh, HQ: tl.constexpr,
                           D: tl.constexpr, BD: tl.constexpr, NUM_SEGMENTS: tl.constexpr,
                           BS: tl.constexpr):
    """out[t, h] from the partial states of its segments, each rescaled to the common maximum."""
    t, h = tl.program_id(0).to(tl.int64), tl.program_id(1)
    segs = tl.arange(0, BS)
    s_ok = segs < NUM_SEGMENTS
    offs_d = tl.arange(0, BD)
    d_ok = offs_d < D
    row = (t * HQ + h) * NUM_SEGMENTS + segs
    m = tl.load(segm_max + row, mask=s_ok, other=float("-inf"))
    m_all = tl.max(m, 0)
    w = tl.exp2(m - tl.where(m_all > float("-inf"), m_all, 0.))       # empty segments weigh 0
    l_all = tl.sum(w * tl.load(segm_sum + row, mask=s_ok, other=0.), 0)
    acc = tl.load(segm_acc + row[:, None] * D + offs_d[None, :], mask=s_ok[:, None] & d_ok[None, :], other=0.)
    o = tl.sum(w[:, None] * acc, 0) / l_all
    tl.store(out + t * stride_ot + h * stride_oh + offs_d, o.to(out.dtype.element_ty), mask=d_ok)


# ------------------------------------------------------------------------------------- launchers
def _features(x: dict) -> dict:
    return dict(SOFTCAP=x["softcap"] > 0, USE_WINDOW=x["window"] > 0, USE_SINKS=x["sinks"] is not None,
                USE_ALIBI=x["alibi_slopes"] is not None, CAUSAL=x.get("causal", True))


def _config(x: dict, block_m: int, tile: int, stages: int) -> dict:
    """TILE, num_stages and num_warps that fit the device's shared memory (queried from the active
    driver, as a serving stack sizes its launches): K and V tiles per pipeline stage, the query block
    and the probabilities; fp32 (no tensor-core path) also stages a K/V operand. A tenth is kept free."""
    D = triton.next_power_of_2(x["q"].shape[2])
    elt = x["q"].element_size()
    budget = _max_shared_mem(x["q"]) * 9 // 10

    def need(tile, stages):
        staged = tile * D * elt if elt > 2 else 0
        return stages * 2 * tile * D * elt + block_m * D * elt + block_m * tile * elt + staged

    while need(tile, stages) > budget and (stages > 1 or tile > 16):
        if stages > 1:
            stages -= 1
        else:
            tile //= 2
    # the fp32 accumulator of BLOCK_M x D rows spread over enough threads to stay in registers
    warps = 8 if block_m * D >= 64 * 256 else 4
    return dict(TILE=tile, num_stages=stages, num_warps=warps)


def _blocks(G: int, max_q_len: int, elt: int) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_Q): 16 rows per program for decode and for fp32, 64 for a batch holding a
    prefill (16-bit: tensor-core tiles)."""
    block_m = max(64 if max_q_len > 1 and elt <= 2 else 16, triton.next_power_of_2(G))
    return block_m, max(1, block_m // G)


def _strides(x: dict) -> dict:
    k, v, q = x["k_cache"], x["v_cache"], x["q"]
    return dict(stride_qt=q.stride(0), stride_qh=q.stride(1), stride_kb=k.stride(0), stride_kt=k.stride(1),
                stride_kh=k.stride(2), stride_vb=v.stride(0), stride_vt=v.stride(1), stride_vh=v.stride(2),
                stride_bt=x["block_table"].stride(0))


def unified_attention(x: dict, max_q_len: int, **config) -> None:
    """Launch as a serving stack would for a mixed batch: one program per (query block, KV head)."""
    q, out = x["q"], x["out"]
    T, HQ, D = q.shape
    _, PAGE, HKV, _ = x["k_cache"].shape
    G = HQ // HKV
    B = x["seq_lens"].shape[0]
    block_m, block_q = _blocks(G, max_q_len, q.element_size())
    wide = max_q_len > 1 and q.element_size() <= 2    # fp32 tiles of 32 keys spill registers
    cfg = {**_config(x, block_m, 32 if wide else 16, 2), **config}
    unified_attention_kernel[(T // block_q + B, HKV)](
        q, x["k_cache"], x["v_cache"], out, x["cu_seqlens_q"], x["seq_lens"], x["block_table"], x["sinks"],
        x["alibi_slopes"], x["scale"], x["softcap"], x["window"], B, stride_ot=out.stride(0),
        stride_oh=out.stride(1), **_strides(x), G=G, D=D, BD=triton.next_power_of_2(D), PAGE=PAGE,
        BLOCK_M=block_m, BLOCK_Q=block_q, PREC=_prec(q), **_features(x), **cfg)


def unified_attention_split_kv(x: dict, max_q_len: int, num_segments: int = 16, **config) -> None:
    """Split-KV launch for decode: every query row's keys in `num_segments` segments, one program
    per (query block, KV head, segment), then one program per (token, head) merges the segments."""
    q, out = x["q"], x["out"]
    T, HQ, D = q.shape
    _, PAGE, HKV, _ = x["k_cache"].shape
    G = HQ // HKV
    B = x["seq_lens"].shape[0]
    BD = triton.next_power_of_2(D)
    block_m, block_q = _blocks(G, 1, q.element_size())          # decode tiles, also for a few
    cfg = {**_config(x, block_m, 16, 2), **config}               # speculative tokens
    segm_acc = torch.empty((T, HQ, num_segments, D), dtype=torch.float32, device=q.device)
    segm_max = torch.empty((T, HQ, num_segments), dtype=torch.float32, device=q.device)
    segm_sum = torch.empty((T, HQ, num_segments), dtype=torch.float32, device=q.device)
    unified_attention_segments_kernel[(T // block_q + B, HKV, num_segments)](
        q, x["k_cache"], x["v_cache"], segm_acc, segm_max, segm_sum, x["cu_seqlens_q"], x["seq_lens"],
        x["block_table"], x["sinks"], x["alibi_slopes"], x["scale"], x["softcap"], x["window"], B,
        **_strides(x), HQ=HQ, G=G, D=D, BD=BD, PAGE=PAGE, BLOCK_M=block_m, BLOCK_Q=block_q,
        NUM_SEGMENTS=num_segments, PREC=_prec(q), **_features(x), **cfg)
    reduce_segments_kernel[(T, HQ)](
        segm_acc, segm_max, segm_sum, out, out.stride(0), out.stride(1), HQ=HQ, D=D, BD=BD,
        NUM_SEGMENTS=num_segments, BS=triton.next_power_of_2(num_segments), num_warps=4)


# ---------------------------------------------------------------------------------- inputs, reference
def _alibi_slopes(n_heads: int) -> torch.Tensor:
    """ALiBi's geometric slopes 2^(-8 i / n) for a power-of-two head count, interleaved otherwise."""
    def geometric(n):
        return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]
    p = 1 << (n_heads.bit_length() - 1)
    s = geometric(p)
    if p < n_heads:
        s += geometric(2 * p)[0::2][:n_heads - p]
    return torch.tensor(s, dtype=torch.float32)


def _block_table(seq_lens: list[int], page: int, gen: torch.Generator) -> tuple[torch.Tensor, int]:
    """Each sequence's pages drawn at random from a pool with a few pages nobody owns; unused
    entries 0, as a serving stack leaves them."""
    pages = [triton.cdiv(n, page) for n in seq_lens]
    num_blocks = sum(pages) + 3
    perm = torch.randperm(num_blocks, generator=gen)
    table = torch.zeros((len(seq_lens), max(pages)), dtype=torch.int32)
    used = 0
    for b, n in enumerate(pages):
        table[b, :n] = perm[used:used + n].to(torch.int32)
        used += n
    return table, num_blocks


def _lens(p) -> tuple[list[int], list[int]]:
    """(q_lens, seq_lens) of a case: listed, or `prefills` [(new, cached), ...] followed by
    `decodes` (count, first context, step): one query each over contexts first, first - step, ..."""
    if "q_lens" in p:
        return list(p["q_lens"]), list(p["seq_lens"])
    prefills = p.get("prefills", ())
    n, ctx0, step = p.get("decodes", (0, 0, 0))
    return ([q for q, _ in prefills] + [1] * n,
            [q + c for q, c in prefills] + [max(1, ctx0 - step * i) for i in range(n)])


def _make_inputs(case, dtype, device, gen):
    p = case.params
    q_lens, seq_lens = _lens(p)
    HQ, HKV, D, PAGE = p["HQ"], p["HKV"], p["D"], p["page"]
    T = sum(q_lens)
    table, num_blocks = _block_table(seq_lens, PAGE, gen)
    x = dict(q=torch.randn((T, HQ, D), generator=gen) * p.get("q_scale", 1.0),
             k_cache=torch.randn((num_blocks, PAGE, HKV, D), generator=gen),
             v_cache=torch.randn((num_blocks, PAGE, HKV, D), generator=gen))
    x = {n: t.to(device=device, dtype=dtype) for n, t in x.items()}
    x["cu_seqlens_q"] = torch.tensor([0] + q_lens, dtype=torch.int32).cumsum(0).to(torch.int32).to(device)
    x["seq_lens"] = torch.tensor(seq_lens, dtype=torch.int32, device=device)
    x["block_table"] = table.to(device)
    x["sinks"] = ((torch.randn((HQ,), generator=gen) * 2.0 + 1.0).to(device)
                  if p.get("sinks") else None)
    x["alibi_slopes"] = _alibi_slopes(HQ).to(device) if p.get("alibi") else None
    x["scale"] = p.get("scale", D ** -0.5)
    x["softcap"] = float(p.get("softcap", 0.0))
    x["window"] = int(p.get("window", 0))
    x["causal"] = not p.get("cross", False)  # cross-attention: the decoder's queries over its encoder's keys
    x["out"] = torch.empty((T, HQ, D), dtype=dtype, device=device)
    return x


def _reference(x, case):
    """Dense attention per sequence over the pages the block table names (sdk.conformance.refmath:
    blocked, fp64 for fp32 data, fp32 for 16-bit data)."""
    q = x["q"]
    T, HQ, D = q.shape
    _, PAGE, HKV, _ = x["k_cache"].shape
    dt = compute_dtype(q)
    out = torch.empty((T, HQ, D), dtype=dt, device=q.device)
    cu = x["cu_seqlens_q"].tolist()
    for b, L in enumerate(x["seq_lens"].tolist()):
        pages = x["block_table"][b, :triton.cdiv(L, PAGE)].long()
        k = x["k_cache"][pages].reshape(-1, HKV, D)[:L]
        v = x["v_cache"][pages].reshape(-1, HKV, D)[:L]
        a, e = cu[b], cu[b + 1]
        out[a:e] = attention(q[a:e], k, v, x["scale"], q_pos=L - (e - a) + torch.arange(e - a, device=q.device),
                             causal=x["causal"], window=x["window"], sinks=x["sinks"], softcap=x["softcap"],
                             alibi_slopes=x["alibi_slopes"], dtype=dt)
    return {"out": out}


def _run_unified(x, case, **config):
    unified_attention(x, max(_lens(case.params)[0]), **config)


def _run_split(x, case, **config):
    unified_attention_split_kv(x, max(_lens(case.params)[0]), **config)


def _mixed(n_decode: int, prefills: list[tuple[int, int]], ctx0: int, step: int) -> dict:
    return dict(prefills=prefills, decodes=(n_decode, ctx0, step))


LLAMA = "Llama-3.1-8B: 32 q / 8 kv heads x 128"
QNEXT = ("Qwen3-Next-80B-A3B: 16 q / 2 kv heads x 256; block size 544 = vLLM's hybrid alignment "
         "(GDN state 8192 x 3 + 32 x 128 x 128 bf16 over 2 x 2 x 256 x 2 bytes per token, rounded to 16)")
GPTOSS = "gpt-oss-120b / 20b: 64 q / 8 kv heads x 64, a sink logit per head, sliding window 128"
GEMMA = "Gemma-2-9B: 16 q / 8 kv heads x 256, attn_logit_softcapping 50, sliding_window 4096"
ALIBI = "MPT-7B / BLOOM-7B1 style ALiBi: 32 heads x 128, slopes 2^(-8 i / H)"
GLM = "GLM-4.5: 96 q / 8 kv heads x 128 (GQA group 12: 64-row blocks of 5 tokens)"
L4 = "Llama-4 Scout: 40 q / 8 kv heads x 128 (GQA group 5)"
WHISPER = ("Whisper-large-v3's decoder cross-attention: 20 heads x 64 over its encoder's 1500 frames, kept in "
           "the paged cache (causal=False, as vLLM's Triton backend runs ENCODER_DECODER layers)")

_UNIFIED_CASES = (
    Case("llama_mixed_h8x2_d128_p16", dict(q_lens=[1, 29, 13], seq_lens=[38, 29, 63], HQ=8, HKV=2, D=128,
                                           page=16),
         source=LLAMA + "; heads /4; a decode, a prefill and a chunked prefill, block size 16"),
    Case("qwen3next_h8x1_d256_p544", dict(q_lens=[1, 21], seq_lens=[600, 21], HQ=8, HKV=1, D=256,
                                          page=544),
         source=QNEXT + "; heads /2; a decode across two pages"),
    Case("gptoss_sinks_w128_h8x1_d64", dict(q_lens=[1, 150], seq_lens=[203, 170], HQ=8, HKV=1, D=64,
                                            page=16, sinks=True, window=128),
         source=GPTOSS + "; heads /8; queries past the window"),
    Case("gemma2_softcap50_w40_h4x2_d256", dict(q_lens=[1, 33], seq_lens=[70, 53], HQ=4, HKV=2, D=256,
                                                page=16, softcap=50.0, window=40, q_scale=40.0,
                                                scale=256 ** -0.5),
         source=GEMMA + "; heads /4, window scaled to 40; q scaled so logits reach the cap"),
    Case("odd_alibi_h6x2_d80_p24", dict(q_lens=[1, 17], seq_lens=[50, 30], HQ=6, HKV=2, D=80, page=24,
                                        alibi=True),
         source="odd sizes: GQA group 3 (16-row blocks of 5 tokens), head dim 80, block size 24; "
                "with ALiBi slopes for 6 heads (" + ALIBI + ")"),
    Case("whisper_cross_h4_d64", dict(q_lens=[6, 1, 1], seq_lens=[150, 150, 120], HQ=4, HKV=4, D=64, page=16,
                                      cross=True),
         source=WHISPER + "; heads /5, frames /10; a 6-token decoder prompt and two decode steps"),
    Case("llama3_8b_mixed_b64", dict(**_mixed(56, [(1024, 0), (777, 1200), (2048, 0), (301, 3000),
                                                   (1500, 0), (64, 4000), (999, 0), (513, 2500)], 4096, 53),
                                     HQ=32, HKV=8, D=128, page=16), quick=False,
         source=LLAMA + "; 8 prefills / chunked prefills and 56 decodes up to 4096, block size 16"),
    Case("qwen3next_mixed_b32_p544", dict(**_mixed(28, [(2048, 0), (1000, 3000), (4096, 0), (77, 6000)],
                                                   8192, 211), HQ=16, HKV=2, D=256, page=544), quick=False,
         source=QNEXT),
    Case("gptoss_mixed_b32_sinks_w128", dict(**_mixed(28, [(2048, 0), (300, 1000), (1024, 0), (5, 4000)],
                                                      8192, 250), HQ=64, HKV=8, D=64, page=16, sinks=True,
                                             window=128), quick=False,
         source=GPTOSS + " (the sliding-window layers)"),
    Case("alibi_mpt7b_mixed_b16", dict(**_mixed(12, [(2048, 0), (500, 1500), (1000, 0), (33, 3000)], 4096, 300),
                                       HQ=32, HKV=32, D=128, page=16, alibi=True), quick=False, source=ALIBI),
    Case("glm4_5_mixed_b32", dict(**_mixed(28, [(2048, 0), (700, 2100), (3000, 0), (9, 5000)], 8192, 260),
                                  HQ=96, HKV=8, D=128, page=16), quick=False, source=GLM),
    Case("llama4_scout_mixed_b32", dict(**_mixed(28, [(4096, 0), (1000, 3000), (2500, 0), (40, 7000)],
                                                 8192, 270), HQ=40, HKV=8, D=128, page=16),
         quick=False, source=L4),
    Case("gemma2_mixed_b16_softcap50_w4096", dict(**_mixed(12, [(2048, 0), (1024, 5000), (3000, 2000),
                                                                 (16, 8000)], 8192, 350),
                                                  HQ=16, HKV=8, D=256, page=16, softcap=50.0, window=4096,
                                                  q_scale=40.0, scale=256 ** -0.5), quick=False,
         source=GEMMA + " (query_pre_attn_scalar 256); contexts past the window"),
    Case("whisper_large_v3_cross_b16", dict(q_lens=[32] * 4 + [1] * 12, seq_lens=[1500] * 16, HQ=20, HKV=20, D=64,
                                            page=16, cross=True), quick=False,
         source=WHISPER + "; four 32-token decoder prompts and twelve decode steps"),
)

_ATT_TOL = {"fp32": Tolerance(atol=2e-5, rtol=1e-4), "bf16": Tolerance(atol=1e-2, rtol=1e-2),
            "fp16": Tolerance(atol=2e-3, rtol=2e-3)}
_MODELS = ("llama3_1", "mixtral", "qwen3_next", "qwen3_5", "gpt_oss", "glm4_5", "llama4", "gemma3", "nemotron_h",
           "granite4_h", "falcon_h1", "jamba", "minimax", "qwen2_5_vl")

register(KernelSpec(
    name="unified_attention", group="attention", models=_MODELS, cases=_UNIFIED_CASES,
    dtypes=("bf16", "fp32"), make_inputs=_make_inputs, run=_run_unified, reference=_reference,
    outputs=("out",), tolerance=_ATT_TOL,
    description="paged attention for a batch mixing prefill, chunked prefill and decode in one launch: "
                "varlen queries, block table, GQA, sliding window, logit softcap, sinks, ALiBi; "
                "non-causal for an encoder-decoder's cross-attention",
    triton_kernels=(unified_attention_kernel,),
    upstream=_VLLM + "triton_unified_attention.py kernel_unified_attention (_2d in 0.11)"))


def _decode_batch(n: int, ctx0: int, step: int) -> dict:
    return dict(decodes=(n, ctx0, step))


register(KernelSpec(
    name="unified_attention_split_kv", group="attention", models=_MODELS,
    cases=(
        Case("llama_decode_h8x2_d128_p16", dict(q_lens=[1, 1, 1], seq_lens=[1, 77, 260], HQ=8, HKV=2, D=128,
                                                page=16),
             source=LLAMA + "; heads /4; contexts 1, 77, 260 over 16 segments, block size 16"),
        Case("gptoss_decode_sinks_w128_p544", dict(q_lens=[1, 1], seq_lens=[300, 90], HQ=8, HKV=1, D=64,
                                                   page=544, sinks=True, window=128),
             source=GPTOSS + "; heads /8; sink in segment 0 only, block size 544 (hybrid page)"),
        Case("gemma2_spec3_softcap50_w40", dict(q_lens=[3, 1], seq_lens=[90, 41], HQ=4, HKV=2, D=256, page=16,
                                                softcap=50.0, window=40, q_scale=40.0, scale=256 ** -0.5),
             source=GEMMA + "; heads /4, window 40; 3 speculative tokens"),
        Case("whisper_cross_decode", dict(q_lens=[1, 1], seq_lens=[150, 77], HQ=4, HKV=4, D=64, page=16, cross=True),
             source=WHISPER + "; heads /5, frames /10; two decode steps"),
        Case("llama3_8b_decode_b16", dict(**_decode_batch(16, 8192, 401), HQ=32, HKV=8, D=128, page=16),
             quick=False, source=LLAMA + "; 16 decodes, contexts up to 8192"),
        Case("qwen3next_decode_b8_p544", dict(**_decode_batch(8, 16384, 1777), HQ=16, HKV=2, D=256, page=544),
             quick=False, source=QNEXT),
        Case("gptoss_decode_b16_sinks_w128", dict(**_decode_batch(16, 8192, 500), HQ=64, HKV=8, D=64,
                                                  page=16, sinks=True, window=128), quick=False,
             source=GPTOSS),
        Case("glm4_5_decode_b16", dict(**_decode_batch(16, 8192, 450), HQ=96, HKV=8, D=128, page=16),
             quick=False, source=GLM),
        Case("gemma2_decode_b8_softcap50_w4096", dict(**_decode_batch(8, 8192, 700), HQ=16, HKV=8, D=256,
                                                      page=16, softcap=50.0, window=4096, q_scale=40.0,
                                                      scale=256 ** -0.5), quick=False, source=GEMMA),
    ),
    dtypes=("bf16", "fp32"), make_inputs=_make_inputs, run=_run_split, reference=_reference,
    outputs=("out",), tolerance=_ATT_TOL,
    description="split-KV decode: each query row's keys in 16 segments, partial (max, sum, output) per "
                "segment, then a reduction; sinks join segment 0",
    triton_kernels=(unified_attention_segments_kernel, reduce_segments_kernel),
    upstream=_VLLM + "triton_unified_attention.py kernel_unified_attention_3d + reduce_segments"))


# -------------------------------------------------------------------------------- merge_attn_states
@triton.jit
def merge_attn_states_kernel(out, out_lse, p_out, p_lse, s_out, s_lse, num_tokens, stride_t, stride_h,
                             D: tl.constexpr, BD: tl.constexpr, OUTPUT_LSE: tl.constexpr):
    """out = the attention over the union of two key sets, from each set's normalised output and
    log-sum-exp (natural log, layout [H, T]); an lse of +inf marks an empty set, as -inf does."""
    t, h = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    pl = tl.load(p_lse + h * num_tokens + t)
    sl = tl.load(s_lse + h * num_tokens + t)
    pl = tl.where(pl == float("inf"), float("-inf"), pl)
    sl = tl.where(sl == float("inf"), float("-inf"), sl)
    m = tl.maximum(pl, sl)
    m_use = tl.where(m > float("-inf"), m, 0.)
    pw = tl.exp2((pl - m_use) * LOG2E)
    sw = tl.exp2((sl - m_use) * LOG2E)
    tot = pw + sw
    inv = tl.where(tot > 0, 1.0 / tot, 0.)
    offs_d = tl.arange(0, BD)
    d_ok = offs_d < D
    off = t * stride_t + h * stride_h + offs_d
    po = tl.load(p_out + off, mask=d_ok, other=0.).to(tl.float32)
    so = tl.load(s_out + off, mask=d_ok, other=0.).to(tl.float32)
    o = tl.where(pw > 0, po * (pw * inv), 0.) + tl.where(sw > 0, so * (sw * inv), 0.)
    tl.store(out + off, o.to(out.dtype.element_ty), mask=d_ok)
    if OUTPUT_LSE:
        tl.store(out_lse + h * num_tokens + t, tl.log2(tot) / LOG2E + m)


def _make_merge(case, dtype, device, gen):
    p = case.params
    T, H, D = p["tokens"], p["heads"], p["D"]
    x = dict(prefix_output=torch.randn((T, H, D), generator=gen).to(device=device, dtype=dtype),
             suffix_output=torch.randn((T, H, D), generator=gen).to(device=device, dtype=dtype))
    pl = torch.randn((H, T), generator=gen) * 3.0 + 5.0
    sl = torch.randn((H, T), generator=gen) * 3.0 + 5.0
    # tokens with an empty prefix (lse +inf or -inf, as attention kernels report it) or empty suffix
    for i in range(0, T, 7):
        pl[:, i] = float("inf") if i % 2 else float("-inf")
    for i in range(3, T, 11):
        sl[:, i] = float("-inf")
    x["prefix_lse"], x["suffix_lse"] = pl.to(device), sl.to(device)
    x["output"] = torch.empty((T, H, D), dtype=dtype, device=device)
    x["output_lse"] = torch.empty((H, T), dtype=torch.float32, device=device)
    return x


def merge_attn_states(x: dict) -> None:
    o = x["output"]
    T, H, D = o.shape
    merge_attn_states_kernel[(T, H)](o, x["output_lse"], x["prefix_output"], x["prefix_lse"],
                                     x["suffix_output"], x["suffix_lse"], T, o.stride(0), o.stride(1), D=D,
                                     BD=triton.next_power_of_2(D), OUTPUT_LSE=True, num_warps=1)


def _ref_merge(x, case):
    """The log-sum-exp and the weights in fp64 (the lse is judged tightly); the weighted outputs in
    fp64 for fp32 data, fp32 for 16-bit data (sdk.conformance.refmath), a block of tokens at a time."""
    pl = x["prefix_lse"].double().clone()
    sl = x["suffix_lse"].double().clone()
    pl[pl == float("inf")] = float("-inf")
    sl[sl == float("inf")] = float("-inf")
    lse = torch.logaddexp(pl, sl)                                  # [H, T]
    dt = compute_dtype(x["prefix_output"])
    wp = torch.exp(pl - lse).nan_to_num(0.0).T[:, :, None].to(dt)  # [T, H, 1]
    ws = torch.exp(sl - lse).nan_to_num(0.0).T[:, :, None].to(dt)
    po, so = x["prefix_output"], x["suffix_output"]
    out = torch.empty(po.shape, dtype=dt, device=po.device)
    step = max(1, (1 << 20) // max(1, po[0].numel()))             # ~1 M elements per block
    for a in range(0, po.shape[0], step):
        b = a + step
        torch.add(po[a:b].to(dt) * wp[a:b], so[a:b].to(dt) * ws[a:b], out=out[a:b])
    return {"output": out, "output_lse": lse}


register(KernelSpec(
    name="merge_attn_states", group="attention", models=("deepseek_v3", "kimi_k2"),
    cases=(Case("deepseek_v3_t37_h16_d128", dict(tokens=37, heads=16, D=128), True,
                "DeepSeek-V3 MLA prefill: 128 heads (16 per GPU at TP 8) x v_head_dim 128; "
                "context-chunk and new-token states, some empty"),
           Case("odd_t13_h3_d100", dict(tokens=13, heads=3, D=100), True, "odd sizes: masked head dim"),
           Case("deepseek_v3_t8192_h128_d128", dict(tokens=8192, heads=128, D=128), False,
                "DeepSeek-V3: 128 heads x 128, an 8192-token chunked prefill")),
    dtypes=("bf16", "fp16", "fp32"), make_inputs=_make_merge, run=lambda x, case, **cfg: merge_attn_states(x),
    reference=_ref_merge, outputs=("output", "output_lse"),
    tolerance={"fp32": Tolerance(atol=1e-5, rtol=1e-5), "bf16": Tolerance(atol=1e-2, rtol=1e-2),
               "fp16": Tolerance(atol=2e-3, rtol=2e-3)},
    output_tolerance={"output_lse": Tolerance(atol=1e-5, rtol=1e-6)},
    description="merges two partial attention results by their log-sum-exp (chunked-prefill context "
                "and new tokens), writing the merged output and lse",
    triton_kernels=(merge_attn_states_kernel,),
    upstream=_VLLM + "triton_merge_attn_states.py merge_attn_states_kernel"))
