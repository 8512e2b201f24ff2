"""Language corners where cpu_interp once disagreed with Triton's semantics, each checked on both
tiers against an independent reference: seeded random inputs, outputs poisoned before the launch.

- Integer arithmetic at width 1: a sum of booleans kept as int1 wraps (it is the parity, not "any"),
  in reductions and scans alike, and the interpreter's numpy fast path must not read bool addition
  as a logical or.
- AMD's fp8 formats (fp8e4b8, fp8e5b16) are language types every backend converts.
- A tensor descriptor made in the kernel loads its padding option (NaN or zero) out of bounds.
- A compiled launch interrupted in its launching thread stops writing before the exception
  frees what it writes.
- A descriptor's atomic min/max compares as the descriptor's element type: unsigned for uint32 and
  uint64 tensors (TTIR spells the signedness in the descriptor type only).
- tl.device_print writes Triton's per-element lines: unsigned values unsigned, hex padded to the
  type's width, several operands tagged, and a print of no value compiles (`isSigned = array<i32>`).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from cpu_tier_fixtures import cpu_interp, gen  # noqa: F401  (cpu_interp: autouse)

TIERS = ("interp", "compiled")


def run(kernel, grid, tier: str, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kernel[grid](*args, cpu_tier=tier, **kwargs)


# ------------------------------------------------------------------------- int1 sums and scans
@triton.jit
def _bool_sums(x_ptr, rows_ptr, cols_ptr, total_ptr, red_ptr, scan_ptr, rscan_ptr,
               R: tl.constexpr, C: tl.constexpr):
    offs = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    x = tl.load(x_ptr + offs) != 0
    tl.store(rows_ptr + tl.arange(0, R), tl.sum(x, axis=1, dtype=tl.int1).to(tl.int32))
    tl.store(cols_ptr + tl.arange(0, C), tl.sum(x, axis=0, dtype=tl.int1).to(tl.int32))
    tl.store(total_ptr, tl.sum(tl.reshape(x, [R * C]), dtype=tl.int1).to(tl.int32))
    tl.store(red_ptr + tl.arange(0, R), tl.reduce(x, 1, _add).to(tl.int32))
    tl.store(scan_ptr + offs, tl.cumsum(x, axis=1, dtype=tl.int1).to(tl.int32))
    tl.store(rscan_ptr + offs, tl.associative_scan(x, 0, _add, reverse=True).to(tl.int32))


@triton.jit
def _add(a, b):
    return a + b


@pytest.mark.parametrize("tier", TIERS)
def test_int1_sums_and_scans_wrap_at_width_one(tier):
    R, C = 8, 32
    x = (torch.rand((R, C), generator=gen(11)) < 0.5).to(torch.int8)
    outs = {"rows": (R,), "cols": (C,), "total": (1,), "red": (R,), "scan": (R, C), "rscan": (R, C)}
    o = {k: torch.full(shape, -7, dtype=torch.int32) for k, shape in outs.items()}
    run(_bool_sums, (1,), tier, x, *o.values(), R=R, C=C)
    xn = x.numpy().astype(np.int64)
    want = {"rows": xn.sum(1) % 2, "cols": xn.sum(0) % 2, "total": np.array([xn.sum() % 2]),
            "red": xn.sum(1) % 2, "scan": np.cumsum(xn, 1) % 2,
            "rscan": np.flip(np.cumsum(np.flip(xn, 0), 0), 0) % 2}
    for k, w in want.items():
        assert np.array_equal(o[k].numpy(), w), (k, o[k].numpy(), w)
    assert 0 < xn.sum(1).min() and xn.sum(1).max() > 1  # rows mixing 0s and several 1s


# ------------------------------------------------------- a compiled launch cut short by a signal
@triton.jit
def _lcg(x_ptr, y_ptr, n_iter, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    for _ in range(n_iter):
        x = x * 1103515245 + 12345
    tl.store(y_ptr + offs, x)


def _lcg_ref(x: torch.Tensor, n: int) -> torch.Tensor:
    """n steps of x -> a*x + c (mod 2**32) in closed form: the affine map raised to the n-th power."""
    a, c, A, C = 1103515245, 12345, 1, 0
    while n:
        if n & 1:
            A, C = (a * A) % 2**32, (a * C + c) % 2**32
        a, c, n = (a * a) % 2**32, (a * c + c) % 2**32, n >> 1
    v = (x.to(torch.int64) * A + C) % 2**32
    return torch.where(v >= 2**31, v - 2**32, v).to(torch.int32)


class _Interrupted(Exception):
    pass


def test_an_interrupted_compiled_launch_stops_writing_before_it_raises(monkeypatch):
    """An exception raised in the launching thread (Ctrl-C, a signal handler, a test timeout) while
    the compiled tier's worker threads run must not leave native code writing into tensors the
    exception then frees: when it propagates, nothing of the launch runs any more, and what was
    written is the kernel's answer."""
    import signal
    import time
    monkeypatch.setenv("DAY0_CPU_THREADS", "4")
    N, B = 1 << 14, 64
    x = torch.randint(-2**31, 2**31 - 1, (N,), generator=gen(5), dtype=torch.int32)
    y = torch.full((N,), 0x5A5A5A5A, dtype=torch.int32)
    run(_lcg, (N // B,), "compiled", x, y, 3, BLOCK=B)  # compiled and loaded
    assert torch.equal(y, _lcg_ref(x, 3))
    n_iter = 10000
    run(_lcg, (N // B,), "compiled", x, y, n_iter, BLOCK=B)  # compiled for n_iter's specialisation first:
    while n_iter < 1 << 30:  # a launch of 0.4 s or more (running, not compiling), then three times as long
        t0 = time.perf_counter()
        run(_lcg, (N // B,), "compiled", x, y, n_iter, BLOCK=B)
        if time.perf_counter() - t0 >= 0.4:
            break
        n_iter *= 2
    n_iter *= 3

    def alarm(signum, frame):
        raise _Interrupted()
    old = signal.signal(signal.SIGALRM, alarm)
    y.fill_(0x5A5A5A5A)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.25)
        with pytest.raises(_Interrupted):
            run(_lcg, (N // B,), "compiled", x, y, n_iter, BLOCK=B)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    after = y.clone()
    time.sleep(0.6)
    assert torch.equal(y, after), "the launch went on writing after its exception"
    done = y != 0x5A5A5A5A
    assert not done.all(), "the launch was not cut short"
    assert torch.equal(y[done], _lcg_ref(x, n_iter)[done])


# --------------------------------------------------------------- the fnuz fp8 formats (AMD's)
@triton.jit
def _fp8_round_trip(x_ptr, q_ptr, back_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    q = tl.load(x_ptr + offs).to(q_ptr.dtype.element_ty)
    tl.store(q_ptr + offs, q)
    tl.store(back_ptr + offs, tl.load(q_ptr + offs).to(tl.float32))


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("dtype", [torch.float8_e4m3fnuz, torch.float8_e5m2fnuz])
def test_fnuz_fp8_formats_convert_like_torch(dtype, tier):
    """fp8e4b8 and fp8e5b16 are language types: a kernel converts to and from them (round to
    nearest even, one NaN at 0x80, no negative zero) as torch does, within their range."""
    N = 512
    top = torch.finfo(dtype).max
    x = (torch.rand(N, generator=gen(21)) * 2 - 1) * top * torch.logspace(-9, 0, N)[torch.randperm(N, generator=gen(22))]
    x[:6] = torch.tensor([0.0, -0.0, float("nan"), top, -top, torch.finfo(dtype).smallest_normal / 3])
    q = torch.full((N,), 0x7F, dtype=torch.uint8).view(dtype)  # poison: a finite code, not the reference's
    back = torch.full((N,), float("nan"))
    run(_fp8_round_trip, (1,), tier, x, q, back, N=N)
    want = x.to(dtype)
    assert torch.equal(q.view(torch.uint8), want.view(torch.uint8)), \
        (q.view(torch.uint8) != want.view(torch.uint8)).nonzero()[:5]
    assert torch.equal(back.isnan(), want.float().isnan())
    assert torch.equal(back.nan_to_num(0.0), want.float().nan_to_num(0.0))


# ------------------------------------------------ padding of an in-kernel tensor descriptor
@triton.jit
def _desc_padded(in_ptr, out_ptr, IM, IN, B: tl.constexpr, padding: tl.constexpr):
    desc = tl.make_tensor_descriptor(in_ptr, shape=[IM, IN], strides=[IN, 1], block_shape=[B, B],
                                     padding_option=padding)
    pm, pn = tl.program_id(0), tl.program_id(1)
    value = desc.load([pm * B, pn * B])
    r = tl.arange(0, B)
    tl.store(out_ptr + (pm * B + r[:, None]) * (tl.num_programs(1) * B) + pn * B + r[None, :], value)


@pytest.mark.parametrize("interpreter", ["batched", "reference"])
@pytest.mark.parametrize("padding", ["zero", "nan"])
def test_in_kernel_descriptor_loads_read_its_padding(padding, interpreter):
    """Elements of a descriptor's block outside its shape read the descriptor's padding option,
    for a descriptor made in the kernel as for one passed from the host."""
    IM, IN, B = 21, 13, 16
    x = torch.randn((IM, IN), generator=gen(31))
    out = torch.full((2 * B, 2 * B), -7.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _desc_padded[(2, 2)](x, out, IM, IN, B=B, padding=padding, cpu_interpreter=interpreter)
    want = torch.full((2 * B, 2 * B), float("nan") if padding == "nan" else 0.0)
    want[:IM, :IN] = x
    assert torch.equal(out.isnan(), want.isnan())
    assert torch.equal(out.nan_to_num(123.0), want.nan_to_num(123.0))


# ------------------------------------------- a descriptor's atomic min/max on unsigned elements
@triton.jit
def _desc_min_max(out_desc, out_ptr, a_ptr, M, N, MB: tl.constexpr, NB: tl.constexpr, kind: tl.constexpr):
    mo, no = tl.program_id(0) * MB, tl.program_id(1) * NB
    val = tl.load(a_ptr + (mo + tl.arange(0, MB)[:, None]) * N + no + tl.arange(0, NB)[None, :])
    if out_desc is None:
        desc = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[MB, NB])
    else:
        desc = out_desc
    if kind == "min":
        desc.atomic_min([mo, no], val)
    else:
        desc.atomic_max([mo, no], val)


@pytest.mark.parametrize("interpreter", ["batched", "reference"])
@pytest.mark.parametrize("descriptor", ["host", "device"])
@pytest.mark.parametrize("kind", ["min", "max"])
@pytest.mark.parametrize("dtype", [torch.uint32, torch.uint64, torch.int32], ids=str)
def test_descriptor_min_max_compare_as_the_element_type(dtype, kind, descriptor, interpreter):
    """`desc.atomic_min/max` on unsigned elements compares them unsigned (values with the top bit
    set are the largest), signed ones signed."""
    from triton.runtime._allocation import NullAllocator
    from triton.tools.tensor_descriptor import TensorDescriptor
    M, N, MB, NB = 8, 32, 4, 16
    raw = torch.int64 if dtype == torch.uint64 else torch.int32
    draw = lambda seed: torch.randint(-2 ** 63, 2 ** 63 - 1, (M, N), generator=gen(seed)).to(raw)  # wraps
    a, target = draw(41), draw(42)  # bit patterns, half of them with the top bit set
    if dtype.is_signed:
        key = lambda t: t.to(torch.int64)
    elif raw == torch.int32:
        key = lambda t: t.to(torch.int64) & 0xFFFFFFFF
    else:
        key = lambda t: t ^ (-2 ** 63)  # unsigned order of 64-bit patterns, as signed int64
    want = torch.where((key(a) < key(target)) == (kind == "min"), a, target)
    a_t, out = a.view(dtype), target.clone().view(dtype)
    out_desc = TensorDescriptor.from_tensor(out, [MB, NB]) if descriptor == "host" else None
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _desc_min_max[(M // MB, N // NB)](out_desc, out, a_t, M, N, MB=MB, NB=NB, kind=kind,
                                              cpu_interpreter=interpreter)
    finally:
        triton.set_allocator(NullAllocator())
    assert torch.equal(out.view(raw), want)
    assert (a < 0).any() and (a >= 0).any()  # both halves of the range, where signed and unsigned differ


# ----------------------------------------------------------------------------- device_print
@triton.jit
def _printing(x_ptr, ptr_probe, R: tl.constexpr, C: tl.constexpr):
    offs = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    x = tl.load(x_ptr + offs)
    tl.device_print("u", x.to(tl.uint32))
    tl.device_print("h", x.to(tl.int16), hex=True)
    tl.device_print("", x, x.to(tl.float32) / 4)
    tl.device_print("ptr", ptr_probe + tl.arange(0, 2))
    tl.device_print("s", tl.sum(x.to(tl.int8), 1).to(tl.uint8))
    print("no value")
    print("pid", tl.program_id(0))


def _printf_lines(x: np.ndarray, pid: int, probe: int) -> list[str]:
    """What a CUDA build of Triton prints for `_printing` (its printf formats, written here)."""
    R, C = x.shape
    head = f"pid ({pid}, 0, 0) idx "
    cells = [(r, c) for r in range(R) for c in range(C)]
    idx = lambda r, c: f"({r:{len(str(R - 1))}}, {c:{len(str(C - 1))}})"
    lines = [f"{head}{idx(r, c)} u: {int(x[r, c]) & 0xFFFFFFFF}" for r, c in cells]
    lines += [f"{head}{idx(r, c)} h: 0x{int(x[r, c]) & 0xFFFF:04x}" for r, c in cells]
    lines += [f"{head}{idx(r, c)}: (operand 0) {int(x[r, c])}" for r, c in cells]
    lines += [f"{head}{idx(r, c)}: (operand 1) {x[r, c] / 4:f}" for r, c in cells]
    lines += [f"{head}({i}) ptr: 0x{probe + 4 * i:x}" for i in range(2)]
    sums = (x.astype(np.int64) & 0xFF).astype(np.uint8).astype(np.int8).sum(1, dtype=np.int8)
    lines += [f"{head}({r}) s: {int(sums[r]) & 0xFF}" for r in range(R)]
    return lines + [f"pid ({pid}, 0, 0) no value", f"{head}() pid: {pid}"]


@pytest.mark.parametrize("interpreter", ["batched", "reference"])
def test_device_print_writes_tritons_lines(interpreter, capfd):
    R, C = 2, 16
    x = torch.randint(-40000, 40000, (R, C), generator=gen(51), dtype=torch.int32)
    x[0, :3] = torch.tensor([-1, -32768, 65535])
    probe = torch.randn(4, generator=gen(52))
    capfd.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _printing[(2,)](x, probe, R=R, C=C, cpu_interpreter=interpreter)
    got = capfd.readouterr().out.splitlines()
    assert len(got) == 2 * len(_printf_lines(x.numpy(), 0, 0))
    for pid in (0, 1):  # programs print in no particular order between them, each in its op order
        mine = [line for line in got if line.startswith(f"pid ({pid}, 0, 0)")]
        want = _printf_lines(x.numpy(), pid, probe.data_ptr())
        assert mine == want, [(g, w) for g, w in zip(mine, want) if g != w][:5]
