"""Storage keys name the model and the page format: a storage directory reused by a run of
another model must miss, never serve that model's KV (the keys used to name only
"hicache-tiny", the page size and the PP stage)."""
import dataclasses
import os

import pytest
import torch

from hicache.dist.config import RunConfig
from hicache.dist.engine import Engine, storage_namespace
from hicache.dist.model import ModelConfig
from hicache.dist.runner import run_distributed
from hicache.dist.topology import Topology
from hicache.monitors.runtime import VerifyConfig
from hicache.protocol.pp_sync import SyncOutcome
from hicache.storage.file_store import FileStorage


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


class _Comm:
    """What an Engine's constructor reads of its Comm; the one collective it can reach here
    is the prefetch sync's stop (at close), answered as agreed."""

    def __init__(self, topo: Topology) -> None:
        self.topo, self.rank, self.world = topo, topo.rank, topo.world
        self.prefetch_group = None

    def checked_min(self, name, group, digest, counts, votes=()):
        return SyncOutcome(True, True, 0, digest, tuple(counts), tuple(votes))


#: three full pages of page size 4 and a partial one (which gets no key)
TOKENS = [(7 * i + 3) % 64 for i in range(14)]


def _storage_keys(root, model=ModelConfig(), *, dtype=torch.float32, **cfg) -> list[str]:
    """The backend keys a real Engine uses for TOKENS (tree keys through `_storage_key`, the
    form its exists, prefetch reads and write-through take), with its host pool in `dtype`;
    rank 0 (stage 0)."""
    kw = dict(cp=1, pp=1, storage_dir=str(root), model=model) | cfg
    run = RunConfig(**kw)
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)          # the engine allocates its pools in the default dtype
    try:
        engine = Engine(run, _Comm(Topology(cp=run.cp, pp=run.pp, rank=0)), FileStorage(str(root)))
    finally:
        torch.set_default_dtype(before)
    try:
        assert engine.host_pool.dtype == dtype
        return [engine._storage_key(k) for k in engine.page_keys(TOKENS)]
    finally:
        engine.prefetch.close(5.0)
        engine.copies.close()


@pytest.mark.parametrize("other", [
    dict(dtype=torch.float64),                                  # other element type
    dict(model=ModelConfig(heads=4, head_dim=4)),               # other KV geometry, same bytes per page
    dict(model=ModelConfig(layers=2)),                          # other layer count per page
    dict(model=ModelConfig(seed=99)),                           # same format, other weights
    dict(pp=2),                                                 # stage 0 of two holds half the layers
], ids=["dtype", "heads-x-head_dim", "layers", "weights", "pp-stage"])
def test_two_page_formats_sharing_a_store_never_share_a_key(tmp_path, other):
    """KeyDerivation has no page-format field; the engine seeds every chain with
    storage_namespace instead, and every key it hands storage comes from that chain. Two
    engines whose pages hold other bytes for the same tokens get disjoint keys, so neither
    can read the other's page as a hit."""
    base = _storage_keys(tmp_path)
    assert len(base) == 3 and base == _storage_keys(tmp_path)        # deterministic
    assert set(base).isdisjoint(_storage_keys(tmp_path, **other))


@pytest.mark.parametrize("same", [dict(layout="page_first"), dict(cp=2)], ids=["layout", "cp"])
def test_settings_that_change_no_stored_byte_keep_the_keys(tmp_path, same):
    """The pool layout setting and the CP size change no stored byte (a CP page lives whole
    on its owner, stored as a contiguous copy of its host row): same keys, pages shared."""
    assert _storage_keys(tmp_path, **same) == _storage_keys(tmp_path)
