"""The scale-down rule: a model config made small enough to run on an interpreter, keeping every
fact that selects a kernel.

Kept as published: head dimensions (attention, MLA latent and rope parts, linear-attention key and
value heads), the GQA ratio, top-k and routing type (softmax / sigmoid, groups, correction bias),
linear-attention key:value head ratio, conv width, SSM state size and chunk size, activation, norm
type and eps, RoPE variant, scaling and partial rotary factor, logit softcaps, sinks.
Shrunk: width (hidden 128, a multiple of the head count, or heads x head_dim where the head dim
derives from the width; other widths that are 1-4 x the hidden size follow it), MLP and expert widths,
head counts (down to the GQA ratio), expert count (at least 2 x top-k, whole groups), depth (one
period of the layer pattern: every layer type at least once; lists of layer indices follow), vocabulary
(512), sliding windows and attention chunks (8 tokens, so a short prompt crosses them; one that
spans the whole context never binds and is kept).
Field names are read through the config class's own aliases (`n_embd` is the hidden size).
Dropped: quantization (weights are random and built in the run's dtype); multimodal towers (the
text model runs).
"""
from __future__ import annotations

import math
import re
from typing import Any

HIDDEN = 128
VOCAB = 512
WINDOW = 8
MAX_LAYERS = 8

_EXPERT_KEYS = ("num_experts", "n_routed_experts", "num_local_experts")
_TOPK_KEYS = ("num_experts_per_tok", "moe_topk", "experts_per_token")
_MLP_KEYS = ("intermediate_size", "intermediate_size_mlp", "n_inner")
_EXPERT_WIDTH_KEYS = ("moe_intermediate_size", "shared_expert_intermediate_size",
                      "moe_shared_expert_intermediate_size", "shared_intermediate_size")
_LAYER_LIST_KEYS = ("layer_types", "layers_block_type", "block_types")
#: a list of layer indices (attention layers of a hybrid, dense layers of an MoE ...)
_INDEX_LIST_NAME = re.compile(r"(layer|idx|indices)")
#: another width that equals the hidden size in the published config follows the new width
_WIDTH_NAME = re.compile(r"(_dim|_dim_out|_width|_hidden_size)$")
_TOKEN_KEYS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "sep_token_id",
               "image_token_id", "video_token_id", "boi_token_id", "eoi_token_id")


def describe() -> str:
    """The rule in one paragraph (printed with every run)."""
    return " ".join(line.strip() for line in __doc__.splitlines()[3:] if line.strip())


def scale(cfg: dict[str, Any], aliases: dict[str, str] | None = None) -> tuple[dict[str, Any], list[str]]:
    """(scaled config, one line per change). `cfg` is a text model's full config dict (defaults
    filled in by its transformers config class); `aliases` is that class's `attribute_map` (the
    common name -> the field this config stores it in, e.g. "hidden_size" -> "n_embd")."""
    d = dict(cfg)
    notes: list[str] = []
    # read and write the common names; the config's own field names come back at the end
    # (not the head dim: stored under another name it is derived from the width, as in Zamba2)
    stored = {common: field for common, field in (aliases or {}).items()
              if field in d and common not in d and common != field and common != "head_dim"}
    for common, field in stored.items():
        d[common] = d.pop(field)

    def put(key: str, value: Any) -> None:
        if key in d and d[key] != value:
            notes.append(f"{stored.get(key, key)}: {_short(d[key])} -> {_short(value)}")
        d[key] = value

    for key in ("quantization_config",):
        if d.pop(key, None) is not None:
            notes.append(f"{key}: dropped (random weights in the run's dtype)")

    # ---------------------------------------------------------------- attention heads and width
    n = d.get("num_attention_heads")
    hidden = d.get("hidden_size")
    explicit_head_dim = isinstance(d.get("head_dim"), int) and d.get("model_type") != "mamba2"
    new_hidden = HIDDEN
    if isinstance(n, int) and n > 0:
        kv = d.get("num_key_value_heads") or n
        ratio = max(1, n // kv)
        new_kv = max(1, min(kv, 4 // ratio)) if ratio <= 4 else 1
        new_n = new_kv * ratio
        if not explicit_head_dim and isinstance(hidden, int):
            new_hidden = new_n * (hidden // n)  # the head dim derives from the width: keep it
        else:  # a width the heads divide (config classes check it), rounded to 8
            step = math.lcm(new_n, 8)
            new_hidden = step * math.ceil(HIDDEN / step)
        put("num_attention_heads", new_n)
        if d.get("num_key_value_heads") is not None:
            put("num_key_value_heads", new_kv)
    if isinstance(hidden, int):
        put("hidden_size", new_hidden)
        for key, value in list(d.items()):  # e.g. a projection width, or Zamba2's attention width 2 x hidden
            if key != "hidden_size" and "head" not in key and _WIDTH_NAME.search(key) and type(value) is int \
                    and value % hidden == 0 and 1 <= value // hidden <= 4:
                put(key, value // hidden * new_hidden)
    for key in _MLP_KEYS:
        if isinstance(d.get(key), int):
            put(key, 2 * new_hidden)
    for key in _EXPERT_WIDTH_KEYS:
        if isinstance(d.get(key), int) and d[key] > 0:
            put(key, new_hidden // 2)
        elif isinstance(d.get(key), list) and d[key] and all(type(v) is int and v > 0 for v in d[key]):
            put(key, [new_hidden // 2] * len(d[key]))  # one per layer (Hunyuan-A13B)
    if isinstance(d.get("q_lora_rank"), int):
        put("q_lora_rank", 64)

    # ---------------------------------------------------------------------------------- experts
    _scale_experts(d, put)

    # --------------------------------------------------------------------- linear attention (GDN)
    lk, lv = d.get("linear_num_key_heads"), d.get("linear_num_value_heads")
    if isinstance(lk, int) and isinstance(lv, int) and lk > 0:
        put("linear_num_key_heads", 2)
        put("linear_num_value_heads", 2 * max(1, lv // lk))

    # ---------------------------------------------------------------------------- SSM (Mamba-2)
    _scale_ssm(d, put, new_hidden)

    # ------------------------------------------------------------------------- windows, vocab
    context = d.get("max_position_embeddings")
    for key in ("sliding_window", "attention_chunk_size"):
        if isinstance(d.get(key), int) and d[key] > WINDOW:
            if isinstance(context, int) and d[key] >= context:
                notes.append(f"{key}: {d[key]} kept (it spans the whole context, so it never binds)")
                continue
            put(key, WINDOW)
    if isinstance(d.get("vocab_size"), int) and d["vocab_size"] > VOCAB:
        put("vocab_size", VOCAB)
        for key in _TOKEN_KEYS:
            value = d.get(key)
            if isinstance(value, int) and value >= VOCAB:
                put(key, VOCAB - 1 - _TOKEN_KEYS.index(key))
            elif isinstance(value, list):
                put(key, [v if v < VOCAB else VOCAB - 1 for v in value if isinstance(v, int)])

    # ------------------------------------------------------------------------------------ depth
    _scale_depth(d, put, notes)
    for common, field in stored.items():
        d[field] = d.pop(common)
    return d, notes


def _scale_experts(d: dict, put) -> None:
    ekey = next((k for k in _EXPERT_KEYS if isinstance(d.get(k), int) and d[k] > 1), None)
    if ekey is None:
        return
    topk = next((d[k] for k in _TOPK_KEYS if isinstance(d.get(k), int)), None) or \
        next((max(d[k]) for k in _TOPK_KEYS if _ints(d.get(k))), 2)  # or one per layer
    groups = d.get("n_group") if isinstance(d.get("n_group"), int) and d["n_group"] > 1 else 1
    experts = max(2 * topk, 4, 2 * groups)
    experts = groups * math.ceil(experts / groups)
    topk_group = d.get("topk_group") if isinstance(d.get("topk_group"), int) else groups
    while groups > 1 and topk_group * (experts // groups) < topk:  # the chosen groups hold top-k
        experts += groups
    put(ekey, min(d[ekey], experts))


def _scale_ssm(d: dict, put, hidden: int) -> None:
    mt = d.get("model_type")
    heads_key = next((k for k in ("mamba_num_heads", "mamba_n_heads", "n_mamba_heads") if isinstance(d.get(k), int)),
                     "num_heads" if mt == "mamba2" else None)
    hd_key = next((k for k in ("mamba_head_dim", "mamba_d_head", "mamba_headdim") if isinstance(d.get(k), int)),
                  "head_dim" if mt == "mamba2" else None)
    if heads_key is None or hd_key is None:
        if isinstance(d.get("mamba_dt_rank"), int):  # Mamba-1 (Jamba): dt rank follows the width
            put("mamba_dt_rank", max(1, hidden // 16))
        return
    expand = next((d[k] for k in ("mamba_expand", "expand") if isinstance(d.get(k), (int, float))), 2)
    head_dim = d[hd_key]
    heads = max(2, int(expand * hidden) // head_dim)
    gkey = next((k for k in ("mamba_n_groups", "n_groups", "mamba_ngroups") if isinstance(d.get(k), int)), None)
    if gkey is not None:
        groups = min(d[gkey], 2)
        while heads % groups:
            groups -= 1
        put(gkey, groups)
    put(heads_key, heads)
    if isinstance(d.get("mamba_d_ssm"), int):
        put("mamba_d_ssm", heads * head_dim)


def _scale_depth(d: dict, put, notes: list[str]) -> None:
    old = d.get("num_hidden_layers")
    lkey = next((k for k in _LAYER_LIST_KEYS if isinstance(d.get(k), list) and d[k]), None)
    index_lists = [k for k in d if _INDEX_LIST_NAME.search(k) and _is_index_list(d[k], old)]
    if lkey is not None:
        types = d[lkey]
        want = set(map(str, types))
        layers = next(i + 1 for i in range(len(types)) if set(map(str, types[:i + 1])) == want)
    elif isinstance(d.get("hybrid_override_pattern"), str) and d["hybrid_override_pattern"]:
        pattern = d["hybrid_override_pattern"]
        layers = next(i + 1 for i in range(len(pattern)) if set(pattern[:i + 1]) == set(pattern))
        put("hybrid_override_pattern", pattern[:layers])
    elif isinstance(d.get("attn_layer_offset"), int):  # Jamba: attention and MoE layers by period
        layers = max(d["attn_layer_offset"], d.get("expert_layer_offset") or 0) + 1
    elif index_lists:  # one layer of each kind the index lists make, in the order they first appear
        kinds = [tuple(i in set(d[k]) for k in index_lists) for i in range(old)]
        firsts = [i for i in range(old) if kinds[i] not in kinds[:i]]
        if len(firsts) == 1:
            firsts.append(firsts[0] + 1)
        for key in index_lists:
            put(key, [j for j, i in enumerate(firsts) if kinds[i][index_lists.index(key)]])
        layers = len(firsts)
    else:
        layers = 2
    if isinstance(d.get("first_k_dense_replace"), int) and d["first_k_dense_replace"] > 0:
        put("first_k_dense_replace", 1)  # one dense layer, then MoE
        layers = max(layers, 2)
    layers = max(2, min(layers, MAX_LAYERS) if lkey is None else layers)  # a residual stream across layers
    if isinstance(old, int):
        layers = min(layers, old)
    for key, value in list(d.items()):
        if key != "num_hidden_layers" and re.search(r"(layers|blocks)$", key) and type(value) is int \
                and value == old:  # the depth stored again (xLSTM's num_blocks)
            put(key, layers)
        elif (key == "moe_layers" and isinstance(value, list)) or key in index_lists:
            put(key, [i for i in value if isinstance(i, int) and i < layers])
        elif isinstance(value, list) and isinstance(old, int) and len(value) == old and old > layers:
            d[key] = value[:layers]
            notes.append(f"{key}: first {layers} of {old} layers")
    if lkey is not None and len(d[lkey]) > layers:
        notes.append(f"{lkey}: first {layers} of {len(d[lkey])} layers (every layer type once)")
        d[lkey] = d[lkey][:layers]
    if "num_hidden_layers" in d:
        put("num_hidden_layers", layers)


def _ints(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(type(v) is int for v in value)


def _is_index_list(value: Any, layers: Any) -> bool:
    """A strictly increasing list of layer indices, some layers left out (a 0/1 per-layer list is not)."""
    return (isinstance(value, list) and isinstance(layers, int) and 0 < len(value) < layers
            and all(type(i) is int and 0 <= i < layers for i in value)
            and all(a < b for a, b in zip(value, value[1:])))


def _short(value: Any) -> str:
    if isinstance(value, list) and len(value) > 6:
        return f"[{len(value)} items]"
    if isinstance(value, dict):
        return "{...}"
    return repr(value)
