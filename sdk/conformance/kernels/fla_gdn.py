"""Gated DeltaNet chunked prefill (chunk size 64), stage by stage as flash-linear-attention runs it.

Layout (Qwen3-Next linear attention): q, k [B, T, H, K]; v [B, T, HV, V] with HV = value heads, a
multiple of the key heads H (each key head serves HV // H value heads); gates g and beta [B, T, HV].
Pipeline: g <- chunk-local cumsum(g); A = beta K K^T * exp(g_i - g_j) (strictly lower);
Ai = (I + A)^-1; w = Ai (beta k exp(g)), u = Ai (beta v); state recurrence over chunks gives
h (state entering each chunk), v_new = u - w h and the final state; o = scale (q h exp(g) +
causal intra-chunk (q k^T decay) v_new).
Each stage is its own kernel and spec; make_inputs builds that stage's inputs from a float64
PyTorch run of the earlier stages on realistic data (normalised q/k, gates from the model's gating).
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from sdk.conformance.spec import Case, KernelSpec, Tolerance, register

BT = 64  # chunk size
MODELS = ("qwen3_5", "qwen3_next")
SRC = "Qwen3-Next-80B-A3B linear attention: 16 key heads, 32 value heads, head dim 128"


def _prec(x: torch.Tensor) -> str:
    return "ieee" if x.dtype == torch.float32 else "tf32"


# ----------------------------------------------------------------------------------------- kernels
@triton.jit
def gdn_chunk_cumsum_kernel(g, g_out, T, HV: tl.constexpr, BT: tl.constexpr, BH: tl.constexpr):
    i_t, i_b = tl.program_id(0), tl.program_id(1)
    o_t = i_t * BT + tl.arange(0, BT)
    o_h = tl.arange(0, BH)
    m = (o_t < T)[:, None] & (o_h < HV)[None, :]
    off = (i_b * T + o_t[:, None]).to(tl.int64) * HV + o_h[None, :]
    b_g = tl.load(g + off, mask=m, other=0.).to(tl.float32)
    tl.store(g_out + off, tl.cumsum(b_g, axis=0), mask=m)


@triton.jit
def gdn_chunk_scaled_dot_kkt_kernel(k, beta, g, A, T, H: tl.constexpr, HV: tl.constexpr,
                                    K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
                                    PREC: tl.constexpr):
    i_t, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_hv = i_bh // HV, i_bh % HV
    i_h = i_hv // (HV // H)
    o_t = i_t * BT + tl.arange(0, BT)
    m_t = o_t < T
    tok = (i_b * T + o_t).to(tl.int64)
    b_beta = tl.load(beta + tok * HV + i_hv, mask=m_t, other=0.).to(tl.float32)
    b_g = tl.load(g + tok * HV + i_hv, mask=m_t, other=0.)
    b_A = tl.zeros([BT, BT], dtype=tl.float32)
    for i_k in range(0, tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        b_k = tl.load(k + (tok[:, None] * H + i_h) * K + o_k[None, :],
                      mask=m_t[:, None] & (o_k < K)[None, :], other=0.)
        b_kb = (b_k * b_beta[:, None]).to(b_k.dtype)
        b_A += tl.dot(b_kb, tl.trans(b_k), input_precision=PREC)
    o_i = tl.arange(0, BT)
    low = o_i[:, None] > o_i[None, :]
    b_A = tl.where(low, b_A * tl.exp(tl.where(low, b_g[:, None] - b_g[None, :], 0.)), 0.)
    tl.store(A + (tok[:, None] * HV + i_hv) * BT + o_i[None, :], b_A, mask=m_t[:, None])


@triton.jit
def _gdn_inv_diag16(A, row0, tok0, T, HV: tl.constexpr, i_hv, BT: tl.constexpr):
    """(I + A_dd)^-1 of the 16x16 diagonal block starting at chunk row `row0`, by forward substitution."""
    o_i = tl.arange(0, 16)
    rows = row0 + o_i
    m_r = (tok0 + rows) < T
    p = A + ((tok0 + rows[:, None]).to(tl.int64) * HV + i_hv) * BT + row0 + o_i[None, :]
    b_M = -tl.where(o_i[:, None] > o_i[None, :], tl.load(p, mask=m_r[:, None], other=0.), 0.)
    for i in range(1, 16):
        sel = o_i[:, None] == i
        b_a = tl.sum(tl.where(sel, b_M, 0.), 0)
        b_a = b_a + tl.sum(b_a[:, None] * b_M, 0)
        b_M = tl.where(sel, b_a[None, :], b_M)
    return b_M + (o_i[:, None] == o_i[None, :]).to(tl.float32)


@triton.jit
def _gdn_blk16(A, r0, c0, tok0, T, HV: tl.constexpr, i_hv, BT: tl.constexpr):
    o_i = tl.arange(0, 16)
    m_r = (tok0 + r0 + o_i) < T
    p = A + ((tok0 + r0 + o_i[:, None]).to(tl.int64) * HV + i_hv) * BT + c0 + o_i[None, :]
    return tl.load(p, mask=m_r[:, None], other=0.)


@triton.jit
def _gdn_store16(Ai, x, r0, c0, tok0, T, HV: tl.constexpr, i_hv, BT: tl.constexpr):
    o_i = tl.arange(0, 16)
    m_r = (tok0 + r0 + o_i) < T
    p = Ai + ((tok0 + r0 + o_i[:, None]).to(tl.int64) * HV + i_hv) * BT + c0 + o_i[None, :]
    tl.store(p, x.to(Ai.dtype.element_ty), mask=m_r[:, None])


@triton.jit
def gdn_solve_tril_kernel(A, Ai, T, HV: tl.constexpr, BT: tl.constexpr):
    """(I + A)^-1 of each 64x64 chunk: four 16x16 diagonal inverses, then the off-diagonal blocks
    by blocked forward substitution X_rc = -X_rr sum_m A_rm X_mc."""
    i_t, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_hv = i_bh // HV, i_bh % HV
    tok0 = i_b * T + i_t * BT
    T_end = i_b * T + T
    X11 = _gdn_inv_diag16(A, 0, tok0, T_end, HV, i_hv, BT)
    X22 = _gdn_inv_diag16(A, 16, tok0, T_end, HV, i_hv, BT)
    X33 = _gdn_inv_diag16(A, 32, tok0, T_end, HV, i_hv, BT)
    X44 = _gdn_inv_diag16(A, 48, tok0, T_end, HV, i_hv, BT)
    A21 = _gdn_blk16(A, 16, 0, tok0, T_end, HV, i_hv, BT)
    A31 = _gdn_blk16(A, 32, 0, tok0, T_end, HV, i_hv, BT)
    A32 = _gdn_blk16(A, 32, 16, tok0, T_end, HV, i_hv, BT)
    A41 = _gdn_blk16(A, 48, 0, tok0, T_end, HV, i_hv, BT)
    A42 = _gdn_blk16(A, 48, 16, tok0, T_end, HV, i_hv, BT)
    A43 = _gdn_blk16(A, 48, 32, tok0, T_end, HV, i_hv, BT)
    X21 = -tl.dot(X22, tl.dot(A21, X11, input_precision="ieee"), input_precision="ieee")
    X32 = -tl.dot(X33, tl.dot(A32, X22, input_precision="ieee"), input_precision="ieee")
    X43 = -tl.dot(X44, tl.dot(A43, X33, input_precision="ieee"), input_precision="ieee")
    X31 = -tl.dot(X33, tl.dot(A31, X11, input_precision="ieee")
                  + tl.dot(A32, X21, input_precision="ieee"), input_precision="ieee")
    X42 = -tl.dot(X44, tl.dot(A42, X22, input_precision="ieee")
                  + tl.dot(A43, X32, input_precision="ieee"), input_precision="ieee")
    X41 = -tl.dot(X44, tl.dot(A41, X11, input_precision="ieee")
                  + tl.dot(A42, X21, input_precision="ieee")
                  + tl.dot(A43, X31, input_precision="ieee"), input_precision="ieee")
    zero = tl.zeros([16, 16], dtype=tl.float32)
    _gdn_store16(Ai, X11, 0, 0, tok0, T_end, HV, i_hv, BT)
    _gdn_store16(Ai, zero, 0, 16, tok0, T_end, HV, i_hv, BT)
    _gdn_store16(Ai, zero, 0, 32, tok0, T_end, HV, i_hv, BT)
    _gdn_store16(Ai, zero, 0, 48, tok0, T_end, HV, i_hv, BT)
    _gdn_store16(Ai, X21, 16, 0, tok0, T_end, HV, i_hv, BT)
    _gdn_store16(Ai, X22, 16, 16, tok0, T_end, HV, i_hv, BT)
    _gdn_store16(Ai, zero, 16, 32, tok0, T_end, HV, i_hv, BT)
    _gdn_store16(Ai, zero, 16, 48, tok0, T_end, HV, i_hv, BT)
    _gdn_store16(Ai, X31, 32, 0, tok0, T_end, HV, i_hv, BT)
    _gdn_store16(Ai, X32, 32, 16, tok0, T_end, HV, i_hv, BT)
    _gdn_store16(Ai, X33, 32, 32, tok0, T_end, HV, i_hv, BT)
    _gdn_store16(Ai, zero, 32, 48, tok0, T_end, HV, i_hv, BT)
    _gdn_store16(Ai, X41, 48, 0, tok0, T_end, HV, i_hv, BT)
    _gdn_store16(Ai, X42, 48, 16, tok0, T_end, HV, i_hv, BT)
    _gdn_store16(Ai, X43, 48, 32, tok0, T_end, HV, i_hv, BT)
    _gdn_store16(Ai, X44, 48, 48, tok0, T_end, HV, i_hv, BT)


@triton.jit
def gdn_wy_recompute_kernel(k, v, beta, g, Ai, w, u, T, H: tl.constexpr, HV: tl.constexpr,
                            K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
                            BV: tl.constexpr, PREC: tl.constexpr):
    i_t, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_hv = i_bh // HV, i_bh % HV
    i_h = i_hv // (HV // H)
    o_t = i_t * BT + tl.arange(0, BT)
    m_t = o_t < T
    tok = (i_b * T + o_t).to(tl.int64)
    b_beta = tl.load(beta + tok * HV + i_hv, mask=m_t, other=0.).to(tl.float32)
    b_g = tl.load(g + tok * HV + i_hv, mask=m_t, other=0.)
    o_c = tl.arange(0, BT)
    b_Ai = tl.load(Ai + (tok[:, None] * HV + i_hv) * BT + o_c[None, :], mask=m_t[:, None], other=0.)
    for i_v in range(0, tl.cdiv(V, BV)):
        o_v = i_v * BV + tl.arange(0, BV)
        m = m_t[:, None] & (o_v < V)[None, :]
        off = (tok[:, None] * HV + i_hv) * V + o_v[None, :]
        b_v = tl.load(v + off, mask=m, other=0.)
        b_vb = (b_v * b_beta[:, None]).to(b_Ai.dtype)
        tl.store(u + off, tl.dot(b_Ai, b_vb, input_precision=PREC).to(u.dtype.element_ty), mask=m)
    b_s = b_beta * tl.exp(b_g)
    for i_k in range(0, tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        m = m_t[:, None] & (o_k < K)[None, :]
        b_k = tl.load(k + (tok[:, None] * H + i_h) * K + o_k[None, :], mask=m, other=0.)
        b_kb = (b_k * b_s[:, None]).to(b_Ai.dtype)
        tl.store(w + (tok[:, None] * HV + i_hv) * K + o_k[None, :],
                 tl.dot(b_Ai, b_kb, input_precision=PREC).to(w.dtype.element_ty), mask=m)


@triton.jit
def gdn_chunk_state_kernel(k, w, u, g, h0, h, v_new, ht, T, NT, H: tl.constexpr, HV: tl.constexpr,
                           K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
                           BV: tl.constexpr, PREC: tl.constexpr):
    i_v, i_bh = tl.program_id(0), tl.program_id(1)
    i_b, i_hv = i_bh // HV, i_bh % HV
    i_h = i_hv // (HV // H)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_kv = (o_k < K)[:, None] & (o_v < V)[None, :]
    s_off = (i_bh * K + o_k[:, None]).to(tl.int64) * V + o_v[None, :]
    b_h = tl.load(h0 + s_off, mask=m_kv, other=0.)
    for i_t in range(0, NT):
        h_off = (((i_b * NT + i_t) * HV + i_hv) * K + o_k[:, None]).to(tl.int64) * V + o_v[None, :]
        tl.store(h + h_off, b_h.to(h.dtype.element_ty), mask=m_kv)
        o_t = i_t * BT + tl.arange(0, BT)
        m_t = o_t < T
        tok = (i_b * T + o_t).to(tl.int64)
        b_w = tl.load(w + (tok[:, None] * HV + i_hv) * K + o_k[None, :],
                      mask=m_t[:, None] & (o_k < K)[None, :], other=0.)
        m_tv = m_t[:, None] & (o_v < V)[None, :]
        uv_off = (tok[:, None] * HV + i_hv) * V + o_v[None, :]
        b_u = tl.load(u + uv_off, mask=m_tv, other=0.).to(tl.float32)
        b_v = b_u - tl.dot(b_w, b_h.to(b_w.dtype), input_precision=PREC)
        tl.store(v_new + uv_off, b_v.to(v_new.dtype.element_ty), mask=m_tv)
        last = i_b * T + tl.minimum(i_t * BT + BT, T) - 1
        b_glast = tl.load(g + last.to(tl.int64) * HV + i_hv)
        b_g = tl.load(g + tok * HV + i_hv, mask=m_t, other=0.)
        b_v = tl.where(m_t[:, None], b_v * tl.exp(b_glast - b_g)[:, None], 0.)
        b_kt = tl.load(k + (tok[None, :] * H + i_h) * K + o_k[:, None],
                       mask=m_t[None, :] & (o_k < K)[:, None], other=0.)
        b_h = b_h * tl.exp(b_glast) + tl.dot(b_kt, b_v.to(b_kt.dtype), input_precision=PREC)
    tl.store(ht + s_off, b_h, mask=m_kv)


@triton.jit
def gdn_chunk_output_kernel(q, k, v_new, h, g, o, scale, T, NT, H: tl.constexpr, HV: tl.constexpr,
                            K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
                            BV: tl.constexpr, PREC: tl.constexpr):
    i_v, i_t, i_bh = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    i_b, i_hv = i_bh // HV, i_bh % HV
    i_h = i_hv // (HV // H)
    o_t = i_t * BT + tl.arange(0, BT)
    m_t = o_t < T
    tok = (i_b * T + o_t).to(tl.int64)
    o_v = i_v * BV + tl.arange(0, BV)
    b_o = tl.zeros([BT, BV], dtype=tl.float32)
    b_A = tl.zeros([BT, BT], dtype=tl.float32)
    for i_k in range(0, tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        b_q = tl.load(q + (tok[:, None] * H + i_h) * K + o_k[None, :], mask=m_t[:, None] & m_k[None, :],
                      other=0.)
        b_kt = tl.load(k + (tok[None, :] * H + i_h) * K + o_k[:, None], mask=m_t[None, :] & m_k[:, None],
                       other=0.)
        h_off = (((i_b * NT + i_t) * HV + i_hv) * K + o_k[:, None]).to(tl.int64) * V + o_v[None, :]
        b_h = tl.load(h + h_off, mask=m_k[:, None] & (o_v < V)[None, :], other=0.)
        b_o += tl.dot(b_q, b_h, input_precision=PREC)
        b_A += tl.dot(b_q, b_kt, input_precision=PREC)
    b_g = tl.load(g + tok * HV + i_hv, mask=m_t, other=0.)
    b_o = b_o * tl.exp(b_g)[:, None]
    o_i = tl.arange(0, BT)
    causal = (o_i[:, None] >= o_i[None, :]) & m_t[None, :]
    b_A = tl.where(causal, b_A * tl.exp(tl.where(causal, b_g[:, None] - b_g[None, :], 0.)), 0.)
    m_tv = m_t[:, None] & (o_v < V)[None, :]
    off = (tok[:, None] * HV + i_hv) * V + o_v[None, :]
    b_v = tl.load(v_new + off, mask=m_tv, other=0.)
    b_o = (b_o + tl.dot(b_A.to(b_v.dtype), b_v, input_precision=PREC)) * scale
    tl.store(o + off, b_o.to(o.dtype.element_ty), mask=m_tv)


# ------------------------------------------------------------------------ float64 reference stages
def _chunks(x: torch.Tensor) -> torch.Tensor:
    """[B, T, ...] -> [B, NT, BT, ...], zero-padding the last chunk."""
    B, T = x.shape[:2]
    NT = triton.cdiv(T, BT)
    pad = x.new_zeros((B, NT * BT - T) + tuple(x.shape[2:]))
    return torch.cat([x, pad], 1).reshape((B, NT, BT) + tuple(x.shape[2:]))


def _unchunk(x: torch.Tensor, T: int) -> torch.Tensor:
    return x.reshape((x.shape[0], -1) + tuple(x.shape[3:]))[:, :T]


def _rep(x: torch.Tensor, HV: int) -> torch.Tensor:
    """Key heads -> value heads (GQA)."""
    return x.double().repeat_interleave(HV // x.shape[2], dim=2)


def ref_cumsum(g: torch.Tensor) -> torch.Tensor:
    return _unchunk(_chunks(g.double()).cumsum(2), g.shape[1])


def ref_kkt(k, beta, g) -> torch.Tensor:
    T, HV = g.shape[1], g.shape[2]
    kc = _chunks(_rep(k, HV))                                       # [B, NT, BT, HV, K]
    bc, gc = _chunks(beta.double()), _chunks(g.double())            # [B, NT, BT, HV]
    A = torch.einsum("bnihk,bnjhk->bnihj", kc * bc[..., None], kc)
    low = torch.ones(BT, BT, dtype=torch.bool, device=g.device).tril(-1)[:, None, :]
    diff = gc[:, :, :, :, None] - gc.transpose(2, 3)[:, :, None, :, :]   # [B, NT, i, HV, j]
    A = torch.where(low, A * torch.exp(torch.where(low, diff, 0.0)), 0.0)
    return _unchunk(A, T)


def ref_solve(A) -> torch.Tensor:
    T = A.shape[1]
    Ac = _chunks(A.double()).permute(0, 1, 3, 2, 4)                 # [B, NT, HV, BT, BT]
    eye = torch.eye(BT, dtype=torch.float64, device=A.device)
    X = torch.linalg.solve_triangular(eye + Ac, eye.expand_as(Ac), upper=False)
    return _unchunk(X.permute(0, 1, 3, 2, 4), T)


def ref_wy(k, v, beta, g, Ai):
    T, HV = g.shape[1], g.shape[2]
    Aic = _chunks(Ai.double())                                      # [B, NT, i, HV, j]
    kc, vc = _chunks(_rep(k, HV)), _chunks(v.double())
    s = _chunks(beta.double() * torch.exp(g.double()))[..., None]
    b = _chunks(beta.double())[..., None]
    w = torch.einsum("bnihj,bnjhk->bnihk", Aic, kc * s)
    u = torch.einsum("bnihj,bnjhv->bnihv", Aic, vc * b)
    return _unchunk(w, T), _unchunk(u, T)


def ref_state(k, w, u, g, h0):
    B, T, HV = g.shape
    NT = triton.cdiv(T, BT)
    kc, wc, uc, gc = _chunks(_rep(k, HV)), _chunks(w.double()), _chunks(u.double()), _chunks(g.double())
    S = h0.double().clone()                                         # [B, HV, K, V]
    hs, vs = [], []
    for n in range(NT):
        hs.append(S)
        vn = uc[:, n] - torch.einsum("bthk,bhkv->bthv", wc[:, n], S)
        vs.append(vn)
        g_last = g.double()[:, min(n * BT + BT, T) - 1]             # [B, HV]
        decay = torch.exp(g_last[:, None] - gc[:, n])               # [B, BT, HV]
        valid = (torch.arange(BT, device=g.device) + n * BT < T)[None, :, None]
        decay = torch.where(valid, decay, 0.0)
        S = S * torch.exp(g_last)[..., None, None] + torch.einsum("bthk,bthv->bhkv", kc[:, n],
                                                                   vn * decay[..., None])
    return torch.stack(hs, 1), _unchunk(torch.stack(vs, 1), T), S


def ref_output(q, k, v_new, h, g, scale):
    T, HV = g.shape[1], g.shape[2]
    qc, kc = _chunks(_rep(q, HV)), _chunks(_rep(k, HV))
    vc, gc = _chunks(v_new.double()), _chunks(g.double())
    inter = torch.einsum("bnihk,bnhkv->bnihv", qc, h.double()) * torch.exp(gc)[..., None]
    att = torch.einsum("bnihk,bnjhk->bnihj", qc, kc)
    causal = torch.ones(BT, BT, dtype=torch.bool, device=g.device).tril()[:, None, :]
    diff = gc[:, :, :, :, None] - gc.transpose(2, 3)[:, :, None, :, :]
    att = torch.where(causal, att * torch.exp(torch.where(causal, diff, 0.0)), 0.0)
    o = inter + torch.einsum("bnihj,bnjhv->bnihv", att, vc)
    return _unchunk(o * scale, T)


# ----------------------------------------------------------------------------------------- inputs
def _gates(shape, HV, gen):
    """Per-token log-gates as the model computes them: -exp(A_log) * softplus(a + dt_bias)."""
    A_log = torch.log(torch.empty(HV, dtype=torch.float64).uniform_(1, 16, generator=gen))
    dt = torch.exp(torch.empty(HV, dtype=torch.float64).uniform_(math.log(1e-3), math.log(0.1),
                                                                 generator=gen))
    dt_bias = torch.log(torch.expm1(dt))
    a = torch.randn(shape, dtype=torch.float64, generator=gen)
    return -torch.exp(A_log) * torch.nn.functional.softplus(a + dt_bias)


def _base(case: Case, device: str, gen: torch.Generator) -> dict:
    p = case.params
    B, T, H, HV, K, V = p["B"], p["T"], p["H"], p["HV"], p["K"], p["V"]

    def rn(*s):
        return torch.randn(s, dtype=torch.float64, generator=gen)

    q, k = rn(B, T, H, K), rn(B, T, H, K)
    q, k = q / q.norm(dim=-1, keepdim=True), k / k.norm(dim=-1, keepdim=True)
    d = dict(q=q, k=k, v=rn(B, T, HV, V), graw=_gates((B, T, HV), HV, gen),
             beta=torch.sigmoid(rn(B, T, HV)), h0=0.5 * rn(B, HV, K, V))
    return {n: t.to(device) for n, t in d.items()}


def _stages(case, device, gen, dtype, upto: str) -> dict:
    """Base data and every stage up to `upto`, each stage fed the dtype-rounded outputs of the last."""
    x = _base(case, device, gen)
    c = {n: (t.to(dtype) if n in ("q", "k", "v", "beta") else t) for n, t in x.items()}
    c["h0"] = x["h0"].float()
    c["graw"] = x["graw"].to(dtype)
    if upto == "cumsum":
        return c
    c["g"] = ref_cumsum(c["graw"]).float()
    if upto == "kkt":
        return c
    c["A"] = ref_kkt(c["k"], c["beta"], c["g"]).float()
    if upto == "solve":
        return c
    c["Ai"] = ref_solve(c["A"]).to(dtype)
    if upto == "wy":
        return c
    w, u = ref_wy(c["k"], c["v"], c["beta"], c["g"], c["Ai"])
    c["w"], c["u"] = w.to(dtype), u.to(dtype)
    if upto == "state":
        return c
    h, v_new, _ = ref_state(c["k"], c["w"], c["u"], c["g"], c["h0"])
    c["h"], c["v_new"] = h.to(dtype), v_new.to(dtype)
    return c


def _contig(c: dict) -> dict:
    return {n: (t.contiguous() if isinstance(t, torch.Tensor) else t) for n, t in c.items()}


def _dims(x: dict):
    B, T, H, K = x["k"].shape
    return B, T, H, x["v"].shape[2], K, x["v"].shape[3]


def _np2(n: int) -> int:
    return triton.next_power_of_2(n)


# ------------------------------------------------------------------------------- launch + specs
CASES = (
    Case("b1_t100_h2x4_d32", dict(B=1, T=100, H=2, HV=4, K=32, V=32), True,
         SRC + "; scaled down, T not a multiple of the chunk"),
    Case("b2_t37_h1x2_k48_v40", dict(B=2, T=37, H=1, HV=2, K=48, V=40), True,
         SRC + "; scaled down, one partial chunk, head dims that need masks"),
    Case("qwen3next_t8192", dict(B=1, T=8192, H=16, HV=32, K=128, V=128), False, SRC),
    Case("qwen3next_b4_t2000", dict(B=4, T=2000, H=16, HV=32, K=128, V=128), False, SRC),
)
RMSE = {"fp32": Tolerance(rmse=1e-4), "bf16": Tolerance(rmse=8e-3)}


def _make(stage: str, outs: dict):
    """make_inputs for one stage: that stage's inputs plus output buffers (name -> (shape fn, dtype))."""
    def make_inputs(case, dtype, device, gen):
        c = _contig(_stages(case, device, gen, dtype, stage))
        B, T, H, HV, K, V = _dims(c)
        NT = triton.cdiv(T, BT)
        dims = dict(B=B, T=T, H=H, HV=HV, K=K, V=V, NT=NT)
        for name, (shape, dt) in outs.items():
            c[name] = torch.empty(shape(dims), dtype=dt or dtype, device=device)
        c["scale"] = K ** -0.5
        return c
    return make_inputs


# what each stage mirrors: FLA's chunk kernels as vLLM vendors them (vllm 0.33:
# third_party/flash_linear_attention/ops/; 0.11: model_executor/layers/fla/ops/, same file names)
_FLA = "vllm: third_party/flash_linear_attention/ops/"
UPSTREAM = {
    "gdn_chunk_cumsum": _FLA + "cumsum.py chunk_local_cumsum (chunk_local_cumsum_scalar_kernel)",
    "gdn_chunk_scaled_dot_kkt": _FLA + "chunk_scaled_dot_kkt.py chunk_scaled_dot_kkt_fwd "
                                       "(chunk_scaled_dot_kkt_fwd_kernel)",
    "gdn_solve_tril": _FLA + "solve_tril.py solve_tril (solve_tril_16x16_kernel, merge_16x16_to_64x64_inverse_kernel)",
    "gdn_wy_recompute": _FLA + "wy_fast.py recompute_w_u_fwd (recompute_w_u_fwd_kernel)",
    "gdn_chunk_state": _FLA + "chunk_delta_h.py chunk_gated_delta_rule_fwd_h "
                              "(chunk_gated_delta_rule_fwd_kernel_h_blockdim64)",
    "gdn_chunk_output": _FLA + "chunk_o.py chunk_fwd_o (chunk_fwd_kernel_o)",
}


def _spec(name, fns, stage, outs, run, ref, description, tol=RMSE, out_tol=None):
    return register(KernelSpec(
        name=name, group="fla_gdn", models=MODELS, cases=CASES, dtypes=("bf16", "fp32"),
        make_inputs=_make(stage, outs), run=run, reference=ref, outputs=tuple(outs), tolerance=tol,
        output_tolerance=out_tol or {}, description=description, triton_kernels=fns,
        upstream=UPSTREAM[name]))


def _run_cumsum(x, case):
    B, T, HV = x["graw"].shape
    gdn_chunk_cumsum_kernel[(triton.cdiv(T, BT), B)](x["graw"], x["g_out"], T, HV=HV, BT=BT,
                                                     BH=_np2(HV), num_warps=4)


_spec("gdn_chunk_cumsum", (gdn_chunk_cumsum_kernel,), "cumsum",
      {"g_out": (lambda d: (d["B"], d["T"], d["HV"]), torch.float32)},
      _run_cumsum, lambda x, c: {"g_out": ref_cumsum(x["graw"])},
      "chunk-local (64) cumulative sum of per-token log-gates [B, T, HV], fp32 out",
      tol={"fp32": Tolerance(atol=1e-4, rtol=1e-5), "bf16": Tolerance(atol=1e-4, rtol=1e-5)})


def _run_kkt(x, case):
    B, T, H, HV, K, V = _dims(x)
    # K in one step up to 128, unpipelined: Triton 3.6 on sm_90 miscomputed A with BK=64 over K=128
    # at num_stages=3 (relative RMSE ~2.5e-2 in bf16 and in fp32 ieee).
    gdn_chunk_scaled_dot_kkt_kernel[(triton.cdiv(T, BT), B * HV)](
        x["k"], x["beta"], x["g"], x["A"], T, H=H, HV=HV, K=K, BT=BT, BK=min(128, _np2(K)),
        PREC=_prec(x["k"]), num_warps=4, num_stages=1)


_spec("gdn_chunk_scaled_dot_kkt", (gdn_chunk_scaled_dot_kkt_kernel,), "kkt",
      {"A": (lambda d: (d["B"], d["T"], d["HV"], BT), torch.float32)},
      _run_kkt, lambda x, c: {"A": ref_kkt(x["k"], x["beta"], x["g"])},
      "A = beta K K^T * exp(g_i - g_j), strictly lower triangular per 64-token chunk")


def _run_solve(x, case):
    B, T, HV, _ = x["A"].shape
    gdn_solve_tril_kernel[(triton.cdiv(T, BT), B * HV)](x["A"], x["Ai"], T, HV=HV, BT=BT, num_warps=1)


_spec("gdn_solve_tril", (gdn_solve_tril_kernel,), "solve",
      {"Ai": (lambda d: (d["B"], d["T"], d["HV"], BT), None)},
      _run_solve, lambda x, c: {"Ai": ref_solve(x["A"])},
      "(I + A)^-1 per 64x64 chunk from 16x16 diagonal inverses and blocked substitution")


def _run_wy(x, case):
    B, T, H, HV, K, V = _dims(x)
    gdn_wy_recompute_kernel[(triton.cdiv(T, BT), B * HV)](
        x["k"], x["v"], x["beta"], x["g"], x["Ai"], x["w"], x["u"], T, H=H, HV=HV, K=K, V=V, BT=BT,
        BK=min(64, _np2(K)), BV=min(64, _np2(V)), PREC=_prec(x["k"]), num_warps=4)


def _ref_wy(x, case):
    w, u = ref_wy(x["k"], x["v"], x["beta"], x["g"], x["Ai"])
    return {"w": w, "u": u}


_spec("gdn_wy_recompute", (gdn_wy_recompute_kernel,), "wy",
      {"w": (lambda d: (d["B"], d["T"], d["HV"], d["K"]), None),
       "u": (lambda d: (d["B"], d["T"], d["HV"], d["V"]), None)},
      _run_wy, _ref_wy, "WY form: w = Ai (beta k exp(g)), u = Ai (beta v)")


def _run_state(x, case):
    B, T, H, HV, K, V = _dims(x)
    BK = _np2(K)
    BV = max(16, min(32 if BK > 64 else 64, _np2(V)))
    gdn_chunk_state_kernel[(triton.cdiv(V, BV), B * HV)](
        x["k"], x["w"], x["u"], x["g"], x["h0"], x["h"], x["v_new"], x["final_state"], T,
        triton.cdiv(T, BT), H=H, HV=HV, K=K, V=V, BT=BT, BK=BK, BV=BV, PREC=_prec(x["k"]),
        num_warps=4, num_stages=2)


def _ref_state(x, case):
    h, v_new, ht = ref_state(x["k"], x["w"], x["u"], x["g"], x["h0"])
    return {"h": h, "v_new": v_new, "final_state": ht}


_spec("gdn_chunk_state", (gdn_chunk_state_kernel,), "state",
      {"h": (lambda d: (d["B"], d["NT"], d["HV"], d["K"], d["V"]), None),
       "v_new": (lambda d: (d["B"], d["T"], d["HV"], d["V"]), None),
       "final_state": (lambda d: (d["B"], d["HV"], d["K"], d["V"]), torch.float32)},
      _run_state, _ref_state,
      "inter-chunk state recurrence: v_new = u - w h; h <- h exp(g_last) + k_decayed^T v_new")


def _run_output(x, case):
    B, T, H, HV, K, V = _dims(x)
    BV = min(64, _np2(V))
    NT = triton.cdiv(T, BT)
    gdn_chunk_output_kernel[(triton.cdiv(V, BV), NT, B * HV)](
        x["q"], x["k"], x["v_new"], x["h"], x["g"], x["o"], x["scale"], T, NT, H=H, HV=HV, K=K, V=V,
        BT=BT, BK=min(64, _np2(K)), BV=BV, PREC=_prec(x["k"]), num_warps=4)


_spec("gdn_chunk_output", (gdn_chunk_output_kernel,), "output",
      {"o": (lambda d: (d["B"], d["T"], d["HV"], d["V"]), None)},
      _run_output,
      lambda x, c: {"o": ref_output(x["q"], x["k"], x["v_new"], x["h"], x["g"], x["scale"])},
      "o = scale (q h exp(g) + causal intra-chunk (q k^T exp(g_i - g_j)) v_new)")
