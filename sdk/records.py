"""The records the backend contract passes between Triton, the SDK and a backend: a tensor argument
mapped for a launch (`DeviceArg`), a tensor descriptor argument (`TensorDescArg`), and what a
compile stage returns (`Artifact`). Plain data: modules below `sdk.backend` (sdk.arguments,
sdk.stages) use them without importing the contract itself; `sdk.backend` exports them too."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class DeviceArg:
    """A tensor argument mapped to device memory. The extent travels with it for bounds checks."""

    name: str       # the kernel parameter name
    address: int    # base address in the backend's address space
    nbytes: int     # size of the allocation the kernel may touch
    dtype: str      # TTIR element type name ("f32", "bf16", ...)
    handle: Any = None  # host-visible bytes (a numpy uint8 view) where there are any, or the backend's own


@dataclass(frozen=True)
class TensorDescArg:
    """A host tensor descriptor argument (`triton.tools.tensor_descriptor.TensorDescriptor`).
    Triton's frontend expands such a parameter into the descriptor, then its shape (i32 each) and
    its strides (i64 each); `launch` receives this in the descriptor's place, followed by those
    integers, so arguments line up with the kernel's TTIR parameters."""

    base: DeviceArg                  # the tensor the descriptor reads and writes
    shape: tuple[int, ...]           # elements per dimension
    strides: tuple[int, ...]         # elements between neighbours per dimension
    block_shape: tuple[int, ...]     # the tile one load or store moves
    padding: str = "zero"            # what out-of-bounds loads read: "zero" or "nan"


@dataclass(frozen=True)
class Artifact:
    """What a stage (or `lower`) may return instead of plain bytes: the bytes plus metadata for
    Triton (e.g. {"shared": 4096, "name": "kernel"})."""

    data: bytes
    metadata: dict = field(default_factory=dict)


__all__ = ["Artifact", "DeviceArg", "TensorDescArg"]
