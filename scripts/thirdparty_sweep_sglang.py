"""The sglang Triton attention ops `thirdparty_sweep.py` runs (`sglang.kernels.ops.attention`), with
references written here in PyTorch.

Layout is sglang's token-major KV pool (page size 1): k/v buffers [slots, kv heads, head dim], each
request's tokens named by `kv_indices[kv_indptr[b]:kv_indptr[b + 1]]` (scattered slots, not in
order). Shapes: 3 requests of 37, 80 and 5 cached tokens (decode; split over up to 4 KV chunks),
prefixes of 20, 0 and 33 tokens extended by 16, 7 and 30 (extend), 8 query heads over 2 KV heads
(GQA) or 4 over 4 (MHA), head dim 64. The reference is softmax(q k^T * scale) v per request in fp64,
causal where the op is, with the options stated per op (logit soft-cap, attention sinks).
"""
from __future__ import annotations

import torch

from library_sweep import SweepOp
from thirdparty_sweep import require

OPS: list[SweepOp] = []
D = 64
ATT = "sglang.kernels.ops.attention"


def op(name, make, call, ref, grads=(), dtypes=("fp32",), **kw):
    OPS.append(SweepOp(name=f"sglang.{name}", lib="sglang", make=make, call=call, ref=ref, grads=grads,
                       dtypes=dtypes, **kw))


def fn(module, name):
    return getattr(require("sglang", f"{ATT}.{module}"), name)


def rn(gen, *shape, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape, generator=gen) * scale).to(dtype)


def attend(q, k, v, *, causal_from=None, cap=0.0, sink=None):
    """q [lq, h, d], k / v [lk, hkv, d] -> [lq, h, dv]; query i sees keys j <= causal_from + i when
    causal_from is given; cap: cap * tanh(s / cap); sink [h]: a logit that only joins the softmax's
    denominator."""
    h = q.shape[1]
    k, v = k.repeat_interleave(h // k.shape[1], 1), v.repeat_interleave(h // v.shape[1], 1)
    s = torch.einsum("qhd,khd->hqk", q, k) * q.shape[-1] ** -0.5
    if cap > 0:
        s = cap * torch.tanh(s / cap)
    if causal_from is not None:
        keep = torch.arange(k.shape[0])[None, :] <= causal_from + torch.arange(q.shape[0])[:, None]
        s = s.masked_fill(~keep, float("-inf"))
    if sink is not None:
        s = torch.cat([s, sink[:, None, None].expand(h, q.shape[0], 1).to(s.dtype)], -1)
    p = s.softmax(-1)[..., :k.shape[0]]
    return torch.einsum("hqk,khd->qhd", p, v)


def _pool(gen, dtype, lens, hkv, extra=11):
    """A KV pool holding the requests' tokens at shuffled slots."""
    total = sum(lens)
    slots = torch.randperm(total + extra, generator=gen)[:total].to(torch.int32)
    indptr = torch.tensor([0] + lens, dtype=torch.int32).cumsum(0).to(torch.int32)
    return {"k_buf": rn(gen, total + extra, hkv, D, dtype=dtype), "v_buf": rn(gen, total + extra, hkv, D, dtype=dtype),
            "kv_indptr": indptr, "kv_indices": slots}


# -------------------------------------------------------------------------------------------- decode
DEC_LENS = [37, 80, 5]
MAX_SPLITS = 4


def _decode_make(h, hkv, sinks=False):
    def make(gen, dtype):
        x = {"q": rn(gen, len(DEC_LENS), h, D, dtype=dtype), **_pool(gen, dtype, DEC_LENS, hkv),
             "splits": torch.tensor([4, 2, 1], dtype=torch.int32)}
        if sinks:
            x["sinks"] = rn(gen, h)
        return x
    return make


def _decode_call(cap=0.0):
    def call(x):
        bs, h = x["q"].shape[:2]
        o = torch.empty(bs, h, D, dtype=x["q"].dtype)
        logits = torch.empty(bs, h, MAX_SPLITS, D, dtype=torch.float32)
        lse = torch.empty(bs, h, MAX_SPLITS, dtype=torch.float32)
        fn("decode_attention", "decode_attention_fwd")(
            x["q"], x["k_buf"], x["v_buf"], o, x["kv_indptr"], x["kv_indices"], logits, lse, x["splits"],
            MAX_SPLITS, D ** -0.5, 1.0, 1.0, logit_cap=cap, sinks=x.get("sinks"))
        return {"o": o}
    return call


def _decode_ref(cap=0.0):
    def ref(x):
        outs = []
        for b in range(len(DEC_LENS)):
            idx = x["kv_indices"][x["kv_indptr"][b]:x["kv_indptr"][b + 1]].long()
            outs.append(attend(x["q"][b:b + 1], x["k_buf"][idx], x["v_buf"][idx], cap=cap, sink=x.get("sinks")))
        return {"o": torch.cat(outs, 0)}
    return ref


ATT_TOL = {"bf16": 2e-2}
op("decode_attention_fwd[mha]", _decode_make(4, 4), _decode_call(), _decode_ref(), (), ("fp32", "bf16"),
   tol=ATT_TOL, note="4 heads, 1 query each over 37 / 80 / 5 cached tokens, split-KV (4 / 2 / 1 splits) "
                     "then the stage-2 merge")
op("decode_attention_fwd[gqa]", _decode_make(8, 2), _decode_call(), _decode_ref(), (), ("fp32", "bf16"),
   tol=ATT_TOL, note="8 query heads over 2 KV heads: the grouped stage-1 kernel")
op("decode_attention_fwd[gqa,softcap]", _decode_make(8, 2), _decode_call(30.0), _decode_ref(30.0),
   note="logit soft-cap 30 (Gemma-2 / Grok)")
op("decode_attention_fwd[gqa,sinks]", _decode_make(8, 2, sinks=True), _decode_call(), _decode_ref(),
   note="a sink logit per head (gpt-oss)")
op("decode_attention_fwd[gqa,interp]", _decode_make(8, 2), _decode_call(), _decode_ref(), cpu_tier="interp",
   note="the GQA case on the reference interpreter")


# -------------------------------------------------------------------------------------------- extend
PREFIX, EXTEND = [20, 0, 33], [16, 7, 30]


def _extend_make(h, hkv):
    def make(gen, dtype):
        tot = sum(EXTEND)
        return {"q": rn(gen, tot, h, D, dtype=dtype), "k": rn(gen, tot, hkv, D, dtype=dtype),
                "v": rn(gen, tot, hkv, D, dtype=dtype), **_pool(gen, dtype, PREFIX, hkv),
                "qo_indptr": torch.tensor([0] + EXTEND, dtype=torch.int32).cumsum(0).to(torch.int32)}
    return make


def _extend_call(x):
    o = torch.empty_like(x["q"])
    fn("extend_attention", "extend_attention_fwd")(
        x["q"], x["k"], x["v"], o, x["k_buf"], x["v_buf"], x["qo_indptr"], x["kv_indptr"], x["kv_indices"],
        None, True, None, max(EXTEND), 1.0, 1.0)
    return {"o": o}


def _extend_ref(x):
    outs = []
    for b in range(len(EXTEND)):
        pidx = x["kv_indices"][x["kv_indptr"][b]:x["kv_indptr"][b + 1]].long()
        e = slice(int(x["qo_indptr"][b]), int(x["qo_indptr"][b + 1]))
        k = torch.cat([x["k_buf"][pidx], x["k"][e]], 0)
        v = torch.cat([x["v_buf"][pidx], x["v"][e]], 0)
        outs.append(attend(x["q"][e], k, v, causal_from=len(pidx)))
    return {"o": torch.cat(outs, 0)}


op("extend_attention_fwd[gqa]", _extend_make(8, 2), _extend_call, _extend_ref, (), ("fp32", "bf16"), tol=ATT_TOL,
   note="prefill on top of a cached prefix: 16 / 7 / 30 new tokens after 20 / 0 / 33 cached, causal")
op("extend_attention_fwd[mha]", _extend_make(4, 4), _extend_call, _extend_ref,
   note="the same with 4 heads over 4 KV heads")


# ------------------------------------------------------------------------------------------- prefill
PRE = [24, 70, 9]


def _prefill_make(gen, dtype):
    tot = sum(PRE)
    return {"q": rn(gen, tot, 8, D, dtype=dtype), "k": rn(gen, tot, 2, D, dtype=dtype), "v": rn(gen, tot, 2, D, dtype=dtype)}


def _prefill_call(x):
    o = torch.empty_like(x["q"])
    start = torch.tensor([0] + PRE[:-1], dtype=torch.int32).cumsum(0).to(torch.int32)
    fn("prefill_attention", "context_attention_fwd")(x["q"], x["k"], x["v"], o, start,
                                                     torch.tensor(PRE, dtype=torch.int32), max(PRE))
    return {"o": o}


def _prefill_ref(x):
    outs, s = [], 0
    for n in PRE:
        outs.append(attend(x["q"][s:s + n], x["k"][s:s + n], x["v"][s:s + n], causal_from=0))
        s += n
    return {"o": torch.cat(outs, 0)}


op("context_attention_fwd", _prefill_make, _prefill_call, _prefill_ref, (), ("fp32", "bf16"), tol=ATT_TOL,
   note="packed prompts of 24 / 70 / 9 tokens, causal, 8 heads over 2 KV heads")


# --------------------------------------------------------------------------------------- merge state
def _merge_make(gen, dtype):
    return {"va": rn(gen, 40, 8, 96, dtype=dtype), "sa": rn(gen, 40, 8, scale=3.0),
            "vb": rn(gen, 40, 8, 96, dtype=dtype), "sb": rn(gen, 40, 8, scale=3.0)}


def _merge_ref(x):
    m = torch.maximum(x["sa"], x["sb"])
    wa, wb = torch.exp(x["sa"] - m), torch.exp(x["sb"] - m)
    return {"v": (x["va"] * wa[..., None] + x["vb"] * wb[..., None]) / (wa + wb)[..., None],
            "s": m + torch.log(wa + wb)}


op("merge_state_triton", _merge_make,
   lambda x: dict(zip(("v", "s"), fn("merge_state", "merge_state_triton")(x["va"], x["sa"], x["vb"], x["sb"]))),
   _merge_ref, note="two partial attention results (value, log-sum-exp) merged: 40 tokens, 8 heads of 96 "
                    "(a padded head size)")
