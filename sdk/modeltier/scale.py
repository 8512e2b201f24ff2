"""The scale-down rule: a model config made small enough to run on an interpreter, keeping every
fact that selects a kernel.

Kept as published: head dimensions (attention, MLA latent and rope parts, linear-attention key and
value heads), the GQA ratio, top-k and routing type (softmax / sigmoid, groups, correction bias),
linear-attention key:value head ratio, conv width, SSM state size and chunk size, activation, norm
type and eps, RoPE variant, scaling and partial rotary factor, logit softcaps, sinks.
Shrunk: width (hidden 128, a multiple of the head count, or heads x head_dim where the head dim
derives from the width or the published heads x head_dim is the width and the scaled heads x
head_dim is at most 4 x 128; other widths that are 1-4 x the hidden size follow it, and so do the
groups of a depthwise convolution over it), MLP and expert widths
under any of their names (ffn_dim, dim_ff, moe_hidden_size ..., per-layer lists too), low-rank query
and output projections (64), head counts (down to the GQA ratio), expert count (at least 2 x top-k,
whole groups), depth (one period of every per-layer pattern: layer types, MLP types, each at least
once; where the last layers reuse earlier layers' keys and values, that period twice, the second
reusing; a stack run several times keeps its cycles, each of the scaled depth; a depth split
into stages (fields *layers that sum to it) keeps every stage, in proportion; layer types listed
as pairs of blocks stay whole pairs; lists of layer indices follow), vocabulary (512; other sizes of the same vocabulary follow
it in proportion; hashed n-gram tables 512), sliding windows, attention chunks and sparse-attention
top-k (8 tokens, or whole pools of a pooled top-k, so a short prompt crosses them; a window that spans the whole context never binds
and is kept). Per-layer overrides (keyed by layer index) are scaled as the config is, for the layers
kept. Sub-configs the model is built with (a byte-level model's encoder, global and decoder, a
vision or audio tower inside the language model) are scaled by the same rule; a width in one that
equals another's hidden size follows that one.
Field names are read through the config class's own aliases (`n_embd` is the hidden size; a depth
stored only as `num_layers` is the depth).
Dropped: quantization (weights are random and built in the run's dtype); a multimodal model's
towers outside its text model (the text model runs).
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
_MLP_KEYS = ("intermediate_size", "intermediate_size_mlp", "n_inner", "d_inner", "dff", "dim_ff")
#: an MLP's width under another name (ffn_dim, decoder_ffn_dim, dense_intermediate_size ...)
_MLP_NAME = re.compile(r"^(\w+_)?(intermediate_size|ffn_dim|ffn_hidden_size|feed_forward_size)$")
#: an expert's (or shared expert's) width: moe_intermediate_size, moe_hidden_size, expert_ffn_hidden_size ...
_EXPERT_WIDTH_NAME = re.compile(r"(moe|expert)\w*_(intermediate_size|hidden_size|ffn_dim)$|^shared_intermediate_size$")
#: a width named after a hidden size (hidden_size_global, embed_dim, vision_hidden_dim ...)
_OTHER_WIDTH_NAME = re.compile(r"hidden_size|hidden_dim|embed_dim|_dim$")
#: the depth stored under a name of its own, with no alias to num_hidden_layers
_DEPTH_KEYS = ("num_layers", "n_layers", "n_layer")
_LAYER_LIST_KEYS = ("layer_types", "layers_block_type", "block_types")
#: a list of layer indices (attention layers of a hybrid, dense layers of an MoE ...)
_INDEX_LIST_NAME = re.compile(r"(layer|idx|indices)")
#: another width that equals the hidden size in the published config follows the new width
_WIDTH_NAME = re.compile(r"(_dim|_dim_out|_width|_hidden_size|^embedding_size)$")
#: the head count of an encoder-decoder's other half, which follows the scaled head count where equal
_HALF_HEADS_NAME = re.compile(r"(num_)?(encoder|decoder)_attention_heads")
_TOKEN_KEYS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "sep_token_id",
               "image_token_id", "video_token_id", "boi_token_id", "eoi_token_id")


def describe() -> str:
    """The rule in one paragraph (printed with every run)."""
    return " ".join(line.strip() for line in __doc__.splitlines()[3:] if line.strip())


def scale(cfg: dict[str, Any], aliases: dict[str, str] | None = None,
          nested: dict[str, Any] | None = None, times: int = 1) -> tuple[dict[str, Any], list[str]]:
    """(scaled config, one line per change). `cfg` is a text model's full config dict (defaults
    filled in by its transformers config class); `aliases` is that class's `attribute_map` (the
    common name -> the field this config stores it in, e.g. "hidden_size" -> "n_embd"); `nested`
    names the sub-configs the model is built with (field -> that config class's aliases, or
    (aliases, its own nested sub-configs): a byte model's encoder, global and decoder, a vision
    tower inside the language model, an encoder-decoder's encoder and its text and vision parts),
    each scaled by the same rule; a width of one that is another's hidden size follows that one.
    `times`: how often every layer type of a layer pattern appears (once; twice where transformers
    cannot build a model with one layer of a type: Zamba ties one shared block across its hybrid
    layers)."""
    d, notes, _ = _scale_tree(cfg, aliases, nested, times)
    return d, notes


def _scale_tree(cfg: dict[str, Any], aliases: dict[str, str] | None, nested: dict[str, Any] | None,
                times: int = 1) -> tuple[dict[str, Any], list[str], dict]:
    """`scale` of a config and its sub-configs, with {old hidden size: new hidden size}."""
    d, notes, widths = _scale(cfg, aliases, times)
    parts = {"": (cfg, d)}
    for key, sub in (nested or {}).items():
        sub_aliases, deeper = sub if isinstance(sub, tuple) else (sub, None)
        if isinstance(d.get(key), dict):
            d[key], sub_notes, sub_widths = _scale_tree(d[key], sub_aliases, deeper)
            notes += [f"{key}.{line}" for line in sub_notes]
            parts[key + "."] = (cfg[key], d[key])
            for old, new in sub_widths.items():
                widths[old] = new if widths.get(old, new) == new else None  # two new widths: ambiguous
    if len(parts) > 1:
        for prefix, (before, after) in parts.items():
            for key, value in list(after.items()):
                new = widths.get(value) if type(value) is int else None
                if new and before.get(key) == value and _OTHER_WIDTH_NAME.search(key) and "head" not in key:
                    notes.append(f"{prefix}{key}: {value} -> {new} (the hidden size it equals)")
                    after[key] = new
    return d, notes, widths


def _scale(cfg: dict[str, Any], aliases: dict[str, str] | None, times: int = 1) -> tuple[dict[str, Any], list[str], dict]:
    """`scale` of one config: (scaled config, notes, {old hidden size: new hidden size})."""
    d = dict(cfg)
    notes: list[str] = []
    # read and write the common names; the config's own field names come back at the end
    # (not the head dim: stored under another name it is derived from the width, as in Zamba2)
    stored: dict[str, str] = {}
    for common, field in (aliases or {}).items():  # two common names of one field: the first reads it
        if field in d and common not in d and common != field and common != "head_dim" \
                and field not in stored.values():
            stored[common] = field
    if "num_hidden_layers" not in d and "num_hidden_layers" not in stored:
        depth = next((k for k in _DEPTH_KEYS if type(d.get(k)) is int), None)  # the depth under its own name
        if depth is not None:
            stored["num_hidden_layers"] = depth
    for common, field in stored.items():
        d[common] = d.pop(field)
    per_layer = {k: v for k, v in d.items() if _layer_keyed(v, d.get("num_hidden_layers"))}

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
        spans = explicit_head_dim and d["head_dim"] * n == hidden and new_n * d["head_dim"] <= 4 * HIDDEN
        if isinstance(hidden, int) and (not explicit_head_dim or spans):
            # the head dim derives from the width, or the published heads span it exactly (Helium's
            # output projection is hidden x hidden): heads x head dim stays the width, unless that
            # would keep it wide (RecurrentGemma's 10 query heads of 256 share one key head)
            new_hidden = new_n * (hidden // n)
        else:  # a width the heads divide (config classes check it), rounded to 8
            step = math.lcm(new_n, 8)
            new_hidden = step * math.ceil(HIDDEN / step)
        put("num_attention_heads", new_n)
        if d.get("num_key_value_heads") is not None:
            put("num_key_value_heads", new_kv)
        for key, value in list(d.items()):  # the other half of an encoder-decoder (decoder_attention_heads)
            if _HALF_HEADS_NAME.fullmatch(key) and value == n and type(value) is int:
                put(key, new_n)
    if isinstance(hidden, int):
        put("hidden_size", new_hidden)
        for key, value in list(d.items()):  # e.g. a projection width, or Zamba2's attention width 2 x hidden
            if key != "hidden_size" and "head" not in key and _WIDTH_NAME.search(key) and type(value) is int \
                    and not mlp_width(key) \
                    and value % hidden == 0 and 1 <= value // hidden <= 4:
                put(key, value // hidden * new_hidden)
            elif key.endswith("_groups") and type(value) is int and value == hidden:  # a depthwise conv
                put(key, new_hidden)
    for key in list(d):
        kind = mlp_width(key)
        if not kind:
            continue
        width = new_hidden // 2 if kind == "expert" else 2 * new_hidden
        if type(d[key]) is int and d[key] > 0:
            put(key, width)
        elif isinstance(d[key], list) and d[key] and all(type(v) is int and v > 0 for v in d[key]):
            put(key, [width] * len(d[key]))  # one per layer (Hunyuan-A13B's experts, Gemma-3n's MLPs)
    for key in ("q_lora_rank", "o_lora_rank"):  # low-rank query and output projections
        if isinstance(d.get(key), int):
            put(key, 64)

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
    for key in ("sliding_window", "attention_chunk_size", "index_topk"):
        if isinstance(d.get(key), int) and d[key] > WINDOW:
            if isinstance(context, int) and d[key] >= context:
                notes.append(f"{key}: {d[key]} kept (it spans the whole context, so it never binds)")
                continue
            # a top-k over pooled or blocked keys stays a whole number of pools (GLM-5-Next's index_kpool)
            pools = [v for k, v in d.items() if k.startswith(key.split("_")[0] + "_") and re.search(r"pool|block", k)
                     and type(v) is int and v > 0 and d[key] % v == 0]
            step = math.lcm(*pools) if pools else 1
            put(key, step * math.ceil(WINDOW / step))
    old_vocab = d.get("vocab_size")
    if isinstance(old_vocab, int) and old_vocab > VOCAB:
        put("vocab_size", VOCAB)
        for key, value in list(d.items()):  # the same vocabulary again: per-layer inputs, unpadded
            if key != "vocab_size" and "vocab_size" in key and type(value) is int \
                    and 0.99 * old_vocab <= value <= old_vocab:
                put(key, max(1, VOCAB * value // old_vocab))
        for key, value in list(d.items()):  # an id past the text vocabulary (rows after it: an audio
            if key.endswith("_token_id") and key not in _TOKEN_KEYS and type(value) is int \
                    and value >= old_vocab:  # pad after the codebooks) keeps its distance from it
                put(key, value - old_vocab + VOCAB)
    for key, value in list(d.items()):  # hashed n-gram embedding tables (a byte model's)
        if "vocab" in key and ("hash" in key or "ngram" in key) and type(value) is int and value > VOCAB:
            put(key, VOCAB)
        for key in _TOKEN_KEYS:
            value = d.get(key)
            if isinstance(value, int) and value >= VOCAB:
                put(key, VOCAB - 1 - _TOKEN_KEYS.index(key))
            elif isinstance(value, list):
                put(key, [v if v < VOCAB else VOCAB - 1 for v in value if isinstance(v, int)])

    # ------------------------------------------- per-layer overrides, scaled as the config would be
    if per_layer:
        base = {k: v for k, v in cfg.items() if k not in per_layer}
        for key, entries in per_layer.items():
            scaled = {}
            for layer, override in entries.items():
                alone, _, _ = _scale({**base, **override}, aliases)
                scaled[layer] = {k: alone.get(k, v) for k, v in override.items()}
            put(key, scaled)

    # ------------------------------------------------------------------------------------ depth
    _scale_depth(d, put, notes, times)
    for common, field in stored.items():
        d[field] = d.pop(common)
    return d, notes, ({hidden: new_hidden} if isinstance(hidden, int) and hidden != new_hidden else {})


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
    heads = int(expand * hidden) // head_dim
    if heads < 2 and not isinstance(d.get("mamba_d_ssm"), int):
        # the scaled width holds fewer than two heads of the published size: two heads that split
        # the width (the mixer's heads times their size must be its inner width)
        heads, head_dim = 2, max(1, int(expand * hidden) // 2)
        put(hd_key, head_dim)
    heads = max(2, heads)
    gkey = next((k for k in ("mamba_n_groups", "n_groups", "mamba_ngroups") if isinstance(d.get(k), int)), None)
    if gkey is not None:
        groups = min(d[gkey], 2)
        while heads % groups:
            groups -= 1
        put(gkey, groups)
    put(heads_key, heads)
    if isinstance(d.get("mamba_d_ssm"), int):
        put("mamba_d_ssm", heads * head_dim)


def _scale_depth(d: dict, put, notes: list[str], times: int = 1) -> None:
    old = d.get("num_hidden_layers")
    lkey = next((k for k in _LAYER_LIST_KEYS if isinstance(d.get(k), list) and d[k]), None)
    index_lists = [k for k in d if _INDEX_LIST_NAME.search(k) and _is_index_list(d[k], old)]
    unit = 1  # layers come in groups of this many (Dory's attention and MLP blocks)
    if lkey is not None:
        unit = _period(d[lkey])
        layers = -(-_covering(d[lkey], times) // unit) * unit
    elif isinstance(d.get("hybrid_override_pattern"), str) and d["hybrid_override_pattern"]:
        pattern = d["hybrid_override_pattern"]
        layers = _covering(pattern, times)
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
    for value in d.values():  # other per-layer kinds (mlp_layer_types: dense, MoE ...) appear too
        if isinstance(old, int) and isinstance(value, list) and len(value) == old and value \
                and all(isinstance(v, str) for v in value):
            layers = max(layers, _covering(value, times))
    if isinstance(d.get("first_k_dense_replace"), int) and d["first_k_dense_replace"] > 0:
        put("first_k_dense_replace", 1)  # one dense layer, then MoE
        layers = max(layers, 2)
    layers = max(2, min(layers, MAX_LAYERS) if lkey is None else layers)  # a residual stream across layers
    shared = d.get("num_kv_shared_layers")
    if type(shared) is int and 0 < shared and isinstance(old, int) and shared < old:
        # the last layers reuse earlier layers' keys and values: the layers once over compute them,
        # and once more over read them
        put("num_kv_shared_layers", layers)
        layers *= 2
    if isinstance(old, int):
        layers = min(layers, old)
    parts = _depth_parts(d, old)
    if parts:  # the depth split into stages (Dory: input, recurrent and output layers), in whole groups
        unit = unit if all(d[k] % unit == 0 for k in parts) else 1
        layers = min(max(layers, len(parts) * unit), old)
        for key, n in zip(parts, _shares([d[k] // unit for k in parts], layers // unit)):
            put(key, n * unit)
    for key, value in list(d.items()):
        if key != "num_hidden_layers" and re.search(r"(layers|blocks)$", key) and type(value) is int \
                and value == old:  # the depth stored again (xLSTM's num_blocks)
            put(key, layers)
        elif (key == "moe_layers" and isinstance(value, list)) or key in index_lists:
            put(key, [i for i in value if isinstance(i, int) and i < layers])
        elif _layer_keyed(value, old):
            kept = {k: v for k, v in value.items() if int(k) < layers}
            if len(kept) < len(value):
                d[key] = kept
                notes.append(f"{key}: the entries of the first {layers} layers")
        elif isinstance(value, list) and isinstance(old, int) and len(value) == old and old > layers:
            d[key] = value[:layers]
            notes.append(f"{key}: first {layers} of {old} layers")
    if lkey is not None and len(d[lkey]) > layers:
        notes.append(f"{lkey}: first {layers} of {len(d[lkey])} layers (every layer type "
                     f"{'once' if times == 1 else f'{times} times'})")
        d[lkey] = d[lkey][:layers]
    # a stack of layers run several times (HRM: num_hidden_layers = layers per stack x cycles) is the
    # depth; the total follows it
    per = next((k for k, v in d.items() if k.endswith("layers_per_stack") and type(v) is int
                and isinstance(old, int) and 0 < v < old and old % v == 0), None)
    if per is not None:
        repeats = old // d[per]
        put(per, min(layers, d[per]))
        layers = repeats * d[per]
    if "num_hidden_layers" in d:
        put("num_hidden_layers", layers)


def _period(seq: list) -> int:
    """2 when a list of layer types comes in pairs whose second block is always one type found
    nowhere else (Dory lists each layer as an attention block and then "mlp", and its config reads
    the list back in pairs); else 1. A longer repeating pattern (three sliding layers, then a full
    one) is no group: its layers stand alone, and one of each kind covers it."""
    values = list(map(str, seq))
    if len(values) < 4 or len(values) % 2 or len(set(values[1::2])) != 1:
        return 1
    return 1 if set(values[1::2]) & set(values[0::2]) else 2


def _depth_parts(d: dict, old: Any) -> list[str]:
    """Integer fields named *layers, two or more, that split the depth `old` into stages: they sum
    to it exactly, each a positive part of it. [] when there are none."""
    if not isinstance(old, int):
        return []
    keys = [k for k, v in d.items() if k != "num_hidden_layers" and k.endswith("layers") and type(v) is int
            and 0 < v < old]
    return keys if len(keys) >= 2 and sum(d[k] for k in keys) == old else []


def _shares(parts: list[int], total: int) -> list[int]:
    """`total` (at least len(parts)) split in proportion to `parts`, each share at least one: one
    each, then the rest by largest remainder."""
    extra = total - len(parts)
    exact = [extra * p / sum(parts) for p in parts]
    shares = [1 + int(e) for e in exact]
    for i in sorted(range(len(parts)), key=lambda i: int(exact[i]) - exact[i])[:total - sum(shares)]:
        shares[i] += 1
    return shares


def _covering(seq: Any, times: int) -> int:
    """The length of the shortest prefix of `seq` that holds each of its values `times` times (or
    as often as `seq` does)."""
    values = list(map(str, seq))
    want = {v: min(times, values.count(v)) for v in set(values)}
    seen: dict[str, int] = {}
    for i, v in enumerate(values):
        seen[v] = seen.get(v, 0) + 1
        if all(seen.get(k, 0) >= n for k, n in want.items()):
            return i + 1
    return len(values)


def mlp_width(key: str) -> str:
    """"expert" for an expert's MLP width, "mlp" for a dense MLP's, "" for any other field."""
    if _EXPERT_WIDTH_NAME.search(key):
        return "expert"
    return "mlp" if key in _MLP_KEYS or _MLP_NAME.search(key) else ""


def _layer_keyed(value: Any, layers: Any) -> bool:
    """Per-layer overrides: a dict of dicts keyed by layer index ("05" or 5)."""
    if not (isinstance(value, dict) and value and isinstance(layers, int)):
        return False
    try:
        return all(isinstance(v, dict) and 0 <= int(k) < layers for k, v in value.items())
    except (TypeError, ValueError):
        return False


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
