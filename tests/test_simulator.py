"""The simulator: counts read from TTIR, on-chip staging against real compiles, fit checks, the time
model against hand-computed values, calibration, and the device models' datasheet basis."""
import json
import subprocess
import sys

import pytest
import torch
import triton
import triton.language as tl

import ttir_kernels as K
from sdk.capture import capture
from sdk.device_models import load, load_text
from sdk.simulator import analyse, predict
from sdk.simulator.timing import Efficiencies, launch_time


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
    return analyse(launch.module, launch.grid, launch.args, num_warps=launch.num_warps,
                   num_stages=launch.num_stages)


#: efficiencies fixed here, so that expected times do not move with the learned ones
EFF = Efficiencies(dram={"contiguous": 0.8, "strided": 0.4, "indirect": 0.5, "scalar": 0.5},
                   matrix={"8": 0.6, "16": 0.7, "32": 0.5, "64": 0.5, "sync_on_async": 0.5},
                   vector=0.5, special=0.5, dram_latency_s=7e-7, launch_floor_s=2e-6,
                   launch_reference_s=load("nvidia_h100").host_launch_s)


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
    assert dict(c.access) == {"contiguous": 3 * 1024 * 4}
    p = predict([c], dev, EFF)
    # datasheet bandwidth (3.35 TB/s) at the contiguous-access efficiency, plus the launch floor
    assert dev.dram_bytes_per_s == 3350e9
    expected = 3 * 4 * n / (3350e9 * 0.8) + 2e-6
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
    assert not p.fits and any("KiB of on-chip memory" in w for w in p.why)
    wide = _counts(lambda: vadd[(70000,)](x, x, x, 1, BLOCK=16))
    p = predict([wide], npu)
    assert not p.fits and any("grid axis x = 70000" in w for w in p.why)
    assert predict([wide], load("nvidia_h100")).fits
    f64 = _counts(lambda: dadd[(1,)](torch.randn(64, dtype=torch.float64), torch.empty(64, dtype=torch.float64),
                                     BLOCK=64))
    p = predict([f64], npu)
    assert not p.fits and any("fp64" in w for w in p.why)


def test_cli_writes_json_and_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "sim.json"
    args = ["simulate", "--device", "generic_npu,nvidia_h100", "--kernels", "rmsnorm", "--out", str(out),
            "--cache-dir", str(tmp_path / "cache")]
    proc = subprocess.run([sys.executable, "-m", "sdk.cli", *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "0 from the cache" in proc.stderr
    data = json.loads(out.read_text())
    entry = data["by_device"]["generic_npu"]["kernels"]["rmsnorm"]
    assert entry["time_s"] > 0 and entry["fits"] in (True, False)
    assert {r["device"] for r in data["cases"]} == {"generic_npu", "nvidia_h100"}
    # the rest through the same CLI's main() in this process (no fresh interpreter's imports per call)
    from sdk.cli import main
    assert main(args) == 2 and "--force" in capsys.readouterr().err
    assert main(args + ["--force"]) == 0
    warm = capsys.readouterr().err
    assert " 0 captured" in warm, warm
    assert json.loads(out.read_text())["cases"] == data["cases"]
    assert main(args[:-2] + ["--cache-dir", str(out), "--force"]) == 2
    bad = capsys.readouterr().err
    assert "not a directory" in bad and "Traceback" not in bad


def test_captured_calls_are_kept_between_runs_and_captured_again_when_what_decides_them_changes(tmp_path):
    from sdk.conformance.spec import registered
    from sdk.simulator import simulate_suite
    from sdk.simulator.cache import CaptureCache, item_key
    from sdk.simulator.onchip import target_profile
    spec = registered()["silu_and_mul"]
    h100 = load("nvidia_h100")
    cold = CaptureCache(tmp_path)
    first = simulate_suite([spec], [h100], cache=cold)
    n = len(first["cases"])
    assert n and cold.misses == n and cold.hits == 0
    warm = CaptureCache(tmp_path)
    second = simulate_suite([spec], [h100], cache=warm)
    assert warm.hits == n and warm.misses == 0
    assert second["cases"] == first["cases"]
    # the key follows the case's parameters, the dtype and the target profile the wrapper sees
    case = next(c for c in spec.cases if c.quick)
    prof = target_profile(h100)
    base = item_key(spec, case, spec.dtypes[0], prof)
    import dataclasses
    moved = dataclasses.replace(case, params={**case.params, "extra": 1})
    assert item_key(spec, moved, spec.dtypes[0], prof) != base
    assert item_key(spec, case, spec.dtypes[-1], prof) != base or len(spec.dtypes) == 1
    assert item_key(spec, case, spec.dtypes[0], target_profile(load("amd_mi300x"))) != base
    # an unreadable entry is captured again and replaced
    path = next(tmp_path.rglob("*.pkl"))
    path.write_bytes(b"not a pickle")
    again = CaptureCache(tmp_path)
    third = simulate_suite([spec], [h100], cache=again)
    assert again.misses == 1 and again.hits == n - 1 and third["cases"] == first["cases"]


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


@triton.jit
def varlen_blocks(x_ptr, lens_ptr, out_ptr, BM: tl.constexpr, BLOCK: tl.constexpr):
    """Grid (sequence, head, block of rows): a block past its sequence's end returns at once, the
    others loop over the whole sequence (every head alike)."""
    seq, head, blk = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    n = tl.load(lens_ptr + seq)
    if blk * BM >= n:
        return
    acc = tl.zeros((BLOCK,), tl.float32)
    for i in range(0, n):
        acc += tl.load(x_ptr + i * BLOCK + tl.arange(0, BLOCK))
    tl.store(out_ptr + (seq * 16 + head) * BLOCK + tl.arange(0, BLOCK), acc)


def test_programs_that_differ_along_some_axes_are_averaged_over_those_axes_whole():
    # 32 sequences, two of them long: a few evenly spaced programs of the 4096 would miss them
    g = torch.Generator().manual_seed(7)
    lens = torch.randint(1, 4, (32,), generator=g, dtype=torch.int32)
    lens[5], lens[23] = 200, 90
    BM, BLOCK, blocks = 32, 16, 8
    x = torch.randn(256 * BLOCK, generator=g)
    out = torch.full((32 * 16 * BLOCK,), float("nan"))
    c = _counts(lambda: varlen_blocks[(32, 16, blocks)](x, lens, out, BM=BM, BLOCK=BLOCK))
    # by hand: a program loads its length (4 bytes); one whose block starts inside its sequence
    # also loads n tiles of BLOCK floats and stores one tile
    loaded = stored = 0.0
    for n in lens.tolist():
        live = sum(1 for b in range(blocks) if b * BM < n)
        loaded += blocks * 4 + live * n * BLOCK * 4
        stored += live * BLOCK * 4
    assert c.bytes_loaded == pytest.approx(loaded / (32 * blocks), rel=1e-9)
    assert c.bytes_stored == pytest.approx(stored / (32 * blocks), rel=1e-9)


def test_a_grid_of_alike_programs_is_walked_a_few_times():
    from sdk.simulator.analysis import LaunchCounts, sample_grid
    walked = []

    def walk(pid):
        walked.append(pid)
        c = LaunchCounts("k", (4096, 64, 1))
        c.bytes_loaded = 1024.0
        return c
    runs = sample_grid(walk, (4096, 64, 1), samples=32, budget=512)
    assert len(runs) == 1 and runs[0].bytes_loaded == 1024.0
    assert len(walked) <= 2 * 7 * 2  # two starting programs, at most seven ids on each of two axes

    def tail(pid):  # the last block along axis 0 is masked short
        c = LaunchCounts("k", (100, 3, 1))
        c.bytes_loaded = 10.0 if pid[0] == 99 else 40.0
        return c
    runs = sample_grid(tail, (100, 3, 1), samples=32, budget=512)
    assert sum(r.bytes_loaded for r in runs) / len(runs) == pytest.approx((99 * 40 + 10) / 100)


# ---- on-chip staging against real compiles -----------------------------------------------------
@triton.jit
def kloop_gemm(a_ptr, b_ptr, c_ptr, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm, rn, rk = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * BN + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


def _gemm_launch(stages):
    a = torch.randn(64, 512, dtype=torch.bfloat16)
    b = torch.randn(512, 64, dtype=torch.bfloat16)
    c = torch.empty(64, 64)
    return lambda: kloop_gemm[(1,)](a, b, c, 512, BM=64, BN=64, BK=32, num_stages=stages, num_warps=4)


@pytest.mark.parametrize("arch, stages", [("sm_80", 3), ("sm_90", 3), ("sm_90", 4), ("sm_89", 2)])
def test_staged_dot_operands_match_what_triton_allocates(arch, stages):
    """The K loop's A and B tiles (64x32 and 32x64 bf16, 4 KiB each) are pipelined: Hopper's wgmma
    path keeps num_stages copies, mma.sync's cp.async path num_stages - 1; the compiler's own
    figure (nvidia_ref compile-only, no GPU) is the reference."""
    import sdk
    from sdk.backend import get_backend
    from sdk.simulator.onchip import shared_bytes, staging_for_arch
    c = _counts(_gemm_launch(stages))
    assert c.num_stages == stages and c.num_warps == 4
    (dot,) = c.dots.values()
    assert (dot.a_src, dot.b_src, dot.a_bytes, dot.b_bytes) == ("loop_load", "loop_load", 4096, 4096)
    assert dot.execs == 512 / 32
    predicted = shared_bytes(c, staging_for_arch(arch))
    copies = stages if arch == "sm_90" else stages - 1
    assert predicted == copies * 8192
    name = f"nvidia_ref@{arch}/compile"
    with sdk.activate(name), sdk.launches.compile_only():
        _gemm_launch(stages)()
    (real,) = get_backend(name).take_launch_stats()
    assert abs(real["shared_bytes"] - predicted) <= 1024, (real["shared_bytes"], predicted)


def test_fit_verdicts_are_per_dtype():
    """The generic NPU's matrix unit takes bf16 (and fp8) operands only: the bf16 GEMM fits it, the
    fp16 and fp32 (tf32) ones do not, and one dtype's verdict does not hide the others'; an H100
    runs all three."""
    from sdk.conformance.spec import registered
    from sdk.simulator import simulate_suite
    spec = registered()["gemm_bf16"]
    out = simulate_suite([spec], [load("generic_npu"), load("nvidia_h100")], efficiencies=EFF)
    npu = out["by_device"]["generic_npu"]["kernels"]["gemm_bf16"]
    h100 = out["by_device"]["nvidia_h100"]["kernels"]["gemm_bf16"]
    assert npu["fits_by_dtype"] == {"bf16": True, "fp16": False, "fp32": False} and not npu["fits"]
    assert any("no matrix-unit path for tt.dot(fp16 -> fp32)" in w for w in npu["why"])
    assert h100["fits"] and h100["fits_by_dtype"] == {"bf16": True, "fp16": True, "fp32": True}


# ---- time model --------------------------------------------------------------------------------
def test_dots_are_padded_to_the_matrix_unit_tile():
    """A 16x16x16 dot on a 32x32x32 matrix unit costs a whole 32x32x32 tile."""
    x = torch.randn(4096, dtype=torch.float16)
    c = _counts(lambda: K.small_dot[(1,)](x, x, torch.empty(256), M=16, N=16, K=16))
    npu = load("generic_npu")
    t = launch_time(c, npu, EFF)
    assert t.padded_flops == 2 * 32 ** 3
    rate = npu.matrix_flops_per_s("fp16", "fp32") or npu.matrix_flops_per_s("bf16", "fp32")
    assert t.terms["matrix"] == pytest.approx(2 * 32 ** 3 / (rate * 0.7 / npu.units))


def test_a_missing_matrix_dtype_keeps_its_flops_and_says_so():
    """MI300X's matrix unit takes the FNUZ fp8 variants only: an e4m3 GEMM runs upcast at its bf16
    rate, so the MI300X is not predicted many times faster than an H100 that has fp8 tensor cores."""
    from sdk.conformance.spec import registered
    from sdk.simulator.run import capture_case
    spec = registered()["gemm_fp8_w8a8"]
    case = next(c for c in spec.cases if c.quick)
    launches = capture_case(spec, case, "bf16")
    mi = predict(launches, load("amd_mi300x"), EFF)
    h100 = predict(launches, load("nvidia_h100"), EFF)
    assert any("no matrix-unit rate for fp8e4m3 operands: counted at the bf16 rate" in n for n in mi.notes)
    flops = sum(v * c.programs for c in launches for (unit, _, _), v in c.flops.items() if unit == "matrix")
    assert mi.terms["matrix"] >= flops / (1307.4e12 * 0.7)
    assert mi.terms["matrix"] > h100.terms["matrix"]


def test_l2_serves_what_an_earlier_launch_wrote():
    n = 1 << 16
    x, y, mid, out = (torch.randn(n) for _ in range(4))
    cap = capture()
    with cap:
        vadd[(n // 1024,)](x, y, mid, n, BLOCK=1024)
        vadd[(n // 1024,)](mid, y, out, n, BLOCK=1024)
    c1, c2 = (analyse(la.module, la.grid, la.args) for la in cap.launches)
    h100 = load("nvidia_h100")
    alone = predict([c2], h100, EFF).bytes
    together = predict([c1, c2], h100, EFF).bytes - predict([c1], h100, EFF).bytes
    assert alone == 3 * 4 * n and together == 2 * 4 * n  # `mid` comes from L2, not DRAM


def test_small_grids_leave_units_idle():
    """One program does its dot on one SM: the time is that SM's share of the rate, not the chip's."""
    x = torch.randn(4096, dtype=torch.float16)
    h100 = load("nvidia_h100")
    one = launch_time(_counts(lambda: K.small_dot[(1,)](x, x, torch.empty(64 * 64), M=64, N=64, K=64)), h100, EFF)
    many = launch_time(_counts(lambda: K.small_dot[(132,)](x, x, torch.empty(64 * 64), M=64, N=64, K=64)), h100, EFF)
    assert many.terms["matrix"] == pytest.approx(one.terms["matrix"])


@triton.jit
def dot_then_exp(a_ptr, b_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    s = tl.dot(tl.load(a_ptr + rm[:, None] * K + rk[None, :]), tl.load(b_ptr + rk[:, None] * N + rn[None, :]))
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], tl.exp(s))


@triton.jit
def exp_only(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.exp(tl.load(x_ptr + offs)))


def test_vector_work_between_dots_runs_at_its_own_fraction_of_the_rate():
    from dataclasses import replace
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(64 * 32, generator=g, dtype=torch.float16), torch.randn(32 * 64, generator=g, dtype=torch.float16)
    x = torch.randn(4096, generator=g)
    h100 = load("nvidia_h100")
    with_dot = _counts(lambda: dot_then_exp[(1,)](a, b, torch.empty(64 * 64), M=64, N=64, K=32))
    plain = _counts(lambda: exp_only[(1,)](x, torch.empty(4096), BLOCK=4096))
    assert with_dot.flops[("special", "fp32", "")] == 64 * 64 and plain.flops[("special", "fp32", "")] == 4096
    half = replace(EFF, vector_between_dots=0.5)
    # the dot kernel's 160 integer ops: its row and column offsets (64 + 64 + 32)
    assert with_dot.flops[("vector", "int32", "")] == 160
    # one program on one of the 132 SMs: 4096 exponentials at the SM's share of 4182 Gop/s on the
    # special-function pipe, overlapping the vector path, which issues them and the 160 integer ops
    # at its share of 67 TFLOP/s; each at its efficiency (0.5), and between dots half of that. The
    # special pipe is the longer here.
    sm_special, sm_vector = 4182e9 / 132, 67e12 / 132
    between = max(4096 / (sm_special * 0.5), (4096 + 160) / (sm_vector * 0.5))
    assert between == 4096 / (sm_special * 0.5)
    assert launch_time(with_dot, h100, half).terms["vector"] == pytest.approx(between / 0.5, rel=1e-6)
    assert launch_time(with_dot, h100, EFF).terms["vector"] == pytest.approx(between, rel=1e-6)
    assert launch_time(plain, h100, half).terms["vector"] == pytest.approx(4096 / (sm_special * 0.5), rel=1e-6)


@triton.jit
def masked_tile_exp(x_ptr, out_ptr, rows, cols, R: tl.constexpr, C: tl.constexpr):
    """A [R, C] tile read through a row-and-column mask, 24 multiplies and adds and one
    exponential an element."""
    r, c = tl.arange(0, R), tl.arange(0, C)
    mask = (r < rows)[:, None] & (c < cols)[None, :]
    x = tl.load(x_ptr + r[:, None] * C + c[None, :], mask=mask, other=0.0)
    y = x
    for _ in tl.static_range(12):
        y = y * 0.5 + x
    tl.store(out_ptr + r[:, None] * C + c[None, :], tl.exp(y) + y, mask=mask)


def test_special_pipe_overlaps_the_vector_path_and_mask_logic_is_weighted():
    from dataclasses import replace
    g = torch.Generator().manual_seed(11)
    x = torch.randn(64 * 64, generator=g)
    h100 = load("nvidia_h100")
    c = _counts(lambda: masked_tile_exp[(1,)](x, torch.empty(64 * 64), 50, 60, R=64, C=64))
    n = 64 * 64
    masks = c.flops[("vector", "int1", "")]
    others = sum(v for (unit, dt, _), v in c.flops.items() if unit == "vector" and dt != "int1")
    assert c.flops[("special", "fp32", "")] == n and masks >= n and others >= 24 * n
    sm_special, sm_vector = 4182e9 / 132, 67e12 / 132
    # the vector path issues the exponentials too, and each mask operation as half of one (a
    # three-input logic instruction folds two); the special pipe runs beside it and is shorter here
    vector_path = (others + 0.5 * masks + n) / (sm_vector * 0.5)
    assert vector_path > n / (sm_special * 0.5)
    assert launch_time(c, h100, EFF).terms["vector"] == pytest.approx(vector_path, rel=1e-6)
    # a slower special pipe becomes the bound
    slow = replace(EFF, special=0.01)
    assert launch_time(c, h100, slow).terms["vector"] == pytest.approx(n / (sm_special * 0.01), rel=1e-6)


@triton.jit
def swap_pairs(x_ptr, HALF: tl.constexpr):
    """Interleaved pairs (2i, 2i + 1) swapped in place through stride-2 loads and stores."""
    r = tl.program_id(0) * 2 * HALF + 2 * tl.arange(0, HALF)
    a = tl.load(x_ptr + r)
    b = tl.load(x_ptr + r + 1)
    tl.store(x_ptr + r, b)
    tl.store(x_ptr + r + 1, a)


def test_element_strided_accesses_cost_per_element_at_the_measured_rates():
    from dataclasses import replace
    g = torch.Generator().manual_seed(5)
    x = torch.randn(264 * 2 * 512, generator=g, dtype=torch.bfloat16)
    c = _counts(lambda: swap_pairs[(264,)](x, HALF=512))
    assert dict(c.strided_elements) == {("load", 2): 1024, ("store", 2): 1024}
    assert dict(_counts(lambda: vadd[(4,)](x, x, x, 4096, BLOCK=1024)).strided_elements) == {}
    h100 = load("nvidia_h100")
    eff = replace(EFF, strided_loads_per_clock=0.9, strided_stores_per_clock=0.25)
    # 264 programs on 132 SMs: two each, 1024 stores apiece at a quarter of an element per clock
    expected = 2 * 1024 / (0.25 * 1.98e9)
    t = launch_time(c, h100, eff)
    assert t.terms["memory"] == pytest.approx(expected, rel=1e-9) and t.bound == "memory"
    assert launch_time(c, h100, EFF).terms["memory"] < expected / 10  # no measured rate: bytes alone


def test_calibration_recovers_the_efficiencies_behind_the_measurements():
    """Times made by the model with known efficiencies are fitted back from the defaults."""
    from sdk.simulator.calibrate import Row, fit, loss
    h100 = load("nvidia_h100")
    truth = Efficiencies(dram={"contiguous": 0.7, "strided": 0.4, "indirect": 0.5, "scalar": 0.5},
                         matrix={"8": 0.6, "16": 0.45, "32": 0.5, "64": 0.5, "sync_on_async": 0.5},
                         vector=0.5, special=0.5, dram_latency_s=7e-7, launch_floor_s=4e-6)
    x16 = torch.randn(1 << 16, dtype=torch.float16)
    rows = []
    for n in (1 << 16, 1 << 20, 1 << 23, 1 << 25):
        x = torch.empty(n)
        rows.append(_counts(lambda: vadd[(n // 1024,)](x, x, x, n, BLOCK=1024)))
    for g in (1, 132, 4096):
        rows.append(_counts(lambda: K.small_dot[(g,)](x16, x16, torch.empty(128 * 128), M=128, N=128, K=128)))
    data = [Row((str(i), "", ""), "", [c], h100, predict([c], h100, truth).time_s) for i, c in enumerate(rows)]
    fitted = fit(data)
    assert loss(data, fitted) < 0.01 < loss(data, Efficiencies())
    assert fitted.dram["contiguous"] == pytest.approx(0.7, rel=0.05)
    assert fitted.launch_floor_s == pytest.approx(4e-6, rel=0.1)


# ---- device models: datasheet basis, checked arithmetic ---------------------------------------
def test_values_are_datasheet_figures_with_measured_ceilings_beside_them():
    from sdk.device_models import all_models, figures_of
    for m in all_models():
        for path, fig in figures_of(m):
            assert fig.source_kind != "measured", (m.name, path)  # the basis is never a measurement
            if fig.measured is not None:
                assert fig.measured.source_kind == "measured", (m.name, path)
    h100 = load("nvidia_h100")
    bw = h100.memory.dram.bandwidth_gb_per_s
    assert (bw.value, bw.source_kind, bw.measured.value) == (3350, "datasheet", 3017)
    assert h100.matrix.tflop_per_s[("bf16", "fp32")].measured.value == 791
    text = open("sdk/device_models/generic_npu.yaml").read().replace(
        'bandwidth_gb_per_s: {value: 1000, source: "assumed: fictional reference NPU"}',
        'bandwidth_gb_per_s: {value: 1000, source: "assumed: fictional reference NPU", '
        'measured: {value: 900, source: "assumed: it felt like 900"}}')
    with pytest.raises(Exception, match=r"bandwidth_gb_per_s\.measured\.source: must say how it was measured"):
        load_text(text, "npu.yaml")


def test_derived_figures_are_checked_arithmetic():
    from sdk.device_models import all_models
    from sdk.device_models.arithmetic import check_derived
    findings = [(m.name, f) for m in all_models() for f in check_derived(m)]
    assert len(findings) > 40
    assert [str(f) for _, f in findings if f.status != "ok"] == []
    base = open("sdk/device_models/generic_npu.yaml").read()
    wrong = base.replace("fp32: {value: 4.096,", "fp32: {value: 5.2,")
    with pytest.raises(Exception, match=r"vector\.tflop_per_s\.fp32\.source: derived from '32 \* 64 \* 2 \* 1000' "
                                        r"gives 4\.096e\+06, which does not match the value 5\.2"):
        load_text(wrong, "npu.yaml")
    prose = base.replace('source: "derived from 32 cores x 64 lanes x 2 flop x 1000 MHz"',
                         'source: "derived from the vendor\'s simulator"')
    (finding,) = [f for f in check_derived(load_text(prose, "npu.yaml")) if f.path == "vector.tflop_per_s.fp32"]
    assert finding.status == "unchecked"


def test_fixed_device_gaps():
    gb10 = load("nvidia_gb10_spark")
    assert gb10.matrix_flops_per_s("tf32", "fp32") == pytest.approx(62.5e12)
    wh = load("tenstorrent_wormhole_n300")
    x = torch.randn(8)
    wide = _counts(lambda: vadd[(70000,)](x, x, x, 1, BLOCK=16))
    assert predict([wide], wh, EFF).fits


def test_launch_wrappers_see_the_simulated_target():
    """A wrapper that sizes its grid by the device's SM count, or picks native fp8 by the target's
    fp8 types, launches what it would launch on the device simulated."""
    from sdk.simulator.onchip import device_props, triton_fp8
    from sdk.simulator.run import capture_case

    def grids(device):
        props = device_props(device)
        cap = capture(triton_fp8(device), props)
        x = torch.empty(1 << 16)
        with cap:
            sms = triton.runtime.driver.active.utils.get_device_properties(0)["multiprocessor_count"]
            vadd[(sms,)](x, x, x, 1 << 16, BLOCK=512)
        assert cap.queried
        return cap.launches[0].grid

    assert grids(load("nvidia_l4")) == (58, 1, 1) and grids(load("nvidia_h100")) == (132, 1, 1)
    # the suite's fp8 KV-cache write stores native fp8 where the target has e4m3, bits otherwise
    from sdk.conformance.spec import registered
    spec = registered()["kv_cache_write_fp8"]
    case = next(c for c in spec.cases if c.quick)
    native = capture_case(spec, case, "bf16", triton_fp8(load("nvidia_h100")))
    emulated = capture_case(spec, case, "bf16", ("fp8e4b15", "fp8e5"))  # sm_80's fp8 types
    assert native.target_dependent and any(d.startswith("fp8") for c in native for d in c.dtypes)
    assert not any(d.startswith("fp8") for c in emulated for d in c.dtypes)


def test_a_capture_refuses_configurations_the_target_cannot_hold():
    """First-fit wrappers and autotuners move on from a configuration the target's compiler refuses
    for shared memory; the capture refuses what the staging estimate says does not fit, so each
    device is simulated with the configuration it would run."""
    from sdk.conformance.kernels.fit import launch_first_fit
    from sdk.simulator.onchip import device_props, staging_for, triton_fp8
    from sdk.simulator.run import _shared_check
    a = torch.randn(64, 512, dtype=torch.bfloat16)
    b = torch.randn(512, 64, dtype=torch.bfloat16)
    c = torch.empty(64, 64)
    big = dict(BM=64, BN=64, BK=256, num_stages=3, num_warps=4)   # 2 x 64 KiB (mma) / 3 x 64 KiB (wgmma)
    small = dict(BM=64, BN=64, BK=32, num_stages=3, num_warps=4)

    def chosen(device):
        cap = capture(triton_fp8(device), device_props(device), _shared_check(staging_for(device)))
        with cap:
            cfg = launch_first_fit(kloop_gemm, lambda cfg: (1,), (a, b, c, 512), [big, small])
        assert len(cap.launches) == 1
        return cfg, cap.refused

    assert chosen(load("nvidia_l4")) == (small, True)     # 128 KiB > 99 KiB
    assert chosen(load("nvidia_h100")) == (big, False)    # 192 KiB <= 227 KiB


@triton.jit
def row_max(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.full([BLOCK], float("-inf"), tl.float32)
    for i in range(0, N, BLOCK):
        acc = tl.maximum(acc, tl.load(x_ptr + row * N + i + tl.arange(0, BLOCK)))
    tl.store(out_ptr + row, tl.max(acc, 0))


def test_a_program_alone_on_its_unit_waits_for_its_own_bytes():
    """Where every program has an SM to itself, a round of loads it waits for costs the latency and
    then its bytes: the launch's memory time joins the serial path. One program more than there
    are SMs and another program can hide them: the serial path is latency and compute alone."""
    h100 = load("nvidia_h100")
    n, U = 8192, h100.units
    x = torch.randn((U + 1) * n, generator=torch.Generator().manual_seed(3))
    alone = launch_time(_counts(lambda: row_max[(U,)](x, torch.empty(U + 1), n, BLOCK=1024)), h100, EFF)
    shared = launch_time(_counts(lambda: row_max[(U + 1,)](x, torch.empty(U + 1), n, BLOCK=1024)), h100, EFF)
    assert alone.terms["memory"] > 0 and shared.terms["memory"] == pytest.approx(alone.terms["memory"], rel=0.05)
    assert alone.terms["latency"] - shared.terms["latency"] == pytest.approx(alone.terms["memory"], rel=1e-3)
    assert alone.terms["latency"] > alone.terms["memory"] + (n // 1024) * EFF.dram_latency_s


def test_a_launch_of_many_short_programs_waits_for_the_units_to_start_them():
    """A unit takes on its programs at a bounded rate: a million 32-element programs take their
    count per unit times the start cost, whatever the bytes, and the same on the H100 and the
    H200 (same units, same clock) though the H200 has 1.4x the bandwidth; few large programs
    doing the same work are bound by DRAM instead, faster on the H200."""
    from dataclasses import replace
    n = 1 << 25
    x, y, out = torch.randn(n), torch.randn(n), torch.empty(n)
    short = _counts(lambda: vadd[(n // 32,)](x, y, out, n, BLOCK=32))
    wide = _counts(lambda: vadd[(n // 4096,)](x, y, out, n, BLOCK=4096))
    h100, h200 = load("nvidia_h100"), load("nvidia_h200")
    eff = replace(EFF, program_start_s=8e-8)
    starts = -(-short.programs // h100.units) * 8e-8
    t100, t200 = launch_time(short, h100, eff), launch_time(short, h200, eff)
    assert t100.bound == t200.bound == "programs"
    assert t100.terms["programs"] == pytest.approx(starts) == t200.terms["programs"]
    assert t100.terms["programs"] > t100.terms["memory"] > t200.terms["memory"]
    w100, w200 = launch_time(wide, h100, eff), launch_time(wide, h200, eff)
    assert w100.bound == w200.bound == "memory" and w200.time_s < 0.8 * w100.time_s
    assert launch_time(short, h100, replace(eff, program_start_s=0.0)).terms["programs"] == 0.0   # off
