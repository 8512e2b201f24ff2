"""The flash-linear-attention (fla-core) ops `library_sweep.py` runs, with their references.

Layout is FLA's [B, T, H, D]. Shapes: 2 sequences of 100 tokens (a full 64-token chunk and a
partial one), 2 heads of 64, log-space gates around -0.2 per token (long memory, so state crosses
chunks), keys L2-normalised for the delta rules (as their layers do). References are the
recurrences token by token in fp64 (`recurrence`), or FLA's own `naive.py` where it ships one
(those compute in fp32: their bounds say so).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from library_sweep import SweepOp

B, T, H, D = 2, 100, 2, 64
BOTH = ("fp32", "bf16")
# the gates' gradients sum over whole sequences of products: bf16 keeps 8 bits
GATE_BF16 = 5e-2


def rn(gen, *shape, dtype=torch.float32, scale=1.0, shift=0.0):
    return (torch.randn(*shape, generator=gen) * scale + shift).to(dtype)


def l2n(x):
    return x / x.float().norm(dim=-1, keepdim=True).to(x.dtype)


def logdecay(gen, *shape, dtype=torch.float32):
    """log-space forget gates, mostly in (-0.5, 0)."""
    return (F.logsigmoid(torch.randn(*shape, generator=gen) + 2.0) / 2).to(dtype)


def qkv(gen, dtype, *, hv=H, dk=D, dv=D, norm_k=False, b=B, t=T):
    k = rn(gen, b, t, H, dk)
    return {"q": rn(gen, b, t, H, dk, dtype=dtype), "k": (l2n(k) if norm_k else k).to(dtype),
            "v": rn(gen, b, t, hv, dv, dtype=dtype)}


def recurrence(q, k, v, scale, *, g=None, gk=None, gv=None, beta=None, h0=None, u=None):
    """o_t = scale q_t^T S_t with S_t = decay_t(S_{t-1}) + k_t (v_t or the delta rule's
    beta_t (v_t - S^T k_t))^T; with `u` (RWKV-6) o_t reads S_{t-1} plus the bonus u * k_t v_t."""
    b, t, h, dk = q.shape
    if v.shape[2] != h:  # grouped value heads: key head hv // (HV / H)
        rep = v.shape[2] // h
        q, k = q.repeat_interleave(rep, 2), k.repeat_interleave(rep, 2)
        h = v.shape[2]
    S = torch.zeros(b, h, dk, v.shape[-1], dtype=q.dtype) if h0 is None else h0.to(q.dtype)
    outs = []
    for i in range(t):
        qi, ki, vi = q[:, i] * scale, k[:, i], v[:, i]
        if u is not None:
            o = torch.einsum("bhk,bhkv->bhv", qi, S) + (qi * u * ki).sum(-1, keepdim=True) * vi
            S = S * gk[:, i].exp()[..., None] + ki[..., None] * vi[..., None, :]
            outs.append(o)
            continue
        if g is not None:
            S = S * g[:, i].exp()[..., None, None]
        if gk is not None:
            S = S * gk[:, i].exp()[..., None]
        if gv is not None:
            S = S * gv[:, i].exp()[..., None, :]
        if beta is not None:
            vi = beta[:, i][..., None] * (vi - torch.einsum("bhk,bhkv->bhv", ki, S))
        S = S + ki[..., None] * vi[..., None, :]
        outs.append(torch.einsum("bhk,bhkv->bhv", qi, S))
    return torch.stack(outs, 1), S


def varlen(cu, fn, **seq):
    """Run `fn` per packed sequence (batch row 0, tokens cu[i]:cu[i+1], state i)."""
    outs, states = [], []
    for i in range(len(cu) - 1):
        part = {n: (x[:, cu[i]:cu[i + 1]] if n != "h0" else x[i:i + 1]) for n, x in seq.items()
                if x is not None}
        o, s = fn(**part)
        outs.append(o)
        states.append(s)
    return torch.cat(outs, 1), torch.cat(states, 0)


def _o_ht(res):
    o, ht = res
    return {"o": o, "ht": ht}


def _fla(path):
    mod, _, name = path.rpartition(".")
    return getattr(__import__(mod, fromlist=[name]), name)


OPS: list[SweepOp] = []


def op(name, make, call, ref, grads=(), dtypes=("fp32",), **kw):
    OPS.append(SweepOp(name=name, lib="fla", make=make, call=call, ref=ref, grads=grads,
                       dtypes=dtypes, **kw))


SC = D ** -0.5
H0 = lambda gen, n=B, h=H, dk=D, dv=D: rn(gen, n, h, dk, dv, scale=0.5)   # noqa: E731


# ------------------------------------------------------------------------------------ GLA
def _gla_make(gen, dtype):
    return {**qkv(gen, dtype), "g": logdecay(gen, B, T, H, D), "h0": H0(gen)}


def _gla_ref(x):
    return _o_ht(recurrence(x["q"], x["k"], x["v"], SC, gk=x["g"], h0=x["h0"]))


GLA_GRADS = ("q", "k", "v", "g", "h0")
op("fla.ops.gla.chunk_gla", _gla_make,
   lambda x: _o_ht(_fla("fla.ops.chunk_gla")(x["q"], x["k"], x["v"], x["g"], initial_state=x["h0"],
                                            output_final_state=True)),
   _gla_ref, GLA_GRADS, BOTH, tol={"dg@bf16": GATE_BF16}, note="per-key gates")
op("fla.ops.gla.fused_recurrent_gla", _gla_make,
   lambda x: _o_ht(_fla("fla.ops.fused_recurrent_gla")(x["q"], x["k"], x["v"], gk=x["g"],
                                                      initial_state=x["h0"], output_final_state=True)),
   _gla_ref, GLA_GRADS, BOTH, tol={"dg@bf16": GATE_BF16})
op("fla.ops.gla.fused_chunk_gla", _gla_make, lambda x: {}, _gla_ref,
   skip="deprecated in fla-core 0.6.0: raises NotImplementedError, pointing to chunk_gla")

CU = [0, 37, 120, 200]


def _gla_varlen_make(gen, dtype):
    return {**qkv(gen, dtype, b=1, t=200), "g": logdecay(gen, 1, 200, H, D), "h0": H0(gen, n=3),
            "cu": torch.tensor(CU)}


op("fla.ops.gla.chunk_gla[varlen]", _gla_varlen_make,
   lambda x: _o_ht(_fla("fla.ops.chunk_gla")(x["q"], x["k"], x["v"], x["g"], initial_state=x["h0"],
                                            output_final_state=True, cu_seqlens=x["cu"])),
   lambda x: _o_ht(varlen(CU, lambda q, k, v, g, h0: recurrence(q, k, v, SC, gk=g, h0=h0),
                          q=x["q"], k=x["k"], v=x["v"], g=x["g"], h0=x["h0"])),
   GLA_GRADS, note="3 packed sequences of 37, 83, 80 tokens")


# ---------------------------------------------------------------------- simple GLA, retention
def _sgla_make(gen, dtype):
    return {**qkv(gen, dtype), "g": logdecay(gen, B, T, H), "h0": H0(gen)}


def _sgla_ref(x):
    return _o_ht(recurrence(x["q"], x["k"], x["v"], SC, g=x["g"], h0=x["h0"]))


for fn in ("chunk_simple_gla", "fused_recurrent_simple_gla", "fused_chunk_simple_gla"):
    op(f"fla.ops.simple_gla.{fn}", _sgla_make,
       lambda x, fn=fn: _o_ht(_fla(f"fla.ops.{fn}")(x["q"], x["k"], x["v"], g=x["g"], initial_state=x["h0"],
                                                   output_final_state=True)),
       _sgla_ref, GLA_GRADS, BOTH if fn == "chunk_simple_gla" else ("fp32",),
       tol={"dg@bf16": GATE_BF16}, note="per-head scalar gates")
op("fla.ops.simple_gla.parallel_simple_gla", _sgla_make,
   lambda x: {"o": _fla("fla.ops.parallel_simple_gla")(x["q"], x["k"], x["v"], g=x["g"])[0]},
   lambda x: {"o": recurrence(x["q"], x["k"], x["v"], SC, g=x["g"])[0]}, ("q", "k", "v", "g"))


def _gamma(h):
    return (1 - 2.0 ** (-5.0 - torch.arange(h, dtype=torch.float64))).log()


def _ret_make(gen, dtype):
    return {**qkv(gen, dtype), "h0": H0(gen)}


def _ret_ref(x):
    g = _gamma(H)[None, None].expand(B, T, H)
    return _o_ht(recurrence(x["q"], x["k"], x["v"], SC, g=g, h0=x["h0"]))


for fn in ("chunk_retention", "fused_recurrent_retention", "fused_chunk_retention"):
    op(f"fla.ops.retention.{fn}", _ret_make,
       lambda x, fn=fn: _o_ht(_fla(f"fla.ops.{fn}")(x["q"], x["k"], x["v"], initial_state=x["h0"],
                                                   output_final_state=True)),
       _ret_ref, ("q", "k", "v", "h0"), BOTH if fn == "chunk_retention" else ("fp32",))
op("fla.ops.retention.parallel_retention", _ret_make,
   lambda x: {"o": _fla("fla.ops.parallel_retention")(x["q"], x["k"], x["v"])[0]},
   lambda x: {"o": recurrence(x["q"], x["k"], x["v"], SC, g=_gamma(H)[None, None].expand(B, T, H))[0]},
   ("q", "k", "v"))


def _light_ref(x):
    g = (-(8 / H * (1 - 1 / 4)) * torch.arange(H, dtype=torch.float64))[None, None].expand(B, T, H)
    return _o_ht(recurrence(x["q"], x["k"], x["v"], SC, g=g, h0=x["h0"]))


for fn in ("chunk_lightning_attn", "fused_recurrent_lightning_attn"):
    op(f"fla.ops.lightning_attn.{fn}", _ret_make,
       lambda x, fn=fn: _o_ht(_fla(f"fla.ops.{fn}")(x["q"], x["k"], x["v"], layer_idx=1, num_layers=4,
                                                   initial_state=x["h0"], output_final_state=True)),
       _light_ref, ("q", "k", "v", "h0"), note="layer 1 of 4")


# ------------------------------------------------------------------------------ linear attention
def _lin_ref(x):
    return _o_ht(recurrence(x["q"], x["k"], x["v"], SC, h0=x["h0"]))


for fn in ("chunk_linear_attn", "fused_chunk_linear_attn", "fused_recurrent_linear_attn"):
    op(f"fla.ops.linear_attn.{fn}", _ret_make,
       lambda x, fn=fn: _o_ht(_fla(f"fla.ops.{fn}")(x["q"], x["k"], x["v"], initial_state=x["h0"],
                                                   output_final_state=True, normalize=False)),
       _lin_ref, ("q", "k", "v", "h0"), note="normalize=False")


def _pos_make(gen, dtype):
    x = qkv(gen, dtype)
    x["q"], x["k"] = (F.elu(x["q"].float()) + 1).to(dtype), (F.elu(x["k"].float()) + 1).to(dtype)
    return x


def _lin_norm_ref(x):
    o, _ = recurrence(x["q"], x["k"], x["v"], SC)
    z = (x["q"] * SC * x["k"].cumsum(1)).sum(-1, keepdim=True)
    return {"o": o / (z + 1e-10)}


op("fla.ops.linear_attn.chunk_linear_attn[normalize]", _pos_make,
   lambda x: {"o": _fla("fla.ops.chunk_linear_attn")(x["q"], x["k"], x["v"], normalize=True)[0]},
   _lin_norm_ref, ("q", "k", "v"), note="elu+1 features, normalize=True")


# ------------------------------------------------------------------------------ delta rules
def _delta_make(gen, dtype):
    return {**qkv(gen, dtype, norm_k=True), "beta": torch.rand(B, T, H, generator=gen).to(dtype),
            "h0": H0(gen)}


def _delta_ref(x):
    return _o_ht(recurrence(x["q"], x["k"], x["v"], SC, beta=x["beta"], h0=x["h0"]))


DELTA_GRADS = ("q", "k", "v", "beta", "h0")
op("fla.ops.delta_rule.chunk_delta_rule", _delta_make,
   lambda x: _o_ht(_fla("fla.ops.chunk_delta_rule")(x["q"], x["k"], x["v"], x["beta"], initial_state=x["h0"],
                                                   output_final_state=True)),
   _delta_ref, DELTA_GRADS, ("bf16",), tol={"dbeta@bf16": GATE_BF16},
   note="bf16 only: the library refuses fp32 (ChunkDeltaRuleFunction asserts)")
op("fla.ops.delta_rule.fused_recurrent_delta_rule", _delta_make,
   lambda x: _o_ht(_fla("fla.ops.fused_recurrent_delta_rule")(x["q"], x["k"], x["v"], x["beta"],
                                                             initial_state=x["h0"], output_final_state=True)),
   _delta_ref, DELTA_GRADS, BOTH, tol={"dbeta@bf16": GATE_BF16})
op("fla.ops.delta_rule.fused_chunk_delta_rule", _delta_make, lambda x: {}, _delta_ref,
   skip="deprecated in fla-core 0.6.0: raises NotImplementedError, pointing to chunk_delta_rule")


def _gdn_make(gen, dtype, hv=H):
    return {**qkv(gen, dtype, hv=hv, norm_k=True), "g": logdecay(gen, B, T, hv),
            "beta": torch.rand(B, T, hv, generator=gen).to(dtype), "h0": H0(gen, h=hv)}


def _gdn_ref(x):
    return _o_ht(recurrence(x["q"], x["k"], x["v"], SC, g=x["g"], beta=x["beta"], h0=x["h0"]))


GDN_GRADS = ("q", "k", "v", "g", "beta", "h0")
for fn in ("chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"):
    op(f"fla.ops.gated_delta_rule.{fn}", _gdn_make,
       lambda x, fn=fn: _o_ht(_fla(f"fla.ops.{fn}")(x["q"], x["k"], x["v"], g=x["g"], beta=x["beta"],
                                                   initial_state=x["h0"], output_final_state=True)),
       _gdn_ref, GDN_GRADS if fn.startswith("chunk") else (), BOTH,
       tol={"dg@bf16": GATE_BF16, "dbeta@bf16": GATE_BF16},
       note="" if fn.startswith("chunk") else "forward: FLA has no backward for it")
    op(f"fla.ops.gated_delta_rule.{fn}[gqa]", lambda gen, dtype: _gdn_make(gen, dtype, hv=4),
       lambda x, fn=fn: _o_ht(_fla(f"fla.ops.{fn}")(x["q"], x["k"], x["v"], g=x["g"], beta=x["beta"],
                                                   initial_state=x["h0"], output_final_state=True)),
       _gdn_ref, GDN_GRADS if fn.startswith("chunk") else (), note="4 value heads over 2 key heads")


def _gdn_gk_make(gen, dtype):
    return {**qkv(gen, dtype, norm_k=True), "gk": logdecay(gen, B, T, H, D),
            "beta": torch.rand(B, T, H, generator=gen).to(dtype), "h0": H0(gen)}


op("fla.ops.gated_delta_rule.fused_recurrent_gated_delta_rule[gk]", _gdn_gk_make,
   lambda x: _o_ht(_fla("fla.ops.fused_recurrent_gated_delta_rule")(
       x["q"], x["k"], x["v"], gk=x["gk"], beta=x["beta"], initial_state=x["h0"], output_final_state=True)),
   lambda x: _o_ht(recurrence(x["q"], x["k"], x["v"], SC, gk=x["gk"], beta=x["beta"], h0=x["h0"])),
   note="per-key gates, forward")

for fn in ("chunk_kda", "fused_recurrent_kda"):
    op(f"fla.ops.kda.{fn}", _gdn_gk_make,
       lambda x, fn=fn: _o_ht(_fla(f"fla.ops.{fn}")(x["q"], x["k"], x["v"], g=x["gk"], beta=x["beta"],
                                                   initial_state=x["h0"], output_final_state=True)),
       lambda x: _o_ht(recurrence(x["q"], x["k"], x["v"], SC, gk=x["gk"], beta=x["beta"], h0=x["h0"])),
       ("q", "k", "v", "gk", "beta", "h0") if fn == "chunk_kda" else (), BOTH if fn == "chunk_kda" else ("fp32",),
       tol={"dgk@bf16": GATE_BF16, "dbeta@bf16": GATE_BF16}, note="Kimi delta attention")


def _vl_make(gen, dtype, gate_k=False):
    x = qkv(gen, dtype, norm_k=True, b=1, t=200)
    return {**x, "g": logdecay(gen, 1, 200, H, *((D,) if gate_k else ())),
            "beta": torch.rand(1, 200, H, generator=gen).to(dtype), "h0": H0(gen, n=3), "cu": torch.tensor(CU)}


def _vl_ref(**kw):
    def ref(x):
        return _o_ht(varlen(CU, lambda q, k, v, g, beta, h0: recurrence(q, k, v, SC, beta=beta, h0=h0, **{
            kw["gate"]: g}), q=x["q"], k=x["k"], v=x["v"], g=x["g"], beta=x["beta"], h0=x["h0"]))
    return ref


for fn, gate_k, grads in (("gated_delta_rule.chunk_gated_delta_rule", False, GDN_GRADS),
                          ("gated_delta_rule.fused_recurrent_gated_delta_rule", False, ()),
                          ("kda.chunk_kda", True, GDN_GRADS), ("kda.fused_recurrent_kda", True, ())):
    op(f"fla.ops.{fn}[varlen]", lambda gen, dtype, gate_k=gate_k: _vl_make(gen, dtype, gate_k),
       lambda x, fn=fn: _o_ht(_fla(f"fla.ops.{fn.split('.')[1]}")(
           x["q"], x["k"], x["v"], g=x["g"], beta=x["beta"], initial_state=x["h0"], output_final_state=True,
           cu_seqlens=x["cu"])),
       _vl_ref(gate="gk" if gate_k else "g"), grads, note="3 packed sequences of 37, 83, 80 tokens")


# ------------------------------------------------------------------------------------ RWKV
def _rwkv6_make(gen, dtype):
    x = qkv(gen, dtype)
    return {"r": x["q"], "k": x["k"], "v": x["v"], "w": logdecay(gen, B, T, H, D),
            "u": rn(gen, H, D, scale=0.5, dtype=dtype), "h0": H0(gen)}


def _rwkv6_ref(x):
    return _o_ht(recurrence(x["r"], x["k"], x["v"], SC, gk=x["w"], u=x["u"], h0=x["h0"]))


for fn in ("chunk_rwkv6", "fused_recurrent_rwkv6"):
    op(f"fla.ops.rwkv6.{fn}", _rwkv6_make,
       lambda x, fn=fn: _o_ht(_fla(f"fla.ops.{fn}")(x["r"], x["k"], x["v"], x["w"], x["u"], scale=SC,
                                                   initial_state=x["h0"], output_final_state=True)),
       _rwkv6_ref, ("r", "k", "v", "w", "u", "h0"),
       # fused_recurrent_rwkv6's backward drops the final state's gradient (rwkv6/fused_recurrent.py:556)
       no_cotangent=("ht",) if fn.startswith("fused") else (),
       note="no gradient through the final state (FLA's backward ignores dht)" if fn.startswith("fused") else "")


def _dplr_make(gen, dtype):
    kk = l2n(torch.randn(B, T, H, D, generator=gen))
    x = qkv(gen, dtype)
    return {"q": x["q"], "k": (x["k"] * 0.5).to(dtype), "v": x["v"], "a": (-kk).to(dtype),
            "b": (kk * torch.rand(B, T, H, 1, generator=gen)).to(dtype),
            "gk": logdecay(gen, B, T, H, D), "h0": H0(gen)}


def _dplr_rec(q, k, v, a, b, gk, h0, scale):
    """S_t = diag(exp(gk_t)) S_{t-1} + k_t v_t^T + b_t (a_t^T S_{t-1}); o_t = scale q_t^T S_t."""
    S, outs = h0.clone(), []
    for i in range(q.shape[1]):
        S = (S * gk[:, i].exp()[..., None] + k[:, i][..., None] * v[:, i][..., None, :]
             + b[:, i][..., None] * torch.einsum("bhk,bhkv->bhv", a[:, i], S)[..., None, :])
        outs.append(torch.einsum("bhk,bhkv->bhv", q[:, i] * scale, S))
    return torch.stack(outs, 1), S


DPLR_GRADS = ("q", "k", "v", "a", "b", "gk", "h0")
for fn in ("chunk_dplr_delta_rule", "fused_recurrent_dplr_delta_rule"):
    op(f"fla.ops.generalized_delta_rule.{fn}", _dplr_make,
       lambda x, fn=fn: _o_ht(_fla(f"fla.ops.{fn}")(x["q"], x["k"], x["v"], x["a"], x["b"], x["gk"], scale=SC,
                                                   initial_state=x["h0"], output_final_state=True)),
       lambda x: _o_ht(_dplr_rec(x["q"], x["k"], x["v"], x["a"], x["b"], x["gk"], x["h0"], SC)),
       DPLR_GRADS if fn.startswith("chunk") else ())
for fn in ("chunk_iplr_delta_rule", "fused_recurrent_iplr_delta_rule"):
    op(f"fla.ops.generalized_delta_rule.{fn}", _dplr_make,
       lambda x, fn=fn: _o_ht(_fla(f"fla.ops.{fn}")(x["q"], x["k"], x["v"], x["a"], x["b"], scale=SC,
                                                   initial_state=x["h0"], output_final_state=True)),
       lambda x: _o_ht(_dplr_rec(x["q"], x["k"], x["v"], x["a"], x["b"], torch.zeros_like(x["gk"]), x["h0"], SC)),
       (), note="forward: FLA has no backward for the chunked form" if fn.startswith("chunk") else "forward")


def _rwkv7_call(fn):
    def call(x):
        return _o_ht(_fla(f"fla.ops.{fn}")(x["q"], x["gk"], x["k"], x["v"], x["a"], x["b"], scale=SC,
                                          initial_state=x["h0"], output_final_state=True))
    return call


for fn in ("chunk_rwkv7", "fused_recurrent_rwkv7"):
    op(f"fla.ops.rwkv7.{fn}", _dplr_make, _rwkv7_call(fn),
       lambda x: _o_ht(_dplr_rec(x["q"], x["k"], x["v"], x["a"], x["b"], x["gk"], x["h0"], SC)),
       DPLR_GRADS if fn.startswith("chunk") else ())


# ---------------------------------------------------------------------------------- HGRN
def _hgrn_make(gen, dtype):
    return {"x": rn(gen, B, T, 256, dtype=dtype), "g": logdecay(gen, B, T, 256),
            "h0": rn(gen, B, 256)}


def _hgrn_ref(x):
    h, outs = x["h0"].clone(), []
    for i in range(T):
        h = x["g"][:, i].exp() * h + x["x"][:, i]
        outs.append(h)
    return {"o": torch.stack(outs, 1), "ht": h}


op("fla.ops.hgrn.fused_recurrent_hgrn", _hgrn_make,
   lambda x: _o_ht(_fla("fla.ops.fused_recurrent_hgrn")(x["x"], x["g"], initial_state=x["h0"],
                                                       output_final_state=True)),
   _hgrn_ref, ("x", "g", "h0"), note="256 channels")


# ---------------------------------------------------------------------------- GSA / ABC
M = 32


def _gsa_make(gen, dtype):
    return {**qkv(gen, dtype), "s": rn(gen, B, T, H, M, dtype=dtype), "g": logdecay(gen, B, T, H, M)}


def _gsa_ref(x):
    from fla.ops.gsa.naive import naive_recurrent_gsa
    return {"o": naive_recurrent_gsa(x["q"], x["k"], x["v"], x["s"], x["g"], scale=SC)[0]}


for fn in ("chunk_gsa", "fused_recurrent_gsa"):
    op(f"fla.ops.gsa.{fn}", _gsa_make,
       lambda x, fn=fn: {"o": _fla(f"fla.ops.{fn}")(x["q"], x["k"], x["v"], x["s"], x["g"], scale=SC)[0]},
       _gsa_ref, ("q", "k", "v", "s", "g") if fn.startswith("chunk") else (),
       tol={"fp32": 1e-4}, note=f"{M} slots; naive_recurrent_gsa (fp32)")


def _abc_ref(x):
    from fla.ops.abc.naive import naive_recurrent_abc
    t = lambda a: a.transpose(1, 2)   # noqa: E731  (the naive one is head-first)
    return {"o": t(naive_recurrent_abc(t(x["q"]), t(x["k"]), t(x["v"]), t(x["s"]), scale=SC)[0])}


op("fla.ops.abc.chunk_abc", _gsa_make,
   lambda x: {"o": _fla("fla.ops.chunk_abc")(x["q"], x["k"], x["v"], x["s"])[0]},
   _abc_ref, ("q", "k", "v", "s"), note=f"{M} slots; naive_recurrent_abc (fp32)")


# ------------------------------------------------------------------------- attention-likes
def _attn_make(gen, dtype, hq=4, h=2):
    return {"q": rn(gen, B, T, hq, D, dtype=dtype), "k": rn(gen, B, T, h, D, dtype=dtype),
            "v": rn(gen, B, T, h, D, dtype=dtype)}


def _softmax_attn(q, k, v, scale, window=None, logbias=None):
    rep = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(rep, 2), v.repeat_interleave(rep, 2)
    s = torch.einsum("bthd,bshd->bhts", q, k) * scale
    t = q.shape[1]
    i, j = torch.arange(t)[:, None], torch.arange(t)[None]
    mask = j <= i
    if window is not None:
        mask = mask & (j > i - window)
    if logbias is not None:
        s = s + logbias
    s = s.masked_fill(~mask, float("-inf"))
    return torch.einsum("bhts,bshd->bthd", s.softmax(-1), v)


op("fla.ops.attn.parallel_attn", _attn_make,
   lambda x: {"o": _fla("fla.ops.parallel_attn")(x["q"], x["k"], x["v"])},
   lambda x: {"o": _softmax_attn(x["q"], x["k"], x["v"], SC)}, ("q", "k", "v"), BOTH,
   note="causal, 4 query / 2 KV heads")
op("fla.ops.attn.parallel_attn[window]", _attn_make,
   lambda x: {"o": _fla("fla.ops.parallel_attn")(x["q"], x["k"], x["v"], window_size=32)},
   lambda x: {"o": _softmax_attn(x["q"], x["k"], x["v"], SC, window=32)}, ("q", "k", "v"),
   note="sliding window 32")


def _fox_make(gen, dtype):
    return {**_attn_make(gen, dtype), "g": logdecay(gen, B, T, 4)}


def _fox_ref(x):
    c = x["g"].cumsum(1).transpose(1, 2)                      # [B, HQ, T]
    return {"o": _softmax_attn(x["q"], x["k"], x["v"], SC, logbias=c[..., :, None] - c[..., None, :])}


op("fla.ops.forgetting_attn.parallel_forgetting_attn", _fox_make,
   lambda x: {"o": _fla("fla.ops.parallel_forgetting_attn")(x["q"], x["k"], x["v"], x["g"])},
   _fox_ref, ("q", "k", "v", "g"), BOTH, tol={"dg@bf16": GATE_BF16})


def _sb_ref(x):
    from fla.ops.stickbreaking_attn.naive import naive_stickbreaking_attn
    o, rem = naive_stickbreaking_attn(x["q"], x["k"], x["v"], SC)
    return {"o": o, "rem": rem}


op("fla.ops.stickbreaking_attn.parallel_stickbreaking_attn", lambda gen, dt: _attn_make(gen, dt, 2, 2),
   lambda x: dict(zip(("o", "rem"), _fla("fla.ops.parallel_stickbreaking_attn")(x["q"], x["k"], x["v"], SC))),
   _sb_ref, ("q", "k", "v"), note="naive_stickbreaking_attn")


def _path_make(gen, dtype):
    x = _attn_make(gen, dtype, 2, 2)
    return {**x, "w": l2n(torch.randn(B, T, 2, D, generator=gen)).to(dtype),
            "beta": (2 * torch.rand(B, T, 2, generator=gen)).to(dtype), "g": logdecay(gen, B, T, 2)}


def _path_ref(x):
    from fla.ops.path_attn.naive import naive_path_attn
    return {"o": naive_path_attn(x["q"], x["k"], x["v"], x["w"], x["beta"], x["g"], SC)}


op("fla.ops.path_attn.parallel_path_attn", _path_make,
   lambda x: {"o": _fla("fla.ops.parallel_path_attn")(x["q"], x["k"], x["v"], x["w"], x["beta"], x["g"], SC)[0]},
   _path_ref, ("q", "k", "v", "w", "beta", "g"), note="naive_path_attn (fp32)")


def _based_make(gen, dtype):
    x = qkv(gen, dtype, dk=16)
    x["q"], x["k"] = (x["q"].float() * 0.5).to(dtype), (x["k"].float() * 0.5).to(dtype)
    return x


def _based_ref(x):
    from fla.ops.based.naive import naive_parallel_based
    t = lambda a: a.transpose(1, 2)   # noqa: E731
    return {"o": t(naive_parallel_based(t(x["q"]), t(x["k"]), t(x["v"])))}


for fn in ("fused_chunk_based", "parallel_based"):
    op(f"fla.ops.based.{fn}", _based_make, lambda x, fn=fn: {"o": _fla(f"fla.ops.{fn}")(x["q"], x["k"], x["v"])},
       _based_ref, ("q", "k", "v"), note="feature dim 16 (Taylor map)")


def _nsa_make(gen, dtype):
    t = 128
    x = {"q": rn(gen, 1, t, 16, D, dtype=dtype), "k": rn(gen, 1, t, 1, D, dtype=dtype),
         "v": rn(gen, 1, t, 1, D, dtype=dtype)}
    blocks = 4                                               # 32-token blocks
    idx = torch.stack([torch.randperm(blocks, generator=gen)[:2] for _ in range(t)])  # [T, 2]
    x["block_indices"] = idx.sort(-1)[0].view(1, t, 1, 2)
    return x


def _nsa_ref(x):
    from fla.ops.nsa.naive import naive_nsa_selection
    return {"o": naive_nsa_selection(x["q"], x["k"], x["v"], x["block_indices"], block_size=32, scale=SC)}


op("fla.ops.nsa.parallel_nsa", _nsa_make,
   lambda x: {"o": _fla("fla.ops.parallel_nsa")(x["q"], x["k"], x["v"], block_indices=x["block_indices"],
                                              block_counts=2, block_size=32, scale=SC)},
   _nsa_ref, ("q", "k", "v"), note="selection branch, 16 query heads / 1 KV head, 2 of 4 blocks")


def _loglin_make(gen, dtype):
    x = qkv(gen, dtype, t=64)
    levels = int(math.ceil(math.log2(64))) + 1
    return {**x, "q": x["q"][:, :64], "g": logdecay(gen, B, 64, H),
            "level_scales": torch.rand(B, 64, H, levels, generator=gen).to(dtype)}


def _loglin_ref(x):
    from fla.ops.log_linear_attn.naive import naive_log_linear_attn
    return {"o": naive_log_linear_attn(x["q"], x["k"], x["v"], x["g"], x["level_scales"], scale=SC)}


op("fla.ops.log_linear_attn.chunk_log_linear_attn", _loglin_make,
   lambda x: {"o": _fla("fla.ops.chunk_log_linear_attn")(x["q"], x["k"], x["v"], x["g"], x["level_scales"],
                                                        scale=SC)[0]},
   _loglin_ref, ("q", "k", "v", "g", "level_scales"), note="64 tokens; naive_log_linear_attn")


def _comba_make(gen, dtype):
    x = _gdn_make(gen, dtype)
    return {**x, "p": l2n(torch.randn(B, T, H, D, generator=gen)).to(dtype)}


def _comba_ref(x):
    """u_t = beta_t (v_t - S_{t-1}^T p_t), S_t = exp(g_t) S_{t-1} + k_t u_t^T, o_t = scale S_t^T q_t:
    the order FLA's comba kernels use (its naive_recurrent_comba decays S before the p-correction,
    which neither kernel does, so it is not the reference here)."""
    S, outs = x["h0"].clone(), []
    for i in range(T):
        u = x["beta"][:, i][..., None] * (x["v"][:, i] - torch.einsum("bhk,bhkv->bhv", x["p"][:, i], S))
        S = S * x["g"][:, i].exp()[..., None, None] + x["k"][:, i][..., None] * u[..., None, :]
        outs.append(torch.einsum("bhk,bhkv->bhv", x["q"][:, i] * SC, S))
    return {"o": torch.stack(outs, 1), "ht": S}


op("fla.ops.comba.chunk_comba", _comba_make,
   lambda x: _o_ht(_fla("fla.ops.chunk_comba")(x["q"], x["k"], x["v"], x["p"], x["g"], x["beta"], scale=SC,
                                              initial_state=x["h0"], output_final_state=True)),
   _comba_ref, ("q", "k", "v", "p", "g", "beta", "h0"))
op("fla.ops.comba.fused_recurrent_comba", _comba_make,
   lambda x: _o_ht(_fla("fla.ops.fused_recurrent_comba")(x["q"], x["k"], x["p"], x["v"], x["g"], x["beta"],
                                                        scale=SC, initial_state=x["h0"], output_final_state=True)),
   _comba_ref, note="forward")


def _mesa_make(gen, dtype):
    x = qkv(gen, dtype, norm_k=True, t=64)
    x["q"] = l2n(x["q"].float()).to(dtype)
    return {**x, "g": logdecay(gen, B, 64, H), "beta": torch.rand(B, 64, H, generator=gen).to(dtype),
            "lamb": (torch.rand(H, D, generator=gen) + 0.5).to(dtype)}


def _mesa_ref(x):
    from fla.ops.mesa_net.naive import naive_mesa_net_exact
    return {"o": naive_mesa_net_exact(x["q"], x["k"], x["v"], x["g"], x["lamb"], x["beta"])[0]}


op("fla.ops.mesa_net.chunk_mesa_net", _mesa_make,
   lambda x: {"o": _fla("fla.ops.chunk_mesa_net")(x["q"], x["k"], x["v"], x["g"], x["beta"], x["lamb"])[0]},
   _mesa_ref, tol={"fp32": 1e-3}, note="64 tokens; forward against the exact solve (the op runs 30 CG steps)")



# ------------------------------------------------------------- newer variants, against FLA's naive
def _gdn2_make(gen, dtype):
    return {**qkv(gen, dtype, norm_k=True), "g": logdecay(gen, B, T, H, D),
            "b": torch.rand(B, T, H, D, generator=gen).to(dtype), "w": torch.rand(B, T, H, D, generator=gen).to(dtype),
            "h0": H0(gen)}


def _gdn2_ref(x):
    from fla.ops.gdn2.naive import naive_recurrent_gdn2
    return _o_ht(naive_recurrent_gdn2(x["q"], x["k"], x["v"], x["g"], x["b"], x["w"], SC, x["h0"], True))


for fn in ("chunk_gdn2", "fused_recurrent_gdn2"):
    op(f"fla.ops.gdn2.{fn}", _gdn2_make,
       lambda x, fn=fn: _o_ht(_fla(f"fla.ops.gdn2.{fn}")(x["q"], x["k"], x["v"], x["g"], x["b"], x["w"], scale=SC,
                                                        initial_state=x["h0"], output_final_state=True)),
       _gdn2_ref, ("q", "k", "v", "g", "b", "w", "h0") if fn.startswith("chunk") else (),
       note="naive_recurrent_gdn2 (fp32)" + ("" if fn.startswith("chunk") else ", forward"))


def _gdp_make(gen, dtype):
    k = l2n(torch.randn(B, 2 * T, H, D, generator=gen)).to(dtype)
    return {"q": rn(gen, B, T, H, D, dtype=dtype), "k": k, "v": rn(gen, B, 2 * T, H, D, dtype=dtype),
            "g": logdecay(gen, B, T, H), "beta": torch.rand(B, 2 * T, H, generator=gen).to(dtype), "h0": H0(gen)}


def _gdp_ref(x):
    from fla.ops.gated_delta_product.naive import naive_recurrent_gated_delta_product
    return _o_ht(naive_recurrent_gated_delta_product(x["q"], x["k"], x["v"], x["g"], x["beta"], SC,
                                                     initial_state=x["h0"], output_final_state=True,
                                                     num_householder=2))


op("fla.ops.gated_delta_product.chunk_gated_delta_product", _gdp_make,
   lambda x: _o_ht(_fla("fla.ops.gated_delta_product.chunk_gated_delta_product")(
       x["q"], x["k"], x["v"], x["g"], x["beta"], num_householder=2, scale=SC, initial_state=x["h0"],
       output_final_state=True)),
   _gdp_ref, ("q", "k", "v", "g", "beta", "h0"), ("bf16",),
   tol={"dg@bf16": GATE_BF16, "dbeta@bf16": GATE_BF16},
   note="2 Householder steps per token; naive (fp32); bf16 only: the library refuses fp32")


def _parallax_make(gen, dtype):
    x = _attn_make(gen, dtype)
    return {**x, "r": rn(gen, B, T, 4, D, dtype=dtype)}


def _parallax_ref(x):
    from fla.ops.parallax.naive import naive_parallax
    return {"o": naive_parallax(x["q"], x["r"], x["k"], x["v"], scale=SC)}


op("fla.ops.parallax.parallel_parallax", _parallax_make,
   lambda x: {"o": _fla("fla.ops.parallax.parallel_parallax")(x["q"], x["r"], x["k"], x["v"], scale=SC)},
   _parallax_ref, ("q", "r", "k", "v"), ("bf16",), note="naive_parallax (fp32); bf16 only: the library refuses fp32")


def _rebased_ref(x):
    from fla.ops.rebased.naive import naive_parallel_rebased
    t = lambda a: a.transpose(1, 2)   # noqa: E731
    return {"o": t(naive_parallel_rebased(t(x["q"]), t(x["k"]), t(x["v"])))}


op("fla.ops.rebased.parallel_rebased", _based_make,
   lambda x: {"o": _fla("fla.ops.rebased.parallel_rebased")(x["q"], x["k"], x["v"], eps=1e-6)},
   _rebased_ref, ("q", "k", "v"), note="feature dim 16; naive_parallel_rebased")


def _attnres_make(gen, dtype):
    return {"query": rn(gen, DM, dtype=dtype, scale=0.1), "w": rn(gen, DM, dtype=dtype, scale=0.1, shift=1.0),
            **{f"r{i}": rn(gen, 2, 32, DM, dtype=dtype) for i in range(4)}}


def _attnres_ref(x):
    from fla.ops.attnres.naive import naive_attnres
    return {"y": naive_attnres(x["query"], [x[f"r{i}"] for i in range(4)], x["w"])}


op("fla.ops.attnres.fused_attnres", _attnres_make,
   lambda x: {"y": _fla("fla.ops.attnres.fused_attnres")(x["query"], [x[f"r{i}"] for i in range(4)], x["w"])},
   _attnres_ref, ("query", "w", "r0", "r1", "r2", "r3"), note="4 residual sources [2, 32, 512]; naive_attnres",
   expect="b: fla/ops/attnres/fused.py:323 raises unless the residuals are CUDA tensors (`is_cuda`)")

for fn, why in (("cyfa.chunk_cyfa", ""), ("precond_gated_delta_rule.chunk_precond_gated_delta_rule", ""),
                ("precond_kda.chunk_precond_kda", ""), ("momentum_delta_rule.chunk_momentum_delta_rule", ""),
                ("lightnet.chunk_lightnet", ""), ("gated_oja_rule.chunk_gated_oja_rule", ""),
                ("moba.parallel_moba", ""), ("rwkv4.fused_recurrent_rwkv4", ""), ("ttt.chunk_ttt_linear", ""),
                ("titans.chunk_titans_linear", ""),
                ("wall_attn.parallel_wall_attn", "its naive reference launches FLA's Triton chunk_global_cumsum"),
                ("deltaformer.deltaformer_attn", "does not import: fla-core 0.6.0 lacks fla.layers, which it needs")):
    op(f"fla.ops.{fn}", _ret_make, lambda x: {}, _ret_ref,
       skip="not swept: " + (why or "a research variant no serving or training stack in serving-stacks.md uses"))

# ============================================================================== fla.modules
N, DM = 64, 512   # tokens, hidden


def _norm_make(gen, dtype):
    return {"x": rn(gen, N, DM, dtype=dtype, scale=2.0), "res": rn(gen, N, DM, dtype=dtype),
            "w": rn(gen, DM, dtype=dtype, scale=0.1, shift=1.0), "b": rn(gen, DM, dtype=dtype, scale=0.1),
            "z": rn(gen, N, DM, dtype=dtype)}


def _rms(x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


op("fla.modules.norm.rms_norm", _norm_make,
   lambda x: {"y": _fla("fla.modules.norm.layernorm.rms_norm")(x["x"], x["w"], None, eps=1e-5)},
   lambda x: {"y": _rms(x["x"], x["w"])}, ("x", "w"), BOTH, tol={"dw@bf16": 3e-2})
op("fla.modules.norm.rms_norm[residual,prenorm]", _norm_make,
   lambda x: dict(zip(("y", "r"), _fla("fla.modules.norm.layernorm.rms_norm")(
       x["x"], x["w"], None, residual=x["res"], eps=1e-5, prenorm=True, residual_in_fp32=True))),
   lambda x: {"y": _rms(x["x"] + x["res"], x["w"]), "r": x["x"] + x["res"]}, ("x", "res", "w"))
op("fla.modules.norm.layer_norm", _norm_make,
   lambda x: {"y": _fla("fla.modules.norm.layernorm.layer_norm")(x["x"], x["w"], x["b"], eps=1e-5)},
   lambda x: {"y": F.layer_norm(x["x"], (DM,), x["w"], x["b"], 1e-5)}, ("x", "w", "b"), BOTH,
   tol={"dw@bf16": 3e-2, "db@bf16": 3e-2})
op("fla.modules.norm.group_norm", _norm_make,
   lambda x: {"y": _fla("fla.modules.norm.layernorm.group_norm")(x["x"], x["w"], x["b"], eps=1e-5, num_groups=4)},
   lambda x: {"y": F.group_norm(x["x"], 4, x["w"], x["b"], 1e-5)},
   ("x", "w", "b"), note="4 groups")


def _lin_make(gen, dtype):
    return {**_norm_make(gen, dtype), "lw": rn(gen, 256, DM, dtype=dtype, scale=DM ** -0.5),
            "lb": rn(gen, 256, dtype=dtype, scale=0.1)}


op("fla.modules.norm.rms_norm_linear", _lin_make,
   lambda x: {"y": _fla("fla.modules.norm.layernorm.rms_norm_linear")(x["x"], x["w"], None, x["lw"], x["lb"])},
   lambda x: {"y": F.linear(_rms(x["x"], x["w"]), x["lw"], x["lb"])}, ("x", "w", "lw", "lb"))


def _gate_ref(x, rms):
    y = _rms(x["x"], x["w"], 1e-6) if rms else F.layer_norm(x["x"], (DM,), x["w"], x["b"], 1e-6)
    return {"y": y * F.silu(x["z"])}


op("fla.modules.norm.layer_norm_gated", _norm_make,
   lambda x: {"y": _fla("fla.modules.norm.fused_norm_gate.layer_norm_gated")(x["x"], x["z"], x["w"], x["b"])},
   lambda x: _gate_ref(x, False), ("x", "z", "w", "b"), BOTH, tol={"dw@bf16": 3e-2, "db@bf16": 3e-2})
op("fla.modules.norm.rms_norm_gated", _norm_make,
   lambda x: {"y": _fla("fla.modules.norm.fused_norm_gate.rms_norm_gated")(x["x"], x["z"], x["w"], None)},
   lambda x: _gate_ref(x, True), ("x", "z", "w"))


def _l2_make(gen, dtype):
    return {"x": rn(gen, B, T, H, D, dtype=dtype)}


op("fla.modules.l2norm.l2norm", _l2_make,
   lambda x: {"y": _fla("fla.modules.l2norm.l2norm")(x["x"])},
   lambda x: {"y": x["x"] * torch.rsqrt((x["x"] ** 2).sum(-1, keepdim=True) + 1e-6)}, ("x",), BOTH)


def _conv_make(gen, dtype):
    return {"x": rn(gen, B, T, 256, dtype=dtype), "w": rn(gen, 256, 4, dtype=dtype, scale=0.5),
            "bias": rn(gen, 256, dtype=dtype, scale=0.1)}


def _conv_ref(x):
    xt = F.pad(x["x"].transpose(1, 2), (3, 0))
    return {"y": F.silu(F.conv1d(xt, x["w"][:, None], x["bias"], groups=256)).transpose(1, 2)}


op("fla.modules.convolution.causal_conv1d", _conv_make,
   lambda x: {"y": _fla("fla.modules.convolution.causal_conv1d")(x["x"], weight=x["w"], bias=x["bias"],
                                                                activation="silu")[0]},
   _conv_ref, ("x", "w", "bias"), BOTH, note="width 4, bias, silu")


def _rot_make(gen, dtype):
    inv = 1.0 / (10000 ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    ang = torch.outer(torch.arange(T + 8, dtype=torch.float64), inv)
    return {"x": rn(gen, B, T, H, D, dtype=dtype), "cos": ang.cos().to(dtype), "sin": ang.sin().to(dtype)}


def _rot_ref(x, interleaved, off=0):
    c, s = x["cos"][off:off + T][None, :, None], x["sin"][off:off + T][None, :, None]
    a = x["x"]
    if interleaved:
        a1, a2 = a[..., 0::2], a[..., 1::2]
        return {"y": torch.stack((a1 * c - a2 * s, a1 * s + a2 * c), -1).flatten(-2)}
    a1, a2 = a[..., :D // 2], a[..., D // 2:]
    return {"y": torch.cat((a1 * c - a2 * s, a1 * s + a2 * c), -1)}


op("fla.modules.rotary.rotary_embedding", _rot_make,
   lambda x: {"y": _fla("fla.modules.rotary.rotary_embedding")(x["x"], x["cos"], x["sin"], seqlen_offsets=5)},
   lambda x: _rot_ref(x, False, 5), ("x",), BOTH, note="rotate-half, offset 5")
op("fla.modules.rotary.rotary_embedding[interleaved]", _rot_make,
   lambda x: {"y": _fla("fla.modules.rotary.rotary_embedding")(x["x"], x["cos"], x["sin"], interleaved=True)},
   lambda x: _rot_ref(x, True), ("x",))


def _ts_make(gen, dtype):
    return {"x": rn(gen, B, T, DM, dtype=dtype)}


op("fla.modules.token_shift.token_shift", _ts_make,
   lambda x: {"y": _fla("fla.modules.token_shift.token_shift")(x["x"])},
   lambda x: {"y": F.pad(x["x"], (0, 0, 1, -1)) - x["x"]}, ("x",), BOTH, note="x[t-1] - x[t]")

V_ = 2048


def _ce_make(gen, dtype):
    t = torch.randint(0, V_, (N,), generator=gen)
    t[torch.randperm(N, generator=gen)[:5]] = -100
    return {"logits": rn(gen, N, V_, dtype=dtype, scale=2.0), "target": t}


def _ce_ref(x, smoothing=0.0):
    return {"loss": F.cross_entropy(x["logits"], x["target"], label_smoothing=smoothing)}


op("fla.modules.FusedCrossEntropyLoss", _ce_make,
   lambda x: {"loss": _fla("fla.modules.FusedCrossEntropyLoss")(label_smoothing=0.1)(x["logits"], x["target"])},
   lambda x: _ce_ref(x, 0.1), ("logits",), note="label smoothing 0.1, 5 ignored tokens",
   expect="b: fla/modules/fused_cross_entropy/ops.py:515 FusedCrossEntropyLoss.forward asserts CUDA/NPU/XPU "
          "tensors (the function it wraps, cross_entropy_loss, runs: next row)")


def _ce_fn_ref(x):
    keep = x["target"] != -100
    per = F.cross_entropy(x["logits"], x["target"], label_smoothing=0.1, reduction="none")
    return {"loss": per * keep}


op("fla.modules.fused_cross_entropy.cross_entropy_loss", _ce_make,
   lambda x: {"loss": _fla("fla.modules.fused_cross_entropy.cross_entropy_loss")(
       x["logits"], x["target"], label_smoothing=0.1)[0]},
   _ce_fn_ref, ("logits",), BOTH, note="per-token losses, label smoothing 0.1, 5 ignored tokens")


def _flce_make(gen, dtype):
    return {**_ce_make(gen, dtype), "x": rn(gen, N, 256, dtype=dtype),
            "w": rn(gen, V_, 256, dtype=dtype, scale=256 ** -0.5 * 2), "b": rn(gen, V_, dtype=dtype, scale=0.1)}


op("fla.modules.FusedLinearCrossEntropyLoss", _flce_make,
   lambda x: {"loss": _fla("fla.modules.fused_linear_cross_entropy.fused_linear_cross_entropy_loss")(
       x["x"], x["target"], x["w"], x["b"])},
   lambda x: {"loss": F.cross_entropy(F.linear(x["x"], x["w"], x["b"]), x["target"])}, ("x", "w", "b"), BOTH)


def _kl_make(gen, dtype):
    return {"x": rn(gen, N, 256, dtype=dtype), "tx": rn(gen, N, 256, dtype=dtype),
            "w": rn(gen, V_, 256, dtype=dtype, scale=256 ** -0.5 * 2), "tw": rn(gen, V_, 256, dtype=dtype, scale=256 ** -0.5 * 2)}


def _kl_ref(x):
    lp = F.log_softmax(F.linear(x["x"], x["w"]), -1)
    tp = F.log_softmax(F.linear(x["tx"], x["tw"]), -1)
    return {"loss": F.kl_div(lp, tp, reduction="batchmean", log_target=True)}


op("fla.modules.FusedKLDivLoss", _kl_make,
   lambda x: {"loss": _fla("fla.modules.fused_kl_div.fused_kl_div_loss")(x["x"], x["tx"], x["w"], x["tw"])},
   _kl_ref, ("x", "w"))


def _act_make(gen, dtype):
    return {"x": rn(gen, N, DM, dtype=dtype, scale=2.0), "y": rn(gen, N, DM, dtype=dtype)}


for fn, ref in (("swiglu", lambda x: {"o": F.silu(x["x"]) * x["y"]}),
                ("sigmoidglu", lambda x: {"o": torch.sigmoid(x["x"]) * x["y"]})):
    op(f"fla.modules.activations.{fn}", _act_make,
       lambda x, fn=fn: {"o": _fla(f"fla.modules.activations.{fn}")(x["x"], x["y"])}, ref, ("x", "y"), BOTH)
for fn, ref in (("sigmoid", torch.sigmoid), ("swish", F.silu), ("logsigmoid", F.logsigmoid),
                ("elu_p1", lambda a: F.elu(a) + 1)):
    op(f"fla.modules.activations.{fn}", _act_make,
       lambda x, fn=fn: {"o": _fla(f"fla.modules.activations.{fn}")(x["x"])},
       lambda x, ref=ref: {"o": ref(x["x"])}, ("x",),
       expect="b: fla/modules/activations/ops.py:243 elu_p1 computes tensors on device 'cpu' with PyTorch "
              "(its kernel needs libdevice.exp, which triton-ascend lacks), so no Triton kernel runs"
       if fn == "elu_p1" else "")


def _mlp_make(gen, dtype):
    return {**_act_make(gen, dtype), "w": rn(gen, 256, DM, dtype=dtype, scale=DM ** -0.5),
            "b": rn(gen, 256, dtype=dtype, scale=0.1)}


op("fla.modules.activations.swiglu_linear", _mlp_make,
   lambda x: {"o": _fla("fla.modules.activations.swiglu_linear")(x["x"], x["y"], x["w"], x["b"])},
   lambda x: {"o": F.linear(F.silu(x["x"]) * x["y"], x["w"], x["b"])}, ("x", "y", "w", "b"))
