"""cpu_interp's compiled tier on blocks that are not read row by row: tiles read along a dimension
other than the last (a weight read along K, a transposed tile) are read in the order memory
holds them and kept transposed, `tt.dot` takes such a B as rows of B^T, and reads through a
pointer that a loop advances ask for the next iteration's lines early. Each against the
interpreter on the same seeded inputs, outputs poisoned first: loads and stores bit for bit,
faults word for word, dot products within the tolerance of a float32 sum taken in another order."""
from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from sdk.backend import get_backend
from sdk.errors import KernelFault


from cpu_tier_fixtures import both, cpu_interp, gen, same_bits  # noqa: F401  (cpu_interp: autouse)


def tiers_ran() -> set[str]:
    return {s["tier"] for s in get_backend("cpu_interp").take_launch_stats()}


# ------------------------------------------------------------------------ transposed reads
@triton.jit
def transpose_copy(x_ptr, out_ptr, R, C, stride_xc, BR: tl.constexpr, BC: tl.constexpr):
    """out[r, c] = x[c, r] + 1 for the tile at (program 0, program 1); x is read along r."""
    r = tl.program_id(0) * BR + tl.arange(0, BR)
    c = tl.program_id(1) * BC + tl.arange(0, BC)
    m = (r[:, None] < R) & (c[None, :] < C)
    x = tl.load(x_ptr + r[:, None] + c[None, :] * stride_xc, mask=m, other=-3.0)
    tl.store(out_ptr + r[:, None] * C + c[None, :], x + 1, mask=m)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tile_read_along_its_first_dimension_bitwise(dtype):
    R, C = 70, 45
    x = torch.randn(C, R, generator=gen(1)).to(dtype)

    def launch(tier, x, out):
        transpose_copy[(triton.cdiv(R, 32), triton.cdiv(C, 16))](x, out, R, C, R, BR=32, BC=16, cpu_tier=tier)
    ref, got = both(launch, {"x": x}, {"out": ((R, C), dtype)})
    same_bits(ref["out"], got["out"])
    torch.testing.assert_close(got["out"].float(), (x.T + 1).float(), rtol=0, atol=0)


def test_transposed_read_out_of_bounds_worded_like_the_interpreter():
    R, C = 40, 24
    x = torch.randn(C - 1, R, generator=gen(2))  # one row of x (a column of the tile) short
    messages = []
    for tier in ("interp", "compiled"):
        with pytest.raises(KernelFault) as exc:
            transpose_copy[(2, 2)](x, torch.empty(R, C), R, C, R, BR=32, BC=16, cpu_tier=tier)
        assert tiers_ran() == {tier}
        messages.append(str(exc.value))
    assert messages[0] == messages[1]
    assert "out-of-bounds load from 'x_ptr'" in messages[1]


# --------------------------------------------------------------------------- dot of B^T
@triton.jit
def linear(x_ptr, w_ptr, y_ptr, M, N, K, stride_wn, TRANS: tl.constexpr,
           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """y = x @ w^T, w [N, K] row-major: read as a [BK, BN] tile along K, or as a [BN, BK] tile
    and transposed with tl.trans (TRANS)."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    xp = x_ptr + rm[:, None] * K + rk[None, :]
    if TRANS:
        wp = w_ptr + rn[:, None] * stride_wn + rk[None, :]
    else:
        wp = w_ptr + rn[None, :] * stride_wn + rk[:, None]
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        left = K - k * BK
        a = tl.load(xp, mask=(rm[:, None] < M) & (rk[None, :] < left), other=0.0)
        if TRANS:
            w = tl.load(wp, mask=(rn[:, None] < N) & (rk[None, :] < left), other=0.0)
            acc = tl.dot(a, tl.trans(w), acc)
        else:
            w = tl.load(wp, mask=(rn[None, :] < N) & (rk[:, None] < left), other=0.0)
            acc = tl.dot(a, w, acc)
        xp += BK
        wp += BK
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@pytest.mark.parametrize("trans", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dot_with_b_read_along_k(dtype, trans):
    M, N, K = 19, 40, 150  # masked edges in M, N and K; three K steps
    x = torch.randn(M, K, generator=gen(3)).to(dtype)
    w = (torch.randn(N, K, generator=gen(4)) / K ** 0.5).to(dtype)

    def launch(tier, x, w, y):
        linear[(triton.cdiv(M, 16), triton.cdiv(N, 32))](x, w, y, M, N, K, K, TRANS=trans, BM=16, BN=32, BK=64,
                                                         cpu_tier=tier)
    ref, got = both(launch, {"x": x, "w": w}, {"y": ((M, N), dtype)})
    tol = {torch.float32: 1e-5, torch.bfloat16: 1.6e-2}[dtype]
    torch.testing.assert_close(got["y"].float(), ref["y"].float(), rtol=tol, atol=tol)
    exact = (x.double() @ w.double().T).to(dtype).float()
    torch.testing.assert_close(got["y"].float(), exact, rtol=tol, atol=tol)


@triton.jit
def strided_sum(x_ptr, out_ptr, R, C, stride_r, BR: tl.constexpr, BC: tl.constexpr):
    """out[c] = sum over r of x[r, c], rows of BR at a time: the pointer advances by a step made
    inside the loop (BR * stride_r), the read walks r innermost (x is read down its columns)."""
    c = tl.program_id(0) * BC + tl.arange(0, BC)
    r = tl.arange(0, BR)
    p = x_ptr + c[None, :] + r[:, None] * stride_r
    acc = tl.zeros((BC,), tl.float32)
    for k in range(0, tl.cdiv(R, BR)):
        x = tl.load(p, mask=(c[None, :] < C) & (r[:, None] < R - k * BR), other=0.0)
        acc += tl.sum(x, axis=0)
        p += BR * stride_r
    tl.store(out_ptr + c, acc, mask=c < C)


def test_loop_advanced_reads_with_a_step_made_in_the_loop():
    R, C = 100, 24
    x = torch.randn(R, C, generator=gen(5))

    def launch(tier, x, out):
        strided_sum[(2,)](x, out, R, C, C, BR=16, BC=16, cpu_tier=tier)
    ref, got = both(launch, {"x": x}, {"out": ((C,), torch.float32)})
    torch.testing.assert_close(got["out"], ref["out"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got["out"], x.sum(0), rtol=1e-5, atol=1e-5)


@triton.jit
def strided_gather(x_ptr, out_ptr, n, stride, BLOCK: tl.constexpr):
    """out[i] = x[i * stride] for i < n, -5 past n (lanes whose addresses leave x are masked off)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs * stride, mask=offs < n, other=-5.0)
    tl.store(out_ptr + offs, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_strided_reads_with_masked_lanes_bitwise(dtype):
    n, stride, BLOCK = 45, 3, 16
    x = torch.randn(n * stride - 2, generator=gen(6)).to(dtype)  # the last lane's element is the last of x

    def launch(tier, x, out):
        strided_gather[(4,)](x, out, n, stride, BLOCK=BLOCK, cpu_tier=tier)
    ref, got = both(launch, {"x": x}, {"out": ((4 * BLOCK,), dtype)})
    same_bits(ref["out"], got["out"])
    assert torch.equal(got["out"][:n], x[::stride][:n]) and bool((got["out"][n:] == -5).all())
