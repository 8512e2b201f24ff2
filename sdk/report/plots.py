"""The models x devices heat map (matplotlib, Agg backend: no display needed).

Each cell is the share of the model's items (its kernels' cases x dtypes) that passed (or compiled)
on that device column, coloured red (0) to green (1), grey when not tested, and labelled with the
verdict.
"""
from __future__ import annotations

import io
import math
import os

from .model import GAPS, NO, RUNS, UNTESTED, Report

SHORT = {RUNS: "runs", GAPS: "gaps", NO: "does not run", UNTESTED: "not tested"}


def matrix(report: Report) -> list[list[float]]:
    """Row per model, column per device column: passed/run items of the model's kernels (nan: none)."""
    rows = []
    for m in report.models:
        row = []
        for c in report.columns:
            passed = sum(k.cells[c.key][0] for k in m.kernel_rows)
            total = sum(k.cells[c.key][1] for k in m.kernel_rows)
            row.append(passed / total if total else math.nan)
        rows.append(row)
    return rows


def heatmap_png(report: Report, dpi: int = 110) -> bytes:
    import matplotlib
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    import numpy as np

    data = np.array(matrix(report), dtype=float).reshape(len(report.models), len(report.columns))
    models = [m.name for m in report.models]
    labels = [c.label.replace(" (", "\n(") for c in report.columns]
    width = max(5.0, 1.2 + 2.1 * len(labels))
    height = max(2.6, 1.3 + 0.5 * len(models))
    fig, ax = plt.subplots(figsize=(width, height), dpi=dpi)
    try:
        cmap = matplotlib.colormaps["RdYlGn"].with_extremes(bad="#cccccc")
        im = ax.imshow(np.ma.masked_invalid(data), cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
        ax.set_xticks(range(len(labels)), labels, fontsize=8)
        ax.set_yticks(range(len(models)), models, fontsize=9)
        ax.xaxis.tick_top()
        for i, m in enumerate(report.models):
            for j, c in enumerate(report.columns):
                v = m.verdicts[c.key].verdict
                value = data[i, j]
                text = SHORT[v] if math.isnan(value) else f"{SHORT[v]}\n{value:.0%}"
                ax.text(j, i, text, ha="center", va="center", fontsize=7,
                        color="black" if math.isnan(value) or 0.25 < value < 0.85 else "white")
        fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02, label="items passed / compiled")
        ax.set_title("Day-0 coverage: models x devices", fontsize=10, pad=8)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
    finally:
        plt.close(fig)
    return buf.getvalue()


def write_heatmap(report: Report, path: str | os.PathLike[str]) -> None:
    data = heatmap_png(report)
    with open(path, "wb") as fh:
        fh.write(data)
