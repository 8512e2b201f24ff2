"""LayerNorm and the non-gated GELU: the norm and the activation of BERT-style encoders, of
encoder-decoders (BART, Whisper, Marian) and of the LayerNorm decoders (GPT-2, OPT, Phi-2,
StarCoder2, Falcon).

layernorm: y = (x - mean(x)) / sqrt(var(x) + eps) * w + b over each row (the biased variance, as
torch.nn.LayerNorm computes it), fp32 statistics; without an affine part (OLMo's non-parametric
norm) y is the normalised row itself.
gelu: y = gelu(x) over the up projection's output, exact (erf) or the tanh approximation (GPT-2's
gelu_new, StarCoder2's gelu_pytorch_tanh), fp32 math.
Both are what vLLM runs through Inductor for these layers (nn.LayerNorm; get_act_fn's GELU
variants' forward_native under torch.compile with custom ops off): hand-written Triton here, one
row (LayerNorm) or one row block (GELU) per program.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from sdk.conformance.kernels.norms import _randn
from sdk.conformance.refmath import compute_dtype
from sdk.conformance.spec import Case, KernelSpec, Tolerance, register

_TOL = {"bf16": Tolerance(atol=2e-2, rtol=1e-2), "fp16": Tolerance(atol=2e-3, rtol=2e-3),
        "fp32": Tolerance(atol=1e-5, rtol=1.3e-5)}


# ------------------------------------------------------------------------------------- layernorm
@triton.jit
def _layernorm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, stride_x, stride_out, n_cols, eps,
                      AFFINE: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    xc = tl.where(mask, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / n_cols
    y = xc / tl.sqrt(var + eps)
    if AFFINE:
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        y = y * w + b
    tl.store(out_ptr + row * stride_out + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def layernorm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, out: torch.Tensor,
              eps: float) -> None:
    """out = LayerNorm(x) over the last dimension of x [rows, cols] (unit column stride)."""
    rows, cols = x.shape
    block = triton.next_power_of_2(cols)
    affine = weight is not None
    _layernorm_kernel[(rows,)](x, weight if affine else x, bias if affine else x, out, x.stride(0), out.stride(0),
                               cols, eps, AFFINE=affine, BLOCK=block,
                               num_warps=max(1, min(8, block * x.element_size() // 512)))


def _ln_inputs(case, dtype, device, gen):
    p = case.params
    T, H = p["tokens"], p["hidden"]
    # rows off centre and of uneven scale: the mean matters, and so does its removal
    x = _randn((T, H), gen, dtype, device, scale=2.0) + _randn((T, 1), gen, dtype, device, scale=3.0)
    d = {"x": x, "out": torch.empty((T, H), dtype=dtype, device=device)}
    if p.get("affine", True):
        d["weight"] = _randn((H,), gen, dtype, device, scale=0.2, shift=1.0)
        d["bias"] = _randn((H,), gen, dtype, device, scale=0.2)
    return d


def _ln_run(inp, case):
    layernorm(inp["x"], inp.get("weight"), inp.get("bias"), inp["out"], case.params["eps"])


def _ln_ref(inp, case):
    """torch.nn.functional.layer_norm in fp64 (the output is judged to 1.3e-5 in fp32 too)."""
    x = inp["x"].double()
    w, b = inp.get("weight"), inp.get("bias")
    out = torch.nn.functional.layer_norm(x, (x.shape[-1],), None if w is None else w.double(),
                                         None if b is None else b.double(), case.params["eps"])
    return {"out": out}


register(KernelSpec(
    name="layernorm", group="norms", models=(),
    cases=(
        Case("odd_T37_H1000", {"tokens": 37, "hidden": 1000, "eps": 1e-5}, source="odd sizes: masked tail"),
        Case("bert_T64_H768", {"tokens": 64, "hidden": 768, "eps": 1e-12},
             source="BERT-base / RoBERTa hidden 768, layer_norm_eps 1e-12"),
        Case("olmo_T16_H2048_plain", {"tokens": 16, "hidden": 2048, "eps": 1e-5, "affine": False},
             source="OLMo-1B: non-parametric LayerNorm (no weight, no bias), hidden 2048"),
        Case("bert_base_T4096_H768", {"tokens": 4096, "hidden": 768, "eps": 1e-12}, quick=False,
             source="BERT-base: a batch of eight 512-token sequences"),
        Case("whisper_large_v3_T3000_H1280", {"tokens": 3000, "hidden": 1280, "eps": 1e-5}, quick=False,
             source="Whisper-large-v3 encoder: hidden 1280, two 30 s inputs (1500 frames each)"),
        Case("phi2_T8192_H2560", {"tokens": 8192, "hidden": 2560, "eps": 1e-5}, quick=False,
             source="Phi-2: hidden 2560, 8192-token prefill"),
        Case("starcoder2_15b_T4096_H6144", {"tokens": 4096, "hidden": 6144, "eps": 1e-5}, quick=False,
             source="StarCoder2-15B: hidden 6144, 4096-token prefill"),
        Case("falcon_40b_T2048_H8192", {"tokens": 2048, "hidden": 8192, "eps": 1e-5}, quick=False,
             source="Falcon-40B: hidden 8192, 2048-token prefill"),
    ),
    dtypes=("bf16", "fp16", "fp32"), make_inputs=_ln_inputs, run=_ln_run, reference=_ln_ref, outputs=("out",),
    tolerance=_TOL,
    description="LayerNorm over each row (fp32 mean and biased variance), with or without weight and bias",
    triton_kernels=(_layernorm_kernel,),
    upstream="Inductor-generated in vLLM (torch.nn.LayerNorm in the BERT, BART, Whisper, GPT-2, OPT, Phi and "
             "StarCoder2 model files under torch.compile); no hand-written Triton",
))


# ------------------------------------------------------------------------------------------ gelu
@triton.jit
def _gelu_kernel(x_ptr, out_ptr, stride_x, stride_out, n_cols, TANH: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    if TANH:
        inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)  # sqrt(2 / pi)
        y = 0.5 * x * (1.0 + (2.0 / (1.0 + tl.exp(-2.0 * inner)) - 1.0))  # tanh(z) = 2 sigmoid(2z) - 1
    else:
        y = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    tl.store(out_ptr + row * stride_out + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def gelu(x: torch.Tensor, out: torch.Tensor, tanh: bool, block: int = 1024) -> None:
    """out = gelu(x) (exact, or the tanh approximation) for x, out [rows, cols], unit column stride."""
    rows, cols = x.shape
    _gelu_kernel[(rows, triton.cdiv(cols, block))](x, out, x.stride(0), out.stride(0), cols, TANH=tanh,
                                                   BLOCK=block, num_warps=4)


def _gelu_inputs(case, dtype, device, gen):
    p = case.params
    return {"x": _randn((p["rows"], p["cols"]), gen, dtype, device, scale=3.0),
            "out": torch.empty((p["rows"], p["cols"]), dtype=dtype, device=device)}


def _gelu_ref(inp, case):
    x = inp["x"].to(compute_dtype(inp["x"]))
    return {"out": torch.nn.functional.gelu(x, approximate="tanh" if case.params["tanh"] else "none")}


register(KernelSpec(
    name="gelu", group="activation", models=(),
    cases=(
        Case("odd_T37_I1000_erf", {"rows": 37, "cols": 1000, "tanh": False}, source="odd sizes: masked tail"),
        Case("gpt2_T16_I3072_tanh", {"rows": 16, "cols": 3072, "tanh": True},
             source="GPT-2: intermediate 3072, gelu_new (tanh approximation)"),
        Case("bert_base_T4096_I3072_erf", {"rows": 4096, "cols": 3072, "tanh": False}, quick=False,
             source="BERT-base: intermediate 3072, exact GELU, eight 512-token sequences"),
        Case("whisper_large_v3_T3000_I5120_erf", {"rows": 3000, "cols": 5120, "tanh": False}, quick=False,
             source="Whisper-large-v3 encoder: intermediate 5120, exact GELU"),
        Case("starcoder2_15b_T2048_I24576_tanh", {"rows": 2048, "cols": 24576, "tanh": True}, quick=False,
             source="StarCoder2-15B: intermediate 24576, gelu_pytorch_tanh"),
    ),
    dtypes=("bf16", "fp16", "fp32"), make_inputs=_gelu_inputs, run=lambda inp, case: gelu(inp["x"], inp["out"],
                                                                                         case.params["tanh"]),
    reference=_gelu_ref, outputs=("out",), tolerance=_TOL,
    description="y = gelu(x) over the up projection's output (non-gated MLP), exact or tanh, fp32 math",
    triton_kernels=(_gelu_kernel,),
    upstream="Inductor-generated in vLLM (get_act_fn's GELU, NewGELU and FastGELU forward_native in "
             "model_executor/layers/activation.py under torch.compile with custom ops off, the default); "
             "with custom ops on, the C++ ops torch.ops._C.gelu_new / gelu_fast; no hand-written Triton",
))
