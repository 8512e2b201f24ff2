"""Writing a step's new keys and values into the paged KV cache by slot mapping.

key, value [T, Hkv, D] are views of the fused qkv projection (token stride (Hq + 2 Hkv) * D);
slot_mapping [T] (int64) gives each token's cache slot = page * block_size + offset, -1 for a token
that writes nothing (padding of a captured batch). Caches [num_blocks, block_size, Hkv, D] (NHD).
With an fp8 (e4m3) cache the values are divided by a per-tensor scale (k_scale, v_scale: one fp32
each) with a correctly rounded division and rounded to nearest-even into e4m3, so the write is
bit-exact against the same arithmetic in PyTorch. Every slot the mapping does not name keeps its
previous contents. Triton converts to e4m3 (fp8e4nv) only where the target has it (on NVIDIA from
sm_89); elsewhere the kernel rounds to e4m3 with integer operations and stores the bytes, the same
bits (saturated at +-448 as the native conversion is), the software path serving stacks take on
Ampere.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sdk.conformance.kernels.quant_fp8 import _f32_to_e4m3_bits, native_fp8
from sdk.conformance.spec import Case, KernelSpec, Tolerance, register

_EXACT = Tolerance(exact=True)
_UPSTREAM = "vllm: v1/attention/ops/triton_reshape_and_cache_flash.py reshape_and_cache_kernel_flash"


@triton.jit
def reshape_and_cache_flash_kernel(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale,
                                   stride_kt, stride_kh, stride_vt, stride_vh, stride_cb, stride_cp,
                                   stride_ch, stride_vcb, stride_vcp, stride_vch,
                                   D: tl.constexpr, N: tl.constexpr, PAGE: tl.constexpr,
                                   FP8: tl.constexpr, TILE: tl.constexpr, FP8_BITS: tl.constexpr = False):
    """Program (t, i): elements i*TILE ... of token t's Hkv x D values (N = Hkv * D)."""
    t = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping + t).to(tl.int64)
    if slot < 0:
        return
    page = slot // PAGE
    pos = slot % PAGE
    offs = tl.program_id(1) * TILE + tl.arange(0, TILE)
    ok = offs < N
    h = offs // D
    d = offs % D
    k = tl.load(key + t * stride_kt + h * stride_kh + d, mask=ok)
    v = tl.load(value + t * stride_vt + h * stride_vh + d, mask=ok)
    if FP8:
        k = tl.math.div_rn(k.to(tl.float32), tl.load(k_scale))
        v = tl.math.div_rn(v.to(tl.float32), tl.load(v_scale))
    if FP8_BITS:  # e4m3 cache viewed as bytes on a target without fp8e4nv
        k = _f32_to_e4m3_bits(tl.minimum(tl.maximum(k, -448.0), 448.0))
        v = _f32_to_e4m3_bits(tl.minimum(tl.maximum(v, -448.0), 448.0))
    tl.store(key_cache + page * stride_cb + pos * stride_cp + h * stride_ch + d,
             k.to(key_cache.dtype.element_ty), mask=ok)
    tl.store(value_cache + page * stride_vcb + pos * stride_vcp + h * stride_vch + d,
             v.to(value_cache.dtype.element_ty), mask=ok)


def reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping, k_scale=None,
                            v_scale=None, tile: int = 1024, emulate_fp8: bool = False) -> None:
    """The launch a serving stack makes once per attention layer and step."""
    T, HKV, D = key.shape
    PAGE = key_cache.shape[1]
    fp8 = key_cache.dtype in (torch.float8_e4m3fn, torch.float8_e5m2)
    N = HKV * D
    tile = min(tile, triton.next_power_of_2(N))
    fp8_bits = key_cache.dtype == torch.float8_e4m3fn and (emulate_fp8 or not native_fp8())
    if fp8_bits:
        key_cache, value_cache = key_cache.view(torch.uint8), value_cache.view(torch.uint8)
    reshape_and_cache_flash_kernel[(T, triton.cdiv(N, tile))](
        key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale,
        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        value_cache.stride(0), value_cache.stride(1), value_cache.stride(2),
        D=D, N=N, PAGE=PAGE, FP8=fp8, TILE=tile, FP8_BITS=fp8_bits, num_warps=4)


def _slots(T: int, num_blocks: int, page: int, pad_every: int, gen: torch.Generator) -> torch.Tensor:
    """Distinct slots scattered over the cache, with -1 for every `pad_every`-th token."""
    s = torch.randperm(num_blocks * page, generator=gen)[:T].to(torch.int64)
    if pad_every:
        s[pad_every - 1::pad_every] = -1
    return s


def _make(case, dtype, device, gen, cache_dtype=None):
    p = case.params
    T, HQ, HKV, D, PAGE, NB = p["tokens"], p["HQ"], p["HKV"], p["D"], p["page"], p["num_blocks"]
    qkv = (torch.randn((T, (HQ + 2 * HKV) * D), generator=gen) * 3.0).to(dtype).to(device)
    k = qkv[:, HQ * D:(HQ + HKV) * D].view(T, HKV, D)
    v = qkv[:, (HQ + HKV) * D:].view(T, HKV, D)
    cache_dtype = cache_dtype or dtype
    # caches hold earlier steps' values; every slot not written must keep them
    kc = torch.randn((NB, PAGE, HKV, D), generator=gen).to(cache_dtype).to(device)
    vc = torch.randn((NB, PAGE, HKV, D), generator=gen).to(cache_dtype).to(device)
    x = dict(qkv=qkv, key=k, value=v, key_cache=kc, value_cache=vc,
             slot_mapping=_slots(T, NB, PAGE, p.get("pad_every", 0), gen).to(device),
             k_scale=None, v_scale=None)
    if cache_dtype != dtype:
        # per-tensor scales as a calibration would set them: amax / 448 with headroom
        x["k_scale"] = (k.float().abs().amax() / 400.0).reshape(1).to(device)
        x["v_scale"] = (v.float().abs().amax() / 400.0).reshape(1).to(device)
    return x


def _make_fp8(case, dtype, device, gen):
    return _make(case, dtype, device, gen, cache_dtype=torch.float8_e4m3fn)


def _run(x, case, **config):
    reshape_and_cache_flash(x["key"], x["value"], x["key_cache"], x["value_cache"], x["slot_mapping"],
                            x["k_scale"], x["v_scale"], emulate_fp8=bool(case.params.get("emulate_fp8")),
                            **config)


def _ref(x, case):
    """Scatter by slot in PyTorch: fp32 division by the scale (IEEE), then the cast (round to
    nearest even) into the cache dtype."""
    out = {}
    keep = x["slot_mapping"] >= 0
    slots = x["slot_mapping"][keep]
    for name, src, scale in (("key_cache", x["key"], x["k_scale"]), ("value_cache", x["value"], x["v_scale"])):
        cache = x[name].clone()
        NB, PAGE, HKV, D = cache.shape
        vals = src[keep]
        if scale is not None:
            vals = vals.float() / scale
        flat = cache.view(NB * PAGE, HKV, D)
        flat[slots] = vals.to(cache.dtype)
        out[name] = cache
    return out


_CASES = (
    Case("llama_t37_h8x2_d128_p16", dict(tokens=37, HQ=8, HKV=2, D=128, page=16, num_blocks=7, pad_every=5),
         source="Llama-3.1-8B: 8 KV heads x 128 of 32 q heads, heads /4; block size 16; every 5th token "
                "padding (slot -1)"),
    Case("qwen3next_t21_h16x2_d256_p544", dict(tokens=21, HQ=16, HKV=2, D=256, page=544, num_blocks=2,
                                               pad_every=0), quick=False,
         source="Qwen3-Next-80B-A3B: 16 q / 2 KV heads x 256; block size 544 (hybrid page)"),
    Case("odd_t9_h5x3_d80_p24", dict(tokens=9, HQ=5, HKV=3, D=80, page=24, num_blocks=3, pad_every=4),
         source="odd sizes: 3 KV heads x 80 (a tile ends mid-head), block size 24"),
    Case("llama3_8b_t8192_p16", dict(tokens=8192, HQ=32, HKV=8, D=128, page=16, num_blocks=4096,
                                     pad_every=97), quick=False,
         source="Llama-3.1-8B: 32 q / 8 KV heads x 128, an 8192-token step into a 65536-slot cache"),
    Case("gptoss_t8192_h64x8_d64_p16", dict(tokens=8192, HQ=64, HKV=8, D=64, page=16, num_blocks=4096,
                                            pad_every=0), quick=False,
         source="gpt-oss-120b: 64 q / 8 KV heads x 64, an 8192-token step"),
    Case("qwen3next_t8192_p544", dict(tokens=8192, HQ=16, HKV=2, D=256, page=544, num_blocks=64,
                                      pad_every=0), quick=False,
         source="Qwen3-Next-80B-A3B: 2 KV heads x 256, block size 544, an 8192-token prefill"),
)
_FP8_CASES = _CASES + (
    Case("llama_t37_h8x2_d128_p16_emulated", dict(tokens=37, HQ=8, HKV=2, D=128, page=16, num_blocks=7,
                                                  pad_every=5, emulate_fp8=True),
         source="as llama_t37_h8x2_d128_p16, through the integer e4m3 rounding that targets without "
                "fp8e4nv (sm_80, sm_86) take, checked on every target"),
)
_MODELS = ("llama3_1", "mixtral", "qwen3_next", "qwen3_5", "gpt_oss", "glm4_5", "llama4", "gemma3", "nemotron_h",
           "granite4_h", "falcon_h1", "jamba", "minimax", "qwen2_5_vl")

register(KernelSpec(
    name="kv_cache_write", group="kv_cache", models=_MODELS, cases=_CASES,
    dtypes=("bf16", "fp32"), make_inputs=_make, run=_run, reference=_ref,
    outputs=("key_cache", "value_cache"), inplace=("key_cache", "value_cache"),
    tolerance={d: _EXACT for d in ("bf16", "fp32")},
    description="scatters a step's keys and values (strided views of the qkv projection) into the paged "
                "cache by slot mapping; slot -1 writes nothing; bit-exact",
    triton_kernels=(reshape_and_cache_flash_kernel,), upstream=_UPSTREAM))

register(KernelSpec(
    name="kv_cache_write_fp8", group="kv_cache", models=_MODELS, cases=_FP8_CASES,
    dtypes=("bf16", "fp16"), make_inputs=_make_fp8, run=_run, reference=_ref,
    outputs=("key_cache", "value_cache"), inplace=("key_cache", "value_cache"),
    tolerance={d: _EXACT for d in ("bf16", "fp16")},
    description="the same write into an fp8 e4m3 cache (kv_cache_dtype fp8): values divided by a "
                "per-tensor k / v scale, rounded to nearest even; bit-exact",
    triton_kernels=(reshape_and_cache_flash_kernel,), upstream=_UPSTREAM + " (FP8_KV_CACHE)"))
