"""vLLM's Mamba kernels: causal conv1d (prefill and update) and the Mamba-2 SSD chunked scan and
selective state update."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ...spec import Case, Tolerance
from .. import randn, store
from . import DTYPES, _kernel, vllm_call


# ================================================================================ mamba conv
CONV_SRC = {
    "qwen3_next": "Qwen3-Next / Qwen3.5 GDN layer conv (dim 2*16*128 + 32*128 = 8192, width 4, SiLU)",
    "mamba2": "Mamba-2 / Codestral conv (dim 8192 + 2*8*128 = 10240, width 4, SiLU)",
}


def _conv_weights(gen, dim, width, dtype, device):
    return (randn(gen, dim, width, dtype=dtype, device=device, scale=width ** -0.5),
            randn(gen, dim, dtype=dtype, device=device, scale=0.1))


def _conv_state_pool(gen, lines, dim, state_len, dtype, device):
    """vLLM's default conv-state layout: stored (lines, state_len, dim), seen as (lines, dim,
    state_len) with dim innermost."""
    return randn(gen, lines, state_len, dim, dtype=dtype, device=device).transpose(1, 2)


def _conv_fn_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    p = case.params
    dim, width, lens = p["dim"], p["width"], p["lens"]
    w, b = _conv_weights(gen, dim, width, dtype, device)
    x = {"x": randn(gen, sum(lens), dim, dtype=dtype, device=device),  # tokens x dim, as projected
         "weight": w, "bias": b,
         "conv_states": _conv_state_pool(gen, p["lines"], dim, width - 1, dtype, device),
         "cache_indices": torch.tensor(p["slots"], dtype=torch.int32, device=device),
         "has_initial_state": torch.tensor(p["init"], dtype=torch.bool, device=device),
         "query_start_loc": torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32,
                                         device=device)}
    x["out"] = torch.empty_like(x["x"])
    return x


def _conv(window: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """silu(bias + sum_j w[:, j] * window[:, j]) for window (dim, width)."""
    return F.silu(b + (w * window).sum(-1))


def _conv_fn_reference(x: dict, case: Case) -> dict:
    """Per sequence: its tokens after the previous width-1 inputs (the cached state when it has
    one, else zeros), a depthwise causal conv + SiLU per token; the state then holds the last
    width-1 inputs."""
    p = case.params
    width = p["width"]
    w, b = x["weight"].double(), x["bias"].double()
    out = torch.zeros(x["x"].shape, dtype=torch.float64)
    states = x["conv_states"].double().clone()
    qsl = x["query_start_loc"].tolist()
    for i, slot in enumerate(p["slots"]):
        seq = x["x"][qsl[i]:qsl[i + 1]].double().T                    # (dim, len)
        prev = states[slot] if p["init"][i] else torch.zeros(seq.shape[0], width - 1,
                                                             dtype=torch.float64)
        full = torch.cat([prev, seq], dim=1)
        for t in range(seq.shape[1]):
            out[qsl[i] + t] = _conv(full[:, t:t + width], w, b)
        states[slot] = full[:, -(width - 1):]
    return {"out": out, "conv_states": states}


def _conv_fn_run(x: dict, case: Case) -> None:
    from vllm.model_executor.layers.mamba.ops.causal_conv1d import causal_conv1d_fn
    y = causal_conv1d_fn(x["x"].transpose(0, 1), x["weight"], x["bias"], conv_states=x["conv_states"],
                         query_start_loc=x["query_start_loc"], cache_indices=x["cache_indices"],
                         has_initial_state=x["has_initial_state"], activation="silu")
    store(x, out=y.transpose(0, 1))


_kernel(
    name="lib_vllm_causal_conv1d", group="lib_vllm_mamba",
    models=("qwen3_next", "qwen3_5", "mamba2"),
    description="vllm causal_conv1d_fn (prefill): varlen sequences in one channel-last batch, each "
                "with its conv-state cache line (initial state for sequences continuing a chunked "
                "prefill, zeros for new ones), SiLU; the final states written back to the pool.",
    upstream="vllm: model_executor/layers/mamba/ops/causal_conv1d.py causal_conv1d_fn "
             "(_causal_conv1d_fwd_kernel)",
    cases=(Case("varlen_3seq", {"dim": 1024, "width": 4, "lens": [37, 2, 70], "slots": [5, 2, 7],
                                "init": [True, False, True], "lines": 9},
                source=CONV_SRC["qwen3_next"] + "; dim /8; sequences of 37, 2 and 70 tokens"),
           Case("full_dim", {"dim": 10240, "width": 4, "lens": [300, 129], "slots": [1, 3],
                             "init": [False, True], "lines": 4},
                quick=False, source=CONV_SRC["mamba2"])),
    dtypes=DTYPES, make_inputs=_conv_fn_inputs,
    run=vllm_call(_conv_fn_run), reference=_conv_fn_reference,
    outputs=("out", "conv_states"), inplace=("conv_states",),
    tolerance={"bf16": Tolerance(atol=1e-2, rtol=1e-2), "fp32": Tolerance(atol=1e-5, rtol=1.3e-5)},
    output_tolerance={})


def _conv_update_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    p = case.params
    dim, width = p["dim"], p["width"]
    w, b = _conv_weights(gen, dim, width, dtype, device)
    x = {"x": randn(gen, len(p["slots"]), dim, dtype=dtype, device=device),
         "weight": w, "bias": b,
         "conv_state": _conv_state_pool(gen, p["lines"], dim, width - 1, dtype, device),
         "conv_state_indices": torch.tensor(p["slots"], dtype=torch.int32, device=device)}
    x["out"] = torch.empty_like(x["x"])
    return x


def _conv_update_reference(x: dict, case: Case) -> dict:
    """One new token per sequence after its cached width-1 inputs; the state shifts by one."""
    w, b = x["weight"].double(), x["bias"].double()
    out = torch.zeros(x["x"].shape, dtype=torch.float64)
    states = x["conv_state"].double().clone()
    for i, slot in enumerate(case.params["slots"]):
        full = torch.cat([states[slot], x["x"][i].double()[:, None]], dim=1)
        out[i] = _conv(full, w, b)
        states[slot] = full[:, 1:]
    return {"out": out, "conv_state": states}


def _conv_update_run(x: dict, case: Case) -> None:
    from vllm.model_executor.layers.mamba.ops.causal_conv1d import causal_conv1d_update
    causal_conv1d_update(x["x"], x["conv_state"], x["weight"], x["bias"], "silu",
                         conv_state_indices=x["conv_state_indices"], out=x["out"])


_kernel(
    name="lib_vllm_causal_conv1d_update", group="lib_vllm_mamba",
    models=("qwen3_next", "qwen3_5", "mamba2"),
    description="vllm causal_conv1d_update (decode): one token per sequence against its cache line "
                "of the conv-state pool (line 0 is vLLM's null block), SiLU, the state shifted in "
                "place.",
    upstream="vllm: model_executor/layers/mamba/ops/causal_conv1d.py causal_conv1d_update "
             "(_causal_conv1d_update_kernel)",
    cases=(Case("decode_b5", {"dim": 1024, "width": 4, "slots": [3, 1, 8, 6, 2], "lines": 9},
                source=CONV_SRC["qwen3_next"] + "; dim /8; 5 decoding sequences"),
           Case("decode_b64_full", {"dim": 10240, "width": 4, "slots": list(range(1, 65)), "lines": 65},
                quick=False, source=CONV_SRC["mamba2"])),
    dtypes=DTYPES, make_inputs=_conv_update_inputs, run=vllm_call(_conv_update_run),
    reference=_conv_update_reference, outputs=("out", "conv_state"), inplace=("conv_state",),
    tolerance={"bf16": Tolerance(atol=1e-2, rtol=1e-2), "fp32": Tolerance(atol=1e-5, rtol=1.3e-5)})


# ================================================================================= Mamba-2 SSD
SSD_SRC = "Mamba-2 / Codestral-Mamba (128 heads x 64, d_state 128, 8 groups, chunk 256)"


def _chunks(lens: list[int], computed: list[int], chunk: int) -> tuple[list[int], list[int], list[int]]:
    """vLLM's chunking: chunks hold one sequence's tokens and end at multiples of `chunk` in the
    sequence's absolute positions (after its already computed tokens)."""
    cu, seq_idx, last, pos = [0], [], [], 0
    for i, (n, c) in enumerate(zip(lens, computed)):
        a, end = c, c + n
        while a < end:
            b = min(end, (a // chunk + 1) * chunk)
            seq_idx.append(i)
            pos += b - a
            cu.append(pos)
            a = b
        last.append(len(seq_idx) - 1)
    return cu, seq_idx, last


def _ssd_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    p = case.params
    T, nh, hd, ds, ng = sum(p["lens"]), p["heads"], p["head_dim"], p["d_state"], p["groups"]
    cu, seq_idx, last = _chunks(p["lens"], p["computed"], p["chunk"])
    i32 = dict(dtype=torch.int32, device=device)
    x = {"x": randn(gen, T, nh, hd, dtype=dtype, device=device),
         "dt": randn(gen, T, nh, dtype=dtype, device=device, scale=0.5, shift=-2.0),
         "A": -torch.exp(torch.rand(nh, generator=gen) * math.log(16)).to(device),
         "B": randn(gen, T, ng, ds, dtype=dtype, device=device, scale=0.3),
         "C": randn(gen, T, ng, ds, dtype=dtype, device=device, scale=0.3),
         "D": 1 + randn(gen, nh, dtype=torch.float32, device=device, scale=0.1),
         "dt_bias": randn(gen, nh, dtype=torch.float32, device=device, scale=0.5, shift=-1.0),
         "initial_states": randn(gen, len(p["lens"]), nh, hd, ds, dtype=torch.float32,
                                 device=device, scale=0.2),
         "cu_seqlens": torch.tensor([0] + list(torch.tensor(p["lens"]).cumsum(0)), **i32),
         "cu_chunk_seqlens": torch.tensor(cu, **i32), "seq_idx": torch.tensor(seq_idx, **i32),
         "last_chunk_indices": torch.tensor(last, **i32)}
    for i, c in enumerate(p["computed"]):
        if c == 0:
            x["initial_states"][i] = 0  # a new sequence starts from zeros, as vLLM passes it
    x["out"] = torch.empty_like(x["x"])
    x["final_states"] = torch.empty_like(x["initial_states"])
    return x


def _ssd_reference(x: dict, case: Case) -> dict:
    """The Mamba-2 recurrence token by token in fp64, per sequence and head: dt' = softplus(dt +
    dt_bias), h = exp(dt' A) h + dt' x B^T, y = h C + D x; the final state per sequence."""
    p = case.params
    nh, ng = p["heads"], p["groups"]
    out = torch.zeros(x["x"].shape, dtype=torch.float64)
    final = torch.zeros(x["initial_states"].shape, dtype=torch.float64)
    cu = x["cu_seqlens"].tolist()
    dt = F.softplus(x["dt"].double() + x["dt_bias"].double())
    A, D = x["A"].double(), x["D"].double()
    xs, Bs, Cs = x["x"].double(), x["B"].double(), x["C"].double()
    for i in range(len(cu) - 1):
        h = x["initial_states"][i].double().clone()                  # (heads, head_dim, d_state)
        g = torch.arange(nh) // (nh // ng)
        for t in range(cu[i], cu[i + 1]):
            decay = torch.exp(dt[t] * A)                                  # (heads,)
            h = h * decay[:, None, None] + (dt[t][:, None] * xs[t])[:, :, None] * Bs[t, g][:, None, :]
            out[t] = (h * Cs[t, g][:, None, :]).sum(-1) + D[:, None] * xs[t]
        final[i] = h
    return {"out": out, "final_states": final}


def _ssd_run(x: dict, case: Case) -> None:
    from vllm.model_executor.layers.mamba.ops.ssd_combined import mamba_chunk_scan_combined_varlen
    states = mamba_chunk_scan_combined_varlen(
        x["x"], x["dt"], x["A"], x["B"], x["C"], chunk_size=case.params["chunk"],
        cu_seqlens=x["cu_seqlens"], cu_chunk_seqlens=x["cu_chunk_seqlens"],
        last_chunk_indices=x["last_chunk_indices"], seq_idx=x["seq_idx"], out=x["out"], D=x["D"],
        z=None, dt_bias=x["dt_bias"], initial_states=x["initial_states"], dt_softplus=True,
        dt_limit=(0.0, float("inf")), state_dtype=torch.float32)
    store(x, final_states=states)


_kernel(
    name="lib_vllm_mamba_chunk_scan", group="lib_vllm_mamba", models=("mamba2",),
    description="vllm mamba_chunk_scan_combined_varlen (Mamba-2 SSD prefill): chunk cumsum, chunk "
                "states, state passing, C^T B per chunk, chunk scan, over varlen sequences chunked as "
                "vLLM chunks them (a sequence continuing a chunked prefill starts mid-chunk), "
                "softplus(dt + dt_bias), D skip, initial states; outputs and final states.",
    upstream="vllm: model_executor/layers/mamba/ops/ssd_combined.py "
             "mamba_chunk_scan_combined_varlen (_chunk_cumsum_fwd_kernel, _chunk_state_fwd_kernel, "
             "_state_passing_fwd_kernel, _bmm_chunk_fwd_kernel, _chunk_scan_fwd_kernel)",
    cases=(Case("varlen_2seq", {"lens": [100, 37], "computed": [0, 50], "heads": 8, "head_dim": 64,
                                "d_state": 128, "groups": 2, "chunk": 64},
                source=SSD_SRC + "; heads /16, groups /4, chunk /4; a new 100-token prompt and a "
                                 "chunked-prefill continuation (50 cached) of 37 tokens"),
           Case("prefill_full", {"lens": [600, 300], "computed": [0, 256], "heads": 128, "head_dim": 64,
                                 "d_state": 128, "groups": 8, "chunk": 256},
                quick=False, source=SSD_SRC)),
    dtypes=DTYPES, make_inputs=_ssd_inputs, run=vllm_call(_ssd_run), reference=_ssd_reference,
    outputs=("out", "final_states"),
    tolerance={"bf16": Tolerance(rmse=1e-2), "fp32": Tolerance(rmse=1e-5)})


def _ssu_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    p = case.params
    nh, hd, ds, ng, b = p["heads"], p["head_dim"], p["d_state"], p["groups"], len(p["slots"])
    x = {"state": randn(gen, p["lines"], nh, hd, ds, dtype=dtype, device=device, scale=0.2),
         "x": randn(gen, b, nh, hd, dtype=dtype, device=device),
         "dt": randn(gen, b, nh, dtype=dtype, device=device, scale=0.5, shift=-2.0),
         "A": -torch.exp(torch.rand(nh, generator=gen) * math.log(16)).to(device),
         "B": randn(gen, b, ng, ds, dtype=dtype, device=device, scale=0.3),
         "C": randn(gen, b, ng, ds, dtype=dtype, device=device, scale=0.3),
         "D": 1 + randn(gen, nh, dtype=torch.float32, device=device, scale=0.1),
         "dt_bias": randn(gen, nh, dtype=torch.float32, device=device, scale=0.5, shift=-1.0),
         "slots": torch.tensor(p["slots"], dtype=torch.int32, device=device)}
    x["out"] = torch.empty_like(x["x"])
    return x


def _ssu_reference(x: dict, case: Case) -> dict:
    p = case.params
    nh, ng = p["heads"], p["groups"]
    g = torch.arange(nh) // (nh // ng)
    state = x["state"].double().clone()
    out = torch.zeros(x["x"].shape, dtype=torch.float64)
    dt = F.softplus(x["dt"].double() + x["dt_bias"].double())
    for i, s in enumerate(p["slots"]):
        xs = x["x"][i].double()
        h = state[s] * torch.exp(dt[i] * x["A"].double())[:, None, None] \
            + (dt[i][:, None] * xs)[:, :, None] * x["B"][i, g].double()[:, None, :]
        out[i] = (h * x["C"][i, g].double()[:, None, :]).sum(-1) + x["D"].double()[:, None] * xs
        state[s] = h
    return {"out": out, "state": state}


def _ssu_run(x: dict, case: Case) -> None:
    from vllm.model_executor.layers.mamba.ops.mamba_ssm import selective_state_update
    hd, ds = case.params["head_dim"], case.params["d_state"]
    # the per-head parameters broadcast over head_dim / d_state, as Mamba-2's decode passes them
    A = x["A"][:, None, None].expand(-1, hd, ds)
    dt = x["dt"][:, :, None].expand(-1, -1, hd)
    dt_bias = x["dt_bias"][:, None].expand(-1, hd)
    D = x["D"][:, None].expand(-1, hd)
    selective_state_update(x["state"], x["x"], dt, A, x["B"], x["C"], D, dt_bias, dt_softplus=True,
                           state_batch_indices=x["slots"], dst_state_batch_indices=x["slots"],
                           out=x["out"])


_kernel(
    name="lib_vllm_selective_state_update", group="lib_vllm_mamba", models=("mamba2",),
    description="vllm selective_state_update (Mamba-2 decode): one token per sequence updates its "
                "SSM state in the state pool (per-head A, dt, D broadcast as Mamba-2 passes them, "
                "softplus(dt + dt_bias)) and reads y = h C + D x.",
    upstream="vllm: model_executor/layers/mamba/ops/mamba_ssm.py selective_state_update "
             "(_selective_scan_update_kernel)",
    cases=(Case("decode_b4", {"heads": 8, "head_dim": 64, "d_state": 128, "groups": 2,
                              "slots": [3, 1, 6, 4], "lines": 7},
                source=SSD_SRC + "; heads /16; 4 decoding sequences"),
           Case("decode_b32_full", {"heads": 128, "head_dim": 64, "d_state": 128, "groups": 8,
                                    "slots": list(range(1, 33)), "lines": 33},
                quick=False, source=SSD_SRC)),
    dtypes=DTYPES, make_inputs=_ssu_inputs, run=vllm_call(_ssu_run), reference=_ssu_reference,
    outputs=("out", "state"), inplace=("state",),
    tolerance={"bf16": Tolerance(rmse=1e-2), "fp32": Tolerance(rmse=1e-5)})
