"""Language corners where cpu_interp once disagreed with Triton's semantics, each checked on both
tiers against an independent reference: seeded random inputs, outputs poisoned before the launch.

- Integer arithmetic at width 1: a sum of booleans kept as int1 wraps (it is the parity, not "any"),
  in reductions and scans alike, and the interpreter's numpy fast path must not read bool addition
  as a logical or.
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
