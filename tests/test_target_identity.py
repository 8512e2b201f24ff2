"""A backend's Triton target is its torch device type; its registry name stays its own.

Libraries turn the target into torch modules, autocast types and device properties; Triton wants
exactly one compiler per target; Inductor looks the device type up in Triton's backend table.
"""
from __future__ import annotations

import os
import time
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

import sdk
from backends.cpu_interp import CpuInterpBackend
from sdk.backend import Target, registry
from sdk.errors import BackendConflict

HERE = Path(__file__).parent
ROOT = HERE.parent


@triton.jit
def _axpy(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, a * tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


class CountingTwin(CpuInterpBackend):
    """A second day0 backend on the same device type, counting its launches."""

    name = "cpu_twin"
    target = Target.from_device_model("cpu_twin", "host_cpu")
    launches = 0

    def launch(self, kernel, grid, args, stream=None):
        type(self).launches += 1
        super().launch(kernel, grid, args, stream)


@pytest.fixture
def twin():
    registry.register(CountingTwin)
    CountingTwin.launches = 0
    try:
        yield CountingTwin
    finally:
        registry.unregister("cpu_twin")


def _axpy_check(n=1000):
    gen = torch.Generator().manual_seed(7)
    x, y = torch.randn(n, generator=gen), torch.randn(n, generator=gen)
    out = torch.full_like(x, float("nan"))
    _axpy[(triton.cdiv(n, 128),)](x, y, out, 1.5, n, BLOCK=128)
    torch.testing.assert_close(out, 1.5 * x + y)


def test_target_names_the_torch_device_type_not_the_backend():
    with sdk.activate("cpu_interp"):
        target = triton.runtime.driver.active.get_current_target()
        assert target.backend == "cpu" and target.backend != "cpu_interp"
        # what FLA does at import with the target's name
        assert getattr(torch, target.backend) is torch.cpu
        assert torch.get_autocast_dtype(target.backend) in (torch.bfloat16, torch.float16)
        # Inductor's lookup of a host Triton backend, and Triton's exactly-one compiler rule
        import triton.backends as tb
        from triton.compiler.compiler import make_backend
        assert "cpu" in tb.backends
        assert make_backend(target).day0_name == "cpu_interp"
    assert "cpu" not in triton.backends.backends  # the device-type alias lives only while selected


def test_two_day0_backends_on_one_device_type(twin):
    from triton.compiler.compiler import make_backend
    from triton.backends.compiler import GPUTarget
    with sdk.activate("cpu_twin"):
        assert make_backend(GPUTarget("cpu", "host", 1)).day0_name == "cpu_twin"
        _axpy_check()
        assert twin.launches == 1
        with sdk.activate("cpu_interp"):  # nested: the innermost selection claims the device type
            assert make_backend(GPUTarget("cpu", "host", 1)).day0_name == "cpu_interp"
            _axpy_check()
            assert twin.launches == 1
        assert make_backend(GPUTarget("cpu", "host", 1)).day0_name == "cpu_twin"
        _axpy_check()
        assert twin.launches == 2
    with pytest.raises(RuntimeError, match="0 compatible backends"):
        make_backend(GPUTarget("cpu", "host", 1))  # nothing selected: no day0 backend claims "cpu"


def test_another_triton_backend_claiming_the_device_type_is_one_clear_error():
    import triton.backends as tb
    from triton.backends.compiler import BaseBackend

    class OtherCpuCompiler(BaseBackend):
        @staticmethod
        def supports_target(target):
            return target.backend == "cpu"

    tb.backends["othercpu"] = tb.Backend(compiler=OtherCpuCompiler, driver=None)
    try:
        with pytest.raises(BackendConflict) as info:
            sdk.activate("cpu_interp")
        message = str(info.value)
        assert "othercpu" in message and "'cpu'" in message and "cpu_interp" in message
        assert "\n" not in message
    finally:
        del tb.backends["othercpu"]
    with sdk.activate("cpu_interp"):  # and with the claimant gone, selection works again
        _axpy_check()


def test_a_stand_in_backend_displaces_the_triton_backend_it_replaces(twin, monkeypatch):
    """nvidia_ref stands in for Triton's own CUDA backend; the same mechanism on "cpu"."""
    import triton.backends as tb
    from triton.backends.compiler import BaseBackend
    from triton.compiler.compiler import make_backend

    class Replaced(BaseBackend):
        @staticmethod
        def supports_target(target):
            return target.backend == "cpu"

    monkeypatch.setattr(CountingTwin, "stands_in_for", ("replaced",))
    entry = tb.Backend(compiler=Replaced, driver=None)
    tb.backends["replaced"] = entry
    try:
        with sdk.activate("cpu_twin"):
            assert "replaced" not in tb.backends
            assert make_backend(triton.runtime.driver.active.get_current_target()).day0_name == "cpu_twin"
            _axpy_check()
        assert tb.backends["replaced"] is entry
    finally:
        tb.backends.pop("replaced", None)


FLA_SCRIPT = r'''
import os, sys, torch
if sys.argv[1] == "activate":
    import sdk
    sdk.activate("cpu_interp")
from fla.ops.gated_delta_rule import chunk_gated_delta_rule
import triton
assert triton.runtime.driver.active.get_current_target().backend == "cpu"

def reference(q, k, v, g, beta, scale):
    B, T, H, K = q.shape
    V = v.shape[-1]
    h = torch.zeros(B, H, K, V, dtype=torch.float64)
    out = torch.empty(B, T, H, V, dtype=torch.float64)
    for t in range(T):
        h = h * g[:, t].exp()[..., None, None]
        kt, vt = k[:, t], v[:, t]
        u = beta[:, t][..., None] * (vt - torch.einsum("bhkv,bhk->bhv", h, kt))
        h = h + torch.einsum("bhk,bhv->bhkv", kt, u)
        out[:, t] = torch.einsum("bhkv,bhk->bhv", h, q[:, t] * scale)
    return out, h

gen = torch.Generator().manual_seed(3)
B, T, H, K, V = 1, 70, 2, 32, 32
q = torch.randn(B, T, H, K, generator=gen)
k = torch.nn.functional.normalize(torch.randn(B, T, H, K, generator=gen), dim=-1)
v = torch.randn(B, T, H, V, generator=gen)
g = torch.nn.functional.logsigmoid(torch.randn(B, T, H, generator=gen))
beta = torch.rand(B, T, H, generator=gen)
leaves = [t.clone().requires_grad_(True) for t in (q, k, v, g, beta)]
o, ht = chunk_gated_delta_rule(*leaves, scale=K ** -0.5, output_final_state=True)
dout = torch.randn(o.shape, generator=gen)
o.backward(dout)
ref_leaves = [t.double().clone().requires_grad_(True) for t in (q, k, v, g, beta)]
ro, rh = reference(*ref_leaves, K ** -0.5)
ro.backward(dout.double())
def rel(a, b):
    return float((a.double() - b).norm() / b.norm())
errs = {"o": rel(o, ro), "ht": rel(ht, rh)}
for name, a, b in zip("qkvgb", leaves, ref_leaves):
    errs["d" + name] = rel(a.grad, b.grad)
print(errs)
assert all(e < 5e-3 for e in errs.values()), errs
print("OK")
'''


@pytest.mark.parametrize("how", ["env", "activate"])
def test_fla_forward_and_backward_as_a_user_runs_it(tmp_path, how):
    pytest.importorskip("fla", reason="fla-core not installed (pip install 'day0-sdk[fla]')")
    script = tmp_path / "user_fla.py"
    script.write_text(FLA_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_DEFAULT_BACKEND"}
    if how == "env":
        env["TRITON_DEFAULT_BACKEND"] = "cpu_interp"
    proc = subprocess.run([sys.executable, str(script), how], capture_output=True, text=True, timeout=600,
                          env=env, cwd=tmp_path)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-4000:]


def test_host_benchmarker_keeps_do_bench_units_and_runs_slow_candidates_once():
    from sdk.triton_bridge import host_benchmark
    calls, syncs = [], []

    def fast():
        calls.append(time.perf_counter())
        time.sleep(0.004)

    ms = host_benchmark(fast, warmup=10, rep=40, sync=lambda: syncs.append(1))
    # ~4 ms a call (more on a loaded machine), ~40 ms timed: rep is milliseconds, not 40 calls
    # (which would make 51 calls with the warm-up), and the first call is followed by timed ones
    assert 3.5 <= ms <= 40 and 2 <= len(calls) <= 25 and len(syncs) >= 2
    calls.clear()

    def slow():
        calls.append(1)
        time.sleep(0.12)

    p50, p20, p80 = host_benchmark(slow, warmup=25, rep=100, quantiles=(0.5, 0.2, 0.8))
    assert len(calls) == 1 and 100 <= p50 < 1000 and p20 <= p50 <= p80
    with sdk.activate("cpu_interp"):  # what Triton's autotuner gets for a host backend
        bench = triton.runtime.driver.active.get_benchmarker()
        calls.clear()
        bench(slow)
        assert len(calls) == 1
