"""The per-model Day-0 table printed at the end of `day0 conformance`.

For each model: one row per kernel group it needs, with passed/total items of that group's kernels,
and a verdict:
  runs            every item of every kernel the model needs passed;
  runs with gaps  every needed kernel that ran passed at least one of its items, and some item
                  failed or some needed kernel was not in this run;
  does not run    some needed kernel passed none of its items;
  not tested      none of its kernels were in this run.
A selective run cannot say "runs": the kernels it left out are listed as untested.
"""
from __future__ import annotations

from typing import Iterable

from .results import Record

RUNS, GAPS, NO, UNTESTED = "runs", "runs with gaps", "does not run", "not tested"


def model_verdicts(records: Iterable[Record], model_kernels: dict[str, list[str]]) -> dict[str, dict]:
    """model -> {"verdict", "groups": {group: [passed, total]}, "blocking": [kernels with no pass]}."""
    by_kernel: dict[str, list[Record]] = {}
    for r in records:
        by_kernel.setdefault(r.kernel, []).append(r)
    out: dict[str, dict] = {}
    for model in sorted(model_kernels):
        groups: dict[str, list[int]] = {}
        blocking, gaps = [], False
        tested = [k for k in model_kernels[model] if k in by_kernel]
        for k in tested:
            recs = by_kernel[k]
            passed = sum(r.passed for r in recs)
            g = groups.setdefault(recs[0].group or "?", [0, 0])
            g[0] += passed
            g[1] += len(recs)
            if passed == 0:
                blocking.append(k)
            elif passed < len(recs):
                gaps = True
        untested = [k for k in model_kernels[model] if k not in by_kernel]
        verdict = UNTESTED if not tested else NO if blocking else GAPS if gaps or untested else RUNS
        out[model] = {"verdict": verdict, "groups": groups, "blocking": blocking, "untested": untested}
    return out


def render(records: list[Record], model_kernels: dict[str, list[str]], title: str = "") -> str:
    verdicts = model_verdicts(records, model_kernels)
    lines = [title] if title else []
    shown = {m: v for m, v in verdicts.items() if v["verdict"] != UNTESTED}
    width = max([len(g) for v in shown.values() for g in v["groups"]] + [12])
    for model, v in shown.items():
        lines.append(f"{model}: {v['verdict']}")
        for group, (passed, total) in sorted(v["groups"].items()):
            mark = "ok" if passed == total else "--" if passed == 0 else "~"
            lines.append(f"  {group:<{width}} {passed:>4}/{total:<4} {mark}")
        if v["blocking"]:
            lines.append(f"  blocked by: {', '.join(v['blocking'])}")
        if v["untested"]:
            lines.append(f"  not in this run: {len(v['untested'])} of its kernels")
    if not shown:
        lines.append("(no model's kernels were in this run)")
    counts: dict[str, int] = {}
    for r in records:
        counts[r.status] = counts.get(r.status, 0) + 1
    passed = sum(r.passed for r in records)
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    lines.append(f"total: {passed}/{len(records)} items passed ({summary or 'none'}); models: "
                 + ", ".join(f"{sum(v['verdict'] == k for v in shown.values())} {k}"
                             for k in (RUNS, GAPS, NO)))
    return "\n".join(lines)
