"""Mamba-2 state-space layers: the SSD prefill chain over packed sequences, and the decode step.

Prefill (the chain vLLM drives as `mamba_chunk_scan_combined_varlen`, five kernels):
  x [T, H, P], dt [T, H], B / C [T, G, N] (heads h use group h // (H / G)), A [H] fp32 (negative),
  dt_bias [H], D [H], z [T, H, P] (optional gate), out [T, H, P].
  ssm_state [slots, H, P, N]: the state cache. Sequence b starts from ssm_state[state_indices[b]]
  when has_initial_state[b] (tokens of it were computed by an earlier step), from zero otherwise,
  and its final state is written back to that slot (the state passing kernel writes it).
  Chunk metadata (host side, as the serving stack's metadata builder makes it): logical chunks never
  cross a sequence, and chunk boundaries fall on multiples of chunk_size in each sequence's absolute
  positions, so a sequence that continues from computed tokens starts with a partial chunk.
  cu_chunk_seqlens [nchunks + 1], seq_idx [nchunks] (the sequence of each chunk),
  last_chunk_indices [batch].

  1. chunk cumsum: dt' = clamp(softplus(dt + dt_bias), dt_min, dt_max) (zero past a chunk's end),
     dA_cumsum = inclusive cumsum of A * dt' within the chunk; both [H, nchunks, chunk].
  2. chunk state: states[c] = sum_t x_t (B_t * exp(dA_cs_last - dA_cs_t) * dt'_t)^T   [nchunks, H, P, N]
  3. state passing: per sequence, s <- exp(dA_cs_last(c)) * s + states[c], from the initial state;
     the state after each chunk is kept (state dtype), the last one goes to the cache slot.
  4. bmm: CB[c, g] = C_chunk B_chunk^T (fp32)                                     [nchunks, G, chunk, chunk]
  5. chunk scan: y_i = exp(dA_cs_i) C_i s_prev + sum_{j<=i} CB_ij exp(dA_cs_i - dA_cs_j) dt'_j x_j
     + D x_i, times silu(z_i) when z is given; s_prev is the previous chunk's state of the same
     sequence or its initial state.
  Reference: the sequential recurrence s_t = exp(A dt'_t) s_{t-1} + dt'_t x_t B_t^T, y_t = s_t C_t
  + D x_t, token by token in fp64. Outputs and final states are judged by relative RMSE.

Decode (`selective_state_update`): one token per sequence, state [slots, H, P, N] updated in place at
  state_indices[b]; an index equal to the null block id (0) marks a padded batch entry: its state is
  neither read (zero is used) nor written, its output is still computed. dt, A, dt_bias, D are per
  head (the serving stack passes them broadcast over the head dim).

Shapes: Mamba-Codestral-7B (transformers' Mamba2Config): 128 heads x 64, state 128, 8 groups,
chunk 256. Nemotron-H (NemotronHConfig): 128 heads x 64, state 128, 8 groups, chunk 128, SSM cache
in fp32 (mamba_ssm_cache_dtype). Granite-4.0-H (GraniteMoeHybridConfig): 128 heads x 64, state 256,
1 group, chunk 256. Falcon-H1 (FalconH1Config defaults): 128 heads x 8 (mamba_d_ssm 1024), state 256,
1 group, chunk 256.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from sdk.conformance.spec import Case, KernelSpec, Tolerance, register

_MODELS = ("mamba2", "nemotron_h", "granite4_h", "falcon_h1")
_RMSE = {"bf16": Tolerance(rmse=8e-3), "fp16": Tolerance(rmse=2e-3), "fp32": Tolerance(rmse=1e-5)}
_NULL_BLOCK_ID = 0


@triton.jit
def _softplus(x):
    # log(1 + exp(x)) for x <= 20, x above; log1p by the (1 + u) - 1 correction, which stays
    # accurate where exp(x) is small (no log1p op needed)
    u = tl.exp(tl.minimum(x, 20.0))
    w = 1.0 + u
    d = w - 1.0
    l1p = tl.where(d == 0.0, u, tl.log(w) * (u / tl.where(d == 0.0, 1.0, d)))
    return tl.where(x <= 20.0, l1p, x)


# ------------------------------------------------------------------------------- 1. chunk cumsum
@triton.jit
def _ssd_chunk_cumsum_kernel(dt_ptr, A_ptr, dt_bias_ptr, dt_out_ptr, dA_cs_ptr, cu_chunk_ptr, nheads,
                             dt_min, dt_max, stride_dt_t, stride_dt_h, stride_o_h, stride_o_c,
                             CHUNK: tl.constexpr, DT_SOFTPLUS: tl.constexpr, HAS_DT_BIAS: tl.constexpr,
                             BLOCK_H: tl.constexpr):
    c = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    start = tl.load(cu_chunk_ptr + c).to(tl.int64)
    length = tl.load(cu_chunk_ptr + c + 1) - start
    t = tl.arange(0, CHUNK)
    hmask = h < nheads
    valid = hmask[:, None] & (t < length)[None, :]
    dt = tl.load(dt_ptr + (start + t)[None, :] * stride_dt_t + h[:, None] * stride_dt_h, mask=valid,
                 other=0.0).to(tl.float32)
    if HAS_DT_BIAS:
        dt += tl.load(dt_bias_ptr + h, mask=hmask, other=0.0).to(tl.float32)[:, None]
    if DT_SOFTPLUS:
        dt = _softplus(dt)
    dt = tl.minimum(tl.maximum(dt, dt_min), dt_max)
    dt = tl.where(valid, dt, 0.0)  # dA_cumsum stays flat past the chunk's end
    A = tl.load(A_ptr + h, mask=hmask, other=0.0).to(tl.float32)
    dA_cs = tl.cumsum(dt * A[:, None], axis=1)
    offs = h[:, None] * stride_o_h + c * stride_o_c + t[None, :]
    smask = hmask[:, None] & (t < CHUNK)[None, :]
    tl.store(dt_out_ptr + offs, dt, mask=smask)
    tl.store(dA_cs_ptr + offs, dA_cs, mask=smask)


# --------------------------------------------------------------------------------- 2. chunk state
@triton.jit
def _ssd_chunk_state_kernel(x_ptr, b_ptr, states_ptr, dt_ptr, dA_cs_ptr, cu_chunk_ptr, hdim, dstate,
                            heads_per_group, stride_x_t, stride_x_h, stride_b_t, stride_b_g,
                            stride_s_c, stride_s_h, stride_s_p, stride_d_h, stride_d_c,
                            BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_T: tl.constexpr,
                            PRECISION: tl.constexpr):
    n_tiles = tl.cdiv(dstate, BLOCK_N)
    pid_p = tl.program_id(0) // n_tiles
    pid_n = tl.program_id(0) % n_tiles
    c = tl.program_id(1).to(tl.int64)
    h = tl.program_id(2)
    start = tl.load(cu_chunk_ptr + c).to(tl.int64)
    length = tl.load(cu_chunk_ptr + c + 1) - start
    p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    t = tl.arange(0, BLOCK_T)
    x_base = x_ptr + start * stride_x_t + h * stride_x_h
    b_base = b_ptr + start * stride_b_t + (h // heads_per_group) * stride_b_g
    d_base = h * stride_d_h + c * stride_d_c
    dA_last = tl.load(dA_cs_ptr + d_base + length - 1)
    acc = tl.zeros((BLOCK_P, BLOCK_N), dtype=tl.float32)
    for t0 in range(0, length, BLOCK_T):
        tm = t0 + t < length
        xv = tl.load(x_base + (t0 + t)[None, :] * stride_x_t + p[:, None], mask=(p < hdim)[:, None] & tm[None, :],
                     other=0.0)
        bv = tl.load(b_base + (t0 + t)[:, None] * stride_b_t + n[None, :], mask=tm[:, None] & (n < dstate)[None, :],
                     other=0.0).to(tl.float32)
        dA = tl.load(dA_cs_ptr + d_base + t0 + t, mask=tm, other=0.0)
        dtv = tl.load(dt_ptr + d_base + t0 + t, mask=tm, other=0.0)
        scale = tl.exp(tl.minimum(dA_last - dA, 0.0)) * dtv
        acc += tl.dot(xv, (bv * scale[:, None]).to(xv.dtype), input_precision=PRECISION)
    out = states_ptr + c * stride_s_c + h * stride_s_h + p[:, None] * stride_s_p + n[None, :]
    tl.store(out, acc, mask=(p < hdim)[:, None] & (n < dstate)[None, :])


# ------------------------------------------------------------------------------ 3. state passing
@triton.jit
def _ssd_state_passing_kernel(states_ptr, out_ptr, dA_cs_ptr, init_ptr, last_chunk_ptr, final_ptr, final_idx_ptr,
                              dim, stride_s_c, stride_s_h, stride_o_c, stride_o_h, stride_d_h, stride_d_c,
                              stride_i_b, stride_i_h, stride_f_s, stride_f_h,
                              CHUNK: tl.constexpr, HAS_INIT: tl.constexpr, HAS_FINAL: tl.constexpr,
                              BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    b = tl.program_id(1)
    h = tl.program_id(2).to(tl.int64)
    mask = offs < dim
    c_end = tl.load(last_chunk_ptr + b) + 1
    c_begin = tl.load(last_chunk_ptr + b - 1, mask=b > 0, other=-1) + 1
    if HAS_INIT:
        s = tl.load(init_ptr + b.to(tl.int64) * stride_i_b + h * stride_i_h + offs, mask=mask, other=0.0).to(tl.float32)
    else:
        s = tl.zeros((BLOCK,), dtype=tl.float32)
    for c in range(c_begin, c_end):
        c64 = c.to(tl.int64)
        decay = tl.exp(tl.load(dA_cs_ptr + h * stride_d_h + c64 * stride_d_c + CHUNK - 1))
        s = decay * s + tl.load(states_ptr + c64 * stride_s_c + h * stride_s_h + offs, mask=mask, other=0.0)
        tl.store(out_ptr + c64 * stride_o_c + h * stride_o_h + offs, s.to(out_ptr.dtype.element_ty), mask=mask)
    if HAS_FINAL:
        slot = tl.load(final_idx_ptr + b).to(tl.int64)
        tl.store(final_ptr + slot * stride_f_s + h * stride_f_h + offs, s.to(final_ptr.dtype.element_ty), mask=mask)


# ------------------------------------------------------------------------------------------ 4. bmm
@triton.jit
def _ssd_bmm_chunk_kernel(c_ptr, b_ptr, cb_ptr, cu_chunk_ptr, dstate, stride_t, stride_g,
                          stride_cb_c, stride_cb_g, stride_cb_m,
                          CHUNK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          BLOCK_K: tl.constexpr, PRECISION: tl.constexpr):
    n_tiles: tl.constexpr = CHUNK // BLOCK_N
    pid_m = tl.program_id(0) // n_tiles
    pid_n = tl.program_id(0) % n_tiles
    c = tl.program_id(1).to(tl.int64)
    g = tl.program_id(2)
    start = tl.load(cu_chunk_ptr + c).to(tl.int64)
    length = tl.load(cu_chunk_ptr + c + 1) - start
    i = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    j = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    k = tl.arange(0, BLOCK_K)
    base = start * stride_t + g * stride_g
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # tiles wholly above the diagonal are never read by the scan (j > i): left zero
    k_end = tl.where(pid_n * BLOCK_N <= pid_m * BLOCK_M + BLOCK_M - 1, dstate, 0)
    for k0 in range(0, k_end, BLOCK_K):
        km = k0 + k < dstate
        cv = tl.load(c_ptr + base + i[:, None] * stride_t + (k0 + k)[None, :], mask=(i < length)[:, None] & km[None, :],
                     other=0.0)
        bv = tl.load(b_ptr + base + j[None, :] * stride_t + (k0 + k)[:, None], mask=km[:, None] & (j < length)[None, :],
                     other=0.0)
        acc += tl.dot(cv, bv, input_precision=PRECISION)
    tl.store(cb_ptr + c * stride_cb_c + g * stride_cb_g + i[:, None] * stride_cb_m + j[None, :], acc)


# ------------------------------------------------------------------------------------ 5. chunk scan
@triton.jit
def _ssd_chunk_scan_kernel(cb_ptr, x_ptr, z_ptr, out_ptr, dt_ptr, dA_cs_ptr, seq_idx_ptr, c_ptr, states_ptr,
                           D_ptr, init_ptr, cu_chunk_ptr, hdim, dstate, heads_per_group,
                           stride_cb_c, stride_cb_g, stride_cb_m, stride_x_t, stride_x_h,
                           stride_z_t, stride_z_h, stride_o_t, stride_o_h, stride_d_h, stride_d_c,
                           stride_c_t, stride_c_g, stride_s_c, stride_s_h, stride_s_p,
                           stride_i_b, stride_i_h, stride_i_p,
                           HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_INIT: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_K: tl.constexpr,
                           BLOCK_DS: tl.constexpr, PRECISION: tl.constexpr):
    p_tiles = tl.cdiv(hdim, BLOCK_P)
    pid_m = tl.program_id(0) // p_tiles
    pid_p = tl.program_id(0) % p_tiles
    c = tl.program_id(1).to(tl.int64)
    h = tl.program_id(2)
    g = h // heads_per_group
    start = tl.load(cu_chunk_ptr + c).to(tl.int64)
    length = tl.load(cu_chunk_ptr + c + 1) - start
    if pid_m * BLOCK_M >= length:
        return
    i = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    p = tl.arange(0, BLOCK_P) + pid_p * BLOCK_P
    imask = i < length
    pmask = p < hdim
    d_base = h * stride_d_h + c * stride_d_c
    dA_i = tl.load(dA_cs_ptr + d_base + i, mask=imask, other=0.0)

    # the state entering this chunk: the previous chunk's, or the sequence's initial state
    seq = tl.load(seq_idx_ptr + c)
    seq_prev = tl.load(seq_idx_ptr + c - 1, mask=c > 0, other=-1)
    first = seq != seq_prev
    acc = tl.zeros((BLOCK_M, BLOCK_P), dtype=tl.float32)
    if HAS_INIT:
        use_prev = True
    else:
        use_prev = seq == seq_prev  # a sequence without an initial state starts from zero
    if use_prev:
        if first:
            s_base = init_ptr + seq.to(tl.int64) * stride_i_b + h * stride_i_h
            s_stride_p = stride_i_p
        else:
            s_base = states_ptr + (c - 1) * stride_s_c + h * stride_s_h
            s_stride_p = stride_s_p
        n = tl.arange(0, BLOCK_DS)
        c_base = c_ptr + start * stride_c_t + g * stride_c_g
        for n0 in range(0, dstate, BLOCK_DS):
            nm = n0 + n < dstate
            cv = tl.load(c_base + i[:, None] * stride_c_t + (n0 + n)[None, :], mask=imask[:, None] & nm[None, :],
                         other=0.0)
            sv = tl.load(s_base + p[None, :] * s_stride_p + (n0 + n)[:, None], mask=nm[:, None] & pmask[None, :],
                         other=0.0)
            acc += tl.dot(cv, sv.to(cv.dtype), input_precision=PRECISION)
        acc *= tl.exp(dA_i)[:, None]

    # the intra-chunk (diagonal block) term, causal
    k = tl.arange(0, BLOCK_K)
    x_base = x_ptr + start * stride_x_t + h * stride_x_h
    cb_base = cb_ptr + c * stride_cb_c + g * stride_cb_g
    k_end = tl.minimum(pid_m * BLOCK_M + BLOCK_M, length)
    for k0 in range(0, k_end, BLOCK_K):
        km = k0 + k < length
        cb = tl.load(cb_base + i[:, None] * stride_cb_m + (k0 + k)[None, :], mask=imask[:, None] & km[None, :],
                     other=0.0)
        dA_k = tl.load(dA_cs_ptr + d_base + k0 + k, mask=km, other=0.0)
        dt_k = tl.load(dt_ptr + d_base + k0 + k, mask=km, other=0.0)
        w = cb * tl.exp(tl.minimum(dA_i[:, None] - dA_k[None, :], 0.0)) * dt_k[None, :]
        w = tl.where(i[:, None] >= (k0 + k)[None, :], w, 0.0)
        xv = tl.load(x_base + (k0 + k)[:, None] * stride_x_t + p[None, :], mask=km[:, None] & pmask[None, :],
                     other=0.0)
        acc += tl.dot(w.to(xv.dtype), xv, input_precision=PRECISION)

    omask = imask[:, None] & pmask[None, :]
    if HAS_D:
        xi = tl.load(x_base + i[:, None] * stride_x_t + p[None, :], mask=omask, other=0.0).to(tl.float32)
        acc += xi * tl.load(D_ptr + h).to(tl.float32)
    if HAS_Z:
        zv = tl.load(z_ptr + (start + i)[:, None] * stride_z_t + h * stride_z_h + p[None, :], mask=omask,
                     other=0.0).to(tl.float32)
        acc *= zv * tl.sigmoid(zv)
    tl.store(out_ptr + (start + i)[:, None] * stride_o_t + h * stride_o_h + p[None, :],
             acc.to(out_ptr.dtype.element_ty), mask=omask)


# ------------------------------------------------------------------------------------ host side
def chunk_metadata(seqlens, computed, chunk: int, packed: bool = False):
    """cu_chunk_seqlens, seq_idx and last_chunk_indices as the serving stack's metadata builder makes
    them: chunks of one sequence only, ending on multiples of `chunk` in absolute positions (a
    sequence resuming at a position that is not a multiple starts with the rest of that chunk).
    `packed`: ending on multiples of `chunk` of the packed token stream instead, split at sequence
    boundaries (vLLM's compute_varlen_chunk_metadata); the kernels take either."""
    cu, seq_idx, last = [0], [], []
    for b, (n, done) in enumerate(zip(seqlens, computed)):
        pos = cu[-1] if packed else done
        while n > 0:
            take = min(chunk - pos % chunk, n)
            seq_idx.append(b)
            cu.append(cu[-1] + take)
            pos += take
            n -= take
        last.append(len(seq_idx) - 1)
    return cu, seq_idx, last


def _precision(dtype: torch.dtype):
    """fp32 inputs: full-precision dot products (the fp32 cases check the math, not TF32)."""
    return "ieee" if dtype == torch.float32 else None


def _tile(dtype: torch.dtype) -> int:
    """fp32 dots run on FMA units: smaller tiles, no spills."""
    return 32 if dtype == torch.float32 else 64


def ssd_chunk_cumsum(dt, A, dt_bias, cu_chunk_seqlens, chunk_size, dt_out, dA_cs, dt_softplus=True,
                     dt_limit=(0.0, float("inf"))):
    """Stage 1: dt' and the within-chunk cumsum of A dt' of every chunk, into dt_out and dA_cs
    [H, nchunks, chunk_size] (fp32)."""
    H = dt.shape[1]
    nchunks = cu_chunk_seqlens.shape[0] - 1
    block_h = max(1, min(triton.next_power_of_2(H), 4096 // chunk_size))
    _ssd_chunk_cumsum_kernel[(nchunks, triton.cdiv(H, block_h))](
        dt, A, dt_bias if dt_bias is not None else A, dt_out, dA_cs, cu_chunk_seqlens, H,
        float(dt_limit[0]), float(dt_limit[1]), dt.stride(0), dt.stride(1), dt_out.stride(0), dt_out.stride(1),
        CHUNK=chunk_size, DT_SOFTPLUS=dt_softplus, HAS_DT_BIAS=dt_bias is not None, BLOCK_H=block_h, num_warps=4)


def ssd_chunk_state(x, B, dt_out, dA_cs, cu_chunk_seqlens, states):
    """Stage 2: each chunk's own contribution to the state, into states [nchunks, H, P, N] (fp32)."""
    _, H, P = x.shape
    G, N = B.shape[1], B.shape[2]
    nchunks = cu_chunk_seqlens.shape[0] - 1
    tile = _tile(x.dtype)
    bp, bn, bt = max(16, min(tile, triton.next_power_of_2(P))), max(16, min(tile, triton.next_power_of_2(N))), \
        max(16, min(32, dA_cs.shape[2]))
    _ssd_chunk_state_kernel[(triton.cdiv(P, bp) * triton.cdiv(N, bn), nchunks, H)](
        x, B, states, dt_out, dA_cs, cu_chunk_seqlens, P, N, H // G, x.stride(0), x.stride(1),
        B.stride(0), B.stride(1), states.stride(0), states.stride(1), states.stride(2),
        dt_out.stride(0), dt_out.stride(1), BLOCK_P=bp, BLOCK_N=bn, BLOCK_T=bt, PRECISION=_precision(x.dtype),
        num_warps=4, num_stages=2)


def ssd_state_passing(states, dA_cs, last_chunk_indices, out, initial_states=None, final_states_out=None,
                      final_state_indices=None):
    """Stage 3: the state after every chunk of each sequence, into out [nchunks, H, P, N] (the state
    dtype), from initial_states [batch, H, P, N] (zero when None); when given, each sequence's final
    state to final_states_out[final_state_indices[b]] ([slots, H, P, N], in place)."""
    nchunks, H, P, N = states.shape
    batch = last_chunk_indices.shape[0]
    flat = states.view(nchunks, H, P * N)
    passed = out.view(nchunks, H, P * N)
    init = initial_states.reshape(batch, H, P * N) if initial_states is not None else None
    final = final_states_out.view(final_states_out.shape[0], H, P * N) if final_states_out is not None else None
    block = min(1024, triton.next_power_of_2(P * N))
    _ssd_state_passing_kernel[(triton.cdiv(P * N, block), batch, H)](
        flat, passed, dA_cs, init if init is not None else flat, last_chunk_indices,
        final if final is not None else flat, final_state_indices if final is not None else last_chunk_indices,
        P * N, flat.stride(0), flat.stride(1), passed.stride(0), passed.stride(1),
        dA_cs.stride(0), dA_cs.stride(1), init.stride(0) if init is not None else 0,
        init.stride(1) if init is not None else 0, final.stride(0) if final is not None else 0,
        final.stride(1) if final is not None else 0,
        CHUNK=dA_cs.shape[2], HAS_INIT=init is not None, HAS_FINAL=final is not None, BLOCK=block, num_warps=4)


def ssd_bmm_chunk(C, B, cu_chunk_seqlens, cb):
    """Stage 4: C_chunk B_chunk^T per chunk and group, into cb [nchunks, G, chunk, chunk] (fp32);
    only the entries j <= i < chunk length are read by the scan."""
    nchunks, G, chunk_size = cb.shape[0], cb.shape[1], cb.shape[2]
    N = B.shape[2]
    bm = min(_tile(C.dtype), chunk_size)
    bk = max(16, min(32, triton.next_power_of_2(N)))
    _ssd_bmm_chunk_kernel[((chunk_size // bm) ** 2, nchunks, G)](
        C, B, cb, cu_chunk_seqlens, N, C.stride(0), C.stride(1), cb.stride(0), cb.stride(1), cb.stride(2),
        CHUNK=chunk_size, BLOCK_M=bm, BLOCK_N=bm, BLOCK_K=bk, PRECISION=_precision(C.dtype), num_warps=4,
        num_stages=2)


def ssd_chunk_scan(cb, x, dt_out, dA_cs, seq_idx, C, states, cu_chunk_seqlens, out, D=None, z=None,
                   initial_states=None):
    """Stage 5: y = the incoming state's term + the causal intra-chunk term + D x (times silu(z)),
    into out [T, H, P]; states [nchunks, H, P, N] are stage 3's (the state after each chunk)."""
    _, H, P = x.shape
    G, N = C.shape[1], C.shape[2]
    nchunks, chunk_size = cb.shape[0], cb.shape[2]
    tile = _tile(x.dtype)
    sm = min(tile, chunk_size)
    sp = max(16, min(tile, triton.next_power_of_2(P)))
    sk = max(16, min(32, chunk_size))
    sds = max(16, min(tile, triton.next_power_of_2(N)))
    _ssd_chunk_scan_kernel[(triton.cdiv(chunk_size, sm) * triton.cdiv(P, sp), nchunks, H)](
        cb, x, z if z is not None else x, out, dt_out, dA_cs, seq_idx, C, states,
        D if D is not None else dt_out, initial_states if initial_states is not None else states, cu_chunk_seqlens,
        P, N, H // G, cb.stride(0), cb.stride(1), cb.stride(2), x.stride(0), x.stride(1),
        z.stride(0) if z is not None else 0, z.stride(1) if z is not None else 0, out.stride(0), out.stride(1),
        dt_out.stride(0), dt_out.stride(1), C.stride(0), C.stride(1),
        states.stride(0), states.stride(1), states.stride(2),
        initial_states.stride(0) if initial_states is not None else 0,
        initial_states.stride(1) if initial_states is not None else 0,
        initial_states.stride(2) if initial_states is not None else 0,
        HAS_D=D is not None, HAS_Z=z is not None, HAS_INIT=initial_states is not None,
        BLOCK_M=sm, BLOCK_P=sp, BLOCK_K=sk, BLOCK_DS=sds, PRECISION=_precision(x.dtype), num_warps=4, num_stages=2)


def mamba_chunk_scan_combined_varlen(x, dt, A, B, C, chunk_size, cu_chunk_seqlens, last_chunk_indices, seq_idx,
                                     out, D=None, z=None, dt_bias=None, initial_states=None, dt_softplus=True,
                                     dt_limit=(0.0, float("inf")), state_dtype=None, final_states_out=None,
                                     final_state_indices=None):
    """The five-kernel SSD prefill chain; writes `out` and, when given, each sequence's final state
    to final_states_out[final_state_indices[b]]."""
    T, H, P = x.shape
    G, N = B.shape[1], B.shape[2]
    nchunks = cu_chunk_seqlens.shape[0] - 1
    dev = x.device
    dt_out = torch.empty((H, nchunks, chunk_size), dtype=torch.float32, device=dev)
    dA_cs = torch.empty((H, nchunks, chunk_size), dtype=torch.float32, device=dev)
    ssd_chunk_cumsum(dt, A, dt_bias, cu_chunk_seqlens, chunk_size, dt_out, dA_cs, dt_softplus, dt_limit)
    states = torch.empty((nchunks, H, P, N), dtype=torch.float32, device=dev)
    ssd_chunk_state(x, B, dt_out, dA_cs, cu_chunk_seqlens, states)
    passed = torch.empty((nchunks, H, P, N), dtype=state_dtype or C.dtype, device=dev)
    ssd_state_passing(states, dA_cs, last_chunk_indices, passed, initial_states, final_states_out,
                      final_state_indices)
    cb = torch.empty((nchunks, G, chunk_size, chunk_size), dtype=torch.float32, device=dev)
    ssd_bmm_chunk(C, B, cu_chunk_seqlens, cb)
    ssd_chunk_scan(cb, x, dt_out, dA_cs, seq_idx, C, passed, cu_chunk_seqlens, out, D, z, initial_states)


def _state_dtype(p, dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if p.get("state_fp32") else dtype


def _ssm_params(H: int, gen: torch.Generator, dtype: torch.dtype):
    """A = -exp(A_log) in [-16, -1] (fp32, as the serving stack keeps it); dt_bias the inverse
    softplus of a dt drawn log-uniformly in [1e-3, 1e-1] (Mamba-2's initialisation); D near 1."""
    A = -torch.exp(torch.empty(H).uniform_(0.0, math.log(16.0), generator=gen))
    dt0 = torch.exp(torch.empty(H).uniform_(math.log(1e-3), math.log(1e-1), generator=gen))
    dt_bias = (dt0 + torch.log(-torch.expm1(-dt0))).to(dtype)
    D = (1.0 + 0.2 * torch.randn(H, generator=gen)).to(dtype)
    return A.float(), dt_bias, D


def _ssd_inputs(case, dtype, device, gen):
    p = case.params
    H, P, N, G, Q = p["heads"], p["head_dim"], p["state"], p["groups"], p["chunk"]
    lens, done = list(p["seqlens"]), list(p["computed"])
    T, batch, slots = sum(lens), len(lens), p["slots"]
    A, dt_bias, D = _ssm_params(H, gen, dtype)
    x = torch.randn((T, H, P), generator=gen).to(dtype)
    dt = (0.5 * torch.randn((T, H), generator=gen)).to(dtype)
    Bm = torch.randn((T, G, N), generator=gen).to(dtype)
    Cm = torch.randn((T, G, N), generator=gen).to(dtype)
    z = torch.randn((T, H, P), generator=gen).to(dtype) if p.get("z") else None
    ssm_state = (0.5 * torch.randn((slots, H, P, N), generator=gen)).to(_state_dtype(p, dtype))
    state_indices = (torch.randperm(slots - 1, generator=gen)[:batch] + 1).to(torch.int32)  # slot 0: null block
    cu, seq_idx, last = chunk_metadata(lens, done, Q, packed=p.get("packed_chunks", False))
    cu_seqlens = torch.tensor([0] + lens, dtype=torch.int32).cumsum(0).to(torch.int32)
    out = torch.empty((T, H, P), dtype=dtype)
    t = {"x": x, "dt": dt, "A": A, "B": Bm, "C": Cm, "D": D, "dt_bias": dt_bias, "z": z,
         "ssm_state": ssm_state, "state_indices": state_indices,
         "has_initial_state": torch.tensor([d > 0 for d in done]),
         "cu_seqlens": cu_seqlens, "cu_chunk_seqlens": torch.tensor(cu, dtype=torch.int32),
         "seq_idx": torch.tensor(seq_idx, dtype=torch.int32), "last_chunk_indices": torch.tensor(last, dtype=torch.int32),
         "out": out}
    t = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in t.items()}
    if p.get("xbc_view"):  # x, B, C as column slices of the conv output row [T, H*P + 2*G*N], as served
        xbc = torch.cat([t["x"].reshape(T, -1), t["B"].reshape(T, -1), t["C"].reshape(T, -1)], dim=1)
        t["x"] = xbc[:, :H * P].view(T, H, P)
        t["B"] = xbc[:, H * P:H * P + G * N].view(T, G, N)
        t["C"] = xbc[:, H * P + G * N:].view(T, G, N)
    return t


def _ssd_run(inp, case):
    """As the Mamba-2 mixer runs prefill: gather the initial states of the sequences that have one
    (zeros for the others), run the chain, final states straight into the cache slots."""
    p = case.params
    st, idx = inp["ssm_state"], inp["state_indices"]
    initial = torch.where(inp["has_initial_state"][:, None, None, None], st[idx.long()], 0)
    mamba_chunk_scan_combined_varlen(
        inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], p["chunk"], inp["cu_chunk_seqlens"],
        inp["last_chunk_indices"], inp["seq_idx"], inp["out"], D=inp["D"], z=inp["z"], dt_bias=inp["dt_bias"],
        initial_states=initial, dt_softplus=True, dt_limit=p.get("dt_limit", (0.0, float("inf"))),
        state_dtype=st.dtype, final_states_out=st, final_state_indices=idx)


def _softplus_ref(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x <= 20.0, torch.log1p(torch.exp(torch.clamp(x, max=20.0))), x)


class _one_thread:
    """torch on one thread while the fp64 recurrences run: their steps are small ops, which slow down
    by an order of magnitude when several workers' thread pools share the cores."""

    def __enter__(self):
        self.n = torch.get_num_threads()
        torch.set_num_threads(1)

    def __exit__(self, *exc):
        torch.set_num_threads(self.n)


def _ssd_ref(inp, case):
    """Token by token in fp64: s_t = exp(A dt_t) s_{t-1} + dt_t x_t B_t^T, y_t = s_t C_t + D x_t (times
    silu(z_t)). The recurrence runs over a few heads at a time so that their states stay in cache."""
    with _one_thread():
        return _ssd_recurrence(inp, case)


def _ssd_recurrence(inp, case):
    p = case.params
    H, G, P, N = p["heads"], p["groups"], p["head_dim"], p["state"]
    lo, hi = p.get("dt_limit", (0.0, float("inf")))
    f = {k: (v.cpu().double() if isinstance(v, torch.Tensor) else v) for k, v in inp.items()}
    head_group = torch.arange(H) // (H // G)
    state = inp["ssm_state"].cpu().double().clone()
    dt_all = torch.clamp(_softplus_ref(f["dt"] + f["dt_bias"]), lo, hi)                        # [T, H]
    decay_all = torch.exp(f["A"] * dt_all)
    u_all = dt_all[:, :, None] * f["x"]                                                         # [T, H, P]
    B_all, C_all = f["B"][:, head_group], f["C"][:, head_group]                                 # [T, H, N]
    y = torch.empty_like(f["x"])
    hb = max(1, min(H, (1 << 16) // (P * N)))
    cu = inp["cu_seqlens"].cpu().tolist()
    for b in range(len(cu) - 1):
        slot = int(inp["state_indices"][b])
        init = bool(inp["has_initial_state"][b])
        for h0 in range(0, H, hb):
            hs = slice(h0, min(H, h0 + hb))
            s = state[slot, hs].clone() if init else torch.zeros_like(state[slot, hs])
            for t in range(cu[b], cu[b + 1]):
                s.mul_(decay_all[t, hs, None, None])
                s.baddbmm_(u_all[t, hs, :, None], B_all[t, hs, None, :])
                y[t, hs] = torch.bmm(s, C_all[t, hs, :, None])[:, :, 0]
            state[slot, hs] = s
    y += f["D"][:, None] * f["x"]
    if f["z"] is not None:
        y *= torch.nn.functional.silu(f["z"])
    return {"out": y, "ssm_state": state}


_CODESTRAL = {"heads": 128, "head_dim": 64, "state": 128, "groups": 8}
_SRC_CODESTRAL = "Mamba-Codestral-7B (transformers Mamba2Config): 128 heads x 64, state 128, 8 groups, chunk 256"
_SRC_NEMOTRON = "Nemotron-H (transformers NemotronHConfig): 128 heads x 64, state 128, 8 groups, chunk 128, fp32 SSM cache"
_SRC_GRANITE = "Granite-4.0-H (transformers GraniteMoeHybridConfig): 128 heads x 64, state 256, 1 group, chunk 256"
_SRC_FALCON = "Falcon-H1 (transformers FalconH1Config): 128 heads x 8 (mamba_d_ssm 1024), state 256, 1 group, chunk 256"
_FULL_LENS = {"seqlens": (1200, 517, 300, 31), "computed": (0, 700, 0, 256), "slots": 16}

register(KernelSpec(
    name="mamba2_ssd_prefill", group="mamba_ssd", models=_MODELS,
    cases=(
        Case("odd_H6_P12_N20_G3_chunk16", {"heads": 6, "head_dim": 12, "state": 20, "groups": 3, "chunk": 16,
                                           "seqlens": (37, 5, 1, 20), "computed": (10, 0, 3, 0), "slots": 7,
                                           "z": True},
             source="odd head dim / state (masked tiles), 2 heads per group, sequences resuming mid-chunk, "
                    "shorter than a chunk and of one token; z gating"),
        Case("codestral_scaled_chunk32_dtlimit", {"heads": 8, "head_dim": 64, "state": 128, "groups": 2, "chunk": 32,
                                                  "seqlens": (70, 33), "computed": (0, 45), "slots": 5,
                                                  "dt_limit": (1e-3, 1e-1), "xbc_view": True},
             source=_SRC_CODESTRAL + "; heads /16, groups /4, chunk /8; dt clamped to [0.001, 0.1] "
                    "(Mamba2Config time_step_min/max); x, B, C strided views of the conv output"),
        Case("falcon_h1_scaled_P8_chunk32", {"heads": 4, "head_dim": 8, "state": 64, "groups": 1, "chunk": 32,
                                             "seqlens": (40, 9, 30), "computed": (31, 0, 5), "slots": 5,
                                             "state_fp32": True, "packed_chunks": True},
             source=_SRC_FALCON + "; heads /32, state /4, chunk /8, fp32 state cache; chunks cut at multiples "
                    "of 32 of the packed stream and at sequence boundaries"),
        Case("codestral_T2048", {**_CODESTRAL, "chunk": 256, **_FULL_LENS}, quick=False,
             source=_SRC_CODESTRAL + "; 4 sequences, 2048 new tokens, two resuming from cached states"),
        Case("nemotron_h_T2048", {**_CODESTRAL, "chunk": 128, **_FULL_LENS, "state_fp32": True}, quick=False,
             source=_SRC_NEMOTRON),
        Case("granite_4_h_T2048", {"heads": 128, "head_dim": 64, "state": 256, "groups": 1, "chunk": 256,
                                   **_FULL_LENS}, quick=False, source=_SRC_GRANITE),
        Case("falcon_h1_T2048", {"heads": 128, "head_dim": 8, "state": 256, "groups": 1, "chunk": 256,
                                 **_FULL_LENS}, quick=False, source=_SRC_FALCON),
    ),
    dtypes=("bf16", "fp16", "fp32"),
    make_inputs=_ssd_inputs, run=_ssd_run, reference=_ssd_ref,
    outputs=("out", "ssm_state"), inplace=("ssm_state",), tolerance=_RMSE,
    description="Mamba-2 SSD prefill over packed sequences (chunk cumsum with dt softplus/bias/limits, chunk "
                "states, state passing from cached initial states, C B^T, chunk scan with D and z), final "
                "states written to their cache slots; vs the token-by-token recurrence in fp64",
    triton_kernels=(_ssd_chunk_cumsum_kernel, _ssd_chunk_state_kernel, _ssd_state_passing_kernel,
                    _ssd_bmm_chunk_kernel, _ssd_chunk_scan_kernel),
    upstream="vllm: model_executor/layers/mamba/ops/ssd_combined.py mamba_chunk_scan_combined_varlen "
             "(_chunk_cumsum_fwd_kernel, _chunk_state_fwd_kernel in ssd_chunk_state.py; "
             "_state_passing_fwd_kernel in ssd_state_passing.py; _bmm_chunk_fwd_kernel in ssd_bmm.py; "
             "_chunk_scan_fwd_kernel in ssd_chunk_scan.py)",
))


# ----------------------------------------------------------------------------- decode: state update
@triton.jit
def _ssm_state_update_kernel(state_ptr, x_ptr, dt_ptr, dt_bias_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, out_ptr,
                             idx_ptr, null_block_id, hdim, dstate, heads_per_group,
                             stride_s_b, stride_s_h, stride_s_p, stride_x_b, stride_x_h, stride_dt_b,
                             stride_b_b, stride_b_g, stride_z_b, stride_z_h, stride_o_b, stride_o_h,
                             DT_SOFTPLUS: tl.constexpr, HAS_DT_BIAS: tl.constexpr, HAS_D: tl.constexpr,
                             HAS_Z: tl.constexpr, HAS_INDICES: tl.constexpr,
                             BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    b = tl.program_id(1).to(tl.int64)
    h = tl.program_id(2)
    g = h // heads_per_group
    n = tl.arange(0, BLOCK_N)
    pmask = p < hdim
    nmask = n < dstate
    if HAS_INDICES:
        slot = tl.load(idx_ptr + b).to(tl.int64)
        live = slot != null_block_id
    else:
        slot = b
        live = True
    smask = pmask[:, None] & nmask[None, :] & live
    s_ptrs = state_ptr + slot * stride_s_b + h * stride_s_h + p[:, None] * stride_s_p + n[None, :]
    s = tl.load(s_ptrs, mask=smask, other=0.0).to(tl.float32)

    dt = tl.load(dt_ptr + b * stride_dt_b + h).to(tl.float32)
    if HAS_DT_BIAS:
        dt += tl.load(dt_bias_ptr + h).to(tl.float32)
    if DT_SOFTPLUS:
        dt = _softplus(dt)
    dA = tl.exp(tl.load(A_ptr + h).to(tl.float32) * dt)
    x = tl.load(x_ptr + b * stride_x_b + h * stride_x_h + p, mask=pmask, other=0.0).to(tl.float32)
    Bv = tl.load(B_ptr + b * stride_b_b + g * stride_b_g + n, mask=nmask, other=0.0).to(tl.float32)
    Cv = tl.load(C_ptr + b * stride_b_b + g * stride_b_g + n, mask=nmask, other=0.0).to(tl.float32)
    s = s * dA + x[:, None] * (Bv * dt)[None, :]
    y = tl.sum(s * Cv[None, :], axis=1)
    if HAS_D:
        y += x * tl.load(D_ptr + h).to(tl.float32)
    if HAS_Z:
        zv = tl.load(z_ptr + b * stride_z_b + h * stride_z_h + p, mask=pmask, other=0.0).to(tl.float32)
        y *= zv * tl.sigmoid(zv)
    tl.store(out_ptr + b * stride_o_b + h * stride_o_h + p, y.to(out_ptr.dtype.element_ty), mask=pmask)
    tl.store(s_ptrs, s.to(state_ptr.dtype.element_ty), mask=smask)


def selective_state_update(state, x, dt, A, B, C, D, dt_bias, z=None, dt_softplus=True, state_batch_indices=None,
                           null_block_id=_NULL_BLOCK_ID, out=None):
    """One decode step for every sequence: state [slots, H, P, N] in place, out [batch, H, P].
    x [batch, H, P]; dt [batch, H]; A, D, dt_bias [H]; B, C [batch, G, N]; z [batch, H, P] or None."""
    batch, H, P = x.shape
    G, N = B.shape[1], B.shape[2]
    block_n = max(16, triton.next_power_of_2(N))
    block_p = max(1, min(triton.next_power_of_2(P), 4096 // block_n))  # [P-tile x N] state tile in registers
    _ssm_state_update_kernel[(triton.cdiv(P, block_p), batch, H)](
        state, x, dt, dt_bias if dt_bias is not None else A, A, B, C, D if D is not None else A,
        z if z is not None else x, out, state_batch_indices if state_batch_indices is not None else dt,
        null_block_id, P, N, H // G, state.stride(0), state.stride(1), state.stride(2), x.stride(0), x.stride(1),
        dt.stride(0), B.stride(0), B.stride(1), z.stride(0) if z is not None else 0,
        z.stride(1) if z is not None else 0, out.stride(0), out.stride(1),
        DT_SOFTPLUS=dt_softplus, HAS_DT_BIAS=dt_bias is not None, HAS_D=D is not None, HAS_Z=z is not None,
        HAS_INDICES=state_batch_indices is not None, BLOCK_P=block_p, BLOCK_N=block_n, num_warps=4)


def _ssu_inputs(case, dtype, device, gen):
    p = case.params
    H, P, N, G, batch, slots = p["heads"], p["head_dim"], p["state"], p["groups"], p["batch"], p["slots"]
    A, dt_bias, D = _ssm_params(H, gen, dtype)
    idx = (torch.randperm(slots - 1, generator=gen)[:batch] + 1).to(torch.int32)
    for b in p.get("padded", ()):
        idx[b] = _NULL_BLOCK_ID  # a padded batch entry (CUDA-graph batch padding)
    t = {"state": (0.5 * torch.randn((slots, H, P, N), generator=gen)).to(_state_dtype(p, dtype)),
         "x": torch.randn((batch, H, P), generator=gen).to(dtype),
         "dt": (0.5 * torch.randn((batch, H), generator=gen)).to(dtype), "A": A, "dt_bias": dt_bias, "D": D,
         "B": torch.randn((batch, G, N), generator=gen).to(dtype),
         "C": torch.randn((batch, G, N), generator=gen).to(dtype),
         "z": torch.randn((batch, H, P), generator=gen).to(dtype) if p.get("z", True) else None,
         "state_indices": idx, "out": torch.empty((batch, H, P), dtype=dtype)}
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in t.items()}


def _ssu_run(inp, case):
    selective_state_update(inp["state"], inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], inp["D"], inp["dt_bias"],
                           z=inp["z"], dt_softplus=True, state_batch_indices=inp["state_indices"], out=inp["out"])


def _ssu_ref(inp, case):
    H, G = case.params["heads"], case.params["groups"]
    # (the cache is widened only where the step reads and writes it, not all its slots)
    f = {k: (v.cpu().double() if isinstance(v, torch.Tensor) else v) for k, v in inp.items()
         if k not in ("state", "out")}
    state = inp["state"].cpu().clone()
    idx = inp["state_indices"].cpu().long()
    live = idx != _NULL_BLOCK_ID
    s = torch.where(live[:, None, None, None], state[idx].double(), 0.0)                      # [batch, H, P, N]
    head_group = torch.arange(H) // (H // G)
    dt = _softplus_ref(f["dt"] + f["dt_bias"])                                                   # [batch, H]
    Bt, Ct = f["B"][:, head_group], f["C"][:, head_group]                                        # [batch, H, N]
    s = s * torch.exp(f["A"] * dt)[:, :, None, None] + (dt[:, :, None] * f["x"])[..., None] * Bt[:, :, None, :]
    y = torch.einsum("bhpn,bhn->bhp", s, Ct) + f["D"][:, None] * f["x"]
    if f["z"] is not None:
        y = y * torch.nn.functional.silu(f["z"])
    state = state.double()
    state[idx[live]] = s[live]
    return {"out": y, "state": state}


_SSU_OUT = {"bf16": Tolerance(atol=2e-2, rtol=1.6e-2), "fp16": Tolerance(atol=2e-3, rtol=2e-3),
            "fp32": Tolerance(atol=1e-5, rtol=1e-5)}
# the state is written once from fp32 math: within one unit in the last place of the state's dtype
# (a bf16 or fp16 cache), or fp32 rounding (an fp32 cache)
_SSU_STATE = {"state@bf16": Tolerance(atol=1e-6, rtol=2.0 ** -7), "state@fp16": Tolerance(atol=1e-6, rtol=2.0 ** -10),
              "state@fp32": Tolerance(atol=1e-6, rtol=1e-5)}

register(KernelSpec(
    name="mamba2_selective_state_update", group="mamba_ssd", models=_MODELS,
    cases=(
        Case("odd_B5_H6_P12_N20_G3_padded", {"batch": 5, "heads": 6, "head_dim": 12, "state": 20, "groups": 3,
                                              "slots": 9, "padded": (3,)},
             source="odd head dim / state (masked tiles), 2 heads per group, one padded entry (null block)"),
        Case("codestral_scaled_B4_H8", {"batch": 4, "heads": 8, "head_dim": 64, "state": 128, "groups": 2,
                                        "slots": 6, "z": False},
             source=_SRC_CODESTRAL + "; heads /16, groups /4; no z (the mixer gates in its norm)"),
        Case("nemotron_h_scaled_B3_fp32_state", {"batch": 3, "heads": 4, "head_dim": 64, "state": 128, "groups": 1,
                                                 "slots": 5, "state_fp32": True, "padded": (0,)},
             source=_SRC_NEMOTRON + "; heads /32, fp32 state cache, one padded entry"),
        Case("codestral_B128", {**_CODESTRAL, "batch": 128, "slots": 160, "padded": (5, 77)}, quick=False,
             source=_SRC_CODESTRAL + "; 128 decoding sequences, two padded entries"),
        Case("nemotron_h_B64", {**_CODESTRAL, "batch": 64, "slots": 96, "state_fp32": True}, quick=False,
             source=_SRC_NEMOTRON),
        Case("granite_4_h_B64", {"heads": 128, "head_dim": 64, "state": 256, "groups": 1, "batch": 64, "slots": 96},
             quick=False, source=_SRC_GRANITE),
        Case("falcon_h1_B64", {"heads": 128, "head_dim": 8, "state": 256, "groups": 1, "batch": 64, "slots": 96},
             quick=False, source=_SRC_FALCON),
    ),
    dtypes=("bf16", "fp16", "fp32"),
    make_inputs=_ssu_inputs, run=_ssu_run, reference=_ssu_ref,
    outputs=("out", "state"), inplace=("state",), tolerance=_SSU_OUT, output_tolerance=_SSU_STATE,
    description="Mamba-2 decode: dt = softplus(dt + bias), state = state * exp(A dt) + dt B x (grouped B/C), "
                "out = C state + D x, times silu(z); cache slots per sequence, padded entries skipped; state "
                "updated in place",
    triton_kernels=(_ssm_state_update_kernel,),
    upstream="vllm: model_executor/layers/mamba/ops/mamba_ssm.py selective_state_update "
             "(_selective_scan_update_kernel)",
))
