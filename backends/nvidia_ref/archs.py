"""The NVIDIA generations nvidia_ref compiles for: compute capability, device model, and the limits
Triton checks at launch (opt-in shared memory per block), so a compile-only run refuses what the
real device would refuse."""
from __future__ import annotations

import re
from dataclasses import dataclass

from sdk.errors import Day0Error


@dataclass(frozen=True)
class Arch:
    name: str                 # "sm_89"
    capability: int           # 89
    device_model: str | None  # a shipped device model of that generation, if any
    max_shared_mem: int       # bytes of shared memory one block may opt into
    multiprocessor_count: int  # of a representative part (for libraries that size grids by it)
    example: str              # a representative part


ARCHS: dict[str, Arch] = {a.name: a for a in (
    Arch("sm_80", 80, None, 166912, 108, "A100"),
    Arch("sm_86", 86, None, 101376, 84, "RTX 3090 / A10"),
    Arch("sm_89", 89, "nvidia_l4", 101376, 58, "L4"),
    Arch("sm_90", 90, "nvidia_h100", 232448, 132, "H100 SXM"),
    Arch("sm_100", 100, None, 232448, 148, "B200"),
    Arch("sm_120", 120, None, 101376, 170, "RTX 5090"),
    Arch("sm_121", 121, "nvidia_gb10_spark", 101376, 48, "GB10 (DGX Spark)"),
)}

_PATTERN = re.compile(r"sm_?(\d{2,3})a?")


class UnknownArch(Day0Error):
    pass


def parse_arch(text: str) -> Arch:
    """'sm_89', 'sm89' or '89' -> Arch. Capabilities outside the table get conservative limits."""
    m = _PATTERN.fullmatch(text.strip()) or re.fullmatch(r"(\d{2,3})", text.strip())
    if not m:
        raise UnknownArch(f"'{text}' is not an NVIDIA arch; write it like sm_89 (known: {', '.join(ARCHS)})")
    cap = int(m.group(1))
    if cap < 75:
        raise UnknownArch(f"sm_{cap} is older than Triton supports (sm_75 and newer)")
    name = f"sm_{cap}"
    return ARCHS.get(name) or Arch(name, cap, None, 101376 if cap != 90 else 232448, 1, "unknown part")
