"""The PyTorch work a launch wrapper does around its Triton launches, counted during a capture.

Wrappers allocate and zero outputs, build index tables with cumsum or gather, cast, and copy
metadata from the host: on a device each such operation is a kernel (or a copy) on the same stream
as the Triton launches, and a call into PyTorch on the host. `TorchCounter` is a dispatch mode
over the captured call that sees every ATen operation the wrapper issues and records:
- `ops`: every operation, views and allocations included (about a microsecond of host time each);
- `kernels` and `bytes`: the operations that launch a device kernel (not views, metadata or
  allocations), with the bytes of the tensors each reads and writes;
- `copies`: tensors made from host data (`torch.tensor(...)`: a copy from pageable host memory on
  a device) and values read back to the host (`.item()`, `int(t)`: a copy and a synchronisation);
  `reads`: the values read back among them.
Operations issued by Triton's runtime (an autotuner's benchmarking) or by the capture's own
plumbing are not the wrapper's and are not counted.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

#: operations that launch no kernel: allocations and metadata (views are recognised by schema)
NO_KERNEL = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "resize_", "set_",
    "_unsafe_view", "_reshape_alias", "detach", "alias", "lift", "lift_fresh", "lift_fresh_copy",
    "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "is_same_size", "_to_copy_noop",
    "_has_compatible_shallow_copy_type", "record_stream", "is_pinned", "size", "stride", "numel", "dim",
})
#: operations that only write their first argument (it is not read)
WRITE_ONLY = frozenset({"fill_", "zero_", "copy_", "normal_", "uniform_", "random_", "bernoulli_",
                        "exponential_", "index_fill_", "masked_fill_"})
#: a tensor built from host data (on a device: a copy from pageable host memory)
FROM_HOST = frozenset({"lift_fresh", "lift_fresh_copy", "lift"})
#: a value read back to the host (a copy to the host and a synchronisation)
TO_HOST = frozenset({"_local_scalar_dense", "equal", "is_nonzero"})

_OWN = ("sdk/simulator/torchwork.py", "sdk/simulator/run.py", "sdk/capture.py", "sdk/triton_bridge.py")


@dataclass(frozen=True)
class TorchWork:
    ops: int = 0
    kernels: int = 0
    bytes: int = 0
    copies: int = 0
    reads: int = 0


def _nbytes(x) -> int:
    return x.numel() * x.element_size() if isinstance(x, torch.Tensor) else 0


def _from_wrapper() -> bool:
    """Whether the operation being dispatched was issued by wrapper code (not Triton's runtime, not
    the capture's plumbing)."""
    f = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename.replace("\\", "/")
        if "/torch/" in name or name.endswith(_OWN[0]):
            f = f.f_back
            continue
        if any(name.endswith(p) for p in _OWN[1:]):
            return False
        return "/triton/" not in name or "/triton/language/" in name
    return False


class TorchCounter(TorchDispatchMode):
    """Counts the wrapper's ATen operations while active (see the module's docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = self.kernels = self.bytes = self.copies = self.reads = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if _from_wrapper():
            self.count(func, args, kwargs, out)
        return out

    def count(self, func, args, kwargs, out) -> None:
        name = func.overloadpacket.__name__
        self.ops += 1
        if name in FROM_HOST:
            self.copies += 1
            self.kernels += 1
            self.bytes += sum(_nbytes(t) for t in tree_flatten(out)[0])
            return
        if name in TO_HOST:
            self.copies += 1
            self.reads += 1
            return
        if name in NO_KERNEL or func.is_view:
            return
        written = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        read = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if name in WRITE_ONLY and args and isinstance(args[0], torch.Tensor):
            read = [t for t in read if t is not args[0]]
        if not any(t.numel() for t in written + read):
            return  # nothing to compute: no kernel is launched
        # an in-place or out= operation returns what it wrote, which it may also have read
        self.kernels += 1
        self.bytes += sum(_nbytes(t) for t in read) + sum(_nbytes(t) for t in written)

    def work(self) -> TorchWork:
        return TorchWork(self.ops, self.kernels, self.bytes, self.copies, self.reads)
