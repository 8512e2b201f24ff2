"""cpu_interp's default tier, "auto": a kernel runs on the interpreter until its interpretation has
cost (by count, not by clock) what compiling it costs, then natively, from the middle of a launch if
need be; an object in the cache runs from the first launch; a kernel that does not compile stays
on the interpreter. Every program runs exactly once whichever way the launch is split."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import triton
import triton.language as tl

from backends.cpu_interp import interp, tier as tiers
from backends.cpu_interp.compiled import launch as native_launch
from sdk.backend import get_backend
from sdk.errors import KernelFault

sys.path.insert(0, os.path.dirname(__file__))
from cpu_tier_fixtures import cpu_interp, gen  # noqa: E402,F401  (cpu_interp: autouse)

BLOCK = 32


@triton.jit
def stamp_kernel(x_ptr, out_ptr, count_ptr, n, BLOCK: tl.constexpr, TEST: tl.constexpr):
    # TEST: each test launches a kernel of its own (cpu_interp keeps a loaded kernel, and with it
    # what "auto" counted, for the process, per TTIR: TEST is in the TTIR, a mask always true)
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = (offs < n) & (offs > -TEST)
    v = tl.load(x_ptr + offs, mask=m)
    tl.store(out_ptr + offs, v * 2.0 + pid, mask=m)
    tl.atomic_add(count_ptr + pid, 1)


@triton.jit
def unmasked_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + 1.0)


def stats() -> list[tuple[str, str]]:
    return [(s["tier"], s["detail"]) for s in get_backend("cpu_interp").take_launch_stats()]


def launch_stamp(test: int, programs: int, seed: int, **opts):
    """Launch stamp_kernel over `programs` programs (the last one partial); returns the output,
    the per-program launch counts and the expected output."""
    n = programs * BLOCK - 5
    x = torch.randn(n, generator=gen(seed))
    out = torch.full((n,), float("nan"))
    count = torch.zeros(programs, dtype=torch.int32)
    stamp_kernel[(programs,)](x, out, count, n, BLOCK=BLOCK, TEST=test, **opts)
    want = x * 2.0 + torch.div(torch.arange(n), BLOCK, rounding_mode="floor").to(x.dtype)
    return out, count, want


@pytest.fixture(autouse=True)
def objects_of_its_own(monkeypatch):
    """No object compiled by another test in the in-memory cache (the disk cache is the test's)."""
    from backends.cpu_interp.compiled import jit
    monkeypatch.setattr(jit, "_MEMORY", {})


@pytest.fixture
def chunks_of_four(monkeypatch):
    """The interpreter runs four programs per chunk, so that a small launch has many chunks."""
    monkeypatch.setattr(interp, "ELEMENT_BUDGET", 4 * BLOCK)


@pytest.fixture
def firsts(monkeypatch):
    """The first program of every native launch (what the interpreter left to native code)."""
    seen: list[int] = []
    run = native_launch.NativeKernel.run

    def spy(self, grid, args, extra=(), first=0):
        seen.append(first)
        return run(self, grid, args, extra, first)
    monkeypatch.setattr(native_launch.NativeKernel, "run", spy)
    return seen


def test_default_tier_is_auto_and_a_small_launch_stays_interpreted(monkeypatch):
    monkeypatch.delenv("DAY0_CPU_TIER", raising=False)
    out, count, want = launch_stamp(1, 3, seed=1)
    assert stats() == [("interp", tiers.AUTO_WAITING)]
    assert torch.equal(out, want) and count.tolist() == [1, 1, 1]


def test_a_launch_switches_to_native_code_after_the_chunk_that_pays_for_compiling(
        monkeypatch, chunks_of_four, firsts):
    monkeypatch.setattr(tiers, "COMPILE_SECONDS", 1e-12)  # any interpreted chunk pays for it
    out, count, want = launch_stamp(2, 64, seed=2, cpu_tier="auto")
    assert stats() == [("compiled", tiers.AUTO_SWITCHED)]
    assert firsts == [4]  # the interpreter ran the first chunk, native code the other 60 programs
    assert torch.equal(out, want) and count.tolist() == [1] * 64
    out, count, want = launch_stamp(2, 64, seed=3, cpu_tier="auto")  # compiled now: native from program 0
    assert stats() == [("compiled", tiers.AUTO_COMPILED)] and firsts == [4, 0]
    assert torch.equal(out, want) and count.tolist() == [1] * 64


def test_interpreted_work_adds_up_over_launches_and_the_choice_is_reproducible(monkeypatch):
    spent: list[float] = []
    interpreted = tiers.TieredKernel._interpreted

    def spy(self, seconds):
        spent.append(seconds)
        return interpreted(self, seconds)
    monkeypatch.setattr(tiers.TieredKernel, "_interpreted", spy)
    monkeypatch.setattr(tiers, "COMPILE_SECONDS", 1e9)
    launch_stamp(3, 5, seed=4, cpu_tier="auto")
    launch_stamp(3, 5, seed=5, cpu_tier="auto")
    assert len(spent) == 2 and spent[0] == spent[1] > 0  # counted, not timed: the same launch costs the same
    monkeypatch.setattr(tiers, "COMPILE_SECONDS", 3.5 * spent[0])
    ran = []
    for seed in range(6, 10):
        out, count, want = launch_stamp(3, 5, seed=seed, cpu_tier="auto")
        ran += stats()
        assert torch.equal(out, want) and count.tolist() == [1] * 5
    # 2 launches before, then a third and a fourth: 4 x the cost passes 3.5 x at the end of the
    # fourth, which finishes interpreted (one chunk); the next is native from its start
    assert [t for t, _ in ran] == ["interp", "interp", "compiled", "compiled"]
    assert ran[1] == ("interp", tiers.AUTO_WAITING) and ran[2] == ("compiled", tiers.AUTO_COMPILED)


def test_a_kernel_that_does_not_compile_finishes_on_the_interpreter_and_says_why(
        monkeypatch, chunks_of_four, firsts):
    from backends.cpu_interp import compiled
    calls = []

    def refuse(module, bounds_check=True):
        calls.append(module.entry.name)
        return compiled.Built(None, {}, "not lowered by the compiled tier: a planted refusal")
    monkeypatch.setattr(compiled, "build", refuse)
    monkeypatch.setattr(tiers, "COMPILE_SECONDS", 1e-12)
    for seed in (11, 12):
        out, count, want = launch_stamp(4, 40, seed=seed, cpu_tier="auto")
        assert stats() == [("interp", "not lowered by the compiled tier: a planted refusal")]
        assert torch.equal(out, want) and count.tolist() == [1] * 40
    assert calls == ["stamp_kernel"] and firsts == []  # asked once; no native launch


def test_a_fault_after_the_switch_names_the_program_that_faulted(monkeypatch, chunks_of_four, firsts):
    monkeypatch.setattr(tiers, "COMPILE_SECONDS", 1e-12)
    x, out = torch.randn(15 * BLOCK, generator=gen(13)), torch.full((16 * BLOCK,), float("nan"))
    with pytest.raises(KernelFault) as exc:
        unmasked_kernel[(16,)](x, out, BLOCK=BLOCK, cpu_tier="auto")
    assert firsts == [4] and "out-of-bounds load from 'x_ptr'" in str(exc.value)
    assert "program (15, 0, 0)" in str(exc.value)
    assert torch.equal(out[:15 * BLOCK], x + 1.0)  # every program before the faulting one stored


def test_the_interpreters_checks_keep_auto_on_the_interpreter(monkeypatch):
    monkeypatch.setenv("DAY0_CHECK_UNINIT", "1")
    monkeypatch.setattr(tiers, "COMPILE_SECONDS", 0.0)
    out, count, want = launch_stamp(6, 4, seed=14, cpu_tier="auto")
    ((t, why),) = stats()
    assert t == "interp" and "the uninit check runs on the interpreter" in why and torch.equal(out, want)


def test_the_reference_interpreter_under_auto_says_it_runs_what_is_not_compiled(monkeypatch):
    monkeypatch.setattr(tiers, "COMPILE_SECONDS", 0.0)  # the batched interpreter would compile at once
    for _ in range(2):
        out, count, want = launch_stamp(8, 3, seed=17, cpu_tier="auto", cpu_interpreter="reference")
        assert stats() == [("interp", "auto: the reference interpreter runs what is not compiled yet "
                                      "(it counts no work)")]
        assert torch.equal(out, want) and count.tolist() == [1, 1, 1]


def test_a_bad_compile_cost_is_one_clear_error(monkeypatch):
    from sdk.errors import ConfigError
    monkeypatch.setenv("DAY0_CPU_AUTO_COMPILE_S", "soon")
    with pytest.raises(ConfigError, match="DAY0_CPU_AUTO_COMPILE_S is 'soon'; give the seconds"):
        launch_stamp(7, 2, seed=16, cpu_tier="auto")


SCRIPT = """
import sys, torch, triton, triton.language as tl
import sdk
from sdk.backend import get_backend

@triton.jit
def twice(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)

x = torch.randn(1000, generator=torch.Generator().manual_seed(15))
out = torch.full((1000,), float("nan"))
with sdk.activate("cpu_interp"):
    twice[(8,)](x, out, 1000, BLOCK=128)
    (s,) = get_backend("cpu_interp").take_launch_stats()
assert torch.equal(out, x * 2.0)
print(s["tier"], "|", s["detail"])
"""


def test_an_object_in_the_cache_runs_from_the_first_launch(tmp_path):
    """A process that compiled the kernel leaves its object on disk; the next process's first
    launch runs it, however little the kernel has run there."""
    script = tmp_path / "twice.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {**os.environ, "DAY0_CPU_CACHE_DIR": str(tmp_path / "objects"), "TRITON_CACHE_DIR": str(tmp_path / "t"),
           "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}
    env.pop("DAY0_CPU_TIER", None)
    said = []
    for compile_s in ("0", "1e9"):  # compile at once; then never worth compiling in this process
        proc = subprocess.run([sys.executable, str(script)], env={**env, "DAY0_CPU_AUTO_COMPILE_S": compile_s},
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        said.append(proc.stdout.strip().splitlines()[-1])
    assert said == [f"compiled | {tiers.AUTO_COMPILED}", f"compiled | {tiers.AUTO_CACHED}"]
