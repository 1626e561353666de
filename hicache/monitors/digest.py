"""Cross-rank agreement of monitored state, carried by the collectives that already run.

At each cache check a rank appends two pairs to the MIN-reduced vector its collective
already carries (hicache.protocol.digest): the step code (which collective-bearing call
this is: its name and index) and the digest of its monitored state. After the reduction
each rank sees min x and -max x, so "every rank contributed the same x" is one comparison,
with no extra round trip. A mismatch in the step code means ranks are at different calls
(a rank skipped or added a collective: bugs 1 and 3); a mismatch in the state digest means
the ranks' monitored states diverged (bugs 2 and 4).

`LocalCollective` stands in for torch.distributed in one process: ranks contribute in turn,
and the k-th contributions of every rank are reduced together, the way a collective pairs
the k-th calls of each rank.
"""
from __future__ import annotations

from hicache.monitors.rt import Failure
from hicache.protocol.digest import digest_of, pair, pair_agrees, step_code
from hicache.tla.values import fmt

LOCATION = "hicache/monitors/digest.py"


def state_digest(state: dict) -> int:
    """Digest of a (mapped) state: entries in name order, values in TLA+ notation."""
    return digest_of((k, fmt(v)) for k, v in sorted(state.items()))


def contribution(name: str, index: int, state: dict) -> list[int]:
    """The four ints a rank appends to its MIN-reduced vector at a cache check."""
    return [*pair(step_code(name, index)), *pair(state_digest(state))]


def verdict(reduced: list[int]) -> Failure | None:
    """Decode the MIN-reduced contributions: None if all ranks agreed."""
    if not pair_agrees(reduced[0], reduced[1]):
        return Failure("SameCollectiveSequence", 1,
                       "every rank is at the same collective-bearing call (name, index)", LOCATION)
    if not pair_agrees(reduced[2], reduced[3]):
        return Failure("RankStateDigestsEqual", 1,
                       "every rank's monitored state has the same digest at a cache check", LOCATION)
    return None


class LocalCollective:
    """Pairs the k-th contributions of `ranks` ranks and MIN-reduces them."""

    def __init__(self, ranks: int) -> None:
        if ranks < 1:
            raise ValueError("ranks: must be >= 1")
        self.ranks = ranks
        self.pending: list[list[list[int]]] = [[] for _ in range(self.ranks)]
        self.rounds = 0

    def contribute(self, rank: int, vec: list[int]) -> list[int] | None:
        """Add rank's next contribution; the reduced vector once every rank has one."""
        self.pending[rank].append(vec)
        if all(self.pending):
            vecs = [p.pop(0) for p in self.pending]
            self.rounds += 1
            return [min(col) for col in zip(*vecs)]
        return None
