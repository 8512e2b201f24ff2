"""Speculative decoding's rejection sampler as vLLM's v1 sampler runs it in Triton.

A step verifies k draft tokens per request (EAGLE heads, MTP modules, n-gram lookup) with one target
forward pass over them, then keeps the longest accepted prefix and appends one token of its own.
Ragged layout, as vLLM flattens it: request r proposed n_r <= k drafts (0 for a request without any),
stored at draft_token_ids[cu[r-1] : cu[r]] with cu = cu_num_draft_tokens [B] (inclusive cumulative
counts, cu[-1] read as 0); per draft token: target_argmax [T] int64, target_probs [T, V] fp32 (the
target logits softmaxed in fp32), draft_probs [T, V] fp32 or none (n-gram drafts, and drafters that
keep no distribution), uniform_probs [T] fp64, recovered_token_ids [T] int32; per request:
bonus_token_ids [B, 1] int64, is_greedy [B] bool (none when every request is greedy). The output
output_token_ids [B, k + 1] int32 starts as PLACEHOLDER -1 everywhere; a draft id of -1 is padding and
is always rejected.

spec_rejection_greedy (greedy requests): positions p = 0, 1, ... write target_argmax[p] until the
  first p with draft[p] != target_argmax[p] (written, then stop); when no draft is rejected the bonus
  token follows at position n_r. Random requests' rows are not touched.
spec_rejection_random (random requests): draft d at position p is accepted iff d >= 0, q(d) > 0 and
  p(d) / q(d) >= u[p] (q = 1 without draft probabilities); an accepted draft is written, the first
  rejected position gets recovered_token_ids[p] and ends the row; all accepted: the bonus token.
  Inputs keep every ratio at least 1e-5 (relative) away from its uniform draw, so fp32 division in the
  kernel and fp64 in the reference decide alike and ids compare exactly.
spec_expand: out[cu[r-1] : cu[r]] = x[r], with x[r] == replace_from written as replace_to (request
  temperature 0 -> 1, top-k, top-p expanded to the draft tokens; fp32, int32 and int64 values).
spec_recovered_tokens: per draft position, the token a rejection falls back to, drawn from the
  residual distribution max(p - q, 0) (without draft probabilities: p with the draft token removed)
  by the exponential race argmax_v residual(v) / E_v, E ~ Exp(1) one row per request, passed as
  inv_q = 1 / E (fp32, or fp64 where vLLM draws fp64 noise); the scores are products computed alike in
  kernel and reference, ties go to the lowest id, so ids compare exactly.

Shapes: vocabularies 128256 (Llama-3.1, EAGLE drafts), 129280 (DeepSeek-V3, MTP), 151936 (Qwen3-Next,
MTP); k = 1 to 5 speculative tokens; the synthetic-acceptance benchmarking mode is not covered.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sdk.conformance.spec import Case, KernelSpec, Tolerance, register

PLACEHOLDER = -1
_EXACT = Tolerance(exact=True)
_MODELS = ("llama3_1", "deepseek_v3", "qwen3_next", "glm4_5", "qwen3_5")
_UP = "vllm: v1/sample/rejection_sampler.py "
_LLAMA_V, _DSV3_V, _QWEN_V = 128256, 129280, 151936
_EAGLE = "Llama-3.1-8B with an EAGLE draft head: vocab 128256"
_MTP_DS = "DeepSeek-V3 with its MTP module: vocab 129280"
_MTP_QN = "Qwen3-Next-80B-A3B with its MTP layer: vocab 151936"


# -------------------------------------------------------------------------------------- kernels
@triton.jit
def _request_span(cu_ptr, req):
    """[start, end) of request `req`'s draft tokens from the inclusive cumulative counts."""
    start = tl.load(cu_ptr + req - 1, mask=req > 0, other=0)
    end = tl.load(cu_ptr + req)
    return start, end


@triton.jit(do_not_specialize=["max_spec_len"])
def _greedy_accept_kernel(out_ptr, cu_ptr, draft_ptr, argmax_ptr, bonus_ptr, greedy_ptr, max_spec_len,
                          ALL_GREEDY: tl.constexpr):
    req = tl.program_id(0)
    go = True
    if not ALL_GREEDY:
        go = tl.load(greedy_ptr + req) != 0
    if go:
        start, end = _request_span(cu_ptr, req)
        row = out_ptr + req.to(tl.int64) * (max_spec_len + 1)
        rejected = False
        for pos in range(end - start):
            if not rejected:
                draft = tl.load(draft_ptr + start + pos)
                target = tl.load(argmax_ptr + start + pos).to(tl.int32)
                tl.store(row + pos, target)
                rejected = draft != target
        if not rejected:
            tl.store(row + (end - start), tl.load(bonus_ptr + req).to(tl.int32))


@triton.jit(do_not_specialize=["max_spec_len"])
def _random_accept_kernel(out_ptr, cu_ptr, draft_ptr, draft_probs_ptr, target_probs_ptr, bonus_ptr,
                          recovered_ptr, uniform_ptr, greedy_ptr, max_spec_len, V,
                          NO_DRAFT_PROBS: tl.constexpr):
    req = tl.program_id(0)
    if tl.load(greedy_ptr + req) == 0:
        start, end = _request_span(cu_ptr, req)
        row = out_ptr + req.to(tl.int64) * (max_spec_len + 1)
        rejected = False
        for pos in range(end - start):
            if not rejected:
                tok = start + pos
                draft = tl.load(draft_ptr + tok)
                u = tl.load(uniform_ptr + tok)
                accepted = False
                if draft >= 0:
                    at = tok.to(tl.int64) * V + draft
                    p = tl.load(target_probs_ptr + at)
                    if NO_DRAFT_PROBS:
                        accepted = p >= u
                    else:
                        q = tl.load(draft_probs_ptr + at)
                        accepted = (q > 0) & (p / q >= u)
                if accepted:
                    tl.store(row + pos, draft)
                else:
                    tl.store(row + pos, tl.load(recovered_ptr + tok))
                    rejected = True
        if not rejected:
            tl.store(row + (end - start), tl.load(bonus_ptr + req).to(tl.int32))


@triton.jit(do_not_specialize=["replace_from", "replace_to"])
def _expand_kernel(out_ptr, in_ptr, cu_ptr, replace_from, replace_to, MAX_NUM_TOKENS: tl.constexpr):
    req = tl.program_id(0)
    start, end = _request_span(cu_ptr, req)
    x = tl.load(in_ptr + req)
    x = tl.where(x == replace_from, replace_to, x).to(out_ptr.dtype.element_ty)
    offs = tl.arange(0, MAX_NUM_TOKENS)
    tl.store(out_ptr + start + offs, tl.zeros((MAX_NUM_TOKENS,), out_ptr.dtype.element_ty) + x,
             mask=offs < end - start)


@triton.jit
def _recovered_kernel(out_ptr, cu_ptr, draft_ptr, draft_probs_ptr, target_probs_ptr, inv_q_ptr, V,
                      BLOCK: tl.constexpr, NO_DRAFT_PROBS: tl.constexpr):
    req = tl.program_id(0)
    pos = tl.program_id(1)
    start, end = _request_span(cu_ptr, req)
    if pos < end - start:
        tok = (start + pos).to(tl.int64)
        draft = tl.load(draft_ptr + tok)
        best = tl.full((), float("-inf"), inv_q_ptr.dtype.element_ty)
        best_id = 0
        for v0 in range(0, V, BLOCK):
            offs = v0 + tl.arange(0, BLOCK)
            ok = offs < V
            if NO_DRAFT_PROBS:
                prob = tl.load(target_probs_ptr + tok * V + offs, mask=ok & (offs != draft), other=0.0)
            else:
                p = tl.load(target_probs_ptr + tok * V + offs, mask=ok, other=0.0)
                q = tl.load(draft_probs_ptr + tok * V + offs, mask=ok, other=0.0)
                prob = tl.maximum(p - q, 0.0)
            inv_q = tl.load(inv_q_ptr + req.to(tl.int64) * V + offs, mask=ok, other=0.0)
            score = tl.where(ok, prob * inv_q, float("-inf"))
            tile_best, tile_id = tl.max(score, axis=0, return_indices=True)
            if tile_best > best:
                best = tile_best
                best_id = v0 + tile_id
        tl.store(out_ptr + tok, best_id.to(out_ptr.dtype.element_ty))


# ------------------------------------------------------------------------------------ launchers
def rejection_greedy_sample(output_token_ids, cu_num_draft_tokens, draft_token_ids, target_argmax,
                            bonus_token_ids, is_greedy, max_spec_len: int) -> None:
    """Greedy requests' rows of output_token_ids [B, max_spec_len + 1]; is_greedy None: all greedy."""
    B = output_token_ids.shape[0]
    _greedy_accept_kernel[(B,)](output_token_ids, cu_num_draft_tokens, draft_token_ids, target_argmax,
                                bonus_token_ids, is_greedy, max_spec_len, ALL_GREEDY=is_greedy is None,
                                num_warps=1)


def rejection_random_sample(output_token_ids, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs,
                            bonus_token_ids, recovered_token_ids, uniform_probs, is_greedy,
                            max_spec_len: int) -> None:
    """Random requests' rows of output_token_ids; draft_probs None: n-gram style drafts (q = 1)."""
    B = output_token_ids.shape[0]
    _random_accept_kernel[(B,)](output_token_ids, cu_num_draft_tokens, draft_token_ids, draft_probs,
                                target_probs, bonus_token_ids, recovered_token_ids, uniform_probs, is_greedy,
                                max_spec_len, target_probs.shape[1], NO_DRAFT_PROBS=draft_probs is None,
                                num_warps=1)


MAX_SPEC_LEN = 128  # the most draft tokens a request may carry (one expand program writes them all)


def expand_batch_to_tokens(out, x, cu_num_tokens, replace_from=0, replace_to=0) -> None:
    """out [num_tokens] from x [B]: each request's value repeated over its draft tokens."""
    _expand_kernel[(x.shape[0],)](out, x, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=MAX_SPEC_LEN,
                                  num_warps=1)


def sample_recovered_tokens(out, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs, inv_q,
                            max_spec_len: int, block: int = 8192) -> None:
    """out [T] int32: one program per (request, draft position), 8192-wide vocabulary tiles."""
    B = cu_num_draft_tokens.shape[0]
    _recovered_kernel[(B, max_spec_len)](out, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs,
                                         inv_q, target_probs.shape[1], BLOCK=block,
                                         NO_DRAFT_PROBS=draft_probs is None, num_warps=8)


# ------------------------------------------------------------------------------- input layout
def _draft_counts(p: dict, gen: torch.Generator) -> torch.Tensor:
    """n_r per request: k for most, fewer for about a quarter (n-gram misses, short lookups), 0 for
    the requests listed in `empty` (requests in prefill this step)."""
    B, k = p["reqs"], p["k"]
    n = torch.full((B,), k, dtype=torch.int64)
    short = torch.rand((B,), generator=gen) < 0.25
    n[short] = torch.randint(0, k, (B,), generator=gen)[short]
    for r in p.get("empty", ()):
        n[r] = 0
    return n


def _cu(n: torch.Tensor) -> torch.Tensor:
    return torch.cumsum(n, 0).to(torch.int32)


def _greedy_flags(p: dict, gen: torch.Generator) -> torch.Tensor | None:
    """is_greedy per request: None when the case says every request is greedy."""
    mode = p.get("greedy", "mixed")
    if mode == "all":
        return None
    flags = torch.zeros((p["reqs"],), dtype=torch.bool)
    if mode == "mixed":  # half of the requests greedy, at random places
        flags[torch.randperm(p["reqs"], generator=gen)[:p["reqs"] // 2]] = True
    return flags


def _pad_trailing(draft: torch.Tensor, n: torch.Tensor, p: dict) -> None:
    """-1 in the last draft slots of the requests listed in `padded` (padded proposals)."""
    cu = torch.cumsum(n, 0)
    for r in p.get("padded", ()):
        if int(n[r]) > 1:
            draft[int(cu[r]) - 1] = PLACEHOLDER


def _other_rows(out: torch.Tensor, mine: torch.Tensor, V: int, gen: torch.Generator) -> None:
    """Rows the kernel under test must leave alone hold what the other kernel wrote there: a prefix of
    token ids, the rest PLACEHOLDER."""
    B, width = out.shape
    for r in range(B):
        if not bool(mine[r]):
            m = int(torch.randint(1, width + 1, (1,), generator=gen))
            out[r, :m] = torch.randint(0, V, (m,), generator=gen).to(torch.int32)


def _spans(cu: torch.Tensor):
    cu = cu.tolist()
    return [(cu[r - 1] if r else 0, cu[r]) for r in range(len(cu))]


# ----------------------------------------------------------------------------- greedy: inputs
def _greedy_inputs(case, dtype, device, gen):
    p = case.params
    V, k = p["vocab"], p["k"]
    n = _draft_counts(p, gen)
    T = int(n.sum())
    argmax = torch.randint(0, V, (T,), generator=gen)
    draft = argmax.clone()
    miss = torch.rand((T,), generator=gen) < p.get("miss", 0.2)
    draft[miss] = (argmax[miss] + torch.randint(1, V, (int(miss.sum()),), generator=gen)) % V
    draft = draft.to(torch.int32)
    _pad_trailing(draft, n, p)
    flags = _greedy_flags(p, gen)
    out = torch.full((p["reqs"], k + 1), PLACEHOLDER, dtype=torch.int32)
    if flags is not None:
        _other_rows(out, flags, V, gen)
    return {"output_token_ids": out.to(device), "cu_num_draft_tokens": _cu(n).to(device),
            "draft_token_ids": draft.to(device), "target_argmax": argmax.to(device),
            "bonus_token_ids": torch.randint(0, V, (p["reqs"], 1), generator=gen).to(device),
            "is_greedy": None if flags is None else flags.to(device)}


def _greedy_run(x, case):
    rejection_greedy_sample(x["output_token_ids"], x["cu_num_draft_tokens"], x["draft_token_ids"], x["target_argmax"],
                            x["bonus_token_ids"], x["is_greedy"], case.params["k"])


def _greedy_ref(x, case):
    out = x["output_token_ids"].cpu().clone()
    draft, argmax = x["draft_token_ids"].cpu().tolist(), x["target_argmax"].cpu().tolist()
    bonus = x["bonus_token_ids"].cpu().flatten().tolist()
    flags = x["is_greedy"]
    for r, (a, b) in enumerate(_spans(x["cu_num_draft_tokens"].cpu())):
        if flags is not None and not bool(flags[r]):
            continue
        for pos, t in enumerate(range(a, b)):
            out[r, pos] = argmax[t]
            if draft[t] != argmax[t]:
                break
        else:
            out[r, b - a] = bonus[r]
    return {"output_token_ids": out}


register(KernelSpec(
    name="spec_rejection_greedy", group="spec_decode", models=_MODELS,
    cases=(
        Case("mixed_b9_k4_V5003", {"reqs": 9, "k": 4, "vocab": 5003, "empty": (3,), "padded": (5,)},
             source="greedy and random requests in one batch, a request without drafts, a padded proposal"),
        Case("all_greedy_b7_k3", {"reqs": 7, "k": 3, "vocab": 5003, "greedy": "all", "miss": 0.1},
             source="every request greedy (no is_greedy tensor)"),
        Case("llama3_1_eagle_b256_k5", {"reqs": 256, "k": 5, "vocab": _LLAMA_V, "empty": (7, 100)}, quick=False,
             source=_EAGLE + ", 5 speculative tokens, 256 requests"),
        Case("deepseek_v3_mtp_b512_k1", {"reqs": 512, "k": 1, "vocab": _DSV3_V, "greedy": "all", "miss": 0.1},
             quick=False, source=_MTP_DS + ", 1 speculative token, 512 greedy requests"),
        Case("qwen3_next_mtp_b256_k2", {"reqs": 256, "k": 2, "vocab": _QWEN_V, "padded": (1, 2, 3)}, quick=False,
             source=_MTP_QN + ", 2 speculative tokens"),
    ),
    dtypes=("int32",),
    make_inputs=_greedy_inputs, run=_greedy_run, reference=_greedy_ref,
    outputs=("output_token_ids",), inplace=("output_token_ids",), tolerance={"int32": _EXACT},
    description="greedy verification of draft tokens over the ragged batch: the target's argmax up to the "
                "first mismatch, the bonus token when all drafts match; random requests' rows untouched",
    triton_kernels=(_greedy_accept_kernel,),
    upstream=_UP + "rejection_sample (rejection_greedy_sample_kernel)",
))


# ----------------------------------------------------------------------------- random: inputs
def _logits(T: int, V: int, gen: torch.Generator) -> torch.Tensor:
    """A broad background plus a few strongly preferred tokens per row, like a language model head;
    in about two rows of three one of them dominates (a confident next token, where drafts pass)."""
    x = torch.randn((T, V), generator=gen) * 2.0
    hot = torch.randint(0, V, (T, 16), generator=gen)
    boost = 5.0 + 7.0 * torch.rand((T, 16), generator=gen)
    boost[:, 0] += torch.where(torch.rand((T,), generator=gen) < 0.65, 8.0, 0.0)
    x.scatter_add_(1, hot, boost)
    return x


def _probs(p: dict, n: torch.Tensor, gen: torch.Generator):
    """(target_probs, draft_probs or None, draft ids): drafts sampled from the draft distribution (a
    noisy copy of the target's), or without one, the target's favourite most of the time."""
    T, V = int(n.sum()), p["vocab"]
    logits = _logits(T, V, gen)
    target = torch.softmax(logits, dim=-1, dtype=torch.float32)
    if p.get("draft_probs"):
        draft_probs = torch.softmax(logits + 1.5 * torch.randn((T, V), generator=gen), dim=-1, dtype=torch.float32)
        draft = torch.multinomial(draft_probs, 1, generator=gen).flatten()
    else:
        draft_probs = None
        draft = torch.where(torch.rand((T,), generator=gen) < 0.7, torch.argmax(target, dim=-1),
                            torch.randint(0, V, (T,), generator=gen))
    return target, draft_probs, draft.to(torch.int32)


def _ratio(target, draft_probs, draft):
    """(fp64 acceptance ratio p/q per draft token, whether it may be accepted at all: not padding and,
    with draft probabilities, q > 0)."""
    ids = draft.long().clamp(min=0)[:, None]
    pt = target.gather(1, ids).flatten().double()
    valid = draft >= 0
    if draft_probs is None:
        return pt, valid
    q = draft_probs.gather(1, ids).flatten().double()
    return pt / q.clamp(min=1e-300), valid & (q > 0)


def _uniforms(ratio: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """u ~ U(0, 1) in fp64, redrawn where it falls within 1e-5 (relative) of the ratio it is compared to."""
    u = torch.rand(ratio.shape, generator=gen, dtype=torch.float64)
    for _ in range(100):
        near = (u - ratio).abs() <= 1e-5 * torch.maximum(u, ratio)
        if not bool(near.any()):
            break
        u[near] = torch.rand((int(near.sum()),), generator=gen, dtype=torch.float64)
    return u


def _random_inputs(case, dtype, device, gen):
    p = case.params
    V, k, B = p["vocab"], p["k"], p["reqs"]
    n = _draft_counts(p, gen)
    target, draft_probs, draft = _probs(p, n, gen)
    _pad_trailing(draft, n, p)
    if draft_probs is not None and draft.numel() > 0 and int(draft[0]) >= 0:
        draft_probs[0, int(draft[0])] = 0.0  # a draft token its own distribution gave no mass: rejected
    u = _uniforms(_ratio(target, draft_probs, draft)[0], gen)
    flags = _greedy_flags(p, gen)
    if flags is None:
        flags = torch.zeros((B,), dtype=torch.bool)
    out = torch.full((B, k + 1), PLACEHOLDER, dtype=torch.int32)
    _other_rows(out, ~flags, V, gen)
    x = {"output_token_ids": out, "cu_num_draft_tokens": _cu(n), "draft_token_ids": draft,
         "draft_probs": draft_probs, "target_probs": target,
         "bonus_token_ids": torch.randint(0, V, (B, 1), generator=gen),
         "recovered_token_ids": torch.randint(0, V, (draft.numel(),), generator=gen).to(torch.int32),
         "uniform_probs": u, "is_greedy": flags}
    return {name: (t.to(device) if t is not None else None) for name, t in x.items()}


def _random_run(x, case):
    rejection_random_sample(x["output_token_ids"], x["cu_num_draft_tokens"], x["draft_token_ids"], x["draft_probs"],
                            x["target_probs"], x["bonus_token_ids"], x["recovered_token_ids"], x["uniform_probs"],
                            x["is_greedy"], case.params["k"])


def _random_ref(x, case):
    out = x["output_token_ids"].cpu().clone()
    draft = x["draft_token_ids"].cpu()
    ratio, valid = _ratio(x["target_probs"].cpu(), None if x["draft_probs"] is None else x["draft_probs"].cpu(),
                          draft)
    u, rec = x["uniform_probs"].cpu().tolist(), x["recovered_token_ids"].cpu().tolist()
    bonus, flags = x["bonus_token_ids"].cpu().flatten().tolist(), x["is_greedy"].cpu().tolist()
    for r, (a, b) in enumerate(_spans(x["cu_num_draft_tokens"].cpu())):
        if flags[r]:
            continue
        for pos, t in enumerate(range(a, b)):
            if bool(valid[t]) and float(ratio[t]) >= u[t]:
                out[r, pos] = int(draft[t])
            else:
                out[r, pos] = rec[t]
                break
        else:
            out[r, b - a] = bonus[r]
    return {"output_token_ids": out}


register(KernelSpec(
    name="spec_rejection_random", group="spec_decode", models=_MODELS,
    cases=(
        Case("draft_probs_b8_k4_V3001", {"reqs": 8, "k": 4, "vocab": 3001, "draft_probs": True, "empty": (2,),
                                         "padded": (6,)},
             source="probabilistic drafts (draft_probs), mixed greedy / random requests, a request without drafts, "
                    "a padded proposal, a draft token with zero draft probability"),
        Case("ngram_b9_k5_V4099", {"reqs": 9, "k": 5, "vocab": 4099, "greedy": "none", "padded": (0, 4)},
             source="n-gram drafts: no draft probabilities, every request random"),
        Case("llama3_1_eagle_b64_k5", {"reqs": 64, "k": 5, "vocab": _LLAMA_V, "draft_probs": True}, quick=False,
             source=_EAGLE + ", 5 speculative tokens with their draft probabilities, 64 requests"),
        Case("deepseek_v3_mtp_b128_k1", {"reqs": 128, "k": 1, "vocab": _DSV3_V, "greedy": "none"}, quick=False,
             source=_MTP_DS + ", 1 speculative token, 128 random requests"),
        Case("qwen3_next_mtp_b64_k2", {"reqs": 64, "k": 2, "vocab": _QWEN_V, "empty": (0, 9)}, quick=False,
             source=_MTP_QN + ", 2 speculative tokens"),
    ),
    dtypes=("fp32",),
    make_inputs=_random_inputs, run=_random_run, reference=_random_ref,
    outputs=("output_token_ids",), inplace=("output_token_ids",), tolerance={"fp32": _EXACT},
    description="probabilistic verification: accept a draft while p/q >= u (fp32 probabilities, fp64 uniforms), "
                "the recovered token at the first rejection, the bonus token when all pass; greedy rows untouched",
    triton_kernels=(_random_accept_kernel,),
    upstream=_UP + "rejection_sample (rejection_random_sample_kernel)",
))


# ------------------------------------------------------------------------------------- expand
def _expand_inputs(case, dtype, device, gen):
    p = case.params
    n = _draft_counts(p, gen)
    B = p["reqs"]
    if dtype.is_floating_point:
        x = (0.1 + 1.9 * torch.rand((B,), generator=gen)).to(dtype)
    else:
        x = torch.randint(1, 5000, (B,), generator=gen).to(dtype)
    x[torch.rand((B,), generator=gen) < 0.3] = p["replace_from"]
    return {"out": torch.empty((int(n.sum()),), dtype=dtype, device=device), "x": x.to(device),
            "cu_num_tokens": _cu(n).to(device)}


def _expand_run(x, case):
    expand_batch_to_tokens(x["out"], x["x"], x["cu_num_tokens"], case.params["replace_from"],
                           case.params["replace_to"])


def _expand_ref(x, case):
    p = case.params
    v = x["x"].cpu().clone()
    v[v == p["replace_from"]] = p["replace_to"]
    cu = x["cu_num_tokens"].cpu().long()
    n = torch.diff(cu, prepend=torch.zeros(1, dtype=torch.long))
    return {"out": torch.repeat_interleave(v, n)}


register(KernelSpec(
    name="spec_expand", group="spec_decode", models=_MODELS,
    cases=(
        Case("greedy_temp_b11_k4", {"reqs": 11, "k": 4, "replace_from": 0, "replace_to": 1, "empty": (0, 6)},
             source="sampling parameters of 11 requests (temperature 0 of greedy requests read as 1), requests "
                    "without drafts"),
        Case("no_replace_b5_k1", {"reqs": 5, "k": 1, "replace_from": 0, "replace_to": 0},
             source="top-k / top-p expanded as they are (DeepSeek-V3 MTP: one draft token)"),
        Case("batch1024_k5", {"reqs": 1024, "k": 5, "replace_from": 0, "replace_to": 1, "empty": (3, 511)},
             quick=False, source="1024 requests with up to 5 EAGLE draft tokens each (Llama-3.1)"),
    ),
    dtypes=("fp32", "int32", "int64"),
    make_inputs=_expand_inputs, run=_expand_run, reference=_expand_ref,
    outputs=("out",), tolerance={"fp32": _EXACT, "int32": _EXACT, "int64": _EXACT},
    description="per-request sampling parameters repeated over each request's draft tokens, with one value "
                "replaced (greedy temperature 0 -> 1)",
    triton_kernels=(_expand_kernel,),
    upstream=_UP + "expand_batch_to_tokens (expand_kernel)",
))


# ---------------------------------------------------------------------------- recovered tokens
def _recovered_inputs(case, dtype, device, gen):
    p = case.params
    n = _draft_counts(p, gen)
    target, draft_probs, draft = _probs(p, n, gen)
    _pad_trailing(draft, n, p)
    E = torch.empty((p["reqs"], p["vocab"]), dtype=torch.float64).exponential_(generator=gen).clamp_(min=1e-30)
    x = {"out": torch.empty((draft.numel(),), dtype=torch.int32), "cu_num_draft_tokens": _cu(n),
         "draft_token_ids": draft, "draft_probs": draft_probs, "target_probs": target,
         "inv_q": E.to(dtype).reciprocal()}
    return {name: (t.to(device) if t is not None else None) for name, t in x.items()}


def _recovered_run(x, case):
    sample_recovered_tokens(x["out"], x["cu_num_draft_tokens"], x["draft_token_ids"], x["draft_probs"],
                            x["target_probs"], x["inv_q"], case.params["k"])


def _recovered_ref(x, case):
    target = x["target_probs"].cpu()
    draft = x["draft_token_ids"].cpu().long()
    inv_q = x["inv_q"].cpu()
    out = torch.empty((draft.numel(),), dtype=torch.int32)
    for r, (a, b) in enumerate(_spans(x["cu_num_draft_tokens"].cpu())):
        for t in range(a, b):
            if x["draft_probs"] is None:
                prob = target[t].clone()
                if draft[t] >= 0:
                    prob[draft[t]] = 0.0
            else:
                prob = torch.clamp(target[t] - x["draft_probs"][t].cpu(), min=0.0)
            score = prob.to(inv_q.dtype) * inv_q[r]        # the same fp32 (or fp64) products as the kernel
            out[t] = int(torch.argmax(score))              # first maximum: the lowest id wins a tie
    return {"out": out}


register(KernelSpec(
    name="spec_recovered_tokens", group="spec_decode", models=_MODELS,
    cases=(
        Case("draft_probs_b5_k3_V10007", {"reqs": 5, "k": 3, "vocab": 10007, "draft_probs": True, "empty": (1,)},
             source="residual max(p - q, 0) over two 8192-wide tiles (masked tail), a request without drafts"),
        Case("ngram_b4_k5_V9001", {"reqs": 4, "k": 5, "vocab": 9001, "padded": (2,)},
             source="n-gram drafts: the target distribution without the draft token; a padded proposal"),
        Case("llama3_1_eagle_b64_k5", {"reqs": 64, "k": 5, "vocab": _LLAMA_V, "draft_probs": True}, quick=False,
             source=_EAGLE + ", 5 speculative tokens with draft probabilities"),
        Case("deepseek_v3_mtp_b128_k1", {"reqs": 128, "k": 1, "vocab": _DSV3_V}, quick=False,
             source=_MTP_DS + ", 1 speculative token"),
        Case("qwen3_next_mtp_b64_k2", {"reqs": 64, "k": 2, "vocab": _QWEN_V, "empty": (5,)}, quick=False,
             source=_MTP_QN + ", 2 speculative tokens"),
    ),
    dtypes=("fp32", "fp64"),
    make_inputs=_recovered_inputs, run=_recovered_run, reference=_recovered_ref,
    outputs=("out",), tolerance={"fp32": _EXACT, "fp64": _EXACT},
    description="the token a rejection falls back to: argmax of residual probability over exponential noise "
                "(one noise row per request; fp32, or fp64 noise), 8192-wide tiles reduced in order",
    triton_kernels=(_recovered_kernel,),
    upstream=_UP + "sample_recovered_tokens (sample_recovered_tokens_kernel)",
))
