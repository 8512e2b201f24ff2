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
