"""Mamba-2 SSD prefill stage by stage: each kernel of the `mamba2_ssd_prefill` chain launched alone.

The chain (`mamba_ssd.py`: chunk cumsum -> chunk state -> state passing -> C B^T -> chunk scan) is
checked end to end there; here each stage is launched by itself through the same launch helper the
chain uses, its inputs the outputs of the stages before it as an fp64 PyTorch reference of those
stages computes them, and its outputs judged against an fp64 reference of that stage alone. When the
end-to-end check fails, these say which stage does. Stage references follow the chain's docstring
(dt' = clamp(softplus(dt + dt_bias)), dA = A dt', chunks never crossing a sequence):

  1. cumsum   dt_out[h, c, t] = dt'_t (zero past the chunk's end), dA_cs = inclusive cumsum of A_h dt'
              (flat past the chunk's end: state passing reads the chunk's last slot)
  2. state    states[c, h] = sum_t x_t (B_t exp(dA_cs_last - dA_cs_t) dt'_t)^T          (fp32)
  3. passing  s <- exp(dA_cs_last(c)) s + states[c] over each sequence's chunks from its initial
              state; the state after every chunk (state dtype) and each final state into its cache slot
  4. C B^T    CB[c, g, i, j] = C_i . B_j; only j <= i < chunk length is read by the scan, so that is
              what is judged (the kernel may leave the rest unwritten, as vLLM's does)
  5. scan     y_i = exp(dA_cs_i) C_i s_prev + sum_{j<=i} CB_ij exp(dA_cs_i - dA_cs_j) dt'_j x_j + D x_i,
              times silu(z_i); the entries of CB the scan must not read are NaN in its input

Sequences continue from computed tokens (partial first chunks), are shorter than a chunk, or are one
token long, as in the end-to-end cases; one case has no initial state at all (fresh prompts: the
mixer passes none, so stages 3 and 5 take their no-initial-state path).
"""
from __future__ import annotations

import torch

from sdk.conformance.kernels.mamba_ssd import (
    _CODESTRAL, _FULL_LENS, _MODELS, _RMSE, _SRC_CODESTRAL, _SRC_FALCON, _SRC_GRANITE, _SRC_NEMOTRON,
    _one_thread, _softplus_ref, _ssd_bmm_chunk_kernel, _ssd_chunk_cumsum_kernel, _ssd_chunk_scan_kernel,
    _ssd_chunk_state_kernel, _ssd_inputs, _ssd_state_passing_kernel, ssd_bmm_chunk, ssd_chunk_cumsum,
    ssd_chunk_scan, ssd_chunk_state, ssd_state_passing,
)
from sdk.conformance.spec import Case, KernelSpec, Tolerance, register

_OPS = "vllm: model_executor/layers/mamba/ops/"


# ------------------------------------------------------------------------- fp64 stage references
def _dt_limit(p) -> tuple[float, float]:
    return p.get("dt_limit", (0.0, float("inf")))


def _cumsum_ref(dt, A, dt_bias, cu: list[int], chunk: int, limit):
    """(dt_out, dA_cs) [H, nchunks, chunk] in fp64."""
    dtp = torch.clamp(_softplus_ref(dt.double() + dt_bias.double()), *limit)              # [T, H]
    nchunks = len(cu) - 1
    dt_out = torch.zeros((dt.shape[1], nchunks, chunk), dtype=torch.float64)
    for c in range(nchunks):
        dt_out[:, c, :cu[c + 1] - cu[c]] = dtp[cu[c]:cu[c + 1]].T
    return dt_out, torch.cumsum(dt_out * A.double()[:, None, None], dim=-1)


def _head_group(H: int, G: int) -> torch.Tensor:
    return torch.arange(H) // (H // G)


def _state_ref(x, B, dt_out, dA_cs, cu: list[int]):
    """states [nchunks, H, P, N] in fp64."""
    T, H, P = x.shape
    G, N = B.shape[1:]
    Bh = B.double()[:, _head_group(H, G)]                                                  # [T, H, N]
    states = torch.zeros((len(cu) - 1, H, P, N), dtype=torch.float64)
    for c in range(len(cu) - 1):
        s, L = cu[c], cu[c + 1] - cu[c]
        w = torch.exp(dA_cs[:, c, L - 1:L] - dA_cs[:, c, :L]) * dt_out[:, c, :L]          # [H, L]
        states[c] = torch.einsum("lhp,lhn->hpn", x.double()[s:s + L] * w.T[:, :, None], Bh[s:s + L])
    return states


def _passing_ref(states, dA_cs, cu: list[int], last: list[int], init):
    """(the state after every chunk [nchunks, H, P, N], final state of every sequence [batch, H, P, N])."""
    out = torch.empty_like(states)
    finals = torch.empty((len(last),) + tuple(states.shape[1:]), dtype=torch.float64)
    begin = 0
    for b, end in enumerate(last):
        s = init[b].double() if init is not None else torch.zeros_like(states[0])
        for c in range(begin, end + 1):
            s = torch.exp(dA_cs[:, c, cu[c + 1] - cu[c] - 1])[:, None, None] * s + states[c]
            out[c] = s
        finals[b] = s
        begin = end + 1
    return out, finals


def _bmm_read_mask(cu: list[int], chunk: int) -> torch.Tensor:
    """[nchunks, chunk, chunk] True where the scan reads CB: j <= i < the chunk's length."""
    lens = torch.tensor([cu[c + 1] - cu[c] for c in range(len(cu) - 1)])
    i = torch.arange(chunk)
    return (i[None, :, None] >= i[None, None, :]) & (i[None, :, None] < lens[:, None, None])


def _bmm_ref(C, B, cu: list[int], chunk: int):
    """CB [nchunks, G, chunk, chunk] in fp64 with NaN wherever the scan does not read."""
    G = C.shape[1]
    cb = torch.zeros((len(cu) - 1, G, chunk, chunk), dtype=torch.float64)
    for c in range(len(cu) - 1):
        s, L = cu[c], cu[c + 1] - cu[c]
        cb[c, :, :L, :L] = torch.einsum("ign,jgn->gij", C.double()[s:s + L], B.double()[s:s + L])
    return cb.masked_fill(~_bmm_read_mask(cu, chunk)[:, None], float("nan"))


def _scan_ref(cb, x, dt_out, dA_cs, seq_idx: list[int], C, states, cu: list[int], D, z, init):
    """out [T, H, P] in fp64; cb's unread entries (NaN) never enter."""
    T, H, P = x.shape
    G = C.shape[1]
    hg = _head_group(H, G)
    xd, Ch = x.double(), C.double()[:, hg]
    y = torch.empty((T, H, P), dtype=torch.float64)
    for c in range(len(cu) - 1):
        s, L = cu[c], cu[c + 1] - cu[c]
        if c > 0 and seq_idx[c - 1] == seq_idx[c]:
            prev = states[c - 1].double()
        elif init is not None:
            prev = init[seq_idx[c]].double()
        else:
            prev = torch.zeros_like(states[0], dtype=torch.float64)
        dA = dA_cs[:, c, :L]                                                                # [H, L]
        y_prev = torch.exp(dA).T[:, :, None] * torch.einsum("lhn,hpn->lhp", Ch[s:s + L], prev)
        causal = torch.ones((L, L), dtype=torch.bool).tril()
        cbh = torch.where(causal, cb[c][hg][:, :L, :L].double(), 0.0)                       # [H, L, L]
        decay = torch.exp((dA[:, :, None] - dA[:, None, :]).masked_fill(~causal, float("-inf")))
        w = cbh * decay * dt_out[:, c, None, :L]
        y[s:s + L] = y_prev + torch.einsum("hij,jhp->ihp", w, xd[s:s + L])
    y += D.double()[:, None] * xd
    if z is not None:
        y *= torch.nn.functional.silu(z.double())
    return y


# ----------------------------------------------------------------------------------- inputs
def _meta(t) -> tuple[list[int], list[int], list[int]]:
    return (t["cu_chunk_seqlens"].tolist(), t["seq_idx"].tolist(), t["last_chunk_indices"].tolist())


def _initial(t):
    """The initial states as the mixer passes them: the cache slots of sequences with computed
    tokens, zero for the others; None when no sequence has any."""
    if not bool(t["has_initial_state"].any()):
        return None
    st = t["ssm_state"]
    return torch.where(t["has_initial_state"][:, None, None, None], st[t["state_indices"].long()], 0)


def _chain_inputs(case, dtype, device, gen, upto: int):
    """The end-to-end case's raw inputs, plus the fp64 reference outputs of stages 1 .. upto - 1
    (cast to the dtypes the chain keeps them in) on `device`."""
    p = case.params
    t = _ssd_inputs(case, dtype, device, gen)
    cu, seq_idx, last = _meta(t)
    chunk = p["chunk"]
    cpu = {k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in t.items()}
    t["initial"] = _initial(t)
    ref = {}
    with _one_thread():
        if upto > 1:
            ref["dt_out"], ref["dA_cs"] = _cumsum_ref(cpu["dt"], cpu["A"], cpu["dt_bias"], cu, chunk, _dt_limit(p))
        if upto in (3, 5):
            ref["states"] = _state_ref(cpu["x"], cpu["B"], ref["dt_out"], ref["dA_cs"], cu)
        if upto == 5:
            init = t["initial"].cpu() if t["initial"] is not None else None
            passed, _ = _passing_ref(ref.pop("states"), ref["dA_cs"], cu, last, init)
            ref["passed"] = passed.to(t["ssm_state"].dtype)
            ref["cb"] = _bmm_ref(cpu["C"], cpu["B"], cu, chunk)
    for k, v in ref.items():
        t[k] = (v.to(torch.float32) if v.dtype == torch.float64 else v).to(device)
    t["meta"] = (cu, seq_idx, last)
    return t


def _nchunks(t) -> int:
    return len(t["meta"][0]) - 1


def _shape(t):
    T, H, P = t["x"].shape
    return H, P, t["B"].shape[1], t["B"].shape[2]


# ------------------------------------------------------------------------------ 1. chunk cumsum
def _cumsum_inputs(case, dtype, device, gen):
    t = _chain_inputs(case, dtype, device, gen, upto=1)
    H, chunk = t["x"].shape[1], case.params["chunk"]
    for name in ("dt_out", "dA_cs"):
        t[name] = torch.empty((H, _nchunks(t), chunk), dtype=torch.float32, device=device)
    return t


def _cumsum_run(t, case):
    ssd_chunk_cumsum(t["dt"], t["A"], t["dt_bias"], t["cu_chunk_seqlens"], case.params["chunk"], t["dt_out"],
                     t["dA_cs"], dt_softplus=True, dt_limit=_dt_limit(case.params))


def _cumsum_reference(t, case):
    cu = t["meta"][0]
    with _one_thread():
        dt_out, dA_cs = _cumsum_ref(t["dt"].cpu(), t["A"].cpu(), t["dt_bias"].cpu(), cu, case.params["chunk"],
                                    _dt_limit(case.params))
    return {"dt_out": dt_out, "dA_cs": dA_cs}


# -------------------------------------------------------------------------------- 2. chunk state
def _state_inputs(case, dtype, device, gen):
    t = _chain_inputs(case, dtype, device, gen, upto=2)
    H, P, _, N = _shape(t)
    t["states"] = torch.empty((_nchunks(t), H, P, N), dtype=torch.float32, device=device)
    return t


def _state_run(t, case):
    ssd_chunk_state(t["x"], t["B"], t["dt_out"], t["dA_cs"], t["cu_chunk_seqlens"], t["states"])


def _state_reference(t, case):
    with _one_thread():
        return {"states": _state_ref(t["x"].cpu(), t["B"].cpu(), t["dt_out"].cpu().double(),
                                     t["dA_cs"].cpu().double(), t["meta"][0])}


# ------------------------------------------------------------------------------ 3. state passing
def _passing_inputs(case, dtype, device, gen):
    t = _chain_inputs(case, dtype, device, gen, upto=3)
    t["passed"] = torch.empty(t["states"].shape, dtype=t["ssm_state"].dtype, device=device)
    return t


def _passing_run(t, case):
    ssd_state_passing(t["states"], t["dA_cs"], t["last_chunk_indices"], t["passed"], t["initial"],
                      final_states_out=t["ssm_state"], final_state_indices=t["state_indices"])


def _passing_reference(t, case):
    cu, _, last = t["meta"]
    init = t["initial"].cpu() if t["initial"] is not None else None
    with _one_thread():
        passed, finals = _passing_ref(t["states"].cpu().double(), t["dA_cs"].cpu().double(), cu, last, init)
    cache = t["ssm_state"].cpu().double()
    cache[t["state_indices"].cpu().long()] = finals
    return {"passed": passed, "ssm_state": cache}


# ------------------------------------------------------------------------------------------ 4. bmm
def _bmm_inputs(case, dtype, device, gen):
    t = _chain_inputs(case, dtype, device, gen, upto=4)
    chunk, G = case.params["chunk"], t["B"].shape[1]
    # the kernel's whole output, NaN first; only the entries the scan reads are judged
    t["cb"] = torch.full((_nchunks(t), G, chunk, chunk), float("nan"), dtype=torch.float32, device=device)
    read = _bmm_read_mask(t["meta"][0], chunk)[:, None].expand(-1, G, -1, -1)
    t["read_idx"] = read.reshape(-1).nonzero()[:, 0].to(device)
    t["cb_read"] = torch.empty(t["read_idx"].shape, dtype=torch.float32, device=device)
    return t


def _bmm_run(t, case):
    ssd_bmm_chunk(t["C"], t["B"], t["cu_chunk_seqlens"], t["cb"])
    t["cb_read"].copy_(t["cb"].reshape(-1)[t["read_idx"]])


def _bmm_reference(t, case):
    with _one_thread():
        cb = _bmm_ref(t["C"].cpu(), t["B"].cpu(), t["meta"][0], case.params["chunk"])
    return {"cb_read": cb.reshape(-1)[t["read_idx"].cpu()]}


# ------------------------------------------------------------------------------------ 5. chunk scan
def _scan_inputs(case, dtype, device, gen):
    t = _chain_inputs(case, dtype, device, gen, upto=5)
    t["out"] = torch.empty(t["x"].shape, dtype=dtype, device=device)
    return t


def _scan_run(t, case):
    ssd_chunk_scan(t["cb"], t["x"], t["dt_out"], t["dA_cs"], t["seq_idx"], t["C"], t["passed"],
                   t["cu_chunk_seqlens"], t["out"], D=t["D"], z=t["z"], initial_states=t["initial"])


def _scan_reference(t, case):
    cu, seq_idx, _ = t["meta"]
    c = {k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in t.items()}
    with _one_thread():
        out = _scan_ref(c["cb"].double(), c["x"], c["dt_out"].double(), c["dA_cs"].double(), seq_idx, c["C"],
                        c["passed"], cu, c["D"], c["z"], c["initial"])
    return {"out": out}


# ------------------------------------------------------------------------------------ registration
_CASES = (
    Case("odd_H6_P12_N20_G3_chunk16", {"heads": 6, "head_dim": 12, "state": 20, "groups": 3, "chunk": 16,
                                       "seqlens": (37, 5, 1, 20), "computed": (10, 0, 3, 0), "slots": 7, "z": True},
         source="odd head dim / state (masked tiles), 2 heads per group, sequences resuming mid-chunk, "
                "shorter than a chunk and of one token; z gating"),
    Case("codestral_scaled_chunk32_dtlimit", {"heads": 8, "head_dim": 64, "state": 128, "groups": 2, "chunk": 32,
                                              "seqlens": (70, 33), "computed": (0, 45), "slots": 5,
                                              "dt_limit": (1e-3, 1e-1), "xbc_view": True},
         source=_SRC_CODESTRAL + "; heads /16, groups /4, chunk /8; dt clamped to [0.001, 0.1] "
                "(Mamba2Config time_step_min/max); x, B, C strided views of the conv output"),
    Case("falcon_h1_scaled_P8_chunk32_packed", {"heads": 4, "head_dim": 8, "state": 64, "groups": 1, "chunk": 32,
                                                "seqlens": (40, 9, 30), "computed": (31, 0, 5), "slots": 5,
                                                "state_fp32": True, "packed_chunks": True},
         source=_SRC_FALCON + "; heads /32, state /4, chunk /8, fp32 state cache; chunks cut at multiples "
                "of 32 of the packed stream and at sequence boundaries"),
    Case("nemotron_h_scaled_fresh_prompts", {"heads": 4, "head_dim": 16, "state": 32, "groups": 2, "chunk": 16,
                                             "seqlens": (21, 16, 3), "computed": (0, 0, 0), "slots": 4,
                                             "state_fp32": True, "z": True},
         source=_SRC_NEMOTRON + "; heads /32, head dim /4, state /4, chunk /8; fresh prompts only: no "
                "initial states are passed"),
    Case("codestral_T2048", {**_CODESTRAL, "chunk": 256, **_FULL_LENS}, quick=False,
         source=_SRC_CODESTRAL + "; 4 sequences, 2048 new tokens, two resuming from cached states"),
    Case("nemotron_h_T2048", {**_CODESTRAL, "chunk": 128, **_FULL_LENS, "state_fp32": True}, quick=False,
         source=_SRC_NEMOTRON),
    Case("granite_4_h_T2048", {"heads": 128, "head_dim": 64, "state": 256, "groups": 1, "chunk": 256,
                               **_FULL_LENS}, quick=False, source=_SRC_GRANITE),
    Case("falcon_h1_T2048", {"heads": 128, "head_dim": 8, "state": 256, "groups": 1, "chunk": 256, **_FULL_LENS},
         quick=False, source=_SRC_FALCON),
)
_DTYPES = ("bf16", "fp16", "fp32")


def _same(tol: Tolerance) -> dict[str, Tolerance]:
    return {d: tol for d in _DTYPES}


# fp32 math whatever the input dtype: softplus and exp within a few ulp, the cumsum's rounding grows
# with the chunk length
_CUMSUM_TOL = {"dt_out": Tolerance(atol=1e-7, rtol=1e-5), "dA_cs": Tolerance(atol=1e-6, rtol=2e-5)}
# written once from fp32 math: within one unit in the last place of the state's dtype
_STATE_ULP = {"bf16": Tolerance(atol=1e-6, rtol=2.0 ** -7), "fp16": Tolerance(atol=1e-6, rtol=2.0 ** -10),
              "fp32": Tolerance(atol=1e-6, rtol=1e-5)}

register(KernelSpec(
    name="mamba2_ssd_chunk_cumsum", group="mamba_ssd", models=_MODELS, cases=_CASES, dtypes=_DTYPES,
    make_inputs=_cumsum_inputs, run=_cumsum_run, reference=_cumsum_reference,
    outputs=("dt_out", "dA_cs"), tolerance=_same(_CUMSUM_TOL["dA_cs"]), output_tolerance=_CUMSUM_TOL,
    description="SSD stage 1 alone: dt' = clamp(softplus(dt + dt_bias)) per chunk (zero past its end) and "
                "the within-chunk cumsum of A dt' (flat past its end); vs fp64",
    triton_kernels=(_ssd_chunk_cumsum_kernel,),
    upstream=_OPS + "ssd_chunk_state.py _chunk_cumsum_fwd (_chunk_cumsum_fwd_kernel)",
))

register(KernelSpec(
    name="mamba2_ssd_chunk_state", group="mamba_ssd", models=_MODELS, cases=_CASES, dtypes=_DTYPES,
    make_inputs=_state_inputs, run=_state_run, reference=_state_reference,
    outputs=("states",), tolerance=_RMSE,
    description="SSD stage 2 alone: each chunk's state sum_t x_t (B_t exp(dA_last - dA_t) dt'_t)^T (grouped B) "
                "from reference dt' and dA cumsums; vs fp64",
    triton_kernels=(_ssd_chunk_state_kernel,),
    upstream=_OPS + "ssd_chunk_state.py _chunk_state_fwd (_chunk_state_fwd_kernel)",
))

register(KernelSpec(
    name="mamba2_ssd_state_passing", group="mamba_ssd", models=_MODELS, cases=_CASES, dtypes=_DTYPES,
    make_inputs=_passing_inputs, run=_passing_run, reference=_passing_reference,
    outputs=("passed", "ssm_state"), inplace=("ssm_state",), tolerance=_STATE_ULP,
    description="SSD stage 3 alone: per sequence s <- exp(dA_last) s + states[c] from its cached initial state "
                "(or zero), every chunk's state in the state dtype and the final one into the sequence's cache "
                "slot (other slots untouched); from reference chunk states; vs fp64",
    triton_kernels=(_ssd_state_passing_kernel,),
    upstream=_OPS + "ssd_state_passing.py _state_passing_fwd (_state_passing_fwd_kernel)",
))

register(KernelSpec(
    name="mamba2_ssd_bmm", group="mamba_ssd", models=_MODELS, cases=_CASES, dtypes=_DTYPES,
    make_inputs=_bmm_inputs, run=_bmm_run, reference=_bmm_reference,
    outputs=("cb_read",), tolerance=_same(Tolerance(atol=2e-4, rtol=1e-5)),
    description="SSD stage 4 alone: C B^T per chunk and group in fp32; the entries the chunk scan reads "
                "(j <= i < chunk length) vs fp64",
    triton_kernels=(_ssd_bmm_chunk_kernel,),
    upstream=_OPS + "ssd_bmm.py _bmm_chunk_fwd (_bmm_chunk_fwd_kernel)",
))

register(KernelSpec(
    name="mamba2_ssd_chunk_scan", group="mamba_ssd", models=_MODELS, cases=_CASES, dtypes=_DTYPES,
    make_inputs=_scan_inputs, run=_scan_run, reference=_scan_reference,
    outputs=("out",), tolerance=_RMSE,
    description="SSD stage 5 alone: y = exp(dA) C s_prev + causal intra-chunk (C B^T decayed, dt' x) + D x, "
                "times silu(z), from reference dt'/dA, passed states and C B^T (NaN where it must not read); "
                "vs fp64",
    triton_kernels=(_ssd_chunk_scan_kernel,),
    upstream=_OPS + "ssd_chunk_scan.py _chunk_scan_fwd (_chunk_scan_fwd_kernel)",
))
