"""The YaRN cos/sin cache the rope_gptj_yarn kernel is fed agrees with transformers' own YaRN
(`_compute_yarn_parameters`, an independent implementation) for DeepSeek-V3's shipped config and
Kimi-K2's published rope block: the inverse frequencies, the magnitude scale and the [cos | sin]
layout of each position's row."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from sdk.conformance.kernels.rope_gptj import deepseek_yarn_cos_sin_cache, yarn_inv_freq

transformers = pytest.importorskip("transformers")
from transformers import DeepseekV3Config  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KIMI_K2_YARN = {"beta_fast": 1.0, "beta_slow": 1.0, "factor": 32.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                "original_max_position_embeddings": 4096, "type": "yarn"}


def _deepseek_v3() -> DeepseekV3Config:
    cfg = json.loads((ROOT / "sdk/models/configs/deepseek_v3.json").read_text())
    return DeepseekV3Config(**{k: v for k, v in cfg.items() if k != "architectures"})


def _kimi_k2(**yarn) -> DeepseekV3Config:
    return DeepseekV3Config(hidden_size=7168, num_attention_heads=64, qk_nope_head_dim=128, qk_rope_head_dim=64,
                            max_position_embeddings=131072, rope_theta=50000.0, rope_scaling={**KIMI_K2_YARN, **yarn})


def _ours(cfg: DeepseekV3Config, max_pos: int):
    rp = cfg.rope_parameters
    args = (cfg.qk_rope_head_dim, float(rp["rope_theta"]), float(rp["factor"]),
            int(rp["original_max_position_embeddings"]), float(rp["beta_fast"]), float(rp["beta_slow"]))
    inv = yarn_inv_freq(*args)
    cache = deepseek_yarn_cos_sin_cache(*args, float(rp["mscale"]), float(rp["mscale_all_dim"]), max_pos=max_pos)
    return inv, cache


@pytest.mark.parametrize("make", [_deepseek_v3, _kimi_k2, lambda: _kimi_k2(mscale_all_dim=0.0)],
                         ids=["deepseek_v3", "kimi_k2", "kimi_k2_mscale_all_dim_0"])
def test_yarn_cache_matches_transformers(make):
    cfg = make()
    inv_ref, attention_factor = ROPE_INIT_FUNCTIONS["yarn"](cfg, "cpu")
    positions = torch.tensor([0, 1, 4095, 4096, 77777, 131071])
    inv, cache = _ours(cfg, max_pos=int(positions.max()) + 1)
    assert inv.shape == inv_ref.shape == (32,)
    torch.testing.assert_close(inv, inv_ref.double(), rtol=1e-6, atol=0)
    angles = positions[:, None].double() * inv_ref.double()[None, :]
    rows = cache[positions].double()
    # the cache is made in fp32 (as the serving stack makes it): the frequency and the product
    # position x frequency each round once, so an angle is off by a few fp32 ulps of its size
    bound = 4 * 2.0 ** -24 * angles.abs() + 1e-6
    assert ((rows[:, :32] - angles.cos() * attention_factor).abs() <= bound).all()
    assert ((rows[:, 32:] - angles.sin() * attention_factor).abs() <= bound).all()


def test_cache_length_and_magnitude_follow_the_config():
    cache = deepseek_yarn_cos_sin_cache(64, 1.0e4, 40.0, 4096, 32.0, 1.0, 1.0, 0.0, max_pos=3)
    assert cache.shape == (3, 64)
    scale = 0.1 * math.log(40.0) + 1.0                      # mscale 1 over mscale_all_dim 0
    torch.testing.assert_close(cache[0, :32], torch.full((32,), scale))   # position 0: cos 1, sin 0
    torch.testing.assert_close(cache[0, 32:], torch.zeros(32))
    assert yarn_inv_freq(64, 1.0e4, 40.0, 4096, 32.0, 1.0)[0] == 1.0     # the fastest dim extrapolates
