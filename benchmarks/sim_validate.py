"""Validate the simulator: learn its efficiencies on one GPU, predict a GPU it never saw.

    python benchmarks/sim_validate.py --calibrate results/sim_v2/h100.json --calibrate-device nvidia_h100 \
        --holdout results/sim_v2/h200.json --holdout-device nvidia_h200 \
        --out results/sim_v2/validation.json [--write-efficiencies sdk/simulator/efficiencies.json] \
        [--cache /tmp/sim_counts.pkl] [--probe probe_access.json] [--latency-probe probe_latency.json]

Inputs are benchmarks/sim_measure.py results (median times of every suite kernel's full cases).
Every measured (kernel, case, dtype) is captured once here (no GPU: TTIR and launch arguments, the
same seed as on the GPU) and predicted from the device model's datasheet figures:
1. calibration: the efficiencies are fitted on every calibration row (sdk.simulator.calibrate);
   in-sample errors are reported as such;
2. leave one kernel out: for each kernel, efficiencies fitted on the other kernels' rows predict
   its rows;
3. held out: the held-out device's rows predicted with the efficiencies fitted on the calibration
   device, from the held-out device model's datasheet figures.
Prints median and worst |error| per class (the bound of the prediction: memory, matrix, vector,
latency, launch) and writes everything as JSON.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import inspect
import json
import pickle
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def measured_in(data: dict) -> dict[tuple, dict]:
    """The measured rows of a sim_measure.py result, by (kernel, case, dtype)."""
    return {(r["kernel"], r["case"], r["dtype"]): r for r in data.get("rows", [])
            if r.get("status") == "measured" and r.get("day0_ms")}


def measured_rows(path: Path) -> dict[tuple, dict]:
    return measured_in(json.loads(path.read_text()))


#: device-model host figures (DeviceModel.host_costs_s) -> the learned efficiencies they stand for
HOST_FIELDS = {"launch": "host_launch_s", "property_query": "host_query_s", "target_query": "host_target_s",
               "copy_from_host": "host_copy_s", "torch_kernel": "host_torch_op_s"}

#: a call is bound by its wrapper's host work when the time measured around it exceeds the GPU
#: time of the kernels it launched (profiled) by more than this many seconds and this fraction
HOST_EXCESS_S, HOST_EXCESS_FRACTION = 10e-6, 0.3


def profiled_gpu_us(row: dict) -> float | None:
    """GPU time (us) of the kernels a measured call launched, from its profile; None without one."""
    times = [x["us"] for x in row.get("launches") or [] if "us" in x]
    return sum(times) if times else None


def host_bound(row: dict) -> bool | None:
    """Whether the wrapper's host work (synchronising copies of metadata, Python) rather than the
    device set the measured time; None without a profile of the call."""
    gpu_us = profiled_gpu_us(row)
    if gpu_us is None:
        return None
    t, gpu = row["day0_ms"] * 1e-3, gpu_us * 1e-6
    return t - gpu > max(HOST_EXCESS_S, HOST_EXCESS_FRACTION * t)


def _code_hash() -> str:
    h = hashlib.sha256()
    for f in ("sdk/capture.py", "sdk/simulator/run.py", "sdk/simulator/torchwork.py"):
        h.update((ROOT / f).read_bytes())
    return h.hexdigest()[:16]


def capture_all(keys: list[tuple], cache_path: Path | None, device) -> dict[tuple, list | str]:
    """Each key's launches, captured as the device's Triton target would launch them (its fp8
    types and device properties: wrappers that size tiles or grids by the device do so as there)."""
    from sdk.conformance.spec import registered
    from sdk.simulator.onchip import staging_for, target_profile
    from sdk.simulator.run import analyse_launches, capture_launches, lightweight
    fp8, props, _ = target_profile(device)
    suite = registered()
    cache: dict = {}
    if cache_path and cache_path.exists():
        try:
            cache = pickle.loads(cache_path.read_bytes())
        except Exception:
            cache = {}
    code = _code_hash() + repr(target_profile(device))
    out = {}
    t0 = time.monotonic()
    for i, key in enumerate(keys):
        spec = suite.get(key[0])
        if spec is None:
            out[key] = "kernel no longer in the suite"
            continue
        src = inspect.getsourcefile(spec.run) or ""
        stamp = (code, hashlib.sha256(Path(src).read_bytes()).hexdigest()[:16] if src else "")
        hit = cache.get(key)
        if hit and hit[0] == stamp:  # raw launches, analysed again (the analysis may have changed)
            out[key] = analyse_launches(*hit[1]) if isinstance(hit[1], tuple) else hit[1]
            continue
        case = next((c for c in spec.cases if c.name == key[1]), None)
        try:
            if case is None:
                raw = "case no longer in the suite"
            else:
                launches, queried, host = capture_launches(spec, case, key[2], fp8, dict(props),
                                                           staging_for(device))
                raw = (lightweight(launches), queried, host)
        except Exception as exc:
            raw = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[-1][:200]}"
        out[key] = analyse_launches(*raw) if isinstance(raw, tuple) else raw
        cache[key] = (stamp, raw)
        print(f"  captured {i + 1}/{len(keys)} {'/'.join(key)} ({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)
        if cache_path:
            cache_path.write_bytes(pickle.dumps(cache))
    return out


def strided_rates(probe: dict, device) -> dict:
    """Element-strided loads and stores per unit per clock from an access-pattern probe: elements
    over time, units and clock, the mean over its element widths."""
    out = {}
    for kind, name in (("strided_loads_per_clock", "strided_load_only"), ("strided_stores_per_clock", "strided_store_only")):
        rates = []
        for r in probe["rows"]:
            if r["kernel"] == name:
                width = 2 if r["dtype"] in ("bfloat16", "float16") else 4
                rates.append(r["bytes"] / width / (r["us"] * 1e-6 * device.units * device.clock_hz))
        if rates:
            out[kind] = statistics.fmean(rates)
    return out


def _rows(measured: dict, counts: dict, device, suite, measure: str = "call") -> tuple[list, list]:
    """Calibration or scoring rows: each measured call's captured launches and what was measured of
    it: the time around the call ("call"), or the GPU time of its kernels from its profile
    ("device"; a call without a profile is skipped and says so)."""
    from sdk.simulator.calibrate import Row
    rows, skipped = [], []
    for key, m in sorted(measured.items()):
        c = counts.get(key)
        why = None if isinstance(c, list) and c else (c if isinstance(c, str) else "no launch")
        seconds = m["day0_ms"] * 1e-3
        if why is None and measure == "device":
            gpu_us = profiled_gpu_us(m)
            why, seconds = ("no profile of the call", 0.0) if gpu_us is None else (None, gpu_us * 1e-6)
        if why is not None:
            skipped.append({"kernel": key[0], "case": key[1], "dtype": key[2], "why": why})
            continue
        rows.append(Row(key, m.get("group", suite[key[0]].group if key[0] in suite else ""), c, device,
                        seconds, measure))
    return rows, skipped


def _leave_one_kernel_out(fit_rows: list, eff, fixed: tuple) -> list[dict]:
    """Each kernel's rows predicted by efficiencies refitted without that kernel (a shorter refit
    starting from `eff`)."""
    from sdk.simulator.calibrate import errors, fit
    out = []
    for k in sorted({r.key[0] for r in fit_rows}):
        train = [r for r in fit_rows if r.key[0] != k]
        out += errors([r for r in fit_rows if r.key[0] == k], fit(train, start=eff, spans=(1.4, 1.1), passes=1,
                                                                   fixed=fixed))
    return out


def _print_block(title: str, s: dict) -> None:
    print(f"\n{title}")
    if not s.get("n", 1) or "all" not in s:
        print("  nothing to score")
        return
    print(f"  {'class':10s} {'n':>4s} {'median |err|':>13s} {'mean |err|':>11s} {'within 2x':>10s}  worst")
    for cls, b in [("all", s["all"])] + sorted(s["by_class"].items()):
        w = b["worst"]
        print(f"  {cls:10s} {b['n']:4d} {b['median_abs_error_pct']:12.1f}% {b['mean_abs_error_pct']:10.1f}% "
              f"{b['within_2x']:5d}/{b['n']:<4d}  {w['kernel']}/{w['case']} x{w['ratio']:.2f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibrate", type=Path, required=True, help="sim_measure.py JSON of the calibration GPU")
    ap.add_argument("--calibrate-device", default="nvidia_h100")
    ap.add_argument("--holdout", type=Path, help="sim_measure.py JSON of a GPU never used for calibration")
    ap.add_argument("--holdout-device", default="nvidia_h200")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--write-efficiencies", type=Path, help="store the efficiencies fitted on every calibration row")
    ap.add_argument("--cache", type=Path, help="pickle of captured launches (TTIR, grids, integer arguments), reused "
                    "while the capture and the kernels are unchanged; analysed again each run")
    ap.add_argument("--probe", type=Path, help="benchmarks/sim_probe_access.py JSON from the calibration GPU: the "
                    "element-strided load and store rates (measured, not fitted)")
    ap.add_argument("--latency-probe", type=Path, help="benchmarks/sim_probe_latency.py JSON from the calibration GPU: "
                    "the DRAM latency a load waits, measured there rather than fitted")
    ap.add_argument("--no-loko", action="store_true", help="skip leave-one-kernel-out")
    ap.add_argument("--start", type=Path, help="efficiencies JSON the fit also starts from (besides the defaults); of "
                    "the two fits the one with the lower leave-one-kernel-out error is kept (the lower loss "
                    "with --no-loko)")
    ap.add_argument("--efficiencies", type=Path, help="score these efficiencies as they are instead of fitting "
                    "(leave-one-kernel-out still refits from them)")
    ap.add_argument("--measure", choices=("call", "device"), default="call",
                    help="what a prediction is scored against: the median time measured around each call, the "
                         "wrapper's host work included (call), or the GPU time of the kernels the call launched, "
                         "from its profile (device): the device's own time, which the host cannot move")
    args = ap.parse_args(argv)

    from sdk.conformance.spec import registered
    from sdk.device_models import load
    from sdk.simulator.calibrate import errors, fit, loss, summarize
    from sdk.simulator.model import load_efficiencies
    from sdk.simulator.timing import Efficiencies
    suite = registered()
    cal = measured_rows(args.calibrate)
    hold = measured_rows(args.holdout) if args.holdout else {}
    keys = sorted(set(cal) | set(hold))
    cal_device, hold_device = load(args.calibrate_device), load(args.holdout_device)
    from sdk.simulator.onchip import target_profile
    if args.holdout and target_profile(cal_device) != target_profile(hold_device):
        print("sim_validate: the two devices' Triton targets differ (fp8 types or properties); the calls are "
              "captured for the calibration device", file=sys.stderr)
    counts = capture_all(keys, args.cache, cal_device)
    cal_rows, cal_skipped = _rows(cal, counts, cal_device, suite, args.measure)
    hold_rows, hold_skipped = _rows(hold, counts, hold_device, suite, args.measure) if hold else ([], [])

    host = {k for k, m in cal.items() if host_bound(m)}
    tiers = {name: spec.tier for name, spec in suite.items()}
    library = [r for r in cal_rows if tiers.get(r.key[0]) == "library"]
    fit_rows = [r for r in cal_rows if tiers.get(r.key[0]) != "library"]
    print(f"{len(cal_rows)} calibration calls; fitted on the {len(fit_rows)} of the kernel tier ({len(host & {r.key for r in fit_rows})} "
          f"of them bound by their wrapper's host work: profiled GPU time far below the measured time); "
          f"{len(library)} library-tier calls (PyTorch work around their Triton launches) scored, not fitted")
    # measured directly on the calibration GPU rather than fitted: the floor of one launch (an
    # empty launch through the backend, timed as every call is)
    ceil = json.loads(args.calibrate.read_text()).get("ceilings", {})
    start = Efficiencies(program_start_s=8e-8)  # (0 turns the term off; the fit starts it here)
    fixed: tuple = ()
    if ceil.get("empty_launch_day0_us") and args.measure == "call":
        start = replace(start, launch_floor_s=ceil["empty_launch_day0_us"] * 1e-6)
        fixed = ("launch_floor_s",)
    if args.probe:
        start = replace(start, **strided_rates(json.loads(args.probe.read_text()), cal_device))
        print(f"element-strided accesses (measured by {args.probe}): {start.strided_loads_per_clock:.3f} loads, "
              f"{start.strided_stores_per_clock:.3f} stores per unit per clock")
    if args.latency_probe:
        lat = [r["latency_s"] for r in json.loads(args.latency_probe.read_text())["rows"] if r["buffer"] == "dram"]
        if lat:
            start = replace(start, dram_latency_s=lat[0])
            fixed += ("dram_latency_s",)
            print(f"DRAM latency (measured by {args.latency_probe}): {lat[0] * 1e9:.0f} ns")
    # fixed per-launch costs (the floor, the host's) scale from the calibration GPU's host to another
    # device's by an empty launch measured on each (the device models' measured launch overhead)
    # (the device's own time has no host term: its fixed costs are the GPU's and scale by nothing)
    start = replace(start, launch_reference_s=cal_device.host_launch_s if args.measure == "call" else 0.0)
    # host work the calibration device's model measured on its host (benchmarks/sim_probe_host.py)
    # costs that there, not fitted; it becomes the learned figure other devices' hosts scale from
    measured = {HOST_FIELDS[k]: v for k, v in cal_device.host_costs_s.items() if k in HOST_FIELDS}
    if measured and args.measure == "call":
        start = replace(start, **measured)
        fixed += tuple(measured)
        print(f"host work measured on the {args.calibrate_device}'s host: "
              + ", ".join(f"{k} {v * 1e6:.1f} us" for k, v in cal_device.host_costs_s.items()))
    if args.measure == "device":
        print("scored against each call's profiled GPU time: no host term; the launch floor is fitted as a GPU "
              "figure and scales to no other device")
    else:
        print(f"launch floor {start.launch_floor_s * 1e6:.2f} us (an empty launch measured on the {args.calibrate_device}); "
          f"host figures: an empty launch takes {cal_device.host_launch_s * 1e6:.2f} us on its host, "
          f"{hold_device.host_launch_s * 1e6:.2f} us on the {args.holdout_device}'s")
    t0 = time.monotonic()
    # candidate fits: from the defaults, and from --start; coordinate descent finds a local minimum
    # near where it starts, so where two starts end in different minima, the one that predicts
    # kernels left out of its own fit better (leave one kernel out, on the calibration GPU only) is
    # kept; nothing of the held-out GPU enters the choice
    candidates = []
    if args.efficiencies:
        candidates.append((str(args.efficiencies) + " (as given, not fitted)", load_efficiencies(args.efficiencies)))
    else:
        candidates.append(("the defaults", fit(fit_rows, start=start, fixed=fixed)))
        if args.start:
            other = load_efficiencies(args.start)
            # the figures measured above stay as measured; only the fitted ones start elsewhere
            other = replace(other, **{name: getattr(start, name) for name in fixed + (
                "launch_reference_s", "strided_loads_per_clock", "strided_stores_per_clock")},
                program_start_s=other.program_start_s or start.program_start_s)
            candidates.append((str(args.start), fit(fit_rows, start=other, fixed=fixed)))
    fits = []
    for label, cand in candidates:
        loko = None if args.no_loko else _leave_one_kernel_out(fit_rows, cand, fixed)
        fits.append({"start": label, "loss": loss(fit_rows, cand), "efficiencies": cand.as_dict(),
                     "leave_one_kernel_out_median_pct": loko and summarize(loko)["all"]["median_abs_error_pct"],
                     "_loko": loko, "_eff": cand})
        print(f"fitted from {label}: mean |log(predicted / measured)| {fits[-1]['loss']:.4f}"
              + (f", leave one kernel out {fits[-1]['leave_one_kernel_out_median_pct']:.1f}%" if loko else ""))
    chosen = min(fits, key=lambda f: (f["leave_one_kernel_out_median_pct"] or 0.0, f["loss"]))
    eff, loko = chosen["_eff"], chosen["_loko"]
    in_sample = errors(fit_rows, eff)
    for r in in_sample:
        r["host_bound_measured"] = (r["kernel"], r["case"], r["dtype"]) in host
    lib_rows = errors(library, eff)
    result = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(), "measure": args.measure,
              "calibration": {"file": str(args.calibrate), "device": args.calibrate_device, "rows": len(cal_rows),
                              "kernels": len({r.key[0] for r in cal_rows}), "fitted_rows": len(fit_rows),
                              "fitted_kernels": len({r.key[0] for r in fit_rows}), "not_simulated": cal_skipped},
              "host_bound_rule": f"measured - profiled GPU time > max({HOST_EXCESS_S * 1e6:.0f} us, "
                                 f"{HOST_EXCESS_FRACTION:.0%} of measured)",
              "efficiencies": eff.as_dict(), "in_sample": {"summary": summarize(in_sample), "rows": in_sample},
              "library_tier_not_fitted": {"summary": summarize(lib_rows), "rows": lib_rows}}
    _print_block(f"in sample ({args.calibrate_device}, fitted on these rows)", result["in_sample"]["summary"])
    ran_but_no_fit = sorted({f"{r['kernel']}/{r['case']}" for r in in_sample if not r["fits"]})
    result["calibration"]["ran_but_predicted_not_to_fit"] = ran_but_no_fit
    print(f"  measured calls predicted not to fit {args.calibrate_device}: {ran_but_no_fit or 'none'}")

    result["fits"] = [{k: v for k, v in f.items() if not k.startswith("_")} for f in fits]
    result["fits_chosen"] = chosen["start"]
    if loko is not None:
        result["leave_one_kernel_out"] = {"summary": summarize(loko), "rows": loko}
        _print_block(f"leave one kernel out ({args.calibrate_device}, each kernel predicted by a fit without it)",
                     result["leave_one_kernel_out"]["summary"])
    if hold_rows:
        held = errors(hold_rows, eff)
        for r in held:
            key = (r["kernel"], r["case"], r["dtype"])
            r["host_bound_on_calibration_device"] = (key in host) if key in cal and host_bound(cal[key]) is not None else None
        device = [r for r in held if not r["host_bound_on_calibration_device"]]
        ran = sorted({f"{r['kernel']}/{r['case']}" for r in held if not r["fits"]})
        print(f"  measured calls predicted not to fit {args.holdout_device}: {ran or 'none'}")
        result["holdout"] = {"file": str(args.holdout), "device": args.holdout_device, "rows": len(hold_rows),
                             "taken_from_holdout_machine": {"what": "nothing"} if args.measure == "device" else {
                                 "empty_launch_us": hold_device.host_launch_s * 1e6,
                                 "what": "an empty Triton launch through the backend, measured on the held-out "
                                         "GPU's host (its measurement header, kept in its device model): host "
                                         "costs and the launch floor scale by it; nothing else from that machine"},
                             "kernels": len({r.key[0] for r in hold_rows}), "not_simulated": hold_skipped,
                             "ran_but_predicted_not_to_fit": ran,
                             "summary": summarize(held), "summary_device_bound": summarize(device),
                             "rows_scored": held}
        for label, rs in (("all", held), ("device_bound", device)):
            by_kernel = {}
            for r in rs:
                by_kernel.setdefault(r["kernel"], []).append(r["ratio"])
            result["holdout"][f"kernels_beyond_2x_{label}"] = sorted(
                k for k, v in by_kernel.items() if any(x > 2 or x < 0.5 for x in v))
        _print_block(f"held out ({args.holdout_device}: datasheet figures + efficiencies learned on "
                     f"{args.calibrate_device}), every measured call", result["holdout"]["summary"])
        print(f"  kernels off by more than 2x: {result['holdout']['kernels_beyond_2x_all'] or 'none'}")
        _print_block(f"held out, without the calls bound by their wrapper's host work on the "
                     f"{args.calibrate_device}", result["holdout"]["summary_device_bound"])
        print(f"  kernels off by more than 2x: {result['holdout']['kernels_beyond_2x_device_bound'] or 'none'}")
    if lib_rows:
        _print_block(f"library tier ({args.calibrate_device}, scored, not fitted)",
                     result["library_tier_not_fitted"]["summary"])
    result["fit_wall_s"] = round(time.monotonic() - t0, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    from sdk.fileio import atomic_write_text, json_text
    atomic_write_text(args.out, json_text(result, indent=1) + "\n")
    if args.write_efficiencies:
        atomic_write_text(args.write_efficiencies, json_text(
            {"efficiencies": {**eff.as_dict(), "source": f"fitted on {len(fit_rows)} calls of "
                              f"{len({r.key[0] for r in fit_rows})} kernels measured on {args.calibrate_device} "
                              f"({args.calibrate.name}; the launch floor is an empty launch measured there) "
                              f"by benchmarks/sim_validate.py"}},
            indent=1) + "\n")
        print(f"wrote {args.write_efficiencies}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
