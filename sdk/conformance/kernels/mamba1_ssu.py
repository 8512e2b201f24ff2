"""Mamba-1 decode step (Jamba): one token per sequence updates its selective-scan state in place.

Layout (vLLM's selective_state_update with 2-D state rows, the Mamba-1 mixer's call):
  state [slots, dim, dstate]; x, dt, z, out [batch, dim]; A [dim, dstate] (fp32, one decay per
  channel and state index, unlike Mamba-2's one per head); B, C [batch, dstate] (shared by every
  channel); D, dt_bias [dim] (the model dtype); state_indices [batch].
  dt' = softplus(dt + dt_bias)                                   per channel
  state = state * exp(A dt') + dt' x B^T                         [dim, dstate]
  out = state C + D x, times silu(z)
The mixer keeps its activations channel-major ([dim, tokens]: the conv output, the dt projection,
the gate) and hands the kernel their transposes, so x, dt, z and out arrive with a channel stride of
`batch`; B and C are column slices of the x_proj output [batch, dt_rank + 2 dstate]. An index equal
to the null id marks a padded batch entry: its state is neither read (zero is used) nor written;
vLLM 0.33 uses block 0 (NULL_BLOCK_ID), 0.11 used PAD_SLOT_ID -1.

Shapes: AI21-Jamba-1.5-Mini (sdk/models/configs/jamba.json): hidden 4096, mamba_expand 2 -> 8192
channels, mamba_d_state 16, mamba_dt_rank 256.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from sdk.conformance.kernels.mamba_ssd import _softplus
from sdk.conformance.spec import Case, KernelSpec, Tolerance, register

NULL_BLOCK_ID = 0


@triton.jit
def _mamba1_state_update_kernel(state_ptr, x_ptr, dt_ptr, dt_bias_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr,
                                out_ptr, idx_ptr, null_id, dim, dstate,
                                stride_s_slot, stride_s_dim, stride_x_b, stride_x_d, stride_dt_b, stride_dt_d,
                                stride_a_d, stride_bc_b, stride_z_b, stride_z_d, stride_o_b, stride_o_d,
                                DT_SOFTPLUS: tl.constexpr, HAS_DT_BIAS: tl.constexpr, HAS_D: tl.constexpr,
                                HAS_Z: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    b = tl.program_id(1).to(tl.int64)
    n = tl.arange(0, BLOCK_N)
    mmask = m < dim
    nmask = n < dstate
    slot = tl.load(idx_ptr + b).to(tl.int64)
    live = slot != null_id
    tile = mmask[:, None] & nmask[None, :]
    s_ptrs = state_ptr + slot * stride_s_slot + m[:, None] * stride_s_dim + n[None, :]
    s = tl.load(s_ptrs, mask=tile & live, other=0.0).to(tl.float32)

    x = tl.load(x_ptr + b * stride_x_b + m * stride_x_d, mask=mmask, other=0.0).to(tl.float32)
    dt = tl.load(dt_ptr + b * stride_dt_b + m * stride_dt_d, mask=mmask, other=0.0).to(tl.float32)
    if HAS_DT_BIAS:
        dt += tl.load(dt_bias_ptr + m, mask=mmask, other=0.0).to(tl.float32)
    if DT_SOFTPLUS:
        dt = _softplus(dt)
    A = tl.load(A_ptr + m[:, None] * stride_a_d + n[None, :], mask=tile, other=0.0).to(tl.float32)
    Bv = tl.load(B_ptr + b * stride_bc_b + n, mask=nmask, other=0.0).to(tl.float32)
    Cv = tl.load(C_ptr + b * stride_bc_b + n, mask=nmask, other=0.0).to(tl.float32)
    s = s * tl.exp(A * dt[:, None]) + (dt * x)[:, None] * Bv[None, :]
    y = tl.sum(s * Cv[None, :], axis=1)
    if HAS_D:
        y += x * tl.load(D_ptr + m, mask=mmask, other=0.0).to(tl.float32)
    if HAS_Z:
        z = tl.load(z_ptr + b * stride_z_b + m * stride_z_d, mask=mmask, other=0.0).to(tl.float32)
        y *= z * tl.sigmoid(z)
    tl.store(out_ptr + b * stride_o_b + m * stride_o_d, y.to(out_ptr.dtype.element_ty), mask=mmask)
    tl.store(s_ptrs, s.to(state_ptr.dtype.element_ty), mask=tile & live)


def mamba1_selective_state_update(state, x, dt, A, B, C, D, dt_bias, z, out, state_batch_indices,
                                  dt_softplus: bool = True, null_block_id: int = NULL_BLOCK_ID) -> None:
    """One Mamba-1 decode step: state [slots, dim, dstate] updated in place at state_batch_indices,
    out [batch, dim]. x, dt, z, out may be strided views; state, A, B and C have unit stride over
    dstate. D, dt_bias, z may be None."""
    batch, dim = x.shape
    dstate = state.shape[2]
    if state.stride(2) != 1 or A.stride(1) != 1 or B.stride(1) != 1 or C.stride(1) != 1:
        raise ValueError("state, A, B and C need unit stride over dstate")
    if B.stride(0) != C.stride(0):
        raise ValueError("B and C must share their row stride (slices of one projection)")
    block_n = max(16, triton.next_power_of_2(dstate))
    block_m = max(4, min(64, 1024 // block_n))          # a [channels x dstate] state tile in registers
    _mamba1_state_update_kernel[(triton.cdiv(dim, block_m), batch)](
        state, x, dt, dt_bias if dt_bias is not None else A, A, B, C, D if D is not None else A,
        z if z is not None else x, out, state_batch_indices, null_block_id, dim, dstate,
        state.stride(0), state.stride(1), x.stride(0), x.stride(1), dt.stride(0), dt.stride(1), A.stride(0),
        B.stride(0), z.stride(0) if z is not None else 0, z.stride(1) if z is not None else 0,
        out.stride(0), out.stride(1),
        DT_SOFTPLUS=dt_softplus, HAS_DT_BIAS=dt_bias is not None, HAS_D=D is not None, HAS_Z=z is not None,
        BLOCK_M=block_m, BLOCK_N=block_n, num_warps=4)


def _channel_major(shape_bd, gen, dtype, scale=1.0):
    """A [batch, dim] view of a [dim, batch] tensor: how the mixer hands x, dt and z over."""
    batch, dim = shape_bd
    return (torch.randn((dim, batch), generator=gen) * scale).to(dtype).T


def _inputs(case, dtype, device, gen):
    p = case.params
    dim, N, batch, slots = p["dim"], p["dstate"], p["batch"], p["slots"]
    null = p.get("null_id", NULL_BLOCK_ID)
    # A = -exp(A_log) in [-16, -0.5], different for every (channel, state index)
    A = -torch.exp(torch.empty((dim, N)).uniform_(math.log(0.5), math.log(16.0), generator=gen))
    # dt_bias: the inverse softplus of a dt drawn log-uniformly in [1e-3, 1e-1] (Mamba's initialisation)
    dt0 = torch.exp(torch.empty(dim).uniform_(math.log(1e-3), math.log(1e-1), generator=gen))
    dt_bias = dt0 + torch.log(-torch.expm1(-dt0))
    first = 1 if null == 0 else 0                          # block 0 is the null block in vLLM 0.33
    idx = (torch.randperm(slots - first, generator=gen)[:batch] + first).to(torch.int32)
    for b in p.get("padded", ()):
        idx[b] = null
    proj = torch.randn((batch, p["dt_rank"] + 2 * N), generator=gen).to(dtype)   # x_proj output
    state_dtype = torch.float32 if p.get("state_fp32") else dtype
    t = {"state": (0.5 * torch.randn((slots, dim, N), generator=gen)).to(state_dtype),
         "x": _channel_major((batch, dim), gen, dtype), "dt": _channel_major((batch, dim), gen, dtype, 0.5),
         "A": A, "dt_bias": dt_bias.to(dtype), "D": (1.0 + 0.1 * torch.randn(dim, generator=gen)).to(dtype),
         "B": proj[:, p["dt_rank"]:p["dt_rank"] + N], "C": proj[:, p["dt_rank"] + N:],
         "z": _channel_major((batch, dim), gen, dtype, 2.0), "state_indices": idx,
         "out": torch.empty((dim, batch), dtype=dtype).T}
    return {k: v.to(device) for k, v in t.items()}


def _run(inp, case):
    mamba1_selective_state_update(inp["state"], inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], inp["D"],
                                  inp["dt_bias"], inp["z"], inp["out"], inp["state_indices"], dt_softplus=True,
                                  null_block_id=case.params.get("null_id", NULL_BLOCK_ID))


def _reference(inp, case):
    f = {k: v.cpu().double() for k, v in inp.items() if k not in ("state", "state_indices")}
    state = inp["state"].cpu().clone()
    idx = inp["state_indices"].cpu().long()
    live = idx != case.params.get("null_id", NULL_BLOCK_ID)
    s = torch.where(live[:, None, None], state[idx.clamp_min(0)].double(), 0.0)           # [batch, dim, N]
    dt = f["dt"] + f["dt_bias"]
    dt = torch.where(dt <= 20.0, torch.log1p(torch.exp(dt.clamp(max=20.0))), dt)          # softplus
    s = s * torch.exp(f["A"] * dt[..., None]) + (dt * f["x"])[..., None] * f["B"][:, None, :]
    y = (s * f["C"][:, None, :]).sum(-1) + f["D"] * f["x"]
    y = y * torch.nn.functional.silu(f["z"])
    state = state.double()
    state[idx[live]] = s[live]
    return {"out": y, "state": state}


_JAMBA = ("AI21-Jamba-1.5-Mini (sdk/models/configs/jamba.json): 8192 channels (hidden 4096 x mamba_expand 2), "
          "mamba_d_state 16, mamba_dt_rank 256")
_J = {"dim": 8192, "dstate": 16, "dt_rank": 256}
register(KernelSpec(
    name="mamba1_selective_state_update", group="mamba_ssd", models=("jamba",),
    cases=(
        Case("odd_B5_D100_N12_padded", {"batch": 5, "dim": 100, "dstate": 12, "dt_rank": 7, "slots": 9,
                                         "padded": (3,)},
             source="odd channel count and state size (masked tiles), one padded entry (null block 0)"),
        Case("jamba_scaled_B4_D512_pad_minus1", {"batch": 4, "dim": 512, "dstate": 16, "dt_rank": 16, "slots": 6,
                                                 "padded": (1,), "null_id": -1},
             source=_JAMBA + "; channels /16, dt_rank /16, padding marked -1 (vLLM 0.11's PAD_SLOT_ID)"),
        Case("jamba_scaled_B3_D256_fp32_state", {"batch": 3, "dim": 256, "dstate": 16, "dt_rank": 16, "slots": 5,
                                                 "state_fp32": True},
             source=_JAMBA + "; channels /32, fp32 SSM state cache (mamba_ssm_cache_dtype float32)"),
        Case("jamba_B128", {**_J, "batch": 128, "slots": 160, "padded": (7, 100)}, quick=False,
             source=_JAMBA + "; 128 decoding sequences, two padded entries"),
        Case("jamba_B256_fp32_state", {**_J, "batch": 256, "slots": 300, "state_fp32": True}, quick=False,
             source=_JAMBA + "; 256 decoding sequences, fp32 SSM state cache"),
    ),
    dtypes=("bf16", "fp16", "fp32"),
    make_inputs=_inputs, run=_run, reference=_reference,
    outputs=("out", "state"), inplace=("state",),
    tolerance={"bf16": Tolerance(atol=2e-2, rtol=1.6e-2), "fp16": Tolerance(atol=2e-3, rtol=2e-3),
               "fp32": Tolerance(atol=1e-5, rtol=1e-5)},
    # the state is written once from fp32 math: within one unit in the last place of its dtype
    output_tolerance={"state@bf16": Tolerance(atol=1e-6, rtol=2.0 ** -7),
                      "state@fp16": Tolerance(atol=1e-6, rtol=2.0 ** -10),
                      "state@fp32": Tolerance(atol=1e-6, rtol=1e-5)},
    description="Mamba-1 decode: per-channel dt = softplus(dt + bias), state = state * exp(A dt) + dt x B^T "
                "with A [dim, dstate], out = state C + D x, times silu(z); channel-major strided activations, "
                "padded entries skipped; state updated in place",
    triton_kernels=(_mamba1_state_update_kernel,),
    upstream="vllm: model_executor/layers/mamba/ops/mamba_ssm.py selective_state_update "
             "(_selective_scan_update_kernel, Mamba-1 layout: state [slots, dim, dstate], A [dim, dstate]), "
             "called by MambaMixer (mamba/mamba_mixer.py) for decode through ops/ssu_dispatch.py's Triton backend",
))
