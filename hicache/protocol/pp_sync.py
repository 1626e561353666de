"""pp_sync: pipeline stages agree on how many ready transfers to apply, in the same order.

Decisions only; the adapter (hicache.dist.pp_sync) runs the collectives.
At a cache check every rank of stage 0 contributes the number of *leading* ready transfers of
each queue; a MIN over stage 0's group gives counts that are ready on every rank of stage 0.
The counts travel down the pipeline; every stage pops exactly those, waiting for each popped
transfer to finish locally before it updates its cache records.

The reduced tensor (one MIN all-reduce) is laid out as
    [step, -step, digest, -digest, counts..., -votes...]
counts are MIN-reduced; votes are MAX-reduced through negation (min(-v) = -max v).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .digest import pair, pair_agrees

#: a count placeholder that never lowers a MIN
COUNT_PLACEHOLDER = (1 << 62)
HEADER = 4


def leading_ready(ready: Sequence[bool]) -> int:
    """Number of transfers at the front of a queue that are ready (stops at the first not ready)."""
    n = 0
    for flag in ready:
        if not flag:
            break
        n += 1
    return n


@dataclass(frozen=True, slots=True)
class SyncLayout:
    """How many count and vote fields a sync vector carries. Invariant: both >= 0."""
    n_counts: int
    n_votes: int

    def __post_init__(self) -> None:
        if self.n_counts < 0 or self.n_votes < 0:
            raise ValueError(f"n_counts/n_votes must be >= 0, got {self.n_counts}/{self.n_votes}")

    @property
    def width(self) -> int:
        return HEADER + self.n_counts + self.n_votes

    def encode(self, step: int, digest: int, counts: Sequence[int], votes: Sequence[int]) -> list[int]:
        if len(counts) != self.n_counts:
            raise ValueError(f"counts has {len(counts)} fields, layout wants {self.n_counts}")
        if len(votes) != self.n_votes:
            raise ValueError(f"votes has {len(votes)} fields, layout wants {self.n_votes}")
        if any(c < 0 for c in counts):
            raise ValueError(f"counts must be >= 0, got {list(counts)}")
        return [*pair(step), *pair(digest), *counts, *(-v for v in votes)]

    def decode(self, reduced: Sequence[int]) -> "SyncOutcome":
        if len(reduced) != self.width:
            raise ValueError(f"reduced vector has {len(reduced)} fields, layout wants {self.width}")
        counts = tuple(int(c) for c in reduced[HEADER:HEADER + self.n_counts])
        votes = tuple(-int(v) for v in reduced[HEADER + self.n_counts:])
        return SyncOutcome(
            step_agreed=pair_agrees(int(reduced[0]), int(reduced[1])),
            digest_agreed=pair_agrees(int(reduced[2]), int(reduced[3])),
            step=int(reduced[0]), digest=int(reduced[2]), counts=counts, votes=votes)


@dataclass(frozen=True, slots=True)
class SyncOutcome:
    """What a MIN-reduced sync vector says. `step`/`digest` are meaningful only when agreed."""
    step_agreed: bool
    digest_agreed: bool
    step: int
    digest: int
    counts: tuple[int, ...]
    votes: tuple[int, ...]


def min_reduce(vectors: Sequence[Sequence[int]]) -> list[int]:
    """The reduction the collective performs, for pure tests and simulations."""
    if not vectors:
        raise ValueError("no vectors to reduce")
    return [min(col) for col in zip(*vectors, strict=True)]


def pop_plan(agreed: int, queue_len: int) -> int:
    """How many to pop locally: exactly the agreed count. A stage whose queue is shorter than
    the agreed count has not even issued those transfers -- a broken invariant, not a wait."""
    if agreed < 0:
        raise ValueError(f"agreed count must be >= 0, got {agreed}")
    if agreed > queue_len:
        raise RuntimeError(f"agreed to pop {agreed} transfers but only {queue_len} were issued here: "
                           "stages issued different transfers")
    return agreed
