"""The on-chip scratch a kernel would stage on a GPU-like target, reported as its `shared` metadata."""
from __future__ import annotations

import numpy as np

from sdk.ttir import Module, TensorType

#: ops a GPU stages through on-chip shared memory (cross-thread data movement)
_STAGED = frozenset({"tt.reduce", "tt.scan", "tt.dot", "tt.dot_scaled", "tt.trans", "tt.gather",
                     "tt.histogram", "tt.join", "tt.split", "tt.cat", "tt.reshape"})


def scratch_bytes(module: Module, limit: int = 1 << 20) -> int:
    """The shared memory a GPU-like target would stage for this kernel: the largest tensor
    operand bytes of any op that moves data across threads (capped at `limit`). cpu_interp needs
    none, but reports this as the kernel's `metadata.shared` so that host code which sizes
    persistent grids from it (max_shared_mem // shared) behaves as it would on a device."""
    from sdk.numerics import numpy_dtype
    need = 0
    for op in module.walk():
        if op.name not in _STAGED:
            continue
        for v in op.operands:
            t = v.type
            if isinstance(t, TensorType):
                try:
                    size = numpy_dtype(str(t.element)).itemsize
                except Exception:  # pointers and the like
                    size = 8
                need = max(need, int(np.prod(t.shape, dtype=np.int64)) * size)
    return min(need, limit)
