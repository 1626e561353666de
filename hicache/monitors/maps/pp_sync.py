"""Refinement map: one rank's pp_sync over one transfer queue -> spec/PPSync.

A rank (stage s, CP rank r) sees its own events only (the ranks are processes), so the map
is that rank's view of the protocol, with what the rank cannot see abstracted by what the
agreement reveals about it:

  spec stage 0   s = 0: this stage;  s > 0: the leader stage, abstract (one rank)
  spec stage 1   s > 0 only: this stage
  next stage     only when the rank forwards (downstream=True, i.e. s < pp - 1): the
                 stage s+1, abstract, as the last spec stage: it takes what this rank
                 sent (chan[next]) and applies it in full, its ranks completing up to it
  spec rank 0    of this rank's spec stage: this rank
  spec rank 1    s = 0 only: the rest of the leader group, as revealed by the MIN: it
                 completed exactly the transfers up to the agreed target ("peers"); with
                 cp = 1 it stands for this rank's own count when it was sampled

  issued           transfers of this queue kind this rank issued (TransferIssue, kind)
  done[me][0]      indices (1-based, issue order within the kind) of this rank's transfers
                   that completed: TransferComplete events, or, at an agreement or an
                   apply, a transfer whose `done` flag is set and whose event is still in
                   flight on the copy thread (the flag is the completion: leading_ready and
                   pop read it; the event only reports it)
  done[peers]      1..the largest target agreed so far (revealed at LeaderAgree / forward)
  applied/checks/upto   from this rank's StageApply counts (what it popped), and for the
                   abstract leader stage: every agreed round applied in full
  agreed/pending/chan   the targets: stage 0 computes them (LeaderAgree), a later stage
                   receives them (StageForward); target = applied + the round's count
  chan[next]       what this rank sent downstream: applied[next] + the event's `forwarded`
                   count, set in the same step (LeaderAgree / StageForward), whose
                   `chan' = ...` conjunct then says it must be the target this stage holds

Event fields: `rank` (global), `tid` and `kind` (transfers), `counts` (the pp_sync vector:
loads, backups, acks; index by kind), `forwarded` (LeaderAgree / StageForward: the counts of
the vector the rank sent to s+1, None on the last stage; its presence must match
`downstream`, else ValueError). A round whose count for this kind is 0, sent on as 0, is
not a spec round ("a check whose count is 0 changes nothing") and is skipped; an apply of a
non-zero count without an agreed target is still a step (and fails StageApply's guard), and
so is a non-zero count sent on for a round of 0 (LeaderAgree's `MinLead(0) > 0`, or
StageForward's `chan[s] # None`).

Compound events: LeaderAgree = the peers' completions up to the target, then LeaderAgree;
StageForward (s > 0) = the leader's completions, LeaderAgree, StageApply(0), then
StageForward(1); either, with a next stage, then StageForward(next), the next stage's
completions and StageApply(next). Every step is action-checked
(maps.steps.SequenceMonitor); when the rounds outgrow MaxChecks (8, doubling) the step is
preceded by a re-dimensioning entry.
Not mapped: the other ranks of this rank's own stage when s > 0 (they apply on their own
and run their own monitor), the stage-0 rank's lead at the instant its count was
sampled (LeaderAgree checks target <= applied + this rank's current lead through the peers),
and the stages beyond s+1 (stage s+1's own monitor checks what it forwards).
"""
from __future__ import annotations

from hicache.monitors.generated import pp_sync as spec
from hicache.tla.values import mk_fcn

from .steps import capacity

NONE = -1
KIND_INDEX = {"load": 0, "backup": 1}


class PPSyncMap:
    spec = spec

    def __init__(self, *, rank: int, stage: int, cp: int, kind: str, transfer_of=None,
                 downstream: bool = False):
        if kind not in KIND_INDEX:
            raise ValueError(f"kind: {kind!r} is not one of {sorted(KIND_INDEX)}")
        self.rank, self.stage, self.cp, self.kind = rank, stage, cp, kind
        self.k = KIND_INDEX[kind]
        self.transfer_of = transfer_of          # tid -> runtime Transfer (late completions)
        self.downstream = downstream            # a stage s+1 exists (this rank forwards to it)
        self.me = 0 if stage == 0 else 1        # this rank's spec stage
        self.nxt = self.me + 1 if downstream else None   # the next stage's spec stage, abstract
        self.n_stages = self.me + 1 + (1 if downstream else 0)
        self.n_ranks = 2 if stage == 0 else 1   # stage 0: this rank + peers
        self.index: dict[int, int] = {}         # tid -> 1-based index within the kind
        self.issued = 0
        self.done_me: set[int] = set()
        self.hi: dict[tuple[int, int], int] = {}   # abstract rank (s, r) completed 1..hi[(s, r)]
        S = range(self.n_stages)
        self.applied = [0 for _ in S]
        self.checks = [0 for _ in S]
        self.upto: list[list[int]] = [[] for _ in S]   # per stage, per round
        self.agreed: list[int] = []
        self.pending = [NONE for _ in S]
        self.chan = [NONE for _ in S]
        self.tid_at: dict[int, int] = {}        # index -> tid
        self.cap = capacity(1)
        self.pre = self.cur = self._snapshot()
        self.trail: list = []

    # ------------------------------------------------------------ constants / state
    def constants(self) -> dict:
        return {"NStages": self.n_stages, "NRanks": self.n_ranks, "NTransfers": capacity(self.issued + 1),
                "MaxChecks": self.cap, "BugLocalCount": False}

    def state(self) -> dict:
        return self.cur

    def _done(self, s: int, r: int) -> frozenset:
        if s == self.me and r == 0:
            return frozenset(self.done_me)
        return frozenset(range(1, self.hi.get((s, r), 0) + 1))

    def _snapshot(self) -> dict:
        S, R, K = range(self.n_stages), range(self.n_ranks), range(1, self.cap + 1)
        return {
            "issued": self.issued,
            "done": mk_fcn({s: mk_fcn({r: self._done(s, r) for r in R}) for s in S}),
            "applied": mk_fcn({s: self.applied[s] for s in S}),
            "checks": mk_fcn({s: self.checks[s] for s in S}),
            "upto": mk_fcn({s: mk_fcn({k: (self.upto[s][k - 1] if k <= len(self.upto[s]) else 0) for k in K})
                            for s in S}),
            "agreed": mk_fcn({k: (self.agreed[k - 1] if k <= len(self.agreed) else NONE) for k in K}),
            "pending": mk_fcn({s: self.pending[s] for s in S}),
            "chan": mk_fcn({s: self.chan[s] for s in S}),
        }

    def _step(self, action: str, params) -> None:
        self.trail.append((action, params, self._snapshot()))

    # ------------------------------------------------------------ events
    def bind(self, action: str, fields: dict):
        if fields.get("rank", self.rank) != self.rank:
            return None
        handler = _HANDLERS.get(action)
        if handler is None:
            return None
        trail, self.trail = self.trail, []
        handler(self, fields)
        if not self.trail:
            self.trail = trail
            return None
        self.pre, self.cur = self.cur, self.trail[-1][2]
        return [(a, p) for a, p, _ in self.trail]

    def _issue(self, f: dict) -> None:
        if f.get("kind") != self.kind:
            return
        self.issued += 1
        self.index[f["tid"]] = self.issued
        self.tid_at[self.issued] = f["tid"]
        self._step("TransferIssue", ())

    def _complete(self, f: dict) -> None:
        if f.get("kind") != self.kind:
            return
        i = self.index.get(f["tid"])
        if i is None or i in self.done_me:
            return                       # reported early at an apply (see module docstring)
        self.done_me.add(i)
        self._step("TransferComplete", (i, self.me, 0))

    def _settle(self, upto: int) -> None:
        """Completions of this rank's transfers up to index `upto` whose `done` flag is set
        but whose TransferComplete event is still on its way from the copy thread: the
        flag is the completion (pop and leading_ready read it), so they happen first."""
        if self.transfer_of is None:
            return
        for i in range(self.applied[self.me] + 1, upto + 1):
            if i in self.done_me or i not in self.tid_at:
                continue
            tr = self.transfer_of(self.tid_at[i])
            if tr is not None and tr.done.is_set():
                self.done_me.add(i)
                self._step("TransferComplete", (i, self.me, 0))

    def _grow(self, rounds: int) -> None:
        if rounds > self.cap:
            self.cap = capacity(rounds, self.cap)
            self._step("(capacity)", None)

    def _reveal(self, target: int, s: int, r: int) -> None:
        """The abstract rank (s, r) completed every transfer up to the agreed target."""
        for t in range(self.hi.get((s, r), 0) + 1, target + 1):
            self.hi[(s, r)] = t
            self._step("TransferComplete", (t, s, r))

    def _forwarded(self, f: dict) -> int:
        """This kind's count in the vector the stage sent downstream (0 on the last stage)."""
        fwd = f.get("forwarded")
        if (fwd is not None) != self.downstream:
            raise ValueError(f"PPSyncMap(rank={self.rank}, downstream={self.downstream}): "
                             f"{'a' if fwd is not None else 'no'} `forwarded` field on the rank's agreement")
        return 0 if fwd is None else fwd[self.k]

    def _send(self, n: int) -> None:
        """Part of this stage's LeaderAgree / StageForward step: the target the next stage
        gets, applied[next] + the count sent (the spec's chan[s+1] = the target it forwards)."""
        if self.nxt is not None:
            self.chan[self.nxt] = self.applied[self.nxt] + n

    def _next_round(self) -> None:
        """The abstract next stage takes the target (StageForward), its ranks complete up
        to it, and it applies it (StageApply): it applies whatever it was sent."""
        s = self.nxt
        if s is None or self.chan[s] == NONE:
            return
        self.pending[s], self.chan[s] = self.chan[s], NONE
        self._step("StageForward", (s,))
        for r in range(self.n_ranks):
            self._reveal(self.pending[s], s, r)
        self.applied[s] = self.pending[s]
        self.upto[s].append(self.applied[s])
        self.checks[s] += 1
        self.pending[s] = NONE
        self._step("StageApply", (s,))

    def _agree(self, f: dict) -> None:
        if self.stage != 0:
            return
        n, sent = f["counts"][self.k], self._forwarded(f)
        if n == 0 and sent == 0:
            return
        target = self.applied[0] + n
        self._settle(target)            # this rank's count was sampled from the flags
        self._grow(len(self.agreed) + 1)
        self._reveal(target, 0, 1)
        self.pending[0] = target
        self.agreed.append(target)
        self._send(sent)
        self._step("LeaderAgree", ())
        self._next_round()

    def _forward(self, f: dict) -> None:
        if self.stage == 0:
            return
        n, sent = f["counts"][self.k], self._forwarded(f)
        if n == 0:
            if sent != 0:               # a round sent on that this stage never received
                self._send(sent)
                self._step("StageForward", (1,))
            return
        target = self.applied[0] + n          # the leader applies every round it agrees
        self._grow(len(self.agreed) + 1)
        self._reveal(target, 0, 0)
        self.pending[0] = self.chan[1] = target
        self.agreed.append(target)
        self._step("LeaderAgree", ())
        self.applied[0] = target
        self.upto[0].append(target)
        self.checks[0] += 1
        self.pending[0] = NONE
        self._step("StageApply", (0,))
        self.pending[1], self.chan[1] = self.chan[1], NONE
        self._send(sent)
        self._step("StageForward", (1,))
        self._next_round()

    def _apply(self, f: dict) -> None:
        n = f["counts"][self.k]
        s = self.me
        if n == 0 and self.pending[s] == NONE:
            return
        self._settle(self.applied[s] + n)
        self._grow(self.checks[s] + 1)
        self.applied[s] += n
        self.upto[s].append(self.applied[s])
        self.checks[s] += 1
        self.pending[s] = NONE
        self._step("StageApply", (s,))


_HANDLERS = {"TransferIssue": PPSyncMap._issue, "TransferComplete": PPSyncMap._complete,
             "LeaderAgree": PPSyncMap._agree, "StageForward": PPSyncMap._forward,
             "StageApply": PPSyncMap._apply}
