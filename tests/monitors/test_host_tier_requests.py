"""HostTierMap's two sources of request bookkeeping agree at every event of a run.

Under Requests.EVENTS the map follows the requests through the events (`bind`: phases, own
loads, ended requests with a load to finish, locked nodes, a blocking copy's slots); under
Requests.RUNTIME, sample mode's, it reads the same off the runtime's request table
(`HiCache.requests`, `HiCache.sync_backup`) when it maps a state, and its `bind` keeps
nothing. Here both maps watch one cache, and after every event the runtime's reading equals
what the events bound: over the clean sweep's workload shapes (acks held across requests,
failing copies, storage fetches joining the tree, trace replays) and the bug zoo's runtime
faults (requests aborted with their records dropped, loads whose slots are evicted)."""
from __future__ import annotations

import collections

import pytest

from hicache.monitors import zoo
from hicache.monitors.faults import RUNTIME_FAULTS
from hicache.monitors.maps.host_tier import HostTierMap, Requests, _step_of
from hicache.monitors.workload import WorkloadConfig, own_cache, plan, run_workload
from hicache.protocol.vocabulary import HostTier as A
from hicache.runtime.allocator import SlotStateError
from hicache.runtime.cache import RequestPhase


def _bookkeeping(m: HostTierMap) -> tuple:
    return m.phase, m.loads, m.ending, m.req_node, m.sync_backup


class Twin:
    """A listener holding an event-bound and a runtime-reading HostTierMap of one cache: after
    each event it binds the first and reads the second, asserts they agree, and counts the
    rarer cases it saw agree (so a run that never reached them is told from one that did)."""

    def __init__(self, cache, seen: collections.Counter) -> None:
        self.events = HostTierMap(cache)
        self.runtime = HostTierMap(cache, Requests.RUNTIME)
        self.seen = seen
        self.last_seq = 0       # the last event compared (its bus sequence number)

    def __call__(self, action, fields: dict) -> None:
        bound = self.events.bind(action, fields)
        assert self.runtime.bind(action, fields) == bound, action     # (the same step, or None)
        if bound is None:
            # (LoadBackLayer, the loader thread's: no step, nothing bound; the table is the
            # scheduler's, read only on its thread, as the monitor reads it)
            return
        self.runtime._read_requests()
        got, want = _bookkeeping(self.runtime), _bookkeeping(self.events)
        assert got == want, (str(action), fields, got, want)
        seen = self.seen
        seen["events"] += 1
        seen["loading"] += "loading" in want[0].values()
        seen["running"] += "running" in want[0].values()
        seen["ending"] += bool(want[2])
        seen["own loads"] += bool(want[1])
        seen["blocking copy"] += bool(want[4])
        self.last_seq = fields["seq"]


def _watching(monkeypatch, seen: collections.Counter) -> None:
    """Every cache the sweep's shapes monitor gets a Twin after its strict monitor."""
    attach = zoo.monitor_cache

    def both(cache, cfg):
        mon = attach(cache, cfg)
        cache.bus.subscribe(Twin(cache, seen))
        return mon
    monkeypatch.setattr(zoo, "monitor_cache", both)


@pytest.mark.parametrize("shape", zoo.CLEAN_SHAPES, ids=lambda s: s.name)
def test_the_runtime_table_reads_as_the_events_bind_over_the_clean_shapes(shape, monkeypatch, tmp_path):
    seen = collections.Counter()
    _watching(monkeypatch, seen)
    seeds = 2 if isinstance(shape, zoo.TraceShape) else 6
    for seed in range(seeds):
        assert zoo.run_clean_shape(shape, seed, str(tmp_path)) is None
    assert seen["events"] > 100
    assert seen["running"] > 0


def test_the_clean_shapes_reach_the_rare_cases(monkeypatch, tmp_path):
    """The cases the two readings could part on come up in the shapes above (acks held:
    ended requests with a load to finish; write_back: a blocking copy in flight)."""
    seen = collections.Counter()
    _watching(monkeypatch, seen)
    shape = next(s for s in zoo.CLEAN_SHAPES if s.name == "acks held")
    for seed in range(6):
        assert zoo.run_clean_shape(shape, seed, str(tmp_path)) is None
    assert seen["loading"] > 0 and seen["own loads"] > 0 and seen["ending"] > 0
    assert seen["blocking copy"] > 0


@pytest.mark.parametrize("bug", sorted(RUNTIME_FAULTS))
def test_the_runtime_table_reads_as_the_events_bind_under_the_zoo_faults(bug):
    """Each runtime fault of the bug zoo, unmonitored (so the run goes on past the fault):
    the two readings agree before, at and after the faulty step."""
    cls = RUNTIME_FAULTS[bug]
    seen = collections.Counter()
    faulty_step_compared = 0
    wcfg = WorkloadConfig()
    for seed in range(4):
        policy, reqs = plan(seed, wcfg)
        cache = own_cache(wcfg, policy, cls=cls)
        twin = Twin(cache, seen)
        cache.bus.subscribe(twin)
        try:
            run_workload(cache, reqs)
        except (SlotStateError, RuntimeError):      # (the fault's own damage: the run ends there)
            zoo._close_quietly(cache)
        faulty_step_compared += cache.fired and twin.last_seq >= cache.fault_seq
    assert faulty_step_compared > 0


def test_the_table_follows_a_request_through_its_load_and_its_end():
    """The table itself: a request enters at its match, is "loading" from its own load-back
    and "running" from that load's completion or its insert; ended while its load is still
    to be applied it stays in the table until that completion, then leaves."""
    wcfg = WorkloadConfig(requests=1, storage=False)
    cache = own_cache(wcfg, "write_through")
    first = cache.match([1, 2, 3, 4])
    assert cache.requests == {first.rid: first} and first.phase is RequestPhase.MATCHED
    cache.insert(first, cache.alloc(2))
    assert first.phase is RequestPhase.RUNNING
    cache.finish(first)
    cache.drain()
    assert cache.requests == {}
    assert cache.evict_device(wcfg.device_pages) == wcfg.device_pages   # (the pages stay on host: a load-back brings them)
    req = cache.match([1, 2, 3, 4])
    op = cache.load_back(req)
    assert op is not None and req.phase is RequestPhase.LOADING
    op.wait()
    cache.finish(req)                        # (its load's completion not applied yet)
    assert cache.requests == {req.rid: req}
    cache.poll()
    assert cache.requests == {}
    cache.close()


def test_a_blocking_copy_is_in_the_table_from_its_start_to_its_finish():
    """write_back's copy to host on a device eviction runs between its BackupStart and its
    BackupFinish; the runtime shows it (`sync_backup`) exactly then."""
    wcfg = WorkloadConfig(requests=1, storage=False)
    cache = own_cache(wcfg, "write_back")
    at = {}
    cache.bus.subscribe(lambda action, fields: at.setdefault(str(action), cache.sync_backup))
    req = cache.match([1, 2, 3, 4])
    cache.insert(req, cache.alloc(2))
    cache.finish(req)
    cache.evict_device(wcfg.device_pages)
    node, slots = at["BackupStart"]
    assert slots and node == req.node.id
    assert at["BackupFinish"] is None and cache.sync_backup is None
    cache.close()


def test_the_runtime_reading_binds_nothing():
    """Under Requests.RUNTIME `bind` is the event's step and nothing more (what lets a gate
    count an event without calling it): LoadBackLayer is no step, any other action its
    compound step, whatever the fields say."""
    wcfg = WorkloadConfig(requests=1, storage=False)
    cache = own_cache(wcfg, "write_through")
    m = HostTierMap(cache, Requests.RUNTIME)
    ev = HostTierMap(cache)
    assert m.pure_bind and not ev.pure_bind and m.bind is _step_of
    for a in A:
        fields = {"rid": 7, "node": 3, "blocking": True, "slots": [1]}
        want = None if a is A.LoadBackLayer else ev.bind(a, dict(fields))
        assert m.bind(a, fields) == want
        assert _bookkeeping(m) == ({}, {}, set(), {}, {})
    with pytest.raises(TypeError, match="Requests"):
        HostTierMap(cache, "runtime")
    cache.close()


def test_verified_sample_mode_reads_the_runtime_and_binds_no_event_between_samples(tmp_path):
    """What verified mode attaches in sample mode: the map reading the runtime's table, its
    gate pure (no event bound between samples); in strict mode the incremental map, which
    follows the events."""
    from hicache.monitors.attach import monitor_cache
    from hicache.monitors.runtime import VerifyConfig
    wcfg = WorkloadConfig(requests=30)
    policy, reqs = plan(0, wcfg)
    sample = own_cache(wcfg, policy)
    mon = monitor_cache(sample, VerifyConfig(mode="sample", violation_dir=str(tmp_path)))
    assert mon.rmap.requests_from is Requests.RUNTIME and mon._gate.pure is True
    run_workload(sample, reqs)
    assert mon.steps > 100
    strict = own_cache(wcfg, policy)
    smon = monitor_cache(strict, VerifyConfig(mode="strict", violation_dir=str(tmp_path)))
    assert smon.rmap.requests_from is Requests.EVENTS and not smon.rmap.pure_bind
    run_workload(strict, reqs)
    assert smon.steps == mon.steps          # (the same events counted as steps either way)
