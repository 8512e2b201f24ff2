"""Token sampling over the Qwen vocabulary (151936): temperature / top-k / top-p masking, then a draw.

Masking semantics (the reference follows exactly this definition):
  x = logits / temperature, in fp32 with correctly rounded division.
  top-k (0 < k < V): keep x_i >= the k-th largest value of the row (values tied with it are kept).
  top-p (p < 1): over the top-k survivors with probabilities softmax(x), keep x_i when the mass of
      the strictly larger survivors is < p (so the token that crosses p is kept, ties go together).
  Output: x where kept, -inf elsewhere.
The kernel finds both thresholds by bisection on the order-preserving integer image of fp32 values:
the top-k count is exact; the top-p mass is an fp32 sum, so test rows are drawn with p half way
inside a probability gap of at least 2e-3, which no summation order can cross.

Draw: exponential race with caller-supplied uniforms u [B, V]: token = argmax_i probs_i / (-log u_i),
which samples exactly from probs (the serving-stack form of Gumbel-max). The kernel ranks the same
ratios in log space, x_i - log(-log u_i), in one pass over row slices, then reduces the slices (ties:
lowest index). Rows are drawn so the best ratio leads the runner-up by a relative margin of 1e-3 or
more, so the ids compare exactly.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sdk.conformance.inputs import llm_logits
from sdk.conformance.spec import Case, KernelSpec, Tolerance, register

_EXACT = Tolerance(exact=True)
_MODELS = ("qwen3_5", "qwen3_next", "llama3_1", "mixtral", "deepseek_v3", "mamba2", "minimax")


# ----------------------------------------------------------------------------- topk/topp masking
@triton.jit
def _order_key(x):
    # fp32 -> int32 with the same order (negative floats: flip the magnitude bits)
    bits = x.to(tl.int32, bitcast=True)
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


@triton.jit
def _topk_topp_mask_kernel(logits_ptr, temp_ptr, topk_ptr, topp_ptr, out_ptr, V, stride_l, stride_o,
                           BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    temp = tl.load(temp_ptr + row)
    k = tl.load(topk_ptr + row)
    p = tl.load(topp_ptr + row)
    src = logits_ptr + row * stride_l
    offs = tl.arange(0, BLOCK)

    # pass 1: value range and row maximum
    lo_v = tl.full((BLOCK,), 2147483647, tl.int32)
    hi_v = tl.full((BLOCK,), -2147483648, tl.int32)
    m_v = tl.full((BLOCK,), float("-inf"), tl.float32)
    for v0 in range(0, V, BLOCK):
        mask = v0 + offs < V
        x = tl.div_rn(tl.load(src + v0 + offs, mask=mask, other=0.0).to(tl.float32), temp)
        key = _order_key(x)
        lo_v = tl.where(mask, tl.minimum(lo_v, key), lo_v)
        hi_v = tl.where(mask, tl.maximum(hi_v, key), hi_v)
        m_v = tl.where(mask, tl.maximum(m_v, x), m_v)
    lo = tl.min(lo_v, axis=0).to(tl.int64)
    hi = tl.max(hi_v, axis=0).to(tl.int64)
    m = tl.max(m_v, axis=0)

    # top-k: the largest key t with count(key >= t) >= k
    a = lo
    if (k > 0) & (k < V):
        b = hi
        while a < b:
            mid = a + (b - a + 1) // 2
            cnt = tl.zeros((BLOCK,), dtype=tl.int32)
            for v0 in range(0, V, BLOCK):
                mask = v0 + offs < V
                x = tl.div_rn(tl.load(src + v0 + offs, mask=mask, other=0.0).to(tl.float32), temp)
                cnt += (mask & (_order_key(x).to(tl.int64) >= mid)).to(tl.int32)
            ok = tl.sum(cnt, axis=0) >= k
            a = tl.where(ok, mid, a)
            b = tl.where(ok, b, mid - 1)
    kth = a

    # top-p: the smallest key t >= kth whose strictly-larger survivors hold < p of the mass
    thr = kth
    if p < 1.0:
        z_v = tl.zeros((BLOCK,), dtype=tl.float32)
        for v0 in range(0, V, BLOCK):
            mask = v0 + offs < V
            x = tl.div_rn(tl.load(src + v0 + offs, mask=mask, other=0.0).to(tl.float32), temp)
            keep = mask & (_order_key(x).to(tl.int64) >= kth)
            z_v += tl.where(keep, tl.exp(x - m), 0.0)
        target = p * tl.sum(z_v, axis=0)
        b = hi
        while thr < b:
            mid = thr + (b - thr) // 2
            s_v = tl.zeros((BLOCK,), dtype=tl.float32)
            for v0 in range(0, V, BLOCK):
                mask = v0 + offs < V
                x = tl.div_rn(tl.load(src + v0 + offs, mask=mask, other=0.0).to(tl.float32), temp)
                s_v += tl.where(mask & (_order_key(x).to(tl.int64) > mid), tl.exp(x - m), 0.0)
            below = tl.sum(s_v, axis=0) < target
            b = tl.where(below, mid, b)
            thr = tl.where(below, thr, mid + 1)

    # final pass: write the masked, temperature-scaled logits
    dst = out_ptr + row * stride_o
    for v0 in range(0, V, BLOCK):
        mask = v0 + offs < V
        x = tl.div_rn(tl.load(src + v0 + offs, mask=mask, other=0.0).to(tl.float32), temp)
        keep = _order_key(x).to(tl.int64) >= thr
        tl.store(dst + v0 + offs, tl.where(keep, x, float("-inf")), mask=mask)


def _mask_ref_row(x: torch.Tensor, k: int, p: float) -> torch.Tensor:
    """Keep-mask of one row of scaled fp32 logits, straight from the definition."""
    V = x.numel()
    keep = torch.ones(V, dtype=torch.bool)
    if 0 < k < V:
        keep &= x >= torch.topk(x, k).values[-1]
    if p < 1.0:
        probs = torch.where(keep, torch.exp(x.double() - x.max().double()), torch.zeros((), dtype=torch.float64))
        probs = probs / probs.sum()
        vals, inverse = torch.unique(x, sorted=True, return_inverse=True)  # ascending unique values
        group_mass = torch.zeros(vals.numel(), dtype=torch.float64).index_add_(0, inverse, probs)
        above = group_mass.flip(0).cumsum(0).flip(0) - group_mass  # mass of strictly larger values
        keep &= above[inverse] < p
    return keep


def _pick_top_p(x: torch.Tensor, k: int, gen: torch.Generator) -> float:
    """A top-p value half way inside a wide probability gap of this row (1.0 when none exists)."""
    keep = _mask_ref_row(x, k, 1.0)
    probs = torch.where(keep, torch.exp(x.double() - x.max().double()), torch.zeros((), dtype=torch.float64))
    probs = probs / probs.sum()
    vals, inverse = torch.unique(x, sorted=True, return_inverse=True)
    mass = torch.zeros(vals.numel(), dtype=torch.float64).index_add_(0, inverse, probs).flip(0)
    above = mass.cumsum(0) - mass
    mid = above + mass / 2
    ok = torch.nonzero((mass >= 2e-3) & (mid > 0.2) & (mid < 0.97)).flatten()
    if ok.numel() == 0:
        return 1.0
    pick = ok[int(torch.randint(0, ok.numel(), (1,), generator=gen))]
    return float(mid[pick])


def _mask_inputs(case, dtype, device, gen):
    B, V = case.params["batch"], case.params["vocab"]
    logits = llm_logits(B, V, gen).to(dtype)
    temperature = (0.5 + torch.rand((B,), generator=gen)).float()
    top_k = torch.tensor([(0, 20, 1, 50, V, 7)[i % 6] for i in range(B)], dtype=torch.int32)
    top_p = torch.ones((B,), dtype=torch.float32)
    for i in range(B):
        if i % 6 in (0, 1, 3, 4):
            x = logits[i].float() / temperature[i]
            top_p[i] = _pick_top_p(x, int(top_k[i]), gen)
    return {"logits": logits.to(device), "temperature": temperature.to(device), "top_k": top_k.to(device),
            "top_p": top_p.to(device), "masked": torch.empty((B, V), dtype=torch.float32, device=device)}


def _mask_run(inp, case):
    logits, out = inp["logits"], inp["masked"]
    B, V = logits.shape
    _topk_topp_mask_kernel[(B,)](logits, inp["temperature"], inp["top_k"], inp["top_p"], out, V,
                                 logits.stride(0), out.stride(0), BLOCK=min(4096, triton.next_power_of_2(V)),
                                 num_warps=8)


def _mask_ref(inp, case):
    x = inp["logits"].float().cpu() / inp["temperature"].float().cpu()[:, None]
    out = torch.full_like(x, float("-inf"))
    for i in range(x.shape[0]):
        keep = _mask_ref_row(x[i], int(inp["top_k"][i]), float(inp["top_p"][i]))
        out[i][keep] = x[i][keep]
    return {"masked": out}


register(KernelSpec(
    name="sampling_topk_topp_mask", group="sampling", models=_MODELS,
    cases=(
        Case("odd_B6_V3001", {"batch": 6, "vocab": 3001}, source="odd vocab: masked tail block"),
        Case("B12_V1000", {"batch": 12, "vocab": 1000}, source="every top-k / top-p row pattern twice"),
        Case("qwen_B2_V151936", {"batch": 2, "vocab": 151936}, quick=False,
             source="Qwen3-Next / Qwen3.5 vocab 151936"),
        Case("qwen_B128_V151936", {"batch": 128, "vocab": 151936}, quick=False,
             source="Qwen3-Next-80B-A3B vocab 151936, 128 sequences"),
    ),
    dtypes=("bf16", "fp32"),
    make_inputs=_mask_inputs, run=_mask_run, reference=_mask_ref,
    outputs=("masked",), tolerance={"bf16": _EXACT, "fp32": _EXACT},
    description="temperature, top-k and top-p masking per row (thresholds by bisection), masked logits exact",
    triton_kernels=(_topk_topp_mask_kernel,),
    upstream="PyTorch in vLLM where Triton is absent (v1/sample/ops/topk_topp_sampler.py "
             "apply_top_k_top_p_pytorch sorts each row); with Triton vLLM 0.33 masks with "
             "apply_top_k_top_p_triton: see sampling_topk_topp_pivot",
))


# ---------------------------------------------------------------------------------------- draw
@triton.jit
def _draw_partial_kernel(logits_ptr, u_ptr, part_key_ptr, part_idx_ptr, V, stride_l, stride_u, span,
                         BLOCK: tl.constexpr):
    # one slice of a row in one pass: the best log-ratio log(p_i / q_i) = x_i - log(-log u_i) + const
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    offs = tl.arange(0, BLOCK)
    best = float("-inf")
    best_i = 2147483647
    for v0 in range(split * span, tl.minimum(split * span + span, V), BLOCK):
        mask = (v0 + offs < V) & (offs < split * span + span - v0)
        x = tl.load(logits_ptr + row * stride_l + v0 + offs, mask=mask, other=float("-inf")).to(tl.float32)
        u = tl.load(u_ptr + row * stride_u + v0 + offs, mask=mask, other=0.5)
        key = tl.where(mask & (x > float("-inf")), x - tl.log(-tl.log(u)), float("-inf"))
        cb = tl.max(key, axis=0)
        ci = tl.min(tl.where(key == cb, v0 + offs, 2147483647), axis=0)
        take = cb > best
        best_i = tl.where(take, ci, best_i)
        best = tl.where(take, cb, best)
    tl.store(part_key_ptr + row * tl.num_programs(1) + split, best)
    tl.store(part_idx_ptr + row * tl.num_programs(1) + split, best_i)


@triton.jit
def _draw_reduce_kernel(part_key_ptr, part_idx_ptr, ids_ptr, n_splits, BLOCK_S: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    s = tl.arange(0, BLOCK_S)
    key = tl.load(part_key_ptr + row * n_splits + s, mask=s < n_splits, other=float("-inf"))
    idx = tl.load(part_idx_ptr + row * n_splits + s, mask=s < n_splits, other=2147483647)
    best = tl.max(key, axis=0)
    tl.store(ids_ptr + row, tl.min(tl.where(key == best, idx, 2147483647), axis=0).to(tl.int64))


def _draw_ratios(x: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    probs = torch.softmax(x.double(), dim=-1)
    return probs / -torch.log(u.double())


def _draw_inputs(case, dtype, device, gen):
    B, V = case.params["batch"], case.params["vocab"]
    logits = llm_logits(B, V, gen)
    keep = torch.tensor([(V, 50, 1000, 1)[i % 4] for i in range(B)])
    for i in range(B):  # as left by top-k masking
        if keep[i] < V:
            kth = torch.topk(logits[i], int(keep[i])).values[-1]
            logits[i][logits[i] < kth] = float("-inf")
    logits = logits.to(dtype)
    u = torch.empty((B, V), dtype=torch.float32)
    for i in range(B):
        for _ in range(100):
            u[i] = torch.rand((V,), generator=gen).clamp_(2.0 ** -30, 1.0 - 2.0 ** -24)
            r = _draw_ratios(logits[i], u[i])
            top2 = torch.topk(r, 2).values if V > 1 else r
            if top2.numel() < 2 or top2[1] < top2[0] * (1 - 1e-3):
                break
    return {"logits": logits.to(device), "u": u.to(device),
            "ids": torch.empty((B,), dtype=torch.int64, device=device)}


def _draw_run(inp, case):
    logits, u = inp["logits"], inp["u"]
    B, V = logits.shape
    block = min(2048, triton.next_power_of_2(V))
    splits = max(1, min(triton.cdiv(V, 4 * block), triton.cdiv(1024, B)))  # ~1K programs when B is small
    span = triton.cdiv(triton.cdiv(V, splits), block) * block
    splits = triton.cdiv(V, span)
    part_key = torch.empty((B, splits), dtype=torch.float32, device=logits.device)
    part_idx = torch.empty((B, splits), dtype=torch.int32, device=logits.device)
    _draw_partial_kernel[(B, splits)](logits, u, part_key, part_idx, V, logits.stride(0), u.stride(0), span,
                                      BLOCK=block, num_warps=8)
    _draw_reduce_kernel[(B,)](part_key, part_idx, inp["ids"], splits,
                              BLOCK_S=triton.next_power_of_2(splits), num_warps=1)


def _draw_ref(inp, case):
    return {"ids": torch.argmax(_draw_ratios(inp["logits"].cpu(), inp["u"].cpu()), dim=-1)}


register(KernelSpec(
    name="sampling_draw", group="sampling", models=_MODELS,
    cases=(
        Case("odd_B4_V3001", {"batch": 4, "vocab": 3001}, source="odd vocab: masked tail block"),
        Case("B8_V1000", {"batch": 8, "vocab": 1000}, source="every masking row pattern twice"),
        Case("qwen_B2_V151936", {"batch": 2, "vocab": 151936}, quick=False,
             source="Qwen3-Next / Qwen3.5 vocab 151936, row split over many programs"),
        Case("qwen_B128_V151936", {"batch": 128, "vocab": 151936}, quick=False,
             source="Qwen3-Next-80B-A3B vocab 151936, 128 sequences"),
    ),
    dtypes=("bf16", "fp32"),
    make_inputs=_draw_inputs, run=_draw_run, reference=_draw_ref,
    outputs=("ids",), tolerance={"bf16": _EXACT, "fp32": _EXACT},
    description="exponential-race draw argmax(p / -log u) from masked logits with supplied noise, split rows, ids exact",
    triton_kernels=(_draw_partial_kernel, _draw_reduce_kernel),
    upstream="PyTorch in vLLM's v1 sampler (v1/sample/ops/topk_topp_sampler.py random_sample: probs / "
             "exponential noise, argmax); vLLM 0.33's GPU model runner draws in Triton: see sampling_gumbel",
))
