"""The docs cannot rot: every `day0` command in them parses with the CLI's own parser (run or not),
every skipped block says why, docs/cli.md is the CLI's current --help, and the bring-up guide has
replaced the vendor guide without losing a command. (tests/slow/test_docs_guide.py runs the guide.)"""
from __future__ import annotations

import subprocess
import sys

import pytest

from docblocks import DOCS, ROOT, RUN_LANGS, blocks, day0_commands, doc_files
from sdk.cli import build_parser

ALL = [b for p in doc_files() + [ROOT / "README.md"] for b in blocks(p)]


def test_the_guide_has_runnable_blocks_and_every_skip_says_why():
    guide = blocks(DOCS / "bring-up.md")
    run = [b for b in guide if b.lang in RUN_LANGS and b.skip is None]
    assert len([b for b in run if b.lang == "bash"]) >= 10 and len([b for b in run if b.lang == "python"]) >= 2
    for b in ALL:
        if b.skip is not None:
            assert b.lang in RUN_LANGS and len(b.skip) > 10, b.where
    # the guide walks the whole path: scaffold, install, native rules, delegation, HTML report
    text = "".join(b.text for b in run)
    for step in ("day0 scaffold mynpu", "pip install --no-deps --no-build-isolation -e mynpu_triton_backend",
                 "RULES.update(PROGRAM)", "MYNPU_DELEGATE=1 day0 conformance", "--format html --out report/"):
        assert step in text, step


@pytest.mark.parametrize("block", [b for b in ALL if b.lang == "bash"], ids=lambda b: b.where)
def test_every_day0_command_in_the_docs_parses(block, capsys):
    parser = build_parser()
    for args in day0_commands(block):
        try:
            parser.parse_args(args)
        except SystemExit as exc:
            err = capsys.readouterr().err
            assert exc.code == 0, f"{block.where}: day0 {' '.join(args)}: {err.strip()}"


def test_the_parser_of_commands_sees_through_shell_syntax():
    from docblocks import Block
    b = Block(ROOT / "x.md", 1, "bash", "A=1 day0 report r.jsonl --out x.md || test $? -eq 1\n"
              "cat > f.py <<'EOF'\nday0 not-a-command 'it's\nEOF\ncd d && day0 backends; day0 \\\n  devices\n", None)
    assert day0_commands(b) == [["report", "r.jsonl", "--out", "x.md"], ["backends"], ["devices"]]


def test_cli_reference_is_current():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "cli_docs.py"), "--check"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_cli_reference_check_says_how_to_fix_a_stale_file(tmp_path):
    stale = tmp_path / "cli.md"
    stale.write_text("# old\n")
    script = str(ROOT / "scripts" / "cli_docs.py")
    proc = subprocess.run([sys.executable, script, "--check", "--out", str(stale)], capture_output=True, text=True)
    assert proc.returncode == 1 and "stale" in proc.stderr and "--force" in proc.stderr
    proc = subprocess.run([sys.executable, script, "--out", str(stale)], capture_output=True, text=True)
    assert proc.returncode == 2 and stale.read_text() == "# old\n"  # nothing overwritten without --force
    proc = subprocess.run([sys.executable, script, "--out", str(stale), "--force"], capture_output=True, text=True)
    assert proc.returncode == 0 and "## `day0 conformance`" in stale.read_text()


def test_bring_up_guide_replaces_the_vendor_guide():
    assert not (DOCS / "vendor-guide.md").exists()
    guide = (DOCS / "bring-up.md").read_text()
    # the facts of the old guide: the contract page, the scaffolded files, every step's command
    for fact in ("## The contract in one page", "lowering_table()", "capabilities()", "stages(options)",
                 "Allocator", "DeviceTensor", "Target.from_device_model", "TensorDescArg",
                 "Module.relocate", "registers_per_thread", "stands_in_for", "custom_type_conversions()",
                 "rejected when it registers", "`memory.py`", "`launch.py`", "`runtime/`", "MYNPU_DELEGATE=1",
                 "day0 ops --backend mynpu", "--resume", "--shard I/N", "day0 merge",
                 "pytest --day0-backend=mynpu", "day0 coverage --config", "day0 simulate --device",
                 "padded to your matrix unit", "day0 model qwen3_next --backend mynpu", "sdk.inductor",
                 "backends/cpu_interp/", "datasheet URL"):
        assert fact in guide, fact
    readme = (ROOT / "README.md").read_text()
    assert "vendor-guide" not in readme and "vendor-guide" not in (DOCS / "architecture.md").read_text()
