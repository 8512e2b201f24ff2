"""Runs a Triton kernel as any user script would: no day0 import. The backend comes from
TRITON_DEFAULT_BACKEND."""
import torch
import triton
import triton.language as tl


@triton.jit
def axpy(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, a * x + y, mask=mask)


if __name__ == "__main__":
    gen = torch.Generator().manual_seed(0)
    n = 1000
    x, y = torch.randn(n, generator=gen), torch.randn(n, generator=gen)
    out = torch.full_like(x, float("nan"))
    axpy[(triton.cdiv(n, 128),)](x, y, out, 2.5, n, BLOCK=128)
    assert torch.allclose(out, 2.5 * x + y), (out - (2.5 * x + y)).abs().max()
    print("backend:", type(triton.runtime.driver.active).__name__)
    print("ok")
