"""Every tensor a library hands a kernel reaches the backend: `triton.reinterpret` views, tensor
descriptors over signed integers, `tl.map_elementwise` with pack > 1, and `ub.poison` values."""
from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

import sdk


@pytest.fixture(autouse=True)
def _cpu_interp():
    with sdk.activate("cpu_interp"):
        yield


@triton.jit
def _copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    o = tl.arange(0, BLOCK)
    m = o < n
    tl.store(y_ptr + o, tl.load(x_ptr + o, mask=m) + 1, mask=m)


@pytest.mark.parametrize("torch_dtype, view", [(torch.int8, tl.uint8), (torch.int32, tl.uint32),
                                               (torch.int16, tl.uint16)])
def test_reinterpreted_unsigned_views(torch_dtype, view):
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(-100, 100, (100,), dtype=torch_dtype, generator=gen)
    y = torch.full_like(x, 55)
    _copy[(1,)](triton.reinterpret(x, view), triton.reinterpret(y, view), 100, BLOCK=128)
    assert torch.equal(y, x + 1)  # wrap-around is the same bits whichever the signedness


@triton.jit
def _desc_copy(xd, yd, BLOCK: tl.constexpr):
    yd.store([tl.program_id(0) * BLOCK], xd.load([tl.program_id(0) * BLOCK]) * 3)


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64])
def test_tensor_descriptors_over_signed_integers(dtype):
    gen = torch.Generator().manual_seed(2)
    x = torch.randint(-40, 40, (200,), dtype=dtype, generator=gen)
    y = torch.full_like(x, 99)
    _desc_copy[(4,)](TensorDescriptor.from_tensor(x, [64]), TensorDescriptor.from_tensor(y, [64]), BLOCK=64)
    assert torch.equal(y, x * 3)


@triton.jit
def _pair2(a0, a1, b0, b1):
    return a0 * 2 + b0, a1 * 2 + b1


@triton.jit
def _first_differs(a0, a1, a2, a3):
    if a0 > 0:
        r0 = a0
    else:
        r0 = -a0 * 3
    return r0, a1 + 1, a2 + 2, a3 + 3


@triton.jit
def _packed(x_ptr, y_ptr, out_ptr, out2_ptr, N: tl.constexpr):
    o = tl.arange(0, N)
    x = tl.load(x_ptr + o)
    y = tl.load(y_ptr + o)
    tl.store(out_ptr + o, tl.map_elementwise(_pair2, x, y, pack=2)[0])
    tl.store(out2_ptr + o, tl.map_elementwise(_first_differs, x, pack=4)[0])


def test_map_elementwise_with_pack():
    gen = torch.Generator().manual_seed(3)
    x, y = torch.randn(64, generator=gen), torch.randn(64, generator=gen)
    out, out2 = torch.full_like(x, float("nan")), torch.full_like(x, float("nan"))
    _packed[(1,)](x, y, out, out2, N=64)
    torch.testing.assert_close(out, x * 2 + y)
    want = x.clone().view(16, 4)
    want[:, 0] = torch.where(want[:, 0] > 0, want[:, 0], -want[:, 0] * 3)
    want[:, 1:] += torch.tensor([1.0, 2.0, 3.0])
    torch.testing.assert_close(out2, want.view(64))  # each group of 4 consecutive elements


def test_ub_poison_is_a_value_cpu_interp_accepts():
    from backends.cpu_interp import CpuInterpBackend
    from sdk.backend import KernelInfo
    text = '''module {
  tt.func public @k(%arg0: !tt.ptr<f32>) attributes {noinline = false} {
    %0 = ub.poison : tensor<8xf32>
    %1 = tt.make_range {end = 8 : i32, start = 0 : i32} : tensor<8xi32>
    %2 = tt.splat %arg0 : !tt.ptr<f32> -> tensor<8x!tt.ptr<f32>>
    %3 = tt.addptr %2, %1 : tensor<8x!tt.ptr<f32>>, tensor<8xi32>
    %4 = arith.mulf %0, %0 : tensor<8xf32>
    tt.store %3, %4 : tensor<8x!tt.ptr<f32>>
    tt.return
  }
}
'''
    be = CpuInterpBackend()
    prog = be.load(text.encode(), KernelInfo("k", (("out", "*fp32"),), None))
    out = torch.full((8,), float("nan"))
    be.launch(prog, (1, 1, 1), [be.map_tensor(out, "out")])
    assert torch.isfinite(out).all()  # some defined value, the same every run
