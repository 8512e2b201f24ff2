"""`day0 coverage --config`: kernel families from a HuggingFace config it has never seen."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sdk.cli import main
from sdk.report.families import config_needs
from test_report_data import seed_files

CONFIGS = Path(__file__).parent / "data" / "configs"
ALWAYS = {"RMSNorm", "dense GEMM", "sampling (top-k/top-p)"}


def families(name: str) -> dict[str, list[str]]:
    return {f.name: f.kernels for f in config_needs(CONFIGS / name).families}


def test_hybrid_gdn_model():
    fams = families("qwen3_next_hybrid_gdn.json")
    assert set(fams) == ALWAYS | {
        "SiLU-and-mul", "Gated DeltaNet", "causal conv1d", "gated RMSNorm", "attention prefill (gated, varlen)",
        "attention (paged decode)", "partial RoPE", "fused MoE", "top-k softmax routing",
        "shared-expert sigmoid gate"}
    assert "gdn_chunk_scaled_dot_kkt" in fams["Gated DeltaNet"] and "gdn_fused_recurrent" in fams["Gated DeltaNet"]
    assert fams["causal conv1d"] == ["causal_conv1d_prefill", "causal_conv1d_update"]
    assert fams["partial RoPE"] == ["rope_neox_partial"]
    assert fams["fused MoE"] == ["moe_align_block_size", "moe_fused_gemm", "moe_sum"]
    assert fams["dense GEMM"] == ["gemm_bf16"]
    assert fams["shared-expert sigmoid gate"] == []  # not covered by the suite


def test_multimodal_text_config_with_mrope():
    needs = config_needs(CONFIGS / "qwen3_5_multimodal.json")
    names = {f.name for f in needs.families}
    assert needs.multimodal and {"mRoPE", "partial RoPE", "Gated DeltaNet", "fused MoE"} <= names
    assert "mrope" in needs.kernels


def test_mla_moe_model():
    fams = families("deepseek_v3_mla_moe.json")
    assert {"MLA", "fused MoE", "grouped top-k routing", "fp8 block-scaled GEMM"} <= set(fams)
    assert fams["MLA"] == [] and fams["grouped top-k routing"] == []
    assert "top-k softmax routing" not in fams  # grouped routing replaces it (n_group)
    assert not any(n.startswith("attention") for n in fams)  # MLA replaces GQA attention
    assert "Gated DeltaNet" not in fams and "mRoPE" not in fams


def test_plain_dense_model():
    fams = families("llama3_1_dense.json")
    assert set(fams) == ALWAYS | {"SiLU-and-mul", "attention prefill (causal GQA, no output gate)",
                                  "attention (paged decode)", "RoPE (NeoX)"}
    assert fams["RoPE (NeoX)"] == ["rope_neox_partial"]


def test_softcap_gelu_and_pure_ssm():
    fams = families("gemma2_softcap.json")
    assert {"GeGLU (GELU-and-mul)", "soft-capped attention", "sliding-window attention"} <= set(fams)
    assert "SiLU-and-mul" not in fams
    fams = families("mamba2_ssm.json")
    assert {"Mamba-2 SSD", "selective state update", "causal conv1d"} <= set(fams)
    assert not any(n.startswith("attention") or "RoPE" in n or n == "SiLU-and-mul" for n in fams)


def test_cli_readiness_per_device(tmp_path, capsys):
    paths = [str(p) for p in seed_files(tmp_path)]
    rc = main(["coverage", "--config", str(CONFIGS / "qwen3_next_hybrid_gdn.json"), "--results", *paths,
               "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and data["model_type"] == "qwen3_next"
    by_col = {d["column"]: d for d in data["devices"]}
    assert set(by_col) == {"cpu_interp/host_cpu", "nvidia_ref/sm_89/nvidia_l4/compile",
                           "nvidia_ref/sm_121/nvidia_gb10_spark/compile"}
    spark = by_col["nvidia_ref/sm_121/nvidia_gb10_spark/compile"]
    assert spark["ready"] == "not proven" and spark["partial"] == ["gdn_solve_tril"]
    assert by_col["nvidia_ref/sm_89/nvidia_l4/compile"]["partial"] == []
    assert data["not_covered"] == ["shared-expert sigmoid gate"]
    rc = main(["coverage", "--config", str(CONFIGS / "llama3_1_dense.json"), "--results", *paths,
               "--device", "nvidia_l4"])
    out = capsys.readouterr().out
    assert rc == 0 and "nvidia_l4 (nvidia_ref sm_89, compile-only): not proven" in out
    assert "host_cpu" not in out.split("Day-0 ready:")[1]
    assert "attention prefill (causal GQA, no output gate)" in out and "not covered by the suite" in out


@pytest.mark.parametrize("content, message", [
    (None, "no such config file"),
    ('{"model_type": "llama", "hidden_size": 40', "not valid JSON"),
    ('[1, 2]', "a model config is a JSON object"),
    ('{"foo": 1}', "not a HuggingFace model config"),
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
    rc = main(["coverage", "--config", str(CONFIGS / "llama3_1_dense.json"), "--results", *paths,
               "--device", "tpu_v9"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "no results for device tpu_v9" in err[0]


def _needs(tmp_path, cfg: dict) -> dict[str, list[str]]:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return {f.name: f.kernels for f in config_needs(path).families}


def test_encoder_only_model(tmp_path):
    fams = _needs(tmp_path, {"architectures": ["BertForMaskedLM"], "model_type": "bert", "hidden_size": 768,
                             "num_attention_heads": 12, "hidden_act": "gelu", "layer_norm_eps": 1e-12,
                             "position_embedding_type": "absolute"})
    assert set(fams) == {"LayerNorm", "dense GEMM", "GELU (non-gated MLP)", "attention (bidirectional, encoder)"}
    assert fams["LayerNorm"] == [] and fams["dense GEMM"] == ["gemm_bf16"]


def test_mamba1_is_not_mamba2(tmp_path):
    fams = _needs(tmp_path, {"architectures": ["FalconMambaForCausalLM"], "model_type": "falcon_mamba",
                             "hidden_size": 4096, "state_size": 16, "conv_kernel": 4, "expand": 2,
                             "layer_norm_epsilon": 1e-5})
    assert {"Mamba-1 selective scan", "selective state update", "causal conv1d", "RMSNorm"} <= set(fams)
    assert "Mamba-2 SSD" not in fams and "gated RMSNorm (Mamba-2, per group)" not in fams
    assert not any(n.startswith("attention") or "RoPE" in n for n in fams)


def test_moe_with_sinks_clamped_swiglu_and_mxfp4(tmp_path):
    fams = _needs(tmp_path, {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880,
                             "num_attention_heads": 64, "num_key_value_heads": 8, "num_local_experts": 32,
                             "num_experts_per_tok": 4, "sliding_window": 128, "swiglu_limit": 7.0,
                             "hidden_act": "silu", "rms_norm_eps": 1e-5,
                             "quantization_config": {"quant_method": "mxfp4"}})
    assert {"attention with sinks", "clamped SwiGLU (swiglu_limit)", "MXFP4 GEMM", "sliding-window attention",
            "fused MoE", "top-k softmax routing"} <= set(fams)
    assert "SiLU-and-mul" not in fams and fams["fused MoE"] == ["moe_align_block_size", "moe_fused_gemm", "moe_sum"]


def test_alibi_and_chunked_attention(tmp_path):
    fams = _needs(tmp_path, {"architectures": ["BloomForCausalLM"], "model_type": "bloom", "hidden_size": 1024,
                             "n_head": 16, "num_attention_heads": 16, "layer_norm_epsilon": 1e-5})
    assert "ALiBi attention" in fams and not any("RoPE" in n for n in fams) and "LayerNorm" in fams
    fams = _needs(tmp_path, {"architectures": ["Llama4ForCausalLM"], "model_type": "llama4_text",
                             "hidden_size": 5120, "num_attention_heads": 40, "attention_chunk_size": 8192,
                             "num_local_experts": 16, "num_experts_per_tok": 1, "rms_norm_eps": 1e-5})
    assert {"chunked local attention", "RoPE (NeoX)", "fused MoE"} <= set(fams)
    fams = _needs(tmp_path, {"architectures": ["JambaForCausalLM"], "model_type": "jamba", "hidden_size": 4096,
                             "num_attention_heads": 32, "mamba_d_state": 16, "mamba_d_conv": 4,
                             "num_experts": 16, "num_experts_per_tok": 2, "rms_norm_eps": 1e-6})
    assert {"Mamba-1 selective scan", "attention prefill (causal GQA, no output gate)"} <= set(fams)
    assert not any("RoPE" in n for n in fams)
