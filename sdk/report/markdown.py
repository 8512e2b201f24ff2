"""The coverage report as Markdown (what `day0 report` prints by default).

Order: the headline of every device (what runs, items passed, rules, the next step), the legend of
the verdict words, models x devices, the devices, each model in detail, each device's failures,
and the unlock list."""
from __future__ import annotations

from ..conformance.results import COMPILE_STATUSES, RUN_STATUSES
from ..verdict import LEGEND, display, reason
from .model import NOT_RUN_GROUP, Report, Verdict, group_label, status_totals

MAX_FAILURES = 40
MAX_UNLOCK = 20
MAX_STEPS = 5


def esc(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(esc(h) for h in header) + " |",
           "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return out


def verdict_text(v: Verdict) -> str:
    """The verdict's word, as every format prints it (sdk.verdict.display)."""
    return display(v)


why = reason  # the one-line reason behind a verdict (sdk.verdict.reason)


def fmt_time(t: float | None) -> str:
    if t is None:
        return "?"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if t >= scale:
            return f"{t / scale:.3g} {unit}"
    return f"{t * 1e9:.3g} ns"


def headline_lines(report: Report) -> list[str]:
    out: list[str] = []
    n = len(report.models)
    for h in report.headlines:
        out += [f"### {h.label}", ""]
        tier = "; ".join(f"{w}: {', '.join(ms)}" for w, ms in h.kernel_tier.items())
        out.append(f"- **kernel tier**: {len(h.running)}/{n} models run" + (f" -- {tier}" if tier else ""))
        ends = sum(len(ms) for ms in h.end_to_end.values())
        e2e = "; ".join(f"{w}: {', '.join(ms)}" for w, ms in h.end_to_end.items())
        out.append(f"- **end to end**: {len(h.end_runs)}/{ends} models run -- {e2e}"
                   if ends else "- **end to end**: no model was run end to end here")
        if h.not_fully_run and h.path:  # (else the next step says so)
            out.append(f"- **not fully run here**: {', '.join(h.not_fully_run)} (some of their kernels "
                       "were not run)")
        statuses = ", ".join(f"{c} {s}" for s, c in h.statuses.items())
        out.append(f"- **items passed**: {h.items_passed}/{h.items}" + (f" ({statuses})" if statuses else ""))
        out.append(f"- **rules**: {h.rules}")
        out.append(f"- **{h.next_text()}**")
        for i, step in enumerate(h.path[1:MAX_STEPS], 2):
            out.append(f"  {i}. then {step.text()}")
        if len(h.path) > MAX_STEPS:
            out.append(f"  ... and {len(h.path) - MAX_STEPS} more steps")
        out.append("")
    return out


def render(report: Report) -> str:
    cols = report.columns
    out = ["# Day-0 coverage report", ""]
    out.append(f"Suite version `{report.suite_version}`; {len(cols)} device(s); {len(report.models)} model(s).")
    out.append("")
    for w in report.warnings:
        out += [f"> warning: {w}", ""]
    out += ["## Headline", ""] + headline_lines(report)
    out += ["## Legend", ""]
    out += table(["verdict", "meaning"], [[e.word, e.meaning] for e in LEGEND])
    out += ["", "A group cell reads `kernels passed/needed (items passed/run)`; on a compile-only device "
            "\"passed\" means \"compiled\".", ""]
    out += ["## Models x devices", ""]
    out.append("Each device has two verdicts: the kernel tier (the suite's kernels the model needs) "
               "and end to end (the whole model, built from its config, run through the backend).")
    out.append("")
    out += table(["model"] + [f"{c.label}: {h}" for c in cols for h in ("kernels", "end to end")],
                 [[m.name] + [x for c in cols for x in (verdict_text(m.verdicts[c.key]),
                                                          m.end_to_end[c.key].word)]
                  for m in report.models])
    totals = status_totals(report)
    delegation = {d.column.key: d.delegation or "native" for d in report.devices}
    out += ["", "## Devices", ""]
    out += table(["device", "backend", "arch", "mode", "items", "statuses", "rules"],
                 [[c.label, c.backend, c.arch or "?", "compile-only" if c.compile_only else "run",
                   str(sum(totals[c.key].values())),
                   ", ".join(f"{n} {s}" for s, n in sorted(totals[c.key].items())), delegation[c.key]]
                  for c in cols])
    out += ["", "## Models"]
    for m in report.models:
        out += ["", f"### {m.name}", ""]
        for c in cols:
            v = m.verdicts[c.key]
            text = why(v)
            out.append(f"- **{c.label}**: {verdict_text(v)}" + (f" ({text})" if text else "")
                       + f"; {m.end_to_end[c.key].text()}")
        out.append("")
        header = ["kernel group"] + [f"{c.label}: {c.verb}" for c in cols]
        if len(cols) > 1:
            header.append("same on every device")
        rows = []
        for g in m.groups:
            label = g.label + (f": {', '.join(g.kernels)}" if g.group == NOT_RUN_GROUP else "")
            row = [label] + [g.cells[c.key].text() for c in cols]
            if len(cols) > 1:
                row.append("-" if g.same is None else "same" if g.same else
                           "different (" + ", ".join(g.differs) + ")")
            rows.append(row)
        out += table(header, rows)
        if report.sims:
            out.append("")
            sim_devs = [s.device for s in report.sims]
            header = ["kernel", "group"] + [c.label for c in cols]
            for d in sim_devs:
                header += [f"{d}: predicted time", f"{d}: fits"]
            rows = []
            for k in m.kernel_rows:
                row = [k.kernel, group_label(k.group)] + [
                    f"{k.cells[c.key][0]}/{k.cells[c.key][1]}" for c in cols]
                for d in sim_devs:
                    s = k.sim.get(d)
                    row += ["-", "-"] if s is None else [
                        fmt_time(s.time_s),
                        "?" if s.fits is None else "yes" if s.fits else f"no ({s.why})" if s.why else "no"]
                rows.append(row)
            out += table(header, rows)
        if m.missing:
            out += ["", "Not covered by the suite: " + ", ".join(m.missing)]
    out += ["", "## Device details"]
    for d in report.devices:
        c = d.column
        out += ["", f"### {c.label}", "", "Files: " + ", ".join(f"`{f}`" for f in d.files), ""]
        statuses = [s for s in (COMPILE_STATUSES if c.compile_only else RUN_STATUSES)]
        extra = sorted({s for g in d.counts.values() for s in g} - set(statuses))
        statuses += extra
        rows = [[group_label(g)] + [str(cnt.get(s, 0)) for s in statuses] for g, cnt in d.counts.items()]
        out += table(["group"] + statuses, rows)
        if d.failures:
            out += ["", f"Items that did not {'compile' if c.compile_only else 'pass'} "
                    f"({len(d.failures)}):", ""]
            for f in d.failures[:MAX_FAILURES]:
                arch = f"@{f.arch}" if f.arch and f.arch != c.arch else ""
                out.append(f"- `{f.kernel}` {f.case}/{f.dtype}{arch}: **{f.status}**"
                           + (f": {esc(f.detail)}" if f.detail else ""))
            if len(d.failures) > MAX_FAILURES:
                out.append(f"- ... and {len(d.failures) - MAX_FAILURES} more")
            if d.provenance:
                out += ["", "What the failing kernels mirror:", ""]
                out += [f"- `{k}`: {esc(up)}" for k, up in d.provenance.items()]
        if d.skipped:
            out += ["", "Skipped (a library the library tier calls is not installed here):", ""]
            out += [f"- {lib}: {esc(detail)}" for lib, detail in sorted(d.skipped.items())]
    out += ["", "## What to implement next", "",
            "Per device, ranked by how many models a single fix would complete "
            "(an op unlocks a model when it is the only thing that model's failing items miss)."]
    for c in cols:
        entries = report.unlock.get(c.key, [])
        out += ["", f"### {c.label}", ""]
        if not entries:
            out.append("Nothing to fix: no item failed here.")
            continue
        for i, e in enumerate(entries[:MAX_UNLOCK], 1):
            what = f"missing op `{e.name}`" if e.kind == "op" else f"fix kernel `{e.name}`"
            line = f"{i}. {what}: " + e.line()[len(e.name) + 2:]
            if e.affects:
                line += f"; needed by {', '.join(e.affects)}"
            if e.kind == "op":
                line += f" (kernels: {', '.join(e.kernels)})"
            elif e.detail:
                line += f" -- {esc(e.detail[:200])}"
            out.append(line)
        if len(entries) > MAX_UNLOCK:
            out.append(f"... and {len(entries) - MAX_UNLOCK} more")
    return "\n".join(out) + "\n"
