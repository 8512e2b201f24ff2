"""Rotary position embedding, NeoX style (rotate halves), in place on q and k.

The same kernel covers full rotary (rot_dim == head_dim: Llama-3.1, Mixtral; their frequency
scaling lives in the cache contents, not in the kernel).

`rope_neox_partial`: Qwen3-Next full-attention layers rotate only the first 64 of 256 head dims
(partial_rotary_factor 0.25), theta 1e7. The cos/sin cache is laid out as serving stacks keep it:
[max_position, rot_dim], first half cos, second half sin, in the activation dtype.

`mrope`: multimodal RoPE; every token carries three positions (temporal, height, width) and each
rotary frequency takes its angle from one of them. Two assignments are covered:
  contiguous  (Qwen2.5-VL): mrope_section [16, 24, 24] at head_dim 128 -- frequencies 0..15 use T,
              16..39 use H, 40..63 use W.
  interleaved (Qwen3.5, `mrope_interleaved`): mrope_section [11, 11, 10] over the 32 frequencies of
              the 64-dim partial rotary at head_dim 256 -- frequency i uses H when i % 3 == 1 and
              i < 3 * 11, W when i % 3 == 2 and i < 3 * 10, T otherwise (round-robin T, H, W).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sdk.conformance.spec import Case, KernelSpec, Tolerance, register

_TOL = {"bf16": Tolerance(atol=1e-2, rtol=1.6e-2), "fp32": Tolerance(atol=1e-5, rtol=1.3e-5)}
_MODELS = ("qwen3_5", "qwen3_next")


def _cos_sin_cache(max_pos: int, rot_dim: int, theta: float) -> torch.Tensor:
    inv_freq = 1.0 / (theta ** (torch.arange(0, rot_dim, 2, dtype=torch.float64) / rot_dim))
    angles = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cat([angles.cos(), angles.sin()], dim=-1)


def _rotate_ref(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rot_dim: int) -> torch.Tensor:
    """x [T, H, D] float64; cos/sin [T, rot_dim/2] float64 -> x with its first rot_dim dims rotated."""
    half = rot_dim // 2
    out = x.clone()
    x1, x2 = x[..., :half], x[..., half:rot_dim]
    c, s = cos[:, None, :], sin[:, None, :]
    out[..., :half] = x1 * c - x2 * s
    out[..., half:rot_dim] = x2 * c + x1 * s
    return out


def _qk(p, gen, dtype, device):
    T, D = p["tokens"], p["head_dim"]
    q = torch.randn((T, p["q_heads"], D), generator=gen).to(dtype).to(device)
    k = torch.randn((T, p["kv_heads"], D), generator=gen).to(dtype).to(device)
    return q, k


@triton.jit
def _rotate_heads(base_ptr, token, stride_t, stride_h, n_heads, cos, sin,
                  HALF: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_R: tl.constexpr):
    heads = tl.arange(0, BLOCK_H)
    r = tl.arange(0, BLOCK_R)
    mask = (heads[:, None] < n_heads) & (r[None, :] < HALF)
    p1 = base_ptr + token * stride_t + heads[:, None] * stride_h + r[None, :]
    x1 = tl.load(p1, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(p1 + HALF, mask=mask, other=0.0).to(tl.float32)
    o1 = x1 * cos[None, :] - x2 * sin[None, :]
    o2 = x2 * cos[None, :] + x1 * sin[None, :]
    tl.store(p1, o1.to(base_ptr.dtype.element_ty), mask=mask)
    tl.store(p1 + HALF, o2.to(base_ptr.dtype.element_ty), mask=mask)


# ------------------------------------------------------------------------------ rope_neox_partial
@triton.jit
def _rope_neox_kernel(q_ptr, k_ptr, pos_ptr, cache_ptr, stride_qt, stride_qh, stride_kt, stride_kh,
                      stride_cache, n_q_heads, n_kv_heads,
                      HALF: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_HQ: tl.constexpr,
                      BLOCK_HK: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + token).to(tl.int64)
    r = tl.arange(0, BLOCK_R)
    rmask = r < HALF
    cos = tl.load(cache_ptr + pos * stride_cache + r, mask=rmask, other=0.0).to(tl.float32)
    sin = tl.load(cache_ptr + pos * stride_cache + HALF + r, mask=rmask, other=0.0).to(tl.float32)
    _rotate_heads(q_ptr, token, stride_qt, stride_qh, n_q_heads, cos, sin, HALF, BLOCK_HQ, BLOCK_R)
    _rotate_heads(k_ptr, token, stride_kt, stride_kh, n_kv_heads, cos, sin, HALF, BLOCK_HK, BLOCK_R)


def _neox_inputs(case, dtype, device, gen):
    p = case.params
    q, k = _qk(p, gen, dtype, device)
    cache = _cos_sin_cache(p["max_pos"], p["rot_dim"], p["theta"]).to(dtype).to(device)
    positions = torch.randint(0, p["max_pos"], (p["tokens"],), generator=gen, dtype=torch.int64).to(device)
    return {"q": q, "k": k, "positions": positions, "cos_sin_cache": cache}


def _neox_run(inp, case, num_warps=2):
    q, k, cache = inp["q"], inp["k"], inp["cos_sin_cache"]
    half = cache.shape[1] // 2
    T, hq, _ = q.shape
    hk = k.shape[1]
    _rope_neox_kernel[(T,)](q, k, inp["positions"], cache, q.stride(0), q.stride(1), k.stride(0),
                            k.stride(1), cache.stride(0), hq, hk, HALF=half,
                            BLOCK_R=triton.next_power_of_2(half), BLOCK_HQ=triton.next_power_of_2(hq),
                            BLOCK_HK=triton.next_power_of_2(hk), num_warps=num_warps)


def _neox_ref(inp, case):
    cache = inp["cos_sin_cache"].double()
    half = cache.shape[1] // 2
    rows = cache[inp["positions"].long()]
    cos, sin = rows[:, :half], rows[:, half:]
    rot = cache.shape[1]
    return {"q": _rotate_ref(inp["q"].double(), cos, sin, rot), "k": _rotate_ref(inp["k"].double(), cos, sin, rot)}


_QN = {"head_dim": 256, "rot_dim": 64, "theta": 1.0e7}
register(KernelSpec(
    name="rope_neox_partial", group="rope",
    models=_MODELS + ("llama3_1", "mixtral", "gpt_oss", "glm4_5", "llama4", "gemma3", "falcon_h1", "minimax"),
    cases=(
        Case("odd_T37_q5_kv1_D96_rot40", {"tokens": 37, "q_heads": 5, "kv_heads": 1, "head_dim": 96,
                                          "rot_dim": 40, "theta": 1.0e4, "max_pos": 4096},
             source="odd sizes: head counts and rotary half not powers of two"),
        Case("qwen3_next_T16_q4_kv2", {"tokens": 16, "q_heads": 4, "kv_heads": 2, "max_pos": 32768, **_QN},
             source="Qwen3-Next head_dim 256, partial_rotary_factor 0.25, heads scaled /4"),
        Case("llama3_1_T16_q8_kv2_full", {"tokens": 16, "q_heads": 8, "kv_heads": 2, "head_dim": 128,
                                          "rot_dim": 128, "theta": 5.0e5, "max_pos": 8192},
             source="Llama-3.1 / Mixtral style full rotary at head_dim 128 (rot_dim == head_dim), heads /4"),
        Case("qwen3_next_T8192_q16_kv2", {"tokens": 8192, "q_heads": 16, "kv_heads": 2, "max_pos": 262144,
                                           **_QN}, quick=False,
             source="Qwen3-Next-80B-A3B: 16 q / 2 kv heads x 256, rotary dim 64, 8192-token prefill"),
    ),
    dtypes=("bf16", "fp32"),
    make_inputs=_neox_inputs, run=_neox_run, reference=_neox_ref,
    outputs=("q", "k"), inplace=("q", "k"), tolerance=_TOL,
    description="NeoX rotary on the first rot_dim dims of q and k in place, cos/sin cache gathered by position",
    triton_kernels=(_rope_neox_kernel,),
    upstream="Inductor-generated in vLLM (RotaryEmbedding.forward_native in "
             "model_executor/layers/rotary_embedding/base.py under torch.compile, custom ops off); with custom "
             "ops on, the C++ op _C.rotary_embedding (or FlashInfer's); no hand-written Triton",
))


# ------------------------------------------------------------------------------------------ mrope
@triton.jit
def _mrope_kernel(q_ptr, k_ptr, pos_ptr, cache_ptr, stride_qt, stride_qh, stride_kt, stride_kh,
                  stride_pos, stride_cache, n_q_heads, n_kv_heads,
                  SEC_T: tl.constexpr, SEC_H: tl.constexpr, SEC_W: tl.constexpr,
                  INTERLEAVED: tl.constexpr, HALF: tl.constexpr, BLOCK_R: tl.constexpr,
                  BLOCK_HQ: tl.constexpr, BLOCK_HK: tl.constexpr):
    token = tl.program_id(0).to(tl.int64)
    pos_t = tl.load(pos_ptr + token).to(tl.int64)
    pos_h = tl.load(pos_ptr + stride_pos + token).to(tl.int64)
    pos_w = tl.load(pos_ptr + 2 * stride_pos + token).to(tl.int64)
    r = tl.arange(0, BLOCK_R)
    rmask = r < HALF
    if INTERLEAVED:
        use_h = (r % 3 == 1) & (r < 3 * SEC_H)
        use_w = (r % 3 == 2) & (r < 3 * SEC_W)
    else:
        use_h = (r >= SEC_T) & (r < SEC_T + SEC_H)
        use_w = r >= SEC_T + SEC_H
    pos = tl.where(use_h, pos_h, tl.where(use_w, pos_w, pos_t))
    row = cache_ptr + pos * stride_cache
    cos = tl.load(row + r, mask=rmask, other=0.0).to(tl.float32)
    sin = tl.load(row + HALF + r, mask=rmask, other=0.0).to(tl.float32)
    _rotate_heads(q_ptr, token, stride_qt, stride_qh, n_q_heads, cos, sin, HALF, BLOCK_HQ, BLOCK_R)
    _rotate_heads(k_ptr, token, stride_kt, stride_kh, n_kv_heads, cos, sin, HALF, BLOCK_HK, BLOCK_R)


def _mrope_inputs(case, dtype, device, gen):
    p = case.params
    q, k = _qk(p, gen, dtype, device)
    cache = _cos_sin_cache(p["max_pos"], p["rot_dim"], p["theta"]).to(dtype).to(device)
    T = p["tokens"]
    # a text prefix (all three positions equal) followed by an image grid (t fixed, h and w vary)
    text = T // 3
    pos = torch.empty((3, T), dtype=torch.int64)
    start = int(torch.randint(0, p["max_pos"] // 2, (1,), generator=gen))
    pos[:, :text] = torch.arange(start, start + text)
    width = 8
    img = torch.arange(T - text)
    pos[0, text:] = start + text
    pos[1, text:] = start + text + img // width
    pos[2, text:] = start + text + img % width
    return {"q": q, "k": k, "positions": pos.to(device), "cos_sin_cache": cache}


def _mrope_run(inp, case):
    q, k, cache, pos = inp["q"], inp["k"], inp["cos_sin_cache"], inp["positions"]
    sec = case.params["mrope_section"]
    half = cache.shape[1] // 2
    T, hq, _ = q.shape
    hk = k.shape[1]
    _mrope_kernel[(T,)](q, k, pos, cache, q.stride(0), q.stride(1), k.stride(0), k.stride(1),
                        pos.stride(0), cache.stride(0), hq, hk, SEC_T=sec[0], SEC_H=sec[1], SEC_W=sec[2],
                        INTERLEAVED=bool(case.params["interleaved"]), HALF=half,
                        BLOCK_R=triton.next_power_of_2(half), BLOCK_HQ=triton.next_power_of_2(hq),
                        BLOCK_HK=triton.next_power_of_2(hk), num_warps=2)


def _mrope_axis(half: int, section, interleaved: bool) -> list[int]:
    """Which position row (0=T, 1=H, 2=W) each rotary frequency uses."""
    if interleaved:
        axis = [0] * half
        for dim in (1, 2):
            for i in range(dim, 3 * section[dim], 3):
                axis[i] = dim
        return axis
    return [0] * section[0] + [1] * section[1] + [2] * section[2]


def _mrope_ref(inp, case):
    cache = inp["cos_sin_cache"].double()
    half = cache.shape[1] // 2
    axis = torch.tensor(_mrope_axis(half, case.params["mrope_section"], case.params["interleaved"]))
    pos = inp["positions"].long().cpu()                      # [3, T]
    per_freq = pos[axis]                                     # [half, T]: the position each frequency uses
    freq = torch.arange(half)
    cos = cache.cpu()[per_freq, freq[:, None]].T             # [T, half]
    sin = cache.cpu()[per_freq, half + freq[:, None]].T
    rot = cache.shape[1]
    return {"q": _rotate_ref(inp["q"].double().cpu(), cos, sin, rot),
            "k": _rotate_ref(inp["k"].double().cpu(), cos, sin, rot)}


_VL = {"head_dim": 128, "rot_dim": 128, "theta": 1.0e6, "mrope_section": (16, 24, 24), "interleaved": False}
_Q35 = {"head_dim": 256, "rot_dim": 64, "theta": 1.0e7, "mrope_section": (11, 11, 10), "interleaved": True}
register(KernelSpec(
    name="mrope", group="rope", models=("qwen3_5", "qwen2_5_vl"),
    cases=(
        Case("odd_T37_contiguous", {"tokens": 37, "q_heads": 3, "kv_heads": 1, "head_dim": 80, "rot_dim": 40,
                                    "theta": 1.0e4, "max_pos": 2048, "mrope_section": (6, 7, 7),
                                    "interleaved": False},
             source="odd sizes: 20 frequencies, 3 heads"),
        Case("qwen2_5_vl_T16_contiguous", {"tokens": 16, "q_heads": 4, "kv_heads": 1, "max_pos": 8192, **_VL},
             source="Qwen2.5-VL mrope_section [16, 24, 24] at head_dim 128, heads scaled down"),
        Case("qwen3_5_T37_interleaved", {"tokens": 37, "q_heads": 4, "kv_heads": 2, "max_pos": 8192, **_Q35},
             source="Qwen3.5 interleaved mrope_section [11, 11, 10], partial rotary 64 of 256, heads /4"),
        Case("qwen2_5_vl_T8192_contiguous", {"tokens": 8192, "q_heads": 28, "kv_heads": 4, "max_pos": 131072,
                                              **_VL}, quick=False,
             source="Qwen2.5-VL-7B: 28 q / 4 kv heads x 128, 8192 tokens"),
        Case("qwen3_5_T8192_interleaved", {"tokens": 8192, "q_heads": 16, "kv_heads": 2, "max_pos": 262144,
                                           **_Q35}, quick=False,
             source="Qwen3.5 hybrid attention layer (Qwen3-Next dims): 16 q / 2 kv heads x 256, 8192 tokens"),
    ),
    dtypes=("bf16", "fp32"),
    make_inputs=_mrope_inputs, run=_mrope_run, reference=_mrope_ref,
    outputs=("q", "k"), inplace=("q", "k"), tolerance=_TOL,
    description="multimodal RoPE: each frequency takes its angle from the T, H or W position (sectioned or interleaved)",
    triton_kernels=(_mrope_kernel,),
    upstream="vllm: model_executor/layers/rotary_embedding/mrope.py triton_mrope (_triton_mrope_forward), "
             "MRotaryEmbedding.forward_cuda for (T, H, W) positions",
))
