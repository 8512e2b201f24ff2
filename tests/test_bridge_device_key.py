"""The device key a day0 driver reports (what Triton files kernels under in
`JITFunction.device_caches`): the backend TRITON_DEFAULT_BACKEND names reports torch's current
device for its device type, as Triton's CUDA driver does, so code that looks kernels up under
`torch.<type>.current_device()` finds them; a backend selected for a scope keeps a key of its own,
so two backends on one device type never share kernels."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import triton

import sdk
from sdk.triton_bridge import device_id

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r'''
import torch, triton, triton.language as tl
from triton import knobs
import sdk
from sdk.backend import Target, registry
from backends.cpu_interp import CpuInterpBackend


class Twin(CpuInterpBackend):
    """A second day0 backend on the cpu device type, counting its launches."""
    name = "cpu_twin"
    target = Target.from_device_model("cpu_twin", "host_cpu")
    launches = 0

    def launch(self, kernel, grid, args, stream=None):
        type(self).launches += 1
        super().launch(kernel, grid, args, stream)


@triton.jit
def scale(x_ptr, out_ptr, a, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) * a)


def check(a):
    x = torch.randn(64, generator=torch.Generator().manual_seed(5))
    out = torch.full_like(x, float("nan"))
    scale[(1,)](x, out, a, N=64)
    torch.testing.assert_close(out, x * a)


key = triton.runtime.driver.active.get_current_device()
assert key == torch.cpu.current_device() == "cpu", key
compiled = []
knobs.runtime.jit_cache_hook = lambda *args, **kwargs: compiled.append(kwargs["compile"]["device"])
check(2.0)
check(3.0)
assert compiled == ["cpu"], compiled  # compiled once, filed under torch's key
scale.device_caches[torch.cpu.current_device()][0].clear()  # what Triton's own tests do
check(4.0)
assert compiled == ["cpu", "cpu"], compiled  # the clear reached the kernel: compiled again

registry.register(Twin)
with sdk.activate("cpu_twin"):
    twin_key = triton.runtime.driver.active.get_current_device()
    assert twin_key not in ("cpu", key), twin_key
    check(5.0)
    assert Twin.launches == 1 and compiled[-1] == twin_key  # its own kernel, not cpu_interp's
check(6.0)
assert Twin.launches == 1 and triton.runtime.driver.active.get_current_device() == "cpu"
print("OK")
'''


def test_the_default_backend_files_kernels_under_torchs_device_key(tmp_path):
    script = tmp_path / "device_key.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "TRITON_DEFAULT_BACKEND": "cpu_interp", "TRITON_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                          env=env, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("OK"), proc.stdout + proc.stderr[-3000:]


def test_a_backend_selected_for_a_scope_keeps_a_key_of_its_own():
    if os.environ.get("TRITON_DEFAULT_BACKEND") == "cpu_interp":
        pytest.skip("cpu_interp is this process's default backend: the test above covers that case")
    with sdk.activate("cpu_interp"):
        assert triton.runtime.driver.active.get_current_device() == device_id("cpu_interp")
