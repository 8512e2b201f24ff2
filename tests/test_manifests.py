"""Model manifests load, validate, and name only kernels of the conformance suite."""
from __future__ import annotations

import pytest

from sdk.conformance.manifests import Manifest, load_manifests, validate_against
from sdk.errors import ConfigError

EXPECTED = {"qwen3_5", "qwen3_next", "llama3_1", "mixtral", "deepseek_v3", "mamba2", "gpt_oss", "glm4_5", "kimi_k2",
            "llama4", "gemma3", "nemotron_h", "granite4_h", "falcon_h1", "jamba", "minimax", "qwen2_5_vl"}
# kernels of the Gated DeltaNet and attention families, named here so the manifests can be checked
# even where those families are not importable
DECLARED = {
    "gdn_chunk_cumsum", "gdn_chunk_scaled_dot_kkt", "gdn_solve_tril", "gdn_wy_recompute", "gdn_chunk_state",
    "gdn_chunk_output", "gdn_l2norm", "gdn_gating", "gdn_fused_recurrent",
    "attn_prefill_gqa_gated", "attn_paged_decode",
}

GOOD = """\
name: toy
display_name: Toy
family: dense
hf_config:
  source: made up for the test
  facts: {hidden_size: 64}
kernels:
  - rmsnorm
  - name: silu_and_mul
    why: MLP
missing:
  - family: dense GEMM
    why: projections
"""


def test_every_manifest_loads():
    manifests = load_manifests()
    assert set(manifests) == EXPECTED
    for name, m in manifests.items():
        assert isinstance(m, Manifest) and m.name == name
        assert m.kernels and m.source and m.facts
        assert set(m.why) <= set(m.kernels)


def test_qwen_manifests_cover_hybrid_stack():
    manifests = load_manifests()
    for name in ("qwen3_5", "qwen3_next"):
        assert DECLARED <= set(manifests[name].kernels), name
        assert {"causal_conv1d_prefill", "gated_rmsnorm", "moe_fused_gemm", "rope_neox_partial"} <= set(
            manifests[name].kernels)
    assert "mrope" in manifests["qwen3_5"].kernels
    assert manifests["qwen3_next"].facts["num_experts"] == 512


def test_gaps_are_declared():
    manifests = load_manifests()
    # a family is missing until its kernels exist; then the manifest lists the kernels instead
    assert not any("SSD" in f.family for f in manifests["mamba2"].missing)
    assert {"mamba2_ssd_prefill", "mamba2_selective_state_update"} <= set(manifests["mamba2"].kernels)
    for name in ("deepseek_v3", "kimi_k2"):  # MLA prefill and the interleaved YaRN rotary exist now
        assert {"mla_prefill", "rope_gptj_yarn", "mla_decode"} <= set(manifests[name].kernels), name
        assert not any("MLA" in f.family or "RoPE" in f.family for f in manifests[name].missing), name
    assert "gated_rmsnorm_grouped" in manifests["mamba2"].kernels and not manifests["mamba2"].missing
    assert any(f.family == "Mamba-1 selective scan" for f in manifests["jamba"].missing)  # still a gap
    assert any(f.family == "vision encoder" for f in manifests["qwen3_5"].missing)


ROPE = {"rope_neox_partial", "mrope"}
MAMBA2 = {"causal_conv1d_prefill", "causal_conv1d_update", "mamba2_ssd_prefill", "mamba2_selective_state_update",
          "mamba2_ssd_chunk_cumsum", "mamba2_ssd_chunk_state", "mamba2_ssd_state_passing", "mamba2_ssd_bmm",
          "mamba2_ssd_chunk_scan"}
SPEC = {"spec_rejection_greedy", "spec_rejection_random", "spec_expand", "spec_recovered_tokens"}


def test_hybrid_ssm_manifests():
    m = load_manifests()
    assert MAMBA2 <= set(m["mamba2"].kernels) and "unified_attention" not in m["mamba2"].kernels  # pure SSM
    for name in ("nemotron_h", "granite4_h", "falcon_h1"):
        assert MAMBA2 <= set(m[name].kernels), name
        assert {"unified_attention", "kv_cache_write"} <= set(m[name].kernels), name
    # no rotary embedding: Nemotron-H has none, Granite-4.0-H's is "nope", Jamba's Mamba layers carry position
    for name in ("nemotron_h", "granite4_h", "jamba"):
        assert not ROPE & set(m[name].kernels), name
    assert "rope_neox_partial" in m["falcon_h1"].kernels  # attention and Mamba-2 side by side, with RoPE
    assert m["granite4_h"].facts["position_embedding_type"] == "nope"
    # Nemotron-H: relu^2 MLP without a gate; no SwiGLU
    assert "relu2" in m["nemotron_h"].kernels and "silu_and_mul" not in m["nemotron_h"].kernels
    # the Mamba-2 mixers normalise after the gate, per group (8 in Nemotron-H, 1 in Granite-4.0-H);
    # Falcon-H1's mixer has no norm (mamba_rms_norm false)
    for name in ("nemotron_h", "granite4_h"):
        assert "gated_rmsnorm_grouped" in m[name].kernels and "gated_rmsnorm" not in m[name].kernels, name
    assert not {"gated_rmsnorm_grouped", "gated_rmsnorm"} & set(m["falcon_h1"].kernels)
    assert m["falcon_h1"].facts["mamba_rms_norm"] is False
    # Jamba is Mamba-1: conv and decode step run through the suite's kernels, the prefill scan (a C++ op
    # in vLLM) does not
    assert {"causal_conv1d_prefill", "causal_conv1d_update", "mamba1_selective_state_update",
            "moe_topk_softmax"} <= set(m["jamba"].kernels)
    assert not {"mamba2_ssd_prefill", "mamba2_selective_state_update"} & set(m["jamba"].kernels)
    assert [f.family for f in m["jamba"].missing] == ["Mamba-1 selective scan"]
    # a residual scaled outside the norm: no fused residual add
    for name in ("granite4_h", "falcon_h1", "minimax"):
        assert "rmsnorm" in m[name].kernels and "fused_add_rmsnorm" not in m[name].kernels, name


def test_dense_and_multimodal_manifests():
    m = load_manifests()
    g = m["gemma3"]
    assert "gelu_tanh_and_mul" in g.kernels and "silu_and_mul" not in g.kernels
    assert g.facts["hidden_activation"] == "gelu_pytorch_tanh" and g.facts["sliding_window"] == 1024
    assert g.facts["attn_logit_softcapping"] is None and g.facts["final_logit_softcapping"] is None
    assert {"rmsnorm", "fused_add_rmsnorm", "rope_neox_partial", "unified_attention"} <= set(g.kernels)
    vl = m["qwen2_5_vl"]
    assert "mrope" in vl.kernels and "rope_neox_partial" not in vl.kernels  # every token carries (t, h, w)
    assert vl.facts["rope_scaling"]["mrope_section"] == [16, 24, 24]
    assert any(f.family == "vision encoder" for f in vl.missing)
    mm = m["minimax"]
    assert {"moe_topk_softmax", "moe_fused_gemm", "unified_attention"} <= set(mm.kernels)
    assert {"lightning_attn_prefill", "lightning_attn_decode"} <= set(mm.kernels) and not mm.missing
    assert mm.facts["num_local_experts"] == 32 and mm.facts["num_experts_per_tok"] == 2


def test_checkpoints_with_mtp_layers_list_the_rejection_sampler():
    m = load_manifests()
    for name, key in (("deepseek_v3", "num_nextn_predict_layers"), ("glm4_5", "num_nextn_predict_layers"),
                      ("qwen3_5", "mtp_num_hidden_layers")):
        assert m[name].facts[key] == 1 and SPEC <= set(m[name].kernels), name
    for name in ("llama3_1", "mixtral", "gemma3", "nemotron_h"):  # no draft layers: no speculative decoding
        assert not SPEC & set(m[name].kernels), name


def test_manifest_kernels_exist_in_the_suite():
    from sdk.conformance.spec import registered
    names = set(registered())
    # until every family is registered, the declared names stand in for the missing ones
    assert validate_against(names | DECLARED) == {}
    if DECLARED <= names:
        assert validate_against(names) == {}


def test_models_named_by_kernels_have_manifests():
    from sdk.conformance.spec import registered
    manifests = load_manifests()
    for spec in registered().values():
        assert set(spec.models) <= set(manifests), spec.name


def test_kernels_name_every_model_whose_manifest_lists_them():
    """A kernel's `models` (what `day0 ops` and the catalog show) agrees with the manifests, which are
    authoritative: every kernel a manifest lists names that model."""
    from sdk.conformance.spec import registered
    specs = registered()
    unnamed = {(k, name) for name, m in load_manifests().items() for k in m.kernels
               if k in specs and name not in specs[k].models}
    assert unnamed == set()


def test_unknown_kernel_is_reported(tmp_path):
    (tmp_path / "toy.yaml").write_text(GOOD.replace("  - rmsnorm\n", "  - rmsnorm\n  - no_such_kernel\n"))
    manifests = load_manifests(tmp_path)
    assert manifests["toy"].why == {"silu_and_mul": "MLP"}
    assert validate_against({"rmsnorm", "silu_and_mul"}, manifests) == {"toy": ("no_such_kernel",)}


@pytest.mark.parametrize("old,new,field", [
    ("name: toy", "name: other", "name"),
    ("display_name: Toy\n", "", "display_name"),
    ("  source: made up for the test\n", "", "hf_config.source"),
    ("  facts: {hidden_size: 64}", "  facts: []", "hf_config.facts"),
    ("  - rmsnorm\n", "  - rmsnorm\n  - rmsnorm\n", "kernels[1]"),
    ("  - rmsnorm\n", "  - {name: rmsnorm, reason: x}\n", "kernels[0]"),
    ("  - family: dense GEMM\n", "  - famly: dense GEMM\n", "missing[0]"),
    ("family: dense\n", "family: dense\ncolor: red\n", "color"),
])
def test_malformed_manifest_names_file_and_field(tmp_path, old, new, field):
    assert old in GOOD
    path = tmp_path / "toy.yaml"
    path.write_text(GOOD.replace(old, new))
    with pytest.raises(ConfigError) as err:
        load_manifests(tmp_path)
    assert str(path) in str(err.value) and f"'{field}'" in str(err.value)


def test_not_yaml(tmp_path):
    (tmp_path / "toy.yaml").write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match="toy.yaml"):
        load_manifests(tmp_path)
