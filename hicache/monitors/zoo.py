"""The bug zoo: each bug class of REFERENCE.md reproduced, caught, and its clean twin quiet.

Three kinds of entries:
  runtime   a fault subclass of the real single-engine cache (hicache.monitors.faults) on a
            seeded workload, monitored in strict mode through the HostTier refinement map;
  ranks     two real caches as the ranks of one tensor-parallel group, served in lockstep,
            exchanging state digests at each cache check (hicache.monitors.digest); one
            rank carries a rank-local fault;
  process   ranks as processes on torch.distributed: the distributed engine (hicache.dist)
            with a seeded bug on one rank, or the CP prefix gather with its seeded switch,
            the spec monitors strict on every rank.
`spec_entry` checks a spec's bug twin (spec/X_bug.cfg) step by step with the generated
monitor bound to the correct constants: the same bug classes at the spec level.
For each: the workload seeds are tried in order until the fault fires; the report gives the
property that caught it and how many monitored steps after the faulty one (0: at it). The
same workload without the fault must raise nothing.
"""
from __future__ import annotations

import contextlib
import importlib
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hicache.monitors.attach import monitor_cache, unmonitored
from hicache.monitors.runtime import CACHE_CHECK, Monitor, ProtocolViolation, VerifyConfig
from hicache.monitors.workload import WorkloadConfig, failing_copies, own_cache, plan, run_workload
from hicache.replay.driver import ReplayConfig, load_requests, open_storage, replay_requests

ROOT = Path(__file__).resolve().parents[2]


@dataclass(slots=True)
class BugResult:
    name: str
    bug: int                    # REFERENCE.md bug class
    kind: str                   # runtime | ranks | process | spec
    caught: bool
    property: str | None
    steps_after_fault: int | None
    seed: int | None
    clean_alarm: bool           # the same workload without the fault raised
    detail: str = ""
    trace: str | None = None    # the violation's ITF trace (hicache explain reads it)

    def as_dict(self) -> dict:
        return asdict(self)


def _steps_after(exc: ProtocolViolation, fault_seq: int) -> int:
    return sum(1 for h in exc.history if h.args.get("seq", 0) > fault_seq)


# ====================================================================== runtime entries
def _run_single(seed: int, cls, wcfg, vdir: str):
    policy, reqs = plan(seed, wcfg)
    cache = own_cache(wcfg, policy, cls=cls)
    return cache, run_monitored(cache, reqs, vdir)


def run_monitored(cache, reqs, vdir: str, drain_every: int = 1, listener=None) -> ProtocolViolation | None:
    """A seeded workload on `cache` under the strict monitor verified mode attaches (and
    `listener` after it); the violation it raised (the cache closed quietly then), or None."""
    monitor_cache(cache, VerifyConfig(mode="strict", violation_dir=vdir))
    if listener is not None:
        cache.bus.subscribe(listener)
    try:
        run_workload(cache, reqs, drain_every=drain_every)
    except ProtocolViolation as e:
        _close_quietly(cache)
        return e
    return None


@dataclass(frozen=True, slots=True)
class CleanShape:
    """One shape of the clean sweep's workloads (`hicache bugzoo --clean`): what the strict
    monitors must pass without an alarm. `failing_copies`: loads, backups and storage
    writes fail now and then (workload.failing_copies: misses the cache counts, its state
    stays legal); `drain_every`: acks applied only every that many requests, so copies and
    loads stay on their nodes while the next requests' matches and inserts split them."""
    name: str
    wcfg: WorkloadConfig
    prefetch_policy: str = "best_effort"
    failing_copies: bool = False
    drain_every: int = 1

    def __post_init__(self) -> None:
        if self.drain_every < 1:
            raise ValueError(f"{self.name}: drain_every must be >= 1, got {self.drain_every}")

    def run(self, seed: int, vdir: str, listener=None) -> ProtocolViolation | None:
        """Seed `seed`'s workload of this shape under the strict monitor verified mode attaches
        (and `listener`, after it, on the cache's bus): the violation it raised (a false
        alarm), or None."""
        policy, reqs = plan(seed, self.wcfg)
        cache = own_cache(self.wcfg, policy, prefetch_policy=self.prefetch_policy)
        if self.failing_copies:
            failing_copies(cache)
        return run_monitored(cache, reqs, vdir, drain_every=self.drain_every, listener=listener)

    def describe(self, seed: int) -> str:
        """Seed `seed`'s workload in words (an alarm's report: what to run again)."""
        policy, _ = plan(seed, self.wcfg)
        w = self.wcfg
        return (f"{w.requests} requests on {w.device_pages} device pages and {w.host_pages} host slots of "
                f"{w.page_size}-token pages, {policy}, prefetch {self.prefetch_policy}"
                + (", copies failing" if self.failing_copies else "")
                + (f", acks every {self.drain_every} requests" if self.drain_every > 1 else ""))


#: the shared production-shaped traces a TraceShape replays
TRACES = Path("/work/shared/traces")


@dataclass(frozen=True, slots=True)
class TraceShape:
    """Replays of a shared production-shaped trace (Mooncake's, ../shared/traces) through
    the replay driver, the way `hicache replay` serves them, under the strict monitors: a
    seed draws the trace, a window of `requests` consecutive requests in it and the cache's
    configuration (page size, tier sizes, write and prefetch policies, a storage tier or
    none, real KV bytes or metadata, transfers applied before the next request or polled),
    so prefixes are shared as real traffic shares them and the copies run on the transfer
    threads as a serving process runs them, not as the synthetic workloads' scheduler does."""
    name: str
    requests: int = 100

    def __post_init__(self) -> None:
        if self.requests < 1:
            raise ValueError(f"{self.name}: requests must be >= 1, got {self.requests}")

    def config(self, seed: int) -> tuple[Path, int, ReplayConfig]:
        """(trace file, first request's index, the replay's configuration) of seed `seed`."""
        rng = random.Random(seed)
        trace = TRACES / rng.choice(("conversation_trace.jsonl", "synthetic_trace.jsonl"))
        page = rng.choice((128, 256, 512))
        # a device tier of 2-8 median requests (4k-8k tokens); a host tier of a few device
        # tiers (evicting under pressure) or of 64 (holding the whole window: a later turn
        # of a conversation finds its prefix there and loads it back; the traces' reuse
        # distances are long). Host >= device pages: write_back keeps every evicted
        # page's only copy on host
        dev = rng.choice((16384, 32768, 65536)) // page
        host = dev * rng.choice((2, 8, 64))
        cfg = ReplayConfig(page_size=page, device_tokens=dev * page, host_tokens=host * page,
                           storage=rng.choice(("none", "memory")), kv=rng.choice(("metadata", "small")),
                           write_policy=rng.choice(("write_through", "write_through_selective", "write_back")),
                           prefetch_policy=rng.choice(("best_effort", "wait_complete", "timeout")),
                           sync=rng.random() < 0.5)
        return trace, rng.randrange(1000), cfg

    def describe(self, seed: int) -> str:
        """Seed `seed`'s replay in words (an alarm's report: what to run again)."""
        trace, first, c = self.config(seed)
        return (f"{trace.name} requests {first}-{first + self.requests - 1}, page {c.page_size}, "
                f"{c.device_tokens // c.page_size} device / {c.host_tokens // c.page_size} host pages, storage "
                f"{c.storage.value}, kv {c.kv.value}, {c.write_policy.value}, prefetch {c.prefetch_policy.value}, "
                f"{'synced' if c.sync else 'polled'}")

    def run(self, seed: int, vdir: str, listener=None) -> ProtocolViolation | None:
        """Seed `seed`'s replay under the strict monitors (as CleanShape.run): the violation
        it raised, or None. A restored page whose bytes are not its own (the driver stamps
        and checks every page of a KV-bytes replay) is wrong data whatever the monitors say:
        raised as a RuntimeError naming the seed and the configuration."""
        trace, first, cfg = self.config(seed)
        reqs = load_requests(str(trace), cfg.page_size, first + self.requests, start=first)

        def watch(cache) -> None:
            monitor_cache(cache, VerifyConfig(mode="strict", violation_dir=vdir))
            if listener is not None:
                cache.bus.subscribe(listener)
        try:
            # (the replay's cache gets the sweep's strict monitors alone, as own_cache's)
            with contextlib.ExitStack() as stack, unmonitored():
                out = replay_requests(cfg, reqs, open_storage(cfg.storage, stack), on_cache=watch)
        except ProtocolViolation as e:
            return e
        if out["corrupt_pages"]:
            raise RuntimeError(f"{self.name} seed {seed}: {out['corrupt_pages']} restored pages hold other "
                               f"bytes than their own ({trace.name} from request {first}, {cfg})")
        return None


#: a small tree of one-token pages, where the host evicts what storage keeps: its fetches
#: (waiting for storage) join pages to the tree
_SMALL = WorkloadConfig(requests=60, device_pages=6, host_pages=6, max_pages=6, page_size=1)

CLEAN_SHAPES = (
    CleanShape("zoo", WorkloadConfig()),
    CleanShape("joining fetches", _SMALL, prefetch_policy="wait_complete"),
    CleanShape("failing copies", WorkloadConfig(), failing_copies=True),
    CleanShape("acks held", WorkloadConfig(requests=60, device_pages=8, host_pages=12, max_pages=8, page_size=1),
               prefetch_policy="wait_complete", failing_copies=True, drain_every=4),
    TraceShape("trace replays"),
)


def run_clean_shape(shape: "CleanShape | TraceShape", seed: int, vdir: str,
                    listener=None) -> ProtocolViolation | None:
    """`shape.run`: seed `seed`'s workload of `shape` under the strict monitors; the
    violation it raised (a false alarm), or None."""
    return shape.run(seed, vdir, listener)


def _close_quietly(cache) -> None:
    for w in (cache.loader, cache.writer, cache.prefetcher, cache.backuper):
        if w is not None:
            try:
                w.close()
            except Exception:  # noqa: BLE001 - a faulted cache may be inconsistent
                pass


def runtime_entry(bug: int, seeds: int, wcfg, vdir: str) -> BugResult:
    from hicache.monitors.faults import RUNTIME_FAULTS
    from hicache.runtime.cache import HiCache
    cls = RUNTIME_FAULTS[bug]
    for seed in range(seeds):
        try:
            cache, exc = _run_single(seed, cls, wcfg, vdir)
        except Exception as e:  # noqa: BLE001 - the fault broke the runtime before any monitor saw it
            return BugResult(cls.__name__, bug, "runtime", False, None, None, seed, False,
                             f"runtime raised {type(e).__name__}: {e}")
        if not cache.fired:
            continue
        _, clean = _run_single(seed, HiCache, wcfg, vdir)
        if exc is None:
            return BugResult(cls.__name__, bug, "runtime", False, None, None, seed, clean is not None,
                             "the fault fired and no monitor raised")
        return BugResult(cls.__name__, bug, "runtime", True, exc.property,
                         _steps_after(exc, cache.fault_seq), seed, clean is not None,
                         f"{exc.kind} {exc.property} at {exc.location}", exc.trace_path)
    return BugResult(cls.__name__, bug, "runtime", False, None, None, None, False,
                     f"the fault never fired in {seeds} workloads")


# ====================================================================== sample mode
@dataclass(slots=True)
class SampleResult:
    """One runtime bug under sample mode at one rate: what became of its fault in each of
    the seeded workloads it fired in (what a canary running that rate would see)."""
    name: str
    bug: int
    rate: float
    fired: int                  # workloads (of the seeds tried) whose fault fired
    at_step: int                # caught at a sampled step
    at_check: int               # caught at a cache check: the workload's end, or a dead worker's wait
    runtime_first: int          # the runtime's own check raised first: an error naming no property
    missed: int                 # ended with no alarm and no error: the fault went unseen
    properties: dict[str, int]  # property -> workloads it caught
    errors: dict[str, int]      # error type -> workloads where the runtime raised first
    # why the monitor checked the step each caught workload was caught at (CheckCause's
    # text: the seeded draw, at an event's weight, the map's trigger, a cache check) -> workloads
    causes: dict[str, int]
    # per caught workload: the monitored steps after the faulty one up to the alarm's (at a
    # cache check: every step after the fault); 0 is at the faulty step, as `runtime_entry`
    # counts them (events the map binds: not the loader thread's LoadBackLayer, whose
    # interleaving with the scheduler's events varies from run to run)
    steps_after_fault: list[int]
    # seeds of the workloads stopped by a violation before their fault fired (false alarms)
    false_alarms: list[int] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class _SampleRun:
    """How one workload of the sample-mode study ended."""
    cache: object                           # the faulty cache (its `fired`)
    violation: ProtocolViolation | None     # the monitor's alarm
    error: Exception | None                 # what the runtime raised first instead
    steps_after_fault: int | None           # monitored steps after the faulty one (None: not fired)


def _sample_run(seed: int, cls, wcfg, vdir: str, rate: float) -> _SampleRun:
    """Seed `seed`'s workload on fault class `cls` under sample mode at `rate` with no budget
    (so which steps are checked is the seed's alone, not the machine's load), a cache check
    after it as a scheduler's check point."""
    from hicache.runtime.transfer import WorkerDied
    policy, reqs = plan(seed, wcfg)
    cache = own_cache(wcfg, policy, cls=cls)
    # the faulty step's number among the monitor's steps: noted when its event arrives, by a
    # listener ahead of the monitor (which has not counted it yet)
    fault_step: list = [None]
    mon = None

    def note_fault(action, fields) -> None:
        if fields["seq"] == cache.fault_seq:
            fault_step[0] = mon.steps + 1
    cache.bus.subscribe(note_fault)
    mon = monitor_cache(cache, VerifyConfig(mode="sample", sample_rate=rate, sample_budget=None, seed=seed,
                                            violation_dir=vdir))

    def ended(violation=None, error=None) -> _SampleRun:
        after = None if fault_step[0] is None else mon.steps - fault_step[0]
        return _SampleRun(cache, violation, error, after)
    try:
        try:
            run_workload(cache, reqs)
        except WorkerDied:
            # (verified mode's wait runs the cache check first, HiCache._wait_for: the
            # monitor names the property of a worker that died with work left)
            mon.cache_check()
            raise
        mon.cache_check()
    except ProtocolViolation as e:
        _close_quietly(cache)
        return ended(violation=e)
    except Exception as e:  # noqa: BLE001 - the runtime's own checks stopped the faulty run first
        _close_quietly(cache)
        return ended(error=e)
    return ended()


def sample_entry(bug: int, seeds: int, wcfg, vdir: str, rate: float) -> SampleResult:
    """Runtime bug `bug` on each of the workloads of seeds 0..seeds-1 its fault fires in,
    under sample mode at `rate`: caught at a sampled step, at a cache check, stopped first
    by the runtime's own check, or missed. Strict mode catches each at its step (or the
    next, `runtime_entry`); sample mode checks the invariants alone, at a seeded fraction
    of the steps: a fault whose broken state lasts a few events may fall between samples
    and be repaired before the next (then nothing ever sees it). A violation before the
    fault fired is a false alarm (counted); an error of the runtime's before it, a bug of
    the runtime's (raised)."""
    from hicache.monitors.faults import RUNTIME_FAULTS
    cls = RUNTIME_FAULTS[bug]
    r = SampleResult(cls.__name__, bug, rate, 0, 0, 0, 0, 0, {}, {}, {}, [])
    for seed in range(seeds):
        run = _sample_run(seed, cls, wcfg, vdir, rate)
        exc, err = run.violation, run.error
        if not run.cache.fired:
            if exc is not None:
                r.false_alarms.append(seed)
            elif err is not None:
                raise err
            continue
        r.fired += 1
        if exc is not None:
            if exc.action == CACHE_CHECK:
                r.at_check += 1
            else:
                r.at_step += 1
            r.properties[exc.property] = r.properties.get(exc.property, 0) + 1
            cause = exc.checked_because or "?"
            r.causes[cause] = r.causes.get(cause, 0) + 1
            r.steps_after_fault.append(run.steps_after_fault)
        elif err is not None:
            r.runtime_first += 1
            name = type(err).__name__
            r.errors[name] = r.errors.get(name, 0) + 1
        else:
            r.missed += 1
    return r


def run_sample_zoo(rates, seeds: int = 30, vdir: str = "hicache-violations/bugzoo", only=None) -> list[SampleResult]:
    """`sample_entry` of every runtime bug (the zoo's single-engine faults, which a cache's
    sample-mode monitors watch) at each rate."""
    from hicache.monitors.faults import RUNTIME_FAULTS
    wcfg = WorkloadConfig()
    return [sample_entry(bug, seeds, wcfg, vdir, rate) for rate in rates for bug in sorted(RUNTIME_FAULTS)
            if not only or bug in only]


# ====================================================================== rank entries
class RankFault:
    """Hooks of a rank-local fault in the lockstep group (all no-ops: a clean rank).
    `fired_round` is the index of the first cache check at or after the fault."""
    fired_round: int | None = None
    group = None

    def skip_check(self, group, rank: int, stage: str) -> bool:
        return False

    def cache_class(self):
        from hicache.runtime.cache import HiCache
        return HiCache


class SkipCheckOnLocalCondition(RankFault):
    """Bug 1: a rank leaves its step on a rank-local condition (its host occupancy) before
    the collective-bearing cache check; the other ranks make the call."""

    def skip_check(self, group, rank, stage):
        c = group.caches[rank]
        if self.fired_round is None and rank == 1 and stage == "end" and c.host.used > c.host.capacity // 4:
            self.fired_round = group.rounds
            return True
        return False


class SkipCheckWhenNoInflight(RankFault):
    """Bug 3: a rank skips the event check's all-reduce when its local in-flight prefetch
    set is empty (the other ranks still make the call)."""

    def skip_check(self, group, rank, stage):
        if self.fired_round is None and rank == 1 and stage == "prefetch" and not group.caches[rank]._prefetching:
            self.fired_round = group.rounds
            return True
        return False


class DropFromLocalPrefetchTable(RankFault):
    """Bug 2: a rank returns early for a request absent from its local prefetch table: its
    prefetch never starts while the other ranks' do."""

    def cache_class(self):
        from hicache.runtime.cache import HiCache
        fault = self

        class NoPrefetch(HiCache):
            rank = 0

            def prefetch(self, req):
                if self.rank == 1 and fault.fired_round is None and fault.group.last_prefetch:
                    fault.fired_round = fault.group.rounds   # the first check after the fault
                    return False
                return super().prefetch(req)
        return NoPrefetch


class RankLocalAllocFailure(RankFault):
    """Bug 4: an allocation fails on one rank only (its local free count) and that rank
    drops the request: the ranks' trees diverge."""

    def cache_class(self):
        from hicache.runtime.cache import HiCache
        fault = self

        class FailAlloc(HiCache):
            rank = 0

            def alloc(self, n):
                if self.rank == 1 and fault.fired_round is None and n > 0 and self.tree.device_pages > 0:
                    fault.fired_round = fault.group.rounds
                    return None
                return super().alloc(n)
        return FailAlloc


RANK_FAULTS = {1: SkipCheckOnLocalCondition, 2: DropFromLocalPrefetchTable, 3: SkipCheckWhenNoInflight,
               4: RankLocalAllocFailure}


class RankGroup:
    """`n` real caches served in lockstep (the same requests, stage by stage), with a
    cache check after the prefetch stage and at the end of each request.

    The group keeps the merged recent history of every rank (each event with its rank and
    the rank's mapped state after it, and each rank's exchange contributions), so that a
    disagreeing exchange is written as one ITF trace (hicache.monitors.digest)."""

    #: events the HostTier map does not map (emitted on transfer threads)
    UNMAPPED = frozenset({"LoadBackLayer"})

    def __init__(self, n: int, wcfg, policy: str, fault: RankFault, vdir: str, history: int = 64):
        import collections

        from hicache.monitors.digest import LocalCollective
        from hicache.monitors.maps.host_tier_inc import IncrementalHostTierMap as HostTierMap
        self.fault = fault
        fault.group = self
        self.last_prefetch = False
        cls = fault.cache_class()
        self.caches = []
        self.maps = []
        self.events = collections.deque(maxlen=history)
        self._seq = 0
        for r in range(n):
            # wait_complete: a best-effort prefetch's yield depends on thread timing, which
            # would make ranks differ without any fault (the dist engine agrees on it)
            c = own_cache(wcfg, policy, cls=cls, prefetch_policy="wait_complete")
            c.rank = r
            m = HostTierMap(c)
            c.bus.subscribe(Monitor(m, VerifyConfig(mode="strict", violation_dir=vdir)))
            c.bus.subscribe(self._recorder(r, m))     # after the monitor: its map is up to date
            self.caches.append(c)
            self.maps.append(m)
        self.coll = LocalCollective(n)
        self.calls = [0] * n
        self.rounds = 0
        self.vdir = vdir

    def _recorder(self, rank: int, rmap):
        def on(action, fields) -> None:
            name = str(action)
            if name in self.UNMAPPED:
                return
            self._record(rank, name, {k: v for k, v in fields.items() if k != "seq"}, rmap.state())
        return on

    def _record(self, rank: int, action: str, args: dict, state=None, contribution=None) -> None:
        from hicache.monitors.digest import RankEvent
        self._seq += 1
        self.events.append(RankEvent(rank, action, args, state, contribution, self._seq))

    def check(self, stage: str) -> None:
        from hicache.monitors.digest import Contribution, verdict
        for r, c in enumerate(self.caches):
            if self.fault.skip_check(self, r, stage):
                continue
            self.calls[r] += 1
            con = Contribution(r, f"cache_check:{stage}", self.calls[r], self.maps[r].digest_view())
            self._record(r, con.call, {"index": con.index, "digest": f"{con.digest:016x}"}, contribution=con)
            red = self.coll.contribute(r, con.vector, con)
            if red is not None:
                f = verdict(red)
                if f is not None:
                    self._violation(f, r)
        self.rounds += 1

    def _violation(self, f, rank: int) -> None:
        """Write the merged history as a trace and raise (the exchange completed by `rank`)."""
        from hicache.monitors.digest import EXCHANGE, divergence, divergence_trace, write_divergence_trace
        from hicache.monitors.maps.host_tier import spec
        from hicache.monitors.runtime import Step
        contribs = list(self.coll.paired)
        div = divergence(contribs)
        doc = divergence_trace(list(spec.VARIABLES), list(self.events), contribs, f, div)
        path, error = write_divergence_trace(self.vdir, doc, self.coll.rounds)
        history = [Step(e.seq, e.action, {**e.args, "rank": e.rank}, None) for e in self.events]
        raise ProtocolViolation(spec="cross-rank", action=EXCHANGE,
                                args={"completed_by": rank, "diverging_ranks": div["diverging_ranks"],
                                      "fields": div["fields"], "calls": div["calls"]},
                                failure=f, kind="digest", diff={}, history=history,
                                step=self.coll.rounds, trace_path=path, trace_error=error)

    def serve(self, tokens, what: str) -> None:
        reqs = [c.match(tokens) for c in self.caches]
        for c, q in zip(self.caches, reqs):
            c.load_back(q)
        started = []
        for c, q in zip(self.caches, reqs):
            started.append(("prefetch" in what) and c.prefetch(q))
            self.last_prefetch = started[0]
        self.check("prefetch")
        for c, q, st in zip(self.caches, reqs, started):
            if st and "abort" in what:
                c.abort(q)
                continue
            if st and c.finish_prefetch(q):
                c.load_back(q, _tier="storage")
            if what.startswith("abort"):
                c.abort(q)
                continue
            for op in q.loads:
                op.wait()
            have = len(c.prefix_pages(q))
            n = len(q.key) // c.tree.pb
            pages = c.alloc(n - have) if n > have else []
            if pages is None:
                c.abort(q)
                continue
            if pages:
                c.insert(q, pages)
            c.finish(q)
        for c in self.caches:
            c.drain()
        self.check("end")

    def close(self) -> None:
        for c in self.caches:
            _close_quietly(c)


def ranks_entry(bug: int, seeds: int, wcfg, vdir: str) -> BugResult:
    cls = RANK_FAULTS[bug]
    name = cls.__name__
    for seed in range(seeds):
        policy, reqs = plan(seed, wcfg)
        fault = cls()
        g = RankGroup(2, wcfg, policy, fault, vdir)
        exc = None
        try:
            for toks, what in reqs:
                g.serve(toks, what)
        except ProtocolViolation as e:
            exc = e
        finally:
            g.close()
        if fault.fired_round is None:
            continue
        clean = _clean_ranks(seed, wcfg, vdir)
        if exc is None:
            return BugResult(name, bug, "ranks", False, None, None, seed, clean, "the fault fired; no alarm")
        # steps counted in cache checks (the exchange points) after the faulty one
        return BugResult(name, bug, "ranks", True, exc.property, (g.rounds - fault.fired_round), seed, clean,
                         f"{exc.kind} {exc.property} at {exc.location}", exc.trace_path)
    return BugResult(name, bug, "ranks", False, None, None, None, False, f"never fired in {seeds} workloads")


def _clean_ranks(seed: int, wcfg, vdir: str) -> bool:
    policy, reqs = plan(seed, wcfg)
    g = RankGroup(2, wcfg, policy, RankFault(), vdir)
    try:
        for toks, what in reqs:
            g.serve(toks, what)
    except ProtocolViolation:
        return True
    finally:
        g.close()
    return False


# ====================================================================== spec entries
#: bug class -> (spec, bug-twin cfg, name): the spec-level twins of bugs 5 and 13, whose zoo
#: entries run on the runtime (PROCESS_BUGS); `spec_entry` checks a twin's run step by step
SPEC_BUGS = {
    5: ("PPSync", "PPSync_bug.cfg", "StagesApplyLocalCounts"),
    13: ("DraftState", "DraftState_bug.cfg", "CompletionOnTargetOnly"),
}


def spec_walk(spec: str, cfg_name: str, seed: int, depth: int, vdir: str):
    """A seeded random run of the spec under `cfg_name`, checked by the generated monitor
    with the spec's own (correct) constants. Returns (fault step or None, violation or None)."""
    from hicache.monitors.codegen import module_name
    from hicache.tla.cfg import load_cfg
    from hicache.tla.checker import build
    from hicache.tla.compiler import UNSET
    path = ROOT / "spec" / f"{spec}.tla"
    bug_ck = build(path, load_cfg(ROOT / "spec" / cfg_name))
    clean_ck = build(path, load_cfg(path.with_suffix(".cfg")))
    gen = importlib.import_module(f"hicache.monitors.generated.{module_name(spec)}")
    raw = dict(load_cfg(path.with_suffix(".cfg")).constants)
    C = gen.constants(raw)
    n = len(bug_ck.model.variables)
    rng = random.Random(seed)
    s = tuple(rng.choice(bug_ck.init((), [UNSET] * n, ())))
    mon = _SpecMonitor(gen, C, raw, VerifyConfig(mode="strict", violation_dir=vdir), dict(zip(gen.VARIABLES, s)))
    fault_step = None
    for step in range(1, depth + 1):
        succ = [(a, tuple(p)) for a in bug_ck.actions for p in a.fn(s, [UNSET] * n, ())]
        if not succ:
            break
        act, t = rng.choice(succ)
        if fault_step is None:
            clean_succ = {tuple(p) for a in clean_ck.actions for p in a.fn(s, [UNSET] * n, ())}
            if t not in clean_succ:
                fault_step = step
        try:
            mon(act.name, {"seq": step}, dict(zip(gen.VARIABLES, t)))
        except ProtocolViolation as e:
            return fault_step, e
        s = t
    return fault_step, None


class _SpecMonitor(Monitor):
    """A monitor whose refinement map is the identity (the run is already in spec terms)."""

    def __init__(self, gen, C, raw: dict, cfg, s0):
        self._state = s0
        self._C = C
        outer = self

        class Identity:
            spec = gen

            def constants(self):
                return raw          # the model's constants (recorded in the trace)

            def state(self):
                return outer._state

            def bind(self, action, fields):
                return [(action, "any")]
        super().__init__(Identity(), cfg)

    def constants(self) -> dict:
        return self._C

    def __call__(self, action, fields, t=None):  # type: ignore[override]
        self._state = t
        super().__call__(action, fields)

    def _check_step(self, name, fields, steps, s, t) -> None:
        nxt = self.spec.NEXT.get(name)
        if s is not None and nxt is not None and not nxt(self._C, s, t):
            # name the first conjunct that rejects every binding: try the action's checks
            f = self._explain(name, s, t)
            self.fail("action", name, fields, f, s, t)
        super()._check_step(name, fields, [], s, t)

    def _explain(self, name, s, t):
        """The failure of the binding that passes the most conjuncts (candidate parameter
        values: the atoms of the pre-state)."""
        import itertools
        from hicache.monitors.rt import Failure
        entry = self.spec.ACTIONS.get(name)
        best = None
        if entry is not None:
            atoms = sorted(_atoms(s), key=repr)
            for args in itertools.product(atoms, repeat=len(entry[1])):
                f = entry[0](self._C, s, t, *args)
                if f is not None and f.error is None and (best is None or f.index > best.index):
                    best = f
        return best or Failure(name, 0, f"no binding of {name}'s parameters allows this step", self.spec.SPEC)


def _atoms(v, out=None) -> set:
    """Ints and strings inside a state (candidate action parameters)."""
    from hicache.tla.values import Fcn
    out = set() if out is None else out
    if isinstance(v, dict):
        for x in v.values():
            _atoms(x, out)
    elif type(v) in (int, str):
        out.add(v)
    elif isinstance(v, (tuple, frozenset)):
        for x in v:
            _atoms(x, out)
    elif isinstance(v, Fcn):
        for k, x in v.d.items():
            _atoms(k, out)
            _atoms(x, out)
    return out


def spec_entry(bug: int, seeds: int, vdir: str, depth: int = 40) -> BugResult:
    spec, cfg_name, name = SPEC_BUGS[bug]
    for seed in range(seeds):
        fault, exc = spec_walk(spec, cfg_name, seed, depth, vdir)
        if fault is None:
            continue
        _, clean = spec_walk(spec, f"{spec}.cfg", seed, depth, vdir)
        if exc is None:
            return BugResult(name, bug, "spec", False, None, None, seed, clean is not None, "no alarm")
        return BugResult(name, bug, "spec", True, exc.property, exc.step - fault, seed, clean is not None,
                         f"{exc.kind} {exc.property} at {exc.location}", exc.trace_path)
    return BugResult(name, bug, "spec", False, None, None, None, False, f"never fired in {seeds} runs")


# ====================================================================== process entries
#: the distributed engine's run for the process entries (small: a few seconds per run)
STAGES_RUN = dict(requests=10, device_pages_per_rank=4, host_pages_per_rank=6, storage_fail_p=0.3,
                  transfer_delay_s=0.01, storage_delay_s=0.005, timeout_s=20.0)


def stages_run(seed: int, faulty: bool, vdir: str):
    """The distributed engine (hicache.dist: ranks are processes on torch.distributed,
    gloo), cp=1 x pp=2, spec monitors strict on every rank; with `faulty`, rank 1 (stage 1)
    pops its own leading ready counts instead of the counts the stages agreed on (REFERENCE.md
    bug 5). Returns (each rank's report or None, (rank, violation message) or None, other
    failures)."""
    from hicache.dist.launch import LaunchError
    from hicache.dist.runner import run_distributed
    from hicache.dist.worker import Faults
    faults = Faults(local_counts_rank=1) if faulty else Faults()
    try:
        return run_distributed(cp=1, pp=2, seed=seed, faults=faults,
                               monitors=VerifyConfig(mode="strict", violation_dir=vdir), **STAGES_RUN), None, {}
    except LaunchError as e:
        viol = next(((r, m) for r, m in sorted(e.failures.items()) if m.startswith("ProtocolViolation")), None)
        return None, viol, e.failures


def stages_entry(seeds: int, vdir: str) -> BugResult:
    """Bug 5 on the real distributed engine. The faulty StageApply event carries the cache
    check it happened at and the check at which the fault first changed a count, so the
    violation's own trace says whether it was caught at the faulty step."""
    from hicache.tla.itf import read_itf
    name = "StagesApplyLocalCounts"
    for seed in range(seeds):
        reports, viol, failures = stages_run(seed, True, vdir)
        if viol is None and failures:
            return BugResult(name, 5, "process", False, None, None, seed, False,
                             "; ".join(f"rank {r}: {m[:160]}" for r, m in sorted(failures.items())))
        if viol is None:
            if any(r["fault_check"] is not None for r in reports):
                return BugResult(name, 5, "process", False, None, None, seed, False, "fired, no alarm")
            continue
        rank, msg = viol
        trace = msg.rsplit("trace: ", 1)[-1].split(" (hicache explain", 1)[0] if "trace: " in msg else None
        meta = read_itf(trace)["#meta"]["violation"] if trace else {}
        args = meta.get("args", {})
        fault = args.get("fault_check")
        after = None if fault is None else args["check"] - fault    # in this rank's cache checks
        _, clean, clean_failures = stages_run(seed, False, vdir)
        return BugResult(name, 5, "process", True, meta.get("property"), after, seed,
                         bool(clean or clean_failures),
                         f"{meta.get('kind')} {meta.get('property')} at {meta.get('location')} (rank {rank}, "
                         f"cache check {args.get('check')}, fault at check {fault})", trace)
    return BugResult(name, 5, "process", False, None, None, None, False, f"never fired in {seeds} runs")


def _draft_case(fault: bool) -> dict:
    """One CP gather of a 6-page prefix over 2 ranks with every dependent pool (draft KV as a
    sidecar, fp8 indexer, SWA window, recurrent state), under a strict DraftState monitor."""
    from hicache.kernels import HitPolicy, IndexSource
    from hicache.runtime.config import CacheConfig, KVKind, PrefetchPolicy
    from hicache.runtime.draft import DependentSpec, DraftConfig, Indexing, Role
    target = CacheConfig(page_size=4, device_pages=16, host_pages=32, layers=2, heads=2, head_dim=4,
                         dtype="float16", prefetch_policy=PrefetchPolicy.WAIT_COMPLETE, model="bugzoo-draft")
    draft = DraftConfig(target, (
        DependentSpec(role=Role.DRAFT_KV, layout="sidecar", layers=1, heads=2, head_dim=4, dtype="float16"),
        DependentSpec(role=Role.DRAFT_INDEXER, layers=1, kv_kind=KVKind.MLA, heads=1, head_dim=4,
                      dtype="float8_e4m3fn"),
        DependentSpec(role=Role.SWA, layers=2, heads=1, head_dim=4, dtype="float16",
                      hit_policy=HitPolicy.TRAILING_PAGES, trailing=2),
        DependentSpec(role=Role.DRAFT_STATE, layers=1, kv_kind=KVKind.MLA, heads=1, head_dim=8, dtype="float32",
                      indexing=Indexing.REQUEST, source=IndexSource.SWA, hit_policy=HitPolicy.TRAILING_PAGES,
                      trailing=1)))
    return {"draft": draft, "local_pages": 4, "pages": [3, 0, 5, 2, 7, 4], "overlap": True,
            "monitor": True, "actions": True, "fault": fault}


def draft_entry(seeds: int, vdir: str) -> BugResult:
    """Bug 13 on the real CP gather (hicache.dist.gather over torch.distributed, 2 ranks as
    processes): with the seeded switch the gather moves the target and SWA only and fires its
    completion anyway. The faulty step is the first event where the run departs from the
    same gather without the fault; `seeds` is unused (the gather is deterministic)."""
    from hicache.dist.gather_deps_check import gather_deps_rank
    from hicache.dist.launch import LaunchError, launch
    name = "CompletionOnTargetOnly"
    try:
        res = launch(gather_deps_rank, 2, {"cases": [_draft_case(True), _draft_case(False)], "violation_dir": vdir},
                     timeout_s=120)
    except LaunchError as e:
        return BugResult(name, 13, "process", False, None, None, None, False,
                         "; ".join(f"rank {r}: {m[:160]}" for r, m in sorted(e.failures.items())))
    faulty, clean = res[0][0], res[0][1]
    v = faulty["violation"]
    clean_alarm = any(res[r][1]["violation"] is not None for r in range(2))
    if v is None:
        return BugResult(name, 13, "process", False, None, None, None, clean_alarm, "no alarm")
    # every recorded event is a step of the DraftState map (checked == steps == events in
    # the clean run), so the first departure from the clean run's events is the faulty step
    steps, events = clean["checked"], clean["events"]
    after = None
    if steps[0] == steps[1] == len(events):
        fault = next(i for i, (a, b) in enumerate(zip(faulty["events"], events), 1) if a != b)
        after = v["step"] - fault
    return BugResult(name, 13, "process", True, v["property"], after, None, clean_alarm,
                     f"{v['kind']} {v['property']} at {v['location']} (rank 0)", v["trace"])


PROCESS_BUGS = {5: stages_entry, 13: draft_entry}


# ====================================================================== layer pipeline entries
class PipelineAdapter:
    """The gather adapter's schedule over one LayerPipelineGuard per CP rank: restores run
    per rank in layer order, a gather starts when its layer is restored on every rank and
    its slot's previous reader finished, attention reads layers in order. Each step calls
    the guards, then emits its event. `wait_all_ranks=False` is the fault: the gather waits
    for rank 0's restore only (a rank-local condition: no happens-before from the other
    ranks' writes to the gather's read)."""

    def __init__(self, guards, listener, rng, wait_all_ranks: bool = True):
        self.g, self.listener, self.rng = guards, listener, rng
        self.wait_all = wait_all_ranks
        self.n = guards[0].num_layers
        self.restored = [0] * len(guards)
        self.next_gather = self.next_attn = 0
        self.busy: int | None = None
        self.reading: int | None = None
        self.seq = 0
        self.fault_seq: int | None = None

    def _emit(self, action: str, **fields) -> None:
        self.seq += 1
        fields["seq"] = self.seq
        self.listener(action, fields)

    def enabled(self) -> list:
        out = [("restore", r) for r, k in enumerate(self.restored) if k < self.n]
        l = self.next_gather
        ranks = self.restored if self.wait_all else self.restored[:1]
        if l < self.n and self.busy is None and all(k > l for k in ranks) and \
                (l < 2 or self.next_attn >= l - 1) and self.reading != l - 2:
            out.append(("gather_start", l))
        if self.busy is not None:
            out.append(("gather_finish", self.busy))
        a = self.next_attn
        if self.reading is None and a < self.next_gather and a != self.busy:
            out.append(("attention_start", a))
        if self.reading is not None:
            out.append(("attention_finish", self.reading))
        return out

    def step(self) -> bool:
        en = self.enabled()
        if not en:
            return False
        what, x = self.rng.choice(en)
        if what == "restore":
            l = self.restored[x]
            self.g[x].rank_restore_layer(l)
            self.restored[x] += 1
            self._emit("RankRestoreLayer", rank=x, layer=l)
        elif what == "gather_start":
            for g in self.g:
                g.gather_start(x)
            self.next_gather, self.busy = x + 1, x
            if self.fault_seq is None and any(k <= x for k in self.restored):
                self.fault_seq = self.seq + 1
            self._emit("GatherStart", layer=x)
        elif what == "gather_finish":
            for g in self.g:
                g.gather_finish(x)
            self.busy = None
            self._emit("GatherFinish", layer=x)
        elif what == "attention_start":
            for g in self.g:
                g.attention_start(x)
            self.reading = x
            self._emit("AttentionStart", layer=x)
        else:
            for g in self.g:
                g.attention_finish(x)
            self.reading, self.next_attn = None, x + 1
            self._emit("AttentionFinish", layer=x)
        return True


def _unordered_guard_class():
    from hicache.protocol.layer_pipeline import LayerPipelineGuard

    class UnorderedGatherGuard(LayerPipelineGuard):
        """The reference system's path: the gather does not wait for this rank's restore."""

        def gather_start(self, layer: int) -> None:
            if layer in self.restored:
                return super().gather_start(layer)
            self.gathering.add(layer)
    return UnorderedGatherGuard


def pipeline_run(seed: int, faulty: bool, vdir: str, ranks: int = 3, layers: int = 6):
    from hicache.monitors.maps.layer_pipeline import LayerPipelineMap
    from hicache.protocol.layer_pipeline import LayerPipelineGuard
    cls = _unordered_guard_class() if faulty else LayerPipelineGuard
    guards = [cls(layers) for _ in range(ranks)]
    mon = Monitor(LayerPipelineMap(guards), VerifyConfig(mode="strict", violation_dir=vdir))
    ad = PipelineAdapter(guards, mon, random.Random(seed), wait_all_ranks=not faulty)
    try:
        while ad.step():
            pass
    except ProtocolViolation as e:
        return ad, e
    return ad, None


def pipeline_entry(seeds: int, vdir: str) -> BugResult:
    name = "GatherBeforeAllRestores"
    for seed in range(seeds):
        ad, exc = pipeline_run(seed, True, vdir)
        if ad.fault_seq is None:
            continue
        _, clean = pipeline_run(seed, False, vdir)
        if exc is None:
            return BugResult(name, 11, "runtime", False, None, None, seed, clean is not None, "no alarm")
        return BugResult(name, 11, "runtime", True, exc.property, _steps_after(exc, ad.fault_seq), seed,
                         clean is not None, f"{exc.kind} {exc.property} at {exc.location}", exc.trace_path)
    return BugResult(name, 11, "runtime", False, None, None, None, False, f"never fired in {seeds} runs")


PIPELINE_BUGS = {11: pipeline_entry}


# ====================================================================== the zoo
def bug_classes() -> list[int]:
    """The REFERENCE.md bug numbers the zoo reproduces."""
    from hicache.monitors.faults import RUNTIME_FAULTS
    return sorted(set(RUNTIME_FAULTS) | set(RANK_FAULTS) | set(PIPELINE_BUGS) | set(PROCESS_BUGS))


def run_zoo(seeds: int = 30, vdir: str = "hicache-violations/bugzoo", only=None) -> list[BugResult]:
    wcfg = WorkloadConfig()
    from hicache.monitors.faults import RUNTIME_FAULTS
    out = []
    for bug in bug_classes():
        if only and bug not in only:
            continue
        if bug in PIPELINE_BUGS:
            out.append(PIPELINE_BUGS[bug](seeds, vdir))
        elif bug in PROCESS_BUGS:
            out.append(PROCESS_BUGS[bug](seeds, vdir))
        elif bug in RUNTIME_FAULTS:
            out.append(runtime_entry(bug, seeds, wcfg, vdir))
        elif bug in RANK_FAULTS:
            out.append(ranks_entry(bug, seeds, wcfg, vdir))
    return out
