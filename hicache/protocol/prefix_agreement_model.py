"""An executable model of storage prefix agreement across ranks, for exhaustive exploration.

Same actions as spec/PrefixAgreement.tla (vocabulary.PrefixAgreement). One prefetch of
len(plan) batches; every rank loads each batch (any number of leading pages, or a failure),
posts one ack per batch (rank_acks), the sync step MIN-reduces batch b once every rank posted
it, each rank's sync thread publishes the agreed acks to its own queue at its own pace, and
at a cache check every rank consumes exactly the count the leader agreed on (MIN of the
queue lengths of stage-0 ranks), waiting for its own queue if it lags.
`Variant.LOCAL_QUEUE` seeds the bug: a rank consumes whatever its own queue already holds.
Pure: no torch, no I/O.
"""
from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, replace

from .prefix_agreement import agree_ack, agreed_prefix, rank_acks
from .vocabulary import PrefixAgreement


class Variant(enum.StrEnum):
    CORRECT = "correct"
    LOCAL_QUEUE = "local_queue"   # bug: consume the locally published acks, not the agreed count


@dataclass(frozen=True, slots=True)
class PAState:
    loaded: tuple[tuple[int | None, ...], ...]   # [rank] -> pages loaded per batch so far (None: failed/skipped)
    agreed: tuple[int, ...]                       # MIN-reduced acks, one per synced batch
    published: tuple[int, ...]                    # [rank] -> agreed acks its sync thread published
    consumed: tuple[int, ...]                     # [rank] -> acks consumed at cache checks
    checks: int


@dataclass(frozen=True, slots=True)
class PAModel:
    ranks: int
    leaders: int                                  # ranks 0..leaders-1 form stage 0
    plan: tuple[int, ...]
    max_checks: int
    variant: Variant = Variant.CORRECT

    def init(self) -> PAState:
        z = (0,) * self.ranks
        return PAState(loaded=((),) * self.ranks, agreed=(), published=z, consumed=z, checks=0)

    def _acks(self, st: PAState, r: int) -> list[int]:
        got = st.loaded[r]
        return rank_acks(self.plan[:len(got)], list(got))

    def successors(self, st: PAState) -> Iterator[tuple[str, PAState]]:
        for r in range(self.ranks):
            b = len(st.loaded[r])
            if b < len(self.plan):
                for got in (None, *range(self.plan[b] + 1)):
                    loaded = st.loaded[:r] + (st.loaded[r] + (got,),) + st.loaded[r + 1:]
                    yield PrefixAgreement.RankLoadBatch, replace(st, loaded=loaded)
        b = len(st.agreed)
        if b < len(self.plan) and all(len(st.loaded[r]) > b for r in range(self.ranks)):
            ack = agree_ack([self._acks(st, r)[b] for r in range(self.ranks)])
            yield PrefixAgreement.SyncPublish, replace(st, agreed=st.agreed + (ack,))
        for r in range(self.ranks):
            if st.published[r] < len(st.agreed):
                pub = st.published[:r] + (st.published[r] + 1,) + st.published[r + 1:]
                yield PrefixAgreement.SyncPublish, replace(st, published=pub)
        if st.checks < self.max_checks:
            count = min(st.published[r] for r in range(self.leaders))
            if self.variant is Variant.LOCAL_QUEUE:
                consumed = tuple(st.published)
            else:
                # every rank waits for its own queue to reach the agreed count; the model
                # takes the check only once every rank can (a wait, not a skip)
                if any(st.published[r] < count for r in range(self.ranks)):
                    return
                consumed = (count,) * self.ranks
            yield PrefixAgreement.StageCacheCheck, replace(st, consumed=consumed, checks=st.checks + 1)

    def violations(self, st: PAState) -> list[str]:
        out = []
        prefixes = {agreed_prefix(self.plan, st.agreed[:c]) for c in st.consumed}
        if len(prefixes) > 1:
            out.append(f"SamePrefix: ranks consumed {st.consumed} acks -> prefixes {sorted(prefixes)}")
        for r in range(self.ranks):
            own = agreed_prefix(self.plan[:len(st.loaded[r])], self._acks(st, r))
            used = agreed_prefix(self.plan, st.agreed[:st.consumed[r]])
            if used > own:
                out.append(f"PrefixLoaded: rank {r} uses {used} pages but loaded only {own}")
        return out
