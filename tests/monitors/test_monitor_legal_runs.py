"""Legal runs the HostTier monitors once flagged, and what verified mode must not change.

Each scenario is a sequence the runtime allows; each runs with the strict monitor (the
incremental map) and with sample mode at rate 1 (the from-scratch map), then a cache check:
no ProtocolViolation. Found by a QA sweep of random legal workloads (11 of 360 runs raised
LockedNodesKept on an aborted prefetch; a prefetch below a node whose write-through backup
was in flight raised WriteThroughPrefix when its pages joined).
"""
from __future__ import annotations

import threading

import pytest

from hicache.monitors.workers import KeyAudit
from hicache.monitors.workload import MemStore
from hicache.runtime.allocator import HostSlotState as S
from tiny_cache import SlowStore, serve, tiny_cache, to_storage_only

MODES = [pytest.param(dict(mode="strict"), id="strict"), pytest.param(dict(mode="sample", sample_rate=1.0, sample_budget=None), id="sample-1")]


@pytest.mark.parametrize("verify", MODES)
def test_an_aborted_prefetchs_anchor_may_leave_the_tree(tmp_path, verify):
    """A request aborts while its prefetch is still in the backend: the slots stay RESERVED
    (an orphan) until the worker returns, the anchor is released and may be evicted. The
    spec's state after RequestAbort: the request idle, pfAbort TRUE, no locks; the maps had
    it matched with its prefix beyond the tree (LockedNodesKept)."""
    st = SlowStore()
    st.gate.set()
    c, mon = tiny_cache(tmp_path, verify, storage=st)
    to_storage_only(c, [1, 2, 3, 4])
    serve(c, [1, 2])                          # [1, 2] cached again, [3, 4] in storage only
    st.gate.clear()
    r = c.match([1, 2, 3, 4])
    assert c.prefetch(r)
    assert st.inside.wait(10)
    c.abort(r)
    assert len(c._orphans) == 1
    assert c.evict_device(4) and c.evict_host(8)     # the anchor leaves: legal
    assert r.node.parent is None
    slots = list(c._orphans[0].slots)
    st.gate.set()
    c.drain()
    # the orphan's end is a step of its own, PrefetchFinish naming the slots it frees (it
    # was silent: the slots went IDLE under whatever event came next)
    last = [h for h in mon.history if h.action == "PrefetchFinish"]
    assert last and last[-1].args["orphan"] is True and last[-1].args["slots"] == slots
    assert not c._orphans and all(c.host.state[h] == S.IDLE for h in slots)
    mon.cache_check()
    c.close()
    assert mon.checked > 10 and not list(tmp_path.iterdir())


@pytest.mark.parametrize("verify", MODES)
def test_a_prefetch_waits_for_its_anchors_host_copy_under_write_through(tmp_path, verify):
    """Under write-through the fetched pages join host-only below their anchor: an anchor
    whose backup is still in flight declines the prefetch (HostTier's PrefetchStart requires
    HostTail); once its host copy is readable the same prefetch runs and joins."""
    c, mon = tiny_cache(tmp_path, verify, storage=MemStore(), prefetch_policy="wait_complete")
    to_storage_only(c, [1, 2, 3, 4])
    gate = threading.Event()
    copy = c._copy_to_host
    c._copy_to_host = lambda op: (gate.wait(10), copy(op))     # device->host copies stay in flight
    a = c.match([1, 2])
    c.insert(a, c.alloc(2))
    c.finish(a)                                               # BackupStart of [1, 2], in flight
    b = c.match([1, 2, 3, 4])
    assert not c.prefetch(b)
    assert c.metrics.prefetch_unbacked_anchor == 1 and c.finish_prefetch(b) == 0
    c.finish(b)
    gate.set()
    c.drain()                                                 # BackupFinish: [1, 2] on host
    b = c.match([1, 2, 3, 4])
    assert c.prefetch(b) and c.finish_prefetch(b) == 2
    c.finish(b)
    c.drain()
    mon.cache_check()
    c.close()
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("verify", MODES)
def test_a_prefetch_declines_below_a_node_whose_backup_was_skipped(tmp_path, verify):
    """A write-through backup skipped for want of host room leaves the node device-only for
    good (backups stop at the first node with a host copy): pages prefetched below it would
    break the host prefix permanently, so the prefetch declines (counted)."""
    c, mon = tiny_cache(tmp_path, verify, storage=MemStore(), host_pages=4, prefetch_policy="wait_complete")
    to_storage_only(c, [1, 2, 3, 4])
    serve(c, [7, 8, 9, 10])
    c.evict_device(4)
    pin = c.match([7, 8, 9, 10])                # locks 4 host-only pages: the host is full
    a = serve(c, [1, 2])
    assert c.metrics.backup_skipped_tokens == 2 and a.node.host is None and a.node.device is not None
    c.abort(pin)
    b = c.match([1, 2, 3, 4])
    assert not c.prefetch(b) and c.metrics.prefetch_unbacked_anchor == 1
    c.finish(b)
    c.close()
    assert not list(tmp_path.iterdir())


def test_a_request_that_ended_is_not_brought_back_by_a_later_event(tmp_path):
    """The runtime polls a load's LoadBackFinish after its request's RequestFinish; the map
    took that event for a live request again, and kept it "running" for good (174 of 400
    requests in one strict run: NReqs grew and every step rebuilt the constants)."""
    c, mon = tiny_cache(tmp_path, dict(mode="strict"))
    for i in range(6):
        serve(c, [1, 2, 3])
        c.evict_device(4)                        # host copies only: the next serve loads back
    actions = [s.action for s in mon.history]
    assert "LoadBackStart" in actions
    assert mon.rmap.phase == {}
    c.close()
    assert not list(tmp_path.iterdir())


def test_verified_mode_leaves_the_backends_attributes_to_the_caller(tmp_path):
    """Verified mode wraps the cache's backend in a KeyAudit; code that reaches for its own
    backend's attributes through `cache.storage` (a fault switch, a counter) must read and
    write the backend itself, or turning verification on changes what the code does."""
    st = MemStore()
    c, _ = tiny_cache(tmp_path, dict(mode="strict"), storage=st)
    assert type(c.storage) is KeyAudit and c.storage.inner is st
    c.storage.fault = "raise"                    # a switch of the caller's own backend
    assert st.fault == "raise" and c.storage.fault == "raise"
    assert c.storage.data is st.data
    assert c.storage.breaches == [] and not hasattr(st, "breaches")
    c.close()


def test_a_backend_method_wrapped_through_the_audit_wraps_it_once(tmp_path):
    """A caller wrapping a backend method in place through `cache.storage` (a fault switch:
    every n-th write fails) under verified mode: the wrapper wraps the audit's method, which
    calls the backend's once. Written through to the backend, the wrapper called the audit,
    which called the backend's method, the wrapper again: every call looped until the
    wrapper's n-th count raised, so every storage write failed under verification."""
    from hicache.monitors.workload import EveryNth
    st = MemStore()
    c, _ = tiny_cache(tmp_path, dict(mode="strict"), storage=st)
    audit = c.storage
    audit.batch_set = faulty = EveryNth(audit.batch_set, 3, "storage write")
    assert "batch_set" not in vars(st)               # the backend's own method is untouched
    failed = 0
    for i in range(6):
        try:
            c.storage.batch_set([f"k{i}"], [b"v"])
        except RuntimeError:
            failed += 1
    assert (faulty.calls, faulty.raised, failed) == (6, 2, 2)
    assert sorted(st.data) == ["k0", "k1", "k3", "k4"]
    c.close()


def test_failing_copies_fail_alike_with_verification_on_and_off(tmp_path):
    """`failing_copies` (every fifth storage write fails) on a workload whose storage writes
    the monitors watch: the same writes fail, the same fetches join, with the strict
    monitors attached and without (before the audit kept its methods' writes, the two
    writes of seed 0 both failed under strict mode and none without, and its one fetch
    join was lost). The mode is chosen here, whatever the run's (tests/conftest.py restores
    it after)."""
    from hicache import verified
    from hicache.monitors.workload import WorkloadConfig, failing_copies, make_cache, plan, run_workload
    wcfg = WorkloadConfig(requests=60, device_pages=6, host_pages=6, max_pages=6, page_size=1)
    policy, reqs = plan(0, wcfg)
    outcomes = []
    for mode in ("off", "strict"):
        verified.enable(mode, violation_dir=str(tmp_path))
        try:
            cache = make_cache(wcfg, policy, prefetch_policy="wait_complete")
        finally:
            verified.disable()
        assert (verified.monitor_of(cache) is not None) == (mode == "strict")
        _, store = failing_copies(cache)
        joined = []
        cache.bus.subscribe(lambda a, f: joined.append(f["joined"]) if a == "PrefetchFinish" and f.get("joined")
                            else None)
        run_workload(cache, reqs)
        outcomes.append((store.calls, store.raised, cache.metrics.storage_backup_failures, joined))
    assert outcomes[0] == outcomes[1] and outcomes[0][0] == 2 and outcomes[0][3], outcomes
