"""Kernel families a HuggingFace model config calls for, and the suite kernels that cover them.

The signals (docs: models.md's table) are config fields:

  layer_types / full_attention_interval / linear_*   Gated DeltaNet + causal conv1d + gated RMSNorm,
                                                     and (gated) attention for the full layers
  num_experts / num_local_experts / n_routed_experts fused MoE + top-k routing (grouped if n_group)
  kv_lora_rank / q_lora_rank                         MLA
  rope_scaling.mrope_section                         mRoPE          partial_rotary_factor: partial RoPE
  state_size / ssm_state_size / conv_kernel          Mamba SSM: Mamba-2 SSD (n_groups / chunk_size /
                                                     a Mamba-2 model_type) or the Mamba-1 selective scan,
                                                     selective state update, causal conv1d
  attn_logit_softcapping / final_logit_softcapping   soft-capped attention / logits
  sliding_window (unless use_sliding_window: false)  sliding-window attention
  attention_chunk_size                               chunked local attention
  quantization_config.quant_method                   fp8 (block-scaled or w8a8), mxfp4, int4 (awq/gptq)
and every model needs its norm (RMSNorm, or LayerNorm where only layer_norm_eps is given), its MLP
activation (SiLU-and-mul or GeGLU by hidden_act; a plain GELU MLP in encoders), attention with RoPE
(ALiBi or learned absolute positions where the config says so), and, unless it is an encoder-only
model (BERT-like: bidirectional attention, no decode, no sampling), paged decode and sampling.
A multimodal config's `text_config` is read as the language model. A family whose kernels are not
all in the suite is "not covered by the suite".
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError

#: family -> the suite kernels that cover it (empty: the suite has no kernel for it yet)
FAMILY_KERNELS: dict[str, tuple[str, ...]] = {
    "RMSNorm": ("rmsnorm", "fused_add_rmsnorm"),
    "SiLU-and-mul": ("silu_and_mul",),
    "GeGLU (GELU-and-mul)": (),
    "attention prefill (gated, varlen)": ("attn_prefill_gqa_gated",),
    "attention prefill (causal GQA, no output gate)": (),
    "attention (paged decode)": ("attn_paged_decode",),
    "sampling (top-k/top-p)": ("sampling_topk_topp_mask", "sampling_draw"),
    "RoPE (NeoX)": ("rope_neox_partial",),
    "partial RoPE": ("rope_neox_partial",),
    "interleaved RoPE": (),
    "mRoPE": ("mrope",),
    "Gated DeltaNet": ("gdn_chunk_cumsum", "gdn_chunk_scaled_dot_kkt", "gdn_solve_tril", "gdn_wy_recompute",
                       "gdn_chunk_state", "gdn_chunk_output", "gdn_l2norm", "gdn_gating",
                       "gdn_fused_recurrent"),
    "gated RMSNorm": ("gated_rmsnorm",),
    "gated RMSNorm (Mamba-2, per group)": (),
    "causal conv1d": ("causal_conv1d_prefill", "causal_conv1d_update"),
    "fused MoE": ("moe_align_block_size", "moe_fused_gemm", "moe_sum"),
    "top-k softmax routing": ("moe_topk_softmax",),
    "grouped top-k routing": (),
    "shared-expert sigmoid gate": (),
    "fp8 block-scaled GEMM": (),
    "dense GEMM": ("gemm_bf16",),
    "fp8 GEMM (w8a8, per-tensor scales)": ("gemm_fp8_w8a8",),
    "MLA": (),
    "LayerNorm": (),
    "GELU (non-gated MLP)": (),
    "attention (bidirectional, encoder)": (),
    "ALiBi attention": (),
    "attention with sinks": (),
    "chunked local attention": (),
    "clamped SwiGLU (swiglu_limit)": (),
    "sigmoid top-k routing": (),
    "MXFP4 GEMM": (),
    "int4 weight-only GEMM (w4a16)": (),
    "Mamba-1 selective scan": (),
    "Mamba-2 SSD": (),
    "selective state update": (),
    "soft-capped attention": (),
    "sliding-window attention": (),
}


@dataclass
class Family:
    name: str
    why: list[str]                       # the config fields that call for it
    kernels: list[str] = field(default_factory=list)  # suite kernels covering it ([] = not covered)

    @property
    def covered(self) -> bool:
        return bool(self.kernels)


@dataclass
class ConfigNeeds:
    path: str
    model_type: str
    multimodal: bool
    families: list[Family]

    @property
    def kernels(self) -> list[str]:
        return list(dict.fromkeys(k for f in self.families for k in f.kernels))

    @property
    def not_covered(self) -> list[str]:
        return [f.name for f in self.families if not f.covered]


def load_config(path: str | os.PathLike[str]) -> tuple[dict[str, Any], bool]:
    """The (merged) config dict, and whether it was multimodal (had a text_config)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such config file") from None
    except IsADirectoryError:
        raise ConfigError(f"{p}: is a directory; give the path of a config.json") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: cannot read config ({exc})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{p}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except (ValueError, RecursionError) as exc:  # e.g. an integer of thousands of digits
        raise ConfigError(f"{p}: cannot read config ({' '.join(str(exc).split())[:120]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: a model config is a JSON object, not {type(data).__name__}")
    text = data.get("text_config")
    multimodal = isinstance(text, dict)
    cfg = {**data, **text} if multimodal else dict(data)
    if not multimodal and text is not None:
        raise ConfigError(f"{p}: text_config must be an object")
    size_keys = ("hidden_size", "d_model", "n_embd", "dim")
    if not any(isinstance(cfg.get(k), int) for k in size_keys) or \
            ("model_type" not in cfg and "architectures" not in cfg):
        raise ConfigError(f"{p}: not a HuggingFace model config (no model_type/architectures and "
                          f"hidden size field {'/'.join(size_keys)})")
    return cfg, multimodal


def _list(cfg: dict, key: str) -> list:
    v = cfg.get(key)
    return v if isinstance(v, list) else []


def _num(cfg: dict, *keys: str) -> tuple[str, Any] | None:
    for k in keys:
        v = cfg.get(k)
        if v is not None and not isinstance(v, bool) and isinstance(v, (int, float)) and v > 0:
            return k, v
    return None


#: model types of encoder-only (bidirectional) models
ENCODERS = frozenset({"bert", "roberta", "xlm-roberta", "deberta", "deberta-v2", "electra", "distilbert",
                      "albert", "camembert", "mpnet", "modernbert", "nomic_bert", "xlm", "ernie"})
#: model types with learned absolute positions, ALiBi or no positional encoding instead of RoPE
NO_ROPE = {"gpt2": "learned absolute positions", "opt": "learned absolute positions",
           "gpt_bigcode": "learned absolute positions", "bloom": "ALiBi", "mpt": "ALiBi",
           "jamba": "none (the Mamba layers carry position)"}
#: model types whose SSM layers are Mamba-2 (SSD)
MAMBA2 = frozenset({"mamba2", "bamba", "nemotron_h", "falcon_h1", "granitemoehybrid", "zamba2"})
_ENCODER_HEADS = ("ForMaskedLM", "ForSequenceClassification", "ForTokenClassification",
                  "ForQuestionAnswering", "ForMultipleChoice", "ForPreTraining")


def _encoder_only(cfg: dict[str, Any], model_type: str) -> bool:
    if cfg.get("is_decoder") is True or cfg.get("is_encoder_decoder") is True:
        return False
    archs = [str(a) for a in _list(cfg, "architectures") if isinstance(a, str)]
    return model_type in ENCODERS or (bool(archs) and all(a.endswith(_ENCODER_HEADS) for a in archs))


def infer_families(cfg: dict[str, Any]) -> list[Family]:
    fams: dict[str, list[str]] = {}

    def need(name: str, why: str) -> None:
        fams.setdefault(name, [])
        if why not in fams[name]:
            fams[name].append(why)

    layer_types = [str(t) for t in _list(cfg, "layer_types") if isinstance(t, str)]
    linear = sorted(k for k in cfg if k.startswith("linear_") and cfg[k] is not None)
    hybrid_gdn = any("linear" in t for t in layer_types) or bool(linear) or \
        _num(cfg, "full_attention_interval") is not None
    ssm = _num(cfg, "state_size", "ssm_state_size", "mamba_d_state")
    model_type = str(cfg.get("model_type", ""))
    pure_ssm = (ssm is not None or model_type.startswith("mamba")) and not layer_types and \
        _num(cfg, "num_attention_heads", "attn_layer_period") is None
    has_attention = not pure_ssm

    encoder = _encoder_only(cfg, model_type)
    if ssm is None and "rms_norm_eps" not in cfg and \
            any(k in cfg for k in ("layer_norm_eps", "layer_norm_epsilon", "layernorm_epsilon")):
        need("LayerNorm", next(k for k in ("layer_norm_eps", "layer_norm_epsilon", "layernorm_epsilon") if k in cfg))
    else:
        need("RMSNorm", "every model")
    need("dense GEMM", "every model (projections, lm_head)")
    act = str(cfg.get("hidden_act") or cfg.get("hidden_activation") or "silu").lower()
    if encoder:
        need("GELU (non-gated MLP)" if "gelu" in act else "SiLU-and-mul", f"hidden_act={act} (encoder MLP)")
    elif cfg.get("swiglu_limit") is not None:
        need("clamped SwiGLU (swiglu_limit)", f"swiglu_limit={cfg['swiglu_limit']}")
    elif not pure_ssm or _num(cfg, "intermediate_size") is not None:  # a gated MLP
        if "gelu" in act:
            need("GeGLU (GELU-and-mul)", f"hidden_act={act}")
        else:
            need("SiLU-and-mul", f"hidden_act={act}")
    if not encoder:
        need("sampling (top-k/top-p)", "every model")
    if hybrid_gdn:
        why = ", ".join((["layer_types"] if layer_types else []) + linear[:3] +
                        (["full_attention_interval"] if "full_attention_interval" in cfg else []))
        for f in ("Gated DeltaNet", "causal conv1d", "gated RMSNorm"):
            need(f, why)
    mla = cfg.get("kv_lora_rank") is not None
    if has_attention and encoder:
        need("attention (bidirectional, encoder)", f"model_type={model_type}" if model_type in ENCODERS
             else "architectures")
    elif has_attention and not mla:  # MLA replaces GQA attention (its family below)
        why = "hybrid full-attention layers" if hybrid_gdn else "num_attention_heads"
        gated = hybrid_gdn or bool(cfg.get("attn_output_gate"))
        need("attention prefill (gated, varlen)" if gated else
             "attention prefill (causal GQA, no output gate)", why)
        need("attention (paged decode)", why)
    if has_attention and model_type == "gpt_oss":
        need("attention with sinks", "model_type=gpt_oss (learned per-head sinks)")
    if _num(cfg, "attention_chunk_size") is not None:
        need("chunked local attention", f"attention_chunk_size={cfg['attention_chunk_size']}")
    positions = "ALiBi" if cfg.get("alibi") is True else NO_ROPE.get(model_type)
    if str(cfg.get("position_embedding_type", "")).lower() == "absolute" or encoder:
        positions = positions or "learned absolute positions"
    if has_attention and positions == "ALiBi":
        need("ALiBi attention", "alibi" if cfg.get("alibi") is True else f"model_type={model_type}")
    rope = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    rope = rope if isinstance(rope, dict) else {}
    if "mrope_section" in rope:
        need("mRoPE", "rope_scaling.mrope_section" + (" (interleaved)" if rope.get("mrope_interleaved") else ""))
    prf = cfg.get("partial_rotary_factor", rope.get("partial_rotary_factor"))
    if isinstance(prf, (int, float)) and 0 < prf < 1:
        need("partial RoPE", f"partial_rotary_factor={prf}")
    if cfg.get("rope_interleave"):
        need("interleaved RoPE", "rope_interleave")
    if has_attention and not positions and not any(f in fams for f in ("mRoPE", "partial RoPE", "interleaved RoPE")):
        if not mla:  # MLA carries its own rotary part
            need("RoPE (NeoX)", "rope_theta" if "rope_theta" in cfg else "attention layers")
    moe = _num(cfg, "num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
    if moe is not None and moe[1] > 1:
        need("fused MoE", f"{moe[0]}={moe[1]}")
        grouped = _num(cfg, "n_group")
        if grouped is not None and grouped[1] > 1:
            need("grouped top-k routing", f"n_group={grouped[1]}")
        elif str(cfg.get("scoring_func", "")).lower() == "sigmoid":
            need("sigmoid top-k routing", "scoring_func=sigmoid")
        else:
            topk = _num(cfg, "num_experts_per_tok", "moe_topk", "top_k")
            need("top-k softmax routing", f"{topk[0]}={topk[1]}" if topk else moe[0])
        if _num(cfg, "shared_expert_intermediate_size") is not None:
            need("shared-expert sigmoid gate", "shared_expert_intermediate_size")
    if mla:
        need("MLA", "kv_lora_rank" + (", q_lora_rank" if cfg.get("q_lora_rank") is not None else ""))
        if _num(cfg, "qk_rope_head_dim") is not None:
            need("interleaved RoPE", "qk_rope_head_dim (MLA's rotary part)")
    quant = cfg.get("quantization_config")
    method = str(quant.get("quant_method", "")).lower() if isinstance(quant, dict) else ""
    why = f"quantization_config.quant_method={method}"
    if "fp8" in method:
        need("fp8 block-scaled GEMM" if quant.get("weight_block_size") else
             "fp8 GEMM (w8a8, per-tensor scales)", why)
    elif "mxfp4" in method:
        need("MXFP4 GEMM", why + (" (MoE experts)" if moe is not None else ""))
    elif method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        need("int4 weight-only GEMM (w4a16)", why)
    if ssm is not None:
        mamba2 = model_type in MAMBA2 or any(k in cfg for k in ("n_groups", "mamba_n_groups", "chunk_size",
                                                                 "mamba_chunk_size", "ssm_n_groups"))
        families = (("Mamba-2 SSD", "selective state update", "causal conv1d", "gated RMSNorm (Mamba-2, per group)")
                    if mamba2 else ("Mamba-1 selective scan", "selective state update", "causal conv1d"))
        for f in families:
            need(f, f"{ssm[0]}={ssm[1]}")
    if cfg.get("attn_logit_softcapping") or cfg.get("final_logit_softcapping"):
        need("soft-capped attention", ", ".join(k for k in ("attn_logit_softcapping",
                                                            "final_logit_softcapping") if cfg.get(k)))
    if (cfg.get("sliding_window") and cfg.get("use_sliding_window", True) is not False) or \
            any("sliding" in t for t in layer_types):
        need("sliding-window attention", "sliding_window" if cfg.get("sliding_window") else "layer_types")
    return [Family(name, why) for name, why in fams.items()]


def config_needs(path: str | os.PathLike[str], suite_kernels: set[str] | None = None) -> ConfigNeeds:
    """Read a config and map its families to suite kernels; a family is covered only when every
    kernel it maps to is in `suite_kernels` (default: the registered suite)."""
    cfg, multimodal = load_config(path)
    if suite_kernels is None:
        from ..conformance.runner import load_suite
        suite_kernels = set(load_suite())
    fams = infer_families(cfg)
    for f in fams:
        ks = FAMILY_KERNELS.get(f.name, ())
        f.kernels = list(ks) if ks and all(k in suite_kernels for k in ks) else []
    return ConfigNeeds(str(path), str(cfg.get("model_type", "?")), multimodal, fams)
