"""`day0 simulate`: would each suite kernel fit a device model, and how long would it take there."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import Day0Error, UnknownName


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate", help="predict fit and time of suite kernels on device models",
        description="Capture each conformance kernel's launches (nothing runs), read their TTIR, and "
                    "predict for each device model whether every program fits (what the target's "
                    "compiler stages on chip, grid limits, dtype paths; per dtype) and how long the "
                    "kernel takes (a tile model for dots on the matrix unit, DRAM traffic with L2 reuse "
                    "and access patterns, a latency floor), from the model's datasheet figures and "
                    "efficiencies learned on a GPU. Write the result with --out and pass it to "
                    "`day0 report --sim`.")
    p.add_argument("--device", action="append", required=True, metavar="D",
                   help="device model name or YAML path (repeat or comma-separate)")
    p.add_argument("--kernels", default="", help="comma-separated kernel names (default: all)")
    p.add_argument("--groups", default="", help="comma-separated kernel groups")
    p.add_argument("--full", action="store_true", help="full (realistic) shapes instead of quick ones")
    p.add_argument("--out", type=Path, help="write JSON here (refuses to overwrite without --force)")
    p.add_argument("--force", action="store_true", help="overwrite --out")
    p.add_argument("--cache-dir", type=Path, metavar="DIR",
                   help="where captured calls are kept between runs (default: $DAY0_SIM_CACHE, else "
                        "$XDG_CACHE_HOME/day0/sim or ~/.cache/day0/sim)")
    p.add_argument("--no-cache", action="store_true", help="capture every call again and keep nothing")
    p.add_argument("--jobs", type=_jobs, default=0, metavar="N",
                   help="worker processes capturing the calls the cache does not hold, and compiling the "
                        "launches whose allocation Triton's cache does not hold (default: one per CPU core, "
                        "at most 8; 1: in this process)")
    p.add_argument("--efficiencies", type=Path, metavar="JSON",
                   help="learned efficiencies to use instead of the shipped ones (sdk/simulator/efficiencies.json)")
    p.set_defaults(func=run)


def _jobs(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n}: at least 1")
    return n


def _split(values: list[str] | str) -> list[str]:
    items = values if isinstance(values, list) else [values]
    return [x.strip() for v in items for x in v.split(",") if x.strip()]


def run(args: argparse.Namespace) -> int:
    from ..conformance.spec import registered
    from ..device_models import load
    if args.out and args.out.exists() and not args.force:
        raise Day0Error(f"{args.out} exists; pass --force to overwrite it")
    devices = [load(d) for d in _split(args.device)]
    eff = None
    if args.efficiencies:
        from ..simulator.model import load_efficiencies
        if not args.efficiencies.is_file():
            raise Day0Error(f"{args.efficiencies}: no such file (--efficiencies takes a JSON file)")
        try:
            eff = load_efficiencies(args.efficiencies)
        except (ValueError, TypeError, AttributeError) as exc:
            raise Day0Error(f"{args.efficiencies}: not an efficiencies file ({type(exc).__name__}: {exc})") from None
    suite = registered()
    names, groups = _split(args.kernels), _split(args.groups)
    for n in names:
        if n not in suite:
            raise UnknownName("kernel", n, list(suite))
    known_groups = sorted({s.group for s in suite.values()})
    for g in groups:
        if g not in known_groups:
            raise UnknownName("group", g, known_groups)
    specs = [s for s in suite.values() if (not names or s.name in names) and (not groups or s.group in groups)]
    from ..simulator import simulate_suite
    from ..simulator.run import _cases
    total = sum(len(_cases(s, args.full)) * len(s.dtypes) for s in specs)
    cache = None
    if not args.no_cache:
        from ..simulator.cache import CaptureCache
        if args.cache_dir is not None and args.cache_dir.exists() and not args.cache_dir.is_dir():
            raise Day0Error(f"{args.cache_dir}: not a directory (--cache-dir takes one)")
        cache = CaptureCache(args.cache_dir)
    progress, compiling = _Progress(total), _CompileProgress()
    try:
        import os
        jobs = args.jobs or max(1, min(os.cpu_count() or 1, 8))
        result = simulate_suite(specs, devices, full=args.full, progress=progress, efficiencies=eff, cache=cache,
                                jobs=jobs, compile_progress=compiling)
    finally:
        progress.close()
        compiling.close()
    _print_table(result)
    if cache is not None:
        print(f"captures: {cache.hits} from the cache, {cache.misses} captured ({cache.dir})", file=sys.stderr)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        from ..fileio import atomic_write_text, json_text
        atomic_write_text(args.out, json_text(result, indent=1) + "\n")  # strict JSON, replaced atomically
        print(f"wrote {args.out}")
    return 0


class _Progress:
    """Called as each of `total` things is done (a (kernel, case, dtype) captured, a launch
    compiled): a tqdm bar with the time left on a terminal, a plain line per 10 % elsewhere."""

    def __init__(self, total: int, stream=None, verb: str = "simulated", unit: str = "cases"):
        import time
        from tqdm import tqdm
        self.stream, self.total, self.n, self.t0 = stream or sys.stderr, total, 0, time.monotonic()
        self.verb, self.unit = verb, unit
        self.step = max(1, -(-total // 10))
        tty = getattr(self.stream, "isatty", lambda: False)()
        label = {"simulated": "simulating"}.get(verb, verb)
        self.bar = tqdm(total=total, file=self.stream, unit=unit.rstrip("s"), leave=True, mininterval=0.2,
                        bar_format=label + " {l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}]{postfix}"
                        ) if tty and total else None

    def __call__(self, what: str = "") -> None:
        import time
        if self.bar is not None:
            if what:
                self.bar.set_postfix_str(what, refresh=False)
            self.bar.update(1)
            return
        self.n += 1
        done = self.n
        if done % self.step == 0 or done == self.total:
            from ..conformance.runner import _fmt_s
            elapsed = time.monotonic() - self.t0
            print(f"{self.verb} {done}/{self.total} {self.unit} ({100 * done // self.total}%); {_fmt_s(elapsed)} "
                  f"elapsed, about {_fmt_s(elapsed / done * (self.total - done))} left", file=self.stream,
                  flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class _CompileProgress:
    """The compile phase's progress (sdk.simulator.compiled.prefetch): one line saying what is
    compiled and why, then a _Progress over the launches."""

    def __init__(self, stream=None):
        self.stream, self.inner = stream or sys.stderr, None

    def __call__(self, done: int, total: int, archs: list) -> None:
        if self.inner is None:
            print(f"compiling {total} launch(es) for {', '.join(archs)} with Triton's own compiler, for what each "
                  "holds on chip (registers, shared memory); Triton's cache keeps them for the next run",
                  file=self.stream, flush=True)
            self.inner = _Progress(total, self.stream, verb="compiled", unit="launches")
        if done:
            self.inner()

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()


def _fit_word(e: dict) -> str:
    """'' when every case fits; ' NO FIT' when none does; ' NO FIT fp32' naming the dtypes that do
    not fit when others do."""
    if e["fits"]:
        return ""
    by = e.get("fits_by_dtype") or {}
    bad = sorted(d for d, ok in by.items() if not ok)
    return f" NO FIT {','.join(bad)}" if bad and len(bad) < len(by) else " NO FIT"


def _print_table(result: dict) -> None:
    devices = result["devices"]
    kernels = sorted({k for d in devices for k in result["by_device"][d]["kernels"]})
    head = ["kernel"] + [f"{d} (us)" for d in devices]
    rows = [head]
    for k in kernels:
        row = [k]
        for d in devices:
            e = result["by_device"][d]["kernels"].get(k)
            row.append("-" if e is None else f"{e['time_s'] * 1e6:.1f}" + _fit_word(e))
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for i, r in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    for d in devices:
        for k, e in sorted(result["by_device"][d]["kernels"].items()):
            for why in e["why"]:
                print(f"  {d}: {why}")
