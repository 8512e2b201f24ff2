"""Memory the host declares uninitialised, for backends that check reads of it.

A launch cannot tell by itself which of its memory holds meaningful values: every tensor handed to
it was made by the host, and an in-place kernel (`x += y`, a state updated in place, a counter
accumulated into) legitimately reads what it then overwrites. So uninitialised memory is declared,
never guessed:

    from sdk.memcheck import uninitialised
    out = torch.empty(n)                      # or poisoned: write-only as far as the kernel goes
    with uninitialised([out]):
        kernel[grid](x, out, n, BLOCK=256)    # a read of out before a write is a fault

The conformance runner declares every output it poisons (in-place outputs are not poisoned and not
declared). Declaring fills the tensors with a poison value (a NaN with a payload of its own; the
integer sentinel the runner uses; True), so that unwritten elements show in the results and a host
write after the declaration is recognised. Inside the scope, an element of a declared tensor stays
uninitialised until a launch writes it (a store or an atomic) or the host changes its bytes (a
wrapper's `out.zero_()` between launches; only a host write of the poison value itself goes
unnoticed). Everything else a launch is handed, and memory outside declared tensors, is initialised.
cpu_interp checks reads against this under DAY0_CHECK_UNINIT=1; any backend may consult
`declared()` the same way.
"""
from __future__ import annotations

import contextvars
from typing import Any, Iterable

import numpy as np


def poison(tensor: Any) -> None:
    """Fill `tensor` with the declaration's poison value (see the module docstring)."""
    import torch
    t = tensor.detach()
    bits = {torch.float16: (torch.int16, 0x7DA5), torch.bfloat16: (torch.int16, 0x7FA5),
            torch.float32: (torch.int32, 0x7FA5A5A5), torch.float64: (torch.int64, 0x7FF5A5A5A5A5A5A5)}
    fp8 = {getattr(torch, n, None): v for n, v in (("float8_e4m3fn", 0x7F), ("float8_e5m2", 0x7D))}
    if t.dtype in bits:
        view, value = bits[t.dtype]
        t.view(view).fill_(value)
    elif t.dtype in fp8:
        t.view(torch.uint8).fill_(fp8[t.dtype])
    elif t.dtype == torch.bool:
        t.fill_(True)
    elif t.dtype == torch.uint8:
        t.fill_(0xA5)
    elif not t.dtype.is_floating_point and not t.dtype.is_complex:
        t.fill_(torch.iinfo(t.dtype).min + 7)


class Region:
    """The bytes of one declared tensor, from its first element to the end of its last one:
    `pending[b]` is True while byte b belongs to an element nothing has initialised yet.

    Declaring costs a fill: the bookkeeping (which bytes are elements, which are pending) is built
    the first time a checker asks (`refresh()`, `pending`), so a launch that checks nothing pays
    nothing for it. The declared bytes are remembered as the poison value of one element where the
    dtype has one, else as a copy of the tensor taken here."""

    def __init__(self, tensor: Any) -> None:
        import torch
        t = tensor.detach()
        poison(t)
        self.name = f"{tuple(t.shape)} {str(t.dtype).replace('torch.', '')} tensor"
        self.itemsize = t.element_size()
        self._shape, self._strides = tuple(t.shape), tuple(t.stride())
        n = 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride())) if t.numel() else 0
        self.address = t.data_ptr()
        self.nbytes = n * self.itemsize
        self._flat = torch.as_strided(t, (n,), (1,), t.storage_offset()) if n else None
        self._dense = _dense(t.shape, t.stride())  # every element of the span is one of the tensor's
        self._pattern = _poison_bytes(t.dtype)
        self._declared = None if self._pattern is not None or not n else self._bytes().copy()
        self._pending: np.ndarray | None = None

    def _bytes(self) -> np.ndarray:
        import torch
        if self._flat is None:
            return np.zeros(0, np.uint8)
        return self._flat.contiguous().view(torch.uint8).cpu().numpy()

    @property
    def pending(self) -> np.ndarray:
        if self._pending is None:
            n = self.nbytes // self.itemsize
            if self._dense:
                mine = np.ones(n, bool)
            else:
                offsets = np.zeros(1, np.int64)
                for size, stride in zip(self._shape, self._strides):
                    offsets = (offsets[:, None] + np.arange(size, dtype=np.int64) * stride).reshape(-1)
                mine = np.zeros(n, bool)
                mine[offsets] = True
            self._pending = np.repeat(mine, self.itemsize)
        return self._pending

    def refresh(self) -> np.ndarray:
        """Forget the elements whose bytes the host changed since the declaration; return `pending`."""
        pending = self.pending
        if pending.any():
            k = self.itemsize
            now = self._bytes().reshape(-1, k)
            declared = self._pattern if self._declared is None else self._declared.reshape(-1, k)
            pending &= np.repeat((now == declared).all(axis=1), k)
        return pending


def _dense(shape: tuple, strides: tuple) -> bool:
    """The elements fill their span exactly once (contiguous up to the order of the dimensions)."""
    expected = 1
    for stride, size in sorted((st, sz) for st, sz in zip(strides, shape) if sz != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _poison_bytes(dtype: Any) -> np.ndarray | None:
    """The bytes of one element as `poison` fills it; None for a dtype `poison` leaves alone."""
    import torch
    one = torch.zeros(1, dtype=dtype)
    probe = torch.ones(1, dtype=dtype) if dtype != torch.bool else torch.zeros(1, dtype=dtype)
    poison(one)
    poison(probe)
    a, b = one.view(torch.uint8).numpy(), probe.view(torch.uint8).numpy()
    return a.copy() if np.array_equal(a, b) else None


class uninitialised:
    """Declare `tensors` uninitialised (write-only) for the launches made inside the `with` block.
    They are poisoned here, at construction (outside any timed region)."""

    def __init__(self, tensors: Iterable[Any]) -> None:
        import torch
        self.regions = tuple(Region(t) for t in tensors if isinstance(t, torch.Tensor) and t.numel())
        self._token = None

    def __enter__(self) -> "uninitialised":
        self._token = _DECLARED.set(_DECLARED.get() + self.regions)
        return self

    def __exit__(self, *exc) -> None:
        _DECLARED.reset(self._token)


def declared() -> tuple[Region, ...]:
    """The regions declared uninitialised in the current context (innermost last)."""
    return _DECLARED.get()


_DECLARED: contextvars.ContextVar[tuple[Region, ...]] = contextvars.ContextVar("day0_uninitialised", default=())
