"""The DraftState monitor on every pool configuration the runtime accepts.

spec/DraftState.tla used to fix each draft pool's row and index source (`Row`, `SourceOf`),
so a strict monitor false-alarmed at the first step of a legal run whose pools differ from
those: a packed indexer or recurrent state with the target's rows (`PackedOnlyCompatible`),
a pool deriving its indices from another source than the spec's (`TransferLaunch`,
`IdxFor`). The rows and sources are now constants that `DraftStateMap` takes from the
configured pools. Each run below is checked twice: by the map (no alarm, right bytes) and
by the same map bound to the CI model's fixed rows and sources (the old spec's), which
must alarm, so the runs do exercise what the old constants could not describe.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from draft_support import (POOLS, DictStorage, compute, expected, pool_of, raised_on_the_scheduler,
                           target_config, wipe_device)
from hicache import REPO_ROOT
from hicache.kernels import HitPolicy, IndexSource
from hicache.monitors.attach import unmonitored
from hicache.monitors.maps.draft_state import DraftStateMap
from hicache.monitors.runtime import Monitor, ProtocolViolation, VerifyConfig
from hicache.runtime import draft
from hicache.runtime.cache import HiCache
from hicache.runtime.config import KVKind
from hicache.runtime.draft import DependentSet, DependentSpec, DraftConfig, Indexing, Role
from hicache.tla.cfg import load_cfg

TOKENS = list(range(200, 224))      # 6 pages of 4 tokens

#: the draft_support pools (draft KV sidecar, fp8 indexer, SWA of 2 trailing pages, fp32
#: recurrent state of the last page, from the SWA pool), by role
BASE = {
    Role.DRAFT_KV: DependentSpec(role=Role.DRAFT_KV, layout="sidecar", layers=1, heads=2, head_dim=4,
                                 dtype="float16"),
    Role.DRAFT_INDEXER: DependentSpec(role=Role.DRAFT_INDEXER, layers=1, kv_kind=KVKind.MLA, heads=1,
                                      head_dim=4, dtype="float8_e4m3fn"),
    Role.SWA: DependentSpec(role=Role.SWA, layers=2, heads=1, head_dim=4, dtype="float16",
                            hit_policy=HitPolicy.TRAILING_PAGES, trailing=2),
    Role.DRAFT_STATE: DependentSpec(role=Role.DRAFT_STATE, layers=1, kv_kind=KVKind.MLA, heads=1, head_dim=8,
                                    dtype="float32", indexing=Indexing.REQUEST, source=IndexSource.SWA,
                                    hit_policy=HitPolicy.TRAILING_PAGES, trailing=1),
}
#: the target's row (target_config: 2 heads x 4, float16, MHA), per token of every hit page
TARGET_ROW = dict(kv_kind=KVKind.MHA, heads=2, head_dim=4, dtype="float16", indexing=Indexing.TOKEN,
                  source=IndexSource.TARGET_KV, hit_policy=HitPolicy.ALL_PAGES)

#: configurations DraftConfig accepts whose rows or sources differ from the CI model's, and
#: the property the CI model's constants break on them
CONFIGS = {
    "packed_indexer": ({Role.DRAFT_INDEXER: dict(layout="packed", **TARGET_ROW)}, "PackedOnlyCompatible"),
    "packed_state": ({Role.DRAFT_STATE: dict(layout="packed", **TARGET_ROW)}, "PackedOnlyCompatible"),
    "state_from_target_kv": ({Role.DRAFT_STATE: dict(source=IndexSource.TARGET_KV)}, "TransferLaunch"),
    "draft_kv_from_swa": ({Role.DRAFT_KV: dict(source=IndexSource.SWA)}, "TransferLaunch"),
    "indexer_from_swa": ({Role.DRAFT_INDEXER: dict(source=IndexSource.SWA)}, "TransferLaunch"),
}

#: the rows and sources spec/DraftState.cfg fixes (what the spec hard-coded before)
CI_ROWS = {k: v for k, v in load_cfg(REPO_ROOT / "spec" / "DraftState.cfg").constants.items()
           if k.endswith(("Row", "Source"))}


class CIRowsMap(DraftStateMap):
    """The map with the CI model's rows and sources instead of the configured ones."""

    def constants(self) -> dict:
        return {**super().constants(), **CI_ROWS}



def draft_config(name: str) -> DraftConfig:
    changes, _ = CONFIGS[name]
    pools = [dataclasses.replace(p, **changes.get(role, {})) for role, p in BASE.items()]
    return DraftConfig(target_config(), tuple(pools))     # accepted: it is a legal config


def serve(name: str, tmp_path, map_cls=DraftStateMap, actions: bool = True, storage=None):
    """Compute TOKENS, evict the device copy, restore it from host (or from storage into a
    second cache), read every pool, under a strict monitor. Returns (cache, deps, req, the
    first violation or None)."""
    cfg = draft_config(name)
    if storage is not None:
        first, deps_first = _cache(cfg, storage)
        compute(first, deps_first, TOKENS)
        first.close()
    cache, deps = _cache(cfg, storage)
    mon = Monitor(map_cls(deps, actions=actions),
                  VerifyConfig(mode="strict", violation_dir=str(tmp_path)))
    deps.bus.subscribe(mon)
    req = None
    try:
        if storage is None:
            compute(cache, deps, TOKENS)
            assert cache.evict_device(cache.cfg.device_pages) == cache.cfg.device_pages
        wipe_device(cache, deps)
        req = cache.match(TOKENS)
        assert req.device_hit == 0
        if storage is not None:
            assert cache.prefetch(req) and cache.finish_prefetch(req) == 6
        op = cache.load_back(req, **({"_tier": "storage"} if storage is not None else {}))
        assert op is not None and op.wait(30)
        if op.error is not None:                  # raised on the loader thread, kept on the op
            return cache, deps, req, op.error
        for role in POOLS:
            deps.read(req, None if role == "target" else role)
    except ProtocolViolation as e:                # raised on this thread
        return cache, deps, req, e
    assert mon.checked == mon.steps > 0           # every event was a checked spec step
    return cache, deps, req, None


def _cache(cfg: DraftConfig, storage):
    deps = DependentSet(cfg)
    return HiCache(cfg.target, storage=storage, deps=deps), deps


def assert_restored(cache, deps, req) -> None:
    for name in POOLS:
        got = deps.read(req, None if name == "target" else name)
        want = expected(name, deps, TOKENS, 6, pool_of(cache, deps, name).page_nbytes)
        assert len(got) == len(want), name
        for i, (g, w) in enumerate(zip(got, want)):
            assert torch.equal(g, w), f"{name}: restored page {i} differs from what was written"


@pytest.mark.parametrize("actions", [True, False])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_legal_config_raises_no_violation(name, actions, tmp_path):
    cache, deps, req, err = serve(name, tmp_path, actions=actions)
    assert err is None, f"false alarm on a configuration the runtime accepts: {err}"
    assert_restored(cache, deps, req)
    cache.finish(req)
    cache.close()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_ci_models_rows_and_sources_would_alarm(name, tmp_path):
    """The regression: the same legal run, checked with the rows and sources the spec used
    to fix, is rejected at its first step that depends on them."""
    with unmonitored():        # (the old constants' own monitor is under test)
        cache, deps, req, err = serve(name, tmp_path, map_cls=CIRowsMap)
    assert isinstance(err, ProtocolViolation), err
    assert err.property == CONFIGS[name][1]
    assert err.location.startswith("spec/DraftState.tla:")
    cache.close()


def test_storage_hit_with_a_packed_indexer(tmp_path):
    store = DictStorage()
    cache, deps, req, err = serve("packed_indexer", tmp_path, storage=store)
    assert err is None, err
    assert len(store.data) == 6 and req.storage_hit == 6
    assert_restored(cache, deps, req)
    cache.finish(req)
    cache.close()


def test_map_supplies_the_configured_rows_and_sources():
    c = DraftStateMap(DependentSet(draft_config("packed_indexer"))).constants()
    assert c["DraftIndexerRow"] == c["TargetRow"] == "float16/mha/8/token"
    assert c["DraftStateRow"] == "float32/mla/8/request trailing_pages=1"
    assert (c["DraftKVSource"], c["DraftIndexerSource"], c["DraftStateSource"]) == ("kv", "kv", "swa")
    c = DraftStateMap(DependentSet(draft_config("draft_kv_from_swa"))).constants()
    assert (c["DraftKVSource"], c["DraftIndexerSource"], c["DraftStateSource"]) == ("swa", "kv", "swa")
    assert c["DraftIndexerRow"] == "float8_e4m3fn/mla/4/token" != c["TargetRow"]


@pytest.mark.parametrize("layout,action,conjunct", [
    ("packed_indexer", "TargetCopyFinish", "Packed \\subseteq draftDone[t]"),
    ("state_from_target_kv", "CompletionFire", "BugFireOnTargetOnly \\/ draftDone[t] = DraftPools"),
])
def test_bug_13_is_still_caught_in_these_configs(layout, action, conjunct, tmp_path):
    """The configured constants widen what the monitor accepts only by what the runtime may
    legally do: a load-back that skips the draft restores is still named."""
    draft.FAULTS.skip_draft_restore = True
    with unmonitored():        # (serve's own monitor is under test)
        cache, deps, req, err = serve(layout, tmp_path)
    assert isinstance(err, ProtocolViolation), err
    assert (err.action, err.conjunct) == (action, conjunct)
    raised_on_the_scheduler(cache.close, err)    # the loader's violation, on the scheduler


def test_an_incompatible_pool_the_runtime_wrongly_packs_is_caught(monkeypatch, tmp_path):
    """The map computes row signatures from the pools' geometry, not from the runtime's own
    refusal check: if that check let the fp8 indexer be packed, PackedOnlyCompatible says so
    at the first step."""
    monkeypatch.setattr(draft, "packed_refusal", lambda target, spec: None)
    pools = [dataclasses.replace(p, layout="packed") if role is Role.DRAFT_INDEXER else p
             for role, p in BASE.items()]
    with unmonitored():        # (this test's own monitor is under test)
        deps = DependentSet(DraftConfig(target_config(), tuple(pools)))
        cache = HiCache(deps.cfg.target, deps=deps)
    mon = Monitor(DraftStateMap(deps), VerifyConfig(mode="strict", violation_dir=str(tmp_path)))
    deps.bus.subscribe(mon)
    with pytest.raises(ProtocolViolation) as e:
        deps.launch("gather", [0, 1], [0, 1])
    assert (e.value.property, e.value.action) == ("PackedOnlyCompatible", "TransferLaunch")
    cache.close()


def test_the_spec_checks_with_other_rows_and_sources():
    """The model checker agrees at the spec level: with every pool's row the target's and the
    sources swapped, every layout is an initial state and the invariants hold."""
    from hicache.tla.checker import Checker, build
    from hicache.tla.compiler import UNSET
    cfg = load_cfg(REPO_ROOT / "spec" / "DraftState.cfg")
    row = cfg.constants["TargetRow"]
    cfg.constants.update(NTransfers=1, DraftIndexerRow=row, DraftStateRow=row,
                         DraftKVSource="swa", DraftStateSource="kv")
    ck = build(REPO_ROOT / "spec" / "DraftState.tla", cfg)
    n = len(ck.model.variables)
    assert len(ck.init((), [UNSET] * n, ())) == 2 ** 3      # packed or sidecar, each pool
    res = Checker(ck).run()
    assert res.result == "ok", res.error
