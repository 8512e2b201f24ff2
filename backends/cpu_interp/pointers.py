"""Lazy pointer tensors of the batched interpreter: `base + off * w` without materialising addresses."""
from __future__ import annotations

import numpy as np


class Ptrs:
    """A tensor of pointers held as `base + off * w`: `base` per program (shape (L, 1, ...)), `off`
    element offsets (often shared by every program, leading axis 1). Loads and stores check bounds
    and gather whole rows from these parts without materialising addresses; anything else sees the
    int64 addresses through numpy's __array__ protocol."""

    __slots__ = ("base", "off", "w", "shape")

    def __init__(self, base, off, w, shape):
        self.base, self.off, self.w, self.shape = base, off, w, tuple(shape)

    dtype = np.dtype(np.int64)

    @property
    def ndim(self):
        return len(self.shape)

    def materialize(self) -> np.ndarray:
        a = self.base if self.off is None else self.base + self.off.astype(np.int64) * self.w
        return np.broadcast_to(a, self.shape)

    def __array__(self, dtype=None, copy=None):
        a = self.materialize()
        return a if dtype is None else a.astype(dtype)

    def __getattr__(self, name):  # anything else: behave like the address array
        return getattr(self.materialize(), name)
