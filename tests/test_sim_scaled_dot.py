"""A microscaled dot (tt.dot_scaled) costs its flops at the type the target multiplies in and, where
Triton decomposes it, the vector work of decoding its scaled operand (sdk.simulator.timing.scaled_path)."""
import math

import torch
import triton
import triton.language as tl

from sdk.capture import capture
from sdk.device_models import load
from sdk.simulator import analyse
from sdk.simulator.analysis import DotSite, LaunchCounts
from sdk.simulator.model import predict_launch
from sdk.simulator.timing import SCALED_DECODE_OPS, Efficiencies, scaled_path


@triton.jit
def mx_matmul(x_ptr, w_ptr, s_ptr, out_ptr, K, M: tl.constexpr, N: tl.constexpr, BK: tl.constexpr):
    """out[M, N] = x[M, K] (bf16) @ w[K, N] (e2m1 packed two a byte along K, an e8m0 scale per 32)."""
    m, n = tl.arange(0, M), tl.arange(0, N)
    acc = tl.zeros((M, N), dtype=tl.float32)
    for k0 in range(0, K, BK):
        x = tl.load(x_ptr + m[:, None] * K + k0 + tl.arange(0, BK)[None, :])
        w = tl.load(w_ptr + (k0 // 2 + tl.arange(0, BK // 2))[:, None] * N + n[None, :])
        s = tl.load(s_ptr + n[:, None] * (K // 32) + k0 // 32 + tl.arange(0, BK // 32)[None, :])
        acc = tl.dot_scaled(x, None, "bf16", w, s, "e2m1", acc=acc)
    tl.store(out_ptr + m[:, None] * N + n[None, :], acc)


def _launch(K=256, M=16, N=64, BK=64):
    g = torch.Generator().manual_seed(0)
    x = torch.randn((M, K), generator=g).to(torch.bfloat16)
    w = torch.randint(0, 256, (K // 2, N), generator=g, dtype=torch.uint8)
    s = torch.randint(120, 130, (N, K // 32), generator=g, dtype=torch.uint8)
    out = torch.full((M, N), float("nan"))
    cap = capture()
    with cap:
        mx_matmul[(1,)](x, w, s, out, K, M=M, N=N, BK=BK)
    (launch,) = cap.launches
    return analyse(launch.module, launch.grid, launch.args)


def test_the_scaled_dot_is_counted_transposed_with_its_decoded_operand():
    K, M, N, BK = 256, 16, 64, 64
    c = _launch(K, M, N, BK)
    (site,) = c.dots.values()
    # only the right-hand side is scaled: Triton computes (W^T X^T)^T, the decoded W first
    assert (site.m, site.n, site.k) == (N, M, BK)
    assert site.scaled == ("bf16", "e2m1") and site.a_src == "computed" and site.b_src == "loop_load"
    assert site.decoded == BK * N and site.execs == K // BK and not site.fast_math
    assert c.flops[("matrix", "bf16", "fp32")] == 2.0 * M * N * K


def test_a_decomposed_scaled_dot_puts_the_decode_on_the_programs_serial_path():
    h100 = load("nvidia_h100")
    eff = Efficiencies(warp_ipc=0.5, dram_latency_s=1e-9, program_overhead_s=0.0, dot_latency_s=1e-7)
    site = DotSite(m=64, n=16, k=64, batch=1, operand="bf16", acc="fp32", a_bytes=2048, b_bytes=2048,
                   a_src="computed", b_src="loop_load", loop=None, execs=10.0, scaled=("bf16", "e2m1"),
                   decoded=64 * 64)
    assert scaled_path(h100, site) == ("bf16", 64 * 64 * SCALED_DECODE_OPS)
    c = LaunchCounts("k", (h100.units, 1, 1), dots={1: site}, num_warps=4)
    p = predict_launch(c, h100, eff)
    # one wave: the program's 4 warps (128 lanes) issue 10 x 4096 x 6 decode operations at 0.5 per
    # clock, and each of its 10 dots waits on the decoded operand
    want = 10 * 4096 * SCALED_DECODE_OPS / (128 * h100.clock_hz * 0.5) + 10 * 1e-7
    assert math.isclose(p.terms["latency"], want, rel_tol=1e-9)
    assert p.terms["vector"] == 0.0  # not against the unit's vector throughput


def test_a_target_with_a_microscaled_matrix_unit_multiplies_fp4_natively():
    spark, h100 = load("nvidia_gb10_spark"), load("nvidia_h100")
    both = DotSite(m=128, n=128, k=64, batch=1, operand="bf16", acc="fp32", a_bytes=4096, b_bytes=4096,
                   a_src="computed", b_src="computed", loop=None, execs=1.0, scaled=("e2m1", "e2m1"),
                   decoded=2 * 128 * 64)
    assert scaled_path(spark, both) == ("fp4", 0.0)
    assert scaled_path(h100, both) == ("bf16", 2 * 128 * 64 * SCALED_DECODE_OPS)
    # a 16-bit side is upcast-and-multiply everywhere (bf16 x e2m1 has no native instruction)
    mixed = DotSite(**{**both.__dict__, "scaled": ("bf16", "e2m1"), "decoded": 128 * 64})
    assert scaled_path(spark, mixed) == ("bf16", 128 * 64 * SCALED_DECODE_OPS)
