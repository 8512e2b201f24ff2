"""Liger Kernel as training stacks call it (`liger_kernel.transformers.functional`).

Liger's patch of a Llama / Mixtral model in transformers (`apply_liger_kernel_to_llama`,
`..._to_mixtral`) swaps in its RMSNorm, SwiGLU MLP, RoPE and (fused linear) cross entropy; GeGLU
and LayerNorm serve Gemma-style MLPs and LayerNorm models. Every case runs forward and backward at
the models' widths (hidden 4096, intermediate 14336, 32 query / 8 KV heads x 128, vocab 128256 for
Llama-3.1-8B, 32000 for Mixtral-8x7B) with a few tokens; the fused linear cross entropy scales the
hidden size (a [32000 x 4096] weight and its gradient do not fit a shared CPU). References are
written here in fp64 and differentiated by autograd.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..spec import Case, Tolerance
from . import Library, leaves, library_kernel, randn, store

LIGER = Library(dist="liger-kernel", module="liger_kernel", requirement="liger-kernel==0.8.5",
                origin="liger")
GROUP = "lib_liger"
TRAINING = ("llama3_1", "mixtral")
LLAMA = "Llama-3.1-8B config (hidden 4096, intermediate 14336, 32/8 heads x 128, vocab 128256)"
MIXTRAL = "Mixtral-8x7B config (hidden 4096, vocab 32000)"
GEMMA = "Gemma-2-9B config (hidden 3584, intermediate 14336, vocab 256000, final softcap 30)"
DTYPES = ("bf16", "fp32")
# fused bf16 ops: atol 1e-2..2e-1 with rtol ~1e-2 (models.md); fp32 near torch.testing's defaults
ELEMENTWISE = {"bf16": Tolerance(atol=5e-2, rtol=1.6e-2), "fp32": Tolerance(atol=1e-5, rtol=1e-5)}
# losses and their gradients (softmax values ~1/vocab): relative RMSE, which does not depend on scale
RELATIVE = {"bf16": Tolerance(rmse=8e-3), "fp32": Tolerance(rmse=1e-5)}


def _functional():
    import liger_kernel.transformers.functional as lf
    return lf


# --------------------------------------------------------------------------------- norms
def _norm_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    T, D = case.params["T"], case.params["D"]
    x = {"x": randn(gen, T, D, dtype=dtype, device=device, scale=2.0),
         "w": randn(gen, D, dtype=dtype, device=device, scale=0.1, shift=case.params.get("w_mean", 1.0)),
         "b": randn(gen, D, dtype=dtype, device=device, scale=0.1),
         "dy": randn(gen, T, D, dtype=dtype, device=device)}
    for name in ("x", "w", "b"):
        x["d" + name] = torch.empty_like(x[name])
    x["y"] = torch.empty_like(x["x"])
    return x


def _rms_run(x: dict, case: Case) -> None:
    p = case.params
    a, w = leaves(x, ("x", "w"))
    y = _functional().liger_rms_norm(a, w, p["eps"], offset=p["offset"], casting_mode=p["casting"])
    y.backward(x["dy"])
    store(x, y=y, dx=a.grad, dw=w.grad)


def _rms_reference(x: dict, case: Case) -> dict:
    p = case.params
    a, w = leaves(x, ("x", "w"), torch.float64)
    y = a * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + p["eps"]) * (p["offset"] + w)
    y.backward(x["dy"].double())
    return {"y": y.detach(), "dx": a.grad, "dw": w.grad}


library_kernel(
    LIGER, name="lib_liger_rms_norm", group=GROUP, models=TRAINING,
    upstream="liger: liger_kernel/ops/rms_norm.py LigerRMSNormFunction (_rms_norm_forward_kernel, "
             "_rms_norm_backward_kernel and the block variants), via functional.liger_rms_norm",
    description="liger_kernel.transformers.functional.liger_rms_norm: RMSNorm (llama casting: rstd in "
                "fp32, normalised x cast back before the weight; gemma: all fp32 with weight offset "
                "1), forward and backward (dx, dw).",
    cases=(Case("llama3_1_T32", {"T": 32, "D": 4096, "eps": 1e-5, "offset": 0.0, "casting": "llama"},
                source=LLAMA + "; 32 tokens"),
           Case("gemma2_offset1_T32", {"T": 32, "D": 3584, "eps": 1e-6, "offset": 1.0, "casting": "gemma",
                                       "w_mean": 0.0}, source=GEMMA + "; 32 tokens, weight offset 1"),
           Case("llama3_1_T4096_full", {"T": 4096, "D": 4096, "eps": 1e-5, "offset": 0.0,
                                        "casting": "llama"}, quick=False, source=LLAMA + "; 4096 tokens")),
    dtypes=DTYPES, make_inputs=_norm_inputs, run=_rms_run, reference=_rms_reference,
    outputs=("y", "dx", "dw"), tolerance=ELEMENTWISE,
    # dw sums dy * x_hat over every token: judged relative to its norm
    output_tolerance={"dw": RELATIVE["bf16"], "dw@fp32": RELATIVE["fp32"]})


def _ln_run(x: dict, case: Case) -> None:
    a, w, b = leaves(x, ("x", "w", "b"))
    y = _functional().liger_layer_norm(a, w, b, case.params["eps"])
    y.backward(x["dy"])
    store(x, y=y, dx=a.grad, dw=w.grad, db=b.grad)


def _ln_reference(x: dict, case: Case) -> dict:
    a, w, b = leaves(x, ("x", "w", "b"), torch.float64)
    y = F.layer_norm(a, a.shape[-1:], w, b, case.params["eps"])
    y.backward(x["dy"].double())
    return {"y": y.detach(), "dx": a.grad, "dw": w.grad, "db": b.grad}


library_kernel(
    LIGER, name="lib_liger_layer_norm", group=GROUP, models=(),
    upstream="liger: liger_kernel/ops/layer_norm.py LigerLayerNormFunction (_layer_norm_forward_kernel, "
             "_layer_norm_backward_kernel), via functional.liger_layer_norm",
    description="liger_kernel.transformers.functional.liger_layer_norm, forward and backward "
                "(dx, dw, db).",
    cases=(Case("hidden4096_T32", {"T": 32, "D": 4096, "eps": 1e-5}, source="hidden 4096, 32 tokens"),
           Case("hidden4096_T4096_full", {"T": 4096, "D": 4096, "eps": 1e-5}, quick=False,
                source="hidden 4096, 4096 tokens")),
    dtypes=DTYPES, make_inputs=_norm_inputs, run=_ln_run, reference=_ln_reference,
    outputs=("y", "dx", "dw", "db"), tolerance=ELEMENTWISE,
    output_tolerance={"dw": RELATIVE["bf16"], "dw@fp32": RELATIVE["fp32"],
                      "db": RELATIVE["bf16"], "db@fp32": RELATIVE["fp32"]})


# ----------------------------------------------------------------------------- gated MLPs
def _glu_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    T, D = case.params["T"], case.params["D"]
    x = {"a": randn(gen, T, D, dtype=dtype, device=device, scale=2.0),
         "b": randn(gen, T, D, dtype=dtype, device=device),
         "dc": randn(gen, T, D, dtype=dtype, device=device)}
    x["c"], x["da"], x["db"] = (torch.empty_like(x["a"]) for _ in range(3))
    return x


def _glu(fn: str):
    def run(x: dict, case: Case) -> None:
        a, b = leaves(x, ("a", "b"))
        c = getattr(_functional(), fn)(a, b)
        c.backward(x["dc"])
        store(x, c=c, da=a.grad, db=b.grad)
    return run


def _glu_reference(act):
    def reference(x: dict, case: Case) -> dict:
        a, b = leaves(x, ("a", "b"), torch.float64)
        c = act(a) * b
        c.backward(x["dc"].double())
        return {"c": c.detach(), "da": a.grad, "db": b.grad}
    return reference


library_kernel(
    LIGER, name="lib_liger_swiglu", group=GROUP, models=TRAINING,
    upstream="liger: liger_kernel/ops/swiglu.py LigerSiLUMulFunction (_swiglu_forward_kernel, "
             "_swiglu_backward_kernel), via functional.liger_swiglu",
    description="liger_kernel.transformers.functional.liger_swiglu: silu(gate) * up of the MLP, "
                "forward and backward (da, db).",
    cases=(Case("intermediate14336_T16", {"T": 16, "D": 14336}, source=LLAMA + "; 16 tokens"),
           Case("intermediate14336_T2048_full", {"T": 2048, "D": 14336}, quick=False,
                source=LLAMA + "; 2048 tokens")),
    dtypes=DTYPES, make_inputs=_glu_inputs, run=_glu("liger_swiglu"), reference=_glu_reference(F.silu),
    outputs=("c", "da", "db"), tolerance=ELEMENTWISE)

library_kernel(
    LIGER, name="lib_liger_geglu", group=GROUP, models=(),
    upstream="liger: liger_kernel/ops/geglu.py LigerGELUMulFunction (_geglu_tanh_forward_kernel, "
             "_geglu_tanh_backward_kernel), via functional.liger_geglu",
    description="liger_kernel.transformers.functional.liger_geglu: gelu(gate, tanh approximation) * up "
                "of a GeGLU MLP, forward and backward (da, db).",
    cases=(Case("intermediate14336_T16", {"T": 16, "D": 14336}, source=GEMMA + "; 16 tokens"),
           Case("intermediate14336_T2048_full", {"T": 2048, "D": 14336}, quick=False,
                source=GEMMA + "; 2048 tokens")),
    dtypes=DTYPES, make_inputs=_glu_inputs, run=_glu("liger_geglu"),
    reference=_glu_reference(lambda a: F.gelu(a, approximate="tanh")),
    outputs=("c", "da", "db"), tolerance=ELEMENTWISE)


# ---------------------------------------------------------------------------------- RoPE
def _rope_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    p = case.params
    B, T, HQ, HK, D = p["B"], p["T"], p["HQ"], p["HK"], p["D"]
    inv_freq = 1.0 / (p["theta"] ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    pos = torch.arange(p["start"], p["start"] + T, dtype=torch.float64)
    emb = torch.cat([torch.outer(pos, inv_freq)] * 2, dim=-1)          # [T, D], as transformers builds it
    # q and k as transformers holds them: [B, heads, T, D] views of [B, T, heads, D] projections
    x = {"q": randn(gen, B, T, HQ, D, dtype=dtype, device=device).transpose(1, 2),
         "k": randn(gen, B, T, HK, D, dtype=dtype, device=device).transpose(1, 2),
         "cos": emb.cos()[None].to(dtype).to(device), "sin": emb.sin()[None].to(dtype).to(device)}
    x["dq_out"] = randn(gen, B, HQ, T, D, dtype=dtype, device=device)
    x["dk_out"] = randn(gen, B, HK, T, D, dtype=dtype, device=device)
    for name in ("q", "k"):
        x[name + "_out"] = torch.empty_like(x["d" + name + "_out"])
        x["d" + name] = torch.empty_like(x["d" + name + "_out"])
    return x


def _rope_run(x: dict, case: Case) -> None:
    q = x["q"].detach().transpose(1, 2).clone().transpose(1, 2).requires_grad_(True)
    k = x["k"].detach().transpose(1, 2).clone().transpose(1, 2).requires_grad_(True)
    q_out, k_out = _functional().liger_rope(q, k, x["cos"], x["sin"])
    store(x, q_out=q_out, k_out=k_out)  # before backward: the kernel's backward works in place
    torch.autograd.backward((q_out, k_out), (x["dq_out"], x["dk_out"]))
    store(x, dq=q.grad, dk=k.grad)


def _rope_reference(x: dict, case: Case) -> dict:
    q, k = leaves(x, ("q", "k"), torch.float64)
    cos, sin = x["cos"].double()[:, None], x["sin"].double()[:, None]

    def rotate(t):
        half = t.shape[-1] // 2
        return torch.cat((-t[..., half:], t[..., :half]), dim=-1)
    q_out, k_out = q * cos + rotate(q) * sin, k * cos + rotate(k) * sin
    torch.autograd.backward((q_out, k_out), (x["dq_out"].double(), x["dk_out"].double()))
    return {"q_out": q_out.detach(), "k_out": k_out.detach(), "dq": q.grad, "dk": k.grad}


library_kernel(
    LIGER, name="lib_liger_rope", group=GROUP, models=TRAINING,
    upstream="liger: liger_kernel/ops/rope.py LigerRopeFunction (_triton_rope), via functional.liger_rope",
    description="liger_kernel.transformers.functional.liger_rope: rotate-half RoPE of q and k with "
                "the cos/sin cache transformers builds, forward and backward (dq, dk).",
    cases=(Case("llama3_1_T16", {"B": 1, "T": 16, "HQ": 32, "HK": 8, "D": 128, "theta": 500000.0,
                                 "start": 100}, source=LLAMA + "; rope_theta 500000, positions 100..115"),
           Case("llama3_1_b2_T2048_full", {"B": 2, "T": 2048, "HQ": 32, "HK": 8, "D": 128,
                                           "theta": 500000.0, "start": 0}, quick=False,
                source=LLAMA + "; 2 x 2048 tokens")),
    dtypes=DTYPES, make_inputs=_rope_inputs, run=_rope_run, reference=_rope_reference,
    outputs=("q_out", "k_out", "dq", "dk"), tolerance=ELEMENTWISE)


# ---------------------------------------------------------------------------- cross entropy
def _targets(gen: torch.Generator, n: int, vocab: int, ignored: int, device: str) -> torch.Tensor:
    t = torch.randint(0, vocab, (n,), generator=gen)
    t[torch.randperm(n, generator=gen)[:ignored]] = -100          # padding / prompt tokens
    return t.to(device)


def _ce_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    p = case.params
    x = {"logits": randn(gen, p["T"], p["V"], dtype=dtype, device=device, scale=p.get("scale", 2.0)),
         "target": _targets(gen, p["T"], p["V"], p["ignored"], device),
         "loss": torch.empty((), dtype=torch.float32, device=device)}
    x["dlogits"] = torch.empty_like(x["logits"])
    return x


def _ce_loss(logits: torch.Tensor, target: torch.Tensor, p: dict) -> torch.Tensor:
    if p.get("softcap"):
        logits = p["softcap"] * torch.tanh(logits / p["softcap"])
    return F.cross_entropy(logits, target, ignore_index=-100, label_smoothing=p.get("smoothing", 0.0))


def _ce_run(x: dict, case: Case) -> None:
    p = case.params
    (logits,) = leaves(x, ("logits",))
    loss = _functional().liger_cross_entropy(logits, x["target"], ignore_index=-100,
                                             label_smoothing=p.get("smoothing", 0.0),
                                             softcap=p.get("softcap"))
    loss.backward()
    store(x, loss=loss, dlogits=logits.grad)


def _ce_reference(x: dict, case: Case) -> dict:
    (logits,) = leaves(x, ("logits",), torch.float64)
    loss = _ce_loss(logits, x["target"], case.params)
    loss.backward()
    return {"loss": loss.detach(), "dlogits": logits.grad}


library_kernel(
    LIGER, name="lib_liger_cross_entropy", group=GROUP, models=TRAINING,
    upstream="liger: liger_kernel/ops/cross_entropy.py LigerCrossEntropyFunction "
             "(liger_cross_entropy_kernel), via functional.liger_cross_entropy",
    description="liger_kernel.transformers.functional.liger_cross_entropy over the vocabulary (mean "
                "over non-ignored tokens; the gradient is computed in the forward pass), with label "
                "smoothing and Gemma-2's final logit softcap; forward and backward (dlogits).",
    cases=(Case("llama3_1_vocab_T8", {"T": 8, "V": 128256, "ignored": 2},
                source=LLAMA + "; 8 tokens, 2 ignored (-100)"),
           Case("mixtral_smooth_T8", {"T": 8, "V": 32000, "ignored": 1, "smoothing": 0.1},
                source=MIXTRAL + "; label smoothing 0.1"),
           Case("gemma2_softcap_T4", {"T": 4, "V": 256000, "ignored": 1, "softcap": 30.0, "scale": 20.0},
                source=GEMMA + "; logits up to ~60 before the cap"),
           Case("llama3_1_vocab_T1024_full", {"T": 1024, "V": 128256, "ignored": 100}, quick=False,
                source=LLAMA + "; 1024 tokens")),
    dtypes=DTYPES, make_inputs=_ce_inputs, run=_ce_run, reference=_ce_reference,
    outputs=("loss", "dlogits"), tolerance=RELATIVE)


def _flce_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    p = case.params
    x = {"x": randn(gen, p["T"], p["H"], dtype=dtype, device=device),
         "w": randn(gen, p["V"], p["H"], dtype=dtype, device=device, scale=2.0 / math.sqrt(p["H"])),
         "target": _targets(gen, p["T"], p["V"], p["ignored"], device),
         "loss": torch.empty((), dtype=torch.float32, device=device)}
    x["dx"], x["dw"] = torch.empty_like(x["x"]), torch.empty_like(x["w"])
    return x


def _flce_run(x: dict, case: Case) -> None:
    a, w = leaves(x, ("x", "w"))
    loss = _functional().liger_fused_linear_cross_entropy(a, w, x["target"], ignore_index=-100)
    loss.backward()
    store(x, loss=loss, dx=a.grad, dw=w.grad)


def _flce_reference(x: dict, case: Case) -> dict:
    a, w = leaves(x, ("x", "w"), torch.float64)
    loss = F.cross_entropy(a @ w.t(), x["target"], ignore_index=-100)
    loss.backward()
    return {"loss": loss.detach(), "dx": a.grad, "dw": w.grad}


library_kernel(
    LIGER, name="lib_liger_fused_linear_cross_entropy", group=GROUP, models=TRAINING,
    upstream="liger: liger_kernel/ops/fused_linear_cross_entropy.py "
             "LigerFusedLinearCrossEntropyFunction (chunked lm_head matmuls with liger_cross_entropy_kernel "
             "and element_mul_kernel), via functional.liger_fused_linear_cross_entropy",
    description="liger_kernel.transformers.functional.liger_fused_linear_cross_entropy: lm_head matmul "
                "and cross entropy chunk by chunk (logits never materialised whole), forward and "
                "backward (dx, dw).",
    cases=(Case("mixtral_vocab_h512_T16", {"T": 16, "H": 512, "V": 32000, "ignored": 3},
                source=MIXTRAL + "; hidden 4096 /8, 16 tokens, 3 ignored"),
           Case("llama3_1_vocab_h512_T256_full", {"T": 256, "H": 512, "V": 128256, "ignored": 20},
                quick=False, source=LLAMA + "; hidden 4096 /8, 256 tokens")),
    dtypes=DTYPES, make_inputs=_flce_inputs, run=_flce_run, reference=_flce_reference,
    outputs=("loss", "dx", "dw"), tolerance=RELATIVE)
