"""MoE routers with sigmoid scores: grouped top-k with a score-correction bias, and top-k then sigmoid.

`moe_grouped_topk_sigmoid` (DeepSeek-V3, Kimi-K2, GLM-4.5; `noaux_tc` routing): scores =
sigmoid(logits); biased = scores + e_score_correction_bias. The experts are split into n_group
equal groups; each group is ranked by the sum of its two largest biased scores and the best
topk_group groups are kept; the top_k experts by biased score within the kept groups are chosen
(descending); their weights are the unbiased scores, divided by their sum when renormalising,
times routed_scaling_factor. With n_group = topk_group = 1 (Kimi-K2, GLM-4.5) the grouping keeps
every expert.

`moe_topk_sigmoid` (Llama-4): top_k experts by raw logit, weight = sigmoid(logit), no
renormalisation (Scout and Maverick route each token to one expert, beside a shared expert).

Router logits are drawn tie-free and far enough apart that fp32 scores order as fp64 ones do:
the selections are compared exactly.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sdk.conformance.inputs import distinct_logits
from sdk.conformance.spec import Case, KernelSpec, Tolerance, register

_EXACT = Tolerance(exact=True)
_GAP = 4e-6  # smallest gap between biased scores (and between group scores) that inputs keep
# ------------------------------------------------------------------------ moe_grouped_topk_sigmoid
@triton.jit
def _grouped_topk_sigmoid_kernel(logits_ptr, bias_ptr, weights_ptr, ids_ptr, stride_l, routed_scaling,
                                 N_GROUP: tl.constexpr, GROUP_SIZE: tl.constexpr, TOPK_GROUP: tl.constexpr,
                                 TOPK: tl.constexpr, RENORM: tl.constexpr, BLOCK_G: tl.constexpr,
                                 BLOCK_GS: tl.constexpr, BLOCK_K: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    g = tl.arange(0, BLOCK_G)
    j = tl.arange(0, BLOCK_GS)
    e = g[:, None] * GROUP_SIZE + j[None, :]    # expert index [groups, in group]; padding lanes repeat
                                                # the next group's indices, so every use is masked
    valid = (g[:, None] < N_GROUP) & (j[None, :] < GROUP_SIZE)
    x = tl.load(logits_ptr + row * stride_l + e, mask=valid, other=0.0).to(tl.float32)
    score = tl.where(valid, tl.sigmoid(x), 0.0)
    biased = tl.where(valid, score + tl.load(bias_ptr + e, mask=valid, other=0.0).to(tl.float32),
                      float("-inf"))
    # group score: the sum of the two largest biased scores of the group
    first = tl.max(biased, axis=1)
    first_j = tl.min(tl.where(biased == first[:, None], j[None, :], BLOCK_GS), axis=1)
    second = tl.max(tl.where(j[None, :] == first_j[:, None], float("-inf"), biased), axis=1)
    group_score = tl.where(g < N_GROUP, first + second, float("-inf"))
    kept = g < 0
    for _ in tl.static_range(TOPK_GROUP):
        best = tl.max(group_score, axis=0)
        pick = tl.min(tl.where(group_score == best, g, BLOCK_G), axis=0)
        kept = kept | (g == pick)
        group_score = tl.where(g == pick, float("-inf"), group_score)
    cand = tl.where(kept[:, None], biased, float("-inf"))
    kk = tl.arange(0, BLOCK_K)
    top_w = tl.zeros((BLOCK_K,), dtype=tl.float32)
    top_i = tl.zeros((BLOCK_K,), dtype=tl.int32)
    for t in tl.static_range(TOPK):
        best = tl.max(tl.max(cand, axis=1), axis=0)
        idx = tl.min(tl.min(tl.where(cand == best, e, N_GROUP * GROUP_SIZE), axis=1), axis=0)
        w = tl.sum(tl.sum(tl.where((e == idx) & valid, score, 0.0), axis=1), axis=0)   # the unbiased score
        top_w = tl.where(kk == t, w, top_w)
        top_i = tl.where(kk == t, idx, top_i)
        cand = tl.where((e == idx) & valid, float("-inf"), cand)
    if RENORM:
        top_w = top_w / tl.sum(tl.where(kk < TOPK, top_w, 0.0), axis=0)
    top_w = top_w * routed_scaling
    tl.store(weights_ptr + row * TOPK + kk, top_w, mask=kk < TOPK)
    tl.store(ids_ptr + row * TOPK + kk, top_i, mask=kk < TOPK)


def grouped_topk_sigmoid(logits, bias, topk_weights, topk_ids, n_group: int, topk_group: int,
                         renormalize: bool, routed_scaling_factor: float) -> None:
    T, E = logits.shape
    k = topk_ids.shape[1]
    gs = E // n_group
    assert gs * n_group == E and logits.stride(1) == 1
    _grouped_topk_sigmoid_kernel[(T,)](
        logits, bias, topk_weights, topk_ids, logits.stride(0), float(routed_scaling_factor),
        N_GROUP=n_group, GROUP_SIZE=gs, TOPK_GROUP=topk_group, TOPK=k, RENORM=bool(renormalize),
        BLOCK_G=triton.next_power_of_2(n_group), BLOCK_GS=triton.next_power_of_2(gs),
        BLOCK_K=triton.next_power_of_2(k), num_warps=4 if E >= 256 else 1)


def _group_scores(biased: torch.Tensor, n_group: int) -> torch.Tensor:
    return biased.view(biased.shape[0], n_group, -1).topk(2, dim=-1).values.sum(-1)


def _min_gap(v: torch.Tensor) -> torch.Tensor:
    """Per row, the smallest difference between two of its values."""
    if v.shape[1] < 2:
        return torch.full((v.shape[0],), float("inf"), dtype=v.dtype)
    s = v.sort(dim=1).values
    return (s[:, 1:] - s[:, :-1]).min(dim=1).values


def _grouped_inputs(case, dtype, device, gen):
    p = case.params
    T, E, G = p["tokens"], p["experts"], p["n_group"]
    bias = (torch.rand((E,), generator=gen) * 0.2 - 0.1).float()       # one correction bias per expert
    rows, need = [], T
    for _ in range(50):  # keep rows whose scores lie far enough apart for fp32 to order them as fp64 does
        cand = distinct_logits(need + need // 2 + 8, E, gen)
        biased = torch.sigmoid(cand.double()) + bias.double()
        ok = (_min_gap(biased) >= _GAP) & (_min_gap(_group_scores(biased, G)) >= _GAP)
        rows.append(cand[ok][:need])
        need -= rows[-1].shape[0]
        if need == 0:
            break
    else:
        raise RuntimeError("could not draw well-separated router logits")
    logits = torch.cat(rows)
    k = p["topk"]
    return {"logits": logits.to(dtype).to(device), "bias": bias.to(device),
            "topk_weights": torch.empty((T, k), dtype=torch.float32, device=device),
            "topk_ids": torch.empty((T, k), dtype=torch.int32, device=device)}


def _grouped_run(inp, case):
    p = case.params
    grouped_topk_sigmoid(inp["logits"], inp["bias"], inp["topk_weights"], inp["topk_ids"], p["n_group"],
                         p["topk_group"], p["renormalize"], p["scaling"])


def _grouped_ref(inp, case):
    p = case.params
    scores = torch.sigmoid(inp["logits"].double().cpu())
    biased = scores + inp["bias"].double().cpu()
    T, E = scores.shape
    G = p["n_group"]
    groups = _group_scores(biased, G).topk(p["topk_group"], dim=-1).indices
    keep = torch.zeros((T, G), dtype=torch.bool).scatter_(1, groups, True)
    keep = keep.repeat_interleave(E // G, dim=1)
    ids = biased.masked_fill(~keep, float("-inf")).topk(p["topk"], dim=-1).indices
    w = scores.gather(1, ids)
    if p["renormalize"]:
        w = w / w.sum(-1, keepdim=True)
    return {"topk_weights": w * p["scaling"], "topk_ids": ids.to(torch.int32)}


_DS = {"experts": 256, "n_group": 8, "topk_group": 4, "topk": 8, "renormalize": True, "scaling": 2.5}
_KIMI = {"experts": 384, "n_group": 1, "topk_group": 1, "topk": 8, "renormalize": True, "scaling": 2.827}
_GLM = {"experts": 160, "n_group": 1, "topk_group": 1, "topk": 8, "renormalize": True, "scaling": 2.5}
register(KernelSpec(
    name="moe_grouped_topk_sigmoid", group="moe", models=("deepseek_v3", "kimi_k2", "glm4_5"),
    cases=(
        Case("odd_T19_E96_g4_tg2_k6_no_renorm", {"tokens": 19, "experts": 96, "n_group": 4, "topk_group": 2,
                                                 "topk": 6, "renormalize": False, "scaling": 1.0},
             source="odd group size 24 (not a power of two), weights not renormalised"),
        Case("deepseek_v3_T8_E256_g8_tg4_k8", {"tokens": 8, **_DS},
             source="DeepSeek-V3 config: 256 experts, n_group 8, topk_group 4, top-8, "
                    "routed_scaling_factor 2.5, norm_topk_prob"),
        Case("kimi_k2_T5_E384_k8", {"tokens": 5, **_KIMI},
             source="Kimi-K2 config: 384 experts, n_group 1, topk_group 1, top-8, routed_scaling_factor 2.827"),
        Case("glm4_5_T6_E160_k8", {"tokens": 6, **_GLM},
             source="GLM-4.5 config (zai-org/GLM-4.5): 160 experts, n_group 1, top-8, routed_scaling_factor 2.5"),
        Case("glm4_5_air_T8192_E128_k8", {"tokens": 8192, "experts": 128, "n_group": 1, "topk_group": 1,
                                          "topk": 8, "renormalize": True, "scaling": 1.0}, quick=False,
             source="GLM-4.5-Air config (zai-org/GLM-4.5-Air): 128 experts, top-8, routed_scaling_factor 1.0"),
        Case("deepseek_v3_T8192_E256_g8_tg4_k8", {"tokens": 8192, **_DS}, quick=False,
             source="DeepSeek-V3 routing for an 8192-token prefill"),
        Case("kimi_k2_T8192_E384_k8", {"tokens": 8192, **_KIMI}, quick=False,
             source="Kimi-K2 routing for an 8192-token prefill"),
    ),
    dtypes=("fp32", "bf16"),
    make_inputs=_grouped_inputs, run=_grouped_run, reference=_grouped_ref,
    outputs=("topk_weights", "topk_ids"),
    tolerance={"fp32": Tolerance(atol=1e-6, rtol=1e-5), "bf16": Tolerance(atol=1e-6, rtol=1e-5)},
    output_tolerance={"topk_ids": _EXACT},
    description="sigmoid scores + correction bias; groups ranked by their top-2 biased scores, top-k "
                "experts within the kept groups; unbiased weights, renormalised, times routed_scaling_factor",
    triton_kernels=(_grouped_topk_sigmoid_kernel,),
    upstream="C++ op in vLLM (ops.grouped_topk, fused_moe/router/grouped_topk_router.py, on CUDA/XPU for "
             "DeepSeek-V3's 8 groups; ops.topk_sigmoid through FusedTopKBiasRouter where n_group = "
             "topk_group = 1, Kimi-K2 and GLM-4.5); elsewhere grouped_topk is PyTorch under "
             "torch.compile (Inductor-generated)",
))


# -------------------------------------------------------------------------------- moe_topk_sigmoid
@triton.jit
def _topk_sigmoid_kernel(logits_ptr, weights_ptr, ids_ptr, T, n_experts, stride_l,
                         TOPK: tl.constexpr, ROWS: tl.constexpr, BLOCK_E: tl.constexpr,
                         BLOCK_K: tl.constexpr):
    # ROWS tokens per program: top-k by raw logit (descending), weight = sigmoid(logit)
    r = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    rmask = r < T
    e = tl.arange(0, BLOCK_E)
    x = tl.load(logits_ptr + r[:, None] * stride_l + e[None, :],
                mask=rmask[:, None] & (e[None, :] < n_experts), other=float("-inf")).to(tl.float32)
    kk = tl.arange(0, BLOCK_K)
    top_w = tl.zeros((ROWS, BLOCK_K), dtype=tl.float32)
    top_i = tl.zeros((ROWS, BLOCK_K), dtype=tl.int32)
    for t in tl.static_range(TOPK):
        best = tl.max(x, axis=1)
        idx = tl.min(tl.where(x == best[:, None], e[None, :], BLOCK_E), axis=1)
        top_w = tl.where(kk[None, :] == t, tl.sigmoid(best)[:, None], top_w)
        top_i = tl.where(kk[None, :] == t, idx[:, None], top_i)
        x = tl.where(e[None, :] == idx[:, None], float("-inf"), x)
    out = r[:, None] * TOPK + kk[None, :]
    omask = rmask[:, None] & (kk[None, :] < TOPK)
    tl.store(weights_ptr + out, top_w, mask=omask)
    tl.store(ids_ptr + out, top_i, mask=omask)


def topk_sigmoid(logits, topk_weights, topk_ids) -> None:
    T, E = logits.shape
    k = topk_ids.shape[1]
    block_e = triton.next_power_of_2(E)
    rows = max(1, min(16, 2048 // block_e))
    _topk_sigmoid_kernel[(triton.cdiv(T, rows),)](
        logits, topk_weights, topk_ids, T, E, logits.stride(0), TOPK=k, ROWS=rows, BLOCK_E=block_e,
        BLOCK_K=triton.next_power_of_2(k), num_warps=4)


def _topk_inputs(case, dtype, device, gen):
    p = case.params
    T, E, k = p["tokens"], p["experts"], p["topk"]
    return {"logits": distinct_logits(T, E, gen).to(dtype).to(device),
            "topk_weights": torch.empty((T, k), dtype=torch.float32, device=device),
            "topk_ids": torch.empty((T, k), dtype=torch.int32, device=device)}


def _topk_run(inp, case):
    topk_sigmoid(inp["logits"], inp["topk_weights"], inp["topk_ids"])


def _topk_ref(inp, case):
    vals, ids = inp["logits"].double().cpu().topk(case.params["topk"], dim=-1)
    return {"topk_weights": torch.sigmoid(vals), "topk_ids": ids.to(torch.int32)}


register(KernelSpec(
    name="moe_topk_sigmoid", group="moe", models=("llama4",),
    cases=(
        Case("odd_T37_E17_k2", {"tokens": 37, "experts": 17, "topk": 2},
             source="odd expert count, top-2: masked lanes and a second pick"),
        Case("llama4_scout_T40_E16_k1", {"tokens": 40, "experts": 16, "topk": 1},
             source="Llama-4-Scout-17B-16E text config: 16 experts, num_experts_per_tok 1"),
        Case("llama4_maverick_T9_E128_k1", {"tokens": 9, "experts": 128, "topk": 1},
             source="Llama-4-Maverick-17B-128E text config: 128 experts, num_experts_per_tok 1"),
        Case("llama4_scout_T8192_E16_k1", {"tokens": 8192, "experts": 16, "topk": 1}, quick=False,
             source="Llama-4-Scout routing for an 8192-token prefill"),
    ),
    dtypes=("bf16", "fp32"),
    make_inputs=_topk_inputs, run=_topk_run, reference=_topk_ref,
    outputs=("topk_weights", "topk_ids"),
    tolerance={"bf16": Tolerance(atol=1e-6, rtol=1e-5), "fp32": Tolerance(atol=1e-6, rtol=1e-5)},
    output_tolerance={"topk_ids": _EXACT},
    description="top-k experts by raw router logit, weight = sigmoid(logit), not renormalised (Llama-4)",
    triton_kernels=(_topk_sigmoid_kernel,),
    upstream="PyTorch ops in vLLM (model_executor/models/llama4.py Llama4MoE.custom_routing_function: "
             "fast_topk, then torch.sigmoid); no hand-written Triton",
))
