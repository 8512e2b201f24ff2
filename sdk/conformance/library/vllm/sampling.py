"""vLLM's sampler: the top-k / top-p mask."""
from __future__ import annotations

import torch

from ...spec import Case, Tolerance
from .. import randn, store
from . import _kernel, vllm_call


# ================================================================================== sampling
def _topk_topp_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    p = case.params
    b = len(p["k"])
    x = {"logits": randn(gen, b, p["vocab"], dtype=torch.float32, device=device, scale=3.0),
         "k": torch.tensor(p["k"], dtype=torch.int32, device=device),
         "p": torch.tensor(p["p"], dtype=torch.float32, device=device)}
    x["out"] = torch.empty_like(x["logits"])
    return x


#: vLLM's top-p pivot search stops after this many bisection steps (topk_topp_triton.py)
TOPP_SEARCH_STEPS = 18


def _topk_topp_reference(x: dict, case: Case) -> dict:
    """Top-k by logit (the k largest stay), then top-p over what is left: a token stays unless the
    probability mass of the tokens at most as likely as it (itself included) is <= 1 - p; the most
    likely token always stays. Masked logits are -inf.

    vLLM finds the top-p cut by bisecting probabilities between the row's least and most likely
    token for TOPP_SEARCH_STEPS steps: a token whose probability is within one step of the least
    likely kept token's may fall on either side of the cut it finds ("out@alt" holds the other
    side for those tokens, KernelSpec.reference)."""
    out = torch.full(x["logits"].shape, float("-inf"), dtype=torch.float64)
    alt = out.clone()
    for r in range(x["logits"].shape[0]):
        row = x["logits"][r].double()
        kk, pp = int(x["k"][r]), float(x["p"][r])
        keep = torch.zeros_like(row, dtype=torch.bool)
        keep[row.topk(min(kk, row.numel())).indices] = True
        candidates = keep.clone()
        probs = torch.softmax(row.masked_fill(~keep, float("-inf")), -1)
        order = probs.argsort()
        tail = probs[order].cumsum(0)
        drop = tail <= 1 - pp
        drop[-1] = False
        keep[order[drop]] = False
        out[r, keep] = row[keep]
        flip = torch.zeros_like(keep)
        if pp < 1 and bool(drop.any()):
            live = probs[candidates]
            step = float(live.max() - live.min()) / 2 ** TOPP_SEARCH_STEPS
            flip = candidates & ((probs - float(probs[keep].min())).abs() <= step)
            flip[probs.argmax()] = False  # the most likely token stays, whatever the search finds
        alt[r] = torch.where(flip ^ keep, row, torch.full_like(row, float("-inf")))
    return {"out": out, "out@alt": alt}


def _topk_topp_run(x: dict, case: Case) -> None:
    from vllm.v1.sample.ops.topk_topp_triton import apply_top_k_top_p_triton
    store(x, out=apply_top_k_top_p_triton(x["logits"].clone(), x["k"], x["p"]))


_kernel(
    name="lib_vllm_topk_topp", group="lib_vllm_sampling",
    models=("qwen3_5", "qwen3_next", "llama3_1", "mixtral"),
    description="vllm apply_top_k_top_p_triton (the sampler's top-k/top-p mask): per-row k and p, "
                "pivot search over the vocabulary, logits outside the kept set masked to -inf.",
    upstream="vllm: v1/sample/ops/topk_topp_triton.py apply_top_k_top_p_triton (_topk_topp_kernel)",
    cases=(Case("vocab_32k_b4", {"vocab": 32000, "k": [50, 1, 20, 32000], "p": [0.9, 1.0, 0.5, 0.8]},
                source="Llama / Mixtral vocabulary (32000); rows: k=50 p=0.9, greedy k=1, k=20 p=0.5, "
                       "top-p only"),
           Case("vocab_151k_b2", {"vocab": 151936, "k": [20, 151936], "p": [0.95, 0.7]}, quick=False,
                source="Qwen3 vocabulary (151936)")),
    dtypes=("fp32",), make_inputs=_topk_topp_inputs,
    run=vllm_call(_topk_topp_run), reference=_topk_topp_reference,
    outputs=("out",), tolerance={"fp32": Tolerance(exact=True)})
