"""The compiled tier against the interpreter on the language's corners, the ground Triton's own
language tests cover: casts between every pair of element types (fp8 and bool included), integer
overflow and shifts, reductions and scans over every axis (NaNs, ties, custom combines), masks and
`where`, the shape ops, `tl.dot` at its smallest shapes and every input precision, and atomics with
lanes that collide. Each kernel runs under both tiers on the same seeded inputs with outputs
poisoned first; results must agree bit for bit where the math is exact, and both must match an
independent torch reference where one exists. A kernel the compiled tier does not lower must run
on the interpreter, say so, and give the interpreter's answer."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from cpu_tier_fixtures import both, cpu_interp, gen, poison, same_bits  # noqa: F401  (cpu_interp: autouse)


# ------------------------------------------------------------------------------------ casts
TYPES = [torch.bool, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.uint16, torch.uint32,
         torch.uint64, torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.float8_e4m3fn,
         torch.float8_e5m2]
FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


@triton.jit
def _to(x, dst: tl.constexpr):
    """x.to(dst), through float32 where Triton has no direct cast (integers and fp8)."""
    if (dst.is_fp8() and not x.dtype.is_floating()) or (x.dtype.is_fp8() and not dst.is_floating()):
        return x.to(tl.float32).to(dst)
    else:
        return x.to(dst)


@triton.jit
def cast_all(x_ptr, o0, o1, o2, o3, o4, o5, o6, o7, o8, o9, o10, o11, o12, o13, o14, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(o0 + offs, _to(x, o0.dtype.element_ty))
    tl.store(o1 + offs, _to(x, o1.dtype.element_ty))
    tl.store(o2 + offs, _to(x, o2.dtype.element_ty))
    tl.store(o3 + offs, _to(x, o3.dtype.element_ty))
    tl.store(o4 + offs, _to(x, o4.dtype.element_ty))
    tl.store(o5 + offs, _to(x, o5.dtype.element_ty))
    tl.store(o6 + offs, _to(x, o6.dtype.element_ty))
    tl.store(o7 + offs, _to(x, o7.dtype.element_ty))
    tl.store(o8 + offs, _to(x, o8.dtype.element_ty))
    tl.store(o9 + offs, _to(x, o9.dtype.element_ty))
    tl.store(o10 + offs, _to(x, o10.dtype.element_ty))
    tl.store(o11 + offs, _to(x, o11.dtype.element_ty))
    tl.store(o12 + offs, _to(x, o12.dtype.element_ty))
    tl.store(o13 + offs, _to(x, o13.dtype.element_ty))
    tl.store(o14 + offs, _to(x, o14.dtype.element_ty))


def cast_inputs(dtype: torch.dtype, n: int) -> torch.Tensor:
    """Values of `dtype` that reach every corner of a cast: random bit patterns for integers (both
    ends of the range included), for floats a spread of magnitudes, the specials and values on
    the edges of the narrower types."""
    g = gen(100 + TYPES.index(dtype))
    if dtype == torch.bool:
        return torch.rand(n, generator=g) < 0.5
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        raw = torch.randint(-(1 << 62), 1 << 62, (n,), generator=g, dtype=torch.int64)
        if info.bits < 64:
            raw = raw % (1 << info.bits) + info.min
            x = raw.to(torch.int64).to(dtype) if info.min < 0 else raw.to(dtype)
        else:
            x = raw.view(dtype)
        x[:4] = torch.tensor([0, 1, info.max, info.min], dtype=torch.int64 if info.bits < 64 else dtype).to(dtype) \
            if dtype != torch.uint64 else torch.tensor([0, 1, -1, 1 << 40], dtype=torch.int64).view(torch.uint64)
        if info.min < 0:
            x[4:6] = torch.tensor([-1, -2]).to(dtype)
        return x
    x = torch.randn(n, generator=g, dtype=torch.float64) * torch.logspace(-10, 12, n, dtype=torch.float64)
    x = x[torch.randperm(n, generator=g)]
    special = [0.0, -0.0, 1.0, -1.0, 0.5, 1.5, 2.5, -2.5, 127.5, 255.5, 448.0, 464.0, 57344.0, 61440.0, 65504.0,
               65520.0, -65520.0, 3e38, float("inf"), -float("inf"), float("nan"), 2.0 ** 31, -2.0 ** 31, 2.0 ** 63,
               -2.0 ** 63, 2.0 ** 64, 1e-40, 6e-8, 1e-5, 300.0, -129.0, 40000.0, 70000.0]
    x[:len(special)] = torch.tensor(special, dtype=torch.float64)
    return x.to(dtype)


def cast_reference(x: torch.Tensor, dst: torch.dtype) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(torch's cast of `x` to `dst`, the lanes where it is Triton's too), or None."""
    if x.dtype in FP8 or dst in FP8:
        return None  # saturation and NaN rules of fp8 casts differ from torch's: numerics tests cover them
    ref = x.to(dst)
    keep = torch.ones(x.shape, dtype=torch.bool)
    if x.dtype.is_floating_point and not dst.is_floating_point and dst != torch.bool:
        info = torch.iinfo(dst)
        xd = x.double()
        keep = (xd > float(info.min) - 1) & (xd < float(info.max) + 1) & ~torch.isnan(xd)  # in range: truncation
        if info.bits == 64:
            keep &= xd.abs() < 2.0 ** 62
        wide = xd.clamp(-2.0 ** 62, 2.0 ** 62).to(torch.int64)  # selected in int64: some torch builds
        ref = torch.where(keep, wide, torch.zeros((), dtype=torch.int64)).to(dst)  # lack where on uint16
    if x.dtype == torch.uint64 and dst.is_floating_point:
        keep = x.view(torch.int64) >= 0  # torch reads uint64 as signed in some paths
    return ref, keep


@pytest.mark.parametrize("src", TYPES, ids=[str(t).split(".")[1] for t in TYPES])
def test_casts_between_every_type(src):
    n = 256
    x = cast_inputs(src, n)
    outs = {f"o{k}": ((n,), t) for k, t in enumerate(TYPES)}

    def launch(tier, x, **o):
        cast_all[(1,)](x, *[o[f"o{k}"] for k in range(len(TYPES))], N=n, cpu_tier=tier)
    ref, got = both(launch, {"x": x}, outs)
    for k, dst in enumerate(TYPES):
        same_bits(ref[f"o{k}"], got[f"o{k}"], f"{src} -> {dst}")
        expect = cast_reference(x, dst)
        if expect is not None:
            want, keep = expect
            same_bits(want[keep], got[f"o{k}"][keep], f"{src} -> {dst} against torch")


# ----------------------------------------------------------------------- integers: wrap, shifts
@triton.jit
def int_corners(a_ptr, b_ptr, out_ptr, N: tl.constexpr, W: tl.constexpr):
    offs = tl.arange(0, N)
    a = tl.load(a_ptr + offs)
    b = tl.load(b_ptr + offs)
    s = (b & (W - 1)).to(a.dtype)  # shift amounts inside the width
    results = (a + b, a - b, a * b, -a, a << s, a >> s, tl.abs(a), a // tl.where(b == 0, 1, b),
               a % tl.where(b == 0, 1, b), a * a * a, (a + 1) * (b - 1), ~a, a ^ (a >> 1),
               tl.where(a > b, a - b, b - a), tl.maximum(a, b), tl.minimum(a, b))
    for k in tl.static_range(len(results)):
        tl.store(out_ptr + k * N + offs, results[k])


INTS = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.uint16, torch.uint32, torch.uint64]


def _wrap(v: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    return v.astype({torch.int8: np.int8, torch.int16: np.int16, torch.int32: np.int32, torch.int64: np.int64,
                     torch.uint8: np.uint8, torch.uint16: np.uint16, torch.uint32: np.uint32,
                     torch.uint64: np.uint64}[dtype])


@pytest.mark.parametrize("dtype", INTS, ids=[str(t).split(".")[1] for t in INTS])
def test_integer_wrap_and_shifts(dtype):
    n = 256
    bits_ = torch.iinfo(dtype).bits
    a = cast_inputs(dtype, n)
    b = cast_inputs(dtype, n).roll(7)

    def launch(tier, a, b, out):
        int_corners[(1,)](a, b, out, N=n, W=bits_, cpu_tier=tier)
    ref, got = both(launch, {"a": a, "b": b}, {"out": ((16, n), dtype)})
    same_bits(ref["out"], got["out"], str(dtype))
    # numpy's wrapping integer arithmetic as the reference for what it defines the same way
    an, bn = _wrap(a.numpy() if dtype != torch.uint64 else a.view(torch.int64).numpy(), dtype), None
    bn = _wrap(b.numpy() if dtype != torch.uint64 else b.view(torch.int64).numpy(), dtype)
    s = bn & (bits_ - 1)
    with np.errstate(over="ignore"):
        want = {0: an + bn, 1: an - bn, 2: an * bn, 4: an << s, 5: an >> s, 11: ~an, 14: np.maximum(an, bn),
                15: np.minimum(an, bn)}
    out = got["out"] if dtype != torch.uint64 else got["out"].view(torch.int64)
    for k, w in want.items():
        have = _wrap(out[k].numpy(), dtype)
        assert np.array_equal(have, w.astype(have.dtype)), (dtype, k)


# ------------------------------------------------------------------- reductions over every axis
@triton.jit
def reduce_axes(x_ptr, s0, s1, mx0, mx1, mn1, am1, an0, k_ptr, R: tl.constexpr, C: tl.constexpr):
    r = tl.arange(0, R)
    c = tl.arange(0, C)
    x = tl.load(x_ptr + r[:, None] * C + c[None, :])
    tl.store(s0 + c, tl.sum(x, 0))
    tl.store(s1 + r, tl.sum(x, 1))
    tl.store(mx0 + c, tl.max(x, 0))
    tl.store(mx1 + r, tl.max(x, 1))
    tl.store(mn1 + r, tl.min(x, 1))
    tl.store(am1 + r, tl.argmax(x, 1))
    tl.store(an0 + c, tl.argmin(x, 0))
    kept = tl.max(x, 1, keep_dims=True)  # [R, 1]
    tl.store(k_ptr + r[:, None] * C + c[None, :], x - kept)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32,
                                   torch.int8, torch.int64, torch.uint8])
def test_reductions_every_axis(dtype):
    R, C = 8, 32
    if dtype.is_floating_point:
        x = torch.randn(R, C, generator=gen(200)).to(dtype)
        x[2, 7] = x[2, 11] = x[2].max() + 1          # ties: the first index wins
        x[5, 3] = float("nan")                         # a NaN in a row and a column
        x[6, :] = x[6, 0]                              # a constant row
    else:
        info = torch.iinfo(dtype)
        x = torch.randint(max(info.min, -1000), min(info.max, 1000), (R, C), generator=gen(200),
                          dtype=torch.int64).to(dtype)
        x[2, 7] = x[2, 11] = info.max
        x[3, 0] = info.min
    outs = {"s0": ((C,), dtype), "s1": ((R,), dtype), "mx0": ((C,), dtype), "mx1": ((R,), dtype),
            "mn1": ((R,), dtype), "am1": ((R,), torch.int32), "an0": ((C,), torch.int32), "k": ((R, C), dtype)}

    def launch(tier, x, **o):
        reduce_axes[(1,)](x, o["s0"], o["s1"], o["mx0"], o["mx1"], o["mn1"], o["am1"], o["an0"], o["k"], R=R, C=C,
                          cpu_tier=tier)
    ref, got = both(launch, {"x": x}, outs)
    for k in ("mx0", "mx1", "mn1", "am1", "an0", "k"):
        same_bits(ref[k], got[k], k)
    if not dtype.is_floating_point:
        same_bits(ref["s0"], got["s0"], "s0")
        same_bits(ref["s1"], got["s1"], "s1")
        assert torch.equal(got["s1"], x.to(torch.int64).sum(1).to(dtype))
        assert torch.equal(got["mx1"], x.max(1).values) and torch.equal(got["am1"], x.argmax(1).int())
        assert torch.equal(got["an0"], x.argmin(0).int())
    else:
        tol = {torch.float16: 2e-2, torch.bfloat16: 1e-1}.get(dtype, 1e-5)
        for k, want in (("s0", x.double().sum(0)), ("s1", x.double().sum(1))):
            torch.testing.assert_close(got[k].double(), want, rtol=tol, atol=tol, equal_nan=True)
            torch.testing.assert_close(got[k].double(), ref[k].double(), rtol=tol / 4, atol=tol / 4, equal_nan=True)
        finite = ~torch.isnan(x.double()).any(1)
        assert torch.equal(got["mx1"][finite], x[finite].max(1).values)
        assert torch.equal(got["am1"][2], torch.tensor(7, dtype=torch.int32))


@triton.jit
def _pair_max(a, ia, b, ib):
    take = (b > a) | ((b == a) & (ib < ia))
    return tl.where(take, b, a), tl.where(take, ib, ia)


@triton.jit
def _mul(a, b):
    return a * b


@triton.jit
def _affine(a1, b1, a2, b2):  # x -> a * x + b, composed: the recurrence h = a * h + b
    return a1 * a2, b1 * a2 + b2


@triton.jit
def custom_combines(x_ptr, y_ptr, mx_ptr, ix_ptr, prod_ptr, h_ptr, cp_ptr, cs_ptr, xs_ptr, bo_ptr,
                    R: tl.constexpr, C: tl.constexpr):
    r = tl.arange(0, R)
    c = tl.arange(0, C)
    at = r[:, None] * C + c[None, :]
    x = tl.load(x_ptr + at)
    y = tl.load(y_ptr + at)
    idx = tl.broadcast_to(c[None, :], (R, C))
    m, i = tl.reduce((x, idx), 1, _pair_max)
    tl.store(mx_ptr + r, m)
    tl.store(ix_ptr + r, i)
    tl.store(prod_ptr + c, tl.reduce(1 + x * 0.01, 0, _mul))
    _, h = tl.associative_scan((y, x), 1, _affine)
    tl.store(h_ptr + at, h)
    tl.store(cp_ptr + at, tl.cumprod(1 + x * 0.01, 0, reverse=True))
    xi = (x * 100).to(tl.int32)
    tl.store(cs_ptr + at, tl.cumsum(xi, 1, reverse=True))
    tl.store(xs_ptr + r, tl.xor_sum(xi, 1))
    tl.store(bo_ptr + c, tl.sum((x > 0).to(tl.int32), 0) + tl.reduce_or(xi, 0))


def test_custom_reductions_and_scans():
    R, C = 16, 32
    x = torch.randn(R, C, generator=gen(201))
    y = torch.rand(R, C, generator=gen(202)) * 0.9 + 0.1
    x[4, 9] = x[4, 20] = x[4].max() + 1
    outs = {"mx": ((R,), torch.float32), "ix": ((R,), torch.int32), "prod": ((C,), torch.float32),
            "h": ((R, C), torch.float32), "cp": ((R, C), torch.float32), "cs": ((R, C), torch.int32),
            "xs": ((R,), torch.int32), "bo": ((C,), torch.int32)}

    def launch(tier, x, y, **o):
        custom_combines[(1,)](x, y, *[o[k] for k in outs], R=R, C=C, cpu_tier=tier)
    ref, got = both(launch, {"x": x, "y": y}, outs)
    for k in ("mx", "ix", "cs", "xs", "bo"):
        same_bits(ref[k], got[k], k)
    for k in ("prod", "h", "cp"):
        torch.testing.assert_close(got[k], ref[k], rtol=1e-6, atol=1e-6)
    assert torch.equal(got["ix"], x.argmax(1).int()) and got["ix"][4].item() == 9
    xi = (x * 100).int()
    assert torch.equal(got["cs"], xi.flip(1).cumsum(1).flip(1).int())
    xs = torch.zeros(R, dtype=torch.int32)
    for j in range(C):
        xs ^= xi[:, j]
    assert torch.equal(got["xs"], xs)
    h = torch.zeros(R, dtype=torch.float64)
    want = []
    for j in range(C):
        h = y[:, j].double() * h + x[:, j].double()
        want.append(h.clone())
    torch.testing.assert_close(got["h"].double(), torch.stack(want, 1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got["cp"].double(), (1 + x.double() * 0.01).flip(0).cumprod(0).flip(0),
                               rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------ masks, where, bools
@triton.jit
def masks_kernel(x_ptr, flags_ptr, out_ptr, bout_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    f = tl.load(flags_ptr + offs, mask=m, other=False)  # i1 in memory
    x = tl.load(x_ptr + offs, mask=m & f, other=float("nan"))
    y = tl.where(f, x * 2, -1.0)
    z = tl.where(x > 0, x, 0.0)  # NaN lanes compare false
    tl.store(out_ptr + offs, y, mask=m)
    tl.store(out_ptr + n + offs, z, mask=m & (offs % 3 != 0))
    tl.store(bout_ptr + offs, (x != x) | (offs % 5 == 0), mask=m)


def test_masks_where_and_bool_memory():
    n, B = 1000, 128
    x = torch.randn(n, generator=gen(300))
    flags = torch.rand(n, generator=gen(301)) < 0.6

    def launch(tier, x, flags, out, bout):
        masks_kernel[(triton.cdiv(n, B),)](x, flags, out, bout, n, BLOCK=B, cpu_tier=tier)
    ref, got = both(launch, {"x": x, "flags": flags}, {"out": ((2 * n,), torch.float32), "bout": ((n,), torch.bool)})
    same_bits(ref["out"], got["out"], "out")
    same_bits(ref["bout"], got["bout"], "bout")
    assert torch.equal(got["out"][:n], torch.where(flags, x * 2, -1.0))
    keep = torch.arange(n) % 3 != 0
    z = torch.where(flags & (x > 0), x, 0.0)
    assert torch.equal(got["out"][n:][keep], z[keep]) and torch.isnan(got["out"][n:][~keep]).all()
    assert torch.equal(got["bout"], ~flags | (torch.arange(n) % 5 == 0))


# --------------------------------------------------------------------------------- shape ops
@triton.jit
def shape_ops(x_ptr, o_perm, o_join, o_inter, o_split, o_flip, o_sort, o_exp, A: tl.constexpr, B: tl.constexpr,
              C: tl.constexpr):
    a, b, c = tl.arange(0, A), tl.arange(0, B), tl.arange(0, C)
    x = tl.load(x_ptr + a[:, None, None] * B * C + b[None, :, None] * C + c[None, None, :])
    p = tl.permute(x, (2, 0, 1))  # [C, A, B]
    tl.store(o_perm + c[:, None, None] * A * B + a[None, :, None] * B + b[None, None, :], p)
    j = tl.join(x, x * 2)  # [A, B, C, 2]
    flat = tl.reshape(j, (A * B * C * 2,))
    tl.store(o_join + tl.arange(0, A * B * C * 2), flat)
    row = tl.reshape(x, (A * B * C,))
    tl.store(o_inter + tl.arange(0, 2 * A * B * C), tl.interleave(row, -row))
    lo, hi = tl.split(tl.reshape(row, (A * B * C // 2, 2)))
    tl.store(o_split + tl.arange(0, A * B * C // 2), lo - hi)
    tl.store(o_flip + tl.arange(0, A * B * C), tl.flip(row, 0))
    tl.store(o_sort + tl.arange(0, A * B * C), tl.sort(row, 0, descending=True))
    e = tl.expand_dims(tl.sum(x, 2), 2) + tl.zeros((A, B, C), tl.float32)
    tl.store(o_exp + a[:, None, None] * B * C + b[None, :, None] * C + c[None, None, :], e)


def test_shape_ops_3d():
    A, B, C = 2, 4, 8
    n = A * B * C
    x = torch.randn(A, B, C, generator=gen(400))
    outs = {"perm": ((C, A, B), torch.float32), "join": ((2 * n,), torch.float32), "inter": ((2 * n,), torch.float32),
            "split": ((n // 2,), torch.float32), "flip": ((n,), torch.float32), "sort": ((n,), torch.float32),
            "exp": ((A, B, C), torch.float32)}

    def launch(tier, x, **o):
        shape_ops[(1,)](x, *[o[k] for k in outs], A=A, B=B, C=C, cpu_tier=tier)
    ref, got = both(launch, {"x": x}, outs)
    for k in outs:
        if k != "exp":
            same_bits(ref[k], got[k], k)
    row = x.reshape(-1)
    assert torch.equal(got["perm"], x.permute(2, 0, 1))
    assert torch.equal(got["join"], torch.stack([x, x * 2], -1).reshape(-1))
    assert torch.equal(got["inter"], torch.stack([row, -row], 1).reshape(-1))
    assert torch.equal(got["split"], row[0::2] - row[1::2])
    assert torch.equal(got["flip"], row.flip(0))
    assert torch.equal(got["sort"], row.sort(descending=True).values)
    torch.testing.assert_close(got["exp"], x.sum(2, keepdim=True).expand(A, B, C))
    torch.testing.assert_close(got["exp"], ref["exp"], rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------------- small dots
@triton.jit
def small_dot(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, PREC: tl.constexpr,
              ACC: tl.constexpr, OUT_F16: tl.constexpr):
    m, n, k = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + m[:, None] * K + k[None, :])
    b = tl.load(b_ptr + k[:, None] * N + n[None, :])
    if ACC:
        acc = tl.full((M, N), 0.25, tl.float32)
        c = tl.dot(a, b, acc, input_precision=PREC)
    elif OUT_F16:
        c = tl.dot(a, b, out_dtype=tl.float16)
    else:
        c = tl.dot(a, b, input_precision=PREC)
    tl.store(c_ptr + m[:, None] * N + n[None, :], c.to(c_ptr.dtype.element_ty))


DOTS = [  # (M, N, K, input dtype, precision, with acc, f16 out)
    (16, 16, 16, torch.float32, "ieee", False, False),
    (16, 16, 16, torch.float32, "tf32", False, False),
    (16, 32, 16, torch.float32, "tf32x3", True, False),
    (32, 16, 64, torch.float16, "ieee", True, False),
    (16, 16, 32, torch.float16, "ieee", False, True),
    (16, 64, 16, torch.bfloat16, "ieee", False, False),
    (16, 16, 32, torch.int8, "ieee", False, False),
    (16, 16, 32, torch.float8_e4m3fn, "ieee", False, False),
    (32, 16, 32, torch.float8_e5m2, "ieee", True, False),
]


def _operands(dtype, a_shape, b_shape, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Seeded dot operands: integers over int8's whole range, else normal values of spread 2."""
    if dtype == torch.int8:
        return tuple(torch.randint(-128, 128, shape, generator=gen(seed + i), dtype=dtype)
                     for i, shape in enumerate((a_shape, b_shape)))
    return tuple((torch.randn(shape, generator=gen(seed + i)) * 2).to(dtype) for i, shape in enumerate((a_shape, b_shape)))


@pytest.mark.parametrize("M,N,K,dtype,prec,acc,f16", DOTS,
                         ids=[f"{d[0]}x{d[1]}x{d[2]}-{str(d[3]).split('.')[1]}-{d[4]}{'-acc' if d[5] else ''}"
                              f"{'-f16' if d[6] else ''}" for d in DOTS])
def test_small_dots(M, N, K, dtype, prec, acc, f16):
    a, b = _operands(dtype, (M, K), (K, N), 500)
    out_dt = torch.int32 if dtype == torch.int8 else torch.float16 if f16 else torch.float32

    def launch(tier, a, b, c):
        small_dot[(1,)](a, b, c, M=M, N=N, K=K, PREC=prec, ACC=acc, OUT_F16=f16, cpu_tier=tier)
    ref, got = both(launch, {"a": a, "b": b}, {"c": ((M, N), out_dt)})
    want = a.double() @ b.double() + (0.25 if acc else 0.0)
    if dtype == torch.int8:
        same_bits(ref["c"], got["c"])
        assert torch.equal(got["c"], (a.int() @ b.int()))
        return
    scale = want.abs().max().item()
    tol = {"tf32": 2e-3, "tf32x3": 1e-5}.get(prec, 1e-5) * scale if dtype == torch.float32 else 2e-3 * scale
    if f16:
        tol = 2e-3 * scale
    torch.testing.assert_close(got["c"].double(), want, rtol=0, atol=tol)
    torch.testing.assert_close(got["c"].double(), ref["c"].double(), rtol=0, atol=max(tol / 8, 1e-6 * scale))


@triton.jit
def batched_dot(a_ptr, b_ptr, c_ptr, Z: tl.constexpr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                ACC: tl.constexpr):
    z, m, n, k = tl.arange(0, Z), tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + z[:, None, None] * M * K + m[None, :, None] * K + k[None, None, :])
    b = tl.load(b_ptr + z[:, None, None] * K * N + k[None, :, None] * N + n[None, None, :])
    at = z[:, None, None] * M * N + m[None, :, None] * N + n[None, None, :]
    if ACC:  # the accumulator a tensor of its own (different per batch)
        c = tl.dot(a, b, (at % 7).to(tl.float32))
    else:
        c = tl.dot(a, b)
    tl.store(c_ptr + at, c.to(c_ptr.dtype.element_ty))


@pytest.mark.parametrize("dtype,acc", [(torch.float16, False), (torch.float32, True), (torch.int8, False)])
def test_batched_dot_3d(dtype, acc):
    Z, M, N, K = 4, 16, 16, 32
    if dtype == torch.int8:
        a = torch.randint(-128, 128, (Z, M, K), generator=gen(510), dtype=dtype)
        b = torch.randint(-128, 128, (Z, K, N), generator=gen(511), dtype=dtype)
        out_dt = torch.int32
    else:
        a = torch.randn(Z, M, K, generator=gen(510)).to(dtype)
        b = torch.randn(Z, K, N, generator=gen(511)).to(dtype)
        out_dt = torch.float32

    def launch(tier, a, b, c):
        batched_dot[(1,)](a, b, c, Z=Z, M=M, N=N, K=K, ACC=acc, cpu_tier=tier)
    ref, got = both(launch, {"a": a, "b": b}, {"c": ((Z, M, N), out_dt)})
    want = a.double() @ b.double()
    if acc:
        want += (torch.arange(Z * M * N) % 7).reshape(Z, M, N).double()
    if dtype == torch.int8:
        same_bits(ref["c"], got["c"])
        assert torch.equal(got["c"].long(), want.long())
        return
    torch.testing.assert_close(got["c"].double(), want, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(got["c"], ref["c"], rtol=1e-6, atol=1e-5)


# ------------------------------------------------------------------------- colliding atomics
@triton.jit
def colliding_atomics(idx_ptr, v_ptr, i_ptr, f_ptr, h_ptr, mx_ptr, x_ptr, old_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    slot = tl.load(idx_ptr + offs, mask=m, other=0)  # many lanes share a slot
    v = tl.load(v_ptr + offs, mask=m, other=0.0)
    tl.atomic_add(i_ptr + slot, 1, mask=m)
    tl.atomic_add(f_ptr + slot, v, mask=m)
    tl.atomic_add(h_ptr + slot, v.to(tl.float16), mask=m)
    tl.atomic_max(mx_ptr + slot, v, mask=m)
    tl.atomic_min(mx_ptr + 8 + slot, v, mask=m)
    old = tl.atomic_xchg(x_ptr + slot, offs, mask=m)
    tl.store(old_ptr + offs, old, mask=m)


def test_atomics_with_colliding_lanes():
    n, B = 600, 64
    idx = torch.randint(0, 8, (n,), generator=gen(600), dtype=torch.int32)
    v = torch.randn(n, generator=gen(601)) * 10

    def launch(tier, idx, v, i, f, h, mx, x, old):
        colliding_atomics[(triton.cdiv(n, B),)](idx, v, i, f, h, mx, x, old, n, BLOCK=B, cpu_tier=tier)
    zeros = {"i": torch.zeros(8, dtype=torch.int32), "f": torch.zeros(8), "h": torch.zeros(8, dtype=torch.float16),
             "mx": torch.cat([torch.full((8,), -1e30), torch.full((8,), 1e30)]),
             "x": torch.full((8,), -1, dtype=torch.int32)}
    ref, got = both(launch, {"idx": idx, "v": v, **zeros}, {"old": ((n,), torch.int32)})
    for k in ("i", "f", "h", "mx", "x", "old"):
        same_bits(ref[k], got[k], k)
    assert torch.equal(got["i"], torch.bincount(idx.long(), minlength=8).int())
    want_f = torch.zeros(8, dtype=torch.float64).index_add_(0, idx.long(), v.double())
    torch.testing.assert_close(got["f"].double(), want_f, rtol=1e-5, atol=1e-4)
    for s in range(8):
        sel = v[idx == s]
        assert got["mx"][s].item() == sel.max().item() and got["mx"][8 + s].item() == sel.min().item()
        last = int(torch.nonzero(idx == s)[-1])  # lanes and programs apply in order: the last one stays
        assert got["x"][s].item() == last


# ------------------------------------------------------------------ functions kept out of line
@triton.jit(noinline=True)
def _fma_pair(x, y, k):
    return x * y + k, x - y * k


@triton.jit(noinline=True)
def _early_return(x, k):
    if k > 0:
        return x * k
    return x - 1.0


@triton.jit
def out_of_line_calls(x_ptr, y_ptr, out_ptr, n, EARLY: tl.constexpr):
    pid = tl.program_id(0)
    x, y = tl.load(x_ptr + pid), tl.load(y_ptr + pid)
    acc = 0.0
    for k in range(-1, n):  # called in a loop
        if EARLY:
            acc += _early_return(x, k)
        else:
            a, b = _fma_pair(x, y, k)
            acc += a * b
    tl.store(out_ptr + pid, acc)


@pytest.mark.parametrize("early", [False, True], ids=["one_block", "early_return"])
def test_functions_kept_out_of_line(early):
    """`noinline` is a GPU code-size hint: the compiled tier inlines such calls (Triton's inliner)
    and runs the kernel natively. A callee with an early return is several blocks, which the
    inliner does not put inside a loop: that kernel runs on the interpreter and says why."""
    n, P = 4, 64
    x, y = torch.randn(P, generator=gen(710)), torch.randn(P, generator=gen(711))

    def launch(tier, x, y, out):
        out_of_line_calls[(P,)](x, y, out, n, EARLY=early, cpu_tier=tier)
    ref, got = both(launch, {"x": x, "y": y}, {"out": ((P,), torch.float32)}, native=not early)
    same_bits(ref["out"], got["out"], "out")
    want = torch.zeros(P, dtype=torch.float64)
    xd, yd = x.double(), y.double()
    for k in range(-1, n):
        if early:
            want += xd * k if k > 0 else xd - 1.0
        else:
            want += (xd * yd + k) * (xd - yd * k)
    torch.testing.assert_close(got["out"].double(), want, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------- fallbacks
@triton.jit
def asm_kernel(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    y = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.int32, is_pure=True, pack=1)
    tl.store(out_ptr + offs, y)


def test_an_op_neither_tier_runs_is_reported_before_anything_runs():
    """inline asm is no op the CPU can run: both tiers refuse it up front, naming it (the compiled
    tier does not crash and does not run something else)."""
    from sdk.errors import Day0Error
    x = torch.randint(0, 100, (16,), generator=gen(700), dtype=torch.int32)
    for tier in ("interp", "compiled"):
        out = poison((16,), torch.int32)
        with pytest.raises(Day0Error, match="inline_asm"):
            asm_kernel[(1,)](x, out, N=16, cpu_tier=tier)
        assert torch.equal(out, poison((16,), torch.int32))


@triton.jit
def dot_wt(a_ptr, w_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, TRANS: tl.constexpr):
    """c = a @ w^T with w [N, K] row-major: B read along K (a linear layer's weight), either by its
    pointers or as tl.trans of the tile loaded as it lies."""
    m, n, k = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + m[:, None] * K + k[None, :])
    if TRANS:
        b = tl.trans(tl.load(w_ptr + n[:, None] * K + k[None, :]))
    else:
        b = tl.load(w_ptr + n[None, :] * K + k[:, None])
    c = tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + m[:, None] * N + n[None, :], c.to(c_ptr.dtype.element_ty))


WT_DOTS = [  # (M, N, K, dtype, B by tl.trans): sides multiples of the transpose block, and one that is not
    (16, 32, 64, torch.float32, False), (16, 32, 64, torch.float32, True), (32, 16, 64, torch.bfloat16, False),
    (16, 64, 32, torch.float16, True), (16, 32, 32, torch.int8, False), (16, 16, 16, torch.float64, False),
    (16, 16, 8, torch.float64, True), (16, 16, 8, torch.float32, False), (16, 8, 16, torch.float32, False),
]


@pytest.mark.parametrize("M,N,K,dtype,trans", WT_DOTS,
                         ids=[f"{d[0]}x{d[1]}x{d[2]}-{str(d[3]).split('.')[1]}{'-trans' if d[4] else ''}"
                              for d in WT_DOTS])
def test_dots_with_a_transposed_b(M, N, K, dtype, trans, monkeypatch):
    """B read along K is copied to row-major for the dot a square block at a time (rows loaded as
    vectors, transposed by shuffles) where its sides allow, element by element where they do not:
    either way the product is the interpreter's and torch's."""
    from backends.cpu_interp.compiled.core import FunctionEmitter
    blocked = []
    orig = FunctionEmitter._transpose_blocks

    def spy(self, t, out):
        blocked.append(orig(self, t, out))
        return blocked[-1]
    monkeypatch.setattr(FunctionEmitter, "_transpose_blocks", spy)
    a, w = _operands(dtype, (M, K), (N, K), 520)
    out_dt = {torch.int8: torch.int32, torch.float64: torch.float64}.get(dtype, torch.float32)

    def launch(tier, a, w, c):
        dot_wt[(1,)](a, w, c, M=M, N=N, K=K, TRANS=trans, cpu_tier=tier)
    ref, got = both(launch, {"a": a, "w": w}, {"c": ((M, N), out_dt)})
    block = 8 if dtype == torch.float64 else 16
    assert any(blocked) == (K % block == 0 and N % block == 0), blocked
    want = a.double() @ w.double().T
    if dtype == torch.int8:
        same_bits(ref["c"], got["c"])
        assert torch.equal(got["c"].long(), want.long())
        return
    scale = want.abs().max().item()
    tol = (1e-12 if dtype == torch.float64 else 1e-5) * scale
    torch.testing.assert_close(got["c"].double(), want, rtol=0, atol=tol)
    torch.testing.assert_close(got["c"].double(), ref["c"].double(), rtol=0, atol=tol)
