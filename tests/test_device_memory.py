"""A backend with device memory of its own (tests/doubles/device_backend.py: a guarded heap in an
address space of its own, asynchronous streams, cpu_interp's rules borrowed): host tensors cross
into device memory only at launch boundaries and only as the kernel needs them, DeviceTensors stay
on the device between launches, faults and overruns are caught, do_bench times the device's work,
and conformance kernels pass through it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

import sdk
from sdk.backend import registry
from sdk.device import DeviceTensor
from sdk.errors import KernelFault

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from doubles.device_backend import BASE, DeviceHeapBackend  # noqa: E402


@triton.jit
def scale_into(x_ptr, y_ptr, s, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * s, mask=m)


@triton.jit
def accumulate(x_ptr, acc_ptr, unused_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(acc_ptr + offs, tl.load(acc_ptr + offs, mask=m) + tl.load(x_ptr + offs, mask=m), mask=m)


@triton.jit
def past_the_end(x_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs + 1, tl.load(x_ptr + offs))


@pytest.fixture
def backend():
    registry.register(DeviceHeapBackend)
    be = registry.get("device_heap")
    be.allocator.log.clear()
    try:
        with sdk.activate("device_heap"):
            yield be
    finally:
        registry.unregister("device_heap")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _span(t: torch.Tensor) -> int:
    """Bytes from the tensor's first element to the end of its storage: what may cross."""
    s = t.untyped_storage()
    return s.data_ptr() + s.nbytes() - t.data_ptr()


def _copies(be, kind: str) -> list[tuple[int, int]]:
    return [(c.host, c.nbytes) for c in be.allocator.log if c.kind == kind]


def test_host_tensors_cross_only_at_the_boundary_and_only_as_needed(backend):
    x = torch.randn(1000, generator=_gen(1))
    y = torch.full((1000,), float("nan"))
    scale_into[(4,)](x, y, 0.5, 1000, BLOCK=256)
    torch.testing.assert_close(y, x * 0.5, rtol=0, atol=0)
    # x is read: in once, never out. y is written: out once; in once too, because a masked (partial)
    # write must leave the bytes it does not write as they were on the host.
    assert sorted(_copies(backend, "in")) == sorted([(x.data_ptr(), _span(x)), (y.data_ptr(), _span(y))])
    assert _copies(backend, "out") == [(y.data_ptr(), _span(y))]
    assert backend.allocator.live() == 0  # the launch's buffers are freed

    backend.allocator.log.clear()
    acc = torch.randn(1000, generator=_gen(2))
    expected = acc + x
    unused = torch.randn(1000, generator=_gen(3))
    accumulate[(4,)](x, acc, unused, 1000, BLOCK=256)
    torch.testing.assert_close(acc, expected, rtol=0, atol=0)
    ins, outs = _copies(backend, "in"), _copies(backend, "out")
    assert sorted(ins) == sorted([(x.data_ptr(), _span(x)), (acc.data_ptr(), _span(acc))])  # not `unused`
    assert outs == [(acc.data_ptr(), _span(acc))]


def test_arguments_viewing_one_storage_share_one_device_buffer(backend):
    qkv = torch.randn(3, 512, generator=_gen(4))
    q, k = qkv[0], qkv[1]
    expected = qkv.clone()
    expected[1] = q * 2.0
    scale_into[(2,)](q, k, 2.0, 512, BLOCK=256)
    torch.testing.assert_close(qkv, expected, rtol=0, atol=0)
    # one span from q's first element to the end of the storage: in once, out once
    assert _copies(backend, "in") == [(q.data_ptr(), _span(q))]
    assert _copies(backend, "out") == [(q.data_ptr(), _span(q))]


def test_device_tensors_stay_on_the_device_between_launches(backend):
    x = torch.randn(777, generator=_gen(5))
    xd = DeviceTensor.from_host(backend, x)
    yd = DeviceTensor.from_host(backend, torch.full((777,), float("nan")))
    accd = DeviceTensor.from_host(backend, torch.zeros(777))
    assert min(xd.data_ptr(), yd.data_ptr()) >= BASE  # device addresses, never host ones
    backend.allocator.log.clear()
    for _ in range(3):
        scale_into[(4,)](xd, yd, 3.0, 777, BLOCK=256)   # y = 3x on the device
        accumulate[(4,)](yd, accd, xd, 777, BLOCK=256)  # acc += y, on the device
    assert backend.allocator.log == []                  # six launches, no copy
    torch.testing.assert_close(accd.to_host(), 9.0 * x, rtol=1e-6, atol=1e-6)
    assert [c.kind for c in backend.allocator.log] == ["out"]

    # a host tensor beside device tensors: only it crosses
    backend.allocator.log.clear()
    y = torch.full((777,), float("nan"))
    scale_into[(4,)](xd, y, -1.0, 777, BLOCK=256)
    torch.testing.assert_close(y, -x, rtol=0, atol=0)
    assert {c.host for c in backend.allocator.log} == {y.data_ptr()}
    for t in (xd, yd, accd):
        t.free()
    assert backend.allocator.live() == 0


def test_device_memory_is_reached_only_in_bounds(backend):
    xd = DeviceTensor.from_host(backend, torch.randn(128, generator=_gen(6)))
    past_the_end[(1,)](xd, BLOCK=128)  # queued: the device reports the fault at the next synchronize
    with pytest.raises(KernelFault, match="x_ptr"):
        backend.synchronize()
    host = torch.empty(129)
    with pytest.raises(KernelFault, match="overruns device allocation"):
        backend.allocator.copy_out(host.data_ptr(), xd.address, xd.nbytes + 4)
    with pytest.raises(KernelFault, match="not inside any device allocation"):
        backend.allocator.view(host.data_ptr(), 4)  # a host address is no device address
    xd.free()


def test_do_bench_times_the_devices_work(backend, monkeypatch):
    """Launches return once queued; do_bench must time them with the device's events and wait."""
    delay = 0.03
    monkeypatch.setattr(backend, "launch_delay_s", delay)
    xd = DeviceTensor.from_host(backend, torch.randn(256, generator=_gen(7)))
    yd = DeviceTensor.empty(backend, (256,), torch.float32)
    scale_into[(1,)](xd, yd, 2.0, 256, BLOCK=256)  # compiled before timing
    backend.synchronize()
    assert triton.runtime.driver.active.get_benchmarker() is triton.testing.do_bench
    ms = triton.testing.do_bench(lambda: scale_into[(1,)](xd, yd, 2.0, 256, BLOCK=256), warmup=30, rep=150)
    assert delay * 1e3 <= ms < delay * 1e3 * 8, ms
    xd.free()
    yd.free()


def test_conformance_kernels_pass_through_device_memory(tmp_path):
    out = tmp_path / "device_heap.jsonl"
    env = dict(os.environ, DAY0_BACKENDS="device_heap=doubles.device_backend:DeviceHeapBackend",
               PYTHONPATH=os.pathsep.join([str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]),
               TRITON_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-m", "sdk.cli", "conformance", "--backend", "device_heap", "--quick",
                           "--kernels", "silu_and_mul,rmsnorm,moe_align_block_size", "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    recs = [r for r in map(json.loads, out.read_text().splitlines()) if r["type"] == "record"]
    assert len(recs) >= 9 and all(r["status"] == "pass" for r in recs), [r["status"] for r in recs]
    assert all(r["native"] == 0.0 and "tt.load" in r["borrowed_ops"] for r in recs)
    for r in recs:  # each item's launches: host tensors in and out at the boundary, nothing left
        (heap,) = [s["heap"] for s in r["launch_stats"]]
        assert heap["launches"] >= 1 and heap["live_allocations"] == 0, r
        assert 0 < heap["copies_out"] <= heap["copies_in"], r


def test_the_device_interface_serves_inductor_for_a_device_type_of_its_own():
    """sdk.inductor registers the backend's device interface for a torch device type Inductor does
    not know; its events time the device's stream, not the host's calls."""
    import time

    from torch._dynamo.device_interface import get_interface_for_device

    from sdk.inductor import _register_device
    be = DeviceHeapBackend()
    _register_device("day0heap", be)
    di = get_interface_for_device("day0heap")
    assert di.is_available() and di.current_stream() == be.device.current_stream()
    start, end = di.Event(enable_timing=True), di.Event(enable_timing=True)
    start.record()
    be.device.enqueue(None, lambda: time.sleep(0.05))  # 50 ms of device work, queued at once
    end.record()
    di.synchronize()
    assert end.query() and start.elapsed_time(end) >= 50.0
