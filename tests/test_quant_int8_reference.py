"""The INT8 references are the definitions they state, at sizes where one-ulp slips show: the
per-token reference rounds x * fp32(127 / amax) with 127 / amax correctly rounded (what the kernel's
div_rn gives), not with the reciprocal-then-multiply torch uses for `scalar / tensor`."""
from __future__ import annotations

import numpy as np
import torch

from sdk.conformance.kernels.quant_int8 import EPS, group_quant_reference, per_token_quant_reference


def _rows(m: int, k: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn((m, k), generator=gen) * (torch.rand((m, 1), generator=gen) * 4 + 0.05)


def test_per_token_reference_rounds_products_of_the_correctly_rounded_inverse():
    x = _rows(512, 2048, 7)
    q, s = per_token_quant_reference(x)
    xs = x.numpy()
    amax = np.maximum(np.abs(xs).max(axis=1, keepdims=True), np.float32(EPS)).astype(np.float32)
    inv = np.divide(np.float32(127.0), amax, dtype=np.float32)      # IEEE fp32 division
    v = (xs * inv).astype(np.float64)
    want = (np.sign(v) * np.floor(np.abs(v) + 0.5)).astype(np.int8)
    assert np.array_equal(q.numpy(), want)
    assert torch.equal(s, torch.from_numpy(amax.astype(np.float64) / 127.0))


def test_group_reference_truncates_the_correctly_rounded_quotient():
    x = _rows(64, 1024, 11)
    q, s = group_quant_reference(x)
    g = x.numpy().reshape(64, 8, 128)
    scale = np.divide(np.maximum(np.abs(g).max(axis=2), np.float32(EPS)), np.float32(127.0), dtype=np.float32)
    want = np.trunc(np.clip(np.divide(g, scale[..., None], dtype=np.float32), -128, 127)).astype(np.int8)
    assert np.array_equal(q.numpy(), want.reshape(64, 1024))
