"""Sampling and input preparation as vLLM 0.33's GPU model runner launches them every step.

The runner copies the logits to fp32, divides them by each request's temperature in place, masks
them to the top-k / top-p set in place, then draws with Gumbel-max noise generated inside the kernel
from a seed per request (no noise tensor); greedy requests (temperature 0) take the argmax.
Before the forward pass it writes positions, sequence lengths and the KV-cache slot mapping.

sampling_temperature: logits[t] /= temperature[idx_mapping[t]] (correctly rounded division) unless
  the temperature is 0 or 1 or the row is padding (idx -1); rows of one request share its entry.
sampling_topk_topp_pivot: per row, top-k keeps exactly the k largest logits (ties by lower index:
  the order of a stable descending sort), then top-p keeps, in that order, the shortest prefix of
  those survivors whose softmax mass (over the survivors) reaches p; everything else becomes -inf.
  No sort: a pivot from the row's statistics (a normal quantile of the first tile's mean and
  deviation) gathers the candidates into a per-program buffer, the exact thresholds are found by
  bisection over the candidates' order-preserving integer keys (falling back to the whole row when
  the pivot gathered too few), and ties at a threshold are kept in index order.
  Test rows put p half way inside one token's share of the mass (at least 2e-3), so fp32 sums decide
  the same prefix as the fp64 reference; rows of bf16-rounded logits have many ties.
sampling_gumbel: token = argmax(logits / T + g), g = -log(-log u), u from a counter-based generator
  keyed by the request's seed, the token's position and the vocabulary index: murmur3 (as vLLM 0.33's
  gumbel sampler hashes (seed, pos, token)) or Philox through tl.rand (seed ^ pos << 32, offset =
  token id; vLLM's rejection sampler draws with tl.rand). u is clamped to [2^-31, 1 - 2^-24]. Each
  program takes a 1024-wide slice and keeps its best (value, index); a second kernel reduces the
  slices (ties: lowest index). Temperature 0 (and padding rows): plain argmax.
  The reference regenerates the same uniforms bit for bit (integer arithmetic in numpy) and takes
  the fp64 argmax; seeds are drawn until every row's winner leads by 1e-4, so fp32 logs in the kernel
  cannot change it. Exact ids therefore check: same seed -> same token (duplicated rows), the token
  lies in the top-k/top-p set (masked logits), temperature 0 -> argmax.
runner_positions_slot_mapping: pos[t] = num_computed[req] + (t - query_start[r]); seq_lens[r] =
  num_computed[req] + query_len, zero-padded to max_num_reqs; per KV-cache group g (block tables
  reached through a table of pointers, each group with its own block size):
  slot[g, t] = block_table_g[req, pos // bs_g] * bs_g + pos % bs_g, -1 for padding requests
  (idx -1), for groups without a slot mapping, and for the padded tail up to max_num_tokens.
"""
from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

from sdk.conformance.inputs import llm_logits
from sdk.conformance.spec import Case, KernelSpec, Tolerance, register

_EXACT = Tolerance(exact=True)
_MODELS = ("qwen3_5", "qwen3_next", "llama3_1", "mixtral", "deepseek_v3", "mamba2", "gpt_oss", "glm4_5", "kimi_k2",
           "llama4", "gemma3", "nemotron_h", "granite4_h", "falcon_h1", "jamba", "qwen2_5_vl")
_QWEN_V, _QWEN35_V = 151936, 248320
_U_MIN, _U_MAX = 4.6566127342e-10, 0.99999994  # the open interval the noise is drawn from (fp32)
_PAD_SLOT_ID = -1


# ------------------------------------------------------------------------------------ temperature
@triton.jit
def _sr_temperature_kernel(logits_ptr, stride, idx_map_ptr, temp_ptr, V, BLOCK: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    req = tl.load(idx_map_ptr + t)
    if req < 0:  # a padding row
        return
    temp = tl.load(temp_ptr + req).to(tl.float32)
    if (temp == 0.0) | (temp == 1.0):  # greedy, or nothing to scale: the row is not read
        return
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < V
    x = tl.load(logits_ptr + t * stride + cols, mask=mask).to(tl.float32)
    tl.store(logits_ptr + t * stride + cols, tl.div_rn(x, temp).to(logits_ptr.dtype.element_ty), mask=mask)


def apply_temperature(logits, expanded_idx_mapping, temperature):
    T, V = logits.shape
    block = min(8192, triton.next_power_of_2(V))
    _sr_temperature_kernel[(T, triton.cdiv(V, block))](logits, logits.stride(0), expanded_idx_mapping, temperature,
                                                       V, BLOCK=block, num_warps=8)


def _request_layout(p, gen):
    """expanded_idx_mapping for `rows` token rows over `reqs` request states: consecutive rows of a
    request (as with speculative tokens), request states scattered in [0, max_reqs), some padding."""
    rows, reqs, max_reqs = p["rows"], p["reqs"], p["max_reqs"]
    states = torch.randperm(max_reqs, generator=gen)[:reqs]
    per = torch.randint(1, 4, (reqs,), generator=gen)
    idx = torch.repeat_interleave(states, per)[:rows]
    idx = torch.cat([idx, torch.full((rows - idx.numel(),), -1, dtype=idx.dtype)])
    for r in p.get("padding_rows", ()):
        idx[r] = -1
    return idx.to(torch.int32)


def _temp_inputs(case, dtype, device, gen):
    p = case.params
    idx = _request_layout(p, gen)
    temps = (0.2 + 1.6 * torch.rand((p["max_reqs"],), generator=gen)).float()
    temps[torch.randperm(p["max_reqs"], generator=gen)[:max(1, p["max_reqs"] // 4)]] = 0.0   # greedy requests
    temps[torch.randperm(p["max_reqs"], generator=gen)[:max(1, p["max_reqs"] // 6)]] = 1.0
    logits = llm_logits(p["rows"], p["vocab"], gen).to(dtype)
    return {"logits": logits.to(device), "idx_mapping": idx.to(device), "temperature": temps.to(device)}


def _temp_run(inp, case):
    apply_temperature(inp["logits"], inp["idx_mapping"], inp["temperature"])


def _temp_ref(inp, case):
    x = inp["logits"].cpu().clone()
    idx = inp["idx_mapping"].cpu().long()
    temps = inp["temperature"].cpu()
    for r in range(x.shape[0]):
        if idx[r] >= 0 and float(temps[idx[r]]) not in (0.0, 1.0):
            x[r] = (x[r].float() / temps[idx[r]]).to(x.dtype)
    return {"logits": x}


register(KernelSpec(
    name="sampling_temperature", group="sampling", models=_MODELS,
    cases=(
        Case("odd_rows9_V3001", {"rows": 9, "reqs": 5, "max_reqs": 8, "vocab": 3001, "padding_rows": (8,)},
             source="odd vocab (masked tail), several rows per request, greedy / unit / scaled / padding rows"),
        Case("qwen_rows256_V151936", {"rows": 256, "reqs": 160, "max_reqs": 256, "vocab": _QWEN_V}, quick=False,
             source="Qwen3-Next vocab 151936, 256 token rows"),
        Case("qwen3_5_rows64_V248320", {"rows": 64, "reqs": 40, "max_reqs": 128, "vocab": _QWEN35_V}, quick=False,
             source="Qwen3.5 vocab 248320 (transformers Qwen3_5MoeTextConfig), 64 token rows"),
    ),
    dtypes=("fp32",),
    make_inputs=_temp_inputs, run=_temp_run, reference=_temp_ref,
    outputs=("logits",), inplace=("logits",), tolerance={"fp32": _EXACT},
    description="temperature in place on the fp32 logits the sampler works on, per request through the "
                "expanded index mapping; temperature 0 / 1 and padding rows untouched (bit-exact)",
    triton_kernels=(_sr_temperature_kernel,),
    upstream="vllm 0.33: v1/worker/gpu/sample/gumbel.py apply_temperature (_temperature_kernel)",
))


# --------------------------------------------------------------------------- top-k / top-p (pivot)
@triton.jit
def _okey(x):
    # fp32 -> int64 with the same order (negative floats: flip the magnitude bits)
    bits = x.to(tl.int32, bitcast=True)
    return (bits ^ ((bits >> 31) & 0x7FFFFFFF)).to(tl.int64)


@triton.jit
def _okey_value(key):
    # the inverse of _okey
    bits = key.to(tl.int32)
    return (bits ^ ((bits >> 31) & 0x7FFFFFFF)).to(tl.float32, bitcast=True)


@triton.jit
def _gather(row_ptr, buf_ptr, V, pivot, m, BLOCK: tl.constexpr):
    # copy the logits > pivot into buf (in index order); their count and exp(x - m) mass
    offs = tl.arange(0, BLOCK)
    n = 0
    mass = 0.0
    for v0 in range(0, V, BLOCK):
        mask = v0 + offs < V
        x = tl.load(row_ptr + v0 + offs, mask=mask, other=float("-inf"))
        sel = mask & (x > pivot)
        pos = n + tl.cumsum(sel.to(tl.int32), axis=0) - 1
        tl.store(buf_ptr + pos, x, mask=sel)
        n += tl.sum(sel.to(tl.int32), axis=0)
        mass += tl.sum(tl.where(sel, tl.exp(x - m), 0.0), axis=0)
    return n, mass


@triton.jit
def _count_ge(buf_ptr, n, key, BLOCK_T: tl.constexpr):
    offs = tl.arange(0, BLOCK_T)
    cnt = 0
    for i0 in range(0, n, BLOCK_T):
        mask = i0 + offs < n
        x = tl.load(buf_ptr + i0 + offs, mask=mask, other=float("-inf"))
        cnt += tl.sum((mask & (_okey(x) >= key)).to(tl.int32), axis=0)
    return cnt


@triton.jit
def _mass_ge(buf_ptr, n, key, m, BLOCK_T: tl.constexpr):
    offs = tl.arange(0, BLOCK_T)
    mass = 0.0
    for i0 in range(0, n, BLOCK_T):
        mask = i0 + offs < n
        x = tl.load(buf_ptr + i0 + offs, mask=mask, other=float("-inf"))
        mass += tl.sum(tl.where(mask & (_okey(x) >= key), tl.exp(x - m), 0.0), axis=0)
    return mass


@triton.jit
def _topk_topp_pivot_kernel(logits_ptr, stride, buf_ptr, k_ptr, p_ptr, zq_ptr, B, V,
                            TOPK: tl.constexpr, TOPP: tl.constexpr, NZ: tl.constexpr,
                            BLOCK: tl.constexpr, BLOCK_T: tl.constexpr):
    pid = tl.program_id(0)
    buf = buf_ptr + pid.to(tl.int64) * V
    offs = tl.arange(0, BLOCK)
    KEY_MIN: tl.constexpr = -2147483649  # below every key: "keep everything"
    for r in range(pid, B, tl.num_programs(0)):
        row = logits_ptr + r.to(tl.int64) * stride
        k = tl.zeros((), tl.int32) + V
        if TOPK:
            k = tl.load(k_ptr + r)
            k = tl.where((k <= 0) | (k >= V), V, k)
        p = tl.full((), 1.0, tl.float32)
        if TOPP:
            p = tl.load(p_ptr + r).to(tl.float32)
        if (k < V) | (p < 1.0):
            # statistics of the first tile -> a pivot expected to leave about 2k (top-k rows) or
            # 1/16 of the row (top-p only) above it, assuming a normal background
            x0 = tl.load(row + offs, mask=offs < V, other=float("-inf"))
            fin0 = x0 > float("-inf")
            n0 = tl.maximum(tl.sum(fin0.to(tl.float32), axis=0), 1.0)
            mean = tl.sum(tl.where(fin0, x0, 0.0), axis=0) / n0
            var = tl.sum(tl.where(fin0, x0 * x0, 0.0), axis=0) / n0 - mean * mean
            frac = tl.where(k < V, 2.0 * k / V, 1.0 / 16.0)
            zi = tl.minimum((frac * NZ).to(tl.int32), NZ - 1)
            pivot = mean + tl.sqrt(tl.maximum(var, 0.0)) * tl.load(zq_ptr + zi)

            # pass 1: maximum, count of finite logits, and the softmax normaliser of the row
            m_v = tl.full((BLOCK,), float("-inf"), tl.float32)
            nfin_v = tl.zeros((BLOCK,), tl.int32)
            for v0 in range(0, V, BLOCK):
                x = tl.load(row + v0 + offs, mask=v0 + offs < V, other=float("-inf"))
                m_v = tl.maximum(m_v, x)
                nfin_v += (x > float("-inf")).to(tl.int32)
            m = tl.max(m_v, axis=0)
            nfin = tl.sum(nfin_v, axis=0)
            z_v = tl.zeros((BLOCK,), tl.float32)
            for v0 in range(0, V, BLOCK):
                x = tl.load(row + v0 + offs, mask=v0 + offs < V, other=float("-inf"))
                z_v += tl.exp(x - m)
            Z = tl.sum(z_v, axis=0)

            # pass 2: gather the candidates; all finite logits when the pivot left too few
            n, mass = _gather(row, buf, V, pivot, m, BLOCK)
            short = tl.where(k < V, n < k, mass < p * Z * 1.001)
            if short:
                n, mass = _gather(row, buf, V, float("-inf"), m, BLOCK)

            # top-k: the k-th largest key t (exactly k kept: those above t, then ties in index order)
            t = tl.full((), KEY_MIN, tl.int64)
            j_t = tl.zeros((), tl.int32)
            if k < nfin:
                lo = _okey(tl.full((), float("-inf"), tl.float32))
                hi = _okey(m)
                while lo < hi:
                    mid = lo + (hi - lo + 1) // 2
                    ok = _count_ge(buf, n, mid, BLOCK_T) >= k
                    lo = tl.where(ok, mid, lo)
                    hi = tl.where(ok, hi, mid - 1)
                t = lo
                j_t = k - _count_ge(buf, n, t + 1, BLOCK_T)
            thr = t
            j_thr = j_t

            # top-p over the survivors: the largest key u whose survivors at or above it hold >= p of
            # their mass, then as many of the ties at u (index order) as reach p
            if p < 1.0:
                if t == KEY_MIN:
                    z_s = Z
                    lo = tl.full((), KEY_MIN, tl.int64)
                else:
                    z_s = _mass_ge(buf, n, t + 1, m, BLOCK_T) + j_t * tl.exp(_okey_value(t) - m)
                    lo = t
                target = p * z_s
                hi = _okey(m)
                while lo < hi:
                    mid = lo + (hi - lo + 1) // 2
                    ok = _mass_ge(buf, n, mid, m, BLOCK_T) >= target
                    lo = tl.where(ok, mid, lo)
                    hi = tl.where(ok, hi, mid - 1)
                u = lo
                above = _mass_ge(buf, n, u + 1, m, BLOCK_T)
                ties = _count_ge(buf, n, u, BLOCK_T) - _count_ge(buf, n, u + 1, BLOCK_T)
                ties = tl.where(u == t, j_t, ties)
                need = tl.math.ceil((target - above) / tl.exp(_okey_value(u) - m)).to(tl.int32)
                need = tl.minimum(tl.maximum(need, 1), ties)
                thr = u
                j_thr = need

            # final pass, in index order: keep keys above thr and the first j_thr ties at it
            if thr != KEY_MIN:
                seen = 0
                for v0 in range(0, V, BLOCK):
                    mask = v0 + offs < V
                    x = tl.load(row + v0 + offs, mask=mask, other=float("-inf"))
                    key = _okey(x)
                    tie = mask & (key == thr)
                    rank = seen + tl.cumsum(tie.to(tl.int32), axis=0)
                    keep = (key > thr) | (tie & (rank <= j_thr))
                    seen += tl.sum(tie.to(tl.int32), axis=0)
                    tl.store(row + v0 + offs, tl.where(keep, x, float("-inf")), mask=mask)


_ZQ_CACHE: dict = {}


def _normal_quantiles(n: int, device) -> torch.Tensor:
    """z_i with P(N(0,1) > z_i) = (i+1)/n, the last one finite."""
    key = (n, str(device))
    if key not in _ZQ_CACHE:
        q = torch.special.ndtri(1.0 - torch.arange(1, n + 1, dtype=torch.float64) / n).clamp(min=-8.0)
        _ZQ_CACHE[key] = q.float().to(device)
    return _ZQ_CACHE[key]


def apply_top_k_top_p(logits, k, p, max_programs: int = 128, block: int | None = None):
    """Mask fp32 logits [B, V] in place; k [B] int32 or None, p [B] fp32 or None. `max_programs`
    persistent programs (one candidate buffer each) and the tile width are launch choices."""
    B, V = logits.shape
    programs = max(1, min(B, max_programs))
    buffer = torch.empty((programs, V), dtype=torch.float32, device=logits.device)
    _topk_topp_pivot_kernel[(programs,)](
        logits, logits.stride(0), buffer, k if k is not None else logits, p if p is not None else logits,
        _normal_quantiles(200, logits.device), B, V, TOPK=k is not None, TOPP=p is not None, NZ=200,
        BLOCK=block or min(4096, triton.next_power_of_2(V)), BLOCK_T=1024, num_warps=8)


def _keep_ref(x: torch.Tensor, k: int, p: float) -> torch.Tensor:
    """Keep-mask of one row by the definition: stable descending order, the first k, then the
    shortest prefix of them with softmax mass >= p."""
    V = x.numel()
    order = torch.sort(x, descending=True, stable=True).indices
    n = k if 0 < k < V else V
    keep_sorted = torch.zeros(V, dtype=torch.bool)
    keep_sorted[:n] = True
    if p < 1.0:
        xs = x[order[:n]].double()
        probs = torch.exp(xs - xs.max())
        probs = probs / probs.sum()
        before = probs.cumsum(0) - probs
        keep_sorted[:n] &= before < p
    keep = torch.zeros(V, dtype=torch.bool)
    keep[order[keep_sorted]] = True
    return keep


def _pick_top_p(x: torch.Tensor, k: int, gen: torch.Generator) -> float:
    """p half way inside the share of one of the kept tokens that holds >= 2e-3 of the mass (1.0
    when none does)."""
    V = x.numel()
    order = torch.sort(x, descending=True, stable=True).indices
    n = k if 0 < k < V else V
    xs = x[order[:n]].double()
    probs = torch.exp(xs - xs.max())
    probs = probs / probs.sum()
    before = probs.cumsum(0) - probs
    mid = before + probs / 2
    ok = torch.nonzero((probs >= 2e-3) & (mid > 0.15) & (mid < 0.97)).flatten()
    if ok.numel() == 0:
        return 1.0
    return float(mid[ok[int(torch.randint(0, ok.numel(), (1,), generator=gen))]])


def _topk_topp_inputs(case, dtype, device, gen):
    p = case.params
    B, V = p["batch"], p["vocab"]
    x = llm_logits(B, V, gen) / (0.5 + torch.rand((B, 1), generator=gen))  # after temperature
    for r in range(B):
        if r % 3 == 1:  # logits of a bf16 LM head copied to fp32: many ties
            x[r] = x[r].to(torch.bfloat16).float()
        if r % 7 == 5:  # a grammar mask: a block of the vocabulary at -inf
            x[r, V // 5: V // 2] = float("-inf")
        if r in p.get("far_rows", ()):  # the first tile masked, every logit negative: the pivot from
            x[r, :p["launch"]["block"]] = float("-inf")  # the first tile's statistics gathers nothing
            x[r] -= 40.0
    pattern = p.get("k_pattern", (0, 20, 1, 50, V, 7, V // 3, 1000))
    k = torch.tensor([pattern[r % len(pattern)] for r in range(B)], dtype=torch.int32)
    top_p = torch.ones(B, dtype=torch.float32)
    for r in range(B):
        if r % 4 != 3:
            top_p[r] = _pick_top_p(x[r], int(k[r]) if p.get("top_k", True) else 0, gen)
    return {"logits": x.to(device), "top_k": k.to(device) if p.get("top_k", True) else None,
            "top_p": top_p.to(device) if p.get("top_p", True) else None}


def _topk_topp_run(inp, case):
    apply_top_k_top_p(inp["logits"], inp["top_k"], inp["top_p"], **case.params.get("launch", {}))


def _topk_topp_ref(inp, case):
    x = inp["logits"].cpu()
    out = torch.full_like(x, float("-inf"))
    for r in range(x.shape[0]):
        k = int(inp["top_k"][r]) if inp["top_k"] is not None else 0
        p = float(inp["top_p"][r]) if inp["top_p"] is not None else 1.0
        keep = _keep_ref(x[r], k, p)
        out[r][keep] = x[r][keep]
    return {"logits": out}


register(KernelSpec(
    name="sampling_topk_topp_pivot", group="sampling", models=_MODELS,
    cases=(
        Case("odd_B10_V3001", {"batch": 10, "vocab": 3001, "launch": {"max_programs": 4, "block": 1024},
                               "far_rows": (4, 9)},
             source="odd vocab (masked tail); k = off, 1, 7, 20, 50, 1000, V/3, V; p on and off; tied "
                    "(bf16-valued) rows, grammar-masked rows, two rows whose pivot gathers nothing (the "
                    "whole-row fallback); 4 persistent programs over 10 rows"),
        Case("topk_only_B6_V2000", {"batch": 6, "vocab": 2000, "top_p": False},
             source="top-k only (no p tensor)"),
        Case("topp_only_B6_V2000", {"batch": 6, "vocab": 2000, "top_k": False},
             source="top-p only (no k tensor)"),
        Case("qwen_B64_V151936", {"batch": 64, "vocab": _QWEN_V}, quick=False,
             source="Qwen3-Next vocab 151936, 64 rows"),
        Case("qwen3_5_B32_V248320", {"batch": 32, "vocab": _QWEN35_V, "launch": {"max_programs": 16}}, quick=False,
             source="Qwen3.5 vocab 248320, 32 rows over 16 programs"),
    ),
    dtypes=("fp32",),
    make_inputs=_topk_topp_inputs, run=_topk_topp_run, reference=_topk_topp_ref,
    outputs=("logits",), inplace=("logits",), tolerance={"fp32": _EXACT},
    description="top-k (exactly k, ties by index) then top-p over the survivors, masking the fp32 logits in "
                "place; candidates gathered under a statistical pivot, thresholds by bisection over integer "
                "keys, no sort (bit-exact)",
    triton_kernels=(_topk_topp_pivot_kernel,),
    upstream="vllm 0.33: v1/sample/ops/topk_topp_triton.py apply_top_k_top_p_triton (_topk_topp_kernel)",
))


# ----------------------------------------------------------------------------------- Gumbel draw
@triton.jit
def _rotl32(v, r: tl.constexpr):
    return (v << r) | (v >> (32 - r))


@triton.jit
def _murmur3_word(h, w):
    w = w * 0xCC9E2D51
    w = _rotl32(w, 15) * 0x1B873593
    h = _rotl32(h ^ w, 13)
    return h * 5 + 0xE6546B64


@triton.jit
def _murmur3_uniform(seed, pos, token):
    # MurmurHash3 (x86, 32-bit) of the words (seed_hi, pos, token) with seed_lo as the hash seed
    h = (seed & 0xFFFFFFFF).to(tl.uint32)
    h = _murmur3_word(h, ((seed >> 32) & 0xFFFFFFFF).to(tl.uint32))
    h = _murmur3_word(h, (pos & 0xFFFFFFFF).to(tl.uint32))
    h = _murmur3_word(h, token.to(tl.uint32))
    h = h ^ 12
    h = (h ^ (h >> 16)) * 0x85EBCA6B
    h = (h ^ (h >> 13)) * 0xC2B2AE35
    h = h ^ (h >> 16)
    # both 16-bit halves convert exactly; one rounding in the sum
    return (h >> 16).to(tl.int32).to(tl.float32) * 1.52587890625e-05 + \
        ((h & 0xFFFF).to(tl.int32).to(tl.float32) + 0.5) * 2.3283064365386963e-10


@triton.jit
def _gumbel_local_kernel(logits_ptr, stride, idx_map_ptr, temp_ptr, seed_ptr, pos_ptr, lmax_ptr, larg_ptr, V,
                         n_blocks, APPLY_TEMPERATURE: tl.constexpr, NOISE: tl.constexpr, BLOCK: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    blk = tl.program_id(1)
    cols = blk * BLOCK + tl.arange(0, BLOCK)
    mask = cols < V
    x = tl.load(logits_ptr + t * stride + cols, mask=mask, other=float("-inf")).to(tl.float32)
    req = tl.load(idx_map_ptr + t)
    valid = req >= 0
    temp = tl.load(temp_ptr + req, mask=valid, other=0.0).to(tl.float32)
    if temp != 0.0:
        if APPLY_TEMPERATURE:
            x = tl.div_rn(x, temp)
        seed = tl.load(seed_ptr + req, mask=valid, other=0)
        pos = tl.load(pos_ptr + t)
        if NOISE == 0:
            u = _murmur3_uniform(seed, pos, cols)
        else:
            u = tl.rand(seed ^ (pos << 32), cols)
        u = tl.minimum(tl.maximum(u, 4.6566127342e-10), 0.99999994)
        x = tl.where(mask, x - tl.log(-tl.log(u)), float("-inf"))
    best = tl.max(x, axis=0)
    arg = tl.min(tl.where(x == best, cols, 2147483647), axis=0)
    tl.store(lmax_ptr + t * n_blocks + blk, best)
    tl.store(larg_ptr + t * n_blocks + blk, arg)


@triton.jit
def _gumbel_reduce_kernel(lmax_ptr, larg_ptr, out_ptr, n_blocks, BLOCK_S: tl.constexpr):
    t = tl.program_id(0).to(tl.int64)
    s = tl.arange(0, BLOCK_S)
    v = tl.load(lmax_ptr + t * n_blocks + s, mask=s < n_blocks, other=float("-inf"))
    a = tl.load(larg_ptr + t * n_blocks + s, mask=s < n_blocks, other=2147483647)
    best = tl.max(v, axis=0)
    tl.store(out_ptr + t, tl.min(tl.where(v == best, a, 2147483647), axis=0).to(tl.int64))


def gumbel_sample(logits, expanded_idx_mapping, temperature, seed, pos, apply_temperature: bool, noise: str,
                  out):
    T, V = logits.shape
    block = 1024
    n_blocks = triton.cdiv(V, block)
    lmax = torch.empty((T, n_blocks), dtype=torch.float32, device=logits.device)
    larg = torch.empty((T, n_blocks), dtype=torch.int32, device=logits.device)
    _gumbel_local_kernel[(T, n_blocks)](logits, logits.stride(0), expanded_idx_mapping, temperature, seed, pos,
                                        lmax, larg, V, n_blocks, APPLY_TEMPERATURE=apply_temperature,
                                        NOISE=0 if noise == "murmur3" else 1, BLOCK=block, num_warps=4)
    _gumbel_reduce_kernel[(T,)](lmax, larg, out, n_blocks, BLOCK_S=triton.next_power_of_2(n_blocks), num_warps=4)


# the same uniforms on the host, bit for bit (numpy integer arithmetic)
_M32 = np.uint64(0xFFFFFFFF)


def _rotl_np(v, r):
    return ((v << np.uint64(r)) | (v >> np.uint64(32 - r))) & _M32


def _mm3_word_np(h, w):
    w = (w * np.uint64(0xCC9E2D51)) & _M32
    w = (_rotl_np(w, 15) * np.uint64(0x1B873593)) & _M32
    h = _rotl_np(h ^ w, 13)
    return (h * np.uint64(5) + np.uint64(0xE6546B64)) & _M32


def _murmur3_uniform_np(seed: int, pos: int, tokens: np.ndarray) -> np.ndarray:
    s = seed & 0xFFFFFFFFFFFFFFFF
    h = np.full(tokens.shape, s & 0xFFFFFFFF, dtype=np.uint64)
    h = _mm3_word_np(h, np.uint64(s >> 32))
    h = _mm3_word_np(h, np.uint64(pos & 0xFFFFFFFF))
    h = _mm3_word_np(h, tokens.astype(np.uint64))
    h = h ^ np.uint64(12)
    h = ((h ^ (h >> np.uint64(16))) * np.uint64(0x85EBCA6B)) & _M32
    h = ((h ^ (h >> np.uint64(13))) * np.uint64(0xC2B2AE35)) & _M32
    h = h ^ (h >> np.uint64(16))
    hi = (h >> np.uint64(16)).astype(np.float64) * 1.52587890625e-05
    lo = ((h & np.uint64(0xFFFF)).astype(np.float64) + 0.5) * 2.3283064365386963e-10
    return (hi + lo).astype(np.float32)  # the exact sum, rounded once


def _philox_uniform_np(seed: int, tokens: np.ndarray) -> np.ndarray:
    """tl.rand(seed, tokens): Philox4x32-10 on the counter (token, 0, 0, 0), key (seed_lo, seed_hi)."""
    s = seed & 0xFFFFFFFFFFFFFFFF
    c0, c1 = tokens.astype(np.uint64), np.zeros(tokens.shape, np.uint64)
    c2, c3 = np.zeros(tokens.shape, np.uint64), np.zeros(tokens.shape, np.uint64)
    k0, k1 = np.uint64(s & 0xFFFFFFFF), np.uint64(s >> 32)
    A, Bm = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
    for _ in range(10):
        p0, p2 = A * c0, Bm * c2
        c0, c1, c2, c3 = ((p2 >> np.uint64(32)) ^ c1 ^ k0), p2 & _M32, ((p0 >> np.uint64(32)) ^ c3 ^ k1), p0 & _M32
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & _M32, (k1 + np.uint64(0xBB67AE85)) & _M32
    x = c0.astype(np.uint32).view(np.int32).astype(np.int64)
    x = np.where(x < 0, -x - 1, x)
    return x.astype(np.float32) * np.float32(4.6566127342e-10)


def _noise_np(noise: str, seed: int, pos: int, V: int) -> np.ndarray:
    tokens = np.arange(V, dtype=np.uint32)
    if noise == "murmur3":
        u = _murmur3_uniform_np(seed, pos, tokens)
    else:
        u = _philox_uniform_np(seed ^ ((pos << 32) & 0xFFFFFFFFFFFFFFFF), tokens)
    u = np.minimum(np.maximum(u, np.float32(_U_MIN)), np.float32(_U_MAX)).astype(np.float64)
    return -np.log(-np.log(u))


def _gumbel_scores(x32: torch.Tensor, temp: float, apply_temperature: bool, noise: str, seed: int, pos: int):
    """fp64 scores of one row as the kernel ranks them (None: greedy, rank the logits themselves)."""
    if temp == 0.0:
        return None
    x = x32 / torch.tensor(temp, dtype=torch.float32) if apply_temperature else x32
    return x.double() + torch.from_numpy(_noise_np(noise, seed, pos, x32.numel()))


def _clear_winner(scores: torch.Tensor) -> bool:
    top = torch.topk(scores, 2).values
    return bool(top[0] - top[1] >= 1e-4 + 1e-5 * abs(float(top[0])))


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _gumbel_inputs(case, dtype, device, gen):
    p = case.params
    V, rows = p["vocab"], p["rows"]
    idx = _request_layout(p, gen)
    max_reqs = p["max_reqs"]
    temps = (0.5 + torch.rand((max_reqs,), generator=gen)).float()
    temps[torch.randperm(max_reqs, generator=gen)[:max(1, max_reqs // 6)]] = 0.0
    pos = torch.randint(0, 30000, (rows,), generator=gen)
    # a flat head: two dozen candidates within a few logits of each other, so the noise decides
    x = llm_logits(rows, V, gen, spread=0.5, boost=(2.0, 2.0))
    for r in range(rows):
        if r % 3 == 2:  # as left by top-k / top-p masking
            kth = torch.topk(x[r], (50, 7, 1000)[(r // 3) % 3]).values[-1]
            x[r][x[r] < kth] = float("-inf")
    dup = p.get("duplicate", ())
    for a, b in dup:  # the same request and position twice: the same noise, the same token
        idx[b], pos[b], x[b] = idx[a], pos[a], x[a]
    x = x.to(dtype)
    for r in range(rows):  # a unique maximum for greedy rows (bf16 logits tie easily)
        top = int(torch.argmax(x[r].float()))
        x[r, top] = (x[r].float().max() + 0.5).to(dtype)
    seeds = torch.zeros(max_reqs, dtype=torch.int64)
    x32 = x.float()
    for q in range(max_reqs):
        rows_q = [r for r in range(rows) if int(idx[r]) == q]
        for _ in range(50):
            seed = _signed64(int(torch.randint(0, 1 << 62, (1,), generator=gen)) * 4 + 3)
            scores = [_gumbel_scores(x32[r], float(temps[q]), p["apply_temperature"], p["noise"], seed, int(pos[r]))
                      for r in rows_q]
            if all(s is None or _clear_winner(s) for s in scores):
                break
        seeds[q] = seed
    return {"logits": x.to(device), "idx_mapping": idx.to(device), "temperature": temps.to(device),
            "seeds": seeds.to(device), "pos": pos.to(device),
            "sampled": torch.empty((rows,), dtype=torch.int64, device=device)}


def _gumbel_run(inp, case):
    gumbel_sample(inp["logits"], inp["idx_mapping"], inp["temperature"], inp["seeds"], inp["pos"],
                  case.params["apply_temperature"], case.params["noise"], inp["sampled"])


def _gumbel_ref(inp, case):
    p = case.params
    x32 = inp["logits"].cpu().float()
    idx, temps = inp["idx_mapping"].cpu(), inp["temperature"].cpu()
    seeds, pos = inp["seeds"].cpu(), inp["pos"].cpu()
    out = torch.empty(x32.shape[0], dtype=torch.int64)
    for r in range(x32.shape[0]):
        q = int(idx[r])
        temp = float(temps[q]) if q >= 0 else 0.0
        s = _gumbel_scores(x32[r], temp, p["apply_temperature"], p["noise"], int(seeds[q]) if q >= 0 else 0,
                           int(pos[r]))
        out[r] = torch.argmax(x32[r] if s is None else s)
    return {"sampled": out}


_GUMBEL_Q = {"rows": 10, "reqs": 6, "max_reqs": 8, "padding_rows": (9,), "duplicate": ((0, 7),)}
register(KernelSpec(
    name="sampling_gumbel", group="sampling", models=_MODELS,
    cases=(
        Case("murmur3_odd_V3001", {**_GUMBEL_Q, "vocab": 3001, "noise": "murmur3", "apply_temperature": False},
             source="odd vocab (masked tail slice); greedy, sampled, masked (top-k) and padding rows; one row "
                    "repeated with the same request and position; logits already divided by temperature"),
        Case("philox_odd_V2500_temp", {**_GUMBEL_Q, "vocab": 2500, "noise": "philox", "apply_temperature": True},
             source="tl.rand noise; temperature applied in the kernel"),
        Case("qwen_murmur3_rows128_V151936", {"rows": 128, "reqs": 100, "max_reqs": 128, "vocab": _QWEN_V,
                                              "noise": "murmur3", "apply_temperature": False,
                                              "duplicate": ((0, 127),)}, quick=False,
             source="Qwen3-Next vocab 151936, 128 token rows"),
        Case("qwen3_5_philox_rows32_V248320", {"rows": 32, "reqs": 20, "max_reqs": 64, "vocab": _QWEN35_V,
                                               "noise": "philox", "apply_temperature": True}, quick=False,
             source="Qwen3.5 vocab 248320, 32 token rows"),
    ),
    dtypes=("fp32", "bf16"),
    make_inputs=_gumbel_inputs, run=_gumbel_run, reference=_gumbel_ref,
    outputs=("sampled",), tolerance={"fp32": _EXACT, "bf16": _EXACT},
    description="Gumbel-max draw with in-kernel noise from a seed per request (murmur3 hash or tl.rand "
                "Philox of seed, position, token), argmax per 1024-wide slice then across slices; greedy "
                "rows take the argmax (token ids exact)",
    triton_kernels=(_gumbel_local_kernel, _gumbel_reduce_kernel),
    upstream="vllm 0.33: v1/worker/gpu/sample/gumbel.py gumbel_sample (_gumbel_sample_kernel); the tl.rand "
             "variant draws as v1/worker/gpu/spec_decode/rejection_sampler_utils.py does (tl_rand32)",
))


# ------------------------------------------------------------------ positions and slot mapping
@triton.jit
def _pos_seq_lens_kernel(pos_ptr, seq_lens_ptr, idx_map_ptr, qsl_ptr, computed_ptr, max_num_reqs,
                         BLOCK: tl.constexpr):
    r = tl.program_id(0)
    num_reqs = tl.num_programs(0) - 1
    offs = tl.arange(0, BLOCK)
    if r == num_reqs:  # the last program zero-fills the unused sequence lengths
        for i0 in range(num_reqs, max_num_reqs, BLOCK):
            tl.store(seq_lens_ptr + i0 + offs, 0, mask=i0 + offs < max_num_reqs)
        return
    req = tl.load(idx_map_ptr + r)
    start = tl.load(qsl_ptr + r)
    qlen = tl.load(qsl_ptr + r + 1) - start
    done = tl.load(computed_ptr + req, mask=req >= 0, other=0)
    tl.store(seq_lens_ptr + r, done + qlen)
    for i0 in range(0, qlen, BLOCK):
        i = i0 + offs
        tl.store(pos_ptr + start + i, (done + i).to(tl.int64), mask=i < qlen)


@triton.jit
def _slot_mapping_kernel(max_num_tokens, idx_map_ptr, qsl_ptr, pos_ptr, table_ptrs, table_strides, block_sizes,
                         enabled_ptr, slots_ptr, stride_slots, PAD_ID: tl.constexpr, BLOCK: tl.constexpr):
    g = tl.program_id(0)
    r = tl.program_id(1)
    out = slots_ptr + g.to(tl.int64) * stride_slots
    offs = tl.arange(0, BLOCK)
    if r == tl.num_programs(1) - 1:  # pad from the last real token to max_num_tokens
        for i0 in range(tl.load(qsl_ptr + r), max_num_tokens, BLOCK):
            tl.store(out + i0 + offs, PAD_ID, mask=i0 + offs < max_num_tokens)
        return
    table = tl.load(table_ptrs + g).to(tl.pointer_type(tl.int32))  # this group's block table
    stride = tl.load(table_strides + g)
    bs = tl.load(block_sizes + g)
    enabled = tl.load(enabled_ptr + g) != 0
    req = tl.load(idx_map_ptr + r)
    real = req >= 0
    start = tl.load(qsl_ptr + r)
    end = tl.load(qsl_ptr + r + 1)
    for i0 in range(start, end, BLOCK):
        i = i0 + offs
        m = i < end
        pos = tl.load(pos_ptr + i, mask=m, other=0)
        blk = tl.load(table + req.to(tl.int64) * stride + pos // bs, mask=m & real & enabled, other=0)
        slot = blk.to(tl.int64) * bs + pos % bs
        tl.store(out + i, tl.where(real & enabled, slot, PAD_ID), mask=m)


def prepare_positions_slots(idx_mapping, query_start_loc, num_computed, pos, seq_lens, block_tables, block_sizes,
                            slot_mapping_enabled, slot_mappings):
    """pos [num_tokens] and seq_lens [max_num_reqs]; slot_mappings [groups, max_num_tokens] from the
    block table of each KV-cache group (int32 [max_reqs, max_blocks] each)."""
    num_reqs = idx_mapping.shape[0]
    _pos_seq_lens_kernel[(num_reqs + 1,)](pos, seq_lens, idx_mapping, query_start_loc, num_computed,
                                          seq_lens.shape[0], BLOCK=1024, num_warps=4)
    dev = idx_mapping.device
    ptrs = torch.tensor([t.data_ptr() for t in block_tables], dtype=torch.int64, device=dev)
    strides = torch.tensor([t.stride(0) for t in block_tables], dtype=torch.int64, device=dev)
    G = len(block_tables)
    _slot_mapping_kernel[(G, num_reqs + 1)](slot_mappings.shape[1], idx_mapping, query_start_loc, pos, ptrs, strides,
                                            block_sizes, slot_mapping_enabled, slot_mappings, slot_mappings.stride(0),
                                            PAD_ID=_PAD_SLOT_ID, BLOCK=1024, num_warps=4)


def _prep_inputs(case, dtype, device, gen):
    p = case.params
    reqs, max_reqs, max_tokens = p["reqs"], p["max_reqs"], p["max_tokens"]
    qlens = torch.tensor(p["query_lens"], dtype=torch.int32)
    states = torch.randperm(max_reqs, generator=gen)[:reqs].to(torch.int32)
    for r in p.get("padding_reqs", ()):
        states[r] = -1
    computed = torch.randint(0, p["max_context"], (max_reqs,), generator=gen).to(torch.int32)
    qsl = torch.zeros(reqs + 1, dtype=torch.int32)
    qsl[1:] = torch.cumsum(qlens, 0)
    tables = []
    for bs in p["block_sizes"]:
        nblk = (p["max_context"] + int(qlens.max()) + bs - 1) // bs
        tables.append(torch.randint(1, 100000, (max_reqs, nblk), generator=gen).to(torch.int32).to(device))
    return {"idx_mapping": states.to(device), "query_start_loc": qsl.to(device), "num_computed": computed.to(device),
            "block_tables": tables, "block_sizes": torch.tensor(p["block_sizes"], dtype=torch.int32).to(device),
            "slot_mapping_enabled": torch.tensor(p["enabled"], dtype=torch.int32).to(device),
            "pos": torch.empty(int(qsl[-1]), dtype=torch.int64, device=device),
            "seq_lens": torch.empty(max_reqs, dtype=torch.int32, device=device),
            "slot_mappings": torch.empty((len(p["block_sizes"]), max_tokens), dtype=torch.int64, device=device)}


def _prep_run(inp, case):
    prepare_positions_slots(inp["idx_mapping"], inp["query_start_loc"], inp["num_computed"], inp["pos"],
                            inp["seq_lens"], inp["block_tables"], inp["block_sizes"], inp["slot_mapping_enabled"],
                            inp["slot_mappings"])


def _prep_ref(inp, case):
    idx = inp["idx_mapping"].cpu().long()
    qsl = inp["query_start_loc"].cpu().long()
    computed = inp["num_computed"].cpu().long()
    reqs = idx.numel()
    done = torch.where(idx >= 0, computed[idx.clamp(min=0)], 0)
    qlen = qsl[1:] - qsl[:-1]
    seq_lens = torch.zeros_like(inp["seq_lens"].cpu())
    seq_lens[:reqs] = (done + qlen).to(seq_lens.dtype)
    req_of_token = torch.repeat_interleave(torch.arange(reqs), qlen)
    pos = done[req_of_token] + (torch.arange(int(qsl[-1])) - qsl[req_of_token])
    slots = torch.full(inp["slot_mappings"].shape, _PAD_SLOT_ID, dtype=torch.int64)
    for g, table in enumerate(inp["block_tables"]):
        bs = int(inp["block_sizes"][g])
        if not int(inp["slot_mapping_enabled"][g]):
            continue
        table = table.cpu().long()
        q = idx[req_of_token]
        real = q >= 0
        blk = table[q.clamp(min=0), pos // bs]
        slots[g, :pos.numel()] = torch.where(real, blk * bs + pos % bs, _PAD_SLOT_ID)
    return {"pos": pos, "seq_lens": seq_lens, "slot_mappings": slots}


register(KernelSpec(
    name="runner_positions_slot_mapping", group="model_runner", models=_MODELS,
    cases=(
        Case("odd_reqs6_two_groups", {"reqs": 6, "max_reqs": 9, "query_lens": (37, 1, 1, 5, 1, 130),
                                      "max_context": 900, "max_tokens": 200, "block_sizes": (16, 528),
                                      "enabled": (1, 1), "padding_reqs": (4,)},
             source="decode and prefill rows, a padding request, two KV-cache groups: 16-token pages and the "
                    "hundreds-of-tokens pages of hybrid models (528)"),
        Case("group_without_slots", {"reqs": 3, "max_reqs": 4, "query_lens": (3, 1, 20), "max_context": 300,
                                     "max_tokens": 32, "block_sizes": (64, 16), "enabled": (1, 0)},
             source="a KV-cache group without a slot mapping (padded to -1)"),
        Case("serving_reqs256_T8192", {"reqs": 256, "max_reqs": 512, "query_lens": tuple([1] * 240 + [497] * 16),
                                       "max_context": 32768, "max_tokens": 8448, "block_sizes": (16, 544),
                                       "enabled": (1, 1)}, quick=False,
             source="a mixed step: 240 decodes and 16 prefill chunks, 8192 tokens, contexts up to 32K"),
    ),
    dtypes=("int32",),
    make_inputs=_prep_inputs, run=_prep_run, reference=_prep_ref,
    outputs=("pos", "seq_lens", "slot_mappings"), tolerance={"int32": _EXACT},
    description="model-runner input preparation: positions and sequence lengths from computed-token counts "
                "and query start locations; KV-cache slot mapping per cache group through block tables "
                "reached by a pointer table (exact)",
    triton_kernels=(_pos_seq_lens_kernel, _slot_mapping_kernel),
    upstream="vllm 0.33: v1/worker/gpu/input_batch.py prepare_pos_seq_lens (_prepare_pos_seq_lens_kernel); "
             "v1/worker/gpu/block_table.py BlockTables.compute_slot_mappings (_compute_slot_mappings_kernel)",
))
