"""flash-linear-attention (fla-core) as Qwen3-Next / Qwen3.5 call it for their Gated DeltaNet layers.

transformers' Qwen3NextGatedDeltaNet (and vLLM's vendored copy of FLA) run, per linear-attention
layer: a depthwise causal conv1d (width 4, SiLU) over q/k/v (conv dim 2*16*128 + 32*128 = 8192);
`chunk_gated_delta_rule` for prefill and training, `fused_recurrent_gated_delta_rule` for decode,
both with `use_qk_l2norm_in_kernel=True`, 16 key heads and 32 value heads of 128 (grouped value
attention), g = -exp(A_log) * softplus(a + dt_bias) in fp32 and beta = sigmoid(b); then a gated
RMSNorm over each value head. Quick cases keep the head dim (128), conv width and the 2:1 value/key
head ratio and scale heads and tokens for cpu_interp; `--full` cases use the model's head counts.
References are written here in fp64 (the delta rule token by token) and differentiated by autograd.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..spec import Case, Tolerance
from . import Library, leaves, library_kernel, randn, store

FLA = Library(dist="fla-core", module="fla", requirement="fla-core==0.6.0", origin="fla")
MODELS = ("qwen3_next", "qwen3_5")
GROUP = "lib_fla_gdn"
SRC = "Qwen3-Next-80B-A3B / Qwen3.5 GDN layer (16 key / 32 value heads x 128, conv 4)"
DTYPES = ("bf16", "fp32")
# recurrent / linear attention is judged by relative RMSE (models.md: 2e-3..8e-3 for 16-bit data);
# the gate and beta gradients sum products over whole chunks (reverse cumsum of dg): FLA's own tests
# allow them 2e-2 in fp16 (tests/ops/test_gated_delta.py), and bf16 keeps 3 fewer mantissa bits
RMSE = {"bf16": Tolerance(rmse=8e-3), "fp32": Tolerance(rmse=1e-5)}
GATE_GRADS = {"dg@bf16": Tolerance(rmse=2e-2), "dbeta@bf16": Tolerance(rmse=2e-2)}


def _cu(case: Case, device: str) -> torch.Tensor | None:
    cu = case.params.get("cu_seqlens")
    return None if cu is None else torch.tensor(cu, dtype=torch.long, device=device)


def _sequences(case: Case) -> list[tuple[int, int, int, int]]:
    """(batch row, first token, end token, state index) of every sequence of the case."""
    p = case.params
    if p.get("cu_seqlens"):
        cu = p["cu_seqlens"]
        return [(0, cu[i], cu[i + 1], i) for i in range(len(cu) - 1)]
    return [(b, 0, p["T"], b) for b in range(p["B"])]


def _gates(gen: torch.Generator, shape: tuple[int, ...], hv: int, device: str) -> torch.Tensor:
    """g = -exp(A_log) * softplus(a + dt_bias) in fp32, with A ~ U(1, 16) per head and dt_bias the
    inverse softplus of dt ~ logU(1e-3, 1e-1) (the Mamba-2 / Qwen3-Next initialisation)."""
    a_log = torch.log(torch.rand(hv, generator=gen) * 15 + 1)
    dt = torch.exp(torch.rand(hv, generator=gen) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
    dt_bias = dt + torch.log(-torch.expm1(-dt))
    a = torch.randn(*shape, hv, generator=gen)
    return (-a_log.exp() * F.softplus(a + dt_bias)).to(device)


def _l2n(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)


# ---------------------------------------------------------------------------- gated delta rule
def _gdn_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    p = case.params
    B, T, H, HV, K, V = p["B"], p["T"], p["H"], p["HV"], p["K"], p["V"]
    n = len(_sequences(case))
    x = {"q": randn(gen, B, T, H, K, dtype=dtype, device=device),
         "k": randn(gen, B, T, H, K, dtype=dtype, device=device),
         "v": randn(gen, B, T, HV, V, dtype=dtype, device=device),
         "g": _gates(gen, (B, T), HV, device),
         "beta": torch.randn(B, T, HV, generator=gen).sigmoid().to(dtype).to(device),
         "h0": randn(gen, n, HV, K, V, dtype=torch.float32, device=device, scale=0.5),
         "do": randn(gen, B, T, HV, V, dtype=dtype, device=device),
         "dht": randn(gen, n, HV, K, V, dtype=torch.float32, device=device, scale=0.1)}
    for name in ("q", "k", "v", "g", "beta", "h0"):
        x["d" + name] = torch.empty_like(x[name])
    x["o"] = torch.empty_like(x["do"])
    x["ht"] = torch.empty_like(x["h0"])
    return x


#: tokens per autograd checkpoint of the reference: every value head runs at once, and only the
#: state at each segment's start is kept for the backward (a segment is recomputed there), so
#: memory stays near SEGMENT x heads x K x V doubles whatever the sequence length
SEGMENT = 32


def _gdn_steps(state, qs, ks, v, g, beta):
    """The gated delta rule over consecutive tokens of one sequence, every value head at once:
    state [h, K, V]; qs, ks [L, h, K]; v [L, h, V]; g, beta [L, h]. -> (last state, outputs [L, h, V])."""
    outs = []
    for t in range(qs.shape[0]):
        state = state * g[t].exp()[:, None, None]
        kv = torch.einsum("hk,hkv->hv", ks[t], state)
        u = beta[t][:, None] * (v[t] - kv)
        state = state + ks[t][:, :, None] * u[:, None, :]
        outs.append(torch.einsum("hk,hkv->hv", qs[t], state))
    return state, torch.stack(outs)


def _gdn_reference(x: dict, case: Case, backward: bool = True) -> dict:
    """The gated delta rule token by token in fp64 (value head hv reads key head hv // (HV / H)),
    one sequence at a time; with `backward`, autograd (checkpointed every SEGMENT tokens)
    accumulates the gradients of sum(o * do) + sum(ht * dht)."""
    from torch.utils.checkpoint import checkpoint
    q, k, v, g, beta, h0 = leaves(x, ("q", "k", "v", "g", "beta", "h0"), torch.float64)
    H, HV, K = q.shape[2], v.shape[2], q.shape[3]
    o = torch.zeros(v.shape, dtype=torch.float64)
    ht = torch.zeros(h0.shape, dtype=torch.float64)
    do, dht = x["do"].double(), x["dht"].double()
    kh = torch.arange(HV) // (HV // H)
    for b, bos, eos, n in _sequences(case):
        qs, ks = _l2n(q[b, bos:eos][:, kh]) * K ** -0.5, _l2n(k[b, bos:eos][:, kh])  # [L, HV, K]
        state, outs = h0[n], []                                                     # [HV, K, V]
        for s in range(0, eos - bos, SEGMENT):
            e = min(eos - bos, s + SEGMENT)
            part = (state, qs[s:e], ks[s:e], v[b, bos + s:bos + e], g[b, bos + s:bos + e], beta[b, bos + s:bos + e])
            state, out = checkpoint(_gdn_steps, *part, use_reentrant=False) if backward else _gdn_steps(*part)
            outs.append(out)
        out = torch.cat(outs)                                                       # [L, HV, V]
        if backward:
            ((out * do[b, bos:eos]).sum() + (state * dht[n]).sum()).backward()
        o[b, bos:eos], ht[n] = out.detach(), state.detach()
    ref = {"o": o, "ht": ht}
    if backward:
        ref.update({"d" + name: t.grad for name, t in zip(("q", "k", "v", "g", "beta", "h0"),
                                                         (q, k, v, g, beta, h0))})
    return ref


def _chunk_run(x: dict, case: Case) -> None:
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    q, k, v, g, beta, h0 = leaves(x, ("q", "k", "v", "g", "beta", "h0"))
    o, ht = chunk_gated_delta_rule(q, k, v, g, beta, scale=q.shape[-1] ** -0.5, initial_state=h0,
                                   output_final_state=True, use_qk_l2norm_in_kernel=True,
                                   cu_seqlens=_cu(case, str(q.device)))
    torch.autograd.backward((o, ht), (x["do"], x["dht"]))
    store(x, o=o, ht=ht, dq=q.grad, dk=k.grad, dv=v.grad, dg=g.grad, dbeta=beta.grad, dh0=h0.grad)


def _gdn_case(name: str, quick: bool, B: int, T: int, H: int, HV: int, cu=None, note: str = "") -> Case:
    params = {"B": B, "T": T, "H": H, "HV": HV, "K": 128, "V": 128}
    if cu is not None:
        params["cu_seqlens"] = cu
    return Case(name, params, quick=quick, source=SRC + (f"; {note}" if note else ""))


library_kernel(
    FLA, name="lib_fla_chunk_gdn", group=GROUP, models=MODELS,
    upstream="fla: fla/ops/gated_delta_rule/chunk.py chunk_gated_delta_rule (its forward and backward "
             "Triton chains: chunk-local cumsum, KKT + triangular solve, WY recompute, chunk state, output)",
    description="fla.ops.gated_delta_rule.chunk_gated_delta_rule (prefill / training) with in-kernel "
                "q/k L2 norm, grouped value heads, initial and final state; forward and backward "
                "(do, dht -> dq, dk, dv, dg, dbeta, dh0). Varlen cases pack sequences with cu_seqlens "
                "as vLLM's chunked prefill does.",
    cases=(_gdn_case("prefill_T130", True, 1, 130, 2, 4, note="heads /8, 130 tokens (2 chunks + 2)"),
           _gdn_case("varlen_3seq", True, 1, 126, 2, 4, cu=[0, 37, 120, 126],
                     note="heads /8; sequences of 37, 83 and 6 tokens, one state each"),
           _gdn_case("prefill_T512_full", False, 1, 512, 16, 32, note="full heads, 512 tokens"),
           _gdn_case("varlen_full", False, 1, 600, 16, 32, cu=[0, 100, 357, 600],
                     note="full heads, 3 sequences")),
    dtypes=DTYPES, make_inputs=_gdn_inputs, run=_chunk_run, reference=_gdn_reference,
    outputs=("o", "ht", "dq", "dk", "dv", "dg", "dbeta", "dh0"), tolerance=RMSE,
    output_tolerance=GATE_GRADS)


def _recurrent_run(x: dict, case: Case) -> None:
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule
    with torch.no_grad():
        o, ht = fused_recurrent_gated_delta_rule(
            x["q"], x["k"], x["v"], g=x["g"], beta=x["beta"], scale=x["q"].shape[-1] ** -0.5,
            initial_state=x["h0"], output_final_state=True, use_qk_l2norm_in_kernel=True,
            cu_seqlens=_cu(case, str(x["q"].device)))
    store(x, o=o, ht=ht)


library_kernel(
    FLA, name="lib_fla_recurrent_gdn", group=GROUP, models=MODELS,
    upstream="fla: fla/ops/gated_delta_rule/fused_recurrent.py fused_recurrent_gated_delta_rule "
             "(fused_recurrent_gated_delta_rule_fwd_kernel)",
    description="fla.ops.gated_delta_rule.fused_recurrent_gated_delta_rule (decode: one or a few "
                "tokens per sequence from a recurrent state [N, 32, 128, 128]); forward only (FLA "
                "has no backward for it).",
    cases=(_gdn_case("decode_b4", True, 4, 1, 16, 32, note="full heads, batch of 4 decoding"),
           _gdn_case("spec_decode_varlen", True, 1, 8, 16, 32, cu=[0, 3, 6, 8],
                     note="full heads, 3 sequences verifying 3, 3 and 2 draft tokens"),
           _gdn_case("decode_b64_full", False, 64, 1, 16, 32, note="full heads, batch of 64")),
    dtypes=DTYPES, make_inputs=_gdn_inputs, run=_recurrent_run,
    reference=lambda x, case: _gdn_reference(x, case, backward=False),
    outputs=("o", "ht"), tolerance=RMSE)


# ------------------------------------------------------------------------------------ l2norm
def _l2norm_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    shape = (1, case.params["T"], case.params["H"], 128)
    x = {"x": randn(gen, *shape, dtype=dtype, device=device),
         "dy": randn(gen, *shape, dtype=dtype, device=device)}
    x["y"], x["dx"] = torch.empty_like(x["x"]), torch.empty_like(x["x"])
    return x


def _l2norm_run(x: dict, case: Case) -> None:
    from fla.modules.l2norm import l2norm
    (a,) = leaves(x, ("x",))
    y = l2norm(a)
    y.backward(x["dy"])
    store(x, y=y, dx=a.grad)


def _l2norm_reference(x: dict, case: Case) -> dict:
    (a,) = leaves(x, ("x",), torch.float64)
    y = _l2n(a)
    y.backward(x["dy"].double())
    return {"y": y.detach(), "dx": a.grad}


library_kernel(
    FLA, name="lib_fla_l2norm", group=GROUP, models=MODELS,
    upstream="fla: fla/modules/norm/l2norm.py l2norm (l2norm_fwd_kernel, l2norm_bwd_kernel and their per-row "
             "variants)",
    description="fla.modules.l2norm.l2norm (x / sqrt(sum x^2 + 1e-6) per head), forward and backward, "
                "as the GDN layer normalises q and k per key head.",
    cases=(Case("qk_T64", {"T": 64, "H": 16}, source=SRC + "; 64 tokens x 16 key heads"),
           Case("qk_T2048_full", {"T": 2048, "H": 16}, quick=False, source=SRC + "; 2048 tokens")),
    dtypes=DTYPES, make_inputs=_l2norm_inputs, run=_l2norm_run, reference=_l2norm_reference,
    outputs=("y", "dx"),
    tolerance={"bf16": Tolerance(atol=2e-3, rtol=1.6e-2), "fp32": Tolerance(atol=1e-6, rtol=1e-5)})


# ------------------------------------------------------------------------------ causal conv1d
W = 4


def _conv_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    p = case.params
    D, n = p["D"], len(_sequences(case))
    x = {"x": randn(gen, p["B"], p["T"], D, dtype=dtype, device=device),
         "w": randn(gen, D, W, dtype=dtype, device=device, scale=0.5),
         "h0": randn(gen, n, D, W, dtype=dtype, device=device),
         "dy": randn(gen, p["B"], p["T"], D, dtype=dtype, device=device),
         "dht": randn(gen, n, D, W, dtype=dtype, device=device, scale=0.1)}
    # state slot 0 (token T - 4) is written but never read by a following call: FLA's backward
    # treats it as padding, so the gradient a following segment gives it is zero
    x["dht"][..., 0] = 0
    for name in ("x", "w", "h0"):
        x["d" + name] = torch.empty_like(x[name])
    x["y"], x["ht"] = torch.empty_like(x["x"]), torch.empty_like(x["h0"])
    return x


def _conv_run(x: dict, case: Case) -> None:
    from fla.modules.convolution import causal_conv1d
    a, w, h0 = leaves(x, ("x", "w", "h0"))
    y, ht = causal_conv1d(a, weight=w, initial_state=h0, output_final_state=True, activation="silu",
                          cu_seqlens=_cu(case, str(a.device)))
    torch.autograd.backward((y, ht), (x["dy"], x["dht"]))
    store(x, y=y, ht=ht, dx=a.grad, dw=w.grad, dh0=h0.grad)


def _conv_reference(x: dict, case: Case) -> dict:
    """Depthwise causal conv: y[t] = silu(sum_i w[:, i] * x[t - 3 + i]), where x before a sequence's
    first token is its state (state[:, j] is token j - 4); the final state is the last 4 tokens."""
    a, w, h0 = leaves(x, ("x", "w", "h0"), torch.float64)
    y = torch.zeros(a.shape, dtype=torch.float64)
    ht = torch.zeros(h0.shape, dtype=torch.float64)
    loss = 0
    dy, dht = x["dy"].double(), x["dht"].double()
    for b, bos, eos, n in _sequences(case):
        ext = torch.cat([h0[n], a[b, bos:eos].t()], dim=1)           # [D, W + L]
        out = F.conv1d(ext[None], w[:, None, :], groups=w.shape[0])[0, :, 1:].t()  # [L, D]
        out = F.silu(out)
        state = ext[:, -W:]
        loss = loss + (out * dy[b, bos:eos]).sum() + (state * dht[n]).sum()
        y[b, bos:eos], ht[n] = out.detach(), state.detach()
    loss.backward()
    return {"y": y, "ht": ht, "dx": a.grad, "dw": w.grad, "dh0": h0.grad}


CONV_TOL = {"bf16": Tolerance(atol=3e-2, rtol=1.6e-2), "fp32": Tolerance(atol=1e-5, rtol=1e-5)}

library_kernel(
    FLA, name="lib_fla_causal_conv1d", group=GROUP, models=MODELS,
    upstream="fla: fla/modules/causal_conv1d/ops.py causal_conv1d, Triton backend "
             "(causal_conv1d_fwd_kernel, causal_conv1d_bwd_kernel, compute_dh0_kernel)",
    description="fla.modules.convolution.causal_conv1d (Triton backend): depthwise causal conv of "
                "width 4 with SiLU over the q/k/v channels, with a conv state per sequence in and "
                "out; forward and backward (dy, dht -> dx, dw, dh0).",
    cases=(Case("prefill_T70", {"B": 1, "T": 70, "D": 512}, source=SRC + "; conv dim 8192 /16, 70 tokens"),
           Case("varlen_3seq", {"B": 1, "T": 100, "D": 512, "cu_seqlens": [0, 30, 97, 100]},
                source=SRC + "; conv dim /16; sequences of 30, 67 and 3 tokens (3 < width)"),
           Case("prefill_T512_full", {"B": 1, "T": 512, "D": 8192}, quick=False,
                source=SRC + "; conv dim 8192")),
    dtypes=DTYPES, make_inputs=_conv_inputs, run=_conv_run, reference=_conv_reference,
    outputs=("y", "ht", "dx", "dw", "dh0"), tolerance=CONV_TOL,
    output_tolerance={"ht": Tolerance(exact=True)})


def _update_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    N, D = case.params["N"], case.params["D"]
    x = {"x": randn(gen, N, D, dtype=dtype, device=device),
         "w": randn(gen, D, W, dtype=dtype, device=device, scale=0.5),
         "cache": randn(gen, N, D, W, dtype=dtype, device=device)}
    x["y"] = torch.empty_like(x["x"])
    return x


def _update_run(x: dict, case: Case) -> None:
    from fla.modules.convolution import causal_conv1d_update
    y, _ = causal_conv1d_update(x["x"], x["cache"], weight=x["w"], activation="silu")
    store(x, y=y)


def _update_reference(x: dict, case: Case) -> dict:
    cache = torch.cat([x["cache"][..., 1:], x["x"][..., None]], dim=-1)
    y = F.silu((cache.double() * x["w"].double()).sum(-1))
    return {"y": y, "cache": cache}


library_kernel(
    FLA, name="lib_fla_causal_conv1d_update", group=GROUP, models=MODELS,
    upstream="fla: fla/modules/causal_conv1d/ops.py causal_conv1d_update (causal_conv1d_update_kernel)",
    description="fla.modules.convolution.causal_conv1d_update: one decoded token per sequence, the "
                "conv state [N, 8192, 4] shifted in place (compared bit-exact).",
    cases=(Case("decode_b4", {"N": 4, "D": 8192}, source=SRC + "; conv dim 8192, batch 4"),
           Case("decode_b64_full", {"N": 64, "D": 8192}, quick=False, source=SRC + "; batch 64")),
    dtypes=DTYPES, make_inputs=_update_inputs, run=_update_run, reference=_update_reference,
    outputs=("y", "cache"), inplace=("cache",), tolerance=CONV_TOL,
    output_tolerance={"cache": Tolerance(exact=True)})


# ----------------------------------------------------------------------------- gated RMSNorm
def _norm_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    R = case.params["rows"]
    x = {"x": randn(gen, R, 128, dtype=dtype, device=device),
         "z": randn(gen, R, 128, dtype=dtype, device=device),
         "w": randn(gen, 128, dtype=dtype, device=device, scale=0.1, shift=1.0),
         "dy": randn(gen, R, 128, dtype=dtype, device=device)}
    for name in ("x", "z", "w"):
        x["d" + name] = torch.empty_like(x[name])
    x["y"] = torch.empty_like(x["x"])
    return x


def _norm_run(x: dict, case: Case) -> None:
    from fla.modules import FusedRMSNormGated
    norm = FusedRMSNormGated(128, eps=1e-6, activation="swish", device=x["x"].device, dtype=x["x"].dtype)
    with torch.no_grad():
        norm.weight.copy_(x["w"])
    a, z = leaves(x, ("x", "z"))
    y = norm(a, z)
    y.backward(x["dy"])
    store(x, y=y, dx=a.grad, dz=z.grad, dw=norm.weight.grad)


def _norm_reference(x: dict, case: Case) -> dict:
    a, z, w = leaves(x, ("x", "z", "w"), torch.float64)
    y = a * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + 1e-6) * w * F.silu(z)
    y.backward(x["dy"].double())
    return {"y": y.detach(), "dx": a.grad, "dz": z.grad, "dw": w.grad}


library_kernel(
    FLA, name="lib_fla_rmsnorm_gated", group=GROUP, models=MODELS,
    upstream="fla: fla/modules/norm/fused_norm_gate.py FusedRMSNormGated (layer_norm_gated_fwd_kernel, "
             "layer_norm_gated_bwd_kernel and their per-row variants)",
    description="fla.modules.FusedRMSNormGated (swish gate): RMSNorm(x) * w * silu(z) over each value "
                "head (128), forward and backward (dx, dz, dw).",
    cases=(Case("heads_T130", {"rows": 130 * 4}, source=SRC + "; 130 tokens x 4 value heads (/8)"),
           Case("heads_T512_full", {"rows": 512 * 32}, quick=False, source=SRC + "; 512 tokens x 32")),
    dtypes=DTYPES, make_inputs=_norm_inputs, run=_norm_run, reference=_norm_reference,
    outputs=("y", "dx", "dz", "dw"),
    tolerance={"bf16": Tolerance(atol=5e-2, rtol=1.6e-2), "fp32": Tolerance(atol=1e-5, rtol=1e-5)},
    # dw sums a column over every row (16,384 at full size): its fp32 rounding error follows the
    # terms summed (PyTorch's own fp32 sum is 3.6e-5 off fp64 there), not the sum, which can be small
    output_tolerance={"dw@fp32": Tolerance(atol=2e-4, rtol=1e-5)})
