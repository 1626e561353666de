"""Refinement map: one rank's storage prefetches (hicache.dist.prefetch) -> spec/PrefixAgreement.

The spec is one prefetch seen by every rank; a rank (stage s, CP rank r) is a process that
sees its own loader, sync thread and cache checks. The map keeps one spec instance per
prefetch (request id) in this rank's view, what it cannot see abstracted by what the
agreements reveal:

  spec stages     s = 0: {0 = this stage};  s > 0: {0 = the leader stage (abstract), 1 = this}
  spec ranks      Stages x {0, 1}; (this spec stage, 0) is this rank, every other one is a
                  "peer": the other ranks, as the MIN of each published ack reveals them
                  (they loaded just enough for that MIN; a short ack means they failed)
  tried/loaded    this rank: tried = its RankPostAck events (one per batch); loaded = the
                  leading pages its RankLoadBatch events say it loaded (up to its first short
                  or skipped batch), not its acks: the spec's ack is AckOf(k, j), a function
                  of `loaded`, so an ack above what the rank loaded shows where it counts,
                  at the SyncPublish whose MIN it raised; peers: revealed at each publish
  pub/pubAck      the acks the leader's check agreed to consume, with the values this rank's
                  sync thread published for them. A rank's own queue may run ahead; an ack
                  is published for the whole group when every leader rank has it, which
                  this rank learns from the agreed count (pp_sync's ack field), so the
                  publish steps are taken at the consumption that follows the agreement
  checks/verdict/cut/consumed/used   per check that consumes acks of this prefetch: the
                  leader decides (PolicyDecide: continue), consumes what it published
                  (StageCacheCheck(0)); this rank consumes what it popped
                  (StageCacheCheck(me)); at its last check, `used` is the prefix the engine
                  computes from the consumed acks (agreed_prefix), and the engine's
                  completion event (`pages`) must use that one
  policy          "wait_complete" and terminated = FALSE: the runtime's stop verdict makes
                  the ranks skip their remaining batches, which the map shows as batches
                  that loaded 0 pages (a failure), and the prefix is used once every ack is
                  consumed (the spec's early stop would use it at the stopping check)

Events (this rank's; `rank` field): RankLoadBatch (rid, batch, loaded): recorded for the
next post; RankPostAck (rid, batch, ack); SyncPublish (rid,
batch, pages): recorded; LeaderAgree / StageForward of pp_sync: counts[2] is the number of
acks the leader agreed to consume at this check (its check is mapped at that event, or at
the publish that brings this rank's last value of those acks); StageCacheCheck with `acks` (the pop of
hicache.dist.prefetch.PrefetchWorker.pop: (rid, batch, pages) consumed now) and with
`pages` (the engine's completion of a prefetch). The engine's PolicyDecide (a stop
verdict) is no spec step here (see policy). Every step is action-
checked; one event may step several prefetches (a SWITCH between them).
Not mapped: which pages a rank owns (an ack counts the others' pages as loaded), timing of
the stop policy, and the liveness half of AcksInStep (a rank that never posts an ack stalls
the group; the sync's digest check names the step).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from hicache.monitors.generated import prefix_agreement as spec
from hicache.protocol.prefix_agreement import agreed_prefix
from hicache.tla.values import Fcn, ModelValue, mk_fcn

from .steps import SWITCH

NONE = -1
NO_VERDICT = ModelValue("NoVerdict")   # the spec's model value: no stop verdict yet at a check
POLICY = "wait_complete"


@dataclass(slots=True)
class Prefetch:
    """One spec instance: a prefetch of `nb` batches of `bp` pages, in this rank's view."""
    rid: int
    nb: int
    bp: int
    ranks: tuple
    tried: dict = field(default_factory=dict)
    loaded: dict = field(default_factory=dict)
    pub_ack: list = field(default_factory=list)
    checks: list = field(default_factory=list)
    verdict: list = field(default_factory=list)
    cut: list = field(default_factory=list)
    consumed: list = field(default_factory=list)
    used: list = field(default_factory=list)
    mine: list = field(default_factory=list)  # pages of the acks this rank consumed
    got: dict = field(default_factory=dict)   # batch -> pages this rank loaded (its RankLoadBatch)

    def stopped(self, k) -> bool:
        return self.loaded[k] < self.tried[k] * self.bp

    def prefix_of(self, n: int) -> int:
        for j, a in enumerate(self.pub_ack[:n], 1):
            if a < self.bp:
                return (j - 1) * self.bp + a
        return n * self.bp


class PrefixAgreementMap:
    spec = spec

    def __init__(self, *, rank: int, stage: int, plans):
        self.rank, self.stage = rank, stage
        self.plans = plans                    # ordered {rid: plan}, in submit order
        self.n_stages = 1 if stage == 0 else 2
        self.me_s = self.n_stages - 1
        self.me = (self.me_s, 0)
        self.ranks = tuple((s, r) for s in range(self.n_stages) for r in (0, 1))
        self.live: dict[int, Prefetch] = {}
        self.published: dict[tuple[int, int], int] = {}   # (rid, batch) -> agreed pages
        self.leader_pos = 0                   # acks of the stream the leader agreed so far
        self.leader_due: list[tuple[int, list]] = []   # agreed, not yet mapped: (rid, labels)
        self.stream: list[tuple[int, int]] = []   # (rid, batch) of every ack, in order
        self._seen_plans = 0
        self.current: Prefetch | None = None
        self.pre = self.cur = self._empty()
        self.cur_raw = self._raw(None)
        self.trail: list = []

    # ------------------------------------------------------------ constants / state
    def _raw(self, p: Prefetch | None) -> dict:
        nb, bp = (p.nb, p.bp) if p is not None else (1, 1)
        return {"NStages": self.n_stages, "NRanks": 2, "NBatches": nb, "BatchPages": bp,
                "Policies": frozenset({POLICY}), "ConsumeLatestProgress": False, "BugNoAckAfterStop": False,
                "NoVerdict": NO_VERDICT}

    def constants(self) -> dict:
        return self.cur_raw            # the instance whose state `state()` is

    def state(self) -> dict:
        return self.cur

    def _empty(self) -> dict:
        p = Prefetch(-1, 1, 1, self.ranks)
        self._init(p)
        return self._snap(p)

    def _init(self, p: Prefetch) -> None:
        for k in p.ranks:
            p.tried[k] = p.loaded[k] = 0
        S = range(self.n_stages)
        p.checks, p.consumed, p.used = [0 for _ in S], [0 for _ in S], [NONE for _ in S]

    def _snap(self, p: Prefetch) -> dict:
        S, B, C = range(self.n_stages), range(1, p.nb + 1), range(1, p.nb + 2)
        at = lambda lst, i, none=NONE: lst[i - 1] if i <= len(lst) else none  # noqa: E731
        return {
            "policy": POLICY, "tried": Fcn(dict(p.tried)), "loaded": Fcn(dict(p.loaded)), "terminated": False,
            "pub": len(p.pub_ack), "pubAck": mk_fcn({j: at(p.pub_ack, j) for j in B}),
            "checks": Fcn({s: p.checks[s] for s in S}),
            "verdict": mk_fcn({c: at(p.verdict, c, NO_VERDICT) for c in C}), "cut": mk_fcn({c: at(p.cut, c) for c in C}),
            "consumed": Fcn({s: p.consumed[s] for s in S}), "used": Fcn({s: p.used[s] for s in S}),
        }

    def _instance(self, rid: int) -> Prefetch | None:
        p = self.live.get(rid)
        if p is None:
            plan = self.plans().get(rid)
            if not plan:
                return None
            p = self.live[rid] = Prefetch(rid, len(plan), max(plan), self.ranks)
            self._init(p)
        return p

    def _enter(self, p: Prefetch) -> None:
        """Steps of `p` follow: switch to it (its pre-state and constants)."""
        if self.current is not p:
            self.current = p
            self.trail.append((SWITCH, None, self._snap(p), self._raw(p)))

    def _step(self, p: Prefetch, action: str, params) -> None:
        assert self.current is p, "enter an instance before changing it"
        self.trail.append((action, params, self._snap(p)))

    # ------------------------------------------------------------ events
    def bind(self, action: str, fields: dict):
        if fields.get("rank", self.rank) != self.rank:
            return None
        handler = _HANDLERS.get(action)
        if handler is None:
            return None
        self.trail = []
        self.current = None
        handler(self, fields)
        if not self.trail:
            return None
        self.pre = self.trail[0][2] if self.trail[0][0] == SWITCH else self.cur
        self.cur, self.cur_raw = self.trail[-1][2], self._raw(self.current)
        return [(a[0], a[1]) for a in self.trail if a[0] != SWITCH]

    def _load(self, f: dict) -> None:
        """What this rank really loaded of a batch (leading pages, as far as it knows): the
        next post's RankLoadBatch step adds it to `loaded[me]`, whatever the ack says."""
        p = self._instance(f["rid"])
        if p is not None:
            p.got[f["batch"]] = f["loaded"]

    def _post(self, f: dict) -> None:
        """RankLoadBatch (the rank loads the batch and posts its ack, one spec step) or,
        once the rank stopped, RankPostAck. `loaded[me]` grows by what the rank's
        RankLoadBatch event says it loaded (nothing for a batch it never tried: terminated,
        or once it stopped: pages after a hole extend no prefix); the ack itself is no spec
        variable (the spec's ack is AckOf(me, j), a function of `loaded`), so an ack above
        what the rank loaded is checked where it counts: SyncPublish, whose MIN is over
        what the ranks loaded. An ack > 0 after the rank stopped is a load a stopped rank
        may not make (RankLoadBatch's ~Stopped(k))."""
        p = self._instance(f["rid"])
        if p is None:
            return
        self._enter(p)
        me, ack = self.me, f["ack"]
        got = p.got.pop(f["batch"], None)
        stopped = p.stopped(me)
        if not stopped and got is not None:
            p.loaded[me] += max(0, min(got, p.bp))
        p.tried[me] += 1
        self._step(p, "RankLoadBatch" if ack > 0 or not stopped else "RankPostAck", (me,))

    def _publish(self, f: dict) -> None:
        self.published[(f["rid"], f["batch"])] = f["pages"]
        self._drain()

    def _agree(self, f: dict) -> None:
        """The leader's check agreed to consume the next `counts[2]` acks of the stream:
        one leader check per prefetch they belong to, mapped once this rank knows the
        published values of all of them (_drain)."""
        n = f["counts"][2]
        if n == 0:
            return
        self._extend_stream()
        agreed = self.stream[self.leader_pos:self.leader_pos + n]
        self.leader_pos += len(agreed)
        self.leader_due.extend((rid, [b for r, b in agreed if r == rid]) for rid, _ in _runs(agreed))
        self._drain()

    def _drain(self) -> None:
        """Map the agreed leader checks, in order, whose acks this rank has published (its
        own sync thread may lag the leader's; its pop waits for them)."""
        while self.leader_due:
            rid, batches = self.leader_due[0]
            if any((rid, b) not in self.published for b in batches):
                return
            self.leader_due.pop(0)
            p = self._instance(rid)
            if p is not None:
                self._leader_check(p, len(batches))

    def _extend_stream(self) -> None:
        plans = self.plans()
        if len(plans) > self._seen_plans:
            for rid in list(plans)[self._seen_plans:]:
                self.stream.extend((rid, b) for b in range(len(plans[rid])))
            self._seen_plans = len(plans)

    def _pop(self, f: dict) -> None:
        # this rank's check: consume what it popped (after the leader's, mapped by now when
        # the pop took the agreed acks); once every ack is consumed, the prefix it uses is
        # agreed_prefix(plan, the consumed acks), as the engine computes
        for rid, k in _runs([(rid, b) for rid, b, _ in f["acks"]]):
            p = self._instance(rid)
            if p is None:
                continue
            p.mine.extend(pages for r, _, pages in f["acks"] if r == rid)
            n_me = p.consumed[self.me_s] + k
            used = agreed_prefix(self.plans()[rid], p.mine) if n_me == p.nb else NONE
            self._consume(p, n_me, used)

    def _leader_check(self, p: Prefetch, k: int) -> None:
        self._enter(p)
        for _ in range(k):
            j = len(p.pub_ack) + 1
            P = self.published.pop((p.rid, j - 1))
            self._reveal(p, j, P)
            p.pub_ack.append(P)
            self._step(p, "SyncPublish", ())
        p.verdict.append(False)
        self._step(p, "PolicyDecide", ())
        if self.me_s > 0:                      # the abstract leader stage consumes them too
            n = len(p.pub_ack)
            p.cut.append(n)
            p.consumed[0] = n
            if n == p.nb:
                p.used[0] = p.prefix_of(n)
            p.checks[0] += 1
            self._step(p, "StageCacheCheck", (0,))

    def _reveal(self, p: Prefetch, j: int, P: int) -> None:
        """The peers posted ack j and loaded just enough for the MIN to be P."""
        target = (j - 1) * p.bp + P
        for k in p.ranks:
            if k == self.me:
                continue
            while p.tried[k] < j:
                if p.stopped(k):
                    p.tried[k] += 1
                    self._step(p, "RankPostAck", (k,))
                else:
                    got = max(0, min(p.bp, target - p.loaded[k]))
                    p.loaded[k] += got
                    p.tried[k] += 1
                    self._step(p, "RankLoadBatch", (k,))

    def _consume(self, p: Prefetch, n: int, used: int) -> None:
        self._enter(p)
        s = self.me_s
        if s == 0:
            p.cut.append(n)
        p.consumed[s] = n
        p.used[s] = used
        p.checks[s] += 1
        self._step(p, "StageCacheCheck", (s,))

    def _complete(self, f: dict) -> None:
        """The engine uses the prefix: the one mapped at the last consumption, or (a runtime
        that computed another) a change of `used` that no spec step makes."""
        p = self.live.pop(f["rid"], None)
        if p is None or p.used[self.me_s] == f["pages"]:
            return
        self._enter(p)
        p.used[self.me_s] = f["pages"]
        self._step(p, "StageCacheCheck", None)

    def _cache_check(self, f: dict) -> None:
        if "acks" in f:
            self._pop(f)
        elif "pages" in f:
            self._complete(f)


def _runs(labels):
    """[(rid, count)] of consecutive acks of the same prefetch."""
    out: list = []
    for rid, _ in labels:
        if out and out[-1][0] == rid:
            out[-1][1] += 1
        else:
            out.append([rid, 1])
    return [(rid, k) for rid, k in out]


_HANDLERS = {"RankLoadBatch": PrefixAgreementMap._load, "RankPostAck": PrefixAgreementMap._post,
             "SyncPublish": PrefixAgreementMap._publish,
             "LeaderAgree": PrefixAgreementMap._agree, "StageForward": PrefixAgreementMap._agree,
             "StageCacheCheck": PrefixAgreementMap._cache_check}
