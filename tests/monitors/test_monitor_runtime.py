"""Monitor runtime: HostTier refinement map on the real cache, violations, ITF, modes."""
from __future__ import annotations

import collections
import json
import random

import pytest

from hicache.monitors import native
from hicache.monitors.faults import AbortKeepsSlots, EvictDuringLoad
from hicache.monitors.generated import host_tier
from hicache.monitors.maps.host_tier import HostTierMap, slot_in_one_owner_linear, write_through_prefix_tree
from hicache.monitors.runtime import CheckCause, Mode, Monitor, ProtocolViolation, Step, VerifyConfig
from hicache.monitors.workload import WorkloadConfig, make_cache, plan, run_workload
from hicache.protocol.vocabulary import HostTier as A
from hicache.monitors.zoo import _close_quietly
from hicache.tla.itf import decode, read_itf
from hicache.tla.values import KK_DENSE0, KK_INT, Fcn

W = WorkloadConfig(requests=25)


def _run(seed, cls=None, mode="strict", tmp=None, rate=0.05):
    """Seed `seed`'s workload (on fault class `cls`) under a HostTier monitor of `mode` alone,
    whatever monitor the test run's verified mode would attach."""
    from hicache.monitors.workload import own_cache
    policy, reqs = plan(seed, W)
    cache = own_cache(W, policy, cls=cls)
    m = HostTierMap(cache)
    mon = Monitor(m, VerifyConfig(mode=mode, sample_rate=rate, seed=seed, sample_budget=None,
                                  violation_dir=str(tmp or "viol")))
    cache.bus.subscribe(mon)
    try:
        run_workload(cache, reqs)
    except ProtocolViolation:
        _close_quietly(cache)
        raise
    return cache, mon


@pytest.mark.parametrize("seed", range(6))
def test_clean_workloads_raise_nothing_in_strict_mode(seed, tmp_path):
    _, mon = _run(seed, tmp=tmp_path)
    assert mon.steps > 20 and mon.checked == mon.steps
    assert not list(tmp_path.iterdir())


def _first_violation(cls, tmp_path):
    for seed in range(30):
        try:
            cache, _ = _run(seed, cls=cls, tmp=tmp_path)
        except ProtocolViolation as e:
            return e
    pytest.fail(f"{cls.__name__} never caught")


def test_abort_leak_is_a_located_violation_with_trace(tmp_path):
    e = _first_violation(AbortKeepsSlots, tmp_path)
    assert e.action == "RequestAbort" and e.kind == "invariant"
    assert e.property == "SlotInOneOwner"
    line = next(i for i, t in enumerate(open("spec/HostTier.tla").read().splitlines(), 1)
                if t.startswith("SlotInOneOwner =="))
    assert e.location == f"spec/HostTier.tla:{line + 1}:5"
    assert "rid" in e.arguments and e.history[-1].action == "RequestAbort"
    assert "slot" in e.diff or "pfSlot" in e.diff
    doc = read_itf(e.trace_path)
    assert doc["vars"] == list(host_tier.VARIABLES)
    assert doc["#meta"]["violation"]["property"] == "SlotInOneOwner"
    last = doc["states"][-1]
    assert last["#meta"]["action"] == "RequestAbort"
    slots = decode(last["slot"])
    assert "reserved" in slots
    json.dumps(doc)  # plain JSON


def _caught(cls, mode, rate, tmp_path):
    """The first of seeds 0..29 whose workload `mode` at `rate` stops on `cls`'s fault
    (sample mode checking at the end too, as a scheduler's check point would): the
    violation and its trace's record."""
    for seed in range(30):
        try:
            _, mon = _run(seed, cls=cls, mode=mode, rate=rate, tmp=tmp_path)
            mon.cache_check()
        except ProtocolViolation as e:
            return e, read_itf(e.trace_path)["#meta"]["violation"]
    pytest.fail(f"{cls.__name__} never caught")


def test_a_violation_trace_says_why_its_step_was_checked(tmp_path, monkeypatch):
    """`checked_because` (Monitor.cause) names what put a check at the violating step:
    every step in strict mode; in sample mode the seeded draw (a RequestAbort at rate 1),
    the draw at an event's weight (HostTier's evictions: bug 10 at rate 1 with the map's
    trigger off), the trigger (bug 10 with it on, at rate 0) or the cache check (bug 8
    at rate 0, where nothing is drawn: its leaked slots last until the end)."""
    from hicache.monitors.runtime import CheckCause
    e, v = _caught(AbortKeepsSlots, "strict", 0.05, tmp_path)
    assert v["checked_because"] == "every step" == CheckCause.EVERY_STEP
    e, v = _caught(AbortKeepsSlots, "sample", 1.0, tmp_path)
    assert (e.action, v["checked_because"]) == ("RequestAbort", "the seeded draw")
    e, v = _caught(AbortKeepsSlots, "sample", 0.0, tmp_path)
    assert (e.action, v["checked_because"]) == ("cache_check", "a cache check")
    e, v = _caught(EvictDuringLoad, "sample", 0.0, tmp_path)
    assert (e.action, v["checked_because"]) == ("HostEvict", "the map's trigger")
    monkeypatch.setattr(HostTierMap, "trigger_events", frozenset())
    e, v = _caught(EvictDuringLoad, "sample", 1.0, tmp_path)
    assert (e.action, v["checked_because"]) == ("HostEvict", "the seeded draw at its weight")


def test_violation_message_lists_changed_entries_not_whole_functions():
    from hicache.monitors.rt import Failure
    before = Fcn({n: 0 for n in range(200)})
    after = Fcn({**before.d, 3: 2})
    many = Fcn({n: 1 for n in range(200)})
    e = ProtocolViolation(spec="spec/HostTier.tla", action="HostEvict", args={"node": 4, "seq": 9},
                          failure=Failure("SlotInOneOwner", 1, "text", "spec/HostTier.tla:1:1"), kind="invariant",
                          diff={"host": (before, after), "req": (("idle",), ("matched",))}, history=[], step=9,
                          trace_path=None)
    lines = str(e).splitlines()
    assert "  host[3]: 0 -> 2" in lines and '  req[1]: "idle" -> "matched"' in lines
    assert not any(":>" in line for line in lines)        # no function printed whole
    # a step that rewrote a large function lists the first entries and counts the rest
    e = ProtocolViolation(spec="spec/HostTier.tla", action="HostEvict", args={}, kind="invariant",
                          failure=Failure("SlotInOneOwner", 1, "text", "spec/HostTier.tla:1:1"),
                          diff={"hits": (before, many)}, history=[], step=1, trace_path=None)
    lines = str(e).splitlines()
    assert sum(line.startswith("  hits[") for line in lines) == ProtocolViolation.MESSAGE_CHANGES
    assert f"  ... and {200 - ProtocolViolation.MESSAGE_CHANGES} more changed entries (in the trace)" in lines


@pytest.mark.hicache_unmonitored
def test_evict_during_load_breaks_pending_load_locked(tmp_path):
    e = _first_violation(EvictDuringLoad, tmp_path)
    assert (e.action, e.property) == ("HostEvict", "PendingLoadLocked")


def test_sample_mode_checks_a_seeded_fraction(tmp_path):
    _, a = _run(3, mode="sample", tmp=tmp_path, rate=0.3)
    _, b = _run(3, mode="sample", tmp=tmp_path, rate=0.3)
    assert 0 < a.checked < a.steps
    assert a.checked == b.checked           # seeded: the same steps are chosen


def test_sample_mode_draws_gaps_at_the_rate_and_hooks_only_sampled_events(tmp_path):
    """Sample mode on the from-scratch map counts down geometric gaps: the fraction of
    events checked follows the rate, the evictions (the map's `sample_weights`) drawn on
    their own at the rate times their weight (here 0.25 x 5: every one), and the step hooks
    (the worker watch's place) run on exactly the checked events."""
    policy, reqs = plan(1, WorkloadConfig(requests=120))
    cache = make_cache(W, policy)
    mon = Monitor(HostTierMap(cache), VerifyConfig(mode="sample", sample_rate=0.25, seed=5, sample_budget=None,
                                                   violation_dir=str(tmp_path)))
    assert HostTierMap.sample_weights == {"DeviceEvict": 5, "HostEvict": 5}
    evictions = []
    cache.bus.subscribe(lambda action, fields: evictions.append(fields["seq"])
                        if action in HostTierMap.sample_weights else None)
    hooked = []
    mon.step_hooks.append(lambda name, fields: hooked.append(fields["seq"]))
    cache.bus.subscribe(mon)
    run_workload(cache, reqs)
    others = mon.steps - len(evictions)
    assert others > 200 and len(evictions) > 10
    assert set(evictions) <= set(hooked)                  # every eviction checked
    assert 0.15 * others < mon.checked - len(evictions) < 0.35 * others
    assert len(hooked) == mon.checked
    checked = [h.args["seq"] for h in mon.history if h.state is not None]
    assert checked == hooked[-len(checked):]      # the mapped steps are the hooked ones


def _bookkeeping(m: HostTierMap) -> tuple:
    return m.phase, m.loads, m.ending, m.req_node, m.sync_backup


def _bind_both(events) -> collections.Counter:
    """Bind `events` ((action, fields) pairs) on a HostTierMap with its request binders, on
    one binding every event by the general rule and, where the native module builds, on one
    with the native binder (what a map binds by then); their steps and bookkeeping equal
    after each. Returns how often the binders' rarer cases came up: a request event of a
    request that ended with a load to finish ("ending"), an insert for no live request ("not
    live"), an end with a load to finish ("end loading")."""
    fast, general, nat = HostTierMap(None), HostTierMap(None), HostTierMap(None)
    for m in (fast, general):
        m.python_bind()
    general._binders = {}
    maps = (fast, general) if nat._nbind is None else (fast, general, nat)
    assert (nat.bind is nat._nbind) == (native.module() is not None)
    seen = collections.Counter()
    for action, fields in events:
        rid = fields.get("rid")
        if action in HostTierMap._binders and rid is not None:
            seen["ending"] += rid in general.ending
            seen["not live"] += action == "DeviceInsert" and rid not in general.phase
            seen["end loading"] += action in ("RequestFinish", "RequestAbort") and bool(general.loads.get(rid))
        steps = [m.bind(action, dict(fields)) for m in maps]
        assert all(st == steps[1] for st in steps), (action, fields, steps)
        assert all(_bookkeeping(m) == _bookkeeping(general) for m in maps), (action, fields)
    return seen


@pytest.mark.parametrize("seed", range(3))
def test_the_request_binders_bind_recorded_runs_as_the_general_rule(seed):
    """HostTierMap binds a request's own events (match, insert, finish, abort) by short
    binders; on recorded runs (with the abort-leak and evict-during-load faults too, where
    requests end with loads still to finish) each leaves the map's request bookkeeping as
    the general rule (`_bind_any`) does, after every event."""
    from hicache.monitors.workload import own_cache
    from hicache.runtime.allocator import SlotStateError
    from hicache.runtime.events import Recorder
    wcfg = WorkloadConfig(requests=60)
    seen = collections.Counter()
    for cls in (None, AbortKeepsSlots, EvictDuringLoad):
        policy, reqs = plan(seed, wcfg)
        cache = own_cache(wcfg, policy, cls=cls)
        recorded = Recorder()
        cache.bus.subscribe(recorded)
        try:
            run_workload(cache, reqs)
        except SlotStateError:     # (a fault's own error: the events up to it are the run)
            _close_quietly(cache)
        seen += _bind_both([(e.action, e.args) for e in recorded.events])
    assert seen["end loading"] > 0


def test_the_request_binders_bind_random_streams_as_the_general_rule():
    """... and on random streams of every HostTier action over three request ids and three
    nodes (a request matched again while it ends with a load to finish, an insert for a
    request never matched, an event with no request id: what runs rarely reach), the
    actions as names and as members of the vocabulary (what a monitor is handed), with a
    name no rule knows among them, and fields absent, None or empty."""
    rng = random.Random(11)
    actions = [str(a) for a in A] + list(A) + ["NoSuchAction"]
    seen = collections.Counter()
    for _ in range(1000):
        events = []
        for _ in range(rng.randrange(1, 40)):
            fields = {} if rng.random() < 0.1 else {"node": rng.choice([None, 1, 2, 3])}
            if rng.random() < 0.85:
                fields["rid"] = rng.choice([None, 0, 1, 2, 2])
            if rng.random() < 0.5:
                fields["blocking"] = rng.random() < 0.5
                fields["slots"] = rng.choice([[rng.randrange(8)], [], (1, 2), None])
            events.append((rng.choice(actions), fields))
        seen += _bind_both(events)
    assert min(seen["ending"], seen["not live"], seen["end loading"]) >= 10, seen


def test_sample_mode_history_reads_every_unsampled_event_as_its_step(tmp_path):
    """Gap-counted sample mode records an unsampled event in its cheapest form and makes it a
    Step when the history is read: what is read is each recorded event, in order, as a Step
    numbered by the monitor's count, with the event's own arguments and no mapped state; the
    checked steps keep theirs. Read twice, the history is the same."""
    from hicache.runtime.events import Recorder
    policy, reqs = plan(2, W)
    cache = make_cache(W, policy)
    mon = Monitor(HostTierMap(cache), VerifyConfig(mode="sample", sample_rate=0.1, seed=2, sample_budget=None,
                                                   violation_dir=str(tmp_path)))
    seen = Recorder()
    cache.bus.subscribe(mon)
    cache.bus.subscribe(seen)
    run_workload(cache, reqs)
    events = [e for e in seen.events if e.action != A.LoadBackLayer]    # (the map binds it to no step)
    assert mon.steps == len(events) > mon.history.maxlen > 0
    steps = [h for h in mon.history if h.action != "cache_check"]
    assert steps and all(isinstance(h, Step) for h in mon.history)
    tail = events[-len(steps):]
    assert [h.seq for h in steps] == list(range(mon.steps - len(steps) + 1, mon.steps + 1))
    assert [(str(h.action), h.args["seq"]) for h in steps] == [(str(e.action), e.seq) for e in tail]
    mapped = [h for h in steps if h.state is not None]
    assert 0 < len(mapped) < len(steps)        # (sampled steps mapped, the others recorded only)
    assert [(h.seq, h.state is None) for h in mon.history] == [(h.seq, h.state is None) for h in mon.history]


def test_strict_mode_history_reads_every_step_as_its_step(tmp_path):
    """Strict mode on an incremental map records each event in its cheapest form, synced or
    quiet, and makes it a Step when the history is read: each recorded event, in order, as a
    Step numbered by the monitor's count, with the event's own arguments, no mapped state and
    the delta its sync returned (empty at a quiet step). The cache check at close, which
    brings the map up to date through the last record, still reads it. Read twice, the
    history is the same."""
    from hicache.monitors.maps.host_tier_inc import IncrementalHostTierMap
    from hicache.runtime.events import Recorder
    policy, reqs = plan(2, W)
    cache = make_cache(W, policy)
    mon = Monitor(IncrementalHostTierMap(cache), VerifyConfig(mode="strict", violation_dir=str(tmp_path)))
    seen = Recorder()
    cache.bus.subscribe(mon)
    cache.bus.subscribe(seen)
    run_workload(cache, reqs)
    mon.cache_check()
    events = [e for e in seen.events if e.action != A.LoadBackLayer]    # (the map binds it to no step)
    assert mon.steps == mon.checked == len(events) > mon.history.maxlen > 0
    assert mon.cache_checks == 1
    steps = [h for h in mon.history if h.action != "cache_check"]
    assert steps and all(isinstance(h, Step) for h in mon.history)
    tail = events[-len(steps):]
    assert [h.seq for h in steps] == list(range(mon.steps - len(steps) + 1, mon.steps + 1))
    assert [(str(h.action), h.args["seq"]) for h in steps] == [(str(e.action), e.seq) for e in tail]
    assert all(h.state is None and isinstance(h.delta, list) for h in steps)
    assert any(h.delta for h in steps) and any(not h.delta for h in steps)
    assert [(h.seq, len(h.delta)) for h in steps] == [(h.seq, len(h.delta)) for h in mon.history
                                                      if h.action != "cache_check"]


def test_a_drawn_eviction_is_a_drawn_sample_the_budget_may_let_go(tmp_path):
    """An eviction drawn at its weight (0.2 x 5: every one) is a sample like any other: a
    budget spent at once (a nanosecond a second, no window) checks the first drawn sample
    and lets every later one go, each eviction among them counted."""
    policy, reqs = plan(1, WorkloadConfig(requests=120))
    cache = make_cache(W, policy)
    mon = Monitor(HostTierMap(cache), VerifyConfig(mode="sample", sample_rate=0.2, seed=5, sample_budget=1e-9,
                                                   budget_window=1e-9, violation_dir=str(tmp_path)))
    evictions = []
    cache.bus.subscribe(lambda action, fields: evictions.append(fields["seq"])
                        if action in HostTierMap.sample_weights else None)
    cache.bus.subscribe(mon)
    run_workload(cache, reqs)
    assert len(evictions) > 10
    assert mon.checked == 1 and mon.budget_skipped >= len(evictions) - 1


def test_a_clean_replay_triggers_no_check_where_the_runtime_may_evict_under_a_copy(tmp_path):
    """The map's trigger follows the runtime's own rule for its victims: a clean replay
    (storage behind the host tier, write-back, transfers left in flight between requests)
    drops device copies while a storage backup reads their host copies, evictions whose
    node an op in flight holds (counted by a listener beside the monitor), and the trigger
    asks for none of them: such an op pins no device page. Its sampled checks are the draws'."""
    import contextlib

    from hicache.bench.monitors import TRACE     # (the conversation trace)
    from hicache.replay.driver import ReplayConfig, StorageKind, load_requests, open_storage, replay_requests
    cfg = ReplayConfig(kv="small", page_size=64, device_tokens=64 * 64, host_tokens=64 * 128, storage="memory",
                       write_policy="write_back", sync=False, limit=300)
    reqs = load_requests(str(TRACE), 64, 300)
    held: list = []
    mons: list = []

    def attach(cache) -> None:
        def note(action, fields) -> None:
            if action in HostTierMap.trigger_events:
                busy = [op for w in (cache.loader, cache.writer, cache.prefetcher, cache.backuper)
                        if w is not None for op in list(w.acks)]
                if any(x.id == fields["node"] for op in busy for x in op.nodes):
                    held.append(fields["seq"])
        cache.bus.subscribe(note)
        mons.append(Monitor(HostTierMap(cache), VerifyConfig(mode="sample", sample_rate=0.05, sample_budget=None,
                                                             violation_dir=str(tmp_path))))
        cache.bus.subscribe(mons[0])
    with contextlib.ExitStack() as stack:
        replay_requests(cfg, reqs, storage=open_storage(StorageKind.MEMORY, stack), on_cache=attach)
    (mon,) = mons
    assert len(held) > 10 and mon.checked > 50
    assert mon.triggered == 0


def test_a_fetch_whose_anchor_is_released_triggers_no_check(tmp_path, monkeypatch):
    """A prefetch op outlives its hold on its anchor: done and untracked while its ack waits
    in the worker's queue, or orphaned with its anchor's references dropped (the clean
    sweep's `acks held` shape, acks applied every fourth request). Evicting that anchor then
    is the runtime's legal choice (no lock, no host reference on it): the trigger, reading
    the anchor's references, asks for no check, where naming every anchor would have."""
    from hicache.monitors import workload, zoo
    shape = next(s for s in zoo.CLEAN_SHAPES if s.name == "acks held")
    made: list = []
    make = workload.make_cache      # (own_cache, which the shape builds its cache by, calls it)

    def making(*a, **kw):       # (the shape's cache, for the listener to read its ops)
        made.append(make(*a, **kw))
        return made[-1]
    monkeypatch.setattr(workload, "make_cache", making)
    anchored, triggered = [], []

    def note(action, fields) -> None:
        if action not in HostTierMap.trigger_events:
            return
        cache = made[-1]
        ops = [*cache._prefetching, *cache._orphans, *(cache.prefetcher.acks if cache.prefetcher else ())]
        if any(getattr(op, "anchor", None) is not None and op.anchor.id == fields["node"] for op in ops):
            anchored.append(fields["seq"])
        if HostTierMap(cache).trigger(str(action), fields):
            triggered.append(fields["seq"])
    for seed in (10, 19, 24):       # (seeds whose workloads evict such an anchor)
        assert zoo.run_clean_shape(shape, seed, str(tmp_path), note) is None
    assert len(anchored) >= 3 and triggered == []


def _twin_listener(cache, answers: collections.Counter):
    """A listener over a HostTierMap of its own on `cache`, fed every event: its bind maps to no
    step exactly the events of `unbound_actions`, changing nothing of its bookkeeping then (the
    contract that lets sample mode's gate hold the others, deferred binding), and its native trigger (installed where the extension
    builds) answers every event as the Python `trigger` that defines it does."""
    m = HostTierMap(cache)
    assert "trigger" in vars(m) or native.module() is None

    def books() -> tuple:
        return (dict(m.phase), dict(m.loads), set(m.ending), dict(m.req_node),
                {k: list(v) for k, v in m.sync_backup.items()})

    def note(action, fields) -> None:
        before = books() if action in HostTierMap.unbound_actions else None
        bound = m.bind(action, fields)
        assert (bound is None) == (action in HostTierMap.unbound_actions), (action, fields)
        assert before is None or books() == before, (action, fields)      # (bound to nothing: nothing changed)
        want = HostTierMap.trigger(m, str(action), fields)
        assert m.trigger(action, fields) is want, (action, fields)
        answers[(str(action) in HostTierMap.trigger_events, want)] += 1
    return note


def test_the_native_trigger_answers_as_the_python_one_and_bind_keeps_its_contract(tmp_path, monkeypatch):
    """Over workloads whose evictions take held nodes (bugs 7, 10, 12: the trigger's True) and
    clean shapes with ops and fetches in flight (prefetch joins, failing copies, acks held:
    its False with something to look at), at every event."""
    from hicache.monitors import workload, zoo
    from hicache.monitors.faults import RUNTIME_FAULTS
    from hicache.monitors.workload import own_cache
    answers: collections.Counter = collections.Counter()
    for bug in (7, 10, 12):
        for seed in range(6):
            policy, reqs = plan(seed, W)
            cache = own_cache(W, policy, cls=RUNTIME_FAULTS[bug])
            cache.bus.subscribe(_twin_listener(cache, answers))
            try:
                run_workload(cache, reqs)
            except Exception:       # noqa: BLE001 - a faulted cache's own checks may stop it
                pass
            _close_quietly(cache)
    made: list = []
    make = workload.make_cache

    def making(*a, **kw):
        made.append(make(*a, **kw))
        made[-1].bus.subscribe(_twin_listener(made[-1], answers))
        return made[-1]
    monkeypatch.setattr(workload, "make_cache", making)
    shapes = [s for s in zoo.CLEAN_SHAPES if isinstance(s, zoo.CleanShape)]     # (their caches: make_cache's)
    for shape in shapes:
        for seed in range(2):
            assert zoo.run_clean_shape(shape, seed, str(tmp_path)) is None
    assert len(made) == 2 * len(shapes) >= 8
    # evictions answered True and False, and other events (False: no eviction names a node
    # of those, or nothing in flight)
    assert answers[(True, True)] > 0 and answers[(True, False)] > 100 and answers[(False, False)] > 1000, answers


def test_sample_mode_decides_the_same_holding_events_or_not_and_with_either_trigger(tmp_path):
    """Sample mode over the clean workloads, four monitors on one cache's bus (one stream of
    events: the acks' order varies from run to run), their gates holding the events between
    samples (deferred binding, the map's `unbound_actions`) or binding each at once, and their
    maps asking the native or the Python trigger: the same steps, checks and history."""
    held_at_end = 0
    for seed in range(8):
        policy, reqs = plan(seed, W)
        cache = make_cache(W, policy)
        mons = {}
        for hold in (True, False):
            for native_trigger in (True, False):
                m = HostTierMap(cache)
                if not hold:
                    m.unbound_actions = None
                if not native_trigger:
                    m.python_trigger()
                mon = Monitor(m, VerifyConfig(mode="sample", sample_rate=0.2, seed=seed, sample_budget=None,
                                              violation_dir=str(tmp_path / f"{seed}-{hold}-{native_trigger}")))
                assert (mon._gate.unbound is not None) == hold
                cache.bus.subscribe(mon)
                mons[(hold, native_trigger)] = mon
        run_workload(cache, reqs)
        held_at_end += mons[(True, True)]._gate.held > 0
        assert mons[(False, True)]._gate.held == 0
        runs = {}
        for key, mon in mons.items():
            mon.cache_check()
            runs[key] = (mon.steps, mon.checked, mon.triggered, mon.cache_checks,
                         [(h.seq, str(h.action), h.args.get("seq"), h.state is not None) for h in mon.history])
        cache.close()
        first = runs[(True, True)]
        assert all(r == first for r in runs.values()), seed
        assert first[0] > 50 and 0 < first[1] < first[0]
    assert held_at_end >= 2       # (events still held when the workload ended: bound at the check)


def test_sample_mode_catches_at_cache_check(tmp_path):
    policy, reqs = plan(0, W)
    cache = make_cache(W, policy)
    mon = Monitor(HostTierMap(cache), VerifyConfig(mode="sample", sample_rate=0.0, violation_dir=str(tmp_path)))
    cache.bus.subscribe(mon)
    run_workload(cache, reqs[:5])
    assert mon.checked == 0
    assert cache.host.reserve(1)            # a slot RESERVED by nobody, with no event
    with pytest.raises(ProtocolViolation) as ei:
        mon.cache_check()
    assert ei.value.property == "SlotInOneOwner" and ei.value.action == "cache_check"
    # the trace records the draws in effect: at rate 0 an eviction is never drawn either
    config = read_itf(ei.value.trace_path)["#meta"]["config"]
    assert config["sample_probabilities"] == {"DeviceEvict": 0.0, "HostEvict": 0.0}
    # ... and what the budget had spent up to the violating check (written before it is
    # charged: nothing before it was checked), beside the monitor's lifetime
    assert config["checking_s"] == 0.0 and config["alive_s"] > 0


def test_verify_config_from_env():
    assert VerifyConfig.from_env({}).mode is Mode.OFF
    cfg = VerifyConfig.from_env({"HICACHE_VERIFY": "Sample", "HICACHE_VERIFY_RATE": "0.5",
                                 "HICACHE_VERIFY_SEED": "7", "HICACHE_VIOLATION_DIR": "/x"})
    assert (cfg.mode, cfg.sample_rate, cfg.seed, cfg.violation_dir) == (Mode.SAMPLE, 0.5, 7, "/x")
    with pytest.raises(ValueError, match="HICACHE_VERIFY"):
        VerifyConfig.from_env({"HICACHE_VERIFY": "loud"})
    with pytest.raises(ValueError, match="sample_rate"):
        VerifyConfig(mode="sample", sample_rate=2.0)
    with pytest.raises(ValueError, match="^mode: 'loud' is not one of off, sample, strict$"):
        VerifyConfig(mode="loud")
    from hicache import verified
    before = verified.current()
    with pytest.raises(ValueError, match="^mode: 'loud' is not one of"):
        verified.enable("loud")
    assert verified.current() == before        # a refused mode changes nothing
    # a bad variable is named in the error, with its value
    for var, value in (("HICACHE_VERIFY_RATE", "abc"), ("HICACHE_VERIFY_RATE", "1.5"),
                       ("HICACHE_VERIFY_RATE", "nan"), ("HICACHE_VERIFY_SEED", "x"), ("HICACHE_VERIFY_SEED", "1.0")):
        with pytest.raises(ValueError, match=f"^{var}: '?{value}'?"):
            VerifyConfig.from_env({"HICACHE_VERIFY": "sample", var: value})


def test_an_empty_or_blank_variable_is_its_default():
    """HICACHE_VERIFY_RATE / _SEED / _BUDGET_WINDOW set to "" (a CI template's empty slot,
    `VAR= cmd`) were errors, while an empty HICACHE_VERIFY or HICACHE_VIOLATION_DIR was the
    default: every variable reads empty or blank as unset."""
    names = ("HICACHE_VERIFY_RATE", "HICACHE_VERIFY_SEED", "HICACHE_VERIFY_BUDGET",
             "HICACHE_VERIFY_BUDGET_WINDOW", "HICACHE_VIOLATION_DIR")
    for blank in ("", "  "):
        assert VerifyConfig.from_env({"HICACHE_VERIFY": "sample", **dict.fromkeys(names, blank)}) == \
            VerifyConfig(mode="sample")
        assert VerifyConfig.from_env({"HICACHE_VERIFY": blank}).mode is Mode.OFF


def test_an_explicit_choice_does_not_read_the_variable_it_replaces(monkeypatch, tmp_path):
    """A bad HICACHE_VERIFY is an error only where it is used: `enable("strict")` (and
    `from_env(mode=...)`, what `hicache replay --verify` calls) refused it anyway."""
    from hicache import verified
    monkeypatch.setenv("HICACHE_VERIFY", "bogus")
    assert VerifyConfig.from_env(mode="strict").mode is Mode.STRICT
    assert VerifyConfig.from_env({"HICACHE_VERIFY_RATE": "x"}, mode="sample", sample_rate=0.5).sample_rate == 0.5
    try:
        assert verified.enable("strict", violation_dir=str(tmp_path)).mode is Mode.STRICT
        assert verified.current().mode is Mode.STRICT
    finally:
        verified.disable()
    with pytest.raises(ValueError, match="^HICACHE_VERIFY: 'bogus' is not one of"):
        verified.enable()           # (no mode given: the variable is what is used)
    # a variable still used is still checked
    monkeypatch.setenv("HICACHE_VERIFY_RATE", "x")
    with pytest.raises(ValueError, match="^HICACHE_VERIFY_RATE: 'x'"):
        verified.enable("sample")


def test_import_under_an_empty_hicache_verify_is_strict(monkeypatch, tmp_path):
    """`import hicache.verified` turns strict mode on when HICACHE_VERIFY is unset; set but
    empty is unset (it was off)."""
    import sys

    import hicache
    monkeypatch.setenv("HICACHE_VERIFY", "")
    monkeypatch.setenv("HICACHE_VIOLATION_DIR", str(tmp_path))
    # as in a fresh process, where the import is what reads the variable
    monkeypatch.delitem(sys.modules, "hicache.verified", raising=False)
    monkeypatch.delattr(hicache, "verified", raising=False)
    import hicache.verified as fresh
    try:
        assert fresh.current().mode is Mode.STRICT
    finally:
        fresh.disable()


def test_enable_and_disable_choose_without_patching_the_runtime_classes(monkeypatch, tmp_path):
    """enable/disable only choose the configuration the runtime's constructors read
    (verify_hook): HiCache's and DependentSet's own __init__ and close stay in their class
    dicts (rewriting them deoptimized every site touching a cache), yet a cache built after
    enable carries a monitor whose final check runs at close, one built after disable none,
    whatever HICACHE_VERIFY says (one built before disable still checks at its close); with
    no choice made, the variable attaches."""
    from hicache import verified
    from hicache.monitors import attach as registry
    from hicache.runtime.cache import HiCache
    from hicache.runtime.draft import DependentSet
    own = {cls: (vars(cls)["__init__"], vars(cls)["close"]) for cls in (HiCache, DependentSet)}
    policy, _ = plan(1, W)
    monkeypatch.setenv("HICACHE_VIOLATION_DIR", str(tmp_path))
    before = registry.chosen()
    try:
        verified.enable("sample", violation_dir=str(tmp_path))
        assert verified.enabled()
        cache = make_cache(W, policy)
        mon = verified.monitor_of(cache)
        assert mon is not None and mon.cfg.mode is Mode.SAMPLE and mon.cache_checks == 0
        cache.close()
        cache.close()                       # (idempotent: the final check ran once)
        assert mon.cache_checks == 1
        # a cache built while the mode was on keeps its monitor: closed after disable, its
        # final check still runs (disable chooses for caches built later)
        kept = make_cache(W, policy)
        kept_mon = verified.monitor_of(kept)
        monkeypatch.setenv("HICACHE_VERIFY", "strict")
        verified.disable()
        kept.close()
        assert kept_mon.cache_checks == 1
        assert not verified.enabled()
        cache = make_cache(W, policy)
        assert verified.monitor_of(cache) is None and cache.bus.listeners == []
        cache.close()
        registry.choose(None)               # (no choice made: the variable decides)
        cache = make_cache(W, policy)
        assert verified.monitor_of(cache).cfg.mode is Mode.STRICT
        cache.close()
    finally:
        verified.disable()
        registry.choose(before)
    assert {cls: (vars(cls)["__init__"], vars(cls)["close"]) for cls in own} == own


def test_violation_dir_takes_a_path():
    """A pathlib.Path (any os.PathLike) is a directory path: it was refused as not a str. It is
    kept as its str, so configs given either form are equal."""
    import pathlib
    cfg = VerifyConfig(mode="strict", violation_dir=pathlib.Path("/tmp/traces"))
    assert cfg.violation_dir == "/tmp/traces" and type(cfg.violation_dir) is str
    assert cfg == VerifyConfig(mode="strict", violation_dir="/tmp/traces")
    for bad in (b"/tmp/traces", 3, None):
        with pytest.raises(ValueError, match="^violation_dir: must be a directory path"):
            VerifyConfig(violation_dir=bad)


# ---------------------------------------------------------------- map's own invariant forms
def test_linear_slot_in_one_owner_agrees_with_generated(tmp_path):
    rng = random.Random(5)
    checked = 0
    policy, reqs = plan(1, W)
    cache = make_cache(W, policy)
    m = HostTierMap(cache)
    samples = []
    # (not on the loader's LoadBackLayer: the tree may be mid-change on the scheduler's thread)
    cache.bus.subscribe(lambda a, f: a == A.LoadBackLayer or samples.append((m.constants(), m.state())))
    run_workload(cache, reqs)
    names = ("idle", "reserved", "protected", "synced", "backup")
    for raw, s in samples:
        C = host_tier.constants(raw)
        variants = [s]
        for _ in range(4):    # mutate one slot's state, or one page's host slot
            slot = list(s["slot"])
            h = rng.randrange(len(slot))
            slot[h] = rng.choice(names)
            variants.append(dict(s, slot=tuple(slot)))
            host = dict(s["host"].d)
            n = rng.randrange(len(host))
            host[n] = rng.randrange(0, len(slot) + 1)
            variants.append(dict(s, host=Fcn(host)))
            # ... and with the key kinds the map gives its functions (read by their values
            # alone, `_values_below`), the spare page's slot included
            variants.append(dict(s, host=Fcn(host, KK_INT | KK_DENSE0)))
            backup = dict(s["backupOp"].d)
            backup[rng.randrange(len(backup))] = rng.randrange(0, len(slot) + 1)
            variants.append(dict(s, backupOp=Fcn(backup, KK_INT | KK_DENSE0)))
            # ... and a value that is no exact int (TRUE: slot 1 by equality, counted by the
            # generic loops, not the one C pass)
            host[n] = True
            variants.append(dict(s, host=Fcn(host, KK_INT | KK_DENSE0)))
        for v in variants:
            want = host_tier.inv_SlotInOneOwner(C, v)
            got = slot_in_one_owner_linear(C, v)
            assert (want is None) == (got is None)
            checked += 1
    assert checked > 100


def test_mapped_states_share_the_flat_functions_while_the_tree_keeps_its_pages():
    """The functions that are 0 (or FALSE) on every page are kept from one mapped state to
    the next while the tree has as many pages, and built anew when it has not, shared by
    every map of the process (a fresh map's state has the same ones); each state's functions
    are those of a fresh map, value for value. The table of them stays bounded."""
    from hicache.monitors.maps import host_tier
    policy, reqs = plan(2, W)
    cache = make_cache(W, policy)
    m = HostTierMap(cache)
    seen = collections.Counter()
    last: list = []

    def compare(action, fields):
        if action == A.LoadBackLayer:       # (the loader's: the tree may be mid-change)
            return
        s, fresh = m.state(), HostTierMap(cache).state()
        assert s == fresh and {k: type(v) for k, v in s.items()} == {k: type(v) for k, v in fresh.items()}
        assert fresh["loadDone"] is s["loadDone"] and len(host_tier._FLATS) <= host_tier._FLATS_MAX
        for k in ("dev", "stor", "hits", "loadReq", "backupOp", "host"):
            assert [type(v) for v in s[k].d.values()] == [type(v) for v in fresh[k].d.values()], k
        if last and last[0]["len"] == s["len"]:
            seen["kept"] += s["loadDone"] is last[0]["loadDone"]
        elif last:
            seen["built"] += s["loadDone"] is not last[0]["loadDone"]
        last[:] = [s]
    cache.bus.subscribe(compare)
    run_workload(cache, reqs)
    assert seen["kept"] > 20 and seen["built"] > 5, seen


def test_values_below_counts_what_a_read_key_by_key_counts():
    """`_values_below` (the values alone, where the keys allow) counts as reading keys
    0..k-1 one by one does, or fails as that does, on random functions over 0..n-1."""
    from hicache.monitors.maps.host_tier import _values_below
    from hicache.monitors.maps.loops import count_pages
    rng = random.Random(11)
    for _ in range(2000):
        n = rng.randrange(0, 8)
        kk = rng.choice((None, KK_INT, KK_INT | KK_DENSE0))
        # (keys 0..n-1, or, where the kind does not claim them dense, some missing and one
        # past them: as many keys as a dense function over 0..k-1 has, but not those keys)
        keys = list(range(n)) if kk == KK_INT | KK_DENSE0 or rng.random() < 0.5 else \
            [i for i in range(n) if rng.random() < 0.7] + [n + 3]
        d = {i: rng.choice((0, 0, 1, 2, 3, False, True, 0.0)) for i in keys}
        f = Fcn(d, kk)
        k = rng.choice((len(d), len(d) - 1, rng.randrange(-1, n + 2)))
        try:
            want: dict | None = {}
            count_pages(want, [d[i] for i in range(k)], 1, None, 0)
        except KeyError:
            want = None
        try:
            got: dict | None = {}
            count_pages(got, _values_below(f, d, k), 1, None, 0)
        except KeyError:
            got = None
        assert got == want, (d, f.kk, k)


def test_tree_write_through_prefix_equals_spec_on_a_chain():
    C = host_tier.constants({"NNodes": 4, "NSlots": 4, "NLayers": 1, "NReqs": 1,
                             "Policies": frozenset({"write_through"}), "BugEvictDuringLoad": False,
                             "BugAbortLeak": False})
    for hosts in [(1, 2, 0, 0), (0, 2, 0, 0), (1, 0, 3, 0), (1, 2, 3, 0)]:
        s = {"policy": "write_through", "len": 3, "host": Fcn(dict(enumerate(hosts))), "_parent": (-1, 0, 1, 2)}
        assert (host_tier.inv_WriteThroughPrefix(C, s) is None) == (write_through_prefix_tree(C, s) is None)


# ---------------------------------------------------------------- violations: traces and reporting
def _leak_behind_the_monitor(mode: str, tmp_path):
    """A clean run, then a host slot reserved with no event (a leak only a cache check can
    see): (cache, monitor, the violation the cache check raised)."""
    from hicache.monitors.attach import monitor_cache
    policy, reqs = plan(0, W)
    cache = make_cache(W, policy)
    mon = monitor_cache(cache, VerifyConfig(mode=mode, sample_rate=0.05, sample_budget=None,
                                            violation_dir=str(tmp_path)))
    run_workload(cache, reqs)
    cache.host.reserve(1)
    with pytest.raises(ProtocolViolation) as info:
        mon.cache_check()
    return cache, mon, info.value


@pytest.mark.parametrize("mode", ["strict", "sample"])
def test_a_cache_checks_violation_is_explained_on_the_state_it_checked(tmp_path, mode):
    """The trace of a violation a cache check finds ends with the state it checked (a step
    named cache_check); it had no state in strict mode ("the trace has no state" from
    hicache explain) and only the last sampled states in sample mode (explain then blamed
    an event whose state had passed)."""
    from hicache.explain import explain
    from hicache.explain.report import to_json
    _, mon, e = _leak_behind_the_monitor(mode, tmp_path)
    assert e.action == "cache_check" and e.property == "SlotInOneOwner"
    doc = read_itf(e.trace_path)
    assert doc["states"] and doc["states"][-1]["#meta"]["action"] == "cache_check"
    if mode == "sample":          # the last sampled state before it, in the same numbering
        assert len(doc["states"]) >= 2 and e.diff
    j = to_json(explain(e.trace_path))
    assert j["violated"] == "SlotInOneOwner"
    assert j["first_violating_step"] == len(doc["states"]) - 1


def test_a_monitor_reports_one_violation_then_stops(tmp_path):
    """After a violation the state is past what the spec allows: a teardown's close() (its
    final cache check) or the next event must not raise a second violation."""
    cache, mon, _ = _leak_behind_the_monitor("strict", tmp_path)
    assert mon.tripped
    steps = mon.steps
    cache.close()                 # emits events, runs no check
    mon.cache_check()
    assert mon.steps == steps and len(list(tmp_path.iterdir())) == 1


def test_an_unwritable_violation_directory_still_raises_the_violation(tmp_path):
    """A file where the violation directory should be, with warnings turned into errors
    (pytest -W error): the ProtocolViolation is raised (it was replaced by the
    RuntimeWarning the trace writer issued) and says where the trace could not go."""
    import warnings
    blocker = tmp_path / "afile"
    blocker.write_text("")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, _, e = _leak_behind_the_monitor("strict", blocker)
    assert e.trace_path is None and str(blocker) in e.trace_error
    assert f"trace: not written ({blocker}: " in str(e)


def test_a_violation_survives_pickling(tmp_path):
    """A violation raised in a worker process reaches the parent as itself (its keyword-only
    constructor made unpickling fail with a TypeError)."""
    import copy
    import pickle
    _, _, e = _leak_behind_the_monitor("strict", tmp_path)
    for back in (pickle.loads(pickle.dumps(e)), copy.copy(e)):
        assert isinstance(back, ProtocolViolation)
        assert (back.property, back.action, back.trace_path, str(back)) == (e.property, e.action, e.trace_path, str(e))
        assert back.checked_because == e.checked_because == "a cache check"


def test_trace_writers_racing_for_one_name_each_get_a_file(tmp_path):
    """Threads (or pytest-xdist workers sharing the directory) writing traces of the same
    step: each trace is a new file (an exists-then-write check let two take one name)."""
    import threading
    from hicache.tla.itf import write_itf_new
    paths, start = [], threading.Barrier(8)

    def write(i):
        start.wait()
        paths.append(write_itf_new(tmp_path, "HostTier-step7", {"i": i}))
    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(paths)) == 8
    assert sorted(json.loads(open(p).read())["i"] for p in paths) == list(range(8))


def test_verify_config_fields_are_checked_and_named():
    """A rate given as a string was a bare TypeError from a comparison; a bool seed passed as
    1; an empty HICACHE_VIOLATION_DIR wrote traces into the current directory."""
    for kw, msg in ((dict(sample_rate="0.5"), "sample_rate: must be a number in [0, 1], got '0.5'"),
                    (dict(sample_rate=float("nan")), "sample_rate: must be a number in [0, 1], got nan"),
                    (dict(seed=True), "seed: must be an integer, got True"),
                    (dict(history=1), "history: must be an integer >= 2, got 1"),
                    (dict(violation_dir=""), "violation_dir: must be a directory path, got ''")):
        with pytest.raises(ValueError) as e:
            VerifyConfig(mode="sample", **kw)
        assert str(e.value) == msg
    assert VerifyConfig.from_env({"HICACHE_VERIFY": "sample", "HICACHE_VIOLATION_DIR": " "}).violation_dir == \
        "hicache-violations"


def test_a_state_itf_cannot_encode_still_raises_the_violation_and_says_why(tmp_path):
    """A mapped value of a runtime type the ITF encoder does not know (a numpy integer page
    once reached a free set): the violation is raised as a ProtocolViolation whose message
    says the trace could not be encoded, not as the encoder's TypeError."""
    import numpy as np
    cache = make_cache(W, "write_through")
    m = HostTierMap(cache)
    mon = Monitor(m, VerifyConfig(mode="strict", violation_dir=str(tmp_path)))
    real = m.state

    def state():
        s = dict(real())
        s["hits"] = Fcn({n: np.int64(5) for n in s["hits"].d})      # not in 0..2: TypeOK fails
        return s
    m.state = state
    cache.bus.subscribe(mon)
    with pytest.raises(ProtocolViolation) as exc:
        cache.match([1, 2])
    e = exc.value
    assert e.property == "TypeOK" and e.trace_path is None
    assert "not encodable as ITF" in e.trace_error and "not written (not encodable" in str(e)
    _close_quietly(cache)


# ---------------------------------------------------------------- sample mode's budget
class _FakeClock:
    """The monitor's clock, driven by the test: the runtime's time advances `per_event` at
    each event, a from-scratch map costs `per_map` (what a sampled check spends)."""

    def __init__(self, per_event: float, per_map: float):
        self.now, self.per_event, self.per_map = 0.0, per_event, per_map

    def __call__(self) -> float:
        return self.now


def _timed_cache(monkeypatch, map_cls, costly: str, per_event=0.1, seed=0):
    """A workload's cache and a map of it on the monitor's fake clock: each event takes
    `per_event` of the runtime's time, the map's `costly` method (a from-scratch state, an
    incremental sync: what a checked step spends) 1 s."""
    from hicache.monitors import runtime
    clock = _FakeClock(per_event=per_event, per_map=1.0)
    monkeypatch.setattr(runtime, "_clock", clock)
    policy, reqs = plan(seed, WorkloadConfig(requests=60))
    cache = make_cache(W, policy)
    rmap = map_cls(cache)
    work = getattr(rmap, costly)

    def costly_work():
        clock.now += clock.per_map
        return work()
    setattr(rmap, costly, costly_work)

    def runtime_time(action, fields):
        clock.now += clock.per_event
    cache.bus.subscribe(runtime_time)
    return cache, rmap, clock, reqs


def _budgeted(monkeypatch, tmp_path, budget, rate=1.0, seed=0, always=None):
    cache, rmap, clock, reqs = _timed_cache(monkeypatch, HostTierMap, "state", seed=seed)
    if always is not None:
        rmap.always_check = always        # (the map's always-checked events, read by the monitor)
    mon = Monitor(rmap, VerifyConfig(mode="sample", sample_rate=rate, seed=seed, sample_budget=budget,
                                     violation_dir=str(tmp_path)))
    cache.bus.subscribe(mon)
    return cache, mon, clock, reqs


def test_sample_budget_lets_samples_go_once_checking_exceeds_its_share(monkeypatch, tmp_path):
    """At rate 1 every event is drawn; with a budget of half the time and a check costing
    ten events' time, about one event in eleven is checked, the rest are let go and
    counted, and the time spent checking stays within the budget (plus the one check that
    crossed it)."""
    cache, mon, clock, reqs = _budgeted(monkeypatch, tmp_path, budget=0.5)
    run_workload(cache, reqs)
    assert mon.steps > 200
    assert mon.checked + mon.budget_skipped == mon.steps       # every event was drawn
    assert mon.steps / 16 < mon.checked < mon.steps / 8
    assert mon._spent <= 0.5 * clock.now       # (each sample afforded with its estimated cost)
    # the cache check runs over budget, and counts against it
    spent = mon._spent
    mon.cache_check()
    assert mon.cache_checks == 1 and mon._spent == spent + clock.per_map


def test_sample_budget_keeps_the_next_cache_checks_cost_in_the_bucket(monkeypatch, tmp_path):
    """A drawn sample is afforded only with the next cache check's estimated cost left over
    after it (`_need`: before any cache check, the sample's own, as here: both map the
    state once, 1 s). The first sample waits for a full bucket (its cost unknown); the
    second until both costs are in the bucket again. From then on, after every event, what
    the monitor spent plus the final check close() would run then is within the budget's
    share of its life, and so is the whole after that check: the final check no longer
    comes on top of a full share of samples. Then the cache check's own cost is the
    estimate."""
    cache, mon, clock, reqs = _budgeted(monkeypatch, tmp_path, budget=0.5)
    born, over = clock.now, []

    def look(action, fields):        # (after the monitor: what close() would leave now)
        if mon.checked >= 2:
            over.append(mon._spent + clock.per_map - 0.5 * (clock.now - born))
    cache.bus.subscribe(look)
    run_workload(cache, reqs)
    assert mon.checked > 10 and len(over) > 100
    assert max(over) <= 1e-9
    mon.cache_check()
    spent, alive = mon.checking()
    assert spent == (mon.checked + 1) * clock.per_map and spent <= 0.5 * alive
    assert mon._cache_cost == clock.per_map and mon._need() == 2 * clock.per_map
    # the estimate follows the cache check's cost
    clock.per_map = 3.0
    mon.cache_check()
    assert mon._need() == 1.0 + 3.0


def test_a_fresh_monitors_first_sample_waits_for_a_full_bucket(monkeypatch, tmp_path):
    """Before any check a sample's cost is unknown: the first drawn sample is afforded only
    once the bucket is full (sample_budget x budget_window, here 0.5 x 2 s = 1 s, which
    half the time's credit fills after 2 s), every sample drawn before is let go, and from
    the first event on, what the monitor has spent checking is within the budget's share
    of its life, the sample that spends the bucket included (1 s checked after >= 2 s).
    Run on no credit, as it was, the first sample spent 1 s in the first 0.1 s."""
    cache, rmap, clock, reqs = _timed_cache(monkeypatch, HostTierMap, "state")
    mon = Monitor(rmap, VerifyConfig(mode="sample", sample_rate=1.0, seed=0, sample_budget=0.5,
                                     budget_window=2.0, violation_dir=str(tmp_path)))
    cache.bus.subscribe(mon)
    born, seen = clock.now, []

    def look(action, fields):        # (after the monitor: its bucket after each event)
        seen.append((clock.now - born, mon.checked, mon.steps - mon.budget_skipped, mon._spent))
    cache.bus.subscribe(look)
    assert mon._need() == 0.5 * 2.0
    run_workload(cache, reqs)
    first = next(i for i, (_, checked, _, _) in enumerate(seen) if checked)
    # every step before it was drawn (rate 1) and let go; it came once 2 s had passed
    assert first >= 19 and seen[first - 1][0] < 2.0 and seen[first][1] == 1
    assert all(not_let_go == 0 for _, _, not_let_go, _ in seen[:first]) and seen[first][2] == 1
    assert all(spent <= 0.5 * t + 1e-9 for t, _, _, spent in seen)
    assert mon._last_cost == clock.per_map and mon._need() == 2 * clock.per_map


def test_no_sample_budget_checks_every_drawn_sample(monkeypatch, tmp_path):
    cache, mon, clock, reqs = _budgeted(monkeypatch, tmp_path, budget=None)
    run_workload(cache, reqs)
    assert mon.checked == mon.steps > 200 and mon.budget_skipped == 0
    assert mon.checking() is None          # (nothing to bound: no budget's time to report)


def test_a_budgeted_monitor_reports_its_checking_beside_its_lifetime(monkeypatch, tmp_path):
    """`checking()`: the seconds charged to the budget (each checked sample's map and
    checks, the cache check) and the seconds since the monitor was made, on its clock; what
    the report and the trace carry as checking_s and alive_s."""
    from hicache.monitors.attach import describe
    from hicache.monitors.runtime import checking_fields
    cache, mon, clock, reqs = _budgeted(monkeypatch, tmp_path, budget=0.5)
    born = clock.now                 # (made at this instant: the fake clock moves with events only)
    run_workload(cache, reqs)
    mon.cache_check()
    spent, alive = mon.checking()
    # each checked sample and the cache check map the state once, 1 s each on this clock
    assert spent == (mon.checked + 1) * clock.per_map > 0
    assert alive == clock.now - born
    # over the whole run the budget held: half the time, plus the cache check run over it
    assert spent <= 0.5 * alive + clock.per_map
    m = {"spec": "spec/HostTier.tla", "events": mon.steps, "checked": mon.checked, "budget_skipped": 0,
         **checking_fields(mon.checking())}
    assert describe(m).endswith(f"; checking took {spent:.2f} s of its {alive:.2f} s ({100 * spent / alive:.1f} %)")
    assert checking_fields(None) == {}


def test_the_checks_native_form_is_built_with_the_monitor_not_charged_to_a_sample(monkeypatch, tmp_path):
    """The fused check's native form is built once a process; a sample-mode monitor builds it
    when it is made. Built at the first check instead, its cost (tens of ms) was charged to
    the budget as that sample's and taken as the next one's estimate: a fresh process then
    checked nothing for seconds."""
    from hicache import buildcache
    from hicache.monitors import fused_native, fused_whole
    if buildcache.disabled():
        pytest.skip("native code is off (HICACHE_NATIVE=0): no native form is built")
    cache, rmap, clock, reqs = _timed_cache(monkeypatch, HostTierMap, "state")
    monkeypatch.setattr(fused_native, "_done", {})       # (as in a fresh process)
    build = fused_whole.build
    built = []

    def slow_build(*a, **kw):
        built.append(clock.now)
        clock.now += 100.0           # (a build that costs far more than any check)
        return build(*a, **kw)
    monkeypatch.setattr(fused_whole, "build", slow_build)
    mon = Monitor(rmap, VerifyConfig(mode="sample", sample_rate=1.0, seed=0, sample_budget=0.5,
                                     violation_dir=str(tmp_path)))
    assert built == [0.0] and mon._scratch_fast is not None     # (built while the monitor was made)
    cache.bus.subscribe(mon)
    run_workload(cache, reqs)
    # the samples are charged their own cost alone (one 1 s map each), the build none of it
    assert len(built) == 1 and mon.checked > 3
    assert mon._last_cost == clock.per_map and mon.checking()[0] == mon.checked * clock.per_map


@pytest.mark.parametrize("native", [True, False], ids=["LetGo", "python"])
@pytest.mark.parametrize("seed", range(3))
def test_the_gate_lets_go_the_samples_the_budget_would(monkeypatch, tmp_path, seed, native):
    """The gate lets a drawn sample go itself while the clock is before its `closed_until`,
    which the monitor keeps at each change of its bucket: `_afford`'s decision. On a fake
    clock of binary fractions (no rounding at a boundary), every sample the gate lets go is
    one `_afford` would let go at that instant (its test on a copy of the bucket), and every
    one the gate hands over `_afford` affords: the gate lets go exactly those the budget
    would, gap samples and drawn evictions alike; with the monitor's let-go in C (`LetGo`)
    and in Python (`_gate_let_go`). A let-go is seen by the watch hooks, which every let-go
    runs, the monitor's `sampled` False and its `cause` the draw's. (The event order of a
    threaded workload varies from run to run: checked within one run, not against a
    second.)"""
    from hicache.monitors import gate, runtime
    if native and gate.LetGo is None:
        pytest.skip("the gate extension is not built here")
    if not native:
        monkeypatch.setattr(runtime, "LetGo", None)

    def would_afford() -> bool:
        # (`_afford`'s test on a copy of the bucket of `mon`, made below)
        b, now, need = mon._budget, runtime._clock(), mon._need()
        credit = min(max(b * mon._window, need), mon._credit + b * (now - mon._filled))
        return credit >= need
    let, refused, weighing = [], [], []
    own_afford, own_weighted_step = Monitor._afford, Monitor._weighted_step

    def afford(self):
        ok = own_afford(self)
        if not ok and not weighing:
            refused.append(self.steps)
        return ok

    def weighted_step(self, *a):
        # (a weighted event at the gap's end, which the gate hands over whatever the budget:
        # drawn on its own there, `_afford` may let it go)
        weighing.append(1)
        try:
            return own_weighted_step(self, *a)
        finally:
            weighing.pop()
    monkeypatch.setattr(Monitor, "_afford", afford)
    monkeypatch.setattr(Monitor, "_weighted_step", weighted_step)
    cache, rmap, clock, reqs = _timed_cache(monkeypatch, HostTierMap, "state", per_event=0.125, seed=seed)
    mon = Monitor(rmap, VerifyConfig(mode="sample", sample_rate=0.3, seed=seed, sample_budget=0.25,
                                     violation_dir=str(tmp_path)))
    assert (mon._let_go is not None) == native

    def watch(name, fields):
        if not mon.sampled:
            let.append((mon.cause, would_afford()))
    mon.watch_hooks.append(watch)
    cache.bus.subscribe(mon.listener)
    run_workload(cache, reqs)
    assert not [x for x in let if x[1]] and refused == []
    assert mon.budget_skipped == len(let) > 10 and mon.checked > 3
    causes = {c for c, _ in let}
    assert causes == {CheckCause.DRAW, CheckCause.WEIGHTED_DRAW}       # (gap samples, drawn evictions)


def test_sample_budget_keeps_the_seeded_draws(monkeypatch, tmp_path):
    """The budget lets drawn samples go but never draws others: the steps checked under a
    budget are a subset of those the same seed checks without one."""
    def checked_seqs(budget):
        cache, mon, clock, reqs = _budgeted(monkeypatch, tmp_path, budget=budget, rate=0.3, seed=4)
        seqs = []
        mon.step_hooks.append(lambda name, fields: seqs.append(fields["seq"]))
        run_workload(cache, reqs)
        return mon, seqs
    free, all_drawn = checked_seqs(None)
    tight, afforded = checked_seqs(0.2)
    assert tight.budget_skipped > 0 and tight.checked + tight.budget_skipped == free.checked
    assert afforded and set(afforded) < set(all_drawn)


def test_sample_budget_keeps_no_more_than_a_windows_credit_after_a_quiet_spell(monkeypatch, tmp_path):
    """Credit is earned by time passing, but a quiet spell (an idle canary) earns at most
    the window's worth: after an hour with no events, the drawn samples afforded in a row
    are those the window pays for, not the thousands an hour's credit would pay; after
    that, checks come at the budget's pace again (about one event in eleven). The window's
    credit is 0.5 x 20 s = 10 s; each check costs 1 s and, with its event's 0.1 s, earns
    0.55 s back: 20 checks in a row leave 1 s, the estimated cost of the next."""
    cache, mon, clock, reqs = _budgeted(monkeypatch, tmp_path, budget=0.5)
    mon._window = 20.0
    afforded_in_a_row = []

    def look(name, fields):
        afforded_in_a_row.append(mon.sampled)
    cache.bus.subscribe(look)

    def idle_hour(i):
        if i == 19:
            clock.now += 3600.0
            afforded_in_a_row.clear()
    run_workload(cache, reqs, on_request=idle_hour)
    after = afforded_in_a_row[:-1]     # (the last: close's cache check, no event)
    burst = next(i for i, checked in enumerate(after) if not checked)
    assert 18 <= burst <= 21          # (not the ~6500 an hour of credit would pay)
    rest = after[burst:]
    assert len(rest) > 100 and sum(rest) < len(rest) / 8
    # the budget over the whole span still holds
    assert mon._spent <= 0.5 * clock.now


def test_sample_budget_affords_a_check_costlier_than_its_window(monkeypatch, tmp_path):
    """A window whose credit (0.5 x 0.1 s) is less than one check's cost (1 s) still lets
    checks run at the budget's pace: the bucket holds one check's cost at least."""
    cache, mon, clock, reqs = _budgeted(monkeypatch, tmp_path, budget=0.5)
    mon._window = 0.1
    run_workload(cache, reqs)
    assert mon.steps / 16 < mon.checked < mon.steps / 8


def test_sample_budget_estimates_a_sample_by_drawn_samples_only(monkeypatch, tmp_path):
    """An always-checked event (checked whatever the draw: here RequestFinish, on a small
    state, 0.01 s) does not become the estimate of the next drawn sample (1 s): estimated
    by it, a sample was afforded with a hundredth of its cost in the bucket."""
    cache, mon, clock, reqs = _budgeted(monkeypatch, tmp_path, budget=0.5, rate=0.2, always=("RequestFinish",))
    ends = []

    def cheap_ends(action, fields):      # (called before the monitor, at each event)
        clock.per_map = 0.01 if action == "RequestFinish" else 1.0
        ends.append(action == "RequestFinish")
    cache.bus.listeners.insert(0, cheap_ends)
    run_workload(cache, reqs)
    assert ends[-1] and sum(ends) > 40       # the last event is an always-checked one
    assert mon.checked > sum(ends) and mon._last_cost == 1.0


def _budgeted_incremental(monkeypatch, tmp_path, budget, per_event=0.1, per_record=0.0):
    """Sample mode on an incremental map (not gap-counted: each step is drawn one step
    ahead, and a drawn one syncs the map), whose sync costs 1 s on the fake clock; each
    step's recording in the history costs `per_record` (an unchecked step's dispatch)."""
    import collections

    from hicache.monitors.maps.host_tier_inc import IncrementalHostTierMap
    cache, rmap, clock, reqs = _timed_cache(monkeypatch, IncrementalHostTierMap, "sync", per_event=per_event)
    mon = Monitor(rmap, VerifyConfig(mode="sample", sample_rate=1.0, seed=0, sample_budget=budget,
                                     violation_dir=str(tmp_path)))

    class CostlyHistory(collections.deque):
        def append(self, step):
            clock.now += per_record
            super().append(step)
    mon.history = CostlyHistory(mon.history, maxlen=mon.history.maxlen)
    cache.bus.subscribe(mon)
    checked = []      # per step of the monitor's (an event it maps to none is no step)

    def look(action, fields):
        if mon.steps > len(checked):
            checked.append(mon.sampled)
    cache.bus.subscribe(look)
    return cache, mon, clock, reqs, checked


def test_sample_budget_on_an_incremental_map_checks_at_its_pace_not_in_pairs(monkeypatch, tmp_path):
    """A step drawn one step ahead is afforded at the step itself, once the step before has
    been charged: before, it was afforded before that step's own cost was taken, so every
    check came with a second one right after it (twice the budget's pace)."""
    cache, mon, clock, reqs, checked = _budgeted_incremental(monkeypatch, tmp_path, budget=0.5)
    run_workload(cache, reqs)
    assert mon.steps > 200 and len(checked) == mon.steps
    pairs = sum(1 for a, b in zip(checked, checked[1:]) if a and b)
    assert pairs == 0
    assert mon.checked + mon.budget_skipped == mon.steps       # rate 1: every step drawn
    assert mon.steps / 16 < mon.checked < mon.steps / 8
    assert mon._spent <= 0.5 * clock.now + mon._last_cost


def test_sample_budget_charges_checks_not_every_events_dispatch(monkeypatch, tmp_path):
    """Every event's dispatch costs the monitor a little (here its recording, 0.02 s; the
    runtime's own time between events 0.001 s). Charged to the budget, an unchecked step's
    dispatch cost more than the bucket earned in its time (0.9 x 0.021 s), so after the
    first check the bucket stayed in debt and nothing more was checked; only checking is
    charged now: a check (1 s) about every 55 events."""
    cache, mon, clock, reqs, checked = _budgeted_incremental(monkeypatch, tmp_path, budget=0.9,
                                                            per_event=0.001, per_record=0.02)
    run_workload(cache, reqs)
    assert mon.steps > 200
    assert mon.checked >= 3
    assert mon._spent <= 0.9 * clock.now + mon._last_cost


def test_sample_budget_charges_from_two_threads_are_never_lost(monkeypatch):
    """The bucket is charged from the scheduler thread (cache checks) while a transfer
    thread's event (a DraftState monitor's) brings it up to date: both read-modify-write
    the credit, so without the lock a charge made between the other's read and write was
    lost (the monitor then checked more than its budget). A stopped clock earns no
    credit: the bucket must end at exactly minus the charges."""
    import sys
    import threading

    from hicache.monitors import runtime
    monkeypatch.setattr(runtime, "_clock", lambda: 0.0)
    cache = make_cache(W, plan(0, WorkloadConfig(requests=1))[0])
    try:
        mon = Monitor(HostTierMap(cache), VerifyConfig(mode="sample", sample_budget=0.5))
    finally:
        cache.close()
    n = 60000
    start = threading.Barrier(2)

    def charge():
        start.wait()
        for _ in range(n):
            mon._charge(1.0)

    def afford():
        start.wait()
        for _ in range(n):
            mon._afford()
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)      # switch threads as often as the interpreter can
    try:
        threads = [threading.Thread(target=charge), threading.Thread(target=afford)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        sys.setswitchinterval(old)
    assert not any(t.is_alive() for t in threads)
    assert mon._spent == n and mon._credit == -n


def test_sample_budget_is_validated_and_read_from_the_environment():
    assert VerifyConfig().sample_budget == 0.01
    assert VerifyConfig(sample_budget=None).sample_budget is None
    for bad in (0.0, 1.5, float("nan"), "0.1", True):
        with pytest.raises(ValueError, match="sample_budget"):
            VerifyConfig(mode="sample", sample_budget=bad)
    assert VerifyConfig.from_env({"HICACHE_VERIFY": "sample"}).sample_budget == 0.01
    assert VerifyConfig.from_env({"HICACHE_VERIFY_BUDGET": " 0.1 "}).sample_budget == 0.1
    assert VerifyConfig.from_env({"HICACHE_VERIFY_BUDGET": "None"}).sample_budget is None
    for bad in ("0", "2", "x", "nan"):
        with pytest.raises(ValueError, match="HICACHE_VERIFY_BUDGET"):
            VerifyConfig.from_env({"HICACHE_VERIFY_BUDGET": bad})
    # the window over which a quiet spell's credit is kept: seconds, > 0
    assert VerifyConfig().budget_window == 1.0
    cache = make_cache(W, plan(0, WorkloadConfig(requests=1))[0])
    try:    # (the window a monitor keeps is the configuration's)
        assert Monitor(HostTierMap(cache), VerifyConfig(mode="sample", budget_window=7.5))._window == 7.5
    finally:
        cache.close()
    assert VerifyConfig.from_env({"HICACHE_VERIFY_BUDGET_WINDOW": " 30 "}).budget_window == 30.0
    for bad in (0, -1.0, float("inf"), float("nan"), "1", True):
        with pytest.raises(ValueError, match="budget_window"):
            VerifyConfig(mode="sample", budget_window=bad)
    for bad in ("0", "-2", "inf", "nan", "x"):
        with pytest.raises(ValueError, match="HICACHE_VERIFY_BUDGET_WINDOW"):
            VerifyConfig.from_env({"HICACHE_VERIFY_BUDGET_WINDOW": bad})


@pytest.mark.hicache_unmonitored
@pytest.mark.parametrize("mode", ["strict", "sample"])
def test_a_map_writing_booleans_for_slot_ids_fails_typeok(tmp_path, monkeypatch, mode):
    """A refinement-map bug that Python's `True == 1` hid: host[n] written as "has a host
    copy" (TRUE) instead of the slot id. TypeOK (host[n] \\in HSlots \\cup {NoSlot}) refuses
    it at the first step that maps it, an evaluation error naming the boolean paired with an
    integer, as the interpreter's check does: strict mode through the incremental map (its
    fast path falls back to the exact form), sample mode at the cache check (whose
    from-scratch form tests a function set's membership, which was exact already). Strict
    mode's element-wise form took TRUE for slot 1 before, and named SlotInOneOwner (TRUE
    and slot 1 counted as one slot's references): a wrong diagnosis of the map's bug."""
    from hicache.monitors.maps import host_tier as ht_map, host_tier_inc
    from tests.monitors.tiny_cache import serve, tiny_cache

    real = ht_map.node_slots

    def as_flags(hs, pending, n, backing):
        host, backup = real(hs, pending, n, backing)
        return [h != 0 for h in host], backup
    monkeypatch.setattr(ht_map, "node_slots", as_flags)
    monkeypatch.setattr(host_tier_inc, "node_slots", as_flags)
    cache, mon = tiny_cache(tmp_path, {"mode": mode, "sample_rate": 0.0})
    with pytest.raises(ProtocolViolation) as info:
        serve(cache, [1, 2, 3])
        mon.cache_check()
    _close_quietly(cache)
    e = info.value
    assert e.property == "TypeOK", e
    assert "(evaluation error: attempted to compare a boolean TRUE with an integer" in str(e)
    # strict: at the event after which the map wrote it (the copy to host acknowledged);
    # sample mode (nothing drawn): at the cache check
    assert e.action == ("BackupFinish" if mode == "strict" else "cache_check")


def test_hidden_retention_maps_only_the_retained_idle_slots_reserved():
    """An IDLE slot missing from the free list (taken off it with no state change: held by
    nobody, never reusable) maps to "reserved"; every IDLE slot still on the free list stays
    "idle", and no other slot's name changes."""
    policy, reqs = plan(0, W)
    cache = make_cache(W, policy)
    try:
        run_workload(cache, reqs)
        m = HostTierMap(cache)
        before = m.state()["slot"]
        idle = [h for h, name in enumerate(before) if name == "idle"]
        assert len(idle) >= 2
        taken = cache.host._pages.alloc(1)           # (the allocator's free list only)
        assert taken and before[taken[0]] == "idle"
        after = m.state()["slot"]
        assert after[taken[0]] == "reserved"
        assert [h for h in range(len(after)) if after[h] != before[h]] == taken
    finally:
        _close_quietly(cache)


def test_fused_over_all_is_answered_once_per_spec_and_names():
    """fused_over_all reads only the names of the invariants and overrides: a second monitor
    of the same map gets the answer the first computed (the same object), while another
    set of names, or another spec, is computed on its own and equals a fresh computation."""
    from hicache.monitors import runtime
    from hicache.monitors.maps.host_tier import HostTierMap
    spec = HostTierMap.spec
    over = {"WriteThroughPrefix": None, "SlotInOneOwner": None}
    first = runtime.fused_over_all(spec, dict(spec.INVARIANTS), over)
    assert first is not None and runtime.fused_over_all(spec, dict(spec.INVARIANTS), dict(over)) is first
    assert first == runtime._fused_over_all(spec, dict(spec.INVARIANTS), over)
    fewer = {n: f for n, f in spec.INVARIANTS.items() if n != sorted(first[0])[0]}
    other = runtime.fused_over_all(spec, fewer, over)
    assert other == runtime._fused_over_all(spec, fewer, over) and other[0] == first[0] - {sorted(first[0])[0]}
    assert runtime.fused_over_all(spec, dict(spec.INVARIANTS), {}) == runtime._fused_over_all(spec, spec.INVARIANTS, {})
