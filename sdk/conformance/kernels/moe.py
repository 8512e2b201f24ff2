"""Mixture-of-experts pipeline: routing, token alignment, the grouped expert GEMM, and the top-k sum.

Qwen3-Next: 512 experts, top-10, renormalised softmax routing, moe_intermediate 512, hidden 2048.
Mixtral-8x7B: 8 experts, top-2, intermediate 14336, hidden 4096.
The align / GEMM / sum kernels are routing-agnostic and also serve DeepSeek-V3 (256 experts, top-8).

Conventions shared by the kernels (as fused-MoE serving code keeps them): a (token, slot) pair is
identified by its flat index token * top_k + slot into topk_ids; `sorted_token_ids` lists those
indices grouped by expert, each expert's run padded to a multiple of BLOCK_M with the sentinel
T * top_k; `expert_ids[b]` is the expert of block b (-1 past the last used block).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sdk.conformance.refmath import compute_dtype
from sdk.conformance.inputs import distinct_choices, distinct_logits
from sdk.conformance.spec import Case, KernelSpec, Tolerance, register

_EXACT = Tolerance(exact=True)


def _routing(T: int, E: int, k: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """topk ids [T, k] int32 (distinct experts per token) and renormalised fp32 weights."""
    ids = distinct_choices(T, E, k, gen).to(torch.int32)
    w = torch.rand((T, k), generator=gen) + 0.1
    return ids, (w / w.sum(1, keepdim=True)).float()


def _align_ref(topk_ids: torch.Tensor, E: int, block_m: int):
    """Plain definition of the alignment: stable sort of flat pairs by expert, runs padded to BLOCK_M."""
    flat = topk_ids.flatten().long().cpu()
    numel = flat.numel()
    max_padded = numel + E * (block_m - 1)
    sorted_ids = torch.full((max_padded,), numel, dtype=torch.int32)
    expert_ids = torch.full((triton.cdiv(max_padded, block_m),), -1, dtype=torch.int32)
    pos = 0
    for e in range(E):
        members = torch.nonzero(flat == e).flatten()
        n = members.numel()
        sorted_ids[pos:pos + n] = members.to(torch.int32)
        padded = triton.cdiv(n, block_m) * block_m
        expert_ids[pos // block_m:(pos + padded) // block_m] = e
        pos += padded
    return sorted_ids, expert_ids, torch.tensor([pos], dtype=torch.int32)


# ------------------------------------------------------------------------------ moe_topk_softmax
@triton.jit
def _topk_softmax_kernel(logits_ptr, weights_ptr, ids_ptr, n_experts, stride_l,
                         TOPK: tl.constexpr, RENORM: tl.constexpr, BLOCK_E: tl.constexpr,
                         BLOCK_K: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    e = tl.arange(0, BLOCK_E)
    x = tl.load(logits_ptr + row * stride_l + e, mask=e < n_experts, other=float("-inf")).to(tl.float32)
    p = tl.exp(x - tl.max(x, axis=0))
    p = p / tl.sum(p, axis=0)
    kk = tl.arange(0, BLOCK_K)
    top_w = tl.zeros((BLOCK_K,), dtype=tl.float32)
    top_i = tl.zeros((BLOCK_K,), dtype=tl.int32)
    for j in tl.static_range(TOPK):
        best = tl.max(p, axis=0)
        idx = tl.min(tl.where(p == best, e, BLOCK_E), axis=0)  # lowest index among equals
        top_w = tl.where(kk == j, best, top_w)
        top_i = tl.where(kk == j, idx, top_i)
        p = tl.where(e == idx, -1.0, p)
    if RENORM:
        top_w = top_w / tl.sum(tl.where(kk < TOPK, top_w, 0.0), axis=0)
    tl.store(weights_ptr + row * TOPK + kk, top_w, mask=kk < TOPK)
    tl.store(ids_ptr + row * TOPK + kk, top_i, mask=kk < TOPK)


def _topk_inputs(case, dtype, device, gen):
    p = case.params
    T, E, k = p["tokens"], p["experts"], p["topk"]
    return {"logits": distinct_logits(T, E, gen).to(dtype).to(device),
            "topk_weights": torch.empty((T, k), dtype=torch.float32, device=device),
            "topk_ids": torch.empty((T, k), dtype=torch.int32, device=device)}


def _topk_config(E: int) -> dict:
    """Warps per row (overridable by keyword)."""
    return dict(num_warps=4 if triton.next_power_of_2(E) >= 512 else 1)


def _topk_run(inp, case, **config):
    logits = inp["logits"]
    T, E = logits.shape
    k = case.params["topk"]
    _topk_softmax_kernel[(T,)](logits, inp["topk_weights"], inp["topk_ids"], E, logits.stride(0),
                               TOPK=k, RENORM=bool(case.params["renormalize"]),
                               BLOCK_E=triton.next_power_of_2(E), BLOCK_K=triton.next_power_of_2(k),
                               **{**_topk_config(E), **config})


def _topk_ref(inp, case):
    probs = torch.softmax(inp["logits"].double().cpu(), dim=-1)
    w, ids = torch.topk(probs, case.params["topk"], dim=-1)
    if case.params["renormalize"]:
        w = w / w.sum(-1, keepdim=True)
    return {"topk_weights": w, "topk_ids": ids.to(torch.int32)}


register(KernelSpec(
    name="moe_topk_softmax", group="moe",
    models=("qwen3_5", "qwen3_next", "mixtral", "gpt_oss", "granite4_h", "jamba", "minimax"),
    cases=(
        Case("odd_T37_E60_k4", {"tokens": 37, "experts": 60, "topk": 4, "renormalize": True},
             source="odd expert count (Qwen1.5-MoE-like 60 experts)"),
        Case("mixtral_T16_E8_k2", {"tokens": 16, "experts": 8, "topk": 2, "renormalize": True},
             source="Mixtral-8x7B: 8 experts, top-2"),
        Case("qwen2_moe_T19_E60_k4_softmax_weights", {"tokens": 19, "experts": 60, "topk": 4,
                                                      "renormalize": False},
             source="Qwen1.5/Qwen2-MoE: 60 experts, top-4, norm_topk_prob false (softmax weights as they are)"),
        Case("qwen3_next_T8_E512_k10", {"tokens": 8, "experts": 512, "topk": 10, "renormalize": True},
             source="Qwen3-Next: 512 experts, top-10, norm_topk_prob"),
        Case("qwen3_next_T8192_E512_k10", {"tokens": 8192, "experts": 512, "topk": 10, "renormalize": True},
             quick=False, source="Qwen3-Next-80B-A3B routing for an 8192-token prefill"),
    ),
    dtypes=("bf16", "fp32"),
    make_inputs=_topk_inputs, run=_topk_run, reference=_topk_ref,
    outputs=("topk_weights", "topk_ids"),
    tolerance={"bf16": Tolerance(atol=1e-6, rtol=2e-5), "fp32": Tolerance(atol=1e-6, rtol=2e-5)},
    output_tolerance={"topk_ids": _EXACT},
    description="router softmax, top-k selection (descending) and renormalisation; tie-free logits, ids exact",
    triton_kernels=(_topk_softmax_kernel,),
    upstream="C++ op in vLLM (ops.topk_softmax, called from fused_moe/router/fused_topk_router.py)",
))


# -------------------------------------------------------------------------- moe_align_block_size
@triton.jit
def _align_count_kernel(ids_ptr, counts_ptr, numel, n_experts, CHUNK: tl.constexpr, BLOCK_E: tl.constexpr):
    # counts[pid, e] = how many of this program's CHUNK pairs go to expert e
    pid = tl.program_id(0)
    i = pid * CHUNK + tl.arange(0, CHUNK)
    ids = tl.load(ids_ptr + i, mask=i < numel, other=-1)
    e = tl.arange(0, BLOCK_E)
    hits = (ids[:, None] == e[None, :]).to(tl.int32)
    tl.store(counts_ptr + pid * n_experts + e, tl.sum(hits, axis=0), mask=e < n_experts)


@triton.jit
def _align_prefix_kernel(counts_ptr, totals_ptr, n_progs, n_experts, PB: tl.constexpr, EB: tl.constexpr):
    # counts[p, e] becomes the exclusive prefix over programs p; totals[e] the expert's pair count
    e = tl.program_id(0) * EB + tl.arange(0, EB)
    emask = e < n_experts
    running = tl.zeros((EB,), dtype=tl.int32)
    for p0 in range(0, n_progs, PB):
        p = p0 + tl.arange(0, PB)
        m = (p < n_progs)[:, None] & emask[None, :]
        offs = p[:, None] * n_experts + e[None, :]
        c = tl.load(counts_ptr + offs, mask=m, other=0)
        tl.store(counts_ptr + offs, tl.cumsum(c, axis=0) - c + running[None, :], mask=m)
        running += tl.sum(c, axis=0)
    tl.store(totals_ptr + e, running, mask=emask)


@triton.jit
def _align_starts_kernel(totals_ptr, expert_start_ptr, total_ptr, n_experts,
                         BLOCK_SIZE_M: tl.constexpr, BLOCK_E: tl.constexpr):
    # one program: each expert's run padded to BLOCK_SIZE_M; starts in row 0, ends in row 1
    e = tl.arange(0, BLOCK_E)
    emask = e < n_experts
    n = tl.load(totals_ptr + e, mask=emask, other=0)
    padded = (n + BLOCK_SIZE_M - 1) // BLOCK_SIZE_M * BLOCK_SIZE_M
    ends = tl.cumsum(padded, axis=0)
    tl.store(expert_start_ptr + e, ends - padded, mask=emask)
    tl.store(expert_start_ptr + n_experts + e, ends, mask=emask)
    tl.store(total_ptr, tl.sum(padded, axis=0))


@triton.jit
def _align_fill_kernel(sorted_ptr, expert_ids_ptr, expert_start_ptr, total_ptr, numel, n_experts, n_blocks,
                       max_padded,
                       BLOCK_SIZE_M: tl.constexpr, BLOCKS: tl.constexpr, BLOCK_E: tl.constexpr):
    # expert of each block (-1 past the end) and the padding sentinel everywhere in sorted ids
    b = tl.program_id(0) * BLOCKS + tl.arange(0, BLOCKS)
    bmask = b < n_blocks
    e = tl.arange(0, BLOCK_E)
    ends = tl.load(expert_start_ptr + n_experts + e, mask=e < n_experts, other=2147483647)
    expert = tl.sum((ends[None, :] <= (b * BLOCK_SIZE_M)[:, None]).to(tl.int32), axis=1)
    total = tl.load(total_ptr)
    expert = tl.where(b * BLOCK_SIZE_M < total, expert, -1)
    tl.store(expert_ids_ptr + b, expert, mask=bmask)
    r = tl.arange(0, BLOCK_SIZE_M)
    fill = tl.full((BLOCKS, BLOCK_SIZE_M), 0, tl.int32) + numel
    slots = b[:, None] * BLOCK_SIZE_M + r[None, :]
    tl.store(sorted_ptr + slots, fill, mask=slots < max_padded)


@triton.jit
def _align_scatter_kernel(ids_ptr, counts_ptr, expert_start_ptr, sorted_ptr, numel, n_experts,
                          CHUNK: tl.constexpr):
    pid = tl.program_id(0)
    local = tl.arange(0, CHUNK)
    i = pid * CHUNK + local
    mask = i < numel
    ids = tl.load(ids_ptr + i, mask=mask, other=-1)
    # rank among this chunk's earlier pairs with the same expert keeps the order stable
    earlier = (ids[None, :] == ids[:, None]) & (local[None, :] < local[:, None])
    rank = tl.sum(earlier.to(tl.int32), axis=1)
    safe = tl.where(mask, ids, 0)
    base = tl.load(expert_start_ptr + safe, mask=mask, other=0)
    prior = tl.load(counts_ptr + pid * n_experts + safe, mask=mask, other=0)
    tl.store(sorted_ptr + base + prior + rank, i, mask=mask)


def _align_inputs(case, dtype, device, gen):
    p = case.params
    T, E, k, bm = p["tokens"], p["experts"], p["topk"], p["block_m"]
    ids, _ = _routing(T, E, k, gen)
    numel = T * k
    max_padded = numel + E * (bm - 1)
    return {"topk_ids": ids.to(device),
            "sorted_token_ids": torch.empty((max_padded,), dtype=torch.int32, device=device),
            "expert_ids": torch.empty((triton.cdiv(max_padded, bm),), dtype=torch.int32, device=device),
            "num_tokens_post_padded": torch.empty((1,), dtype=torch.int32, device=device)}


def _align_run(inp, case):
    ids = inp["topk_ids"]
    E, bm = case.params["experts"], case.params["block_m"]
    numel = ids.numel()
    block_e = triton.next_power_of_2(E)
    # each counting program compares CHUNK ids against every expert: keep that tile near 16K elements
    chunk = min(max(16, 16384 // block_e), 256, triton.next_power_of_2(numel))
    n_progs = triton.cdiv(numel, chunk)
    counts = torch.empty((n_progs, E), dtype=torch.int32, device=ids.device)
    totals = torch.empty((E,), dtype=torch.int32, device=ids.device)
    starts = torch.empty((2, E), dtype=torch.int32, device=ids.device)
    sorted_ids, expert_ids, total = inp["sorted_token_ids"], inp["expert_ids"], inp["num_tokens_post_padded"]
    _align_count_kernel[(n_progs,)](ids, counts, numel, E, CHUNK=chunk, BLOCK_E=block_e, num_warps=4)
    eb = min(32, block_e)
    _align_prefix_kernel[(triton.cdiv(E, eb),)](counts, totals, n_progs, E, PB=64, EB=eb, num_warps=4)
    _align_starts_kernel[(1,)](totals, starts, total, E, BLOCK_SIZE_M=bm, BLOCK_E=block_e, num_warps=4)
    n_blocks = expert_ids.numel()
    blocks = 16
    _align_fill_kernel[(triton.cdiv(n_blocks, blocks),)](sorted_ids, expert_ids, starts, total, numel, E,
                                                         n_blocks, sorted_ids.numel(), BLOCK_SIZE_M=bm, BLOCKS=blocks,
                                                         BLOCK_E=block_e, num_warps=4)
    _align_scatter_kernel[(n_progs,)](ids, counts, starts, sorted_ids, numel, E, CHUNK=chunk, num_warps=4)


def _align_reference(inp, case):
    s, e, n = _align_ref(inp["topk_ids"], case.params["experts"], case.params["block_m"])
    return {"sorted_token_ids": s, "expert_ids": e, "num_tokens_post_padded": n}


register(KernelSpec(
    name="moe_align_block_size", group="moe",
    models=("qwen3_5", "qwen3_next", "mixtral", "deepseek_v3", "kimi_k2", "glm4_5", "gpt_oss", "llama4", "granite4_h",
            "jamba", "minimax"),
    cases=(
        Case("odd_T37_E60_k4_bm16", {"tokens": 37, "experts": 60, "topk": 4, "block_m": 16},
             source="odd expert count, many empty experts"),
        Case("mixtral_T300_E8_k2_bm64", {"tokens": 300, "experts": 8, "topk": 2, "block_m": 64},
             source="Mixtral-8x7B 8 experts top-2, several counting programs"),
        Case("qwen3_next_T40_E512_k10_bm16", {"tokens": 40, "experts": 512, "topk": 10, "block_m": 16},
             source="Qwen3-Next 512 experts top-10, decode-sized batch"),
        Case("qwen3_next_T8192_E512_k10_bm64", {"tokens": 8192, "experts": 512, "topk": 10, "block_m": 64},
             quick=False, source="Qwen3-Next-80B-A3B: 8192-token prefill, 512 experts top-10"),
        Case("deepseek_v3_T4096_E256_k8_bm64", {"tokens": 4096, "experts": 256, "topk": 8, "block_m": 64},
             quick=False, source="DeepSeek-V3: 256 routed experts top-8"),
    ),
    dtypes=("int32",),
    make_inputs=_align_inputs, run=_align_run, reference=_align_reference,
    outputs=("sorted_token_ids", "expert_ids", "num_tokens_post_padded"),
    tolerance={"int32": _EXACT},
    description="group (token, slot) pairs by expert in stable order, pad each run to BLOCK_M; five launches",
    triton_kernels=(_align_count_kernel, _align_prefix_kernel, _align_starts_kernel, _align_fill_kernel,
                    _align_scatter_kernel),
    upstream="C++ op in vLLM (ops.moe_align_block_size, called from fused_moe/moe_align_block_size.py)",
))


# -------------------------------------------------------------------------------- moe_fused_gemm
@triton.jit
def _fused_moe_kernel(a_ptr, b_ptr, c_ptr, topk_w_ptr, sorted_ptr, expert_ids_ptr, total_ptr,
                      N, K, num_valid, stride_am, stride_be, stride_bn, stride_cm,
                      TOP_K: tl.constexpr, MUL_ROUTED_WEIGHT: tl.constexpr, DOT_PRECISION: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr):
    # C[pair, :] = A[pair // TOP_K, :] @ W[expert]^T  (times the pair's routing weight)
    pid = tl.program_id(0)
    n_pid_n = tl.cdiv(N, BLOCK_N)
    n_pid_m = tl.num_programs(0) // n_pid_n
    group = pid // (GROUP_M * n_pid_n)
    first_m = group * GROUP_M
    group_size = tl.minimum(n_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % (GROUP_M * n_pid_n)) % group_size
    pid_n = (pid % (GROUP_M * n_pid_n)) // group_size
    if pid_m * BLOCK_M >= tl.load(total_ptr):
        return
    pairs = tl.load(sorted_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    pmask = pairs < num_valid
    expert = tl.load(expert_ids_ptr + pid_m).to(tl.int64)
    rows = (pairs // TOP_K).to(tl.int64)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows[:, None] * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + expert * stride_be + offs_n[None, :].to(tl.int64) * stride_bn + offs_k[:, None]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kmask = offs_k < K - k0
        a = tl.load(a_ptrs, mask=pmask[:, None] & kmask[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=kmask[:, None] & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    if MUL_ROUTED_WEIGHT:
        w = tl.load(topk_w_ptr + pairs, mask=pmask, other=0.0).to(tl.float32)
        acc = acc * w[:, None]
    c_ptrs = c_ptr + pairs.to(tl.int64)[:, None] * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=pmask[:, None] & (offs_n[None, :] < N))


def _gemm_inputs(case, dtype, device, gen):
    p = case.params
    T, E, k, N, K, bm = p["tokens"], p["experts"], p["topk"], p["n"], p["k"], p["block_m"]
    ids, weights = _routing(T, E, k, gen)
    sorted_ids, expert_ids, total = _align_ref(ids, E, bm)
    if p["down"]:
        # down projection: one activation row per (token, slot) pair, weighted on the way out
        a = torch.randn((T * k, K), generator=gen)
    else:
        a = torch.randn((T, K), generator=gen)
    w = torch.randn((E, N, K), generator=gen).div_(K ** 0.5)  # in place: full-size experts are GBs
    return {"a": a.to(dtype).to(device), "w": w.to(dtype).to(device), "topk_ids": ids.to(device),
            "topk_weights": weights.to(device), "sorted_token_ids": sorted_ids.to(device),
            "expert_ids": expert_ids.to(device), "num_tokens_post_padded": total.to(device),
            "out": torch.empty((T, k, N), dtype=dtype, device=device)}


def _gemm_config(N: int, dtype: torch.dtype) -> dict:
    """Tile sizes (overridable by keyword); BLOCK_M is the alignment block the inputs were sorted by."""
    return dict(BLOCK_N=64 if N <= 256 else 128, BLOCK_K=64 if dtype != torch.float32 else 32,
                GROUP_M=8, num_warps=4, num_stages=3)


def _gemm_run(inp, case, **config):
    p = case.params
    a, w, out = inp["a"], inp["w"], inp["out"]
    E, N, K = w.shape
    cfg = {**_gemm_config(N, a.dtype), **config}
    n_blocks = inp["expert_ids"].numel()
    grid = (n_blocks * triton.cdiv(N, cfg["BLOCK_N"]),)
    _fused_moe_kernel[grid](
        a, w, out, inp["topk_weights"], inp["sorted_token_ids"], inp["expert_ids"],
        inp["num_tokens_post_padded"], N, K, inp["topk_ids"].numel(), a.stride(0), w.stride(0), w.stride(1),
        N, TOP_K=1 if p["down"] else p["topk"], MUL_ROUTED_WEIGHT=bool(p["down"]),
        DOT_PRECISION="ieee" if a.dtype == torch.float32 else "tf32", BLOCK_M=p["block_m"], **cfg)


def _gemm_ref(inp, case):
    p = case.params
    T, k = inp["topk_ids"].shape
    dt = compute_dtype(inp["a"])  # fp32 for 16-bit data, fp64 for fp32 data (sdk.conformance.refmath)
    a, w = inp["a"].to(dt), inp["w"]
    flat = inp["topk_ids"].flatten().long()
    rows = a.view(T * k, -1) if p["down"] else a.repeat_interleave(k, dim=0)
    out = torch.empty((T * k, w.shape[1]), dtype=dt, device=a.device)
    for e in flat.unique().tolist():
        sel = flat == e
        out[sel] = rows[sel] @ w[e].to(dt).T
    if p["down"]:
        out = out * inp["topk_weights"].to(dt).flatten()[:, None]
    return {"out": out.view(T, k, -1)}


_QN = {"experts": 512, "topk": 10}
register(KernelSpec(
    name="moe_fused_gemm", group="moe",
    models=("qwen3_5", "qwen3_next", "mixtral", "deepseek_v3", "glm4_5", "llama4", "granite4_h", "jamba", "minimax"),
    cases=(
        Case("odd_T37_E8_k2_gateup_N96_K80", {"tokens": 37, "experts": 8, "topk": 2, "n": 96, "k": 80,
                                             "block_m": 16, "down": False},
             source="odd N and K: masked tiles; gate/up projection"),
        Case("qwen3_next_T8_E64_k10_down_N128_K64", {"tokens": 8, "experts": 64, "topk": 10, "n": 128, "k": 64,
                                                     "block_m": 16, "down": True},
             source="Qwen3-Next top-10 down projection with routed weights, widths scaled /16 / /8"),
        Case("qwen3_next_T4096_gateup_N1024_K2048", {"tokens": 4096, **_QN, "n": 1024, "k": 2048,
                                                     "block_m": 64, "down": False}, quick=False,
             source="Qwen3-Next-80B-A3B gate/up: hidden 2048 -> 2 x moe_intermediate 512"),
        Case("qwen3_next_T4096_down_N2048_K512", {"tokens": 4096, **_QN, "n": 2048, "k": 512,
                                                  "block_m": 64, "down": True}, quick=False,
             source="Qwen3-Next-80B-A3B down: moe_intermediate 512 -> hidden 2048, routed weights"),
        Case("mixtral_T2048_gateup_N28672_K4096", {"tokens": 2048, "experts": 8, "topk": 2, "n": 28672,
                                                   "k": 4096, "block_m": 64, "down": False}, quick=False,
             source="Mixtral-8x7B gate/up: hidden 4096 -> 2 x 14336"),
    ),
    dtypes=("bf16", "fp32"),
    make_inputs=_gemm_inputs, run=_gemm_run, reference=_gemm_ref,
    outputs=("out",),
    tolerance={"bf16": Tolerance(atol=2e-2, rtol=1e-2), "fp32": Tolerance(atol=1e-4, rtol=1e-4)},
    description="grouped expert GEMM over BLOCK_M-aligned token runs (gate/up, or down with routed weights)",
    triton_kernels=(_fused_moe_kernel,),
    upstream="vllm: model_executor/layers/fused_moe/fused_moe.py fused_moe_kernel "
             "(invoke_fused_moe_triton_kernel, fused_experts)",
))


# ---------------------------------------------------------------------------------------- moe_sum
@triton.jit
def _moe_sum_kernel(x_ptr, w_ptr, out_ptr, H, stride_xt, stride_xk, stride_ot,
                    TOPK: tl.constexpr, WEIGHTED: tl.constexpr, BLOCK_H: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask = cols < H
    acc = tl.zeros((BLOCK_H,), dtype=tl.float32)
    for j in tl.static_range(TOPK):
        x = tl.load(x_ptr + t * stride_xt + j * stride_xk + cols, mask=mask, other=0.0).to(tl.float32)
        if WEIGHTED:
            x = x * tl.load(w_ptr + t * TOPK + j)
        acc += x
    tl.store(out_ptr + t * stride_ot + cols, acc.to(out_ptr.dtype.element_ty), mask=mask)


def _sum_inputs(case, dtype, device, gen):
    p = case.params
    T, k, H = p["tokens"], p["topk"], p["hidden"]
    _, weights = _routing(T, max(k, 8), k, gen)
    return {"x": torch.randn((T, k, H), generator=gen).to(dtype).to(device), "topk_weights": weights.to(device),
            "out": torch.empty((T, H), dtype=dtype, device=device)}


def _sum_run(inp, case):
    x, out = inp["x"], inp["out"]
    T, k, H = x.shape
    block = min(1024, triton.next_power_of_2(H))
    _moe_sum_kernel[(T, triton.cdiv(H, block))](x, inp["topk_weights"], out, H, x.stride(0), x.stride(1),
                                                out.stride(0), TOPK=k, WEIGHTED=bool(case.params["weighted"]),
                                                BLOCK_H=block, num_warps=4)


def _sum_ref(inp, case):
    x = inp["x"].double().cpu()
    if case.params["weighted"]:
        x = x * inp["topk_weights"].double().cpu()[:, :, None]
    return {"out": x.sum(1)}


register(KernelSpec(
    name="moe_sum", group="moe",
    models=("qwen3_5", "qwen3_next", "mixtral", "deepseek_v3", "kimi_k2", "glm4_5", "gpt_oss", "llama4", "granite4_h",
            "jamba", "minimax"),
    cases=(
        Case("odd_T37_k3_H1000_weighted", {"tokens": 37, "topk": 3, "hidden": 1000, "weighted": True},
             source="odd hidden size, routing weights applied here"),
        Case("qwen3_next_T16_k10_H2048", {"tokens": 16, "topk": 10, "hidden": 2048, "weighted": False},
             source="Qwen3-Next top-10, hidden 2048 (weights already applied in the down GEMM)"),
        Case("qwen3_next_T8192_k10_H2048", {"tokens": 8192, "topk": 10, "hidden": 2048, "weighted": False},
             quick=False, source="Qwen3-Next-80B-A3B: 8192 tokens x top-10 x hidden 2048"),
        Case("deepseek_v3_T4096_k8_H7168", {"tokens": 4096, "topk": 8, "hidden": 7168, "weighted": True},
             quick=False, source="DeepSeek-V3: top-8, hidden 7168"),
    ),
    dtypes=("bf16", "fp32"),
    make_inputs=_sum_inputs, run=_sum_run, reference=_sum_ref,
    outputs=("out",),
    tolerance={"bf16": Tolerance(atol=2e-2, rtol=1e-2), "fp32": Tolerance(atol=1e-5, rtol=1.3e-5)},
    description="reduce the top-k expert outputs of each token [T, k, H] -> [T, H], optionally weighted",
    triton_kernels=(_moe_sum_kernel,),
    upstream="C++ op in vLLM (ops.moe_sum, called from fused_moe/fused_moe.py fused_experts)",
))
