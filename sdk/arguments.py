"""A launch's arguments, mapped to what the backend's kernel addresses.

Each tensor argument becomes a `DeviceArg` (address, extent, element type, and a host-visible view
when there is one), in one of three ways:

* in place, on a backend over host memory (no allocator: cpu_interp): the kernel addresses the host
  tensor itself, from its first element to the end of its storage. No copy.
* in place, on a device backend, for a tensor already in its memory (a `sdk.device.DeviceTensor`, or
  a tensor on the backend's own torch device). No copy.
* across the boundary, on a device backend, for a host tensor: the span from its first element to
  the end of its storage goes into a device buffer for this launch (arguments viewing one storage
  share one buffer, so a write through one is seen through the other). It is copied in when the
  kernel reads it or may write it (a partial write must leave the other bytes as they were), copied
  out when the kernel may write it, and freed; the launch's stream is synchronised before the call
  returns, as a host tensor's user expects. Which parameters a kernel reads and writes comes from
  its TTIR (`sdk.ttir.access`).
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .records import DeviceArg, TensorDescArg
from .device import DeviceTensor
from .errors import Day0Error
from .numerics import TORCH_TO_TTIR


def ttir_dtype(dtype: Any) -> str:
    return TORCH_TO_TTIR.get(str(dtype).replace("torch.", ""), "")


def host_arg(tensor: Any, name: str) -> DeviceArg:
    """Zero-copy: a host tensor as a kernel argument, from its first element to the end of its
    storage (what the kernel may legally touch), with a numpy view of those bytes."""
    storage = tensor.untyped_storage()
    start = tensor.data_ptr()
    nbytes = max(storage.data_ptr() + storage.nbytes() - start, 0)
    buf = (np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(start)) if nbytes > 0
           else np.zeros(0, np.uint8))
    return DeviceArg(name=name, address=start, nbytes=nbytes, dtype=ttir_dtype(tensor.dtype), handle=buf)


def device_arg(allocator: Any, address: int, name: str, dtype: str) -> DeviceArg:
    """A device address as a kernel argument, extending to the end of the allocation holding it."""
    base, size = allocator.extent(address)
    nbytes = base + size - address
    return DeviceArg(name=name, address=address, nbytes=nbytes, dtype=dtype,
                     handle=allocator.view(address, nbytes) if nbytes > 0 else np.zeros(0, np.uint8))


@dataclass
class _Span:
    lo: int                  # host address of the first byte the launch's arguments start at
    hi: int                  # end of the storage
    reads: bool = False
    writes: bool = False
    device: int = 0          # the device buffer holding [lo, hi)


@dataclass
class Crossing:
    """The host tensors of one launch that cross into a device backend's memory."""

    backend: Any
    stream: Any
    spans: dict[int, _Span] = field(default_factory=dict)       # by host storage address
    pending: list[tuple[int, Any, str, int]] = field(default_factory=list)  # (slot, tensor, name, storage)

    def add(self, slot: int, tensor: Any, name: str, mode: str) -> None:
        storage = tensor.untyped_storage()
        key, start = storage.data_ptr(), tensor.data_ptr()
        span = self.spans.get(key)
        if span is None:
            span = self.spans[key] = _Span(start, key + storage.nbytes())
        span.lo = min(span.lo, start)
        span.reads |= "r" in mode
        span.writes |= "w" in mode
        self.pending.append((slot, tensor, name, key))

    def copy_in(self, mapped: list) -> None:
        """Allocate each span's buffer, copy in what the kernel reads or may write, and put the
        device arguments in their slots."""
        alloc = self.backend.allocator
        try:
            for span in self.spans.values():
                span.device = alloc.alloc(max(span.hi - span.lo, 1))
                if (span.reads or span.writes) and span.hi > span.lo:
                    alloc.copy_in(span.device, span.lo, span.hi - span.lo, self.stream)
        except BaseException:  # out of device memory, a bad copy: release what this launch took
            for span in self.spans.values():
                if span.device:
                    alloc.free(span.device)
            raise
        for slot, tensor, name, key in self.pending:
            span = self.spans[key]
            arg = device_arg(alloc, span.device + tensor.data_ptr() - span.lo, name, ttir_dtype(tensor.dtype))
            if isinstance(mapped[slot], TensorDescArg):
                mapped[slot] = _with_base(mapped[slot], arg)
            else:
                mapped[slot] = arg

    def copy_out(self, launched: bool) -> None:
        """Copy out what the kernel may have written (after a launch that ran), wait for the
        stream, and free the buffers."""
        alloc, device = self.backend.allocator, self.backend.device
        try:
            if launched:
                for span in self.spans.values():
                    if span.writes and span.hi > span.lo:
                        alloc.copy_out(span.lo, span.device, span.hi - span.lo, self.stream)
            device.synchronize(self.stream)
        finally:
            for span in self.spans.values():
                alloc.free(span.device)
            alloc.reclaim()


def _with_base(desc: TensorDescArg, base: DeviceArg) -> TensorDescArg:
    import dataclasses
    return dataclasses.replace(desc, base=base)


def map_arguments(backend: Any, flat: list[tuple[str, Any]], values: list[Any], access: tuple[str, ...],
                  stream: Any) -> tuple[list[Any], Crossing | None]:
    """The launch's arguments in TTIR parameter order (see the module docstring), and the
    crossing to complete after the launch (None when nothing crosses)."""
    device_type = _device_type(backend)
    crossing = Crossing(backend, stream) if backend.allocator is not None else None
    mapped: list[Any] = []

    def place(value: Any, name: str) -> DeviceArg | None:
        """The argument in place, or None when it must cross (its slot is filled at copy-in)."""
        if isinstance(value, DeviceTensor):
            if value.backend is not backend:
                raise Day0Error(f"argument '{name}' is a DeviceTensor of backend '{value.backend.name}', "
                                f"not of '{backend.name}'; copy it to the host first (to_host())")
            return device_arg(backend.allocator, value.address, name, ttir_dtype(value.dtype))
        if crossing is None:
            return backend.map_tensor(value, name)
        if getattr(getattr(value, "device", None), "type", "cpu") == device_type != "cpu":
            return backend.map_tensor(value, name)  # on the backend's own torch device
        return None

    for (pname, ty), value in zip(flat, values):
        if ty == "constexpr":
            continue
        value = _unwrap(value)
        slot = len(mapped)
        mode = access[slot] if slot < len(access) else "rw"
        if isinstance(ty, str) and ty.startswith("*") and value is not None and hasattr(value, "data_ptr"):
            arg = place(value, pname)
            mapped.append(arg)
            if arg is None:
                crossing.add(slot, value, pname, mode)
        elif isinstance(ty, str) and ty.startswith("tensordesc") and hasattr(value, "block_shape"):
            base = _unwrap(value.base)
            arg = place(base, pname)
            shape, strides = tuple(int(n) for n in value.shape), tuple(int(n) for n in value.strides)
            mapped.append(TensorDescArg(arg, shape, strides, tuple(int(n) for n in value.block_shape),
                                        str(getattr(value, "padding", "zero"))))
            if arg is None:
                crossing.add(slot, base, pname, mode)
            mapped.extend(shape + strides)
        else:
            mapped.append(value)
    if crossing is not None and crossing.pending:
        crossing.copy_in(mapped)
        return mapped, crossing
    return mapped, None


def _device_type(backend: Any) -> str:
    return str(backend.torch_device).split(":")[0]


def _unwrap(value: Any) -> Any:
    """The tensor behind `triton.reinterpret(t, dtype)` (unsigned and fp8 views): memory is the
    tensor's; the element type the kernel reads it as is in its signature already."""
    base = getattr(value, "base", None)
    if base is not None and type(value).__name__ == "TensorWrapper" and hasattr(base, "untyped_storage"):
        return base
    return value
