"""The coverage report as data: per model, per device column, and the unlock list.

Verdicts (kernel tier and end to end) are `sdk.verdict`'s, in its words (`sdk.verdict.LEGEND`,
which every format prints): runs / passes, suite incomplete / runs with gaps / does not run / not
tested, "(delegated)" after one reached on borrowed rules. On a compile-only column "passed" means
"compiled": the verdict says whether the model would run as far as compiling can tell, and the
column is labelled "compile-only". Each column also gets a headline (sdk.report.nextsteps): the
models that run, the items passed, and the cheapest path to the next models.

A group row is "same" across the columns that ran it when, for every kernel of that group the model
needs, exactly the same items (case, dtype) pass on each of them; otherwise "different", naming the
kernels ("-" when fewer than two columns ran it).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from ..conformance.results import PASSING, SKIPPED, STATUSES, Record
from .inputs import Column, ColumnData, Inputs, ModelNeeds, SimKernel, SimResult

from ..verdict import (GAPS, LEGEND, NO, RUNS, SUITE_GAPS, UNTESTED, VERDICTS, Verdict,  # noqa: F401
                       _library, display, judge, judge_end_to_end)  # (re-exported)

#: display names and order of the suite's groups (others follow alphabetically)
GROUP_LABELS = {"rope": "RoPE/mRoPE", "mamba_conv": "Mamba conv", "fla_gdn": "FLA GDN", "moe": "MoE",
                "sampling": "sampling", "norms": "norms", "attention": "attention",
                "activation": "activation", "gemm": "GEMM"}
NOT_RUN_GROUP = "(in no results file)"  # kernels a model needs that no column ran


def group_label(group: str) -> str:
    return GROUP_LABELS.get(group, group)


def group_order(group: str) -> tuple[int, str]:
    order = list(GROUP_LABELS)
    return (order.index(group), group) if group in order else (len(order), group)


@dataclass
class Cell:
    """One group of one model on one column."""

    kernels_passed: int  # kernels of the group whose every item passed
    kernels: int         # kernels of the group the model needs
    items_passed: int
    items: int
    skipped: list[str] = field(default_factory=list)  # libraries whose items were skipped here

    def text(self) -> str:
        if not self.items:
            return f"skipped (not installed: {', '.join(self.skipped)})" if self.skipped else "not run"
        return f"{self.kernels_passed}/{self.kernels} ({self.items_passed}/{self.items})"


@dataclass
class GroupRow:
    group: str
    label: str
    kernels: list[str]
    cells: dict[str, Cell]
    same: bool | None            # None with fewer than two columns
    differs: list[str] = field(default_factory=list)


@dataclass
class KernelRow:
    kernel: str
    group: str
    cells: dict[str, list[int]]          # column key -> [passed, total]
    sim: dict[str, SimKernel] = field(default_factory=dict)  # sim device -> prediction


@dataclass
class EndToEnd:
    """A model's model-tier outcome on one column: every (mode, dtype) it ran, judged by
    `sdk.verdict.judge_end_to_end` (the same words as the kernel tier)."""

    verdict: str
    items: dict[str, str] = field(default_factory=dict)   # "prefill/fp32" -> status
    detail: str = ""                                      # the first item that did not pass
    delegated: list[str] = field(default_factory=list)    # items run on borrowed rules

    @property
    def word(self) -> str:
        return display(Verdict(self.verdict, delegated=self.delegated))

    def text(self) -> str:
        return f"end to end: {self.word}" + (f" ({self.detail})" if self.detail else "")


def end_to_end(recs: list[Record]) -> EndToEnd:
    v = judge_end_to_end(recs)
    items = {f"{r.case}/{r.dtype}": r.status for r in sorted(recs, key=lambda r: (r.dtype, r.case))}
    bad = [r for r in recs if r.status not in PASSING]
    detail = f"{bad[0].case}/{bad[0].dtype} {bad[0].status}: {bad[0].detail[:200]}" if bad else ""
    return EndToEnd(v.verdict, items, detail, v.delegated)


@dataclass
class ModelReport:
    name: str
    kernels: list[str]
    verdicts: dict[str, Verdict]
    groups: list[GroupRow]
    kernel_rows: list[KernelRow]
    missing: list[str]
    end_to_end: dict[str, EndToEnd] = field(default_factory=dict)  # column key -> model tier


@dataclass
class Failure:
    kernel: str
    case: str
    dtype: str
    arch: str
    status: str
    detail: str


@dataclass
class DeviceReport:
    column: Column
    files: list[str]
    counts: dict[str, dict[str, int]]   # group -> status -> n
    failures: list[Failure]
    skipped: dict[str, str] = field(default_factory=dict)  # library -> what to install (its items)
    delegation: str = ""   # "" when every item ran on the backend's own rules; else what borrowed
    provenance: dict[str, str] = field(default_factory=dict)  # failing kernel -> what it mirrors


def delegation_text(records: list[Record]) -> str:
    """Items that ran partly on rules borrowed from another backend (delegation), said plainly."""
    borrowed = [r for r in records if r.native is not None]
    if not borrowed:
        return ""
    return (f"{len(borrowed)}/{len(records)} items partly on borrowed rules (least native share "
            f"{min(r.native for r in borrowed):.0%})")


@dataclass
class Report:
    suite_version: str
    columns: list[Column]
    models: list[ModelReport]
    devices: list[DeviceReport]
    unlock: dict[str, list[Any]]       # column key -> [UnlockEntry]
    sims: list[SimResult]
    warnings: list[str]
    headlines: list[Any] = field(default_factory=list)  # per column: sdk.report.nextsteps.Headline

    def column(self, key: str) -> Column:
        return next(c for c in self.columns if c.key == key)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["columns"] = [{**asdict(c), "key": c.key, "label": c.label, "verb": c.verb}
                           for c in self.columns]
        for d, dev in zip(data["devices"], self.devices):
            d["column"] = dev.column.key
        data["sims"] = [{"device": s.device, "path": s.path} for s in self.sims]
        for m, model in zip(data["models"], self.models):
            m["words"] = {k: display(v) for k, v in model.verdicts.items()}
            m["end_to_end_words"] = {k: e.word for k, e in model.end_to_end.items()}
        for h, head in zip(data["headlines"], self.headlines):
            h["next"] = head.next_text()
        data["legend"] = [asdict(e) for e in LEGEND]
        data["format"] = "day0-report/1"
        return data


def _by_kernel(records: list[Record]) -> dict[str, list[Record]]:
    out: dict[str, list[Record]] = {}
    for r in records:
        out.setdefault(r.kernel, []).append(r)
    return out


def verdict_for(needs: ModelNeeds, by_kernel: dict[str, list[Record]]) -> Verdict:
    """The model's verdict on one column (sdk.verdict.judge, as every command says it)."""
    return judge(needs.kernels, needs.missing, by_kernel)


def _passing_items(recs: list[Record]) -> frozenset[tuple[str, str]]:
    return frozenset((r.case, r.dtype) for r in recs if r.status in PASSING)


def model_report(needs: ModelNeeds, columns: list[ColumnData], groups: dict[str, str],
                 sims: list[SimResult]) -> ModelReport:
    per_col = {c.column.key: _by_kernel(c.records) for c in columns}
    verdicts = {key: verdict_for(needs, bk) for key, bk in per_col.items()}
    by_group: dict[str, list[str]] = {}
    for k in needs.kernels:
        by_group.setdefault(groups.get(k, NOT_RUN_GROUP), []).append(k)
    rows: list[GroupRow] = []
    for group in sorted(by_group, key=group_order):
        ks = by_group[group]
        cells: dict[str, Cell] = {}
        for key, bk in per_col.items():
            cell = Cell(0, len(ks), 0, 0)
            for k in ks:
                every = bk.get(k, [])
                recs = [r for r in every if r.status != SKIPPED]
                if every and not recs and _library(every) not in cell.skipped:
                    cell.skipped.append(_library(every))
                passed = sum(r.status in PASSING for r in recs)
                cell.items += len(recs)
                cell.items_passed += passed
                cell.kernels_passed += bool(recs) and passed == len(recs)
            cells[key] = cell
        ran = [bk for key, bk in per_col.items() if cells[key].items]  # columns that ran the group
        differs = [k for k in ks if len({_passing_items(bk.get(k, [])) for bk in ran}) > 1]
        same = None if len(ran) < 2 else not differs
        rows.append(GroupRow(group, group_label(group), ks, cells, same, differs))
    kernel_rows = []
    for k in needs.kernels:
        cells = {}
        for key, bk in per_col.items():
            recs = [r for r in bk.get(k, []) if r.status != SKIPPED]
            cells[key] = [sum(r.status in PASSING for r in recs), len(recs)]
        sim = {s.device: s.kernels[k] for s in sims if k in s.kernels}
        kernel_rows.append(KernelRow(k, groups.get(k, NOT_RUN_GROUP), cells, sim))
    return ModelReport(needs.name, list(needs.kernels), verdicts, rows, kernel_rows, list(needs.missing))


def device_report(data: ColumnData, detail_chars: int = 300) -> DeviceReport:
    counts: dict[str, dict[str, int]] = {}
    failures = []
    skipped: dict[str, str] = {}
    for r in data.records:
        g = counts.setdefault(r.group or "?", {})
        g[r.status] = g.get(r.status, 0) + 1
        if r.status == SKIPPED:
            skipped.setdefault(_library([r]), r.detail)
        elif r.status not in PASSING:
            detail = r.detail if len(r.detail) <= detail_chars else r.detail[:detail_chars - 3] + "..."
            failures.append(Failure(r.kernel, r.case, r.dtype, r.arch, r.status, detail))
    order = {s: i for i, s in enumerate(STATUSES)}
    failures.sort(key=lambda f: (f.kernel, order.get(f.status, 99), f.case, f.dtype))
    counts = {g: dict(sorted(c.items(), key=lambda kv: order.get(kv[0], 99)))
              for g, c in sorted(counts.items(), key=lambda kv: group_order(kv[0]))}
    return DeviceReport(data.column, list(data.files), counts, failures, skipped, delegation_text(data.records))


def build_report(inputs: Inputs, needs: dict[str, ModelNeeds], sims: list[SimResult] = ()) -> Report:
    from dataclasses import replace
    from .unlock import model_tier_unlocks, unlock_list
    kernel_cols = [replace(c, records=[r for r in c.records if r.tier != "model"]) for c in inputs.columns]
    whole = {c.column.key: [r for r in c.records if r.tier == "model"] for c in inputs.columns}
    needs = dict(needs)
    for recs in whole.values():  # a model run end to end that no manifest knows still gets a row
        for r in recs:
            needs.setdefault(r.kernel, ModelNeeds(r.kernel, ()))
    groups: dict[str, str] = {}
    for c in kernel_cols:
        for r in c.records:
            if r.group:
                groups.setdefault(r.kernel, r.group)
    sims = list(sims)
    models = [model_report(needs[m], kernel_cols, groups, sims) for m in sorted(needs)]
    for m in models:
        m.end_to_end = {key: end_to_end([r for r in recs if r.kernel == m.name]) for key, recs in whole.items()}
    devices = [device_report(c) for c in inputs.columns]
    from .inputs import kernel_provenance
    mirrors = kernel_provenance(f.kernel for d in devices for f in d.failures)
    for d in devices:
        d.provenance = {k: mirrors[k] for k in dict.fromkeys(f.kernel for f in d.failures) if k in mirrors}
    unlock = {c.column.key: model_tier_unlocks(unlock_list(k.records, needs), whole[c.column.key])
              for c, k in zip(inputs.columns, kernel_cols)}
    from .nextsteps import headline
    heads = []
    for c, k, d in zip(inputs.columns, kernel_cols, devices):
        key = c.column.key
        heads.append(headline(key, c.column.label, k.records, whole[key], needs,
                              {m.name: m.verdicts[key] for m in models},
                              {m.name: judge_end_to_end([r for r in whole[key] if r.kernel == m.name])
                               for m in models}, d.delegation or "native", _run_command(c.column)))
    return Report(inputs.suite_version, [c.column for c in inputs.columns], models, devices, unlock,
                  sims, list(inputs.warnings), heads)


def _run_command(c: Column) -> str:
    """The command that runs the suite on a column's backend (and arch)."""
    cmd = f"day0 conformance --backend {c.backend}"
    if c.compile_only:
        return cmd + " --compile-only" + (f" --arch {c.arch}" if c.arch else "")
    return cmd + (f"@{c.arch}" if c.arch and c.arch not in ("host", "any", c.backend) else "")


def status_totals(report: Report) -> dict[str, Counter]:
    """Column key -> status -> items (all groups)."""
    out: dict[str, Counter] = {}
    for d in report.devices:
        c: Counter = Counter()
        for statuses in d.counts.values():
            c.update(statuses)
        out[d.column.key] = c
    return out
