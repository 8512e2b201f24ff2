"""vLLM's MLA decode (DeepSeek-V3 latent attention over a paged cache)."""
from __future__ import annotations

import torch

from ...spec import Case
from .. import randn
from . import DTYPES, RMSE, _kernel, vllm_call


MLA_SRC = "DeepSeek-V3 MLA decode (128 heads, kv_lora_rank 512 + rope 64, qk head 192, page 64)"


def _mla_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    p = case.params
    H, L, R, page, lens = p["heads"], 512, 64, p["page"], p["seq_lens"]
    pages = [-(-n // page) for n in lens]
    total = sum(pages) + 2
    perm = torch.randperm(total, generator=gen).int()
    table = torch.zeros(len(lens), max(pages) + 1, dtype=torch.int32)
    at = 0
    for i, n in enumerate(pages):
        table[i, :n] = perm[at:at + n]
        at += n
    x = {"q": randn(gen, len(lens), H, L + R, dtype=dtype, device=device),
         "kv_cache": randn(gen, total, page, L + R, dtype=dtype, device=device),
         "block_table": table.to(device),
         "seq_lens": torch.tensor(lens, dtype=torch.int32, device=device)}
    x["o"] = torch.empty(len(lens), H, L, dtype=dtype, device=device)
    x["lse"] = torch.empty(len(lens), H, dtype=dtype, device=device)
    return x


def _mla_reference(x: dict, case: Case) -> dict:
    """Per sequence and head: scores q . [c_kv | k_pe] x (192)^-1/2 over the sequence's latent
    cache entries, softmax, output the weighted c_kv (512); lse the log-sum-exp of the scores."""
    page, scale = case.params["page"], 192 ** -0.5
    o = torch.zeros(x["o"].shape, dtype=torch.float64)
    lse = torch.zeros(x["lse"].shape, dtype=torch.float64)
    for i, n in enumerate(x["seq_lens"].tolist()):
        blocks = x["block_table"][i, : -(-n // page)].long()
        kv = x["kv_cache"][blocks].reshape(-1, 576)[:n].double()
        s = (x["q"][i].double() @ kv.T) * scale                           # (heads, n)
        lse[i] = torch.logsumexp(s, -1)
        o[i] = torch.softmax(s, -1) @ kv[:, :512]
    return {"o": o, "lse": lse}


def _mla_run(x: dict, case: Case) -> None:
    from vllm.v1.attention.ops.triton_decode_attention import decode_attention_fwd
    splits = case.params["splits"]
    cache = x["kv_cache"].unsqueeze(2)                                   # [pages, page, 1, 576]
    logits = torch.empty(*x["q"].shape[:2], splits, 513, dtype=torch.float32, device=x["q"].device)
    one = torch.ones((), dtype=torch.float32, device=x["q"].device)
    decode_attention_fwd(x["q"], cache, cache[..., :512], x["o"], x["lse"], x["block_table"],
                         x["seq_lens"], logits, splits, 192 ** -0.5, case.params["page"],
                         k_scale=one, v_scale=one, is_mla=True)


_kernel(
    name="lib_vllm_mla_decode", group="lib_vllm_attention", models=("deepseek_v3",),
    description="vllm decode_attention_fwd with is_mla (Triton MLA backend's decode): every query "
                "head against the shared latent cache [c_kv 512 | k_pe 64] through a paged block "
                "table, split-KV stage 1 (_fwd_grouped_kernel_stage1) and the merge "
                "(_fwd_kernel_stage2); "
                "output and log-sum-exp.",
    upstream="vllm: v1/attention/ops/triton_decode_attention.py decode_attention_fwd",
    cases=(Case("decode_b3", {"heads": 16, "page": 64, "seq_lens": [70, 1, 200], "splits": 4},
                source=MLA_SRC + "; heads /8; 3 sequences, 4 KV splits"),
           Case("decode_b8_full", {"heads": 128, "page": 64, "seq_lens": [1000, 37, 4096, 512] * 2,
                                   "splits": 8}, quick=False, source=MLA_SRC)),
    dtypes=DTYPES, make_inputs=_mla_inputs, run=vllm_call(_mla_run), reference=_mla_reference,
    outputs=("o", "lse"), tolerance=RMSE)
