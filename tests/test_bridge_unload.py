"""A kernel compiled for a day0 backend and collected after the backend was deactivated leaves
nothing behind: no exception from Triton's unload path (Triton >= 3.8 unloads in
`CompiledKernel.__del__` through the driver active at that moment), and the kernel still ran."""
from __future__ import annotations

import gc
import sys

import torch
import triton
import triton.language as tl

import sdk


@triton.jit
def _twice(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)


def test_a_day0_kernel_collected_after_deactivation_raises_nothing(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u))
    x = torch.randn(40, generator=torch.Generator().manual_seed(3))
    out = torch.full((40,), float("nan"))
    with sdk.activate("cpu_interp"):
        compiled = _twice[(1,)](x, out, 40, BLOCK=64)
    assert torch.equal(out, x * 2.0)
    _twice.device_caches.clear()  # drop Triton's references too, so the kernel is collected here
    del compiled
    gc.collect()
    assert not seen, [str(u.exc_value) for u in seen]
