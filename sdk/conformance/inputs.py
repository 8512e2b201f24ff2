"""Seeded input pieces several of the suite's kernels share: distinct random picks per row, router
logits with no ties, and language-model-head logits.

Each draws from the generator it is given, so an item's inputs follow from its seed alone. Picks
are the positions of a row's k largest uniform draws (`topk`, linear in the row's length): a
uniformly random k-subset in random order. A full sort per row chose the same way at several
times the cost (256 rows of a 151936-token vocabulary: a 6 s argsort against a fraction of a
second).
"""
from __future__ import annotations

import torch

_BF16_POOL: list[torch.Tensor] = []


def distinct_choices(rows: int, n: int, k: int, gen: torch.Generator) -> torch.Tensor:
    """[rows, k] int64: per row, k distinct indices of range(n) drawn uniformly, in random order."""
    if not 0 <= k <= n:
        raise ValueError(f"cannot choose {k} distinct indices of {n}")
    return torch.rand((rows, n), generator=gen).topk(k, dim=1).indices


def distinct_logits(rows: int, n: int, gen: torch.Generator) -> torch.Tensor:
    """[rows, n] fp32 router logits with no ties in a row, each exact in bf16: drawn without
    replacement from the bf16 values in [-4, 4] (about 2000 of them)."""
    if not _BF16_POOL:
        _BF16_POOL.append(torch.unique(torch.linspace(-4.0, 4.0, 1 << 16).to(torch.bfloat16).float()))
    pool = _BF16_POOL[0]
    return pool[distinct_choices(rows, pool.numel(), n, gen)]


def llm_logits(rows: int, vocab: int, gen: torch.Generator, *, spread: float = 2.0, hot: int = 24,
               boost: tuple[float, float] = (6.0, 8.0)) -> torch.Tensor:
    """[rows, vocab] fp32 logits like a language model head's: a normal background (standard
    deviation `spread`) and `hot` preferred tokens per row, each raised by boost[0] plus up to
    boost[1] more."""
    x = torch.randn((rows, vocab), generator=gen) * spread
    n_hot = min(hot, vocab)
    picks = distinct_choices(rows, vocab, n_hot, gen)
    x.scatter_add_(1, picks, boost[0] + boost[1] * torch.rand((rows, n_hot), generator=gen))
    return x
