"""`day0 coverage --config`: kernel families from a HuggingFace config it has never seen.

Every config here is a real published config.json (sdk/models/configs, tests/data/configs; where
each comes from: their SOURCES.yaml). The expected families are what each model's architecture
runs, as its transformers implementation builds it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sdk import models
from sdk.cli import main
from sdk.conformance.spec import registered
from sdk.report.families import FAMILY_KERNELS, config_needs
from test_report_data import seed_files

CONFIGS = Path(__file__).parent / "data" / "configs"
RUNNER = {"sampling (top-k/top-p)", "model runner inputs (positions, slot mapping)"}
ALWAYS = {"RMSNorm", "dense GEMM"} | RUNNER
ROPES = {"RoPE (NeoX)", "partial RoPE", "interleaved RoPE", "mRoPE"}
ROUTERS_COVERED = {"top-k softmax routing", "top-k sigmoid routing", "grouped top-k routing"}
ROUTERS = ROUTERS_COVERED | {"top-k softmax routing with a correction bias", "grouped top-k routing with softmax scores"}
SUITE = set(registered())


def covered_by(*kernels: str) -> list[str]:
    """What a family mapped to `kernels` reports: those kernels once every one of them is in the
    suite, nothing before (a family is covered by all its kernels or not at all)."""
    return list(kernels) if set(kernels) <= SUITE else []


def shipped(name: str) -> Path:
    return models.shipped()[name]


def families(path: Path) -> dict[str, list[str]]:
    return {f.name: f.kernels for f in config_needs(path).families}


def why(path: Path, family: str) -> str:
    return "; ".join(next(f.why for f in config_needs(path).families if f.name == family))


def _write(tmp_path: Path, cfg: dict, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return path


def test_hybrid_gdn_model():
    fams = families(shipped("qwen3_next"))
    assert set(fams) == ALWAYS | {
        "SiLU-and-mul", "Gated DeltaNet", "causal conv1d", "gated RMSNorm", "attention prefill (gated, varlen)",
        "attention (paged decode)", "partial RoPE", "fused MoE", "top-k softmax routing",
        "shared-expert sigmoid gate"}
    assert "gdn_chunk_scaled_dot_kkt" in fams["Gated DeltaNet"] and "gdn_fused_recurrent" in fams["Gated DeltaNet"]
    assert fams["causal conv1d"] == ["causal_conv1d_prefill", "causal_conv1d_update"]
    assert fams["partial RoPE"] == ["rope_neox_partial"]
    assert fams["fused MoE"] == ["moe_align_block_size", "moe_fused_gemm", "moe_sum"]
    assert fams["dense GEMM"] == ["gemm_bf16"]
    assert fams["shared-expert sigmoid gate"] == covered_by("shared_expert_sigmoid_gate")
    assert fams["attention (paged decode)"] == ["unified_attention", "unified_attention_split_kv"]
    assert fams["sampling (top-k/top-p)"] == ["sampling_temperature", "sampling_topk_topp_pivot", "sampling_gumbel"]


def test_multimodal_text_config_with_mrope():
    needs = config_needs(shipped("qwen3_5"))
    names = {f.name for f in needs.families}
    assert needs.multimodal and needs.model_type == "qwen3_5_moe_text"
    assert {"mRoPE", "partial RoPE", "Gated DeltaNet", "fused MoE", "attention prefill (gated, varlen)"} <= names
    assert "mrope" in needs.kernels
    needs = config_needs(shipped("qwen2_5_vl"))
    assert needs.multimodal and "mRoPE" in {f.name for f in needs.families}
    assert "[16, 24, 24]" in why(shipped("qwen2_5_vl"), "mRoPE")


def test_mla_moe_model():
    fams = families(shipped("deepseek_v3"))
    assert {"MLA decode (latent cache)", "MLA prefill", "grouped top-k routing", "fp8 block-scaled GEMM",
            "fp8 block-scaled MoE experts", "interleaved RoPE"} <= set(fams)
    assert fams["MLA decode (latent cache)"] == ["mla_decode", "mla_cache_write"]
    assert fams["MLA prefill"] == covered_by("mla_prefill", "merge_attn_states")
    assert fams["grouped top-k routing"] == ["moe_grouped_topk_sigmoid"]
    assert fams["fp8 block-scaled GEMM"] == ["gemm_fp8_block_w8a8", "fp8_per_token_group_quant"]
    assert fams["fp8 block-scaled MoE experts"] == ["moe_fused_gemm_fp8_block", "fp8_per_token_group_quant"]
    # the experts are fp8: the bf16 expert GEMM is not what this checkpoint runs
    assert "fused MoE" not in fams
    assert fams["fused MoE with quantized experts (align, combine)"] == ["moe_align_block_size", "moe_sum"]
    assert fams["interleaved RoPE"] == covered_by("rope_gptj_yarn")  # GPT-J style on the 64 rope dims
    assert "num_nextn_predict_layers=1" in why(shipped("deepseek_v3"), "speculative decoding (rejection sampler)")
    assert "top-k softmax routing" not in fams  # grouped routing replaces it (n_group)
    assert not any(n.startswith("attention") for n in fams)  # MLA replaces GQA attention
    assert "Gated DeltaNet" not in fams and "mRoPE" not in fams


def test_plain_dense_model():
    fams = families(shipped("llama3_1"))
    assert set(fams) == ALWAYS | {"SiLU-and-mul", "attention prefill (causal GQA, no output gate)",
                                  "attention (paged decode)", "RoPE (NeoX)"}
    assert fams["RoPE (NeoX)"] == ["rope_neox_partial"]
    # vLLM's Triton attention backend: the unified kernel over the paged cache the write kernel fills
    assert fams["attention prefill (causal GQA, no output gate)"] == ["unified_attention", "kv_cache_write"]
    assert fams["model runner inputs (positions, slot mapping)"] == ["runner_positions_slot_mapping"]
    assert "speculative decoding (rejection sampler)" not in fams  # no MTP layers in Llama-3.1


def test_softcap_gelu_and_pure_ssm():
    fams = families(shipped("gemma2"))
    assert {"GeGLU (tanh GELU-and-mul)", "soft-capped attention", "sliding-window attention"} <= set(fams)
    assert fams["GeGLU (tanh GELU-and-mul)"] == ["gelu_tanh_and_mul"]
    assert fams["soft-capped attention"] == fams["sliding-window attention"] == ["unified_attention"]
    assert "SiLU-and-mul" not in fams
    fams = families(shipped("mamba2"))
    assert set(fams) == ALWAYS | {"Mamba-2 SSD", "selective state update (Mamba-2)", "causal conv1d",
                                  "gated RMSNorm, norm after gate (Mamba-2)"}
    assert fams["Mamba-2 SSD"] == ["mamba2_ssd_prefill"]
    assert fams["selective state update (Mamba-2)"] == ["mamba2_selective_state_update"]
    assert fams["gated RMSNorm, norm after gate (Mamba-2)"] == covered_by("gated_rmsnorm_grouped")
    assert "8 group(s)" in why(shipped("mamba2"), "gated RMSNorm, norm after gate (Mamba-2)")


# ----------------------------------------------------------------------- what used to be misread
def test_gemma3_activation_is_the_config_class_default():
    path = shipped("gemma3")
    published = json.loads(path.read_text())["text_config"]
    assert "hidden_activation" not in published and "hidden_act" not in published  # as released
    fams = families(path)
    assert "GeGLU (tanh GELU-and-mul)" in fams and "SiLU-and-mul" not in fams
    assert why(path, "GeGLU (tanh GELU-and-mul)") == "hidden_activation=gelu_pytorch_tanh (Gemma3TextConfig default)"
    assert fams["GeGLU (tanh GELU-and-mul)"] == ["gelu_tanh_and_mul"]
    assert {"sliding-window attention", "RoPE (NeoX)"} <= set(fams)
    assert "soft-capped attention" not in fams  # Gemma 3 dropped Gemma 2's soft-capping
    assert set(fams) == ALWAYS | {"GeGLU (tanh GELU-and-mul)", "attention prefill (causal GQA, no output gate)",
                                  "attention (paged decode)", "sliding-window attention", "RoPE (NeoX)"}


def test_exact_gelu_is_not_the_tanh_kernel(tmp_path):
    cfg = json.loads(shipped("gemma3").read_text())
    cfg["text_config"]["hidden_activation"] = "gelu"  # erf GELU: the suite's GeGLU kernel is the tanh one
    fams = families(_write(tmp_path, cfg))
    assert fams["GeGLU (exact GELU-and-mul)"] == [] and "GeGLU (tanh GELU-and-mul)" not in fams


def test_llama4_routes_top1_then_sigmoid_with_chunked_attention():
    path = shipped("llama4")
    fams = families(path)
    assert {"fused MoE", "top-k sigmoid routing", "chunked local attention", "RoPE (NeoX)"} <= set(fams)
    assert fams["top-k sigmoid routing"] == ["moe_topk_sigmoid"]  # top-1 by logit, then sigmoid of it
    assert not (ROUTERS - {"top-k sigmoid routing"}) & set(fams)
    assert fams["chunked local attention"] == ["unified_attention"]
    # Llama 4 rotates adjacent pairs; serving stacks permute its q/k weights and rotate halves
    assert "interleaved RoPE" not in fams and "permute" in why(path, "RoPE (NeoX)")
    assert "top-1" in why(path, "fused MoE") and "sigmoid" in why(path, "top-k sigmoid routing")


def test_glm45_routes_sigmoid_with_correction_bias_grouped():
    path = shipped("glm4_5_air")
    fams = families(path)
    assert {"fused MoE", "grouped top-k routing", "partial RoPE", "SiLU-and-mul"} <= set(fams)
    assert "top-k softmax routing" not in fams and fams["grouped top-k routing"] == ["moe_grouped_topk_sigmoid"]
    assert "sigmoid" in why(path, "grouped top-k routing") and "correction_bias" in why(path, "grouped top-k routing")


def test_nemotron_h_is_relu2_mamba2_without_rotary():
    fams = families(shipped("nemotron_h"))
    assert set(fams) == ALWAYS | {"ReLU² (non-gated MLP)", "attention prefill (causal GQA, no output gate)",
                                  "attention (paged decode)", "Mamba-2 SSD", "selective state update (Mamba-2)",
                                  "causal conv1d", "gated RMSNorm, norm after gate (Mamba-2)"}
    assert fams["ReLU² (non-gated MLP)"] == covered_by("relu2")
    assert not ROPES & set(fams)  # no rotary embedding anywhere in Nemotron-H
    # transformers names the Mamba layers "linear_attention": they are not Gated DeltaNet
    assert "Gated DeltaNet" not in fams and "fused MoE" not in fams  # the 8B has no MoE layers


def test_granite4_h_has_rope_only_when_position_embedding_type_is_rope(tmp_path):
    cfg = json.loads(shipped("granite4_h").read_text())
    assert cfg["position_embedding_type"] == "nope"
    fams = families(shipped("granite4_h"))
    assert not ROPES & set(fams)
    assert {"Mamba-2 SSD", "fused MoE", "top-k softmax routing", "SiLU-and-mul"} <= set(fams)
    assert "Gated DeltaNet" not in fams
    # residual_multiplier scales every block's output before the add: the add is not fused into a norm
    assert fams["RMSNorm (residual added outside the norm)"] == ["rmsnorm"] and "RMSNorm" not in fams
    assert "1 group(s)" in why(shipped("granite4_h"), "gated RMSNorm, norm after gate (Mamba-2)")
    assert "RoPE (NeoX)" in families(_write(tmp_path, {**cfg, "position_embedding_type": "rope"}))
    absent = {k: v for k, v in cfg.items() if k != "position_embedding_type"}  # class default: no RoPE
    assert not ROPES & set(families(_write(tmp_path, absent, "absent.json")))


def test_minimax_lightning_attention_is_not_gated_deltanet(tmp_path, capsys):
    path = shipped("minimax")
    fams = families(path)
    assert "lightning attention (MiniMax linear attention)" in fams
    assert fams["lightning attention (MiniMax linear attention)"] == covered_by("lightning_attn_prefill",
                                                                               "lightning_attn_decode")
    assert not {"Gated DeltaNet", "gated RMSNorm", "attention prefill (gated, varlen)"} & set(fams)
    assert {"attention prefill (causal GQA, no output gate)", "fused MoE", "top-k softmax routing"} <= set(fams)
    paths = [str(p) for p in seed_files(tmp_path)]
    assert main(["coverage", "--config", str(path), "--results", *paths, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    lightning = "lightning attention (MiniMax linear attention)"
    by_col = {d["column"]: d for d in data["devices"]}
    if fams[lightning]:  # the suite has lightning attention, and every seeded item of it passed on the CPU
        assert lightning not in data["not_covered"]
        assert by_col["cpu_interp/host_cpu"]["verdict"] == "runs" and by_col["cpu_interp/host_cpu"]["ready"]
    else:  # a family no suite kernel covers: never ready
        assert lightning in data["not_covered"]
        assert data["devices"] and all(d["ready"] is False and d["verdict"] != "runs" for d in data["devices"])


def test_fp8_through_compressed_tensors_and_nvfp4():
    fams = families(CONFIGS / "glm4_5_air_fp8.json")
    assert fams["fp8 GEMM (w8a8, per-token/per-channel scales)"] == ["gemm_fp8_w8a8"]
    assert fams["fp8 MoE experts (per-tensor/per-channel scales)"] == []  # the suite's fp8 MoE is block-scaled
    assert "compressed-tensors" in why(CONFIGS / "glm4_5_air_fp8.json", "fp8 GEMM (w8a8, per-token/per-channel scales)")
    fams = families(CONFIGS / "qwen3_coder_next_nvfp4.json")
    assert fams["NVFP4 GEMM"] == [] and not any("fp8" in n for n in fams)
    assert "Gated DeltaNet" in fams


@pytest.mark.parametrize("quant, family", [
    ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "fp8 GEMM (w8a8, per-token/per-channel scales)"),
    ({"quant_method": "compressed-tensors", "format": "float-quantized", "config_groups": {"group_0": {
        "weights": {"num_bits": 8, "type": "float", "strategy": "block", "block_structure": [128, 128]},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "group", "dynamic": True}}}},
     "fp8 block-scaled GEMM"),
    ({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"group_0": {
        "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 32}}}},
     "int4 weight-only GEMM (w4a16)"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "cannot classify: quantization_config.quant_method 'bitsandbytes'"),
])
def test_quantization_schemes(tmp_path, quant, family):
    cfg = {**json.loads(shipped("llama3_1").read_text()), "quantization_config": quant}
    assert family in families(_write(tmp_path, cfg))


def test_falcon_h1_gates_its_mamba_output_without_a_norm(tmp_path):
    cfg = json.loads(shipped("falcon_h1").read_text())
    assert "mamba_rms_norm" not in cfg  # FalconH1Config's default: False
    fams = families(shipped("falcon_h1"))
    assert not any("gated RMSNorm" in n for n in fams)  # the mixer computes y * silu(z), no norm
    assert fams["RMSNorm (residual added outside the norm)"] == ["rmsnorm"]  # branches scaled, then summed
    assert {"Mamba-2 SSD", "selective state update (Mamba-2)", "RoPE (NeoX)", "attention (paged decode)"} <= set(fams)
    normed = families(_write(tmp_path, {**cfg, "mamba_rms_norm": True}))
    assert normed["gated RMSNorm, norm after gate (Mamba-2)"] == covered_by("gated_rmsnorm_grouped")


def test_layer_types_are_gated_deltanet_only_in_the_models_that_say_so(tmp_path):
    """transformers names every non-attention mixer "linear_attention": Gated DeltaNet in Qwen3-Next,
    Mamba-2 in Granite-4.0-H, lightning attention in MiniMax, and nothing known elsewhere."""
    assert "Gated DeltaNet" in families(shipped("qwen3_next"))
    for name, mixer in (("granite4_h", "Mamba-2 SSD"), ("minimax", "lightning attention (MiniMax linear attention)"),
                        ("nemotron_h", "Mamba-2 SSD"), ("jamba", "Mamba-1 selective scan")):
        fams = families(shipped(name))
        assert mixer in fams and "Gated DeltaNet" not in fams and "gated RMSNorm" not in fams, name
    fams = families(shipped("gemma3"))  # sliding / full attention layer types: attention only
    assert not {"Gated DeltaNet", "Mamba-2 SSD", "lightning attention (MiniMax linear attention)"} & set(fams)
    cfg = {**json.loads(shipped("qwen3").read_text()), "num_hidden_layers": 2,
           "layer_types": ["full_attention", "linear_attention"]}
    needs = config_needs(_write(tmp_path, cfg))  # a layer type Qwen3 has no mixer for: said, not guessed
    assert needs.unclassified == ["cannot classify: layer type 'linear_attention' of model_type qwen3"]
    assert "Gated DeltaNet" not in {f.name for f in needs.families}


def test_mtp_layers_call_for_the_rejection_sampler(tmp_path):
    spec = covered_by("spec_rejection_greedy", "spec_rejection_random", "spec_expand", "spec_recovered_tokens")
    assert families(shipped("deepseek_v3"))["speculative decoding (rejection sampler)"] == spec
    qwen35 = shipped("qwen3_5")
    assert json.loads(qwen35.read_text())["text_config"]["mtp_num_hidden_layers"] == 1
    assert "mtp_num_hidden_layers=1" in why(qwen35, "speculative decoding (rejection sampler)")
    assert families(qwen35)["speculative decoding (rejection sampler)"] == spec
    cfg = json.loads(shipped("deepseek_v3").read_text())
    assert "speculative decoding (rejection sampler)" not in families(
        _write(tmp_path, {**cfg, "num_nextn_predict_layers": 0}))
    assert "speculative decoding (rejection sampler)" not in families(shipped("nemotron_h"))  # 0 by default


@pytest.mark.parametrize("quant, family, kernels", [
    # block-INT8 checkpoints (meituan/DeepSeek-R1-Block-INT8): int8 128 x 128 weight blocks
    ({"quant_method": "blockwise_int8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]},
     "int8 block-scaled GEMM", ("gemm_int8_block_w8a8", "int8_per_token_group_quant")),
    # channel-INT8 checkpoints: vLLM runs CUTLASS scaled_mm, which the suite does not mirror
    ({"quant_method": "w8a8_int8"}, "int8 GEMM (w8a8, per-channel scales)", ()),
    ({"quant_method": "compressed-tensors", "format": "int-quantized", "config_groups": {"group_0": {
        "weights": {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": True},
        "input_activations": {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": True}}}},
     "int8 GEMM (w8a8, per-channel scales)", ()),
])
def test_int8_quantization(tmp_path, quant, family, kernels):
    fams = families(_write(tmp_path, {**json.loads(shipped("llama3_1").read_text()), "quantization_config": quant}))
    assert fams[family] == covered_by(*kernels)
    moe = families(_write(tmp_path, {**json.loads(shipped("qwen3_moe").read_text()), "quantization_config": quant},
                          "moe.json"))
    # the experts run the fused-MoE kernel in int8, which the suite does not have; routing and combine stay
    assert moe["int8 MoE experts (w8a8)"] == [] and "fused MoE" not in moe
    assert moe["fused MoE with quantized experts (align, combine)"] == ["moe_align_block_size", "moe_sum"]


def test_a_lora_adapter_config_calls_for_the_lora_kernels_and_names_its_base(tmp_path, capsys):
    path = CONFIGS / "llama3_2_1b_lora_adapter.json"
    needs = config_needs(path)
    assert needs.model_type == "lora adapter" and not needs.multimodal
    fams = {f.name: f.kernels for f in needs.families}
    assert fams["LoRA adapters (shrink / expand)"] == covered_by("lora_shrink", "lora_expand")
    assert "r=64" in why(path, "LoRA adapters (shrink / expand)")
    # the adapter alone says nothing about its base model's kernels: said, never guessed, never ready
    assert needs.unclassified == ["cannot classify: the base model of this adapter "
                                  "(meta-llama/Llama-3.2-1B-Instruct): read its own config.json for it"]
    paths = [str(p) for p in seed_files(tmp_path)]
    assert main(["coverage", "--config", str(path), "--results", *paths, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["devices"] and all(d["ready"] is False for d in data["devices"])
    other = _write(tmp_path, {**json.loads(path.read_text()), "peft_type": "IA3"}, "ia3.json")
    assert "cannot classify: adapter peft_type 'IA3'" in config_needs(other).unclassified


def test_coverage_of_a_shipped_config_agrees_with_its_manifest():
    """Two descriptions of a model made apart: one read from its config by coverage, one written by
    hand from the serving stack's code (the manifest). Every kernel coverage finds is one the manifest
    lists, and a model with a family no suite kernel covers has a manifest that declares a gap."""
    from sdk.conformance.manifests import load_manifests
    manifests = load_manifests()
    # MiniMax-Text-01 is served only by vLLM releases before the 0.33 model runner (v1 sampler)
    older_runner = {"minimax": {"sampling_temperature", "sampling_topk_topp_pivot", "sampling_gumbel",
                                "runner_positions_slot_mapping"}}
    compared = 0
    for name, path in models.shipped().items():
        if name not in manifests:
            continue
        needs, listed = config_needs(path), set(manifests[name].kernels)
        found = set(needs.kernels) - older_runner.get(name, set())
        assert found <= listed, (name, sorted(found - listed))
        if needs.not_covered:
            assert manifests[name].missing, (name, needs.not_covered)
        compared += 1
    assert compared >= 15


# ----------------------------------------------------------------------- what cannot be classified
def test_unknown_model_type_is_not_guessed(tmp_path, capsys):
    path = CONFIGS / "kimi_k2_subset.json"
    needs = config_needs(path)
    assert needs.unclassified == [f.name for f in needs.families] and len(needs.unclassified) == 1
    assert needs.unclassified[0].startswith("cannot classify: model_type 'kimi_k2' is not known")
    assert needs.kernels == []
    paths = [str(p) for p in seed_files(tmp_path)]
    assert main(["coverage", "--config", str(path), "--results", *paths, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["unclassified"] == needs.unclassified
    assert data["devices"] and all(d["ready"] is False and d["verdict"] == "not tested" for d in data["devices"])
    assert main(["coverage", "--config", str(path), "--results", *paths]) == 0
    out = capsys.readouterr().out
    assert "cannot classify: model_type 'kimi_k2'" in out and ": runs" not in out


def test_unknown_layer_type_is_not_guessed():
    needs = config_needs(CONFIGS / "lfm2_2p6b_subset.json")
    assert "cannot classify: layer type 'conv' of model_type lfm2" in needs.unclassified
    assert not {"Gated DeltaNet", "Mamba-2 SSD", "Mamba-1 selective scan"} & {f.name for f in needs.families}


def test_unknown_moe_router_is_not_guessed(tmp_path):
    needs = config_needs(_write(tmp_path, {"architectures": ["HunYuanMoEV1ForCausalLM"], "model_type": "hunyuan_v1_moe",
                                           "hidden_size": 4096, "num_experts": 64, "moe_topk": 8}))
    assert "cannot classify: the MoE router of model_type hunyuan_v1_moe" in needs.unclassified
    assert not ROUTERS & {f.name for f in needs.families}


def test_experts_activation_and_heads_kept_in_sub_configs_are_read():
    """DBRX keeps its experts, top-k and activation in ffn_config and its key-value heads in
    attn_config; its blocks use LayerNorm with gated (GLU) experts."""
    needs = config_needs(CONFIGS / "dbrx_instruct.json")
    fams = {f.name: f for f in needs.families}
    assert not needs.unclassified
    assert {"LayerNorm", "SiLU-and-mul", "fused MoE", "top-k softmax routing"} <= set(fams)
    assert "RMSNorm" not in fams and "GELU (non-gated MLP)" not in fams
    assert "16 experts, top-4" in fams["fused MoE"].why


def test_every_shipped_config_is_classified():
    for name, path in models.shipped().items():
        needs = config_needs(path)
        assert needs.unclassified == [], (name, needs.unclassified)
        names = {f.name for f in needs.families}
        assert ALWAYS - {"RMSNorm"} <= names and any(n.startswith("RMSNorm") for n in names), name


# ----------------------------------------------------------------------- the command
def test_cli_readiness_per_device(tmp_path, capsys):
    paths = [str(p) for p in seed_files(tmp_path)]
    rc = main(["coverage", "--config", str(shipped("qwen3_next")), "--results", *paths, "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["model_type"] == "qwen3_next" and data["unclassified"] == []
    by_col = {d["column"]: d for d in data["devices"]}
    assert set(by_col) == {"cpu_interp/host_cpu", "nvidia_ref/sm_89/nvidia_l4/compile",
                           "nvidia_ref/sm_121/nvidia_gb10_spark/compile"}
    spark = by_col["nvidia_ref/sm_121/nvidia_gb10_spark/compile"]
    assert spark["verdict"] == "runs with gaps" and spark["ready"] is False
    assert spark["partial"] == ["gdn_solve_tril"]
    assert by_col["nvidia_ref/sm_89/nvidia_l4/compile"]["partial"] == []
    assert data["not_covered"] == ([] if "shared_expert_sigmoid_gate" in SUITE else ["shared-expert sigmoid gate"])
    rc = main(["coverage", "--config", str(shipped("llama3_1")), "--results", *paths,
               "--device", "nvidia_l4"])
    out = capsys.readouterr().out
    # every family of Llama-3.1 is covered (attention by vLLM's unified kernel) and compiled there
    assert rc == 0 and "nvidia_l4 (nvidia_ref sm_89, compile-only): runs" in out
    assert "host_cpu" not in out.split("Day-0 ready:")[1]
    assert "attention prefill (causal GQA, no output gate)" in out and "unified_attention, kv_cache_write" in out
    assert "not covered by the suite" not in out
    jamba = config_needs(shipped("jamba"))
    assert "Mamba-1 selective scan" in jamba.not_covered  # vLLM's C++ scan: the suite has no kernel for it
    rc = main(["coverage", "--config", str(shipped("jamba")), "--results", *paths, "--device", "nvidia_l4"])
    out = capsys.readouterr().out  # compiled, but not proven ready
    assert rc == 0 and "Mamba-1 selective scan" in out and "not covered by the suite" in out
    assert "nvidia_l4 (nvidia_ref sm_89, compile-only): passes, suite incomplete" in out


@pytest.mark.parametrize("content, message", [
    (None, "no such config file"),
    ('{"model_type": "llama", "hidden_size": 40', "not valid JSON"),
    ('[1, 2]', "a model config is a JSON object"),
    ('{"foo": 1}', "not a HuggingFace model config"),
    ('{"model_type": "qwen3_next", "hidden_size": 64, "num_hidden_layers": 2, "layer_types": ["full_attention"]}',
     "transformers rejects this qwen3_next config"),
])
def test_bad_config_one_line_exit_2(tmp_path, capsys, content, message):
    path = tmp_path / "config.json"
    if content is not None:
        path.write_text(content)
    rc = main(["coverage", "--config", str(path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("day0: error:") and message in err[0]


def test_unknown_device(tmp_path, capsys):
    paths = [str(p) for p in seed_files(tmp_path)]
    rc = main(["coverage", "--config", str(shipped("llama3_1")), "--results", *paths,
               "--device", "tpu_v9"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "no results for device tpu_v9" in err[0]


# ----------------------------------------------------------------------- other architectures
def test_encoder_only_model(tmp_path):
    fams = families(_write(tmp_path, {"architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_size": 768,
                                      "num_attention_heads": 12, "hidden_act": "gelu", "layer_norm_eps": 1e-12,
                                      "position_embedding_type": "absolute"}))
    assert set(fams) == {"LayerNorm", "dense GEMM", "GELU (non-gated MLP)", "attention (bidirectional, encoder)"}
    assert fams["LayerNorm"] == covered_by("layernorm") and fams["dense GEMM"] == ["gemm_bf16"]
    assert fams["GELU (non-gated MLP)"] == covered_by("gelu")
    assert fams["attention (bidirectional, encoder)"] == covered_by("encoder_attention")


def test_mamba1_is_not_mamba2(tmp_path):
    fams = families(_write(tmp_path, {"architectures": ["FalconMambaForCausalLM"], "model_type": "falcon_mamba",
                                      "hidden_size": 4096, "state_size": 16, "conv_kernel": 4, "expand": 2,
                                      "layer_norm_epsilon": 1e-5}))
    assert {"Mamba-1 selective scan", "selective state update (Mamba-1)", "causal conv1d", "RMSNorm"} <= set(fams)
    assert fams["Mamba-1 selective scan"] == []  # vLLM runs it as a C++ op; the suite has no Mamba-1 scan
    assert fams["selective state update (Mamba-1)"] == covered_by("mamba1_selective_state_update")
    assert "Mamba-2 SSD" not in fams and "gated RMSNorm, norm after gate (Mamba-2)" not in fams
    assert not any(n.startswith("attention") or "RoPE" in n for n in fams)


def test_moe_with_sinks_clamped_swiglu_and_mxfp4():
    fams = families(shipped("gpt_oss"))
    assert {"attention with sinks", "clamped SwiGLU fused in the MXFP4 experts", "MXFP4 MoE experts",
            "sliding-window attention", "top-k softmax routing"} <= set(fams)
    assert fams["MXFP4 MoE experts"] == fams["clamped SwiGLU fused in the MXFP4 experts"] == ["moe_mxfp4_gemm"]
    assert fams["attention with sinks"] == ["unified_attention"]
    # MXFP4 quantizes the experts only: no dense MXFP4 GEMM, and no bf16 expert GEMM
    assert "MXFP4 GEMM" not in fams and "fused MoE" not in fams and "SiLU-and-mul" not in fams
    assert fams["fused MoE with quantized experts (align, combine)"] == ["moe_align_block_size", "moe_sum"]


def test_alibi_and_hybrid_mamba1(tmp_path):
    fams = families(_write(tmp_path, {"architectures": ["BloomForCausalLM"], "model_type": "bloom", "hidden_size": 1024,
                                      "n_head": 16, "layer_norm_epsilon": 1e-5}))
    assert {"ALiBi attention", "LayerNorm", "GELU (non-gated MLP)"} <= set(fams)
    assert not ROPES & set(fams)
    fams = families(shipped("jamba"))
    assert {"Mamba-1 selective scan", "attention prefill (causal GQA, no output gate)", "fused MoE",
            "top-k softmax routing"} <= set(fams)
    assert not ROPES & set(fams) and "Mamba-2 SSD" not in fams
    fams = families(shipped("falcon_h1"))  # attention and Mamba-2 side by side in every layer
    assert {"Mamba-2 SSD", "attention (paged decode)", "RoPE (NeoX)", "SiLU-and-mul"} <= set(fams)


def _defaults(tmp_path: Path, model_type: str) -> Path:
    """A config.json as transformers' config class writes its defaults (special floats included)."""
    from transformers import CONFIG_MAPPING
    cfg = json.loads(CONFIG_MAPPING[model_type]().to_json_string(use_diff=False))
    return _write(tmp_path, {**cfg, "model_type": model_type}, f"{model_type}.json")


@pytest.mark.parametrize("model_type, router", [
    ("deepseek_v32", "grouped top-k routing"),    # DeepSeek-V3's router: sigmoid + bias, 8 groups
    ("glm4_moe_lite", "grouped top-k routing"),
    ("kimi_linear", "grouped top-k routing"),     # its groups under num_expert_group
    ("minimax_m2", "grouped top-k routing"),      # sigmoid + bias, top-k over all experts: one group
    ("glm_moe_dsa", "grouped top-k routing"),
    ("flex_olmo", "top-k softmax routing"),
    ("jetmoe", "top-k softmax routing"),          # top-k of the logits, softmax over the chosen
    ("cohere2_moe", "top-k softmax routing"),     # its default expert_selection_fn, softmax
    ("lfm2_moe", "grouped top-k routing"),        # sigmoid (+ expert_bias), top-k over all experts
    ("step3p5", "grouped top-k routing"),
    ("bailing_hybrid", "grouped top-k routing"),  # DeepSeek-V3's grouping
    ("switch_transformers", "top-k softmax routing"),
    ("ernie4_5_moe", "top-k softmax routing with a correction bias"),  # no suite kernel: named, not covered
    ("longcat_flash", "top-k softmax routing with a correction bias"),
    ("mistral4", "grouped top-k routing with softmax scores"),
])
def test_routers_as_transformers_computes_them(tmp_path, model_type, router):
    fams = {f.name: f for f in config_needs(_defaults(tmp_path, model_type)).families}
    assert ROUTERS & set(fams) == {router}
    assert bool(fams[router].kernels) == (router in ROUTERS_COVERED)  # a router no suite kernel runs is named
    assert not any(n.startswith("cannot classify: the MoE router") for n in fams)


@pytest.mark.parametrize("model_type, home", [("sarvam_mla", "deepseek_v3"), ("sarvam_moe", "glm4_moe")])
def test_a_model_type_built_with_another_types_code_routes_as_that_type(tmp_path, model_type, home):
    """Sarvam-MLA and Sarvam-MoE have configs of their own but transformers builds them with
    DeepSeek-V3's and GLM-4-MoE's modeling code: their router is that code's (the grouped one)."""
    from transformers import CONFIG_MAPPING
    if model_type not in CONFIG_MAPPING:
        pytest.skip(f"not installed: a transformers that knows {model_type}")
    fams = {f.name: f for f in config_needs(_defaults(tmp_path, model_type)).families}
    assert ROUTERS & set(fams) == {"grouped top-k routing"} and fams["grouped top-k routing"].kernels
    assert any(f"transformers builds it as {home}" in w for w in fams["grouped top-k routing"].why)
    assert not any(n.startswith("cannot classify") for n in fams)


@pytest.mark.parametrize("model_type, mixer", [("lara_mini", "Gated DeltaNet"), ("bailing_hybrid", "Kimi Delta Attention")])
def test_linear_attention_of_a_model_type_no_table_knows_is_read_from_its_code(tmp_path, model_type, mixer):
    """A model type the layer tables do not name: its "linear_attention" layers are the mixer whose
    kernel its modeling code asks transformers' kernel hub for (chunk_gated_delta_rule, chunk_kda)."""
    from transformers import CONFIG_MAPPING
    from sdk.report.families import LAYER_MIXERS
    if model_type not in CONFIG_MAPPING:
        pytest.skip(f"not installed: a transformers that knows {model_type}")
    assert "linear_attention" not in LAYER_MIXERS.get(model_type, {})
    needs = {f.name: f for f in config_needs(_defaults(tmp_path, model_type)).families}
    assert mixer in needs and "causal conv1d" in needs
    assert any("its modeling code calls chunk_" in w for w in needs[mixer].why)
    assert not any(n.startswith("cannot classify: layer type 'linear_attention'") for n in needs)


@pytest.mark.parametrize("model_type, gated", [("qwen3_next", True), ("olmo_hybrid", False)])
def test_whether_a_hybrids_attention_gates_its_output_is_read_off_the_model(tmp_path, model_type, gated):
    """Qwen3-Next's attention layers make an output gate with their queries (q_proj of twice the
    width); OLMo-Hybrid's, beside the same Gated DeltaNet layers, do not. Read off the model built
    with its first layer and its first attention layer (OLMo-Hybrid refuses to build without a
    linear one)."""
    from transformers import CONFIG_MAPPING
    from sdk.report.families import attention_gated
    cfg = CONFIG_MAPPING[model_type]()
    first = next(i for i, t in enumerate(cfg.layer_types) if t == "full_attention")
    assert attention_gated(cfg, first) is gated
    fams = families(_defaults(tmp_path, model_type))
    assert ("attention prefill (gated, varlen)" in fams) is gated
    assert ("attention prefill (causal GQA, no output gate)" in fams) is not gated


def test_relu2_with_a_gate_projection_is_a_family_of_its_own(tmp_path):
    """BitNet multiplies relu2(gate) into its up projection: a gated family no suite kernel runs,
    named (not "cannot classify") and not the non-gated ReLU²."""
    fams = families(_defaults(tmp_path, "bitnet"))
    assert fams["ReLU²-and-mul (gated MLP)"] == [] and "ReLU² (non-gated MLP)" not in fams
    assert not [f for f in fams if f.startswith("cannot classify")]


@pytest.mark.parametrize("model_type", ["arcee", "nanochat", "persimmon"])
def test_relu2_without_a_gate_projection(tmp_path, model_type):
    fams = families(_defaults(tmp_path, model_type))
    assert "ReLU² (non-gated MLP)" in fams and "SiLU-and-mul" not in fams
    assert not [f for f in fams if f.startswith("cannot classify: MLP activation")]


def test_an_attribute_kept_per_layer_is_read_from_the_layers(tmp_path):
    """Dots3 keeps kv_lora_rank per layer (512 or 1024) and transformers refuses the global read:
    the layers' value says MLA, instead of an internal error."""
    needs = config_needs(_defaults(tmp_path, "dots3_note_text"))
    fams = {f.name for f in needs.families}
    assert {"MLA prefill", "MLA decode (latent cache)"} <= fams


def test_configs_as_transformers_writes_them_are_read(tmp_path):
    """Mamba-2's time_step_limit [0, inf] is written {"__float__": "Infinity"}; XLM's width is
    emb_dim: both are model configs transformers knows, not refused."""
    path = _defaults(tmp_path, "mamba2")
    assert json.loads(path.read_text())["time_step_limit"][1] == {"__float__": "Infinity"}
    assert {"Mamba-2 SSD", "selective state update (Mamba-2)"} <= set(families(path))
    assert "dense GEMM" in families(_defaults(tmp_path, "xlm"))


def test_indexed_attention_is_sparse_attention_beside_mla(tmp_path):
    """DeepSeek-V3.2's layers are "indexed_attention": MLA whose queries attend the top-k keys a
    lightning indexer picks, a family the suite does not cover yet (said, not guessed away)."""
    needs = config_needs(_defaults(tmp_path, "deepseek_v32"))
    fams = {f.name: f for f in needs.families}
    sparse = fams["indexed sparse attention (lightning indexer, top-k keys)"]
    assert sparse.kernels == [] and any("index_topk=" in w for w in sparse.why)
    assert {"MLA prefill", "MLA decode (latent cache)", "grouped top-k routing"} <= set(fams)
    assert not needs.unclassified


@pytest.mark.parametrize("model_type, mixer, covered", [
    ("olmo_hybrid", "Gated DeltaNet", True),      # OlmoHybridGatedDeltaNet: FLA's chunk_gated_delta_rule
    ("kimi_linear", "Kimi Delta Attention", False),  # FLA's chunk_kda, not in the suite
    ("zamba", "Mamba-1 selective scan", False),   # ZambaMambaMixer: selective scan, state update, conv1d
])
def test_linear_attention_layers_by_model_type(tmp_path, model_type, mixer, covered):
    fams = {f.name: f for f in config_needs(_defaults(tmp_path, model_type)).families}
    assert bool(fams[mixer].kernels) == covered
    assert "causal conv1d" in fams
    if model_type == "zamba":  # its attention has no positions: the Mamba layers carry them
        assert not ROPES & set(fams)
    assert not any(n.startswith("cannot classify: layer type") for n in fams)


def test_an_mlp_without_an_activation_field_uses_the_models_own(tmp_path):
    """LFM2's MLP is w2(silu(w1 x) * w3 x) and its config names no activation."""
    fams = families(_defaults(tmp_path, "lfm2"))
    assert fams["SiLU-and-mul"] == covered_by("silu_and_mul")
    assert not [f for f in fams if f.startswith("cannot classify: MLP activation")]


@pytest.mark.parametrize("method, router", [("greedy", "top-k softmax routing"), ("group_limited_greedy", None)])
def test_deepseek_v2_router_follows_its_topk_method(tmp_path, method, router):
    """DeepSeek-V2-Lite routes greedy (softmax, top-k); DeepSeek-V2 limits the top-k to groups, a
    router the suite has no kernel for: said, not guessed."""
    from transformers import CONFIG_MAPPING
    cfg = json.loads(CONFIG_MAPPING["deepseek_v2"]().to_json_string(use_diff=False))
    cfg.update(model_type="deepseek_v2", topk_method=method, n_group=8, topk_group=3)
    needs = config_needs(_write(tmp_path, cfg))
    fams = {f.name for f in needs.families}
    if router:
        assert ROUTERS & fams == {router}
    else:
        assert not ROUTERS & fams
        assert "cannot classify: the MoE router of model_type deepseek_v2" in needs.unclassified


@pytest.mark.parametrize("model_type, family", [
    ("whisper", "GELU (non-gated MLP)"),               # fc1 -> gelu -> fc2 in the decoder layer itself
    ("bert-generation", "GELU (non-gated MLP)"),       # intermediate.dense and output.dense, apart
    ("xglm", "GELU (non-gated MLP)"),
    ("openai-gpt", "GELU (non-gated MLP)"),            # Conv1D projections, no width field: afn
    ("xlnet", "GELU (non-gated MLP)"),                 # its width is d_inner: read off the layer
    ("funnel", "GELU (non-gated MLP)"),                # blocks.0.0: a layer within a block of layers
    ("modernbert-decoder", "GeGLU (exact GELU-and-mul)"),  # one projection of twice the width, chunked
    ("gemma3", "GeGLU (tanh GELU-and-mul)"),
    ("llama", "SiLU-and-mul"),
])
def test_a_gate_is_read_off_the_model_transformers_builds(tmp_path, model_type, family):
    """Whether the MLP multiplies a gate into its up projection is the model's own structure (built
    with one layer on the meta device), not a table of model types: BART-, BERT- and Whisper-style
    MLPs have no gate; a model type no table names gets the same answer."""
    from transformers import CONFIG_MAPPING
    from sdk.report.families import structure
    fams = families(_defaults(tmp_path, model_type))
    mlps = {"GELU (non-gated MLP)", "GeGLU (exact GELU-and-mul)", "GeGLU (tanh GELU-and-mul)", "SiLU-and-mul"}
    assert mlps & set(fams) == {family}
    assert structure(CONFIG_MAPPING[model_type]().get_text_config()).gated is (family != "GELU (non-gated MLP)")


@pytest.mark.parametrize("model_type, norm, rope", [
    ("bart", "LayerNorm", False),      # learned positions (embed_positions), nn.LayerNorm
    ("whisper", "LayerNorm", False),
    ("phimoe", "LayerNorm", True),     # experts as 3-D weights: the norm of the layer its attention reads
    ("roformer", "LayerNorm", True),   # a sinusoidal table (an nn.Embedding) that feeds a rotary
    ("llama", "RMSNorm", True),
    ("t5", "RMSNorm", False),          # T5LayerNorm divides by the RMS, no mean; relative position bias
    ("marian", "LayerNorm", False),    # a sine table (an nn.Embedding subclass) added to the embeddings
    ("xglm", "LayerNorm", False),      # a sine table as a plain module
    ("ctrl", "LayerNorm", False),      # a sine table kept as a floating-point buffer (pos_encoding)
    ("cpmant", "RMSNorm", False),      # a segment and relative position bias held as an nn.Parameter
    ("xlnet", "LayerNorm", False),     # Transformer-XL relative attention (r_w_bias, r_r_bias)
])
def test_norm_and_positions_are_read_off_the_model_transformers_builds(tmp_path, model_type, norm, rope):
    fams = set(families(_defaults(tmp_path, model_type)))
    assert norm in fams and ({"LayerNorm", "RMSNorm"} - {norm}).isdisjoint(fams)
    assert bool(ROPES & fams) == rope


@pytest.mark.parametrize("model_type, positions, family, rope", [
    ("marian", "sinusoidal absolute positions", None, False),
    ("ctrl", "sinusoidal absolute positions", None, False),
    ("cpmant", "relative position bias", "attention with relative position bias", False),
    ("xlnet", "relative attention (Transformer-XL)", "relative attention (Transformer-XL)", False),
    ("roformer", "sinusoidal absolute positions", None, True),  # its sine table feeds its rotary (rotary_value)
])
def test_how_positions_enter_is_read_off_the_model(tmp_path, model_type, positions, family, rope):
    """Positions are read off the modules, parameters and buffers of the model transformers builds:
    a sine table is neither a rotary embedding nor a bias (unless the config says rotary, as
    RoFormer's does); relative positions that enter through parameters (CPM-Ant) are a bias on the
    logits, and Transformer-XL's relative attention is a family of its own that no suite kernel runs."""
    from transformers import CONFIG_MAPPING
    from sdk.report.families import structure
    assert structure(CONFIG_MAPPING[model_type]().get_text_config()).positions == positions
    fams = families(_defaults(tmp_path, model_type))
    if family:
        assert family in fams and fams[family] == []   # named, and no suite kernel covers it
    assert bool(ROPES & set(fams)) == rope


def test_a_window_that_spans_the_whole_context_is_not_sliding_attention(tmp_path):
    """Phi-3-mini-128k publishes sliding_window 262144 over 131072 positions: it never binds."""
    from transformers import CONFIG_MAPPING
    cfg = json.loads(CONFIG_MAPPING["phi3"]().to_json_string(use_diff=False))
    cfg.update(model_type="phi3", max_position_embeddings=131072, sliding_window=262144)
    assert "sliding-window attention" not in families(_write(tmp_path, cfg))
    cfg.update(sliding_window=2047)
    assert families(_write(tmp_path, cfg))["sliding-window attention"] == covered_by("unified_attention")


def test_a_norm_is_told_by_what_it_computes_not_its_class_name():
    """A norm that removes the mean is LayerNorm, one that only divides by the RMS is RMSNorm,
    whatever its class is called; one that cannot run on the CPU is left to its name (None)."""
    import torch
    from sdk.report.families import _norm_kind

    class ModelLayerNorm(torch.nn.Module):  # an RMS norm under a LayerNorm name (T5, CPM-Ant)
        def __init__(self, n):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(n))

        def forward(self, x):
            return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    class NeedsMore(torch.nn.Module):
        def forward(self, x, residual):
            return x + residual

    with torch.device("meta"):
        mods = [torch.nn.LayerNorm(48), torch.nn.LayerNorm(48, bias=False), torch.nn.RMSNorm(48), ModelLayerNorm(48)]
    assert [_norm_kind(m, 48) for m in mods] == ["LayerNorm", "LayerNorm", "RMSNorm", "RMSNorm"]
    assert _norm_kind(NeedsMore(), 48) is None


@pytest.mark.parametrize("model_type, extra", [
    ("t5", {"ReLU (non-gated MLP)", "attention with relative position bias"}),
    ("bart", {"GELU (non-gated MLP)", "LayerNorm"}),
])
def test_an_encoder_decoder_needs_encoder_and_cross_attention(tmp_path, model_type, extra):
    """An encoder-decoder's encoder attends both ways and its decoder reads the encoder's output:
    both families are named (neither is in the suite) beside the decoder's own causal attention.
    T5's positions are a bias on the attention logits, not a rotary embedding."""
    fams = families(_defaults(tmp_path, model_type))
    assert {"attention (bidirectional, encoder)", "cross-attention (decoder over the encoder's output)",
            "attention prefill (causal GQA, no output gate)"} | extra <= set(fams)
    assert fams["attention (bidirectional, encoder)"] == covered_by("encoder_attention") and not ROPES & set(fams)
    assert fams["cross-attention (decoder over the encoder's output)"] == covered_by("unified_attention")
    assert not any(f.startswith("cannot classify") for f in fams), fams


def test_xlm_activation_is_read_from_gelu_activation(tmp_path):
    """XLM says its activation with a flag (gelu_activation): GELU when true, ReLU when false; and
    with causal: false that it is an encoder (FlauBERT too), which no table of model types says."""
    from transformers import CONFIG_MAPPING
    cfg = {**json.loads(CONFIG_MAPPING["xlm"]().to_json_string(use_diff=False)), "model_type": "xlm"}
    assert "GELU (non-gated MLP)" in families(_write(tmp_path, {**cfg, "gelu_activation": True}, "a.json"))
    assert "ReLU (non-gated MLP)" in families(_write(tmp_path, {**cfg, "gelu_activation": False}, "b.json"))
    flaubert = families(_defaults(tmp_path, "flaubert"))
    assert {"attention (bidirectional, encoder)", "GELU (non-gated MLP)"} <= set(flaubert)
    assert "attention (paged decode)" not in flaubert


def test_an_encoders_activation_under_its_own_field_name(tmp_path):
    """DistilBERT names it `activation`; ESM has none and always applies GELU."""
    for model_type in ("distilbert", "esm"):
        fams = families(_defaults(tmp_path, model_type))
        assert "GELU (non-gated MLP)" in fams and not any(f.startswith("cannot classify") for f in fams), fams
