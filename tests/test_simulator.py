"""The simulator: counts read from TTIR, fit checks and roofline times against hand-computed values."""
import json
import subprocess
import sys

import pytest
import torch
import triton
import triton.language as tl

import ttir_kernels as K
from sdk.capture import capture
from sdk.device_models import load
from sdk.simulator import analyse, predict


@triton.jit
def vadd(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


@triton.jit
def dadd(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) * 2.0)


def _counts(launch_fn):
    cap = capture()
    with cap:
        launch_fn()
    assert len(cap.launches) == 1
    launch = cap.launches[0]
    return analyse(launch.module, launch.grid, launch.args)


def test_counts_of_a_vector_add():
    x = torch.randn(4096)
    c = _counts(lambda: vadd[(16,)](x, x, x, 4096, BLOCK=256))
    assert c.grid == (16, 1, 1)
    assert c.bytes_loaded == 2 * 256 * 4 and c.bytes_stored == 256 * 4
    assert c.flops[("vector", "fp32", "")] == 256
    assert not c.estimated


def test_loop_trip_count_follows_the_scalar_argument():
    x = torch.randn(4096)
    five = _counts(lambda: K.loops[(1,)](x, x, 5, BLOCK=32))
    nine = _counts(lambda: K.loops[(1,)](x, x, 9, BLOCK=32))
    # the for-loop loads BLOCK floats per iteration; the while-loop's bound is not folded
    assert five.bytes_loaded == 5 * 32 * 4 and nine.bytes_loaded == 9 * 32 * 4
    assert five.estimated


def test_dot_flops_and_type():
    x = torch.randn(4096, dtype=torch.float16)
    c = _counts(lambda: K.small_dot[(1,)](x, x, torch.empty(256), M=16, N=16, K=16))
    assert c.flops[("matrix", "fp16", "fp32")] == 2 * 16 * 16 * 16
    assert c.dot_types == {("fp16", "fp32")}


def test_memory_bound_time_is_bytes_over_bandwidth_plus_launch():
    n = 1 << 22
    x, y, out = torch.empty(n), torch.empty(n), torch.empty(n)
    dev = load("nvidia_h100")
    c = _counts(lambda: vadd[(n // 1024,)](x, y, out, n, BLOCK=1024))
    p = predict([c], dev)
    expected = 3 * 4 * n / dev.dram_bytes_per_s + dev.launch_overhead_s
    assert p.fits and p.bound == "memory"
    assert p.time_s == pytest.approx(expected, rel=1e-9)


def test_rereads_are_capped_at_each_tensor_size():
    """64 programs that all read the same 16x16 operands move each operand through DRAM once."""
    a, b = torch.randn(256, dtype=torch.float16), torch.randn(256, dtype=torch.float16)
    c = _counts(lambda: K.small_dot[(64,)](a, b, torch.empty(256), M=16, N=16, K=16))
    assert c.loaded_by_arg["a_ptr"] == 16 * 16 * 2 and c.loaded_by_arg["b_ptr"] == 16 * 16 * 2
    # loads: each operand once (512 B each); stores: 64 programs x 1 KiB capped at the 1 KiB output
    assert c.dram_bytes() == 2 * 512 + 1024
    assert c.bytes_loaded * c.programs == 64 * 1024


def test_fit_checks_name_the_reason():
    npu = load("generic_npu")
    x = torch.randn(8)
    big = _counts(lambda: vadd[(1,)](x, x, x, 1, BLOCK=1 << 18))  # 3 live fp32 blocks of 1 MiB
    p = predict([big], npu)
    assert not p.fits and any("KiB on chip" in w for w in p.why)
    wide = _counts(lambda: vadd[(70000,)](x, x, x, 1, BLOCK=16))
    p = predict([wide], npu)
    assert not p.fits and any("grid axis x = 70000" in w for w in p.why)
    assert predict([wide], load("nvidia_h100")).fits
    f64 = _counts(lambda: dadd[(1,)](torch.randn(64, dtype=torch.float64), torch.empty(64, dtype=torch.float64),
                                     BLOCK=64))
    p = predict([f64], npu)
    assert not p.fits and any("fp64" in w for w in p.why)


def test_cli_writes_json_and_refuses_to_overwrite(tmp_path):
    out = tmp_path / "sim.json"
    cmd = [sys.executable, "-m", "sdk.cli", "simulate", "--device", "generic_npu,nvidia_h100",
           "--kernels", "rmsnorm", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    entry = data["by_device"]["generic_npu"]["kernels"]["rmsnorm"]
    assert entry["time_s"] > 0 and entry["fits"] in (True, False)
    assert {r["device"] for r in data["cases"]} == {"generic_npu", "nvidia_h100"}
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and "--force" in again.stderr


def test_a_gpu_program_may_keep_tiles_in_registers():
    """192 KiB of live tiles exceed an L4's 99 KiB of shared memory but fit with its register file."""
    x = torch.empty(1 << 14)
    c = _counts(lambda: vadd[(1,)](x, x, x, 1 << 14, BLOCK=1 << 14))
    l4 = load("nvidia_l4")
    assert l4.max_program_bytes < c.footprint_bytes <= l4.program_on_chip_bytes
    assert predict([c], l4).fits


@triton.jit
def varlen_sum(x_ptr, lens_ptr, out_ptr, BLOCK: tl.constexpr):
    """One program per sequence; its loop bound is a length the kernel loads from memory."""
    seq = tl.program_id(0)
    n = tl.load(lens_ptr + seq)
    acc = tl.zeros((BLOCK,), tl.float32)
    for i in range(0, n):
        acc += tl.load(x_ptr + i * BLOCK + tl.arange(0, BLOCK))
    tl.store(out_ptr + seq * BLOCK + tl.arange(0, BLOCK), acc)


def test_loop_bounds_read_from_memory_and_averaged_over_programs():
    lens = torch.tensor([2, 4, 6, 8], dtype=torch.int32)
    x = torch.empty(8 * 32)
    c = _counts(lambda: varlen_sum[(4,)](x, lens, torch.empty(4 * 32), BLOCK=32))
    # programs run 2, 4, 6 and 8 iterations of a 128-byte load: 5 on average
    assert c.bytes_loaded == pytest.approx(5 * 32 * 4 + 4)  # plus the 4-byte length itself
    assert not c.estimated
