"""Dependent pools restore with the target: bytes after host and storage hits, completion
events after every copy, the DraftState monitor on the runtime's events, refused packing."""
from __future__ import annotations

import pytest
import torch

from draft_support import (POOLS, DictStorage, compute, draft_config, expected, make_cache, pool_of,
                           raised_on_the_scheduler, target_config, wipe_device)
from hicache.monitors.attach import unmonitored
from hicache.monitors.runtime import Monitor, ProtocolViolation, VerifyConfig
from hicache.runtime import draft
from hicache.runtime.draft import DependentSpec, DraftConfig, Role
from hicache.monitors.maps.draft_state import DraftStateMap
from hicache.runtime.events import Recorder

TOKENS = list(range(100, 124))      # 6 pages of 4 tokens



def _restored(cache, deps, req):
    out = {}
    for name in POOLS:
        out[name] = deps.read(req, None if name == "target" else name)
    return out


def _assert_bytes(cache, deps, req, n_pages):
    got = _restored(cache, deps, req)
    for name in POOLS:
        nb = pool_of(cache, deps, name).page_nbytes
        want = expected(name, deps, TOKENS, n_pages, nb)
        assert len(got[name]) == len(want), name
        for i, (g, w) in enumerate(zip(got[name], want)):
            assert torch.equal(g, w), f"{name}: restored page {i} differs from what was written"


def _host_hit(draft_layout, host_layout, monitor_mode=None, actions=True):
    cache, deps = make_cache(draft_layout=draft_layout, host_layout=host_layout)
    mon = None
    if monitor_mode:
        mon = Monitor(DraftStateMap(deps, actions=actions), VerifyConfig(mode=monitor_mode))
        deps.bus.subscribe(mon)
    compute(cache, deps, TOKENS)
    assert cache.evict_device(cache.cfg.device_pages) == cache.cfg.device_pages
    wipe_device(cache, deps)
    req = cache.match(TOKENS)
    assert req.device_hit == 0
    op = cache.load_back(req)
    assert op is not None and len(op.pages) == 6
    return cache, deps, req, op, mon


@pytest.mark.parametrize("draft_layout", ["packed", "sidecar"])
@pytest.mark.parametrize("host_layout", ["layer_first", "page_first", "page_first_direct"])
def test_host_hit_restores_every_dependent_pool(draft_layout, host_layout):
    cache, deps, req, op, mon = _host_hit(draft_layout, host_layout, monitor_mode="strict")
    _assert_bytes(cache, deps, req, 6)
    assert op.error is None
    # the draft-state restore is exactly what the hit policy selects
    assert deps.pages_of("draft_state", op.pages) == op.pages[-1:]
    assert deps.pages_of("swa", op.pages) == op.pages[-2:]
    assert deps.pages_of("draft_indexer", op.pages) == op.pages
    cache.finish(req)
    cache.close()
    assert mon.checked == mon.steps > 0


@pytest.mark.parametrize("draft_layout", ["packed", "sidecar"])
def test_storage_hit_restores_every_dependent_pool(draft_layout):
    store = DictStorage()
    a, deps_a = make_cache(store, draft_layout=draft_layout)
    compute(a, deps_a, TOKENS)
    a.close()
    assert len(store.data) == 6
    b, deps = make_cache(store, draft_layout=draft_layout)
    mon = Monitor(DraftStateMap(deps), VerifyConfig(mode="strict"))
    deps.bus.subscribe(mon)
    req = b.match(TOKENS)
    assert req.device_hit == 0 and b.prefetch(req)
    assert b.finish_prefetch(req) == 6
    op = b.load_back(req, _tier="storage")
    assert op is not None and req.storage_hit == 6
    _assert_bytes(b, deps, req, 6)
    b.finish(req)
    b.close()
    assert mon.checked == mon.steps > 0


def test_completion_fires_after_every_copy():
    cache, deps = make_cache(draft_layout="packed")
    rec = Recorder()
    deps.bus.subscribe(rec)
    compute(cache, deps, TOKENS)
    cache.evict_device(cache.cfg.device_pages)
    req = cache.match(TOKENS)
    cache.load_back(req)
    deps.read(req, "draft_kv")
    cache.finish(req)
    cache.close()
    by_t: dict[int, list] = {}
    for e in rec.events:
        by_t.setdefault(e.args["t"], []).append((str(e.action), e.args.get("p")))
    kinds = [e.args["kind"] for e in rec.events if e.action == "TransferLaunch"]
    assert kinds == ["backup", "load"]
    for t, evs in by_t.items():
        names = [a for a, _ in evs]
        fire = names.index("CompletionFire")
        assert names[0] == "TransferLaunch"
        # packed rows finish with the target's copy, before it is declared finished
        assert evs[1] == ("DraftCopyFinish", "draft_kv") and names[2] == "TargetCopyFinish"
        assert sorted(p for a, p in evs[:fire] if a == "DraftCopyFinish") == \
            ["draft_indexer", "draft_kv", "draft_state"]
        # reads only after the completion; retired last (a backup when it fires: nobody
        # reads it; the load when its request finished)
        assert names[-1] == "TransferRetire"
        assert all(a == "BufferRead" for a in names[fire + 1:-1])
    assert by_t[1] == by_t[1][:fire + 1] + [("TransferRetire", None)]
    assert by_t[2][-2:] == [("BufferRead", "draft_kv"), ("TransferRetire", None)]
    assert deps.transfers == {}


@pytest.mark.parametrize("layout,actions,action,prop,conjunct", [
    # packed rows ride in the target's launch: the target copy cannot finish without them
    ("packed", True, "TargetCopyFinish", "TargetCopyFinish", "Packed \\subseteq draftDone[t]"),
    ("sidecar", True, "CompletionFire", "CompletionFire", "BugFireOnTargetOnly \\/ draftDone[t] = DraftPools"),
    ("packed", False, "CompletionFire", "CompletionAfterAllCopies", None),
    ("sidecar", False, "CompletionFire", "CompletionAfterAllCopies", None),
])
def test_fault_skip_draft_restore_is_named_by_the_monitor(layout, actions, action, prop, conjunct, tmp_path):
    draft.FAULTS.skip_draft_restore = True
    with unmonitored():        # (this test's own monitor, not verified mode's, is under test)
        cache, deps = make_cache(draft_layout=layout)
    mon = Monitor(DraftStateMap(deps, actions=actions),
                  VerifyConfig(mode="strict", violation_dir=str(tmp_path)))
    deps.bus.subscribe(mon)
    compute(cache, deps, TOKENS)           # backups are not affected by the fault
    cache.evict_device(cache.cfg.device_pages)
    wipe_device(cache, deps)
    req = cache.match(TOKENS)
    op = cache.load_back(req)
    op.wait()
    err = op.error                         # raised on the loader thread, kept on the op
    assert isinstance(err, ProtocolViolation), err
    assert (err.property, err.action) == (prop, action)
    assert err.kind == ("action" if actions else "invariant")
    if conjunct is not None:
        assert err.conjunct == conjunct
    assert err.location.startswith("spec/DraftState.tla:")
    assert err.trace_path and (tmp_path / err.trace_path.split("/")[-1]).exists()
    cache.finish(req)
    raised_on_the_scheduler(cache.close, err)    # the loader's violation, on the scheduler


def test_fault_off_by_default():
    assert draft.Faults.skip_draft_restore is False


def test_fault_skip_draft_restore_loses_the_draft_bytes():
    """Without a monitor the fault is silent: the completion fires, the draft pools hold zeros
    (what the draft model would then read), the target is intact."""
    draft.FAULTS.skip_draft_restore = True
    with unmonitored():        # (what the fault does with no monitor at all)
        cache, deps = make_cache(draft_layout="sidecar")
    compute(cache, deps, TOKENS)
    cache.evict_device(cache.cfg.device_pages)
    wipe_device(cache, deps)
    req = cache.match(TOKENS)
    cache.load_back(req)
    got = _restored(cache, deps, req)
    nb = cache.device_pool.page_nbytes
    assert all(torch.equal(g, w) for g, w in zip(got["target"], expected("target", None, TOKENS, 6, nb)))
    for name in ("draft_kv", "draft_indexer", "draft_state"):
        assert all(int(g.count_nonzero()) == 0 for g in got[name]), name
    cache.finish(req)
    cache.close()


@pytest.mark.parametrize("field,value,reason", [
    ("dtype", "bfloat16", "dtype bfloat16 != target float16"),
    ("head_dim", 8, "row 2x8 != target 2x4"),
    ("hit_policy", "trailing_pages", "hit_policy trailing_pages"),
])
def test_incompatible_packed_layout_is_refused_with_the_reason(field, value, reason):
    tcfg = target_config()
    kw = dict(role=Role.DRAFT_KV, layout="packed", layers=1, heads=2, head_dim=4, dtype="float16")
    kw[field] = value
    with pytest.raises(ValueError, match=r"pools\[0\]\.layout: packed layout refused for draft_kv: "
                                         + reason.replace("(", r"\(")):
        DraftConfig(tcfg, (DependentSpec(**kw),))


def test_packed_indexer_and_request_state_are_refused():
    tcfg = target_config()
    base = draft_config(tcfg, "sidecar").pools
    for i, why in ((1, "dtype float8_e4m3fn != target float16"), (3, "dtype float32 != target float16")):
        pools = list(base)
        pools[i] = DependentSpec(**{**{f: getattr(base[i], f) for f in DependentSpec.__dataclass_fields__},
                                    "layout": "packed"})
        with pytest.raises(ValueError, match=f"pools\\[{i}\\].layout: packed layout refused .*{why}"):
            DraftConfig(tcfg, tuple(pools))


def test_swa_source_requires_an_swa_pool():
    tcfg = target_config()
    state = draft_config(tcfg).pools[3]
    with pytest.raises(ValueError, match=r"pools\[0\]\.source: draft_state derives from swa"):
        DraftConfig(tcfg, (state,))


def test_one_dependent_set_serves_one_cache():
    """A second HiCache given the same DependentSet used to take its pools over silently: the
    first cache's restores then copied the second one's bytes (wrong KV, no error)."""
    from hicache.runtime.cache import HiCache
    cache, deps = make_cache()
    pools = dict(deps.device)
    with pytest.raises(ValueError, match="already attached to another HiCache"):
        HiCache(cache.cfg, deps=deps)
    assert deps.cache is cache and deps.device == pools      # nothing of the first one changed
    # the first cache still restores its own bytes
    compute(cache, deps, TOKENS)
    assert cache.evict_device(cache.cfg.device_pages) == cache.cfg.device_pages
    wipe_device(cache, deps)
    req = cache.match(TOKENS)
    op = cache.load_back(req)
    assert op is not None and op.wait(10)
    cache.poll()
    _assert_bytes(cache, deps, req, 6)
    cache.close()


def test_misuse_of_the_dependent_set_is_named():
    """Each was a KeyError or AttributeError from inside the set."""
    tcfg = target_config()
    loose = draft.DependentSet(draft_config(tcfg))
    with pytest.raises(ValueError, match="not attached to a HiCache"):
        loose.read(None, None)
    cache, deps = make_cache(draft_layout="sidecar")
    with pytest.raises(ValueError, match="role: 'bogus' is not one of"):
        deps.pages_of("bogus", [0])
    with pytest.raises(ValueError, match="kind: 'bogus' is not one of"):
        deps.launch("bogus", [0], [0])
    tid = deps.launch("gather", [0, 1], [0, 1])
    deps.finish_target(tid)
    for s in deps.cfg.sidecars:
        if s.role is not Role.SWA:
            deps.finish_draft(tid, s.role)
    deps.fire(tid)
    # (the set keeps a fired transfer's record while a listener watches: a monitor, in
    # verified mode, makes it "a transfer whose completion fired already")
    with pytest.raises(ValueError, match=r"tid: fire\(1\) of (no live transfer|a transfer whose completion fired)"):
        deps.fire(tid)
    with pytest.raises(ValueError, match=r"tid: finish_target\(99\) of no live transfer"):
        deps.finish_target(99)
    cache.close()


def test_a_long_run_keeps_the_monitors_window_flat():
    """Many more transfers than the spec's Transfers window (32), one live at a time: each
    retires when nobody can read it any more, its slot and page-list ids are reused, so the
    window (and each step's cost) stays as wide as the transfers live at once. Before, the
    set kept every record and the window doubled with the run (a step of the fourth 1,000
    transfers cost 9x one of the first)."""
    cache, deps = make_cache(draft_layout="packed")
    mon = Monitor(DraftStateMap(deps), VerifyConfig(mode="strict"))
    deps.bus.subscribe(mon)
    for i in range(60):
        cache.evict_device(cache.cfg.device_pages)
        compute(cache, deps, [10_000 + 100 * i + j for j in range(8)])
    assert deps.transfers == {}
    assert mon.rmap.capacity == 32 and mon.rmap.constants()["NIdx"] == 64
    assert mon.rmap.tid_at == {} and mon.rmap.state()["phase"] == ("idle",) * 32
    assert mon.checked == mon.steps == 60 * 7        # launch, 3 draft copies, target, fire, retire
    cache.close()


def test_more_live_transfers_than_the_window_double_it():
    """40 transfers live at once (public steps, as the CP gather drives them): the window
    doubles at the 33rd launch (that event checked by its invariants), and every event is
    still checked; it raised a ValueError into the runtime's thread at the 33rd transfer of a
    legal run. Retiring them all leaves every slot idle."""
    cache, deps = make_cache(draft_layout="sidecar")
    mon = Monitor(DraftStateMap(deps), VerifyConfig(mode="strict"))
    deps.bus.subscribe(mon)
    tids = [deps.launch(draft.Kind.GATHER, [i], [i]) for i in range(40)]
    assert mon.rmap.capacity == 64 and sorted(mon.rmap.slot_of.values()) == list(range(1, 41))
    for tid in tids:
        deps.finish_target(tid)
        for s in deps.cfg.sidecars:
            if s.role is not Role.SWA:
                deps.finish_draft(tid, s.role)
        deps.fire(tid)
        deps.record_read(tid, "target")
        deps.retire(tid)
    assert deps.transfers == {} and mon.rmap.tid_at == {}
    assert mon.checked == mon.steps == 40 * 8
    cache.close()


def test_a_step_of_a_retired_transfer_fails_its_guard(tmp_path):
    """A read recorded after the transfer retired (its slot given to another transfer or
    idle) is no read of a fired transfer: BufferRead's guard fails on the slot."""
    cache, deps = make_cache(draft_layout="sidecar")
    mon = Monitor(DraftStateMap(deps), VerifyConfig(mode="strict", violation_dir=str(tmp_path)))
    deps.bus.subscribe(mon)
    tid = deps.launch(draft.Kind.GATHER, [0], [0])
    deps.finish_target(tid)
    for s in deps.cfg.sidecars:
        if s.role is not Role.SWA:
            deps.finish_draft(tid, s.role)
    deps.fire(tid)
    deps.retire(tid)
    with pytest.raises(ProtocolViolation) as e:
        deps._emit(draft.D.BufferRead, t=tid, p="target")     # what a stale reader would step
    assert (e.value.action, e.value.conjunct) == ("BufferRead", 'phase[t] = "fired"')
    cache.close()
