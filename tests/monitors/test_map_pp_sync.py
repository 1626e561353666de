"""PPSync refinement map: one strict monitor per rank and queue kind, over the real pp_sync
adapter (hicache.dist.pp_sync, ranks as threads over dist_fakes) and the real transfer
queues; completions in a seeded random order, some reported late (after the apply)."""
import random

import pytest

from hicache.dist.pp_sync import pp_sync
from hicache.dist.transfers import Transfer, TransferKind, TransferQueue
from hicache.monitors.maps.pp_sync import PPSyncMap
from hicache.monitors.maps.steps import SequenceMonitor, Tee
from hicache.monitors.runtime import ProtocolViolation, VerifyConfig
from hicache.protocol.events import EventRecorder

from dist_fakes import FakeComm, World, run_ranks

KINDS = (TransferKind.LOAD, TransferKind.BACKUP)


class Rank:
    def __init__(self, world, rank, vdir):
        self.comm = FakeComm(world, rank)
        self.topo = self.comm.topo
        self.queues = {k: TransferQueue(k) for k in KINDS}
        self.transfers: dict[int, Transfer] = {}
        self.late: list[Transfer] = []        # done, event not yet emitted
        cfg = VerifyConfig(mode="strict", violation_dir=vdir)
        self.monitors = [SequenceMonitor(PPSyncMap(rank=rank, stage=self.topo.stage, cp=world.cp, kind=str(k),
                                                   transfer_of=self.transfers.get,
                                                   downstream=self.topo.next_rank is not None), cfg)
                         for k in KINDS]
        self.events = EventRecorder()
        self.listener = Tee(self.events, self.monitors)

    def issue(self, tid, kind):
        t = Transfer(tid, kind, 1, [])
        self.transfers[tid] = t
        self.queues[kind].push(t)
        self.listener("TransferIssue", {"rank": self.comm.rank, "tid": tid, "kind": str(kind)})

    def complete(self, t, report=True):
        t.done.set()
        if report:
            self.listener("TransferComplete", {"rank": self.comm.rank, "tid": t.tid, "kind": str(t.kind)})
        else:
            self.late.append(t)

    def report_late(self):
        for t in self.late:
            self.listener("TransferComplete", {"rank": self.comm.rank, "tid": t.tid, "kind": str(t.kind)})
        self.late.clear()


class Pipeline:
    """cp x pp ranks; `local_count_stage`: from that stage on, ranks pop their own leading
    ready count (reference bug 5); `no_wait`: ranks pop without waiting for completion."""

    def __init__(self, cp, pp, seed, vdir, local_count=False, no_wait=False):
        self.world = World(cp, pp)
        self.ranks = [Rank(self.world, r, vdir) for r in range(cp * pp)]
        self.rng = random.Random(seed)
        self.local_count, self.no_wait = local_count, no_wait
        self.next_tid = 0
        self.fault_rank: int | None = None
        self.fault_agreed: int | None = None

    def step(self):
        rng = self.rng
        for _ in range(rng.randrange(3)):
            kind = rng.choice(KINDS)
            for r in self.ranks:
                r.issue(self.next_tid, kind)
            self.next_tid += 1
        for r in self.ranks:
            for q in r.queues.values():
                for t in list(q._q):
                    if not t.done.is_set() and rng.random() < 0.4:
                        r.complete(t)
        outs = run_ranks(len(self.ranks), lambda i: pp_sync(
            self.ranks[i].comm, 7, [self.ranks[i].queues[k].leading_ready() for k in KINDS] + [0], [],
            self.ranks[i].listener))
        for r, out in zip(self.ranks, outs):
            popped = []
            for i, k in enumerate(KINDS):
                n = out.counts[i]
                if self.local_count and r.topo.stage > 0:
                    mine = r.queues[k].leading_ready()
                    if mine != n and self.fault_rank is None:
                        self.fault_rank, self.fault_agreed = r.comm.rank, n
                    n = mine
                for t in list(r.queues[k]._q)[:n]:
                    if not t.done.is_set() and not self.no_wait:      # the wait: the copy finishes
                        r.complete(t, report=rng.random() < 0.5)
                    elif not t.done.is_set() and self.fault_rank is None:
                        self.fault_rank = r.comm.rank
                r.queues[k].pop(n, "check", r.comm.rank, 1.0, wait=not self.no_wait)
                popped.append(n)
            r.listener("StageApply", {"rank": r.comm.rank, "counts": popped + [0]})
            r.report_late()

    def run(self, rounds):
        for _ in range(rounds):
            self.step()


@pytest.mark.parametrize("cp,pp,seed", [(1, 1, 0), (2, 1, 1), (1, 3, 2), (2, 2, 3), (2, 3, 4)])
def test_clean_pipelines_raise_nothing(cp, pp, seed, tmp_path):
    p = Pipeline(cp, pp, seed, str(tmp_path))
    p.run(12)
    for r in p.ranks:
        for m in r.monitors:
            assert m.checked == m.steps > 0
    # the maps saw real rounds: every stage applied the same transfers in the same rounds
    applied = {tuple(m.rmap.upto[m.rmap.me]) for r in p.ranks for m in r.monitors[:1]}
    assert len(applied) == 1 and len(next(iter(applied))) > 0


def test_stage_applying_its_local_count_is_caught_at_that_apply(tmp_path):
    for seed in range(20):
        p = Pipeline(2, 2, seed, str(tmp_path), local_count=True)
        with pytest.raises(ProtocolViolation) as ei:
            p.run(12)
        e = ei.value
        assert p.fault_rank is not None
        assert (e.spec, e.kind, e.action, e.property) == ("spec/PPSync.tla", "action", "StageApply", "StageApply")
        assert e.arguments["rank"] == p.fault_rank
        if p.fault_agreed == 0:      # nothing agreed this round: no target to apply
            assert (e.failure.index, e.conjunct) == (1, "pending[s] # None")
        else:                        # another count than the agreed target
            assert e.failure.index == 2 and "applied' = [applied EXCEPT ![s] = target]" in e.conjunct
        assert e.location.startswith("spec/PPSync.tla:13")
        if p.fault_agreed:
            return
    pytest.fail("no seed applied a local count that differs from a non-zero agreed count")
    pytest.fail("the local count never differed from the agreed one")


def test_a_violation_trace_shows_each_spec_step_and_explain_names_the_apply(tmp_path):
    """An event that stands for several spec steps is written as one ITF state per step
    (its spec action, the runtime event beside it), so `hicache explain` checks the trace
    step by step and names the faulty StageApply, not an earlier compound event."""
    from hicache.explain.analysis import explain
    from hicache.explain.options import Options
    from hicache.tla.itf import read_itf
    p = Pipeline(1, 2, 0, str(tmp_path), local_count=True)     # (its stage 1 sees the leader's round in one event)
    with pytest.raises(ProtocolViolation) as ei:
        p.run(12)
    doc = read_itf(ei.value.trace_path)
    metas = [s["#meta"] for s in doc["states"]]
    assert any("event" in m for m in metas)               # an event expanded into its spec steps
    from hicache.monitors.generated import pp_sync as gen
    assert all(m["action"] in gen.ACTIONS for m in metas if "event" in m)
    ex = explain(ei.value.trace_path, Options(max_seconds=5.0))
    assert ex.action == "StageApply" and ex.first_violating_step == len(metas) - 1
    assert all(str(c.status) != "not allowed" for c in ex.step_checks[:-1])


def test_apply_before_completion_is_caught_by_the_apply_guard(tmp_path):
    for seed in range(20):
        p = Pipeline(2, 2, seed, str(tmp_path), no_wait=True)
        try:
            p.run(12)
        except ProtocolViolation as e:
            assert p.fault_rank == e.arguments["rank"]
            assert (e.action, e.property, e.kind) == ("StageApply", "StageApply", "action")
            assert "\\A r \\in Ranks" in e.conjunct
            return
        assert p.fault_rank is None, "an early apply went unnoticed"
    pytest.fail("no seed applied a transfer before it completed")


def test_a_count_of_zero_is_no_round_and_a_late_report_is_no_second_completion(tmp_path):
    w = World(1, 1)
    r = Rank(w, 0, str(tmp_path))
    r.issue(0, TransferKind.LOAD)
    r.listener("LeaderAgree", {"rank": 0, "counts": (0, 0, 0), "votes": ()})
    r.listener("StageApply", {"rank": 0, "counts": (0, 0, 0)})
    load = r.monitors[0]
    assert load.steps == 1                     # only the issue
    r.complete(r.transfers[0], report=False)   # done, event in flight
    r.listener("LeaderAgree", {"rank": 0, "counts": (1, 0, 0), "votes": ()})
    r.listener("StageApply", {"rank": 0, "counts": (1, 0, 0)})
    r.report_late()
    # the agreement reported the completion itself (the flag was set: the count was read
    # from it); the late event adds nothing
    assert load.steps == 3 and [a for a, _, _ in load.rmap.trail] == ["StageApply"]
    m = load.rmap
    assert (m.applied, m.checks, m.agreed, m.done_me) == ([1], [1], [1], {1})
    assert load.rmap.cur["upto"].d[0][0] == 1


def test_other_ranks_events_are_not_this_maps(tmp_path):
    m = PPSyncMap(rank=1, stage=0, cp=2, kind="load")
    assert m.bind("TransferIssue", {"rank": 0, "tid": 0, "kind": "load"}) is None
    assert m.bind("TransferIssue", {"rank": 1, "tid": 0, "kind": "backup"}) is None
    assert m.bind("TransferIssue", {"rank": 1, "tid": 0, "kind": "load"}) == [("TransferIssue", ())]
    with pytest.raises(ValueError, match="kind"):
        PPSyncMap(rank=0, stage=0, cp=1, kind="acks")


# ---------------------------------------------------------------- the real engine (gloo ranks)
ENGINE = dict(requests=10, device_pages_per_rank=4, host_pages_per_rank=6, storage_fail_p=0.3,
              transfer_delay_s=0.01, storage_delay_s=0.005, timeout_s=20.0, verify="strict")


@pytest.fixture
def strict_ranks(monkeypatch, tmp_path):
    """The launcher hands its verified mode to every rank: strict here."""
    import hicache.monitors.maps.dist as dist
    monkeypatch.setattr(dist, "verify_config", lambda: VerifyConfig(mode="strict", violation_dir=str(tmp_path)))


def test_engine_ranks_check_every_step_of_their_protocols(strict_ranks):
    from hicache.dist.runner import run_distributed
    reports = run_distributed(cp=2, pp=2, seed=3, **ENGINE)
    for r in reports:
        assert r["violations"] == [] and r["requests"] == ENGINE["requests"]
        mons = r["monitors"]
        assert set(mons) == {"PPSync/load", "PPSync/backup", "PrefixAgreement", "CPSharding", "LayerPipeline"}
        for m in mons.values():
            assert m["checked"] == m["steps"]
        assert mons["PPSync/backup"]["steps"] > 0 and mons["CPSharding"]["steps"] > 0
        # every cached prefix's gather had its own LayerPipeline monitor (one per forward pass)
        assert mons["LayerPipeline"]["steps"] > 0


def test_engine_rank_applying_before_completion_is_stopped_at_that_apply(strict_ranks):
    """Rank 3 (stage 1) pops its transfers without waiting (slow copies): its PPSync
    monitor raises at that StageApply; the engine's own byte check would only have logged it."""
    from hicache.dist.launch import LaunchError
    from hicache.dist.runner import run_distributed
    from hicache.dist.worker import Faults
    with pytest.raises(LaunchError) as ei:
        run_distributed(cp=2, pp=2, seed=0, faults=Faults(no_wait_rank=3), **ENGINE)
    msg = ei.value.failures[3]
    assert msg.startswith("ProtocolViolation: spec/PPSync.tla: action StageApply violated")
    assert "StageApply conjunct 2 at spec/PPSync.tla:135:8" in msg
    assert all("ProtocolViolation" not in ei.value.failures.get(r, "") for r in (0, 1, 2))


def test_rounds_beyond_the_first_capacity_re_dimension_without_alarms(tmp_path):
    p = Pipeline(2, 2, 1, str(tmp_path))
    p.run(60)
    for r in p.ranks:
        for m in r.monitors:
            assert m.rmap.cap > 8 and len(m.rmap.agreed) > 8 and m.checked == m.steps


@pytest.mark.parametrize("stage,cp,pp,action", [(0, 1, 2, "LeaderAgree"), (0, 2, 3, "LeaderAgree"),
                                                 (1, 1, 3, "StageForward"), (1, 2, 3, "StageForward")])
def test_a_stage_forwarding_another_count_than_it_applied_is_caught(stage, cp, pp, action, tmp_path,
                                                                    monkeypatch):
    """The fault: a stage applies the load count it agreed (stage 0) or received, but
    forwards count - 1. Its LeaderAgree / StageForward event's `forwarded` says what it
    sent; the map models stage s+1 as one more (abstract) spec stage whose channel gets that
    count, so the step's `chan' = ...` conjunct fails at that forward, before the stages
    apply different counts (SameCountEachCheck)."""
    import hicache.dist.pp_sync as adapter
    from hicache.protocol.pp_sync import HEADER
    forward = adapter._forward

    def short_forward(comm, label, raw):
        if comm.topo.stage == stage and raw[HEADER] > 0:
            raw = raw.clone()
            raw[HEADER] -= 1
        forward(comm, label, raw)
    monkeypatch.setattr(adapter, "_forward", short_forward)
    p = Pipeline(cp, pp, 0, str(tmp_path))
    try:
        p.run(12)
    except ProtocolViolation as e:
        # where it belongs: the faulty stage's own step (chan' = the target it holds)
        assert (e.kind, e.action, e.property) == ("action", action, action)
        assert "chan' =" in e.conjunct
        assert p.ranks[e.arguments["rank"]].topo.stage == stage
        assert e.arguments["forwarded"][0] == e.arguments["counts"][0] - 1 >= 0
        m = p.ranks[e.arguments["rank"]].monitors[0].rmap
        me = m.me
        st = next(st for a, prm, st in m.trail if a == action and prm in ((), (me,)))   # this stage's step
        assert st["chan"].d[me + 1] == st["pending"].d[me] - 1    # s+1 was sent one transfer fewer
        return
    pytest.fail("a stage forwarded another count than it applied, unnoticed")


def test_a_count_sent_on_for_a_round_of_zero_is_a_step_and_fails(tmp_path):
    """A round of 0 is no spec round, unless the stage sends a non-zero count on anyway."""
    cfg = VerifyConfig(mode="strict", violation_dir=str(tmp_path))
    for stage, event, action, conj in [(0, "LeaderAgree", "LeaderAgree", "MinLead(0) > 0"),
                                       (1, "StageForward", "StageForward", "chan[s] # None")]:
        mon = SequenceMonitor(PPSyncMap(rank=stage, stage=stage, cp=1, kind="load", downstream=True), cfg)
        mon("TransferIssue", {"rank": stage, "tid": 0, "kind": "load"})
        mon(event, {"rank": stage, "counts": (0, 0, 0), "forwarded": (0, 0, 0)})       # no round
        assert mon.steps == 1
        with pytest.raises(ProtocolViolation) as ei:
            mon(event, {"rank": stage, "counts": (0, 0, 0), "forwarded": (1, 0, 0)})
        assert (ei.value.action, ei.value.property, ei.value.conjunct) == (action, action, conj)


def test_a_forwarded_field_must_match_the_maps_downstream_stage():
    for downstream, fwd in [(True, None), (False, (1, 0, 0))]:
        m = PPSyncMap(rank=0, stage=0, cp=1, kind="load", downstream=downstream)
        with pytest.raises(ValueError, match="forwarded"):
            m.bind("LeaderAgree", {"rank": 0, "counts": (1, 0, 0), "forwarded": fwd})
