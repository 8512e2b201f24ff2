"""Triton's tutorial kernels, written afresh, run on cpu_interp through `kernel[grid](...)` and
compared to PyTorch, on the interpreter and on the tier "auto" (natively where the compiled tier
lowers the kernel). Inputs are seeded random; outputs are poisoned with NaN first. Every launch on
the interpreter is also replayed on the reference interpreter (tests/cpu_interp_differential.py:
`shadow`), which must leave every tensor bit for bit as the batched interpreter did."""
from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

import sdk
from cpu_interp_differential import shadow


@pytest.fixture(autouse=True, params=["interp", "auto"])
def cpu_interp(request, monkeypatch):
    """Each tutorial on the interpreter, replayed on the reference, and on the tier "auto" (the
    compiled tier for what it lowers), against PyTorch both times."""
    if request.param == "auto":
        monkeypatch.setenv("DAY0_CPU_TIER", "auto")
        with sdk.activate("cpu_interp"):
            yield
        return
    with shadow() as differences, sdk.activate("cpu_interp"):
        yield
    assert differences == [], "the batched and the reference interpreter disagree"


def poisoned(*shape, dtype=torch.float32):
    return torch.full(shape, float("nan"), dtype=dtype)


# ------------------------------------------------------------------------------- vector add
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_vector_add(dtype):
    torch.manual_seed(0)
    n = 3001
    x, y = torch.randn(n, dtype=dtype), torch.randn(n, dtype=dtype)
    out = poisoned(n, dtype=dtype)
    add_kernel[(triton.cdiv(n, 512),)](x, y, out, n, BLOCK=512)
    torch.testing.assert_close(out, x + y)


# ----------------------------------------------------------------------------- fused softmax
@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_rows, n_cols, BLOCK: tl.constexpr):
    start = tl.program_id(0)
    step = tl.num_programs(0)
    for row in tl.range(start, n_rows, step):
        cols = tl.arange(0, BLOCK)
        x = tl.load(in_ptr + row * in_stride + cols, mask=cols < n_cols, other=-float("inf"))
        x = x - tl.max(x, axis=0)
        num = tl.exp(x)
        tl.store(out_ptr + row * out_stride + cols, num / tl.sum(num, axis=0), mask=cols < n_cols)


def test_fused_softmax():
    torch.manual_seed(1)
    x = torch.randn(37, 100)
    out = poisoned(37, 100)
    softmax_kernel[(8,)](out, x, x.stride(0), out.stride(0), 37, 100, BLOCK=128)
    torch.testing.assert_close(out, torch.softmax(x, dim=1))


# ------------------------------------------------------------------------ matmul + autotune
@triton.autotune(configs=[triton.Config({"BM": 16, "BN": 16, "BK": 16, "GROUP": 2}, num_warps=4),
                          triton.Config({"BM": 32, "BN": 32, "BK": 16, "GROUP": 4}, num_warps=4),
                          triton.Config({"BM": 32, "BN": 16, "BK": 32, "GROUP": 1}, num_warps=2)],
                 key=["M", "N", "K"])
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr,
                  ACT: tl.constexpr):
    pid = tl.program_id(0)
    npm, npn = tl.cdiv(M, BM), tl.cdiv(N, BN)
    per_group = GROUP * npn
    first_m = (pid // per_group) * GROUP
    gsize = min(npm - first_m, GROUP)
    pm = first_m + ((pid % per_group) % gsize)
    pn = (pid % per_group) // gsize
    rm = (pm * BM + tl.arange(0, BM)) % M
    rn = (pn * BN + tl.arange(0, BN)) % N
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    b_ptrs = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=rk[None, :] < K - k * BK, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < K - k * BK, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BK * sak
        b_ptrs += BK * sbk
    if ACT == "leaky_relu":
        acc = tl.where(acc >= 0, acc, 0.01 * acc)
    c = acc.to(c_ptr.dtype.element_ty)
    cm = pm * BM + tl.arange(0, BM)
    cn = pn * BN + tl.arange(0, BN)
    tl.store(c_ptr + cm[:, None] * scm + cn[None, :] * scn, c, mask=(cm[:, None] < M) & (cn[None, :] < N))


@pytest.mark.parametrize("act", ["", "leaky_relu"])
def test_matmul_autotune(act):
    torch.manual_seed(2)
    M, N, K = 70, 45, 50
    a, b = torch.randn(M, K, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16)
    c = poisoned(M, N, dtype=torch.float16)
    grid = lambda meta: (triton.cdiv(M, meta["BM"]) * triton.cdiv(N, meta["BN"]),)
    matmul_kernel[grid](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(), ACT=act)
    ref = a.float() @ b.float()
    if act:
        ref = torch.nn.functional.leaky_relu(ref, 0.01)
    torch.testing.assert_close(c.float(), ref, atol=2e-2, rtol=2e-2)
    assert matmul_kernel.best_config is not None


# ---------------------------------------------------------------------------------- dropout
@triton.jit
def dropout_kernel(x_ptr, out_ptr, n, p, seed, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    keep = tl.rand(seed, offs) > p
    tl.store(out_ptr + offs, tl.where(keep, x / (1 - p), 0.0), mask=mask)


def test_dropout_rand():
    torch.manual_seed(3)
    n = 10000
    x = torch.randn(n).abs() + 0.5
    outs = []
    for _ in range(2):
        out = poisoned(n)
        dropout_kernel[(triton.cdiv(n, 1024),)](x, out, n, 0.3, 1234, BLOCK=1024)
        outs.append(out)
    assert torch.equal(outs[0], outs[1])
    kept = outs[0] != 0
    assert 0.65 < kept.float().mean().item() < 0.75
    torch.testing.assert_close(outs[0][kept], x[kept] / 0.7)


# ------------------------------------------------------------------------------- layer norm
@triton.jit
def ln_fwd(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    X += row * stride
    Y += row * stride
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        acc += tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        x = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.)
        acc += x * x
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    for off in range(0, N, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(X + cols, mask=mask, other=0.).to(tl.float32)
        y = (x - mean) * rstd * tl.load(W + cols, mask=mask) + tl.load(B + cols, mask=mask)
        tl.store(Y + cols, y, mask=mask)


@triton.jit
def ln_bwd_dx(DX, DY, DW, DB, X, W, Mean, Rstd, Lock, stride, N, GROUP: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    X += row * stride
    DY += row * stride
    DX += row * stride
    lock_id = row % GROUP
    Lock += lock_id
    Count = Lock + GROUP
    DW = DW + lock_id * N + cols
    DB = DB + lock_id * N + cols
    x = tl.load(X + cols, mask=mask, other=0).to(tl.float32)
    dy = tl.load(DY + cols, mask=mask, other=0).to(tl.float32)
    w = tl.load(W + cols, mask=mask).to(tl.float32)
    mean = tl.load(Mean + row)
    rstd = tl.load(Rstd + row)
    xhat = tl.where(mask, (x - mean) * rstd, 0.)
    wdy = tl.where(mask, w * dy, 0.)
    c1 = tl.sum(xhat * wdy, axis=0) / N
    c2 = tl.sum(wdy, axis=0) / N
    tl.store(DX + cols, (wdy - (xhat * c1 + c2)) * rstd, mask=mask)
    partial_dw = (dy * xhat).to(w.dtype)
    partial_db = dy.to(w.dtype)
    while tl.atomic_cas(Lock, 0, 1) == 1:
        pass
    count = tl.load(Count)
    if count == 0:
        tl.atomic_xchg(Count, 1)
    else:
        partial_dw += tl.load(DW, mask=mask)
        partial_db += tl.load(DB, mask=mask)
    tl.store(DW, partial_dw, mask=mask)
    tl.store(DB, partial_db, mask=mask)
    tl.atomic_xchg(Lock, 0)


@triton.jit
def ln_bwd_dwdb(DW, DB, FINAL_DW, FINAL_DB, M, N, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    cols = pid * BN + tl.arange(0, BN)
    dw = tl.zeros((BM, BN), dtype=tl.float32)
    db = tl.zeros((BM, BN), dtype=tl.float32)
    for i in range(0, M, BM):
        rows = i + tl.arange(0, BM)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        offs = rows[:, None] * N + cols[None, :]
        dw += tl.load(DW + offs, mask=mask, other=0.)
        db += tl.load(DB + offs, mask=mask, other=0.)
    tl.store(FINAL_DW + cols, tl.sum(dw, axis=0), mask=cols < N)
    tl.store(FINAL_DB + cols, tl.sum(db, axis=0), mask=cols < N)


def test_layer_norm_forward_backward():
    torch.manual_seed(4)
    M, N, eps = 24, 80, 1e-5
    x = torch.randn(M, N, requires_grad=True)
    w = torch.rand(N, requires_grad=True)
    b = torch.rand(N, requires_grad=True)
    dy = torch.randn(M, N)
    y = poisoned(M, N)
    mean, rstd = poisoned(M), poisoned(M)
    ln_fwd[(M,)](x, y, w, b, mean, rstd, x.stride(0), N, eps, BLOCK=32)
    ref = torch.nn.functional.layer_norm(x, (N,), w, b, eps)
    torch.testing.assert_close(y, ref.detach(), atol=1e-5, rtol=1e-5)
    ref.backward(dy)
    GROUP = 4
    locks = torch.zeros(2 * GROUP, dtype=torch.int32)
    pdw, pdb = torch.zeros(GROUP, N), torch.zeros(GROUP, N)
    dx = poisoned(M, N)
    ln_bwd_dx[(M,)](dx, dy, pdw, pdb, x, w, mean, rstd, locks, x.stride(0), N, GROUP=GROUP, BLOCK=128)
    dw, db = poisoned(N), poisoned(N)
    ln_bwd_dwdb[(triton.cdiv(N, 32),)](pdw, pdb, dw, db, GROUP, N, BM=8, BN=32)
    torch.testing.assert_close(dx, x.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(dw, w.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(db, b.grad, atol=1e-4, rtol=1e-4)
    assert torch.equal(locks[:GROUP], torch.zeros(GROUP, dtype=torch.int32))


# --------------------------------------------------------------------- fused attention (causal)
@triton.jit
def attn_fwd(Q, K, V, O, sm_scale, L, H: tl.constexpr, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    base = bh * L * D
    offs_m = start_m * BM + tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + base + offs_m[:, None] * D + offs_d[None, :], mask=offs_m[:, None] < L, other=0.)
    m_i = tl.zeros([BM], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BM], dtype=tl.float32) + 1.0
    acc = tl.zeros([BM, D], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504
    hi = tl.minimum((start_m + 1) * BM, L)
    for start_n in range(0, hi, BN):
        cols = start_n + offs_n
        k = tl.load(K + base + cols[None, :] * D + offs_d[:, None], mask=cols[None, :] < L, other=0.)
        qk = tl.dot(q, k) * qk_scale
        causal = (offs_m[:, None] >= cols[None, :]) & (cols[None, :] < L)
        qk = tl.where(causal, qk, -1.0e6)
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = tl.load(V + base + cols[:, None] * D + offs_d[None, :], mask=cols[:, None] < L, other=0.)
        acc = tl.dot(p.to(tl.float16), v, acc)
        m_i = m_ij
    acc = acc / (l_i[:, None] - 1.0 * (m_i[:, None] == -float("inf")))
    tl.store(O + base + offs_m[:, None] * D + offs_d[None, :], acc.to(O.dtype.element_ty), mask=offs_m[:, None] < L)


def test_fused_attention_causal():
    torch.manual_seed(5)
    B, H, L, D = 2, 2, 50, 16
    q, k, v = (torch.randn(B, H, L, D, dtype=torch.float16) for _ in range(3))
    o = poisoned(B, H, L, D, dtype=torch.float16)
    # l_i starts at 1 and the first block's alpha is 0, so the extra 1 is scaled away
    attn_fwd[(triton.cdiv(L, 16), B * H)](q, k, v, o, D ** -0.5, L, H=H, D=D, BM=16, BN=16)
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    torch.testing.assert_close(o.float(), ref, atol=2e-2, rtol=2e-2)


# ------------------------------------------------------------------------------- grouped GEMM
@triton.jit
def grouped_gemm(a_ptrs, b_ptrs, c_ptrs, sizes, lds, n_groups, NPROG: tl.constexpr,
                 BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    tile = tl.program_id(0)
    last = 0
    for g in range(n_groups):
        m, n, k = tl.load(sizes + g * 3), tl.load(sizes + g * 3 + 1), tl.load(sizes + g * 3 + 2)
        tiles = tl.cdiv(m, BM) * tl.cdiv(n, BN)
        while tile >= last and tile < last + tiles:
            a = tl.load(a_ptrs + g).to(tl.pointer_type(tl.float16))
            b = tl.load(b_ptrs + g).to(tl.pointer_type(tl.float16))
            c = tl.load(c_ptrs + g).to(tl.pointer_type(tl.float16))
            lda, ldb, ldc = tl.load(lds + g * 3), tl.load(lds + g * 3 + 1), tl.load(lds + g * 3 + 2)
            t = tile - last
            tm, tn = t // tl.cdiv(n, BN), t % tl.cdiv(n, BN)
            om = tm * BM + tl.arange(0, BM)
            on = tn * BN + tl.arange(0, BN)
            ok = tl.arange(0, BK)
            acc = tl.zeros((BM, BN), dtype=tl.float32)
            for kk in range(0, tl.cdiv(k, BK)):
                kmask = ok + kk * BK < k
                av = tl.load(a + om[:, None] * lda + (kk * BK + ok)[None, :],
                             mask=(om[:, None] < m) & kmask[None, :], other=0.)
                bv = tl.load(b + (kk * BK + ok)[:, None] * ldb + on[None, :],
                             mask=kmask[:, None] & (on[None, :] < n), other=0.)
                acc += tl.dot(av, bv)
            tl.store(c + om[:, None] * ldc + on[None, :], acc.to(tl.float16),
                     mask=(om[:, None] < m) & (on[None, :] < n))
            tile += NPROG
        last += tiles


def test_grouped_gemm():
    torch.manual_seed(6)
    shapes = [(40, 24, 32), (16, 48, 20), (33, 17, 64)]
    As = [torch.randn(m, k, dtype=torch.float16) for m, n, k in shapes]
    Bs = [torch.randn(k, n, dtype=torch.float16) for m, n, k in shapes]
    Cs = [poisoned(m, n, dtype=torch.float16) for m, n, k in shapes]
    ptr = lambda ts: torch.tensor([t.data_ptr() for t in ts], dtype=torch.int64)
    sizes = torch.tensor([s for sh in shapes for s in sh], dtype=torch.int32)
    lds = torch.tensor([x for a, b, c in zip(As, Bs, Cs) for x in (a.stride(0), b.stride(0), c.stride(0))],
                       dtype=torch.int32)
    # the kernel reaches these tensors through raw addresses, as on a GPU; registering them with
    # extra_tensors adds bounds checks, and the result is the same either way
    from backends.cpu_interp import extra_tensors
    grouped_gemm[(5,)](ptr(As), ptr(Bs), ptr(Cs), sizes, lds, len(shapes), NPROG=5, BM=16, BN=16, BK=16)
    for a, b, c in zip(As, Bs, Cs):
        torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=2e-2, rtol=2e-2)
        c.fill_(float("nan"))
    with extra_tensors(As + Bs + Cs):
        grouped_gemm[(5,)](ptr(As), ptr(Bs), ptr(Cs), sizes, lds, len(shapes), NPROG=5, BM=16, BN=16, BK=16)
    for a, b, c in zip(As, Bs, Cs):
        torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=2e-2, rtol=2e-2)


# ------------------------------------------------------------------------ block-pointer matmul
@triton.jit
def bp_matmul(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    a_bp = tl.make_block_ptr(a_ptr, (M, K), (sam, sak), (pm * BM, 0), (BM, BK), (1, 0))
    b_bp = tl.make_block_ptr(b_ptr, (K, N), (sbk, sbn), (0, pn * BN), (BK, BN), (1, 0))
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, K, BK):
        acc += tl.dot(tl.load(a_bp, boundary_check=(0, 1)), tl.load(b_bp, boundary_check=(0, 1)))
        a_bp = tl.advance(a_bp, (0, BK))
        b_bp = tl.advance(b_bp, (BK, 0))
    c_bp = tl.make_block_ptr(c_ptr, (M, N), (scm, scn), (pm * BM, pn * BN), (BM, BN), (1, 0))
    tl.store(c_bp, acc.to(tl.float16), boundary_check=(0, 1))


def test_block_pointer_matmul():
    torch.manual_seed(7)
    M, N, K = 50, 40, 70
    a, b = torch.randn(M, K, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16)
    c = poisoned(M, N, dtype=torch.float16)
    bp_matmul[(triton.cdiv(M, 32), triton.cdiv(N, 16))](a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(),
                                                         BM=32, BN=16, BK=32)
    torch.testing.assert_close(c.float(), a.float() @ b.float(), atol=2e-2, rtol=2e-2)
