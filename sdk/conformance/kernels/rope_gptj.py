"""Interleaved (GPT-J style) rotary embedding with a YaRN cos/sin cache: DeepSeek-V3's and Kimi-K2's
MLA rotates the 64 qk_rope dims of every query head (the last 64 of q's 192 = 128 nope + 64 rope)
and the single shared k_pe (64) of every token, in place.

Interleaved means rotation pairs are adjacent dims (2i, 2i + 1), both turned by frequency i:
    out[2i]     = x[2i] cos_i - x[2i+1] sin_i
    out[2i + 1] = x[2i + 1] cos_i + x[2i] sin_i
(NeoX style, `rope.py`, pairs i with i + rot/2 instead.)

The cos/sin cache is built on the host as DeepseekScalingRotaryEmbedding builds it: YaRN inverse
frequencies (a linear ramp between interpolation by `factor` and extrapolation over the dims whose
wavelengths fall between beta_fast and beta_slow rotations of the original context), one row per
position up to original_max_position x factor, [cos_0..cos_31 | sin_0..sin_31] times the magnitude
scale mscale(factor, mscale) / mscale(factor, mscale_all_dim) (1.0 for both models), kept in the
activation dtype (fp32 when FlashInfer serves it). The kernel takes the cache and the positions.

q [T, H, 192]: the kernel gets the view q[..., 128:], as the serving stack passes it; k_pe [T, 1, 64]
is a view of the kv_a projection output [T, 512 + 64] (token stride 576).
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from sdk.conformance.spec import Case, KernelSpec, Tolerance, register


# ------------------------------------------------------------------------------ host: YaRN cache
def _yarn_mscale(factor: float, mscale: float) -> float:
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def yarn_inv_freq(rot_dim: int, theta: float, factor: float, original_max_pos: int, beta_fast: float,
                  beta_slow: float) -> torch.Tensor:
    """YaRN inverse frequencies [rot_dim / 2] (float64): frequencies that turn more than beta_fast
    times over the original context keep their value, those under beta_slow are divided by
    `factor`, a linear ramp over the dims in between (the bounds floored / ceiled)."""
    def dim_of(rotations: float) -> float:  # the dim whose wavelength fits `rotations` times
        return rot_dim * math.log(original_max_pos / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low = max(math.floor(dim_of(beta_fast)), 0)
    high = min(math.ceil(dim_of(beta_slow)), rot_dim - 1)
    if low == high:
        high += 0.001
    base = theta ** (torch.arange(0, rot_dim, 2, dtype=torch.float64) / rot_dim)
    ramp = ((torch.arange(rot_dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0.0, 1.0)
    extrapolate = 1.0 - ramp                                   # 1: keep the original frequency
    return (1.0 / base) * extrapolate + (1.0 / (factor * base)) * (1.0 - extrapolate)


def deepseek_yarn_cos_sin_cache(rot_dim: int, theta: float, factor: float, original_max_pos: int,
                                beta_fast: float, beta_slow: float, mscale: float, mscale_all_dim: float,
                                max_pos: int | None = None) -> torch.Tensor:
    """[max_pos, rot_dim] float32: rows [cos | sin] of position x inverse frequency, times the
    magnitude scale; max_pos defaults to original_max_pos x factor (the serving stack's length)."""
    inv = yarn_inv_freq(rot_dim, theta, factor, original_max_pos, beta_fast, beta_slow).float()
    n = int(original_max_pos * factor) if max_pos is None else max_pos
    angles = torch.arange(n, dtype=torch.float32)[:, None] * inv[None, :]
    scale = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim)
    return torch.cat([angles.cos() * scale, angles.sin() * scale], dim=-1)


# ------------------------------------------------------------------------------------- kernel
@triton.jit
def _rotate_interleaved(base, token, stride_t, stride_h, head0, n_heads, cos, sin,
                        HALF: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_R: tl.constexpr):
    heads = head0 + tl.arange(0, BLOCK_H)
    r = tl.arange(0, BLOCK_R)
    mask = (heads[:, None] < n_heads) & (r[None, :] < HALF)
    even = base + token * stride_t + heads[:, None].to(tl.int64) * stride_h + 2 * r[None, :]
    x0 = tl.load(even, mask=mask, other=0.0).to(tl.float32)
    x1 = tl.load(even + 1, mask=mask, other=0.0).to(tl.float32)
    tl.store(even, (x0 * cos[None, :] - x1 * sin[None, :]).to(base.dtype.element_ty), mask=mask)
    tl.store(even + 1, (x1 * cos[None, :] + x0 * sin[None, :]).to(base.dtype.element_ty), mask=mask)


@triton.jit
def _rope_gptj_kernel(q_ptr, k_ptr, pos_ptr, cache_ptr, stride_qt, stride_qh, stride_kt, stride_kh,
                      stride_cache, n_q_heads, n_k_heads, HALF: tl.constexpr, BLOCK_R: tl.constexpr,
                      BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    hb = tl.program_id(1)
    pos = tl.load(pos_ptr + token).to(tl.int64)
    r = tl.arange(0, BLOCK_R)
    rmask = r < HALF
    cos = tl.load(cache_ptr + pos * stride_cache + r, mask=rmask, other=0.0).to(tl.float32)
    sin = tl.load(cache_ptr + pos * stride_cache + HALF + r, mask=rmask, other=0.0).to(tl.float32)
    _rotate_interleaved(q_ptr, token, stride_qt, stride_qh, hb * BLOCK_HQ, n_q_heads, cos, sin,
                        HALF, BLOCK_HQ, BLOCK_R)
    if hb == 0:  # the first head block also turns the (shared) key heads
        _rotate_interleaved(k_ptr, token, stride_kt, stride_kh, 0, n_k_heads, cos, sin, HALF, BLOCK_HK, BLOCK_R)


def rope_gptj(positions: torch.Tensor, q_rot: torch.Tensor, k_rot: torch.Tensor, cos_sin_cache: torch.Tensor,
              block_hq: int = 32) -> None:
    """Rotate q_rot [T, Hq, rot] and k_rot [T, Hk, rot] in place (views with unit stride over the rotary
    dims) by the cache rows of `positions` [T]."""
    T, hq, rot = q_rot.shape
    hk = k_rot.shape[1]
    if q_rot.stride(2) != 1 or k_rot.stride(2) != 1 or cos_sin_cache.shape[1] != rot:
        raise ValueError("q / k rotary dims need unit stride and the cache's width")
    half = rot // 2
    bhq = min(block_hq, triton.next_power_of_2(hq))
    _rope_gptj_kernel[(T, triton.cdiv(hq, bhq))](
        q_rot, k_rot, positions, cos_sin_cache, q_rot.stride(0), q_rot.stride(1), k_rot.stride(0),
        k_rot.stride(1), cos_sin_cache.stride(0), hq, hk, HALF=half, BLOCK_R=triton.next_power_of_2(half),
        BLOCK_HQ=bhq, BLOCK_HK=triton.next_power_of_2(hk), num_warps=4 if bhq * half >= 512 else 2)


# ------------------------------------------------------------------------------------- spec
def _inputs(case, dtype, device, gen):
    p = case.params
    T, H, nope, rot = p["tokens"], p["heads"], p["nope"], p["rot"]
    y = p["yarn"]
    cache = deepseek_yarn_cos_sin_cache(rot, y["theta"], y["factor"], y["original"], y["beta_fast"],
                                        y["beta_slow"], y["mscale"], y["mscale_all_dim"], p.get("max_pos"))
    cache = cache if p.get("cache_fp32") else cache.to(dtype)
    positions = torch.randint(0, cache.shape[0], (T,), generator=gen, dtype=torch.int64)
    positions[: T // 4] = torch.arange(T // 4)                   # a prompt start among them
    kv_a = torch.randn((T, p["kv_lora"] + rot), generator=gen).to(dtype).to(device)
    return {"q": torch.randn((T, H, nope + rot), generator=gen).to(dtype).to(device),
            "k_pe": kv_a[:, p["kv_lora"]:].unsqueeze(1), "positions": positions.to(device),
            "cos_sin_cache": cache.to(device)}


def _run(inp, case):
    nope = case.params["nope"]
    rope_gptj(inp["positions"], inp["q"][..., nope:], inp["k_pe"], inp["cos_sin_cache"])


def _rotate_ref(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, H, rot] float64, cos / sin [T, rot / 2]: adjacent pairs turned by their frequency."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.stack([x0 * c - x1 * s, x1 * c + x0 * s], dim=-1).flatten(-2)


def _reference(inp, case):
    nope = case.params["nope"]
    rows = inp["cos_sin_cache"].double()[inp["positions"].long()]
    half = rows.shape[1] // 2
    cos, sin = rows[:, :half], rows[:, half:]
    q = inp["q"].double().clone()
    q[..., nope:] = _rotate_ref(q[..., nope:], cos, sin)
    return {"q": q, "k_pe": _rotate_ref(inp["k_pe"].double(), cos, sin)}


# DeepSeek-V3 (sdk/models/configs/deepseek_v3.json) and Kimi-K2-Instruct (its published config.json)
_DSV3_YARN = dict(theta=10000.0, factor=40.0, original=4096, beta_fast=32.0, beta_slow=1.0, mscale=1.0,
                  mscale_all_dim=1.0)
_KIMI_YARN = dict(theta=50000.0, factor=32.0, original=4096, beta_fast=1.0, beta_slow=1.0, mscale=1.0,
                  mscale_all_dim=1.0)
_MLA = {"nope": 128, "rot": 64, "kv_lora": 512}
_DSV3 = ("DeepSeek-V3 (sdk/models/configs/deepseek_v3.json): 128 heads, qk_nope 128 + qk_rope 64, YaRN factor 40, "
         "original 4096, beta_fast 32, beta_slow 1, mscale = mscale_all_dim = 1, rope_theta 1e4")
_KIMI = ("Kimi-K2-Instruct (config.json): 64 heads, qk_nope 128 + qk_rope 64, YaRN factor 32, original 4096, "
         "beta_fast 1, beta_slow 1, mscale = mscale_all_dim = 1, rope_theta 5e4")
register(KernelSpec(
    name="rope_gptj_yarn", group="rope", models=("deepseek_v3", "kimi_k2"),
    cases=(
        Case("odd_T37_H5_rot40", {"tokens": 37, "heads": 5, "nope": 24, "rot": 40, "kv_lora": 48,
                                  "yarn": _DSV3_YARN, "max_pos": 8192},
             source="odd sizes: 20 frequency pairs (masked), 5 heads, DeepSeek-V3's YaRN parameters"),
        Case("dsv3_tp8_T16_H16", {"tokens": 16, "heads": 16, **_MLA, "yarn": _DSV3_YARN, "max_pos": 16384},
             source=_DSV3 + "; 16 heads per GPU at TP 8, cache rows cut to 16384"),
        Case("kimi_k2_tp8_T16_H8_cache_fp32", {"tokens": 16, "heads": 8, **_MLA, "yarn": _KIMI_YARN,
                                               "max_pos": 16384, "cache_fp32": True},
             source=_KIMI + "; 8 heads per GPU at TP 8, an fp32 cache (as FlashInfer keeps it)"),
        Case("dsv3_T8192_H128", {"tokens": 8192, "heads": 128, **_MLA, "yarn": _DSV3_YARN}, quick=False,
             source=_DSV3 + "; 8192-token prefill, the full 163840-row cache"),
        Case("kimi_k2_T8192_H64", {"tokens": 8192, "heads": 64, **_MLA, "yarn": _KIMI_YARN}, quick=False,
             source=_KIMI + "; 8192-token prefill, the full 131072-row cache"),
    ),
    dtypes=("bf16", "fp32"),
    make_inputs=_inputs, run=_run, reference=_reference,
    outputs=("q", "k_pe"), inplace=("q", "k_pe"),
    tolerance={"bf16": Tolerance(atol=1e-2, rtol=1.6e-2), "fp32": Tolerance(atol=1e-5, rtol=1.3e-5)},
    description="interleaved (GPT-J) rotary on the last 64 dims of every q head and on the shared k_pe, in "
                "place, by a YaRN cos/sin cache gathered per position; the nope dims stay untouched",
    triton_kernels=(_rope_gptj_kernel,),
    upstream="Inductor-generated in vLLM (DeepseekScalingRotaryEmbedding.forward_native in "
             "model_executor/layers/rotary_embedding/deepseek_scaling_rope.py, is_neox_style=False: rotate_gptj, "
             "under torch.compile with custom ops off); with custom ops on, FlashInfer's "
             "apply_rope_with_cos_sin_cache_inplace on CUDA (ROCm runs forward_native); no hand-written Triton",
))
