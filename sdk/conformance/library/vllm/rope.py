"""vLLM's multimodal RoPE (mRoPE, interleaved sections)."""
from __future__ import annotations

import torch

from ...spec import Case, Tolerance
from .. import randn, store
from . import DTYPES, _kernel, vllm_call


# ===================================================================================== mRoPE
MROPE_SRC = ("Qwen3.5 (16 q / 2 kv heads x 256, rotary 64 = 0.25 x 256, mrope_section [11, 11, 10] "
             "interleaved)")


def _mrope_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    """Positions (3, T) as a multimodal prompt has them: text tokens share one position on t/h/w,
    an image's patches step h and w over a grid; cos/sin (3, T, rotary/2) from them."""
    p = case.params
    T, hq, hk, hd, rd = p["T"], p["hq"], p["hk"], p["head_dim"], p["rotary_dim"]
    text = torch.arange(T)
    pos = torch.stack([text, text, text])
    img = slice(5, 5 + 4 * 6)   # a 4 x 6 patch grid after 5 text tokens
    pos[0, img] = 5
    pos[1, img] = 5 + torch.arange(4).repeat_interleave(6)
    pos[2, img] = 5 + torch.arange(6).repeat(4)
    pos[:, img.stop:] -= img.stop - 5 - 6   # text resumes after the grid's largest position
    inv_freq = 1.0 / (p["theta"] ** (torch.arange(0, rd, 2, dtype=torch.float64) / rd))
    ang = pos[..., None].double() * inv_freq                         # (3, T, rd/2)
    x = {"q": randn(gen, T, hq * hd, dtype=dtype, device=device),
         "k": randn(gen, T, hk * hd, dtype=dtype, device=device),
         "cos": ang.cos().to(dtype).to(device), "sin": ang.sin().to(dtype).to(device)}
    x["q_out"], x["k_out"] = torch.empty_like(x["q"]), torch.empty_like(x["k"])
    return x


def _mrope_sections(case: Case) -> torch.Tensor:
    """Which of t/h/w (0/1/2) drives each of the rotary/2 frequencies (HF Qwen2-VL: consecutive
    sections; Qwen3-VL / Qwen3.5: interleaved t,h,w,t,h,w,... up to 3 x section, then t)."""
    t, h, w = case.params["section"]
    half = case.params["rotary_dim"] // 2
    which = torch.zeros(half, dtype=torch.long)
    if case.params["interleaved"]:
        i = torch.arange(half)
        which[(i % 3 == 1) & (i < 3 * h)] = 1
        which[(i % 3 == 2) & (i < 3 * w)] = 2
    else:
        which[t:t + h] = 1
        which[t + h:] = 2
    return which


def _mrope_reference(x: dict, case: Case) -> dict:
    p = case.params
    hd, rd = p["head_dim"], p["rotary_dim"]
    which = _mrope_sections(case)
    idx = torch.arange(rd // 2)
    cos = x["cos"].double()[which, :, idx].T                        # (T, rd/2)
    sin = x["sin"].double()[which, :, idx].T
    out = {}
    for name in ("q", "k"):
        v = x[name].double().view(x[name].shape[0], -1, hd).clone()
        a, b = v[..., : rd // 2].clone(), v[..., rd // 2: rd].clone()   # NeoX pairs (i, i + rd/2)
        v[..., : rd // 2] = a * cos[:, None] - b * sin[:, None]
        v[..., rd // 2: rd] = b * cos[:, None] + a * sin[:, None]
        out[name + "_out"] = v.view(x[name].shape)
    return out


def _mrope_run(x: dict, case: Case) -> None:
    from vllm.model_executor.layers.rotary_embedding.mrope import triton_mrope
    p = case.params
    q, k = triton_mrope(x["q"].clone(), x["k"].clone(), x["cos"], x["sin"], list(p["section"]),
                        p["head_dim"], p["rotary_dim"], p["interleaved"], True)
    store(x, q_out=q, k_out=k)


_kernel(
    name="lib_vllm_mrope", group="lib_vllm_rope", models=("qwen3_5",),
    description="vllm triton_mrope: multimodal RoPE over flattened q/k [tokens, heads x head_dim], "
                "each frequency driven by the t, h or w position (interleaved sections as Qwen3.5 / "
                "Qwen3-VL, consecutive as Qwen2.5-VL), partial rotary, NeoX pairs, positions of a "
                "prompt with an image grid.",
    upstream="vllm: model_executor/layers/rotary_embedding/mrope.py triton_mrope "
             "(_triton_mrope_forward)",
    cases=(Case("qwen3_5_interleaved", {"T": 45, "hq": 16, "hk": 2, "head_dim": 256, "rotary_dim": 64,
                                        "section": (11, 11, 10), "interleaved": True, "theta": 1e7},
                source=MROPE_SRC + "; 45 tokens: 5 text, a 4x6 image grid, 16 text"),
           Case("qwen2_5_vl_sections", {"T": 45, "hq": 4, "hk": 1, "head_dim": 128, "rotary_dim": 128,
                                        "section": (16, 24, 24), "interleaved": False, "theta": 1e6},
                source="Qwen2.5-VL (28 q / 4 kv heads x 128, mrope_section [16, 24, 24]); heads /7")),
    dtypes=DTYPES, make_inputs=_mrope_inputs, run=vllm_call(_mrope_run), reference=_mrope_reference,
    outputs=("q_out", "k_out"),
    tolerance={"bf16": Tolerance(atol=1e-2, rtol=1.6e-2), "fp32": Tolerance(atol=1e-5, rtol=1.3e-5)})
