"""Verified mode checks the draft runtime: every `DependentSet` created while it is on carries a
DraftState monitor, from `hicache.verified.enable` or from HICACHE_VERIFY, whichever draft
roles it configures; before, only the HiCache got a monitor and a draft restore that fired
its completion early (bug 13) went unchecked unless a test attached the monitor by hand."""
from __future__ import annotations

import sys

import pytest
import torch

from draft_support import (DictStorage, draft_config, expected, pool_of, raised_on_the_scheduler, target_config,
                           wipe_device)
from draft_support import compute as serve
from hicache.kernels import HitPolicy, IndexSource
from hicache.monitors import attach as registry
from hicache.monitors.maps.draft_state import DraftStateMap
from hicache.monitors.runtime import Mode, ProtocolViolation
from hicache.runtime import draft
from hicache.runtime.cache import HiCache
from hicache.runtime.config import KVKind
from hicache.runtime.draft import DependentSet, DependentSpec, DraftConfig, Indexing, Role

TOKENS = list(range(300, 324))      # 6 pages of 4 tokens

_KV = dict(role=Role.DRAFT_KV, layers=1, heads=2, head_dim=4, dtype="float16")
_INDEXER = dict(role=Role.DRAFT_INDEXER, layers=1, kv_kind=KVKind.MLA, heads=1, head_dim=4,
                dtype="float8_e4m3fn")
_SWA = dict(role=Role.SWA, layers=2, heads=1, head_dim=4, dtype="float16",
            hit_policy=HitPolicy.TRAILING_PAGES, trailing=2)
_STATE = dict(role=Role.DRAFT_STATE, layers=1, kv_kind=KVKind.MLA, heads=1, head_dim=8, dtype="float32",
              indexing=Indexing.REQUEST, source=IndexSource.SWA, hit_policy=HitPolicy.TRAILING_PAGES, trailing=1)

#: pool configurations DraftConfig accepts: every draft role (draft_support's), and fewer
#: (a draft KV alone is the usual speculative decoding); the map gives an absent role no bytes
CONFIGS = {
    "all_packed": lambda t: draft_config(t, "packed"),
    "all_sidecar": lambda t: draft_config(t, "sidecar"),
    "draft_kv_packed": lambda t: DraftConfig(t, (DependentSpec(layout="packed", **_KV),)),
    "draft_kv_sidecar": lambda t: DraftConfig(t, (DependentSpec(**_KV),)),
    "indexer_only": lambda t: DraftConfig(t, (DependentSpec(**_INDEXER),)),
    "swa_and_state": lambda t: DraftConfig(t, (DependentSpec(**_SWA), DependentSpec(**_STATE))),
    "swa_only": lambda t: DraftConfig(t, (DependentSpec(**_SWA),)),
    "no_pools": lambda t: DraftConfig(t, ()),
}

#: bug 13 on a host hit under strict verified mode: (action, conjunct) the monitor names. A
#: packed pool rides in the target's copy, which cannot finish without it; a sidecar's missing
#: copy is found when the completion fires
BUG13 = {
    "all_packed": ("TargetCopyFinish", "Packed \\subseteq draftDone[t]"),
    "all_sidecar": ("CompletionFire", "BugFireOnTargetOnly \\/ draftDone[t] = DraftPools"),
    "draft_kv_packed": ("TargetCopyFinish", "Packed \\subseteq draftDone[t]"),
    "draft_kv_sidecar": ("CompletionFire", "BugFireOnTargetOnly \\/ draftDone[t] = DraftPools"),
    "indexer_only": ("CompletionFire", "BugFireOnTargetOnly \\/ draftDone[t] = DraftPools"),
    "swa_and_state": ("CompletionFire", "BugFireOnTargetOnly \\/ draftDone[t] = DraftPools"),
}




def make(name: str, storage=None) -> tuple[HiCache, DependentSet]:
    tcfg = target_config()
    deps = DependentSet(CONFIGS[name](tcfg))
    return HiCache(tcfg, storage=storage, deps=deps), deps


def names(deps: DependentSet) -> list[str]:
    return ["target", *(p.role.value for p in deps.cfg.pools)]


def compute(cache: HiCache, deps: DependentSet) -> None:
    """Serve TOKENS from scratch: every registered pool's pages, inserted, backed up to host."""
    serve(cache, deps, TOKENS, names(deps))


def host_hit(cache: HiCache, deps: DependentSet):
    """Compute, evict the device copy, zero the device pools, load the prefix back from host."""
    compute(cache, deps)
    assert cache.evict_device(cache.cfg.device_pages) == cache.cfg.device_pages
    wipe_device(cache, deps)
    req = cache.match(TOKENS)
    assert req.device_hit == 0
    op = cache.load_back(req)
    assert op is not None and op.wait(30)
    return req, op


def assert_restored(cache: HiCache, deps: DependentSet, req) -> None:
    for name in names(deps):
        got = deps.read(req, None if name == "target" else name)
        want = expected(name, deps, TOKENS, 6, pool_of(cache, deps, name).page_nbytes)
        assert len(got) == len(want), name
        for i, (g, w) in enumerate(zip(got, want)):
            assert torch.equal(g, w), f"{name}: restored page {i} differs from what was written"


def count_final_checks(mon) -> list:
    checks: list = []
    real = mon.cache_check
    mon.cache_check = lambda: (checks.append(1), real())[1]
    return checks


# ------------------------------------------------------------------ attaching
def test_enable_attaches_a_draft_state_monitor_to_each_new_draft_runtime(tmp_path, verified):
    verified.enable("strict", violation_dir=str(tmp_path))
    cache, deps = make("all_packed")
    mon = verified.monitor_of(deps)
    assert mon is not None and isinstance(mon.rmap, DraftStateMap) and mon.rmap.deps is deps
    assert mon.cfg.mode is Mode.STRICT and mon.rmap.needs_prestate        # actions checked too
    assert deps.bus.listeners == [mon]
    assert verified.monitor_of(cache) is not None and verified.monitor_of(cache) is not mon
    assert verified.attach(deps) is mon                 # idempotent: one monitor per set
    checks = count_final_checks(mon)
    req, op = host_hit(cache, deps)
    assert op.error is None
    assert_restored(cache, deps, req)
    cache.finish(req)
    cache.close()                                       # closes the set: its final check
    assert checks == [1]
    assert mon.checked == mon.steps == 18               # 2 transfers of 7 steps, 4 first reads
    assert registry.monitor_report(deps) == [{"spec": "spec/DraftState.tla", "what": None, "events": 18, "checked": 18,
                                              "cache_checks": 1, "budget_skipped": 0, "triggered": 0}]


@pytest.mark.parametrize("mode", ["strict", "sample"])
def test_a_monitored_cache_and_draft_set_are_collected_once_dropped(mode, tmp_path, verified):
    """The registry of monitors keeps no cache alive: once a verified-mode cache, its draft
    set and their monitors are dropped, a collection frees them all. (The registry's values
    were the monitors themselves, which hold their caches, so every monitored cache of the
    process stayed alive for good, its KV pools and the monitor's history with it: a sweep
    of replays in sample mode grew by ~100 MB a replay.)"""
    import gc
    import weakref
    verified.enable(mode, violation_dir=str(tmp_path))
    cache, deps = make("all_packed")
    req, op = host_hit(cache, deps)
    cache.finish(req)
    mons = [verified.monitor_of(cache), verified.monitor_of(deps)]
    assert all(m is not None for m in mons)
    refs = [weakref.ref(x) for x in (cache, deps, *mons)]
    cache.close()
    del cache, deps, req, op, mons
    gc.collect()
    assert [r() for r in refs] == [None] * 4


def test_hicache_verify_attaches_from_the_environment(monkeypatch, tmp_path, verified):
    """HICACHE_VERIFY=strict, no mode chosen in code: the set attaches its own monitor at
    construction and its cache's close runs the final check once; off attaches nothing."""
    verified.disable()                                  # (its import chose strict: no wrappers)
    monkeypatch.setattr(registry, "_chosen", [None])    # no verified mode chosen in code
    monkeypatch.setenv("HICACHE_VERIFY", "strict")
    monkeypatch.setenv("HICACHE_VIOLATION_DIR", str(tmp_path))
    cache, deps = make("draft_kv_sidecar")
    mon = registry.monitor_of(deps)
    assert mon is not None and mon.cfg.mode is Mode.STRICT and mon.cfg.violation_dir == str(tmp_path)
    checks = count_final_checks(mon)
    req, op = host_hit(cache, deps)
    assert op.error is None
    assert_restored(cache, deps, req)
    cache.finish(req)
    cache.close()
    assert checks == [1]
    assert mon.checked == mon.steps == 12               # 2 transfers of 5 steps, 2 first reads
    monkeypatch.setenv("HICACHE_VERIFY", "off")
    _, quiet = make("draft_kv_sidecar")
    assert registry.monitor_of(quiet) is None and quiet.bus.listeners == []


def test_a_mode_chosen_in_code_wins_over_hicache_verify(monkeypatch, tmp_path, verified):
    monkeypatch.setenv("HICACHE_VERIFY", "strict")
    verified.enable("sample", violation_dir=str(tmp_path))
    _, deps = make("all_sidecar")
    mon = verified.monitor_of(deps)
    assert mon.cfg.mode is Mode.SAMPLE and deps.bus.listeners == [mon]      # one monitor, not two


def test_enable_and_disable_leave_the_draft_runtime_and_disable_attaches_nothing(tmp_path, verified):
    """Neither call patches DependentSet (its constructor asks verify_hook); after disable a
    new set carries no monitor."""
    verified.disable()
    init, close = vars(DependentSet)["__init__"], vars(DependentSet)["close"]
    verified.enable("strict", violation_dir=str(tmp_path))
    assert vars(DependentSet)["__init__"] is init and vars(DependentSet)["close"] is close
    cache, deps = make("all_packed")
    assert verified.monitor_of(deps) is not None
    cache.close()
    verified.disable()
    assert vars(DependentSet)["__init__"] is init and vars(DependentSet)["close"] is close
    cache, deps = make("all_packed")
    assert verified.monitor_of(deps) is None and deps.bus.listeners == []
    cache.close()


# ------------------------------------------------------------------ legal runs raise nothing
@pytest.mark.parametrize("mode", ["strict", "sample"])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_legal_configs_raise_nothing_under_verified_mode(name, mode, tmp_path, verified):
    """Every configuration DraftConfig accepts, fewer draft roles than the spec's three too:
    a host hit restores the right bytes and the monitor counts its steps without an alarm."""
    verified.enable(mode, sample_rate=1.0, sample_budget=None, violation_dir=str(tmp_path))
    cache, deps = make(name)
    mon = verified.monitor_of(deps)
    req, op = host_hit(cache, deps)
    assert op.error is None, op.error
    assert_restored(cache, deps, req)
    cache.finish(req)
    cache.close()
    draft_reads = 1 + sum(p.role is not Role.SWA for p in deps.cfg.pools)   # target + each draft pool
    per_transfer = 4 + sum(p.role is not Role.SWA for p in deps.cfg.pools)  # launch, target, fire, retire
    assert mon.checked == mon.steps == 2 * per_transfer + draft_reads
    assert not list(tmp_path.iterdir())                 # no violation trace written


@pytest.mark.parametrize("name", ["draft_kv_packed", "swa_and_state", "no_pools"])
def test_storage_hit_with_fewer_draft_roles_raises_nothing(name, tmp_path, verified):
    verified.enable("strict", violation_dir=str(tmp_path))
    store = DictStorage()
    first, deps_first = make(name, store)
    compute(first, deps_first)
    first.close()
    cache, deps = make(name, store)
    mon = verified.monitor_of(deps)
    req = cache.match(TOKENS)
    assert cache.prefetch(req) and cache.finish_prefetch(req) == 6
    op = cache.load_back(req, _tier="storage")
    assert op is not None and op.wait(30) and op.error is None, op.error
    assert_restored(cache, deps, req)
    cache.finish(req)
    cache.close()
    assert mon.checked == mon.steps > 0
    assert {s.args["kind"] for s in mon.history if s.action == "TransferLaunch"} == {"prefetch", "load"}
    assert deps.transfers == {}                         # each retired once nobody could read it


def test_sample_mode_honours_the_rate(tmp_path, verified):
    """Sample mode checks the invariants on a seeded fraction of the events (no action
    checks: an unsampled event maps nothing), and on every state at the final check."""
    verified.enable("sample", sample_rate=0.5, seed=3, sample_budget=None, violation_dir=str(tmp_path))
    cache, deps = make("all_sidecar")
    mon = verified.monitor_of(deps)
    assert mon.cfg.sample_rate == 0.5 and not mon.rmap.needs_prestate
    checks = count_final_checks(mon)
    req, _ = host_hit(cache, deps)
    assert_restored(cache, deps, req)
    cache.finish(req)
    cache.close()
    assert 0 < mon.checked < mon.steps == 18 and checks == [1]


# ------------------------------------------------------------------ bug 13, no manual attach
@pytest.mark.parametrize("name", sorted(BUG13))
def test_skipped_draft_restore_is_named_in_strict_mode(name, tmp_path, verified):
    verified.enable("strict", violation_dir=str(tmp_path))
    draft.FAULTS.skip_draft_restore = True
    cache, deps = make(name)
    _, op = host_hit(cache, deps)
    err = op.error                      # raised on the loader thread, kept on the op
    assert isinstance(err, ProtocolViolation), err
    assert err.spec == "spec/DraftState.tla" and err.kind == "action"
    assert (err.action, err.conjunct) == BUG13[name]
    assert err.property == BUG13[name][0]
    assert err.location.startswith("spec/DraftState.tla:")
    assert err.trace_path and (tmp_path / err.trace_path.split("/")[-1]).exists()
    # the loader thread kept it on the op; the scheduler's next poll (here close's drain)
    # raises it: a violation no longer stays on an op while the run goes on
    raised_on_the_scheduler(cache.close, err)
    assert not any(w._thread.is_alive() for w in (cache.loader, cache.writer))    # workers stopped


def test_skipped_draft_restore_is_named_from_the_environment(monkeypatch, tmp_path, verified):
    verified.disable()
    monkeypatch.setattr(registry, "_chosen", [None])
    monkeypatch.setenv("HICACHE_VERIFY", "strict")
    monkeypatch.setenv("HICACHE_VIOLATION_DIR", str(tmp_path))
    draft.FAULTS.skip_draft_restore = True
    cache, deps = make("draft_kv_sidecar")
    _, op = host_hit(cache, deps)
    assert isinstance(op.error, ProtocolViolation), op.error
    assert (op.error.property, op.error.action) == ("CompletionFire", "CompletionFire")
    raised_on_the_scheduler(cache.close, op.error)


def test_sample_mode_at_rate_zero_still_catches_at_close(tmp_path, verified):
    """No event sampled: the final check at close finds the fired, incomplete transfer."""
    verified.enable("sample", sample_rate=0.0, violation_dir=str(tmp_path))
    draft.FAULTS.skip_draft_restore = True
    cache, deps = make("draft_kv_packed")
    _, op = host_hit(cache, deps)
    assert op.error is None
    mon = verified.monitor_of(deps)
    # backup 5 (its retire as it fires), the faulty load 4: the fault skips the draft copy,
    # not its finish event, which reports the rows the copy moved (none). Only the backup's
    # retire was checked (every retire is, outside the draw)
    assert mon.steps == 9 and mon.checked == 1
    with pytest.raises(ProtocolViolation) as e:
        cache.close()
    assert (e.value.property, e.value.kind) == ("CompletionAfterAllCopies", "invariant")


def test_cache_check_checks_the_draft_runtime(tmp_path, verified):
    verified.enable("strict", violation_dir=str(tmp_path))
    cache, deps = make("all_sidecar")
    req, op = host_hit(cache, deps)     # its load-back stays live while req may read it
    verified.cache_check(deps)          # a legal state
    deps.transfers[op.draft_tid].done.discard("draft_indexer")     # a fired load missing a copy
    with pytest.raises(ProtocolViolation) as e:
        verified.cache_check(deps)
    assert e.value.property == "CompletionAfterAllCopies"
    cache.close()


# ------------------------------------------------------------------ one violation, reported once
def test_a_violation_that_stops_an_operation_is_the_one_reported(monkeypatch, tmp_path, verified):
    """A DraftState violation raised inside `cache.backup()` (the runtime wrongly packs the
    fp8 indexer) stops the backup half done: host slots reserved, no HostTier event yet. The
    `with` block's close then tripped the HostTier monitor (SlotInOneOwner) and that second,
    misleading violation replaced the real one, with a second trace. Now the monitors of one
    cache trip together and close() after an error is noted on it, not raised instead."""
    import dataclasses
    monkeypatch.setattr(draft, "packed_refusal", lambda target, spec: None)
    verified.enable("strict", violation_dir=str(tmp_path))
    t = target_config()
    pools = [dataclasses.replace(p, layout="packed") if p.role is Role.DRAFT_INDEXER else p
             for p in draft_config(t, "sidecar").pools]
    deps = DependentSet(DraftConfig(t, tuple(pools)))
    with pytest.raises(ProtocolViolation) as e:
        with HiCache(t, deps=deps) as cache:
            compute(cache, deps)
    assert (e.value.spec, e.value.property) == ("spec/DraftState.tla", "PackedOnlyCompatible")
    assert [p.name for p in tmp_path.iterdir()] == [e.value.trace_path.split("/")[-1]]
    assert verified.monitor_of(cache).tripped and verified.monitor_of(deps).tripped


def test_a_second_close_runs_no_second_final_check(tmp_path, verified):
    verified.enable("strict", violation_dir=str(tmp_path))
    cache, deps = make("all_packed")
    checks = {id(o): count_final_checks(verified.monitor_of(o)) for o in (cache, deps)}
    for _ in range(2):
        cache.close()
        deps.close()
    assert [len(c) for c in checks.values()] == [1, 1]


# ------------------------------------------------------------------ the suite's fixture
def test_left_enabled_on_purpose(tmp_path, verified):
    """Leaves verified mode on (no disable): the conftest fixture restores the run's mode
    after this test, which the next test checks."""
    verified.enable("strict", violation_dir=str(tmp_path))
    _, deps = make("no_pools")
    assert verified.monitor_of(deps) is not None


def test_the_fixture_restored_the_runs_mode(request):
    """(Runs after the test above, in file order.) The run's own mode holds again: off, the
    draft runtime's own methods and no monitor; under --hicache-verify, that mode's monitor."""
    mode = getattr(request.config, "_hicache_verify", None)
    _, deps = make("no_pools")
    mon = registry.monitor_of(deps)
    if mode is None:
        verified = sys.modules.get("hicache.verified")    # (None: this test ran alone)
        if verified is not None:
            assert not verified.enabled() and verified.current().mode is Mode.OFF
        assert not hasattr(DependentSet.__init__, "__wrapped__")     # its own, not a wrapper
        assert not hasattr(DependentSet.close, "__wrapped__")
        assert mon is None and deps.bus.listeners == []
    else:
        # the run's whole configuration, not just its mode: the trace directory too (a test's
        # enable(..., violation_dir=its tmp_path) sent every later test's traces there)
        assert mon is not None and mon.cfg == request.config._hicache_verify_config
