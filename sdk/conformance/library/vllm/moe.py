"""vLLM's fused MoE: fused_topk routing and fused_experts over bf16/fp32 experts."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ...spec import Case
from .. import randn, store
from . import DTYPES, RMSE, _kernel, vllm_call


# ======================================================================================= MoE
MOE_SRC = {
    "qwen3_next": "Qwen3-Next-80B-A3B / Qwen3.5 MoE (512 experts, top-10, hidden 2048, expert 512)",
    "mixtral": "Mixtral-8x7B MoE (8 experts, top-2, hidden 4096, expert 14336)",
    "deepseek_v3": "DeepSeek-V3 MoE (256 experts, top-8, hidden 7168, expert 2048, fp8 128x128 blocks)",
}


def _experts(gen: torch.Generator, E: int, rows: int, cols: int, dtype: torch.dtype, device: str,
             scale: float) -> torch.Tensor:
    """E expert matrices [rows, cols], drawn one expert at a time (full-size MoE weights are GBs)."""
    w = torch.empty(E, rows, cols, dtype=dtype, device=device)
    for e in range(E):
        w[e] = randn(gen, rows, cols, dtype=dtype, device=device, scale=scale)
    return w


def _moe_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    p = case.params
    M, H, N, E = p["M"], p["H"], p["N"], p["E"]
    x = {"x": randn(gen, M, H, dtype=dtype, device=device),
         "w1": _experts(gen, E, 2 * N, H, dtype, device, H ** -0.5),
         "w2": _experts(gen, E, H, N, dtype, device, N ** -0.5),
         "logits": randn(gen, M, E, dtype=torch.float32, device=device)}
    x["out"] = torch.empty_like(x["x"])
    return x


def _route(logits: torch.Tensor, topk: int, renormalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    p = torch.softmax(logits.double(), -1)
    w, ids = p.topk(topk, dim=-1)
    return (w / w.sum(-1, keepdim=True) if renormalize else w), ids


def _moe_reference(x: dict, case: Case) -> dict:
    """Each token: softmax routing over the experts, its top-k experts' SwiGLU MLPs
    (w2 @ (silu(w1_gate x) * w1_up x)) weighted by the routing weights, in fp64."""
    p = case.params
    w, ids = _route(x["logits"], p["topk"], p["renormalize"])
    xs, N = x["x"].double(), p["N"]
    out = torch.zeros(xs.shape, dtype=torch.float64)
    for e in ids.unique().tolist():
        tok, slot = (ids == e).nonzero(as_tuple=True)
        h = xs[tok] @ x["w1"][e].double().T
        a = F.silu(h[:, :N]) * h[:, N:]
        out.index_add_(0, tok, (a @ x["w2"][e].double().T) * w[tok, slot][:, None])
    return {"out": out}


def _moe_run(x: dict, case: Case) -> None:
    from vllm.model_executor.layers.fused_moe.fused_moe import fused_experts
    from vllm.model_executor.layers.fused_moe.router.fused_topk_router import fused_topk
    p = case.params
    weights, ids, _ = fused_topk(x["x"], x["logits"], p["topk"], renormalize=p["renormalize"])
    store(x, out=fused_experts(x["x"], x["w1"], x["w2"], weights, ids))


def _moe_case(name: str, model: str, M: int, H: int, N: int, E: int, topk: int, quick: bool = True,
              renormalize: bool = True, note: str = "") -> Case:
    return Case(name, {"M": M, "H": H, "N": N, "E": E, "topk": topk, "renormalize": renormalize},
                quick=quick, source=MOE_SRC[model] + (f"; {note}" if note else ""))


_kernel(
    name="lib_vllm_fused_moe", group="lib_vllm_moe", models=("qwen3_next", "qwen3_5", "mixtral"),
    description="vllm fused_topk + fused_experts (bf16/fp32): softmax top-k routing (host op), "
                "moe_align_block_size (host op), fused_moe_kernel for w13, silu_and_mul (host op), "
                "fused_moe_kernel for w2 with the routing weights, moe_sum (host op).",
    upstream="vllm: model_executor/layers/fused_moe/fused_moe.py fused_experts (fused_moe_kernel)",
    cases=(_moe_case("qwen3_next_M16", "qwen3_next", 16, 256, 128, 64, 10,
                     note="experts /8, hidden /8, expert width /4; 16 tokens (grouped by expert)"),
           _moe_case("qwen3_next_decode", "qwen3_next", 2, 256, 128, 128, 8,
                     note="2 tokens x top-8 over 128 experts: vLLM's per-route path (no grouping)"),
           _moe_case("mixtral_M33", "mixtral", 33, 512, 256, 8, 2,
                     note="hidden /8, expert width /56; 33 tokens (odd: masked rows)"),
           _moe_case("qwen3_next_full", "qwen3_next", 64, 2048, 512, 512, 10, quick=False)),
    dtypes=DTYPES, make_inputs=_moe_inputs, run=vllm_call(_moe_run), reference=_moe_reference,
    outputs=("out",), tolerance=RMSE)
