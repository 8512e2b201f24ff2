"""The device side of the backend contract: a Device (streams, events, synchronize), an Allocator
(device memory, asynchronous copies on a stream, scratch) and DeviceTensor (a tensor held in device
memory by an explicit handle).

A backend over host memory (cpu_interp) keeps the defaults: a `HostDevice` (synchronous; stream 0;
events read the host clock) and no allocator, so kernels address the host tensors themselves. A
backend with memory of its own sets `self.device` and `self.allocator` in its constructor; the
bridge then copies host tensors across the boundary at each launch (only what the kernel reads in,
only what it may write out), and a `DeviceTensor` (or a tensor on the backend's own torch device)
stays in device memory between launches.

`Device.interface()` is the slice of `torch.cuda` that `triton.testing.do_bench` uses (synchronize,
Event) and the device interface Inductor asks for the backend's torch device type.
"""
from __future__ import annotations

import contextlib
import time
from abc import ABC, abstractmethod
from typing import Any, Iterator

import numpy as np


# ------------------------------------------------------------------------------------ events
class Event:
    """A point in a stream's work, as `torch.cuda.Event`: `record(stream)` places it after the
    work queued so far, `synchronize()` waits until the device reaches it, `elapsed_time(end)` is
    the milliseconds between this event and a later one. The host-clock version, for synchronous
    devices: the device has reached an event as soon as it is recorded."""

    def __init__(self, device: "Device", enable_timing: bool = True) -> None:
        self.device = device
        self.t: float | None = None

    def record(self, stream: Any = None) -> None:
        self.t = time.perf_counter()

    def query(self) -> bool:
        return self.t is not None

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: "Event") -> float:
        if self.t is None or end.t is None:
            raise RuntimeError("elapsed_time needs two recorded events")
        return (end.t - self.t) * 1e3


# ------------------------------------------------------------------------------------ device
class Device:
    """Streams, events and synchronisation of one device. This base class is a synchronous
    device: work is done when its call returns, every stream is stream 0. An asynchronous device
    overrides `current_stream`, `new_stream`, `synchronize` and `event`."""

    synchronous: bool = True   # host-clock benchmarking (sdk.triton_bridge.host_benchmark) suits it

    def __init__(self) -> None:
        self._streams: list[Any] = []

    def current_stream(self) -> Any:
        """The stream launches and copies go to now (Triton asks before every launch)."""
        return self._streams[-1] if self._streams else self.default_stream()

    def default_stream(self) -> Any:
        return 0

    def new_stream(self) -> Any:
        return 0

    @contextlib.contextmanager
    def stream(self, stream: Any) -> Iterator[Any]:
        """Make `stream` the current stream inside the block."""
        self._streams.append(stream)
        try:
            yield stream
        finally:
            self._streams.pop()

    def synchronize(self, stream: Any = None) -> None:
        """Wait until the work queued on `stream` (every stream when None) is done; a fault the
        device met meanwhile is raised here."""

    def event(self, enable_timing: bool = True) -> Event:
        return Event(self, enable_timing)

    def interface(self) -> Any:
        """The device interface for `triton.testing.do_bench` and Inductor (see `interface_for`)."""
        return interface_for(self)


class HostDevice(Device):
    """The host itself (cpu_interp): synchronous, stream 0, host-clock events."""


# --------------------------------------------------------------------------------- allocator
class Allocator(ABC):
    """Device memory. Addresses are integers in the device's address space (what kernels receive
    as pointers); host memory is given by host addresses (`tensor.data_ptr()`). Copies are
    asynchronous on `stream`: the host memory they read or write must stay valid until the stream
    is synchronised."""

    @abstractmethod
    def alloc(self, nbytes: int) -> int:
        """A new allocation of `nbytes`; its device address."""

    @abstractmethod
    def free(self, address: int) -> None:
        """Release an allocation (once the work using it is done)."""

    @abstractmethod
    def copy_in(self, dst: int, src_host: int, nbytes: int, stream: Any = None) -> None:
        """Host -> device: `nbytes` from host address `src_host` to device address `dst`."""

    @abstractmethod
    def copy_out(self, dst_host: int, src: int, nbytes: int, stream: Any = None) -> None:
        """Device -> host: `nbytes` from device address `src` to host address `dst_host`."""

    @abstractmethod
    def extent(self, address: int) -> tuple[int, int]:
        """(base, size) of the allocation holding `address`: what a kernel argument may touch."""

    def view(self, address: int, nbytes: int) -> np.ndarray | None:
        """Device bytes as a writable uint8 array, for an executor that runs on the host (an
        interpreter standing in for the device); None when device memory is not host-visible."""
        return None

    def scratch(self, nbytes: int, stream: Any = None) -> int:
        """Device scratch for work queued on `stream`, valid until `reclaim()` (which the bridge
        calls once the stream is synchronised)."""
        address = self.alloc(nbytes)
        self.__dict__.setdefault("_scratch", []).append(address)
        return address

    def reclaim(self) -> None:
        """Free the scratch handed out since the last call (the device must be idle)."""
        for address in self.__dict__.pop("_scratch", []):
            self.free(address)


# ------------------------------------------------------------------------------ device tensor
class DeviceTensor:
    """A tensor in a backend's device memory, held by an explicit handle: what a backend without a
    torch device of its own gives users to keep data on the device between launches. Triton's
    frontend takes it as a pointer argument (`data_ptr()` is the device address, `dtype` the
    element type); the bridge maps it in place, with no copy.

        x = DeviceTensor.from_host(backend, torch.randn(1000))   # one copy in
        y = DeviceTensor.empty(backend, (1000,), torch.float32)
        kernel[grid](x, y, 1000)                                  # no copies
        out = y.to_host()                                         # one copy out
    """

    def __init__(self, backend: Any, shape: tuple[int, ...], dtype: Any, address: int | None = None) -> None:
        import torch
        if backend.allocator is None:
            raise TypeError(f"backend '{backend.name}' works on host memory: it has no device memory "
                            f"to hold a DeviceTensor")
        self.backend = backend
        self.shape = torch.Size(shape)
        self.dtype = dtype
        self.nbytes = self.shape.numel() * torch.empty((), dtype=dtype).element_size()
        self.address = backend.allocator.alloc(max(self.nbytes, 1)) if address is None else address
        self._owned = address is None

    @classmethod
    def empty(cls, backend: Any, shape: tuple[int, ...], dtype: Any) -> "DeviceTensor":
        return cls(backend, tuple(shape), dtype)

    @classmethod
    def from_host(cls, backend: Any, tensor: Any, stream: Any = None) -> "DeviceTensor":
        """A device copy of a host tensor (one copy in; returns once it is done)."""
        src = tensor.contiguous()
        out = cls(backend, tuple(src.shape), src.dtype)
        if out.nbytes:
            backend.allocator.copy_in(out.address, src.data_ptr(), out.nbytes, stream)
            backend.device.synchronize(stream)
        return out

    def to_host(self, stream: Any = None) -> Any:
        """A host copy (one copy out; returns once it is done)."""
        import torch
        out = torch.empty(self.shape, dtype=self.dtype)
        if self.nbytes:
            self.backend.allocator.copy_out(out.data_ptr(), self.address, self.nbytes, stream)
            self.backend.device.synchronize(stream)
        return out

    # what Triton's frontend and the bridge read of a tensor argument
    def data_ptr(self) -> int:
        return self.address

    def numel(self) -> int:
        return self.shape.numel()

    def element_size(self) -> int:
        return self.nbytes // max(self.numel(), 1) if self.numel() else 0

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[dim]

    def stride(self) -> tuple[int, ...]:
        out, step = [], 1
        for n in reversed(self.shape):
            out.append(step)
            step *= n
        return tuple(reversed(out))

    @property
    def device(self) -> str:
        return self.backend.name

    def free(self) -> None:
        if self._owned and self.address is not None:
            self._owned = False
            self.backend.device.synchronize()
            self.backend.allocator.free(self.address)

    def __repr__(self) -> str:
        return f"DeviceTensor({tuple(self.shape)}, {self.dtype}, on '{self.backend.name}' at {self.address:#x})"


# --------------------------------------------------------------------------- device interface
def interface_for(device: Device) -> type:
    """A `torch._dynamo.device_interface.DeviceInterface` for `device`: what Inductor asks for a
    device type (register it with `register_interface_for_device`) and the slice of `torch.cuda`
    that `triton.testing.do_bench` uses (`synchronize()`, `Event(enable_timing=True)`)."""
    from torch._dynamo.device_interface import DeviceInterface

    class _Event:
        def __init__(self, enable_timing: bool = True, **_: Any) -> None:
            self._event = device.event(enable_timing)

        def record(self, stream: Any = None) -> None:
            self._event.record(device.current_stream() if stream is None else stream)

        def synchronize(self) -> None:
            self._event.synchronize()

        def query(self) -> bool:
            return self._event.query()

        def elapsed_time(self, end: "_Event") -> float:
            return self._event.elapsed_time(end._event)

    class Interface(DeviceInterface):
        Event = _Event

        @staticmethod
        def current_device() -> int:
            return 0

        @staticmethod
        def set_device(device_index: int) -> None:
            pass

        @staticmethod
        def device_count() -> int:
            return 1

        @staticmethod
        def is_available() -> bool:
            return True

        @staticmethod
        def current_stream(device_index: Any = None) -> Any:
            return device.current_stream()

        @staticmethod
        def get_raw_stream(device_index: int = 0) -> Any:
            return device.current_stream()

        @staticmethod
        def synchronize(device_index: Any = None) -> None:
            device.synchronize()

    Interface.__name__ = Interface.__qualname__ = f"{type(device).__name__}Interface"
    return Interface
