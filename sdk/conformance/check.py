"""Run one (kernel, case, dtype) in this process and judge it against the PyTorch reference."""
from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, field

import torch

from ..memcheck import uninitialised
from .meter import PhaseMeter
from .spec import DTYPES, Case, KernelSpec, Tolerance


@dataclass
class Verdict:
    """The outcome of comparing every output of one case. `status` is "pass" or "fail"."""

    status: str
    max_abs: float = 0.0
    max_rel: float = 0.0
    rmse: float | None = None
    detail: str = ""
    wall_s: float = 0.0
    per_output: dict = field(default_factory=dict)
    phase_s: dict = field(default_factory=dict)        # seconds per phase (see run_case)
    phase_peak_mb: dict = field(default_factory=dict)  # peak resident MB per phase


def case_seed(kernel: str, case: str, dtype: str) -> int:
    """A fixed seed per (kernel, case, dtype), stable across processes and Python versions."""
    digest = hashlib.sha256(f"{kernel}/{case}/{dtype}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def poison_(t: torch.Tensor) -> None:
    """Fill a tensor with a value no correct kernel would leave behind."""
    if t.dtype.is_floating_point:
        t.fill_(float("nan"))
    elif t.dtype == torch.bool:
        t.fill_(True)
    else:
        t.fill_(torch.iinfo(t.dtype).min + 7 if t.dtype != torch.uint8 else 0xA5)


def _clone(x):
    return x.clone() if isinstance(x, torch.Tensor) else x


#: elements per piece of a streamed comparison: three 2 MB fp64 buffers, reused piece after piece (they
#: stay in cache, and no large allocation is made and faulted in), whatever the output's size
COMPARE_PIECE = 1 << 18


def _pieces(a: torch.Tensor, b: torch.Tensor, limit: int | None = None):
    """Aligned flat pieces of two tensors of one shape, each of `limit` (COMPARE_PIECE) elements at
    most, in the same element order for both; a piece is a view where the tensors allow it (a copy
    of the piece only, never of the whole tensor, where they do not)."""
    limit = limit or COMPARE_PIECE
    if a.dim() == 0:
        yield a.reshape(1), b.reshape(1)
        return
    if a.is_contiguous() and b.is_contiguous():
        fa, fb = a.view(-1), b.view(-1)
        for s in range(0, fa.numel(), limit):
            yield fa[s:s + limit], fb[s:s + limit]
        return
    if a.numel() <= limit:
        yield a.reshape(-1), b.reshape(-1)
        return
    if a.dim() == 1:
        for s in range(0, a.shape[0], limit):
            yield a[s:s + limit].reshape(-1), b[s:s + limit].reshape(-1)
        return
    row = a[0].numel()
    step = max(1, limit // max(row, 1))
    for s in range(0, a.shape[0], step):
        if row > limit:
            yield from _pieces(a[s], b[s], limit)
        else:
            yield a[s:s + step].reshape(-1), b[s:s + step].reshape(-1)


def _nanmax(acc: float, value: float) -> float:
    """max() that keeps a NaN once seen, as torch's max over a whole tensor does."""
    return math.nan if math.isnan(acc) or math.isnan(value) else max(acc, value)


def _compare_exact(out: torch.Tensor, ref: torch.Tensor) -> tuple[bool, dict]:
    same = all(torch.equal(o.cpu(), r.to(out.dtype).cpu()) for o, r in _pieces(out.detach(), ref.detach()))
    if same:
        return True, {}
    max_abs, differ = 0.0, 0
    for o, r in _pieces(out.detach(), ref.detach()):
        if not o.numel():
            continue
        o, r = o.cpu(), r.cpu()
        diff = (o.double() - r.double()).abs_()
        diff = torch.nan_to_num_(diff, nan=math.inf, posinf=math.inf)
        diff[o == r.to(o.dtype)] = 0  # equal infinities differ by NaN, not by anything
        max_abs = max(max_abs, float(diff.max()))
        differ += int((diff != 0).sum())
    return False, {"max_abs": max_abs, "reason": f"{differ} element(s) differ from a bit-exact reference"}


def either(out: torch.Tensor, ref: torch.Tensor, alt: torch.Tensor | None) -> torch.Tensor:
    """The reference to judge `out` by when the reference gives a second acceptable value per
    element (`alt`, see KernelSpec.reference): `alt` where the output is nearer to it (NaN
    matching NaN, inf matching the same inf), `ref` elsewhere."""
    if alt is None:
        return ref
    if alt.shape != ref.shape:
        raise ValueError(f"an alternative reference of shape {tuple(alt.shape)} for one of {tuple(ref.shape)}")
    o, r, a = out.detach().double().cpu(), ref.detach().double().cpu(), alt.detach().double().cpu()

    def distance(x: torch.Tensor) -> torch.Tensor:
        same = (o == x) | (o.isnan() & x.isnan())
        return torch.where(same, torch.zeros_like(o), torch.nan_to_num((o - x).abs(), nan=math.inf, posinf=math.inf))
    return torch.where(distance(a) < distance(r), alt.detach().to(ref.dtype).cpu(), ref.detach().cpu()).to(ref.device)


def compare(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> tuple[bool, dict]:
    """Judge one output. Returns (ok, stats) with max_abs, max_rel, rmse and a reason when not ok.

    Element by element in fp64, streamed over pieces of COMPARE_PIECE elements, so that no
    whole-output copy is ever made: errors are |out - ref| where the reference is finite (0 where it
    is not); max_rel divides by max(|ref|, 1e-12); an output element that is not finite where its
    reference element is finite fails at once (an unwritten, poisoned or overflowed element), whatever
    the rest of the reference holds; `tol.rmse` judges
    ||out - ref|| / ||ref|| over the finite reference elements, else every element must satisfy
    |out - ref| <= atol + rtol * |ref|; `tol.exact` asks for the reference's bits in the output's dtype."""
    if out.shape != ref.shape:
        return False, {"reason": f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}"}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # piece-sized ops gain nothing from a pool that contends for busy cores
    try:
        return _compare_exact(out, ref) if tol.exact else _compare_pieces(out, ref, tol)
    finally:
        torch.set_num_threads(threads)


def _compare_pieces(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> tuple[bool, dict]:
    max_abs = max_rel = 0.0
    bad_out = 0
    err_sq = ref_sq = 0.0
    over = 0
    size = min(COMPARE_PIECE, max(1, out.numel()))
    buffers = [torch.empty(size, dtype=torch.float64) for _ in range(3)]  # reused piece after piece
    for po, pr in _pieces(out.detach(), ref.detach()):
        k = po.numel()
        if not k:
            continue
        d, a, t = (b[:k] for b in buffers)
        d.copy_(po)
        a.copy_(pr)
        d.sub_(a).abs_()                                  # |out - ref|
        a.abs_()                                          # |ref|
        finite = None
        if not math.isfinite(float(a.max())):             # the reference has inf or NaN here
            finite = torch.isfinite(a)
            d.masked_fill_(~finite, 0.0)
        worst = float(d.max())
        if not math.isfinite(worst):                      # out is not finite where the reference is
            bad_out += k - int(torch.isfinite(d).sum())
        max_abs = _nanmax(max_abs, worst)
        max_rel = _nanmax(max_rel, float(torch.div(d, torch.clamp(a, min=1e-12, out=t), out=t).max()))
        if tol.rmse is not None:
            err_sq += float(torch.dot(d, d))
            if finite is not None:
                a.masked_fill_(~finite, 0.0)
            ref_sq += float(torch.dot(a, a))
        elif not worst <= tol.atol:                       # else every error is within atol
            over += int((d > torch.mul(a, tol.rtol, out=t).add_(tol.atol)).sum())
    if bad_out:
        return False, {"reason": f"{bad_out} non-finite element(s) (unwritten or overflowed)",
                       "max_abs": math.inf}
    stats: dict = {"max_abs": max_abs, "max_rel": max_rel}
    if tol.rmse is not None:
        stats["rmse"] = math.sqrt(err_sq) / (math.sqrt(ref_sq) or 1.0)
        ok = stats["rmse"] <= tol.rmse
        if not ok:
            stats["reason"] = f"relative RMSE {stats['rmse']:.3g} > {tol.rmse:g}"
        return ok, stats
    if over:
        stats["reason"] = (f"{over} of {out.numel()} element(s) outside atol={tol.atol:g} "
                           f"rtol={tol.rtol:g}")
        return False, stats
    return True, stats


def run_case(spec: KernelSpec, case: Case, dtype: str, device: str, **config) -> Verdict:
    """Make seeded inputs on `device`, poison outputs, launch, and compare with the reference.
    `config` goes to the launch wrapper (tile sizes and the like, where it takes them).
    The verdict says how long each phase took and its peak resident memory: inputs (make_inputs),
    snapshot (copies of the inputs the reference reads), poison (poisoning and declaring the
    outputs), launch, reference, compare."""
    meter = PhaseMeter()
    with meter("inputs"):
        gen = torch.Generator(device="cpu").manual_seed(case_seed(spec.name, case.name, dtype))
        inputs = spec.make_inputs(case, DTYPES[dtype], device, gen)
    for name in spec.outputs:
        if name not in inputs:
            raise KeyError(f"kernel '{spec.name}': make_inputs gave no tensor '{name}' named in outputs")
    with meter("snapshot"):
        before = {k: _clone(v) for k, v in inputs.items()}
    with meter("poison"):  # declaring the outputs write-only poisons them (sdk.memcheck)
        write_only = uninitialised([inputs[n] for n in spec.outputs if n not in spec.inplace])
    with meter("launch"):
        start = time.perf_counter()
        with write_only:  # a checking backend faults on a read of a poisoned output before a write
            spec.run(inputs, case, **config)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        wall = time.perf_counter() - start
    with meter("reference"):
        ref = spec.reference(before, case)
    verdict = Verdict(status="pass", wall_s=wall)
    reasons = []
    with meter("compare"):
        for name in spec.outputs:
            expected = either(inputs[name], ref[name], ref.get(f"{name}@alt"))
            ok, stats = compare(inputs[name], expected, spec.tolerance_for(name, dtype))
            verdict.per_output[name] = stats
            verdict.max_abs = max(verdict.max_abs, stats.get("max_abs", 0.0))
            verdict.max_rel = max(verdict.max_rel, stats.get("max_rel", 0.0))
            if "rmse" in stats:
                verdict.rmse = max(verdict.rmse or 0.0, stats["rmse"])
            if not ok:
                verdict.status = "fail"
                reasons.append(f"{name}: {stats.get('reason', 'mismatch')}")
    verdict.detail = "; ".join(reasons)
    verdict.phase_s, verdict.phase_peak_mb = meter.rounded(), dict(meter.peak_mb)
    return verdict


def compile_case(spec: KernelSpec, case: Case, dtype: str, device: str) -> float:
    """Compile-only mode: make the same seeded inputs and call the launch wrapper inside
    `sdk.launches.compile_only()`, so that the compile-only variant compiles every kernel it
    launches and runs nothing. Nothing is compared. Returns the wall time of the wrapper call."""
    from ..launches import compile_only
    gen = torch.Generator(device="cpu").manual_seed(case_seed(spec.name, case.name, dtype))
    inputs = spec.make_inputs(case, DTYPES[dtype], device, gen)
    start = time.perf_counter()
    with compile_only():
        spec.run(inputs, case)
    return time.perf_counter() - start
