"""An executable model of pp_sync over S stages x R ranks, for exhaustive exploration.

Same actions as spec/PPSync.tla (vocabulary.PPSync). The model is what the adapter does,
minus threads and sockets: tests enumerate every interleaving of completions and cache
checks on small sizes and check the agreement properties in every reachable state.
`Variant` seeds the two classic bugs so tests can show the properties catch them.
Pure: no torch, no I/O.
"""
from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, replace

from .pp_sync import leading_ready
from .vocabulary import PPSync


class Variant(enum.StrEnum):
    CORRECT = "correct"
    LOCAL_COUNT = "local_count"      # bug: each stage pops its own leading-ready count
    NO_WAIT = "no_wait"              # bug: later stages apply without waiting for completion


@dataclass(frozen=True, slots=True)
class PPState:
    """Invariants (checked by `violations`): every rank of every stage applied the same counts
    in the same rounds; nothing applied on (s, r) is incomplete on (s, r)."""
    issued: int                                   # transfers issued on every stage, in order
    completed: frozenset[tuple[int, int, int]]    # (stage, rank, transfer) finished
    log: tuple[int, ...]                          # counts decided by stage 0, one per round
    received: tuple[int, ...]                     # per stage: rounds of `log` it has received
    applied: tuple[tuple[tuple[int, ...], ...], ...]  # [stage][rank] -> counts applied per round


@dataclass(frozen=True, slots=True)
class PPModel:
    stages: int
    ranks: int
    transfers: int
    rounds: int
    variant: Variant = Variant.CORRECT

    def init(self) -> PPState:
        return PPState(issued=0, completed=frozenset(), log=(), received=(0,) * self.stages,
                       applied=tuple(tuple(() for _ in range(self.ranks)) for _ in range(self.stages)))

    # --- helpers --------------------------------------------------------------------
    @staticmethod
    def _popped(counts: tuple[int, ...]) -> int:
        return sum(counts)

    def _ready_flags(self, st: PPState, s: int, r: int) -> list[bool]:
        start = self._popped(st.applied[s][r])
        return [(s, r, t) in st.completed for t in range(start, st.issued)]

    def _with_applied(self, st: PPState, s: int, r: int, count: int) -> PPState:
        rows = [list(row) for row in st.applied]
        rows[s][r] = rows[s][r] + (count,)
        return replace(st, applied=tuple(tuple(row) for row in rows))

    # --- actions --------------------------------------------------------------------
    def successors(self, st: PPState) -> Iterator[tuple[str, PPState]]:
        if st.issued < self.transfers:
            yield PPSync.TransferIssue, replace(st, issued=st.issued + 1)
        for s in range(self.stages):
            for r in range(self.ranks):
                for t in range(st.issued):
                    if (s, r, t) not in st.completed:
                        yield PPSync.TransferComplete, replace(st, completed=st.completed | {(s, r, t)})
        # stage 0 agrees once every stage-0 rank applied every earlier round
        if len(st.log) < self.rounds and all(len(st.applied[0][r]) == len(st.log) for r in range(self.ranks)):
            count = min(leading_ready(self._ready_flags(st, 0, r)) for r in range(self.ranks))
            received = (len(st.log) + 1,) + st.received[1:]
            yield PPSync.LeaderAgree, replace(st, log=st.log + (count,), received=received)
        for s in range(1, self.stages):
            if st.received[s] < st.received[s - 1]:
                received = st.received[:s] + (st.received[s] + 1,) + st.received[s + 1:]
                yield PPSync.StageForward, replace(st, received=received)
        for s in range(self.stages):
            for r in range(self.ranks):
                k = len(st.applied[s][r])
                if k >= st.received[s]:
                    continue
                count = self._apply_count(st, s, r, k)
                start = self._popped(st.applied[s][r])
                must_wait = not (self.variant is Variant.NO_WAIT and s > 0)
                if must_wait and not all((s, r, t) in st.completed for t in range(start, start + count)):
                    continue   # StageApply waits for exactly these transfers
                yield PPSync.StageApply, self._with_applied(st, s, r, count)

    def _apply_count(self, st: PPState, s: int, r: int, k: int) -> int:
        if self.variant is Variant.LOCAL_COUNT and s > 0:
            return leading_ready(self._ready_flags(st, s, r))
        return st.log[k]

    # --- properties -----------------------------------------------------------------
    def violations(self, st: PPState) -> list[str]:
        out = []
        everyone = [(s, r) for s in range(self.stages) for r in range(self.ranks)]
        for s, r in everyone:
            mine = st.applied[s][r]
            for s2, r2 in everyone:
                other = st.applied[s2][r2]
                k = min(len(mine), len(other))
                if mine[:k] != other[:k]:
                    out.append(f"SameOrder: ({s},{r}) applied {mine} but ({s2},{r2}) applied {other}")
            upto = self._popped(mine)
            early = [t for t in range(upto) if (s, r, t) not in st.completed]
            if early:
                out.append(f"NoEarlyApply: ({s},{r}) applied transfers {early} before they completed")
        return out
