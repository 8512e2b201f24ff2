"""The model tier's slower checks: faults, `day0 ops --model`, `coverage --run` (CI runs tests/slow)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="transformers not installed (pip install transformers)")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from test_model_tier import BAMBA, DBRX, GPT2, ZAMBA2, _config, _day0, _plan_config, _write  # noqa: E402
from test_model_sweep import _sweep  # noqa: E402

from sdk.conformance.results import load_results  # noqa: E402



def test_a_faulting_kernel_is_named_with_its_line_and_other_models_still_run(tmp_path):
    llama = _write(tmp_path, "llama", _config("llama", vocab_size=1000))
    mamba = _write(tmp_path, "mamba2", _config("mamba2", vocab_size=1000))
    out = tmp_path / "f.jsonl"
    proc = _day0("model", str(llama), str(mamba), "--backend", "short_extent", "--jobs", "2", "--out", str(out),
                 env={"DAY0_BACKENDS": "short_extent=doubles.faulty_backend:ShortExtentBackend"})
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    by = {(r.kernel, r.case): r for r in load_results(out).records}
    bad = by[("llama", "prefill")]
    assert bad.status == "error" and "softmax" in bad.detail, bad
    faulted = [k for k in bad.kernels if k["status"] == "fault"]
    assert faulted and "softmax" in faulted[0]["name"]
    assert ".py:" in faulted[0]["detail"] and "out-of-bounds" in faulted[0]["detail"], faulted[0]
    assert by[("mamba2", "prefill")].status == "pass" and by[("mamba2", "decode")].status == "pass"


def test_ops_lists_what_a_whole_model_needs_without_a_backend_run(tmp_path):
    llama = _write(tmp_path, "llama", _config("llama", vocab_size=1000))
    proc = _day0("ops", "--backend", "no_addf", "--model", str(llama), "--json",
                 env={"DAY0_BACKENDS": "no_addf=doubles.faulty_backend:NoAddBackend"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    (missing,) = data["missing"]
    assert missing["key"] == "arith.addf(f32 x f32 -> f32)" and missing["alone"] == ["llama"]
    assert len(missing["kernels"]) >= 5 and all(k.endswith("(inductor)") for k in missing["kernels"])
    assert len(data["kernels"]) > len(missing["kernels"])  # kernels without an addf need nothing


def test_coverage_run_builds_and_runs_an_unseen_config(tmp_path):
    cfg = _config("qwen3", hidden_size=768, num_attention_heads=12, num_key_value_heads=4, head_dim=64,
                  vocab_size=30000, num_hidden_layers=6)
    path = _write(tmp_path, "unseen", cfg)
    proc = _day0("coverage", "--config", str(path), "--run", "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert {e["mode"]: e["status"] for e in data["end_to_end"]} == {"prefill": "pass", "decode": "pass"}
    assert all(e["kernels"] > 0 for e in data["end_to_end"]) and data["families"]


def test_configs_with_their_own_field_names_and_layer_indices_run_end_to_end(tmp_path):
    """Published configs the rule once scaled wrongly: GPT-2's n_embd/n_head/n_layer (12 full-width
    layers before), Bamba's attention layer indices (no attention layer left before) and Zamba2's
    Mamba heads stored as n_mamba_heads (a shape error before), DBRX's key-value heads kept in its
    attn_config (refused for its JSON numbers, then more key-value heads than query heads). Each runs
    and matches eager."""
    models = (("gpt2", GPT2), ("bamba", BAMBA), ("zamba2", ZAMBA2), ("dbrx", DBRX))
    paths = [str(_write(tmp_path, n, c)) for n, c in models]
    out = tmp_path / "m.jsonl"
    proc = _day0("model", *paths, "--out", str(out), timeout=1800)
    recs = load_results(out).records
    assert {(r.kernel, r.case) for r in recs} == {(n, m) for n, _ in models
                                                  for m in ("prefill", "decode")}, proc.stderr[-3000:]
    for r in recs:
        assert r.status == "pass" and r.rmse is not None and r.rmse < 1e-3 and r.kernels, (r.kernel, r.case, r.detail)
    assert proc.returncode == 0
    assert "attn_layer_indices: [9, 18, 27] -> [1]" in proc.stderr and "n_embd: 768 ->" in proc.stderr
    assert "attn_config.kv_n_heads: 8 -> 1" in proc.stderr


def test_transformers_defaults_the_rule_once_failed_run_end_to_end(tmp_path):
    """transformers' own default configs (full size) of architectures the model tier once could not
    run: Mllama's text decoder (a causal LM built from its text config class: refused before),
    Gemma-3n (layers that reuse others' keys and values: transformers refused the scaled config),
    Helium (heads x head_dim is its width: a shape error) and Granite-4-Vision's text model (its
    cache is made by its caller: no decode step). Each runs prefill and decode and matches eager."""
    from transformers import CONFIG_MAPPING
    names = {"mllama": "mllama", "gemma3n": "gemma3n_text", "helium": "helium", "granite4_vision": "granite4_vision"}
    paths = []
    for name, mt in names.items():
        cfg = json.loads(CONFIG_MAPPING[mt]().to_json_string(use_diff=False))
        paths.append(str(_write(tmp_path, name, {**cfg, "model_type": mt})))
    out = tmp_path / "d.jsonl"
    proc = _day0("model", *paths, "--out", str(out), timeout=2400)
    recs = load_results(out).records
    assert {(r.kernel, r.case) for r in recs} == {(n, m) for n in names for m in ("prefill", "decode")}, \
        proc.stderr[-3000:]
    for r in recs:
        assert r.status == "pass" and r.rmse is not None and r.rmse < 1e-3 and r.kernels, (r.kernel, r.case, r.detail)
    assert proc.returncode == 0


def test_logits_a_backend_gets_wrong_stay_its_failure_after_the_stock_inductor_check(tmp_path):
    """A backend that halves softmax outputs: the logits differ from eager, PyTorch's own Inductor on
    the CPU matches eager, so the record says so and the sweep keeps it a day0 failure."""
    llama = _write(tmp_path, "llama", _config("llama", vocab_size=1000))
    out = tmp_path / "w.jsonl"
    proc = _day0("model", str(llama), "--mode", "prefill", "--out", str(out), "--backend", "half_softmax",
                 env={"DAY0_BACKENDS": "half_softmax=doubles.faulty_backend:HalfSoftmaxBackend"})
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    (rec,) = load_results(out).records
    assert rec.status == "fail" and "logits differ from eager" in rec.detail, rec.detail
    assert "PyTorch's own Inductor matches eager (on the CPU" in rec.detail, rec.detail
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    from model_sweep import classify
    assert classify(1, "", [{"mode": rec.case, "dtype": rec.dtype, "status": rec.status, "detail": rec.detail}])[0] \
        == "day0"


def test_logits_stock_inductor_gets_wrong_too_are_torch_compiles_failure(tmp_path):
    """The stock-Inductor check against a reference whose logits are doubled (what eager would
    give were torch.compile the one that differs): the record says torch.compile is at fault and
    the sweep classes it compile."""
    import torch
    from sdk.modeltier import runner
    (job,) = runner.plan([str(_write(tmp_path, "llama", _config("llama", vocab_size=1000)))], "cpu_interp",
                         ["fp32"], ["prefill"])
    spec, ref = tmp_path / "spec.json", tmp_path / "ref.pt"
    spec.write_text(json.dumps(job.spec()))
    code, err = runner._python(["reference", str(spec), str(ref)], 600)
    assert code == 0, err
    saved = torch.load(ref, weights_only=True)
    saved["logits"] = {m: 2 * v for m, v in saved["logits"].items()}
    torch.save(saved, ref)
    records = [{"case": "prefill", "status": "fail", "detail": "logits differ from eager: relative RMSE 1 > 0.001"}]
    runner._stock_inductor_verdict(job, records, str(spec), str(ref), str(tmp_path / "stock.json"), 600)
    assert runner.STOCK_INDUCTOR_TOO in records[0]["detail"] and "on the CPU: C++, no Triton; relative RMSE 0.5)" in records[0]["detail"], \
        records[0]["detail"]
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    from model_sweep import classify
    assert classify(1, "", [{**records[0], "mode": "prefill", "dtype": "fp32"}])[0] == "compile"


def _llama_job(tmp_path):
    cfg = _config("llama", hidden_size=512, num_attention_heads=8, num_key_value_heads=8, intermediate_size=1024,
                  num_hidden_layers=2, vocab_size=1000)
    return _plan_config(tmp_path, "small", cfg)


def test_an_eager_failure_the_scaled_config_alone_causes_is_a_day0_bug(tmp_path):
    """The eager reference fails on a scaled config (key heads that do not divide the query heads)
    while the published config runs on the meta device: the record says the scale rule is at
    fault, and the sweep classes it day0, not eager."""
    import dataclasses
    from sdk.modeltier.runner import run_job
    job = _llama_job(tmp_path)
    assert job.published["hidden_size"] == 512 and job.config["hidden_size"] < 512
    broken = dataclasses.replace(job, config={**job.config, "num_key_value_heads": 3})
    recs = run_job(broken, timeout=300)
    assert [r["status"] for r in recs] == ["error", "error"]
    assert all(r["detail"].startswith("day0 bug: the scaled config breaks transformers' eager model") and
               "must match" in r["detail"] for r in recs), recs[0]["detail"]
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    from model_sweep import classify
    assert classify(1, "", [{**r, "mode": r["case"]} for r in recs])[0] == "day0"


def test_a_small_published_config_is_run_for_real_and_a_large_one_is_not(tmp_path):
    """Phase `published` runs the published config's model for real on the CPU (exit 0: it runs)
    when it has at most REAL_RUN_PARAMS parameters, and builds nothing past the meta device
    otherwise (exit TOO_LARGE, the count said)."""
    import dataclasses
    from sdk.modeltier import runner, worker
    job = _llama_job(tmp_path)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(job.spec()))
    code, err = runner._python(["published", str(spec)], 600)
    assert code == 0, err
    big = dataclasses.replace(job, published={**job.published, "hidden_size": 8192, "intermediate_size": 28672,
                                              "num_attention_heads": 64, "num_key_value_heads": 8,
                                              "num_hidden_layers": 80, "vocab_size": 128256})
    spec.write_text(json.dumps(big.spec()))
    code, err = runner._python(["published", str(spec)], 600)
    assert code == worker.TOO_LARGE and "parameters, over the" in err, (code, err)


def test_an_eager_failure_the_published_config_shares_is_transformers_own(tmp_path):
    """Key heads that divide neither the published nor the scaled query heads: eager fails on
    both, the record keeps "eager reference failed" and says the published config fails too."""
    import dataclasses
    from sdk.modeltier.runner import run_job
    job = _llama_job(tmp_path)
    both = dataclasses.replace(job, config={**job.config, "num_key_value_heads": 3},
                               published={**job.published, "num_key_value_heads": 3})
    recs = run_job(both, timeout=300)
    assert all(r["status"] == "error" and r["detail"].startswith("eager reference failed: RuntimeError") and
               "; transformers fails on the published config too (RuntimeError: The size of tensor a (8) must "
               "match the size of tensor b (6)" in r["detail"] and r["detail"].endswith("on the meta device")
               for r in recs), recs[0]["detail"]
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    from model_sweep import classify
    assert classify(1, "", [{**r, "mode": r["case"]} for r in recs])[0] == "eager"


def test_missing_ops_are_listed_with_every_kernel_that_needs_them(tmp_path):
    llama = _write(tmp_path, "llama", _config("llama", vocab_size=1000))
    out = tmp_path / "u.jsonl"
    proc = _day0("model", str(llama), "--backend", "no_addf", "--mode", "prefill", "--out", str(out),
                 env={"DAY0_BACKENDS": "no_addf=doubles.faulty_backend:NoAddBackend"})
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    (rec,) = load_results(out).records
    assert rec.status == "unsupported" and "arith.addf" in rec.detail, rec
    needing = [k for k in rec.kernels if k["status"] == "unsupported"]
    assert len(needing) >= 2 and all(any(m.startswith("arith.addf") for m in k["missing_ops"]) for k in needing)
    # the report shows the model tier beside the kernel tier, and the op unlocks the model end to end
    from sdk.report import build_report
    from sdk.report.inputs import load_inputs, model_needs
    inputs = load_inputs([out])
    report = build_report(inputs, model_needs())
    (column,) = report.columns
    row = next(m for m in report.models if m.name == "llama")
    e2e = row.end_to_end[column.key]
    assert e2e.verdict == "does not run" and "prefill/fp32 unsupported" in e2e.detail
    # the headline's next step: the one op that runs the model end to end
    (head,) = report.headlines
    assert head.path and head.path[0].models == ["llama"] and [o.name for o in head.path[0].ops] == ["arith.addf"]
    entry = next(e for e in report.unlock[column.key] if e.name.startswith("arith.addf"))
    assert "llama (end to end)" in entry.unlocks and set(entry.kernels) == {k["name"] for k in needing}


def test_refused_configs_are_their_own_class_with_the_commands_line(tmp_path):
    configs = tmp_path / "configs"
    for name, cfg in (("vit-base", {"model_type": "vit"}),
                      ("whisper-small", {"model_type": "whisper", "is_encoder_decoder": True}),
                      ("mystery", {"model_type": "no_such_arch"})):
        (configs / name).mkdir(parents=True)
        (configs / name / "config.json").write_text(json.dumps(cfg))
    proc = _sweep(str(configs), "--out", str(tmp_path / "s"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "s.json").read_text())
    by = {m["name"]: m for m in data["models"]}
    assert data["counts"]["refused"] == 3 and data["versions"]["transformers"]
    assert all(m["exit_code"] == 2 and m["cls"] == "refused" and not m["records"] for m in by.values())
    assert "reads pixel_values" in by["vit-base"]["reason"]
    assert "encoder-decoder" in by["whisper-small"]["reason"] and "input_features" in by["whisper-small"]["reason"]
    assert "no_such_arch" in by["mystery"]["reason"]
    table = (tmp_path / "s.md").read_text()
    assert "| vit-base | vit | refused | 2 |" in table


def test_a_config_no_manifest_knows_runs_end_to_end(tmp_path):
    cfg = _config("qwen3", hidden_size=1024, num_attention_heads=16, num_key_value_heads=4, head_dim=64,
                  intermediate_size=3072, vocab_size=50000, num_hidden_layers=12)
    path = _write(tmp_path, "mystery-qwen3", cfg)
    out = tmp_path / "m.jsonl"
    proc = _day0("model", str(path), "--out", str(out), "-v")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "scale-down rule" in proc.stderr and "num_attention_heads: 16 -> 4" in proc.stderr
    recs = load_results(out).records
    assert {(r.kernel, r.case) for r in recs} == {("mystery-qwen3", "prefill"), ("mystery-qwen3", "decode")}
    for r in recs:
        assert r.tier == "model" and r.status == "pass" and r.rmse is not None and r.rmse < 1e-3, r
        assert len(r.kernels) >= 5 and all(k["origin"] == "inductor" and k["status"] == "ran" for k in r.kernels)
        # every kernel writes; some Inductor versions also emit kernels that only generate (an iota)
        assert all(k["ops"] and "tt.store" in k["ops"] for k in r.kernels)
        assert sum("tt.load" in k["ops"] for k in r.kernels) >= 5
    assert "triton_" in proc.stdout  # -v lists the kernels


def test_an_encoder_decoder_and_an_encoder_run_end_to_end(tmp_path):
    """T5 (relative position bias, an encoder and a decoder with its cache) runs its prefill and a
    decode step through cpu_interp's Triton; BERT (attention both ways) its one forward pass, and
    records no decode; both match eager."""
    t5 = _write(tmp_path, "t5", {**_config("t5"), "model_type": "t5"})
    bert = _write(tmp_path, "bert", {**_config("bert"), "model_type": "bert"})
    out = tmp_path / "e.jsonl"
    proc = _day0("model", str(t5), str(bert), "--jobs", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    recs = {(r.kernel, r.case): r for r in load_results(out).records}
    assert set(recs) == {("t5", "prefill"), ("t5", "decode"), ("bert", "prefill")}
    for r in recs.values():
        assert r.status == "pass" and r.rmse < 1e-3 and r.kernels, r
