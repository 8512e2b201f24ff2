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
    operation, those that launch a device kernel and the bytes they move, the copies between host
    and device, and the values read back to the host among those copies."""

    launches: int = 0
    property_queries: int = 0
    target_queries: int = 0
    torch_ops: int = 0
    torch_kernels: int = 0
    torch_bytes: int = 0
    torch_copies: int = 0
    torch_reads: int = 0


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


class ItemInputs:
    """One (kernel, case, dtype)'s inputs, built once for the captures of several targets. The
    floating-point values (and large integer payloads) are never read by a capture: they stay
    uncomputed unless the input builder or the wrapper needs them (sdk.simulator.deferred). A
    capture whose wrapper wrote nothing but the kernel's outputs leaves them as they were, and the
    next capture reuses them; otherwise they are built again."""

    def __init__(self, spec: KernelSpec, case, dtype: str) -> None:
        self.spec, self.case, self.dtype = spec, case, dtype
        self.mode = self.value = None
        self.memo: dict = {}  # launch -> its analysis, for the captures that launch the same

    def __enter__(self):
        from .deferred import DeferredFloats
        if self.value is None:
            self.mode = DeferredFloats()
            gen = torch.Generator(device="cpu").manual_seed(case_seed(self.spec.name, self.case.name, self.dtype))
            with self.mode:
                self.value = self.spec.make_inputs(self.case, DTYPES[self.dtype], "cpu", gen)
        self.mode.watch = set()
        self.mode.__enter__()
        self._clean = False
        return self.value

    def ran(self) -> None:
        """The wrapper returned: keep the inputs if it wrote only the outputs (or nothing)."""
        from .deferred import storage_key
        from torch.utils._pytree import tree_flatten
        outputs = set(self.spec.outputs) - set(self.spec.inplace)
        allowed = {storage_key(t) for k in outputs for t in tree_flatten(self.value.get(k))[0]
                   if isinstance(t, torch.Tensor) and t.numel()} if isinstance(self.value, dict) else set()
        self._clean = self.mode.watch <= allowed

    def __exit__(self, *exc) -> None:
        self.mode.watch = None
        self.mode.__exit__(*exc)
        if not self._clean or exc[0] is not None:
            self.mode = self.value = None


def capture_launches(spec: KernelSpec, case, dtype: str, fp8: tuple[str, ...] | None = None,
                     props: dict | None = None, staging=None,
                     inputs: ItemInputs | None = None) -> tuple[list, bool, HostWork]:
    """The raw launches of one (case, dtype) as launched for a target with these fp8 types and
    device properties (wrappers that pick native fp8 or an emulation, or size tiles and grids by
    the device, pick as they would there; with `staging`, a configuration whose shared memory the
    target cannot hold is refused, as its compiler refuses it, so that first-fit wrappers and
    autotuners move on), whether the outcome depended on the target, and the call's host work.
    `inputs`: the item's inputs, shared by its captures for several targets."""
    cap = capture(fp8, props, _shared_check(staging) if staging is not None else None)
    torch_work = TorchCounter()
    with inputs or ItemInputs(spec, case, dtype) as x:
        with cap:
            with _HostCounter(cap.backend) as host, torch_work:
                spec.run(x, case)
        if inputs is not None:
            inputs.ran()
    t = torch_work.work()
    work = HostWork(len(cap.launches), host.props, host.targets, t.ops, t.kernels, t.bytes, t.copies, t.reads)
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


def analyse_launches(launches: list, queried: bool = False, host: HostWork | None = None,
                     memo: dict | None = None) -> Captured:
    """Each raw launch analysed; what one launch stores is not read back by later ones (nothing
    ran, so it holds no real data). `host`: the call's host work (captured with the launches).
    `memo`: analyses of launches seen before (the same TTIR, grid, arguments and integer data:
    one call captured for another target that launches the same, compiled again for it), reused."""
    import copy
    out, written = Captured(), []
    for launch in launches:
        key = _launch_key(launch, written) if memo is not None else None
        if key is not None and key in memo:
            counts = copy.deepcopy(memo[key][1])
        else:
            counts = analyse(launch.module, launch.grid, launch.args, unwritten=written,
                             num_warps=launch.num_warps, num_stages=launch.num_stages)
            if key is not None:
                memo[key] = (launch.module, copy.deepcopy(counts))  # the module kept alive: its ops' ids key the sites
        out.append(counts)
        written += [(a.address, a.nbytes) for a in launch.args
                    if isinstance(a, DeviceArg) and counts.stored_by_arg.get(a.name)]
    out.target_dependent = queried or _uses_fp8(out)
    out.host = host if host is not None else HostWork(len(launches))
    return out


def _launch_key(launch, written: list) -> tuple:
    """What an analysis of a launch depends on: the kernel's TTIR (the same text compiled for
    another target is the same kernel to an analysis), grid, launch options, every argument (a
    tensor by its place, size, type and the integer data it holds) and the memory earlier
    launches of the call wrote."""
    import hashlib
    args = []
    for a in launch.args:
        if isinstance(a, DeviceArg):
            data = b""
            if a.handle is not None and not a.handle.is_floating_point():
                data = hashlib.blake2b(a.handle.contiguous().view(torch.uint8).numpy().tobytes(),
                                       digest_size=16).digest() if a.handle.numel() else b""
            args.append((a.name, a.address, a.nbytes, a.dtype, data))
        else:
            args.append(repr(a))
    return (launch.module.text, tuple(launch.grid), launch.num_warps, launch.num_stages, tuple(args), tuple(written))


def lightweight(launches: list) -> list:
    """Raw launches without the data of their floating-point tensors and of integer tensors of
    PAYLOAD_INT_ELEMENTS or more (an analysis reads integer scalars from the others: lengths,
    offsets, tables), small enough to keep. A capture may leave those uncomputed
    (sdk.simulator.deferred)."""
    import dataclasses
    from .deferred import PAYLOAD_INT_ELEMENTS
    out = []
    for launch in launches:
        args = [dataclasses.replace(a, handle=a.handle if a.handle is not None and not a.handle.is_floating_point()
                                    and a.handle.numel() < PAYLOAD_INT_ELEMENTS else None)
                if isinstance(a, DeviceArg) else a for a in launch.args]
        out.append(dataclasses.replace(launch, args=args))
    return out


def capture_case(spec: KernelSpec, case, dtype: str, fp8: tuple[str, ...] | None = None,
                 props: dict | None = None, staging=None, inputs: ItemInputs | None = None) -> Captured:
    """The launches of one (case, dtype), analysed (see capture_launches) from the integer data
    an analysis reads (lightweight)."""
    launches, queried, host = capture_launches(spec, case, dtype, fp8, props, staging, inputs)
    return analyse_launches(lightweight(launches), queried, host, inputs.memo if inputs is not None else None)


def simulate_suite(specs: Iterable[KernelSpec], devices: list[DeviceModel], full: bool = False,
                   progress: Callable[[str], None] | None = None, efficiencies=None, cache=None,
                   jobs: int = 1, compile_progress: Callable[[int, int, list], None] | None = None) -> dict:
    """{"devices": [...], "cases": [...], "by_device": {device: {"device": d, "kernels": {...}}}}.
    `by_device[d]` is the per-kernel summary the coverage report reads (`day0 report --sim`): the
    slowest case's time, whether every case fits, and the verdict per dtype (`fits_by_dtype`), so
    that one dtype a device lacks does not hide the others that run. `cache`: a
    sdk.simulator.cache.CaptureCache that keeps each captured call between runs. `jobs`: worker
    processes capturing the calls the cache does not hold (1: in this process); the result does
    not depend on it. `progress(item)` is called as each (kernel, case, dtype) is captured;
    `compile_progress(done, total, archs)` as the launches are compiled for the targets that compile
    here (sdk.simulator.compiled.prefetch), where any is not in Triton's cache."""
    from .model import load_efficiencies
    from .onchip import target_profile
    eff = efficiencies or load_efficiencies()
    cases_out: list[dict] = []
    by_device = {d.name: {"device": d.name, "kernels": {}} for d in devices}
    # devices whose Triton targets report different fp8 types or properties may launch different
    # kernels: the first target is captured for every item, the others again where it mattered
    profiles: dict[tuple, list[DeviceModel]] = {}
    for d in devices:
        profiles.setdefault(target_profile(d), []).append(d)
    order = sorted(profiles, key=lambda p: len(p[0]), reverse=True)
    from .onchip import staging_for
    # what a capture needs of each profile's devices: how their compilers stage, what they hold
    groups = [[(staging_for(d), d.max_program_bytes) for d in profiles[p]] for p in order]
    items = [(spec, case, dtype) for spec in specs for case in _cases(spec, full) for dtype in spec.dtypes]
    captured = _capture_items(items, order, groups, cache, jobs, progress)
    # what the devices' compilers allocate for each launch (where a target compiles here), compiled
    # in the workers before the predictions read it
    from .compiled import prefetch
    prefetch([(launches, profiles[profile]) for per_profile in captured
              for profile, launches in zip(order, per_profile)], jobs, compile_progress)
    for (spec, case, dtype), per_profile in zip(items, captured):
        for profile, launches in zip(order, per_profile):
            if isinstance(launches, str):  # a wrapper that cannot run without real data
                for d in profiles[profile]:
                    _merge(by_device[d.name]["kernels"], spec.name, None, launches, dtype)
                continue
            for d in profiles[profile]:
                p = predict(launches, d, eff)
                row = {"kernel": spec.name, "group": spec.group, "case": case.name, "dtype": dtype,
                       "device": d.name, **p.as_dict()}
                cases_out.append(row)
                _merge(by_device[d.name]["kernels"], spec.name, p, "", dtype)
    return {"devices": [d.name for d in devices], "cases": cases_out, "by_device": by_device}


def _capture_item(spec: KernelSpec, case, dtype: str, order: list, groups: list, cache,
                  cache_only: bool = False) -> "list | None":
    """One item's captures, one per target profile in `order` (`groups[i]`: the (staging, bytes
    one program may hold) of that profile's devices): the first profile's, and each other's
    where the first depended on the target or does not fit one of its devices (else the first's,
    shared). With `cache_only`: None unless `cache` holds every capture needed."""
    from .onchip import shared_bytes
    out, first = [], None
    inputs = ItemInputs(spec, case, dtype)  # built at the first capture, shared by the next ones
    for i, profile in enumerate(order):
        if i > 0 and first is not None and not first.target_dependent and all(
                shared_bytes(c, st) <= limit for c in first for st, limit in groups[i]):
            out.append(first)
            continue
        if cache_only:
            from .cache import item_key
            launches = cache.peek(item_key(spec, case, dtype, profile)) if cache is not None else None
            if launches is None:
                return None
        else:
            launches = _captured(spec, case, dtype, profile, groups[i][0][0], cache, inputs)
        if i == 0 and not isinstance(launches, str):
            first = launches
        out.append(launches)
    return out


def _capture_items(items: list, order: list, groups: list, cache, jobs: int, progress) -> list:
    """Every item's captures (_capture_item), in item order: from the cache where it holds them,
    the others captured by `jobs` worker processes (in this process when 1, or when the kernel is
    not one a worker can find in the suite's registry)."""
    out: list = [None] * len(items)
    todo = []
    for n, (spec, case, dtype) in enumerate(items):
        hit = _capture_item(spec, case, dtype, order, groups, cache, cache_only=True) if cache is not None else None
        if hit is not None:
            cache.count_hits(sum(1 for i, x in enumerate(hit) if i == 0 or x is not hit[0]))
            out[n] = hit
            if progress:
                progress(f"{spec.name}/{case.name}/{dtype}")
        else:
            todo.append(n)
    remote = _in_registry([items[n] for n in todo]) if jobs > 1 and len(todo) > 1 else []
    local = [n for n, ok in zip(todo, remote or [False] * len(todo)) if not ok]
    if remote and any(remote):
        failed = _capture_in_workers(items, [n for n, ok in zip(todo, remote) if ok], order, groups, cache,
                                     jobs, progress, out)
        local = sorted(local + failed)
    for n in local:
        spec, case, dtype = items[n]
        if progress:
            progress(f"{spec.name}/{case.name}/{dtype}")
        out[n] = _capture_item(spec, case, dtype, order, groups, cache)
    return out


def _in_registry(items: list) -> list[bool]:
    """Whether a worker process can find each item's kernel by name (a registered spec)."""
    from ..conformance.spec import registered
    suite = registered()
    return [suite.get(spec.name) is spec for spec, _, _ in items]


def _capture_in_workers(items: list, todo: list, order: list, groups: list, cache, jobs: int, progress,
                        out: list) -> list:
    """Capture items `todo` in `jobs` spawned processes, filling `out`; the indices a worker could
    not finish (its process died) are returned, to be captured here."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool
    directory = str(cache.dir) if cache is not None else None
    ctx = multiprocessing.get_context("spawn")
    left = set(todo)
    try:
        with ProcessPoolExecutor(max_workers=min(jobs, len(todo)), mp_context=ctx, initializer=_worker_init) as pool:
            futures = {}
            # the library tier first: its calls run upstream wrappers whose inputs cost the most
            # to build, and a long call started last would leave the other workers idle
            for n in sorted(todo, key=lambda n: items[n][0].tier != "library"):
                spec, case, dtype = items[n]
                futures[pool.submit(_worker_capture, spec.name, case.name, dtype, order, groups, directory)] = n
            for fut in as_completed(futures):
                n = futures[fut]
                per_profile, hits, misses = fut.result()
                out[n] = per_profile
                left.discard(n)
                if cache is not None:
                    cache.count_hits(hits)
                    cache.misses += misses
                if progress:
                    spec, case, dtype = items[n]
                    progress(f"{spec.name}/{case.name}/{dtype}")
    except BrokenProcessPool:
        pass
    return sorted(left)


def _worker_init() -> None:
    torch.set_num_threads(1)  # one core per worker: the workers share the machine


def _worker_capture(kernel: str, case_name: str, dtype: str, order: list, groups: list, directory):
    """In a worker process: one item's captures, with the cache's hits and misses."""
    from ..conformance.spec import registered
    from .cache import CaptureCache
    spec = registered()[kernel]
    case = next(c for c in spec.cases if c.name == case_name)
    cache = CaptureCache(directory) if directory is not None else None
    per_profile = _capture_item(spec, case, dtype, order, groups, cache)
    return per_profile, (cache.hits if cache else 0), (cache.misses if cache else 0)


def _captured(spec: KernelSpec, case, dtype: str, profile, staging, cache, inputs=None) -> "Captured | str":
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
        out = capture_case(spec, case, dtype, profile[0], dict(profile[1]), staging, inputs)
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
