"""vLLM's fp8 paths: per-token group quantisation, the block-scaled GEMM and fused MoE over
fp8 block-quantised experts."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ...spec import Case, Tolerance
from .. import randn, store
from . import DTYPES, _kernel, vllm_call
from .moe import _moe_case, _route


# ============================================================================== FP8 (block)
FP8_SRC = "DeepSeek-V3 fp8 linear layers (e4m3 weights in 128x128 blocks, activations per 1x128 group)"
E4M3_MAX = 448.0


def _group_quant(x: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row and group of `group` columns: scale = max(|x|, 1e-10) / 448, q = x / scale in
    e4m3 (round to nearest, clamped to +-448)."""
    g = x.float().reshape(*x.shape[:-1], -1, group)
    scale = g.abs().amax(-1).clamp(min=1e-10) * (1.0 / E4M3_MAX)
    q = (g / scale[..., None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q.reshape(x.shape), scale


def _quant_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    p = case.params
    x = {"x": randn(gen, p["M"], p["K"], dtype=dtype, device=device, scale=2.0)}
    x["x"][0, :128] *= 50   # one group with an outlier-sized range
    x["q"] = torch.empty(p["M"], p["K"], dtype=torch.float8_e4m3fn, device=device)
    x["scale"] = torch.empty(p["M"], p["K"] // 128, dtype=torch.float32, device=device)
    return x


def _quant_reference(x: dict, case: Case) -> dict:
    q, s = _group_quant(x["x"], 128)
    return {"q": q.float(), "scale": s}


def _quant_run(x: dict, case: Case) -> None:
    from vllm.model_executor.layers.quantization.utils.fp8_utils import per_token_group_quant_fp8
    q, s = per_token_group_quant_fp8(x["x"], 128, use_ue8m0=False)
    store(x, q=q, scale=s)


_kernel(
    name="lib_vllm_fp8_group_quant", group="lib_vllm_quant", models=("deepseek_v3",),
    description="vllm per_token_group_quant_fp8 (the Triton fallback every non-CUDA platform runs): "
                "per token and 128-wide group, scale = amax / 448 and e4m3 values.",
    upstream="vllm: model_executor/layers/quantization/utils/fp8_utils.py per_token_group_quant_fp8 "
             "(_per_token_group_quant_fp8)",
    cases=(Case("M33_K1024", {"M": 33, "K": 1024}, source=FP8_SRC + "; 33 tokens, hidden /7"),
           Case("M256_K7168", {"M": 256, "K": 7168}, quick=False, source=FP8_SRC)),
    dtypes=DTYPES, make_inputs=_quant_inputs, run=vllm_call(_quant_run), reference=_quant_reference,
    outputs=("q", "scale"),
    # e4m3 has 3 mantissa bits: a value on a rounding boundary may land one step (1/8) away
    tolerance={"bf16": Tolerance(atol=0.0, rtol=0.125), "fp32": Tolerance(atol=0.0, rtol=0.125)},
    output_tolerance={"scale": Tolerance(atol=0.0, rtol=1e-6)})


def _bmm_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    p = case.params
    M, N, K = p["M"], p["N"], p["K"]
    a, a_s = _group_quant(randn(gen, M, K, dtype=torch.float32, device="cpu"), 128)
    w = randn(gen, N, K, dtype=torch.float32, device="cpu", scale=K ** -0.5)
    blocks = w.reshape(N // 128, 128, K // 128, 128)
    w_s = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-10) / E4M3_MAX
    wq = (blocks / w_s[:, None, :, None]).to(torch.float8_e4m3fn).reshape(N, K)
    x = {"A": a.to(device), "As": a_s.to(device), "B": wq.to(device), "Bs": w_s.to(device)}
    x["out"] = torch.empty(M, N, dtype=dtype, device=device)
    return x


def _bmm_reference(x: dict, case: Case) -> dict:
    """out[m, n] = sum over 128-wide k blocks of (A . B) x As[m, kb] x Bs[n // 128, kb], fp64."""
    a = x["A"].double() * x["As"].double().repeat_interleave(128, dim=1)
    b = x["B"].double() * x["Bs"].double().repeat_interleave(128, 0).repeat_interleave(128, 1)
    return {"out": a @ b.T}


def _bmm_run(x: dict, case: Case) -> None:
    from vllm.model_executor.layers.quantization.utils.fp8_utils import w8a8_triton_block_scaled_mm
    store(x, out=w8a8_triton_block_scaled_mm(x["A"], x["B"], x["As"], x["Bs"], [128, 128],
                                              output_dtype=x["out"].dtype))


_kernel(
    name="lib_vllm_fp8_block_mm", group="lib_vllm_quant", models=("deepseek_v3",),
    description="vllm w8a8_triton_block_scaled_mm: e4m3 activations (per token, 128-wide groups) "
                "times e4m3 weights (128x128 blocks), scales applied per k block, fp32 accumulation.",
    upstream="vllm: model_executor/layers/quantization/utils/fp8_utils.py w8a8_triton_block_scaled_mm "
             "(_w8a8_triton_block_scaled_mm)",
    cases=(Case("M33_N384_K512", {"M": 33, "N": 384, "K": 512}, source=FP8_SRC + "; scaled /14"),
           Case("M64_N2048_K7168", {"M": 64, "N": 2048, "K": 7168}, quick=False,
                source=FP8_SRC + "; a q_a_proj-sized GEMM (7168 -> 1536 rounded to blocks)")),
    dtypes=("bf16",), make_inputs=_bmm_inputs, run=vllm_call(_bmm_run), reference=_bmm_reference,
    outputs=("out",), tolerance={"bf16": Tolerance(rmse=1e-2)})


def _moe_fp8_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    """bf16 tokens; e4m3 expert weights quantized in 128x128 blocks with their scales."""
    p = case.params
    M, H, N, E = p["M"], p["H"], p["N"], p["E"]

    def blockwise(rows: int, cols: int, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        q = torch.empty(E, rows, cols, dtype=torch.float8_e4m3fn)
        s = torch.empty(E, rows // 128, cols // 128)
        for e in range(E):  # one expert at a time: full-size weights are GBs
            blocks = randn(gen, rows, cols, dtype=torch.float32, device="cpu", scale=scale).reshape(
                rows // 128, 128, cols // 128, 128)
            s[e] = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-10) / E4M3_MAX
            q[e] = (blocks / s[e][:, None, :, None]).to(torch.float8_e4m3fn).reshape(rows, cols)
        return q, s

    w1, s1 = blockwise(2 * N, H, H ** -0.5)
    w2, s2 = blockwise(H, N, N ** -0.5)
    x = {"x": randn(gen, M, H, dtype=dtype, device=device),
         "w1": w1.to(device), "w1_scale": s1.to(device), "w2": w2.to(device), "w2_scale": s2.to(device),
         "logits": randn(gen, M, E, dtype=torch.float32, device=device)}
    x["out"] = torch.empty_like(x["x"])
    return x


def _moe_fp8_reference(x: dict, case: Case) -> dict:
    """As _moe_reference with the fp8 contract of vLLM's block-quantized experts: weights are their
    blocks times the block scales; both GEMM inputs (tokens, then the SwiGLU output) are quantized
    per token and 128-wide group (_group_quant) before their GEMM, the SwiGLU input and output
    being held in the activation dtype in between (vLLM's intermediate caches)."""
    p = case.params
    N = p["N"]
    w, ids = _route(x["logits"], p["topk"], p["renormalize"])

    def deq(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:  # one expert's weight
        return q.double() * s.double().repeat_interleave(128, 0).repeat_interleave(128, 1)

    xq, xs = _group_quant(x["x"], 128)
    xd = xq.double() * xs.double().repeat_interleave(128, -1)
    dtype = x["x"].dtype  # vLLM's intermediate caches hold the activation dtype
    out = torch.zeros(x["x"].shape, dtype=torch.float64)
    for e in ids.unique().tolist():
        tok, slot = (ids == e).nonzero(as_tuple=True)
        h = (xd[tok] @ deq(x["w1"][e], x["w1_scale"][e]).T).to(dtype).double()
        aq, a_s = _group_quant((F.silu(h[:, :N]) * h[:, N:]).to(dtype), 128)
        a = aq.double() * a_s.double().repeat_interleave(128, -1)
        out.index_add_(0, tok, (a @ deq(x["w2"][e], x["w2_scale"][e]).T) * w[tok, slot][:, None])
    return {"out": out}


def _moe_fp8_run(x: dict, case: Case) -> None:
    from vllm.model_executor.layers.fused_moe.config import fp8_w8a8_moe_quant_config
    from vllm.model_executor.layers.fused_moe.fused_moe import fused_experts
    from vllm.model_executor.layers.fused_moe.router.fused_topk_router import fused_topk
    p = case.params
    weights, ids, _ = fused_topk(x["x"], x["logits"], p["topk"], renormalize=p["renormalize"])
    quant = fp8_w8a8_moe_quant_config(w1_scale=x["w1_scale"], w2_scale=x["w2_scale"],
                                      block_shape=[128, 128])
    store(x, out=fused_experts(x["x"], x["w1"], x["w2"], weights, ids, quant_config=quant))


_kernel(
    name="lib_vllm_fused_moe_fp8", group="lib_vllm_moe", models=("deepseek_v3",),
    description="vllm fused_experts with fp8 block-quantized experts (DeepSeek-V3): tokens and the "
                "SwiGLU output quantized per 128-wide group by per_token_group_quant_fp8, "
                "fused_moe_kernel with e4m3 operands and 128x128 block scales (softmax top-k routing "
                "stands in for DeepSeek's grouped sigmoid router, which is not under test here).",
    upstream="vllm: model_executor/layers/fused_moe/fused_moe.py fused_experts (fused_moe_kernel, "
             "use_fp8_w8a8, block_shape [128, 128])",
    cases=(_moe_case("deepseek_v3_M9", "deepseek_v3", 9, 256, 256, 16, 4,
                     note="experts /16, hidden /28, expert width /8; 9 tokens"),
           _moe_case("deepseek_v3_ep8_full", "deepseek_v3", 32, 7168, 2048, 32, 8, quick=False,
                     note="full widths; the 32 experts one rank holds under 8-way expert parallelism")),
    dtypes=("bf16",), make_inputs=_moe_fp8_inputs,
    run=vllm_call(_moe_fp8_run), reference=_moe_fp8_reference,
    outputs=("out",), tolerance={"bf16": Tolerance(rmse=2e-2)})
