"""Shared pieces of the suite's PyTorch references: the precision a reference computes in, and
softmax attention over explicit keys with bounded memory.

Precision. A reference must be far more accurate than the tolerance it is judged with, and no more
expensive than that needs. fp32 rounding, grown by sums over tens of thousands of terms, stays near
1e-6 relative: enough for an output judged to 1e-3 or looser (the 16-bit outputs of attention and
of the activations), not for one judged to 1e-5 (their fp32 outputs). `compute_dtype` says fp32 for
16-bit and 8-bit data and fp64 for fp32 data; a reference uses it only for outputs whose tolerances
follow that pattern (tests/test_references.py checks the kernels that do), and stays in fp64 where
a 16-bit kernel's output is judged tightly (a quantisation scale, a log-sum-exp, a recurrent state).

Attention. `attention` is the textbook formulation, softmax(q k^T * scale + mask) v, per KV head
and per block of query rows, so that a score block never exceeds `budget` bytes whatever the
sequence length; keys that a block's mask hides entirely are not multiplied at all (which changes
no value: a hidden key's weight is exactly zero). A score block is written over in place, the mask
is compared only over the keys some row of the block does not see (a causal block's own diagonal,
not the long prefix every row sees), and the softmax's division is applied to the product with v
instead of to every weight: each saves a pass over the largest tensor of the reference (a 4096-token
chunk after 12288 cached tokens, 16-bit data: 42 s -> 26 s on one core).
"""
from __future__ import annotations

import torch

#: bytes of one block of scores in `attention`: small enough to stay in cache through the mask and
#: the softmax (8 MB ran 3x faster than 256 MB on a 2048-token causal prefill), large enough for
#: full-speed matrix products
SCORE_BUDGET = 1 << 23
#: exp of a logit this far below its row's largest is under fp32's smallest normal (1.2e-38): in
#: fp32 such a weight is set to exactly zero before the exponential, as a flush-to-zero unit would.
#: Its share of the row's output was below 1e-37; computed, the subnormal weights and the product
#: that reads them ran 5x slower (Gemma 2's soft-capped, windowed unified-attention reference:
#: 44 s against 8 s)
_FP32_EXP_FLOOR = -87.0


def compute_dtype(t: torch.Tensor | torch.dtype) -> torch.dtype:
    """The dtype a reference computes in for data of `t`'s dtype (see the module docstring): fp64
    for fp32 and fp64 data, fp32 for 16-bit and 8-bit data."""
    dtype = t if isinstance(t, torch.dtype) else t.dtype
    if dtype in (torch.float32, torch.float64, torch.complex64, torch.complex128):
        return torch.float64
    return torch.float32


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, *,
              q_pos: torch.Tensor | None = None, k_pos: torch.Tensor | None = None, causal: bool = False,
              window: int = 0, sinks: torch.Tensor | None = None, softcap: float = 0.0,
              alibi_slopes: torch.Tensor | None = None, dtype: torch.dtype = torch.float64,
              budget: int | None = None) -> torch.Tensor:
    """Softmax attention of queries q [n, HQ, Dk] over keys k [L, HKV, Dk] and values v [L, HKV, Dv]
    (HQ a multiple of HKV: query head h reads KV head h // (HQ // HKV)), computed in `dtype`.

    A key j is visible to a query i when `causal` is off or k_pos[j] <= q_pos[i], and, with a
    `window` > 0, q_pos[i] - k_pos[j] < window (positions default to 0..n-1 and 0..L-1). `sinks`
    [HQ]: a logit per head that joins each row's softmax and weighs no value. `softcap` > 0 caps the
    scaled logits, softcap * tanh(s / softcap); `alibi_slopes` [HQ] then add slope * (k_pos - q_pos).
    A row that sees no key (and has no sink) is NaN, as softmax over nothing is. Returns
    [n, HQ, Dv] in `dtype`."""
    n, HQ, _ = q.shape
    L, HKV, _ = k.shape
    G = HQ // HKV
    dev = q.device
    q_pos = torch.arange(n, device=dev) if q_pos is None else q_pos.to(device=dev, dtype=torch.int64)
    k_pos = torch.arange(L, device=dev) if k_pos is None else k_pos.to(device=dev, dtype=torch.int64)
    masked = causal or window > 0
    ordered = L < 2 or bool((k_pos[1:] >= k_pos[:-1]).all())  # keys by position: trim hidden ones
    out = torch.empty((n, HQ, v.shape[-1]), dtype=dtype, device=dev)
    rows = max(1, (budget or SCORE_BUDGET) // (torch.empty((), dtype=dtype).element_size() * G * max(L, 1)))
    for h in range(HKV):
        kh = k[:, h].to(dtype)                                            # [L, Dk]
        vh = v[:, h].to(dtype)                                            # [L, Dv]
        heads = slice(h * G, (h + 1) * G)
        for s in range(0, n, rows):
            qp = q_pos[s:s + rows]
            lo, hi = 0, L
            if masked and ordered and L:
                if causal:
                    hi = int(torch.searchsorted(k_pos, qp.max(), right=True))
                if window > 0:
                    lo = int(torch.searchsorted(k_pos, qp.min() - window + 1))
                lo = min(lo, L - 1)
                hi = max(hi, lo + 1)  # at least one key: a row that sees none stays NaN below
            qb = q[s:s + rows, heads].to(dtype).transpose(0, 1)          # [G, nb, Dk]
            scores = qb @ kh[lo:hi].T                                     # [G, nb, Lb]
            scores *= scale
            if softcap > 0:
                scores = softcap * torch.tanh(scores / softcap)
            if alibi_slopes is not None:
                rel = (k_pos[lo:hi][None, :] - qp[:, None]).to(dtype)     # [nb, Lb]
                scores += alibi_slopes[heads].to(dtype)[:, None, None] * rel
            if masked:
                _mask(scores, qp, k_pos, lo, hi, causal, window, ordered)
            # softmax, normalised after the product with v (a pass over the scores fewer)
            top = scores.amax(-1, keepdim=True)                           # [G, nb, 1]
            if sinks is not None:
                sink = sinks[heads].to(dtype)[:, None, None]
                top = torch.maximum(top, sink)
            scores -= top
            if dtype == torch.float32:  # weights below fp32's smallest normal are dropped, not made
                torch.nn.functional.threshold_(scores, _FP32_EXP_FLOOR, float("-inf"))  # subnormal
            scores.exp_()
            total = scores.sum(-1, keepdim=True)
            if sinks is not None:
                total += torch.exp(sink - top)
            out[s:s + rows, heads] = ((scores @ vh[lo:hi]) / total).transpose(0, 1)
    return out


def _mask(scores: torch.Tensor, qp: torch.Tensor, k_pos: torch.Tensor, lo: int, hi: int, causal: bool,
          window: int, ordered: bool) -> None:
    """-inf where query positions qp do not see keys lo..hi-1 (scores [G, nb, hi - lo]). With keys
    in position order only the columns some row of the block does not see are compared: the keys
    every row sees (no later than the earliest query, and within the window of the latest) are
    left as they are, so a long prefix of visible keys costs no pass over its scores."""
    a, b = lo, lo  # [a, b): keys every row of the block sees
    if ordered:
        b = int(torch.searchsorted(k_pos, qp.min(), right=True)) if causal else hi
        a = int(torch.searchsorted(k_pos, qp.max() - window + 1)) if window > 0 else lo
        a, b = min(max(a, lo), hi), min(max(b, lo), hi)
        if b <= a:
            a = b = lo
    for c0, c1 in ((lo, a), (b, hi)):
        if c1 <= c0:
            continue
        kp = k_pos[c0:c1]
        seen = torch.ones((qp.numel(), c1 - c0), dtype=torch.bool, device=scores.device)
        if causal:
            seen &= kp[None, :] <= qp[:, None]
        if window > 0:
            seen &= qp[:, None] - kp[None, :] < window
        scores[..., c0 - lo:c1 - lo].masked_fill_(~seen, float("-inf"))


def local_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, window: int,
                    dtype: torch.dtype = torch.float64, rows: int = 256) -> torch.Tensor:
    """Bidirectional attention of queries q [n, HQ, Dk] over keys k [n, HKV, Dk] and values v
    [n, HKV, Dv] of the same sequence, key j visible to query i when |i - j| <= window (ModernBERT's
    local layers), in `dtype`: a block of `rows` queries at a time over the keys the block can see,
    so that memory grows with the window, not the sequence. Returns [n, HQ, Dv]."""
    n, HQ, _ = q.shape
    G = HQ // k.shape[1]
    out = torch.empty((n, HQ, v.shape[-1]), dtype=dtype, device=q.device)
    for s in range(0, n, rows):
        e = min(n, s + rows)
        lo, hi = max(0, s - window), min(n, e + window)
        qb = q[s:e].to(dtype).transpose(0, 1)                                  # [HQ, nb, Dk]
        kb = k[lo:hi].to(dtype).repeat_interleave(G, dim=1).transpose(0, 1)    # [HQ, Lb, Dk]
        vb = v[lo:hi].to(dtype).repeat_interleave(G, dim=1).transpose(0, 1)    # [HQ, Lb, Dv]
        dist = torch.arange(s, e, device=q.device)[:, None] - torch.arange(lo, hi, device=q.device)[None, :]
        scores = (qb @ kb.transpose(1, 2)) * scale
        scores.masked_fill_(dist.abs() > window, float("-inf"))
        out[s:e] = torch.softmax(scores, dim=-1).matmul(vb).transpose(0, 1)
    return out


def encoder_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lens: list[int], scale: float,
                      window: int = 0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Encoder attention of sequences packed along the first dimension (`lens` tokens each): every
    token sees every token of its own sequence, or with `window` > 0 those within `window`
    positions either side. Returns [T, HQ, Dv] in `dtype`."""
    out = torch.empty((q.shape[0], q.shape[1], v.shape[-1]), dtype=dtype, device=q.device)
    a = 0
    for n in lens:
        qs, ks, vs = q[a:a + n], k[a:a + n], v[a:a + n]
        out[a:a + n] = local_attention(qs, ks, vs, scale, window, dtype) if window > 0 else \
            attention(qs, ks, vs, scale, causal=False, dtype=dtype)
        a += n
    return out
