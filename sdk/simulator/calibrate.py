"""Learn the simulator's efficiencies from times measured on a GPU, and score predictions.

A row is one measured call: its captured launches, the device model of the GPU it ran on, and the
measured seconds. `fit` picks the efficiencies (sdk.simulator.timing.Efficiencies: fractions of the
datasheet DRAM bandwidth per access pattern, of the matrix rate per operand width, of the vector and
special-function rates, plus the DRAM latency and the launch floor) that minimise the mean
|log(predicted / measured)| over the rows, by coordinate descent over a grid of values within
physical bounds (no efficiency above 1). The rows a prediction is scored on must not be among those
it was fitted on: benchmarks/sim_validate.py scores a device never used for fitting and each kernel
left out of its own fit.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from .model import predict
from .timing import Efficiencies

#: (parameter, lower bound, upper bound); dotted names address the dram/matrix tables
PARAMETERS = (
    ("dram.contiguous", 0.3, 1.0), ("dram.strided", 0.05, 1.0), ("dram.indirect", 0.05, 1.0),
    ("matrix.16", 0.1, 1.0), ("matrix.8", 0.1, 1.0), ("matrix.32", 0.05, 1.0),
    ("matrix.sync_on_async", 0.1, 1.0), ("vector", 0.02, 1.0), ("special", 0.02, 1.0),
    ("vector_between_dots", 0.05, 1.0),
    ("dram_latency_s", 3e-7, 8e-7), ("launch_floor_s", 5e-7, 2e-5), ("warp_ipc", 0.02, 1.0),
    ("program_overhead_s", 1e-8, 5e-6), ("program_start_s", 1e-9, 5e-7),
    ("dot_latency_s", 1e-8, 3e-6), ("dot_shared_latency_s", 1e-8, 3e-6),
    ("reduce_latency_s", 1e-9, 2e-6), ("host_launch_s", 1e-6, 5e-5), ("host_query_s", 1e-6, 5e-3),
    # a PyTorch kernel's device time besides its bytes: the H100 profiles show 0.7 to 1.3 us for
    # the small ones (pageable copies, elementwise casts)
    ("host_target_s", 1e-6, 1e-3), ("torch_kernel_s", 5e-7, 2e-6), ("host_torch_op_s", 5e-7, 5e-5),
    ("host_copy_s", 1e-6, 2e-4),
)


@dataclass
class Row:
    key: tuple                 # (kernel, case, dtype)
    group: str
    launches: list             # LaunchCounts
    device: object             # DeviceModel
    measured_s: float
    #: what was measured: "call" (the time around the call, host work included) or "device" (the
    #: GPU time of the kernels it launched, from a profile), and so what is predicted against it
    measure: str = "call"


def scored(p, measure: str) -> tuple[float, str]:
    """(seconds, bound) of the part of a prediction `p` that a row measuring `measure` is scored on."""
    return (p.device_s, p.device_bound) if measure == "device" else (p.time_s, p.bound)


def predicted(row: Row, eff: Efficiencies) -> tuple[float, str]:
    """(seconds, bound) of the row's prediction of what it measured."""
    return scored(predict(row.launches, row.device, eff), row.measure)


def get(eff: Efficiencies, name: str) -> float:
    if "." in name:
        table, key = name.split(".", 1)
        return float(getattr(eff, table).get(key, 0.7))
    return float(getattr(eff, name))


def put(eff: Efficiencies, name: str, value: float) -> Efficiencies:
    if "." in name:
        table, key = name.split(".", 1)
        return replace(eff, **{table: {**getattr(eff, table), key: value}})
    return replace(eff, **{name: value})


def log_error(pred: float, meas: float) -> float:
    return abs(math.log(max(pred, 1e-12) / meas))


def loss(rows: list[Row], eff: Efficiencies) -> float:
    return statistics.fmean(log_error(predicted(r, eff)[0], r.measured_s) for r in rows)


def _relevant(rows: list[Row], name: str, eff: Efficiencies) -> bool:
    """Whether any row's prediction moves with the parameter (else it keeps its default)."""
    probe = put(eff, name, get(eff, name) * 0.5)
    return any(abs(predicted(r, probe)[0] - predicted(r, eff)[0]) > 1e-12 for r in rows)


def fit(rows: list[Row], start: Efficiencies | None = None, spans: tuple = (4.0, 2.0, 1.4, 1.15, 1.05, 1.02),
        steps: int = 9, passes: int = 3, fixed: tuple = ()) -> Efficiencies:
    """Efficiencies minimising the mean |log(predicted / measured)| over `rows`: coordinate descent,
    each parameter tried at `steps` values within a factor `span` of its current one, repeated
    while it improves (at most `passes` times per span), the span narrowing. `fixed`: parameters
    kept at their value in `start` (measured directly rather than fitted)."""
    eff = start or Efficiencies()
    if not rows:
        return eff
    params = [(n, lo, hi) for n, lo, hi in PARAMETERS if n not in fixed and _relevant(rows, n, eff)]
    best = loss(rows, eff)
    for span in spans:
        for _ in range(passes):
            before = best
            for name, lo, hi in params:
                cur = get(eff, name)
                for k in range(steps):
                    value = min(hi, max(lo, cur * span ** (2 * k / (steps - 1) - 1)))
                    if value == cur:
                        continue
                    cand = put(eff, name, value)
                    val = loss(rows, cand)
                    if val < best - 1e-12:
                        best, eff = val, cand
            if best > before - 1e-6:
                break
    return eff


def errors(rows: list[Row], eff: Efficiencies) -> list[dict]:
    """Per row: measured, predicted, ratio, |error| in percent and the bound class."""
    out = []
    for r in rows:
        p = predict(r.launches, r.device, eff)
        t, bound = scored(p, r.measure)
        ratio = t / r.measured_s
        out.append({"kernel": r.key[0], "case": r.key[1], "dtype": r.key[2], "group": r.group,
                    "device": r.device.name, "measured_us": r.measured_s * 1e6, "predicted_us": t * 1e6,
                    "ratio": ratio, "abs_error_pct": 100 * abs(ratio - 1), "bound": bound,
                    "fits": p.fits, "notes": p.notes, "occupancy": p.occupancy})
    return out


def summarize(scored: list[dict]) -> dict:
    """Median and worst |error| overall and per bound class; the worst ratio either way."""
    def block(rs: list[dict]) -> dict:
        errs = [r["abs_error_pct"] for r in rs]
        worst = max(rs, key=lambda r: abs(math.log(r["ratio"])))
        return {"n": len(rs), "median_abs_error_pct": statistics.median(errs),
                "mean_abs_error_pct": statistics.fmean(errs),
                "worst": {"kernel": worst["kernel"], "case": worst["case"], "ratio": worst["ratio"]},
                "within_2x": sum(1 for r in rs if 0.5 <= r["ratio"] <= 2.0)}
    if not scored:
        return {"n": 0}
    out = {"all": block(scored), "by_class": {}}
    for cls in sorted({r["bound"] for r in scored}):
        out["by_class"][cls] = block([r for r in scored if r["bound"] == cls])
    return out
