"""Tensor descriptors on the compiled tier: made in the kernel or passed from the host, loads that
read their padding past the edge, stores clipped at it, rank-3 blocks, gathers and scatters of
rows, atomic reductions (unsigned min/max included), a descriptor chosen per program, one handed
to a function kept out of line, and one carried through a loop into a dot. The compiled tier rewrites descriptors into pointers with
Triton's own pass (compiled/descriptors.py); every kernel here must run natively, agree with the
interpreter bit for bit (the dot within rounding) and match a torch reference."""
from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from cpu_tier_fixtures import both, cpu_interp, gen, same_bits  # noqa: F401  (cpu_interp: autouse)


def padded(x: torch.Tensor, shape, padding: str) -> torch.Tensor:
    """`x` in the top-left corner of `shape`, the rest the padding a descriptor load reads."""
    out = torch.full(shape, float("nan") if padding == "nan" else 0.0, dtype=x.dtype)
    out[tuple(slice(0, n) for n in x.shape)] = x
    return out


# ------------------------------------------------------------ made in the kernel: load and store
@triton.jit
def in_kernel_desc(x_ptr, y_ptr, tile_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr, PAD: tl.constexpr):
    xd = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN], padding_option=PAD)
    yd = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    pm, pn = tl.program_id(0), tl.program_id(1)
    v = xd.load([pm * BM, pn * BN])
    yd.store([pm * BM, pn * BN], v * 2.0 + 1.0)  # clipped at the tensor's edge
    r, c = tl.arange(0, BM), tl.arange(0, BN)
    tl.store(tile_ptr + (pm * BM + r[:, None]) * (tl.num_programs(1) * BN) + pn * BN + c[None, :], v)


@pytest.mark.parametrize("padding", ["zero", "nan"])
def test_in_kernel_descriptor_load_store(padding):
    M, N, BM, BN = 37, 50, 16, 16
    gm, gn = triton.cdiv(M, BM), triton.cdiv(N, BN)
    x = torch.randn(M, N, generator=gen(601))

    def launch(tier, x, y, tile):
        in_kernel_desc[(gm, gn)](x, y, tile, M, N, BM=BM, BN=BN, PAD=padding, cpu_tier=tier)
    ref, got = both(launch, {"x": x}, {"y": ((M, N), torch.float32), "tile": ((gm * BM, gn * BN), torch.float32)})
    for k in ("y", "tile"):
        same_bits(ref[k], got[k], k)
    assert torch.equal(got["y"], x * 2.0 + 1.0)
    same_bits(got["tile"], padded(x, (gm * BM, gn * BN), padding), "tile against its padding")


# ----------------------------------------------------- passed from the host, beside other arguments
@triton.jit
def host_desc(scale, in_desc, out_desc, BM: tl.constexpr, BN: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    out_desc.store([pm * BM, pn * BN], in_desc.load([pm * BM, pn * BN]) * scale)


@pytest.mark.parametrize("padding", ["zero", "nan"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_host_descriptors(padding, dtype):
    """A host TensorDescriptor becomes its base, shape, strides and padding flag; the output covers
    whole tiles, so its edge shows what the loads read past the input's edge."""
    M, N, BM, BN = 37, 24, 16, 16  # rows 16-byte aligned, as descriptors need
    x = torch.randn(M, N, generator=gen(602)).to(dtype)

    def launch(tier, x, out):
        host_desc[(3, 2)](0.5, TensorDescriptor(x, x.shape, x.stride(), [BM, BN], padding=padding),
                          TensorDescriptor.from_tensor(out, [BM, BN]), BM=BM, BN=BN, cpu_tier=tier)
    ref, got = both(launch, {"x": x}, {"out": ((48, 32), dtype)})
    same_bits(ref["out"], got["out"], "out")
    same_bits(got["out"], padded(x * 0.5, (48, 32), padding), "out against the reference")


# -------------------------------------------------------------------- rank 3, read as rank 2
@triton.jit
def rank3_desc(x_ptr, out_ptr, B, M, N, BM: tl.constexpr, BN: tl.constexpr):
    d = tl.make_tensor_descriptor(x_ptr, shape=[B, M, N], strides=[M * N, N, 1], block_shape=[1, BM, BN])
    b, pm = tl.program_id(0), tl.program_id(1)
    v = d.load([b, pm * BM, 0]).reshape(BM, BN)
    r, c = tl.arange(0, BM), tl.arange(0, BN)
    tl.store(out_ptr + b * M * BN + (pm * BM + r[:, None]) * BN + c[None, :], v, mask=(pm * BM + r[:, None]) < M)


def test_rank3_descriptor():
    B, M, N, BM, BN = 3, 20, 12, 8, 16
    x = torch.randn(B, M, N, generator=gen(603))

    def launch(tier, x, out):
        rank3_desc[(B, triton.cdiv(M, BM))](x, out, B, M, N, BM=BM, BN=BN, cpu_tier=tier)
    ref, got = both(launch, {"x": x}, {"out": ((B, M, BN), torch.float32)})
    same_bits(ref["out"], got["out"], "out")
    assert torch.equal(got["out"], torch.nn.functional.pad(x, (0, BN - N)))


# ------------------------------------------------- rows gathered and scattered, atomic reductions
@triton.jit
def rows_desc(x_ptr, idx_ptr, dst_ptr, acc_ptr, rows_ptr, M, N, BN: tl.constexpr, R: tl.constexpr):
    pid = tl.program_id(0)
    xd = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[1, BN])
    idx = tl.load(idx_ptr + tl.arange(0, R))
    rows = xd.gather(idx, 0)  # past the last row: zeros
    r, c = tl.arange(0, R), tl.arange(0, BN)
    tl.store(rows_ptr + pid * R * BN + r[:, None] * BN + c[None, :], rows)
    if pid == 0:
        dd = tl.make_tensor_descriptor(dst_ptr, shape=[M, N], strides=[N, 1], block_shape=[1, BN])
        dd.scatter(rows * 3.0, idx, 0)  # rows past the last one are dropped
    ad = tl.make_tensor_descriptor(acc_ptr, shape=[R, N], strides=[N, 1], block_shape=[R, BN])
    ad.atomic_add([0, 0], rows)  # every program adds its copy


def test_gather_scatter_and_atomic_add():
    M, N, BN, R, P = 20, 16, 16, 8, 3
    x = torch.randn(M, N, generator=gen(604))
    idx = torch.tensor([3, 19, 0, 7, 25, 5, 11, 2], dtype=torch.int32)  # distinct; 25 is past the end
    acc = torch.randn(R, N, generator=gen(605))
    dst = torch.randn(M, N, generator=gen(606))

    def launch(tier, x, idx, dst, acc, rows):
        rows_desc[(P,)](x, idx, dst, acc, rows, M, N, BN=BN, R=R, cpu_tier=tier)
    ref, got = both(launch, {"x": x, "idx": idx, "dst": dst, "acc": acc}, {"rows": ((P, R, BN), torch.float32)})
    for k in ("rows", "dst", "acc"):
        same_bits(ref[k], got[k], k)
    inside = idx < M
    want_rows = torch.where(inside[:, None], x[idx.clamp(max=M - 1).long()], torch.zeros(1))
    assert torch.equal(got["rows"], want_rows.expand(P, R, BN))
    want_dst = dst.clone()
    want_dst[idx[inside].long()] = x[idx[inside].long()] * 3.0
    assert torch.equal(got["dst"], want_dst)
    torch.testing.assert_close(got["acc"], acc + P * want_rows)


@triton.jit
def min_max_desc(out_desc, a_ptr, N, MB: tl.constexpr, NB: tl.constexpr, KIND: tl.constexpr):
    mo, no = tl.program_id(0) * MB, tl.program_id(1) * NB
    val = tl.load(a_ptr + (mo + tl.arange(0, MB)[:, None]) * N + no + tl.arange(0, NB)[None, :])
    if KIND == "min":
        out_desc.atomic_min([mo, no], val)
    else:
        out_desc.atomic_max([mo, no], val)


@pytest.mark.parametrize("kind", ["min", "max"])
@pytest.mark.parametrize("dtype", [torch.uint32, torch.int32], ids=str)
def test_atomic_min_max_compare_as_the_element_type(dtype, kind):
    """Unsigned elements compare unsigned (a set top bit is the largest), signed ones signed: the
    signedness lives only in the descriptor's type, which the rewrite must carry to the atomic."""
    M, N, MB, NB = 8, 32, 4, 16
    a = torch.randint(-2 ** 31, 2 ** 31 - 1, (M, N), generator=gen(607), dtype=torch.int32)
    t = torch.randint(-2 ** 31, 2 ** 31 - 1, (M, N), generator=gen(608), dtype=torch.int32)
    key = (lambda v: v.to(torch.int64)) if dtype.is_signed else (lambda v: v.to(torch.int64) & 0xFFFFFFFF)
    want = torch.where((key(a) < key(t)) == (kind == "min"), a, t)

    def launch(tier, a, out):
        min_max_desc[(M // MB, N // NB)](TensorDescriptor.from_tensor(out.view(dtype), [MB, NB]), a.view(dtype),
                                         N, MB=MB, NB=NB, KIND=kind, cpu_tier=tier)
    ref, got = both(launch, {"a": a, "out": t}, {})
    same_bits(ref["out"], got["out"], "out")
    assert torch.equal(got["out"], want)


# ------------------------------------ a descriptor chosen per program, one carried through a loop
@triton.jit
def chosen_desc(a_desc, b_ptr, out_ptr, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    d = a_desc  # the host's descriptor for even programs, one made here for odd ones
    if pid % 2 == 1:
        d = tl.make_tensor_descriptor(b_ptr, shape=[BM, BN], strides=[BN, 1], block_shape=[BM, BN])
    r, c = tl.arange(0, BM), tl.arange(0, BN)
    tl.store(out_ptr + pid * BM * BN + r[:, None] * BN + c[None, :], d.load([0, 0]))


def test_descriptor_chosen_per_program():
    a, b = torch.randn(8, 16, generator=gen(609)), torch.randn(8, 16, generator=gen(610))

    def launch(tier, a, b, out):
        chosen_desc[(4,)](TensorDescriptor.from_tensor(a, [8, 16]), b, out, BM=8, BN=16, cpu_tier=tier)
    ref, got = both(launch, {"a": a, "b": b}, {"out": ((4, 8, 16), torch.float32)})
    same_bits(ref["out"], got["out"], "out")
    assert torch.equal(got["out"], torch.stack([a, b, a, b]))


@triton.jit(noinline=True)
def _copy_tile(src, dst, m, n):
    dst.store([m, n], src.load([m, n]) + 1.0)


@triton.jit
def desc_through_call(x_desc, y_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    yd = tl.make_tensor_descriptor(y_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    _copy_tile(x_desc, yd, tl.program_id(0) * BM, tl.program_id(1) * BN)


def test_descriptors_handed_to_a_function_kept_out_of_line():
    M, N, BM, BN = 24, 40, 16, 16
    x = torch.randn(M, N, generator=gen(613))

    def launch(tier, x, y):
        desc_through_call[(2, 3)](TensorDescriptor.from_tensor(x, [BM, BN]), y, M, N, BM=BM, BN=BN, cpu_tier=tier)
    ref, got = both(launch, {"x": x}, {"y": ((M, N), torch.float32)})
    same_bits(ref["y"], got["y"], "y")
    assert torch.equal(got["y"], x + 1.0)


@triton.jit
def desc_matmul(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    ad = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
    bd = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    cd = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, tl.cdiv(K, BK)):  # the K tail reads zeros past the edge
        acc = tl.dot(ad.load([pm * BM, k * BK]), bd.load([k * BK, pn * BN]), acc, input_precision="ieee")
    cd.store([pm * BM, pn * BN], acc.to(cd.dtype))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=str)
def test_descriptor_matmul_with_tails(dtype):
    M, N, K, BM, BN, BK = 70, 52, 90, 32, 32, 32
    a = torch.randn(M, K, generator=gen(611)).to(dtype)
    b = torch.randn(K, N, generator=gen(612)).to(dtype)

    def launch(tier, a, b, c):
        desc_matmul[(triton.cdiv(M, BM), triton.cdiv(N, BN))](a, b, c, M, N, K, BM=BM, BN=BN, BK=BK,
                                                              cpu_tier=tier)
    ref, got = both(launch, {"a": a, "b": b}, {"c": ((M, N), dtype)})
    want = a.double() @ b.double()
    tol = (2e-3 if dtype == torch.float16 else 1e-5) * want.abs().max().item()
    torch.testing.assert_close(got["c"].double(), want, rtol=0, atol=tol)
    torch.testing.assert_close(got["c"].double(), ref["c"].double(), rtol=0, atol=tol)


# ------------------------------------------------- a module Triton's own parser cannot read
def test_a_module_the_rewrite_cannot_read_is_left_to_the_interpreter():
    """The rewrite goes through Triton's MLIR parser, stricter than day0's: a module it cannot read
    (here hand-written TTIR with an attribute of an unknown dialect) is refused with the reason,
    never an exception out of the tier's decision; without one it is inlined and lowered."""
    from backends.cpu_interp.compiled import refusal
    from sdk.ttir import parse
    text = """module {
  tt.func private @g(%x: f32) -> f32 attributes {noinline = true} {
    tt.return %x : f32
  }
  tt.func public @k(%arg0: !tt.ptr<f32>) attributes {noinline = false} {
    %0 = tt.load %arg0 LOAD_ATTRS: !tt.ptr<f32>
    %1 = tt.call @g(%0) : (f32) -> f32
    tt.store %arg0, %1 : !tt.ptr<f32>
    tt.return
  }
}
"""
    assert refusal(parse(text.replace("LOAD_ATTRS", ""))) == ""
    why = refusal(parse(text.replace("LOAD_ATTRS", "{vendor.hint = #vendor<fast>} ")))
    assert why.startswith("not lowered by the compiled tier: Triton's MLIR did not read or rewrite it"), why
