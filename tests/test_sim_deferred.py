"""A capture leaves floating-point data it never reads uncomputed, and computes, bit for bit as an
eager run does, whatever is needed (sdk.simulator.deferred)."""
from __future__ import annotations

import torch

from sdk.simulator.deferred import DeferredFloats


def _builder(gen: torch.Generator) -> dict:
    """Inputs the way suite kernels build them: payload drawn before and after metadata from one
    generator, routing derived from float logits, buffers filled through views and in place."""
    w = torch.randn((64, 256), generator=gen, dtype=torch.float64) * 0.5     # payload
    w = (w / w.norm(dim=-1, keepdim=True)).to(torch.bfloat16)
    logits = torch.randn((32, 8), generator=gen)                              # small: routing
    ids = torch.topk(logits, 2, dim=-1).indices                               # needs the logits
    lens = torch.randint(1, 50, (4,), generator=gen)                         # metadata after payload
    cache = torch.zeros((4, 64, 16))
    cache[:, :10] = torch.randn((4, 10, 16), generator=gen)                   # into a view
    cache.mul_(2.0)
    x = torch.empty((128, 64)).uniform_(-1, 1, generator=gen)
    table = torch.randperm(100, generator=gen)[:20]                           # metadata after payload
    scale = float(x.abs().amax())                                             # a value read back
    return {"w": w, "ids": ids, "lens": lens, "cache": cache, "x": x, "table": table, "scale": scale}


def _same(a: dict, b: dict) -> None:
    for k in a:
        if isinstance(a[k], torch.Tensor):
            assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
            assert torch.equal(a[k], b[k]), k
        else:
            assert a[k] == b[k], k


def test_integer_data_matches_an_eager_run_without_computing_the_payload():
    eager = _builder(torch.Generator().manual_seed(7))
    mode = DeferredFloats(min_elements=256)
    with mode:
        lazy = _builder(torch.Generator().manual_seed(7))
    for k in ("ids", "lens", "table"):  # what an analysis reads, identical at once
        assert torch.equal(eager[k], lazy[k]), k
    assert lazy["scale"] == eager["scale"]
    assert mode.deferred > 0 and mode.forced < mode.deferred  # some work was never done ...
    mode.materialise_all()                                    # ... and is what an eager run computes
    _same(eager, lazy)


def test_a_write_waits_for_the_pending_operations_that_read_the_old_contents():
    mode = DeferredFloats(min_elements=16)
    src = torch.arange(64, dtype=torch.float32)
    with mode:
        doubled = src * 2.0        # recorded, reads src
        src.fill_(-1.0)            # small and real: runs now, so the reader runs first
        total = float(doubled.sum())
    assert total == float((torch.arange(64, dtype=torch.float32) * 2.0).sum())


def test_draws_stay_in_order_when_later_draws_run_first():
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    a = torch.randn(1000, generator=g1)
    b = torch.randint(0, 1 << 30, (5,), generator=g1)
    mode = DeferredFloats(min_elements=100)
    with mode:
        la = torch.randn(1000, generator=g2)              # recorded, not drawn
        lb = torch.randint(0, 1 << 30, (5,), generator=g2)  # the pending draw runs first
        assert torch.equal(lb, b)
        assert la.tolist() == a.tolist()                  # read behind the dispatcher: computed first


def test_a_skipped_draw_leaves_its_generator_where_the_draw_would():
    """A pending draw the generator must pass is skipped in chunks, never kept; the state after
    it is the state the draw itself leaves, for every distribution, type and size it is used for,
    and the draw, when needed later, gives the values an eager run gives."""
    from sdk.simulator import deferred
    draws = {
        "randn": lambda g, n, dt: torch.randn(n, generator=g, dtype=dt),
        "normal_": lambda g, n, dt: torch.empty((n,), dtype=dt).normal_(0.5, 2.0, generator=g),
        "rand": lambda g, n, dt: torch.rand((1, n), generator=g, dtype=dt),
        "uniform_": lambda g, n, dt: torch.empty((n, 1), dtype=dt).uniform_(-1, 3, generator=g),
    }
    chunk = deferred.SKIP_CHUNK
    deferred.SKIP_CHUNK = 64  # several chunks, and a remainder under 16 merged into the last
    try:
        for name, draw in draws.items():
            for dt in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
                for n in (16, 17, 64, 100, 64 * 3 + 7, 1000):
                    g_eager, g_lazy = torch.Generator().manual_seed(n), torch.Generator().manual_seed(n)
                    want = draw(g_eager, n, dt)
                    after = torch.randint(0, 1 << 30, (3,), generator=g_eager)
                    mode = DeferredFloats(min_elements=8)
                    with mode:
                        got = draw(g_lazy, n, dt)
                        assert torch.equal(torch.randint(0, 1 << 30, (3,), generator=g_lazy), after), (name, dt, n)
                        assert mode.forced == 0  # skipped, not drawn
                        assert torch.equal(got.clone(), want), (name, dt, n)
    finally:
        deferred.SKIP_CHUNK = chunk


def test_pending_operations_run_into_the_tensors_handed_out_with_eager_values():
    """An operation with an out= form runs straight into the tensor the capture handed out (no
    copy); reductions over transposed inputs and type-promoting arithmetic included, the values
    are an eager run's, bit for bit."""
    from sdk.simulator.deferred import _out_variant
    assert _out_variant(torch.ops.aten.mul.Tensor) is torch.ops.aten.mul.out
    assert _out_variant(torch.ops.aten._softmax.default) is torch.ops.aten._softmax.out
    assert _out_variant(torch.ops.aten.topk.default) is None  # two results: run, then copied

    def build(gen):
        x = torch.randn((96, 300), generator=gen)
        y = (x.t() * 3.0 + 1).softmax(dim=0)
        z = (y.to(torch.bfloat16) * 0.5).sum(dim=1, dtype=torch.float64)
        v, i = torch.topk(x, 5, dim=-1)
        return {"y": y, "z": z, "v": v, "i": i}
    eager = build(torch.Generator().manual_seed(11))
    mode = DeferredFloats(min_elements=64)
    with mode:
        lazy = build(torch.Generator().manual_seed(11))
    assert mode.deferred > 0
    mode.materialise_all()
    _same(eager, lazy)
