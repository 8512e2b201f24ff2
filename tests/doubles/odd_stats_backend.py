"""Backend doubles whose `take_launch_stats()` hook returns what a results file cannot hold as it is:
cpu_interp otherwise. Register with
DAY0_BACKENDS="string_stats=doubles.odd_stats_backend:StringStats,odd_stats=doubles.odd_stats_backend:OddStats"."""
from __future__ import annotations

from backends.cpu_interp import CpuInterpBackend
from sdk.backend import Target


class StringStats(CpuInterpBackend):
    """Launch stats as a string instead of a list of dicts."""

    name = "string_stats"
    target = Target.from_device_model("string_stats", "host_cpu")

    def take_launch_stats(self):
        return "registers=8"


class OddStats(CpuInterpBackend):
    """Launch stats holding values JSON cannot hold: a numpy integer, a set, NaN, an object; and an
    entry that is not a dict."""

    name = "odd_stats"
    target = Target.from_device_model("odd_stats", "host_cpu")

    def take_launch_stats(self):
        import numpy as np
        return [{"registers": np.int64(8), "tags": {"a"}, "ratio": float("nan"), "obj": object()}, 42]
