"""PrefixAgreement refinement map: one strict monitor per rank over the real storage
prefetch (hicache.dist.prefetch.PrefetchWorker: loader and sync threads) and the real
pp_sync adapter, ranks as threads over dist_fakes. Each rank runs the engine's cache check
(hicache.dist.engine.Engine.cache_check/_complete_prefetches): stage 0 votes the stop
policy, pp_sync agrees on the number of published acks, every rank pops exactly that many
and completes the prefetches whose acks are all consumed."""
import random
import threading

import pytest
import torch

from hicache.dist.pp_sync import pp_sync
from hicache.dist.prefetch import PrefetchJob, PrefetchWorker
from hicache.monitors.maps.prefix_agreement import PrefixAgreementMap
from hicache.monitors.maps.steps import SequenceMonitor, Tee
from hicache.monitors.runtime import ProtocolViolation, VerifyConfig
from hicache.protocol.events import EventRecorder
from hicache.protocol.prefix_agreement import agreed_prefix, batch_plan

from dist_fakes import FakeComm, World, run_ranks

ROW = 4          # floats per host page row (one layer)


class FlakyStore:
    """batch_get of pages: a miss (None) with probability p_fail, per rank and seed."""

    def __init__(self, seed, p_fail):
        self.rng, self.p = random.Random(seed), p_fail
        self.lock = threading.Lock()

    def batch_get(self, keys):
        with self.lock:
            return [None if self.rng.random() < self.p else torch.zeros(ROW * 4, dtype=torch.uint8) for _ in keys]


class Rank:
    def __init__(self, world, rank, seed, vdir, p_fail, local_queue=False):
        self.comm = FakeComm(world, rank)
        self.topo = self.comm.topo
        self.events = EventRecorder()
        self.listener = Tee(self.events)
        self.worker = PrefetchWorker(self.comm, FlakyStore(seed * 100 + rank, p_fail), torch.zeros(1, 64, ROW),
                                     listener=self.listener)
        self.map = PrefixAgreementMap(rank=rank, stage=self.topo.stage, plans=lambda: self.worker.plans)
        self.monitor = SequenceMonitor(self.map, VerifyConfig(mode="strict", violation_dir=vdir))
        self.listener.monitors.append(self.monitor)
        self.local_queue = local_queue     # the fault: consume all this rank's queue holds
        self.records: list = []            # [rid, plan, published acks, terminated]
        self.used: dict[int, int] = {}
        self.fault_check: int | None = None

    def serve(self, jobs, rng_seed, rounds=5000):
        rng = random.Random(rng_seed)       # same on every rank: stage 0's votes only matter
        world = self.comm.world.cp * self.comm.world.pp
        for rid, pages in jobs:
            plan = batch_plan(pages, 2)
            self.records.append([rid, plan, [], False])
            rows = [i if i % world == self.comm.rank else None for i in range(pages)]
            self.worker.submit(PrefetchJob(rid, plan, [f"k{rid}.{i}" for i in range(pages)], rows))
        try:
            return self._loop(rng, rounds)
        finally:
            try:
                self.worker.close(2.0)
            except BaseException:  # noqa: BLE001 - the first failure is what the test sees
                pass

    def _loop(self, rng, rounds):
        checks = 0
        while self.records and checks < rounds:
            checks += 1
            live = [r for r in self.records if not r[3]][:2]
            votes = [0, 0]
            if self.topo.stage == 0:
                for i in range(len(live)):
                    votes[i] = int(rng.random() < 0.15)
            out = pp_sync(self.comm, 7, [0, 0, self.worker.ready_count()], votes, self.listener)
            for rec, v in zip(live, out.votes):
                if v:
                    rec[3] = True
                    self.listener("PolicyDecide", {"rank": self.comm.rank, "rid": rec[0], "terminate": True})
                    job = next(j for j in self._jobs() if j.rid == rec[0])
                    job.terminate.set()
            n = out.counts[2]
            if self.local_queue and self.topo.stage > 0:
                # the fault (reference bug 5): the agreed acks and whatever else this
                # rank's queue already holds
                mine = max(n, self.worker.ready_count())
                if mine != n and self.fault_check is None:
                    self.fault_check = checks
                n = mine
            acks = self.worker.pop(n, f"check#{checks}", 10.0)
            if self.worker.error is not None:     # a loader/sync thread failed (a violation there)
                raise self.worker.error
            for ack in acks:
                rec = next(r for r in self.records if r[0] == ack.rid)
                assert ack.batch == len(rec[2])
                rec[2].append(ack.pages)
            if not acks and not any(out.votes):
                self.worker.wait_published(0.01)     # the engine's idle wait (Engine._idle_wait)
            while self.records and len(self.records[0][2]) == len(self.records[0][1]):
                rid, plan, published, _ = self.records.pop(0)
                k = agreed_prefix(plan, published)
                self.used[rid] = k
                self.listener("StageCacheCheck", {"rank": self.comm.rank, "rid": rid, "pages": k})
        return checks

    def _jobs(self):
        return self._submitted


def run(cp, pp, seed, vdir, p_fail=0.2, local_queue=False, ranks_out=None):
    world = World(cp, pp)
    rng = random.Random(seed)
    specs = [(rid, rng.randint(1, 6)) for rid in range(rng.randint(2, 5))]
    ranks = [Rank(world, r, seed, vdir, p_fail, local_queue) for r in range(cp * pp)]
    if ranks_out is not None:
        ranks_out.extend(ranks)
    for r in ranks:
        # the terminate flag lives on each rank's own job objects
        r._submitted = []
        orig = r.worker.submit

        def submit(job, r=r, orig=orig):
            r._submitted.append(job)
            orig(job)
        r.worker.submit = submit
    run_ranks(len(ranks), lambda i: ranks[i].serve(specs, seed), world)
    return ranks


@pytest.mark.parametrize("cp,pp,seed", [(1, 1, 0), (2, 1, 1), (1, 2, 2), (2, 2, 3), (1, 3, 4), (2, 2, 5)])
def test_clean_prefetches_raise_nothing(cp, pp, seed, tmp_path):
    ranks = run(cp, pp, seed, str(tmp_path))
    for r in ranks:
        assert r.monitor.checked == r.monitor.steps > 0
        assert not r.map.live                       # every prefetch completed in the map
    assert len({tuple(sorted(r.used.items())) for r in ranks}) == 1    # the same prefixes everywhere
    names = set(ranks[-1].events.names())
    assert {"RankPostAck", "SyncPublish", "StageCacheCheck"} <= names


def test_stage_consuming_its_own_queue_is_caught_at_that_check(tmp_path):
    for seed in range(20):
        ranks = []
        try:
            run(1, 2, seed, str(tmp_path), local_queue=True, ranks_out=ranks)
        except ProtocolViolation as e:
            assert (e.spec, e.kind, e.action) == ("spec/PrefixAgreement.tla", "action", "StageCacheCheck")
            assert e.property == "StageCacheCheck" and e.arguments["rank"] == 1 and "acks" in e.arguments
            # at the pop of the check where stage 1 first took more than the agreed acks
            assert e.arguments["step"] == f"check#{ranks[1].fault_check}"
            assert e.location.startswith("spec/PrefixAgreement.tla:")
            return
        assert all(r.fault_check is None for r in ranks), "a stage consumed other acks unnoticed"
    pytest.fail("no seed let stage 1's queue run ahead of the agreed count")


def test_an_ack_beyond_a_failed_batch_is_caught_at_the_post(tmp_path, monkeypatch):
    """The fault: a rank acks the pages it loaded after a short batch (a prefix with a hole)."""
    import hicache.dist.prefetch as pf
    monkeypatch.setattr(pf, "rank_acks", lambda plan, loaded: [0 if g is None else g for g in loaded])
    for seed in range(20):
        try:
            run(2, 1, seed, str(tmp_path), p_fail=0.4)
        except ProtocolViolation as e:
            assert (e.kind, e.action, e.property) == ("action", "RankPostAck", "RankLoadBatch")
            assert e.conjunct == "~Stopped(k)" and e.arguments["ack"] > 0
            return
    pytest.fail("no seed acked pages after a failed batch")


def _true_acks(plan, loaded):
    """The acks an honest rank posts for `loaded` (rank_acks, restated here: the fault
    below patches the runtime's)."""
    acks, broken = [], False
    for size, got in zip(plan, loaded):
        ack = 0 if broken or got is None else got
        broken = broken or ack < size
        acks.append(ack)
    return acks


@pytest.mark.parametrize("cp,pp", [(2, 1), (2, 2)])
def test_a_rank_acking_pages_it_failed_to_load_is_caught_when_its_ack_is_published(cp, pp, tmp_path, monkeypatch):
    """The fault: rank 1 acks a failed batch as full (and, having failed, goes on acking
    the later batches it loads). Its RankLoadBatch events say what it loaded, which is what
    `loaded[me]` is: the MIN its lie raised is published as more than it loaded, and
    SyncPublish (pubAck' = the MIN of what the ranks loaded) fails at that publish, before
    any stage uses the prefix; or, when its loader gets there first, its next post of that
    prefetch fails RankLoadBatch's ~Stopped(k). A lie that the MIN hides (a peer loaded no
    more) publishes nothing wrong and is no violation."""
    import hicache.dist.prefetch as pf
    real = pf.rank_acks

    def lying_acks(plan, loaded):
        out = real(plan, loaded)
        if threading.current_thread().name.endswith("-r1") and loaded[-1] is not None and out[-1] < plan[-1]:
            out = out[:-1] + [plan[-1]]
        return out
    monkeypatch.setattr(pf, "rank_acks", lying_acks)
    import dist_fakes
    abort = dist_fakes.World.abort

    def abort_links(world):
        """A failed rank also wakes the stages waiting for its forward (no 10 s recv)."""
        abort(world)
        n = world.cp * world.pp
        for src in range(n):
            for dst in range(n):
                world.link(src, dst).put(None)
    monkeypatch.setattr(dist_fakes.World, "abort", abort_links)
    caught = 0
    for seed in range(16):
        ranks = []
        try:
            run(cp, pp, seed, str(tmp_path), p_fail=0.3, ranks_out=ranks)
            e = None
        except ProtocolViolation as exc:
            e = exc
        # rank 1's events: what it loaded, and what the group published
        ev = list(ranks[1].events.events)
        plans = ranks[1].worker.plans
        loaded: dict = {}
        for name, f in ev:
            if name == "RankLoadBatch":
                loaded.setdefault(f["rid"], {})[f["batch"]] = f["loaded"]
        truth = {rid: _true_acks(plans[rid], [d.get(b) for b in range(len(plans[rid]))]) for rid, d in loaded.items()}
        harm = [(f["rid"], f["batch"]) for name, f in ev if name == "SyncPublish"
                and f["pages"] > truth.get(f["rid"], [0] * (f["batch"] + 1))[f["batch"]]]
        if e is None:
            assert not harm, f"seed {seed}: a publish above what rank 1 loaded went unnoticed: {harm}"
            continue
        caught += 1
        assert e.spec == "spec/PrefixAgreement.tla" and e.kind == "action" and e.arguments["rank"] == 1
        assert [r.monitor.tripped for r in ranks] == [r is ranks[1] for r in ranks]   # only the liar's monitor
        if e.property == "SyncPublish":
            # at the publish of the first batch whose published MIN exceeds what rank 1 loaded
            assert harm and "Min" in e.conjunct
            # (one agreement may publish acks of several prefetches: the failing step is
            # the one publishing batch+1 of that prefetch, whose published value is the lie's)
            rid, batch = harm[0]
            assert e.diff["pub"] == (batch, batch + 1)
            assert ranks[1].map.live[rid].pub_ack[batch] > truth[rid][batch]
        else:
            # or, first, at a later post of the same prefetch: a lying rank goes on acking
            # after the batch it failed, which a stopped rank may not (its loads say so)
            assert (e.action, e.property, e.conjunct) == ("RankPostAck", "RankLoadBatch", "~Stopped(k)")
            rid, batch, ack = e.arguments["rid"], e.arguments["batch"], e.arguments["ack"]
            assert ack > truth[rid][batch] == 0 and batch > 0 and truth[rid][batch - 1] < plans[rid][batch - 1]
        if caught == 4:      # (a failed rank's worker takes its close timeout: keep it short)
            return
    pytest.fail(f"only {caught} of 16 seeds published an ack raised by the lie")
