"""The mamba_ssm Triton ops `thirdparty_sweep.py` runs (`mamba_ssm.ops.triton.*`), with references
written here in PyTorch.

Shapes are Mamba-2's layout at CPU size: 2 sequences of 100 tokens (chunk 64: a full chunk and a
partial one), 4 heads of 32, state 32, 2 groups (B and C shared by two heads each); decode with
Mamba-2's [batch, heads, headdim, state] cache and Mamba-1's [batch, dim, state] one; norms over 64
tokens of 256. The SSD reference is the recurrence token by token in fp64:
    S_t = exp(dt_t A) S_{t-1} + dt_t x_t B_t^T,   y_t = S_t C_t + D x_t   (times silu(z_t) when gated)
with dt = softplus(dt_raw + dt_bias).
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator
from unittest import mock

import torch
import torch.nn.functional as F

from library_sweep import SweepOp
from thirdparty_sweep import cuda_device_standin, require

B, L, H, P, N, G, Q = 2, 100, 4, 32, 32, 2, 64
BOTH = ("fp32", "bf16")
OPS: list[SweepOp] = []
STANDIN = ("with cuda_device_standin (mamba_ssm wraps each launch in torch.cuda.device(x.device.index) "
           "and reads the CUDA SM count in backward)")


@contextlib.contextmanager
def mamba_mode(deterministic: bool, standin: bool = True) -> Iterator[None]:
    """MAMBA_DETERMINISTIC set as a user would: mamba_ssm reads it (else torch's deterministic
    mode) as a request for its deterministic reductions and a single autotune config
    (utils/determinism.py)."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.dict(os.environ, {"MAMBA_DETERMINISTIC": "1" if deterministic else "0"}))
        if standin:
            stack.enter_context(cuda_device_standin())
        yield


def op(name, make, call, ref, grads=(), dtypes=("fp32",), note="", standin=True, deterministic=False, **kw):
    OPS.append(SweepOp(name=f"mamba_ssm.{name}", lib="mamba_ssm", make=make, call=call, ref=ref,
                       grads=grads, dtypes=dtypes, context=lambda: mamba_mode(deterministic, standin),
                       note="; ".join(filter(None, [note, STANDIN if standin else ""])), **kw))


def fn(module, name):
    return getattr(require("mamba_ssm", f"mamba_ssm.ops.triton.{module}"), name)


def rn(gen, *shape, dtype=torch.float32, scale=1.0, shift=0.0):
    return (torch.randn(*shape, generator=gen) * scale + shift).to(dtype)


def _heads(t, h):
    """[b, l, g, n] groups -> [b, l, h, n] (head i reads group i // (h / g))."""
    return t.repeat_interleave(h // t.shape[2], dim=2)


# --------------------------------------------------------------------------------- SSD (chunked scan)
def ssd_recurrence(x, dt, A, Bm, Cm, D=None, z=None, h0=None):
    """x [b, l, h, p], dt [b, l, h] (already softplus'd), A [h], B/C [b, l, g, n], D [h] or [h, p];
    returns y [b, l, h, p] and the final state [b, h, p, n]."""
    b, l, h, p = x.shape
    Bh, Ch = _heads(Bm, h), _heads(Cm, h)
    S = torch.zeros(b, h, p, Bm.shape[-1], dtype=x.dtype) if h0 is None else h0.to(x.dtype)
    ys = []
    for t in range(l):
        S = torch.exp(dt[:, t] * A)[..., None, None] * S \
            + (dt[:, t, :, None] * x[:, t])[..., None] * Bh[:, t, :, None, :]
        ys.append(torch.einsum("bhpn,bhn->bhp", S, Ch[:, t]))
    y = torch.stack(ys, 1)
    if D is not None:
        y = y + (D if D.dim() == 2 else D[:, None]) * x
    if z is not None:
        y = y * F.silu(z)
    return y, S


def _ssd_make(gen, dtype, b=B, l=L):
    return {"x": rn(gen, b, l, H, P, dtype=dtype), "dt": rn(gen, b, l, H, dtype=dtype, scale=0.5, shift=-1.0),
            "A": -torch.rand(H, generator=gen).add(0.5).to(dtype), "B": rn(gen, b, l, G, N, dtype=dtype),
            "C": rn(gen, b, l, G, N, dtype=dtype), "D": rn(gen, H, dtype=dtype),
            "z": rn(gen, b, l, H, P, dtype=dtype), "dt_bias": rn(gen, H, dtype=dtype, scale=0.5),
            "h0": rn(gen, b, H, P, N, dtype=dtype, scale=0.5)}


def _ssd_call(x):
    out, fs = fn("ssd_combined", "mamba_chunk_scan_combined")(
        x["x"], x["dt"], x["A"], x["B"], x["C"], Q, D=x["D"], z=x["z"], dt_bias=x["dt_bias"],
        initial_states=x["h0"], dt_softplus=True, return_final_states=True)
    return {"y": out, "ht": fs}


def _ssd_ref(x):
    dt = F.softplus(x["dt"] + x["dt_bias"])
    y, s = ssd_recurrence(x["x"], dt, x["A"], x["B"], x["C"], x["D"], x["z"], x["h0"])
    return {"y": y, "ht": s}


SSD_GRADS = ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "h0")
op("mamba_chunk_scan_combined", _ssd_make, _ssd_call, _ssd_ref, SSD_GRADS, BOTH,
   tol={"bf16": 3e-2, "dA@bf16": 6e-2, "ddt@bf16": 6e-2, "ddt_bias@bf16": 6e-2},
   note="D, z gate, dt_bias + softplus, initial and final states; chunk 64 over 100 tokens")


def _ssd_plain_call(x):
    return {"y": fn("ssd_combined", "mamba_chunk_scan_combined")(x["x"], x["dt"], x["A"], x["B"], x["C"], Q)}


op("mamba_chunk_scan_combined[deterministic]", _ssd_make, _ssd_call, _ssd_ref, SSD_GRADS,
   deterministic=True, note="MAMBA_DETERMINISTIC=1: per-program partial sums reduced after the kernels "
                            "(DETERMINISTIC_REDUCTION), one autotune config each")
op("mamba_chunk_scan_combined[compiled]", _ssd_make, _ssd_call, _ssd_ref, SSD_GRADS, cpu_tier="compiled",
   note="on cpu_interp's compiled tier (DAY0_CPU_TIER=compiled)")
op("mamba_chunk_scan_combined[plain]", _ssd_make, _ssd_plain_call,
   lambda x: {"y": ssd_recurrence(x["x"], x["dt"].clamp(min=0), x["A"], x["B"], x["C"])[0]},
   ("x", "dt", "A", "B", "C"), note="no D / z / dt_bias / softplus; negative dt is clamped to 0 (dt_limit)")

CU = [0, 37, 120, 200]


def _varlen_make(gen, dtype):
    x = _ssd_make(gen, dtype, b=1, l=CU[-1])
    seq_idx = torch.zeros(1, CU[-1], dtype=torch.int32)
    for i in range(len(CU) - 1):
        seq_idx[0, CU[i]:CU[i + 1]] = i
    return {**x, "seq_idx": seq_idx, "cu": torch.tensor(CU, dtype=torch.int32)}


def _varlen_call(x):
    out, vs = fn("ssd_combined", "mamba_chunk_scan_combined")(
        x["x"], x["dt"], x["A"], x["B"], x["C"], Q, D=x["D"], z=x["z"], dt_bias=x["dt_bias"],
        seq_idx=x["seq_idx"], cu_seqlens=x["cu"], dt_softplus=True, return_varlen_states=True)
    return {"y": out, "states": vs}


def _varlen_ref(x):
    dt = F.softplus(x["dt"] + x["dt_bias"])
    ys, ss = [], []
    for i in range(len(CU) - 1):
        s = slice(CU[i], CU[i + 1])
        y, st = ssd_recurrence(x["x"][:, s], dt[:, s], x["A"], x["B"][:, s], x["C"][:, s], x["D"], x["z"][:, s])
        ys.append(y)
        ss.append(st)
    return {"y": torch.cat(ys, 1), "states": torch.cat(ss, 0)}


op("mamba_chunk_scan_combined[varlen]", _varlen_make, _varlen_call, _varlen_ref,
   note="3 packed sequences (37, 83, 80 tokens: boundaries inside chunks), seq_idx + cu_seqlens, "
        "per-sequence final states (return_varlen_states)")


# ------------------------------------------------------------------------ the SSD stages, one by one
NC = 2  # chunks of Q tokens: 128 >= 100 (the stages take dt / dA_cumsum already chunked)


def _chunked(gen, dtype, l=L):
    dt = F.softplus(torch.randn(B, H, NC, Q, generator=gen) - 1)
    A = -torch.rand(H, generator=gen) - 0.5
    dA = torch.cumsum(dt * A[:, None, None], -1)
    return {"x": rn(gen, B, l, H, P, dtype=dtype), "B": rn(gen, B, l, G, N, dtype=dtype),
            "C": rn(gen, B, l, G, N, dtype=dtype), "dt": dt.to(dtype), "dA_cumsum": dA.to(dtype)}


def _pad_tokens(t, l):
    return F.pad(t, (0, 0, 0, 0, 0, l - t.shape[1]))


def _chunk_state_ref(x):
    xs, Bh = _pad_tokens(x["x"], NC * Q), _pad_tokens(_heads(x["B"], H), NC * Q)
    states = []
    for c in range(NC):
        sl = slice(c * Q, (c + 1) * Q)
        w = torch.exp(x["dA_cumsum"][:, :, c, -1:] - x["dA_cumsum"][:, :, c]) * x["dt"][:, :, c]  # [b, h, Q]
        states.append(torch.einsum("bhl,blhp,blhn->bhpn", w, xs[:, sl], Bh[:, sl]))
    return {"states": torch.stack(states, 1)}


op("chunk_state", _chunked,
   lambda x: {"states": fn("ssd_chunk_state", "chunk_state")(x["B"], x["x"], x["dt"], x["dA_cumsum"])},
   _chunk_state_ref, ("x", "B", "dt", "dA_cumsum"), note="states of 2 chunks of 64 over 100 tokens")


def _passing_make(gen, dtype):
    return {"states": rn(gen, B, 3, H, P * N, dtype=dtype), "dA": (-torch.rand(B, H, 3, generator=gen) * 2).to(dtype),
            "h0": rn(gen, B, H, P * N, dtype=dtype)}


def _passing_ref(x):
    s, outs = x["h0"], []
    for c in range(x["states"].shape[1]):
        outs.append(s)
        s = torch.exp(x["dA"][:, :, c])[..., None] * s + x["states"][:, c]
    return {"out": torch.stack(outs, 1), "final": s}


op("state_passing", _passing_make,
   lambda x: dict(zip(("out", "final"), fn("ssd_state_passing", "state_passing")(x["states"], x["dA"], x["h0"]))),
   _passing_ref, ("states", "dA", "h0"), note="3 chunks, state 32 x 32 flattened, initial state")


def _scan_make(gen, dtype):
    x = _chunked(gen, dtype, l=NC * Q)
    return {**x, "prev": rn(gen, B, NC, H, P, N, dtype=dtype, scale=0.5), "D": rn(gen, H, P, dtype=dtype),
            "z": rn(gen, B, NC * Q, H, P, dtype=dtype)}


def _scan_ref(x):
    Bh, Ch = _heads(x["B"], H), _heads(x["C"], H)
    outs = []
    for c in range(NC):
        sl = slice(c * Q, (c + 1) * Q)
        dA = x["dA_cumsum"][:, :, c]                                        # [b, h, Q]
        decay = torch.exp(dA[..., :, None] - dA[..., None, :]).tril()      # [b, h, l, s]
        cb = torch.einsum("blhn,bshn->bhls", Ch[:, sl], Bh[:, sl]) * decay * x["dt"][:, :, c, None, :]
        y = torch.einsum("bhls,bshp->blhp", cb, x["x"][:, sl])
        y = y + torch.einsum("blhn,bhpn->blhp", Ch[:, sl], x["prev"][:, c]) * torch.exp(dA).transpose(1, 2)[..., None]
        outs.append(y)
    y = torch.cat(outs, 1) + x["D"] * x["x"]
    return {"y": y * F.silu(x["z"])}


op("chunk_scan", _scan_make,
   lambda x: {"y": fn("ssd_chunk_scan", "chunk_scan")(x["B"], x["C"], x["x"], x["dt"], x["dA_cumsum"], x["prev"],
                                                     D=x["D"], z=x["z"])},
   _scan_ref, ("x", "B", "C", "dt", "dA_cumsum", "prev", "D", "z"),
   note="2 full chunks of 64, per-channel D [h, p], z gate")


# ------------------------------------------------------------------------------------- decode step
def _ssu_make(gen, dtype, *, heads=True):
    if heads:   # Mamba-2: dt, A, D, dt_bias per head (the call broadcasts them over headdim / state)
        return {"state": rn(gen, 3, H, P, N, dtype=dtype), "x": rn(gen, 3, H, P, dtype=dtype),
                "dt": rn(gen, 3, H, dtype=dtype, shift=-1), "A": (-torch.rand(H, generator=gen) - 0.5).to(dtype),
                "B": rn(gen, 3, G, N, dtype=dtype), "C": rn(gen, 3, G, N, dtype=dtype), "D": rn(gen, H, dtype=dtype),
                "z": rn(gen, 3, H, P, dtype=dtype), "dt_bias": rn(gen, H, dtype=dtype, scale=0.5)}
    dim, n = 64, 16  # Mamba-1: [batch, dim, state], A per channel and state
    return {"state": rn(gen, 3, dim, n, dtype=dtype), "x": rn(gen, 3, dim, dtype=dtype),
            "dt": rn(gen, 3, dim, dtype=dtype, shift=-1), "A": (-torch.rand(dim, n, generator=gen) - 0.5).to(dtype),
            "B": rn(gen, 3, n, dtype=dtype), "C": rn(gen, 3, n, dtype=dtype), "D": rn(gen, dim, dtype=dtype),
            "z": rn(gen, 3, dim, dtype=dtype), "dt_bias": rn(gen, dim, dtype=dtype, scale=0.5)}


def _tied(x):
    """Mamba-2's decode call: per-head dt / A / D / dt_bias as stride-0 views over headdim (and
    state), as its layer passes them (the kernel's tie_hdim path)."""
    if x["state"].dim() == 3:
        return x
    b = x["x"].shape[0]
    return {**x, "dt": x["dt"][:, :, None].expand(b, H, P), "A": x["A"][:, None, None].expand(H, P, N),
            "D": x["D"][:, None].expand(H, P), "dt_bias": x["dt_bias"][:, None].expand(H, P)}


def _ssu_call(x, **kw):
    st, t = x["state"].clone(), _tied(x)
    out = fn("selective_state_update", "selective_state_update")(
        st, t["x"], t["dt"], t["A"], t["B"], t["C"], D=t["D"], z=t["z"], dt_bias=t["dt_bias"], dt_softplus=True, **kw)
    return {"out": out, "state": st}


def _ssu_ref(x):
    x = _tied(x)
    st, xx = x["state"], x["x"]
    if st.dim() == 4:
        Bm = x["B"].repeat_interleave(H // G, 1)[:, :, None]   # [b, h, 1, n]
        Cm = x["C"].repeat_interleave(H // G, 1)[:, :, None]
    else:
        Bm, Cm = x["B"][:, None], x["C"][:, None]             # [b, 1, n]
    dt = F.softplus(x["dt"] + x["dt_bias"])[..., None]
    new = st * torch.exp(dt * x["A"]) + dt * xx[..., None] * Bm
    out = (new * Cm).sum(-1) + x["D"] * xx
    return {"out": out * F.silu(x["z"]), "state": new}


op("selective_state_update", _ssu_make, _ssu_call, _ssu_ref, (), BOTH,
   note="Mamba-2 decode: 3 requests, [b, h, p, n] cache updated in place, A / dt / D tied over headdim "
        "(stride 0, the kernel's tie_hdim path), 2 groups")
op("selective_state_update[mamba1]", lambda g, d: _ssu_make(g, d, heads=False), _ssu_call, _ssu_ref,
   note="Mamba-1 decode: [b, dim 64, state 16] cache, A per channel and state")
op("selective_state_update[compiled]", _ssu_make, _ssu_call, _ssu_ref, cpu_tier="compiled",
   note="the Mamba-2 case on the compiled tier")


def _ssu_index_make(gen, dtype):
    x = _ssu_make(gen, dtype)
    return {**x, "state": rn(gen, 6, H, P, N, dtype=dtype), "idx": torch.tensor([4, 0, 2], dtype=torch.int32)}


def _ssu_index_call(x):
    return _ssu_call({n: t for n, t in x.items() if n != "idx"}, state_batch_indices=x["idx"])


def _ssu_index_ref(x):
    idx = x["idx"].long()
    r = _ssu_ref({**x, "state": x["state"][idx]})
    st = x["state"].clone()
    st[idx] = r["state"]
    return {"out": r["out"], "state": st}


op("selective_state_update[state_batch_indices]", _ssu_index_make, _ssu_index_call, _ssu_index_ref,
   note="3 requests reading and writing cache slots 4, 0, 2 of 6 (the others must stay as they were)")


# ---------------------------------------------------------------------------------------------- norms
NT, DM = 64, 256


def _norm_make(gen, dtype):
    return {"x": rn(gen, NT, DM, dtype=dtype, scale=2.0), "z": rn(gen, NT, DM, dtype=dtype),
            "r": rn(gen, NT, DM, dtype=dtype), "x1": rn(gen, NT, DM, dtype=dtype),
            "w": rn(gen, DM, dtype=dtype, scale=0.1, shift=1.0), "b": rn(gen, DM, dtype=dtype, scale=0.1),
            "w1": rn(gen, DM, dtype=dtype, scale=0.1, shift=1.0), "b1": rn(gen, DM, dtype=dtype, scale=0.1)}


def _group_norm(x, w, b, group, rms, eps):
    xg = x.reshape(*x.shape[:-1], -1, group)
    if not rms:
        xg = xg - xg.mean(-1, keepdim=True)
    y = (xg * torch.rsqrt(xg.pow(2).mean(-1, keepdim=True) + eps)).reshape(x.shape) * w
    return y if b is None else y + b


def _gated_ref(rms, group, before):
    def ref(x):
        a = x["x"] if before else x["x"] * F.silu(x["z"])
        y = _group_norm(a, x["w"], None if rms else x["b"], group or DM, rms, 1e-5)
        return {"y": y * F.silu(x["z"]) if before else y}
    return ref


def _gated_call(rms, group, before):
    def call(x):
        if rms:
            y = fn("layernorm_gated", "rmsnorm_fn")(x["x"], x["w"], None, z=x["z"], eps=1e-5, group_size=group,
                                                   norm_before_gate=before)
        else:
            y = fn("layernorm_gated", "layernorm_fn")(x["x"], x["w"], x["b"], z=x["z"], eps=1e-5, group_size=group,
                                                     norm_before_gate=before)
        return {"y": y}
    return call


NORM_BF16 = {"bf16": 2e-2, "dw@bf16": 3e-2, "db@bf16": 3e-2, "dw1@bf16": 3e-2, "db1@bf16": 3e-2}
op("layernorm_gated.rmsnorm_fn", _norm_make, _gated_call(True, None, False), _gated_ref(True, None, False),
   ("x", "z", "w"), BOTH, tol=NORM_BF16, note="Mamba-2's gated RMSNorm: norm(x * silu(z)) * w")
op("layernorm_gated.rmsnorm_fn[group]", _norm_make, _gated_call(True, 64, True), _gated_ref(True, 64, True),
   ("x", "z", "w"), note="4 groups of 64 (ngroups > 1), norm before the gate")
op("layernorm_gated.layernorm_fn", _norm_make, _gated_call(False, 128, False), _gated_ref(False, 128, False),
   ("x", "z", "w", "b"), note="LayerNorm with bias, 2 groups of 128, gate first")
op("layernorm_gated.rmsnorm_fn[no standin]", _norm_make, _gated_call(True, None, False),
   _gated_ref(True, None, False), standin=False,
   expect="b: mamba_ssm/ops/triton/layernorm_gated.py:139 wraps the launch in "
          "torch.cuda.device(x.device.index), which a CPU-only torch cannot enter for a non-CUDA tensor",
   note="as a user without CUDA calls it")


def _ln_call(rms, *, residual=False, prenorm=False, fp32res=False, parallel=False):
    def call(x):
        f = fn("layer_norm", "rms_norm_fn" if rms else "layer_norm_fn")
        kw = dict(residual=x["r"] if residual else None, eps=1e-6, prenorm=prenorm, residual_in_fp32=fp32res)
        if parallel:
            kw.update(x1=x["x1"], weight1=x["w1"], bias1=None if rms else x["b1"])
        res = f(x["x"], x["w"], None if rms else x["b"], **kw)
        res = res if isinstance(res, tuple) else (res,)
        names = ("y",) + (("y1",) if parallel else ()) + (("h",) if prenorm else ())
        return dict(zip(names, res))
    return call


def _ln_ref(rms, *, residual=False, prenorm=False, parallel=False):
    def ref(x):
        h = x["x"] + (x["x1"] if parallel else 0) + (x["r"] if residual else 0)
        out = {"y": _group_norm(h, x["w"], None if rms else x["b"], DM, rms, 1e-6)}
        if parallel:
            out["y1"] = _group_norm(h, x["w1"], None if rms else x["b1"], DM, rms, 1e-6)
        if prenorm:
            out["h"] = h
        return out
    return ref


op("layer_norm.layer_norm_fn[residual,prenorm]", _norm_make, _ln_call(False, residual=True, prenorm=True),
   _ln_ref(False, residual=True, prenorm=True), ("x", "r", "w", "b"), BOTH, tol=NORM_BF16,
   note="Mamba blocks' fused add + LayerNorm: returns (norm(x + r), x + r)")
op("layer_norm.rms_norm_fn[residual_in_fp32]", _norm_make,
   _ln_call(True, residual=True, prenorm=True, fp32res=True), _ln_ref(True, residual=True, prenorm=True),
   ("x", "r", "w"), BOTH, tol=NORM_BF16, note="RMSNorm, residual kept in fp32")
op("layer_norm.layer_norm_fn[parallel]", _norm_make, _ln_call(False, prenorm=True, parallel=True),
   _ln_ref(False, prenorm=True, parallel=True), ("x", "x1", "w", "b", "w1", "b1"),
   note="parallel residual: two inputs summed, two weight sets (x1 / weight1 / bias1)")
op("layer_norm.rms_norm_fn[compiled]", _norm_make, _ln_call(True, residual=True, prenorm=True),
   _ln_ref(True, residual=True, prenorm=True), ("x", "r", "w"), cpu_tier="compiled",
   note="fused add + RMSNorm, forward and backward on the compiled tier")
op("layernorm_gated.rmsnorm_fn[compiled]", _norm_make, _gated_call(True, 64, True), _gated_ref(True, 64, True),
   ("x", "z", "w"), cpu_tier="compiled", note="grouped gated RMSNorm on the compiled tier")


def _lnl_make(gen, dtype):
    return {**_norm_make(gen, dtype), "lw": rn(gen, 96, DM, dtype=dtype, scale=DM ** -0.5),
            "lb": rn(gen, 96, dtype=dtype, scale=0.1)}


def _lnl_call(x):
    y, h = fn("layer_norm", "layer_norm_linear_fn")(x["x"], x["w"], x["b"], x["lw"], x["lb"], residual=x["r"],
                                                   eps=1e-6, prenorm=True)
    return {"y": y, "h": h}


op("layer_norm.layer_norm_linear_fn", _lnl_make, _lnl_call,
   lambda x: {"y": F.linear(_ln_ref(False, residual=True)(x)["y"], x["lw"], x["lb"]), "h": x["x"] + x["r"]},
   ("x", "r", "w", "b", "lw", "lb"), note="fused add + LayerNorm, then a linear layer (256 -> 96)")


def _swiglu_make(gen, dtype):
    return {"xy": rn(gen, NT, 2 * DM, dtype=dtype, scale=2.0)}


op("k_activations.swiglu", _swiglu_make, lambda x: {"y": fn("k_activations", "swiglu")(x["xy"])},
   lambda x: {"y": F.silu(x["xy"][:, :DM]) * x["xy"][:, DM:]}, ("xy",), BOTH,
   note="silu(x) * y over the two halves of the last dimension")
