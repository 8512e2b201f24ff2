"""Where one conformance item spends its time and memory: seconds and peak resident memory per phase.

    meter = PhaseMeter()
    with meter("inputs"):
        inputs = spec.make_inputs(...)
    with meter("launch"):
        spec.run(inputs, case)
    meter.seconds  -> {"inputs": 0.41, "launch": 2.3}
    meter.peak_mb  -> {"inputs": 812.0, "launch": 1240.5}

Memory is the process's resident set as Linux reports it (/proc/self/status), so it sees torch's and
numpy's allocations, which tracemalloc does not. The peak of a phase is the high-water mark (VmHWM)
after resetting it at the phase's start (writing 5 to /proc/self/clear_refs); where the reset is not
permitted the figure is the process's peak so far, an upper bound. Where /proc cannot be read (not
Linux) the peaks are left out and only seconds are kept.
"""
from __future__ import annotations

import re
import time
from contextlib import contextmanager
from typing import Iterator

_STATUS = "/proc/self/status"


def _status_kb(field: str) -> float | None:
    try:
        with open(_STATUS) as fh:
            m = re.search(rf"^{field}:\s+(\d+)\s+kB", fh.read(), re.MULTILINE)
    except OSError:
        return None
    return float(m.group(1)) if m else None


def rss_mb() -> float | None:
    """Resident memory now, in MB (None where it cannot be read)."""
    kb = _status_kb("VmRSS")
    return None if kb is None else kb / 1024.0


def peak_rss_mb() -> float | None:
    """The resident high-water mark since the last `reset_peak()` (or the process's start), in MB."""
    kb = _status_kb("VmHWM")
    return None if kb is None else kb / 1024.0


def reset_peak() -> bool:
    """Start a new high-water mark at the current resident size; False where Linux does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


class PhaseMeter:
    """Seconds and peak resident MB of named phases; a phase entered twice adds up its seconds and
    keeps the larger peak."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.peak_mb: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        reset_peak()
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
            peak = peak_rss_mb()
            if peak is not None:
                self.peak_mb[name] = max(self.peak_mb.get(name, 0.0), round(peak, 1))

    def rounded(self, digits: int = 4) -> dict[str, float]:
        """Seconds per phase, rounded for a results file."""
        return {k: round(v, digits) for k, v in self.seconds.items()}

    @property
    def peak(self) -> float | None:
        """The largest peak over all phases (None when none was measured)."""
        return max(self.peak_mb.values()) if self.peak_mb else None
