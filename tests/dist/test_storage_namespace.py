"""Storage keys name the model and the page format: a storage directory reused by a run of
another model must miss, never serve that model's KV (the keys used to name only
"hicache-tiny", the page size and the PP stage)."""
import dataclasses
import os

import pytest
import torch

from hicache.dist.config import RunConfig
from hicache.dist.engine import storage_namespace
from hicache.dist.model import ModelConfig
from hicache.dist.runner import run_distributed
from hicache.monitors.runtime import VerifyConfig


@pytest.mark.parametrize("change", [dict(seed=99), dict(vocab=65), dict(heads=4, head_dim=4), dict(layers=2),
                                    dict(max_len=128)])
def test_every_model_field_is_in_the_namespace(change):
    base = ModelConfig()
    assert storage_namespace(base, torch.float32) == storage_namespace(ModelConfig(), torch.float32)
    assert storage_namespace(dataclasses.replace(base, **change), torch.float32) != storage_namespace(base, torch.float32)


def test_the_page_dtype_is_in_the_namespace():
    assert storage_namespace(ModelConfig(), torch.float32) != storage_namespace(ModelConfig(), torch.bfloat16)


def _stored(root) -> set[str]:
    return {name for _, _, files in os.walk(root) for name in files if not name.startswith(".")}


def test_a_reused_storage_directory_does_not_serve_another_models_kv(tmp_path):
    def run(weights_seed):
        cfg = RunConfig(cp=2, pp=1, requests=14, device_pages_per_rank=4, host_pages_per_rank=6,
                        storage_fail_p=0.0, transfer_delay_s=0.002, storage_delay_s=0.0, timeout_s=10.0,
                        verify="strict", seed=3, model=ModelConfig(seed=weights_seed), storage_dir=str(tmp_path))
        return run_distributed(cfg, launch_timeout_s=60, monitors=VerifyConfig())

    first = run(1234)
    assert all(r["violations"] == [] for r in first)
    before = _stored(tmp_path)
    assert before                                   # the first model's pages are there
    other = run(99)                                 # same shapes, other weights, same directory
    for r in other:
        # strict: every request's logits against a full recompute of this model
        assert r["violations"] == [], r["violations"][:2]
    after = _stored(tmp_path)
    assert after - before                   # it stored its own pages: none of its keys existed
