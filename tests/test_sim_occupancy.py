"""Programs per unit from what the target's compiler allocates for a launch (sdk.simulator.compiled),
against the registers and shared memory the nvidia_ref backend's own compile of the same launch
reports, and the estimate kept where a target cannot be compiled here."""
import math
import re

import pytest
import torch
import triton
import triton.language as tl

import sdk
from sdk.backend import get_backend
from sdk.capture import capture
from sdk.device_models import load
from sdk.simulator import analyse
from sdk.simulator import compiled
from sdk.simulator.timing import Efficiencies, launch_time


@triton.jit
def tile_dot(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """One BM x BN tile of a @ b per program, accumulated in fp32 over K."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc.to(tl.bfloat16))


def _launch(grid, **meta):
    g = torch.Generator().manual_seed(3)
    bm, bn, k = meta["BM"], meta["BN"], 256
    a = torch.randn(grid * bm, k, generator=g).to(torch.bfloat16)
    b = torch.randn(k, bn, generator=g).to(torch.bfloat16)
    c = torch.full((grid * bm, bn), float("nan")).to(torch.bfloat16)
    tile_dot[(grid,)](a, b, c, k, **meta)


def _counts(grid, **meta):
    cap = capture()
    with cap:
        _launch(grid, **meta)
    (launch,) = cap.launches
    return analyse(launch.module, launch.grid, launch.args, num_warps=launch.num_warps, num_stages=launch.num_stages)


def _reference(grid, **meta) -> dict:
    """What nvidia_ref's compile of the same launch for sm_90 reports (ptxas and Triton)."""
    name = "nvidia_ref@sm_90/compile"
    with sdk.activate(name), sdk.launches.compile_only():
        _launch(grid, **meta)
    (stats,) = get_backend(name).take_launch_stats()
    return stats


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # allocations are kept beside Triton's compiles
    compiled._FAST.clear()


SMALL = dict(BM=64, BN=64, BK=32, num_warps=4, num_stages=2)
LARGE = dict(BM=128, BN=256, BK=64, num_warps=4, num_stages=3)


def test_a_launch_holds_what_its_compiled_allocation_leaves_room_for():
    h100 = load("nvidia_h100")
    eff = Efficiencies()
    held = {}
    for label, meta in (("small", SMALL), ("large", LARGE)):
        c = _counts(4096, **meta)
        ref = _reference(4096, **meta)
        a = compiled.allocation(c.ttir, c.num_warps, c.num_stages, h100)
        assert (a.registers, a.shared_bytes, a.num_warps) == (ref["registers"], ref["shared_bytes"], 4)
        # by hand: registers per warp in units of 256 out of 65,536; shared memory plus its 1 KiB
        # reserve out of 228 KiB; at most 16 programs of 128 threads in 2,048 thread slots
        by_regs = 65536 // (math.ceil(a.registers * 32 / 256) * 256) // 4
        by_smem = 228 * 1024 // (a.shared_bytes + 1024) if a.shared_bytes else 32
        t = launch_time(c, h100, eff)
        assert (t.occupancy, t.programs_per_unit) == ("compiled", max(1, min(32, 16, by_regs, by_smem)))
        held[label] = t.programs_per_unit
    # a 128 x 256 fp32 accumulator over 128 threads needs 256 registers a thread for it alone
    assert held["large"] == 1 < held["small"]


def test_the_compile_is_kept_and_read_back_instead_of_compiled_again(monkeypatch):
    h100 = load("nvidia_h100")
    c = _counts(64, **SMALL)
    first = compiled.allocation(c.ttir, c.num_warps, c.num_stages, h100)
    compiled._FAST.clear()

    def refuse(*args):
        raise AssertionError("compiled again")
    monkeypatch.setattr(compiled, "_compile", refuse)
    assert compiled.allocation(c.ttir, c.num_warps, c.num_stages, h100) == first
    # the same kernel compiled from another checkout names other files: the same allocation
    elsewhere = re.sub(r'loc\("[^"]*"', 'loc("/elsewhere/kernels.py"', c.ttir)
    assert elsewhere != c.ttir and "/elsewhere/" in elsewhere
    assert compiled.allocation(elsewhere, c.num_warps, c.num_stages, h100) == first
    # the H200 names the same target: the same compile serves it
    assert compiled.allocation(c.ttir, c.num_warps, c.num_stages, load("nvidia_h200")) == first


def test_targets_that_cannot_be_compiled_here_keep_the_estimate():
    c = _counts(4096, **SMALL)
    eff = Efficiencies()
    assert compiled.compile_target(load("amd_mi300x")) is None
    assert launch_time(c, load("amd_mi300x"), eff).occupancy == "estimated"
    assert launch_time(c, load("generic_npu"), eff).occupancy == ""
    assert compiled.compile_target(load("nvidia_l4")) == ("cuda", 89, 32)


def test_prefetch_compiles_each_launch_once_per_target_in_workers_as_in_this_process():
    small, large = _counts(64, **SMALL), _counts(64, **LARGE)
    nvidia = [load("nvidia_h100"), load("nvidia_h200")]  # one target to compile
    amd = [load("amd_mi300x")]                             # none
    said = []
    assert compiled.prefetch([([small, large], nvidia), ([small], nvidia), ([large], amd)], jobs=2,
                             progress=lambda *a: said.append(a)) == 2
    assert said == [(0, 2, ["sm_90"]), (1, 2, ["sm_90"]), (2, 2, ["sm_90"])]  # before the first, then each
    in_workers = {c.kernel + str(c.num_warps * 10 + c.num_stages): compiled._FAST[(c.ttir, c.num_warps, c.num_stages,
                                                                                  ("cuda", 90, 32))]
                  for c in (small, large)}
    calls = []
    assert compiled.prefetch([([small, large], nvidia)], jobs=2, progress=lambda *a: calls.append(a)) == 0  # held now
    assert calls == []  # nothing to compile: nothing said
    compiled._FAST.clear()
    assert compiled.prefetch([([small, large], nvidia)], jobs=1) == 0  # read back from Triton's cache
    assert compiled.prefetch([([small, large], amd)], jobs=1) == 0     # a target not compiled here
    here = {k: compiled._compile(c.ttir, c.num_warps, c.num_stages, ("cuda", 90, 32))
            for k, c in zip(in_workers, (small, large))}
    assert in_workers == here and all(a.registers > 0 for a in here.values())

