"""The simulator's host side of a call (launches and the wrapper's driver questions) and its count
of data-dependent while loops."""
import pytest
import torch
import triton
import triton.language as tl

from sdk.capture import capture
from sdk.device_models import load
from sdk.simulator import analyse, predict
from sdk.simulator.run import Captured, HostWork, _HostCounter, analyse_launches
from sdk.simulator.timing import Efficiencies


@triton.jit
def scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 3.0, mask=m)


@triton.jit
def threshold_search(keys_ptr, bounds_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Bisection for the smallest key value t with count(keys >= t) <= n // 2 (a top-k threshold)."""
    offs = tl.arange(0, BLOCK)
    a = tl.load(bounds_ptr)
    b = tl.load(bounds_ptr + 1)
    while a < b:
        mid = a + (b - a) // 2
        cnt = tl.sum((tl.load(keys_ptr + offs, mask=offs < n, other=-1) >= mid).to(tl.int32), axis=0)
        a = tl.where(cnt <= n // 2, a, mid + 1)
        b = tl.where(cnt <= n // 2, mid, b)
    tl.store(out_ptr, a)


EFF = Efficiencies(launch_floor_s=2e-6, host_launch_s=1e-6, host_query_s=8e-4, host_target_s=6e-5,
                   launch_reference_s=load("nvidia_h100").host_launch_s)


def test_host_work_counts_the_wrappers_questions_to_the_driver():
    x, out = torch.randn(4096), torch.empty(4096)

    def wrapper():
        driver = triton.runtime.driver.active
        sms = driver.utils.get_device_properties(0)["multiprocessor_count"]
        driver.utils.get_device_properties(0)
        driver.get_current_target()
        for _ in range(3):
            scale[(max(1, min(sms, 4)),)](x, out, 4096, BLOCK=1024)

    cap = capture(props={"multiprocessor_count": 132})
    with cap:
        with _HostCounter(cap.backend) as host:
            wrapper()
    assert (len(cap.launches), host.props, host.targets) == (3, 2, 1)
    # launching alone asks nothing on the wrapper's behalf
    cap = capture()
    with cap:
        with _HostCounter(cap.backend) as host:
            scale[(4,)](x, out, 4096, BLOCK=1024)
        # the counter leaves the driver and the backend as it found them: questions after it go uncounted
        triton.runtime.driver.active.get_current_target()
        triton.runtime.driver.active.utils.get_device_properties(0)
    assert (host.props, host.targets) == (0, 0)


def _one_small_launch() -> Captured:
    x, out = torch.randn(1024), torch.empty(1024)
    cap = capture()
    with cap:
        scale[(1,)](x, out, 1024, BLOCK=1024)
    return analyse_launches(list(cap.launches))


def test_a_call_takes_its_host_work_where_that_is_longer_than_the_device_work():
    h100 = load("nvidia_h100")
    launches = _one_small_launch()
    device_only = predict(launches, h100, EFF)
    assert device_only.bound != "host" and device_only.terms["host"] == pytest.approx(EFF.host_launch_s)
    launches.host = HostWork(launches=1, property_queries=2, target_queries=1)
    asked = predict(launches, h100, EFF)
    want = EFF.host_launch_s + 2 * EFF.host_query_s + EFF.host_target_s
    assert asked.bound == "host" and asked.time_s == pytest.approx(want)
    assert asked.time_s > 10 * device_only.time_s


def test_a_data_dependent_while_loop_counts_as_a_bisection():
    keys = torch.randint(0, 1 << 20, (256,), generator=torch.Generator().manual_seed(3), dtype=torch.int32)
    bounds = torch.tensor([0, 1 << 20], dtype=torch.int32)
    out = torch.full((1,), -7, dtype=torch.int32)
    cap = capture()
    with cap:
        threshold_search[(1,)](keys, bounds, out, 256, BLOCK=256)
    la = cap.launches[0]
    # the bounds live in a tensor the analysis may read, but the loop's condition depends on keys
    c = analyse(la.module, la.grid, la.args)
    assert c.estimated
    per_pass = 256 * 4
    assert c.loaded_by_arg["keys_ptr"] == pytest.approx(32 * per_pass)


def test_the_wrappers_pytorch_work_is_counted_with_its_bytes():
    """A wrapper's ATen operations against a count made by hand: kernels (not views, allocations
    or Triton's launch), bytes each reads and writes, copies between host and device."""
    from sdk.simulator.torchwork import TorchCounter
    n = 4096
    x = torch.randn(n, generator=torch.Generator().manual_seed(11))
    out = torch.full((n,), float("nan"))
    seen = {}

    def wrapper():
        acc = torch.zeros(n)                       # kernel: writes n floats
        idx = torch.tensor([0, 2, 1, 5])           # built from host data: a copy of 4 int64
        picked = x[idx]                            # kernel: reads x and idx, writes 4 floats
        flat = picked.view(2, 2).t()               # views: no kernel
        run = x.cumsum(0)                          # kernel: reads and writes n floats
        seen["last"] = int(run[-1])                # a view, then a value read back to the host
        torch.empty(n)                             # an allocation: no kernel
        scale[(n // 1024,)](x, out, n, BLOCK=1024)  # Triton's launch: no PyTorch operation
        return acc, flat

    counter = TorchCounter()
    cap = capture()
    with cap, counter:
        wrapper()
    w = counter.work()
    assert len(cap.launches) == 1
    assert w.kernels == 4                          # zeros, the host copy, the gather, cumsum
    assert w.copies == 2                           # torch.tensor(...) and int(...)
    assert w.reads == 1                            # int(...): a value read back
    assert w.bytes == n * 4 + 4 * 8 + (n * 4 + 4 * 8 + 4 * 4) + 2 * n * 4
    # every operation costs host time: zeros, lift, index, view, t, cumsum, select, item, empty
    assert w.ops == 9
    assert seen["last"] == int(torch.cumsum(x, 0)[-1])


def test_a_launch_alone_runs_no_pytorch_work_and_the_wrappers_work_adds_device_and_host_time():
    from sdk.simulator.run import _HostCounter
    from sdk.simulator.torchwork import TorchCounter
    x, out = torch.randn(1024), torch.empty(1024)
    counter = TorchCounter()
    cap = capture()
    with cap:
        with _HostCounter(cap.backend), counter:
            scale[(1,)](x, out, 1024, BLOCK=1024)
    assert counter.work().ops == 0

    h100 = load("nvidia_h100")
    eff = Efficiencies(launch_floor_s=2e-6, launch_reference_s=h100.host_launch_s, host_launch_s=1e-6,
                       torch_kernel_s=1.5e-6, host_torch_op_s=4e-6, host_copy_s=2e-5)
    launches = _one_small_launch()
    base = predict(launches, h100, eff)
    nbytes = 64 << 20
    launches.host = HostWork(launches=1, torch_ops=5, torch_kernels=3, torch_bytes=nbytes, torch_copies=1)
    more = predict(launches, h100, eff)
    device_s = base.time_s + 3 * 1.5e-6 + nbytes / (h100.dram_bytes_per_s * eff.dram["contiguous"])
    host_s = 1e-6 + 2 * 4e-6 + 2e-5          # two kernels and a copy; views and allocations: nothing
    assert more.terms["torch"] == pytest.approx(device_s - base.time_s)
    assert more.terms["host"] == pytest.approx(host_s)
    assert more.time_s == pytest.approx(max(device_s, host_s))


def test_host_costs_and_the_launch_floor_follow_the_hosts_measured_empty_launch():
    """Host work learned on one GPU's host takes as much longer or shorter on another device's host
    as an empty launch measured there does; the device terms do not move with it."""
    h100, h200 = load("nvidia_h100"), load("nvidia_h200")
    assert h100.host_launch_s == pytest.approx(4.35e-6) and h200.host_launch_s == pytest.approx(3.87e-6)
    eff = Efficiencies(launch_floor_s=4e-6, launch_reference_s=4.35e-6, host_launch_s=8e-6, host_query_s=1e-3,
                       host_target_s=1.5e-4, host_torch_op_s=5e-5, host_copy_s=4e-5, torch_kernel_s=2e-6)
    launches = _one_small_launch()
    launches.host = HostWork(launches=2, property_queries=1, target_queries=1, torch_ops=4, torch_kernels=3,
                             torch_bytes=0, torch_copies=1)
    # by hand, on the H100's host: 2 launches, a property and a target query, 2 kernels, a copy
    on_h100 = 2 * 8e-6 + 1e-3 + 1.5e-4 + 2 * 5e-5 + 4e-5
    p100, p200 = predict(launches, h100, eff), predict(launches, h200, eff)
    assert p100.bound == p200.bound == "host"
    assert p100.time_s == pytest.approx(on_h100)
    assert p200.time_s == pytest.approx(on_h100 * 3.87 / 4.35)
    # the launch floor scales the same way; the PyTorch kernels' fixed device time too
    bare = _one_small_launch()
    t100, t200 = predict(bare, h100, eff).terms, predict(bare, h200, eff).terms
    assert t100["host"] == pytest.approx(8e-6) and t200["host"] == pytest.approx(8e-6 * 3.87 / 4.35)


def _with_host_costs(name: str, **us) -> "DeviceModel":
    """A shipped model with host figures measured on its host (microseconds)."""
    from sdk.device_models import parse_model, to_dict
    data = to_dict(load(name))
    data["launch"]["host_us"] = {k: {"value": v, "source": "measured: on the host that drives it"}
                                 for k, v in us.items()}
    return parse_model(data, f"{name}.yaml")


def test_a_devices_measured_host_figures_are_its_host_costs_piece_by_piece():
    """Where a device model keeps host work measured on its host, each piece costs that there; a
    piece it did not measure costs the learned figure scaled by the host's empty launch, and a
    model without measured figures keeps the learned ones scaled, as before."""
    h200 = load("nvidia_h200")
    eff = Efficiencies(launch_floor_s=4e-6, launch_reference_s=4.35e-6, host_launch_s=8e-6, host_query_s=1e-3,
                       host_target_s=1.5e-4, host_torch_op_s=5e-5, host_copy_s=4e-5, torch_kernel_s=2e-6)
    measured = _with_host_costs("nvidia_h200", launch=15, property_query=700, target_query=40,
                                copy_from_host=18, read_back=8)  # no torch_kernel figure
    assert measured.host_costs_s == pytest.approx({"launch": 15e-6, "property_query": 7e-4, "target_query": 4e-5,
                                                   "copy_from_host": 1.8e-5, "read_back": 8e-6})
    launches = _one_small_launch()
    # 2 launches, a property and a target query; 4 kernels of which 2 copies from the host, and a
    # value read back: 2 other kernels
    launches.host = HostWork(launches=2, property_queries=1, target_queries=1, torch_ops=7, torch_kernels=4,
                             torch_bytes=0, torch_copies=3, torch_reads=1)
    scale = 3.87 / 4.35
    by_hand = 2 * 15e-6 + 7e-4 + 4e-5 + 2 * 1.8e-5 + 8e-6 + 2 * 5e-5 * scale
    p = predict(launches, measured, eff)
    assert (p.bound, p.terms["host"], p.time_s) == ("host", pytest.approx(by_hand), pytest.approx(by_hand))
    learned = scale * (2 * 8e-6 + 1e-3 + 1.5e-4 + (4 - 3) * 5e-5 + 3 * 4e-5)
    plain = _with_host_costs("nvidia_h200", read_back=8)  # one piece measured, the rest learned
    assert predict(launches, plain, eff).terms["host"] == pytest.approx(
        scale * (2 * 8e-6 + 1e-3 + 1.5e-4 + 2 * 4e-5 + 2 * 5e-5) + 8e-6)
    bare = parse_model_without_host_costs("nvidia_h200")
    assert predict(launches, bare, eff).terms["host"] == pytest.approx(learned)
    # the device's own terms do not move with its host's figures
    assert p.terms["torch"] == pytest.approx(predict(launches, bare, eff).terms["torch"])


def parse_model_without_host_costs(name: str):
    from sdk.device_models import parse_model, to_dict
    data = to_dict(load(name))
    data["launch"].pop("host_us", None)
    return parse_model(data, f"{name}.yaml")


def test_a_profiled_gpu_time_is_scored_against_the_device_time_not_the_host_work():
    """A call whose wrapper's host work outlasts its kernels: measured around the call, the longer
    host time is predicted; measured by its profile (the GPU time of its kernels), the device's own
    time is, whatever the host does."""
    from sdk.simulator.calibrate import Row, errors
    h100 = load("nvidia_h100")
    eff = Efficiencies(launch_floor_s=2e-6, launch_reference_s=h100.host_launch_s, host_launch_s=1e-6,
                       torch_kernel_s=1.5e-6, host_torch_op_s=4e-6, host_copy_s=2e-5, host_query_s=3e-4)
    launches = _one_small_launch()
    launches.host = HostWork(launches=1, torch_ops=2, torch_kernels=1, torch_bytes=1 << 20, property_queries=1)
    p = predict(launches, h100, eff)
    assert p.terms["host"] > p.device_s > 0                      # the host's 300 us query outlasts the device
    assert p.time_s == pytest.approx(p.terms["host"]) and p.bound == "host"
    assert p.device_s == pytest.approx(sum(predict([c], h100, eff).time_s for c in launches) + p.terms["torch"])
    assert p.device_bound in ("memory", "latency", "launch", "vector", "torch")
    call, device = (Row(("k", "c", "bf16"), "", launches, h100, 1e-4, measure) for measure in ("call", "device"))
    by_call, by_device = errors([call], eff)[0], errors([device], eff)[0]
    assert by_call["predicted_us"] == pytest.approx(p.time_s * 1e6) and by_call["bound"] == "host"
    assert by_device["predicted_us"] == pytest.approx(p.device_s * 1e6) and by_device["bound"] == p.device_bound
    assert by_device["ratio"] == pytest.approx(p.device_s / 1e-4)
