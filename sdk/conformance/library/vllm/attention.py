"""vLLM's unified paged attention and its KV-cache write."""
from __future__ import annotations

import torch

from ...spec import Case, Tolerance
from .. import randn
from . import DTYPES, RMSE, _kernel, vllm_call


# ================================================================================= attention
ATTN_SRC = {
    "qwen3_5": "Qwen3.5 / Qwen3-Next full-attention layers (16 q / 2 kv heads x 256)",
    "llama3_1": "Llama-3.1-8B (32 q / 8 kv heads x 128)",
    "gemma": "Gemma-2/3 local layers (sliding window, logit softcap 50)",
    "gpt_oss": "gpt-oss (64 q / 8 kv heads x 64, sliding window 128 on alternate layers, sinks)",
    "whisper": "Whisper-large-v3's decoder cross-attention (20 heads x 64) over its encoder's 1500 frames",
}


def _attn_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    """A paged KV cache [blocks, block_size, kv_heads, head] with the sequences' pages scattered
    through it (a shuffled block table), queries packed varlen (cu_seqlens)."""
    p = case.params
    hq, hk, d, bs = p["hq"], p["hk"], p["d"], p["block_size"]
    q_lens, k_lens = p["q_lens"], p["k_lens"]
    pages = [-(-k // bs) for k in k_lens]
    nblocks = sum(pages) + 3
    perm = torch.randperm(nblocks, generator=gen)
    # rows as wide as vLLM's block table (max_model_len / block_size), unused entries 0
    table = torch.zeros(len(k_lens), -(-p["max_model_len"] // bs), dtype=torch.int32)
    at = 0
    for i, n in enumerate(pages):
        table[i, :n] = perm[at:at + n].int()
        at += n
    x = {"q": randn(gen, sum(q_lens), hq, d, dtype=dtype, device=device, scale=p.get("q_scale", 1.0)),
         "k_cache": randn(gen, nblocks, bs, hk, d, dtype=dtype, device=device),
         "v_cache": randn(gen, nblocks, bs, hk, d, dtype=dtype, device=device),
         "block_table": table.to(device),
         "cu_seqlens_q": torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)), dtype=torch.int32,
                                      device=device),
         "seqused_k": torch.tensor(k_lens, dtype=torch.int32, device=device)}
    if p.get("sinks"):
        x["sinks"] = randn(gen, hq, dtype=torch.float32, device=device, scale=2.0)
    x["out"] = torch.empty_like(x["q"])
    return x


def _attn_reference(x: dict, case: Case) -> dict:
    """Per sequence and query head: causal attention of its queries (the last q_len positions of
    the sequence) over its keys gathered from the pages, with the sliding window (keys at most
    window-1 positions back), tanh softcap, and a per-head sink logit in the denominator; a
    cross-attention case's queries see every key (the encoder's output)."""
    p = case.params
    hq, hk, d, bs = p["hq"], p["hk"], p["d"], p["block_size"]
    window, softcap = p.get("window", 0), p.get("softcap", 0.0)
    scale = d ** -0.5
    out = torch.zeros(x["q"].shape, dtype=torch.float64)
    start = 0
    for i, (ql, kl) in enumerate(zip(p["q_lens"], p["k_lens"])):
        blocks = x["block_table"][i, : -(-kl // bs)].long()
        k = x["k_cache"][blocks].reshape(-1, hk, d)[:kl].double()
        v = x["v_cache"][blocks].reshape(-1, hk, d)[:kl].double()
        q = x["q"][start:start + ql].double()
        pos = torch.arange(kl - ql, kl)[:, None]
        key = torch.arange(kl)[None, :]
        allowed = key <= pos if not p.get("cross") else torch.ones(ql, kl, dtype=torch.bool)
        if window:
            allowed &= pos - key < window
        for h in range(hq):
            s = (q[:, h] @ k[:, h // (hq // hk)].T) * scale
            if softcap:
                s = softcap * torch.tanh(s / softcap)
            s = s.masked_fill(~allowed, float("-inf"))
            if "sinks" in x:
                s = torch.cat([s, x["sinks"][h].double().expand(ql, 1)], dim=1)
            prob = torch.softmax(s, -1)[:, :kl]
            out[start:start + ql, h] = prob @ v[:, h // (hq // hk)]
        start += ql
    return {"out": out}


def _attn_run(x: dict, case: Case) -> None:
    from vllm.v1.attention.ops.triton_unified_attention import unified_attention
    p = case.params
    hq, hk, d = p["hq"], p["hk"], p["d"]
    window = p.get("window", 0)
    extra = {}
    if p.get("split_kv"):
        # decode as vLLM's Triton backend runs it: segments of the KV reduced by reduce_segments
        segments, rows = 16, x["q"].shape[0]
        hp = 1 << (d - 1).bit_length()
        f32 = dict(dtype=torch.float32, device=x["q"].device)
        extra = dict(seq_threshold_3D=128 // hk, num_par_softmax_segments=segments,
                     softmax_segm_output=torch.empty(rows, hq, segments, hp, **f32),
                     softmax_segm_max=torch.empty(rows, hq, segments, **f32),
                     softmax_segm_expsum=torch.empty(rows, hq, segments, **f32))
    descale = torch.ones(len(p["k_lens"]), hk, dtype=torch.float32, device=x["q"].device)
    unified_attention(
        q=x["q"], k=x["k_cache"], v=x["v_cache"], out=x["out"], cu_seqlens_q=x["cu_seqlens_q"],
        max_seqlen_q=max(p["q_lens"]), seqused_k=x["seqused_k"], max_seqlen_k=max(p["k_lens"]),
        softmax_scale=d ** -0.5, causal=not p.get("cross"), window_size=(window - 1, 0) if window else (-1, -1),
        block_table=x["block_table"], softcap=p.get("softcap", 0.0), q_descale=None,
        k_descale=descale, v_descale=descale, sinks=x.get("sinks"), **extra)


def _attn_case(name: str, model: str, q_lens, k_lens, hq: int, hk: int, d: int, block_size: int = 16,
               quick: bool = True, note: str = "", **extra) -> Case:
    params = {"q_lens": list(q_lens), "k_lens": list(k_lens), "hq": hq, "hk": hk, "d": d,
              "block_size": block_size, "max_model_len": 1024, **extra}
    return Case(name, params, quick=quick, source=ATTN_SRC[model] + (f"; {note}" if note else ""))


_kernel(
    name="lib_vllm_unified_attention", group="lib_vllm_attention",
    models=("qwen3_5", "qwen3_next", "llama3_1", "mixtral"),
    description="vllm unified_attention over a paged KV cache (shuffled block table): varlen "
                "prefill with cached context (chunked prefill), decode through the split-KV 3D "
                "kernel + reduce_segments, GQA, sliding window, logit softcap and attention sinks; "
                "an encoder-decoder's cross-attention (causal=False over the encoder's keys).",
    upstream="vllm: v1/attention/ops/triton_unified_attention.py unified_attention "
             "(kernel_unified_attention, reduce_segments)",
    cases=(_attn_case("prefill_varlen_gqa", "qwen3_5", [17, 5, 1], [40, 5, 33], 4, 1, 256,
                      note="heads /4; 3 sequences: chunked prefill over 23 cached tokens, a fresh "
                           "prompt, a decode step"),
           _attn_case("decode_split_kv", "llama3_1", [1, 1, 1, 1], [70, 3, 129, 16], 8, 2, 128,
                      split_kv=True, note="heads /4; 4 decoding sequences, 16 KV segments each"),
           _attn_case("sliding_softcap", "gemma", [24, 1], [24, 90], 4, 2, 128, window=32,
                      softcap=50.0, q_scale=12.0,
                      note="window 32 (scaled from 4096), softcap 50 (queries x12: scores reach it)"),
           _attn_case("sinks_window", "gpt_oss", [12, 1], [40, 77], 8, 1, 64, window=16, sinks=True,
                      note="heads /8, window 16 (scaled from 128), one sink logit per head"),
           _attn_case("cross_attention", "whisper", [6, 1, 1], [150, 150, 120], 4, 4, 64, cross=True,
                      note="heads /5, frames /10; causal=False as the Triton backend runs ENCODER_DECODER "
                           "layers: a decoder prompt of 6 tokens and two decode steps over their encoder's "
                           "keys and values in the paged cache"),
           _attn_case("prefill_full", "qwen3_5", [512, 300], [512, 812], 16, 2, 256, quick=False),
           _attn_case("cross_attention_full", "whisper", [32] * 4 + [1] * 12, [1500] * 16, 20, 20, 64,
                      quick=False, cross=True, max_model_len=1536,
                      note="a batch of 16: four 32-token decoder prompts and twelve decode steps")),
    dtypes=DTYPES, make_inputs=_attn_inputs, run=vllm_call(_attn_run), reference=_attn_reference,
    outputs=("out",), tolerance=RMSE)


# ============================================================================= KV-cache write
def _kv_write_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    p = case.params
    T, H, D, nb, bs = p["T"], p["H"], p["D"], p["blocks"], p["block_size"]
    slots = torch.randperm(nb * bs, generator=gen)[:T].long()
    slots[p.get("pad_at", T)::7] = -1  # padded tokens (slot -1) write nothing
    x = {"key": randn(gen, T, H, D, dtype=dtype, device=device),
         "value": randn(gen, T, H, D, dtype=dtype, device=device),
         "slot_mapping": slots.to(device),
         "key_cache": randn(gen, nb, bs, H, D, dtype=dtype, device=device),
         "value_cache": randn(gen, nb, bs, H, D, dtype=dtype, device=device)}
    return x


def _kv_write_reference(x: dict, case: Case) -> dict:
    """Token t's key and value land in page slot // block_size, row slot % block_size; slot -1
    writes nothing; every other cache entry keeps its value."""
    out = {}
    for name, src in (("key_cache", "key"), ("value_cache", "value")):
        cache = x[name].clone()
        flat = cache.view(-1, *cache.shape[2:])
        for t, s in enumerate(x["slot_mapping"].tolist()):
            if s >= 0:
                flat[s] = x[src][t]
        out[name] = cache
    return out


def _kv_write_run(x: dict, case: Case) -> None:
    from vllm.v1.attention.ops.triton_reshape_and_cache_flash import triton_reshape_and_cache_flash
    one = torch.ones((), dtype=torch.float32, device=x["key"].device)
    triton_reshape_and_cache_flash(x["key"], x["value"], x["key_cache"], x["value_cache"],
                                   x["slot_mapping"], "auto", one, one)


_kernel(
    name="lib_vllm_kv_cache_write", group="lib_vllm_attention",
    models=("qwen3_5", "qwen3_next", "llama3_1", "mixtral"),
    description="vllm triton_reshape_and_cache_flash: each new token's key and value written into "
                "the paged cache at its slot (slot -1: a padded token, nothing written), the cache "
                "layout [blocks, block_size, kv_heads, head] of vLLM's Triton attention backend.",
    upstream="vllm: v1/attention/ops/triton_reshape_and_cache_flash.py triton_reshape_and_cache_flash "
             "(reshape_and_cache_kernel_flash)",
    cases=(Case("prefill_T50", {"T": 50, "H": 2, "D": 256, "blocks": 8, "block_size": 16},
                source=ATTN_SRC["qwen3_5"] + "; 50 tokens into 8 pages of 16, every 7th padded"),
           Case("decode_T4", {"T": 4, "H": 8, "D": 128, "blocks": 16, "block_size": 16, "pad_at": 99},
                source=ATTN_SRC["llama3_1"] + "; 4 decode tokens")),
    dtypes=DTYPES, make_inputs=_kv_write_inputs,
    run=vllm_call(_kv_write_run), reference=_kv_write_reference,
    outputs=("key_cache", "value_cache"), inplace=("key_cache", "value_cache"),
    tolerance={"bf16": Tolerance(exact=True), "fp32": Tolerance(exact=True)})


# ========================================================================= encoder attention
def _enc_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    p = case.params
    T = sum(p["lens"])
    x = {n: randn(gen, T, h, p["d"], dtype=dtype, device=device) for n, h in (("q", p["hq"]), ("k", p["hk"]),
                                                                            ("v", p["hk"]))}
    starts = torch.tensor([0] + list(p["lens"][:-1]), dtype=torch.int32).cumsum(0).to(torch.int32)
    x["b_start_loc"] = starts.to(device)
    x["b_seq_len"] = torch.tensor(p["lens"], dtype=torch.int32, device=device)
    x["o"] = torch.empty_like(x["q"])
    return x


def _enc_run(x: dict, case: Case) -> None:
    """As the Triton backend's _forward_encoder_attention calls it: no cache, not causal, a layer's
    sliding window W as (W - 1, W - 1)."""
    from vllm.v1.attention.ops.triton_prefill_attention import context_attention_fwd
    p = case.params
    w = p.get("window", 0)
    context_attention_fwd(x["q"], x["k"], x["v"], x["o"], x["b_start_loc"], x["b_seq_len"], max(p["lens"]),
                          is_causal=False, softmax_scale=p["d"] ** -0.5,
                          sliding_window_q=w - 1 if w else -1, sliding_window_k=w - 1 if w else -1)


def _enc_reference(x: dict, case: Case) -> dict:
    """Per sequence: every token over every token of its sequence (or, with a window W, those at
    most W - 1 positions either side), in fp64."""
    from ...refmath import encoder_attention
    p = case.params
    w = p.get("window", 0)
    return {"o": encoder_attention(x["q"], x["k"], x["v"], p["lens"], p["d"] ** -0.5, w - 1 if w else 0)}


_kernel(
    name="lib_vllm_encoder_attention", group="lib_vllm_attention", models=(),
    description="vllm context_attention_fwd with is_causal=False, as the Triton attention backend runs "
                "encoder layers (embedding models' ENCODER_ONLY attention, an encoder-decoder's "
                "encoder): packed varlen sequences, no KV cache, GQA, a local window either side.",
    upstream="vllm: v1/attention/ops/triton_prefill_attention.py context_attention_fwd (_fwd_kernel), "
             "called by v1/attention/backends/triton_attn.py _forward_encoder_attention",
    cases=(Case("bert_varlen", {"lens": [37, 100, 1], "hq": 4, "hk": 4, "d": 64},
                source="BERT-base / embedding models (12 heads x 64); heads /3, three packed sequences"),
           Case("gqa_d72", {"lens": [81, 20], "hq": 4, "hk": 2, "d": 72},
                source="SigLIP's head dim 72 (not a power of two), grouped KV heads as T5Gemma's encoder"),
           Case("modernbert_local", {"lens": [300], "hq": 2, "hk": 2, "d": 64, "window": 65},
                source="ModernBERT local layers: local_attention 128, 64 tokens either side "
                       "(vLLM's window 65 -> 64 each way); heads /6"),
           Case("bert_base_b8", {"lens": [512, 512, 512, 512, 384, 200, 77, 16], "hq": 12, "hk": 12, "d": 64},
                quick=False, source="BERT-base: 12 heads x 64, a batch of eight up to 512 tokens")),
    dtypes=DTYPES, make_inputs=_enc_inputs, run=vllm_call(_enc_run), reference=_enc_reference,
    outputs=("o",), tolerance=RMSE)
