"""vLLM's vendored FLA Gated DeltaNet kernels (chunked prefill and recurrent decode)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ...spec import Case, Tolerance
from .. import randn, store
from . import _kernel, vllm_call


# ============================================================================ vendored FLA GDN
GDN_SRC = "Qwen3-Next-80B-A3B / Qwen3.5 GDN layer (16 key / 32 value heads x 128)"


def _l2n(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def _gdn_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    """Packed varlen tokens [1, T, heads, dim]; the recurrent state pool [slots, HV, V, K] (vLLM
    0.33's layout), slot 0 being vLLM's null block."""
    p = case.params
    T, H, HV, K, V = sum(p["lens"]), p["H"], p["HV"], 128, 128
    a_log = torch.log(torch.rand(HV, generator=gen) * 15 + 1)
    dt = torch.exp(torch.rand(HV, generator=gen) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
    dt_bias = dt + torch.log(-torch.expm1(-dt))                   # inverse softplus of dt
    g = -a_log.exp() * F.softplus(torch.randn(1, T, HV, generator=gen) + dt_bias)
    x = {"q": randn(gen, 1, T, H, K, dtype=dtype, device=device),
         "k": randn(gen, 1, T, H, K, dtype=dtype, device=device),
         "v": randn(gen, 1, T, HV, V, dtype=dtype, device=device),
         "g": g.to(device), "beta": torch.randn(1, T, HV, generator=gen).sigmoid().to(dtype).to(device),
         "state": randn(gen, p["lines"], HV, V, K, dtype=torch.float32, device=device, scale=0.5),
         "slots": torch.tensor(p["slots"], dtype=torch.int32, device=device),
         "cu_seqlens": torch.tensor([0] + list(torch.tensor(p["lens"]).cumsum(0)), dtype=torch.long,
                                    device=device)}
    x["o"] = torch.empty_like(x["v"])
    return x


def _gdn_reference(x: dict, case: Case) -> dict:
    """The gated delta rule token by token in fp64 (q, k L2-normalised, q scaled by K^-1/2), per
    sequence and value head, from the sequence's state in the pool (zeros where `init` says it
    starts fresh); the final state back into its slot."""
    p = case.params
    H, HV, K = p["H"], p["HV"], 128
    q, k, v = x["q"][0].double(), x["k"][0].double(), x["v"][0].double()
    g, beta = x["g"][0].double(), x["beta"][0].double()
    o = torch.zeros(x["v"].shape, dtype=torch.float64)
    state = x["state"].double().clone()
    cu = x["cu_seqlens"].tolist()
    for i, slot in enumerate(p["slots"]):
        for hv in range(HV):
            h = hv // (HV // H)
            s = state[slot, hv].T.clone() if p["init"][i] else torch.zeros(K, 128, dtype=torch.float64)
            for t in range(cu[i], cu[i + 1]):
                qs, ks = _l2n(q[t, h]) * K ** -0.5, _l2n(k[t, h])
                s = s * g[t, hv].exp()
                s = s + torch.outer(ks, beta[t, hv] * (v[t, hv] - ks @ s))
                o[0, t, hv] = qs @ s
            state[slot, hv] = s.T                                       # stored [V, K]
    return {"o": o, "state": state}


def _gdn_chunk_run(x: dict, case: Case) -> None:
    from vllm.third_party.flash_linear_attention.ops import chunk_gated_delta_rule
    p = case.params
    init = x["state"][x["slots"].long()]
    init[~torch.tensor(p["init"], device=init.device)] = 0
    o, final = chunk_gated_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"], initial_state=init,
                                      output_final_state=True, cu_seqlens=x["cu_seqlens"],
                                      use_qk_l2norm_in_kernel=True)
    x["state"][x["slots"].long()] = final.to(x["state"].dtype)
    store(x, o=o)


_kernel(
    name="lib_vllm_gdn_chunk", group="lib_vllm_gdn", models=("qwen3_next", "qwen3_5"),
    description="vllm's vendored FLA chunk_gated_delta_rule (GDN prefill, as Qwen3-Next's layer runs "
                "it off H100): chunk_local_cumsum, chunk_scaled_dot_kkt, solve_tril, recompute_w_u, "
                "chunk_gated_delta_rule_fwd_h, chunk_fwd_o, with in-kernel q/k L2 norm and grouped "
                "value heads; varlen sequences from their slots of the state pool [slot, HV, V, K].",
    upstream="vllm: third_party/flash_linear_attention/ops/chunk.py chunk_gated_delta_rule",
    cases=(Case("varlen_3seq", {"lens": [37, 83, 6], "H": 2, "HV": 4, "slots": [3, 1, 2],
                                "init": [True, False, True], "lines": 4},
                source=GDN_SRC + "; heads /8; sequences of 37, 83 and 6 tokens (a chunked-prefill "
                                 "continuation, a new prompt, a short continuation)"),
           Case("varlen_full", {"lens": [100, 257, 243], "H": 16, "HV": 32, "slots": [1, 2, 3],
                                "init": [False, True, False], "lines": 4}, quick=False, source=GDN_SRC)),
    dtypes=("bf16",), make_inputs=_gdn_inputs, run=vllm_call(_gdn_chunk_run), reference=_gdn_reference,
    outputs=("o", "state"), inplace=("state",), tolerance={"bf16": Tolerance(rmse=8e-3)})


def _gdn_recurrent_run(x: dict, case: Case) -> None:
    from vllm.third_party.flash_linear_attention.ops import fused_recurrent_gated_delta_rule
    o, _ = fused_recurrent_gated_delta_rule(
        x["q"], x["k"], x["v"], x["g"], x["beta"], initial_state=x["state"], inplace_final_state=True,
        cu_seqlens=x["cu_seqlens"], ssm_state_indices=x["slots"], use_qk_l2norm_in_kernel=True)
    store(x, o=o)


_kernel(
    name="lib_vllm_gdn_recurrent", group="lib_vllm_gdn", models=("qwen3_next", "qwen3_5"),
    description="vllm's vendored FLA fused_recurrent_gated_delta_rule (GDN decode): one token per "
                "sequence read from and written back to its slot of the state pool [slot, HV, V, K] "
                "in place, in-kernel q/k L2 norm, grouped value heads.",
    upstream="vllm: third_party/flash_linear_attention/ops/fused_recurrent.py "
             "fused_recurrent_gated_delta_rule (fused_recurrent_gated_delta_rule_fwd_kernel)",
    cases=(Case("decode_b4", {"lens": [1, 1, 1, 1], "H": 16, "HV": 32, "slots": [3, 1, 4, 2],
                              "init": [True] * 4, "lines": 5},
                source=GDN_SRC + "; full heads, 4 decoding sequences"),),
    dtypes=("bf16", "fp32"), make_inputs=_gdn_inputs,
    run=vllm_call(_gdn_recurrent_run), reference=_gdn_reference,
    outputs=("o", "state"), inplace=("state",),
    tolerance={"bf16": Tolerance(rmse=8e-3), "fp32": Tolerance(rmse=1e-5)})
