"""vLLM's own Triton kernels, called through the Python functions vLLM's layers call.

These are the Triton kernels vLLM (0.33) runs wherever it takes no CUDA-only library path: the
fused MoE GEMM (bf16 and fp8 block-quantized experts), unified paged attention (varlen prefill,
split-KV decode, sliding window, softcap, sinks), the KV-cache write, Mamba's causal conv1d and SSD
kernels, multimodal RoPE, its vendored FLA Gated DeltaNet kernels, the sampler's top-k/top-p mask,
MLA decode, and fp8 group quantization and block-scaled GEMM. Each case calls the public function
at a model's shapes (scaled for cpu_interp in quick mode, the model's own in `--full`), with the
data layouts vLLM's layers pass (paged caches with shuffled block tables, state pools indexed by
slot, varlen batches), against a PyTorch reference written here from the math.

vLLM is installed beside the pinned torch by `scripts/install-vllm.sh`; on a day0 backend it runs
on day0's platform plugin (`sdk.integrations.vllm`), which the worker selects by activating the
backend before vLLM is first imported. Findings these cases record (vLLM 0.33.0):
- `triton_reshape_and_cache_flash` calls `torch.cuda.get_device_capability` on every platform
  but ROCm and XPU, so the KV-cache write cannot run on another device (lib_vllm_kv_cache_write);
- `kernel_unified_attention` loads block-table entries past a sequence's last page without a
  mask (triton_unified_attention.py: `block_tables_ptr + block_table_offset + seq_offset //
  BLOCK_SIZE`); with rows exactly as wide as the pages in use the last row reads past the table.
  The cases use vLLM's own row width (max_model_len / block_size), where the read stays inside.
"""
from __future__ import annotations

import functools
import importlib
import math
import traceback
from typing import Callable

import torch
import torch.nn.functional as F

from ..spec import Case, KernelSpec, Tolerance
from . import Library, library_kernel, randn, store


class VllmLibrary(Library):
    """vLLM: usable when vLLM and its Triton-kernel modules import. The wheel goes in with
    --no-deps (its requirements pin another torch); scripts/install-vllm.sh adds the packages its
    kernel modules import, and the message of a missing vLLM names that script."""

    def missing(self) -> str:
        from ...integrations.vllm.install import IMPORT_CHECK
        for mod in IMPORT_CHECK:
            try:
                importlib.import_module(mod)
            except ImportError as exc:
                why = " ".join(str(exc).split())[:160]
                return f"not installed: scripts/install-vllm.sh (import {mod}: {why})"
        return ""


VLLM = VllmLibrary(dist="vllm", module="vllm", requirement="--no-deps vllm==0.33.0", origin="vllm")
DTYPES = ("bf16", "fp32")
RMSE = {"bf16": Tolerance(rmse=1e-2), "fp32": Tolerance(rmse=1e-5)}


def _kernel(**fields) -> KernelSpec:
    """Register a vLLM library-tier kernel; `upstream` (the vLLM function and kernels it calls)
    goes to the spec's own field where the spec has one, else ends the description."""
    upstream = fields.pop("upstream")
    if "upstream" in KernelSpec.__dataclass_fields__:
        fields["upstream"] = upstream
    else:
        fields["description"] = f"{fields['description']} Calls {upstream}."
    return library_kernel(VLLM, **fields)


class VllmCallError(RuntimeError):
    """vLLM's Python code failed before or around its kernel; the message names vLLM's line."""


def _vllm_line(exc: BaseException) -> str:
    """'vllm/...py:N: source' of the innermost traceback frame inside vLLM."""
    best = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        path = frame.filename.replace("\\", "/")
        if "/vllm/" in path and "/sdk/" not in path:
            rel = "vllm/" + path.rsplit("/vllm/", 1)[1]
            best = f"{rel}:{frame.lineno}: {(frame.line or '').strip()}"
    return best


def _on_day0_platform() -> None:
    from vllm.platforms import current_platform
    from ...integrations.vllm.platform import Day0Platform
    if not isinstance(current_platform, Day0Platform):
        raise VllmCallError(f"vLLM runs on {type(current_platform).__name__}, not day0's platform: "
                            "vLLM resolved its platform before a day0 backend was selected")


def vllm_call(run: Callable[[dict, Case], None]) -> Callable[[dict, Case], None]:
    """A case's run, checked to be on day0's vLLM platform; an error raised in vLLM's own Python
    code (not a kernel fault or a missing lowering, which name their kernel line) names the vLLM
    line it came from."""
    @functools.wraps(run)
    def wrapped(x: dict, case: Case) -> None:
        _on_day0_platform()
        try:
            run(x, case)
        except Exception as exc:
            if type(exc).__module__.split(".")[0] in ("sdk", "backends", "triton"):
                raise
            where = _vllm_line(exc)
            if not where:
                raise
            raise VllmCallError(f"{type(exc).__name__}: {exc} (raised at {where})") from exc
    return wrapped


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


# ================================================================================= attention
ATTN_SRC = {
    "qwen3_5": "Qwen3.5 / Qwen3-Next full-attention layers (16 q / 2 kv heads x 256)",
    "llama3_1": "Llama-3.1-8B (32 q / 8 kv heads x 128)",
    "gemma": "Gemma-2/3 local layers (sliding window, logit softcap 50)",
    "gpt_oss": "gpt-oss (64 q / 8 kv heads x 64, sliding window 128 on alternate layers, sinks)",
}


def _attn_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    """A paged KV cache [blocks, block_size, kv_heads, head] with the sequences' pages scattered
    through it (a shuffled block table), queries packed varlen (cu_seqlens)."""
    p = case.params
    hq, hk, d, bs = p["hq"], p["hk"], p["d"], p["block_size"]
    q_lens, k_lens = p["q_lens"], p["k_lens"]
    pages = [-(-k // bs) for k in k_lens]
    nblocks = sum(pages) + 3
    perm = torch.randperm(nblocks, generator=gen)
    # rows as wide as vLLM's block table (max_model_len / block_size), unused entries 0
    table = torch.zeros(len(k_lens), -(-p["max_model_len"] // bs), dtype=torch.int32)
    at = 0
    for i, n in enumerate(pages):
        table[i, :n] = perm[at:at + n].int()
        at += n
    x = {"q": randn(gen, sum(q_lens), hq, d, dtype=dtype, device=device, scale=p.get("q_scale", 1.0)),
         "k_cache": randn(gen, nblocks, bs, hk, d, dtype=dtype, device=device),
         "v_cache": randn(gen, nblocks, bs, hk, d, dtype=dtype, device=device),
         "block_table": table.to(device),
         "cu_seqlens_q": torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)), dtype=torch.int32,
                                      device=device),
         "seqused_k": torch.tensor(k_lens, dtype=torch.int32, device=device)}
    if p.get("sinks"):
        x["sinks"] = randn(gen, hq, dtype=torch.float32, device=device, scale=2.0)
    x["out"] = torch.empty_like(x["q"])
    return x


def _attn_reference(x: dict, case: Case) -> dict:
    """Per sequence and query head: causal attention of its queries (the last q_len positions of
    the sequence) over its keys gathered from the pages, with the sliding window (keys at most
    window-1 positions back), tanh softcap, and a per-head sink logit in the denominator."""
    p = case.params
    hq, hk, d, bs = p["hq"], p["hk"], p["d"], p["block_size"]
    window, softcap = p.get("window", 0), p.get("softcap", 0.0)
    scale = d ** -0.5
    out = torch.zeros(x["q"].shape, dtype=torch.float64)
    start = 0
    for i, (ql, kl) in enumerate(zip(p["q_lens"], p["k_lens"])):
        blocks = x["block_table"][i, : -(-kl // bs)].long()
        k = x["k_cache"][blocks].reshape(-1, hk, d)[:kl].double()
        v = x["v_cache"][blocks].reshape(-1, hk, d)[:kl].double()
        q = x["q"][start:start + ql].double()
        pos = torch.arange(kl - ql, kl)[:, None]
        key = torch.arange(kl)[None, :]
        allowed = key <= pos
        if window:
            allowed &= pos - key < window
        for h in range(hq):
            s = (q[:, h] @ k[:, h // (hq // hk)].T) * scale
            if softcap:
                s = softcap * torch.tanh(s / softcap)
            s = s.masked_fill(~allowed, float("-inf"))
            if "sinks" in x:
                s = torch.cat([s, x["sinks"][h].double().expand(ql, 1)], dim=1)
            prob = torch.softmax(s, -1)[:, :kl]
            out[start:start + ql, h] = prob @ v[:, h // (hq // hk)]
        start += ql
    return {"out": out}


def _attn_run(x: dict, case: Case) -> None:
    from vllm.v1.attention.ops.triton_unified_attention import unified_attention
    p = case.params
    hq, hk, d = p["hq"], p["hk"], p["d"]
    window = p.get("window", 0)
    extra = {}
    if p.get("split_kv"):
        # decode as vLLM's Triton backend runs it: segments of the KV reduced by reduce_segments
        segments, rows = 16, x["q"].shape[0]
        hp = 1 << (d - 1).bit_length()
        f32 = dict(dtype=torch.float32, device=x["q"].device)
        extra = dict(seq_threshold_3D=128 // hk, num_par_softmax_segments=segments,
                     softmax_segm_output=torch.empty(rows, hq, segments, hp, **f32),
                     softmax_segm_max=torch.empty(rows, hq, segments, **f32),
                     softmax_segm_expsum=torch.empty(rows, hq, segments, **f32))
    descale = torch.ones(len(p["k_lens"]), hk, dtype=torch.float32, device=x["q"].device)
    unified_attention(
        q=x["q"], k=x["k_cache"], v=x["v_cache"], out=x["out"], cu_seqlens_q=x["cu_seqlens_q"],
        max_seqlen_q=max(p["q_lens"]), seqused_k=x["seqused_k"], max_seqlen_k=max(p["k_lens"]),
        softmax_scale=d ** -0.5, causal=True, window_size=(window - 1, 0) if window else (-1, -1),
        block_table=x["block_table"], softcap=p.get("softcap", 0.0), q_descale=None,
        k_descale=descale, v_descale=descale, sinks=x.get("sinks"), **extra)


def _attn_case(name: str, model: str, q_lens, k_lens, hq: int, hk: int, d: int, block_size: int = 16,
               quick: bool = True, note: str = "", **extra) -> Case:
    params = {"q_lens": list(q_lens), "k_lens": list(k_lens), "hq": hq, "hk": hk, "d": d,
              "block_size": block_size, "max_model_len": 1024, **extra}
    return Case(name, params, quick=quick, source=ATTN_SRC[model] + (f"; {note}" if note else ""))


_kernel(
    name="lib_vllm_unified_attention", group="lib_vllm_attention",
    models=("qwen3_5", "qwen3_next", "llama3_1", "mixtral"),
    description="vllm unified_attention over a paged KV cache (shuffled block table): varlen "
                "prefill with cached context (chunked prefill), decode through the split-KV 3D "
                "kernel + reduce_segments, GQA, sliding window, logit softcap and attention sinks.",
    upstream="vllm: v1/attention/ops/triton_unified_attention.py unified_attention "
             "(kernel_unified_attention, reduce_segments)",
    cases=(_attn_case("prefill_varlen_gqa", "qwen3_5", [17, 5, 1], [40, 5, 33], 4, 1, 256,
                      note="heads /4; 3 sequences: chunked prefill over 23 cached tokens, a fresh "
                           "prompt, a decode step"),
           _attn_case("decode_split_kv", "llama3_1", [1, 1, 1, 1], [70, 3, 129, 16], 8, 2, 128,
                      split_kv=True, note="heads /4; 4 decoding sequences, 16 KV segments each"),
           _attn_case("sliding_softcap", "gemma", [24, 1], [24, 90], 4, 2, 128, window=32,
                      softcap=50.0, q_scale=12.0,
                      note="window 32 (scaled from 4096), softcap 50 (queries x12: scores reach it)"),
           _attn_case("sinks_window", "gpt_oss", [12, 1], [40, 77], 8, 1, 64, window=16, sinks=True,
                      note="heads /8, window 16 (scaled from 128), one sink logit per head"),
           _attn_case("prefill_full", "qwen3_5", [512, 300], [512, 812], 16, 2, 256, quick=False)),
    dtypes=DTYPES, make_inputs=_attn_inputs, run=vllm_call(_attn_run), reference=_attn_reference,
    outputs=("out",), tolerance=RMSE)


# ============================================================================= KV-cache write
def _kv_write_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    p = case.params
    T, H, D, nb, bs = p["T"], p["H"], p["D"], p["blocks"], p["block_size"]
    slots = torch.randperm(nb * bs, generator=gen)[:T].long()
    slots[p.get("pad_at", T)::7] = -1  # padded tokens (slot -1) write nothing
    x = {"key": randn(gen, T, H, D, dtype=dtype, device=device),
         "value": randn(gen, T, H, D, dtype=dtype, device=device),
         "slot_mapping": slots.to(device),
         "key_cache": randn(gen, nb, bs, H, D, dtype=dtype, device=device),
         "value_cache": randn(gen, nb, bs, H, D, dtype=dtype, device=device)}
    return x


def _kv_write_reference(x: dict, case: Case) -> dict:
    """Token t's key and value land in page slot // block_size, row slot % block_size; slot -1
    writes nothing; every other cache entry keeps its value."""
    out = {}
    for name, src in (("key_cache", "key"), ("value_cache", "value")):
        cache = x[name].clone()
        flat = cache.view(-1, *cache.shape[2:])
        for t, s in enumerate(x["slot_mapping"].tolist()):
            if s >= 0:
                flat[s] = x[src][t]
        out[name] = cache
    return out


def _kv_write_run(x: dict, case: Case) -> None:
    from vllm.v1.attention.ops.triton_reshape_and_cache_flash import triton_reshape_and_cache_flash
    one = torch.ones((), dtype=torch.float32, device=x["key"].device)
    triton_reshape_and_cache_flash(x["key"], x["value"], x["key_cache"], x["value_cache"],
                                   x["slot_mapping"], "auto", one, one)


_kernel(
    name="lib_vllm_kv_cache_write", group="lib_vllm_attention",
    models=("qwen3_5", "qwen3_next", "llama3_1", "mixtral"),
    description="vllm triton_reshape_and_cache_flash: each new token's key and value written into "
                "the paged cache at its slot (slot -1: a padded token, nothing written), the cache "
                "layout [blocks, block_size, kv_heads, head] of vLLM's Triton attention backend.",
    upstream="vllm: v1/attention/ops/triton_reshape_and_cache_flash.py triton_reshape_and_cache_flash "
             "(reshape_and_cache_kernel_flash)",
    cases=(Case("prefill_T50", {"T": 50, "H": 2, "D": 256, "blocks": 8, "block_size": 16},
                source=ATTN_SRC["qwen3_5"] + "; 50 tokens into 8 pages of 16, every 7th padded"),
           Case("decode_T4", {"T": 4, "H": 8, "D": 128, "blocks": 16, "block_size": 16, "pad_at": 99},
                source=ATTN_SRC["llama3_1"] + "; 4 decode tokens")),
    dtypes=DTYPES, make_inputs=_kv_write_inputs,
    run=vllm_call(_kv_write_run), reference=_kv_write_reference,
    outputs=("key_cache", "value_cache"), inplace=("key_cache", "value_cache"),
    tolerance={"bf16": Tolerance(exact=True), "fp32": Tolerance(exact=True)})


# ================================================================================ mamba conv
CONV_SRC = {
    "qwen3_next": "Qwen3-Next / Qwen3.5 GDN layer conv (dim 2*16*128 + 32*128 = 8192, width 4, SiLU)",
    "mamba2": "Mamba-2 / Codestral conv (dim 8192 + 2*8*128 = 10240, width 4, SiLU)",
}


def _conv_weights(gen, dim, width, dtype, device):
    return (randn(gen, dim, width, dtype=dtype, device=device, scale=width ** -0.5),
            randn(gen, dim, dtype=dtype, device=device, scale=0.1))


def _conv_state_pool(gen, lines, dim, state_len, dtype, device):
    """vLLM's default conv-state layout: stored (lines, state_len, dim), seen as (lines, dim,
    state_len) with dim innermost."""
    return randn(gen, lines, state_len, dim, dtype=dtype, device=device).transpose(1, 2)


def _conv_fn_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    p = case.params
    dim, width, lens = p["dim"], p["width"], p["lens"]
    w, b = _conv_weights(gen, dim, width, dtype, device)
    x = {"x": randn(gen, sum(lens), dim, dtype=dtype, device=device),  # tokens x dim, as projected
         "weight": w, "bias": b,
         "conv_states": _conv_state_pool(gen, p["lines"], dim, width - 1, dtype, device),
         "cache_indices": torch.tensor(p["slots"], dtype=torch.int32, device=device),
         "has_initial_state": torch.tensor(p["init"], dtype=torch.bool, device=device),
         "query_start_loc": torch.tensor([0] + list(torch.tensor(lens).cumsum(0)), dtype=torch.int32,
                                         device=device)}
    x["out"] = torch.empty_like(x["x"])
    return x


def _conv(window: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """silu(bias + sum_j w[:, j] * window[:, j]) for window (dim, width)."""
    return F.silu(b + (w * window).sum(-1))


def _conv_fn_reference(x: dict, case: Case) -> dict:
    """Per sequence: its tokens after the previous width-1 inputs (the cached state when it has
    one, else zeros), a depthwise causal conv + SiLU per token; the state then holds the last
    width-1 inputs."""
    p = case.params
    width = p["width"]
    w, b = x["weight"].double(), x["bias"].double()
    out = torch.zeros(x["x"].shape, dtype=torch.float64)
    states = x["conv_states"].double().clone()
    qsl = x["query_start_loc"].tolist()
    for i, slot in enumerate(p["slots"]):
        seq = x["x"][qsl[i]:qsl[i + 1]].double().T                    # (dim, len)
        prev = states[slot] if p["init"][i] else torch.zeros(seq.shape[0], width - 1,
                                                             dtype=torch.float64)
        full = torch.cat([prev, seq], dim=1)
        for t in range(seq.shape[1]):
            out[qsl[i] + t] = _conv(full[:, t:t + width], w, b)
        states[slot] = full[:, -(width - 1):]
    return {"out": out, "conv_states": states}


def _conv_fn_run(x: dict, case: Case) -> None:
    from vllm.model_executor.layers.mamba.ops.causal_conv1d import causal_conv1d_fn
    y = causal_conv1d_fn(x["x"].transpose(0, 1), x["weight"], x["bias"], conv_states=x["conv_states"],
                         query_start_loc=x["query_start_loc"], cache_indices=x["cache_indices"],
                         has_initial_state=x["has_initial_state"], activation="silu")
    store(x, out=y.transpose(0, 1))


_kernel(
    name="lib_vllm_causal_conv1d", group="lib_vllm_mamba",
    models=("qwen3_next", "qwen3_5", "mamba2"),
    description="vllm causal_conv1d_fn (prefill): varlen sequences in one channel-last batch, each "
                "with its conv-state cache line (initial state for sequences continuing a chunked "
                "prefill, zeros for new ones), SiLU; the final states written back to the pool.",
    upstream="vllm: model_executor/layers/mamba/ops/causal_conv1d.py causal_conv1d_fn "
             "(_causal_conv1d_fwd_kernel)",
    cases=(Case("varlen_3seq", {"dim": 1024, "width": 4, "lens": [37, 2, 70], "slots": [5, 2, 7],
                                "init": [True, False, True], "lines": 9},
                source=CONV_SRC["qwen3_next"] + "; dim /8; sequences of 37, 2 and 70 tokens"),
           Case("full_dim", {"dim": 10240, "width": 4, "lens": [300, 129], "slots": [1, 3],
                             "init": [False, True], "lines": 4},
                quick=False, source=CONV_SRC["mamba2"])),
    dtypes=DTYPES, make_inputs=_conv_fn_inputs,
    run=vllm_call(_conv_fn_run), reference=_conv_fn_reference,
    outputs=("out", "conv_states"), inplace=("conv_states",),
    tolerance={"bf16": Tolerance(atol=1e-2, rtol=1e-2), "fp32": Tolerance(atol=1e-5, rtol=1.3e-5)},
    output_tolerance={})


def _conv_update_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    p = case.params
    dim, width = p["dim"], p["width"]
    w, b = _conv_weights(gen, dim, width, dtype, device)
    x = {"x": randn(gen, len(p["slots"]), dim, dtype=dtype, device=device),
         "weight": w, "bias": b,
         "conv_state": _conv_state_pool(gen, p["lines"], dim, width - 1, dtype, device),
         "conv_state_indices": torch.tensor(p["slots"], dtype=torch.int32, device=device)}
    x["out"] = torch.empty_like(x["x"])
    return x


def _conv_update_reference(x: dict, case: Case) -> dict:
    """One new token per sequence after its cached width-1 inputs; the state shifts by one."""
    w, b = x["weight"].double(), x["bias"].double()
    out = torch.zeros(x["x"].shape, dtype=torch.float64)
    states = x["conv_state"].double().clone()
    for i, slot in enumerate(case.params["slots"]):
        full = torch.cat([states[slot], x["x"][i].double()[:, None]], dim=1)
        out[i] = _conv(full, w, b)
        states[slot] = full[:, 1:]
    return {"out": out, "conv_state": states}


def _conv_update_run(x: dict, case: Case) -> None:
    from vllm.model_executor.layers.mamba.ops.causal_conv1d import causal_conv1d_update
    causal_conv1d_update(x["x"], x["conv_state"], x["weight"], x["bias"], "silu",
                         conv_state_indices=x["conv_state_indices"], out=x["out"])


_kernel(
    name="lib_vllm_causal_conv1d_update", group="lib_vllm_mamba",
    models=("qwen3_next", "qwen3_5", "mamba2"),
    description="vllm causal_conv1d_update (decode): one token per sequence against its cache line "
                "of the conv-state pool (line 0 is vLLM's null block), SiLU, the state shifted in "
                "place.",
    upstream="vllm: model_executor/layers/mamba/ops/causal_conv1d.py causal_conv1d_update "
             "(_causal_conv1d_update_kernel)",
    cases=(Case("decode_b5", {"dim": 1024, "width": 4, "slots": [3, 1, 8, 6, 2], "lines": 9},
                source=CONV_SRC["qwen3_next"] + "; dim /8; 5 decoding sequences"),
           Case("decode_b64_full", {"dim": 10240, "width": 4, "slots": list(range(1, 65)), "lines": 65},
                quick=False, source=CONV_SRC["mamba2"])),
    dtypes=DTYPES, make_inputs=_conv_update_inputs, run=vllm_call(_conv_update_run),
    reference=_conv_update_reference, outputs=("out", "conv_state"), inplace=("conv_state",),
    tolerance={"bf16": Tolerance(atol=1e-2, rtol=1e-2), "fp32": Tolerance(atol=1e-5, rtol=1.3e-5)})


# ================================================================================= Mamba-2 SSD
SSD_SRC = "Mamba-2 / Codestral-Mamba (128 heads x 64, d_state 128, 8 groups, chunk 256)"


def _chunks(lens: list[int], computed: list[int], chunk: int) -> tuple[list[int], list[int], list[int]]:
    """vLLM's chunking: chunks hold one sequence's tokens and end at multiples of `chunk` in the
    sequence's absolute positions (after its already computed tokens)."""
    cu, seq_idx, last, pos = [0], [], [], 0
    for i, (n, c) in enumerate(zip(lens, computed)):
        a, end = c, c + n
        while a < end:
            b = min(end, (a // chunk + 1) * chunk)
            seq_idx.append(i)
            pos += b - a
            cu.append(pos)
            a = b
        last.append(len(seq_idx) - 1)
    return cu, seq_idx, last


def _ssd_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    p = case.params
    T, nh, hd, ds, ng = sum(p["lens"]), p["heads"], p["head_dim"], p["d_state"], p["groups"]
    cu, seq_idx, last = _chunks(p["lens"], p["computed"], p["chunk"])
    i32 = dict(dtype=torch.int32, device=device)
    x = {"x": randn(gen, T, nh, hd, dtype=dtype, device=device),
         "dt": randn(gen, T, nh, dtype=dtype, device=device, scale=0.5, shift=-2.0),
         "A": -torch.exp(torch.rand(nh, generator=gen) * math.log(16)).to(device),
         "B": randn(gen, T, ng, ds, dtype=dtype, device=device, scale=0.3),
         "C": randn(gen, T, ng, ds, dtype=dtype, device=device, scale=0.3),
         "D": 1 + randn(gen, nh, dtype=torch.float32, device=device, scale=0.1),
         "dt_bias": randn(gen, nh, dtype=torch.float32, device=device, scale=0.5, shift=-1.0),
         "initial_states": randn(gen, len(p["lens"]), nh, hd, ds, dtype=torch.float32,
                                 device=device, scale=0.2),
         "cu_seqlens": torch.tensor([0] + list(torch.tensor(p["lens"]).cumsum(0)), **i32),
         "cu_chunk_seqlens": torch.tensor(cu, **i32), "seq_idx": torch.tensor(seq_idx, **i32),
         "last_chunk_indices": torch.tensor(last, **i32)}
    for i, c in enumerate(p["computed"]):
        if c == 0:
            x["initial_states"][i] = 0  # a new sequence starts from zeros, as vLLM passes it
    x["out"] = torch.empty_like(x["x"])
    x["final_states"] = torch.empty_like(x["initial_states"])
    return x


def _ssd_reference(x: dict, case: Case) -> dict:
    """The Mamba-2 recurrence token by token in fp64, per sequence and head: dt' = softplus(dt +
    dt_bias), h = exp(dt' A) h + dt' x B^T, y = h C + D x; the final state per sequence."""
    p = case.params
    nh, ng = p["heads"], p["groups"]
    out = torch.zeros(x["x"].shape, dtype=torch.float64)
    final = torch.zeros(x["initial_states"].shape, dtype=torch.float64)
    cu = x["cu_seqlens"].tolist()
    dt = F.softplus(x["dt"].double() + x["dt_bias"].double())
    A, D = x["A"].double(), x["D"].double()
    xs, Bs, Cs = x["x"].double(), x["B"].double(), x["C"].double()
    for i in range(len(cu) - 1):
        h = x["initial_states"][i].double().clone()                  # (heads, head_dim, d_state)
        g = torch.arange(nh) // (nh // ng)
        for t in range(cu[i], cu[i + 1]):
            decay = torch.exp(dt[t] * A)                                  # (heads,)
            h = h * decay[:, None, None] + (dt[t][:, None] * xs[t])[:, :, None] * Bs[t, g][:, None, :]
            out[t] = (h * Cs[t, g][:, None, :]).sum(-1) + D[:, None] * xs[t]
        final[i] = h
    return {"out": out, "final_states": final}


def _ssd_run(x: dict, case: Case) -> None:
    from vllm.model_executor.layers.mamba.ops.ssd_combined import mamba_chunk_scan_combined_varlen
    states = mamba_chunk_scan_combined_varlen(
        x["x"], x["dt"], x["A"], x["B"], x["C"], chunk_size=case.params["chunk"],
        cu_seqlens=x["cu_seqlens"], cu_chunk_seqlens=x["cu_chunk_seqlens"],
        last_chunk_indices=x["last_chunk_indices"], seq_idx=x["seq_idx"], out=x["out"], D=x["D"],
        z=None, dt_bias=x["dt_bias"], initial_states=x["initial_states"], dt_softplus=True,
        dt_limit=(0.0, float("inf")), state_dtype=torch.float32)
    store(x, final_states=states)


_kernel(
    name="lib_vllm_mamba_chunk_scan", group="lib_vllm_mamba", models=("mamba2",),
    description="vllm mamba_chunk_scan_combined_varlen (Mamba-2 SSD prefill): chunk cumsum, chunk "
                "states, state passing, C^T B per chunk, chunk scan, over varlen sequences chunked as "
                "vLLM chunks them (a sequence continuing a chunked prefill starts mid-chunk), "
                "softplus(dt + dt_bias), D skip, initial states; outputs and final states.",
    upstream="vllm: model_executor/layers/mamba/ops/ssd_combined.py "
             "mamba_chunk_scan_combined_varlen (_chunk_cumsum_fwd_kernel, _chunk_state_fwd_kernel, "
             "_state_passing_fwd_kernel, _bmm_chunk_fwd_kernel, _chunk_scan_fwd_kernel)",
    cases=(Case("varlen_2seq", {"lens": [100, 37], "computed": [0, 50], "heads": 8, "head_dim": 64,
                                "d_state": 128, "groups": 2, "chunk": 64},
                source=SSD_SRC + "; heads /16, groups /4, chunk /4; a new 100-token prompt and a "
                                 "chunked-prefill continuation (50 cached) of 37 tokens"),
           Case("prefill_full", {"lens": [600, 300], "computed": [0, 256], "heads": 128, "head_dim": 64,
                                 "d_state": 128, "groups": 8, "chunk": 256},
                quick=False, source=SSD_SRC)),
    dtypes=DTYPES, make_inputs=_ssd_inputs, run=vllm_call(_ssd_run), reference=_ssd_reference,
    outputs=("out", "final_states"),
    tolerance={"bf16": Tolerance(rmse=1e-2), "fp32": Tolerance(rmse=1e-5)})


def _ssu_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    p = case.params
    nh, hd, ds, ng, b = p["heads"], p["head_dim"], p["d_state"], p["groups"], len(p["slots"])
    x = {"state": randn(gen, p["lines"], nh, hd, ds, dtype=dtype, device=device, scale=0.2),
         "x": randn(gen, b, nh, hd, dtype=dtype, device=device),
         "dt": randn(gen, b, nh, dtype=dtype, device=device, scale=0.5, shift=-2.0),
         "A": -torch.exp(torch.rand(nh, generator=gen) * math.log(16)).to(device),
         "B": randn(gen, b, ng, ds, dtype=dtype, device=device, scale=0.3),
         "C": randn(gen, b, ng, ds, dtype=dtype, device=device, scale=0.3),
         "D": 1 + randn(gen, nh, dtype=torch.float32, device=device, scale=0.1),
         "dt_bias": randn(gen, nh, dtype=torch.float32, device=device, scale=0.5, shift=-1.0),
         "slots": torch.tensor(p["slots"], dtype=torch.int32, device=device)}
    x["out"] = torch.empty_like(x["x"])
    return x


def _ssu_reference(x: dict, case: Case) -> dict:
    p = case.params
    nh, hd, ng = p["heads"], p["head_dim"], p["groups"]
    g = torch.arange(nh) // (nh // ng)
    state = x["state"].double().clone()
    out = torch.zeros(x["x"].shape, dtype=torch.float64)
    dt = F.softplus(x["dt"].double() + x["dt_bias"].double())
    for i, s in enumerate(p["slots"]):
        xs = x["x"][i].double()
        h = state[s] * torch.exp(dt[i] * x["A"].double())[:, None, None] \
            + (dt[i][:, None] * xs)[:, :, None] * x["B"][i, g].double()[:, None, :]
        out[i] = (h * x["C"][i, g].double()[:, None, :]).sum(-1) + x["D"].double()[:, None] * xs
        state[s] = h
    return {"out": out, "state": state}


def _ssu_run(x: dict, case: Case) -> None:
    from vllm.model_executor.layers.mamba.ops.mamba_ssm import selective_state_update
    hd, ds = case.params["head_dim"], case.params["d_state"]
    # the per-head parameters broadcast over head_dim / d_state, as Mamba-2's decode passes them
    A = x["A"][:, None, None].expand(-1, hd, ds)
    dt = x["dt"][:, :, None].expand(-1, -1, hd)
    dt_bias = x["dt_bias"][:, None].expand(-1, hd)
    D = x["D"][:, None].expand(-1, hd)
    selective_state_update(x["state"], x["x"], dt, A, x["B"], x["C"], D, dt_bias, dt_softplus=True,
                           state_batch_indices=x["slots"], dst_state_batch_indices=x["slots"],
                           out=x["out"])


_kernel(
    name="lib_vllm_selective_state_update", group="lib_vllm_mamba", models=("mamba2",),
    description="vllm selective_state_update (Mamba-2 decode): one token per sequence updates its "
                "SSM state in the state pool (per-head A, dt, D broadcast as Mamba-2 passes them, "
                "softplus(dt + dt_bias)) and reads y = h C + D x.",
    upstream="vllm: model_executor/layers/mamba/ops/mamba_ssm.py selective_state_update "
             "(_selective_scan_update_kernel)",
    cases=(Case("decode_b4", {"heads": 8, "head_dim": 64, "d_state": 128, "groups": 2,
                              "slots": [3, 1, 6, 4], "lines": 7},
                source=SSD_SRC + "; heads /16; 4 decoding sequences"),
           Case("decode_b32_full", {"heads": 128, "head_dim": 64, "d_state": 128, "groups": 8,
                                    "slots": list(range(1, 33)), "lines": 33},
                quick=False, source=SSD_SRC)),
    dtypes=DTYPES, make_inputs=_ssu_inputs, run=vllm_call(_ssu_run), reference=_ssu_reference,
    outputs=("out", "state"), inplace=("state",),
    tolerance={"bf16": Tolerance(rmse=1e-2), "fp32": Tolerance(rmse=1e-5)})


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


# ============================================================================ vendored FLA GDN
GDN_SRC = "Qwen3-Next-80B-A3B / Qwen3.5 GDN layer (16 key / 32 value heads x 128)"


def _l2n(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def _gdn_inputs(case: Case, dtype: torch.dtype, device: str, gen: torch.Generator) -> dict:
    """Packed varlen tokens [1, T, heads, dim]; the recurrent state pool [slots, HV, V, K] (vLLM
    0.33's layout), slot 0 being vLLM's null block."""
    p = case.params
    T, H, HV, K, V = sum(p["lens"]), p["H"], p["HV"], 128, 128
    a_log = torch.log(torch.rand(HV, generator=gen) * 15 + 1)
    dt = torch.exp(torch.rand(HV, generator=gen) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
    dt_bias = dt + torch.log(-torch.expm1(-dt))                   # inverse softplus of dt
    g = -a_log.exp() * F.softplus(torch.randn(1, T, HV, generator=gen) + dt_bias)
    x = {"q": randn(gen, 1, T, H, K, dtype=dtype, device=device),
         "k": randn(gen, 1, T, H, K, dtype=dtype, device=device),
         "v": randn(gen, 1, T, HV, V, dtype=dtype, device=device),
         "g": g.to(device), "beta": torch.randn(1, T, HV, generator=gen).sigmoid().to(dtype).to(device),
         "state": randn(gen, p["lines"], HV, V, K, dtype=torch.float32, device=device, scale=0.5),
         "slots": torch.tensor(p["slots"], dtype=torch.int32, device=device),
         "cu_seqlens": torch.tensor([0] + list(torch.tensor(p["lens"]).cumsum(0)), dtype=torch.long,
                                    device=device)}
    x["o"] = torch.empty_like(x["v"])
    return x


def _gdn_reference(x: dict, case: Case) -> dict:
    """The gated delta rule token by token in fp64 (q, k L2-normalised, q scaled by K^-1/2), per
    sequence and value head, from the sequence's state in the pool (zeros where `init` says it
    starts fresh); the final state back into its slot."""
    p = case.params
    H, HV, K = p["H"], p["HV"], 128
    q, k, v = x["q"][0].double(), x["k"][0].double(), x["v"][0].double()
    g, beta = x["g"][0].double(), x["beta"][0].double()
    o = torch.zeros(x["v"].shape, dtype=torch.float64)
    state = x["state"].double().clone()
    cu = x["cu_seqlens"].tolist()
    for i, slot in enumerate(p["slots"]):
        for hv in range(HV):
            h = hv // (HV // H)
            s = state[slot, hv].T.clone() if p["init"][i] else torch.zeros(K, 128, dtype=torch.float64)
            for t in range(cu[i], cu[i + 1]):
                qs, ks = _l2n(q[t, h]) * K ** -0.5, _l2n(k[t, h])
                s = s * g[t, hv].exp()
                s = s + torch.outer(ks, beta[t, hv] * (v[t, hv] - ks @ s))
                o[0, t, hv] = qs @ s
            state[slot, hv] = s.T                                       # stored [V, K]
    return {"o": o, "state": state}


def _gdn_chunk_run(x: dict, case: Case) -> None:
    from vllm.third_party.flash_linear_attention.ops import chunk_gated_delta_rule
    p = case.params
    init = x["state"][x["slots"].long()]
    init[~torch.tensor(p["init"], device=init.device)] = 0
    o, final = chunk_gated_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"], initial_state=init,
                                      output_final_state=True, cu_seqlens=x["cu_seqlens"],
                                      use_qk_l2norm_in_kernel=True)
    x["state"][x["slots"].long()] = final.to(x["state"].dtype)
    store(x, o=o)


_kernel(
    name="lib_vllm_gdn_chunk", group="lib_vllm_gdn", models=("qwen3_next", "qwen3_5"),
    description="vllm's vendored FLA chunk_gated_delta_rule (GDN prefill, as Qwen3-Next's layer runs "
                "it off H100): chunk_local_cumsum, chunk_scaled_dot_kkt, solve_tril, recompute_w_u, "
                "chunk_gated_delta_rule_fwd_h, chunk_fwd_o, with in-kernel q/k L2 norm and grouped "
                "value heads; varlen sequences from their slots of the state pool [slot, HV, V, K].",
    upstream="vllm: third_party/flash_linear_attention/ops/chunk.py chunk_gated_delta_rule",
    cases=(Case("varlen_3seq", {"lens": [37, 83, 6], "H": 2, "HV": 4, "slots": [3, 1, 2],
                                "init": [True, False, True], "lines": 4},
                source=GDN_SRC + "; heads /8; sequences of 37, 83 and 6 tokens (a chunked-prefill "
                                 "continuation, a new prompt, a short continuation)"),
           Case("varlen_full", {"lens": [100, 257, 243], "H": 16, "HV": 32, "slots": [1, 2, 3],
                                "init": [False, True, False], "lines": 4}, quick=False, source=GDN_SRC)),
    dtypes=("bf16",), make_inputs=_gdn_inputs, run=vllm_call(_gdn_chunk_run), reference=_gdn_reference,
    outputs=("o", "state"), inplace=("state",), tolerance={"bf16": Tolerance(rmse=8e-3)})


def _gdn_recurrent_run(x: dict, case: Case) -> None:
    from vllm.third_party.flash_linear_attention.ops import fused_recurrent_gated_delta_rule
    o, _ = fused_recurrent_gated_delta_rule(
        x["q"], x["k"], x["v"], x["g"], x["beta"], initial_state=x["state"], inplace_final_state=True,
        cu_seqlens=x["cu_seqlens"], ssm_state_indices=x["slots"], use_qk_l2norm_in_kernel=True)
    store(x, o=o)


_kernel(
    name="lib_vllm_gdn_recurrent", group="lib_vllm_gdn", models=("qwen3_next", "qwen3_5"),
    description="vllm's vendored FLA fused_recurrent_gated_delta_rule (GDN decode): one token per "
                "sequence read from and written back to its slot of the state pool [slot, HV, V, K] "
                "in place, in-kernel q/k L2 norm, grouped value heads.",
    upstream="vllm: third_party/flash_linear_attention/ops/fused_recurrent.py "
             "fused_recurrent_gated_delta_rule (fused_recurrent_gated_delta_rule_fwd_kernel)",
    cases=(Case("decode_b4", {"lens": [1, 1, 1, 1], "H": 16, "HV": 32, "slots": [3, 1, 4, 2],
                              "init": [True] * 4, "lines": 5},
                source=GDN_SRC + "; full heads, 4 decoding sequences"),),
    dtypes=("bf16", "fp32"), make_inputs=_gdn_inputs,
    run=vllm_call(_gdn_recurrent_run), reference=_gdn_reference,
    outputs=("o", "state"), inplace=("state",),
    tolerance={"bf16": Tolerance(rmse=8e-3), "fp32": Tolerance(rmse=1e-5)})


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


# ================================================================================ MLA decode
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
