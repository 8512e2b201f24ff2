"""Semantics that scripts/mutation_check.py found neither the quick suite nor the other cpu_interp
tests pinned down: a masked tl.histogram, and pointer offsets beyond 32 bits (a far pointer's
address, seen through a pointer-to-integer cast, and far offsets accumulated through a
loop-carried pointer). Each against an independent reference, seeded inputs, poisoned outputs,
on both tiers."""
from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

import sdk
from sdk.backend import get_backend


@pytest.fixture(autouse=True)
def _no_earlier_launch_stats():
    get_backend("cpu_interp").take_launch_stats()


def ran_on(tier: str) -> None:
    """The launch just made ran on `tier` (the launch option, part of Triton's cache key: an
    environment variable changed mid-process would find the kernel loaded for another tier)."""
    tiers = {s["tier"] for s in get_backend("cpu_interp").take_launch_stats()}
    assert tiers == {tier}, tiers


@triton.jit
def masked_histogram_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, BINS: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)  # the whole block: the tail beyond n holds values that must not count
    h = tl.histogram(x, BINS, mask=offs < n)
    tl.store(out_ptr + pid * BINS + tl.arange(0, BINS), h)


@pytest.mark.parametrize("tier", ["interp", "compiled"])
def test_masked_histogram_counts_only_live_lanes(tier):
    gen = torch.Generator().manual_seed(31)
    BLOCK, BINS, progs = 64, 16, 3
    x = torch.randint(0, BINS, (progs * BLOCK,), generator=gen, dtype=torch.int32)
    n = progs * BLOCK - 23  # the last program's tail is masked off
    out = torch.full((progs, BINS), -7, dtype=torch.int32)
    with sdk.activate("cpu_interp"):
        masked_histogram_kernel[(progs,)](x, out, n, BLOCK=BLOCK, BINS=BINS, cpu_tier=tier)
        ran_on(tier)
    live = torch.arange(progs * BLOCK) < n
    want = torch.stack([torch.bincount(x[p * BLOCK:(p + 1) * BLOCK][live[p * BLOCK:(p + 1) * BLOCK]].long(),
                                       minlength=BINS) for p in range(progs)]).to(torch.int32)
    assert torch.equal(out, want)


@triton.jit
def far_offsets_kernel(x_ptr, out_ptr, big, steps, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    p = x_ptr + (offs.to(tl.int64) + big)  # far outside x: never dereferenced
    for _ in range(steps):                   # loop-carried: the two offsets are not folded into one
        p = p - big
    tl.store(out_ptr + offs, tl.load(p) * 3)


@pytest.mark.parametrize("tier", ["interp", "compiled"])
@pytest.mark.parametrize("big", [3 * 2 ** 31 + 5, 2 ** 32, 2 ** 40 - 3])
def test_pointer_offsets_beyond_32_bits_are_kept_whole(tier, big):
    gen = torch.Generator().manual_seed(32)
    x = torch.randn(4 * 32, generator=gen)
    out = torch.full_like(x, float("nan"))
    with sdk.activate("cpu_interp"):
        far_offsets_kernel[(4,)](x, out, big, 1, BLOCK=32, cpu_tier=tier)
        ran_on(tier)
    assert torch.equal(out, x * 3)


@triton.jit
def far_address_kernel(x_ptr, out_ptr, big, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK).to(tl.int64) + big
    p = x_ptr + offs                           # never dereferenced: only its address is read
    tl.store(out_ptr + tl.arange(0, BLOCK), p.to(tl.int64) - x_ptr.to(tl.int64))


@pytest.mark.parametrize("tier", ["interp", "compiled"])
@pytest.mark.parametrize("big", [3 * 2 ** 31 + 5, 2 ** 40 - 3])
def test_a_far_pointer_keeps_its_64_bit_address(tier, big):
    x = torch.randn(16, generator=torch.Generator().manual_seed(33))
    out = torch.full((16,), -1, dtype=torch.int64)
    with sdk.activate("cpu_interp"):
        far_address_kernel[(1,)](x, out, big, BLOCK=16, cpu_tier=tier)
        ran_on(tier)
    assert torch.equal(out, (torch.arange(16, dtype=torch.int64) + big) * x.element_size())


@triton.jit
def unsigned_atomic_max_kernel(dst_ptr, val_ptr, old_ptr, KEEP_OLD: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    old = tl.atomic_max(dst_ptr + offs, tl.load(val_ptr + offs))  # uint32: an unsigned max
    if KEEP_OLD:  # the old values read back: another path through the atomic than a bare update
        tl.store(old_ptr + offs, old)


@pytest.mark.parametrize("keep_old", [False, True])
@pytest.mark.parametrize("tier", ["interp", "compiled"])
def test_atomic_max_on_unsigned_ints_compares_unsigned(tier, keep_old):
    """Values at and above 2**31 are the largest uint32s, not negative ones."""
    gen = torch.Generator().manual_seed(37)
    n, BLOCK = 256, 64
    cur = torch.randint(0, 1 << 32, (n,), generator=gen, dtype=torch.int64)
    val = torch.randint(0, 1 << 32, (n,), generator=gen, dtype=torch.int64)
    val[::4] = cur[::4] ^ (1 << 31)  # every fourth lane differs from the current value in the top bit
    dst = cur.to(torch.uint32)
    old = torch.full((n,), 0x5A5A5A5A, dtype=torch.int64).to(torch.uint32)
    with sdk.activate("cpu_interp"):
        unsigned_atomic_max_kernel[(n // BLOCK,)](dst, val.to(torch.uint32), old, KEEP_OLD=keep_old, BLOCK=BLOCK,
                                                  cpu_tier=tier)
        ran_on(tier)
    assert torch.equal(dst.to(torch.int64), torch.maximum(cur, val))
    if keep_old:
        assert torch.equal(old.to(torch.int64), cur)
