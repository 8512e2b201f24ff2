"""Simulate suite kernels on device models: capture each case's launches, analyse, predict."""
from __future__ import annotations

from typing import Callable, Iterable

import torch

from ..backend import DeviceArg
from ..capture import capture
from ..conformance.check import case_seed
from ..conformance.spec import DTYPES, KernelSpec
from ..device_models.records import DeviceModel
from .analysis import LaunchCounts, analyse
from .model import predict


def capture_case(spec: KernelSpec, case, dtype: str) -> list[LaunchCounts]:
    gen = torch.Generator(device="cpu").manual_seed(case_seed(spec.name, case.name, dtype))
    inputs = spec.make_inputs(case, DTYPES[dtype], "cpu", gen)
    cap = capture()
    with cap:
        spec.run(inputs, case)
    out, written = [], []
    for launch in cap.launches:
        counts = analyse(launch.module, launch.grid, launch.args, unwritten=written)
        out.append(counts)
        # what this launch stores was never computed (nothing ran): later launches must not read it
        written += [(a.address, a.nbytes) for a in launch.args
                    if isinstance(a, DeviceArg) and counts.stored_by_arg.get(a.name)]
    return out


def simulate_suite(specs: Iterable[KernelSpec], devices: list[DeviceModel], full: bool = False,
                   progress: Callable[[str], None] | None = None) -> dict:
    """{"devices": [...], "cases": [...], "by_device": {device: {"device": d, "kernels": {...}}}}.
    `by_device[d]` is the per-kernel summary the coverage report reads (`day0 report --sim`)."""
    cases_out: list[dict] = []
    by_device = {d.name: {"device": d.name, "kernels": {}} for d in devices}
    for spec in specs:
        for case in _cases(spec, full):
            for dtype in spec.dtypes:
                if progress:
                    progress(f"{spec.name}/{case.name}/{dtype}")
                try:
                    launches = capture_case(spec, case, dtype)
                except Exception as exc:  # a wrapper that cannot run without real data
                    last = (str(exc).strip().splitlines() or [""])[-1]
                    for d in devices:
                        _merge(by_device[d.name]["kernels"], spec.name, None,
                               f"not simulated: {type(exc).__name__}: {last}")
                    continue
                for d in devices:
                    p = predict(launches, d)
                    row = {"kernel": spec.name, "group": spec.group, "case": case.name, "dtype": dtype,
                           "device": d.name, **p.as_dict()}
                    cases_out.append(row)
                    _merge(by_device[d.name]["kernels"], spec.name, p, "")
    return {"devices": [d.name for d in devices], "cases": cases_out, "by_device": by_device}


def _cases(spec: KernelSpec, full: bool) -> list:
    """Quick cases, or with `full` the realistic ones (the quick ones where a kernel has none)."""
    quick = [c for c in spec.cases if c.quick]
    return ([c for c in spec.cases if not c.quick] or quick) if full else quick


def _merge(kernels: dict, name: str, p, note: str) -> None:
    """Per kernel: the slowest case's time, fits only if every case fits, every reason once."""
    cur = kernels.setdefault(name, {"time_s": 0.0, "fits": True, "why": []})
    if p is None:
        cur["fits"] = False
        cur["why"] = sorted(set(cur["why"]) | {note})
        return
    cur["time_s"] = max(cur["time_s"], p.time_s)
    cur["fits"] = cur["fits"] and p.fits
    cur["why"] = sorted(set(cur["why"]) | set(p.why))
