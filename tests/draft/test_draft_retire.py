"""TransferRetire on the cache's paths: a transfer leaves the set's records (and its spec slot)
exactly when nobody can read it any more, and reads wait on every load-back into the prefix.

Every test runs the strict monitor (the `verified` fixture's mode), which checks each step,
the retire included, against spec/DraftState.tla."""
from __future__ import annotations

import threading

import pytest
import torch

from draft_support import TOKENS, complete_transfer, compute, host_only_cache, make_cache, stamp
from hicache.monitors.runtime import Monitor, ProtocolViolation, VerifyConfig
from hicache.monitors.maps.draft_state import DraftStateMap
from hicache.runtime import draft
from hicache.runtime.draft import Role
from hicache.runtime.events import Recorder

@pytest.fixture
def host_only(tmp_path, verified):
    """A strict-monitored cache whose TOKENS prefix is on host only (device copy evicted and
    zeroed), the events recorded; yields (cache, deps, recorder)."""
    cache, deps, rec = host_only_cache(verified, str(tmp_path))
    yield cache, deps, rec
    cache.close()
    assert deps.transfers == {}


def _retired(rec: Recorder) -> list[int]:
    return [e.args["t"] for e in rec.events if e.action == "TransferRetire"]


def _gate_until_waited(op) -> None:
    """op's copies run only once somebody waits on it: a read that does not wait on op
    returns before its bytes land (deterministically, no timing)."""
    go = threading.Event()
    copy, wait = op._copy_layer, op.wait

    def gated(layer):
        go.wait(30)
        copy(layer)

    def waiting(timeout=None):
        go.set()
        return wait(timeout)
    op._copy_layer, op.wait = gated, waiting


def test_a_read_waits_on_a_load_another_request_started(host_only):
    """a matched the host-only prefix; b then loads it back. a's read must wait on b's load
    (it fills the pages a's prefix lists) and record its BufferRead: it read the zeroed
    device pages with no wait and no event before."""
    cache, deps, rec = host_only
    a = cache.match(TOKENS)
    b = cache.match(TOKENS)
    orig = cache._load_layer_fn

    def load_fn(op):
        f = orig(op)
        op._copy_layer = f
        _gate_until_waited(op)
        return op._copy_layer
    cache._load_layer_fn = load_fn
    op = cache.load_back(b)
    assert op is not None and not op.done.is_set() and a.loads == []
    got = deps.read(a, None)
    assert op in a.loads and op.holders == 2
    nbytes = cache.device_pool.page_nbytes
    assert all(torch.equal(p, stamp("target", TOKENS, i, nbytes)) for i, p in enumerate(got))
    reads = [e.args["p"] for e in rec.events if e.action == "BufferRead" and e.args["t"] == op.draft_tid]
    assert reads == ["target"]
    cache.finish(a)
    cache.finish(b)


def test_a_shared_load_retires_after_its_last_holder_ends(host_only):
    """b's load is held by b (its starter), by a (joined when a reads) and by c (matched
    while it was in flight): it retires when the last of them ends, after it was applied."""
    cache, deps, rec = host_only
    a = cache.match(TOKENS)
    b = cache.match(TOKENS)
    op = cache.load_back(b)
    assert op is not None and op.wait(30)
    deps.read(a, "draft_kv")                    # a joins b's load
    c = cache.match(TOKENS)                     # not applied yet: c's match joins it too
    assert c.loads == [op]
    cache.poll()                                # applied: nobody joins it from here on
    assert op.applied and op.holders == 3
    cache.finish(b)
    cache.finish(c)
    assert op.draft_tid in deps.transfers and _retired(rec) == [1]      # (1: the backup)
    cache.finish(a)
    assert op.draft_tid not in deps.transfers and _retired(rec) == [1, op.draft_tid]


def test_a_load_held_by_an_aborted_request_retires(host_only):
    cache, deps, rec = host_only
    req = cache.match(TOKENS)
    op = cache.load_back(req)
    assert op is not None and op.wait(30)
    cache.poll()
    assert op.draft_tid in deps.transfers
    cache.abort(req)
    assert op.draft_tid not in deps.transfers and _retired(rec)[-1] == op.draft_tid


def test_a_load_whose_requests_ended_before_it_was_applied_retires_when_applied(host_only):
    cache, deps, rec = host_only
    req = cache.match(TOKENS)
    op = cache.load_back(req)
    assert op is not None and op.wait(30)
    cache.finish(req)                           # holders 0, not applied: a request may still join
    assert op.holders == 0 and not op.applied and op.draft_tid in deps.transfers
    cache.poll()
    assert op.applied and op.draft_tid not in deps.transfers


def test_an_ended_request_reads_nothing_and_holds_nothing(host_only):
    cache, deps, _ = host_only
    a = cache.match(TOKENS)
    cache.finish(a)
    b = cache.match(TOKENS)
    op = cache.load_back(b)
    assert op is not None and op.wait(30) and not op.applied
    with pytest.raises(ValueError, match=r"req: request \d+ has ended"):
        deps.read(a, "draft_kv")
    cache.prefix_pages(a)                       # an ended request joins no load (it would never release it)
    assert a.loads == [] and op.holders == 1
    cache.finish(b)
    cache.poll()
    assert op.draft_tid not in deps.transfers


def test_a_retire_before_the_fire_takes_effect_at_the_fire(tmp_path):
    """The public steps (a CP gather whose close came first): retire marks the transfer, and
    its fire retires it, one TransferRetire after the CompletionFire."""
    cache, deps = make_cache(draft_layout="sidecar")
    mon = Monitor(DraftStateMap(deps), VerifyConfig(mode="strict", violation_dir=str(tmp_path)))
    rec = Recorder()
    deps.bus.subscribe(mon)
    deps.bus.subscribe(rec)
    tid = deps.launch(draft.Kind.GATHER, [0, 1], [0, 1])
    deps.retire(tid)
    assert tid in deps.transfers and deps.transfers[tid].released and _retired(rec) == []
    deps.finish_target(tid)
    for s in deps.cfg.sidecars:
        if s.role is not Role.SWA:
            deps.finish_draft(tid, s.role)
    deps.fire(tid)
    assert [str(e.action) for e in rec.events][-2:] == ["CompletionFire", "TransferRetire"]
    assert deps.transfers == {} and mon.checked == mon.steps == len(rec.events)
    cache.close()


def test_sample_mode_checks_a_retiring_transfer_before_its_record_goes(tmp_path, verified):
    """Bug 13 in sample mode at rate 0 with the request ended before close: the faulty load
    retires, and its record with it. Its retire is checked on the state before it (where the
    fired, incomplete transfer still is), whatever the sample draw; before, nothing caught it."""
    verified.enable("sample", sample_rate=0.0, violation_dir=str(tmp_path))
    cache, deps = make_cache(draft_layout="sidecar")
    compute(cache, deps, TOKENS)
    assert cache.evict_device(cache.cfg.device_pages) > 0
    draft.FAULTS.skip_draft_restore = True
    req = cache.match(TOKENS)
    op = cache.load_back(req)
    assert op is not None and op.wait(30) and op.error is None
    cache.poll()
    with pytest.raises(ProtocolViolation) as e:
        cache.finish(req)
    assert (e.value.property, e.value.kind, e.value.action) == ("CompletionAfterAllCopies", "invariant",
                                                               "TransferRetire")
    # the trace records the runtime's tid and the spec's slot it maps to (the backup's slot,
    # freed at its retire, was taken again by the load)
    import json
    last = json.loads(open(e.value.trace_path).read())["states"][-1]["#meta"]
    assert last["action"] == "TransferRetire" and (last["args"]["t"], last["args"]["slot"]) == (op.draft_tid, 1)
    cache.close()                               # (the monitors tripped: one violation, reported once)




def test_a_sample_monitor_with_action_checks_is_refused():
    """Sample mode checks every retire on the state before it, which only an invariant-only
    map keeps: with action checks the retire's slot is already free when it is mapped."""
    cache, deps = make_cache(draft_layout="sidecar")
    with pytest.raises(ValueError, match=r"DraftStateMap: sample mode .*actions=False"):
        Monitor(DraftStateMap(deps), VerifyConfig(mode="sample"))
    Monitor(DraftStateMap(deps, actions=False), VerifyConfig(mode="sample"))
    cache.close()


def test_an_invariant_only_retire_frees_its_slot_at_the_next_event(tmp_path):
    """A window of one slot, invariants only: the retire is checked with the transfer still
    in its slot (a cache check in between sees the slot idle: the record is gone), the next
    launch takes the same slot, and the window never grows."""
    cache, deps = make_cache(draft_layout="sidecar")
    rmap = DraftStateMap(deps, capacity=1, actions=False)
    mon = Monitor(rmap, VerifyConfig(mode="strict", violation_dir=str(tmp_path)))
    deps.bus.subscribe(mon)
    for i in range(3):
        tid = deps.launch(draft.Kind.GATHER, [i], [i])
        assert rmap.slot_of == {tid: 1}
        complete_transfer(deps, tid)
        deps.retire(tid)
        assert rmap.slot_of == {tid: 1} and mon.history[-1].state["phase"] == ("fired",)
        mon.cache_check()
        assert mon.history[-1].state["phase"] == ("idle",)
    assert rmap.capacity == 1 and mon.checked == mon.steps
    cache.close()


def test_an_event_of_an_unknown_tid_binds_no_slot(tmp_path):
    """A step of a transfer never launched is mapped onto the lowest idle slot, unbound: its
    guard fails there in strict mode; without action checks nothing is bound either (it took
    a slot for good, one per such event, before)."""
    cache, deps = make_cache(draft_layout="sidecar")
    quiet = DraftStateMap(deps, actions=False)
    deps.bus.subscribe(Monitor(quiet, VerifyConfig(mode="strict", violation_dir=str(tmp_path))))
    strict = DraftStateMap(deps)
    deps.bus.subscribe(Monitor(strict, VerifyConfig(mode="strict", violation_dir=str(tmp_path))))
    with pytest.raises(ProtocolViolation) as e:
        deps._emit(draft.D.BufferRead, t=7, p="target")
    assert (e.value.action, e.value.conjunct) == ("BufferRead", 'phase[t] = "fired"')
    assert e.value.arguments["slot"] == 1 and e.value.arguments["t"] == 7
    assert strict.slot_of == quiet.slot_of == {} and strict.tid_at == quiet.tid_at == {}
    cache.close()
