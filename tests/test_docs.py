"""Generated documentation is current, and CI runs exactly the README's test command."""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_kernel_catalog_is_current():
    proc = subprocess.run([sys.executable, "-m", "sdk.conformance.catalog", "--check"], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_kernel_catalog_check_says_how_to_fix_a_stale_file(tmp_path, capsys):
    # the entry point once as a process (test_kernel_catalog_is_current does), then its main() in this
    # process for each mode: the same code, without a fresh interpreter's imports per call
    from sdk.conformance.catalog import main
    stale = tmp_path / "kernels.md"
    stale.write_text("# old\n")
    args = ["--out", str(stale)]
    assert main(args + ["--check"]) == 1
    err = capsys.readouterr().err
    assert "stale" in err and "--force" in err
    assert main(args) == 2
    assert "--force" in capsys.readouterr().err and stale.read_text() == "# old\n"  # untouched
    assert main(args + ["--force"]) == 0 and stale.read_text().startswith("# Conformance kernel catalog")
    assert main(args + ["--check"]) == 0, capsys.readouterr().err


def test_kernel_catalog_names_every_kernels_provenance_and_every_models_gaps():
    from sdk.conformance.catalog import render
    from sdk.conformance.manifests import load_manifests
    from sdk.conformance.spec import registered
    specs, manifests = registered(), load_manifests()
    text = render(specs, manifests)
    for name, spec in specs.items():
        up = " ".join(spec.upstream.split())
        assert up and f"| `{name}` | {spec.group} | {spec.tier} | {up.replace('|', chr(92) + '|')} |" in text, name
        assert f"- provenance: {up}" in text, name
    for name, m in manifests.items():
        row = next(line for line in text.splitlines() if line.startswith(f"| `{name}` ({m.display_name}) | "))
        assert all(f"`{k}`" in row for k in m.kernels), name
        assert all(f.family in row for f in m.missing) and (m.missing or row.endswith("| - |")), name


def test_readme_starts_with_the_two_commands_and_ci_runs_the_second():
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block and text.index(block.group(0)) < 20
    commands = [ln for ln in block.group(1).splitlines() if ln.strip()]
    assert len(commands) == 2
    assert "day0 conformance" in commands[0] and "pytest" in commands[1]
    assert "torch==2.13.0" in commands[0] and "torch==2.13.0" in commands[1]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pytest" in ci and "README.md" in ci
