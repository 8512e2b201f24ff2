"""Install vLLM beside the pinned CPU torch, for its Triton kernels (what `scripts/install-vllm.sh`
runs).

vLLM's wheel pins its own torch (0.33.0: torch==2.14.0) and a CUDA stack; `pip install vllm` would
replace the venv's torch. Its Triton kernels need none of that: this installs the wheel with
`--no-deps`, then, also with `--no-deps`, only the pure-Python packages that `import vllm` and its
Triton-kernel modules import (each at the version range vLLM declares), and checks that torch is
the one it found. It refuses to run when any requirement would name torch, triton or transformers.

    python -m sdk.integrations.vllm.install [--wheel PATH_OR_REQUIREMENT] [--dry-run]
"""
from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass

VLLM = "vllm==0.33.0"
# never installed, upgraded or downgraded here: the venv's own builds
PROTECTED = ("torch", "triton", "transformers", "numpy")


@dataclass(frozen=True)
class Dep:
    requirement: str   # what pip installs (vLLM's own version range where vLLM declares one)
    needed_by: str     # "vllm" (a requirement vLLM declares), "vllm imports it" (undeclared), or
                       # the distribution that requires it


# What `import vllm` and the Triton-kernel modules of IMPORT_CHECK import, found by importing them
# in a venv with vLLM installed --no-deps (vLLM 0.33.0). Already present with day0 (transformers,
# torch, numpy, huggingface-hub, pydantic-core, anyio...) is not repeated.
DEPS: tuple[Dep, ...] = (
    Dep("regex", "vllm"),
    Dep("cachetools", "vllm"),
    Dep("psutil", "vllm"),
    Dep("py-cpuinfo", "vllm"),
    Dep("pydantic>=2.12.0", "vllm"),
    Dep("msgspec", "vllm"),
    Dep("einops", "vllm"),
    Dep("cloudpickle", "vllm"),
    Dep("pyyaml", "vllm"),
    Dep("filelock>=3.20.3", "vllm"),
    Dep("tqdm", "vllm"),
    Dep("typing_extensions>=4.10", "vllm"),
    Dep("requests>=2.33.0", "vllm"),
    Dep("certifi", "requests"),  # vLLM asks >=2026.10.19 (a CA bundle date), not on PyPI yet
    Dep("urllib3", "requests"),
    Dep("charset-normalizer", "requests"),
    Dep("idna", "requests"),
    Dep("pyzmq>=25.0.0", "vllm"),
    Dep("cbor2", "vllm"),
    Dep("aiohttp>=3.14.4", "vllm"),
    Dep("multidict>=6.9.1", "vllm"),
    Dep("yarl", "aiohttp"),
    Dep("propcache", "aiohttp"),
    Dep("attrs", "aiohttp"),
    Dep("aiohappyeyeballs", "aiohttp"),
    Dep("aiosignal", "aiohttp"),
    Dep("frozenlist", "aiohttp"),
    Dep("openai>=2.25.0", "vllm"),
    Dep("sniffio", "openai"),
    Dep("oss-harmony>=0.0.11", "vllm"),
    Dep("pybase64", "vllm"),
    Dep("uvloop", "vllm imports it"),  # vllm.v1.utils; declared through fastapi[standard]
    Dep("prometheus_client>=0.18.0", "vllm"),
    Dep("xgrammar==0.2.8", "vllm"),
    Dep("apache-tvm-ffi==0.1.11", "vllm"),
    Dep("fastapi<0.137.0,>=0.133.0", "vllm"),
    Dep("starlette>=1.0.1", "vllm"),
    Dep("partial-json-parser", "vllm"),
    Dep("llguidance<1.8.0,>=1.7.0", "vllm"),
)

# imported after the install: vLLM and the modules of the Triton kernels the library tier calls
IMPORT_CHECK = (
    "vllm",
    "vllm.model_executor.layers.fused_moe.fused_moe",
    "vllm.v1.attention.ops.triton_unified_attention",
    "vllm.v1.attention.ops.triton_reshape_and_cache_flash",
    "vllm.v1.attention.ops.triton_decode_attention",
    "vllm.model_executor.layers.mamba.ops.causal_conv1d",
    "vllm.model_executor.layers.mamba.ops.ssd_combined",
    "vllm.model_executor.layers.mamba.ops.mamba_ssm",
    "vllm.model_executor.layers.rotary_embedding.mrope",
    "vllm.third_party.flash_linear_attention.ops",
    "vllm.v1.sample.ops.topk_topp_triton",
    "vllm.model_executor.layers.quantization.utils.fp8_utils",
)


def dist_name(requirement: str) -> str:
    """The normalised distribution name of a requirement ("prometheus_client>=0.18" ->
    "prometheus-client"); a wheel path gives the name in its file name."""
    base = requirement.rsplit("/", 1)[-1]
    if base.endswith(".whl"):
        base = base.split("-")[0]
    name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", base)
    return re.sub(r"[-_.]+", "-", name.group(0) if name else base).lower()


def pip_commands(vllm: str = VLLM, python: str = sys.executable) -> list[list[str]]:
    """The two pip commands: vLLM alone, then its import-time dependencies; both --no-deps."""
    base = [python, "-m", "pip", "install", "-q", "--no-deps"]
    return [base + [vllm], base + [d.requirement for d in DEPS]]


def protected_in(commands: list[list[str]]) -> list[str]:
    """Requirements of `commands` that would touch a protected distribution."""
    out = []
    for cmd in commands:
        for arg in cmd[cmd.index("--no-deps") + 1:]:
            if dist_name(arg) in PROTECTED:
                out.append(arg)
    return out


def _torch_version(python: str) -> str:
    return subprocess.run([python, "-c", "import torch; print(torch.__version__)"], check=True,
                          capture_output=True, text=True).stdout.strip()


def _installed_vllm(python: str) -> str:
    probe = ("import importlib.metadata as m\ntry: print(m.version('vllm'))\n"
             "except m.PackageNotFoundError: print('')")
    return subprocess.run([python, "-c", probe], check=True, capture_output=True,
                          text=True).stdout.strip()


def _wanted_version(vllm: str) -> str:
    if vllm.endswith(".whl"):
        return vllm.rsplit("/", 1)[-1].split("-")[1]
    return vllm.partition("==")[2]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="install-vllm", description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheel", default=VLLM, help=f"a vLLM wheel file or requirement (default {VLLM})")
    ap.add_argument("--python", default=sys.executable, help="the venv's python (default: this one)")
    ap.add_argument("--dry-run", action="store_true", help="print the pip commands, run nothing")
    args = ap.parse_args(argv)

    commands = pip_commands(args.wheel, args.python)
    bad = protected_in(commands)
    if bad:
        print(f"install-vllm: refusing: {', '.join(bad)} would change the venv's "
              f"{'/'.join(PROTECTED)}", file=sys.stderr)
        return 2
    if args.dry_run:
        for cmd in commands:
            print(shlex.join(cmd))
        return 0

    torch_before = _torch_version(args.python)
    have = _installed_vllm(args.python)
    if have and have == _wanted_version(args.wheel):
        print(f"install-vllm: vllm {have} already installed")
        commands = commands[1:]
    for cmd in commands:
        print("+", shlex.join(cmd), flush=True)
        if subprocess.run(cmd).returncode != 0:
            print("install-vllm: pip failed (above)", file=sys.stderr)
            return 1
    torch_after = _torch_version(args.python)
    if torch_after != torch_before:
        print(f"install-vllm: torch changed from {torch_before} to {torch_after}; reinstall "
              f"torch=={torch_before.split('+')[0]} from the CPU index", file=sys.stderr)
        return 1
    check = "import importlib\nfor m in %r: importlib.import_module(m)" % (IMPORT_CHECK,)
    done = subprocess.run([args.python, "-c", check], capture_output=True, text=True)
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1:] or ["(no message)"]
        print(f"install-vllm: vLLM's Triton-kernel modules do not import: {last[0]}", file=sys.stderr)
        return 1
    print(f"install-vllm: vllm {_installed_vllm(args.python)} installed; torch {torch_after} "
          f"untouched; its Triton-kernel modules import")
    return 0


if __name__ == "__main__":
    sys.exit(main())
