"""The NVIDIA generations nvidia_ref compiles for: compute capability and device model.

A generation with a shipped device model takes its target and device properties from the model
(one source of truth); the others carry here the few figures libraries and Triton's launch checks
need (opt-in shared memory per block, SM count of a representative part), so a compile-only run
refuses what the real device would refuse."""
from __future__ import annotations

import re
from dataclasses import dataclass

from sdk.errors import Day0Error


#: CUDA's warp size and 32-bit registers per SM on every generation Triton supports (compute
#: capability 7.5 to 12.x: https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#features-and-technical-specifications)
WARP_SIZE = 32
REGISTERS_PER_SM = 65536


@dataclass(frozen=True)
class Arch:
    name: str                  # "sm_89"
    capability: int            # 89
    device_model: str | None   # a shipped device model of that generation: its figures are used
    max_shared_mem: int | None = None        # without a model: bytes of shared memory one block may
                                             # opt into (CUDA programming guide, per capability)
    multiprocessor_count: int | None = None  # without a model: SMs of the representative part
    example: str = ""          # a representative part

    def properties(self) -> dict[str, int]:
        """What Triton's driver reports for a GPU of this generation (compile-only mode)."""
        if self.device_model is not None:
            from sdk.backend import device_properties_of, load_device_model
            return device_properties_of(load_device_model(self.device_model))
        return {"multiprocessor_count": self.multiprocessor_count, "max_shared_mem": self.max_shared_mem,
                "warpSize": WARP_SIZE, "max_num_regs": REGISTERS_PER_SM}


ARCHS: dict[str, Arch] = {a.name: a for a in (
    Arch("sm_80", 80, None, 166912, 108, "A100"),
    Arch("sm_86", 86, None, 101376, 84, "RTX 3090 / A10"),
    Arch("sm_89", 89, "nvidia_l4", example="L4"),
    Arch("sm_90", 90, "nvidia_h100", example="H100 SXM"),
    Arch("sm_100", 100, None, 232448, 148, "B200"),
    Arch("sm_120", 120, None, 101376, 170, "RTX 5090"),
    Arch("sm_121", 121, "nvidia_gb10_spark", example="GB10 (DGX Spark)"),
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
