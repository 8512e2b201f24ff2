"""cpu_interp: library patterns (heuristics, constexpr branches, libdevice, noinline helpers, device
queries), structural ops, divergent control flow, atomics, descriptors, and planted bugs caught with
the right source line."""
from __future__ import annotations

import inspect
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

import sdk
from sdk.errors import KernelFault


@pytest.fixture(autouse=True)
def cpu_interp():
    with sdk.activate("cpu_interp"):
        yield


def line_of(fn, text: str) -> int:
    src, start = inspect.getsourcelines(getattr(fn, "fn", fn))
    for k, line in enumerate(src):
        if text in line:
            return start + k
    raise AssertionError(text)


# ------------------------------------------------------------------------- library patterns
@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def heur_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr, MODE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        x = tl.load(x_ptr + offs)
    else:
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    if MODE == "square":
        y = x * x
    else:
        y = tl.extra.cuda.libdevice.exp(x) + x + noinline_add(tl.program_id(0).to(tl.float32), 1.0)
    if EVEN:
        tl.store(out_ptr + offs, y)
    else:
        tl.store(out_ptr + offs, y, mask=offs < n)


@triton.jit(noinline=True)
def noinline_add(x, y):
    return x + y


@pytest.mark.parametrize("n", [256, 300])
@pytest.mark.parametrize("mode", ["square", "exp"])
def test_heuristics_constexpr_libdevice_noinline(n, mode):
    torch.manual_seed(0)
    x = torch.randn(n)
    out = torch.full_like(x, float("nan"))
    heur_kernel[(triton.cdiv(n, 128),)](x, out, n, BLOCK=128, MODE=mode)
    ref = x * x if mode == "square" else torch.exp(x) + x + (torch.arange(n) // 128) + 1.0
    torch.testing.assert_close(out, ref)


def test_device_queries():
    from triton.runtime import driver
    target = driver.active.get_current_target()
    assert target.backend == "cpu"
    props = driver.active.utils.get_device_properties(driver.active.get_current_device())
    assert props["multiprocessor_count"] >= 1 and props["max_shared_mem"] > 0
    assert driver.active.get_active_torch_device() == torch.device("cpu")


# --------------------------------------------------------------------------- structural ops
@triton.jit
def shapes_kernel(x_ptr, idx_ptr, out_ptr, hist_ptr, N: tl.constexpr):
    r = tl.arange(0, N)
    x = tl.load(x_ptr + r)
    a, b = tl.split(tl.reshape(x, (N // 2, 2)))
    j = tl.join(b, a)                                # swap neighbours
    y = tl.reshape(j, (N,))
    t = tl.trans(tl.reshape(y, (4, N // 4)))         # (N//4, 4)
    c = tl.cat(tl.reshape(t, (N,)), x, can_reorder=True)
    idx = tl.load(idx_ptr + r)
    g = tl.gather(x, idx, 0)
    s = tl.cumsum(x, 0)
    m = tl.associative_scan(x, 0, _maxc)
    am = tl.argmax(x, 0)
    tl.store(out_ptr + r, y)
    tl.store(out_ptr + N + tl.arange(0, 2 * N), c)
    tl.store(out_ptr + 3 * N + r, g)
    tl.store(out_ptr + 4 * N + r, s)
    tl.store(out_ptr + 5 * N + r, m)
    tl.store(out_ptr + 6 * N, am.to(tl.float32))
    tl.store(hist_ptr + tl.arange(0, 8), tl.histogram(idx % 8, 8))


@triton.jit
def _maxc(a, b):
    return tl.maximum(a, b)


def test_shape_ops_scan_gather_histogram():
    torch.manual_seed(1)
    N = 16
    x = torch.randn(N)
    idx = torch.randint(0, N, (N,), dtype=torch.int32)
    out = torch.full((6 * N + 1,), float("nan"))
    hist = torch.full((8,), -1, dtype=torch.int32)
    shapes_kernel[(1,)](x, idx, out, hist, N=N)
    y = x.view(N // 2, 2).flip(1).reshape(N)
    assert torch.equal(out[:N], y)
    assert torch.equal(out[N:2 * N], y.view(4, N // 4).t().reshape(N))
    assert torch.equal(out[2 * N:3 * N], x)
    assert torch.equal(out[3 * N:4 * N], x[idx.long()])
    torch.testing.assert_close(out[4 * N:5 * N], x.cumsum(0))
    assert torch.equal(out[5 * N:6 * N], torch.cummax(x, 0).values)
    assert out[6 * N].item() == x.argmax().item()
    assert torch.equal(hist, torch.bincount((idx % 8).long(), minlength=8).int())


# ---------------------------------------------------------------------- divergent control flow
@triton.jit
def divergent_kernel(out_ptr, lens_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    n = tl.load(lens_ptr + pid)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(0, n):                      # trip count differs per program
        acc += i
    k = 0
    while k * k < n:                            # so does this while loop
        k += 1
    if pid % 2 == 0:                            # and this branch
        acc = acc * 2
    else:
        acc = acc - 1
    if n == 0:
        return
    tl.store(out_ptr + pid * BLOCK + tl.arange(0, BLOCK), acc + k)


def test_divergent_loops_branches_early_return():
    lens = torch.tensor([0, 3, 5, 10, 1, 7], dtype=torch.int32)
    out = torch.full((6, 4), float("nan"))
    divergent_kernel[(6,)](out, lens, BLOCK=4)
    for p, n in enumerate(lens.tolist()):
        if n == 0:
            assert torch.isnan(out[p]).all()
            continue
        s = float(sum(range(n)))
        s = s * 2 if p % 2 == 0 else s - 1
        k = 0
        while k * k < n:
            k += 1
        assert torch.equal(out[p], torch.full((4,), s + k)), (p, out[p])


# ------------------------------------------------------------------------------------ atomics
@triton.jit
def atomics_kernel(i_ptr, f_ptr, old_ptr, cas_ptr):
    pid = tl.program_id(0)
    old = tl.atomic_add(i_ptr, 1)
    tl.store(old_ptr + pid, old)
    tl.atomic_max(i_ptr + 1, pid * 3 % 7)
    tl.atomic_min(i_ptr + 2, -pid)
    tl.atomic_or(i_ptr + 3, 1 << (pid % 8))
    tl.atomic_xor(i_ptr + 4, pid)
    tl.atomic_and(i_ptr + 5, ~(1 << (pid % 8)))
    tl.atomic_add(f_ptr, 0.5)
    tl.atomic_xchg(i_ptr + 6, pid)
    tl.atomic_cas(cas_ptr, pid, pid + 1)


def test_atomics_serial_order():
    P = 13
    ints = torch.tensor([0, -5, 100, 0, 0, -1, -1], dtype=torch.int32)
    f = torch.zeros(1)
    old = torch.full((P,), -1, dtype=torch.int32)
    cas = torch.zeros(1, dtype=torch.int32)
    atomics_kernel[(P,)](ints, f, old, cas)
    assert sorted(old.tolist()) == list(range(P))
    x = 0
    for p in range(P):
        x ^= p
    a = -1
    for p in range(P):
        a &= ~(1 << (p % 8))
    assert ints.tolist()[:6] == [P, max(p * 3 % 7 for p in range(P)), -(P - 1), 255, x, a]
    assert 0 <= ints[6].item() < P
    assert f.item() == P * 0.5
    assert cas.item() == P  # 0->1->2->... in program order


# ----------------------------------------------------------------------------- descriptors
@triton.jit
def desc_kernel(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    src = tl.make_tensor_descriptor(x_ptr, [M, N], [N, 1], [BM, BN])
    dst = tl.make_tensor_descriptor(out_ptr, [M, N], [N, 1], [BM, BN])
    blk = src.load([pm * BM, pn * BN])
    dst.store([pm * BM, pn * BN], blk * 2)


def test_tensor_descriptors():
    M, N = 20, 24
    x = torch.randn(M, N)
    out = torch.full_like(x, float("nan"))
    desc_kernel[(triton.cdiv(M, 8), triton.cdiv(N, 16))](x, out, M, N, BM=8, BN=16)
    torch.testing.assert_close(out, x * 2)


# ------------------------------------------------------------------------------ planted bugs
@triton.jit
def missing_mask_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)  # BUG: no mask
    tl.store(out_ptr + offs, x, mask=offs < n)


@triton.jit
def off_by_one_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs + 1, x, mask=mask)  # BUG: off by one


@triton.jit
def racy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs % 8, x, mask=mask)  # BUG: every program writes out[0:8]


def test_missing_mask_is_caught_with_line():
    x, out = torch.randn(100), torch.empty(100)
    with pytest.raises(KernelFault) as info:
        missing_mask_kernel[(2,)](x, out, 100, BLOCK=64)
    msg = str(info.value)
    assert "out-of-bounds load" in msg and "'x_ptr'" in msg, msg
    assert f"{__file__}:{line_of(missing_mask_kernel, 'BUG: no mask')}" in msg, msg
    assert "elements [64, 128)" in msg and "program (1, 0, 0)" in msg, msg
    assert "tl.load(x_ptr + offs)" in msg


def test_off_by_one_store_is_caught_with_line():
    x, out = torch.randn(100), torch.empty(100)
    with pytest.raises(KernelFault) as info:
        off_by_one_kernel[(2,)](x, out, 100, BLOCK=64)
    msg = str(info.value)
    assert "out-of-bounds store" in msg and "'out_ptr'" in msg and "elements [65, 101)" in msg, msg
    assert f"{__file__}:{line_of(off_by_one_kernel, 'BUG: off by one')}" in msg, msg


def test_race_is_caught_with_flag(monkeypatch):
    x, out = torch.randn(64), torch.empty(64)
    racy_kernel[(4,)](x, out, 64, BLOCK=16)  # without the flag: runs (some serial order)
    monkeypatch.setenv("DAY0_CHECK_RACES", "1")
    with pytest.raises(KernelFault) as info:
        racy_kernel[(4,)](x, out, 64, BLOCK=16)
    msg = str(info.value)
    assert "race on 'out_ptr'" in msg and "programs (0, 0, 0) and (1, 0, 0)" in msg, msg
    assert f"{__file__}:{line_of(racy_kernel, 'BUG: every program')}" in msg, msg


@triton.jit(debug=True)
def assert_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=1.0)
    tl.device_assert(x > 0, "x must be positive")


def test_device_assert_names_line():
    x = torch.ones(10)
    assert_kernel[(1,)](x, 10, BLOCK=16)
    x[3] = -1
    with pytest.raises(KernelFault) as info:
        assert_kernel[(1,)](x, 10, BLOCK=16)
    assert f"{__file__}:{line_of(assert_kernel, 'tl.device_assert')}" in str(info.value)


COPIED_KERNEL = """
import triton
import triton.language as tl


@triton.jit
def copied_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs), mask=offs < n)  # the load has no mask
"""


def test_cached_kernel_names_the_file_it_lives_in(tmp_path):
    """Triton's cache is keyed by source text, not file: an identical kernel compiled from another
    file must still be reported at its own path."""
    import importlib.util
    paths = []
    for k, sub in enumerate(("first", "second")):
        (tmp_path / sub).mkdir()
        path = tmp_path / sub / "copied.py"
        path.write_text(COPIED_KERNEL)
        spec = importlib.util.spec_from_file_location(f"day0_copied_{k}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        with pytest.raises(KernelFault) as info:
            module.copied_kernel[(1,)](torch.randn(10), torch.empty(10), 10, BLOCK=16)
        paths.append((str(path), str(info.value)))
    for path, msg in paths:
        assert f"{path}:9: tl.store(out_ptr + offs, tl.load(x_ptr + offs)" in msg, msg


# ------------------------------------------------------------- TRITON_DEFAULT_BACKEND, no sdk
SCRIPT = '''
import torch, triton, triton.language as tl

@triton.jit
def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 3, mask=offs < n)

x = torch.arange(100, dtype=torch.float32)
out = torch.full_like(x, float("nan"))
k[(4,)](x, out, 100, BLOCK=32)
assert torch.equal(out, x * 3), out
print("OK", type(triton.runtime.driver.active).__name__)
'''


def test_default_backend_env_without_sdk_import(tmp_path):
    script = tmp_path / "kernel_script.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, TRITON_DEFAULT_BACKEND="cpu_interp")
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "OK" in proc.stdout and "cpu_interp" in proc.stdout
    assert "sdk" not in SCRIPT


def test_uninit_read_flag(monkeypatch):
    """Reading an output declared write-only before writing it is reported under DAY0_CHECK_UNINIT."""
    from sdk.memcheck import uninitialised
    monkeypatch.setenv("DAY0_CHECK_UNINIT", "1")
    x = torch.randn(64)
    out = torch.empty(64)
    with pytest.raises(KernelFault, match="uninitialised"), uninitialised([out]):
        uninit_kernel[(1,)](x, out, BLOCK=64)


@triton.jit
def uninit_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    y = tl.load(out_ptr + offs)  # BUG: reads the output before anything wrote it
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + y)


@triton.jit
def counter_kernel(ctr_ptr, old_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    old = tl.atomic_add(ctr_ptr + offs % 4, 1)
    tl.store(old_ptr + tl.program_id(0) * BLOCK + offs, old)


def test_atomic_add_old_values_form_a_serial_order():
    P, B = 50, 16
    ctr = torch.zeros(4, dtype=torch.int32)
    old = torch.full((P, B), -1, dtype=torch.int32)
    counter_kernel[(P,)](ctr, old, BLOCK=B)
    assert ctr.tolist() == [P * B // 4] * 4
    for a in range(4):
        assert sorted(old[:, a::4].flatten().tolist()) == list(range(P * B // 4))


RAND_SCRIPT = '''
import sys, torch, triton, triton.language as tl

@triton.jit
def k(out_ptr, iout_ptr, seed, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.rand(seed, offs))
    tl.store(iout_ptr + offs, tl.randint(seed, offs))

out = torch.empty(512); iout = torch.empty(512, dtype=torch.int32)
k[(4,)](out, iout, 1234, BLOCK=128)
torch.save((out, iout), sys.argv[1])
'''


# Triton's interpreter on 3.6 breaks in loops under numpy >= 2.4; Philox has no loop, so any Triton
# works here; a Triton 3.8 Python is preferred where one is installed beside this one.
_INTERP_PYTHON = "/work/venv38/bin/python" if os.path.exists("/work/venv38/bin/python") else sys.executable


def test_rand_matches_triton_interpreter_bit_exactly(tmp_path):
    script = tmp_path / "rand_script.py"
    script.write_text(RAND_SCRIPT)
    env = dict(os.environ, TRITON_INTERPRET="1")
    env.pop("TRITON_DEFAULT_BACKEND", None)
    proc = subprocess.run([_INTERP_PYTHON, str(script), str(tmp_path / "ref.pt")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ref, iref = torch.load(tmp_path / "ref.pt")
    env["TRITON_DEFAULT_BACKEND"] = "cpu_interp"
    env.pop("TRITON_INTERPRET")
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "ours.pt")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    ours, iours = torch.load(tmp_path / "ours.pt")
    assert torch.equal(iours, iref)
    assert torch.equal(ours, ref)


# ------------------------------------------------------------------- raw pointers (pointer tables)
@triton.jit
def table_rows_kernel(table_ptr, out_ptr, N: tl.constexpr):
    i = tl.program_id(0)
    src = tl.load(table_ptr + i).to(tl.pointer_type(tl.float32))
    tl.store(out_ptr + i * N + tl.arange(0, N), tl.load(src + tl.arange(0, N)) * 2)


@triton.jit
def table_gather_kernel(table_ptr, out_ptr, N: tl.constexpr, R: tl.constexpr):
    rows = tl.arange(0, R)
    srcs = tl.load(table_ptr + rows).to(tl.pointer_type(tl.float32))  # one load over R tensors
    x = tl.load(srcs[:, None] + tl.arange(0, N)[None, :])
    tl.store(out_ptr + rows[:, None] * N + tl.arange(0, N)[None, :], x)


@triton.jit
def table_scatter_kernel(pp_ptr, val_ptr, N: tl.constexpr):
    i = tl.program_id(0)
    # an address passed as a Python int: Triton types it i32, u32 or i64 by its value (a small heap
    # address is i32), and only a 64-bit integer becomes a pointer
    table = pp_ptr.to(tl.int64).to(tl.pointer_type(tl.pointer_type(tl.float32)))  # a pointer to pointers
    dst = tl.load(table + i)
    offs = tl.arange(0, N)
    v = tl.load(val_ptr + i * N + offs)
    tl.store(dst + offs, v)
    tl.atomic_add(dst + offs, v)  # through the table too: each row ends at 2 * v


def _table(ts):
    return torch.tensor([t.data_ptr() for t in ts], dtype=torch.int64)


def test_pointer_table_reaches_tensors_that_are_not_arguments():
    """Each program, and one load's lanes, may address a different tensor, as on a GPU."""
    gen = torch.Generator().manual_seed(11)
    ts = [torch.randn(16, generator=gen) for _ in range(3)]
    big = torch.randn(1 << 20, generator=gen)  # an allocation of its own, far from the others
    ts.append(big[5000:5016])
    out = torch.full((4, 16), float("nan"))
    table_rows_kernel[(4,)](_table(ts), out, N=16)
    assert torch.equal(out, torch.stack(ts) * 2)
    out = torch.full((4, 16), float("nan"))
    table_gather_kernel[(1,)](_table(ts), out, N=16, R=4)
    assert torch.equal(out, torch.stack(ts))


def test_pointer_to_pointers_stores_and_atomics():
    gen = torch.Generator().manual_seed(12)
    dsts = [torch.full((8,), float("nan")) for _ in range(3)]
    vals = torch.randn(3, 8, generator=gen)
    table = _table(dsts)
    table_scatter_kernel[(3,)](table.data_ptr(), vals, N=8)  # the table itself passed as an address
    for d, v in zip(dsts, vals):
        assert torch.equal(d, 2 * v)


def test_raw_pointer_to_unmapped_memory_is_a_clean_fault():
    out = torch.full((1, 16), float("nan"))
    with pytest.raises(KernelFault) as info:
        table_rows_kernel[(1,)](torch.tensor([16], dtype=torch.int64), out, N=16)  # address 0x10
    msg = str(info.value)
    assert "address 0x10 through a raw pointer" in msg and "no mapped memory" in msg, msg
    assert f"{__file__}:{line_of(table_rows_kernel, 'tl.load(src')}" in msg, msg


def test_registered_tensors_bound_raw_pointers_and_arguments_stay_strict():
    from backends.cpu_interp import extra_tensors
    gen = torch.Generator().manual_seed(13)
    ts = [torch.randn(16, generator=gen), torch.randn(8, generator=gen)]  # the second is too short
    out = torch.full((2, 16), float("nan"))
    with extra_tensors(ts), pytest.raises(KernelFault) as info:
        table_rows_kernel[(2,)](_table(ts), out, N=16)
    assert "out-of-bounds load from 'extra[1]'" in str(info.value) and "program (1, 0, 0)" in str(info.value)
    # the output is reached from an argument: it stays bounds-checked in a kernel with raw pointers
    with pytest.raises(KernelFault) as info:
        table_rows_kernel[(2,)](_table([ts[0], ts[0]]), torch.empty(20), N=16)
    assert "out-of-bounds store to 'out_ptr'" in str(info.value)


# ------------------------------------------------------------------ print, barrier, hints, occupancy
@triton.jit
def print_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.device_print("total", tl.sum(x, 0))
    tl.device_print("small", offs < 2, offs)


def test_device_print_shows_prefix_and_values(capfd):
    print_kernel[(2,)](torch.tensor([1.5, 2.0, 4.0]), 3, BLOCK=4)
    out = capfd.readouterr().out
    for pid in ("(0, 0, 0)", "(1, 0, 0)"):
        assert f"pid {pid} idx () total: 7.500000\n" in out, out
        assert f"pid {pid} idx (1) small: (operand 0) 1\n" in out, out
        assert f"pid {pid} idx (2) small: (operand 0) 0\n" in out, out
        assert f"pid {pid} idx (3) small: (operand 1) 3\n" in out, out


@triton.jit
def barrier_hint_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    tl.assume(n > 0)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs = tl.max_contiguous(tl.multiple_of(offs, BLOCK), BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.debug_barrier()
    tl.store(out_ptr + offs, x + 1, mask=offs < n)


def test_barrier_and_hints_keep_results():
    x = torch.randn(50, generator=torch.Generator().manual_seed(3))
    out = torch.full_like(x, float("nan"))
    barrier_hint_kernel[(4,)](x, out, 50, BLOCK=16)
    assert torch.equal(out, x + 1)


@triton.autotune(configs=[triton.Config({"BLOCK": 16, "waves_per_eu": 2, "matrix_instr_nonkdim": 16, "kpack": 2},
                                        num_warps=4, num_stages=2),
                          triton.Config({"BLOCK": 32, "maxnreg": 128}, num_warps=8, num_stages=3)],
                 key=["n"])
@triton.jit
def tuned_elsewhere_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 3, mask=offs < n)


def test_other_backends_tuning_knobs_are_accepted_and_ignored():
    """Kernels tuned for AMD or NVIDIA GPUs pass their knobs at launch and in autotune configs
    (Triton's matmul tutorial gives every non-CUDA target its HIP configs): they run unchanged; a
    keyword no backend knows is still refused, as Triton refuses it."""
    x = torch.randn(50, generator=torch.Generator().manual_seed(6))
    out = torch.full_like(x, float("nan"))
    barrier_hint_kernel[(4,)](x, out, 50, BLOCK=16, waves_per_eu=2, matrix_instr_nonkdim=16, kpack=2,
                              schedule_hint="attention", maxnreg=128, launch_pdl=True)
    assert torch.equal(out, x + 1)
    out.fill_(float("nan"))
    tuned_elsewhere_kernel[lambda meta: (triton.cdiv(50, meta["BLOCK"]),)](x, out, 50)
    assert torch.equal(out, x * 3)
    with pytest.raises(KeyError, match="no_such_knob"):
        barrier_hint_kernel[(4,)](x, out, 50, BLOCK=16, no_such_knob=1)


@triton.jit
def persistent_softmax_kernel(out_ptr, in_ptr, n_rows, n_cols, BLOCK: tl.constexpr):
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        cols = tl.arange(0, BLOCK)
        x = tl.load(in_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
        e = tl.exp(x - tl.max(x, 0))
        tl.store(out_ptr + row * n_cols + cols, e / tl.sum(e, 0), mask=cols < n_cols)


@pytest.mark.parametrize("num_warps", [1, 4, 8, 32])
def test_host_code_sizing_a_persistent_grid_from_kernel_metadata(num_warps):
    """Host code that divides by a compiled kernel's n_regs and shared memory (as Triton's fused
    softmax tutorial does, with 8 warps) gets device-like figures: at least one program a unit at
    every num_warps, as on a GPU, never a grid of zero programs that leaves the output unwritten."""
    from triton.runtime import driver
    props = driver.active.utils.get_device_properties(driver.active.get_current_device())
    x = torch.randn(37, 100, generator=torch.Generator().manual_seed(4))
    y = torch.full_like(x, float("nan"))
    kernel = persistent_softmax_kernel.warmup(y, x, 37, 100, BLOCK=128, num_warps=num_warps, grid=(1,))
    kernel._init_handles()
    assert kernel.n_regs > 0 and kernel.metadata.shared == 128 * 4
    occupancy = min(props["max_num_regs"] // (kernel.n_regs * props["warpSize"] * num_warps),
                    props["max_shared_mem"] // kernel.metadata.shared)
    assert occupancy >= 1
    kernel[(min(props["multiprocessor_count"] * occupancy, 37), 1, 1)](y, x, 37, 100, 128)
    torch.testing.assert_close(y, torch.softmax(x, -1))


# ------------------------------------------------------------------------ host tensor descriptors
@triton.jit
def host_desc_kernel(in_desc, out_desc, BM: tl.constexpr, BN: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    x = in_desc.load([pm * BM, pn * BN])
    out_desc.store([pm * BM, pn * BN], x * 2)


@pytest.mark.parametrize("padding", ["zero", "nan"])
def test_host_tensor_descriptors(padding):
    """TensorDescriptor arguments built on the host: edge tiles are clipped on store; loads past
    the edge read the padding (seen here through a wider output)."""
    from triton.tools.tensor_descriptor import TensorDescriptor
    x = torch.randn(37, 20, generator=torch.Generator().manual_seed(5))
    y = torch.full((37, 20), float("inf"))
    host_desc_kernel[(3, 2)](TensorDescriptor(x, x.shape, x.stride(), [16, 16], padding=padding),
                             TensorDescriptor.from_tensor(y, [16, 16]), BM=16, BN=16)
    assert torch.equal(y, x * 2)
    wide = torch.full((48, 32), 7.0)  # the output descriptor covers whole tiles
    host_desc_kernel[(3, 2)](TensorDescriptor(x, x.shape, x.stride(), [16, 16], padding=padding),
                             TensorDescriptor.from_tensor(wide, [16, 16]), BM=16, BN=16)
    assert torch.equal(wide[:37, :20], x * 2)
    edge = torch.cat([wide[37:, :].flatten(), wide[:, 20:].flatten()])
    assert (edge.isnan().all() if padding == "nan" else (edge == 0).all()), edge


# ------------------------------------------------------------- programs that wait on each other
@triton.jit
def wait_on_later_kernel(flags_ptr, part_ptr, out_ptr):
    pid = tl.program_id(0)
    if pid == 2:  # the last program produces, the first waits for it (stream-K fix-up order)
        tl.store(part_ptr, 41.0)
        tl.atomic_xchg(flags_ptr, 1)
    if pid == 0:
        while tl.atomic_cas(flags_ptr, 1, 1) != 1:
            pass
        tl.store(out_ptr, tl.load(part_ptr) + 1.0)


@triton.jit
def volatile_chain_kernel(flags_ptr, vals_ptr):
    pid = tl.program_id(0)
    prev = 0.0
    if pid > 0:  # program p waits for p - 1 through a volatile load (no atomic in the loop)
        while tl.load(flags_ptr + pid - 1, volatile=True) == 0:
            pass
        prev = tl.load(vals_ptr + pid - 1, volatile=True)
    tl.store(vals_ptr + pid, prev + pid)
    tl.atomic_xchg(flags_ptr + pid, 1)


@triton.jit
def deadlock_kernel(flags_ptr, out_ptr):
    pid = tl.program_id(0)
    while tl.atomic_add(flags_ptr + 1 - pid, 0) == 0:  # each waits for the other
        pass
    tl.store(out_ptr + pid, 1.0)


def test_a_program_may_wait_on_a_later_one():
    out = torch.full((1,), float("nan"))
    wait_on_later_kernel[(3,)](torch.zeros(1, dtype=torch.int32), torch.zeros(1), out)
    assert out.item() == 42.0


def test_volatile_spin_waits_complete():
    vals = torch.full((6,), float("nan"))
    volatile_chain_kernel[(6,)](torch.zeros(6, dtype=torch.int32), vals)
    assert torch.equal(vals, torch.cumsum(torch.arange(6.0), 0))


def test_programs_waiting_on_each_other_is_a_clean_fault():
    with pytest.raises(KernelFault) as info:
        deadlock_kernel[(2,)](torch.zeros(2, dtype=torch.int32), torch.zeros(2))
    msg = str(info.value)
    assert "programs [0, 1]" in msg and "wait on each other forever" in msg, msg
    assert f"{__file__}:{line_of(deadlock_kernel, 'while tl.atomic_add')}" in msg, msg


# ------------------------------------------------- descriptors: reduce, gather, divergent; map_elementwise
@triton.jit
def desc_ops_kernel(x_ptr, idx_ptr, acc_ptr, rows_ptr, M, N, BN: tl.constexpr, R: tl.constexpr):
    pid = tl.program_id(0)
    xd = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[1, BN])
    rows = xd.gather(tl.load(idx_ptr + tl.arange(0, R)), 0)  # R rows picked by index (zero past the end)
    tl.store(rows_ptr + pid * R * BN + tl.arange(0, R)[:, None] * BN + tl.arange(0, BN)[None, :], rows)
    ad = tl.make_tensor_descriptor(acc_ptr, shape=[R, N], strides=[N, 1], block_shape=[R, BN])
    ad.atomic_add([0, 0], rows)  # every program adds its copy


@triton.jit
def desc_divergent_kernel(a_ptr, b_ptr, out_ptr, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    if pid % 2 == 0:
        d = tl.make_tensor_descriptor(a_ptr, shape=[BM, BN], strides=[BN, 1], block_shape=[BM, BN])
    else:
        d = tl.make_tensor_descriptor(b_ptr, shape=[BM, BN], strides=[BN, 1], block_shape=[BM, BN])
    offs = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
    tl.store(out_ptr + pid * BM * BN + offs, d.load([0, 0]))


@triton.jit
def _soft_clip(x, t):
    if x > t:
        return t + (x - t) * 0.5
    else:
        return x


@triton.jit
def map_elementwise_kernel(x_ptr, out_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    tl.store(out_ptr + tl.arange(0, N), tl.map_elementwise(_soft_clip, x, tl.full(x.shape, 0.25, tl.float32)))


def test_descriptor_gather_and_reduce():
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(20, 16, generator=gen)
    idx = torch.tensor([3, 19, 0, 7, 25, 3, 11, 2], dtype=torch.int32)  # 25 is past the last row
    acc = torch.randn(8, 16, generator=gen)
    rows = torch.full((3, 8, 16), float("nan"))
    expect = torch.where((idx < 20)[:, None], x[idx.clamp(max=19).long()], torch.zeros(1))
    start = acc.clone()
    desc_ops_kernel[(3,)](x, idx, acc, rows, 20, 16, BN=16, R=8)
    assert torch.equal(rows, expect.expand(3, 8, 16))
    torch.testing.assert_close(acc, start + 3 * expect)


def test_descriptor_chosen_per_program():
    gen = torch.Generator().manual_seed(9)
    a, b = torch.randn(8, 16, generator=gen), torch.randn(8, 16, generator=gen)
    out = torch.full((4, 8, 16), float("nan"))
    desc_divergent_kernel[(4,)](a, b, out, BM=8, BN=16)
    assert torch.equal(out, torch.stack([a, b, a, b]))


def test_map_elementwise_branches_per_element():
    x = torch.randn(64, generator=torch.Generator().manual_seed(10))
    out = torch.full_like(x, float("nan"))
    map_elementwise_kernel[(1,)](x, out, N=64)
    assert torch.equal(out, torch.where(x > 0.25, 0.25 + (x - 0.25) * 0.5, x))


# ------------------------------------------------------------ pointers chosen among arguments
@triton.jit
def lane_select_kernel(a_ptr, b_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    p = tl.where(offs % 2 == 0, a_ptr + offs // 2, b_ptr + offs // 2)  # lanes alternate tensors
    tl.store(out_ptr + offs, tl.load(p))


@triton.jit
def program_select_kernel(q_ptr, k_ptr, n_q, N: tl.constexpr):
    pid = tl.program_id(0)
    if pid < n_q:  # one launch rotates q heads then k heads, as RoPE kernels do
        base = q_ptr + pid * N
    else:
        base = k_ptr + (pid - n_q) * N
    offs = tl.arange(0, N)
    tl.store(base + offs, tl.load(base + offs) * -1.0)


@triton.jit
def program_select_oob_kernel(q_ptr, k_ptr, n_q, N: tl.constexpr):
    pid = tl.program_id(0)
    if pid < n_q:
        base = q_ptr + pid * N
    else:
        base = k_ptr + (pid - n_q) * N
    offs = tl.arange(0, N) + 4  # BUG: the last row of each tensor overruns it by 4 elements
    tl.store(base + offs, tl.load(base + offs) * -1.0)


def test_pointers_selected_among_arguments():
    gen = torch.Generator().manual_seed(14)
    a, b = torch.randn(8, generator=gen), torch.randn(8, generator=gen)
    out = torch.full((16,), float("nan"))
    lane_select_kernel[(1,)](a, b, out, N=16)
    assert torch.equal(out, torch.stack([a, b], 1).flatten())
    q, k = torch.randn(3, 16, generator=gen), torch.randn(2, 16, generator=gen)
    q0, k0 = q.clone(), k.clone()
    program_select_kernel[(5,)](q, k, 3, N=16)
    assert torch.equal(q, -q0) and torch.equal(k, -k0)


def test_per_program_selection_is_still_bounds_checked():
    gen = torch.Generator().manual_seed(15)
    q, k = torch.randn(3, 16, generator=gen), torch.randn(2, 16, generator=gen)
    with pytest.raises(KernelFault) as info:
        program_select_oob_kernel[(5,)](q, k, 3, N=16)
    msg = str(info.value)
    assert "out-of-bounds load from 'q_ptr'" in msg and "program (2, 0, 0)" in msg, msg
    assert "elements [36, 52)" in msg, msg


# ------------------------------------------------------------------------- scalars and fp8 formats
@triton.jit
def store_scalar_kernel(out_ptr, value):
    tl.store(out_ptr, value)


def test_u64_scalar_arguments_keep_their_bits():
    out = torch.zeros(1, dtype=torch.int64)
    value = 2 ** 63 + 2 ** 40 + 7  # Triton types it u64
    store_scalar_kernel[(1,)](out, value)
    assert out.item() % 2 ** 64 == value


@triton.jit
def fp8e4b15_kernel(x_ptr, out_ptr, N: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, N))
    tl.store(out_ptr + tl.arange(0, N), x.to(tl.float8e4b15).to(tl.float32))


def test_fp8e4b15_converts_as_triton_defines_it():
    """fp8e4b15: fp16's top byte less one exponent bit (bias 15, no inf/NaN, 0x7f reads 1.875);
    encoding rounds fp32 toward zero to fp16, clamps to 1.75, rounds half away from zero."""
    import numpy as np
    gen = torch.Generator().manual_seed(15)
    x = torch.cat([torch.randn(56, generator=gen), torch.tensor([0.0, -0.0, 1.8, -3.0, 1e-6, 2.0 ** -16, 1.6875, 100.0])])
    out = torch.full_like(x, float("nan"))
    fp8e4b15_kernel[(1,)](x, out, N=64)
    h = x.numpy().astype(np.float64)
    # the independent model: fp32 -> fp16 toward zero, clamp, keep 3 mantissa bits half away from zero
    a = np.abs(h)
    e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    e = np.maximum(e, -14)
    q16 = np.trunc(a / 2.0 ** (e - 10)) * 2.0 ** (e - 10)       # fp16 toward zero
    q16 = np.minimum(q16, 1.75)
    step = 2.0 ** (np.maximum(np.floor(np.log2(np.where(q16 > 0, q16, 1.0))), -14) - 3)
    want = np.floor(q16 / step + 0.5) * step * np.sign(h)
    np.testing.assert_array_equal(out.numpy(), want.astype(np.float32))


# ------------------------------------------------------------------- address ownership by search
@pytest.mark.parametrize("overlapping", [False, True])
def test_address_owners_found_by_search_match_a_scan_of_every_region(overlapping):
    """Which region holds each address (the first in order; element-aligned with its start), for
    the hundreds of regions a raw pointer maps walking a tensor it was not given: found by a search
    over sorted starts where regions are disjoint, against a scan of every region per address."""
    from backends.cpu_interp.addressing import AddressSpace
    from sdk.records import DeviceArg
    rng = np.random.default_rng(11)
    starts = np.sort(rng.choice(np.arange(0, 1 << 20, 64), size=300, replace=False)) + 4096
    sizes = rng.integers(0, 17, size=300) * 4  # some empty; starts are 64 bytes apart at least
    if overlapping:
        sizes[::7] += 256  # every seventh reaches into the regions after it
    assert overlapping == any(s + n > t for s, n, t in zip(starts, sizes, starts[1:]))
    regions = [DeviceArg(f"r{k}", int(s), int(n), "f32") for k, (s, n) in enumerate(zip(starts, sizes))]
    order = rng.permutation(len(regions))
    regions = [regions[k] for k in order]
    near = rng.choice(starts, size=4000) + rng.integers(-16, 240, size=4000)  # in, between and past regions
    a = np.concatenate([near,
                        np.asarray([r.address for r in regions[:50]]),
                        np.asarray([r.address + r.nbytes for r in regions[:50]])]).astype(np.int64)
    for width in (1, 4):
        want = np.full(a.shape, -1, np.int64)
        for i, x in enumerate(a.tolist()):
            for k, r in enumerate(regions):
                if r.address <= x and x + width <= r.address + r.nbytes and (x - r.address) % width == 0:
                    want[i] = k
                    break
        got = AddressSpace._owners(a, width, regions)
        assert np.array_equal(got, want)
        assert (want >= 0).sum() > 100 and (want < 0).sum() > 100
