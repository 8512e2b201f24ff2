"""Simulate suite kernels on device models: capture each case's launches, analyse, predict."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable, Iterable

import torch

from ..backend import DeviceArg
from ..capture import capture
from ..conformance.check import case_seed
from ..conformance.spec import DTYPES, KernelSpec
from ..device_models.records import DeviceModel
from .analysis import LaunchCounts, analyse
from .model import predict
from .torchwork import TorchCounter


class Captured(list):
    """The analysed launches of one call; `target_dependent`: whether the wrapper asked for device
    properties or the kernels use fp8 types (then another target may launch something else);
    `host`: what the call's host code did besides computing (HostWork)."""

    target_dependent: bool = False
    host: "HostWork | None" = None


@dataclass(frozen=True)
class HostWork:
    """Host work of one call that costs time on a real device's host: Triton launches, and the
    launch wrapper's own questions to the driver (device properties, the target and its compiler
    options: what fp8 types it has). Triton's own machinery asking once per kernel is not counted.
    `torch_*`: the PyTorch operations the wrapper runs besides (sdk.simulator.torchwork): every
    operation, those that launch a device kernel and the bytes they move, and the copies between
    host and device."""

    launches: int = 0
    property_queries: int = 0
    target_queries: int = 0
    torch_ops: int = 0
    torch_kernels: int = 0
    torch_bytes: int = 0
    torch_copies: int = 0


#: files whose frames stand between a launch wrapper and a driver query (the bridge, the capture)
_PLUMBING = ("sdk/triton_bridge.py", "sdk/capture.py", "sdk/simulator/run.py")


def _asked_by_wrapper(depth: int = 2) -> bool:
    """Whether the driver query being answered came from launch-wrapper code rather than from
    Triton's runtime or compiler (which ask once per kernel and cache the answer)."""
    f = sys._getframe(depth)
    while f is not None:
        name = f.f_code.co_filename.replace("\\", "/")
        if any(name.endswith(p) for p in _PLUMBING) or "importlib" in name:
            f = f.f_back
            continue
        return "/triton/" not in name or "/triton/language/" in name
    return False


class _HostCounter:
    """Counts the wrapper's driver queries while a capture is active."""

    def __init__(self, backend) -> None:
        import triton
        self.backend, self.driver = backend, triton.runtime.driver.active
        self.props = self.targets = 0

    def __enter__(self) -> "_HostCounter":
        props, target = self.backend.device_properties, self.driver.get_current_target

        def device_properties():
            if _asked_by_wrapper():
                self.props += 1
            return props()

        def get_current_target():
            if _asked_by_wrapper():
                self.targets += 1
            return target()
        self.backend.device_properties, self.driver.get_current_target = device_properties, get_current_target
        self._saved = (props, target)
        return self

    def __exit__(self, *exc) -> None:
        self.backend.__dict__.pop("device_properties", None)
        self.driver.__dict__.pop("get_current_target", None)


def capture_launches(spec: KernelSpec, case, dtype: str, fp8: tuple[str, ...] | None = None,
                     props: dict | None = None, staging=None) -> tuple[list, bool, HostWork]:
    """The raw launches of one (case, dtype) as launched for a target with these fp8 types and
    device properties (wrappers that pick native fp8 or an emulation, or size tiles and grids by
    the device, pick as they would there; with `staging`, a configuration whose shared memory the
    target cannot hold is refused, as its compiler refuses it, so that first-fit wrappers and
    autotuners move on), whether the outcome depended on the target, and the call's host work."""
    gen = torch.Generator(device="cpu").manual_seed(case_seed(spec.name, case.name, dtype))
    inputs = spec.make_inputs(case, DTYPES[dtype], "cpu", gen)
    cap = capture(fp8, props, _shared_check(staging) if staging is not None else None)
    torch_work = TorchCounter()
    with cap:
        with _HostCounter(cap.backend) as host, torch_work:
            spec.run(inputs, case)
    t = torch_work.work()
    work = HostWork(len(cap.launches), host.props, host.targets, t.ops, t.kernels, t.bytes, t.copies)
    return list(cap.launches), cap.queried or cap.refused, work


def _shared_check(staging):
    from .onchip import shared_bytes
    seen: dict = {}

    def need(module, num_warps: int, num_stages: int) -> int:
        key = (id(module), num_warps, num_stages)
        if key not in seen:
            counts = analyse(module, (1, 1, 1), [], samples=1, num_warps=num_warps, num_stages=num_stages)
            seen[key] = shared_bytes(counts, staging)
        return seen[key]
    return need


def analyse_launches(launches: list, queried: bool = False, host: HostWork | None = None) -> Captured:
    """Each raw launch analysed; what one launch stores is not read back by later ones (nothing
    ran, so it holds no real data). `host`: the call's host work (captured with the launches)."""
    out, written = Captured(), []
    for launch in launches:
        counts = analyse(launch.module, launch.grid, launch.args, unwritten=written,
                         num_warps=launch.num_warps, num_stages=launch.num_stages)
        out.append(counts)
        written += [(a.address, a.nbytes) for a in launch.args
                    if isinstance(a, DeviceArg) and counts.stored_by_arg.get(a.name)]
    out.target_dependent = queried or _uses_fp8(out)
    out.host = host if host is not None else HostWork(len(launches))
    return out


def lightweight(launches: list) -> list:
    """Raw launches without the floating-point data of their tensors (an analysis reads only
    integer scalars from memory), small enough to keep."""
    import dataclasses
    out = []
    for launch in launches:
        args = [dataclasses.replace(a, handle=a.handle if a.handle is not None and not a.handle.is_floating_point()
                                    and a.handle.numel() <= 1 << 24 else None)
                if isinstance(a, DeviceArg) else a for a in launch.args]
        out.append(dataclasses.replace(launch, args=args))
    return out


def capture_case(spec: KernelSpec, case, dtype: str, fp8: tuple[str, ...] | None = None,
                 props: dict | None = None, staging=None) -> Captured:
    """The launches of one (case, dtype), analysed (see capture_launches)."""
    return analyse_launches(*capture_launches(spec, case, dtype, fp8, props, staging))


def simulate_suite(specs: Iterable[KernelSpec], devices: list[DeviceModel], full: bool = False,
                   progress: Callable[[str], None] | None = None, efficiencies=None, cache=None) -> dict:
    """{"devices": [...], "cases": [...], "by_device": {device: {"device": d, "kernels": {...}}}}.
    `by_device[d]` is the per-kernel summary the coverage report reads (`day0 report --sim`): the
    slowest case's time, whether every case fits, and the verdict per dtype (`fits_by_dtype`), so
    that one dtype a device lacks does not hide the others that run. `cache`: a
    sdk.simulator.cache.CaptureCache that keeps each captured call between runs."""
    from .model import load_efficiencies
    from .onchip import shared_bytes, staging_for, target_profile
    eff = efficiencies or load_efficiencies()
    cases_out: list[dict] = []
    by_device = {d.name: {"device": d.name, "kernels": {}} for d in devices}
    # devices whose Triton targets report different fp8 types or properties may launch different
    # kernels: the first target is captured for every item, the others again where it mattered
    profiles: dict[tuple, list[DeviceModel]] = {}
    for d in devices:
        profiles.setdefault(target_profile(d), []).append(d)
    order = sorted(profiles, key=lambda p: len(p[0]), reverse=True)
    for spec in specs:
        for case in _cases(spec, full):
            for dtype in spec.dtypes:
                if progress:
                    progress(f"{spec.name}/{case.name}/{dtype}")
                first = None  # the launches captured under the first (richest) profile
                for i, profile in enumerate(order):
                    if i > 0 and first is not None and not first.target_dependent and all(
                            shared_bytes(c, staging_for(d)) <= d.max_program_bytes
                            for c in first for d in profiles[profile]):
                        launches = first
                    else:
                        launches = _captured(spec, case, dtype, profile, staging_for(profiles[profile][0]), cache)
                        if isinstance(launches, str):  # a wrapper that cannot run without real data
                            for d in profiles[profile]:
                                _merge(by_device[d.name]["kernels"], spec.name, None, launches, dtype)
                            continue
                        if i == 0:
                            first = launches
                    for d in profiles[profile]:
                        p = predict(launches, d, eff)
                        row = {"kernel": spec.name, "group": spec.group, "case": case.name, "dtype": dtype,
                               "device": d.name, **p.as_dict()}
                        cases_out.append(row)
                        _merge(by_device[d.name]["kernels"], spec.name, p, "", dtype)
    return {"devices": [d.name for d in devices], "cases": cases_out, "by_device": by_device}


def _captured(spec: KernelSpec, case, dtype: str, profile, staging, cache) -> "Captured | str":
    """The call captured for a target profile (from `cache` where it holds it), or the line saying
    why it could not be."""
    key = None
    if cache is not None:
        from .cache import item_key
        key = item_key(spec, case, dtype, profile)
        hit = cache.get(key)
        if hit is not None:
            return hit
    try:
        out = capture_case(spec, case, dtype, profile[0], dict(profile[1]), staging)
    except MemoryError:
        raise
    except Exception as exc:
        last = (str(exc).strip().splitlines() or [""])[-1]
        out = f"not simulated: {type(exc).__name__}: {last}"
    if key is not None:
        cache.put(key, out)
    return out


def _uses_fp8(launches: list[LaunchCounts]) -> bool:
    return any(t.startswith("fp8") or t.startswith("f8") for c in launches
               for t in c.dtypes | {o for o, _ in c.dot_types})


def _cases(spec: KernelSpec, full: bool) -> list:
    """Quick cases, or with `full` the realistic ones (the quick ones where a kernel has none)."""
    quick = [c for c in spec.cases if c.quick]
    return ([c for c in spec.cases if not c.quick] or quick) if full else quick


def _merge(kernels: dict, name: str, p, note: str, dtype: str = "") -> None:
    """Per kernel: the slowest case's time, fits only if every case fits, every reason once, and
    the same per dtype."""
    cur = kernels.setdefault(name, {"time_s": 0.0, "fits": True, "why": [], "fits_by_dtype": {}})
    by_dtype = cur["fits_by_dtype"]
    if p is None:
        cur["fits"] = False
        cur["why"] = sorted(set(cur["why"]) | {note})
        if dtype:
            by_dtype[dtype] = False
        return
    cur["time_s"] = max(cur["time_s"], p.time_s)
    cur["fits"] = cur["fits"] and p.fits
    cur["why"] = sorted(set(cur["why"]) | set(p.why))
    if dtype:
        by_dtype[dtype] = by_dtype.get(dtype, True) and p.fits
