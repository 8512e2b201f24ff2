"""Multi-LoRA serving: vLLM's punica Triton kernels, shrink (x A^T) and expand (y += h B^T).

A batch's tokens may each use a different adapter. token_lora_mapping [M] gives each token's LoRA
slot (-1: none); the metadata a serving stack builds from it once per step: the token indices sorted
by slot (stable), active_lora_ids [max_loras + 1] (the distinct slots in increasing order, -1 first
when some tokens have none, padded with -1), num_tokens_per_lora (their counts, 0 for padding) and
lora_token_start_loc [max_loras + 2] (exclusive prefix sums, starting at 0). One program takes
BLOCK_M of one LoRA's tokens (gathered through the sorted indices) times a BLOCK_N slice of one
output slice (q / k / v of a fused QKV projection, gate / up of the MLP); programs of padding entries
and of id -1 exit at once. Slices live in separate tensors, reached through a table of pointers.

lora_shrink: out[s, m, :] = scaling * x[m, :] @ A_s[lora(m)]^T for tokens with a LoRA, 0 for the rest;
  x [M, hidden] bf16 / fp16, A_s [max_loras, rank, hidden] in the same dtype, out [S, M, rank] fp32,
  zeroed by the launcher. The hidden dimension is split SPLIT_K ways (partial sums added atomically)
  when there are few tokens; tiles follow vLLM's default configuration.
lora_expand: y[m, o_s + n] (+)= h[s, m, :] @ B_s[lora(m)]^T for tokens with a LoRA, other rows
  untouched; h [S, M, rank] fp32 (shrink's output, rounded to the weights' dtype for the tensor-core
  product), B_s [max_loras, N_s, rank] (slices may differ in N: GQA's q, k, v), y [M, sum N_s] in the
  model dtype with slice s starting at column o_s; add_inputs adds onto y (the base layer's output)
  rather than overwriting it.
Reference: fp64 products of the same (rounded) inputs; ranks 8 to 64, up to 4 adapters at once.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sdk.conformance.spec import Case, KernelSpec, Tolerance, register

_MODELS = ("llama3_1", "qwen3_next", "qwen3_5")
_UP = "vllm: lora/ops/triton_ops/"
LLAMA = "Llama-3.1-8B: hidden 4096, q 4096 / k 1024 / v 1024 (32 / 8 heads x 128), intermediate 14336"
QNEXT = ("Qwen3-Next-80B-A3B / Qwen3.5 full-attention layers: hidden 2048, q 8192 (16 heads x 256 with "
         "the output gate) / k 512 / v 512")


# ------------------------------------------------------------------------------ shared device code
@triton.jit
def _lora_tile(lora_ids, num_tokens_per_lora, lora_token_start_loc, sorted_token_ids, lora_idx, pid_m,
               BLOCK_M: tl.constexpr):
    """The LoRA slot program (lora_idx, pid_m) serves (-1: nothing to do), its token rows and which of
    the BLOCK_M lanes are real."""
    lora_id = tl.load(lora_ids + lora_idx)
    m_size = tl.load(num_tokens_per_lora + lora_idx)
    m0 = pid_m * BLOCK_M
    lora_id = tl.where(m0 < m_size, lora_id, -1)
    lanes = tl.arange(0, BLOCK_M)
    m_ok = lanes < m_size - m0
    first = tl.load(lora_token_start_loc + lora_idx) + m0
    rows = tl.load(sorted_token_ids + first + lanes, mask=m_ok & (lora_id >= 0), other=0)
    return lora_id, rows.to(tl.int64), m_ok


# ------------------------------------------------------------------------------------------ shrink
@triton.jit
def _lora_shrink_kernel(x_ptr, a_ptr, out_ptr, M, N, K, sorted_token_ids, num_tokens_per_lora,
                        lora_token_start_loc, lora_ids, scaling, stride_xm, stride_xk, stride_al, stride_an,
                        stride_ak, stride_os, stride_om, stride_on,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        SPLIT_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_SLICES: tl.constexpr,
                        EVEN_K: tl.constexpr):
    pid = tl.program_id(0)
    pid_sk = pid % SPLIT_K
    pid_mn = pid // SPLIT_K
    # grouped ordering: GROUP_M row blocks share each column block (their A tiles stay in cache)
    n_blocks = tl.cdiv(N, BLOCK_N)
    m_blocks = tl.cdiv(M, BLOCK_M)
    group = pid_mn // (GROUP_M * n_blocks)
    first_m = group * GROUP_M
    group_m = min(m_blocks - first_m, GROUP_M)
    pid_m = first_m + (pid_mn % (GROUP_M * n_blocks)) % group_m
    pid_n = (pid_mn % (GROUP_M * n_blocks)) // group_m
    slice_id = tl.program_id(1)
    lora_id, rows, m_ok = _lora_tile(lora_ids, num_tokens_per_lora, lora_token_start_loc, sorted_token_ids,
                                     tl.program_id(2), pid_m, BLOCK_M)
    if lora_id < 0:
        return
    if NUM_SLICES == 1:
        a_base = a_ptr
    else:  # one weight tensor per slice, addresses in a table
        a_base = tl.load(a_ptr + slice_id).to(tl.pointer_type(x_ptr.dtype.element_ty))
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = offs_n % N  # wrapped columns are computed and never stored: no mask on the weight loads
    offs_k = pid_sk * BLOCK_K + tl.arange(0, BLOCK_K)
    xs = x_ptr + rows[:, None] * stride_xm + offs_k[None, :] * stride_xk
    ws = a_base + lora_id.to(tl.int64) * stride_al + cols[None, :] * stride_an + offs_k[:, None] * stride_ak
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    STEP: tl.constexpr = BLOCK_K * SPLIT_K
    for k0 in range(0, tl.cdiv(K, STEP)):
        if EVEN_K:
            w = tl.load(ws)
            x = tl.load(xs)
        else:
            k_ok = k0 * STEP + offs_k < K
            w = tl.load(ws, mask=k_ok[:, None], other=0.0)
            x = tl.load(xs, mask=k_ok[None, :], other=0.0)
        acc += tl.dot(x, w)
        xs += STEP * stride_xk
        ws += STEP * stride_ak
    acc *= scaling
    c = out_ptr + slice_id.to(tl.int64) * stride_os + rows[:, None] * stride_om + offs_n[None, :] * stride_on
    c_mask = m_ok[:, None] & (offs_n[None, :] < N)
    if SPLIT_K == 1:
        tl.store(c, acc, mask=c_mask)
    else:
        tl.atomic_add(c, acc, mask=c_mask, sem="relaxed")


def _pointer_table(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.tensor([t.data_ptr() for t in tensors], dtype=torch.int64, device=tensors[0].device)


def shrink_config(M: int, K: int) -> dict:
    """vLLM's default shrink tiles (few tokens: 256-deep K tiles split 64 ways, else 32-deep split 8),
    with the split capped at the K tiles there are."""
    block_k, split_k = (256, 64) if M < 128 else (32, 8)
    return dict(BLOCK_M=32, BLOCK_N=16, BLOCK_K=block_k, SPLIT_K=max(1, min(split_k, triton.cdiv(K, block_k))),
                GROUP_M=8, num_warps=4, num_stages=2)


def lora_shrink(x, lora_a_weights, out, token_indices_sorted_by_lora_ids, num_tokens_per_lora,
                lora_token_start_loc, active_lora_ids, scaling: float, **config) -> None:
    """out [S, M, rank] fp32 = scaling * x @ A^T per token's LoRA (0 for tokens without one)."""
    M, K = x.shape
    N = lora_a_weights[0].shape[1]
    S = len(lora_a_weights)
    cfg = {**shrink_config(M, K), **config}
    out.zero_()
    a = lora_a_weights[0] if S == 1 else _pointer_table(lora_a_weights)
    w0 = lora_a_weights[0]
    grid = (cfg["SPLIT_K"] * triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]), S,
            active_lora_ids.shape[0])
    _lora_shrink_kernel[grid](x, a, out, M, N, K, token_indices_sorted_by_lora_ids, num_tokens_per_lora,
                              lora_token_start_loc, active_lora_ids, scaling, x.stride(0), x.stride(1),
                              w0.stride(0), w0.stride(1), w0.stride(2), out.stride(0), out.stride(1), out.stride(2),
                              NUM_SLICES=S, EVEN_K=K % (cfg["BLOCK_K"] * cfg["SPLIT_K"]) == 0, **cfg)


# ------------------------------------------------------------------------------------------ expand
@triton.jit
def _lora_expand_kernel(h_ptr, b_ptr, y_ptr, M, MAX_N, K, sorted_token_ids, num_tokens_per_lora,
                        lora_token_start_loc, lora_ids, slice_start, stride_hs, stride_hm, stride_hk,
                        stride_bl, stride_bn, stride_bk, stride_ym, stride_yn, slice_n,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        EVEN_K: tl.constexpr, ADD_INPUTS: tl.constexpr, CAST_TYPE: tl.constexpr,
                        NUM_SLICES: tl.constexpr, SAME_STRIDE: tl.constexpr):
    pid = tl.program_id(0)
    m_blocks = tl.cdiv(M, BLOCK_M)
    pid_m = pid % m_blocks
    pid_n = pid // m_blocks
    slice_id = tl.program_id(1)
    lora_id, rows, m_ok = _lora_tile(lora_ids, num_tokens_per_lora, lora_token_start_loc, sorted_token_ids,
                                     tl.program_id(2), pid_m, BLOCK_M)
    if lora_id < 0:
        return
    # this slice's width, weight strides and first output column: scalars when all slices agree
    if SAME_STRIDE:
        N = MAX_N
        s_l = stride_bl
        s_n = stride_bn
        s_k = stride_bk
    else:
        N = tl.load(slice_n + slice_id)
        s_l = tl.load(stride_bl + slice_id)
        s_n = tl.load(stride_bn + slice_id)
        s_k = tl.load(stride_bk + slice_id)
    if pid_n * BLOCK_N >= N:
        return
    if NUM_SLICES == 1:
        b_base = b_ptr
        col0 = slice_start
    else:
        b_base = tl.load(b_ptr + slice_id).to(tl.pointer_type(y_ptr.dtype.element_ty))
        col0 = tl.load(slice_start + slice_id)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = offs_n % N
    offs_k = tl.arange(0, BLOCK_K)
    hs = h_ptr + slice_id * stride_hs + rows[:, None] * stride_hm + offs_k[None, :] * stride_hk
    bs = b_base + lora_id.to(tl.int64) * s_l + cols[None, :] * s_n + offs_k[:, None] * s_k
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            w = tl.load(bs)
            h = tl.load(hs)
        else:
            k_ok = k0 * BLOCK_K + offs_k < K
            w = tl.load(bs, mask=k_ok[:, None], other=0.0)
            h = tl.load(hs, mask=k_ok[None, :], other=0.0)
        if CAST_TYPE:
            h = h.to(w.dtype)
        acc += tl.dot(h, w)
        hs += BLOCK_K * stride_hk
        bs += BLOCK_K * s_k
    c = acc.to(y_ptr.dtype.element_ty)
    ys = y_ptr + rows[:, None] * stride_ym + (col0 + offs_n)[None, :] * stride_yn
    y_mask = m_ok[:, None] & (offs_n[None, :] < N)
    if ADD_INPUTS:
        c += tl.load(ys, mask=y_mask)
    tl.store(ys, c, mask=y_mask)


def expand_config(num_slices: int, rank: int) -> dict:
    """vLLM's default expand tiles: 64 rows, 64 columns (128 for a single slice), K tiles of up to 32."""
    return dict(BLOCK_M=64, BLOCK_N=64 if num_slices > 1 else 128,
                BLOCK_K=max(16, min(32, triton.next_power_of_2(rank))), num_warps=4, num_stages=2)


def lora_expand(h, lora_b_weights, y, token_indices_sorted_by_lora_ids, num_tokens_per_lora, lora_token_start_loc,
                active_lora_ids, offset_start: int = 0, add_inputs: bool = True, **config) -> None:
    """y[:, offset_start + o_s : ... + N_s] (+)= h[s] @ B_s^T per token's LoRA; rows without one untouched."""
    S, M, K = h.shape
    dev = h.device
    widths = [w.shape[1] for w in lora_b_weights]
    starts = [offset_start + sum(widths[:i]) for i in range(S)]
    strides = [w.stride() for w in lora_b_weights]
    same = len(set(strides)) == 1
    cfg = {**expand_config(S, K), **config}
    if S == 1:
        b, start = lora_b_weights[0], starts[0]
    else:
        b, start = _pointer_table(lora_b_weights), torch.tensor(starts, dtype=torch.int64, device=dev)
    if same:
        sl, sn, sk = strides[0]
        n_sizes = None
    else:
        sl, sn, sk = (torch.tensor([s[i] for s in strides], dtype=torch.int64, device=dev) for i in range(3))
        n_sizes = torch.tensor(widths, dtype=torch.int32, device=dev)
    max_n = max(widths)
    grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(max_n, cfg["BLOCK_N"]), S, active_lora_ids.shape[0])
    _lora_expand_kernel[grid](h, b, y, M, max_n, K, token_indices_sorted_by_lora_ids, num_tokens_per_lora,
                              lora_token_start_loc, active_lora_ids, start, h.stride(0), h.stride(1), h.stride(2),
                              sl, sn, sk, y.stride(0), y.stride(1), n_sizes,
                              EVEN_K=K % cfg["BLOCK_K"] == 0, ADD_INPUTS=add_inputs,
                              CAST_TYPE=h.dtype != lora_b_weights[0].dtype, NUM_SLICES=S, SAME_STRIDE=same, **cfg)


# ------------------------------------------------------------------------------ inputs, reference
def lora_metadata(mapping: torch.Tensor, max_loras: int) -> dict:
    """The per-step metadata a serving stack builds from token_lora_mapping (host-side torch)."""
    order = torch.sort(mapping, stable=True).indices.to(torch.int32)
    ids, counts = torch.unique(mapping, sorted=True, return_counts=True)
    active = torch.full((max_loras + 1,), -1, dtype=torch.int32)
    per = torch.zeros((max_loras + 1,), dtype=torch.int32)
    active[:ids.numel()] = ids.to(torch.int32)
    per[:ids.numel()] = counts.to(torch.int32)
    start = torch.zeros((max_loras + 2,), dtype=torch.int32)
    start[1:ids.numel() + 1] = torch.cumsum(counts, 0).to(torch.int32)
    return {"token_indices_sorted_by_lora_ids": order, "num_tokens_per_lora": per, "lora_token_start_loc": start,
            "active_lora_ids": active}


def _mapping(p: dict, gen: torch.Generator) -> torch.Tensor:
    """Each token's LoRA slot: `used` of the max_loras slots in use (requests of a few tokens each
    sharing an adapter), a fraction `base` of the tokens on the base model (-1)."""
    M, L = p["tokens"], p["max_loras"]
    used = torch.randperm(L, generator=gen)[:p.get("used", L)]
    mapping = torch.empty((M,), dtype=torch.int64)
    t = 0
    while t < M:  # requests: consecutive runs of tokens with one adapter (or none)
        run = int(torch.randint(1, max(2, M // 6), (1,), generator=gen))
        none = float(torch.rand((1,), generator=gen)) < p.get("base", 0.2)
        mapping[t:t + run] = -1 if none else int(used[int(torch.randint(0, used.numel(), (1,), generator=gen))])
        t += run
    return mapping


def _meta_inputs(p, gen, device) -> dict:
    mapping = _mapping(p, gen)
    meta = lora_metadata(mapping, p["max_loras"])
    return {"token_lora_mapping": mapping.to(device), **{k: v.to(device) for k, v in meta.items()}}


def _shrink_inputs(case, dtype, device, gen):
    p = case.params
    M, K, R, L, S = p["tokens"], p["hidden"], p["rank"], p["max_loras"], p["slices"]
    x = {"x": torch.randn((M, K), generator=gen).to(dtype),
         "lora_a": [(torch.randn((L, R, K), generator=gen) * K ** -0.5).to(dtype) for _ in range(S)],
         "out": torch.empty((S, M, R), dtype=torch.float32)}
    x = {k: ([t.to(device) for t in v] if isinstance(v, list) else v.to(device)) for k, v in x.items()}
    return {**x, **_meta_inputs(p, gen, device)}


def _shrink_run(x, case, **config):
    lora_shrink(x["x"], x["lora_a"], x["out"], x["token_indices_sorted_by_lora_ids"], x["num_tokens_per_lora"],
                x["lora_token_start_loc"], x["active_lora_ids"], case.params["scaling"], **config)


def _shrink_ref(x, case):
    mapping = x["token_lora_mapping"].cpu()
    xs = x["x"].cpu().double()
    out = torch.zeros(x["out"].shape, dtype=torch.float64)
    for s, a in enumerate(x["lora_a"]):
        for lora in mapping.unique().tolist():
            if lora >= 0:
                rows = mapping == lora
                out[s, rows] = xs[rows] @ a[lora].cpu().double().T * case.params["scaling"]
    return {"out": out}


_SHRINK_TOL = {"bf16": Tolerance(atol=1e-4, rtol=1e-4), "fp16": Tolerance(atol=1e-4, rtol=1e-4)}

register(KernelSpec(
    name="lora_shrink", group="lora", models=_MODELS,
    cases=(
        Case("qkv_m37_h512_r16_l4", {"tokens": 37, "hidden": 512, "rank": 16, "max_loras": 4, "slices": 3,
                                     "scaling": 0.5},
             source="fused QKV (3 slices), 37 tokens over 4 adapters and the base model; hidden scaled to 512 "
                    "(" + LLAMA + ")"),
        Case("odd_m20_h200_r8_l2", {"tokens": 20, "hidden": 200, "rank": 8, "max_loras": 2, "slices": 1,
                                    "scaling": 1.0, "base": 0.0},
             source="odd hidden 200 (masked K tail), rank 8 below the 16-wide column tile, every token with an "
                    "adapter (no -1 entry)"),
        Case("many_m160_h256_r64_l3", {"tokens": 160, "hidden": 256, "rank": 64, "max_loras": 3, "slices": 2,
                                       "scaling": 0.25},
             source="160 tokens (the 32-deep, split-8 configuration), rank 64, gate / up (2 slices)"),
        Case("llama3_1_qkv_decode_m64_r16", {"tokens": 64, "hidden": 4096, "rank": 16, "max_loras": 4, "slices": 3,
                                             "scaling": 1.0}, quick=False,
             source=LLAMA + "; 64 decode tokens over 4 adapters, max_lora_rank 16"),
        Case("llama3_1_gate_up_prefill_m2048_r64", {"tokens": 2048, "hidden": 4096, "rank": 64, "max_loras": 4,
                                                    "slices": 2, "scaling": 1.0}, quick=False,
             source=LLAMA + "; a 2048-token prefill step, rank 64"),
        Case("qwen3_next_qkv_m256_r32", {"tokens": 256, "hidden": 2048, "rank": 32, "max_loras": 8, "slices": 3,
                                         "scaling": 1.0}, quick=False, source=QNEXT + "; 256 tokens, 8 adapters"),
    ),
    dtypes=("bf16", "fp16"),
    make_inputs=_shrink_inputs, run=_shrink_run, reference=_shrink_ref,
    outputs=("out",), tolerance=_SHRINK_TOL,
    description="LoRA A projection per token's adapter over tokens sorted by adapter: gathered rows, a pointer "
                "table of slices, split-K with atomic fp32 adds, tokens without an adapter left at 0",
    triton_kernels=(_lora_shrink_kernel,),
    upstream=_UP + "lora_shrink_op.py _lora_shrink (_lora_shrink_kernel, kernel_utils.do_shrink_kernel, mm_k)",
))


def _expand_inputs(case, dtype, device, gen):
    p = case.params
    M, R, L, widths = p["tokens"], p["rank"], p["max_loras"], p["widths"]
    S = len(widths)
    x = {"h": torch.randn((S, M, R), generator=gen),                           # shrink's fp32 output
         "lora_b": [(torch.randn((L, n, R), generator=gen) * R ** -0.5).to(dtype) for n in widths],
         "y": torch.randn((M, p.get("offset", 0) + sum(widths) + p.get("tail", 0)), generator=gen).to(dtype)}
    x = {k: ([t.to(device) for t in v] if isinstance(v, list) else v.to(device)) for k, v in x.items()}
    return {**x, **_meta_inputs(p, gen, device)}


def _expand_run(x, case, **config):
    lora_expand(x["h"], x["lora_b"], x["y"], x["token_indices_sorted_by_lora_ids"], x["num_tokens_per_lora"],
                x["lora_token_start_loc"], x["active_lora_ids"], offset_start=case.params.get("offset", 0),
                add_inputs=case.params["add"], **config)


def _expand_ref(x, case):
    p = case.params
    mapping = x["token_lora_mapping"].cpu()
    y = x["y"].cpu().double().clone()
    col = p.get("offset", 0)
    for s, b in enumerate(x["lora_b"]):
        n = b.shape[1]
        for lora in mapping.unique().tolist():
            if lora >= 0:
                rows = mapping == lora
                delta = x["h"][s].cpu().double()[rows] @ b[lora].cpu().double().T
                y[rows, col:col + n] = y[rows, col:col + n] + delta if p["add"] else delta
        col += n
    return {"y": y}


register(KernelSpec(
    name="lora_expand", group="lora", models=_MODELS,
    cases=(
        Case("qkv_gqa_m37_r16_l4", {"tokens": 37, "rank": 16, "max_loras": 4, "widths": (256, 64, 64), "add": True},
             source="fused QKV with GQA widths (q 4x k, v), add onto the base output; widths scaled /16 "
                    "(" + LLAMA + ")"),
        Case("gate_up_m150_r8_l3", {"tokens": 150, "rank": 8, "max_loras": 3, "used": 2, "widths": (200, 200),
                                    "add": True},
             source="gate / up (2 equal slices, one stride), rank 8 (masked 16-deep K tile), odd width 200; two "
                    "adapters in use, each over more than one 64-row block"),
        Case("single_offset_m29_r64_overwrite", {"tokens": 29, "rank": 64, "max_loras": 2, "widths": (300,),
                                                 "add": False, "offset": 40, "tail": 24},
             source="one slice written at a column offset without adding (add_inputs False), rank 64"),
        Case("llama3_1_qkv_decode_m64_r16", {"tokens": 64, "rank": 16, "max_loras": 4, "widths": (4096, 1024, 1024),
                                             "add": True}, quick=False,
             source=LLAMA + "; 64 decode tokens over 4 adapters"),
        Case("llama3_1_gate_up_prefill_m2048_r64", {"tokens": 2048, "rank": 64, "max_loras": 4,
                                                    "widths": (14336, 14336), "add": True}, quick=False,
             source=LLAMA + "; a 2048-token prefill step, rank 64"),
        Case("qwen3_next_qkv_m256_r32", {"tokens": 256, "rank": 32, "max_loras": 8, "widths": (8192, 512, 512),
                                         "add": True}, quick=False, source=QNEXT + "; 256 tokens, 8 adapters"),
    ),
    dtypes=("bf16", "fp16"),
    make_inputs=_expand_inputs, run=_expand_run, reference=_expand_ref,
    outputs=("y",), inplace=("y",),
    tolerance={"bf16": Tolerance(atol=5e-2, rtol=2e-2), "fp16": Tolerance(atol=8e-3, rtol=4e-3)},
    description="LoRA B projection added onto the base layer's output per token's adapter: fp32 shrink output "
                "cast to the weights' dtype, slices of different widths through pointer and stride tables, "
                "rows without an adapter untouched",
    triton_kernels=(_lora_expand_kernel,),
    upstream=_UP + "lora_expand_op.py _lora_expand (_lora_expand_kernel, kernel_utils.do_expand_kernel, mm_k)",
))
