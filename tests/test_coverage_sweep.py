"""scripts/coverage_sweep.py: `day0 coverage` over a folder of configs, what to implement next."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("transformers", reason="transformers not installed (pip install transformers)")

from sdk import models  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data" / "configs"
sys.path.insert(0, str(ROOT / "scripts"))
import coverage_sweep  # noqa: E402


@pytest.fixture
def sweep(capsys):
    """Run the script's main in this process: (exit code, stderr)."""
    def run(*args: str) -> SimpleNamespace:
        try:
            code = coverage_sweep.main(list(args))
        except SystemExit as exc:
            code = exc.code
        return SimpleNamespace(returncode=code, stderr=capsys.readouterr().err)
    return run


def test_outcomes_and_what_to_implement_next(tmp_path, sweep):
    configs = tmp_path / "configs"
    (configs / "dbrx").mkdir(parents=True)
    (configs / "dbrx" / "config.json").write_text((DATA / "dbrx_instruct.json").read_text())
    (configs / "lfm2.json").write_text((DATA / "lfm2_2p6b_subset.json").read_text())  # its 'conv' layers
    (configs / "llama.json").write_text(models.shipped()["llama3_1"].read_text())
    (configs / "nvfp4.json").write_text((DATA / "qwen3_coder_next_nvfp4.json").read_text())
    (configs / "notes.json").write_text('{"model_type": "no_such_model_type", "hidden_size": 8}')
    out = tmp_path / "sweep"
    proc = sweep(str(configs), "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.with_suffix(".json").read_text())
    rows = result["rows"]
    assert {n: r["outcome"] for n, r in rows.items()} == {"dbrx": "classified", "lfm2": "partly",
                                                         "llama": "classified", "notes": "partly",
                                                         "nvfp4": "classified"}
    assert rows["dbrx"]["uncovered"] == [] and rows["nvfp4"]["uncovered"] == ["NVFP4 GEMM"]
    assert rows["lfm2"]["unclassified"] == ["layer type 'conv' of model_type lfm2"]
    assert rows["llama"]["uncovered"] == [] and rows["llama"]["model_type"] == "llama"
    summary = result["summary"]
    assert summary["outcomes"] == {"classified": 3, "partly": 2, "refused": 0, "error": 0}
    assert summary["uncovered_families"] == {"NVFP4 GEMM": 1}
    assert summary["cannot_classify"]["layer type 'conv'"] == 1
    md = out.with_suffix(".md").read_text()
    assert "| NVFP4 GEMM | 1 |" in md and "| dbrx | dbrx | classified |" in md


def test_bad_arguments_are_one_line_and_exit_2_and_nothing_is_overwritten(tmp_path, sweep):
    proc = sweep(str(tmp_path / "missing"), "--out", str(tmp_path / "s"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "not a directory" in proc.stderr
    proc = sweep(str(tmp_path), "--out", str(tmp_path / "s"))
    assert proc.returncode == 2 and "holds no" in proc.stderr
    (tmp_path / "a.json").write_text(models.shipped()["qwen3"].read_text())
    (tmp_path / "s.md").write_text("earlier")
    proc = sweep(str(tmp_path), "--out", str(tmp_path / "s"))
    assert proc.returncode == 2 and "already exists" in proc.stderr
    assert (tmp_path / "s.md").read_text() == "earlier" and not (tmp_path / "s.json").exists()
    assert sweep(str(tmp_path), "--out", str(tmp_path / "s"), "--force").returncode == 0
    assert "earlier" not in (tmp_path / "s.md").read_text()
