"""Bad input to any command: one line on stderr, exit code 2, nothing written."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from sdk.cli import main
from test_report_data import seed_files


def _one_line_exit_2(capsys, argv: list[str], says: str) -> None:
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("day0: error:"), err
    assert says in err[0], err[0]


def test_output_into_a_file_or_a_missing_place(tmp_path, capsys):
    results = [str(p) for p in seed_files(tmp_path)]
    afile = tmp_path / "afile"
    afile.write_text("keep")
    _one_line_exit_2(capsys, ["report", *results, "--out", str(afile / "r.md")], "is not a directory")
    assert afile.read_text() == "keep"
    # a missing folder is created, as every command creates what it writes into
    plot = tmp_path / "no" / "such" / "dir" / "p.png"
    assert main(["report", *results, "--plot", str(plot), "--out", str(tmp_path / "r.md")]) == 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("field, value, says", [
    ("arch", [1], "field 'arch' must be a string"),
    ("unsupported_ops", "tt.dot", "field 'unsupported_ops' must be a list of objects"),
    ("max_abs", {"x": 1}, "field 'max_abs' must be a number or null"),
    ("models", "qwen3_5", "field 'models' must be a list of strings"),
])
def test_result_records_with_wrong_field_types(tmp_path, capsys, field, value, says):
    good = seed_files(tmp_path)[0]
    lines = good.read_text().splitlines()
    record = json.loads(lines[1])
    record[field] = value
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([lines[0], json.dumps(record)] + lines[2:]) + "\n")
    _one_line_exit_2(capsys, ["report", str(bad)], f"bad.jsonl:2: malformed results line ({says}")


def test_deeply_nested_and_huge_inputs(tmp_path, capsys):
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 100000 + "]" * 100000 + "\n")
    _one_line_exit_2(capsys, ["report", str(deep)], "nested too deeply")
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "x", "hidden_size": ' + "9" * 5000 + "}")
    _one_line_exit_2(capsys, ["coverage", "--config", str(config)], "cannot read config")
    model = Path(__file__).resolve().parents[1] / "sdk" / "device_models" / "generic_npu.yaml"
    import yaml
    data = yaml.safe_load(model.read_text())
    data["compute"]["units"]["value"] = 10 ** 60
    huge = tmp_path / "huge.yaml"
    huge.write_text(yaml.safe_dump(data))
    _one_line_exit_2(capsys, ["devices", "show", str(huge)], "compute.units: must be at most 1e+30, got a number of 61 digits")


def test_timeout_must_be_finite(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    _one_line_exit_2(capsys, ["conformance", "--kernels", "rmsnorm", "--timeout", "inf", "--out", str(out)],
                     "--timeout must be a positive, finite number")
    assert not out.exists()


def test_config_fields_of_unexpected_types(tmp_path, capsys):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                                  "layer_types": 3, "architectures": 7, "rms_norm_eps": 1e-6}))
    # coverage reads a config through transformers' config class, which cannot build this one
    _one_line_exit_2(capsys, ["coverage", "--config", str(config), "--json"], "transformers rejects this llama config")
    fields = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "architectures": 7,
              "rms_norm_eps": 1e-6}
    config.write_text(json.dumps(fields))
    import transformers
    try:  # whether transformers' own config class takes a non-list `architectures` depends on its version
        transformers.LlamaConfig(**{k: v for k, v in fields.items() if k != "model_type"})
    except Exception:
        _one_line_exit_2(capsys, ["coverage", "--config", str(config), "--json"],
                         "transformers rejects this llama config")
        return
    assert main(["coverage", "--config", str(config), "--json"]) == 0
    fams = {f["name"] for f in json.loads(capsys.readouterr().out)["families"]}
    assert {"RMSNorm", "attention (paged decode)", "RoPE (NeoX)"} <= fams


def test_nothing_overwritten_without_force(tmp_path, capsys):
    out, junit = tmp_path / "r.jsonl", tmp_path / "r.xml"
    junit.write_text("<keep/>")
    _one_line_exit_2(capsys, ["conformance", "--kernels", "rmsnorm", "--out", str(out), "--junit", str(junit)],
                     "already exists; pass --force")
    _one_line_exit_2(capsys, ["conformance", "--kernels", "rmsnorm", "--out", str(out), "--junit", str(out)],
                     "is the results file --out")
    assert junit.read_text() == "<keep/>" and not out.exists()
    results = [str(p) for p in seed_files(tmp_path)]
    before = Path(results[0]).read_bytes()
    _one_line_exit_2(capsys, ["report", *results, "--out", results[0], "--force"], "is one of the inputs")
    assert Path(results[0]).read_bytes() == before


@pytest.mark.parametrize("flag", ["--kernels", "--models", "--groups"])
@pytest.mark.parametrize("value", ["", ",", " , "])
def test_an_empty_selection_is_refused(tmp_path, capsys, flag, value):
    out = tmp_path / "r.jsonl"
    _one_line_exit_2(capsys, ["conformance", flag, value, "--out", str(out)], f"{flag} names nothing")
    assert not out.exists()


def test_a_stray_module_in_the_working_directory_shadows_nothing(tmp_path, monkeypatch, capsys):
    """Workers put the directory a run starts in last on their path: a random.py there cannot
    replace the standard library's."""
    (tmp_path / "random.py").write_text("raise RuntimeError('the standard library was shadowed')\n")
    monkeypatch.chdir(tmp_path)
    assert main(["conformance", "--kernels", "silu_and_mul", "--out", "r.jsonl"]) == 0
    assert "passed" in capsys.readouterr().out


def test_resume_refuses_a_run_of_another_mode(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["conformance", "--kernels", "silu_and_mul", "--out", "r.jsonl"]) == 0
    capsys.readouterr()
    before = (tmp_path / "r.jsonl").read_bytes()
    _one_line_exit_2(capsys, ["conformance", "--kernels", "silu_and_mul", "--full", "--resume", "--out", "r.jsonl"],
                     "mode 'quick' != 'full'")
    assert (tmp_path / "r.jsonl").read_bytes() == before


def test_ops_counts_a_repeated_kernel_once(capsys):
    assert main(["ops", "--backend", "cpu_interp", "--kernels", "rmsnorm,rmsnorm", "--json"]) == 0
    once = capsys.readouterr().out
    assert main(["ops", "--backend", "cpu_interp", "--kernels", "rmsnorm", "--json"]) == 0
    assert capsys.readouterr().out == once
    _one_line_exit_2(capsys, ["ops", "--backend", "cpu_interp", "--kernels", ","], "--kernels names nothing")
