"""A dozen small kernels whose TTIR covers what the reader must handle."""
import triton
import triton.language as tl


@triton.jit
def masked_copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n, other=-1.0), mask=offs < n)


@triton.jit
def row_reductions(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=float("-inf"))
    m = tl.max(x, axis=0)
    e = tl.exp(x - m)
    s = tl.sum(tl.where(cols < N, e, 0.0), axis=0)
    i = tl.argmax(x, axis=0)
    tl.store(out_ptr + row * 3, m)
    tl.store(out_ptr + row * 3 + 1, s)
    tl.store(out_ptr + row * 3 + 2, i.to(tl.float32))


@triton.jit
def scans(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    c = tl.cumsum(x, 0) + tl.cumprod(x, 0, reverse=True)
    tl.store(y_ptr + offs, c)


@triton.jit
def small_dot(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b, out_dtype=tl.float32))


@triton.jit
def loops(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for k in range(0, n):
        acc += tl.load(x_ptr + k * BLOCK + offs)
    i = 0
    while i < n:
        acc = acc * 0.5
        i += 2
    if n > 3:
        acc = acc + 1.0
    else:
        acc = acc - 1.0
    tl.store(y_ptr + offs, acc)


@triton.jit
def atomics(x_ptr, cnt_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.atomic_add(cnt_ptr, tl.sum(x, 0))
    tl.atomic_max(cnt_ptr + 1, tl.max(x, 0))
    tl.atomic_cas(cnt_ptr + 2, 0.0, 1.0)
    tl.atomic_xchg(cnt_ptr + 3, 2.0)


@triton.jit
def shapes(x_ptr, y_ptr, R: tl.constexpr, C: tl.constexpr):
    r = tl.arange(0, R)
    c = tl.arange(0, C)
    x = tl.load(x_ptr + r[:, None] * C + c[None, :])
    t = tl.trans(x)
    flat = tl.reshape(t, (R * C,))
    b = tl.broadcast_to(tl.expand_dims(tl.sum(x, 1), 1), (R, C))
    tl.store(y_ptr + tl.arange(0, R * C), flat + tl.reshape(b, (R * C,)))


@triton.jit
def casts(x_ptr, y_ptr, z_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    h = x.to(tl.bfloat16)
    i = x.to(tl.int32)
    f8 = x.to(tl.float8e5)
    tl.store(y_ptr + offs, h.to(tl.float32) + i.to(tl.float32) + f8.to(tl.float32))
    tl.store(z_ptr + offs, x.to(tl.int64, bitcast=False) + (i.to(tl.uint32) >> 1).to(tl.int64))


@triton.jit
def math_fns(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.exp2(x) + tl.log(tl.abs(x) + 1) + tl.sqrt(tl.abs(x)) + tl.sin(x) + tl.cos(x) + tl.rsqrt(x * x + 1)
    y = y + tl.extra.cuda.libdevice.tanh(x) + tl.erf(x) + tl.fma(x, x, x) + tl.clamp(x, -1.0, 1.0)
    y = y + tl.sigmoid(x) + tl.floor(x) + tl.ceil(x) + tl.div_rn(x, 3.0) + tl.sqrt_rn(tl.abs(x))
    tl.store(y_ptr + offs, y)


@triton.jit
def random_bits(y_ptr, seed, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.rand(seed, offs) + tl.randint(seed, offs).to(tl.float32))


@triton.jit
def block_ptr(x_ptr, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    p = tl.make_block_ptr(x_ptr, (M, N), (N, 1), (0, 0), (BM, BN), (1, 0))
    x = tl.load(p, boundary_check=(0, 1), padding_option="zero")
    p = tl.advance(p, (BM, 0))
    x += tl.load(p, boundary_check=(0, 1), padding_option="zero")
    q = tl.make_block_ptr(y_ptr, (M, N), (N, 1), (0, 0), (BM, BN), (1, 0))
    tl.store(q, x, boundary_check=(0, 1))


@triton.jit(noinline=True)
def _scaled(v, s):
    return v * s


@triton.jit
def calls(x_ptr, y_ptr, s, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(y_ptr + offs, x + _scaled(s, 2.0))
