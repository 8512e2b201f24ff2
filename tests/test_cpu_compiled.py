"""cpu_interp's compiled tier against the interpreter: the same kernels on the same seeded inputs,
outputs poisoned first, compared bit for bit where the math is exact (integers, casts, rounding,
shapes, loads and stores) and within 3 ulp where it is not (transcendental functions,
reassociated float sums, dot products); every compiled launch is checked to have run natively.
Also: faults worded as the interpreter words them, fallbacks that say why, the object cache,
and tier selection."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
import triton
import triton.language as tl

import sdk
from sdk.backend import get_backend
from sdk.errors import KernelFault


from cpu_tier_fixtures import both, cpu_interp, gen, same_bits  # noqa: F401  (cpu_interp: autouse)


def tiers_ran() -> set[tuple[str, str]]:
    return {(s["tier"], s["detail"]) for s in get_backend("cpu_interp").take_launch_stats()}


# ------------------------------------------------------------------------------ element-wise
@triton.jit
def float_ops(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=1.0)
    y = tl.load(y_ptr + offs, mask=m, other=2.0)
    xf, yf = x.to(tl.float32), y.to(tl.float32)
    results = (x + y, x - y, x * y, x / y, tl.maximum(x, y), tl.minimum(x, y), -x, tl.abs(x),
               tl.fma(x, y, x), tl.sqrt(tl.abs(xf)).to(x.dtype), tl.where(x > y, x, y), x % y,
               tl.floor(xf).to(x.dtype), tl.ceil(yf).to(x.dtype), tl.clamp(x, -0.5, 0.5),
               tl.math.rsqrt(tl.abs(yf) + 1).to(x.dtype))
    for k in tl.static_range(len(results)):
        tl.store(out_ptr + k * n + offs, results[k], mask=m)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_float_arith_bitwise(dtype):
    n = 1000
    x = torch.randn(n, generator=gen(1)).to(dtype)
    y = torch.randn(n, generator=gen(2)).to(dtype)
    x[:5] = torch.tensor([0.0, -0.0, float("inf"), float("nan"), 1e-40]).to(dtype)

    def launch(tier, x, y, out):
        float_ops[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK=256, cpu_tier=tier)
    ref, got = both(launch, {"x": x, "y": y}, {"out": ((16, n), dtype)})
    for k in range(16):
        same_bits(ref["out"][k], got["out"][k])


@triton.jit
def math_ops(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=1.0).to(tl.float32)
    results = (tl.exp(x), tl.exp2(x), tl.log(tl.abs(x)), tl.log2(tl.abs(x)), tl.sin(x), tl.cos(x),
               tl.sigmoid(x), tl.math.erf(x), tl.extra.cuda.libdevice.tanh(x),
               tl.extra.cuda.libdevice.log1p(tl.abs(x)), tl.extra.cuda.libdevice.pow(tl.abs(x), 0.75))
    for k in tl.static_range(len(results)):
        tl.store(out_ptr + k * n + offs, results[k].to(out_ptr.dtype.element_ty), mask=m)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_math_within_three_ulp(dtype):
    n = 4000
    x = (torch.randn(n, generator=gen(3)) * 30).to(dtype)
    x[:8] = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 88.5, -95.0, 1e-39]).to(dtype)

    def launch(tier, x, out):
        math_ops[(triton.cdiv(n, 512),)](x, out, n, BLOCK=512, cpu_tier=tier)
    ref, got = both(launch, {"x": x}, {"out": ((11, n), dtype)})
    r, g = ref["out"].double(), got["out"].double()
    assert torch.equal(torch.isnan(r), torch.isnan(g))
    ok = ~torch.isnan(r)
    assert torch.equal(torch.isinf(r[ok]), torch.isinf(g[ok]))
    eps = torch.finfo(dtype).eps
    tol = 3 * eps * r.abs() + torch.finfo(dtype).tiny  # each within about 1.5 ulp of the truth
    assert ((r - g).abs()[ok & ~torch.isinf(r)] <= tol[ok & ~torch.isinf(r)]).all(), \
        ((r - g).abs() / tol).nan_to_num(0).amax(dim=1)


@triton.jit
def int_ops(a_ptr, b_ptr, out_ptr, BLOCK: tl.constexpr, UNSIGNED: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + offs)
    b = tl.load(b_ptr + offs)
    s = b & 63
    ua, ub = a.to(UNSIGNED, bitcast=True), b.to(UNSIGNED, bitcast=True)
    hi = tl.umulhi(ua, ub) if UNSIGNED == tl.uint32 else ua // (ub | 1)
    results = (a + b, a - b, a * b, a // b, a % b, a << s, a >> s, ua >> s.to(UNSIGNED), tl.maximum(a, b),
               tl.minimum(a, b), a & b, a | b, a ^ b, (a < b).to(a.dtype), hi, tl.cdiv(a, b), tl.abs(a))
    for k in tl.static_range(len(results)):
        tl.store(out_ptr + k * BLOCK + offs, results[k].to(a.dtype, bitcast=True))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int8])
def test_int_arith_bitwise(dtype):
    n = 256
    info = torch.iinfo(dtype)
    a = torch.randint(info.min, info.max, (n,), generator=gen(4), dtype=dtype)
    b = torch.randint(-9, 9, (n,), generator=gen(5), dtype=dtype)
    a[:4] = torch.tensor([info.min, info.min, 7, -7], dtype=dtype)
    b[:4] = torch.tensor([-1, 0, 0, 100], dtype=dtype)

    def launch(tier, a, b, out):
        unsigned = {torch.int32: tl.uint32, torch.int64: tl.uint64, torch.int8: tl.uint8}[dtype]
        int_ops[(1,)](a, b, out, BLOCK=n, UNSIGNED=unsigned, cpu_tier=tier)
    ref, got = both(launch, {"a": a, "b": b}, {"out": ((17, n), dtype)})
    same_bits(ref["out"], got["out"])


@triton.jit
def cast_ops(x_ptr, i_ptr, f_ptr, h_ptr, b_ptr, e4_ptr, e5_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(i_ptr + offs, x.to(tl.int32))
    tl.store(i_ptr + BLOCK + offs, x.to(tl.int8).to(tl.int32))
    tl.store(i_ptr + 2 * BLOCK + offs, x.to(tl.uint32).to(tl.int32, bitcast=True))
    i = tl.load(i_ptr + offs)
    tl.store(f_ptr + offs, i.to(tl.float32) + x.to(tl.float64).to(tl.float32))
    tl.store(h_ptr + offs, x.to(tl.float16))
    tl.store(h_ptr + BLOCK + offs, x.to(tl.float16, fp_downcast_rounding="rtz"))
    tl.store(b_ptr + offs, x.to(tl.bfloat16))
    tl.store(b_ptr + BLOCK + offs, x.to(tl.bfloat16, fp_downcast_rounding="rtz"))
    tl.store(e4_ptr + offs, x.to(tl.float8e4nv))
    tl.store(e5_ptr + offs, x.to(tl.float8e5))
    tl.store(f_ptr + BLOCK + offs, x.to(tl.float8e4nv).to(tl.float32) + x.to(tl.float8e5).to(tl.float32))


def test_casts_and_narrow_floats_bitwise():
    n = 512
    x = torch.randn(n, generator=gen(6)) * torch.logspace(-12, 12, n)
    x[:8] = torch.tensor([float("nan"), float("inf"), -float("inf"), 3e9, -3e9, 470.0, 65520.0, -0.0])

    def launch(tier, x, i, f, h, b, e4, e5):
        cast_ops[(1,)](x, i, f, h, b, e4.view(torch.float8_e4m3fn), e5.view(torch.float8_e5m2), BLOCK=n,
                       cpu_tier=tier)
    outs = {"i": ((3 * n,), torch.int32), "f": ((2 * n,), torch.float32), "h": ((2 * n,), torch.float16),
            "b": ((2 * n,), torch.bfloat16), "e4": ((n,), torch.uint8), "e5": ((n,), torch.uint8)}
    ref, got = both(launch, {"x": x}, outs)
    for k in outs:
        same_bits(ref[k], got[k])


# -------------------------------------------------------------------- reductions, scans, shapes
@triton.jit
def reduce_ops(x_ptr, out_ptr, idx_ptr, R: tl.constexpr, C: tl.constexpr):
    r = tl.arange(0, R)[:, None]
    c = tl.arange(0, C)[None, :]
    x = tl.load(x_ptr + r * C + c)
    tl.store(out_ptr + tl.arange(0, R), tl.sum(x, 1))
    tl.store(out_ptr + R + tl.arange(0, C), tl.max(x, 0))
    tl.store(out_ptr + R + C + tl.arange(0, R), tl.min(x, 1))
    tl.store(out_ptr + 2 * R + C + tl.arange(0, C), tl.sum(x, 0))
    tl.store(out_ptr + 2 * R + 2 * C, tl.sum(tl.sum(x * x, 1), 0))
    tl.store(out_ptr + 2 * R + 2 * C + 1 + r * C + c, tl.cumsum(x, 1))
    tl.store(out_ptr + 2 * R + 2 * C + 1 + R * C + r * C + c, tl.cumsum(x, 0, reverse=True))
    tl.store(idx_ptr + tl.arange(0, R), tl.argmax(x, 1))
    tl.store(idx_ptr + R + tl.arange(0, C), tl.argmin(x, 0))
    tl.store(idx_ptr + R + C + tl.arange(0, C), tl.sum(x.to(tl.int32), 0))


def test_reductions_scans():
    R, C = 16, 64
    x = torch.randn(R, C, generator=gen(7))
    x[3, 5] = x[3, 9] = x[3].max() + 1  # a tie: the first index wins

    def launch(tier, x, out, idx):
        reduce_ops[(1,)](x, out, idx, R=R, C=C, cpu_tier=tier)
    ref, got = both(launch, {"x": x}, {"out": ((2 * R + 2 * C + 1 + 2 * R * C,), torch.float32),
                                       "idx": ((R + 2 * C,), torch.int32)})
    same_bits(ref["idx"], got["idx"])
    torch.testing.assert_close(got["out"], ref["out"], rtol=1e-6, atol=1e-5)
    same_bits(ref["out"][R:R + C], got["out"][R:R + C])  # max and min are exact
    same_bits(ref["out"][R + C:2 * R + C], got["out"][R + C:2 * R + C])


@triton.jit
def narrow_sum_kernel(x_ptr, y_ptr, out_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    x = tl.load(x_ptr + r)
    y = tl.load(y_ptr + r)
    tl.store(out_ptr, tl.sum(x * y, 0))                      # combined in bf16 / f16, pairwise
    tl.store(out_ptr + 1, tl.max(x, 0))
    z = tl.reshape(x * y, (N // 32, 32))
    tl.store(out_ptr + 2 + tl.arange(0, N // 32), tl.sum(z, 1))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_narrow_float_sums_pairwise_like_the_interpreter(dtype):
    N = 1024
    x, y = torch.randn(N, generator=gen(22)).to(dtype), torch.randn(N, generator=gen(23)).to(dtype)

    def launch(tier, x, y, out):
        narrow_sum_kernel[(1,)](x, y, out, N=N, cpu_tier=tier)
    ref, got = both(launch, {"x": x, "y": y}, {"out": ((2 + N // 32,), dtype)})
    if dtype == torch.bfloat16:
        same_bits(ref["out"], got["out"])
    else:  # the interpreter sums f16 through numpy, in float32 with one rounding at the end
        torch.testing.assert_close(got["out"], ref["out"], rtol=4e-3, atol=2e-3)
    exact = (x.double() * y.double()).sum().item()
    assert abs(got["out"][0].item() - exact) <= 0.01 * abs(exact)


@triton.jit
def shapes_kernel(x_ptr, idx_ptr, out_ptr, hist_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    x = tl.load(x_ptr + r)
    a, b = tl.split(tl.reshape(x, (N // 2, 2)))
    y = tl.reshape(tl.join(b, a), (N,))
    t = tl.trans(tl.reshape(y, (4, N // 4)))
    c = tl.cat(tl.reshape(t, (N,)), x, can_reorder=True)
    idx = tl.load(idx_ptr + r)
    tl.store(out_ptr + r, y)
    tl.store(out_ptr + N + tl.arange(0, 2 * N), c)
    tl.store(out_ptr + 3 * N + r, tl.gather(x, idx, 0))
    tl.store(out_ptr + 4 * N + r, tl.broadcast_to(tl.sum(x[None, :], 1), (N,)))
    tl.store(hist_ptr + tl.arange(0, 8), tl.histogram(idx % 8, 8))


def test_shape_ops_gather_histogram_bitwise():
    N = 32
    x = torch.randn(N, generator=gen(8))
    idx = torch.randint(0, N, (N,), generator=gen(9), dtype=torch.int32)

    def launch(tier, x, idx, out, hist):
        shapes_kernel[(1,)](x, idx, out, hist, N=N, cpu_tier=tier)
    ref, got = both(launch, {"x": x, "idx": idx}, {"out": ((5 * N,), torch.float32), "hist": ((8,), torch.int32)})
    same_bits(ref["out"][:4 * N], got["out"][:4 * N])
    torch.testing.assert_close(ref["out"][4 * N:], got["out"][4 * N:])
    same_bits(ref["hist"], got["hist"])


def test_element_memo_never_answers_for_a_freed_tensor():
    """Element values are remembered per (tensor, index) by identity: a tensor value made and
    dropped while emitting one op must not leave an entry that the next tensor Python puts at
    the same address would read (that miscompiled a kernel of Inductor's now and then)."""
    from llvmlite import ir
    from backends.cpu_interp.compiled.core import FunctionEmitter
    from backends.cpu_interp.compiled.tensors import Lazy, Splat
    from backends.cpu_interp.compiled.types import I32, I64, elem

    class Emitter:  # the memo of the function emitter, over one LLVM function
        index_key = staticmethod(FunctionEmitter.index_key)
        memo_get, memo_put = FunctionEmitter.memo_get, FunctionEmitter.memo_put

        def __init__(self):
            fn = ir.Function(ir.Module(), ir.FunctionType(I32, [I32, I64]), name="f")
            self.x, self.i = fn.args
            self.b, self.scopes = ir.IRBuilder(fn.append_basic_block()), [{}]

    fx = Emitter()
    i32 = elem("i32")
    for k in range(64):
        t = Lazy(lambda fx, v, k=k: fx.b.add(v, ir.Constant(I32, k)), [Splat(fx.x, (8,), i32)], (8,), i32)
        got = t.at(fx, [fx.i])
        assert got.operands[1].constant == k, f"tensor {k} was answered with tensor {got.operands[1].constant}'s value"
        del t


# ---------------------------------------------------------------------------------------- dot
@triton.jit
def gemm(a, b, c, M, N, K, sam, sbk, scm, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    ap = a + rm[:, None] * sam + rk[None, :]
    bp = b + rk[:, None] * sbk + rn[None, :]
    acc = tl.zeros((BM, BN), tl.int32 if a.dtype.element_ty == tl.int8 else tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        am = (rm[:, None] < M) & (rk[None, :] < K - k * BK)
        bm = (rk[:, None] < K - k * BK) & (rn[None, :] < N)
        acc += tl.dot(tl.load(ap, mask=am, other=0), tl.load(bp, mask=bm, other=0))
        ap += BK
        bp += BK * sbk
    tl.store(c + rm[:, None] * scm + rn[None, :], acc.to(c.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int8])
def test_dot(dtype):
    M, N, K = 70, 45, 100
    if dtype == torch.int8:
        a = torch.randint(-100, 100, (M, K), generator=gen(10), dtype=dtype)
        b = torch.randint(-100, 100, (K, N), generator=gen(11), dtype=dtype)
        out_dt = torch.int32
    else:
        a, b = torch.randn(M, K, generator=gen(10)).to(dtype), torch.randn(K, N, generator=gen(11)).to(dtype)
        out_dt = dtype

    def launch(tier, a, b, c):
        gemm[(triton.cdiv(M, 32), triton.cdiv(N, 16))](a, b, c, M, N, K, K, N, N, BM=32, BN=16, BK=16,
                                                        cpu_tier=tier)
    ref, got = both(launch, {"a": a, "b": b}, {"c": ((M, N), out_dt)})
    if dtype == torch.int8:
        same_bits(ref["c"], got["c"])
        assert torch.equal(got["c"], a.int() @ b.int())
    else:
        tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
        torch.testing.assert_close(got["c"].float(), ref["c"].float(), rtol=tol, atol=tol)


@triton.jit
def gemm_nk(a, w, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """c = a @ w^T with w [N, K] row-major: B's tile is read along K (its rows are w's)."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k0 in range(0, K, BK):
        a_t = tl.load(a + rm[:, None] * K + (k0 + rk)[None, :], mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0)
        b_t = tl.load(w + rn[None, :] * K + (k0 + rk)[:, None], mask=(rn[None, :] < N) & ((k0 + rk)[:, None] < K), other=0)
        acc = tl.dot(a_t, b_t, acc)
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(c.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dot_of_a_transposed_tile(dtype):
    """B read along K from a [N, K] weight (a transposed tile): copied row-major, then the blocked
    kernel; equal to the interpreter within the dtype's rounding and to the exact product."""
    M, N, K = 50, 70, 96
    a = torch.randn(M, K, generator=gen(12)).to(dtype)
    w = torch.randn(N, K, generator=gen(13)).to(dtype)

    def launch(tier, a, w, c):
        gemm_nk[(triton.cdiv(M, 32), triton.cdiv(N, 32))](a, w, c, M, N, K, BM=32, BN=32, BK=32, cpu_tier=tier)
    ref, got = both(launch, {"a": a, "w": w}, {"c": ((M, N), dtype)})
    tol = {torch.float32: 1e-5, torch.bfloat16: 1.6e-2}[dtype]
    torch.testing.assert_close(got["c"].float(), ref["c"].float(), rtol=tol, atol=tol)
    torch.testing.assert_close(got["c"].float(), (a.double() @ w.double().T).float(), rtol=tol, atol=tol)


@triton.jit
def paged_rows_kernel(cache_ptr, table_ptr, out_ptr, n_rows, d, R: tl.constexpr, D: tl.constexpr):
    rows = tl.program_id(0) * R + tl.arange(0, R)
    cols = tl.arange(0, D)
    page = tl.load(table_ptr + rows, mask=rows < n_rows, other=0)
    ptrs = cache_ptr + page[:, None].to(tl.int64) * D + cols[None, :]
    x = tl.load(ptrs, mask=(rows < n_rows)[:, None] & (cols < d)[None, :], other=-7.5)
    tl.store(out_ptr + rows[:, None] * D + cols[None, :], x * 2.0)


@pytest.mark.parametrize("d", [64, 50])
def test_rows_read_through_a_row_mask_and_a_page_table(d):
    """A read masked by rows in range and columns in range tests the rows' part once per row and
    reads each row with the columns' part alone (none when every column is in range); masked
    lanes take `other`; bit-equal to the interpreter and to the gather done by torch."""
    D, n_rows, R = 64, 45, 16
    cache = torch.randn(30, D, generator=gen(14))
    table = torch.randint(0, 30, (n_rows,), generator=gen(15), dtype=torch.int32)
    rows_out = triton.cdiv(n_rows, R) * R

    def launch(tier, cache, table, out):
        paged_rows_kernel[(triton.cdiv(n_rows, R),)](cache, table, out, n_rows, d, R=R, D=D, cpu_tier=tier)
    ref, got = both(launch, {"cache": cache, "table": table}, {"out": ((rows_out, D), torch.float32)})
    same_bits(ref["out"], got["out"])
    want = torch.full((rows_out, D), -15.0)
    want[:n_rows, :d] = cache[table.long(), :d] * 2.0
    assert torch.equal(got["out"], want)
    llir = paged_rows_kernel.warmup(cache, table, got["out"], n_rows, d, R=R, D=D, cpu_tier="compiled",
                                    grid=(1,)).asm["llir"]
    assert "row_read" in llir and "!alias.scope" in llir


@triton.jit
def mx_kernel(a_ptr, b_ptr, s_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    m, n, k = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + m[:, None] * K + k[None, :])
    b = tl.load(b_ptr + tl.arange(0, K // 2)[:, None] * N + n[None, :])         # e2m1, two per byte along K
    s = tl.load(s_ptr + n[:, None] * (K // 32) + tl.arange(0, K // 32)[None, :])  # e8m0 per 32 along K
    c = tl.dot_scaled(a, None, "bf16", b, s, "e2m1")
    tl.store(c_ptr + m[:, None] * N + n[None, :], c)


def test_dot_scaled_mxfp4():
    M, N, K = 16, 32, 64
    a = torch.randn(M, K, generator=gen(24)).to(torch.bfloat16)
    b = torch.randint(0, 256, (K // 2, N), generator=gen(25), dtype=torch.uint8)
    sc = torch.randint(120, 134, (N, K // 32), generator=gen(26), dtype=torch.uint8)

    def launch(tier, a, b, sc, c):
        mx_kernel[(1,)](a, b, sc, c, M=M, N=N, K=K, cpu_tier=tier)
    ref, got = both(launch, {"a": a, "b": b, "sc": sc}, {"c": ((M, N), torch.float32)})
    table = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])
    w = torch.stack([table[(b & 0xF).long()], table[(b >> 4).long()]], dim=1).reshape(K, N)
    w = w * torch.exp2(sc.float() - 127).repeat_interleave(32, dim=1).T
    torch.testing.assert_close(got["c"], a.float() @ w, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(got["c"], ref["c"], rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------ control flow
@triton.jit
def control_kernel(out_ptr, lens_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    n = tl.load(lens_ptr + pid)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    offs = tl.arange(0, BLOCK)
    for i in range(0, n):
        acc += i * offs
    k = 0
    while k * k < n:
        k += 1
    if pid % 2 == 0:
        acc = acc * 2
    else:
        acc = acc - offs
    if n == 0:
        return
    tl.store(out_ptr + pid * BLOCK + offs, acc + k)


def test_loops_branches_early_return():
    lens = torch.tensor([0, 3, 5, 10, 1, 7, 0, 2], dtype=torch.int32)

    def launch(tier, lens, out):
        control_kernel[(8,)](out, lens, BLOCK=16, cpu_tier=tier)
    ref, got = both(launch, {"lens": lens}, {"out": ((8, 16), torch.float32)})
    same_bits(ref["out"], got["out"])
    assert torch.isnan(got["out"][0]).all() and not torch.isnan(got["out"][1]).any()


@triton.jit
def carried_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, STEPS: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    p = x_ptr + offs
    a = tl.zeros([BLOCK], dtype=tl.float32)
    b = tl.full([BLOCK], 1.0, dtype=tl.float32)
    for i in range(STEPS):
        v = tl.load(p, mask=offs + i * BLOCK < n, other=0.0)
        a, b = b, a + v * b                  # swapped every iteration
        p += BLOCK
    tl.store(out_ptr + offs, a)
    tl.store(out_ptr + BLOCK + offs, b)


def test_loop_carried_tensors_swap():
    x = torch.rand(200, generator=gen(12))

    def launch(tier, x, out):
        carried_kernel[(1,)](x, out, 200, BLOCK=32, STEPS=7, cpu_tier=tier)
    ref, got = both(launch, {"x": x}, {"out": ((64,), torch.float32)})
    same_bits(ref["out"], got["out"])


# ------------------------------------------------------------------------------------ atomics
@triton.jit
def atomic_kernel(x_ptr, bins_ptr, total_ptr, ticket_ptr, order_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0)
    tl.atomic_add(bins_ptr + (x % 16), 1, mask=m)
    tl.atomic_add(total_ptr, tl.sum(x.to(tl.float32), 0))
    tl.atomic_max(total_ptr + 1, tl.max(x, 0).to(tl.float32))
    t = tl.atomic_add(ticket_ptr, 1)
    tl.store(order_ptr + t, tl.program_id(0))


def test_atomics_across_programs():
    n, B = 3000, 64
    x = torch.randint(0, 1000, (n,), generator=gen(13), dtype=torch.int32)
    P = triton.cdiv(n, B)
    for tier in ("interp", "compiled"):
        bins, total = torch.zeros(16, dtype=torch.int32), torch.zeros(2)
        ticket, order = torch.zeros(1, dtype=torch.int32), torch.full((P,), -1, dtype=torch.int32)
        atomic_kernel[(P,)](x, bins, total, ticket, order, n, BLOCK=B, cpu_tier=tier)
        assert {t for t, _ in tiers_ran()} == {tier}
        assert torch.equal(bins, torch.bincount((x % 16).long(), minlength=16).int())
        assert total[0].item() == x.sum().item() and total[1].item() == x.max().item()
        assert sorted(order.tolist()) == list(range(P)) and ticket.item() == P


@triton.jit
def ordered_atomics_kernel(x_ptr, f_ptr, cas_ptr, ticket_ptr, old_ptr, hist_ptr):
    pid = tl.program_id(0)
    for k in range(64):  # work enough that programs on two threads overlap
        tl.atomic_add(hist_ptr + (pid * 7 + k) % 32, 1)  # commutes: no order needed
    tl.atomic_add(f_ptr, tl.load(x_ptr + pid))  # a float sum: its bits depend on the order
    tl.atomic_cas(cas_ptr, pid, pid + 1)  # a chain only program order completes
    tl.store(old_ptr + pid, tl.atomic_add(ticket_ptr, 1))  # the old value: each program's turn


@triton.jit
def commuting_atomics_kernel(hist_ptr, x_ptr):
    pid = tl.program_id(0)
    tl.atomic_add(hist_ptr + pid % 32, 1)
    tl.atomic_max(hist_ptr + 32, tl.load(x_ptr + pid))


def test_order_dependent_atomics_apply_in_program_order(monkeypatch):
    """Atomics whose outcome depends on the order programs apply them come out as the
    interpreter's (program order) on every thread count; commuting ones keep running in parallel."""
    monkeypatch.setenv("DAY0_CPU_THREADS", "4")
    P = 400
    x = torch.randn(P, generator=gen(50)) * torch.logspace(-6, 6, P)

    def launch(tier, x, f, cas, ticket, old, hist):
        ordered_atomics_kernel[(P,)](x, f, cas, ticket, old, hist, cpu_tier=tier)
    zeros = {"f": torch.zeros(1), "cas": torch.zeros(1, dtype=torch.int32),
             "ticket": torch.zeros(1, dtype=torch.int32), "hist": torch.zeros(32, dtype=torch.int32)}
    ref, got = both(launch, {"x": x, **zeros}, {"old": ((P,), torch.int32)})
    for k in ("f", "cas", "ticket", "old", "hist"):
        same_bits(ref[k], got[k])
    assert got["cas"].item() == P and torch.equal(got["old"], torch.arange(P, dtype=torch.int32))
    slots = (torch.arange(P)[:, None] * 7 + torch.arange(64)) % 32
    assert torch.equal(got["hist"], torch.bincount(slots.reshape(-1), minlength=32).int())
    exact = torch.zeros((), dtype=torch.float64)
    for v in x.double():  # float32 additions in program order
        exact = (exact.float() + v.float()).double()
    assert got["f"].item() == exact.item()
    from backends.cpu_interp.compiled import emit
    from sdk.ttir import parse
    src = ordered_atomics_kernel.warmup(x, zeros["f"], zeros["cas"], zeros["ticket"], got["old"],
                                        zeros["hist"], grid=(1,)).asm["ttir"]
    assert emit(parse(src))[1]["serial"] == "tt.atomic_rmw (fadd) applied in program order"
    src = commuting_atomics_kernel.warmup(zeros["hist"], x, grid=(1,)).asm["ttir"]
    assert emit(parse(src))[1]["serial"] == ""


# ------------------------------------------------------------------------------------- faults
@triton.jit
def oob_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n + 3)  # three elements too far
    tl.store(out_ptr + offs, x, mask=offs < n)


@triton.jit
def assert_kernel(x_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    tl.device_assert(x >= 0, "negative input")


def test_faults_match_the_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_DEBUG", "1")
    messages = []
    for tier in ("interp", "compiled"):
        x, out = torch.randn(100, generator=gen(14)), torch.empty(100)
        with pytest.raises(KernelFault) as exc:
            oob_kernel[(4,)](x, out, 100, BLOCK=32, cpu_tier=tier)
        assert {t for t, _ in tiers_ran()} == {tier}
        messages.append(str(exc.value))
    assert messages[0] == messages[1]
    assert "out-of-bounds load from 'x_ptr': elements [96, 103)" in messages[1] and "program (3, 0, 0)" in messages[1]
    assert "test_cpu_compiled.py" in messages[1]
    messages = []
    for tier in ("interp", "compiled"):
        x = torch.rand(64, generator=gen(15))
        x[40] = -1
        with pytest.raises(KernelFault) as exc:
            assert_kernel[(1,)](x, BLOCK=64, debug=True, cpu_tier=tier)
        messages.append(str(exc.value))
    assert messages[0] == messages[1] and "negative input" in messages[1]


@triton.jit
def shifted_store_kernel(x_ptr, out_ptr, shift, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs + shift, tl.load(x_ptr + offs))


def test_a_store_with_a_stray_lane_writes_no_lane():
    """The check comes before the access on both tiers: a program whose store has one stray lane
    faults without writing its other lanes; with room for every lane the same stores are made
    in full."""
    for tier in ("interp", "compiled"):
        x, out = torch.randn(64, generator=gen(17)), torch.full((64,), float("nan"))
        with pytest.raises(KernelFault, match="out-of-bounds store to 'out_ptr'"):
            shifted_store_kernel[(2,)](x, out, 1, BLOCK=32, cpu_tier=tier)
        assert {t for t, _ in tiers_ran()} == {tier}
        assert out[33:].isnan().all(), tier  # the faulting program wrote none of its lanes
        wide = torch.full((65,), float("nan"))
        shifted_store_kernel[(2,)](x, wide, 1, BLOCK=32, cpu_tier=tier)
        assert {t for t, _ in tiers_ran()} == {tier}
        assert torch.equal(wide[1:], x) and wide[0].isnan(), tier


def test_bounds_checks_can_be_turned_off():
    x, out = torch.randn(100, generator=gen(16)), torch.full((100,), float("nan"))
    oob_kernel[(4,)](x, out, 97, BLOCK=32, cpu_tier="compiled", cpu_bounds_check=False)  # in bounds: 97 + 3
    assert {t for t, _ in tiers_ran()} == {"compiled"}
    assert torch.equal(out[:97], x[:97])


@triton.jit
def table_kernel(tables_ptr, lens_ptr, out_ptr, BLOCK: tl.constexpr):
    g = tl.program_id(0)
    src = tl.load(tables_ptr + g).to(tl.pointer_type(tl.float32))  # a raw pointer from a table
    n = tl.load(lens_ptr + g)
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + g * BLOCK + offs, tl.load(src + offs, mask=offs < n, other=-1.0))


def test_raw_pointers_from_a_table_checked_like_the_interpreter():
    parts = [torch.randn(n, generator=gen(30 + n)) for n in (5, 16, 9)]
    tables = torch.tensor([p.data_ptr() for p in parts], dtype=torch.int64)
    lens = torch.tensor([5, 16, 9], dtype=torch.int32)

    def launch(tier, tables, lens, out):
        table_kernel[(3,)](tables, lens, out, BLOCK=16, cpu_tier=tier)
    ref, got = both(launch, {"tables": tables, "lens": lens}, {"out": ((3, 16), torch.float32)})
    same_bits(ref["out"], got["out"])
    assert torch.equal(got["out"][1], parts[1])
    from backends.cpu_interp import extra_tensors
    messages = []
    for tier in ("interp", "compiled"):
        bad = torch.tensor([8, parts[1].data_ptr(), parts[2].data_ptr()], dtype=torch.int64)  # unmapped
        with pytest.raises(KernelFault) as exc:
            table_kernel[(3,)](bad, lens, torch.empty(48), BLOCK=16, cpu_tier=tier)
        messages.append(str(exc.value))
        far = tables.clone()
        far[1] += 1 << 22  # 4 MiB past parts[1]: outside every registered tensor
        with extra_tensors(parts), pytest.raises(KernelFault) as exc:
            table_kernel[(3,)](far, lens, torch.empty(48), BLOCK=16, cpu_tier=tier)
        messages.append(str(exc.value))
    assert messages[0] == messages[2] and "address 0x8 through a raw pointer in program (0, 0, 0)" in messages[2]
    for m in (messages[1], messages[3]):  # against whichever tensor lies nearest (heap layout varies)
        assert m.startswith("out-of-bounds load from '") and "in program (1, 0, 0)" in m


@triton.jit
def table_rows_gather(tables_ptr, out_ptr, N: tl.constexpr, R: tl.constexpr):
    rows = tl.arange(0, R)
    srcs = tl.load(tables_ptr + rows).to(tl.pointer_type(tl.float32))  # one load's lanes, R allocations
    x = tl.load(srcs[:, None] + tl.arange(0, N)[None, :])
    tl.store(out_ptr + rows[:, None] * N + tl.arange(0, N)[None, :], x)


@pytest.fixture
def guarded_pages():
    """Three pages of one mapping, the middle one made inaccessible (PROT_NONE): memory on either
    side of a hole, as allocations far apart have between them. Yields (mmap, first address)."""
    import ctypes
    import mmap
    if not sys.platform.startswith("linux"):
        pytest.skip("needs /proc/self/maps and mprotect")
    page = mmap.PAGESIZE
    m = mmap.mmap(-1, 3 * page)
    base = ctypes.addressof(ctypes.c_char.from_buffer(m))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    assert libc.mprotect(base + page, page, 0) == 0, ctypes.get_errno()
    try:
        yield m, base
    finally:
        libc.mprotect(base + page, page, mmap.PROT_READ | mmap.PROT_WRITE)


def test_raw_pointer_lanes_into_allocations_apart_checked_one_by_one(guarded_pages):
    """One load whose lanes reach memory on both sides of an inaccessible page runs (each lane is
    checked, not the span between the lowest and the highest); a lane in the hole still faults,
    worded as the interpreter words it, naming the lowest bad address."""
    m, base = guarded_pages
    page, n = mmap_page(), 16
    below = torch.frombuffer(m, dtype=torch.float32, count=n, offset=page - 4 * n)  # ends at the hole
    above = torch.frombuffer(m, dtype=torch.float32, count=n, offset=2 * page + 8)  # past it
    below.copy_(torch.randn(n, generator=gen(40)))
    above.copy_(torch.randn(n, generator=gen(41)))
    tables = torch.tensor([above.data_ptr(), below.data_ptr(), above.data_ptr(), below.data_ptr()],
                          dtype=torch.int64)

    def launch(tier, tables, out):
        table_rows_gather[(1,)](tables, out, N=n, R=4, cpu_tier=tier)
    ref, got = both(launch, {"tables": tables}, {"out": ((4, n), torch.float32)})
    same_bits(ref["out"], got["out"])
    assert torch.equal(got["out"], torch.stack([above, below, above, below]))
    messages = []
    hole = base + page + 64
    for tier in ("interp", "compiled"):
        bad = torch.tensor([above.data_ptr(), hole + 256, below.data_ptr(), hole], dtype=torch.int64)
        with pytest.raises(KernelFault) as exc:
            table_rows_gather[(1,)](bad, torch.empty(4 * n), N=n, R=4, cpu_tier=tier)
        assert {t for t, _ in tiers_ran()} == {tier}
        messages.append(str(exc.value))
    assert messages[0] == messages[1], messages
    assert f"load from address {hole:#x} through a raw pointer in program (0, 0, 0)" in messages[1]
    assert "no mapped memory" in messages[1]


def mmap_page() -> int:
    import mmap
    return mmap.PAGESIZE


# ------------------------------------------------------------------------------- fallbacks
@triton.jit
def print_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    tl.device_print("x", x)
    tl.store(out_ptr + tl.arange(0, BLOCK), x + 1)


def test_unlowered_op_falls_back_and_says_why(capfd):
    x, out = torch.randn(4, generator=gen(17)), torch.full((4,), float("nan"))
    with pytest.warns(UserWarning, match="runs on the interpreter: not lowered by the compiled tier: tt.print"):
        print_kernel[(1,)](x, out, BLOCK=4, cpu_tier="compiled")
    ((tier, why),) = tiers_ran()
    assert tier == "interp" and "tt.print" in why
    assert torch.equal(out, x + 1)


def test_interpreter_checks_run_on_the_interpreter(monkeypatch):
    x, out = torch.randn(100, generator=gen(18)), torch.full((100,), float("nan"))
    monkeypatch.setenv("DAY0_CHECK_RACES", "1")
    oob_kernel[(4,)](x, out, 97, BLOCK=32, cpu_tier="auto")
    ((tier, why),) = tiers_ran()
    assert tier == "interp" and "the races check runs on the interpreter" in why
    assert torch.equal(out[:97], x[:97])


def test_memory_in_an_address_space_of_its_own_runs_on_the_interpreter():
    """A backend with device memory of its own lends cpu_interp views of it under device addresses
    that are not host addresses: native code, which reaches memory by address, must not run (it
    crashed the process); the interpreter runs the launch, through the views, and says why."""
    from pathlib import Path
    from sdk.backend import registry
    sys.path.insert(0, str(Path(__file__).parent))
    from doubles.device_backend import DeviceHeapBackend
    registry.register(DeviceHeapBackend)
    try:
        be = registry.get("device_heap")
        with sdk.activate("device_heap"):
            x, out = torch.randn(100, generator=gen(19)), torch.full((100,), float("nan"))
            oob_kernel[(4,)](x, out, 97, BLOCK=32, cpu_tier="compiled")
            be.device.synchronize()
            ((tier, why),) = {(s["tier"], s["detail"]) for s in be.executor.take_launch_stats()}
    finally:
        registry.unregister("device_heap")
    assert tier == "interp" and "in the backend's address space" in why, why
    assert torch.equal(out[:97], x[:97]) and torch.isnan(out[97:]).all()


def test_launch_records_say_which_tier_ran():
    x, out = torch.randn(100, generator=gen(19)), torch.full((100,), float("nan"))
    with sdk.launches.record() as rec:
        oob_kernel[(4,)](x, out, 97, BLOCK=32, cpu_tier="compiled")
    (k,) = rec.kernels
    assert k.tier == "compiled" and k.status == "ran"


def test_conformance_explain_says_which_tier_ran(tmp_path):
    env = {**os.environ, "DAY0_CPU_TIER": "compiled", "DAY0_CPU_CACHE_DIR": str(tmp_path / "objects"),
           "TRITON_CACHE_DIR": str(tmp_path / "triton")}
    proc = subprocess.run([sys.executable, "-m", "sdk.cli", "conformance", "--kernels", "silu_and_mul", "--explain",
                           "--out", str(tmp_path / "r.jsonl")], env=env, capture_output=True, text=True, timeout=600,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "lowerings (which of the backend's ran each Triton kernel, and why):" in proc.stdout
    assert "compiled: 1 kernel(s) - compiled" in proc.stdout and "_silu_and_mul_kernel  (silu_and_mul)" in proc.stdout
    from sdk.conformance.results import load_results
    stats = [s for r in load_results(tmp_path / "r.jsonl").records for s in r.launch_stats]
    assert stats and all(s["tier"] == "compiled" and s["kernel"] == "_silu_and_mul_kernel" for s in stats)


# ------------------------------------------------------------------------- cache, selection
def test_object_cache_memory_and_disk(tmp_path, monkeypatch):
    from backends.cpu_interp import compiled
    from backends.cpu_interp.compiled import jit
    from sdk.ttir import parse
    text = (tmp_path / "k.ttir")
    x, out = torch.randn(64, generator=gen(20)), torch.empty(64)
    with sdk.launches.record() as rec:
        oob_kernel[(8,)](x, out, 61, BLOCK=8, cpu_tier="compiled")  # a new specialisation: compiled here
    module = rec.kernels[0].module
    text.write_text(module.text)
    first = compiled.build(parse(module.text))
    assert first.data is not None and first.cached  # lowered above: in memory now
    jit._MEMORY.clear()
    again = compiled.build(parse(module.text))
    assert again.cached and again.data == first.data  # from disk
    monkeypatch.setattr(jit, "compile_ir", lambda text: pytest.fail("compiled again"))
    compiled.build(parse(module.text))
    assert len(list((tmp_path / "objects").glob("*.o"))) == 1


def test_tier_from_environment_and_bad_value(monkeypatch):
    x, out = torch.randn(64, generator=gen(21)), torch.full((64,), float("nan"))
    monkeypatch.setenv("DAY0_CPU_TIER", "auto")
    oob_kernel[(2,)](x, out, 61, BLOCK=32, cpu_tier=None)
    # the environment is read when a kernel compiles; another constexpr compiles anew. A launch
    # this small costs less to interpret than to compile (tests/test_cpu_tier_auto.py)
    from backends.cpu_interp.tier import AUTO_WAITING
    assert tiers_ran() == {("interp", AUTO_WAITING)}
    monkeypatch.setenv("DAY0_CPU_TIER", "fast")
    from sdk.errors import ConfigError
    with pytest.raises(ConfigError, match="DAY0_CPU_TIER is 'fast'; choose one of interp, compiled, auto"):
        oob_kernel[(2,)](x, out, 61, BLOCK=16)


def test_the_reference_interpreter_runs_kernels_itself_whatever_the_environment(monkeypatch):
    x = torch.randn(64, generator=gen(22))
    monkeypatch.setenv("DAY0_CPU_TIER", "compiled")
    for how in ({"cpu_interpreter": "reference"}, {}):
        out = torch.full((64,), float("nan"))
        backend = get_backend("cpu_interp@reference" if not how else "cpu_interp")
        backend.take_launch_stats()  # launches of earlier tests in this process are not this one's
        with sdk.activate("cpu_interp@reference" if not how else "cpu_interp"):
            oob_kernel[(2,)](x, out, 61, BLOCK=32, **how)
            stats = backend.take_launch_stats()
        assert {(s["tier"], s["detail"]) for s in stats} == {
            ("interp", "the interp tier is selected (option cpu_tier, DAY0_CPU_TIER, or the reference interpreter)")}
        assert torch.equal(out[:61], x[:61]) and torch.isnan(out[61:]).all()


def test_llvm_crash_is_contained():
    """LLVM (built with its internal checks) aborts on some loops: the compile runs in a child
    process, retried with the vectorisers off."""
    from backends.cpu_interp.compiled import jit
    body = """
declare float @llvm.maxnum.f32(float, float)
define float @f(ptr noalias %x, float %init) {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %loop]
  %acc = phi float [%init, %entry], [%m, %loop]
  %p = getelementptr float, ptr %x, i64 %i
  %v = load float, ptr %p
  %m = call float @llvm.maxnum.f32(float %acc, float %v)
  %i1 = add i64 %i, 1
  %c = icmp ult i64 %i1, 127
  br i1 %c, label %loop, label %exit
exit:
  ret float %m
}
"""
    assert len(jit.compile_ir(body)) > 0
