"""Kernel families a HuggingFace model config calls for, and the suite kernels that cover them.

A config is read the way the model is built: the dict goes through transformers' own config class
for its model_type (`CONFIG_MAPPING[model_type](**config)`), and every fact is read from the
resulting object (a multimodal config's text model), so a key the file leaves out has the value
the class gives it (Gemma-3's activation, Qwen3.5's head counts) and hand-written defaults play no
part. models.md's table lists the signals; beyond it:

  layer_types          the mixer of every layer. transformers names every non-attention mixer
                       "linear_attention", and what that is depends on the model type (LAYER_MIXERS):
                       Gated DeltaNet in Qwen3-Next / Qwen3.5, a Mamba-2 mixer in Nemotron-H and
                       Granite-4.0-H, Mamba-1 in Jamba, lightning attention in MiniMax, Kimi Delta
                       Attention in Kimi-Linear (for a model type no table knows, the linear-attention
                       kernel its modeling code asks the kernel hub for: HUB_MIXERS);
                       "indexed_attention" is attention whose queries see
                       the top-k keys of a lightning indexer (DeepSeek-V3.2, GLM-5)
  MLP                  the activation field (or the model type's own, FIXED_ACT), and whether a gate
                       multiplies the up projection: read off the model transformers builds from the
                       config with one layer on the meta device (`structure`), else NON_GATED_MLP
  MoE routing          by model type (ROUTING, ROUTING_IF), as its transformers router computes it:
                       softmax top-k, top-k then sigmoid (Llama 4), or sigmoid scores with a
                       correction bias and group-limited top-k (DeepSeek-V3, GLM-4.5, Nemotron-H)
  positions            RoPE (NeoX; partial; interleaved for MLA; mRoPE) unless the model type has none
                       (NO_ROPE) or turns it off (Granite-4.0-H without position_embedding_type
                       "rope"); Llama 4 rotates adjacent pairs, but serving stacks permute its q/k
                       weights at load time and rotate halves (NEOX_AFTER_PERMUTE)
  quantization_config  fp8 (quant_method fp8, or compressed-tensors / modelopt groups of 8-bit
                       floats), NVFP4, MXFP4, int4, int8 (compressed-tensors int groups, or the
                       block-INT8 / channel-INT8 checkpoints' blockwise_int8 / w8a8_int8); the MoE
                       experts of a quantized MoE model are a family of their own
  MTP layers           num_nextn_predict_layers / mtp_num_hidden_layers > 0: the model ships a draft
                       for speculative decoding, verified by the rejection sampler
  adapter configs      a PEFT adapter_config.json with peft_type LORA: the multi-LoRA kernels (shrink,
                       expand); its base model is named, not classified (its own config.json says)
What the tables do not know (a model type transformers does not know, a layer type, an activation,
a MoE router, a quantization scheme) is reported as "cannot classify: <what>", a family no suite
kernel covers, so such a model is never called ready.
"""
from __future__ import annotations

import json
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError

#: family -> the suite kernels that cover it (empty: the suite has no kernel for it yet)
FAMILY_KERNELS: dict[str, tuple[str, ...]] = {
    "RMSNorm": ("rmsnorm", "fused_add_rmsnorm"),
    "RMSNorm (residual added outside the norm)": ("rmsnorm",),
    "SiLU-and-mul": ("silu_and_mul",),
    "GeGLU (tanh GELU-and-mul)": ("gelu_tanh_and_mul",),
    "GeGLU (exact GELU-and-mul)": (),
    # vLLM's Triton attention backend: one kernel for prefill and decode over the paged KV cache,
    # written by the cache-write kernel; small decode batches split the context (split-KV)
    "attention prefill (gated, varlen)": ("attn_prefill_gqa_gated", "kv_cache_write"),
    "attention prefill (causal GQA, no output gate)": ("unified_attention", "kv_cache_write"),
    "attention (paged decode)": ("unified_attention", "unified_attention_split_kv"),
    # vLLM 0.33's model runner: temperature, top-k / top-p and the draw run as Triton every step
    "sampling (top-k/top-p)": ("sampling_temperature", "sampling_topk_topp_pivot", "sampling_gumbel"),
    "model runner inputs (positions, slot mapping)": ("runner_positions_slot_mapping",),
    "speculative decoding (rejection sampler)": ("spec_rejection_greedy", "spec_rejection_random", "spec_expand",
                                                 "spec_recovered_tokens"),
    "RoPE (NeoX)": ("rope_neox_partial",),
    "partial RoPE": ("rope_neox_partial",),
    "interleaved RoPE": ("rope_gptj_yarn",),
    "mRoPE": ("mrope",),
    "Gated DeltaNet": ("gdn_chunk_cumsum", "gdn_chunk_scaled_dot_kkt", "gdn_solve_tril", "gdn_wy_recompute",
                       "gdn_chunk_state", "gdn_chunk_output", "gdn_l2norm", "gdn_gating",
                       "gdn_fused_recurrent"),
    "gated RMSNorm": ("gated_rmsnorm",),
    "gated RMSNorm, norm after gate (Mamba-2)": ("gated_rmsnorm_grouped",),
    "causal conv1d": ("causal_conv1d_prefill", "causal_conv1d_update"),
    "fused MoE": ("moe_align_block_size", "moe_fused_gemm", "moe_sum"),
    "fused MoE with quantized experts (align, combine)": ("moe_align_block_size", "moe_sum"),
    "top-k softmax routing": ("moe_topk_softmax",),
    "grouped top-k routing": ("moe_grouped_topk_sigmoid",),
    "top-k sigmoid routing": ("moe_topk_sigmoid",),
    "top-k softmax routing with a correction bias": (),  # ERNIE-4.5, LongCat-Flash
    "grouped top-k routing with softmax scores": (),     # Mistral-Large-3/4
    "shared-expert sigmoid gate": ("shared_expert_sigmoid_gate",),
    "fp8 block-scaled GEMM": ("gemm_fp8_block_w8a8", "fp8_per_token_group_quant"),
    "fp8 block-scaled MoE experts": ("moe_fused_gemm_fp8_block", "fp8_per_token_group_quant"),
    "dense GEMM": ("gemm_bf16",),
    "fp8 GEMM (w8a8, per-token/per-channel scales)": ("gemm_fp8_w8a8",),
    "fp8 weight-only GEMM (w8a16)": (),
    "int8 block-scaled GEMM": ("gemm_int8_block_w8a8", "int8_per_token_group_quant"),
    "int8 GEMM (w8a8, per-channel scales)": (),   # vLLM: CUTLASS scaled_mm, C++ activation quantisation
    "int8 MoE experts (w8a8)": (),                # vLLM: fused_moe_kernel in int8 after per_token_quant_int8
    "fp8 MoE experts (per-tensor/per-channel scales)": (),
    "MLA decode (latent cache)": ("mla_decode", "mla_cache_write"),
    # chunked prefill: new tokens and cached-context chunks attended apart, merged by log-sum-exp
    "MLA prefill": ("mla_prefill", "merge_attn_states"),
    "LoRA adapters (shrink / expand)": ("lora_shrink", "lora_expand"),
    "LayerNorm": ("layernorm",),
    "GELU (non-gated MLP)": ("gelu",),
    "ReLU² (non-gated MLP)": ("relu2",),
    "ReLU²-and-mul (gated MLP)": (),
    "ReLU-and-mul (gated MLP)": (),
    "attention (bidirectional, encoder)": ("encoder_attention",),
    "cross-attention (decoder over the encoder's output)": ("unified_attention",),
    "attention with relative position bias": (),
    "relative attention (Transformer-XL)": (),
    "ReLU (non-gated MLP)": (),
    "ALiBi attention": ("unified_attention",),
    "attention with sinks": ("unified_attention",),
    # chunk-local attention runs as chunk-local virtual sequences through the same kernel
    "chunked local attention": ("unified_attention",),
    "clamped SwiGLU (swiglu_limit)": (),
    "clamped SwiGLU fused in the MXFP4 experts": ("moe_mxfp4_gemm",),
    "MXFP4 GEMM": (),
    "MXFP4 MoE experts": ("moe_mxfp4_gemm",),
    "NVFP4 GEMM": (),
    "int4 weight-only GEMM (w4a16)": (),
    "Mamba-1 selective scan": (),
    "Mamba-2 SSD": ("mamba2_ssd_prefill",),
    "selective state update (Mamba-2)": ("mamba2_selective_state_update",),
    "selective state update (Mamba-1)": ("mamba1_selective_state_update",),
    "lightning attention (MiniMax linear attention)": ("lightning_attn_prefill", "lightning_attn_decode"),
    "soft-capped attention": ("unified_attention",),
    "sliding-window attention": ("unified_attention",),
    # DeepSeek Sparse Attention: a lightning indexer scores the keys, each query attends its top-k
    "indexed sparse attention (lightning indexer, top-k keys)": (),
    "Kimi Delta Attention": (),
}
UNCLASSIFIED = "cannot classify"


@dataclass
class Family:
    name: str
    why: list[str]                       # the config facts that call for it
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

    @property
    def unclassified(self) -> list[str]:
        """What the config says that this module cannot map to kernels, one "cannot classify: ..." each."""
        return [f.name for f in self.families if f.name.startswith(UNCLASSIFIED)]


def load_config(path: str | os.PathLike[str]) -> tuple[dict[str, Any], bool]:
    """The config dict as the file has it, and whether it is multimodal (has a text_config)."""
    p = Path(path)
    try:
        from ..fileio import read_text  # a named pipe or device is refused, not read forever
        data = json.loads(read_text(p, "config file", 16 << 20))
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
    if isinstance(data.get("peft_type"), str):  # a PEFT adapter_config.json: what it adds to its base model
        return data, False
    text = data.get("text_config")
    if text is not None and not isinstance(text, dict):
        raise ConfigError(f"{p}: text_config must be an object")
    merged = {**data, **(text or {})}
    size_keys = ("hidden_size", "d_model", "n_embd", "dim")
    has_size = any(isinstance(merged.get(k), int) for k in size_keys) or "text_config" in data
    if not (has_size and ("model_type" in merged or "architectures" in merged)) \
            and not _known_model_type(data.get("model_type")):  # sizes under other names (XLM's emb_dim)
        raise ConfigError(f"{p}: not a HuggingFace model config (no model_type/architectures and "
                          f"hidden size field {'/'.join(size_keys)})")
    return data, isinstance(text, dict) or isinstance(data.get("vision_config"), dict)


def _known_model_type(model_type: Any) -> bool:
    """Whether transformers has a config class for `model_type` (its fields are then its own)."""
    if not isinstance(model_type, str) or not model_type:
        return False
    try:
        from transformers import CONFIG_MAPPING
    except ImportError:
        return False
    return model_type in CONFIG_MAPPING


def text_model(data: dict[str, Any], where: str = "config") -> tuple[Any | None, str]:
    """(the text model's transformers config object, "") or (None, what cannot be classified)."""
    mt = data.get("model_type")
    if not isinstance(mt, str) or not mt:
        return None, f"{UNCLASSIFIED}: the config names no model_type"
    import transformers
    from transformers import CONFIG_MAPPING
    from ..models.hfconfig import config_object, quiet_transformers
    if mt not in CONFIG_MAPPING:
        return None, (f"{UNCLASSIFIED}: model_type '{mt}' is not known to the installed transformers "
                      f"{transformers.__version__}")
    try:
        with quiet_transformers():  # its notes on the values go to the user as one line, below
            obj = config_object(mt, {k: v for k, v in data.items() if k != "model_type"})
            return obj.get_text_config(decoder=True), ""  # the decoder's, where there is also a text encoder
    except Exception as exc:  # transformers' own validation of the values
        msg = " ".join(str(exc).split())[:200]
        raise ConfigError(f"{where}: transformers rejects this {mt} config: {type(exc).__name__}: {msg}") from None


#: model types of encoder-only (bidirectional) models
ENCODERS = frozenset({"bert", "roberta", "xlm-roberta", "deberta", "deberta-v2", "electra", "distilbert",
                      "albert", "camembert", "mpnet", "modernbert", "nomic_bert", "xlm", "ernie"})
_ENCODER_HEADS = ("ForMaskedLM", "ForSequenceClassification", "ForTokenClassification",
                  "ForQuestionAnswering", "ForMultipleChoice", "ForPreTraining")
#: model types whose attention has no rotary embedding, and what it has instead
NO_ROPE = {"gpt2": "learned absolute positions", "opt": "learned absolute positions",
           "gpt_bigcode": "learned absolute positions", "bloom": "ALiBi", "mpt": "ALiBi",
           "jamba": "none (the Mamba layers carry position)",
           "zamba": "none (the Mamba layers carry position)",
           "nemotron_h": "none (no rotary embedding; the Mamba layers carry position)"}
#: model types that rotate adjacent pairs (GPT-J style) rather than halves (NeoX style), but whose q/k
#: weights serving stacks permute at load time so that rotating halves gives the same result
NEOX_AFTER_PERMUTE = {"llama4_text": "llama4_text rotates adjacent pairs; vLLM permutes the q/k weights at load "
                                     "and rotates halves (Llama4ForCausalLM.permute_qk_weight_for_rotary)"}
#: config fields that give the number of multi-token-prediction layers a checkpoint ships
MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")
#: model types with LayerNorm (not RMSNorm), and with a non-gated MLP (up, act, down)
LAYERNORM = frozenset({"gpt2", "opt", "gpt_bigcode", "bloom", "mpt", "falcon", "gpt_neox", "gptj", "phi",
                       "starcoder2", "persimmon", "jais2"})
NON_GATED_MLP = LAYERNORM | {"nemotron", "nemotron_h", "arcee", "nanochat", "cosmos3_edge_text"}
#: model types with LayerNorm and a gated MLP (DBRX's GLU experts)
LAYERNORM_GATED = frozenset({"dbrx"})
#: model types that scale the residual stream before adding to it, so the add is not fused into the norm
SCALED_RESIDUAL = {**dict.fromkeys(("granite", "granitemoe", "granitemoeshared", "granitemoehybrid"),
                                   "residual_multiplier scales each block's output"),
                   "falcon_h1": "the attention and Mamba branches are scaled by their multipliers and summed",
                   "minimax": "the residual and the block output are scaled by the layer's alpha / beta factors"}
FIXED_ACT = {"bloom": "gelu", "mpt": "gelu", "falcon": "gelu",
             "lfm2": "silu", "lfm2_moe": "silu",  # Lfm2MLP: w2(silu(w1 x) * w3 x), no activation field
             "esm": "gelu"}  # EsmIntermediate: ESM's own erf GELU, no activation field

#: dense quantized GEMM family -> the family of a MoE model's routed experts in the same format
MOE_QUANT = {"fp8 block-scaled GEMM": "fp8 block-scaled MoE experts",
             "fp8 GEMM (w8a8, per-token/per-channel scales)": "fp8 MoE experts (per-tensor/per-channel scales)",
             "int8 block-scaled GEMM": "int8 MoE experts (w8a8)",
             "int8 GEMM (w8a8, per-channel scales)": "int8 MoE experts (w8a8)"}
#: what "fused MoE" becomes when the experts are quantized (their GEMM is the experts' family)
QUANT_MOE = "fused MoE with quantized experts (align, combine)"

GDN, MAMBA1, MAMBA2, LIGHTNING = "Gated DeltaNet", "Mamba-1", "Mamba-2", "lightning attention"
INDEXED, KDA = "indexed sparse attention", "Kimi Delta Attention"
ATTN, SLIDING, CHUNKED, MOE_LAYER, MLP_LAYER = "attention", "sliding", "chunked", "MoE layer", "MLP layer"
#: layer types every model type may use
COMMON_LAYERS = {"full_attention": (ATTN,), "sliding_attention": (ATTN, SLIDING), "chunked_attention": (ATTN, CHUNKED),
                 # transformers' name for attention with a lightning indexer (DeepSeek-V3.2, GLM-5 ...)
                 "indexed_attention": (ATTN, INDEXED)}
#: what each model type's other layer types are (as its transformers config class names them)
LAYER_MIXERS: dict[str, dict[str, tuple[str, ...]]] = {
    "qwen3_next": {"linear_attention": (GDN,)},
    "qwen3_5_text": {"linear_attention": (GDN,)},
    "qwen3_5_moe_text": {"linear_attention": (GDN,)},
    "mamba": {"linear_attention": (MAMBA1,)},
    "falcon_mamba": {"linear_attention": (MAMBA1,)},
    "jamba": {"linear_attention": (MAMBA1,)},
    "mamba2": {"linear_attention": (MAMBA2,)},
    "bamba": {"linear_attention": (MAMBA2,)},
    "granitemoehybrid": {"linear_attention": (MAMBA2,)},
    "nemotron_h": {"linear_attention": (MAMBA2,), "moe": (MOE_LAYER,), "mlp": (MLP_LAYER,)},
    "falcon_h1": {"hybrid": (ATTN, MAMBA2)},  # attention and Mamba-2 side by side in every layer
    "zamba2": {"linear_attention": (MAMBA2,), "hybrid": (MAMBA2, ATTN)},
    "minimax": {"linear_attention": (LIGHTNING,)},
    "olmo_hybrid": {"linear_attention": (GDN,)},
    # Zamba: Mamba-1 mixers (a selective scan per head), and hybrid layers of one beside shared attention
    "zamba": {"linear_attention": (MAMBA1,), "hybrid": (MAMBA1, ATTN)},
    "kimi_linear": {"linear_attention": (KDA,)},
}
PURE_SSM = frozenset({"mamba", "falcon_mamba", "mamba2"})  # no attention, no MLP
SOFTMAX, SIGMOID_TOPK, GROUPED = "top-k softmax routing", "top-k sigmoid routing", "grouped top-k routing"
#: routers no suite kernel implements: named, so that the report says what to implement next
SOFTMAX_BIAS = "top-k softmax routing with a correction bias"
GROUPED_SOFTMAX = "grouped top-k routing with softmax scores"
#: the MoE router of each model type, as transformers computes it
ROUTING = {
    **dict.fromkeys(("mixtral", "qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5_moe_text", "qwen3_vl_moe_text",
                     "olmoe", "jamba", "granitemoe", "granitemoeshared", "granitemoehybrid", "minimax",
                     "phimoe"), (SOFTMAX, "softmax over the expert logits, top-k")),
    **dict.fromkeys(("gpt_oss", "granitemoe_swa", "aria_text", "jetmoe"),
                    (SOFTMAX, "top-k of the logits, softmax over the chosen")),
    "dbrx": (SOFTMAX, "softmax over the expert logits, top-k, the chosen weights divided by their "
                      "p-norm (moe_normalize_expert_weights)"),
    "llama4_text": (SIGMOID_TOPK, "top-k of the logits, then sigmoid of the chosen (Llama4Router)"),
    **dict.fromkeys(("flex_olmo", "qwen3_omni_moe_text", "lara_mini", "mellum"),
                    (SOFTMAX, "softmax over the expert logits, top-k")),
    **dict.fromkeys(("deepseek_v3", "deepseek_v32", "glm4_moe", "glm4_moe_lite", "glm4v_moe_text", "kimi_linear",
                     "mimo_v2_flash", "exaone_moe", "solar_open", "glm_moe_dsa", "glm5_next_text", "hy_v4",
                     "hy_v4_vl_text", "axk1", "beam", "nemotron_h"),
                    (GROUPED, "sigmoid scores + e_score_correction_bias, group-limited top-k")),
    # sigmoid scores + correction bias, top-k over all experts, the chosen scores renormalised: the
    # grouped router with one group
    "minimax_m2": (GROUPED, "sigmoid scores + e_score_correction_bias, top-k over one group"),
    **dict.fromkeys(("dots3_note_text", "bailing_hybrid"),
                    (GROUPED, "sigmoid scores + e_score_correction_bias, group-limited top-k")),
    # sigmoid scores (+ a correction bias), top-k over all experts: the grouped router, one group
    **dict.fromkeys(("afmoe", "hy_v3", "laguna", "step3p5", "minimax_m3_vl_text", "muse_spark_text"),
                    (GROUPED, "sigmoid scores + e_score_correction_bias, top-k over one group")),
    "lfm2_moe": (GROUPED, "sigmoid scores (+ expert_bias with use_expert_bias), top-k over one group"),
    "flint": (GROUPED, "sigmoid scores, no bias, top-k over one group"),
    **dict.fromkeys(("ernie4_5_moe", "ernie4_5_vl_moe_text", "longcat_flash"),
                    (SOFTMAX_BIAS, "softmax scores, top-k of scores + e_score_correction_bias")),
    **dict.fromkeys(("mistral4", "mistral_large4_text"),
                    (GROUPED_SOFTMAX, "softmax scores, group-limited top-k (DeepSeek-V3's grouping)")),
    # the encoder-decoder MoEs: an expert's capacity also bounds the tokens it takes
    "switch_transformers": (SOFTMAX, "softmax over the expert logits, top-1 (tokens past an expert's "
                                     "capacity skip it)"),
    "nllb-moe": (SOFTMAX, "softmax over the expert logits, top-2, the two renormalised (tokens past an "
                          "expert's capacity skip it)"),
}


#: routers a config field chooses: model type -> (field, value, the router with that value)
ROUTING_IF = {**dict.fromkeys(("deepseek_v2", "deepseek_ocr2_text", "unlimited_ocr_text"), (
                  "topk_method", "greedy", (SOFTMAX, "softmax over the expert logits, top-k "
                                                     "(topk_method greedy; group_limited_greedy is not)"))),
              "cohere2_moe": ("expert_selection_fn", "softmax", (SOFTMAX, "top-k of the logits, softmax over the "
                                                                          "chosen (expert_selection_fn softmax)"))}


def _routing(c: Any, mt: str) -> tuple[str, str] | None:
    """The router of model type `mt` as `c` configures it, or None where it is not known. A model
    type that transformers builds with another type's modeling code (Sarvam-MLA as DeepSeek-V3,
    Sarvam-MoE as GLM-4-MoE) routes as that type does."""
    if mt in ROUTING_IF:
        field, value, routing = ROUTING_IF[mt]
        return routing if _get(c, field) == value else None
    if mt in ROUTING:
        return ROUTING[mt]
    home = _implementing_type(c)
    if home is None or home == mt or (home not in ROUTING and home not in ROUTING_IF):
        return None
    routing = _routing(c, home)
    return None if routing is None else (routing[0], f"{routing[1]} (transformers builds it as {home})")


def _modeling_module(c: Any) -> str | None:
    """The module of the class transformers builds `c`'s language model with
    (transformers.models.<type>.modeling_<type>), or None."""
    from ..modeltier.classes import model_class
    from ..models.hfconfig import quiet_transformers
    try:
        with quiet_transformers():
            cls, _ = model_class(c, multimodal_part=False)
    except Exception:  # noqa: BLE001 - a class transformers cannot import: not known
        return None
    name = getattr(cls, "__module__", "") or ""
    return name if name.startswith("transformers.models.") and name.count(".") >= 3 else None


def _implementing_type(c: Any) -> str | None:
    """The model type whose modeling code transformers builds `c`'s language model with, read off
    the class's module; None when there is none."""
    module = _modeling_module(c)
    if module is None:
        return None
    home = module.split(".")[2]
    return next((t for t in (home, home.replace("_", "-")) if t in ROUTING or t in ROUTING_IF), home)


#: the linear-attention kernels a modeling module asks transformers' kernel hub for, and the mixer
#: each is (Lara-Mini's and Qwen-4-exp's Gated DeltaNet; Bailing-Hybrid's KDA)
HUB_MIXERS = {"chunk_gated_delta_rule": GDN, "chunk_kda": KDA}


def _linear_mixer_from_code(c: Any) -> tuple[str, str] | None:
    """(mixer, kernel name) of a model type no table knows, when its modeling code asks the kernel
    hub for exactly one kind of linear-attention kernel (HUB_MIXERS); else None."""
    import importlib
    import inspect
    module = _modeling_module(c)
    if module is None:
        return None
    try:
        source = inspect.getsource(importlib.import_module(module))
    except Exception:  # noqa: BLE001 - no source to read: not known
        return None
    asked = set(re.findall(r"use_kernel_func_from_hub_with_fallback\(\s*[\"'](\w+)[\"']", source))
    found = {HUB_MIXERS[k]: k for k in sorted(asked) if k in HUB_MIXERS}
    return next(iter(found.items())) if len(found) == 1 else None


def _get(c: Any, *names: str) -> Any:
    for n in names:
        v = _attr(c, n)
        if v is not None:
            return v
    return None


def _attr(c: Any, name: str) -> Any:
    """`c.name` (None when unset); for an attribute a heterogeneous config keeps per layer (and
    refuses to read globally: Dots3's kv_lora_rank of 512 or 1024), the first layer's that sets it."""
    try:
        return getattr(c, name, None)
    except Exception:  # transformers' AmbiguousGlobalPerLayerAttributeError, a RuntimeError
        layers = getattr(c, "per_layer_config", None)
        if layers is None:
            raise
        return next((v for v in (getattr(layers[i], name, None) for i in range(len(layers))) if v is not None), None)


#: what `structure` calls positions that enter attention as a bias on its logits
RELATIVE = "relative position bias"
#: positions added to the embeddings from a fixed sine table (Marian, Pegasus, XGLM, M2M100, CTRL)
SINUSOIDAL = "sinusoidal absolute positions"
#: Transformer-XL's relative attention (XLNet, Funnel): a score of its own against relative
#: position encodings, with the learned biases r_w_bias and r_r_bias, not a bias table
XL_RELATIVE = "relative attention (Transformer-XL)"
#: a field that holds the depth
_DEPTH = re.compile(r"^(num_hidden_layers|n_layers?|num_layers|decoder_layers|encoder_layers)$")


@dataclass(frozen=True)
class Structure:
    """What the model transformers builds from a config shows (see `structure`); None: cannot tell."""
    gated: bool | None = None       # the MLP multiplies a gate into its up projection
    norm: str | None = None         # "LayerNorm" or "RMSNorm": the first norm of a layer
    positions: str | None = None    # "rotary", "learned absolute positions", SINUSOIDAL, RELATIVE, XL_RELATIVE


_STRUCTURES: dict[str, Structure] = {}  # config JSON -> its structure (reports ask again)


def structure(c: Any) -> Structure:
    """The model transformers builds from `c` with one layer, on the meta device (no memory, no
    weights), read where the config alone cannot say it:
    - gated: in the first layer that projects the hidden size to an MLP width and back, one
      projection to that width is an ungated MLP; two, or one of twice the width (gate and up
      fused), a gated one (BART's fc1 and fc2, BERT's intermediate and output, are ungated); the
      widths are the config's MLP width fields (the scale rule's `mlp_width`), or with none, any
      width a layer projects to and back from;
    - norm: the first norm module (nn.LayerNorm, nn.RMSNorm, a *LayerNorm or *RMSNorm class) of
      that same layer (or, with no such layer, of the first layer that projects the hidden size),
      LayerNorm when it removes the mean and RMSNorm when not (`_norm_kind`; by its class name where
      it cannot run); the text layer's, not a vision or protein tower's;
    - positions: a *Rotary* module anywhere is rotary; an nn.Embedding or parameter named
      relative_* or rel_*, or a *Relative*Bias / *Relative*Logits module, is a relative position
      bias (T5's buckets, DeBERTa, CPM-Ant's segment bias); parameters r_w_bias and r_r_bias are
      Transformer-XL's relative attention (XLNet, Funnel); else a *Sinusoidal*Position* module or a
      floating-point buffer named for positions is a sine table added to the embeddings (Marian,
      Pegasus, XGLM, CTRL), and an nn.Embedding named for positions is learned absolute positions
      (BART, Whisper, BERT). A sine table beside a rotary read of the config (RoFormer's feeds its
      rotary) is left to that read.
    The model is the causal LM, or for an encoder-decoder (T5, BART) or an encoder (BERT, DeBERTa)
    the class the model tier builds (its sequence-to-sequence or masked LM).
    A field is None when the model cannot tell (no causal or text model class, a build that fails,
    projections that are not nn.Linear, experts kept as 3-D weights): the tables decide then."""
    try:
        key = c.to_json_string(use_diff=False)
    except Exception:  # not serialisable: read, not cached (no key tells it from another)
        return _structure(c)
    if key not in _STRUCTURES:
        _STRUCTURES[key] = _structure(c)
    return _STRUCTURES[key]


def _structure(c: Any) -> Structure:
    import torch
    from ..modeltier.scale import mlp_width
    try:
        d = c.to_dict()
        hidden = next((d[k] for k in ("hidden_size", "d_model", "n_embd") if type(d.get(k)) is int), None)
        widths = {v for k, v in d.items() if type(v) is int and v > 0 and mlp_width(k)}
        model = _one_layer_model(c)
    except Exception:  # whatever transformers refuses: the tables decide
        return Structure()
    if model is None:
        return Structure()
    blocks: dict[str, tuple[list[int], set[int]]] = {}  # layer -> (up widths, down widths)
    norms: dict[str, str] = {}  # layer -> the class of its first norm module
    rotary = positions = None
    relative = _relative_positions(model)
    for name, mod in model.named_modules():
        parts = name.split(".")
        layer = _layer_of(parts)
        kind = type(mod).__name__
        if "Rotary" in kind:
            rotary = "rotary"
        elif re.match(r"rel(ative)?_", parts[-1].lower()) and isinstance(mod, torch.nn.Embedding):
            relative = relative or RELATIVE  # T5's bucketed bias, DeBERTa's relative embeddings
        elif positions is None and "Sinusoidal" in kind and "Position" in kind:
            positions = SINUSOIDAL
        elif positions is None and "pos" in parts[-1].lower() and isinstance(mod, torch.nn.Embedding):
            positions = "learned absolute positions"
        if layer is not None and layer not in norms:
            named = "LayerNorm" if isinstance(mod, torch.nn.LayerNorm) or kind.endswith("LayerNorm") else \
                "RMSNorm" if kind.endswith("RMSNorm") or isinstance(mod, getattr(torch.nn, "RMSNorm", ())) else None
            if named:
                norms[layer] = _norm_kind(mod, hidden) or named
        shape = _projection(mod)
        if shape is not None and hidden:
            ups, downs = blocks.setdefault(layer or name.rpartition(".")[0], ([], set()))
            if shape[0] == hidden:
                ups.append(shape[1])
            if shape[1] == hidden and (shape[0] in widths or (not widths and shape[0] != hidden)):
                downs.add(shape[0])  # with no width field (OpenAI-GPT, XLNet) any width that comes back
    layer, gated = _mlp_layer(blocks)
    if layer is None:  # experts as 3-D weights: the first layer that reads the hidden state
        layer = next((name for name, (ups, _) in blocks.items() if ups and name in norms), None)
    if positions is None and any("pos" in n.rpartition(".")[2].lower() and b.is_floating_point()
                                 for n, b in model.named_buffers()):
        positions = SINUSOIDAL  # a table kept as a buffer (CTRL's pos_encoding); position_ids are integers
    return Structure(gated, norms.get(layer) if layer is not None else None, rotary or relative or positions)


def _relative_positions(model: Any) -> str | None:
    """RELATIVE or XL_RELATIVE when the model's attention reads relative positions through
    parameters or bias modules (see `structure`); None otherwise."""
    names = {n.rpartition(".")[2].lower() for n, _ in model.named_parameters()}
    if {"r_w_bias", "r_r_bias"} & names:
        return XL_RELATIVE
    if any(re.match(r"rel(ative)?_", n) for n in names) or \
            any(re.search(r"Relative\w*(Bias|Logits)", type(m).__name__) for m in model.modules()):
        return RELATIVE
    return None


def _one_layer_model(c: Any, layers: tuple[int, ...] = (0,)) -> Any:
    """The model transformers builds from `c` with the published layers `layers` alone (their
    entries of every per-layer list; one layer unless asked), on the meta device; the class as
    `structure` says. None when there is no class to build; raises what transformers raises."""
    import torch
    from ..modeltier.classes import model_class, other_class
    from ..models.hfconfig import config_object, quiet_transformers
    d = c.to_dict()
    with quiet_transformers():  # importing a modeling module may warn (FLA without a GPU)
        cls, _ = model_class(c, multimodal_part=False)
        if cls is None or getattr(c, "is_encoder_decoder", False) or d.get("is_decoder") is False:
            # an encoder-decoder's whole model, an encoder's masked LM (or base model); where
            # none reads token ids (Whisper), the causal LM. is_decoder false (transformers'
            # default for every config) builds a decoder's base model: the same layers, and one
            # whose LM head refuses that flag (Reformer's) still builds
            cls = other_class(c, seq2seq=bool(getattr(c, "is_encoder_decoder", False)))[0] or cls
    if cls is None:
        return None
    depth = d.get("num_hidden_layers")
    one = {k: len(layers) if _DEPTH.match(k) and type(v) is int and v > 1 else v
           for k, v in d.items() if k != "model_type"}
    for k, v in d.items():  # per-layer lists follow the depth
        if isinstance(v, list) and type(depth) is int and depth > 1 and len(v) == depth:
            one[k] = [v[i] for i in layers]
    with quiet_transformers(), torch.device("meta"):  # its notes were said when the config was read
        return cls._from_config(config_object(c.model_type, one))


def attention_gated(c: Any, layer: int) -> bool | None:
    """Whether attention layer `layer` gates its output from the query projection (Qwen3-Next:
    q_proj makes 2 x heads x head_dim, half of them a sigmoid gate), read off the model built with
    the first layer and that one (a hybrid may refuse to build without a layer of its other kind:
    OLMo-Hybrid); None when it cannot tell (no such projection, a build that fails)."""
    heads = _get(c, "num_attention_heads")
    hidden = _get(c, "hidden_size")
    head_dim = _get(c, "head_dim") or (hidden // heads if isinstance(hidden, int) and isinstance(heads, int)
                                       and heads else None)
    if not (isinstance(heads, int) and isinstance(head_dim, int)):
        return None
    try:
        model = _one_layer_model(c, tuple(sorted({0, layer})))
    except Exception:  # noqa: BLE001 - whatever transformers refuses: cannot tell
        return None
    if model is None:
        return None
    width = next((m.out_features for name, m in model.named_modules()
                  if name.endswith("q_proj") and "linear" not in name and hasattr(m, "out_features")), None)
    return None if width is None else width == 2 * heads * head_dim


def _layer_of(parts: list[str]) -> str | None:
    """The layer a module's dotted name lies in: up to its first index, and the indices right after
    it (Funnel's blocks.0.0 is layer 0 of block 0; layers.0.mlp.experts.3 lies in layers.0)."""
    first = next((i for i, p in enumerate(parts) if p.isdigit()), None)
    if first is None:
        return None
    last = first
    while last + 1 < len(parts) and parts[last + 1].isdigit():
        last += 1
    return ".".join(parts[:last + 1])


def _norm_kind(mod: Any, hidden: int | None) -> str | None:
    """"LayerNorm" when a norm module removes its input's mean (adding a constant to every element
    leaves its output as it was), "RMSNorm" when it does not (T5's and CPM-Ant's *LayerNorm classes
    are RMS norms); None when a copy of it cannot run on the CPU (its class name decides then). Its
    parameters are set to one: the test needs only that they are the same for both inputs."""
    import copy
    import torch
    try:
        norm = copy.deepcopy(mod).to_empty(device="cpu")
        with torch.no_grad():
            for t in [*norm.parameters(), *norm.buffers()]:
                if t.is_floating_point():
                    t.fill_(1.0)
            width = next((int(p.shape[-1]) for p in norm.parameters() if p.dim() >= 1), hidden)
            x = torch.linspace(-1.0, 2.0, width).reshape(1, 1, width)  # mean 0.5, not centred
            a, b = (norm(v) for v in (x, x + 3.0))
        a, b = (v[0] if isinstance(v, tuple) else v for v in (a, b))
        if not (torch.isfinite(a).all() and torch.isfinite(b).all()) or a.shape != x.shape:
            return None
        return "LayerNorm" if torch.allclose(a, b, rtol=1e-4, atol=1e-4) else "RMSNorm"
    except Exception:  # a norm that takes other arguments, or keeps state it cannot copy
        return None


def _projection(mod: Any) -> tuple[int, int] | None:
    """(in, out) features of a linear projection: nn.Linear, or transformers' Conv1D (GPT-2 and
    OpenAI-GPT keep their weight as [in, out])."""
    import torch
    if isinstance(mod, torch.nn.Linear):
        return mod.in_features, mod.out_features
    if type(mod).__name__ == "Conv1D" and getattr(getattr(mod, "weight", None), "dim", lambda: 0)() == 2:
        return int(mod.weight.shape[0]), int(mod.weight.shape[1])
    return None


def _mlp_layer(blocks: dict[str, tuple[list[int], set[int]]]) -> tuple[str | None, bool | None]:
    """(the first layer with an up projection and its down projection, whether it is gated)."""
    for layer, (ups, downs) in blocks.items():
        for w in sorted(downs):
            if ups.count(w) >= 2 or 2 * w in ups:
                return layer, True
            if ups.count(w) == 1:
                return layer, False
    return None, None


def _get_block(c: Any, *names: str) -> Any:
    """`_get`, else the first of `names` a sub-config sets: the MLP and expert facts of a model
    whose blocks keep them in a sub-config of their own (DBRX's ffn_config). Only for those: a
    sub-config may also be another part of the model (a vision tower, a depth decoder)."""
    v = _get(c, *names)
    if v is not None:
        return v
    for key in getattr(type(c), "sub_configs", None) or {}:
        sub = getattr(c, key, None)
        if sub is not None and not isinstance(sub, (dict, list, str)):
            v = _get(sub, *names)
            if v is not None:
                return v
    return None


def _rope_dicts(c: Any) -> list[dict]:
    rp = _get(c, "rope_parameters", "rope_scaling")
    if not isinstance(rp, dict):
        return []
    nested = [v for v in rp.values() if isinstance(v, dict)]  # per layer type (Gemma 3)
    return nested or [rp]


def _encoder_only(data: dict[str, Any], model_type: str, c: Any = None) -> bool:
    """Whether the model is an encoder: the model tier runs it as one (`classify`), its model type
    is one, or every architecture it names is an encoder's head."""
    from ..modeltier.classes import classify
    if data.get("is_decoder") is True or data.get("is_encoder_decoder") is True:
        return False
    if c is not None and "text_config" not in data and not getattr(c, "is_encoder_decoder", False):
        try:  # as the model tier classes it: BERT-family is_decoder, XLM's causal, a masked LM only (ESM)
            kind, cls, output = classify(c, c)
        except Exception:  # an import transformers cannot do: the tables decide
            kind, cls, output = "", None, ""
        if kind == "encoder" and cls is not None and output == "logits":  # a masked LM, not a text tower
            return True
    archs = data.get("architectures")
    archs = [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []
    return model_type in ENCODERS or (bool(archs) and all(a.endswith(_ENCODER_HEADS) for a in archs))


def _quantization(q: Any) -> list[tuple[str, str]]:
    """(family, why) for a quantization_config."""
    if not isinstance(q, dict):
        return []
    method = str(q.get("quant_method", "")).lower()
    why = f"quantization_config.quant_method={method}"
    if method in ("fp8", "fbgemm_fp8"):
        return [("fp8 block-scaled GEMM" if q.get("weight_block_size") else
                 "fp8 GEMM (w8a8, per-token/per-channel scales)", why)]
    if method == "mxfp4":
        return [("MXFP4 GEMM", why)]
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin") and q.get("bits", 4) == 4:
        return [("int4 weight-only GEMM (w4a16)", why)]
    if method == "blockwise_int8":  # block-INT8 checkpoints: int8 weight blocks, activations per token group
        return [("int8 block-scaled GEMM", f"{why}, weight_block_size={q.get('weight_block_size')}")]
    if method == "w8a8_int8":       # channel-INT8 checkpoints: per-channel weights, dynamic per-token activations
        return [("int8 GEMM (w8a8, per-channel scales)", why)]
    if method == "modelopt":
        algo = str(q.get("quant_algo", "")).upper()
        found = {"FP8": "fp8 GEMM (w8a8, per-token/per-channel scales)", "NVFP4": "NVFP4 GEMM"}.get(algo)
        return [(found, f"{why}, quant_algo={algo}")] if found else \
            [(f"{UNCLASSIFIED}: quantization_config modelopt quant_algo '{algo}'", why)]
    if method == "compressed-tensors":
        groups = q.get("config_groups")
        out = [_ct_group(name, g, q.get("format")) for name, g in sorted(groups.items())] \
            if isinstance(groups, dict) and groups else \
            [(f"{UNCLASSIFIED}: compressed-tensors quantization_config without config_groups", why)]
        return [(fam, f"{why}, {detail}") for fam, detail in out]
    return [(f"{UNCLASSIFIED}: quantization_config.quant_method '{method}'", why)]


def _ct_group(name: str, g: Any, fmt: Any) -> tuple[str, str]:
    """One compressed-tensors config group: (family, what in it says so)."""
    w = g.get("weights") if isinstance(g, dict) else None
    a = g.get("input_activations") if isinstance(g, dict) else None
    if not isinstance(w, dict):
        return f"{UNCLASSIFIED}: compressed-tensors group {name} has no weights scheme", name
    fmt = str(g.get("format") or fmt or "")
    kind, bits, strategy = w.get("type"), w.get("num_bits"), w.get("strategy")
    act_bits = a.get("num_bits") if isinstance(a, dict) else None
    detail = f"{name}: {kind} {bits}-bit weights ({strategy})" + (f", {act_bits}-bit activations" if act_bits else "")
    if kind == "float" and bits == 8:
        if strategy == "block":
            return "fp8 block-scaled GEMM", detail
        return ("fp8 GEMM (w8a8, per-token/per-channel scales)" if act_bits == 8 else
                "fp8 weight-only GEMM (w8a16)"), detail
    if kind == "float" and bits == 4:
        if "nvfp4" in fmt or w.get("group_size") == 16:
            return "NVFP4 GEMM", detail
        if "mxfp4" in fmt:
            return "MXFP4 GEMM", detail
    if kind == "int" and bits == 4 and not act_bits:
        return "int4 weight-only GEMM (w4a16)", detail
    if kind == "int" and bits == 8 and act_bits == 8:
        return ("int8 block-scaled GEMM" if strategy == "block" else "int8 GEMM (w8a8, per-channel scales)"), detail
    return f"{UNCLASSIFIED}: compressed-tensors scheme {kind} {bits}-bit ({fmt or 'no format'})", detail


def _adapter_families(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(family, why) of a PEFT adapter config: LoRA's kernels, and its base model named as what this
    file cannot classify (the base model's own config.json says what it needs)."""
    kind = data["peft_type"]
    if kind.upper() == "LORA":
        modules = data.get("target_modules")
        modules = ", ".join(map(str, modules)) if isinstance(modules, list) else str(modules)
        out = [("LoRA adapters (shrink / expand)", f"peft_type={kind}, r={data.get('r')}, target_modules={modules}")]
    else:
        out = [(f"{UNCLASSIFIED}: adapter peft_type '{kind}'", "peft_type")]
    base = data.get("base_model_name_or_path") or "not named"
    return out + [(f"{UNCLASSIFIED}: the base model of this adapter ({base}): read its own config.json for it",
                   "base_model_name_or_path")]


def infer_families(data: dict[str, Any], where: str = "config") -> list[Family]:
    """The families a config (as its file has it) calls for; what cannot be classified is a family
    named "cannot classify: ..."."""
    fams: dict[str, list[str]] = {}

    def need(name: str, why: str) -> None:
        fams.setdefault(name, [])
        if why not in fams[name]:
            fams[name].append(why)

    if isinstance(data.get("peft_type"), str):
        for name, why in _adapter_families(data):
            need(name, why)
        return [Family(n, w) for n, w in fams.items()]
    c, problem = text_model(data, where)
    if c is None:
        need(problem, "model_type")
        return [Family(n, w) for n, w in fams.items()]
    mt = c.model_type
    encoder = _encoder_only(data, mt, c)
    seq2seq = not encoder and bool(data.get("is_encoder_decoder") or getattr(c, "is_encoder_decoder", False))

    # ------------------------------------------------------------------ mixers, layer by layer
    layer_types = _get(c, "layer_types")
    mixers: dict[str, list[str]] = {}
    if isinstance(layer_types, list) and layer_types:
        table = {**COMMON_LAYERS, **LAYER_MIXERS.get(mt, {})}
        kinds = list(dict.fromkeys(str(t) for t in layer_types))
        read = _linear_mixer_from_code(c) if "linear_attention" in kinds and "linear_attention" not in table \
            else None  # a model type no table knows: its modeling code says
        for t in kinds:
            if t == "linear_attention" and read is not None:
                mixers.setdefault(read[0], []).append(f"{t} = {read[0]} in {mt} (its modeling code calls {read[1]})")
                continue
            if t not in table:
                need(f"{UNCLASSIFIED}: layer type '{t}' of model_type {mt}", "layer_types")
            for m in table.get(t, ()):
                mixers.setdefault(m, []).append(t if t in COMMON_LAYERS else f"{t} = {m} in {mt}")
    elif mt in PURE_SSM:
        mixers[LAYER_MIXERS[mt]["linear_attention"][0]] = [f"model_type={mt}"]
    else:
        mixers[ATTN] = ["num_attention_heads"]
    if ATTN in mixers and not isinstance(layer_types, list):
        window, context = _get(c, "sliding_window"), _get(c, "max_position_embeddings")
        spans = isinstance(window, int) and isinstance(context, int) and window >= context  # never binds
        if window and not spans and getattr(c, "use_sliding_window", True) is not False:
            mixers.setdefault(SLIDING, []).append(f"sliding_window={window}")
        if _get(c, "attention_chunk_size"):
            mixers.setdefault(CHUNKED, []).append(f"attention_chunk_size={c.attention_chunk_size}")
    why_mix = {m: "layer_types: " + ", ".join(ts) if isinstance(layer_types, list) else ts[0]
               for m, ts in mixers.items()}

    # ------------------------------------------------------------------ norm, projections, MLP
    ssm = MAMBA1 in mixers or MAMBA2 in mixers
    built = structure(c)
    if built.norm == "LayerNorm" or (built.norm is None and (
            mt in LAYERNORM or mt in LAYERNORM_GATED or encoder or (not ssm and _get(c, "rms_norm_eps") is None and
                                                                      _get(c, "layer_norm_eps", "layer_norm_epsilon") is not None))):
        need("LayerNorm", f"model_type={mt}" + (" (its layers' norm modules)" if built.norm else ""))
    elif mt in SCALED_RESIDUAL:
        need("RMSNorm (residual added outside the norm)", f"model_type={mt}: {SCALED_RESIDUAL[mt]}")
    else:
        need("RMSNorm", f"model_type={mt}")
    need("dense GEMM", "every model (projections, lm_head)")
    experts = _get_block(c, "num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
    moe = isinstance(experts, int) and experts > 1 and (mt != "nemotron_h" or MOE_LAYER in mixers)
    act_key = next((k for k in ("mlp_hidden_act", "hidden_activation", "hidden_act", "activation_function",
                                "ffn_act_fn", "afn", "ff_activation", "dense_act_fn", "activation")
                    if _get_block(c, k) is not None), "")
    act = _get_block(c, act_key) if act_key else FIXED_ACT.get(mt, "")
    if not act_key and isinstance(_get(c, "gelu_activation"), bool):  # XLM: GELU, else ReLU
        act_key, act = "gelu_activation", "gelu" if c.gelu_activation else "relu"
    act = str(act.get("name", "") if isinstance(act, dict) else act).lower()  # DBRX: {"name": "silu"}
    given = {**data, **(data.get("text_config") or {})}
    gated = built.gated if act and act != "none" else None  # from the model itself, where it can tell
    non_gated = (mt in NON_GATED_MLP or encoder) if gated is None else not gated
    has_mlp = mt not in PURE_SSM and (mt != "nemotron_h" or MLP_LAYER in mixers or moe)
    if has_mlp:
        why = f"{act_key or 'activation'}={act}" + ("" if not act_key or act_key in given else
                                                     f" ({type(c).__name__} default)")
        gelu = act.startswith("gelu")
        if encoder and non_gated and gelu:
            need("GELU (non-gated MLP)", f"{why} (encoder MLP)")
        elif _get(c, "swiglu_limit") is not None:
            mxfp4_experts = moe and any(f == "MXFP4 GEMM" for f, _ in _quantization(data.get("quantization_config")))
            need("clamped SwiGLU fused in the MXFP4 experts" if mxfp4_experts else "clamped SwiGLU (swiglu_limit)",
                 f"swiglu_limit={c.swiglu_limit}")
        elif non_gated and (gelu or act in ("relu2", "relu")):
            need("GELU (non-gated MLP)" if gelu else "ReLU² (non-gated MLP)" if act == "relu2" else
                 "ReLU (non-gated MLP)", f"{why} (no gate projection)")
        elif not non_gated and act in ("silu", "swish"):
            need("SiLU-and-mul", why)
        elif not non_gated and gelu:
            tanh = act in ("gelu_pytorch_tanh", "gelu_new", "gelu_fast", "gelu_tanh")
            need("GeGLU (tanh GELU-and-mul)" if tanh else "GeGLU (exact GELU-and-mul)", why)
        elif not non_gated and act in ("relu2", "relu"):  # BitNet: relu2(gate) * up
            need("ReLU²-and-mul (gated MLP)" if act == "relu2" else "ReLU-and-mul (gated MLP)", why)
        else:
            need(f"{UNCLASSIFIED}: MLP activation '{act or 'none'}' of model_type {mt}", why)
    if not encoder:
        need("sampling (top-k/top-p)", "every model")
        need("model runner inputs (positions, slot mapping)", "every model served with a paged cache")
        mtp = next(((k, v) for k in MTP_KEYS if isinstance(v := _get(c, k), int) and v > 0), None)
        if mtp:
            need("speculative decoding (rejection sampler)",
                 f"{mtp[0]}={mtp[1]} (multi-token-prediction layers: a draft for speculative decoding)")

    # ------------------------------------------------------------------ attention
    mla = ATTN in mixers and _get(c, "kv_lora_rank") is not None
    if ATTN in mixers and seq2seq:  # besides the decoder's own attention, below
        need("attention (bidirectional, encoder)", "is_encoder_decoder (its encoder)")
        need("cross-attention (decoder over the encoder's output)", "is_encoder_decoder (its decoder)")
    if ATTN in mixers and encoder:
        need("attention (bidirectional, encoder)", f"model_type={mt}" if mt in ENCODERS else "architectures")
    elif ATTN in mixers and not mla:  # MLA replaces GQA attention (its family below)
        gated = _get(c, "attn_output_gate")
        if gated is None and GDN in mixers:  # Qwen3-Next's hybrids gate their attention, OLMo-Hybrid's not
            first = next((i for i, t in enumerate(layer_types or []) if t in mixers.get(ATTN, [])), None)
            # where the model cannot tell, as Qwen3-Next's hybrids do
            gated = first is None or attention_gated(c, first) is not False
        gated = bool(gated)
        need("attention prefill (gated, varlen)" if gated else "attention prefill (causal GQA, no output gate)",
             why_mix[ATTN] + (" (gated attention)" if gated else ""))
        need("attention (paged decode)", why_mix[ATTN])
    if SLIDING in mixers:
        need("sliding-window attention", why_mix[SLIDING])
    if CHUNKED in mixers:
        need("chunked local attention", why_mix[CHUNKED])
    if INDEXED in mixers:
        need("indexed sparse attention (lightning indexer, top-k keys)",
             why_mix[INDEXED] + (f", index_topk={_get(c, 'index_topk')}" if _get(c, "index_topk") else ""))
    if ATTN in mixers and mt == "gpt_oss":
        need("attention with sinks", "model_type=gpt_oss (learned per-head sinks)")
    if ATTN in mixers and (_get(c, "attn_logit_softcapping") or _get(c, "final_logit_softcapping")):
        need("soft-capped attention", ", ".join(f"{k}={getattr(c, k)}" for k in
                                                ("attn_logit_softcapping", "final_logit_softcapping")
                                                if _get(c, k)))
    if mla:
        lora = f"kv_lora_rank={_get(c, 'kv_lora_rank')}, q_lora_rank={_get(c, 'q_lora_rank')}"
        need("MLA decode (latent cache)", lora)
        need("MLA prefill", f"{lora} (prefill attends with up-projected keys and values)")
        if _get(c, "qk_rope_head_dim"):
            need("interleaved RoPE" if _get(c, "rope_interleave") else "RoPE (NeoX)",
                 f"qk_rope_head_dim={c.qk_rope_head_dim} (MLA's rotary part)")

    # ------------------------------------------------------------------ positions
    positions = NO_ROPE.get(mt)
    rotary_field = any("rotary" in k for k in c.to_dict())  # RoFormer: rotary_value
    if positions is None and built.positions not in (None, "rotary") and \
            not (built.positions == SINUSOIDAL and rotary_field):  # a sine table that feeds a rotary
        positions = built.positions  # the model embeds positions, no rotary
    if mt == "granitemoehybrid" and _get(c, "position_embedding_type") != "rope":
        positions = f"none (position_embedding_type={_get(c, 'position_embedding_type')})"
    if _get(c, "alibi") is True:
        positions = "ALiBi"
    rotary = built.positions == "rotary" or rotary_field
    if (encoder and not rotary) or str(_get(c, "position_embedding_type") or "") == "absolute":
        positions = positions or "learned absolute positions"
    if ATTN in mixers and positions == RELATIVE:
        need("attention with relative position bias", f"model_type={mt} (a bias from the query-key distance)")
    if ATTN in mixers and positions == XL_RELATIVE:
        need(XL_RELATIVE, f"model_type={mt} (parameters r_w_bias and r_r_bias)")
    if ATTN in mixers and positions == "ALiBi":
        need("ALiBi attention", "alibi" if _get(c, "alibi") is True else f"model_type={mt}")
    if ATTN in mixers and not positions and not mla:
        ropes = _rope_dicts(c)
        prf = [r["partial_rotary_factor"] for r in ropes if isinstance(r.get("partial_rotary_factor"), (int, float))]
        prf += [c.partial_rotary_factor] if isinstance(getattr(c, "partial_rotary_factor", None), float) else []
        if any("mrope_section" in r for r in ropes):
            sec = next(r for r in ropes if "mrope_section" in r)
            need("mRoPE", f"mrope_section={sec['mrope_section']}" + (" (interleaved)" if sec.get("mrope_interleaved") else ""))
        elif mt in NEOX_AFTER_PERMUTE:
            need("RoPE (NeoX)", NEOX_AFTER_PERMUTE[mt])
        elif any(0 < p < 1 for p in prf):
            need("partial RoPE", f"partial_rotary_factor={min(prf)}")
        else:
            need("RoPE (NeoX)", f"rope_theta={ropes[0].get('rope_theta')}" if ropes else "attention layers")
        if any(0 < p < 1 for p in prf) and "mRoPE" in fams:
            need("partial RoPE", f"partial_rotary_factor={min(prf)}")

    # ------------------------------------------------------------------ linear mixers
    if GDN in mixers:
        for f in ("Gated DeltaNet", "causal conv1d", "gated RMSNorm"):
            need(f, why_mix[GDN])
    if MAMBA2 in mixers:
        for f in ("Mamba-2 SSD", "selective state update (Mamba-2)", "causal conv1d"):
            need(f, why_mix[MAMBA2])
        if _get(c, "mamba_rms_norm") is not False:  # Falcon-H1's default False: the mixer only gates, silu(z)
            groups = _get(c, "n_groups", "mamba_n_groups")
            need("gated RMSNorm, norm after gate (Mamba-2)",
                 why_mix[MAMBA2] + (f", norm(x * silu(z)) over {groups} group(s)" if groups else ""))
    if MAMBA1 in mixers:
        for f in ("Mamba-1 selective scan", "selective state update (Mamba-1)", "causal conv1d"):
            need(f, why_mix[MAMBA1])
    if LIGHTNING in mixers:
        need("lightning attention (MiniMax linear attention)", why_mix[LIGHTNING])
    if KDA in mixers:
        need("Kimi Delta Attention", why_mix[KDA])
        need("causal conv1d", why_mix[KDA] + " (short convolutions of q, k, v)")

    # ------------------------------------------------------------------ MoE
    if moe:
        need("fused MoE", f"{experts} experts, top-{_get_block(c, 'num_experts_per_tok', 'moe_topk', 'top_k', 'moe_top_k')}")
        routing = _routing(c, mt)
        if routing is None:
            need(f"{UNCLASSIFIED}: the MoE router of model_type {mt}", f"{experts} experts")
        else:
            groups = _get(c, "n_group", "num_expert_group") or 1
            need(routing[0], f"{mt}: {routing[1]}" + (f", n_group={groups}" if routing[0] == GROUPED else ""))
        shared = _get(c, "shared_expert_intermediate_size")
        if isinstance(shared, int) and shared > 0:
            need("shared-expert sigmoid gate", f"shared_expert_intermediate_size={c.shared_expert_intermediate_size}")

    # ------------------------------------------------------------------ quantization
    for fam, why in _quantization(data.get("quantization_config")):
        if moe and fam == "MXFP4 GEMM":  # MXFP4 checkpoints (gpt-oss) quantize the experts only
            need("MXFP4 MoE experts", why)
            continue
        need(fam, why)
        if moe and fam in MOE_QUANT:  # the routed experts run the fused-MoE kernel in that format
            need(MOE_QUANT[fam], why)
    if moe and any(f in fams for f in ("MXFP4 MoE experts", *MOE_QUANT.values())):
        # quantized experts: their GEMM is the family above; routing metadata and the combine stay
        fams = {(QUANT_MOE if f == "fused MoE" else f): w for f, w in fams.items()}
    return [Family(name, why) for name, why in fams.items()]


def config_needs(path: str | os.PathLike[str], suite_kernels: set[str] | None = None) -> ConfigNeeds:
    """Read a config and map its families to suite kernels; a family is covered only when every
    kernel it maps to is in `suite_kernels` (default: the registered suite)."""
    data, multimodal = load_config(path)
    if suite_kernels is None:
        from ..conformance.runner import load_suite
        suite_kernels = set(load_suite())
    fams = infer_families(data, str(path))
    for f in fams:
        ks = FAMILY_KERNELS.get(f.name, ())
        f.kernels = list(ks) if ks and all(k in suite_kernels for k in ks) else []
    text = data.get("text_config") if multimodal else None
    model_type = str((text or {}).get("model_type") or data.get("model_type", "?"))
    if isinstance(data.get("peft_type"), str):
        model_type = f"{data['peft_type'].lower()} adapter"
    return ConfigNeeds(str(path), model_type, multimodal, fams)
