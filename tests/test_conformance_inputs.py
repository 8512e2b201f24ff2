"""The suite's shared input pieces (sdk.conformance.inputs): picks are distinct, in range, spread
evenly and follow from the seed; router logits have no ties and are exact in bf16."""
import pytest
import torch

from sdk.conformance.inputs import distinct_choices, distinct_logits, llm_logits


def _gen(seed: int = 1234) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("rows,n,k", [(7, 10, 10), (64, 1000, 24), (3, 5, 1), (4, 6, 0)])
def test_choices_are_distinct_and_in_range(rows, n, k):
    ids = distinct_choices(rows, n, k, _gen())
    assert ids.shape == (rows, k) and ids.dtype == torch.int64
    for row in ids.tolist():
        assert len(set(row)) == k and all(0 <= i < n for i in row)


def test_choices_follow_the_seed_and_spread_evenly():
    a, b = distinct_choices(4000, 20, 5, _gen(7)), distinct_choices(4000, 20, 5, _gen(7))
    assert torch.equal(a, b)
    assert not torch.equal(a, distinct_choices(4000, 20, 5, _gen(8)))
    counts = torch.bincount(a.flatten(), minlength=20).double()
    expected = 4000 * 5 / 20                     # 1000 per index; binomial sd about 27
    assert (counts - expected).abs().max() < 150
    first = torch.bincount(a[:, 0], minlength=20).double()   # order within a row is random too
    assert (first - 200).abs().max() < 80


def test_too_many_choices_is_refused():
    with pytest.raises(ValueError, match="cannot choose 6 distinct indices of 5"):
        distinct_choices(2, 5, 6, _gen())


def test_router_logits_have_no_ties_and_are_exact_in_bf16():
    x = distinct_logits(50, 256, _gen())
    assert x.shape == (50, 256) and x.dtype == torch.float32
    assert torch.equal(x, x.to(torch.bfloat16).float())
    assert all(torch.unique(row).numel() == 256 for row in x)
    assert x.min() >= -4.0 and x.max() <= 4.0


def test_llm_logits_raise_the_hot_tokens_above_the_background():
    x = llm_logits(32, 5000, _gen(), spread=0.5, hot=24, boost=(6.0, 2.0))
    top = x.topk(24, dim=1).values
    assert (top.min(dim=1).values >= 6.0 - 2.5).all()          # boosted: background sd 0.5 cannot reach it
    rest = x.sort(dim=1, descending=True).values[:, 24:]
    assert rest.abs().max() < 3.5 and 0.45 < rest.std().item() < 0.55
