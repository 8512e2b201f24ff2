"""INT8 W8A8: dynamic int8 quantisation of activations and the block-scaled int8 GEMM.

Per token (checkpoints with per-channel int8 weights and dynamic per-token activations, e.g.
meituan/DeepSeek-R1-Channel-INT8 and W8A8-INT8 MoE releases of Qwen3.5-style models; vLLM runs this
Triton kernel for the activations of its int8 fused-MoE path and for Marlin's W4A8-INT8 input):
  scale = max(amax(row), 1e-10) / 127, q = round(x * (127 / amax)) rounded half away from zero, as
  the libdevice `round` of the serving kernel does (2.5 -> 3, -2.5 -> -3).
Per token group of 128 (block-INT8 checkpoints, e.g. meituan/DeepSeek-R1-Block-INT8: int8 weights in
128 x 128 blocks with one fp32 scale each, activations quantised per token and group of 128 before
every GEMM): scale = max(amax(group), 1e-10) / 127, q = clamp(x / scale, -128, 127) converted to int8,
which truncates toward zero (the Triton kernel's float -> int8 conversion; vLLM's CUDA op rounds).
Block GEMM: c = sum over K blocks of (A_blk . B_blk^T as an int32 dot) * a_scale * b_scale in fp32,
written as bf16 or fp16 (the activations' dtype).

Divisions use `div_rn` (IEEE, correctly rounded) so that q is a function of x alone on every target;
the serving kernels' `/` is approximate on NVIDIA (div.full, <= 2 ulp), which moves a value across a
rounding boundary now and then. With that, q is judged bit-exact and scales to 1e-6. Rows built so
that x * 127 / amax lands exactly on halves (and, for the group kernel, on integers) check the
rounding rule itself.

No model of the suite's manifests is served with int8 weights; public int8 checkpoints of the
architectures they describe exist (named above), so `models` stays empty.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sdk.conformance.kernels.gemm_fp8_block import _pad_cols, dequant
from sdk.conformance.refmath import compute_dtype
from sdk.conformance.spec import Case, KernelSpec, Tolerance, register

INT8_MAX = 127
EPS = 1e-10      # floor of a row's / group's amax, as the serving path uses
BLOCK = 128      # weight block and activation group of block-INT8 checkpoints
_INT8_UTILS = "vllm: model_executor/layers/quantization/utils/int8_utils.py "


@triton.jit
def _round_half_away(v):
    """int32 nearest to v with halves away from zero (libdevice `round`), for |v| < 2^31, built from
    the truncating conversion and exact compares (no subtraction a GPU could fuse into an fma)."""
    t = v.to(tl.int32)
    tf = t.to(tl.float32)
    return tl.where(v >= tf + 0.5, t + 1, tl.where(v <= tf - 0.5, t - 1, t))


@triton.jit
def _per_token_quant_int8_kernel(x_ptr, q_ptr, s_ptr, N, stride_x, stride_q, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    amax = tl.maximum(tl.max(tl.abs(x), axis=0), eps)
    q = _round_half_away(x * tl.math.div_rn(127.0, amax))
    tl.store(q_ptr + row * stride_q + cols, q.to(tl.int8), mask=mask)
    tl.store(s_ptr + row, tl.math.div_rn(amax, 127.0))


@triton.jit
def _per_token_group_quant_int8_kernel(x_ptr, q_ptr, s_ptr, groups_per_row, stride_x, stride_q,
                                       stride_s_row, stride_s_grp, eps, GROUP: tl.constexpr):
    g = tl.program_id(0).to(tl.int64)
    row = g // groups_per_row
    grp = g % groups_per_row
    j = tl.arange(0, GROUP)
    x = tl.load(x_ptr + row * stride_x + grp * GROUP + j).to(tl.float32)
    scale = tl.math.div_rn(tl.maximum(tl.max(tl.abs(x), axis=0), eps), 127.0)
    q = tl.clamp(tl.math.div_rn(x, scale), -128.0, 127.0)
    tl.store(q_ptr + row * stride_q + grp * GROUP + j, q.to(tl.int8))
    tl.store(s_ptr + row * stride_s_row + grp * stride_s_grp, scale)


@triton.jit
def _block_int8_gemm_kernel(a_ptr, b_ptr, c_ptr, as_ptr, bs_ptr, M, N, K,
                            stride_am, stride_bn, stride_cm, stride_as_m, stride_as_k, stride_bs_n, stride_bs_k,
                            GROUP_N: tl.constexpr, GROUP_K: tl.constexpr, BLOCK_M: tl.constexpr,
                            BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # BLOCK_K divides GROUP_K: a K tile never straddles two scale groups
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * num_n
    first_m = (pid // per_group) * GROUP_M
    rows_in_group = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % rows_in_group
    pid_n = (pid % per_group) // rows_in_group
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mmask = offs_m < M
    nmask = offs_n < N
    a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :]
    b_ptrs = b_ptr + offs_n[None, :].to(tl.int64) * stride_bn + offs_k[:, None]
    as_ptrs = as_ptr + offs_m * stride_as_m
    bs_ptrs = bs_ptr + (offs_n // GROUP_N) * stride_bs_n
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kmask = offs_k < K - k0
        a = tl.load(a_ptrs, mask=mmask[:, None] & kmask[None, :], other=0)
        b = tl.load(b_ptrs, mask=kmask[:, None] & nmask[None, :], other=0)
        sa = tl.load(as_ptrs + (k0 // GROUP_K) * stride_as_k, mask=mmask, other=0.0)
        sb = tl.load(bs_ptrs + (k0 // GROUP_K) * stride_bs_k, mask=nmask, other=0.0)
        acc += tl.dot(a, b).to(tl.float32) * sa[:, None] * sb[None, :]
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K
    c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mmask[:, None] & nmask[None, :])


# ------------------------------------------------------------------------------------ launchers
def per_token_quant_int8(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor) -> None:
    """q [M, N] int8 and s [M, 1] fp32 of x [M, N] (rows contiguous): one program per token."""
    m, n = x.shape
    assert x.stride(1) == 1 and q.stride(1) == 1
    block = triton.next_power_of_2(n)
    _per_token_quant_int8_kernel[(m,)](x, q, s, n, x.stride(0), q.stride(0), EPS, BLOCK_N=block,
                                       num_warps=min(max(block // 256, 1), 8), num_stages=1)


def per_token_group_quant_int8(x: torch.Tensor, q: torch.Tensor, s: torch.Tensor, group: int = BLOCK) -> None:
    """q [M, K] int8 and s [M, K / group] fp32 (any strides) of x [M, K]: one program per group."""
    m, k = x.shape
    assert k % group == 0 and x.stride(1) == 1 and q.stride(1) == 1
    _per_token_group_quant_int8_kernel[(m * (k // group),)](
        x, q, s, k // group, x.stride(0), q.stride(0), s.stride(0), s.stride(1), EPS, GROUP=group,
        num_warps=min(max(group // 256, 1), 8), num_stages=1)


def _gemm_config(m: int) -> dict:
    """BLOCK_K = the scale group (one int32 dot per scale pair); 64-row tiles take 8 warps, so the int32
    partial product and the fp32 accumulator stay in registers. Three stages of int8 A and B tiles
    (at most 72 KB) fit the shared memory of every target from sm_80 to sm_120."""
    block_m = 16 if m <= 16 else 32 if m <= 32 else 64
    return dict(BLOCK_M=block_m, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=8 if block_m == 64 else 4,
                num_stages=3)


def block_int8_gemm(a, a_scale, b, b_scale, c, **config) -> None:
    """c[M, N] = (a * a_scale) @ (b * b_scale)^T for int8 a [M, K], b [N, K] (rows contiguous),
    a_scale [M, cdiv(K, 128)] and b_scale [cdiv(N, 128), cdiv(K, 128)] fp32 (any strides)."""
    m, k = a.shape
    n = b.shape[0]
    assert a.stride(1) == 1 and b.stride(1) == 1 and c.stride(1) == 1
    cfg = {**_gemm_config(m), **config}
    assert BLOCK % cfg["BLOCK_K"] == 0
    grid = (triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"]),)
    _block_int8_gemm_kernel[grid](
        a, b, c, a_scale, b_scale, m, n, k, a.stride(0), b.stride(0), c.stride(0),
        a_scale.stride(0), a_scale.stride(1), b_scale.stride(0), b_scale.stride(1),
        GROUP_N=BLOCK, GROUP_K=BLOCK, **cfg)


# ---------------------------------------------------------------------------------- references
def per_token_quant_reference(x: torch.Tensor):
    """(q int8 [M, N], scale fp64 [M, 1]) by the definition: the fp32 products x * fp32(127 / amax)
    rounded half away from zero."""
    xf = x.float().cpu()
    amax = xf.abs().amax(-1, keepdim=True).clamp_min(EPS)
    # fp32(127 / amax) correctly rounded, as div_rn gives it: through fp64 (exact for fp32 operands);
    # torch's `127.0 / tensor` is reciprocal-then-multiply, one ulp off for a quarter of the values
    inv = (127.0 / amax.double()).float()
    v = (xf * inv).double()                               # an IEEE fp32 product, as the kernel
    q = torch.sign(v) * torch.floor(v.abs() + 0.5)        # exact in fp64
    return q.to(torch.int8), amax.double() / 127.0


def group_quant_reference(x: torch.Tensor, group: int = BLOCK):
    """(q int8 [M, K], scale fp64 [M, K / group]): fp32 scale = amax / 127, q = trunc(clamp(x / scale))."""
    xf = x.float().cpu()
    m, k = xf.shape
    g = xf.view(m, k // group, group)
    scale = g.abs().amax(-1).clamp_min(EPS) / 127.0
    q = torch.trunc(torch.clamp(g / scale[..., None], -128.0, 127.0))
    return q.view(m, k).to(torch.int8), scale.double()


def quantize_weight_blocks_int8(w: torch.Tensor, block: int = BLOCK):
    """int8 weights [N, K] with one fp32 scale per block x block tile (amax / 127), rounded to nearest,
    as block-INT8 checkpoints store them; partial edge blocks allowed."""
    n, k = w.shape
    nb, kb = triton.cdiv(n, block), triton.cdiv(k, block)
    padded = torch.zeros((nb * block, kb * block), dtype=torch.float32)
    padded[:n, :k] = w
    tiles = padded.view(nb, block, kb, block)
    scale = tiles.abs().amax(dim=(1, 3)).clamp_min(1e-12) / 127.0
    q = torch.round(tiles / scale[:, None, :, None]).clamp(-127, 127).view(nb * block, kb * block)
    return q[:n, :k].to(torch.int8).contiguous(), scale


# ----------------------------------------------------------------------------------------- inputs
def _activations(m: int, k: int, gen: torch.Generator, tie_step: float) -> torch.Tensor:
    """Tokens of different magnitudes with outliers; row 0 all zeros (amax floored at eps); row 1 on
    the rounding grid: multiples of `tie_step` times amax / 127 (0.5: exact halves, 1: integers)."""
    x = torch.randn((m, k), generator=gen) * (torch.rand((m, 1), generator=gen) * 4 + 0.05)
    x[:, ::97] *= 20.0
    if m > 1:
        x[0] = 0.0
    if m > 2:
        top = int(126 / tie_step)
        steps = torch.randint(-top, top + 1, (k,), generator=gen).double() * tie_step
        # one 127 in every 128 columns: each group's amax is 127/8 and 127 / amax = 8, exact in every dtype
        steps[(torch.arange(0, k, BLOCK) + torch.randint(0, BLOCK, (1,), generator=gen)).clamp(max=k - 1)] = 127.0
        x[1] = (steps * 2.0 ** -3).float()
    return x


def _per_token_inputs(case, dtype, device, gen):
    m, k = case.params["tokens"], case.params["hidden"]
    return {"x": _activations(m, k, gen, 0.5).to(dtype).to(device),
            "q": torch.empty((m, k), dtype=torch.int8, device=device),
            "s": torch.empty((m, 1), dtype=torch.float32, device=device)}


def _per_token_ref(inp, case):
    q, s = per_token_quant_reference(inp["x"])
    return {"q": q, "s": s}


def _group_inputs(case, dtype, device, gen):
    m, k = case.params["tokens"], case.params["hidden"]
    return {"x": _activations(m, k, gen, 1.0).to(dtype).to(device),
            "q": torch.empty((m, k), dtype=torch.int8, device=device),
            "s": torch.empty((m, k // BLOCK), dtype=torch.float32, device=device)}


def _group_ref(inp, case):
    q, s = group_quant_reference(inp["x"])
    return {"q": q, "s": s}


def _gemm_inputs(case, dtype, device, gen):
    p = case.params
    m, n, k = p["M"], p["N"], p["K"]
    x = torch.randn((m, k), generator=gen).to(dtype).float()
    a, a_scale = group_quant_reference(_pad_cols(x, BLOCK))
    b, b_scale = quantize_weight_blocks_int8(torch.randn((n, k), generator=gen) / k ** 0.5)
    return {"a": a[:, :k].contiguous().to(device), "a_scale": a_scale.float().to(device), "b": b.to(device),
            "b_scale": b_scale.to(device), "c": torch.empty((m, n), dtype=dtype, device=device)}


def _gemm_ref(inp, case):
    dt = compute_dtype(inp["c"])  # fp32: the outputs are 16-bit (refmath)
    return {"c": dequant(inp["a"].cpu(), inp["a_scale"].cpu(), 1, dtype=dt)
            @ dequant(inp["b"].cpu(), inp["b_scale"].cpu(), BLOCK, dtype=dt).T}


# ---------------------------------------------------------------------------------- registration
_R1 = ("DeepSeek-R1 INT8 checkpoints (meituan/DeepSeek-R1-Channel-INT8 / -Block-INT8; the DeepSeek-V3 "
       "architecture, figures of models.md): ")
_Q35 = "Qwen3.5-35B-A3B (models.md) W8A8-INT8 MoE: per-channel experts, per-token activations; "
_QUANT_TOL = {d: Tolerance(exact=True) for d in ("bf16", "fp16", "fp32")}
_SCALE_TOL = {"s": Tolerance(atol=0.0, rtol=1e-6)}

register(KernelSpec(
    name="int8_per_token_quant", group="quant_int8", models=(),
    cases=(
        Case("odd_T37_K1000", {"tokens": 37, "hidden": 1000},
             source="odd sizes: 1000 columns in a 1024-wide block (masked); a zero row; a row of exact halves"),
        Case("qwen3_5_moe_in_T16_K2048", {"tokens": 16, "hidden": 2048},
             source=_Q35 + "hidden 2048 (gate/up input of the experts)"),
        Case("qwen3_5_moe_down_T24_K512", {"tokens": 24, "hidden": 512},
             source=_Q35 + "moe_intermediate 512 (down-projection input)"),
        Case("deepseek_r1_channel_hidden_T4096_K7168", {"tokens": 4096, "hidden": 7168}, quick=False,
             source=_R1 + "hidden 7168, 4096-token prefill"),
        Case("deepseek_r1_channel_moe_down_T8192_K2048", {"tokens": 8192, "hidden": 2048}, quick=False,
             source=_R1 + "moe_intermediate 2048: down-projection input, 1024 tokens x top-8"),
    ),
    dtypes=("bf16", "fp16", "fp32"),
    make_inputs=_per_token_inputs, run=lambda inp, case: per_token_quant_int8(inp["x"], inp["q"], inp["s"]),
    reference=_per_token_ref, outputs=("q", "s"), tolerance=_QUANT_TOL, output_tolerance=_SCALE_TOL,
    description="per-token int8: scale = max(amax, 1e-10) / 127, q = round(x * 127 / amax) with halves away "
                "from zero; q bit-exact, scales to 1e-6. No manifest model is served in int8: "
                "meituan/DeepSeek-R1-Channel-INT8 and W8A8-INT8 MoE checkpoints (per-channel weights) use it",
    triton_kernels=(_per_token_quant_int8_kernel,),
    upstream=_INT8_UTILS + "per_token_quant_int8 (_per_token_quant_int8); called by fused_moe/utils.py "
             "_int8_quantize (int8 W8A8 MoE, per-token activation scales) and marlin_utils.py "
             "marlin_quant_input (W4A8-INT8)",
))

register(KernelSpec(
    name="int8_per_token_group_quant", group="quant_int8", models=(),
    cases=(
        Case("odd_T37_K640", {"tokens": 37, "hidden": 640},
             source="odd token count, 5 groups per row; a zero row; a row of exact integers after scaling"),
        Case("deepseek_r1_block_kv_lora_T13_K512", {"tokens": 13, "hidden": 512},
             source=_R1 + "kv_lora_rank 512 (kv_b_proj input)"),
        Case("deepseek_r1_block_q_lora_T9_K1536", {"tokens": 9, "hidden": 1536},
             source=_R1 + "q_lora_rank 1536 (q_b_proj input)"),
        Case("deepseek_r1_block_hidden_T4096_K7168", {"tokens": 4096, "hidden": 7168}, quick=False,
             source=_R1 + "hidden 7168, 4096-token prefill (q_a / kv_a / gate-up inputs)"),
        Case("deepseek_r1_block_moe_down_T8192_K2048", {"tokens": 8192, "hidden": 2048}, quick=False,
             source=_R1 + "moe_intermediate 2048: down-projection input, 1024 tokens x top-8"),
    ),
    dtypes=("bf16", "fp16", "fp32"),
    make_inputs=_group_inputs, run=lambda inp, case: per_token_group_quant_int8(inp["x"], inp["q"], inp["s"]),
    reference=_group_ref, outputs=("q", "s"), tolerance=_QUANT_TOL, output_tolerance=_SCALE_TOL,
    description="per-token groups of 128: scale = max(amax, 1e-10) / 127, q = int8(clamp(x / scale, -128, 127)) "
                "truncated toward zero as the Triton kernel converts; q bit-exact, scales to 1e-6. No manifest "
                "model is served in int8: block-INT8 checkpoints (meituan/DeepSeek-R1-Block-INT8) use it",
    triton_kernels=(_per_token_group_quant_int8_kernel,),
    upstream=_INT8_UTILS + "per_token_group_quant_int8 (_per_token_group_quant_int8); the Triton path off "
             "CUDA/ROCm (there torch.ops._C.per_token_group_quant_int8), called by fused_moe/utils.py "
             "_int8_quantize for block-INT8 MoE",
))

register(KernelSpec(
    name="gemm_int8_block_w8a8", group="quant_int8", models=(),
    cases=(
        Case("odd_M37_N200_K320", {"M": 37, "N": 200, "K": 320},
             source="odd sizes: partial last scale block in N (200 = 128 + 72) and K (320 = 2 x 128 + 64)"),
        Case("deepseek_r1_kv_a_T5_N576_K896", {"M": 5, "N": 576, "K": 896},
             source=_R1 + "kv_a_proj_with_mqa N = kv_lora 512 + rope 64 = 576; K = hidden 7168 / 8"),
        Case("deepseek_r1_kv_a_T4096_N576_K7168", {"M": 4096, "N": 576, "K": 7168}, quick=False,
             source=_R1 + "kv_a_proj_with_mqa: hidden 7168 -> 512 + 64, 4096-token prefill"),
        Case("deepseek_r1_q_b_T4096_N24576_K1536", {"M": 4096, "N": 24576, "K": 1536}, quick=False,
             source=_R1 + "q_b_proj: q_lora 1536 -> 128 heads x 192"),
        Case("deepseek_r1_dense_down_T8_N7168_K18432", {"M": 8, "N": 7168, "K": 18432}, quick=False,
             source=_R1 + "dense-layer down projection 18432 -> 7168, 8-token decode"),
    ),
    dtypes=("bf16", "fp16"),
    make_inputs=_gemm_inputs, run=lambda inp, case, **cfg: block_int8_gemm(
        inp["a"], inp["a_scale"], inp["b"], inp["b_scale"], inp["c"], **cfg),
    reference=_gemm_ref, outputs=("c",),
    tolerance={"bf16": Tolerance(atol=2e-2, rtol=1.6e-2), "fp16": Tolerance(atol=4e-3, rtol=4e-3)},
    description="int8 x int8 per 128-wide K block as an int32 dot, scaled by 1x128 activation and 128x128 "
                "weight scales into an fp32 accumulator, bf16/fp16 output; vs the dequantised operands "
                "multiplied in fp32 (refmath: 16-bit outputs). No manifest model is served in int8: block-INT8 checkpoints "
                "(meituan/DeepSeek-R1-Block-INT8) use it",
    triton_kernels=(_block_int8_gemm_kernel,),
    upstream=_INT8_UTILS + "w8a8_block_int8_matmul (_w8a8_block_int8_matmul), in vLLM's tree without a "
             "serving dispatch (the 0.33 wheel no longer has it); SGLang serves block-INT8 checkpoints "
             "through the same kernel (srt/layers/quantization/int8_kernel.py via blockwise_int8.py)",
))
