"""Depthwise causal conv1d of Gated DeltaNet / Mamba layers, for packed prefill and for decode.

Layouts (as serving stacks keep them):
  x, out        [total_tokens, dim] (token-major, the in-projection's output) or the transposed
                [dim, total_tokens] view; the kernels take strides, the `layout` case flag picks.
  weight        [dim, width]; bias [dim] (optional)
  conv_states   [num_slots, dim, width - 1]: the last width-1 inputs of each cached sequence,
                oldest first; sequence b uses slot cache_indices[b]. Either stored that way or as
                [num_slots, width - 1, dim] seen through a transposed view (the serving stack's
                "SD" layout); the kernels take strides.
  cu_seqlens    [batch + 1] int32 offsets of the packed sequences; has_initial_state [batch] bool.
  Decode: a cache index equal to the null block id (0) marks a padded batch entry, which the update
  kernel skips (its row of `out` and every state stay as they were); `out` starts as a copy of x,
  as when the serving stack updates x in place.
Qwen3-Next: conv dim 2*16*128 + 32*128 = 8192, width 4, no bias, SiLU. Mamba-2 (Mamba-Codestral-7B):
conv dim = intermediate 8192 (expand 2 x hidden 4096) + 2 x n_groups 8 x state 128 = 10240, width 4,
with bias, SiLU.

out[t, c] = act(bias[c] + sum_j weight[c, j] * x[t - (width-1) + j, c]), where inputs before the
sequence start come from the initial state (or are zero without one). The final state written back
is the last width-1 inputs of the (state ++ sequence) stream, bit-exact.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sdk.conformance.spec import Case, KernelSpec, Tolerance, register

_TOL = {"bf16": Tolerance(atol=1e-2, rtol=1e-2), "fp32": Tolerance(atol=1e-5, rtol=1.3e-5)}
_EXACT = Tolerance(exact=True)
_MODELS = ("qwen3_5", "qwen3_next", "mamba2", "nemotron_h", "granite4_h", "falcon_h1", "jamba")
_NULL_BLOCK_ID = 0


def _conv_states(p, gen, dtype, device):
    """[slots, dim, width-1] with the values of a standard-normal cache, stored dim-contiguous when
    the case asks for the serving stack's [slots, width-1, dim] layout."""
    slots, dim, width = p["slots"], p["dim"], p["width"]
    st = torch.randn((slots, dim, width - 1), generator=gen).to(dtype).to(device)
    if p.get("state_layout") == "SD":
        st = st.transpose(1, 2).contiguous().transpose(1, 2)
    return st


# --------------------------------------------------------------------------------------- prefill
@triton.jit
def _conv1d_prefill_kernel(x_ptr, w_ptr, bias_ptr, state_ptr, cache_idx_ptr, has_init_ptr, cu_ptr,
                           out_ptr, dim, stride_xt, stride_xc, stride_ot, stride_oc,
                           stride_wc, stride_wk, stride_ss, stride_sc, stride_sk,
                           WIDTH: tl.constexpr, HAS_BIAS: tl.constexpr, SILU: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    seq = tl.program_id(0)
    chunk = tl.program_id(1)
    start = tl.load(cu_ptr + seq)
    seqlen = tl.load(cu_ptr + seq + 1) - start
    if chunk * BLOCK_M >= seqlen:
        return
    slot = tl.load(cache_idx_ptr + seq).to(tl.int64)
    has_init = tl.load(has_init_ptr + seq) != 0
    cols = tl.program_id(2) * BLOCK_N + tl.arange(0, BLOCK_N)
    cmask = cols < dim
    t = chunk * BLOCK_M + tl.arange(0, BLOCK_M)  # position within the sequence
    tmask = t < seqlen
    state_row = state_ptr + slot * stride_ss + cols[None, :] * stride_sc

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
    for j in tl.static_range(WIDTH):
        src = t - (WIDTH - 1) + j
        in_seq = (src >= 0)[:, None] & tmask[:, None] & cmask[None, :]
        in_state = (src < 0)[:, None] & tmask[:, None] & cmask[None, :] & has_init
        xv = tl.load(x_ptr + (start + src).to(tl.int64)[:, None] * stride_xt + cols[None, :] * stride_xc,
                     mask=in_seq, other=0.0)
        sv = tl.load(state_row + (WIDTH - 1 + src)[:, None] * stride_sk, mask=in_state, other=0.0)
        w = tl.load(w_ptr + cols * stride_wc + j * stride_wk, mask=cmask, other=0.0).to(tl.float32)
        acc += (xv.to(tl.float32) + sv.to(tl.float32)) * w[None, :]
    if SILU:
        acc = acc * tl.sigmoid(acc)
    tl.store(out_ptr + (start + t).to(tl.int64)[:, None] * stride_ot + cols[None, :] * stride_oc,
             acc.to(out_ptr.dtype.element_ty), mask=tmask[:, None] & cmask[None, :])

    # The first chunk is the only reader of the initial state, so it also writes the final one
    # (no other program touches this slot). Its threads read state rows that other threads of the
    # program overwrite (the shifted rows of a sequence shorter than width-1, and the rows the first
    # outputs read): a barrier after the last read keeps every read ahead of the writes.
    if chunk == 0:
        k = tl.arange(0, BLOCK_K)
        kmask = (k < WIDTH - 1)[:, None] & cmask[None, :]
        fsrc = seqlen - (WIDTH - 1) + k  # >= 0: from x; < 0: shifted from the old state
        f_seq = (fsrc >= 0)[:, None] & kmask
        f_state = (fsrc < 0)[:, None] & kmask & has_init
        fx = tl.load(x_ptr + (start + fsrc).to(tl.int64)[:, None] * stride_xt + cols[None, :] * stride_xc,
                     mask=f_seq, other=0.0)
        fs = tl.load(state_row + (WIDTH - 1 + fsrc)[:, None] * stride_sk, mask=f_state, other=0.0)
        tl.debug_barrier()
        tl.store(state_row + k[:, None] * stride_sk, tl.where(f_seq, fx.to(state_ptr.dtype.element_ty), fs),
                 mask=kmask)


def _conv_weights(p, gen, dtype, device):
    dim, width = p["dim"], p["width"]
    w = (torch.randn((dim, width), generator=gen) / width ** 0.5).to(dtype).to(device)
    b = (torch.randn((dim,), generator=gen) * 0.1).to(dtype).to(device) if p["bias"] else None
    return w, b


def _prefill_inputs(case, dtype, device, gen):
    p = case.params
    dim, width, lens = p["dim"], p["width"], p["seqlens"]
    B, total, slots = len(lens), sum(lens), p["slots"]
    x = torch.randn((total, dim), generator=gen).to(dtype)
    if p.get("layout") == "dim_major":
        x = x.T.contiguous().T  # same values, stored [dim, total_tokens]
    w, b = _conv_weights(p, gen, dtype, device)
    states = _conv_states(p, gen, dtype, device)
    cache_indices = torch.randperm(slots, generator=gen)[:B].to(torch.int32).to(device)
    has_init = (torch.arange(B) % 3 != 1).to(device)  # every third sequence starts fresh
    cu = torch.zeros(B + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(torch.tensor(lens), 0)
    out = torch.empty_strided(x.shape, x.stride(), dtype=dtype)
    return {"x": x.to(device), "weight": w, "bias": b, "conv_states": states, "cache_indices": cache_indices,
            "has_initial_state": has_init, "cu_seqlens": cu.to(device), "out": out.to(device)}


def _prefill_config(dim: int) -> dict:
    """Tile sizes (overridable by keyword): [16 tokens x 128 channels] tiles keep the four shifted
    loads in registers (larger tiles spill)."""
    return dict(BLOCK_M=16, BLOCK_N=min(128, triton.next_power_of_2(dim)), num_warps=4)


def _prefill_run(inp, case, **config):
    x, out, w, st = inp["x"], inp["out"], inp["weight"], inp["conv_states"]
    p = case.params
    dim = x.shape[1]
    max_len = max(p["seqlens"])  # serving metadata carries the longest sequence of the batch
    B = len(p["seqlens"])
    cfg = {**_prefill_config(dim), **config}
    bias = inp["bias"]
    grid = (B, triton.cdiv(max_len, cfg["BLOCK_M"]), triton.cdiv(dim, cfg["BLOCK_N"]))
    _conv1d_prefill_kernel[grid](
        x, w, bias if bias is not None else w, st, inp["cache_indices"], inp["has_initial_state"],
        inp["cu_seqlens"], out, dim, x.stride(0), x.stride(1), out.stride(0), out.stride(1),
        w.stride(0), w.stride(1), st.stride(0), st.stride(1), st.stride(2),
        WIDTH=w.shape[1], HAS_BIAS=bias is not None, SILU=bool(p["silu"]),
        BLOCK_K=triton.next_power_of_2(w.shape[1] - 1), **cfg)


def _prefill_ref(inp, case):
    p = case.params
    width = p["width"]
    x, w = inp["x"].double().cpu(), inp["weight"].double().cpu()
    states = inp["conv_states"].cpu().clone()
    out = torch.empty_like(x)
    cu = inp["cu_seqlens"].cpu().tolist()
    for b in range(len(cu) - 1):
        slot = int(inp["cache_indices"][b])
        init = states[slot] if bool(inp["has_initial_state"][b]) else torch.zeros_like(states[slot])
        stream = torch.cat([init.T, inp["x"].cpu()[cu[b]:cu[b + 1]]], dim=0)  # [width-1+L, dim], input dtype
        s = stream.double()
        L = cu[b + 1] - cu[b]
        y = sum(w[:, j] * s[j:j + L] for j in range(width))
        if inp["bias"] is not None:
            y = y + inp["bias"].double().cpu()
        if p["silu"]:
            y = torch.nn.functional.silu(y)
        out[cu[b]:cu[b + 1]] = y
        states[slot] = stream[-(width - 1):].T
    return {"out": out, "conv_states": states}


_QN = {"dim": 8192, "width": 4, "bias": False, "silu": True}
register(KernelSpec(
    name="causal_conv1d_prefill", group="mamba_conv", models=_MODELS,
    cases=(
        Case("odd_dim200_varlen", {"dim": 200, "width": 4, "bias": True, "silu": True, "slots": 7,
                                   "seqlens": (5, 37, 2, 1, 16)},
             source="odd dim, sequences shorter than width-1, fresh and cached starts"),
        Case("qwen3_next_dim512_dim_major", {"dim": 512, "width": 4, "bias": False, "silu": True, "slots": 4,
                                             "seqlens": (20, 3), "layout": "dim_major"},
             source="Qwen3-Next width 4, conv dim scaled /16, channel-major storage"),
        Case("qwen3_next_width3_nosilu", {"dim": 96, "width": 3, "bias": False, "silu": False, "slots": 3,
                                          "seqlens": (9, 4)}, source="width 3, no activation"),
        Case("qwen3_next_dim8192_T8192", {**_QN, "slots": 64, "seqlens": (4096, 2048, 1500, 548)}, quick=False,
             source="Qwen3-Next-80B-A3B: conv dim 8192, width 4, 4 sequences / 8192 tokens"),
        Case("mamba2_dim160_SD_state", {"dim": 160, "width": 4, "bias": True, "silu": True, "slots": 5,
                                        "seqlens": (6, 19, 2), "state_layout": "SD"},
             source="Mamba-2 layout: conv states stored [slots, width-1, dim] (dim contiguous), bias, SiLU"),
        Case("mamba2_dim10240_T8192", {"dim": 10240, "width": 4, "bias": True, "silu": True, "slots": 64,
                                       "seqlens": (8192,), "state_layout": "SD"}, quick=False,
             source="Mamba-Codestral-7B: conv dim 8192 + 2*8*128 = 10240, width 4, one 8192-token sequence"),
        Case("mamba2_dim10240_varlen", {"dim": 10240, "width": 4, "bias": True, "silu": True, "slots": 32,
                                        "seqlens": (3000, 1021, 77, 1, 2093)}, quick=False,
             source="Mamba-Codestral-7B: conv dim 10240, 5 packed sequences / 6192 tokens, cached and fresh starts"),
    ),
    dtypes=("bf16", "fp32"),
    make_inputs=_prefill_inputs, run=_prefill_run, reference=_prefill_ref,
    outputs=("out", "conv_states"), inplace=("conv_states",), tolerance=_TOL,
    output_tolerance={"conv_states": _EXACT},
    description="packed varlen depthwise causal conv1d (+bias, SiLU) from cached initial states; final states written back",
    triton_kernels=(_conv1d_prefill_kernel,),
    upstream="vllm: model_executor/layers/mamba/ops/causal_conv1d.py causal_conv1d_fn (_causal_conv1d_fwd_kernel)",
))


# ---------------------------------------------------------------------------------------- update
@triton.jit
def _conv1d_update_kernel(x_ptr, w_ptr, bias_ptr, state_ptr, cache_idx_ptr, out_ptr, dim, null_block_id,
                          stride_xb, stride_ob, stride_wc, stride_wk, stride_ss, stride_sc, stride_sk,
                          WIDTH: tl.constexpr, HAS_BIAS: tl.constexpr, SILU: tl.constexpr,
                          HAS_NULL_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    cmask = cols < dim
    slot = tl.load(cache_idx_ptr + b).to(tl.int64)
    if HAS_NULL_BLOCK:
        if slot == null_block_id:  # a padded batch entry: nothing to read or write
            return
    row = state_ptr + slot * stride_ss + cols * stride_sc
    x = tl.load(x_ptr + b * stride_xb + cols, mask=cmask, other=0.0)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
    for j in tl.static_range(WIDTH - 1):
        s = tl.load(row + j * stride_sk, mask=cmask, other=0.0)
        w = tl.load(w_ptr + cols * stride_wc + j * stride_wk, mask=cmask, other=0.0).to(tl.float32)
        acc += s.to(tl.float32) * w
        if j > 0:  # shift left by one: state[j-1] <- state[j]
            tl.store(row + (j - 1) * stride_sk, s, mask=cmask)
    w_last = tl.load(w_ptr + cols * stride_wc + (WIDTH - 1) * stride_wk, mask=cmask, other=0.0)
    acc += x.to(tl.float32) * w_last.to(tl.float32)
    tl.store(row + (WIDTH - 2) * stride_sk, x.to(state_ptr.dtype.element_ty), mask=cmask)
    if SILU:
        acc = acc * tl.sigmoid(acc)
    tl.store(out_ptr + b * stride_ob + cols, acc.to(out_ptr.dtype.element_ty), mask=cmask)


def _update_inputs(case, dtype, device, gen):
    p = case.params
    B, dim = p["batch"], p["dim"]
    w, b = _conv_weights(p, gen, dtype, device)
    x = torch.randn((B, dim), generator=gen).to(dtype).to(device)
    idx = torch.randperm(p["slots"] - 1, generator=gen)[:B].to(torch.int32) + 1  # slot 0: the null block
    for i in p.get("padded", ()):
        idx[i] = _NULL_BLOCK_ID
    return {"x": x, "weight": w, "bias": b, "conv_states": _conv_states(p, gen, dtype, device),
            "cache_indices": idx.to(device), "out": x.clone()}


def _update_run(inp, case):
    x, out, w, st = inp["x"], inp["out"], inp["weight"], inp["conv_states"]
    B, dim = x.shape
    block_n = min(256, triton.next_power_of_2(dim))
    bias = inp["bias"]
    _conv1d_update_kernel[(B, triton.cdiv(dim, block_n))](
        x, w, bias if bias is not None else w, st, inp["cache_indices"], out, dim, _NULL_BLOCK_ID,
        x.stride(0), out.stride(0), w.stride(0), w.stride(1), st.stride(0), st.stride(1), st.stride(2),
        WIDTH=w.shape[1], HAS_BIAS=bias is not None, SILU=bool(case.params["silu"]), HAS_NULL_BLOCK=True,
        BLOCK_N=block_n, num_warps=2)


def _update_ref(inp, case):
    w = inp["weight"].double().cpu()
    states = inp["conv_states"].cpu().clone()
    idx = inp["cache_indices"].long().cpu()
    live = idx != _NULL_BLOCK_ID
    window = torch.cat([states[idx], inp["x"].cpu()[:, :, None]], dim=2)  # [B, dim, width]
    y = (window.double() * w).sum(-1)
    if inp["bias"] is not None:
        y = y + inp["bias"].double().cpu()
    if case.params["silu"]:
        y = torch.nn.functional.silu(y)
    y = torch.where(live[:, None], y, inp["out"].cpu().double())  # padded entries: out untouched
    states[idx[live]] = window[live][:, :, 1:]
    return {"out": y, "conv_states": states}


register(KernelSpec(
    name="causal_conv1d_update", group="mamba_conv", models=_MODELS,
    cases=(
        Case("odd_B5_dim200", {"batch": 5, "dim": 200, "width": 4, "bias": True, "silu": True, "slots": 9},
             source="odd dim, slots scattered"),
        Case("qwen3_next_B8_dim1024", {"batch": 8, "dim": 1024, "width": 4, "bias": False, "silu": True,
                                       "slots": 16}, source="Qwen3-Next width 4, conv dim scaled /8"),
        Case("mamba2_B6_dim160_padded_SD", {"batch": 6, "dim": 160, "width": 4, "bias": True, "silu": True,
                                            "slots": 8, "padded": (1, 4), "state_layout": "SD"},
             source="Mamba-2 decode batch with two padded entries (null block), conv states [slots, width-1, dim]"),
        Case("qwen3_next_B256_dim8192", {"batch": 256, "dim": 8192, "width": 4, "bias": False, "silu": True,
                                         "slots": 512}, quick=False,
             source="Qwen3-Next-80B-A3B decode: 256 sequences, conv dim 8192, width 4"),
        Case("mamba2_B128_dim10240", {"batch": 128, "dim": 10240, "width": 4, "bias": True, "silu": True,
                                      "slots": 160, "padded": (3, 100), "state_layout": "SD"}, quick=False,
             source="Mamba-Codestral-7B decode: 128 sequences (two padded entries), conv dim 10240, width 4"),
    ),
    dtypes=("bf16", "fp32"),
    make_inputs=_update_inputs, run=_update_run, reference=_update_ref,
    outputs=("out", "conv_states"), inplace=("conv_states", "out"), tolerance=_TOL,
    output_tolerance={"conv_states": _EXACT},
    description="decode step of causal conv1d: shift the cached window by one token, convolve, write the state "
                "back; padded entries (null block) skipped",
    triton_kernels=(_conv1d_update_kernel,),
    upstream="vllm: model_executor/layers/mamba/ops/causal_conv1d.py causal_conv1d_update (_causal_conv1d_update_kernel)",
))
