"""The model tier: whole models from their configs, end to end through a backend's Triton, vs eager."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="transformers not installed (pip install transformers)")

from transformers import CONFIG_MAPPING  # noqa: E402

from sdk.modeltier.runner import plan, text_config  # noqa: E402
from sdk.modeltier.scale import scale  # noqa: E402

HERE = Path(__file__).parent

# published configs (GPT-2, Bamba-9B, Zamba2-2.7B) whose fields the scale rule once missed; the slow
# tier runs them end to end (tests/slow/test_model_tier_more.py)
GPT2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 768, "n_head": 12,
        "n_layer": 12, "n_positions": 1024, "vocab_size": 50257, "activation_function": "gelu_new"}
BAMBA = {"model_type": "bamba", "architectures": ["BambaForCausalLM"], "hidden_size": 4096,
         "num_hidden_layers": 32, "attn_layer_indices": [9, 18, 27], "num_attention_heads": 32,
         "num_key_value_heads": 8, "intermediate_size": 14336, "mamba_n_heads": 128, "mamba_d_head": 64,
         "mamba_d_state": 128, "mamba_n_groups": 1, "mamba_expand": 2, "mamba_d_conv": 4,
         "mamba_chunk_size": 256, "vocab_size": 128256}
_ZAMBA2_HYBRID = [6, 12, 18, 24, 30, 36, 42, 47, 51]
ZAMBA2 = {"model_type": "zamba2", "architectures": ["Zamba2ForCausalLM"], "hidden_size": 2560,
          "num_hidden_layers": 54, "hybrid_layer_ids": _ZAMBA2_HYBRID,
          "layers_block_type": ["hybrid" if i in _ZAMBA2_HYBRID else "mamba" for i in range(54)],
          "mamba_d_state": 64, "mamba_expand": 2, "mamba_ngroups": 1, "n_mamba_heads": 80,
          "num_attention_heads": 32, "num_key_value_heads": 32, "intermediate_size": 10240,
          "num_mem_blocks": 2, "vocab_size": 32000}
DAY0 = [sys.executable, "-m", "sdk.cli"]


def _config(model_type: str, **overrides) -> dict:
    cfg = CONFIG_MAPPING[model_type](**overrides).to_dict()
    return cfg


def _write(tmp_path: Path, name: str, cfg: dict) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    path = folder / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def _day0(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
            **(env or {})}
    return subprocess.run(DAY0 + list(args), capture_output=True, text=True, timeout=timeout, env=full,
                          cwd=HERE.parent)


# ----------------------------------------------------------------------------- the scale rule
@pytest.mark.parametrize("model_type", ["llama", "qwen3_next", "deepseek_v3", "gemma3_text", "mamba2",
                                        "nemotron_h", "gpt_oss", "llama4_text", "jamba", "qwen3_5_moe"])
def test_scaling_keeps_what_selects_kernels(model_type):
    mt, full = text_config({"model_type": model_type})
    small, notes = scale(full)
    kept = ["head_dim", "qk_rope_head_dim", "kv_lora_rank", "linear_key_head_dim", "linear_value_head_dim",
            "linear_conv_kernel_dim", "conv_kernel", "mamba_d_conv", "state_size", "ssm_state_size",
            "mamba_d_state", "chunk_size", "num_experts_per_tok", "hidden_act", "hidden_activation",
            "rms_norm_eps", "rope_parameters", "partial_rotary_factor", "attn_logit_softcapping",
            "final_logit_softcapping", "n_group", "topk_group", "norm_topk_prob", "mlp_hidden_act"]
    for key in kept:
        if key in full and (model_type != "mamba2" or key != "head_dim"):
            assert small[key] == full[key], (key, full[key], small[key])
    n, kv = full.get("num_attention_heads"), full.get("num_key_value_heads")
    if n and kv:
        assert small["num_attention_heads"] // small["num_key_value_heads"] == n // kv  # GQA ratio
    if full.get("linear_num_key_heads"):
        assert (small["linear_num_value_heads"] // small["linear_num_key_heads"]
                == full["linear_num_value_heads"] // full["linear_num_key_heads"])
    for key in ("layer_types", "layers_block_type"):
        if isinstance(full.get(key), list):
            assert set(small[key]) == set(full[key]) and len(small[key]) <= len(full[key])
    experts = next((k for k in ("num_experts", "n_routed_experts", "num_local_experts") if full.get(k)), None)
    if experts and full[experts] > 1:
        assert full["num_experts_per_tok"] < small[experts] <= full[experts]
        if (full.get("n_group") or 1) > 1:
            assert small[experts] % full["n_group"] == 0
    assert small["vocab_size"] <= 512 < full["vocab_size"]
    assert small["hidden_size"] < full["hidden_size"] and notes
    # transformers accepts the scaled config
    CONFIG_MAPPING[mt](**{k: v for k, v in small.items() if k != "model_type"})


def test_multimodal_config_runs_its_text_model():
    mt, _ = text_config({"model_type": "qwen3_5_moe"})
    assert mt.endswith("_text")


# ----------------------------------------------------------------------------- end to end
@pytest.mark.parametrize("content, message", [
    (None, "does not exist"), ("{not json", "not JSON"), ('{"hidden_size": 8}', "no 'model_type'"),
    ('{"model_type": "no_such_arch"}', "not known to the installed transformers"),
    ('[1, 2]', "not an object"),
])
def test_bad_configs_are_one_line_and_exit_2(tmp_path, content, message):
    path = tmp_path / "config.json"
    if content is not None:
        path.write_text(content)
    proc = _day0("model", str(path), "--out", str(tmp_path / "x.jsonl"), timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr
    assert not (tmp_path / "x.jsonl").exists()


def test_plan_refuses_unknown_modes_and_dtypes(tmp_path):
    from sdk.errors import UnknownName
    path = _write(tmp_path, "llama", _config("llama"))
    with pytest.raises(UnknownName):
        plan([str(path)], "cpu_interp", ["fp8"], ["prefill"])
    with pytest.raises(UnknownName):
        plan([str(path)], "cpu_interp", ["fp32"], ["train"])
    (job,) = plan([str(path)], "cpu_interp", ["fp32"], ["decode"])
    assert job.modes == ("prefill", "decode")  # decode continues a prefill's cache


def test_a_library_is_credited_only_with_kernels_that_ran():
    """The record names an upstream library only for kernels of its own that launched; a library
    transformers imported but did not call (it took its PyTorch path) is said to be idle."""
    from sdk.modeltier.runner import _libraries_used
    inductor = {"name": "triton_poi_fused_add_0", "origin": "inductor", "launches": 3}
    fla_ran = {"name": "chunk_fwd_kernel_o", "origin": "fla", "launches": 2}
    fla_compiled_only = {"name": "l2norm_fwd_kernel", "origin": "fla", "launches": 0}
    assert _libraries_used([inductor, fla_ran], ["fla"]) == "; library kernels from fla"
    assert _libraries_used([inductor, fla_compiled_only], ["fla"]) == "; fla imported, none of its kernels ran"
    assert _libraries_used([inductor], []) == ""
    liger = {"name": "_swiglu_forward_kernel", "origin": "liger", "launches": 1}
    assert _libraries_used([liger], ["liger_kernel", "fla"]) == (
        "; library kernels from liger; fla imported, none of its kernels ran")
    from sdk.modeltier.runner import EXPORTING_INSIDE_COMPILE
    assert _libraries_used([inductor], ["fla"], exporting=True) == (
        f"; fla imported, none of its kernels ran ({EXPORTING_INSIDE_COMPILE})")
    assert _libraries_used([inductor, fla_ran], ["fla"], exporting=True) == "; library kernels from fla"


def test_a_torch_that_says_it_is_exporting_inside_compile_is_detected(monkeypatch):
    """torch 2.11 answers torch.compiler.is_exporting() True while torch.compile traces, which sends
    transformers down its PyTorch path for library layers: the probe tells such a torch apart."""
    import torch
    from sdk.modeltier.worker import exporting_inside_compile
    if torch.__version__.startswith("2.13."):  # the pinned torch answers False there
        assert exporting_inside_compile() is False
    for answer in (True, False):
        torch._dynamo.reset()
        monkeypatch.setattr(torch.compiler, "is_exporting", lambda answer=answer: answer)
        assert exporting_inside_compile() is answer
    torch._dynamo.reset()


# ------------------------------------------------------- configs as published (field names, layer lists)
def _plan_config(tmp_path: Path, name: str, cfg: dict):
    (job,) = plan([str(_write(tmp_path, name, cfg))], "cpu_interp", ["fp32"], ["prefill", "decode"])
    return job


def _decode_equals_one_pass(spec: dict):
    """Build `spec`'s model; its decode step after the prefill (with the cache or state the prefill
    leaves) must equal the last position of one pass over the prompt and the next token. Returns
    the model and the prompt."""
    import torch
    from sdk.modeltier.worker import _output, build, forward, inputs
    model, config = build(spec)
    ids, nxt = inputs(spec, config.vocab_size)
    with torch.no_grad():
        whole = _output(model(torch.cat([ids, nxt], dim=1)))[:, -1:]
    out = forward(model, ids, nxt, ["prefill", "decode"])
    torch.testing.assert_close(out["decode"], whole, rtol=1e-4, atol=1e-5)
    return model, ids


def _built(job):
    """The scaled config as transformers builds it, and the model's module class names."""
    from sdk.modeltier.worker import build
    model, config = build(job.spec())
    return config, {type(m).__name__ for m in model.modules()}


def test_fields_stored_under_their_own_names_are_scaled(tmp_path):
    """GPT-2 stores the width, heads and depth as n_embd, n_head, n_layer (the config class's
    attribute_map): the rule reads them through those aliases, keeps the head dim 64."""
    job = _plan_config(tmp_path, "gpt2", GPT2)
    c = job.config
    assert c["n_layer"] == 2 and c["n_embd"] < 768 and c["n_embd"] // c["n_head"] == 64, c
    assert "hidden_size" not in c and "num_hidden_layers" not in c  # written back under the config's names
    assert any(n.startswith("n_embd: 768 ->") for n in job.notes)
    config, _ = _built(job)
    assert config.hidden_size == c["n_embd"] and config.num_hidden_layers == 2


def test_width_is_a_multiple_of_the_heads_where_the_head_dim_is_explicit(tmp_path):
    """20 query heads over 4 KV heads (GQA 5) with head_dim 128: 5 heads of 128 over a width the
    heads divide (transformers checks it for this architecture)."""
    arcee = {"model_type": "arcee", "architectures": ["ArceeForCausalLM"], "hidden_size": 2560, "head_dim": 128,
             "num_attention_heads": 20, "num_key_value_heads": 4, "intermediate_size": 18432,
             "num_hidden_layers": 36, "vocab_size": 128004, "hidden_act": "relu2"}
    job = _plan_config(tmp_path, "afm", arcee)
    c = job.config
    assert c["num_attention_heads"] == 5 and c["num_key_value_heads"] == 1 and c["head_dim"] == 128
    assert c["hidden_size"] % 5 == 0 and c["hidden_size"] % 8 == 0 and c["hidden_size"] < 2560
    _built(job)  # transformers accepts it


def test_a_list_of_attention_layer_indices_keeps_an_attention_layer(tmp_path):
    """Bamba-9B names its attention layers by index (9, 18, 27 of 32): two layers keep one Mamba-2
    layer and one attention layer, in that order."""
    job = _plan_config(tmp_path, "bamba", BAMBA)
    c = job.config
    assert c["num_hidden_layers"] == 2 and c["attn_layer_indices"] == [1]
    assert c["mamba_n_heads"] * c["mamba_d_head"] == c["mamba_expand"] * c["hidden_size"]
    config, classes = _built(job)
    first, second = config.layers_block_type
    assert "attention" in second and first != second, config.layers_block_type
    assert any("Attention" in n for n in classes) and any("Mixer" in n for n in classes), classes


def test_index_lists_follow_a_truncated_layer_list_and_ssm_heads_follow_the_width(tmp_path):
    """Zamba2: the hybrid layer ids follow the layer-type prefix; the Mamba heads (n_mamba_heads,
    head dim 64 kept) and the attention width (2 x hidden, stored in the config) follow the width."""
    job = _plan_config(tmp_path, "zamba2", ZAMBA2)
    c = job.config
    assert c["num_hidden_layers"] == 7 and c["hybrid_layer_ids"] == [6] and c["layers_block_type"][6] == "hybrid"
    config, _ = _built(job)
    assert config.mamba_headdim == 64 and config.n_mamba_heads * 64 == 2 * config.hidden_size
    assert config.attention_hidden_size == 2 * config.hidden_size


def test_the_published_window_name_and_pattern_list_are_scaled(tmp_path):
    """RecurrentGemma's window is attention_window_size (an alias of sliding_window) and its
    layer pattern block_types (recurrent, recurrent, attention): three layers and an 8-token window."""
    rg = {"model_type": "recurrent_gemma", "hidden_size": 2560, "lru_width": 2560, "num_hidden_layers": 26,
          "block_types": ["recurrent", "recurrent", "attention"], "attention_window_size": 2048,
          "num_attention_heads": 10, "num_key_value_heads": 1, "head_dim": 256, "intermediate_size": 15360,
          "vocab_size": 256000}
    c = _plan_config(tmp_path, "rg", rg).config
    assert c["num_hidden_layers"] == 3 and c["attention_window_size"] == 8
    assert c["lru_width"] == c["hidden_size"] < 2560


@pytest.mark.parametrize("cfg, message", [
    ({"model_type": "whisper"}, "is an encoder-decoder model and its model reads input_features"),
    ({"model_type": "vit"}, "no causal language model and its model reads pixel_values"),
    ({"model_type": "musicgen"}, "is an encoder-decoder model"),  # a text encoder and an audio decoder
    ({"model_type": "llama", "hidden_size": "wide"}, "transformers rejects this llama config"),
])
def test_configs_the_tier_cannot_run_are_refused_in_one_line(tmp_path, cfg, message):
    from sdk.errors import ConfigError
    with pytest.raises(ConfigError) as err:
        plan([str(_write(tmp_path, "m", cfg))], "cpu_interp", ["fp32"], ["prefill"])
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_a_decoder_built_as_a_bert_decoder_is_accepted(tmp_path):
    """is_decoder makes a BERT-family config a causal decoder with a cache; without it the config is
    an encoder, run as one forward pass of its masked language model."""
    (job,) = plan([str(_write(tmp_path, "m", {"model_type": "bert", "is_decoder": True}))], "cpu_interp",
                  ["fp32"], ["prefill", "decode"])
    assert job.model_type == "bert" and job.kind == "decoder" and job.modes == ("prefill", "decode")
    assert job.model_class.endswith(":BertLMHeadModel")
    (job,) = plan([str(_write(tmp_path, "e", {"model_type": "bert"}))], "cpu_interp", ["fp32"],
                  ["prefill", "decode"])
    assert job.kind == "encoder" and job.modes == ("prefill",) and job.model_class.endswith(":BertForMaskedLM")
    assert any("no decode step" in n for n in job.notes)


def test_a_cache_the_model_fills_without_returning_it_carries_the_decode():
    """transformers' RecurrentGemma returns no cache from its prefill but fills one it is given in
    place: the decode step continues that cache, and its logits equal those of one pass over the
    prompt and the next token together."""
    from transformers import RecurrentGemmaConfig
    (mt, cfg) = text_config(RecurrentGemmaConfig(hidden_size=64, lru_width=64, num_hidden_layers=3,
                                                 num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                                                 intermediate_size=128, vocab_size=256).to_dict())
    _decode_equals_one_pass({"config": {**cfg, "model_type": mt}, "seed": 0, "dtype": "fp32", "batch": 1, "tokens": 6})


def test_a_model_that_keeps_no_cache_is_said_so_before_decode():
    """A decoder that neither returns a cache nor fills one it is given: the decode step says why
    it cannot run (a step without the prompt's state would compare logits of nothing)."""
    import torch
    from sdk.modeltier.worker import forward

    class Out(dict):
        __getattr__ = dict.get

    class Model(torch.nn.Module):
        config = None

        def forward(self, input_ids, use_cache=None, cache=None):
            return Out(logits=torch.ones(*input_ids.shape, 8))

    ids, nxt = torch.zeros((1, 4), dtype=torch.long), torch.zeros((1, 1), dtype=torch.long)
    model = Model()
    assert forward(model, ids, nxt, ["prefill"])["prefill"].shape == (1, 4, 8)
    with pytest.raises(RuntimeError, match="returned no cache from the prefill"):
        forward(model, ids, nxt, ["prefill", "decode"])


def test_a_recurrent_state_returned_under_its_own_name_carries_the_decode():
    """RWKV returns and takes its recurrent state as `state`: the decode step continues it, and
    its logits equal those of one pass over the prompt and the next token together."""
    from transformers import RwkvConfig
    mt, cfg = text_config(RwkvConfig(hidden_size=64, attention_hidden_size=64, intermediate_size=128,
                                     num_hidden_layers=2, vocab_size=256, context_length=64).to_dict())
    _decode_equals_one_pass({"config": {**cfg, "model_type": mt}, "seed": 0, "dtype": "fp32", "batch": 1, "tokens": 6})


def test_per_layer_lists_and_repeated_depths_are_scaled(tmp_path):
    """Hunyuan-A13B gives top-k and expert widths per layer (lists): experts stay more than top-k
    and every expert width shrinks; xLSTM stores its depth twice (num_blocks); GPT-BigCode's MLP
    width is n_inner."""
    hy = {"model_type": "hunyuan_v1_moe", "hidden_size": 4096, "head_dim": 128, "num_attention_heads": 32,
          "num_key_value_heads": 8, "num_hidden_layers": 32, "num_experts": 64, "moe_topk": [8] * 32,
          "moe_intermediate_size": [3072] * 32, "num_shared_expert": [1] * 32, "intermediate_size": 3072,
          "vocab_size": 128167}
    c = _plan_config(tmp_path, "hy", hy).config
    assert c["num_experts"] > 8 and c["moe_topk"] == [8, 8] and c["num_hidden_layers"] == 2
    assert len(c["moe_intermediate_size"]) == 2 and max(c["moe_intermediate_size"]) < 3072
    x = _plan_config(tmp_path, "xlstm", {"model_type": "xlstm", "hidden_size": 4096, "embedding_dim": 4096,
                                         "num_hidden_layers": 32, "num_blocks": 32, "vocab_size": 50304}).config
    assert x["num_blocks"] == x["num_hidden_layers"] == 2 and x["embedding_dim"] == x["hidden_size"] < 4096
    sc = _plan_config(tmp_path, "sc", {"model_type": "gpt_bigcode", "n_embd": 2048, "n_head": 16, "n_layer": 24,
                                       "n_inner": 8192, "multi_query": True, "vocab_size": 49152}).config
    assert sc["n_inner"] == 2 * sc["n_embd"] and sc["n_layer"] == 2


def test_a_window_that_spans_the_whole_context_is_kept():
    """A sliding window as long as the context never binds (Phi-3.5-MoE publishes 131072 of 131072):
    shrinking it would make the scaled model attend through a window the published one never has.
    A window shorter than the context (Mistral-7B v0.1: 4096 of 32768) shrinks to 8 tokens."""
    base = {"model_type": "mistral", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
            "intermediate_size": 14336, "num_hidden_layers": 32, "vocab_size": 32000}
    off, notes = scale({**base, "sliding_window": 131072, "max_position_embeddings": 131072})
    assert off["sliding_window"] == 131072 and any("never binds" in n for n in notes)
    on, _ = scale({**base, "sliding_window": 4096, "max_position_embeddings": 32768})
    assert on["sliding_window"] == 8


# ----------------------------------------- transformers' own defaults of every generative architecture
def _defaults(model_type: str) -> dict:
    """A config.json as transformers' config class writes its defaults (often the full-size model)."""
    cfg = json.loads(CONFIG_MAPPING[model_type]().to_json_string(use_diff=False))
    return {**cfg, "model_type": model_type}


def _meta_model(job):
    """The class the plan chose, built from the scaled config on the meta device (no memory)."""
    import torch
    from sdk.modeltier.classes import load
    cfg = dict(job.config)
    with torch.device("meta"):
        config = CONFIG_MAPPING[cfg.pop("model_type")](**cfg)
        return load(job.model_class)._from_config(config)


def test_floats_json_cannot_hold_are_read_as_transformers_writes_them(tmp_path):
    """transformers writes inf as {"__float__": "Infinity"} in config.json (Mamba-2's time_step_limit):
    the config is read back with the float, not refused as a malformed field."""
    cfg = _defaults("mamba2")
    assert cfg["time_step_limit"][1] == {"__float__": "Infinity"}  # what save_pretrained writes
    job = _plan_config(tmp_path, "mamba2", cfg)
    assert job.config["time_step_limit"] == [0.0, float("inf")]
    _meta_model(job)


# DBRX's published config.json writes moe_normalize_expert_weights as 1 (DbrxFFNConfig declares a float)
DBRX = json.loads((HERE / "data" / "configs" / "dbrx_instruct.json").read_text())


def test_json_numbers_are_read_as_the_config_class_declares_them(tmp_path):
    """JSON writes 1 for 1.0 and 4096.0 for 4096: a whole number in a float field of a sub-config, and
    a whole-valued float in an int field, are read as declared, not refused."""
    from huggingface_hub.errors import StrictDataclassError
    with pytest.raises(StrictDataclassError, match="moe_normalize_expert_weights"):
        CONFIG_MAPPING["dbrx"](**{k: v for k, v in DBRX.items() if k != "model_type"})  # transformers alone
    cfg = json.loads(json.dumps(DBRX))
    cfg["n_heads"] = 48.0
    job = _plan_config(tmp_path, "dbrx", cfg)
    ffn = job.config["ffn_config"]
    assert ffn["moe_normalize_expert_weights"] == 1.0 and isinstance(ffn["moe_normalize_expert_weights"], float)
    assert isinstance(job.published["n_heads"], int) and job.published["n_heads"] == 48
    assert ffn["moe_top_k"] == 4 and isinstance(ffn["moe_top_k"], int)  # ints where ints are declared stay
    _meta_model(job)


def test_a_field_the_config_class_derives_from_a_sub_config_is_scaled_at_its_source(tmp_path):
    """DBRX's config class copies attn_config.kv_n_heads to num_key_value_heads, and its attention
    reads attn_config: the scaled key-value heads must reach it (8 of them against 6 scaled query
    heads left the attention with 0 groups), and the clip value that shares its published 8 stays."""
    job = _plan_config(tmp_path, "dbrx", json.loads(json.dumps(DBRX)))
    heads, kv = job.config["n_heads"], job.config["attn_config"]["kv_n_heads"]
    assert kv == job.config["num_key_value_heads"] and heads // kv == 48 // 8 and heads < 48
    assert job.config["attn_config"]["clip_qkv"] == 8
    attn = _meta_model(job).transformer.blocks[0].norm_attn_norm.attn
    assert attn.num_key_value_heads == kv and attn.num_key_value_groups == heads // kv


def test_an_op_whose_shape_depends_on_the_data_is_a_limit_of_the_meta_check():
    """The published config's check on the meta device cannot run torch.nonzero (MoE routing): that
    makes its verdict unknown, not a failure transformers shares."""
    import torch
    from sdk.modeltier.runner import _META_LIMIT
    with pytest.raises(Exception) as raised:
        torch.nonzero(torch.ones(3, device="meta"))
    assert _META_LIMIT.search(" ".join(f"{type(raised.value).__name__}: {raised.value}".split()))
    assert not _META_LIMIT.search("RuntimeError: The size of tensor a (6) must match the size of tensor b (0)")


@pytest.mark.parametrize("model_type, cls", [
    ("mllama", "MllamaForCausalLM"),            # the text config's own causal LM, no auto mapping for it
    ("kosmos-2", "Kosmos2TextForCausalLM"),     # the same, in another modeling module of the package
    ("mistral4", "Mistral4ForCausalLM"),        # mapped as image-text-to-text, built from its own config
    ("chameleon", "ChameleonForConditionalGeneration"),  # early fusion: one transformer over all tokens
    ("qwen2_vl", "Qwen2VLTextModel"),           # a multimodal model's text model: hidden states compared
])
def test_the_class_built_is_the_one_that_generates_from_this_config_class(model_type, cls):
    from sdk.modeltier.runner import _text_config
    _, text, found, output, kind = _text_config({"model_type": model_type})
    assert kind == "decoder"
    assert found.__name__ == cls and found.config_class is type(text)
    assert output == ("hidden states" if cls.endswith("TextModel") else "logits")


def test_the_plan_names_the_class_and_the_worker_builds_it(tmp_path):
    """Mllama's text decoder runs from its config alone: the plan names MllamaForCausalLM, the worker
    builds exactly that class, and a prefill and a decode step give logits over the vocabulary."""
    from sdk.modeltier.worker import build, forward, inputs
    job = _plan_config(tmp_path, "mllama", _defaults("mllama"))
    assert job.model_class.endswith(":MllamaForCausalLM") and job.output == "logits"
    spec = {**job.spec(), "tokens": 6}
    model, config = build(spec)
    assert type(model).__name__ == "MllamaForCausalLM"
    ids, nxt = inputs(spec, config.vocab_size)
    out = forward(model, ids, nxt, ["prefill", "decode"])
    assert out["prefill"].shape == (1, 6, config.vocab_size) and out["decode"].isfinite().all()


def test_a_composite_config_carrying_is_decoder_false_is_not_an_encoder(tmp_path):
    """Evolla's config carries is_decoder false (for its protein encoder): its decoder is causal and
    keeps a cache, so it is planned as a decoder, while a BERT config that says is_decoder false is
    an encoder."""
    job = _plan_config(tmp_path, "evolla", _defaults("evolla"))
    assert job.model_class.endswith(":EvollaForProteinText2Text") and job.kind == "decoder"
    job = _plan_config(tmp_path, "roberta", _defaults("roberta"))
    assert job.kind == "encoder" and job.model_class.endswith(":RobertaForMaskedLM")
    job = _plan_config(tmp_path, "xlm", _defaults("xlm"))  # XLM says it with causal: false
    assert job.kind == "encoder" and job.modes == ("prefill",)
    job = _plan_config(tmp_path, "xlm_causal", {**_defaults("xlm"), "causal": True})
    assert job.kind == "decoder" and job.modes == ("prefill", "decode")


@pytest.mark.parametrize("model_type", ["pi0", "vit"])
def test_an_architecture_without_a_text_decoder_is_refused(tmp_path, model_type):
    from sdk.errors import ConfigError
    with pytest.raises(ConfigError, match="no causal language model and its model reads"):
        _plan_config(tmp_path, model_type, _defaults(model_type))


def test_per_layer_overrides_keyed_by_layer_index_are_scaled_and_kept_for_the_layers_kept(tmp_path):
    """Dots3's per_layer_config gives layers 2.. their own head counts (64 of 64): the entries of the
    layers kept stay, with the heads scaled as the config's are; Gemma-4's full-attention layer
    (index 5 of 30) keeps its head_dim 512."""
    job = _plan_config(tmp_path, "dots3", _defaults("dots3_note_text"))
    c = job.config
    assert set(c["per_layer_config"]) == {f"{i:02d}" for i in range(2, c["num_hidden_layers"])}
    layer = c["per_layer_config"]["02"]
    assert layer["num_attention_heads"] == layer["num_key_value_heads"] <= 4 and layer["kv_lora_rank"] == 1024
    assert sum(p.numel() for p in _meta_model(job).parameters()) < 20e6
    g = _plan_config(tmp_path, "gemma4", _defaults("gemma4_text")).config
    assert g["per_layer_config"] == {"05": {"head_dim": 512}} and g["num_hidden_layers"] == 6
    assert g["layer_types"][5] == "full_attention"
    assert g["vocab_size_per_layer_input"] == g["vocab_size"] == 512  # the same vocabulary, per layer


def test_layers_that_reuse_other_layers_keys_and_values_keep_both_kinds(tmp_path):
    """Gemma-3n: the last 15 of 35 layers reuse earlier layers' KV cache. Scaled: one period of the
    layer pattern computes keys and values, a second period reuses them, both with every layer type."""
    job = _plan_config(tmp_path, "gemma3n", _defaults("gemma3n_text"))
    c = job.config
    shared, layers = c["num_kv_shared_layers"], c["num_hidden_layers"]
    assert layers == 2 * shared and set(c["layer_types"][:shared]) == set(c["layer_types"][shared:])
    assert c["intermediate_size"] == [2 * c["hidden_size"]] * layers  # a per-layer MLP width list
    assert c["vocab_size_per_layer_input"] <= c["vocab_size"] == 512
    assert sum(p.numel() for p in _meta_model(job).parameters()) < 20e6


def test_sub_configs_the_model_is_built_with_are_scaled(tmp_path):
    """BLT's byte model is four sub-configs (patcher, encoder, global, decoder) and hashed byte n-gram
    tables: all shrink, and the encoder's and decoder's view of the global width follows it (4.6 B
    parameters as published)."""
    job = _plan_config(tmp_path, "blt", _defaults("blt"))
    c = job.config
    new_global = c["global_config"]["hidden_size"]
    assert new_global < 2048 and c["encoder_config"]["hidden_size_global"] == new_global
    assert c["decoder_config"]["hidden_size_global"] == new_global and c["encoder_hash_byte_group_vocab"] <= 512
    assert all(c[k]["num_hidden_layers"] <= 2 for k in ("patcher_config", "decoder_config", "global_config"))
    assert sum(p.numel() for p in _meta_model(job).parameters()) < 20e6


def test_widths_and_depths_under_their_own_names_are_scaled(tmp_path):
    """LongCat-Flash stores its depth only as num_layers; Step-3.7 names one field with two aliases
    (a KeyError before); MuSE-Spark's expert width is moe_hidden_size, OPT's MLP width ffn_dim,
    DeepSeek-V4's output projection rank o_lora_rank; a sparse-attention top-k shrinks like a window;
    GLM-MoE-DSA's MoE layers (mlp_layer_types) are kept beside its attention layer types."""
    lc = _plan_config(tmp_path, "longcat", _defaults("longcat_flash")).config
    assert lc["num_layers"] == 2
    st = _plan_config(tmp_path, "step3p7", _defaults("step3p7"))
    assert st.config["n_routed_experts"] < 16
    ms = _plan_config(tmp_path, "muse", _defaults("muse_spark")).config
    assert ms["moe_hidden_size"] == ms["hidden_size"] // 2
    opt = _plan_config(tmp_path, "opt", _defaults("opt")).config
    assert opt["ffn_dim"] == 2 * opt["hidden_size"]
    ds = _plan_config(tmp_path, "dsv4", _defaults("deepseek_v4")).config
    assert ds["o_lora_rank"] == ds["q_lora_rank"] == 64 and ds["index_topk"] == 8
    pooled = _plan_config(tmp_path, "glm5_next", _defaults("glm5_next"))  # top-k over pools of 16 keys
    assert pooled.config["index_topk"] == pooled.config["index_kpool"] == 16
    _meta_model(pooled)  # transformers checks the top-k is whole pools when it builds the model
    glm = _plan_config(tmp_path, "glm_dsa", _defaults("glm_moe_dsa")).config
    assert set(glm["mlp_layer_types"]) == {"dense", "sparse"} and len(glm["mlp_layer_types"]) == glm["num_hidden_layers"]


def test_an_id_past_the_vocabulary_and_depthwise_groups_follow_what_they_index(tmp_path):
    """Kyutai's embedding holds the text vocabulary, then 32 audio codebooks, then the audio pad row
    (audio_pad_token_id is its last row); its Mimi codec upsamples with one group per channel
    (upsample_groups = hidden size). Scaled, the pad id is still the last row and the groups still
    divide the codec's width: the model builds (it did not, before)."""
    job = _plan_config(tmp_path, "kyutai", _defaults("kyutai_speech_to_text"))
    c = job.config
    assert c["audio_pad_token_id"] == c["vocab_size"] + c["num_codebooks"] * c["codebook_vocab_size"]
    assert c["codec_config"]["upsample_groups"] == c["codec_config"]["hidden_size"] < 512
    model = _meta_model(job)
    table = model.model.embed_tokens.embed_tokens
    assert table.padding_idx == table.num_embeddings - 1 == c["audio_pad_token_id"]


def test_a_text_model_whose_caller_makes_the_cache_gets_one(tmp_path):
    """Granite-4-Vision's text model keeps keys and values only in a cache it is given (its
    multimodal model makes one, as generate() does): the prefill runs into a cache made from the
    config, and the decode step's hidden state equals one pass over the prompt and the next token."""
    import torch
    job = _plan_config(tmp_path, "granite4_vision", _defaults("granite4_vision"))
    assert job.output == "hidden states"
    model, ids = _decode_equals_one_pass({**job.spec(), "tokens": 6})
    with torch.no_grad():
        assert model(ids, use_cache=True).past_key_values is None  # it makes none of its own


def test_heads_that_span_the_width_as_published_still_span_it(tmp_path):
    """Helium publishes head_dim 128 x 20 heads = hidden 2560, and its attention output projection
    is hidden x hidden: scaled, heads x head_dim is still the width, and the eager model runs (a shape
    error before, with 4 heads of 128 over a width of 128). A head dim that does not span the width
    as published (Gemma-7B's 16 x 256 over 3072) gets a width the heads divide."""
    from sdk.modeltier.worker import build, forward, inputs
    job = _plan_config(tmp_path, "helium", _defaults("helium"))
    c = job.config
    assert c["head_dim"] == 128 and c["hidden_size"] == c["num_attention_heads"] * 128 < 2560
    spec = {**job.spec(), "tokens": 6}
    model, config = build(spec)
    ids, nxt = inputs(spec, config.vocab_size)
    assert forward(model, ids, nxt, ["prefill"])["prefill"].shape == (1, 6, config.vocab_size)
    g = _plan_config(tmp_path, "gemma", {**_defaults("gemma"), "hidden_size": 3072, "num_attention_heads": 16,
                                         "num_key_value_heads": 16, "head_dim": 256}).config
    assert g["hidden_size"] == 128 and g["num_attention_heads"] == 4 and g["head_dim"] == 256


def test_a_stack_run_in_cycles_keeps_its_cycles(tmp_path):
    """HRM runs one stack of 16 layers H_cycles x (L_cycles + 1) times and counts every run as a
    layer (num_hidden_layers 128): the stack is the depth that shrinks, the count follows it (the
    model failed with an IndexError when only the count shrank)."""
    job = _plan_config(tmp_path, "hrm", _defaults("hrm_text"))
    c = job.config
    assert c["num_layers_per_stack"] == 2 and c["num_hidden_layers"] == 2 * c["H_cycles"] * (c["L_cycles"] + 1)
    _decode_equals_one_pass({**job.spec(), "tokens": 6})


def test_a_depth_split_into_stages_of_paired_blocks_stays_whole(tmp_path):
    """Dory splits its depth into input, recurrent and output layers whose counts must sum to it,
    and lists each layer as two blocks (attention, then "mlp") that its config reads back in pairs:
    the stages shrink in proportion and in whole pairs, and the model builds and decodes (its
    scaled config broke transformers' validation before). A split with no paired list shrinks too."""
    from sdk.modeltier.scale import scale
    pytest.importorskip("transformers.models.dory")
    job = _plan_config(tmp_path, "dory", _defaults("dory"))
    c = job.config
    parts = [c["n_input_layers"], c["n_recurrent_layers"], c["n_output_layers"]]
    assert sum(parts) == c["num_hidden_layers"] == len(c["layer_types"]) < 72
    assert all(n > 0 and n % 2 == 0 for n in parts)
    assert c["layer_types"][1::2] == ["mlp"] * (len(c["layer_types"]) // 2)
    _decode_equals_one_pass({**job.spec(), "tokens": 6})
    plain = scale({"model_type": "x", "hidden_size": 64, "num_hidden_layers": 30, "n_encoder_layers": 12,
                   "n_decoder_layers": 18})[0]
    assert plain["n_encoder_layers"] + plain["n_decoder_layers"] == plain["num_hidden_layers"] < 30
    assert min(plain["n_encoder_layers"], plain["n_decoder_layers"]) >= 1


def test_a_layer_type_transformers_needs_twice_appears_twice(tmp_path):
    """Zamba ties one shared transformer block from its first hybrid layer to the others, and
    transformers cannot build a Zamba with a single hybrid layer: the plan finds that out on the
    meta device and keeps every layer type twice (it failed in the eager reference before); a model
    that builds with one of each keeps one."""
    job = _plan_config(tmp_path, "zamba", _defaults("zamba"))
    types = job.config["layers_block_type"]
    assert types.count("hybrid") == 2 and len(types) == job.config["num_hidden_layers"] < 76
    assert any(n.startswith("every layer type twice: transformers cannot build") for n in job.notes)
    _meta_model(job)
    once = _plan_config(tmp_path, "qwen3_next", _defaults("qwen3_next"))
    assert sorted(once.config["layer_types"]) == ["full_attention", "linear_attention", "linear_attention",
                                                  "linear_attention"]
    assert not any("twice" in n for n in once.notes)


def test_ssm_heads_too_wide_for_the_scaled_width_split_it(tmp_path):
    """Zamba2's defaults store an SSM head of 640 dims (its inner width over 8 heads): the scaled
    width (640 inner) holds one, so the mixer gets two heads that split it, and the model runs."""
    job = _plan_config(tmp_path, "zamba2", _defaults("zamba2"))
    c = job.config
    assert c["n_mamba_heads"] >= 2
    assert c["n_mamba_heads"] * c["mamba_headdim"] == int(c["mamba_expand"] * c["hidden_size"])
    model, ids = _decode_equals_one_pass({**job.spec(), "tokens": 6})
    assert model.config.mamba_headdim == c["mamba_headdim"]


# ------------------------------------------------------------------ encoder-decoders and encoders
@pytest.mark.parametrize("model_type, cls", [("t5", "T5ForConditionalGeneration"),
                                             ("bart", "BartForConditionalGeneration"),
                                             ("marian", "MarianMTModel"),
                                             ("t5gemma", "T5GemmaForConditionalGeneration")])
def test_an_encoder_decoders_decode_step_equals_one_pass_of_its_decoder(tmp_path, model_type, cls):
    """An encoder-decoder is planned whole (kind seq2seq, both modes); its decode step (the decoder's
    cache and the prefill's encoder output) gives the logits of one uncached pass of the decoder
    over its prompt and the next token, and its prefill those of the prompt's positions."""
    import torch
    from sdk.modeltier.worker import build, seq2seq, vocabulary
    job = _plan_config(tmp_path, model_type, _defaults(model_type))
    assert job.kind == "seq2seq" and job.modes == ("prefill", "decode") and job.model_class.endswith(":" + cls)
    model, config = build(job.spec())
    gen = torch.Generator().manual_seed(7)
    vocab = vocabulary(config)
    ids, dec, nxt = (torch.randint(0, vocab, (1, n), generator=gen) for n in (11, 6, 1))
    out = seq2seq(model, ids, dec, nxt, ["prefill", "decode"])
    with torch.no_grad():
        whole = model(input_ids=ids, decoder_input_ids=torch.cat([dec, nxt], dim=1), use_cache=False).logits
    assert out["prefill"].shape == (1, 6, whole.shape[-1])
    torch.testing.assert_close(out["prefill"], whole[:, :-1], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out["decode"], whole[:, -1:], rtol=1e-4, atol=1e-5)


def test_an_encoder_runs_one_pass_that_sees_both_ways(tmp_path):
    """An encoder (ModernBERT: no causal LM in transformers) is planned as its masked LM, prefill
    only; its one pass reads tokens after a position too: changing the last token changes the
    first position's logits, which a causal model's would not."""
    import torch
    from sdk.modeltier.worker import build, run_modes
    job = _plan_config(tmp_path, "modernbert", _defaults("modernbert"))
    assert job.kind == "encoder" and job.modes == ("prefill",) and job.model_class.endswith(":ModernBertForMaskedLM")
    spec = {**job.spec(), "tokens": 9}
    model, config = build(spec)
    out = run_modes(model, spec, config)
    assert set(out) == {"prefill"} and out["prefill"].shape == (1, 9, config.vocab_size)
    ids = torch.randint(0, config.vocab_size, (1, 9), generator=torch.Generator().manual_seed(3))
    other = ids.clone()
    other[0, -1] = (ids[0, -1] + 1) % config.vocab_size
    with torch.no_grad():
        a, b = (model(input_ids=x).logits for x in (ids, other))
    assert not torch.allclose(a[:, 0], b[:, 0])


@pytest.mark.parametrize("model_type, kind, cls", [
    ("modernvbert", "encoder", "ModernBertModel"),  # a multimodal model whose text model is an encoder
    ("clip", "encoder", "CLIPTextModel"),            # a text tower that keeps no cache: one pass
    ("qwen2_vl", "decoder", "Qwen2VLTextModel"),     # a text model that takes its cache back
    ("t5", "seq2seq", "T5ForConditionalGeneration"),
    ("esm", "encoder", "EsmForMaskedLM"),            # no causal LM in transformers, a masked LM
])
def test_each_config_is_run_as_the_kind_of_model_it_is(model_type, kind, cls):
    from sdk.modeltier.runner import _text_config
    _, _, found, _, got = _text_config({"model_type": model_type})
    assert (got, found.__name__) == (kind, cls)


@pytest.mark.parametrize("model_type", ["plbart", "squeezebert", "t5gemma2"])
def test_an_encoder_decoders_other_half_is_scaled_with_it(tmp_path, model_type):
    """What the published config keeps equal stays equal: PLBart's decoder heads are its encoder
    heads (12 of 12, which must divide the scaled width); SqueezeBERT's embedding size is its
    hidden size; T5Gemma-2's encoder keeps a text config of its own, two levels down, as wide as
    the decoder. Each scaled config builds (on the meta device)."""
    from sdk.modeltier.classes import load
    job = _plan_config(tmp_path, model_type, _defaults(model_type))
    c = job.config
    if model_type == "plbart":
        assert c["decoder_attention_heads"] == c["encoder_attention_heads"] < 12
        assert c["d_model"] % c["decoder_attention_heads"] == 0
    elif model_type == "squeezebert":
        assert c["embedding_size"] == c["hidden_size"] < 768
    else:
        assert c["encoder"]["text_config"]["hidden_size"] == c["decoder"]["hidden_size"] < 2304
        assert c["encoder"]["text_config"]["num_hidden_layers"] <= 8
    import torch
    cfg = dict(c)
    with torch.device("meta"):
        load(job.model_class)._from_config(CONFIG_MAPPING[cfg.pop("model_type")](**cfg))


@pytest.mark.parametrize("meta, scaled, real, starts, says", [
    ((1, "RuntimeError: heads must divide"), None, None, "eager reference failed", "published config too"),
    ((0, ""), (1, "RuntimeError: heads must divide"), None, "day0 bug", "where the scaled config fails"),
    ((0, ""), (0, ""), (0, ""), "day0 bug", "(run for real on the CPU)"),
    ((0, ""), (0, ""), (1, "RuntimeError: mat1 and mat2 must have the same dtype"), "eager reference failed",
     "fails on the published config the same way, run for real on the CPU"),
    ((0, ""), (0, ""), (3, "the published model has 7,000,000,000 parameters"), "eager reference failed",
     "it is not run for real (the published model has 7,000,000,000 parameters)"),
    ((1, "NotImplementedError: no meta kernel"), None, None, "eager reference failed", "the meta device cannot run it"),
])
def test_whose_eager_failure_it_is_follows_the_published_config(monkeypatch, meta, scaled, real, starts, says):
    """A reference that fails on the scaled config is the scale rule's fault where the meta device
    runs the published config and fails the scaled one; where it runs both, the failure is not one
    of shapes (an fp32 tensor built inside a bf16 model) and the published model, when small
    enough, is run for real on the CPU to decide; else whose failure it is stays unknown."""
    from sdk.modeltier import runner
    calls = []

    def fake(args, timeout):
        calls.append(args[0] if args[-1] != "scaled" else "scaled")
        code, last = {"meta": meta, "scaled": scaled, "published": real}[calls[-1]]
        return code, f"Traceback (most recent call last):\n{last}\n" if last else ""
    monkeypatch.setattr(runner, "_python", fake)
    got = runner._published_verdict("RuntimeError: mat1 and mat2 must have the same dtype", "spec.json", 60)
    assert got.startswith(starts) and says in got, got
    assert calls == ["meta", "scaled", "published"][:1 + (scaled is not None) + (real is not None)]


def test_an_error_torch_compile_raises_is_checked_against_stock_inductor(monkeypatch, tmp_path):
    """An error raised under torch.compile (not a kernel's fault) is put to PyTorch's own Inductor
    on the CPU: the same error there makes it torch.compile's, a mode that runs there keeps it the
    backend's; a mode after the failed one is left as it is."""
    from sdk.modeltier import runner
    job = type("J", (), {"dtype": "bf16"})()
    err = "InductorError: The argument '((0)) + 1' is not comparable. (ValueError)"
    for stock, expect in (({"rmse": {}, "error": err, "where": "on cuda:0"}, runner.STOCK_INDUCTOR_RAISES + " (on cuda:0)"),
                          ({"rmse": {"prefill": 0.01}, "error": None, "where": "on the CPU"}, "runs this mode (on the CPU)"),
                          ({"rmse": {}, "error": "KeyError: 'x'", "where": "on the CPU"},
                           "raises another error (on the CPU): KeyError: 'x'")):
        out = tmp_path / "stock.json"
        out.write_text(json.dumps(stock))
        monkeypatch.setattr(runner, "_python", lambda args, timeout: (0, ""))
        records = [{"case": "prefill", "status": "error", "detail": err},
                   {"case": "decode", "status": "error", "detail": runner.NOT_RUN}]
        runner._stock_inductor_verdict(job, records, "spec.json", "ref.pt", str(out), 60, {"prefill"})
        assert expect in records[0]["detail"] and records[1]["detail"] == runner.NOT_RUN, records
