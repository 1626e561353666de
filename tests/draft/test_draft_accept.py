"""The draft model of `hicache run`: its acceptance rate is the same whether its prefix KV
was recomputed or restored from the cache; without the draft restore it collapses."""
from __future__ import annotations

import pytest

from hicache.dist.draft_accept import AcceptConfig, acceptance, compare
from hicache.dist.model import ModelConfig, TinyModel, draft_of


@pytest.mark.parametrize("layout", ["packed", "sidecar"])
def test_acceptance_same_with_and_without_cache_hits(layout):
    cfg = AcceptConfig(requests=10, layout=layout, seed=3)
    out = compare(cfg)
    assert out["hit_requests"] > 0 and out["host_hit_tokens"] > 0
    assert out["same_with_and_without_hits"]
    hits = out["acceptance_on_hits"]
    assert hits["cached"] == hits["recomputed"]
    assert out["acceptance"]["cached"] == out["acceptance"]["recomputed"]
    # bug 13: the draft attends over a prefix that was never restored
    assert hits["cached_without_draft_restore"] < hits["cached"]


def test_no_cache_run_has_no_hits():
    out = acceptance(AcceptConfig(requests=4), use_cache=False)
    assert out["hit_requests"] == [] and out["hit_tokens"] == 0
    assert out["proposed"] == 4 * AcceptConfig().generate
    assert 0 <= out["accepted"] <= out["proposed"]


def test_draft_of_shares_the_targets_first_layers():
    t = TinyModel(ModelConfig(layers=3))
    d = draft_of(t, 2)
    assert d.cfg.layers == 2 and d.wq[1] is t.wq[1] and d.unembed is t.unembed
    with pytest.raises(ValueError, match="layers must be in"):
        draft_of(t, 4)


def test_accept_config_is_validated():
    with pytest.raises(ValueError, match="suffix_tokens"):
        AcceptConfig(suffix_tokens=4, page_size=4)
    with pytest.raises(ValueError, match="requests"):
        AcceptConfig(requests=0)


def test_compare_under_verified_mode_measures_the_fault_instead_of_stopping_at_it(tmp_path, monkeypatch):
    """Under verified mode the bug-13 comparison's faulty run is built unmonitored (the fault
    is what it measures: a strict monitor stopped it at its first load); the fault-free runs
    still carry monitors and raise nothing."""
    from hicache import verified
    from hicache.runtime.cache import HiCache
    monitored = []
    verified.enable("strict", violation_dir=str(tmp_path))
    try:
        own = HiCache.__init__

        def spy(self, *a, **kw):
            own(self, *a, **kw)
            monitored.append(verified.monitor_of(self) is not None)
        monkeypatch.setattr(HiCache, "__init__", spy)
        out = compare(AcceptConfig(requests=10, layout="packed", seed=3))
    finally:
        monkeypatch.undo()      # (the spy off: HiCache's own __init__ again)
        verified.disable()
    assert out["acceptance_on_hits"]["cached_without_draft_restore"] < out["acceptance_on_hits"]["cached"]
    assert monitored == [True, False]          # the cached run checked, the faulty one not
    assert not list(tmp_path.iterdir())        # no violation written


def test_unmonitored_is_scoped_to_its_block(tmp_path):
    from hicache import verified
    from hicache.runtime.cache import HiCache
    from hicache.runtime.config import CacheConfig
    cfg = CacheConfig(page_size=4, device_pages=4, host_pages=4, metadata_only=True)
    verified.enable("strict", violation_dir=str(tmp_path))
    try:
        with verified.unmonitored():
            inside = HiCache(cfg)
        after = HiCache(cfg)
        assert verified.monitor_of(inside) is None and verified.monitor_of(after) is not None
        inside.close()
        after.close()
    finally:
        verified.disable()
